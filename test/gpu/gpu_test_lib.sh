# shellcheck shell=bash
# Sourced by the GPU test scripts (cuda_gpu_test.sh, container_gpu_test.sh): result bookkeeping and the checks
# that compare an interrupted counter run with an uninterrupted one. The counter's output file has one line per
# iteration, "ITERATION CHECKSUM".
RESULTS=()
FAILED=0
record() { RESULTS+=("$1 $2 ${3:-}"); echo "== $1: $2 ${3:-}"; [ "$2" != FAIL ] || FAILED=1; }
summary() { # prints the results; exit status: 1 if any failed, 77 if none passed, else 0
  echo "=== $1 summary"
  for r in "${RESULTS[@]}"; do echo "$r"; done
  [ "$FAILED" = 0 ] || return 1
  printf '%s\n' "${RESULTS[@]}" | grep -q ' PASS' || return 77
  return 0
}

last_iter() { tail -n 1 "$1" 2>/dev/null | cut -d' ' -f1; }
wait_iter() { # FILE N TIMEOUT_S: until FILE's last iteration >= N
  local deadline=$((SECONDS + ${3:-60})) it
  while [ $SECONDS -lt $deadline ]; do
    it=$(last_iter "$1"); [ -n "$it" ] && [ "$it" -ge "$2" ] && return 0; sleep 0.1
  done
  return 1
}
counter_reference() { # MIB ITERATIONS OUT [args]: the uninterrupted run of $WORK/gpu_counter, on this host
  local mib=$1 n=$2 out=$3; shift 3
  rm -f "$out"; "$WORK/gpu_counter" "$mib" "$out" --iterations "$n" --sleep-ms 0 "$@" >/dev/null
}
gone() { for _ in $(seq 600); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done; return 1; }
# Every line of $1 must appear, identical, in reference $2 (same iteration, same checksum).
same_as_reference() {
  local missing
  missing=$(grep -vxF -f "$2" "$1" | head -3)
  [ -z "$missing" ] || { echo "lines not in the uninterrupted run: $missing"; return 1; }
  # and no iteration was skipped or repeated
  awk 'NR>1 && $1!=prev+1 {print "iteration " prev " -> " $1; bad=1} {prev=$1} END {exit bad}' "$1"
}
