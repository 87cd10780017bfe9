#!/usr/bin/env bash
# GPU tests (label gpu): real CUDA processes checkpointed to disk by CRIU with gpuckpt_plugin.so, killed, restored,
# and compared bit for bit with uninterrupted runs. Exits 77 (skipped) without an NVIDIA GPU, CRIU or nvcc.
#   GPUCKPT_BUILD_DIR   build dir (plugin in criu-plugin/), or GPUCKPT_PLUGIN_DIR directly
#   CRIU                criu binary (default: criu on PATH)
#   GPU_TESTS           which cases (default: "basic torch child leave_running kill_mid_dump kill_after_drop remap")
#   GPU_TEST_OUT        keep logs here (default: a temp dir, removed)
#   GPUCKPT_CUDA_MEMORY_IMAGE=0  runs every case with GPU memory left to CRIU's page dump (the path forced off);
#                       otherwise `basic` also checks that gpuckpt wrote and filled the GPU memory itself
set -uo pipefail

SRC=$(cd "$(dirname "$0")" && pwd)
CRIU=${CRIU:-criu}
LIBDIR=${GPUCKPT_PLUGIN_DIR:-${GPUCKPT_BUILD_DIR:-}/criu-plugin}
CASES=${GPU_TESTS:-basic torch child leave_running kill_mid_dump kill_after_drop remap}

skip() { echo "SKIPPED: $*"; exit 77; }
[ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null || skip "no NVIDIA GPU here"
command -v "$CRIU" >/dev/null || skip "no criu (set CRIU=)"
command -v nvcc >/dev/null || skip "no nvcc to build the CUDA workload"
[ -f "$LIBDIR/gpuckpt_plugin.so" ] || { echo "FAILED: no gpuckpt_plugin.so in $LIBDIR"; exit 1; }
[ "$(id -u)" = 0 ] || skip "CRIU needs root"

WORK=${GPU_TEST_OUT:-$(mktemp -d /tmp/gpuckpt-gpu.XXXXXX)}
mkdir -p "$WORK"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "${GPU_TEST_OUT:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

. "$SRC/gpu_test_lib.sh"

NGPU=$(nvidia-smi -L | grep -c '^GPU ')
echo "GPUs: $NGPU; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); criu $("$CRIU" --version | head -1)"
nvcc -O2 -o "$WORK/gpu_counter" "$SRC/gpu_counter.cu" || { echo "FAILED: nvcc"; exit 1; }

dump() { # PID DIR [criu args]
  local pid=$1 dir=$2; shift 2
  mkdir -p "$dir"
  timeout -s KILL 90 "$CRIU" dump -t "$pid" -D "$dir" -o dump.log -v4 --libdir "$LIBDIR" "$@"
}
restore() { # DIR: restores detached, prints the restored root pid
  timeout -s KILL 90 "$CRIU" restore -D "$1" -o restore.log -v4 -d --libdir "$LIBDIR" --pidfile "$1/restored.pid" >/dev/null || return 1
  cat "$1/restored.pid"
}
# The GPU memory took the path this run asks for: gpuckpt's images (default) or CRIU's pages (forced off).
memory_path_ok() { # IMG PID
  if [ "${GPUCKPT_CUDA_MEMORY_IMAGE:-1}" = 0 ]; then
    ! ls "$1"/gpuckpt-gpumem-*.img >/dev/null 2>&1 && grep -q "GPUCKPT_CUDA_MEMORY_IMAGE=0: CRIU dumps" "$1/dump.log"
  else
    ls "$1"/gpuckpt-gpumem-*.img >/dev/null 2>&1 && grep -q "gpuckpt: cuda: wrote the staging memory of 1 process" "$1/dump.log" &&
      grep -q "dropped 1 staging region" "$1/dump.log" && grep -q "gpuckpt: cuda: filled the staging memory of 1 process" "$1/restore.log"
  fi
}
show_logs() { for f in "$@"; do [ -f "$f" ] && { echo "--- $f"; grep -E "gpuckpt|Error" "$f" | tail -25; }; done; }

# 1. A CUDA process with 1 GiB on the GPU: dump to disk, killed, restored, continues bit-identically.
case_basic() {
  local out=$WORK/basic.out img=$WORK/basic.img pid rpid
  setsid "$WORK/gpu_counter" 1024 "$out" </dev/null >"$WORK/basic.stdout" 2>&1 & pid=$!; PIDS+=($pid)
  wait_iter "$out" 20 60 || { record basic FAIL "workload did not start"; return; }
  dump "$pid" "$img" || { show_logs "$img/dump.log"; record basic FAIL "criu dump"; return; }
  wait "$pid" 2>/dev/null; gone "$pid" || { record basic FAIL "dumped process still there"; return; }
  local at_dump; at_dump=$(last_iter "$out")
  grep -q "gpuckpt: cuda: checkpointed pid $pid" "$img/dump.log" || { show_logs "$img/dump.log"; record basic FAIL "no CUDA checkpoint in the log"; return; }
  ls "$img"/gpuckpt-cuda-"$pid".img >/dev/null || { record basic FAIL "no GPU record in the image"; return; }
  rpid=$(restore "$img") || { show_logs "$img/restore.log"; record basic FAIL "criu restore"; return; }
  PIDS+=($rpid)
  wait_iter "$out" $((at_dump + 30)) 60 || { show_logs "$img/restore.log"; record basic FAIL "no progress after restore (at $(last_iter "$out"))"; return; }
  kill -9 "$rpid"
  grep -q "gpuckpt: cuda: restored pid" "$img/restore.log" || { record basic FAIL "no CUDA restore in the log"; return; }
  memory_path_ok "$img" "$pid" || { show_logs "$img/dump.log" "$img/restore.log"; record basic FAIL "GPU memory did not take the expected path (GPUCKPT_CUDA_MEMORY_IMAGE=${GPUCKPT_CUDA_MEMORY_IMAGE:-1})"; return; }
  local sizes; sizes="gpumem $(du -cm "$img"/gpuckpt-gpumem-*.img* 2>/dev/null | tail -1 | cut -f1) MB, pages $(du -cm "$img"/pages-*.img | tail -1 | cut -f1) MB"
  counter_reference 1024 "$(last_iter "$out")" "$WORK/basic.ref"
  same_as_reference "$out" "$WORK/basic.ref" || { record basic FAIL "state differs from the uninterrupted run"; return; }
  record basic PASS "dumped at iteration $at_dump, continued to $(last_iter "$out"), all checksums equal the uninterrupted run; image $(du -sm "$img" | cut -f1) MB ($sizes)"
}

# 2. A PyTorch training loop: same losses and parameters as an uninterrupted run.
case_torch() {
  python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || { record torch SKIP "no torch with CUDA"; return; }
  local out=$WORK/torch.out img=$WORK/torch.img pid rpid
  setsid python3 "$SRC/torch_train.py" "$out" </dev/null >"$WORK/torch.stdout" 2>&1 & pid=$!; PIDS+=($pid)
  wait_iter "$out" 30 120 || { cat "$WORK/torch.stdout"; record torch FAIL "training did not start"; return; }
  dump "$pid" "$img" || { show_logs "$img/dump.log"; record torch FAIL "criu dump"; return; }
  wait "$pid" 2>/dev/null; gone "$pid" || { record torch FAIL "dumped process still there"; return; }
  local at_dump; at_dump=$(last_iter "$out")
  rpid=$(restore "$img") || { show_logs "$img/restore.log"; record torch FAIL "criu restore"; return; }
  PIDS+=($rpid)
  wait_iter "$out" $((at_dump + 30)) 90 || { show_logs "$img/restore.log"; record torch FAIL "no progress after restore"; return; }
  kill -9 "$rpid"
  rm -f "$WORK/torch.ref"
  python3 "$SRC/torch_train.py" "$WORK/torch.ref" --steps "$(last_iter "$out")" --sleep-ms 0 >/dev/null 2>&1
  same_as_reference "$out" "$WORK/torch.ref" || { record torch FAIL "training differs from the uninterrupted run"; return; }
  record torch PASS "dumped at step $at_dump, continued to $(last_iter "$out"); losses and parameter sums bit-identical; image $(du -sm "$img" | cut -f1) MB"
}

# 3. A process with a child, both using CUDA: one dump, both checkpointed (in parallel) and restored.
case_child() {
  local out=$WORK/child.out img=$WORK/child.img pid rpid cpid
  setsid "$WORK/gpu_counter" 512 "$out" --child </dev/null >"$WORK/child.stdout" 2>&1 & pid=$!; PIDS+=($pid)
  wait_iter "$out" 20 60 && wait_iter "$out.child" 20 60 || { record child FAIL "workload did not start"; return; }
  cpid=$(pgrep -P "$pid" | head -1); PIDS+=($cpid)
  dump "$pid" "$img" || { show_logs "$img/dump.log"; record child FAIL "criu dump"; return; }
  wait "$pid" 2>/dev/null; gone "$pid"; gone "$cpid" || { record child FAIL "child $cpid still there"; return; }
  local a b; a=$(last_iter "$out"); b=$(last_iter "$out.child")
  grep -q "timing: cuda checkpoint of 2 process(es) in parallel" "$img/dump.log" || { show_logs "$img/dump.log"; record child FAIL "not both processes checkpointed"; return; }
  rpid=$(restore "$img") || { show_logs "$img/restore.log"; record child FAIL "criu restore"; return; }
  PIDS+=($rpid $cpid)
  wait_iter "$out" $((a + 20)) 60 && wait_iter "$out.child" $((b + 20)) 60 || { show_logs "$img/restore.log"; record child FAIL "no progress after restore"; return; }
  kill -9 "$rpid" "$cpid" 2>/dev/null
  counter_reference 512 "$(last_iter "$out")" "$WORK/child.ref"
  counter_reference 512 "$(last_iter "$out.child")" "$WORK/child.ref2"
  same_as_reference "$out" "$WORK/child.ref" && same_as_reference "$out.child" "$WORK/child.ref2" \
    || { record child FAIL "state differs from the uninterrupted run"; return; }
  record child PASS "parent and child checkpointed together ($(grep -o 'timing: cuda checkpoint.*' "$img/dump.log")), both continue bit-identically"
}

# 4. --leave-running: the dump puts the process back (restore + unlock) and it keeps running correctly.
case_leave_running() {
  local out=$WORK/leave.out img=$WORK/leave.img pid
  setsid "$WORK/gpu_counter" 1024 "$out" </dev/null >"$WORK/leave.stdout" 2>&1 & pid=$!; PIDS+=($pid)
  wait_iter "$out" 10 60 || { record leave_running FAIL "workload did not start"; return; }
  dump "$pid" "$img" --leave-running || { show_logs "$img/dump.log"; record leave_running FAIL "criu dump"; return; }
  local at; at=$(last_iter "$out")
  wait_iter "$out" $((at + 20)) 30 || { show_logs "$img/dump.log"; record leave_running FAIL "process did not continue"; return; }
  kill -9 "$pid"
  counter_reference 1024 "$(last_iter "$out")" "$WORK/leave.ref"
  same_as_reference "$out" "$WORK/leave.ref" || { record leave_running FAIL "state differs"; return; }
  record leave_running PASS "kept running after the dump (iteration $at -> $(last_iter "$out")), bit-identical"
}

# 5. Failure injection: CRIU is killed right after the GPU state was checkpointed. The guardian must put the
#    process back: it keeps running, correctly, and is not left locked.
# CRIU SIGKILLed once its log shows PATTERN, with a 4 GiB process mid-dump: the guardian (driver host) must put it
# back (refill its GPU memory when it was dropped, restore, unlock), and it must go on bit-identically.
#   kill_criu_when NAME TAG PATTERN WHAT [GUARDIAN_PATTERN]
kill_criu_when() {
  local name=$1 out=$WORK/$2.out img=$WORK/$2.img pattern=$3 what=$4 guardian=${5:-} pid cpid
  setsid "$WORK/gpu_counter" 4096 "$out" </dev/null >"$WORK/$2.stdout" 2>&1 & pid=$!; PIDS+=("$pid")
  wait_iter "$out" 10 60 || { record "$name" FAIL "workload did not start"; return; }
  mkdir -p "$img"
  "$CRIU" dump -t "$pid" -D "$img" -o dump.log -v4 --libdir "$LIBDIR" & cpid=$!
  for _ in $(seq 1500); do grep -q "$pattern" "$img/dump.log" 2>/dev/null && break; sleep 0.02; done
  grep -q "$pattern" "$img/dump.log" || { show_logs "$img/dump.log"; record "$name" FAIL "never reached: $pattern"; return; }
  kill -9 "$cpid"; wait "$cpid" 2>/dev/null
  local at; at=$(last_iter "$out")
  wait_iter "$out" $((at + 20)) 60 || { cat "$img/gpuckpt-guardian.log" 2>/dev/null; record "$name" FAIL "process stuck after CRIU was killed (at $(last_iter "$out"))"; return; }
  kill -9 "$pid"
  if [ -n "$guardian" ] && ! grep -q "$guardian" "$img/gpuckpt-guardian.log"; then
    cat "$img/gpuckpt-guardian.log"; record "$name" FAIL "the guardian's log lacks: $guardian"; return
  fi
  counter_reference 4096 "$(last_iter "$out")" "$WORK/$2.ref"
  same_as_reference "$out" "$WORK/$2.ref" || { record "$name" FAIL "state differs"; return; }
  record "$name" PASS "CRIU killed $what; guardian: $(tr '\n' ' ' < "$img/gpuckpt-guardian.log" 2>/dev/null); workload went on $at -> $(last_iter "$out"), bit-identical"
}

case_kill_mid_dump() { kill_criu_when kill_mid_dump kill "gpuckpt: cuda: checkpointed pid" "after the GPU checkpoint"; }

# After gpuckpt wrote the GPU memory image and dropped the pages: without the refill it would run on with zeros.
case_kill_after_drop() {
  [ "${GPUCKPT_CUDA_MEMORY_IMAGE:-1}" = 0 ] && { record kill_after_drop SKIP "memory path forced off"; return; }
  kill_criu_when kill_after_drop drop "dropped 1 staging region" "after the drop" "GPU memory filled back"
}

# 6. Two GPUs: a process using both, restored with its GPUs swapped (mapping file next to the images).
case_remap() {
  [ "$NGPU" -ge 2 ] || { record remap SKIP "needs 2 GPUs"; return; }
  local out=$WORK/remap.out img=$WORK/remap.img pid rpid
  setsid "$WORK/gpu_counter" 2048 "$out" --gpus 2 </dev/null >"$WORK/remap.stdout" 2>&1 & pid=$!; PIDS+=($pid)
  wait_iter "$out" 20 60 || { record remap FAIL "workload did not start"; return; }
  dump "$pid" "$img" || { show_logs "$img/dump.log"; record remap FAIL "criu dump"; return; }
  wait "$pid" 2>/dev/null; gone "$pid"
  local at u0 u1; at=$(last_iter "$out")
  u0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 1p); u1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 2p)
  printf '{"version":1,"pairs":[{"source_uuid":"%s","target_uuid":"%s"},{"source_uuid":"%s","target_uuid":"%s"}]}\n' \
    "$u0" "$u1" "$u1" "$u0" > "$img/gpuckpt-gpu-map.json"
  rpid=$(restore "$img") || { show_logs "$img/restore.log"; record remap FAIL "criu restore"; return; }
  PIDS+=($rpid)
  wait_iter "$out" $((at + 20)) 60 || { show_logs "$img/restore.log"; record remap FAIL "no progress after restore"; return; }
  grep -q "restores with 2 GPU pair(s)" "$img/restore.log" || { show_logs "$img/restore.log"; record remap FAIL "no remap pairs used"; return; }
  kill -9 "$rpid"
  counter_reference 2048 "$(last_iter "$out")" "$WORK/remap.ref" --gpus 2
  # The process still calls them device 0 and 1: its data moved with them, so the checksums must not change.
  same_as_reference "$out" "$WORK/remap.ref" || { record remap FAIL "state differs from the uninterrupted run"; return; }
  record remap PASS "2-GPU process restored with GPU0<->GPU1 swapped ($(grep -o 'GPU GPU-[^ ]* -> GPU-[^ ]*' "$img/restore.log" | head -2 | tr '\n' ' ')); continued $at -> $(last_iter "$out")"
}

for c in $CASES; do "case_$c"; done
summary "GPU test"
