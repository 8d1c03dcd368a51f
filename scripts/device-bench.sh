#!/usr/bin/env bash
# Speed runs on the GPU machine: llama.cpp (Vulkan) anchors and tern, on random-weight models of the
# BitNet-2B4T and SmolLM2-135M shapes generated there (too big to carry).
#
#   bash scripts/device-bench.sh [STEP...]        on the device, from the repo root; STEP: models llama tern all (default all)
#   bash scripts/device-bench.sh kit [tern]       HERE: (re)build the carried kit (.devkit/); see below
#
# Needs (carried as ignored folders): .gl/*.deb (Vulkan loader; unpacked into / only where
# libvulkan.so.1 is missing), .devkit/llama-vulkan.tar.xz (llama-bench, llama-quantize, ... and their
# shared libs), optionally .devkit/tern (stripped `cargo build --release --bin tern`).
# Writes $OUT/results.md, $OUT/results.json, $OUT/device-bench.log, $OUT/raw.tar.gz (per-run output).
# Models go to $MODEL_DIR (default /tmp/m) and are reused when present (a warm second call).
#
# Environment (defaults):
#   OUT=/tmp/bench-out  TINY=0 (1: 2-layer tiny models in /tmp/m-tiny, for dry runs)
#   SHAPES="bitnet smollm"  R=3  P=512  N=128  DEPTH=4096 (0: no depth runs)
#   BUDGET_S=480   seconds after which no new step starts (results are still written)
#   HARD_S=570     no run is allowed past this many seconds (each run's timeout is cut to fit)
#   LLAMA_FILES    llama-bench files (names in $MODEL_DIR without .gguf); default: every quantized file
#   DEPTH_FILES    files also run at depth: default "bitnet-tq2_0 smollm-q4_1"
#   TERN_PACKS     "SRC:TERNARY:FLOATS ..." (SRC a file name without .gguf); default below
#   TERN_DEPTH_PACKS  packs also benched at depth (default: the first pack of each shape)
#   TERN_ARGS      extra arguments for `tern bench` (e.g. "--device gpu --profile")
#   TERN_TIMEOUT=180  seconds per `tern bench` run;  LLAMA_TIMEOUT=240 per llama-bench run
#   LLAMA_ARGS     extra arguments for llama-bench (e.g. "-fa 1")
#   FRESH=1        forget the raw results of earlier (warm) calls in $RES; by default they are merged in
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
STEPS=${*:-all}

# ---------------------------------------------------------------- kit (run HERE, not on the device)
# `device-bench.sh kit [tern]`: builds .devkit/llama-vulkan.tar.xz (llama.cpp 0c1e570 from the
# llama-cpp-python 0.3.36 sdist, Vulkan + CPU backends, shared libs with RUNPATH $ORIGIN, stripped,
# xz -9e; ~40 min on 2 cores) and, with `tern`, .devkit/tern (stripped release build).
if [[ " $STEPS " == *" kit "* ]]; then
  set -e
  mkdir -p .devkit; grep -qx '/.devkit/' .git/info/exclude 2>/dev/null || echo /.devkit/ >> .git/info/exclude
  if [[ " $STEPS " == *" tern "* ]]; then
    cargo build --release --bin tern && strip -o .devkit/tern target/release/tern && ls -la .devkit/tern
  fi
  VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}; SRC=${LLAMA_SRC:-$HOME/.cache/tern-llamacpp/src}
  if [ ! -s .devkit/llama-vulkan.tar.xz ] || [ "${REBUILD:-0}" = 1 ]; then
    apt-get install -y -qq cmake glslc libvulkan-dev spirv-headers xz-utils >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake glslc libvulkan-dev spirv-headers xz-utils >/dev/null; }
    mkdir -p "$SRC" && cd "$SRC"
    [ -f llama_cpp_python-$VER.tar.gz ] || pip download -q --no-deps --no-binary :all: llama-cpp-python==$VER -d .
    [ -d llama_cpp_python-$VER ] || tar xzf llama_cpp_python-$VER.tar.gz
    cd llama_cpp_python-$VER/vendor/llama.cpp
    python3 - <<'PY'   # as shared/tools/build-llamacpp.sh: Debian 12's Vulkan headers lack VK_EXT_layer_settings
p = 'ggml/src/ggml-vulkan/ggml-vulkan.cpp'
s = open(p).read()
a = s.find('    VkBool32 enable_best_practice = layer_settings;')
end = '&layer_setting_info);'
if a >= 0:
    b = s.index(end, a) + len(end)
    s = s[:a] + '    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);' + s[b:]
    open(p, 'w').write(s)
PY
    cmake -B build-vk -DGGML_VULKAN=1 -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON >/dev/null
    cmake --build build-vk -j"$(nproc)" --target llama-bench llama-quantize llama-perplexity llama-completion
    ST=$(mktemp -d); mkdir -p "$ST/bin" "$ST/fallback-lib"
    (cd build-vk/bin && cp -a llama-bench llama-quantize llama-perplexity llama-completion libllama-*-impl.so \
       libggml-base.so.0* libggml-cpu.so.0* libggml-vulkan.so.0* libggml.so.0* libllama.so.0* libllama-common.so.0* "$ST/bin/")
    cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 /usr/lib/x86_64-linux-gnu/libstdc++.so.6 "$ST/fallback-lib/"
    find "$ST" -type f -exec strip --strip-unneeded {} +
    echo "llama.cpp $(git rev-parse --short HEAD 2>/dev/null || echo 0c1e570) from llama-cpp-python $VER; Vulkan+CPU, shared libs (RUNPATH \$ORIGIN); glslc $(dpkg-query -W -f='${Version}' glslc); built $(date -u +%F) on $(. /etc/os-release; echo "$PRETTY_NAME")" > "$ST/BUILD-INFO.txt"
    (cd "$ST" && tar cf - bin fallback-lib BUILD-INFO.txt | xz -9e -T"$(nproc)") > "$REPO/.devkit/llama-vulkan.tar.xz"
    rm -rf "$ST"; cd "$REPO"
  fi
  ls -la .devkit; du -ch .gl .devkit | tail -1
  exit 0
fi

OUT=${OUT:-/tmp/bench-out}
KIT=${KIT:-$REPO/.devkit}
TINY=${TINY:-0}
if [ "$TINY" = 1 ]; then MODEL_DIR=${MODEL_DIR:-/tmp/m-tiny}; else MODEL_DIR=${MODEL_DIR:-/tmp/m}; fi
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama}
RES=${RES:-/tmp/bench-res}   # raw per-run outputs (kept across warm calls)
SHAPES=${SHAPES:-bitnet smollm}
R=${R:-3}; P=${P:-512}; N=${N:-128}; DEPTH=${DEPTH:-4096}
BUDGET_S=${BUDGET_S:-480}
HARD_S=${HARD_S:-570}   # no single run may go past this (the device kills a call at 600 s)
TERN_TIMEOUT=${TERN_TIMEOUT:-180}; LLAMA_TIMEOUT=${LLAMA_TIMEOUT:-240}
NPROC=$(nproc)
mkdir -p "$OUT" "$MODEL_DIR" "$RES"
[ "${FRESH:-0}" = 1 ] && rm -rf "$RES" && mkdir -p "$RES"
exec > >(tee -a "$OUT/device-bench.log") 2>&1
TEE_PID=$!
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
over_budget() { [ "$SECONDS" -ge "$BUDGET_S" ]; }
cap() { local left=$((HARD_S - SECONDS)); [ "$left" -lt 10 ] && left=10; [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
want() { [[ " $STEPS " == *" all "* || " $STEPS " == *" $1 "* ]]; }
log "device-bench: steps=[$STEPS] tiny=$TINY shapes=[$SHAPES] r=$R p=$P n=$N depth=$DEPTH budget=${BUDGET_S}s out=$OUT"

# ---------------------------------------------------------------- environment
LDC=$(ldconfig -p 2>/dev/null)   # (not piped into grep -q: with pipefail, SIGPIPE would read as 'absent')
if ! grep -q 'libvulkan\.so\.1 ' <<<"$LDC"; then
  if ls "$REPO"/.gl/*.deb >/dev/null 2>&1; then
    log "unpacking the Vulkan loader debs (.gl) into /"
    for f in "$REPO"/.gl/*.deb; do dpkg -x "$f" /; done; ldconfig; LDC=$(ldconfig -p 2>/dev/null)
  else
    log "WARNING: no libvulkan.so.1 and no .gl/*.deb: Vulkan runs will fail"
  fi
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; fi
done
[ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ] && export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
log "VK_DRIVER_FILES=${VK_DRIVER_FILES:-<loader default>}"
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader; } > "$RES/gpu.txt" 2>/dev/null || true
log "GPU: $(cat "$RES/gpu.txt" 2>/dev/null || echo none)"

if [ ! -x "$LLAMA_DIR/bin/llama-bench" ]; then
  [ -f "$KIT/llama-vulkan.tar.xz" ] || { log "FATAL: $KIT/llama-vulkan.tar.xz missing"; exit 1; }
  log "unpacking the llama.cpp kit into $LLAMA_DIR"
  mkdir -p "$LLAMA_DIR"
  if command -v xz >/dev/null; then tar xJf "$KIT/llama-vulkan.tar.xz" -C "$LLAMA_DIR"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$KIT/llama-vulkan.tar.xz" "$LLAMA_DIR"
  fi || { log "FATAL: unpack failed"; exit 1; }
fi
LB=$LLAMA_DIR/bin   # the binaries find their libs through RUNPATH $ORIGIN: no LD_LIBRARY_PATH needed
for lib in "$LLAMA_DIR"/fallback-lib/*; do   # Debian 12's libgomp/libstdc++, used only where the system lacks them
  [ -e "$lib" ] || continue
  grep -qF "$(basename "$lib") " <<<"$LDC" || [ -e "$LB/$(basename "$lib")" ] || { log "system lacks $(basename "$lib"): using the kit's"; cp "$lib" "$LB/"; }
done
MISSING=$(ldd "$LB/llama-bench" "$LB"/lib*.so* 2>/dev/null | grep 'not found' | sort -u)
[ -z "$MISSING" ] || { log "WARNING: missing libraries:"; echo "$MISSING"; }
log "llama.cpp: $("$LB/llama-bench" --version 2>&1 | grep -i -m1 version)"
"$LB/llama-bench" --list-devices > "$RES/llama-devices.txt" 2>&1
log "llama.cpp devices: $(tr '\n' ' ' < "$RES/llama-devices.txt" | cut -c1-300)"
TERN=${TERN_BIN:-$KIT/tern}
[ -x "$TERN" ] || TERN=
log "tern binary: ${TERN:-none (tern steps skipped)}"
TD=$MODEL_DIR/tern-none   # packs are kept per tern binary (a rebuilt tern may write another format)
[ -n "$TERN" ] && TD=$MODEL_DIR/tern-$(md5sum "$TERN" | cut -c1-8)

# ---------------------------------------------------------------- models
declare -A GEN_S QUANT_S
gen_models() {
  for shape in $SHAPES; do
    local f16=$MODEL_DIR/$shape-f16.gguf
    if [ ! -s "$f16" ]; then
      over_budget && { log "budget spent: not generating $shape"; continue; }
      log "generating $f16"
      local t0=$SECONDS
      python3 "$REPO/scripts/gen_synth_gguf.py" "$f16" --shape "$shape" $([ "$TINY" = 1 ] && echo --tiny) || { log "ERROR: generation of $shape failed"; rm -f "$f16"; continue; }
      GEN_S[$shape]=$((SECONDS - t0))
    fi
    while IFS='|' read -r name qtype qargs; do
      [ -n "$name" ] || continue
      local dst=$MODEL_DIR/$name.gguf
      [ -s "$dst" ] && continue
      over_budget && { log "budget spent: not quantizing $name"; continue; }
      log "quantizing $name ($qtype $qargs)"
      local t0=$SECONDS
      # shellcheck disable=SC2086
      if "$LB/llama-quantize" $qargs "$f16" "$dst.part" "$qtype" "$NPROC" > "$RES/quantize-$name.log" 2>&1; then
        mv "$dst.part" "$dst"; QUANT_S[$name]=$((SECONDS - t0))
        log "  $name: $(du -m "$dst" | cut -f1) MiB in ${QUANT_S[$name]} s"
      else
        log "ERROR: llama-quantize $name failed:"; tail -5 "$RES/quantize-$name.log"; rm -f "$dst.part"
      fi
    done < <(variants_of "$shape")
  done
}
variants_of() {  # one "name|TYPE|args" per line
  case $1 in
    bitnet) printf '%s\n' "bitnet-tq2_0|TQ2_0|" "bitnet-tq1_0|TQ1_0|" "bitnet-tq2_0-f16emb|TQ2_0|--token-embedding-type f16" ;;
    smollm) printf '%s\n' "smollm-q4_1|Q4_1|--token-embedding-type q8_0" "smollm-tq2_0|TQ2_0|" ;;
  esac
}
default_llama_files() {
  for shape in $SHAPES; do
    variants_of "$shape" | cut -d'|' -f1
    [ "$shape" = smollm ] && echo smollm-f16
  done
}

# ---------------------------------------------------------------- llama.cpp
llama_bench() {  # tag file extra-args...
  local tag=$1 f=$2; shift 2
  [ -s "$f" ] || { log "skip llama $tag: $f missing"; return; }
  over_budget && { log "budget spent: skip llama $tag"; return; }
  log "llama-bench $tag $*"
  # shellcheck disable=SC2086
  if timeout "$(cap "$LLAMA_TIMEOUT")" "$LB/llama-bench" -m "$f" -ngl 99 -r "$R" -o json "$@" ${LLAMA_ARGS:-} > "$RES/llama-$tag.json" 2> "$RES/llama-$tag.err"; then
    python3 - "$RES/llama-$tag.json" <<'PY' || true
import json, sys
for e in json.load(open(sys.argv[1])):
    t = f"pp{e['n_prompt']}" if e['n_prompt'] else f"tg{e['n_gen']}"
    print(f"    {t} @d{e.get('n_depth', 0)}: {e['avg_ts']:.1f} ± {e['stddev_ts']:.1f} t/s  [{e.get('backends')}, {e.get('gpu_info')}]")
PY
  else
    log "ERROR: llama-bench $tag failed (rc $?):"; tail -5 "$RES/llama-$tag.err"
  fi
  write_results
}
run_llama() {
  local files=${LLAMA_FILES:-$(default_llama_files)}
  for name in $files; do llama_bench "$name" "$MODEL_DIR/$name.gguf" -p "$P" -n "$N"; done
  if [ "$DEPTH" -gt 0 ]; then
    for name in ${DEPTH_FILES:-bitnet-tq2_0 smollm-q4_1}; do
      llama_bench "$name-d$DEPTH" "$MODEL_DIR/$name.gguf" -p 0 -n "$N" -d "$DEPTH"
    done
  fi
}

# ---------------------------------------------------------------- tern
default_tern_packs() {
  for shape in $SHAPES; do
    case $shape in
      bitnet) echo "bitnet-tq2_0:2bit:raw bitnet-tq2_0-f16emb:2bit:neuzip bitnet-tq2_0-f16emb:2bit:neuzip-lossy3 bitnet-tq2_0-f16emb:base3:neuzip-lossy3 bitnet-tq1_0:base3:raw bitnet-tq2_0-f16emb:2bit:raw" ;;
      smollm) echo "smollm-q4_1:2bit:raw smollm-q4_1:2bit:neuzip smollm-f16:2bit:raw smollm-f16:2bit:neuzip" ;;
    esac
  done
}
pack_name() { local src=${1%%:*} rest=${1#*:}; echo "$src--${rest/:/-}"; }
tern_bench() {  # tag file extra-args...
  local tag=$1 f=$2; shift 2
  over_budget && { log "budget spent: skip tern bench $tag"; return; }
  log "tern bench $tag $*"
  # shellcheck disable=SC2086
  timeout "$(cap "$TERN_TIMEOUT")" "$TERN" bench "$f" -r "$R" --json "$@" ${TERN_ARGS:-} > "$RES/tern-$tag.json" 2> "$RES/tern-$tag.err"
  local rc=$?
  if [ $rc -eq 0 ] && python3 - "$RES/tern-$tag.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for t in d.get('tests', []):
    print(f"    {t['test']} @d{t.get('depth', 0)}: {t['avg_ts']:.1f} ± {t['stddev_ts']:.1f} t/s  [{d.get('device')}]  load {d.get('load_secs', 0):.1f} s, dispatches/token {d.get('dispatches_per_token')}")
PY
  then :; else
    log "ERROR: tern bench $tag failed (rc $rc):"; tail -8 "$RES/tern-$tag.err"
    mv -f "$RES/tern-$tag.json" "$RES/tern-$tag.failed.out" 2>/dev/null
  fi
  write_results
}
run_tern() {
  [ -n "$TERN" ] || { log "no tern binary: tern step skipped"; return; }
  log "tern: $("$TERN" --version 2>&1 | head -1)"
  if ! "$TERN" bench --help >/dev/null 2>&1 && [ "${TERN_PACK_ANYWAY:-0}" != 1 ]; then
    log "ERROR: this tern binary has no 'bench' subcommand: tern step skipped (TERN_PACK_ANYWAY=1 packs anyway)"; return
  fi
  mkdir -p "$TD"
  local packs=${TERN_PACKS:-$(default_tern_packs)}
  local p src tern layout floats out
  for p in $packs; do
    IFS=: read -r src layout floats <<<"$p"
    out=$TD/$(pack_name "$p").tern
    [ -s "$out" ] && continue
    [ -s "$MODEL_DIR/$src.gguf" ] || { log "skip pack $p: $src.gguf missing"; continue; }
    over_budget && { log "budget spent: skip pack $p"; continue; }
    local t0=$SECONDS
    if "$TERN" pack "$MODEL_DIR/$src.gguf" -o "$out.part" --ternary "$layout" --floats "$floats" > "$RES/pack-$(pack_name "$p").log" 2>&1; then
      mv "$out.part" "$out"; echo "$((SECONDS - t0))" > "$RES/pack-$(pack_name "$p").secs"
      log "packed $(pack_name "$p"): $(du -m "$out" | cut -f1) MiB in $((SECONDS - t0)) s"
    else
      log "ERROR: tern pack $p failed:"; tail -5 "$RES/pack-$(pack_name "$p").log"; rm -f "$out.part"
    fi
  done
  for p in $packs; do
    out=$TD/$(pack_name "$p").tern
    [ -s "$out" ] && tern_bench "$(pack_name "$p")" "$out" -p "$P" -n "$N"
  done
  if [ "$DEPTH" -gt 0 ]; then
    local dp=${TERN_DEPTH_PACKS:-$(for shape in $SHAPES; do echo "$packs" | tr ' ' '\n' | grep -m1 "^$shape-"; done)}
    for p in $dp; do
      out=$TD/$(pack_name "$p").tern
      [ -s "$out" ] && tern_bench "$(pack_name "$p")-d$DEPTH" "$out" -p 0 -n "$N" -d "$DEPTH"
    done
  fi
}

# ---------------------------------------------------------------- results
write_results() {
  for k in "${!GEN_S[@]}"; do echo "${GEN_S[$k]}" > "$RES/gen-$k.secs"; done
  for k in "${!QUANT_S[@]}"; do echo "${QUANT_S[$k]}" > "$RES/quant-$k.secs"; done
  python3 - "$RES" "$MODEL_DIR" "$OUT" "$STEPS" "$TINY" "$TD" <<'PY' || echo "results writer failed"
import glob, json, os, sys, time
res, mdir, out, steps, tiny, td = sys.argv[1:7]
def rd(p):
    try: return open(p).read().strip()
    except OSError: return None
def secs(p):
    v = rd(p); return int(v) if v and v.isdigit() else None
mib = lambda b: b / 1048576
models = []
for f in sorted(glob.glob(f'{mdir}/*.gguf')) + sorted(glob.glob(f'{td}/*.tern')):
    n = os.path.basename(f).rsplit('.', 1)[0]
    models.append({'name': n, 'file': f, 'bytes': os.path.getsize(f),
                   'gen_s': secs(f'{res}/gen-{n.replace("-f16", "")}.secs') if n.endswith('-f16') else None,
                   'quant_s': secs(f'{res}/quant-{n}.secs'), 'pack_s': secs(f'{res}/pack-{n}.secs')})
llama, tern, failed = [], [], []
bymtime = lambda pat: sorted(glob.glob(pat), key=os.path.getmtime)
for f in bymtime(f'{res}/llama-*.json'):
    tag = os.path.basename(f)[6:-5]
    try: rows = json.load(open(f))
    except Exception: failed.append(f'llama {tag}'); continue
    for e in rows:
        llama.append({'tag': tag, 'test': f"pp{e['n_prompt']}" if e['n_prompt'] else f"tg{e['n_gen']}",
                      'depth': e.get('n_depth', 0), 'avg_ts': e['avg_ts'], 'stddev_ts': e['stddev_ts'],
                      'model_size': e.get('model_size'), 'model_type': e.get('model_type'),
                      'backends': e.get('backends'), 'gpu_info': e.get('gpu_info'),
                      'build_commit': e.get('build_commit'), 'samples_ts': e.get('samples_ts'), 'raw': e})
for f in bymtime(f'{res}/tern-*.json'):
    tag = os.path.basename(f)[5:-5]
    try: d = json.load(open(f))
    except Exception: failed.append(f'tern {tag}'); continue
    tern.append({'tag': tag, **d})
failed += ['tern ' + os.path.basename(f)[5:-11] for f in bymtime(f'{res}/tern-*.failed.out')]
meta = {'date': time.strftime('%Y-%m-%d %H:%M:%S'), 'gpu': rd(f'{res}/gpu.txt'), 'steps': steps, 'tiny': tiny == '1',
        'llama_devices': rd(f'{res}/llama-devices.txt'), 'nproc': os.cpu_count()}
json.dump({'meta': meta, 'models': models, 'llama': llama, 'tern': tern, 'failed': failed},
          open(f'{out}/results.json', 'w'), indent=1)
L = [f"# device-bench {meta['date']}", '', f"GPU: {meta['gpu']}" + ('  (TINY dry run)' if tiny == '1' else ''), '']
bc = next((e['build_commit'] for e in llama if e.get('build_commit')), '?')
if models:
    L += ['## Files', '', '| file | MiB | made in |', '|---|---:|---:|']
    for m in models:
        t = m['gen_s'] if m['gen_s'] is not None else m['quant_s'] if m['quant_s'] is not None else m['pack_s']
        L.append(f"| {m['name']} | {mib(m['bytes']):.1f} | {'' if t is None else str(t) + ' s'} |")
    L.append('')
if llama:
    L += [f'## llama.cpp (Vulkan, build {bc}, `-ngl 99 -r R`)', '', '| file | size MiB | test | depth | t/s | backend, GPU |', '|---|---:|---|---:|---:|---|']
    for e in llama:
        sz = f"{mib(e['model_size']):.1f}" if e.get('model_size') else ''
        L.append(f"| {e['tag']} | {sz} | {e['test']} | {e['depth']} | {e['avg_ts']:.1f} ± {e['stddev_ts']:.1f} | {e['backends']}, {e['gpu_info'] or 'no GPU'} |")
    L.append('')
if tern:
    L += ['## tern (`tern bench --json`)', '', '| pack | file MiB | test | depth | t/s | device | load s | dispatches/token |', '|---|---:|---|---:|---:|---|---:|---:|']
    for d in tern:
        for t in d.get('tests', []):
            L.append(f"| {d['tag']} | {mib(d.get('file_bytes', 0)):.1f} | {t['test']} | {t.get('depth', 0)} | {t['avg_ts']:.1f} ± {t['stddev_ts']:.1f} | {d.get('device')} | {d.get('load_secs', 0):.1f} | {d.get('dispatches_per_token')} |")
    L.append('')
if failed: L += ['## Failed', ''] + [f'- {x}' for x in failed] + ['']
open(f'{out}/results.md', 'w').write('\n'.join(L))
PY
}

# ---------------------------------------------------------------- main
# steps run in the order given ("all" = models llama tern); llama and tern make the models they need first
if want models || want llama || want tern; then gen_models; fi
for step in $STEPS; do
  case $step in
    all) run_llama; run_tern ;;
    llama) run_llama ;;
    tern) run_tern ;;
    models) ;;
    *) log "unknown step '$step' (models llama tern all)" ;;
  esac
done
write_results
tar czf "$OUT/raw.tar.gz" -C "$RES" . 2>/dev/null
log "done; results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
cat "$OUT/results.md"
exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null   # let tee finish the log
