#!/usr/bin/env bash
# Branch h-a48q (issue 13): the a4.8 quantizers before/after on the device, one call.
#   bash scripts/device-a48q.sh kit BEFORE AFTER   HERE: xz the two stripped `tern` binaries and
#                                                  this script into $KIT (/work/main/.devkit-h-a48q)
#   bash .devkit-h-a48q/device-a48q.sh             on the device (carry .gl .devkit-h-a48q)
# The 2B4T-shaped random F16 GGUF (scripts/gen_synth_gguf.py --shape bitnet) packed once
# `--ternary 2bit --floats raw --activations a4.8`; each binary benches the same file as a4.8 and
# with `--activations a8`: `tern bench --device gpu --profile --json -p 512 -n 128 -r 2`, binaries
# alternating (before, after, after, before). Writes $OUT/summary.txt, $OUT/run.log and
# $OUT/raw.tar.gz (every JSON and stderr). GEN_ARGS=--tiny: a dry run with the tiny shape.
#   bash scripts/device-a48q.sh kit2 PARITY_BIN AFTER2   HERE: add the stripped parity test binary
#                                                  (cargo test --release -p tern-gpu --test parity
#                                                  --no-run) and a third `tern` (after2) to $KIT
#   CHECK=1 bash .devkit-h-a48q/device-a48q.sh     on the device: `parity_a48` on the GPU first,
#                                                  then the benches with after2 in place of after
set -uo pipefail
if [ "${1:-}" = kit ]; then
  KIT=${KIT:-/work/main/.devkit-h-a48q}; mkdir -p "$KIT"
  xz -6 -T2 -c "$2" > "$KIT/tern-before.xz"; xz -6 -T2 -c "$3" > "$KIT/tern-after.xz"
  cp "$0" "$KIT/device-a48q.sh"; ls -la "$KIT"; exit 0
fi
if [ "${1:-}" = kit2 ]; then
  KIT=${KIT:-/work/main/.devkit-h-a48q}; mkdir -p "$KIT"
  strip -o /tmp/parity-a48q "$2"; xz -6 -T2 -c /tmp/parity-a48q > "$KIT/parity.xz"
  xz -6 -T2 -c "$3" > "$KIT/tern-after2.xz"; cp "$0" "$KIT/device-a48q.sh"; ls -la "$KIT"; exit 0
fi
REPO=$PWD; KIT=$REPO/.devkit-h-a48q; O=${OUT:-/tmp/a48q-out}; M=/tmp/m48q; B=/tmp/a48q-bin
mkdir -p "$O/raw" "$M" "$B"
exec > >(tee -a "$O/run.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
. "$REPO/scripts/device-env.sh"; device_vulkan_env "$REPO"
log "GPU: $GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
for b in before after; do xz -dc "$KIT/tern-$b.xz" > "$B/$b" && chmod +x "$B/$b"; done
if [ "${CHECK:-0}" = 1 ]; then
  xz -dc "$KIT/tern-after2.xz" > "$B/after" && chmod +x "$B/after"
  xz -dc "$KIT/parity.xz" > "$B/parity" && chmod +x "$B/parity"
  log "parity_a48 on the GPU"
  (cd "$REPO" && TERN_REQUIRE_GPU=1 timeout 120 "$B/parity" parity_a48 --nocapture > "$O/parity_a48.log" 2>&1)
  log "parity_a48 rc $?: $(grep -c '^ok ' "$O/parity_a48.log") ok, $(grep -c '^FAIL' "$O/parity_a48.log") FAIL"
  grep '^FAIL' "$O/parity_a48.log" | head -20
fi
F16=$M/bitnet-f16.gguf; T=$M/bitnet-2bit-a4.8.tern
log "generate"; python3 "$REPO/scripts/gen_synth_gguf.py" "$F16" --shape bitnet ${GEN_ARGS:-} > "$O/raw/gen.log" 2>&1 || log "gen failed"
log "pack"; "$B/after" pack "$F16" -o "$T" --ternary 2bit --floats raw --activations a4.8 > "$O/raw/pack.log" 2>&1 || { log "pack failed"; tail -5 "$O/raw/pack.log"; }
rm -f "$F16"
run() { # bin acts i
  local f="$O/raw/$1-$2-$3.json"
  log "bench $1 $2 ($3)"
  timeout 60 "$B/$1" bench "$T" --device gpu --profile --json -p 512 -n 128 -r 2 --activations "$2" > "$f" 2> "$f.err" || { tail -3 "$f.err"; return; }
  python3 - "$f" "$1 $2 $3" <<'PY' | tee -a "$O/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
def fmt(p):
    return ' '.join(f"{k['kernel']}:{k['dispatches']}x{k['us']/max(k['dispatches'],1):.2f}" for k in p)
p = d.get('profile_us_per_token') or []
pp = d.get('profile_prefill_us') or []
print(sys.argv[2], [(t['test'], round(t['avg_ts'], 1), round(t.get('stddev_ts', 0), 1)) for t in d['tests']],
      'decode gpu us/token', round(sum(k['us'] for k in p)), 'prefill gpu us', round(sum(k['us'] for k in pp)))
print('  decode:', fmt(p))
print('  prefill:', fmt([k for k in pp if 'quant' in k['kernel'] or 'norm' in k['kernel']]))
PY
}
for i in 1 2; do
  order="before after"; [ $i = 2 ] && order="after before"
  for b in $order; do for a in a8 a4.8; do run $b $a $i; done; done
done
(cd "$O" && tar czf raw.tar.gz raw && rm -rf raw)
log done
