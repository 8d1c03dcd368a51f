#!/usr/bin/env bash
# coordinator's GEMV A/B call (session 3, 2026-11-24): llama-bench TQ2_0 + tern default vs TERN_GPU_GEMV=plain
set -uo pipefail
. scripts/device-env.sh; device_vulkan_env "$PWD"
F=/tmp/g; O=$OUT/g; M=/tmp/m; mkdir -p $F/kit $O $M
xz -dc .devkit-g/tern.xz > $F/kit/tern; chmod +x $F/kit/tern; cp .devkit-g/llama-vulkan.tar.xz $F/kit/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt 2>&1
OUT=$O/bench KIT=$F/kit MODEL_DIR=$M R=2 DEPTH=0 BUDGET_S=200 HARD_S=260 SHAPES=bitnet \
  LLAMA_FILES="bitnet-tq2_0" DEPTH_FILES="" TERN_PACKS="bitnet-tq2_0:2bit:raw" TERN_DEPTH_PACKS="" \
  bash scripts/device-bench.sh all > $O/device-bench.out 2>&1
P=$(ls $M/tern-*/bitnet-tq2_0--2bit-raw.tern 2>/dev/null | head -1)
echo "pack $P" >> $O/summary.txt
tb() { local tag=$1; shift; timeout 80 $F/kit/tern bench "$P" --device gpu --json "$@" > $O/tern-$tag.json 2> $O/tern-$tag.err
  python3 - $O/tern-$tag.json $tag >> $O/summary.txt <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(sys.argv[2],[(t['test'],round(t['avg_ts'],1)) for t in d['tests']],'disp',d.get('dispatches_per_token'))
ks=d.get('profile_us_per_token') or []
tot=sum(k['us'] for k in ks)
if ks: print('   total us',round(tot,1))
for k in sorted(ks,key=lambda k:-k['us'])[:12]: print('   ',k['kernel'],k['dispatches'],round(k['us'],1),round(k['us']/max(k['dispatches'],1),2))
PY
}
tb dec -p 512 -n 128 -r 2
TERN_GPU_GEMV=plain tb plain -p 512 -n 128 -r 2
tb dec-a48 -p 512 -n 128 -r 2 --activations a4.8
TERN_GPU_GEMV=plain tb plain-a48 -p 512 -n 128 -r 2 --activations a4.8
tb dec-prof -p 64 -n 16 -r 1 --profile
TERN_GPU_GEMV=plain tb plain-prof -p 64 -n 16 -r 1 --profile
tb dec-a48-prof -p 64 -n 16 -r 1 --profile --activations a4.8
cp $O/bench/results.md $O/ 2>/dev/null
cd $OUT && tar czf g.tar.gz g && cp g/summary.txt . ; cat g/summary.txt; cat g/results.md 2>/dev/null | tail -8
