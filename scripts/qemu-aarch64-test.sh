#!/usr/bin/env bash
# The CPU test suites for aarch64-unknown-linux-gnu, cross-built with Debian's cross toolchain
# (gcc-aarch64-linux-gnu) and run under qemu-user:
#
#   1. tern-reference (the CPU kernels) on QEMU's "max" CPU, which has the dot-product extension:
#      the kernel path must be "neon-dotprod";
#   2. the same on a Cortex-A53 (Armv8.0: NEON, no dotprod): the path must be "neon";
#   3. the kernel-path test once more with TERN_CPU_SIMD=scalar: the path must be "scalar";
#   4. tern-engine and tern-ffi (the C ABI's Rust tests) on "max" (GPU tests skip: no adapter);
#      TERN_QEMU_ENGINE=0 leaves them out (they need the whole GPU stack cross-built).
#
# TERN_EXPECT_CPU_PATH makes the reference crate's test
# `the_cpu_kernel_path_is_the_one_detected_and_the_one_that_runs` assert the path by name; the
# kernel tests compare the NEON and `sdot` kernels with the plain Rust definitions bit for bit.
# Timings under emulation mean nothing (qemu translates every instruction); this checks
# correctness and that the ARM paths are the ones taken.
#
#   scripts/qemu-aarch64-test.sh   (skips, exit 0, where apt/rustup cannot provide the tools)
#
# Prints the kernel path names and each suite's summary; every test's line goes to
# $TERN_QEMU_LOG (default target/qemu-aarch64-tests.log). A run's log is committed in
# docs/bench/i34-arm/qemu-tests.log. CI runs it from scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

need_apt=()
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu)
[ -e "$sysroot/lib/libc.so.6" ] || need_apt+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  echo "   apt-get install ${need_apt[*]}"
  (apt-get install -y -qq "${need_apt[@]}" >/dev/null 2>&1) \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${need_apt[@]}" >/dev/null 2>&1; } || true
fi
rustup target list --installed 2>/dev/null | grep -qx "$target" \
  || rustup target add "$target" >/dev/null 2>&1 || true
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null \
  || [ ! -e "$sysroot/lib/libc.so.6" ] \
  || ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "   (no aarch64 cross toolchain, Rust target or qemu-user here: the emulated ARM tests are skipped)"
  exit 0
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# No debug info in the emulated build: it only slows the cross link.
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"
echo "   $(qemu-aarch64 --version | head -1)"
# The kernel tests print the path name and their case counts (--nocapture), the rest the summary.
kernel_tests=(cpu_kernel_path neon_block_dots simd_chunk_dots)
full_log=${TERN_QEMU_LOG:-target/qemu-aarch64-tests.log} # every test's line, for the record
mkdir -p "$(dirname "$full_log")"
: >"$full_log"
run() { # label, env..., -- cargo test args...
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "-- $label"
  echo "== $label (${envs[*]})" >>"$full_log"
  local out rc=0
  out=$(mktemp)
  env "${envs[@]}" cargo test --release --target "$target" "$@" >"$out" 2>&1 || rc=$?
  grep -vE '^ *(Compiling|Finished|Running|Doc-tests|Blocking)' "$out" >>"$full_log" || true
  grep -E '^(CPU kernel path|[0-9]+ block-dot cases|test result|failures:|    [a-z_:]+$|thread .* panicked)' "$out" \
    | grep -vE '^test result: ok. 0 passed' || true
  if [ "$rc" != 0 ]; then tail -40 "$out"; rm -f "$out"; echo "FAILED: $label"; exit 1; fi
  rm -f "$out"
}

engine=${TERN_QEMU_ENGINE:-1} # 0: the reference crate only (engine + ffi need the GPU stack built)
crates=(-p tern-reference)
[ "$engine" = 0 ] || crates+=(-p tern-engine -p tern-ffi)
cargo build -q --release --target "$target" "${crates[@]}" --tests
run "tern-reference, qemu -cpu max (Armv8+ with dotprod): expect neon-dotprod" \
  QEMU_CPU=max TERN_EXPECT_CPU_PATH=neon-dotprod -- -p tern-reference -- --nocapture
run "tern-reference, qemu -cpu cortex-a53 (Armv8.0, no dotprod): expect neon" \
  QEMU_CPU=cortex-a53 TERN_EXPECT_CPU_PATH=neon -- -p tern-reference -- --nocapture
run "tern-reference kernel tests, qemu -cpu max, TERN_CPU_SIMD=scalar: expect scalar" \
  QEMU_CPU=max TERN_CPU_SIMD=scalar TERN_EXPECT_CPU_PATH=scalar -- -p tern-reference --lib -- --nocapture "${kernel_tests[@]}"
if [ "$engine" = 0 ]; then
  echo "-- tern-engine + tern-ffi: not run (TERN_QEMU_ENGINE=0)"
else
  # Six C ABI tests load SmolLM2 (1–4 emulated minutes each). CI keeps one,
  # score_and_generate_match_the_engine (score and greedy generation through the C ABI equal the
  # engine's, on the NEON kernels), and skips the five that add nothing ARM-specific to it (they
  # check options, plans, error mapping and CLI agreement, all run natively in the main suite);
  # TERN_QEMU_SKIP="" runs everything (docs/bench/i34-arm/qemu-engine-ffi-all.log: engine 15 and all 13).
  skip=${TERN_QEMU_SKIP-a_missing_tensor_is_corrupt_file_on_every_device every_option_reads_back_from_the_session_report tern_score_equals_the_cli_score llama_cpp_numerics_is_a_cpu_session_option model_plan_is_the_engines_plan}
  skips=()
  for t in $skip; do skips+=(--skip "$t"); done
  run "tern-engine + tern-ffi (C ABI), qemu -cpu max${skip:+ (skipped: $skip)}" \
    QEMU_CPU=max -- -p tern-engine -p tern-ffi -- "${skips[@]}"
fi
echo "   aarch64 CPU tests passed under qemu (kernel paths neon-dotprod, neon, scalar; timings not meaningful)"
