#!/usr/bin/env bash
# GPU test (label gpu, two GPUs): an NCCL job the installed driver cannot checkpoint and restore is refused before
# anything is locked, with a message naming the processes and the driver it needs, and it keeps running.
# Two torch.distributed ranks (test/gpu/nccl_ranks.py: a launcher and one process per GPU, all-reducing):
#   tree           criu dump of the whole job (the launcher's tree)
#   leave_running  the same with --leave-running
#   one_rank       criu dump --leave-running of rank 1 alone (as another container of the pod would be)
# After each refusal both ranks' all-reduce counters must advance and the driver must report both RUNNING.
# On a driver that can restore shared state (>= 610) the refusal must not happen: the cases then report SKIPPED
# for this script's expectations (the job would be checkpointed).
#   GPUCKPT_BUILD_DIR / GPUCKPT_PLUGIN_DIR, CRIU, NCCL_TEST_OUT (keep logs), PYTHON (default python3)
set -uo pipefail

SRC=$(cd "$(dirname "$0")" && pwd)
CRIU=${CRIU:-criu}
PYTHON=${PYTHON:-python3}
LIBDIR=${GPUCKPT_PLUGIN_DIR:-${GPUCKPT_BUILD_DIR:-}/criu-plugin}

skip() { echo "SKIPPED: $*"; exit 77; }
command -v nvidia-smi >/dev/null && [ -e /dev/nvidia0 ] || skip "no NVIDIA GPU here"
[ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ] || skip "needs two GPUs"
command -v "$CRIU" >/dev/null || skip "no criu (set CRIU=)"
"$PYTHON" -c "import torch.distributed" 2>/dev/null || skip "no torch in $PYTHON"
[ -f "$LIBDIR/gpuckpt_plugin.so" ] || { echo "FAILED: no gpuckpt_plugin.so in $LIBDIR"; exit 1; }
[ "$(id -u)" = 0 ] || skip "CRIU needs root"
DRIVER=$(sed -n 's/.*Kernel Module.*  \([0-9][0-9.]*\)  .*/\1/p' /proc/driver/nvidia/version | head -1)
[ "${DRIVER%%.*}" -lt 610 ] 2>/dev/null || skip "driver $DRIVER restores CUDA state shared between processes"

WORK=${NCCL_TEST_OUT:-$(mktemp -d /tmp/gpuckpt-nccl.XXXXXX)}
mkdir -p "$WORK"
JOB=
cleanup() {
  [ -n "$JOB" ] && kill -9 -- "-$JOB" 2>/dev/null
  [ -n "${NCCL_TEST_OUT:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
. "$SRC/gpu_test_lib.sh"

cc -O2 -o "$WORK/cuckpt" "$SRC/../../bench/cuckpt.c" -ldl || { echo "FAILED: cannot build cuckpt"; exit 1; }
iter() { cat "$WORK/iters/rank$1.iter" 2>/dev/null || echo 0; }
both_advance() { # FROM0 FROM1: both ranks' counters pass where they were within 20 s
  local deadline=$((SECONDS + 20))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(iter 0)" -gt "$1" ] && [ "$(iter 1)" -gt "$2" ] && return 0
    sleep 0.2
  done
  return 1
}
both_running() { for p in $RANKS; do [ "$(timeout 10 "$WORK/cuckpt" state "$p")" = 0 ] || return 1; done; }

echo "driver $DRIVER; criu $("$CRIU" --version | head -1); $("$PYTHON" -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"
setsid "$PYTHON" "$SRC/nccl_ranks.py" "$WORK/iters" >"$WORK/job.log" 2>&1 & JOB=$!
deadline=$((SECONDS + 90))
until [ "$(iter 0)" -ge 100 ] && [ "$(iter 1)" -ge 100 ]; do
  [ $SECONDS -lt $deadline ] || { tail -20 "$WORK/job.log"; echo "FAILED: the NCCL job did not start"; exit 1; }
  sleep 0.5
done
RANKS=$(cat /proc/$JOB/task/*/children | tr " " "\n" | grep . | sort -n | tr "\n" " ")
set -- $RANKS
RANK0=$1 RANK1=$2
echo "job: launcher $JOB, ranks $RANK0 $RANK1"

# refused CASE EXPECT_PEERS TARGET [criu args]: criu dump must fail, say why, lock nothing; the job runs on.
refused() {
  local name=$1 peers=$2 target=$3 img=$WORK/$1.img; shift 3
  mkdir -p "$img"
  local a0 a1 t0 t1 rc
  a0=$(iter 0) a1=$(iter 1)
  t0=$(date +%s.%N)
  timeout -s KILL 60 "$CRIU" dump -t "$target" -D "$img" -o dump.log -v4 --libdir "$LIBDIR" "$@"; rc=$?
  t1=$(date +%s.%N)
  local took; took=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
  local check; check=$(grep -o 'timing: cuda shared-state check.*' "$img/dump.log" | head -1)
  grep -E "gpuckpt: cuda: (refusing|locked|locking)" "$img/dump.log" | cut -c1-600 > "$WORK/$name.msg"
  [ "$rc" != 0 ] || { record "$name" FAIL "criu dump succeeded (rc 0)"; return; }
  grep -q "refusing to checkpoint: $peers" "$img/dump.log" \
    || { cat "$WORK/$name.msg"; record "$name" FAIL "no refusal naming '$peers'"; return; }
  grep -q "driver >= 610" "$img/dump.log" || { record "$name" FAIL "the refusal does not name the driver needed"; return; }
  ! grep -q "gpuckpt: cuda: locked pid" "$img/dump.log" || { record "$name" FAIL "a process was locked"; return; }
  both_advance "$a0" "$a1" || { record "$name" FAIL "the job stopped (ranks at $(iter 0) $(iter 1), were $a0 $a1)"; return; }
  both_running || { record "$name" FAIL "a rank is not RUNNING for the driver"; return; }
  record "$name" PASS "criu dump refused in $took s ($check); ranks went on $a0/$a1 -> $(iter 0)/$(iter 1), both RUNNING"
}

refused tree "NCCL/CUDA IPC between processes $RANK0 and $RANK1" "$JOB"
refused leave_running "NCCL/CUDA IPC between processes $RANK0 and $RANK1" "$JOB" --leave-running
refused one_rank "NCCL/CUDA IPC between processes $RANK1 and $RANK0 ($RANK0 is not part of this dump)" "$RANK1" --leave-running
echo "--- the refusal as logged (tree case)"; cat "$WORK/tree.msg"

summary "NCCL refusal"
