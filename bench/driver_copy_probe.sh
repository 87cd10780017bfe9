#!/usr/bin/env bash
# Benchmark probe (not a test): where the CUDA driver's checkpoint copy spends its time, without CRIU.
# A gpu_counter process holds MIB of random device memory; from outside, cuCheckpointProcessLock + Checkpoint move
# it into the process's host memory, Restore + Unlock move it back (bench/cuckpt.c). While each call runs, the
# process's RSS, AnonHugePages and minor faults are sampled every 50 ms, so the copy's rate over time and the page
# faults it takes show. Variants (PROBE_VARIANTS): plain; glibc-hugetlb (GLIBC_TUNABLES=glibc.malloc.hugetlb=1:
# glibc's malloc asks for THP on what it maps); shim-log / shim-thp (bench/thp_mmap_shim.c: log the driver's large
# anonymous mmaps; madvise(MADV_HUGEPAGE) on them); thp-always (measurement only: the machine's global THP
# setting set to `always` for this one variant and put back after it, to learn what huge pages would give the
# driver's copy; gpuckpt itself never changes it). Other variants only read the setting.
#   bash bench/driver_copy_probe.sh [MIB]   (PROBE_OUT=dir for the table probe.tsv and the timelines)
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
MIB=${1:-8192}
OUT=${PROBE_OUT:-/tmp/driver-copy-probe}
VARIANTS=${PROBE_VARIANTS:-plain glibc-hugetlb shim-log shim-thp}
BIN=/tmp/driver-copy-probe-bin
mkdir -p "$OUT" "$BIN"
gcc -O2 -o $BIN/cuckpt "$SRC/bench/cuckpt.c" -ldl || exit 1
gcc -O2 -shared -fPIC -o $BIN/thp_mmap_shim.so "$SRC/bench/thp_mmap_shim.c" -ldl || exit 1
[ -x $BIN/gpu_counter ] || nvcc -O2 -o $BIN/gpu_counter "$SRC/test/gpu/gpu_counter.cu" || exit 1
{
  echo "# $(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader)"
  echo "# kernel $(uname -r); THP enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled); defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
  echo "# $(nproc) cpus; numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l)"
} | tee "$OUT/probe.tsv"
printf 'variant\tmib\tlock_s\tcheckpoint_s\tcheckpoint_GBps\tminflt_ckpt\tanon_huge_MiB\trss_MiB\trestore_s\trestore_GBps\tunlock_s\tlarge_mmaps\n' |
  tee -a "$OUT/probe.tsv"

thp_setting=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)
trap 'echo "$thp_setting" > /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null' EXIT
now() { date +%s.%N; }
sample() {   # pid file: "t rss_kib anonhuge_kib minflt" every 50 ms until the pid is gone or a stop file appears
  local pid=$1 file=$2
  while [ -d /proc/$pid ] && [ ! -e "$file.stop" ]; do
    local rss huge flt
    rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null)
    huge=$(awk '/^AnonHugePages/ {print $2}' /proc/$pid/smaps_rollup 2>/dev/null)
    flt=$(awk '{print $10}' /proc/$pid/stat 2>/dev/null)
    echo "$(now) ${rss:-0} ${huge:-0} ${flt:-0}"
    sleep 0.05
  done > "$file"
}
field() { awk -v k="$2" '$0 ~ "^"k {print $2}' "/proc/$1/$3" 2>/dev/null; }

for variant in $VARIANTS; do
  rm -f "$OUT/$variant."*
  envs=()
  case $variant in
    glibc-hugetlb) envs=(GLIBC_TUNABLES=glibc.malloc.hugetlb=1) ;;
    shim-log) envs=("LD_PRELOAD=$BIN/thp_mmap_shim.so" "THP_SHIM_LOG=$OUT/$variant.mmaps") ;;
    shim-thp) envs=("LD_PRELOAD=$BIN/thp_mmap_shim.so" "THP_SHIM_LOG=$OUT/$variant.mmaps" THP_SHIM_ADVISE=1) ;;
  esac
  [ "$variant" = thp-always ] && echo always > /sys/kernel/mm/transparent_hugepage/enabled
  env "${envs[@]}" $BIN/gpu_counter "$MIB" "$OUT/$variant.counter" --sleep-ms 200 --content random &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$OUT/$variant.counter" ] && break; sleep 0.1; done
  [ -s "$OUT/$variant.counter" ] || { echo "$variant: gpu_counter did not start"; kill -9 $pid; continue; }
  t0=$(now); $BIN/cuckpt lock $pid || { kill -9 $pid; continue; }; t1=$(now)
  flt0=$(awk '{print $10}' /proc/$pid/stat)
  sample $pid "$OUT/$variant.ckpt-timeline" & sampler=$!
  t2=$(now); $BIN/cuckpt checkpoint $pid; t3=$(now)
  touch "$OUT/$variant.ckpt-timeline.stop"; wait $sampler
  flt1=$(awk '{print $10}' /proc/$pid/stat)
  huge=$(field $pid AnonHugePages smaps_rollup); rss=$(field $pid VmRSS status)
  cp /proc/$pid/smaps "$OUT/$variant.smaps-after-checkpoint" 2>/dev/null
  sample $pid "$OUT/$variant.restore-timeline" & sampler=$!
  t4=$(now); $BIN/cuckpt restore $pid; t5=$(now)
  touch "$OUT/$variant.restore-timeline.stop"; wait $sampler
  t6=$(now); $BIN/cuckpt unlock $pid; t7=$(now)
  sleep 0.5
  alive=$([ -d /proc/$pid ] && echo yes || echo no)
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  echo "$thp_setting" > /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
  mmaps=$( [ -f "$OUT/$variant.mmaps" ] && awk '{n++; s+=$2} END {printf "%d/%.0fMiB", n, s/1048576}' "$OUT/$variant.mmaps" || echo -)
  awk -v v=$variant -v m=$MIB -v t0=$t0 -v t1=$t1 -v t2=$t2 -v t3=$t3 -v t4=$t4 -v t5=$t5 -v t6=$t6 -v t7=$t7 \
      -v f=$((flt1 - flt0)) -v h=${huge:-0} -v r=${rss:-0} -v mm="$mmaps" 'BEGIN {
    g = m / 1024 * 1.073741824
    printf "%s\t%d\t%.2f\t%.2f\t%.2f\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%s\n", v, m, t1-t0, t3-t2, g/(t3-t2), f, h/1024, r/1024,
      t5-t4, g/(t5-t4), t7-t6, mm }' | tee -a "$OUT/probe.tsv"
  echo "# $variant: process alive after unlock: $alive; last counter line: $(tail -1 "$OUT/$variant.counter")" | tee -a "$OUT/probe.tsv"
done
