#!/usr/bin/env bash
# h-cat device call 2 (issue 15): same model as call 1 (2B4T-shaped TQ2_0 + q6_K head, packed
# 2bit/raw by main's tern). Binaries: main (ed67e55), A = h-cat with main's norm kernels (gate/up
# pairs only), B = h-cat (gate/up pairs + scalar-unrolled norms). tg128 + pp512 alternating, then
# `--profile` (decode and prefill per-kernel µs) of each, B with TERN_GPU_FUSE_NORM=1 and with
# TERN_GPU_GATE_UP=split. Everything is tarred into $OUT/all.tar.gz.
set -uo pipefail
REPO=$PWD; K=$REPO/.devkit-hcat; O=$OUT/r; M=/tmp/m; L=/tmp/llama; mkdir -p "$M" "$L" "$O"
exec > >(tee -a "$O/device.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
. "$REPO/scripts/device-env.sh"; device_vulkan_env "$REPO"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$O/gpu.txt" 2>&1
log "GPU: $(cat "$O/gpu.txt")"
for b in main A B; do xz -dc "$K/tern-$b.xz" > "$M/tern-$b"; chmod +x "$M/tern-$b"; done
if [ ! -s "$M/b.tern" ]; then
  tar xJf "$K/llama-vulkan.tar.xz" -C "$L"
  for lib in "$L"/fallback-lib/*; do ldconfig -p | grep -F "$(basename "$lib") " >/dev/null || cp "$lib" "$L/bin/"; done
  log "gen f16"; python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet > "$O/gen.log" 2>&1
  log "quantize TQ2_0"; "$L/bin/llama-quantize" "$M/bitnet-f16.gguf" "$M/bitnet-tq2_0.gguf" TQ2_0 16 > "$O/quantize.log" 2>&1
  rm -f "$M/bitnet-f16.gguf"
  log "pack"; "$M/tern-main" pack "$M/bitnet-tq2_0.gguf" -o "$M/b.tern" --ternary 2bit --floats raw > "$O/pack.log" 2>&1
fi
ls -la "$M"
tb() { # tag bin timeout args...   (environment before the call applies)
  local tag=$1 bin=$2 t=$3; shift 3
  log "tern bench $tag $* (FUSE_NORM=${TERN_GPU_FUSE_NORM:-} GATE_UP=${TERN_GPU_GATE_UP:-})"
  timeout "$t" "$M/tern-$bin" bench "$M/b.tern" --device gpu --json "$@" > "$O/tern-$tag.json" 2> "$O/tern-$tag.err"
  python3 - "$O/tern-$tag.json" "$tag" <<'PY' | tee -a "$O/summary.txt" || tail -3 "$O/tern-$tag.err"
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], [(t['test'], round(t['avg_ts'], 1), round(t['stddev_ts'], 1)) for t in d['tests']],
      'dispatches', d.get('dispatches_per_token'), 'peak', d.get('memory', {}).get('gpu_allocated_peak'))
for key in ('profile_us_per_token', 'profile_prefill_us'):
    for k in d.get(key) or []:
        print('   ', key[8:12], k['kernel'], k['dispatches'], round(k['us'], 1))
PY
}
for round in 1 2; do
  for b in main A B; do tb "$b-$round" "$b" 90 -p 512 -n 128 -r 3; done
done
for b in main A B; do tb "$b-profile" "$b" 60 -p 512 -n 16 -r 1 --profile; done
TERN_GPU_FUSE_NORM=1 tb B-fuse-profile B 60 -p 512 -n 16 -r 1 --profile
TERN_GPU_FUSE_NORM=1 tb B-fuse B 90 -p 512 -n 128 -r 3
TERN_GPU_GATE_UP=split tb B-split-profile B 60 -p 512 -n 16 -r 1 --profile
TERN_GPU_GATE_UP=split tb B-split B 90 -p 512 -n 128 -r 3
log done
cp "$O/summary.txt" "$O/device.log" "$OUT/"
(cd "$O" && tar czf "$OUT/all.tar.gz" .)
