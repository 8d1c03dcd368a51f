#!/usr/bin/env bash
# Issue 28's fixed budget on the lent GPU, in ONE call: `tern plan` for the BitNet-2B4T shape at
# --max-memory $BUDGET, the runs that prove it (`tern bench -d <budget_context − 128>` under the
# same budget succeeds and its GPU peak is ≤ the budget) for the default KV format and for q3r
# (when this tern has it), and beside it the largest context llama.cpp fits in the same budget,
# from its own log's model + KV + compute buffer sizes (f16 and q4_0 KV, -fa 1).
#
#   HERE:          mkdir -p .devkit && strip -o .devkit/tern target/release/tern
#                  (and the llama.cpp kit as scripts/device-ab.sh says: .devkit/llama/{llama-src,vk-tools}.tar.xz)
#   ON THE DEVICE: bash scripts/device-plan.sh      (carry .gl and .devkit)
# Writes $OUT/plan.log (everything), $OUT/plan.md (the table), $OUT/raw.tar.gz.
# Environment: OUT=/tmp/plan-out  BUDGET=1G  TERN=.devkit/tern  MODEL_DIR=/tmp/ab-models (shared with
#              device-ab.sh: the 2B4T-shaped F16 GGUF is made there once)  PACK_ARGS= (extra
#              `tern pack` arguments)  FORMATS="default q3r"  TINY=0 (1: 2-layer model, dry run)
#              LLAMA_KIT=.devkit/llama  LLAMA_KV="f16 q4_0 q8_0"
# The bench runs `-p 0 -n 128 -r 1`: the session is depth + 128 positions = budget_context, the
# largest the plan says the budget holds (the training context, 4096 for 2B4T, caps `max_context`,
# not the memory: `budget_context` is the number to compare with llama.cpp, which does not cap).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/plan-out}; BUDGET=${BUDGET:-1G}; TERN=${TERN:-.devkit/tern}
M=${MODEL_DIR:-/tmp/ab-models}; FORMATS=${FORMATS:-default q3r}; TINY=${TINY:-0}
LLAMA_KIT=${LLAMA_KIT:-.devkit/llama}; LLAMA_KV=${LLAMA_KV:-f16 q4_0 q8_0}
mkdir -p "$OUT/raw" "$M"
exec > >(tee -a "$OUT/plan.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
budget_bytes=$(python3 -c "import sys;s=sys.argv[1].strip();m={'K':1<<10,'M':1<<20,'G':1<<30}.get(s[-1].upper(),1);print(int(float(s[:-1] if s[-1].isalpha() else s)*m))" "$BUDGET")

if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
done
log "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo none); budget $BUDGET = $budget_bytes bytes"

tiny=(); [ "$TINY" = 1 ] && tiny=(--tiny)
src=$M/bitnet-f16.gguf; tern_model=$M/bitnet.tern
[ -s "$src" ] || { log "generating $src"; python3 scripts/gen_synth_gguf.py "$src" --shape bitnet "${tiny[@]}" || exit 1; }
[ -s "$tern_model" ] || { log "packing"; "$TERN" pack "$src" -o "$tern_model" ${PACK_ARGS:-} > "$OUT/raw/pack.log" 2>&1 || { tail -5 "$OUT/raw/pack.log"; exit 1; }; }

# 1. The plan.
log "tern plan $tern_model --max-memory $BUDGET --device gpu --json"
"$TERN" plan "$tern_model" --max-memory "$BUDGET" --device gpu --json > "$OUT/raw/plan.json" 2> "$OUT/raw/plan.err" \
  || { log "tern plan FAILED"; cat "$OUT/raw/plan.err"; }
cat "$OUT/raw/plan.json"
"$TERN" plan "$tern_model" --max-memory "$BUDGET" --device gpu || true

# 2. The proof: bench at budget_context − 128 (+128 decoded = budget_context positions) per format.
default_kv=$("$TERN" bench --help | grep -A3 -- '--kv <KV>' | grep -o 'default: [a-z0-9]*' | head -1 | cut -d' ' -f2)
for fmt in $FORMATS; do
  kv=$fmt; [ "$fmt" = default ] && kv=${default_kv:-q8}
  ctx=$(python3 -c "import json,sys;j=json.load(open(sys.argv[1]));c=[c for c in j['configs'] if c['kv']==sys.argv[2]];print(c[0]['budget_context'] if c else -1)" "$OUT/raw/plan.json" "$kv" 2>/dev/null || echo -1)
  if [ "$ctx" -lt 0 ]; then log "kv $kv: not in this tern's plan (format absent)"; continue; fi
  if [ "$ctx" -le 192 ]; then log "kv $kv: budget_context $ctx too small to bench"; continue; fi
  d=$((ctx - 128))
  log "tern bench --kv $kv -d $d -p 0 -n 128 --max-memory $BUDGET (budget_context $ctx)"
  timeout 300 "$TERN" bench "$tern_model" --device gpu --kv "$kv" -d "$d" -p 0 -n 128 -r 1 --max-memory "$BUDGET" --json \
    > "$OUT/raw/bench-$kv.json" 2> "$OUT/raw/bench-$kv.err"; rc=$?
  log "rc $rc"; tail -3 "$OUT/raw/bench-$kv.err"
  python3 - "$OUT/raw/bench-$kv.json" "$budget_bytes" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1])); m = j['memory']; b = int(sys.argv[2])
print(f"  peak {m.get('gpu_allocated_peak')} B of {b} B: within = {m.get('gpu_allocated_peak', b + 1) <= b}; "
      f"kv {m.get('kv')} B, scratch {m.get('scratch')} B, weights {m.get('weights')} B; "
      f"tg128 {[t['avg_ts'] for t in j['tests']]} t/s")
PY
  # One position more than the plan allows is refused before loading (typed, naming the plan).
  timeout 120 "$TERN" bench "$tern_model" --device gpu --kv "$kv" -d "$((d + 1))" -p 0 -n 128 -r 1 --max-memory "$BUDGET" \
    > /dev/null 2> "$OUT/raw/bench-$kv-over.err"; log "one more position: rc $? ($(head -c 300 "$OUT/raw/bench-$kv-over.err"))"
done

# 3. llama.cpp: the largest context whose model + KV + compute buffers (its own log) fit the budget.
if [ -s "$LLAMA_KIT/llama-src.tar.xz" ] && [ -s "$LLAMA_KIT/vk-tools.tar.xz" ]; then
  [ -x "$LLAMA_KIT/bin/llama-bench" ] || { log "building llama.cpp"; bash scripts/llamacpp-device-kit.sh build "$LLAMA_KIT" > "$OUT/llama-build.log" 2>&1 || tail -5 "$OUT/llama-build.log"; }
  LB=$LLAMA_KIT/bin; g=$M/bitnet-tq2_0.gguf
  [ -s "$g" ] || "$LB/llama-quantize" "$src" "$g" TQ2_0 "$(nproc)" > "$OUT/raw/quantize.log" 2>&1
  # Buffer sizes (MiB, device buffers only) of a context of C positions: llama-bench -v logs them.
  sizes() { # kv C -> "model kv compute" MiB
    timeout 120 "$LB/llama-bench" -m "$g" -ngl 99 -fa 1 -ctk "$1" -ctv "$1" -p 0 -n 1 -d "$(( $2 - 1 ))" -r 1 -v \
      > "$OUT/raw/llama-$1-$2.log" 2>&1
    python3 - "$OUT/raw/llama-$1-$2.log" <<'PY'
import re, sys
t = open(sys.argv[1], errors='replace').read()
def tot(kind):
    return sum(float(x) for dev, x in re.findall(rf"(\S+) {kind} buffer size =\s*([\d.]+) MiB", t) if 'CPU' not in dev and 'Host' not in dev)
print(f"{tot('model'):.2f} {tot('KV'):.2f} {tot('compute'):.2f}")
PY
  }
  budget_mib=$(python3 -c "print($budget_bytes/1048576)")
  for kv in $LLAMA_KV; do
    read -r m1 k1 c1 <<< "$(sizes "$kv" 4096)"; read -r m2 k2 c2 <<< "$(sizes "$kv" 8192)"
    est=$(python3 -c "
m,k1,k2,c=$m2,$k1,$k2,max($c1,$c2); per=(k2-k1)/4096
print(int(($budget_mib-m-c-(k1-per*4096))/per)//256*256 if per>0 else 0)")
    best=0
    for C in $((est - 512)) $((est - 256)) "$est" $((est + 256)); do
      [ "$C" -gt 0 ] || continue
      read -r m k c <<< "$(sizes "$kv" "$C")"
      fit=$(python3 -c "print(int($m+$k+$c <= $budget_mib))")
      log "llama.cpp $kv -c $C: model $m + KV $k + compute $c MiB (fits $BUDGET: $fit)"
      [ "$fit" = 1 ] && best=$C
    done
    log "llama.cpp $kv: largest context in $BUDGET = $best"
    echo "$kv $best" >> "$OUT/raw/llama-best.txt"
  done
else
  log "no llama.cpp kit in $LLAMA_KIT: skipping the llama.cpp side"
fi

python3 - "$OUT" "$budget_bytes" > "$OUT/plan.md" <<'PY'
import json, sys, os
out, b = sys.argv[1], int(sys.argv[2])
try:
    p = json.load(open(f"{out}/raw/plan.json"))
except Exception as e:
    print(f"no plan: {e}"); sys.exit()
print(f"budget {b} B; weights {p['weights_bytes']} B; scratch {p['scratch_bytes']} B; reserve {p.get('reserve_bytes')} B; {p.get('device')}\n")
print("| kv | bytes/token | max_context (cap " + str(p.get('context_cap')) + ") | budget_context | bench -d budget_context−128: peak ≤ budget |")
print("|---|---|---|---|---|")
for c in p['configs']:
    f = f"{out}/raw/bench-{c['kv']}.json"; r = ''
    if os.path.exists(f):
        try:
            m = json.load(open(f))['memory']; r = f"{m.get('gpu_allocated_peak')} B ({m.get('gpu_allocated_peak', b + 1) <= b})"
        except Exception:
            r = 'failed'
    print(f"| {c['kv']} | {c['kv_bytes_per_token']} | {c['max_context']} | {c.get('budget_context')} | {r} |")
f = f"{out}/raw/llama-best.txt"
if os.path.exists(f):
    print("\n| llama.cpp KV (-fa 1) | largest context in the budget |\n|---|---|")
    for line in open(f):
        k, n = line.split(); print(f"| {k} | {n} |")
PY
cat "$OUT/plan.md"
tar czf "$OUT/raw.tar.gz" -C "$OUT" raw && rm -rf "$OUT/raw"
log done
