#!/usr/bin/env bash
# Issue 15 (NeuZip) device run: kernel bench v1 vs v2 + fused GEMV; tern bench with the head kept
# NeuZip-compressed (lossless, lossy-3) beside llama-bench TQ2_0 + q6_K, all in one call.
#   device: mkdir -p .devkit-nz; cp scripts/device-i15-neuzip.sh .devkit-nz/run.sh; then OUT=$OUT bash .devkit-nz/run.sh (carry .gl .devkit .devkit-nz; ~60 s on an H100)
# .devkit-nz holds stripped `tern` and `gpu_bench` (cargo build --release --bin tern; cargo build
# --release -p tern-gpu --example gpu_bench) and this script. The device returns at most 8 files:
# everything is also packed into $OUT/all.tar.gz, and $OUT/summary.txt has the numbers.
set -u
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json VK_ICD_FILENAMES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
K=.devkit-nz; O=${OUT:-/tmp/out}; M=/tmp/m; mkdir -p $M $O
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a $O/log.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader > $O/gpu.txt 2>&1
log "GPU: $(cat $O/gpu.txt)"
(
  python3 scripts/gen_synth_gguf.py $M/bitnet-f16.gguf --shape bitnet > $O/gen.log 2>&1
  echo "gen done +${SECONDS}s" >> $O/bg.log
  mkdir -p /tmp/llama; tar xJf .devkit/llama-vulkan.tar.xz -C /tmp/llama
  /tmp/llama/bin/llama-quantize $M/bitnet-f16.gguf $M/bitnet-tq2_0.gguf TQ2_0 8 > $O/quant-tq2_0.log 2>&1 &
  /tmp/llama/bin/llama-quantize --token-embedding-type f16 $M/bitnet-f16.gguf $M/bitnet-tq2_0-f16emb.gguf TQ2_0 8 > $O/quant-f16emb.log 2>&1
  wait; echo "quant done +${SECONDS}s" >> $O/bg.log
  $K/tern pack $M/bitnet-tq2_0-f16emb.gguf -o $M/nz.tern --floats neuzip > $O/pack-nz.log 2>&1 &
  $K/tern pack $M/bitnet-tq2_0-f16emb.gguf -o $M/nz3.tern --floats neuzip-lossy3 > $O/pack-nz3.log 2>&1 &
  $K/tern pack $M/bitnet-tq2_0.gguf -o $M/raw.tern > $O/pack-raw.log 2>&1 &
  wait; echo "pack done +${SECONDS}s" >> $O/bg.log
  touch $M/ready
) &
log "gpu_bench --only neuzip"
timeout 220 $K/gpu_bench --only neuzip > $O/gpu_bench_neuzip.json 2> $O/gpu_bench_neuzip.err; log "gpu_bench rc $?"
for i in $(seq 1 200); do [ -f $M/ready ] && break; sleep 1; done
log "models: $(cat $O/bg.log | tr '\n' ' ')"; ls -la $M >> $O/log.txt
log "llama-bench TQ2_0 (q6_K head)"
timeout 60 /tmp/llama/bin/llama-bench -m $M/bitnet-tq2_0.gguf -ngl 99 -p 0 -n 128 -r 3 -o json > $O/llama-tq2_0.json 2> $O/llama-tq2_0.err; log "rc $?"
for t in nz3 nz; do
  MIN=$($K/tern bench $M/$t.tern --device gpu --max-memory 1K -p 0 -n 1 -r 1 2>&1 | grep -o 'at least [0-9]*' | head -1 | grep -o '[0-9]*')
  log "$t: min budget ${MIN:-?}"
  [ -n "$MIN" ] && { timeout 60 $K/tern bench $M/$t.tern --device gpu --json -p 0 -n 128 -r 3 --max-memory $MIN > $O/tern-$t-kept.json 2> $O/tern-$t-kept.err; log "kept rc $?"; }
  timeout 60 $K/tern bench $M/$t.tern --device gpu --json -p 0 -n 128 -r 3 > $O/tern-$t-decoded.json 2> $O/tern-$t-decoded.err; log "decoded rc $?"
done
timeout 50 $K/tern bench $M/raw.tern --device gpu --json -p 0 -n 128 -r 3 > $O/tern-raw-q6k.json 2> $O/tern-raw-q6k.err; log "raw rc $?"
ls -la $M/*.tern $M/*.gguf >> $O/log.txt 2>&1
python3 - $O > $O/summary.txt <<'PY' || true
import glob, json, os, sys
o = sys.argv[1]
for f in sorted(glob.glob(f'{o}/tern-*.json')):
    try: d = json.load(open(f))
    except Exception as e: print(os.path.basename(f), 'unreadable', e); continue
    m = d.get('memory', {})
    tg = [(t['test'], round(t['avg_ts'], 1), round(t['stddev_ts'], 1)) for t in d.get('tests', [])]
    print(os.path.basename(f), 'tg', tg, 'file', d.get('file_bytes'), 'weights', m.get('weights'),
          'kv', m.get('kv'), 'scratch', m.get('scratch'), 'jit_scratch', m.get('jit_scratch'),
          'peak', m.get('gpu_allocated_peak'), 'budget', m.get('budget'), 'by_enc', m.get('weights_by_encoding'))
for f in sorted(glob.glob(f'{o}/llama-*.json')):
    try:
        for e in json.load(open(f)): print(os.path.basename(f), e['n_gen'], round(e['avg_ts'], 1), round(e['stddev_ts'], 1), e.get('model_size'))
    except Exception as e: print(os.path.basename(f), 'unreadable', e)
PY
log done
cd $O && tar czf /tmp/all.tar.gz --exclude all.tar.gz . && mv /tmp/all.tar.gz all.tar.gz
find . -maxdepth 1 -type f ! -name all.tar.gz ! -name summary.txt ! -name log.txt ! -name gpu_bench_neuzip.json -delete
