#!/usr/bin/env bash
# Issue 30 on the lent GPU, in one call: the cooperative-matrix GEMM's parity with the CPU reference
# (TERN_EXPECT_COOP=1: a device without the feature fails instead of skipping), the ternary GEMM
# tiles at 2B4T's shapes (µs, TOPS, each tile bit-equal to the 64 × 32 tile), then tern pp512/tg128
# with the classic tiles (TERN_GEMM_TILE=classic) against the default (cooperative matrices where
# the device has them), interleaved, beside llama.cpp built there with a current glslc, -fa 1
# (scripts/device-ab.sh).
#
#   HERE:          bash scripts/device-coop.sh kit      (builds and strips tern, the parity test and
#                                                       gpu_bench into .devkit/coop)
#   ON THE DEVICE: bash scripts/device-coop.sh [parity] [tiles] [ab]   (default: all three;
#                  carry .gl .devkit/coop .devkit/llama)
# Writes $OUT/coop.log, $OUT/parity.log, $OUT/tiles.json, and device-ab.sh's files under $OUT/ab-dD
# for each depth D. Environment: OUT=/tmp/coop-out  KIT=.devkit/coop  SHAPES=bitnet  ROUNDS=2  R=5
# DEPTHS="0 4096"
set -uo pipefail
cd "$(dirname "$0")/.."
KIT=${KIT:-.devkit/coop}
if [ "${1:-}" = kit ]; then
  set -e
  mkdir -p "$KIT"
  cargo build --release --bin tern
  cargo build --release -p tern-gpu --example gpu_bench
  t=$(cargo test --release -p tern-gpu --test parity --no-run 2>&1 | sed -n 's/.*(\(target\/release\/deps\/parity-[0-9a-f]*\)).*/\1/p' | tail -1)
  strip -o "$KIT/tern" target/release/tern
  strip -o "$KIT/gpu_bench" target/release/examples/gpu_bench
  strip -o "$KIT/parity" "$t"
  printf '#!/bin/sh\nTERN_GEMM_TILE=classic exec "$(dirname "$0")/tern" "$@"\n' > "$KIT/tern-classic"
  chmod +x "$KIT/tern-classic"
  ls -la "$KIT"
  exit 0
fi
STEPS=${*:-parity tiles ab}
OUT=${OUT:-/tmp/coop-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/coop.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
# shellcheck source=device-env.sh
. scripts/device-env.sh
device_vulkan_env "$PWD"
log "GPU: $GPU"
if [[ " $STEPS " == *" parity "* ]]; then
  log "parity: cooperative-matrix cases and the ternary GEMM cases auto-routed to them"
  TERN_EXPECT_COOP=1 TERN_REQUIRE_GPU=1 \
    TERN_PARITY_FILTER='coop|GemmCoop|ternary_gemm Bits2|ternary_matmul Bits2|64x128/64x64j8 vs' \
    timeout 240 "$KIT/parity" parity_table parity_a48 --nocapture --test-threads 1 > "$OUT/parity.log" 2>&1
  log "parity rc $?"; grep -E "^(ok|FAIL)|cases in|test result|adapter" "$OUT/parity.log" | grep -v "^ok " | head -20
  grep -c "^ok " "$OUT/parity.log"; grep "coop\|Coop" "$OUT/parity.log" | head -30
fi
if [[ " $STEPS " == *" tiles "* ]]; then
  log "gpu_bench --only tiles"
  timeout 200 "$KIT/gpu_bench" --only tiles > "$OUT/tiles.json" 2> "$OUT/tiles.err"
  log "tiles rc $?"; tail -3 "$OUT/tiles.err"; head -c 4000 "$OUT/tiles.json"; echo
fi
if [[ " $STEPS " == *" ab "* ]]; then
  log "A/B: classic tiles (old) vs default (new), llama.cpp beside"
  for d in ${DEPTHS:-0 4096}; do
    log "depth $d"
    OUT=$OUT/ab-d$d ROUNDS=${ROUNDS:-2} R=${R:-5} SHAPES=${SHAPES:-bitnet} DEPTH=$d LLAMA_BEFORE_S=${LLAMA_BEFORE_S:-480} \
      bash scripts/device-ab.sh "$KIT/tern-classic" "$KIT/tern"
  done
fi
log done
