#!/usr/bin/env bash
# Dispatches per decoded token of one tern binary on this machine's GPU adapter (lavapipe in CI and
# here): the redesign check of issue 27 runs it with the old and the new binary and diffs the lines.
#   bash scripts/lavapipe-dispatches.sh TERN_BIN [OUT_FILE]
# Models: the default SmolLM2-135M .tern, and 2-layer random models of the BitNet and SmolLM2 (Q4_1)
# shapes made by scripts/gen_synth_gguf.py --tiny (packed by TERN_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
T=$1; OUTF=${2:-/dev/stdout}; D=${TMPDIR:-/tmp}/tern-dispatch-models; mkdir -p "$D"
[ -s "$D/tiny-bit.gguf" ] || python3 scripts/gen_synth_gguf.py "$D/tiny-bit.gguf" --shape bitnet --tiny >/dev/null
[ -s "$D/tiny-q41.gguf" ] || python3 scripts/gen_synth_gguf.py "$D/tiny-q41.gguf" --shape smollm --tiny --q4_1 >/dev/null
"$T" pack "$D/tiny-bit.gguf" -o "$D/tiny-bit.tern" >/dev/null
"$T" pack "$D/tiny-q41.gguf" -o "$D/tiny-q41.tern" >/dev/null
SMOL=$("$T" fetch-default 2>/dev/null | tail -1)
{
while read -r m extra; do
  # shellcheck disable=SC2086
  "$T" bench "$m" --device gpu -p 16 -n 8 -r 1 --json $extra 2>/dev/null \
    | python3 -c "import json,sys; j=json.load(sys.stdin); print('$(basename "$m") $extra'.strip(), '| dispatches/token', j['dispatches_per_token'])"
done <<LIST
$SMOL
$D/tiny-bit.tern
$D/tiny-q41.tern
$D/tiny-bit.tern --activations a4.8
$D/tiny-bit.tern --kv q4
$D/tiny-bit.tern --kv q8 --minicache on
LIST
} > "$OUTF"
