#!/usr/bin/env bash
# h-topk (issue 13): the TopK prologue A/B on the device, one env switch, one binary.
#
#   bash scripts/device-topk.sh kit     HERE: .devkit-h-topk/tern.xz (stripped tern of this tree)
#   bash scripts/device-topk.sh run     ON THE DEVICE (carry .gl .devkit-h-topk; start the command
#                                       with the Vulkan loader lines of the shared brief):
#                                       2B4T TQ2_0 pack (scripts/gen_synth_gguf.py + llama-quantize
#                                       from .devkit-h-topk/llama-vulkan.tar.xz), tg128 interleaved
#                                       over two rounds: a4.8 default (= `all`: every norm fused,
#                                       the TopK input included), a4.8 `notopk` (the previous
#                                       `all`: TopK as its own pass + the unfused o-projection),
#                                       a4.8 `0`, A8 default; then one decode profile each of a4.8
#                                       default and `notopk` (`tern bench --profile`).
# Output: $OUT/summary-topk.txt, $OUT/tern-*.json / .err, $OUT/final-topk.log.
set -uo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-}
if [ "$PHASE" = kit ]; then
  set -e
  cargo build --release --bin tern -p tern-cli
  rm -rf .devkit-h-topk; mkdir -p .devkit-h-topk
  strip -o /tmp/tern-topk target/release/tern
  xz -T2 -c /tmp/tern-topk > .devkit-h-topk/tern.xz
  cp /work/main/.devkit/llama-vulkan.tar.xz .devkit-h-topk/
  cp scripts/device-topk.sh .devkit-h-topk/
  ls -la .devkit-h-topk; exit 0
fi
[ "$PHASE" = run ] || { echo "usage: $0 kit|run" >&2; exit 2; }
PHASE=topk
F=/tmp/topk; O=${OUT:-/tmp/topk-out}; M=/tmp/m; mkdir -p "$F/kit" "$O" "$M"
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$O/final-$PHASE.log"; }
tb() { # tag model timeout extra... (environment before the call applies)
  local tag=$1 m=$2 t=$3; shift 3
  log "tern bench $tag $*"
  timeout "$t" "$F/kit/tern" bench "$m" --device gpu --json "$@" > "$O/tern-$tag.json" 2> "$O/tern-$tag.err"
  python3 - "$O/tern-$tag.json" "$tag" <<'PY' | tee -a "$O/summary-$PHASE.txt" || tail -3 "$O/tern-$tag.err"
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], [(t['test'], round(t['avg_ts'], 1)) for t in d['tests']],
      'dispatches', d.get('dispatches_per_token'), 'act', d.get('activations', {}).get('scheme'))
PY
}
xz -dc .devkit-h-topk/tern.xz > "$F/kit/tern"; chmod +x "$F/kit/tern"
mkdir -p /tmp/llama; tar xJf .devkit-h-topk/llama-vulkan.tar.xz -C /tmp/llama
python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet > "$O/gen.log" 2>&1
/tmp/llama/bin/llama-quantize "$M/bitnet-f16.gguf" "$M/bitnet-tq2_0.gguf" TQ2_0 8 > "$O/quant.log" 2>&1
P=$M/tq2.tern
"$F/kit/tern" pack "$M/bitnet-tq2_0.gguf" -o "$P" > "$O/pack.log" 2>&1 || log "pack failed"
log "model ready"
for round in 1 2; do
  for m in a48:default a48:notopk a48:0 a8:default; do
    act=${m%%:*}; mode=${m#*:}; a=$([ "$act" = a48 ] && echo a4.8 || echo a8)
    if [ "$mode" = default ]; then
      tb "$act-$mode-r$round" "$P" 60 -p 0 -n 128 -r 3 --activations "$a"
    else
      TERN_GPU_FUSE_NORM=$mode tb "$act-$mode-r$round" "$P" 60 -p 0 -n 128 -r 3 --activations "$a"
    fi
  done
done
for mode in default notopk; do
  log "profile a4.8 $mode"
  if [ "$mode" = default ]; then
    timeout 60 "$F/kit/tern" bench "$P" --device gpu -p 0 -n 16 -r 1 --profile --activations a4.8 > "$O/prof-a48-$mode.txt" 2>&1
  else
    TERN_GPU_FUSE_NORM=$mode timeout 60 "$F/kit/tern" bench "$P" --device gpu -p 0 -n 16 -r 1 --profile --activations a4.8 > "$O/prof-a48-$mode.txt" 2>&1
  fi
  grep -A14 "GPU time of one decode step" "$O/prof-a48-$mode.txt" | tee -a "$O/summary-$PHASE.txt"
done
log done
