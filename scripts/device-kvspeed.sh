#!/usr/bin/env bash
# Decode speed at depth per KV format on the lent GPU, in ONE call (issue 28): tern binaries
# side by side (an old build beside the new one, interleaved) and llama.cpp built on the device
# with a current glslc (`-fa 1`, f16 / q8_0 / q4_0 caches) on the same BitNet-2B4T-shaped file.
#
#   HERE:          strip -o .devkit/ab/tern-new target/release/tern   (and an older build as tern-old)
#   ON THE DEVICE: bash scripts/device-kvspeed.sh   (carry .gl and .devkit, see device/README.md)
# Writes $OUT/kvspeed.log (everything), $OUT/kvspeed.md (the table), $OUT/raw.tar.gz (each run).
# Environment: OUT=/tmp/kvs-out  BINS="old:.devkit/ab/tern-old new:.devkit/ab/tern-new"
#   KVS="f16 q8 q4"  DEPTHS="0 4096 16384"  N=128  R=3  ROUNDS=1  TINY=0 (1: 2-layer model, dry runs)
#   LLAMA_KIT=.devkit/llama (llama-src.tar.xz + vk-tools.tar.xz: built on the device when present)
#   LLAMA_KVS="f16 q8_0 q4_0"  HARD_S=540 (no new step after it)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kvs-out}; BINS=${BINS:-old:.devkit/ab/tern-old new:.devkit/ab/tern-new}
KVS=${KVS:-f16 q8 q4}; DEPTHS=${DEPTHS:-0 4096 16384}; N=${N:-128}; R=${R:-3}; ROUNDS=${ROUNDS:-1}
TINY=${TINY:-0}; HARD_S=${HARD_S:-540}; LLAMA_KVS=${LLAMA_KVS:-f16 q8_0 q4_0}
M=${MODEL_DIR:-/tmp/kvs-models}
mkdir -p "$OUT/raw" "$M"
exec > >(tee -a "$OUT/kvspeed.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }

# shellcheck source=device-env.sh
. scripts/device-env.sh
device_vulkan_env "$PWD"
log "GPU: $GPU"

first=${BINS%% *}; first=${first#*:}
tiny=(); [ "$TINY" = 1 ] && tiny=(--tiny)
src=$M/bitnet-f16.gguf
[ -s "$src" ] || { log "generating $src"; python3 scripts/gen_synth_gguf.py "$src" --shape bitnet "${tiny[@]}" || exit 1; }
[ -s "$M/bitnet.tern" ] || { log "packing"; "$first" pack "$src" -o "$M/bitnet.tern" > "$OUT/raw/pack.log" 2>&1 || { tail -5 "$OUT/raw/pack.log"; exit 1; }; }

for k in $(seq 1 "$ROUNDS"); do
  order=$BINS; [ $((k % 2)) = 0 ] && order=$(echo "$BINS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for d in $DEPTHS; do
    for kv in $KVS; do
      for wb in $order; do
        [ "$SECONDS" -lt "$HARD_S" ] || { log "HARD_S reached: skipping the rest"; break 4; }
        who=${wb%%:*}; bin=${wb#*:}
        f=$OUT/raw/$who-$kv-d$d-$k.json
        timeout 200 "$bin" bench "$M/bitnet.tern" --device gpu -p 0 -n "$N" -r "$R" -d "$d" --kv "$kv" --json > "$f" 2> "$f.err" \
          || { log "$who $kv d$d FAILED (rc $?)"; tail -3 "$f.err"; continue; }
        log "$who $kv d$d: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print([(t.get("test"), round(t.get("avg_ts",0),1)) for t in j.get("tests",[])], "kv B/tok", j.get("kv_bytes_per_token"))' "$f" 2>/dev/null)"
      done
    done
  done
done

LLAMA_KIT=${LLAMA_KIT:-.devkit/llama}
if [ "$SECONDS" -lt "$HARD_S" ] && [ -s "$LLAMA_KIT/llama-src.tar.xz" ] && [ -s "$LLAMA_KIT/vk-tools.tar.xz" ]; then
  log "building llama.cpp on the device (current glslc)"
  if [ -x "$LLAMA_KIT/bin/llama-bench" ] || bash scripts/llamacpp-device-kit.sh build "$LLAMA_KIT" > "$OUT/llama-build.log" 2>&1; then
    LB=$LLAMA_KIT/bin
    "$LB/llama-bench" --list-devices 2>&1 | tee "$OUT/raw/llama-devices.txt" | head -5
    g=$M/bitnet-tq2_0.gguf
    [ -s "$g" ] || "$LB/llama-quantize" "$src" "$g" TQ2_0 "$(nproc)" > "$OUT/raw/quantize.log" 2>&1
    dl=$(echo $DEPTHS | tr ' ' ',')
    for kv in $LLAMA_KVS; do
      [ "$SECONDS" -lt "$HARD_S" ] || break
      log "llama-bench TQ2_0 -fa 1 -ctk/-ctv $kv -d $dl"
      timeout 240 "$LB/llama-bench" -m "$g" -ngl 99 -fa 1 -ctk "$kv" -ctv "$kv" -p 0 -n "$N" -r "$R" -d "$dl" -o md 2>&1 \
        | tee "$OUT/raw/llama-$kv.md" | grep -E '^\|' || true
    done
  else
    log "llama.cpp build failed:"; tail -5 "$OUT/llama-build.log"
  fi
fi

python3 - "$OUT" "$ROUNDS" "$BINS" "$KVS" "$DEPTHS" > "$OUT/kvspeed.md" <<'PY'
import json, sys, statistics
out, rounds, bins, kvs, depths = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
who = [b.split(':')[0] for b in bins]
print('| KV | depth | ' + ' | '.join(f'{w} tg t/s' for w in who) + ' | KV B/token |')
print('|---|---|' + '---|' * len(who) + '---|')
for kv in kvs:
    for d in depths:
        cells, bpt = [], ''
        for w in who:
            v = []
            for k in range(1, rounds + 1):
                try:
                    j = json.load(open(f'{out}/raw/{w}-{kv}-d{d}-{k}.json'))
                except Exception:
                    continue
                for t in j.get('tests', []):
                    if t.get('avg_ts'):
                        v.append(float(t['avg_ts']))
                bpt = j.get('kv_bytes_per_token', bpt)
            cells.append(f'{statistics.median(v):.1f}' if v else '—')
        print(f'| {kv} | {d} | ' + ' | '.join(cells) + f' | {bpt} |')
PY
cat "$OUT/kvspeed.md"
tar czf "$OUT/raw.tar.gz" -C "$OUT" raw && rm -rf "$OUT/raw"
log done
