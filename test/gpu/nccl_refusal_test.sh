#!/usr/bin/env bash
# GPU test (label gpu, two GPUs): an NCCL job the installed driver cannot checkpoint and restore is refused before
# anything is locked, with a message naming the processes and the driver it needs, and it keeps running.
# Two torch.distributed ranks (test/gpu/nccl_ranks.py: a launcher and one process per GPU, all-reducing):
#   tree           criu dump of the whole job (the launcher's tree)
#   leave_running  the same with --leave-running
#   one_rank       criu dump --leave-running of rank 1 alone (as another container of the pod would be)
#   pod            the ranks in two containers of one pod (shared network and IPC namespaces and /dev/shm, both
#                  GPUs each),
#                  `gpuckpt checkpoint` of each container through the agent: refused, the CLI's message names the
#                  NCCL peer in the other container and the driver needed, both containers keep running (needs the
#                  node made by device_node.sh: podman, the installed hook and plugin, the CDI spec)
# After each refusal both ranks' all-reduce counters must advance and the driver must report both RUNNING.
# On a driver that can restore shared state (>= 610) the refusal must not happen: the cases then report SKIPPED
# for this script's expectations (the job would be checkpointed).
#   GPUCKPT_BUILD_DIR / GPUCKPT_PLUGIN_DIR, CRIU, NCCL_TEST_OUT (keep logs), PYTHON (default python3), NCCL_TESTS
#   (the cases; default all)
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CRIU=${CRIU:-criu}
PYTHON=${PYTHON:-python3}
LIBDIR=${GPUCKPT_PLUGIN_DIR:-${GPUCKPT_BUILD_DIR:-}/criu-plugin}

skip() { echo "SKIPPED: $*"; exit 77; }
command -v nvidia-smi >/dev/null && [ -e /dev/nvidia0 ] || skip "no NVIDIA GPU here"
[ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ] || skip "needs two GPUs"
command -v "$CRIU" >/dev/null || skip "no criu (set CRIU=)"
"$PYTHON" -c "import torch.distributed" 2>/dev/null || skip "no torch in $PYTHON"
# The interpreter itself (a virtualenv's bin/python3, not /usr/bin/python3 that `python3` on PATH may lead to): the pod
# case runs it inside containers that see the host's /usr and the venv, and only the venv's has torch.
PYTHON=$("$PYTHON" -c 'import sys; print(sys.executable)')
[ -f "$LIBDIR/gpuckpt_plugin.so" ] || { echo "FAILED: no gpuckpt_plugin.so in $LIBDIR"; exit 1; }
[ "$(id -u)" = 0 ] || skip "CRIU needs root"
DRIVER=$(sed -n 's/.*Kernel Module.*  \([0-9][0-9.]*\)  .*/\1/p' /proc/driver/nvidia/version | head -1)
[ "${DRIVER%%.*}" -lt 610 ] 2>/dev/null || skip "driver $DRIVER restores CUDA state shared between processes"

WORK=${NCCL_TEST_OUT:-$(mktemp -d /tmp/gpuckpt-nccl.XXXXXX)}
mkdir -p "$WORK"
JOB=
nccl_cleanup() {
  [ -n "$JOB" ] && kill -9 -- "-$JOB" 2>/dev/null
  [ -n "${NCCL_TEST_OUT:-}" ] || rm -rf "$WORK"
}
trap nccl_cleanup EXIT
. "$HERE/gpu_test_lib.sh"

cc -O2 -o "$WORK/cuckpt" "$HERE/../../bench/cuckpt.c" -ldl || { echo "FAILED: cannot build cuckpt"; exit 1; }
ITERS=$WORK/iters   # where the ranks write their counters (rank<R>.iter)
iter() { cat "$ITERS/rank$1.iter" 2>/dev/null || echo 0; }
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

CASES=${NCCL_TESTS:-tree leave_running one_rank pod}
wanted() { [[ " $CASES " == *" $1 "* ]]; }
if wanted tree || wanted leave_running || wanted one_rank; then
  setsid "$PYTHON" "$HERE/nccl_ranks.py" "$WORK/iters" >"$WORK/job.log" 2>&1 & JOB=$!
  deadline=$((SECONDS + 90))
  until [ "$(iter 0)" -ge 100 ] && [ "$(iter 1)" -ge 100 ]; do
    [ $SECONDS -lt $deadline ] || { tail -20 "$WORK/job.log"; echo "FAILED: the NCCL job did not start"; exit 1; }
    sleep 0.5
  done
  RANKS=$(cat /proc/$JOB/task/*/children | tr " " "\n" | grep . | sort -n | tr "\n" " ")
  set -- $RANKS
  RANK0=$1 RANK1=$2
  echo "job: launcher $JOB, ranks $RANK0 $RANK1"
fi
wanted tree && refused tree "NCCL/CUDA IPC between processes $RANK0 and $RANK1" "$JOB"
wanted leave_running && refused leave_running "NCCL/CUDA IPC between processes $RANK0 and $RANK1" "$JOB" --leave-running
wanted one_rank && refused one_rank "NCCL/CUDA IPC between processes $RANK1 and $RANK0 ($RANK0 is not part of this dump)" "$RANK1" --leave-running
[ -f "$WORK/tree.msg" ] && { echo "--- the refusal as logged (tree case)"; cat "$WORK/tree.msg"; }
kill -9 -- "-$JOB" 2>/dev/null; JOB=

# ---- the ranks in two containers of one pod, through the agent -------------------------------------------------
case_pod() {
  start_agent || { record pod FAIL "agent did not start"; return; }
  host_python_mounts "$PYTHON" && python_image || { record pod FAIL "cannot make the python image"; return; }
  local pod=$PREFIX-nccl r rank_pid=() a0 a1 msg
  ITERS=$WORK/pod-iters; mkdir -p "$ITERS"; chmod 777 "$ITERS"
  new_sandbox "$pod" || { record pod FAIL "cannot make the pod's namespaces"; return; }
  local sandbox; read -ra sandbox <<< "$(sandbox_args "$pod")"
  mkdir -p "$WORK/pod-shm"   # the pod's /dev/shm, shared as a pod's is
  for r in 0 1; do
    pm run -d --name "$pod-rank$r" "${sandbox[@]}" -v "$WORK/pod-shm:/dev/shm" --device nvidia.com/gpu=0 --device nvidia.com/gpu=1 "${GPU_SAFE_ENV[@]}" \
      "${HOST_PY_MOUNTS[@]}" -v "$HERE:/srv:ro" -v "$ITERS:/iters" -e HOME=/tmp -e MASTER_ADDR=127.0.0.1 \
      -e MASTER_PORT=29533 -e RANK=$r -e WORLD_SIZE=2 -e LOCAL_RANK=$r \
      "$PY_IMAGE" "$PYTHON" /srv/nccl_ranks.py /iters --rank $r --world 2 > "$WORK/pod-rank$r.run" 2>&1 \
      || { show "$WORK/pod-rank$r.run"; record pod FAIL "podman run rank $r"; return; }
  done
  local deadline=$((SECONDS + 120))
  until [ "$(iter 0)" -ge 100 ] && [ "$(iter 1)" -ge 100 ]; do
    [ $SECONDS -lt $deadline ] || { pm logs "$pod-rank0" 2>&1 | tail -5; record pod FAIL "the NCCL ranks did not start in the pod"; return; }
    sleep 0.5
  done
  for r in 0 1; do rank_pid+=("$(ctr_pid "$pod-rank$r")"); done
  RANKS="${rank_pid[*]}"
  echo "pod $pod: rank 0 pid ${rank_pid[0]}, rank 1 pid ${rank_pid[1]} ($(readlink "/proc/${rank_pid[0]}/ns/net"), $(readlink "/proc/${rank_pid[1]}/ns/net"))"
  for r in 1 0; do
    a0=$(iter 0) a1=$(iter 1)
    if gk checkpoint "$pod-rank$r" > "$WORK/pod-rank$r.ckpt.log" 2>&1; then record pod FAIL "checkpoint of rank $r's container succeeded"; return; fi
    msg=$(grep -o "refusing to checkpoint: NCCL/CUDA IPC between processes.*" "$WORK/pod-rank$r.ckpt.log" | head -1)
    [ -n "$msg" ] || { show "$WORK/pod-rank$r.ckpt.log"; criu_log "$pod-rank$r"; record pod FAIL "rank $r: the CLI's message does not say why"; return; }
    [[ "$msg" == *"${rank_pid[$((1 - r))]} is not part of this dump"* ]] || { record pod FAIL "rank $r: the message does not name the peer in the other container: $msg"; return; }
    [[ "$msg" == *"driver >= 610"* ]] || { record pod FAIL "rank $r: the message does not name the driver needed"; return; }
    ! grep -q "gpuckpt: cuda: locked pid" "$(podman inspect -f '{{.StaticDir}}' "$pod-rank$r")/dump.log" 2>/dev/null || { record pod FAIL "rank $r: a process was locked"; return; }
    [ "$(podman inspect -f '{{.State.Running}}' "$pod-rank$r")" = true ] || { record pod FAIL "rank $r's container stopped"; return; }
    both_advance "$a0" "$a1" || { record pod FAIL "the job stopped after rank $r's refusal (ranks at $(iter 0) $(iter 1), were $a0 $a1)"; return; }
    both_running || { record pod FAIL "a rank is not RUNNING for the driver after rank $r's refusal"; return; }
    echo "--- rank $r, as the CLI says it"; grep -E "failed|refusing" "$WORK/pod-rank$r.ckpt.log" | cut -c1-700
  done
  record pod PASS "both containers' checkpoints through the agent refused (the CLI: '${msg:0:150}...'); ranks went on to $(iter 0)/$(iter 1), both RUNNING, both containers running"
}
if wanted pod; then
  BUILD=${GPUCKPT_BUILD_DIR:-$HERE/../../build}
  if command -v podman >/dev/null && { command -v gpuckpt-agent >/dev/null || [ -x "$BUILD/agent/gpuckpt-agent" ]; } &&
     { [ -f /etc/cdi/nvidia.json ] || [ -f /etc/cdi/nvidia.yaml ]; }; then
    # shellcheck disable=SC2034  # read by node_test_lib.sh
    SRC=$(cd "$HERE/../.." && pwd) PREFIX=gpuckpt-nccl-$$ KEEP_OUT=$WORK NODE_CLEANUP=nccl_cleanup
    . "$HERE/node_test_lib.sh"
    case_pod
  else
    record pod SKIP "no GPU container node here (podman, gpuckpt-agent, a CDI spec: test/gpu/device_node.sh)"
  fi
fi

summary "NCCL refusal"
