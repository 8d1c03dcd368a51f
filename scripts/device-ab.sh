#!/usr/bin/env bash
# A/B of two tern binaries on the lent GPU in ONE call (same machine, same models, interleaved
# rounds): a redesign or refactor must not slow tern down (issue 27: new/old ≥ 0.98 on pp512 and
# tg128). Models are random-weight files of real shapes made on the device (speed does not depend on
# the values): the BitNet-2B4T shape (F16 → `tern pack` ternarizes to 2-bit, as TQ2_0) and the
# SmolLM2-135M shape in Q4_1 with Q8_0 embeddings (as the PyPI GGUF; `gen_synth_gguf.py --q4_1`).
#
#   HERE:          mkdir -p .devkit/ab && strip -o .devkit/ab/tern-old OLD && strip -o .devkit/ab/tern-new NEW
#   ON THE DEVICE: bash scripts/device-ab.sh [.devkit/ab/tern-old .devkit/ab/tern-new]
#                  (carry .gl and .devkit; the .gl Vulkan loader debs as device/README.md says)
# Writes $OUT/ab.log (everything), $OUT/ab.md (the table), $OUT/raw.tar.gz (each run's JSON).
# Environment: OUT=/tmp/ab-out  ROUNDS=3  R=3 (llama-bench-style repetitions per run)  SHAPES="bitnet smollm"
#              DEPTH=0 (tokens in the cache before each test)  TINY=0 (1: 2-layer models, dry runs)
#              LLAMA_KIT=.devkit/llama: when it holds llama-src.tar.xz + vk-tools.tar.xz
#              (../shared/tools/llamacpp-device-kit.sh kit), llama.cpp is built on the device with a
#              current glslc and llama-bench (-fa 1) runs the same shapes in the same call, as context
#              (TQ2_0 quantized from the same F16 file; the same Q4_1 file).
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:-.devkit/ab/tern-old}; NEW=${2:-.devkit/ab/tern-new}
OUT=${OUT:-/tmp/ab-out}; ROUNDS=${ROUNDS:-3}; R=${R:-3}; SHAPES=${SHAPES:-bitnet smollm}
DEPTH=${DEPTH:-0}; TINY=${TINY:-0}; M=${MODEL_DIR:-/tmp/ab-models}
mkdir -p "$OUT" "$M" "$OUT/raw"
exec > >(tee -a "$OUT/ab.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }

if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
done
log "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo none)"
log "old: $OLD ($(md5sum < "$OLD" | cut -c1-8)), new: $NEW ($(md5sum < "$NEW" | cut -c1-8))"

tiny=(); [ "$TINY" = 1 ] && tiny=(--tiny)
for shape in $SHAPES; do
  case $shape in
    bitnet) src=$M/bitnet-f16.gguf; args=(--shape bitnet) ;;
    smollm) src=$M/smollm-q4_1.gguf; args=(--shape smollm --q4_1) ;;
    *) log "unknown shape $shape"; continue ;;
  esac
  [ -s "$src" ] || { log "generating $src"; python3 scripts/gen_synth_gguf.py "$src" "${args[@]}" "${tiny[@]}" || exit 1; }
  # Packed by the OLD binary: both must read it (the .tern format is unchanged by a refactor).
  [ -s "$M/$shape.tern" ] || { log "packing $shape"; "$OLD" pack "$src" -o "$M/$shape.tern" > "$OUT/raw/pack-$shape.log" 2>&1 || { tail -5 "$OUT/raw/pack-$shape.log"; exit 1; }; }
done

# Interleaved: round k runs old then new for odd k, new then old for even k (drift cancels).
for k in $(seq 1 "$ROUNDS"); do
  order="old new"; [ $((k % 2)) = 0 ] && order="new old"
  for shape in $SHAPES; do
    for who in $order; do
      bin=$OLD; [ "$who" = new ] && bin=$NEW
      f=$OUT/raw/$shape-$who-$k.json
      log "round $k $shape $who"
      timeout 200 "$bin" bench "$M/$shape.tern" --device gpu -p 512 -n 128 -r "$R" -d "$DEPTH" --json > "$f" 2> "$f.err" \
        || { log "FAILED (rc $?)"; tail -5 "$f.err"; }
    done
  done
done

LLAMA_KIT=${LLAMA_KIT:-.devkit/llama}
# llama.cpp after the A/B (the A/B is what must finish inside the call).
if [ "${SECONDS}" -lt "${LLAMA_BEFORE_S:-330}" ] && [ -s "$LLAMA_KIT/llama-src.tar.xz" ] && [ -s "$LLAMA_KIT/vk-tools.tar.xz" ]; then
  log "building llama.cpp on the device (current glslc)"
  # (built once per machine: a second call on a warm machine reuses the binaries)
  if [ -x "$LLAMA_KIT/bin/llama-bench" ] || bash "$(dirname "$0")/llamacpp-device-kit.sh" build "$LLAMA_KIT" > "$OUT/llama-build.log" 2>&1; then
    "$LLAMA_KIT/bin/llama-bench" --list-devices 2>&1 | grep -iE "int dot|matrix cores" | head -2
    grep -iE "int dot|matrix cores" "$OUT/llama-build.log" | head -3
    LB=$LLAMA_KIT/bin
    for shape in $SHAPES; do
      case $shape in
        bitnet) g=$M/bitnet-tq2_0.gguf; [ -s "$g" ] || "$LB/llama-quantize" "$M/bitnet-f16.gguf" "$g" TQ2_0 "$(nproc)" > "$OUT/raw/quantize.log" 2>&1 ;;
        smollm) g=$M/smollm-q4_1.gguf ;;
      esac
      log "llama-bench $shape ($(basename "$g"), -fa 1)"
      timeout 240 "$LB/llama-bench" -m "$g" -ngl 99 -fa 1 -p 512 -n 128 -r "$R" -d "$DEPTH" -o md 2>&1 | tee "$OUT/raw/llama-$shape.md" | grep -E '^\|' || true
    done
  else
    log "llama.cpp build failed:"; tail -5 "$OUT/llama-build.log"
  fi
fi

python3 - "$OUT" "$ROUNDS" "$SHAPES" > "$OUT/ab.md" <<'PY'
import json, sys, glob, statistics, os
out, rounds, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def rows(path):
    try:
        j = json.load(open(path))
    except Exception:
        return {}
    res = {}
    for t in (j.get('tests') or j.get('results') or (j if isinstance(j, list) else [])):
        name = t.get('test') or t.get('name')
        ts = t.get('avg_ts') or t.get('tokens_per_second') or t.get('t_s')
        if name and ts:
            res[name] = float(ts)
    if j.get('dispatches_per_token') is not None:
        res['dispatches/token'] = float(j['dispatches_per_token'])
    return res
print('| shape | test | old t/s (median of rounds) | new t/s | new / old | per round (old → new) |')
print('|---|---|---|---|---|---|')
for shape in shapes:
    per = {}
    for k in range(1, rounds + 1):
        o, n = rows(f'{out}/raw/{shape}-old-{k}.json'), rows(f'{out}/raw/{shape}-new-{k}.json')
        for test in sorted(set(o) & set(n)):
            per.setdefault(test, []).append((o[test], n[test]))
    for test, v in per.items():
        mo, mn = statistics.median(a for a, _ in v), statistics.median(b for _, b in v)
        print(f"| {shape} | {test} | {mo:.1f} | {mn:.1f} | {mn / mo:.3f} | {', '.join(f'{a:.1f} → {b:.1f}' for a, b in v)} |")
PY
cat "$OUT/ab.md"
tar czf "$OUT/raw.tar.gz" -C "$OUT" raw && rm -rf "$OUT/raw"
log done
