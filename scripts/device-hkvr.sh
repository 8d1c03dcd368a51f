#!/usr/bin/env bash
# Issue 14 (branch h-kvr): decode on the 2B4T shape at depth 4096 before and after the fused
# RoPE + quantized KV store and the KIVI per-channel key read, one device call.
#
#   bash scripts/device-hkvr.sh kit    HERE: $KIT (default /work/main/.devkit-hkvr) gets this
#                                      script, gen_synth_gguf.py, device-env.sh and the xz'd
#                                      stripped binaries $BEFORE / $AFTER (tern-before / -after)
#   bash .devkit-hkvr/device-hkvr.sh   on the device, from the repo root (carry .gl .devkit-hkvr)
#
# On the device: the 2B4T-shaped random F16 GGUF (gen_synth_gguf.py --shape bitnet) packed by
# `tern pack --ternary 2bit --floats raw`, then for each binary (before, after) and KV mode
# (f16, q4, MiniCache + q4): `tern bench -p 0 -n 32 -d 4096 -r 2 --device gpu --profile --json`
# (tg t/s, dispatches per token, per-kernel GPU times of one decode step at depth 4096), the same
# at depth 0 without --profile, then q8 / a4 at depth 4096 while time is left. Everything goes
# to $OUT/all.tar.gz, $OUT/summary.txt and $OUT/device.log.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = kit ]; then
  set -e
  KIT=${KIT:-/work/main/.devkit-hkvr}
  mkdir -p "$KIT"
  cp "$HERE/device-hkvr.sh" "$HERE/gen_synth_gguf.py" "$HERE/device-env.sh" "$KIT/"
  xz -6 -T2 -c "$BEFORE" > "$KIT/tern-before.xz"
  xz -6 -T2 -c "$AFTER" > "$KIT/tern-after.xz"
  ls -la "$KIT"; du -sb "$KIT"
  exit 0
fi
KIT=$HERE
REPO=$PWD
DEST=${OUT:-/tmp/hkvr-dest}
O=/tmp/hkvr-out; M=/tmp/hkvr-m
HARD_S=${HARD_S:-320}
mkdir -p "$O" "$M" "$DEST"
exec > >(tee -a "$O/device.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
left() { echo $((HARD_S - SECONDS)); }
. "$KIT/device-env.sh"; device_vulkan_env "$REPO"
log "GPU: $GPU; VK_DRIVER_FILES=${VK_DRIVER_FILES:-<default>}"
for b in before after; do xz -dc "$KIT/tern-$b.xz" > "$M/tern-$b"; chmod +x "$M/tern-$b"; done
F16=$M/bitnet-f16.gguf; TM=$M/bitnet-2bit.tern
log "generating $F16"
python3 "$KIT/gen_synth_gguf.py" "$F16" --shape bitnet ${GEN_ARGS:-} > "$O/gen.log" 2>&1 || log "ERROR: generation"
log "tern pack"
"$M/tern-after" pack "$F16" -o "$TM" --ternary 2bit --floats raw > "$O/pack.log" 2>&1 || { log "ERROR: pack"; tail -5 "$O/pack.log"; }
rm -f "$F16"
summ() {
  python3 - "$1" "$2" <<'PY' | tee -a "$O/summary.txt"
import json, sys
d = json.load(open(sys.argv[1])); tag = sys.argv[2]
t = d["tests"][0]
print(f"{tag}: tg{t['n_tokens']} @d{t.get('depth', 0)} {t['avg_ts']:.1f} ± {t['stddev_ts']:.1f} t/s, "
      f"dispatches/token {d.get('dispatches_per_token')}, kv_bytes_per_token {d.get('kv_bytes_per_token')}")
prof = d.get("profile_us_per_token")
if prof:
    tot = sum(k["us"] for k in prof)
    print(f"  profile (one decode step at d{t.get('depth', 0)}): {tot:.0f} us GPU, {sum(k['dispatches'] for k in prof)} dispatches")
    for k in sorted(prof, key=lambda k: -k["us"])[:14]:
        print(f"    {k['kernel']:<40} {k['dispatches']:>4} x {k['us'] / max(k['dispatches'], 1):8.2f} us = {k['us']:8.1f} us")
PY
}
tb() {  # tag bin depth extra...
  local tag=$1 bin=$2 d=$3; shift 3
  [ "$(left)" -gt 25 ] || { log "time spent: skip $tag"; return; }
  log "tern bench $tag ($bin, d$d): $*"
  if timeout "$(( $(left) < 90 ? $(left) : 90 ))" "$M/tern-$bin" bench "$TM" -p 0 -n 32 -d "$d" -r 2 \
      --device gpu --json "$@" > "$O/$tag.json" 2> "$O/$tag.err"; then
    summ "$O/$tag.json" "$tag" || true
  else
    log "ERROR: $tag"; tail -3 "$O/$tag.err"
  fi
}
for mode in f16 q4 q4mc; do
  args="--kv ${mode%mc}"; [ "$mode" = q4mc ] && args="$args --minicache on"
  for bin in before after; do
    # shellcheck disable=SC2086
    tb "$mode-d4096-$bin" "$bin" 4096 --profile $args
  done
done
for mode in f16 q4 q4mc; do
  args="--kv ${mode%mc}"; [ "$mode" = q4mc ] && args="$args --minicache on"
  for bin in before after; do
    # shellcheck disable=SC2086
    tb "$mode-d0-$bin" "$bin" 0 $args
  done
done
for mode in q8 a4; do
  for bin in before after; do tb "$mode-d4096-$bin" "$bin" 4096 --profile --kv "$mode"; done
done
log "done"
cp "$O/summary.txt" "$O/device.log" "$DEST/" 2>/dev/null
(cd "$O" && tar czf "$DEST/all.tar.gz" .)
