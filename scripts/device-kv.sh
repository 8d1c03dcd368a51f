#!/usr/bin/env bash
# Compressed KV cache decode speed on the GPU machine (issue 14), one call:
#   1. the BitNet-2B4T-shaped random F16 GGUF (scripts/gen_synth_gguf.py), packed by `tern pack`
#      (2-bit ternary, raw floats);
#   2. `tern bench -p 0 -n $N -d D --device gpu --json` for D in $DEPTHS and each KV mode of
#      $MODES (default: f16, q4 (KIVI G32/R128), MiniCache + q4 (`--minicache on`), with
#      `kv_bytes_per_token` at the end of each run);
#   3. when $LLAMA_KIT is there: llama-quantize TQ2_0 of the same F16 file and
#      `llama-bench -ngl 99 -p 0 -n $N -d <depths>` with f16 KV and with `-ctk q4_0 -ctv q4_0 -fa 1`;
#   attn (when $KIT/attn_bench is there): the attention kernel alone, decode at p0 512 / 4096 /
#      16000 on the 2B4T heads (20/5×128), f16 and q4, `attn_bench --decode` of this build and of
#      $KIT/attn_bench_old (the kernels before, for an A/B on the same machine);
#   ppl (when $PPL_MODEL and $PPL_TEXT are there): `tern perplexity --device gpu -c 2048 --json`
#      in each mode of $PPL_MODES (SmolLM2 on GPL-3: the model must be carried).
#
#   bash scripts/device-kv.sh        on the device, from the repo root (the device tool's cwd)
#   bash scripts/device-kv.sh kit    HERE: build the binaries into $KIT (default .devkit-i14g)
#
# Needs (carried): .gl/*.deb (Vulkan loader; unpacked where libvulkan.so.1 is missing), $KIT/tern
# (stripped release build), optionally $LLAMA_KIT (default .devkit/llama-vulkan.tar.xz).
# Writes $OUT/kv-results.md, $OUT/kv-results.json, $OUT/device-kv.log and the raw JSON per run.
#
# Environment (defaults): OUT=/tmp/kv-out KIT=.devkit-i14g LLAMA_KIT=.devkit/llama-vulkan.tar.xz
#   MODEL_DIR=/tmp/mkv  R=3 N=64  DEPTHS="0 4096 16384"  MODES="f16 q4 q4mc" (a mode ending
#   in "mc" adds `--minicache on`)
#   STEPS="attn tern llama ppl"  TINY=0 (1: 2-layer tiny shape, dry runs)  HARD_S=560 (no step
#   after it)  TERN_ARGS (extra `tern bench` arguments)  LATE_DEPTHS (depths run after `ppl`)
#   PPL_MODEL=$KIT/SmolLM2-135M-Instruct.tern PPL_TEXT=$KIT/GPL-3
#   PPL_MODES="f16 q8 q4 q3 q2 a4 a3 f16mc q4mc q3mc" 
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
KIT=${KIT:-$REPO/.devkit-i14g}
if [ "${1:-}" = kit ]; then
  set -e
  mkdir -p "$KIT"
  cargo build --release --bin tern -p tern-cli
  strip -o "$KIT/tern" target/release/tern
  cargo build --release -p tern-gpu --example attn_bench
  strip -o "$KIT/attn_bench" target/release/examples/attn_bench
  cp scripts/gen_synth_gguf.py scripts/device-kv.sh "$KIT/"
  ls -la "$KIT"
  exit 0
fi

OUT=${OUT:-/tmp/kv-out}
LLAMA_KIT=${LLAMA_KIT:-$REPO/.devkit/llama-vulkan.tar.xz}
MODEL_DIR=${MODEL_DIR:-/tmp/mkv}
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
R=${R:-3}; N=${N:-64}; TINY=${TINY:-0}
DEPTHS=${DEPTHS:-0 4096 16384}
MODES=${MODES:-f16 q4 q4mc}
HARD_S=${HARD_S:-560}
STEPS=${STEPS:-attn tern llama ppl}
LATE_DEPTHS=${LATE_DEPTHS:-}
PPL_MODEL=${PPL_MODEL:-$KIT/SmolLM2-135M-Instruct.tern}
PPL_TEXT=${PPL_TEXT:-$KIT/GPL-3}
PPL_MODES=${PPL_MODES:-f16 q8 q4 q3 q2 a4 a3 f16mc q4mc q3mc}
mkdir -p "$OUT" "$MODEL_DIR"
exec > >(tee -a "$OUT/device-kv.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
left() { echo $((HARD_S - SECONDS)); }
want() { [[ " $STEPS " == *" $1 "* ]]; }
log "device-kv: steps=[$STEPS] modes=[$MODES] depths=[$DEPTHS] r=$R n=$N tiny=$TINY out=$OUT"

# ---------------------------------------------------------------- environment
. "$REPO/scripts/device-env.sh"; device_vulkan_env "$REPO"
log "GPU: $GPU; VK_DRIVER_FILES=${VK_DRIVER_FILES:-<default>}"
TERN=$KIT/tern
GEN=$KIT/gen_synth_gguf.py; [ -f "$GEN" ] || GEN=$REPO/scripts/gen_synth_gguf.py

# ---------------------------------------------------------------- model
F16=$MODEL_DIR/bitnet-f16.gguf
if [ ! -s "$F16" ]; then
  log "generating $F16"
  python3 "$GEN" "$F16" --shape bitnet $([ "$TINY" = 1 ] && echo --tiny) || { log "FATAL: generation failed"; exit 1; }
fi
TM=$MODEL_DIR/bitnet-2bit.tern
if want tern && [ ! -s "$TM" ] && [ -x "$TERN" ]; then
  log "tern pack"
  "$TERN" pack "$F16" -o "$TM" --ternary 2bit --floats raw > "$OUT/pack.log" 2>&1 \
    || { log "ERROR: pack failed"; tail -5 "$OUT/pack.log"; }
  log "  $(du -m "$TM" 2>/dev/null | cut -f1) MiB"
fi

# ---------------------------------------------------------------- tern bench
kv_args() {  # mode → tern flags
  case $1 in
    *w256) echo "--kv ${1%w256} --kv-window 256" ;;
    mc) echo "--kv f16 --minicache on" ;;
    *mc) echo "--kv ${1%mc} --minicache on" ;;
    *) echo "--kv $1" ;;
  esac
}
# ---------------------------------------------------------------- attention kernel A/B
if want attn; then
  for b in attn_bench attn_bench_kw attn_bench_old; do
    [ -x "$KIT/$b" ] || { log "no $KIT/$b"; continue; }
    [ "$(left)" -gt 60 ] || { log "time spent: skip $b"; continue; }
    log "$b --decode --shape bitnet-2b --kv f16,q4"
    timeout 90 "$KIT/$b" --decode --shape bitnet-2b --kv f16,q4 > "$OUT/$b.md" 2> "$OUT/$b.err" \
      || { log "ERROR: $b failed"; tail -5 "$OUT/$b.err"; }
    cat "$OUT/$b.md"
  done
fi

tern_bench() {  # depths...
  for d in "$@"; do
    for mode in $MODES; do
      tag="$mode-d$d"
      [ "$(left)" -gt 30 ] || { log "time spent: skip $tag"; continue; }
      log "tern bench $tag: $(kv_args "$mode")"
      # shellcheck disable=SC2046,SC2086
      if timeout "$(( $(left) < 150 ? $(left) : 150 ))" "$TERN" bench "$TM" -p 0 -n "$N" -d "$d" -r "$R" \
          --device gpu --json $(kv_args "$mode") ${TERN_ARGS:-} > "$OUT/tern-$tag.json" 2> "$OUT/tern-$tag.err"; then
        python3 - "$OUT/tern-$tag.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
for t in d["tests"]:
    print(f"    {t['test']} @d{t.get('depth', 0)}: {t['avg_ts']:.1f} ± {t['stddev_ts']:.1f} t/s  kv_bytes_per_token {d.get('kv_bytes_per_token')}  [{d.get('device')}]")
PY
      else
        log "ERROR: tern bench $tag failed"; tail -5 "$OUT/tern-$tag.err"
      fi
    done
  done
}
if want tern && [ -x "$TERN" ] && [ -s "$TM" ]; then
  # shellcheck disable=SC2086
  tern_bench $DEPTHS
fi

# ---------------------------------------------------------------- GPU perplexity
if want ppl; then
  if [ -s "$PPL_MODEL" ] && [ -s "$PPL_TEXT" ] && [ -x "$TERN" ]; then
    for mode in $PPL_MODES; do
      [ "$(left)" -gt 20 ] || { log "time spent: skip ppl $mode"; continue; }
      log "tern perplexity --device gpu -c 2048 $(kv_args "$mode")"
      # shellcheck disable=SC2046
      timeout "$(( $(left) < 120 ? $(left) : 120 ))" "$TERN" perplexity "$PPL_MODEL" --device gpu -f "$PPL_TEXT" -c 2048 --json \
        $(kv_args "$mode") > "$OUT/ppl-$mode.json" 2> "$OUT/ppl-$mode.err" \
        && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('   ', sys.argv[2], {k: d.get(k) for k in ('ppl_second_half','ppl','kv_bytes_per_token','device')})" "$OUT/ppl-$mode.json" "$mode" \
        || { log "ERROR: perplexity $mode failed"; tail -3 "$OUT/ppl-$mode.err"; }
    done
  else
    log "ppl skipped: no $PPL_MODEL or $PPL_TEXT"
  fi
fi
if want tern && [ -x "$TERN" ] && [ -s "$TM" ] && [ -n "$LATE_DEPTHS" ]; then
  # shellcheck disable=SC2086
  tern_bench $LATE_DEPTHS
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
    if [ ! -s "$TQ" ] && [ "$(left)" -gt 90 ]; then
      log "llama-quantize TQ2_0"
      "$LLAMA_DIR/bin/llama-quantize" "$F16" "$TQ.part" TQ2_0 "$(nproc)" > "$OUT/quantize.log" 2>&1 && mv "$TQ.part" "$TQ" \
        || { log "ERROR: quantize failed"; tail -5 "$OUT/quantize.log"; }
    fi
    DL=$(echo "$DEPTHS" | tr ' ' ',')
    for cfg in "f16|" "q4_0-fa|-ctk q4_0 -ctv q4_0 -fa 1"; do
      tag=${cfg%%|*}; args=${cfg#*|}
      if [ -s "$TQ" ] && [ "$(left)" -gt 40 ]; then
        log "llama-bench TQ2_0 kv $tag: -d $DL $args"
        # shellcheck disable=SC2086
        timeout "$(( $(left) < 200 ? $(left) : 200 ))" "$LLAMA_DIR/bin/llama-bench" -m "$TQ" -ngl 99 -p 0 -n "$N" -d "$DL" -r "$R" $args -o json \
          > "$OUT/llama-$tag.json" 2> "$OUT/llama-$tag.err" || { log "ERROR: llama-bench $tag failed"; tail -5 "$OUT/llama-$tag.err"; }
        python3 - "$OUT/llama-$tag.json" "$tag" <<'PY' || true
import json, sys
for e in json.load(open(sys.argv[1])):
    print(f"    llama.cpp TQ2_0 kv {sys.argv[2]} tg{e['n_gen']} @d{e.get('n_depth', 0)}: {e['avg_ts']:.1f} ± {e['stddev_ts']:.1f} t/s")
PY
      fi
    done
  else
    log "no llama.cpp kit ($LLAMA_KIT): llama-bench skipped"
  fi
fi

# ---------------------------------------------------------------- summary
python3 - "$OUT" "$GPU" <<'PY' || true
import json, os, sys
out, gpu = sys.argv[1], sys.argv[2]
res = {"gpu": gpu, "tern": {}, "llama": {}}
rows = {}
for f in sorted(os.listdir(out)):
    p = os.path.join(out, f)
    if not f.endswith(".json") or f.startswith("kv-results") or f.startswith("ppl-"):
        continue
    try: d = json.load(open(p))
    except Exception: continue
    if f.startswith("tern-"):
        tag = f[5:-5]; res["tern"][tag] = d
        mode, depth = tag.rsplit("-d", 1)
        for t in d["tests"]:
            rows.setdefault(f"tern {mode}", {})[int(depth)] = f"{t['avg_ts']:.1f} ± {t['stddev_ts']:.1f}"
        rows.setdefault(f"tern {mode}", {})["bpt"] = d.get("kv_bytes_per_token")
    elif f.startswith("llama-"):
        tag = f[6:-5]; res["llama"][tag] = d
        for e in d:
            rows.setdefault(f"llama.cpp TQ2_0 kv {tag}", {})[e.get("n_depth", 0)] = f"{e['avg_ts']:.1f} ± {e['stddev_ts']:.1f}"
depths = sorted({k for r in rows.values() for k in r if isinstance(k, int)})
md = [f"GPU: {gpu}", "", "decode t/s (tg) by depth", "",
      "| run | " + " | ".join(f"d{d}" for d in depths) + " | kv bytes/token (tern, at the end of the run) |",
      "|---|" + "---|" * len(depths) + "---|"]
for name, r in rows.items():
    md.append(f"| {name} | " + " | ".join(r.get(d, "-") for d in depths) + f" | {r.get('bpt', '')} |")
open(os.path.join(out, "kv-results.json"), "w").write(json.dumps(res, indent=1))
open(os.path.join(out, "kv-results.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
log "done"
