#!/usr/bin/env bash
# The GL fallback on Mesa's llvmpipe (EGL, surfaceless), as CI runs it: the Vulkan driver is
# hidden, so wgpu's only adapter is GL — the case of a phone whose Vulkan driver is missing or
# refused — and every GPU test must open a GL adapter (TERN_EXPECT_BACKEND=Gl fails it otherwise).
#
#   1. the parity harness: the first case of a set of kernel families (ternary GEMV and GEMM,
#      ggml blocks, NeuZip, RoPE, fused RoPE + KV stores of every format, norms), the real-data
#      cases (SmolLM2's norms and embedding through NeuZip, its Q4_1/Q8_0 weights) and the typed
#      errors. Not the whole table: Mesa's GL compiler on llvmpipe takes 10–190 s for some of
#      tern's pipelines on a cold shader cache (a4.8's fused kernels the longest), so the whole
#      table is hours; TERN_GL_PARITY_FILTER="" TERN_PARITY_SAMPLE=1 runs all of it (measured in
#      docs/bench/i34-gl/);
#   2. GPU = CPU end to end: SmolLM2 greedy tokens (3 prompts × 32) and a score (~4 min cold).
#      The random-BitNet end-to-end test is left out here: its 24 model variants compile ~2 new
#      pipelines each on GL (> 8 min); its ternary kernels are in the parity subset.
#
# Needs libegl1, libegl-mesa0, libgl1-mesa-dri (scripts/test.sh installs them), the default model
# (`tern fetch-default`). Each step's whole output goes to target/gl-ci-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# hide every Vulkan driver (both loader spellings): GL is then the only backend wgpu finds
export VK_DRIVER_FILES=/nonexistent/icd.json VK_ICD_FILENAMES=/nonexistent/icd.json
export TERN_EXPECT_BACKEND=Gl TERN_REQUIRE_GPU=1
export TERN_PARITY_SAMPLE=${TERN_PARITY_SAMPLE:-100000}
export TERN_PARITY_FILTER=${TERN_GL_PARITY_FILTER-ternary Bits2 F16|ternary_gemm Bits2|act_quant_int8|rmsnorm_quant|neuzip f16|kv q4 G32|ggml Q8_0|rope}
# CI's machine is fresh: compile every pipeline as it would (a warm Mesa cache hides the cost)
export MESA_SHADER_CACHE_DISABLE=${MESA_SHADER_CACHE_DISABLE:-true}
mkdir -p target
# `--workspace`: the same feature resolution as the build in scripts/test.sh (no recompiling)
step() { # label, log, cargo test args...
  local label=$1 log=$2; shift 2
  echo "-- $label"
  local t0=$SECONDS rc=0
  cargo test --release -q "$@" >"$log" 2>&1 || rc=$?
  # the adapter (once), the summary lines, any failure
  grep -m1 -E '^adapter:|: gpu \(' "$log" || true
  grep -E '^[0-9]+ (cases|real-data)|GPU = CPU|^test result|^FAIL|panicked' "$log" | grep -v '^test result: ok. 0 passed' || true
  echo "   ($((SECONDS - t0)) s; whole log: $log)"
  if [ "$rc" != 0 ]; then tail -60 "$log"; echo "FAILED: $label"; exit 1; fi
}
step "parity harness on GL (filter: ${TERN_PARITY_FILTER:-all}; every ${TERN_PARITY_SAMPLE}th case + the first of each family)" \
  target/gl-ci-parity.log --workspace --test parity -- --nocapture parity_table errors_are_typed parity_real_smollm2
step "GPU = CPU end to end on GL (SmolLM2: greedy tokens and a score)" \
  target/gl-ci-engine.log --workspace --test gpu_engine -- --nocapture \
  smollm2_greedy_gpu_equals_cpu
echo "   the GL fallback passed (adapter lines above name the Gl backend)"
