#!/usr/bin/env bash
# BitNet a4.8 vs A8 (tern) vs llama.cpp TQ2_0 on the GPU machine (issue 13), one call:
#   1. the BitNet-2B4T-shaped random F16 GGUF (scripts/gen_synth_gguf.py), packed by `tern pack`
#      (absmean-ternarized 2-bit, raw floats) twice: --activations a8 and --activations a4.8;
#   2. `tern bench -p $P -n $N -r $R --json` on each (and each pack with the other scheme through
#      `--activations`, labelled as an override), with the measured activation sparsity;
#   3. when $KIT/llama-vulkan.tar.xz is there: llama-quantize TQ2_0 of the same F16 file and
#      `llama-bench -ngl 99 -p $P -n $N -r $R` in the same call;
#   4. the kernel micro-bench (`a48_bench`: sparse vs dense GEMV at 0/50/80/90% zero inputs, INT4
#      vs INT8 GEMM at 512 tokens, the fused quantizers).
#
#   bash scripts/device-a48.sh            on the device, from the repo root (the device tool's cwd)
#   bash scripts/device-a48.sh kit        HERE: build the binaries into $KIT (default .devkit-i13)
#
# Needs (carried): .gl/*.deb (Vulkan loader; unpacked where libvulkan.so.1 is missing), $KIT/tern
# and $KIT/a48_bench (stripped release builds), optionally $LLAMA_KIT (default
# .devkit/llama-vulkan.tar.xz). Conventions as scripts/device-bench.sh.
# Writes $OUT/a48-results.md, $OUT/a48-results.json, $OUT/device-a48.log and the raw JSON per run.
#
# Environment (defaults): OUT=/tmp/a48-out KIT=.devkit-i13 LLAMA_KIT=.devkit/llama-vulkan.tar.xz
#   MODEL_DIR=/tmp/m48  R=3 P=512 N=128  STEPS="tern llama micro" (any subset)
#   TINY=0 (1: 2-layer tiny shape, dry runs)  HARD_S=560 (no step starts after it)
#   TERN_ARGS (extra `tern bench` arguments)  PACKS="a8 a4.8"
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
KIT=${KIT:-$REPO/.devkit-i13}
if [ "${1:-}" = kit ]; then
  set -e
  mkdir -p "$KIT"
  cargo build --release --bin tern -p tern-cli
  cargo build --release -p tern-gpu --example a48_bench
  strip -o "$KIT/tern" target/release/tern
  strip -o "$KIT/a48_bench" target/release/examples/a48_bench
  cp scripts/gen_synth_gguf.py "$KIT/"
  ls -la "$KIT"
  exit 0
fi

OUT=${OUT:-/tmp/a48-out}
LLAMA_KIT=${LLAMA_KIT:-$REPO/.devkit/llama-vulkan.tar.xz}
MODEL_DIR=${MODEL_DIR:-/tmp/m48}
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
R=${R:-3}; P=${P:-512}; N=${N:-128}; TINY=${TINY:-0}
HARD_S=${HARD_S:-560}
STEPS=${STEPS:-tern llama micro}
PACKS=${PACKS:-a8 a4.8}
mkdir -p "$OUT" "$MODEL_DIR"
exec > >(tee -a "$OUT/device-a48.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
left() { echo $((HARD_S - SECONDS)); }
want() { [[ " $STEPS " == *" $1 "* ]]; }
log "device-a48: steps=[$STEPS] packs=[$PACKS] r=$R p=$P n=$N tiny=$TINY out=$OUT"

# ---------------------------------------------------------------- environment
. "$REPO/scripts/device-env.sh"; device_vulkan_env "$REPO"
log "GPU: $GPU; VK_DRIVER_FILES=${VK_DRIVER_FILES:-<default>}"
TERN=$KIT/tern
[ -x "$TERN" ] || { log "FATAL: $TERN missing (bash scripts/device-a48.sh kit)"; exit 1; }
GEN=$KIT/gen_synth_gguf.py; [ -f "$GEN" ] || GEN=$REPO/scripts/gen_synth_gguf.py

# ---------------------------------------------------------------- model
F16=$MODEL_DIR/bitnet-f16.gguf
if [ ! -s "$F16" ]; then
  log "generating $F16"
  python3 "$GEN" "$F16" --shape bitnet $([ "$TINY" = 1 ] && echo --tiny) || { log "FATAL: generation failed"; exit 1; }
fi
for acts in $PACKS; do
  dst=$MODEL_DIR/bitnet-2bit-$acts.tern
  [ -s "$dst" ] && continue
  log "tern pack --activations $acts"
  "$TERN" pack "$F16" -o "$dst" --ternary 2bit --floats raw --activations "$acts" > "$OUT/pack-$acts.log" 2>&1 \
    || { log "ERROR: pack $acts failed"; tail -5 "$OUT/pack-$acts.log"; }
  log "  $(du -m "$dst" 2>/dev/null | cut -f1) MiB"
done

# ---------------------------------------------------------------- tern bench
tern_bench() {  # tag model extra-args...
  local tag=$1 m=$2; shift 2
  [ -s "$m" ] || { log "skip $tag: $m missing"; return; }
  [ "$(left)" -gt 30 ] || { log "time spent: skip $tag"; return; }
  log "tern bench $tag $*"
  # shellcheck disable=SC2086
  if timeout "$(( $(left) < 200 ? $(left) : 200 ))" "$TERN" bench "$m" -p "$P" -n "$N" -r "$R" --device gpu --json "$@" ${TERN_ARGS:-} \
      > "$OUT/tern-$tag.json" 2> "$OUT/tern-$tag.err"; then
    python3 - "$OUT/tern-$tag.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
a = d.get("activations", {})
for t in d["tests"]:
    print(f"    {t['test']}: {t['avg_ts']:.1f} ± {t['stddev_ts']:.1f} t/s  [scheme {a.get('scheme')}, file {a.get('file_scheme')}, override {a.get('overridden')}]")
for s in d.get("activation_sparsity") or []:
    print(f"    sparsity {s['linear']}: {100*s['zero_fraction']:.2f}%")
PY
  else
    log "ERROR: tern bench $tag failed"; tail -5 "$OUT/tern-$tag.err"
  fi
}
if want tern; then
  for acts in $PACKS; do tern_bench "$acts" "$MODEL_DIR/bitnet-2bit-$acts.tern"; done
  # The same weights with the other scheme (labelled as an override in the JSON).
  [ -n "${CROSS:-}" ] && tern_bench "a4.8-file-as-a8" "$MODEL_DIR/bitnet-2bit-a4.8.tern" --activations a8
fi

# ---------------------------------------------------------------- llama.cpp TQ2_0
if want llama; then
  if [ -f "$LLAMA_KIT" ]; then
    if [ ! -x "$LLAMA_DIR/bin/llama-bench" ]; then
      mkdir -p "$LLAMA_DIR"; tar xJf "$LLAMA_KIT" -C "$LLAMA_DIR" || log "ERROR: unpacking $LLAMA_KIT failed"
      for lib in "$LLAMA_DIR"/fallback-lib/*; do
        [ -e "$lib" ] || continue
        ldconfig -p | grep -F "$(basename "$lib") " >/dev/null || cp "$lib" "$LLAMA_DIR/bin/"
      done
    fi
    TQ=$MODEL_DIR/bitnet-tq2_0.gguf
    if [ ! -s "$TQ" ] && [ "$(left)" -gt 120 ]; then
      log "llama-quantize TQ2_0"
      "$LLAMA_DIR/bin/llama-quantize" "$F16" "$TQ.part" TQ2_0 "$(nproc)" > "$OUT/quantize.log" 2>&1 && mv "$TQ.part" "$TQ" \
        || { log "ERROR: quantize failed"; tail -5 "$OUT/quantize.log"; }
    fi
    if [ -s "$TQ" ] && [ "$(left)" -gt 60 ]; then
      log "llama-bench TQ2_0"
      timeout "$(( $(left) < 240 ? $(left) : 240 ))" "$LLAMA_DIR/bin/llama-bench" -m "$TQ" -ngl 99 -p "$P" -n "$N" -r "$R" -o json \
        > "$OUT/llama-tq2_0.json" 2> "$OUT/llama-tq2_0.err" || { log "ERROR: llama-bench failed"; tail -5 "$OUT/llama-tq2_0.err"; }
      python3 -c "
import json,sys
for e in json.load(open('$OUT/llama-tq2_0.json')):
    t = f\"pp{e['n_prompt']}\" if e['n_prompt'] else f\"tg{e['n_gen']}\"
    print(f\"    llama.cpp TQ2_0 {t}: {e['avg_ts']:.1f} ± {e['stddev_ts']:.1f} t/s\")" || true
    fi
  else
    log "no llama.cpp kit ($LLAMA_KIT): llama-bench skipped"
  fi
fi

# ---------------------------------------------------------------- kernel micro-bench
if want micro && [ -x "$KIT/a48_bench" ] && [ "$(left)" -gt 40 ]; then
  log "a48_bench"
  timeout "$(( $(left) < 150 ? $(left) : 150 ))" "$KIT/a48_bench" $([ "$TINY" = 1 ] && echo --quick) > "$OUT/a48-micro.json" 2> "$OUT/a48-micro.err" \
    || { log "ERROR: a48_bench failed"; tail -5 "$OUT/a48-micro.err"; }
  cat "$OUT/a48-micro.json"
fi

# ---------------------------------------------------------------- summary
python3 - "$OUT" "$GPU" <<'PY' || true
import json, os, sys
out, gpu = sys.argv[1], sys.argv[2]
res = {"gpu": gpu, "tern": {}, "llama": None, "micro": None}
rows = ["| run | pp | tg | sparsity qkv / attn_out / gate_up / down |", "|---|---|---|---|"]
for f in sorted(os.listdir(out)):
    p = os.path.join(out, f)
    if f.startswith("tern-") and f.endswith(".json"):
        try: d = json.load(open(p))
        except Exception: continue
        res["tern"][f[5:-5]] = d
        ts = {t["test"][:2]: f"{t['avg_ts']:.1f} ± {t['stddev_ts']:.1f}" for t in d["tests"]}
        sp = " / ".join(f"{100*s['zero_fraction']:.1f}%" for s in (d.get("activation_sparsity") or []))
        a = d.get("activations", {})
        rows.append(f"| tern {a.get('scheme')} (file {a.get('file_scheme')}) | {ts.get('pp','-')} | {ts.get('tg','-')} | {sp} |")
    if f == "llama-tq2_0.json":
        try:
            res["llama"] = json.load(open(p))
            ts = {("pp" if e["n_prompt"] else "tg"): f"{e['avg_ts']:.1f} ± {e['stddev_ts']:.1f}" for e in res["llama"]}
            rows.append(f"| llama.cpp TQ2_0 | {ts.get('pp','-')} | {ts.get('tg','-')} | |")
        except Exception: pass
    if f == "a48-micro.json":
        try: res["micro"] = json.load(open(p))
        except Exception: pass
open(os.path.join(out, "a48-results.json"), "w").write(json.dumps(res, indent=1))
open(os.path.join(out, "a48-results.md"), "w").write(f"GPU: {gpu}\n\n" + "\n".join(rows) + "\n")
print("\n".join(rows))
PY
log "done"
