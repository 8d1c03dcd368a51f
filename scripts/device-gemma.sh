#!/usr/bin/env bash
# Gemma 3 270M on the lent GPU (issue 31): a Gemma-3-270M-shaped model generated THERE (the real file,
# 232 MB, is too big to carry; speed does not depend on weight values) at full shape (640 hidden,
# 18 layers, 4/1 heads x 256, 2048 FFN, 262,144-token vocabulary, sliding window 512 on 5 of 6
# layers), quantized by llama-quantize to Q4_K_M as Google's file is; then llama-bench -fa 1
# pp512/tg128 and `tern bench` (GPU; with --device auto a GPU that refuses the model falls back to the
# CPU, which the JSON's backend field says) on the same file, in one call.
#
#   HERE:          mkdir -p .devkit/gemma && strip -o .devkit/gemma/tern target/release/tern
#                  cp -r "$(python3 -c 'import gguf,os;print(os.path.dirname(gguf.__file__))')" .devkit/gemma/gguf
#                  bash scripts/llamacpp-device-kit.sh kit .devkit/llama     (once)
#   ON THE DEVICE: bash scripts/device-gemma.sh      (carry .gl and .devkit)
# Writes $OUT/gemma.log and $OUT/gemma.md. Environment: OUT=/tmp/gemma-out  R=3  LAYERS=18
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gemma-out}; R=${R:-3}; LAYERS=${LAYERS:-18}; M=${MODEL_DIR:-/tmp/gemma-models}
TERN=${TERN:-.devkit/gemma/tern}; KIT=${LLAMA_KIT:-.devkit/llama}
mkdir -p "$OUT" "$M"
exec > >(tee -a "$OUT/gemma.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
done
log "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo none)"
[ -x "$KIT/bin/llama-bench" ] || { log "building llama.cpp"; bash scripts/llamacpp-device-kit.sh build "$KIT" > "$OUT/llama-build.log" 2>&1 || { tail -20 "$OUT/llama-build.log"; exit 1; }; }
export PYTHONPATH=.devkit/gemma${PYTHONPATH:+:$PYTHONPATH}
F16=$M/gemma3-f16.gguf; Q=$M/gemma3-q4km.gguf
[ -s "$F16" ] || { log "generating $F16"; python3 scripts/gen_family_gguf.py "$F16" --family gemma3 --layers "$LAYERS" || exit 1; }
[ -s "$Q" ] || { log "quantizing Q4_K_M"; "$KIT/bin/llama-quantize" "$F16" "$Q" Q4_K_M > "$OUT/quantize.log" 2>&1 || { tail -5 "$OUT/quantize.log"; exit 1; }; }
log "llama-bench -fa 1"
"$KIT/bin/llama-bench" -m "$Q" -fa 1 -p 512 -n 128 -r "$R" -o md > "$OUT/llama-bench.md" 2> "$OUT/llama-bench.err" || tail -5 "$OUT/llama-bench.err"
cat "$OUT/llama-bench.md"
log "tern pack"
"$TERN" pack "$Q" -o "$M/gemma3.tern" > "$OUT/pack.log" 2>&1 || { tail -5 "$OUT/pack.log"; exit 1; }
for dev in gpu auto; do
  log "tern bench --device $dev"
  timeout 300 "$TERN" bench "$M/gemma3.tern" --device $dev -p 512 -n 128 -r "$R" --json > "$OUT/tern-$dev.json" 2> "$OUT/tern-$dev.err" \
    || { log "tern bench --device $dev FAILED (rc $?)"; tail -5 "$OUT/tern-$dev.err"; }
  cat "$OUT/tern-$dev.json" 2>/dev/null
done
{ echo "| engine | test | t/s |"; echo "|---|---|---|"
  grep -E '^\|.*(pp512|tg128)' "$OUT/llama-bench.md" | awk -F'|' '{gsub(/ /,"",$8); print "| llama.cpp -fa 1 |" $8 "|" $9 "|"}'
  for dev in gpu auto; do
    python3 - "$OUT/tern-$dev.json" "$dev" <<'PY' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["tests"]:
    print(f"| tern --device {sys.argv[2]} ({d['device']}) | {r['test']} | {r['avg_ts']:.1f} |")
PY
  done; } > "$OUT/gemma.md"
cat "$OUT/gemma.md"
log done
