#!/usr/bin/env bash
# h-cat device call (issue 15): 2B4T-shaped TQ2_0 + q6_K head packed 2bit/raw; main's tern vs
# h-cat's tern in the same call: tg128 + pp512, and `tern bench --profile` per-kernel µs with
# TERN_GPU_FUSE_NORM=0/1 (and gate/up kept split for the attribution); llama-bench TQ2_0 anchor.
set -uo pipefail
REPO=$PWD; K=$REPO/.devkit-hcat; O=$OUT; M=/tmp/m; L=/tmp/llama; mkdir -p "$M" "$L" "$O"
exec > >(tee -a "$O/device.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
. "$REPO/scripts/device-env.sh"; device_vulkan_env "$REPO"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$O/gpu.txt" 2>&1
log "GPU: $(cat "$O/gpu.txt")"
xz -dc "$K/tern-main.xz" > "$M/tern-main"; xz -dc "$K/tern-hcat.xz" > "$M/tern-hcat"; chmod +x "$M"/tern-*
tar xJf "$K/llama-vulkan.tar.xz" -C "$L"
for lib in "$L"/fallback-lib/*; do ldconfig -p | grep -F "$(basename "$lib") " >/dev/null || cp "$lib" "$L/bin/"; done
log "gen f16"; python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet > "$O/gen.log" 2>&1 || { log "gen failed"; tail -3 "$O/gen.log"; }
log "quantize TQ2_0"; "$L/bin/llama-quantize" "$M/bitnet-f16.gguf" "$M/bitnet-tq2_0.gguf" TQ2_0 16 > "$O/quantize.log" 2>&1 || { log "quantize failed"; tail -3 "$O/quantize.log"; }
rm -f "$M/bitnet-f16.gguf"
log "pack"; "$M/tern-main" pack "$M/bitnet-tq2_0.gguf" -o "$M/b.tern" --ternary 2bit --floats raw > "$O/pack.log" 2>&1 || { log "pack failed"; tail -3 "$O/pack.log"; }
ls -la "$M" | tee -a "$O/device.log"
tb() { # tag bin timeout args...   (environment before the call applies)
  local tag=$1 bin=$2 t=$3; shift 3
  log "tern bench $tag $* (FUSE_NORM=${TERN_GPU_FUSE_NORM:-} GATE_UP=${TERN_GPU_GATE_UP:-})"
  timeout "$t" "$M/tern-$bin" bench "$M/b.tern" --device gpu --json "$@" > "$O/tern-$tag.json" 2> "$O/tern-$tag.err"
  python3 - "$O/tern-$tag.json" "$tag" <<'PY' | tee -a "$O/summary.txt" || tail -3 "$O/tern-$tag.err"
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], [(t['test'], round(t['avg_ts'], 1), round(t['stddev_ts'], 1)) for t in d['tests']],
      'dispatches', d.get('dispatches_per_token'), 'peak', d.get('memory', {}).get('gpu_allocated_peak'))
for k in d.get('profile_us_per_token') or []:
    print('   ', k['kernel'], k['dispatches'], round(k['us'], 1))
PY
}
# speed: alternate main / h-cat so drift hits both
tb main-1 main 90 -p 512 -n 128 -r 3
tb hcat-1 hcat 90 -p 512 -n 128 -r 3
TERN_GPU_FUSE_NORM=1 tb hcat-fuse-1 hcat 90 -p 512 -n 128 -r 3
tb main-2 main 90 -p 512 -n 128 -r 3
tb hcat-2 hcat 90 -p 512 -n 128 -r 3
TERN_GPU_FUSE_NORM=1 tb hcat-fuse-2 hcat 90 -p 512 -n 128 -r 3
# per-kernel µs of one decode step
tb main-profile main 60 -p 512 -n 16 -r 1 --profile
tb hcat-profile hcat 60 -p 512 -n 16 -r 1 --profile
TERN_GPU_FUSE_NORM=1 tb hcat-fuse-profile hcat 60 -p 512 -n 16 -r 1 --profile
TERN_GPU_GATE_UP=split tb hcat-split-profile hcat 60 -p 512 -n 16 -r 1 --profile
log "llama-bench TQ2_0"
timeout 90 "$L/bin/llama-bench" -m "$M/bitnet-tq2_0.gguf" -p 512 -n 128 -r 3 -ngl 99 -o json > "$O/llama-tq2_0.json" 2> "$O/llama.err" \
  && python3 -c "import json,sys; [print('llama tq2_0', e['n_prompt'], e['n_gen'], round(e['avg_ts'],1)) for e in json.load(open(sys.argv[1]))]" "$O/llama-tq2_0.json" | tee -a "$O/summary.txt"
log done
