#!/usr/bin/env bash
# coordinator's call 2 (session 3, 2026-11-24): parity on the H100, then llama-bench + tern bench
# (decode GEMV + greedy lookahead on/off, a4.8, SmolLM2 shape)
set -uo pipefail
. scripts/device-env.sh; device_vulkan_env "$PWD"
F=/tmp/g; O=$OUT/g2; M=/tmp/m; mkdir -p $F/kit $O $M
xz -dc .devkit-g2/tern.xz > $F/kit/tern; chmod +x $F/kit/tern; cp .devkit-g2/llama-vulkan.tar.xz $F/kit/
xz -dc .devkit-g2/parity.xz > $F/parity; chmod +x $F/parity
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt 2>&1
(cd runtime/gpu && TERN_REQUIRE_GPU=1 timeout 200 $F/parity --test-threads=4 > $O/parity.txt 2>&1; echo "parity rc $?" >> $O/parity.txt)
grep -E "test result|FAIL|rc " $O/parity.txt | head -20 > $O/summary.txt
OUT=$O/bench KIT=$F/kit MODEL_DIR=$M R=2 DEPTH=0 BUDGET_S=200 HARD_S=260 \
  LLAMA_FILES="bitnet-tq2_0 smollm-q4_1" DEPTH_FILES="" TERN_PACKS="bitnet-tq2_0:2bit:raw smollm-q4_1:2bit:raw" TERN_DEPTH_PACKS="" \
  bash scripts/device-bench.sh all > $O/device-bench.out 2>&1
B=$(ls $M/tern-*/bitnet-tq2_0--2bit-raw.tern 2>/dev/null | head -1); S=$(ls $M/tern-*/smollm-q4_1--2bit-raw.tern 2>/dev/null | head -1)
tb() { local tag=$1 m=$2; shift 2; timeout 80 $F/kit/tern bench "$m" --device gpu --json "$@" > $O/tern-$tag.json 2> $O/tern-$tag.err
  python3 - $O/tern-$tag.json $tag >> $O/summary.txt <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(sys.argv[2],[(t['test'],round(t['avg_ts'],1),round(t['stddev_ts'],1)) for t in d['tests']],'disp',d.get('dispatches_per_token'))
ks=d.get('profile_us_per_token') or []
if ks: print('   total us',round(sum(k['us'] for k in ks),1))
for k in sorted(ks,key=lambda k:-k['us'])[:10]: print('   ',k['kernel'],k['dispatches'],round(k['us'],1),round(k['us']/max(k['dispatches'],1),2))
PY
}
for r in 1 2; do
tb a8-la$r "$B" -p 0 -n 128 -r 3
TERN_GPU_LOOKAHEAD=0 tb a8-nola$r "$B" -p 0 -n 128 -r 3
tb a48-la$r "$B" -p 0 -n 128 -r 3 --activations a4.8
tb smol-la$r "$S" -p 0 -n 128 -r 3
TERN_GPU_LOOKAHEAD=0 tb smol-nola$r "$S" -p 0 -n 128 -r 3
done
tb a8-prof "$B" -p 0 -n 16 -r 1 --profile
tb a48-prof "$B" -p 0 -n 16 -r 1 --profile --activations a4.8
tb smol-prof "$S" -p 0 -n 16 -r 1 --profile
cp $O/bench/results.md $O/ 2>/dev/null
cd $OUT && tar czf g2.tar.gz g2 && cp g2/summary.txt . ; cat g2/summary.txt; grep -E "^\|" g2/results.md 2>/dev/null | tail -12
