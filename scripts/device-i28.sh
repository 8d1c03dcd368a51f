#!/usr/bin/env bash
# Issue 28's measurements that need the lent machine, in ONE call (after a staging call):
#   1. SmolLM2-135M perplexity on GPL-3 at -c 2048 per KV format on the machine's CPU (16 cores;
#      the 2-core CI machine takes ~10 min a format) and on its GPU (f16 and the default q8);
#   2. decode speed at depth per KV format (scripts/device-kvspeed.sh, this build only).
# The 98 MB SmolLM2 .tern exceeds one call's 64 MiB carry (the tracked tree counts too): three
# staging calls copy its 33 MB pieces (.devcache/{a,c,d}/sm.0N) to /root/devstore, then this call
# runs with .devcache/b (sha = the whole file's sha256, and GPL-3) — each call must come within
# the machine's idle release (30 s) of the one before.
#   HERE:   split -b 33M -d ~/.cache/tern/SmolLM2-135M-Instruct.tern sm.; strip -o .devkit/ab/tern-new target/release/tern
#   DEVICE: calls 1-3: mkdir -p /root/devstore && cp .devcache/X/sm.0N /root/devstore/  (carry .devcache/X)
#           call 4: bash scripts/device-i28.sh                             (carry .gl .devkit/ab .devcache/b)
# Writes $OUT/i28.log, $OUT/ppl-*.json, $OUT/kvs/ (device-kvspeed.sh's outputs).
# Environment: OUT=/tmp/i28-out  TERN=.devkit/ab/tern-new  PPL_KVS="f16 q8 q4 q4r q3r q2r"
#   GPU_PPL_KVS="f16 q8"  KVS="f16 q8 q4"  PPL_S=240 (time cap per perplexity run)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/i28-out}; TERN=${TERN:-.devkit/ab/tern-new}
PPL_KVS=${PPL_KVS:-f16 q8 q4 q4r q3r q2r}; GPU_PPL_KVS=${GPU_PPL_KVS:-f16 q8}; PPL_S=${PPL_S:-240}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/i28.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
done
M=/root/devstore/smol.tern
cat /root/devstore/sm.00 /root/devstore/sm.01 /root/devstore/sm.02 > "$M" || { log "staging missing"; exit 1; }
[ "$(sha256sum < "$M" | cut -c1-64)" = "$(cat .devcache/b/sha)" ] || { log "model sha256 mismatch"; exit 1; }
TEXT=.devcache/b/GPL-3
log "model ok; CPU: $(nproc) cores; GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)"

# 1. perplexity, CPU (all formats at once, sharing the cores)
run_ppl() {
  local dev=$1 kv=$2
  timeout "$PPL_S" "$TERN" perplexity "$M" -f "$TEXT" -c 2048 --device "$dev" --kv "$kv" --json \
    > "$OUT/ppl-$dev-$kv.json" 2> "$OUT/ppl-$dev-$kv.err"
  log "ppl $dev $kv: rc $? $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print({k: j.get(k) for k in ("ppl","ppl_second_half","kv","kv_bytes_per_token")})' "$OUT/ppl-$dev-$kv.json" 2>/dev/null)"
}
# (explicit pids: a bare `wait` would also wait for the log's tee)
pids=()
for kv in $PPL_KVS; do run_ppl cpu "$kv" & pids+=($!); done
wait "${pids[@]}"
for kv in $GPU_PPL_KVS; do run_ppl gpu "$kv"; done

# 2. decode at depth
BINS="new:$TERN" OUT="$OUT/kvs" LLAMA_KIT=/none HARD_S=${KVS_HARD_S:-300} bash scripts/device-kvspeed.sh
log done
