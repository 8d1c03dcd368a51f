#!/usr/bin/env bash
# Issue 28, the rotated KV formats on the GPU: SmolLM2-135M perplexity on GPL-3 at -c 2048 on the
# lent machine's GPU (f16, q8 and the rotated q4r/q3r/q2r) and its CPU (q4r, q3r: the reference),
# then decode speed at depth on the BitNet-2B4T shape for q8 against q4r (the rotation's cost in
# the store and in attention: rope_kv.wgsl PASS 2, attention.wgsl's H·q and Hᵀ·out), in ONE call
# after three staging calls (as scripts/device-i28.sh: the 98 MB model travels in 33 MB pieces).
#   HERE:   split -b 33M -d ~/.cache/tern/SmolLM2-135M-Instruct.tern sm. into .devcache/{a,c,d};
#           sha256 → .devcache/b/sha, GPL-3 → .devcache/b/; strip -o .devkit/ab/tern-new
#           target/release/tern; the Vulkan loader's .debs in .devkit/gl (device/README.md)
#   DEVICE: calls 1-3: mkdir -p /root/devstore && cp .devcache/X/sm.0N /root/devstore/
#           call 4: bash scripts/device-i28-gpu.sh   (carry .devkit .devcache/b)
# Writes $OUT/i28gpu.log, $OUT/ppl-*.json, $OUT/kvs/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/i28gpu-out}; TERN=${TERN:-.devkit/ab/tern-new}; PPL_S=${PPL_S:-240}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/i28gpu.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  for f in .devcache/b/gl/*.deb .devkit/gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
done
M=/root/devstore/smol.tern
cat /root/devstore/sm.00 /root/devstore/sm.01 /root/devstore/sm.02 > "$M" || { log "staging missing"; exit 1; }
[ "$(sha256sum < "$M" | cut -c1-64)" = "$(cat .devcache/b/sha)" ] || { log "model sha256 mismatch"; exit 1; }
TEXT=.devcache/b/GPL-3
log "model ok; CPU: $(nproc) cores; GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
run_ppl() {
  local dev=$1 kv=$2
  timeout "$PPL_S" "$TERN" perplexity "$M" -f "$TEXT" -c 2048 --device "$dev" --kv "$kv" --json \
    > "$OUT/ppl-$dev-$kv.json" 2> "$OUT/ppl-$dev-$kv.err"
  log "ppl $dev $kv: rc $? $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print({k: j.get(k) for k in ("ppl","ppl_second_half","kv","kv_bytes_per_token")})' "$OUT/ppl-$dev-$kv.json" 2>/dev/null)"
}
# the CPU reference runs in the background while the GPU measures
pids=()
for kv in q4r q3r; do run_ppl cpu "$kv" & pids+=($!); done
for kv in f16 q8 q4r q3r q2r; do run_ppl gpu "$kv"; done
"$TERN" run "$M" --device gpu --kv q4r -p "The capital of France is" -n 24 --temp 0 > "$OUT/run-gpu-q4r.txt" 2>&1
log "tern run --device gpu --kv q4r: $(tr '\n' ' ' < "$OUT/run-gpu-q4r.txt")"
wait "${pids[@]}"
# decode speed at depth: q8 (the default) against q4r
BINS="new:$TERN" OUT="$OUT/kvs" LLAMA_KIT=/none KVS="q8 q4r" DEPTHS="0 4096" HARD_S=${KVS_HARD_S:-420} \
  bash scripts/device-kvspeed.sh
log done
