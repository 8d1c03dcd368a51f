#!/usr/bin/env bash
# Issue 15 decode measurement (one device call): BitNet-2B4T-shaped TQ2_0 (+q6_K head) and
# SmolLM2-shaped Q4_1 random models; tern bench --profile --json before (main's binary) and after
# (h-dec), a4.8 on h-dec, the GEMV micro-bench, llama-bench tg128/pp512 on the same files.
# Env: TINY=1 (2-layer dry run), P, N, R.
set -uo pipefail
K=${K:-.devkit-dec}; O=${OUT:-/tmp/dec-out}; M=${M:-/tmp/mdec}; TINY=${TINY:-0}
P=${P:-512}; N=${N:-128}; R=${R:-2}
mkdir -p "$O" "$M"
exec > >(tee -a "$O/run.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
T=$([ "$TINY" = 1 ] && echo --tiny)
if [ ! -x /tmp/llama/bin/llama-bench ]; then mkdir -p /tmp/llama && tar xJf .devkit/llama-vulkan.tar.xz -C /tmp/llama; fi
LB=/tmp/llama/bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null | tee "$O/gpu.txt"
log "generate"
python3 scripts/gen_synth_gguf.py "$M/bitnet-f16.gguf" --shape bitnet $T & P1=$!
python3 scripts/gen_synth_gguf.py "$M/smollm-f16.gguf" --shape smollm $T & P2=$!
wait $P1 $P2
log "quantize"
"$LB/llama-quantize" "$M/bitnet-f16.gguf" "$M/bitnet-tq2_0.gguf" TQ2_0 "$(nproc)" > "$O/quantize-bitnet.log" 2>&1 & P1=$!
"$LB/llama-quantize" --token-embedding-type q8_0 "$M/smollm-f16.gguf" "$M/smollm-q4_1.gguf" Q4_1 "$(nproc)" > "$O/quantize-smollm.log" 2>&1 & P2=$!
wait $P1 $P2
rm -f "$M/bitnet-f16.gguf"
log "pack"
"$K/tern-dec" pack "$M/bitnet-tq2_0.gguf" -o "$M/bitnet.tern" --ternary 2bit --floats raw > "$O/pack-bitnet.log" 2>&1
"$K/tern-dec" pack "$M/smollm-q4_1.gguf" -o "$M/smollm.tern" --ternary 2bit --floats raw > "$O/pack-smollm.log" 2>&1
ls -la "$M" | tee "$O/models.txt"
tb() { # tag bin model extra... (env before the call applies)
  local tag=$1 bin=$2 m=$3; shift 3
  log "tern bench $tag"
  timeout 90 "$K/tern-$bin" bench "$M/$m.tern" --device gpu --profile --json -p "$P" -n "$N" -r "$R" "$@" > "$O/tern-$tag.json" 2> "$O/tern-$tag.err"
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
print('   ', [(t['test'], round(t['avg_ts'],1)) for t in d['tests']], 'dispatches', d['dispatches_per_token'], 'bytes', d.get('bytes_read_per_token'))
" "$O/tern-$tag.json" || tail -3 "$O/tern-$tag.err"
}
tb bitnet-main main bitnet
tb bitnet-dec dec bitnet
TERN_GPU_FUSE_NORM=1 tb bitnet-dec-fused dec bitnet
tb bitnet-main-a48 main bitnet --activations a4.8
tb bitnet-dec-a48 dec bitnet --activations a4.8
TERN_GPU_FUSE_NORM=1 tb bitnet-dec-a48-fused dec bitnet --activations a4.8
tb smollm-main main smollm
tb smollm-dec dec smollm
log "llama-bench"
timeout 100 "$LB/llama-bench" -m "$M/bitnet-tq2_0.gguf" -ngl 99 -p "$P" -n "$N" -r "$R" -o json > "$O/llama-bitnet-tq2_0.json" 2> "$O/llama-bitnet.err"
timeout 60 "$LB/llama-bench" -m "$M/smollm-q4_1.gguf" -ngl 99 -p "$P" -n "$N" -r "$R" -o json > "$O/llama-smollm-q4_1.json" 2> "$O/llama-smollm.err"
python3 - "$O" <<'PY'
import json, sys, glob, os
o = sys.argv[1]
for f in sorted(glob.glob(os.path.join(o, 'llama-*.json'))):
    try:
        for e in json.load(open(f)):
            t = f"pp{e['n_prompt']}" if e['n_prompt'] else f"tg{e['n_gen']}"
            print(os.path.basename(f), t, round(e['avg_ts'], 1), '±', round(e['stddev_ts'], 1))
    except Exception as ex:
        print(f, 'unreadable', ex)
PY
python3 - "$O" <<'PY'
# per-kernel decode profile, summed by kernel family, per run
import json, sys, glob, os
o = sys.argv[1]
for f in sorted(glob.glob(os.path.join(o, 'tern-*.json'))):
    try:
        d = json.load(open(f))
    except Exception:
        continue
    prof = d.get('profile_us_per_token') or []
    tot = sum(k['us'] for k in prof)
    print(os.path.basename(f), 'profile total', round(tot), 'us;', ', '.join(f"{k['kernel']} {k['dispatches']}x {round(k['us'])}" for k in prof[:8]))
PY
log "end"
tar czf "$O/all.tar.gz" -C "$O" $(cd "$O" && ls | grep -v all.tar.gz)
mkdir -p "$O/keep" && mv "$O/all.tar.gz" "$O/keep/" && find "$O" -maxdepth 1 -type f -delete
