#!/usr/bin/env bash
# h-ggml's one device call (issue 15): the ggml GEMV before (main's ggml_gemv.wgsl, tern-old) and
# after (branch h-ggml, tern-new; and with TERN_GGML_GEMV_STAGE=0: activations not staged) on the SmolLM2-shaped Q4_1 random model and the 2B4T-shaped
# TQ2_0 (2-bit + q6_K head) random model, llama-bench on the same GGUFs in the same call.
# Run from the repo root on the device: bash .devkit-hggml/run.sh   (writes $OUT)
set -uo pipefail
K=.devkit-hggml
W=${WORK:-/tmp}; R=${OUT:-$W/hggml-out}; O=$W/hggml-raw; M=$W/m; B=$W/hb; mkdir -p "$R" "$O" "$M" "$B"
exec > >(tee -a "$R/run.log") 2>&1
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }
ldconfig -p | grep -q "libvulkan\.so\.1 " || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
T=; [ "${TINY:-0}" = 1 ] && T=--tiny; P=${P:-512}; N=${N:-128}
[ "${TINY:-0}" = 1 ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json VK_ICD_FILENAMES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$O/gpu.txt"
xz -dc $K/tern-old.xz > $B/tern-old; xz -dc $K/tern-new.xz > $B/tern-new; chmod +x $B/tern-old $B/tern-new
md5sum $B/tern-old $B/tern-new | tee "$O/binaries.md5"
mkdir -p $W/llama && tar xJf $K/llama-vulkan.tar.xz -C $W/llama
LB=$W/llama/bin
log "models"
python3 scripts/gen_synth_gguf.py $M/bitnet-f16.gguf --shape bitnet $T > "$O/gen-bitnet.log" 2>&1
python3 scripts/gen_synth_gguf.py $M/smollm-f16.gguf --shape smollm $T > "$O/gen-smollm.log" 2>&1
$LB/llama-quantize $M/bitnet-f16.gguf $M/bitnet-tq2_0.gguf TQ2_0 16 > "$O/quant-bitnet.log" 2>&1
$LB/llama-quantize --token-embedding-type q8_0 $M/smollm-f16.gguf $M/smollm-q4_1.gguf Q4_1 16 > "$O/quant-smollm.log" 2>&1
rm -f $M/bitnet-f16.gguf
$B/tern-new pack $M/bitnet-tq2_0.gguf -o $M/bitnet.tern --ternary 2bit --floats raw > "$O/pack-bitnet.log" 2>&1
$B/tern-new pack $M/smollm-q4_1.gguf -o $M/smollm.tern --ternary 2bit --floats raw > "$O/pack-smollm.log" 2>&1
ls -la $M | tee "$O/models.txt"
$B/tern-new inspect $M/smollm.tern > "$O/inspect-smollm.txt" 2>&1
$B/tern-new inspect $M/bitnet.tern > "$O/inspect-bitnet.txt" 2>&1
lb() { # tag gguf
  log "llama-bench $1"
  timeout 90 $LB/llama-bench -m "$2" -ngl 99 -p $P -n $N -r 2 -o json > "$O/llama-$1.json" 2> "$O/llama-$1.err"
  python3 -c "
import json,sys
for e in json.load(open(sys.argv[1])): print('  llama', sys.argv[2], 'pp%d'%e['n_prompt'] if e['n_prompt'] else 'tg%d'%e['n_gen'], round(e['avg_ts'],1), '+-', round(e['stddev_ts'],1))" "$O/llama-$1.json" "$1" || tail -3 "$O/llama-$1.err"
}
tb() { # tag binary model
  log "tern bench $1"
  timeout 60 $B/$2 bench "$3" --device gpu --profile --json -p $P -n $N -r 2 > "$O/tern-$1.json" 2> "$O/tern-$1.err"
  python3 - "$O/tern-$1.json" "$1" <<'PY' || tail -3 "$O/tern-$1.err"
import json, sys
d = json.load(open(sys.argv[1]))
print('  tern', sys.argv[2], [(t['test'], round(t['avg_ts'], 1), round(t['stddev_ts'], 1)) for t in d['tests']], 'dispatches', d.get('dispatches_per_token'))
for k in d.get('profile_us_per_token') or []:
    if 'ggml' in k['kernel'] or 'gemv' in k['kernel']:
        print('    %-34s %4d dispatches %9.1f us' % (k['kernel'], k['dispatches'], k['us']))
tot = sum(k['us'] for k in d.get('profile_us_per_token') or [])
print('    decode step GPU time %.1f us' % tot)
PY
}
# round 1 then round 2 (alternating old/new; llama in each round)
for round in 1 2; do
  lb smollm-q4_1-r$round $M/smollm-q4_1.gguf
  tb smollm-old-r$round tern-old $M/smollm.tern
  tb smollm-new-r$round tern-new $M/smollm.tern
  TERN_GGML_GEMV_STAGE=0 tb smollm-nostage-r$round tern-new $M/smollm.tern
  lb bitnet-tq2_0-r$round $M/bitnet-tq2_0.gguf
  tb bitnet-old-r$round tern-old $M/bitnet.tern
  tb bitnet-new-r$round tern-new $M/bitnet.tern
  TERN_GGML_GEMV_STAGE=0 tb bitnet-nostage-r$round tern-new $M/bitnet.tern
  [ "$SECONDS" -gt 180 ] && { log "time: stopping after round $round"; break; }
done
log "done"
cp "$R/run.log" "$O/"; tar czf "$R/raw.tar.gz" -C "$O" . && ls -la "$R"
