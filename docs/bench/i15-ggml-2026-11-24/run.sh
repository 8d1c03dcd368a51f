#!/usr/bin/env bash
# issue 15 (h-smp): ggml GEMV before/after (gpu_bench --only ggml_gemv) and tg128 of the
# SmolLM2-shaped Q4_1 and 2B4T TQ2_0+q6_K models, tern (branch h-smp and main) and llama.cpp.
set -uo pipefail
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
K=.devkit-smp
O=$OUT
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $O/gpu.txt 2>&1
echo "== gpu_bench before (main's ggml_gemv.wgsl)"; timeout 45 $K/gpu_bench-before --only ggml_gemv > $O/gpu_bench_ggml_gemv_before.json 2> $O/gpu_bench_before.err; echo rc $?
echo "== gpu_bench after (h-smp)"; timeout 45 $K/gpu_bench-after --only ggml_gemv > $O/gpu_bench_ggml_gemv_after.json 2> $O/gpu_bench_after.err; echo rc $?
# models: skip the variants not needed here (non-empty placeholders)
mkdir -p /tmp/m; for n in bitnet-tq1_0 bitnet-tq2_0-f16emb smollm-tq2_0; do echo skip > /tmp/m/$n.gguf; done
export OUT=$O/db SHAPES="smollm bitnet" DEPTH=0 P=0 N=128 R=3 LLAMA_FILES="smollm-q4_1 bitnet-tq2_0" \
  TERN_PACKS="smollm-q4_1:2bit:raw bitnet-tq2_0:2bit:raw" TERN_ARGS="--profile" BUDGET_S=230 HARD_S=300 \
  TERN_BIN=$PWD/$K/tern TERN_TIMEOUT=80 LLAMA_TIMEOUT=80
bash scripts/device-bench.sh models llama tern
echo "== main's tern on the same packs"
for p in /tmp/m/tern-*/*.tern; do
  b=$(basename $p .tern)
  [ $SECONDS -lt 390 ] || break
  timeout 40 .devkit/tern-main bench $p -r 3 -p 0 --profile --json > $O/tern-main-$b.json 2> $O/tern-main-$b.err; echo "$b rc $?"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([(t['test'], round(t['avg_ts'],1)) for t in d['tests']], d.get('dispatches_per_token'))" $O/tern-main-$b.json
done
ls -la /tmp/m /tmp/m/tern-* > $O/models.txt 2>&1
rm -f $O/db/raw.tar.gz 2>/dev/null; true
