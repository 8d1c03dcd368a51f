#!/usr/bin/env bash
# Fuzz one target on the lent machine's CPU cores (its GPU is not used): the target's libFuzzer
# binary, built here by `cargo fuzz build -s none -O` and stripped, is carried in .devkit/fuzz/
# with its seed corpus; W workers run T seconds each with their own seed, the RSS limit and the
# per-input timeout CI uses, and the executions are summed. A crash, an OOM or a timeout leaves
# its input under $OUT/artifacts and fails the run.
#   scripts/device-fuzz.sh TARGET [WORKERS] [SECONDS]
set -uo pipefail
t=$1; w=${2:-16}; secs=${3:-480}
bin=.devkit/fuzz/$t; corpus=.devkit/fuzz/corpus_$t
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/artifacts" "$OUT/logs"
echo "host: $(nproc) cores; $t: $w workers × ${secs}s"
pids=()
for i in $(seq 1 "$w"); do
  mkdir -p "/tmp/corpus_$i"; cp -r "$corpus"/. "/tmp/corpus_$i/"
  "$bin" -seed="$i" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/" "/tmp/corpus_$i" >"$OUT/logs/$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
total=0
for i in $(seq 1 "$w"); do
  n=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$OUT/logs/$i.log")
  echo "worker $i: ${n:-no 'Done' line (crashed?)} runs"
  total=$((total + ${n:-0}))
done
echo "$t: $total executions in total, $(ls "$OUT/artifacts" | wc -l) findings, rc $rc"
exit $rc
