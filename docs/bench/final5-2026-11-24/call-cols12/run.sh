# old (final5 call-a binary) vs new (Cols12 refactor of the decode GEMV's prologues), interleaved
set -u
. scripts/device-env.sh; device_vulkan_env "$PWD"
K=/tmp/k; M=/tmp/m; mkdir -p $K $M $OUT
xz -dc .devkit-fin3/tern.xz > $K/tern-new; xz -dc .devkit-fin3/tern-old.xz > $K/tern-old; chmod +x $K/tern-*
mkdir -p /tmp/llama; tar xJf .devkit-fin3/llama-vulkan.tar.xz -C /tmp/llama
python3 scripts/gen_synth_gguf.py $M/b.gguf --shape bitnet > $OUT/gen.log 2>&1
/tmp/llama/bin/llama-quantize $M/b.gguf $M/q.gguf TQ2_0 8 > $OUT/quant.log 2>&1
$K/tern-new pack $M/q.gguf -o $M/q.tern > $OUT/pack.log 2>&1
for r in 1 2; do for b in old new; do for a in a8 a4.8; do
  $K/tern-$b bench $M/q.tern --device gpu --json -p 0 -n 128 -r 3 --activations $a > $OUT/$b-$a-r$r.json 2> $OUT/$b-$a-r$r.err
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('$b $a r$r', [round(t['avg_ts'],1) for t in d['tests']], d['dispatches_per_token'])" $OUT/$b-$a-r$r.json | tee -a $OUT/summary.txt
done; done; done
