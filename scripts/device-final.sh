#!/usr/bin/env bash
# The closing tables of issues 13, 14 and 15 in two back-to-back device calls (the second finds the
# first's machine warm: models, binaries and the first half of SmolLM2 stay in /tmp/fin).
#
#   bash scripts/device-final.sh kit   HERE: build .devkit-fin/ (xz'd stripped tern + gpu_bench,
#                                      llama kit, GPL-3, SmolLM2 part 1) and .devkit-fin2/ (part 2)
#   bash scripts/device-final.sh a     device call 1 (carry .gl .devkit-fin): issue 15's table
#                                      (scripts/device-bench.sh: 2B4T TQ2_0 / TQ1_0, SmolLM2-shaped
#                                      Q4_1, llama-bench in the same call), a4.8 vs A8 (issue 13),
#                                      greedy lookahead and the decode GEMV on/off, the head kept
#                                      NeuZip-compressed (lossless, lossy-3: memory + tg128)
#   bash scripts/device-final.sh c|d   a fresh machine (carry .gl .devkit-fin3): c = fused-norm A/B
#                                      (A8, a4.8) + the NeuZip kernel bench; d = KV decode depths
#   bash scripts/device-final.sh e|f   a fresh machine (carry .gl .devkit-fin3): e = base-3 A/B of
#                                      two binaries; f = the ggml float-norm prologue A/B (SmolLM2)
#   bash scripts/device-final.sh g     after a, same call: a4.8 fused-prologue A/B (issue 13)
#   bash scripts/device-final.sh i     after a, same call: prefill A/B (GEMM tiles, prefill
#                                      attention), llama-bench pp512 in each round
#   bash scripts/device-final.sh kit3  HERE: only .devkit-fin3 (tern, gpu_bench, llama kit)
#   bash scripts/device-final.sh h     a fresh machine (carry .gl .devkit-fin3): prefill A/B (the
#                                      query-tiled attention), llama-bench pp512 in each round
#   bash scripts/device-final.sh b     device call 2 (carry .devkit-fin2 only): SmolLM2 GPU
#                                      perplexity in 10 KV modes and the KV decode depths
#                                      (scripts/device-kv.sh), the NeuZip kernel bench
# Why two calls: a call carries at most 64 MiB and SmolLM2 is 98 MB (90 MB xz'd).
# Everything a call writes is packed into $OUT/all-<phase>.tar.gz + $OUT/summary-<phase>.txt
# (the device returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
PHASE=${1:-}
SMOL=${SMOL:-$HOME/.cache/tern/SmolLM2-135M-Instruct.tern}
SPLIT=40000000
if [ "$PHASE" = kit ]; then
  set -e
  cargo build --release --bin tern -p tern-cli
  cargo build --release -p tern-gpu --example gpu_bench
  rm -rf .devkit-fin .devkit-fin2; mkdir -p .devkit-fin .devkit-fin2
  strip -o /tmp/tern-fin target/release/tern; strip -o /tmp/gpu_bench-fin target/release/examples/gpu_bench
  xz -9 -c /tmp/tern-fin > .devkit-fin/tern.xz; xz -9 -c /tmp/gpu_bench-fin > .devkit-fin2/gpu_bench.xz
  cp .devkit/llama-vulkan.tar.xz /usr/share/common-licenses/GPL-3 .devkit-fin/
  # SmolLM2 xz'd (98 → 90 MB) and split across the two calls
  xz -6 -T2 -c "$SMOL" > /tmp/smol-fin.xz
  head -c $SPLIT /tmp/smol-fin.xz > .devkit-fin/smol.part1
  tail -c +$((SPLIT + 1)) /tmp/smol-fin.xz > .devkit-fin2/smol.part2
  md5sum < "$SMOL" | cut -c1-32 > .devkit-fin2/smol.md5
  # phases c and d: self-contained (a fresh machine), no SmolLM2
  rm -rf .devkit-fin3; mkdir -p .devkit-fin3
  cp .devkit-fin/tern.xz .devkit-fin2/gpu_bench.xz .devkit/llama-vulkan.tar.xz .devkit-fin3/
  du -cb .devkit-fin .devkit-fin2 .devkit-fin3 .gl; exit 0
fi
if [ "$PHASE" = kit3 ]; then
  # only the self-contained kit of phases c-f and h (no SmolLM2): tern, gpu_bench, llama.cpp
  set -e
  cargo build --release --bin tern -p tern-cli
  cargo build --release -p tern-gpu --example gpu_bench
  rm -rf .devkit-fin3; mkdir -p .devkit-fin3
  strip -o /tmp/tern-fin target/release/tern; strip -o /tmp/gpu_bench-fin target/release/examples/gpu_bench
  xz -9 -T2 -c /tmp/tern-fin > .devkit-fin3/tern.xz; xz -9 -T2 -c /tmp/gpu_bench-fin > .devkit-fin3/gpu_bench.xz
  cp .devkit/llama-vulkan.tar.xz .devkit-fin3/
  du -cb .devkit-fin3 .gl; exit 0
fi
. scripts/device-env.sh; device_vulkan_env "$PWD"
F=/tmp/fin; O=${OUT:-/tmp/fin-out}; M=/tmp/m; mkdir -p "$F/kit" "$O" "$M"
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$O/final-$PHASE.log"; }
pack_out() {
  (cd "$O" && tar czf "/tmp/all-$PHASE.tar.gz" --exclude 'all-*.tar.gz' . && mv "/tmp/all-$PHASE.tar.gz" .)
  log "packed $O/all-$PHASE.tar.gz"
}
tb() { # tag model timeout extra... (environment before the call applies)
  local tag=$1 m=$2 t=$3; shift 3
  log "tern bench $tag $*"
  timeout "$t" "$F/kit/tern" bench "$m" --device gpu --json "$@" > "$O/tern-$tag.json" 2> "$O/tern-$tag.err"
  python3 - "$O/tern-$tag.json" "$tag" <<'PY' | tee -a "$O/summary-$PHASE.txt" || tail -3 "$O/tern-$tag.err"
import json, sys
d = json.load(open(sys.argv[1])); m = d.get('memory', {})
print(sys.argv[2], [(t['test'], t.get('depth', 0), round(t['avg_ts'], 1)) for t in d['tests']],
      'dispatches', d.get('dispatches_per_token'), 'peak', m.get('gpu_allocated_peak'),
      'file', d.get('file_bytes'), 'act', d.get('activations', {}).get('scheme'),
      'sparsity', d.get('activation_sparsity'))
PY
}

# llama-bench pp512 of GGUF $1 (round $2) into the summary (phases h and i)
llama_pp() {
  timeout 60 /tmp/llama/bin/llama-bench -m "$1" -ngl 99 -p 512 -n 0 -r 3 -o json > "$O/llama-pp-r$2.json" 2> "$O/llama-pp-r$2.err"
  python3 -c "
import json,sys
for e in json.load(open(sys.argv[1])): print('llama tq2_0 pp r' + sys.argv[2], e['n_prompt'], round(e['avg_ts'],1), round(e['stddev_ts'],1))" "$O/llama-pp-r$2.json" "$2" | tee -a "$O/summary-$PHASE.txt"
}

if [ "$PHASE" = a ]; then
  log "unpack"
  xz -dc .devkit-fin/tern.xz > "$F/kit/tern"
  chmod +x "$F/kit/tern"
  cp .devkit-fin/llama-vulkan.tar.xz "$F/kit/"; cp .devkit-fin/GPL-3 .devkit-fin/smol.part1 "$F/"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$O/gpu.txt" 2>&1
  log "GPU: $(cat "$O/gpu.txt")"
  # issue 15's table: 2-bit + q6_K head (tg128, pp512, tg128 at depth 4096), base-3 from TQ1_0,
  # SmolLM2-shaped Q4_1; llama-bench on the same files in this call
  OUT=$O/bench KIT=$F/kit MODEL_DIR=$M R=2 DEPTH=4096 BUDGET_S=330 HARD_S=380 \
    LLAMA_FILES="bitnet-tq2_0 bitnet-tq1_0 smollm-q4_1" DEPTH_FILES="bitnet-tq2_0" \
    TERN_PACKS="bitnet-tq2_0:2bit:raw bitnet-tq1_0:base3:raw smollm-q4_1:2bit:raw" \
    TERN_DEPTH_PACKS="bitnet-tq2_0:2bit:raw" bash scripts/device-bench.sh all > "$O/device-bench.out" 2>&1
  cp "$O/bench/results.md" "$O/summary-$PHASE.txt" 2>/dev/null
  P=$(ls "$M"/tern-*/bitnet-tq2_0--2bit-raw.tern 2>/dev/null | head -1)
  if [ -n "$P" ]; then
    # issue 13: a4.8 vs A8 over the same weights
    tb a8 "$P" 60 -p 512 -n 128 -r 2 --activations a8
    tb a48 "$P" 60 -p 512 -n 128 -r 2 --activations a4.8
    # issue 15: greedy steps run ahead (default) against step by step, same binary and weights
    TERN_GPU_LOOKAHEAD=0 tb a8-nolookahead "$P" 60 -p 0 -n 128 -r 2 --activations a8
    TERN_GPU_GEMV=plain tb a8-plaingemv "$P" 60 -p 0 -n 128 -r 2 --activations a8
    S=$(ls "$M"/tern-*/smollm-q4_1--2bit-raw.tern 2>/dev/null | head -1)
    [ -n "$S" ] && TERN_GPU_LOOKAHEAD=0 tb smol-nolookahead "$S" 60 -p 0 -n 128 -r 2
    tb a8-profile "$P" 60 -p 512 -n 16 -r 1 --profile
    tb a48-profile "$P" 60 -p 0 -n 16 -r 1 --profile --activations a4.8
  fi
  # issue 15: the head kept NeuZip-compressed (lossless, lossy-3) under the smallest budget
  E=$M/bitnet-tq2_0-f16emb.gguf
  if [ -s "$E" ]; then
    for fl in neuzip neuzip-lossy3; do
      "$F/kit/tern" pack "$E" -o "$M/nz-$fl.tern" --floats "$fl" > "$O/pack-nz-$fl.log" 2>&1 || { log "pack $fl failed"; continue; }
      MIN=$("$F/kit/tern" bench "$M/nz-$fl.tern" --device gpu --max-memory 1K -p 0 -n 1 -r 1 2>&1 | grep -o 'at least [0-9]*' | head -1 | grep -o '[0-9]*')
      log "$fl: smallest budget ${MIN:-?}"
      [ -n "$MIN" ] && tb "nz-$fl-kept" "$M/nz-$fl.tern" 90 -p 0 -n 128 -r 2 --max-memory "$MIN"
      tb "nz-$fl-decoded" "$M/nz-$fl.tern" 90 -p 0 -n 128 -r 2
    done
    timeout 60 /tmp/llama/bin/llama-bench -m "$E" -ngl 99 -p 0 -n 128 -r 2 -o json > "$O/llama-f16emb.json" 2> "$O/llama-f16emb.err"
    python3 -c "
import json,sys
for e in json.load(open(sys.argv[1])): print('llama tq2_0 f16 emb', e['n_gen'], round(e['avg_ts'],1))" "$O/llama-f16emb.json" | tee -a "$O/summary-$PHASE.txt"
  fi
  log "done a"
  pack_out; exit 0
fi

if [ "$PHASE" = b ]; then
  cat "$F/smol.part1" .devkit-fin2/smol.part2 | xz -dc > "$F/SmolLM2-135M-Instruct.tern"
  xz -dc .devkit-fin2/gpu_bench.xz > "$F/gpu_bench"; chmod +x "$F/gpu_bench"
  got=$(md5sum < "$F/SmolLM2-135M-Instruct.tern" | cut -c1-32)
  log "SmolLM2 reassembled: md5 $got (want $(cat .devkit-fin2/smol.md5))"
  log "gpu_bench --only neuzip"
  timeout 150 "$F/gpu_bench" --only neuzip > "$O/gpu_bench_neuzip.json" 2> "$O/gpu_bench_neuzip.err"
  log "gpu_bench rc $?"
  OUT=$O/kv KIT=$F/kit MODEL_DIR=$M LLAMA_KIT=$F/kit/llama-vulkan.tar.xz HARD_S=440 \
    STEPS="ppl tern llama" DEPTHS="0 4096" LATE_DEPTHS="16384" R=2 \
    PPL_MODES="f16 q8 q4 q3 q2 a4 a3 f16mc q4mc q3mc q4w256" \
    PPL_MODEL=$F/SmolLM2-135M-Instruct.tern PPL_TEXT=$F/GPL-3 \
    bash scripts/device-kv.sh > "$O/device-kv.out" 2>&1
  { cat "$O/kv/kv-results.md" 2>/dev/null; grep -h "ppl\|perplexity" "$O/kv/device-kv.log" 2>/dev/null | tail -30; } >> "$O/summary-$PHASE.txt"
  log "done b"
  pack_out; exit 0
fi
# Phases c and d find a fresh machine (carry .gl .devkit-fin3): c = the fused norm prologue A/B
# for A8 and a4.8 (TERN_GPU_FUSE_NORM modes, interleaved, two rounds) on the 2B4T TQ2_0 pack and
# the NeuZip kernel bench; d = the KV decode depths (scripts/device-kv.sh, no perplexity).
if [ "$PHASE" = c ] || [ "$PHASE" = d ]; then
  xz -dc .devkit-fin3/tern.xz > "$F/kit/tern"; chmod +x "$F/kit/tern"
  cp .devkit-fin3/llama-vulkan.tar.xz "$F/kit/"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$O/gpu.txt" 2>&1
  log "GPU: $(cat "$O/gpu.txt")"
fi
if [ "$PHASE" = c ]; then
  xz -dc .devkit-fin3/gpu_bench.xz > "$F/gpu_bench"; chmod +x "$F/gpu_bench"
  mkdir -p /tmp/llama; tar xJf "$F/kit/llama-vulkan.tar.xz" -C /tmp/llama
  python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet > "$O/gen.log" 2>&1
  /tmp/llama/bin/llama-quantize "$M/bitnet-f16.gguf" "$M/bitnet-tq2_0.gguf" TQ2_0 8 > "$O/quant.log" 2>&1
  P=$M/tq2.tern
  "$F/kit/tern" pack "$M/bitnet-tq2_0.gguf" -o "$P" > "$O/pack.log" 2>&1 || log "pack failed"
  log "model ready"
  for round in 1 2; do
    for m in a8:default a8:0 a48:default a48:0 a48:qkv a48:all; do
      act=${m%%:*}; mode=${m#*:}; a=$([ "$act" = a48 ] && echo a4.8 || echo a8)
      if [ "$mode" = default ]; then
        tb "$act-$mode-r$round" "$P" 60 -p 0 -n 128 -r 3 --activations "$a"
      else
        TERN_GPU_FUSE_NORM=$mode tb "$act-$mode-r$round" "$P" 60 -p 0 -n 128 -r 3 --activations "$a"
      fi
    done
  done
  tb a48-default-pp "$P" 60 -p 512 -n 16 -r 2 --activations a4.8
  tb a8-default-pp "$P" 60 -p 512 -n 16 -r 2 --activations a8
  tb a48-default-prof "$P" 60 -p 0 -n 16 -r 1 --profile --activations a4.8
  tb a8-default-prof "$P" 60 -p 0 -n 16 -r 1 --profile --activations a8
  log "gpu_bench --only neuzip"
  timeout 150 "$F/gpu_bench" --only neuzip > "$O/gpu_bench_neuzip.json" 2> "$O/gpu_bench_neuzip.err"
  log "gpu_bench rc $?"
  log "done c"
  pack_out; exit 0
fi
if [ "$PHASE" = d ]; then
  OUT=$O/kv KIT=$F/kit MODEL_DIR=$M LLAMA_KIT=$F/kit/llama-vulkan.tar.xz HARD_S=500 \
    STEPS="tern llama" DEPTHS="0 4096" LATE_DEPTHS="16384" R=2 \
    bash scripts/device-kv.sh > "$O/device-kv.out" 2>&1
  cat "$O/kv/kv-results.md" >> "$O/summary-$PHASE.txt" 2>/dev/null
  log "done d"
  pack_out; exit 0
fi
# Phase e (a fresh machine, carry .gl .devkit-fin3 with tern-new.xz beside tern.xz): base-3 A/B
# of two tern binaries on the 2B4T TQ1_0 import beside llama-bench TQ1_0, interleaved.
if [ "$PHASE" = e ]; then
  xz -dc .devkit-fin3/tern.xz > "$F/kit/tern-old"; xz -dc .devkit-fin3/tern-new.xz > "$F/kit/tern"
  chmod +x "$F/kit/tern" "$F/kit/tern-old"
  mkdir -p /tmp/llama; tar xJf .devkit-fin3/llama-vulkan.tar.xz -C /tmp/llama
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$O/gpu.txt" 2>&1
  log "GPU: $(cat "$O/gpu.txt")"
  python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet > "$O/gen.log" 2>&1
  /tmp/llama/bin/llama-quantize "$M/bitnet-f16.gguf" "$M/bitnet-tq1_0.gguf" TQ1_0 8 > "$O/quant.log" 2>&1
  "$F/kit/tern" pack "$M/bitnet-tq1_0.gguf" -o "$M/b3.tern" --ternary base3 --floats raw > "$O/pack.log" 2>&1 || log "pack failed"
  for round in 1 2; do
    log "llama-bench TQ1_0 round $round"
    timeout 90 /tmp/llama/bin/llama-bench -m "$M/bitnet-tq1_0.gguf" -ngl 99 -p 0 -n 128 -r 3 -o json > "$O/llama-tq1_0-r$round.json" 2> "$O/llama-tq1_0-r$round.err"
    python3 -c "
import json,sys
for e in json.load(open(sys.argv[1])): print('llama tq1_0 r$round', e['n_gen'], round(e['avg_ts'],1), round(e['stddev_ts'],1))" "$O/llama-tq1_0-r$round.json" | tee -a "$O/summary-$PHASE.txt"
    tb "base3-new-r$round" "$M/b3.tern" 60 -p 0 -n 128 -r 3
    cp "$F/kit/tern" "$F/kit/tern-new"; cp "$F/kit/tern-old" "$F/kit/tern"
    tb "base3-old-r$round" "$M/b3.tern" 60 -p 0 -n 128 -r 3
    cp "$F/kit/tern-new" "$F/kit/tern"
  done
  tb base3-new-prof "$M/b3.tern" 60 -p 0 -n 16 -r 1 --profile
  log "done e"
  pack_out; exit 0
fi
# Phase f (a fresh machine, carry .gl .devkit-fin3): the ggml GEMVs' fused float-norm prologue
# A/B (TERN_GPU_FUSE_FLOAT_NORM=0 against the default) on the SmolLM2-shaped Q4_1 model (Q8_0
# tied head, the real SmolLM2's types) beside llama-bench on the same GGUF, interleaved, two rounds.
if [ "$PHASE" = f ]; then
  xz -dc .devkit-fin3/tern.xz > "$F/kit/tern"; chmod +x "$F/kit/tern"
  mkdir -p /tmp/llama; tar xJf .devkit-fin3/llama-vulkan.tar.xz -C /tmp/llama
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$O/gpu.txt" 2>&1
  log "GPU: $(cat "$O/gpu.txt")"
  python3 scripts/gen_synth_gguf.py "$M/smollm-f16.gguf" --shape smollm > "$O/gen.log" 2>&1
  /tmp/llama/bin/llama-quantize --token-embedding-type q8_0 "$M/smollm-f16.gguf" "$M/smollm-q4_1.gguf" Q4_1 8 > "$O/quant.log" 2>&1
  S=$M/smol.tern
  "$F/kit/tern" pack "$M/smollm-q4_1.gguf" -o "$S" --floats raw > "$O/pack.log" 2>&1 || log "pack failed"
  for round in 1 2; do
    log "llama-bench SmolLM2 Q4_1 round $round"
    timeout 90 /tmp/llama/bin/llama-bench -m "$M/smollm-q4_1.gguf" -ngl 99 -p 512 -n 128 -r 3 -o json > "$O/llama-smol-r$round.json" 2> "$O/llama-smol-r$round.err"
    python3 -c "
import json,sys
for e in json.load(open(sys.argv[1])): print('llama smollm q4_1 r$round', e['n_prompt'], e['n_gen'], round(e['avg_ts'],1), round(e['stddev_ts'],1))" "$O/llama-smol-r$round.json" | tee -a "$O/summary-$PHASE.txt"
    tb "smol-fused-r$round" "$S" 60 -p 512 -n 128 -r 3
    TERN_GPU_FUSE_FLOAT_NORM=0 tb "smol-unfused-r$round" "$S" 60 -p 512 -n 128 -r 3
    TERN_GPU_ATTN_SHORT=0 tb "smol-fused-split-r$round" "$S" 60 -p 0 -n 128 -r 3
  done
  tb smol-fused-prof "$S" 60 -p 0 -n 16 -r 1 --profile
  TERN_GPU_FUSE_FLOAT_NORM=0 tb smol-unfused-prof "$S" 60 -p 0 -n 16 -r 1 --profile
  log "done f"
  pack_out; exit 0
fi
# Phase g (right after phase a, on its warm machine: the 2B4T TQ2_0 pack and GGUF phase a made):
# issue 13's A/B of a4.8's fused prologues, interleaved over two rounds with llama-bench TQ2_0 in
# each: a4.8 default (every norm fused, the TopK input included), `notopk` (TopK as its own pass +
# the unfused o-projection), `0` (nothing fused), A8 default; then per-kernel profiles.
if [ "$PHASE" = g ]; then
  P=$(ls "$M"/tern-*/bitnet-tq2_0--2bit-raw.tern 2>/dev/null | head -1)
  G=$(ls "$M"/bitnet-tq2_0.gguf 2>/dev/null | head -1)
  [ -n "$P" ] || { log "no 2B4T pack: run phase a first"; exit 1; }
  for round in 1 2; do
    if [ -n "$G" ]; then
      timeout 90 /tmp/llama/bin/llama-bench -m "$G" -ngl 99 -p 0 -n 128 -r 3 -o json > "$O/llama-tq2_0-r$round.json" 2> "$O/llama-tq2_0-r$round.err"
      python3 -c "
import json,sys
for e in json.load(open(sys.argv[1])): print('llama tq2_0 r$round', e['n_gen'], round(e['avg_ts'],1), round(e['stddev_ts'],1))" "$O/llama-tq2_0-r$round.json" | tee -a "$O/summary-$PHASE.txt"
    fi
    for m in a48:default a48:notopk a48:0 a8:default; do
      act=${m%%:*}; mode=${m#*:}; a=$([ "$act" = a48 ] && echo a4.8 || echo a8)
      if [ "$mode" = default ]; then
        tb "$act-$mode-r$round" "$P" 60 -p 0 -n 128 -r 3 --activations "$a"
      else
        TERN_GPU_FUSE_NORM=$mode tb "$act-$mode-r$round" "$P" 60 -p 0 -n 128 -r 3 --activations "$a"
      fi
    done
  done
  tb a48-prof "$P" 60 -p 0 -n 16 -r 1 --profile --activations a4.8
  TERN_GPU_FUSE_NORM=notopk tb a48-notopk-prof "$P" 60 -p 0 -n 16 -r 1 --profile --activations a4.8
  tb a8-prof "$P" 60 -p 0 -n 16 -r 1 --profile --activations a8
  log "done g"
  pack_out; exit 0
fi
# Phase h (a fresh machine, carry .gl .devkit-fin3; `kit3` builds it): prefill — the default
# against the query-tiled attention kernel (TERN_GPU_ATTN_PREFILL=1), A8 and a4.8, interleaved
# over two rounds with llama-bench pp512 of the same TQ2_0 file in each; the attention kernel
# bench; a pp512 profile. Extra binaries in .devkit-fin3 (tern-*.xz) are A/B'd the same way.
if [ "$PHASE" = h ]; then
  xz -dc .devkit-fin3/tern.xz > "$F/kit/tern"; xz -dc .devkit-fin3/gpu_bench.xz > "$F/gpu_bench"
  chmod +x "$F/kit/tern" "$F/gpu_bench"; cp .devkit-fin3/llama-vulkan.tar.xz "$F/kit/"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$O/gpu.txt" 2>&1
  log "GPU: $(cat "$O/gpu.txt")"
  OUT=$O/bench KIT=$F/kit MODEL_DIR=$M R=2 DEPTH=0 SHAPES=bitnet LLAMA_FILES="bitnet-tq2_0" \
    TERN_PACKS="bitnet-tq2_0:2bit:raw" BUDGET_S=200 HARD_S=240 bash scripts/device-bench.sh all > "$O/device-bench.out" 2>&1
  cp "$O/bench/results.md" "$O/summary-$PHASE.txt" 2>/dev/null
  P=$(ls "$M"/tern-*/bitnet-tq2_0--2bit-raw.tern 2>/dev/null | head -1)
  G=$(ls "$M"/bitnet-tq2_0.gguf 2>/dev/null | head -1)
  [ -n "$P" ] || { log "no 2B4T pack"; pack_out; exit 1; }
  for round in 1 2 3; do
    [ -n "$G" ] && llama_pp "$G" "$round"
    tb "a8-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a8
    TERN_GPU_ATTN_PREFILL=1 tb "a8-tiledattn-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a8
    tb "a48-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a4.8
    TERN_GPU_ATTN_PREFILL=1 tb "a48-tiledattn-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a4.8
    for x in .devkit-fin3/tern-*.xz; do
      [ -f "$x" ] || continue
      b=$(basename "$x" .xz); [ -x "$F/kit/$b" ] || { xz -dc "$x" > "$F/kit/$b"; chmod +x "$F/kit/$b"; }
      log "tern bench $b"
      for a in a8 a4.8; do
        timeout 60 "$F/kit/$b" bench "$P" --device gpu --json -p 512 -n 128 -r 3 --activations "$a" > "$O/$b-$a-r$round.json" 2> "$O/$b-$a-r$round.err"
        python3 -c "
import json,sys
d=json.load(open(sys.argv[1])); print(sys.argv[2], [(t['test'], round(t['avg_ts'],1)) for t in d['tests']])" "$O/$b-$a-r$round.json" "$b-$a-r$round" | tee -a "$O/summary-$PHASE.txt"
      done
    done
  done
  log "gpu_bench --only attention"
  timeout 120 "$F/gpu_bench" --only attention > "$O/gpu_bench_attention.json" 2> "$O/gpu_bench_attention.err"
  tb a8-prof "$P" 60 -p 512 -n 1 -r 1 --profile --activations a8
  TERN_GPU_ATTN_PREFILL=1 tb a8-tiledattn-prof "$P" 60 -p 512 -n 1 -r 1 --profile --activations a8
  tb a48-prof "$P" 60 -p 0 -n 16 -r 1 --profile --activations a4.8
  log "done h"
  pack_out; exit 0
fi
# Phase i (right after phase a, on its warm machine): prefill A/B on the 2B4T TQ2_0 import —
# the default (4 × 8 GEMM tiles, query-tiled attention + fused RoPE/KV store) against
# TERN_GEMM_TILE=old and TERN_GPU_ATTN_PREFILL=0, A8 and a4.8, llama-bench pp512 in each round;
# then a pp512 profile.
if [ "$PHASE" = i ]; then
  P=$(ls "$M"/tern-*/bitnet-tq2_0--2bit-raw.tern 2>/dev/null | head -1)
  G=$(ls "$M"/bitnet-tq2_0.gguf 2>/dev/null | head -1)
  [ -n "$P" ] || { log "no 2B4T pack: run phase a first"; exit 1; }
  for round in 1 2; do
    [ -n "$G" ] && llama_pp "$G" "$round"
    tb "pp-a8-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a8
    TERN_GEMM_TILE=old tb "pp-a8-oldtile-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a8
    TERN_GPU_ATTN_PREFILL=0 tb "pp-a8-oldattn-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a8
    tb "pp-a48-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a4.8
    TERN_GEMM_TILE=old tb "pp-a48-oldtile-r$round" "$P" 60 -p 512 -n 0 -r 3 --activations a4.8
  done
  tb pp-a8-prof "$P" 60 -p 512 -n 1 -r 1 --profile --activations a8
  log "done i"
  pack_out; exit 0
fi
echo "usage: $0 kit|kit3|a|b|c|d|e|f|g|h|i" >&2; exit 2
