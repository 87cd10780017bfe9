#!/bin/sh
# test/gpu/gpu_counter.cu's command line and output without a GPU, for the GPU tests' simulated-GPU mode: every
# iteration appends "ITERATION STATE" to OUT, STATE a linear congruential chain over all earlier iterations, so a
# restored process that lost its memory (or started over) prints lines an uninterrupted run does not. MIB is
# ignored. POSIX sh (busybox's in the containers, the host's for the reference run).
#   gpu_counter_sim.sh MIB OUT [--iterations N] [--sleep-ms MS]
out=$2
shift 2
n=0 ms=20
while [ $# -gt 0 ]; do
  case $1 in
    --iterations) n=$2; shift ;;
    --sleep-ms) ms=$2; shift ;;
  esac
  shift
done
state=1 it=0
while [ "$n" -le 0 ] || [ "$it" -lt "$n" ]; do
  it=$((it + 1))
  state=$(( (state * 1103515245 + 12345 + it) % 2147483648 ))
  echo "$it $state" >> "$out"
  if [ "$ms" -gt 0 ]; then sleep "$(printf '0.%03d' "$ms")"; fi
done
