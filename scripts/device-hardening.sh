#!/usr/bin/env bash
# Issue 12 on the lent GPU (see the device tool's README): one call that makes the
# BitNet-2B4T-shaped model there (random weights, scripts/gen_synth_gguf.py, ternarized by
# `tern pack`), then measures
#   1. cancel during a long prefill on the GPU (tests/c/test_tern.c's GPU pass, TERN_TEST_GPU_MODEL)
#   2. the GPU memory budget: `tern bench --max-memory` below the decoded size, and below the
#      fixed weights (must be refused before allocating, naming the minimum)
#   3. the CPU fallback before/after: peak RSS and decode speed of the old and new `tern` on the CPU
# Carried (ignored paths): .gl (Vulkan loader debs), .devkit/tern, .devkit/tern-before,
# .devkit/test_tern + .devkit/libtern.so (built by `scripts/device-hardening.sh kit` here).
#   bash scripts/device-hardening.sh kit     HERE: build the carried binaries
#   bash scripts/device-hardening.sh         ON THE DEVICE: writes $OUT/hardening.log
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = kit ]; then
  set -e
  mkdir -p .devkit
  cargo build --release -q --bin tern && cargo build --release -q -p tern-ffi
  strip -o .devkit/tern target/release/tern
  strip -o .devkit/libtern.so target/release/libtern.so
  gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude tests/c/test_tern.c -L.devkit -ltern -lpthread -lm \
    -Wl,-rpath,'$ORIGIN' -o .devkit/test_tern
  [ -x .devkit/tern-before ] || echo "note: no .devkit/tern-before (the CPU before/after step needs it)"
  ls -la .devkit; exit 0
fi
OUT=${OUT:-/tmp/out}; M=${M:-/tmp/m}; mkdir -p "$OUT" "$M"
exec > >(tee -a "$OUT/hardening.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd; fi
done
export NODEVICE_SELECT=1
K=$PWD/.devkit; T=$K/tern
# wall time and peak RSS of a command (python: /usr/bin/time may be missing there)
tm() { local tag=$1; shift; python3 - "$tag" "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time(); rc = subprocess.call(sys.argv[2:])
print(f"  {sys.argv[1]}: rc {rc}, {time.time() - t:.1f} s wall, peak RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB", flush=True)
PY
}
log "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"
log "CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
if [ ! -s "$M/b2-f16.gguf" ]; then
  log "generating the 2B4T-shaped F16 GGUF"; python3 scripts/gen_synth_gguf.py "$M/b2-f16.gguf" --shape bitnet
fi
for fl in neuzip-lossy3 neuzip; do
  [ -s "$M/b2-$fl.tern" ] || { log "packing 2bit + $fl"; tm pack "$T" pack "$M/b2-f16.gguf" -o "$M/b2-$fl.tern" --floats "$fl"; }
done
ls -la "$M"
STEPS=${STEPS:-cancel budget cpu}
if [[ " $STEPS " == *" cancel "* ]]; then
  log "== 1. cancel during a long prefill on the GPU"
  TERN_TEST_GPU_MODEL=$M/b2-neuzip-lossy3.tern TERN_TEST_GPU_ONLY=1 \
  TERN_CANCEL_PROMPT_WORDS=${WORDS:-400} TERN_CANCEL_DELAY_MS=${DELAY_MS:-100} \
    timeout 240 "$K/test_tern" "$M/b2-neuzip-lossy3.tern" "The capital of France is" 4 "$OUT/gpu_greedy.txt"
  log "test_tern rc=$?"
fi
if [[ " $STEPS " == *" budget "* ]]; then
  log "== 2. GPU memory budget"
  # MIN: the smallest budget tern names when refusing a budget of 1 byte
  for spec in ${BUDGETS:-neuzip-lossy3:none neuzip-lossy3:771M neuzip-lossy3:MIN neuzip-lossy3:1000M neuzip:900M neuzip:MIN}; do
    fl=${spec%%:*}; b=${spec#*:}
    if [ "$b" = MIN ]; then
      b=$("$T" bench "$M/b2-$fl.tern" --device gpu -p 8 -n 0 -r 1 --max-memory 1 2>&1 | sed -n 's/.*it needs at least \([0-9]*\) bytes.*/\1/p')
    fi
    args=(); [ "$b" != none ] && args=(--max-memory "$b")
    log "tern bench 2bit+$fl budget=$b"
    timeout 200 "$T" bench "$M/b2-$fl.tern" --device gpu -p 512 -n 64 -r 2 "${args[@]}"; log "rc=$?"
  done
fi
if [[ " $STEPS " == *" cpu "* ]]; then
  log "== 3. CPU fallback before/after (peak RSS, decode t/s)"
  for bin in tern-before tern; do
    for b in none 800M; do
      [ "$bin" = tern-before ] && [ "$b" != none ] && continue
      args=(); [ "$b" != none ] && args=(--max-memory "$b")
      log "$bin bench --device cpu 2bit+neuzip-lossy3 budget=$b"
      tm "$bin budget=$b" timeout 240 "$K/$bin" bench "$M/b2-neuzip-lossy3.tern" --device cpu -p 64 -n 16 -r 1 "${args[@]}"
    done
  done
fi
log "done"
