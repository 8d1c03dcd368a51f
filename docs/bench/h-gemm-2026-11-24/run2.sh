#!/usr/bin/env bash
# h-gemm device call 2 (carried as target/hgemm-dev/run2.sh with gpu_bench.xz and tern.xz, both
# stripped release builds of branch h-gemm): the GEMM tiles micro-bench twice, then pp512 of a
# 2B4T-shaped random model (scripts/gen_synth_gguf.py, `tern pack --ternary 2bit --floats raw`,
# A8 and a4.8 packs) with TERN_GEMM_TILE = old (the choice before this branch) / auto / 64 / 128 /
# 64j8, interleaved. Writes $OUT/tiles-{1,2}.json, $OUT/pp512.txt (summary), $OUT/pp512-raw.txt.
set -uo pipefail
. scripts/device-env.sh; device_vulkan_env "$PWD"; echo "GPU: $GPU"
K=$PWD/target/hgemm-dev; B=/tmp/k; M=/tmp/m; mkdir -p $B $M
xz -dc $K/gpu_bench.xz > $B/gb; xz -dc $K/tern.xz > $B/tern; chmod +x $B/gb $B/tern
S=$SECONDS
t() { echo "[+$((SECONDS - S))s] $*" | tee -a $OUT/pp512.txt; }
timeout 40 $B/gb --only tiles > $OUT/tiles-1.json 2> $OUT/tiles.err; t "tiles-1 rc=$?"
python3 scripts/gen_synth_gguf.py $M/f16.gguf --shape bitnet > $OUT/gen.log 2>&1; t "gen rc=$?"
timeout 90 $B/tern pack $M/f16.gguf -o $M/a8.tern --ternary 2bit --floats raw --activations a8 > $OUT/pack.log 2>&1; t "pack a8 rc=$?"
bench() { # pack tile
  local v=$2; [ "$v" = auto ] && v=
  TERN_GEMM_TILE=$v timeout 40 $B/tern bench $M/$1.tern -p 512 -n 0 -r 5 --device gpu --json > $M/out.json 2> $M/err.txt
  local rc=$?
  echo "== $1 TERN_GEMM_TILE=$2 rc=$rc" >> $OUT/pp512-raw.txt; cat $M/out.json >> $OUT/pp512-raw.txt; tail -3 $M/err.txt >> $OUT/pp512-raw.txt
  t "$1 tile=$2 rc=$rc $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([(x['test'], round(x['avg_ts'],1), round(x.get('stddev_ts', 0),1)) for x in d['tests']])" $M/out.json 2>&1 | tail -1)"
}
for tile in old auto 64 128 64j8 old auto; do
  [ $((SECONDS - S)) -gt 150 ] && break
  bench a8 $tile
done
if [ $((SECONDS - S)) -lt 120 ]; then
  timeout 70 $B/tern pack $M/f16.gguf -o $M/a48.tern --ternary 2bit --floats raw --activations a4.8 >> $OUT/pack.log 2>&1; t "pack a4.8 rc=$?"
  for tile in old auto old auto; do
    [ $((SECONDS - S)) -gt 215 ] && break
    bench a48 $tile
  done
fi
[ $((SECONDS - S)) -lt 220 ] && { timeout 15 $B/gb --only tiles > $OUT/tiles-2.json 2>> $OUT/tiles.err; t "tiles-2 rc=$?"; }
cat $OUT/pp512.txt
