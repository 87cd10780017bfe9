#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEEDS WORK [libFuzzer flags...]: runs FUZZER from the seeds in SEEDS; new inputs go to
# WORK/corpus (the repository's seeds stay as they are), a crash to WORK/crash-*. Prints executions and exits
# non-zero on any finding.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
shift 3
mkdir -p "$work/corpus"
status=0
"$fuzzer" -artifact_prefix="$work/" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=1048576 \
  "$@" "$work/corpus" "$seeds" > "$work/log" 2>&1 || status=$?
grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|INFO: Seed|Done)" "$work/log" || true
if [ "$status" != 0 ]; then
  tail -n 60 "$work/log"
  echo "FINDING: $fuzzer exited $status; the input is in $work/ (crash-*, timeout-*, oom-*, leak-*)"
fi
exit "$status"
