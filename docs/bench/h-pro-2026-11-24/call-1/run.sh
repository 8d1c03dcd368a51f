#!/usr/bin/env bash
# h-pro (issue 15, 2026-11-24): the decode GEMV's fused norm prologue (ternary_gemv_dec_norm.wgsl)
# on the 2B4T shape, A/B in one call through TERN_GPU_FUSE_NORM (0 = separate rmsnorm_quant,
# qkv = the branch default, attn, all, 1 = all + the wide kernel), tg128 and dispatches per token,
# per-dispatch profiles, and the parity binary (decode + a4.8 cases) on the device.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json VK_ICD_FILENAMES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
K=.devkit-hpro; F=/tmp/hp; M=/tmp/m; O=$OUT/hp; mkdir -p $F $M $O
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a $O/run.log; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $O/gpu.txt 2>&1
log "GPU $(cat $O/gpu.txt)"
xz -dc $K/tern.xz > $F/tern; chmod +x $F/tern
[ -f $K/parity.xz ] && { xz -dc $K/parity.xz > $F/parity; chmod +x $F/parity; }
if [ ! -s $M/bitnet-tq2_0.gguf ]; then
  mkdir -p /tmp/llama; tar xJf $K/llama-vulkan.tar.xz -C /tmp/llama
  LDC=$(ldconfig -p)
  for lib in /tmp/llama/fallback-lib/*; do
    [ -e "$lib" ] || continue
    grep -qF "$(basename "$lib") " <<<"$LDC" || [ -e /tmp/llama/bin/$(basename "$lib") ] || cp "$lib" /tmp/llama/bin/
  done
  python3 scripts/gen_synth_gguf.py $M/bitnet-f16.gguf --shape bitnet > $O/gen.log 2>&1
  /tmp/llama/bin/llama-quantize $M/bitnet-f16.gguf $M/bitnet-tq2_0.gguf TQ2_0 16 > $O/quantize.log 2>&1
  log "quantize rc $? $(du -m $M/bitnet-tq2_0.gguf | cut -f1) MiB"
fi
P=$M/bitnet-2bit.tern
[ -s $P ] || $F/tern pack $M/bitnet-tq2_0.gguf -o $P --ternary 2bit --floats raw > $O/pack.log 2>&1
log "pack rc $? $(du -m $P | cut -f1) MiB"
tb() { local tag=$1; shift
  log "bench $tag FUSE=${TERN_GPU_FUSE_NORM:-unset} $*"
  timeout 60 $F/tern bench $P --device gpu --json "$@" > $O/tern-$tag.json 2> $O/tern-$tag.err
  python3 - $O/tern-$tag.json $tag >> $O/summary.txt <<'PY' || tail -3 $O/tern-$tag.err | tee -a $O/summary.txt
import json,sys
d=json.load(open(sys.argv[1]))
print(sys.argv[2],[(t['test'],round(t['avg_ts'],1),round(t.get('stddev_ts',0),1)) for t in d['tests']],'disp',d.get('dispatches_per_token'))
ks=d.get('profile_us_per_token') or []
if ks: print('   total us',round(sum(k['us'] for k in ks),1))
for k in sorted(ks,key=lambda k:-k['us'])[:10]: print('   ',k['kernel'],k['dispatches'],round(k['us'],1),round(k['us']/max(k['dispatches'],1),2))
PY
}
for round in 1 2; do
  for mode in 0 qkv attn all 1; do
    TERN_GPU_FUSE_NORM=$mode tb "a8-$mode-r$round" -p 0 -n 128 -r 3
  done
done
for mode in 0 qkv all; do TERN_GPU_FUSE_NORM=$mode tb "a48-$mode" -p 0 -n 128 -r 3 --activations a4.8; done
for mode in 0 qkv all; do TERN_GPU_FUSE_NORM=$mode tb "prof-$mode" -p 0 -n 16 -r 1 --profile; done
if [ -x $F/parity ]; then
  log "parity (decode + a4.8 cases, both dot kinds) on the device"
  TERN_REQUIRE_GPU=1 timeout 90 $F/parity parity_a48 --nocapture > $O/parity.txt 2>&1; log "parity rc $?"
  grep -c "^ok" $O/parity.txt | sed 's/^/parity ok lines: /' >> $O/summary.txt
  grep "FAIL\|test result\|decode norm" $O/parity.txt | head -40 >> $O/summary.txt
fi
log done
cd $OUT && tar czf hp.tar.gz hp && cp hp/summary.txt . && cat hp/summary.txt
