#!/usr/bin/env bash
# Long fuzzing runs: builds the libFuzzer harnesses (clang, ASan + UBSan) in ${FUZZ_BUILD_DIR:-build-fuzz} and
# runs each for RUNS executions (default 1000000) or SECONDS, one after the other, at the lowest CPU priority.
#   scripts/fuzz.sh [HARNESS...]        default: all (archive_fuzz record_fuzz spec_plan_fuzz hook_fuzz request_fuzz
#                                       archive_walk_fuzz registry_fuzz import_fuzz chunk_file_fuzz)
#   RUNS=N | SECONDS_EACH=S             how long each runs
#   JOBS=N                              parallel harness runs (default 1)
# Prints executions, corpus size and findings per harness; exits non-zero if any harness found something
# (the input is kept in BUILD/fuzz/<harness>.long/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
RUNS=${RUNS:-1000000}
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(archive_fuzz record_fuzz spec_plan_fuzz hook_fuzz request_fuzz archive_walk_fuzz
                                         registry_fuzz import_fuzz chunk_file_fuzz)
command -v clang++ >/dev/null || { echo "clang++ not installed (scripts/setup.sh)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUCKPT_FUZZ=ON \
  ${CMAKE_FLAGS:-} >/dev/null
nice -n 19 cmake --build "$BUILD" --target "${HARNESSES[@]}"
limit=(-runs="$RUNS")
[ -n "${SECONDS_EACH:-}" ] && limit=(-max_total_time="$SECONDS_EACH")
status=0
run_one() {
  local h=$1 work="$BUILD/fuzz/$1.long" start end
  start=$(date +%s)
  if nice -n 19 fuzz/run_fuzzer.sh "$BUILD/fuzz/$h" "fuzz/corpus/$h" "$work" "${limit[@]}" > "$work.summary" 2>&1; then
    result="no findings"
  else
    result="FINDING (see $work/)"
  fi
  end=$(date +%s)
  printf '%-16s %12s executions  %6s s  corpus %5s  peak RSS %5s MB  %s\n' "$h" \
    "$(grep -o 'number_of_executed_units: *[0-9]*' "$work.summary" | tail -1 | grep -o '[0-9]*$' || echo '?')" "$((end - start))" \
    "$(ls "$work/corpus" 2>/dev/null | wc -l)" "$(grep -o 'peak_rss_mb: *[0-9]*' "$work.summary" | tail -1 | grep -o '[0-9]*$' || echo '?')" \
    "$result"
  [ "$result" = "no findings" ]
}
mkdir -p "$BUILD/fuzz"
pids=()
for h in "${HARNESSES[@]}"; do
  run_one "$h" & pids+=($!)
  if [ ${#pids[@]} -ge "${JOBS:-1}" ]; then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit "$status"
