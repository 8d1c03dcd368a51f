#!/usr/bin/env bash
# Issue 15 (h-rope): one device call measuring main's tern against this branch's on the
# BitNet-2B4T shape (random weights, TQ2_0 → `tern pack --ternary 2bit --floats raw`): tg128,
# pp512, tg128 at depth 4096, `tern bench --profile --json`, and the branch's toggles
# (TERN_GPU_ATTN_SHORT: the unsplit-attention threshold; TERN_GPU_QKV=split: three q/k/v GEMVs
# and the separate RoPE / KV store), then the SmolLM2 shape (Q4_1) if time is left.
#
#   bash scripts/device-h-rope.sh kit   HERE: .devkit-hrope/ in /work/main (xz'd stripped binaries:
#                                       main's target/release/tern and this worktree's, the llama kit,
#                                       this script)
#   bash .devkit-hrope/device-h-rope.sh  on the device (carry .gl .devkit-hrope), from the repo root
# Everything goes to $OUT/h-rope.tar.gz + $OUT/summary.txt.
set -uo pipefail
PHASE=${1:-run}
if [ "$PHASE" = kit ]; then
  set -e
  K=/work/main/.devkit-hrope; rm -rf "$K"; mkdir -p "$K"
  strip -o /tmp/tern-hrope-main /work/main/target/release/tern
  strip -o /tmp/tern-hrope "$(dirname "$0")/../target/release/tern"
  xz -6 -c /tmp/tern-hrope-main > "$K/tern-main.xz"; xz -6 -c /tmp/tern-hrope > "$K/tern.xz"
  cp /work/main/.devkit/llama-vulkan.tar.xz "$K/"; cp "$0" "$K/device-h-rope.sh"
  du -cb "$K" /work/main/.gl | tail -1; exit 0
fi
REPO=$PWD; K=$REPO/.devkit-hrope
for f in "$REPO"/.gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
O=${OUT:-/tmp/hrope-out}; B=/tmp/hr; M=/tmp/m; mkdir -p "$O" "$B" "$M" /tmp/llama
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$O/log.txt"; }
fin() { (cd "$O" && tar czf /tmp/h-rope.tar.gz . && mv /tmp/h-rope.tar.gz .); log "packed"; exit 0; }
xz -dc "$K/tern-main.xz" > "$B/tern-main"; xz -dc "$K/tern.xz" > "$B/tern"; chmod +x "$B"/tern*
tar xJf "$K/llama-vulkan.tar.xz" -C /tmp/llama
LDC=$(ldconfig -p)
for lib in /tmp/llama/fallback-lib/*; do
  [ -e "$lib" ] || continue
  grep -qF "$(basename "$lib") " <<<"$LDC" || cp "$lib" /tmp/llama/bin/
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$O/gpu.txt" 2>&1
log "GPU $(cat "$O/gpu.txt")"
log "gen bitnet"
python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet > "$O/gen.log" 2>&1 || { log "gen failed"; fin; }
log "quantize TQ2_0"
/tmp/llama/bin/llama-quantize "$M/bitnet-f16.gguf" "$M/bitnet-tq2_0.gguf" TQ2_0 16 > "$O/quantize.log" 2>&1 || { log "quantize failed"; tail -5 "$O/quantize.log"; fin; }
rm -f "$M/bitnet-f16.gguf"
"$B/tern" pack "$M/bitnet-tq2_0.gguf" -o "$M/b.tern" --ternary 2bit --floats raw > "$O/pack.log" 2>&1 || { log "pack failed"; fin; }
log "packed $(du -m "$M/b.tern" | cut -f1) MiB"
tb() { # tag binary timeout args... (environment applies)
  local tag=$1 bin=$2 t=$3; shift 3
  timeout "$t" "$B/$bin" bench --device gpu --json "$@" > "$O/$tag.json" 2> "$O/$tag.err"
  python3 - "$O/$tag.json" "$tag" <<'PY' | tee -a "$O/summary.txt" || { log "$tag failed"; tail -3 "$O/$tag.err"; }
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], [(t['test'], t.get('depth', 0), round(t['avg_ts'], 1), round(t.get('stddev_ts', 0), 1)) for t in d['tests']],
      'dispatches', d.get('dispatches_per_token'))
PY
}
for bin in tern-main tern; do
  tb "$bin-pp512-tg128" $bin 60 "$M/b.tern" -p 512 -n 128 -r 3
  tb "$bin-tg128-d4096" $bin 60 "$M/b.tern" -p 0 -n 128 -d 4096 -r 2
done
TERN_GPU_ATTN_SHORT=0 tb tern-short0-tg128 tern 40 "$M/b.tern" -p 0 -n 128 -r 3
TERN_GPU_ATTN_SHORT=512 tb tern-short512-tg128 tern 40 "$M/b.tern" -p 0 -n 128 -r 3
TERN_GPU_QKV=split tb tern-qkvsplit-tg128 tern 40 "$M/b.tern" -p 0 -n 128 -r 3
for bin in tern-main tern; do
  tb "$bin-profile" $bin 60 "$M/b.tern" -p 512 -n 16 -r 1 --profile
done
log "bitnet done"
if [ "$SECONDS" -lt 300 ]; then
  python3 scripts/gen_synth_gguf.py "$M/smollm-f16.gguf" --shape smollm > "$O/gen-smollm.log" 2>&1 &&
  /tmp/llama/bin/llama-quantize --token-embedding-type q8_0 "$M/smollm-f16.gguf" "$M/smollm-q4_1.gguf" Q4_1 16 > "$O/quantize-smollm.log" 2>&1 &&
  "$B/tern" pack "$M/smollm-q4_1.gguf" -o "$M/s.tern" --ternary 2bit --floats raw > "$O/pack-smollm.log" 2>&1 &&
  for bin in tern-main tern; do tb "$bin-smollm-tg128" $bin 40 "$M/s.tern" -p 512 -n 128 -r 3; done
fi
log "done"
fin
