#!/usr/bin/env bash
# GPU containers through the whole node path: podman -> runc -> CRIU -> gpuckpt_plugin.so from CRIU's default
# plugin directory, the OCI hook from hooks.d, the agent and the CLI, on a real GPU node. Each CUDA workload's
# state is checked bit for bit against an uninterrupted run of the same workload.
#
# Cases (CONTAINER_TESTS picks; default all):
#   cpu_only       a CPU-only container is checkpointed and restored with the plugin installed: no GPU work, no error
#   cdi_spec       a CDI spec made by make_cdi_spec.py gives a container its GPU nodes, driver files and env, and
#                  the hook records the container as a GPU user (fake device nodes: runs without a GPU)
#   agent          a CUDA counter given its GPU through CDI (--device nvidia.com/gpu=0): the hook records it,
#                  `gpuckpt checkpoint` through the agent writes an archive with the GPU record and annotations, the
#                  container is removed, `gpuckpt restore` brings it back and it continues bit-identically
#   transparent    `podman container checkpoint --export` / `restore --import` with nothing of gpuckpt named (older
#                  style: --device nodes + NVIDIA_VISIBLE_DEVICES + the driver root bound in)
#   torch          a PyTorch training container (python and torch from the host, bound read-only), through the agent
#   two_procs      a container with two CUDA processes (parent and child)
#   leave_running  `podman container checkpoint --leave-running`: keeps running, unlocked, correct
#   kill_mid_dump  CRIU killed mid-dump inside the container: the workload keeps running, unlocked, correct
#   other_gpu      (2 GPUs) a CUDA counter given GPU 1 through CDI is checkpointed through the agent and restored with
#                  `--target-gpus` GPU 0, as after a migration onto a node where the device plugin allocates another
#                  GPU: the restored container gets GPU 0's device node, the process runs on GPU 0 (nvidia-smi) and
#                  continues bit-identically
#   image_restore  (2 GPUs) what a runtime restoring a checkpoint image does (CRI-O, containerd >= 2.1, where the
#                  agent edits nothing): a GPU 1 container's export restored by podman with only its spec given
#                  GPU 0 (the new allocation) and the GPU mapping beside CRIU's images, CRIU's /dev image untouched
#                  (it names /dev/nvidia1): the plugin makes /dev/nvidia0 for the driver's restore; continues
#                  bit-identically on GPU 0
#   wrong_gpu      an archive whose GPU record is another model's (the captured H200 on an H100, or the H100 fixture
#                  elsewhere) is refused before CRIU runs, with the reasons
# Needs root, podman, criu; the GPU cases need an NVIDIA GPU, nvcc and the node set up with gpuckpt installed (on
# the device machine: test/gpu/device_node.sh). Without them a case reports SKIP; exit 77 when nothing passed.
#   GPUCKPT_BUILD_DIR   where the CLI/agent/hook/plugin come from when they are not installed (CPU cases)
#   CONTAINER_TEST_OUT  keep logs and archives here (default: a temp dir, removed)
#   COUNTER_MIB         GPU memory of the counter workloads (default 1024)
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/test/gpu/gpu_test_lib.sh"
CASES=${CONTAINER_TESTS:-cpu_only cdi_spec agent transparent torch two_procs leave_running kill_mid_dump other_gpu image_restore wrong_gpu}
MIB=${COUNTER_MIB:-1024}
PREFIX=gpuckpt-ctest-$$
KEEP_OUT=${CONTAINER_TEST_OUT:-}
. "$SRC/test/gpu/node_test_lib.sh"
gpu_ready() { # CASE: SKIPs the case unless this is a GPU node with the counter image built
  [ "$HAVE_GPU" = 1 ] || { record "$1" SKIP "no NVIDIA GPU with nvcc here"; return 1; }
  [ -f /etc/cdi/nvidia.json ] || [ -f /etc/cdi/nvidia.yaml ] || { record "$1" SKIP "no CDI spec for the GPUs (test/gpu/make_cdi_spec.py)"; return 1; }
  build_counter_image || { record "$1" FAIL "cannot build the CUDA counter image"; return 1; }
}
legacy_gpu() {
  local args=(--device /dev/nvidia0 --device /dev/nvidiactl --device /dev/nvidia-uvm -e NVIDIA_VISIBLE_DEVICES=0)
  [ -e /dev/nvidia-uvm-tools ] && args+=(--device /dev/nvidia-uvm-tools)
  local libdir root; libdir=$(dirname "$(driver_libcuda)"); root=$(driver_root)
  args+=(-v "$root:$root:ro" -e "LD_LIBRARY_PATH=$libdir")
  echo "${args[@]}"
}

# ---- cases --------------------------------------------------------------------------------------------------
case_cpu_only() {
  local name=$PREFIX-cpu a=$WORK/cpu.tar.zst before after
  pm run -d --name "$name" "$BASE" sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done' >/dev/null \
    || { record cpu_only FAIL "podman run"; return; }
  sleep 1
  # Without --keep, as users run it: CRIU's logs are kept by keep_log (what store_bench times with).
  local static tck trs; static=$(podman inspect -f '{{.StaticDir}}' "$name")
  timed_with_log "$static" dump.log "$WORK/cpu.dump.log" tck pm container checkpoint --print-stats --export "$a" "$name" \
    > "$WORK/cpu.ckpt.json" 2> "$WORK/cpu.ckpt.log" || { show "$WORK/cpu.ckpt.log" "$WORK/cpu.dump.log"; record cpu_only FAIL "checkpoint with the plugin installed"; return; }
  [ ! -e "$static/dump.log" ] || { record cpu_only FAIL "podman kept dump.log without --keep: keep_log's premise is gone"; return; }
  grep -q "gpuckpt: plugin loaded for dump" "$WORK/cpu.dump.log" || { show "$WORK/cpu.dump.log"; record cpu_only FAIL "CRIU did not load gpuckpt from $PLUGIN_DIR (or its dump.log was not kept)"; return; }
  before=$(tar -xOf "$a" rootfs-diff.tar 2>/dev/null | tar -xO --wildcards '*tmp/count' 2>/dev/null)
  pm rm -f -t 0 "$name" >/dev/null
  timed_with_log "$static" restore.log "$WORK/cpu.restore.log" trs pm container restore --print-stats --import "$a" \
    > "$WORK/cpu.rst.json" 2> "$WORK/cpu.rst.log" || { show "$WORK/cpu.rst.log" "$WORK/cpu.restore.log"; record cpu_only FAIL "restore with the plugin installed"; return; }
  grep -q "gpuckpt: plugin loaded for restore" "$WORK/cpu.restore.log" || { show "$WORK/cpu.restore.log"; record cpu_only FAIL "restore.log was not kept, or CRIU did not load gpuckpt for the restore"; return; }
  # Bounded wait for the restored counter to move (a loaded machine can take seconds to schedule it and podman exec).
  for _ in $(seq 50); do
    after=$(pm exec "$name" cat /tmp/count 2>/dev/null)
    [ -n "$after" ] && [ "$after" -gt "${before:-0}" ] && break
    sleep 0.2
  done
  [ -n "$after" ] && [ "$after" -gt "${before:-0}" ] || { record cpu_only FAIL "counter did not continue (${before:-?} -> ${after:-?})"; return; }
  if [ "$(entries "$a" 'checkpoint/gpuckpt')" -gt 0 ]; then record cpu_only FAIL "gpuckpt wrote GPU files for a CPU-only container"; return; fi
  record cpu_only PASS "CRIU loaded gpuckpt from $PLUGIN_DIR; a CPU-only container checkpointed and restored by podman, counter ${before:-?} -> $after, no GPU files; checkpoint ${tck}s (CRIU $(criu_seconds "$WORK/cpu.dump.log")s, runtime $(runtime_seconds "$WORK/cpu.ckpt.json" runtime_checkpoint_duration)s), restore ${trs}s (CRIU $(criu_seconds "$WORK/cpu.restore.log")s, runtime $(runtime_seconds "$WORK/cpu.rst.json" runtime_restore_duration)s)"
}

case_cdi_spec() {
  local name=$PREFIX-cdi spec=/var/run/cdi/$PREFIX.json dev=$WORK/fake-dev lib=$WORK/fake-lib id
  mkdir -p "$dev" "$lib" /var/run/cdi
  mknod "$dev/nvidia0" c 1 3; mknod "$dev/nvidiactl" c 1 5; mknod "$dev/nvidia-uvm" c 1 7
  cp /bin/true "$lib/libcuda.so.580.1"; ln -s libcuda.so.580.1 "$lib/libcuda.so.1"
  python3 "$SRC/test/gpu/make_cdi_spec.py" --dev "$dev" --driver-lib "$lib" --kind "$PREFIX.example.com/gpu" --out "$spec" \
    > "$WORK/cdi.log" 2>&1 || { show "$WORK/cdi.log"; record cdi_spec FAIL "make_cdi_spec.py"; return; }
  INSTALLED+=("$spec")
  pm run -d --name "$name" --device "$PREFIX.example.com/gpu=0" "$BASE" sleep 600 > "$WORK/cdi.run" 2>&1 \
    || { show "$WORK/cdi.run"; rm -f "$spec"; record cdi_spec FAIL "podman run --device $PREFIX.example.com/gpu=0"; return; }
  rm -f "$spec"
  local node env mounted
  node=$(pm exec "$name" stat -c '%t:%T' /dev/nvidia0 2>/dev/null)
  env=$(pm exec "$name" cat /proc/1/environ | tr '\0' '\n' | grep '^LD_LIBRARY_PATH=')
  mounted=$(pm exec "$name" ls "$lib/libcuda.so.1" 2>/dev/null)
  [ "$node" = 1:3 ] && [ "$env" = "LD_LIBRARY_PATH=$lib" ] && [ -n "$mounted" ] \
    || { record cdi_spec FAIL "container edits not applied (node ${node:-none}, ${env:-no LD_LIBRARY_PATH}, libcuda ${mounted:-missing})"; return; }
  id=$(podman inspect -f '{{.Id}}' "$name")
  [ -f "$STATE/containers/$id.json" ] || { record cdi_spec FAIL "the hook did not record the CDI GPU container"; return; }
  record cdi_spec PASS "CDI device gave /dev/nvidia0 ($node), the driver library and LD_LIBRARY_PATH; the hook recorded the container"
}

case_agent() {
  gpu_ready agent || return
  start_agent || { record agent FAIL "agent did not start"; return; }
  local name=$PREFIX-agent out=$WORK/out/agent.txt id at archive tck trs parts
  run_counter "$name" "$out" "${CDI_GPU[@]}" -- "$MIB" /out/agent.txt || { show "$WORK/$name.err"; record agent FAIL "podman run (CDI)"; return; }
  wait_ctr "$name" "$out" 30 120 || { pm logs "$name" | tail; record agent FAIL "workload did not start"; return; }
  id=$(podman inspect -f '{{.Id}}' "$name")
  curl -sf -H "Authorization: Bearer $(cat "$WORK/token")" "$AGENT_URL/v1/containers" > "$WORK/containers.json"
  python3 -c 'import json, sys
c = [c for c in json.load(open(sys.argv[1]))["containers"] if c["id"] == sys.argv[2]]
sys.exit(0 if c and c[0]["used_gpu_ids"] else 1)' "$WORK/containers.json" "$id" \
    || { show "$WORK/containers.json"; record agent FAIL "the hook did not record the container's GPU"; return; }
  timed tck gk checkpoint "$name" > "$WORK/agent.ckpt.log" 2>&1 || { show "$WORK/agent.ckpt.log"; criu_log "$name"; record agent FAIL "gpuckpt checkpoint"; return; }
  at=$(last_iter "$out")
  archive=$(ls -t "$WORK"/ck/*.tar* 2>/dev/null | head -1)
  [ -f "$archive" ] || { record agent FAIL "no archive in $WORK/ck"; return; }
  "$CLI" inspect "$archive" > "$WORK/agent.inspect" 2>&1
  grep -qi "H100\|H200\|NVIDIA" "$WORK/agent.inspect" || { show "$WORK/agent.inspect"; record agent FAIL "inspect shows no GPU record"; return; }
  [ "$(tar -xOf "$archive" spec.dump | grep -c '"io.gpuckpt.')" -gt 0 ] || { record agent FAIL "no io.gpuckpt.* annotations in spec.dump"; return; }
  [ "$(entries "$archive" 'checkpoint/gpuckpt-cuda-')" -gt 0 ] || { record agent FAIL "no CUDA process record among CRIU's images"; return; }
  # The job record splits the runtime's call by CRIU's statistics and the plugin's own steps.
  curl -sf -H "Authorization: Bearer $(cat "$WORK/token")" "$AGENT_URL/v1/checkpoints" > "$WORK/agent.jobs.json"
  local job_id
  job_id=$(python3 -c 'import json, sys
print([j["id"] for j in json.load(open(sys.argv[1]))["jobs"] if j.get("state") == "succeeded"][0])' "$WORK/agent.jobs.json")
  curl -sf -H "Authorization: Bearer $(cat "$WORK/token")" "$AGENT_URL/v1/checkpoints/$job_id" > "$WORK/agent.job.json"
  parts=$(python3 -c 'import json, sys
p = json.load(open(sys.argv[1])).get("runtime_phase_seconds", {})
ok = p.get("gpuckpt-gpu-checkpoint", 0) > 0 and "gpuckpt-gpu-lock" in p and "criu-freezing" in p
print(" ".join("%s=%.3f" % kv for kv in sorted(p.items())))
sys.exit(0 if ok else 1)' "$WORK/agent.job.json") \
    || { show "$WORK/agent.job.json"; record agent FAIL "the job record does not split out the GPU checkpoint: ${parts:-none}"; return; }
  echo "agent: checkpoint job's runtime parts: $parts"
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  sleep 1; [ "$(last_iter "$out")" = "$at" ] || { record agent FAIL "the workload ran on after the checkpoint ($at -> $(last_iter "$out"))"; return; }
  timed trs gk restore "$archive" > "$WORK/agent.rst.log" 2>&1 || { show "$WORK/agent.rst.log" "$WORK/agent.log"; record agent FAIL "gpuckpt restore"; return; }
  wait_ctr "$name" "$out" $((at + 30)) 120 || { show "$WORK/agent.rst.log"; record agent FAIL "no progress after restore (at $(last_iter "$out"))"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  check_counter agent "$out" "$MIB" || return
  record agent PASS "CDI GPU; hook recorded it; checkpoint via agent ${tck}s (archive $(du -m "$archive" | cut -f1) MB), restore ${trs}s; continued $at -> $(last_iter "$out"), bit-identical"
}

case_transparent() {
  gpu_ready transparent || return
  local name=$PREFIX-plain out=$WORK/out/plain.txt a=$WORK/plain.tar.zst at tck trs gpu
  read -ra gpu <<< "$(legacy_gpu)"
  run_counter "$name" "$out" "${gpu[@]}" -- "$MIB" /out/plain.txt || { show "$WORK/$name.err"; record transparent FAIL "podman run (--device nodes)"; return; }
  wait_ctr "$name" "$out" 30 120 || { pm logs "$name" | tail; record transparent FAIL "workload did not start"; return; }
  timed tck pm container checkpoint --export "$a" "$name" > "$WORK/plain.ckpt.log" 2>&1 || { show "$WORK/plain.ckpt.log"; criu_log "$name"; record transparent FAIL "podman container checkpoint"; return; }
  at=$(last_iter "$out")
  [ "$(entries "$a" 'checkpoint/gpuckpt-cuda-')" -gt 0 ] || { record transparent FAIL "CRIU did not use gpuckpt from $PLUGIN_DIR"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  timed trs pm container restore --import "$a" > "$WORK/plain.rst.log" 2>&1 || { show "$WORK/plain.rst.log"; record transparent FAIL "podman container restore"; return; }
  wait_ctr "$name" "$out" $((at + 30)) 120 || { record transparent FAIL "no progress after restore"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  check_counter transparent "$out" "$MIB" || return
  record transparent PASS "podman checkpoint --export ${tck}s / restore --import ${trs}s, nothing of gpuckpt named; continued $at -> $(last_iter "$out"), bit-identical"
}

case_torch() {
  gpu_ready torch || return
  local py; py=$(command -v python3)
  "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || { record torch SKIP "no host torch with CUDA"; return; }
  start_agent || { record torch FAIL "agent did not start"; return; }
  local name=$PREFIX-torch out=$WORK/out/torch.txt at archive tck trs
  host_python_mounts "$py" || { record torch FAIL "cannot ask $py for its prefix"; return; }
  pm run -d --name "$name" "${CDI_GPU[@]}" "${HOST_PY_MOUNTS[@]}" -v "$WORK/out:/out" -v "$SRC/test/gpu:/work:ro" -e HOME=/tmp \
    "$BASE" "$py" /work/torch_train.py /out/torch.txt > "$WORK/torch.run" 2>&1 || { show "$WORK/torch.run"; record torch FAIL "podman run"; return; }
  wait_ctr "$name" "$out" 30 180 || { pm logs "$name" 2>&1 | tail; record torch FAIL "training did not start"; return; }
  timed tck gk checkpoint "$name" > "$WORK/torch.ckpt.log" 2>&1 || { show "$WORK/torch.ckpt.log"; criu_log "$name"; record torch FAIL "gpuckpt checkpoint"; return; }
  at=$(last_iter "$out")
  archive=$(ls -t "$WORK"/ck/*.tar* | head -1)
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  timed trs gk restore "$archive" > "$WORK/torch.rst.log" 2>&1 || { show "$WORK/torch.rst.log" "$WORK/agent.log"; record torch FAIL "gpuckpt restore"; return; }
  wait_ctr "$name" "$out" $((at + 30)) 120 || { record torch FAIL "no progress after restore"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  rm -f "$WORK/torch.ref"
  "$py" "$SRC/test/gpu/torch_train.py" "$WORK/torch.ref" --steps "$(last_iter "$out")" --sleep-ms 0 >/dev/null 2>&1
  same_as_reference "$out" "$WORK/torch.ref" || { record torch FAIL "training differs from the uninterrupted run"; return; }
  record torch PASS "checkpoint via agent ${tck}s, restore ${trs}s; step $at -> $(last_iter "$out"), losses and parameters bit-identical"
}

case_two_procs() {
  gpu_ready two_procs || return
  local name=$PREFIX-two out=$WORK/out/two.txt a=$WORK/two.tar.zst at atc
  run_counter "$name" "$out" "${CDI_GPU[@]}" -- 512 /out/two.txt --child || { record two_procs FAIL "podman run"; return; }
  wait_ctr "$name" "$out" 20 120 && wait_ctr "$name" "$out.child" 20 60 || { record two_procs FAIL "workload did not start"; return; }
  pm container checkpoint --export "$a" "$name" > "$WORK/two.ckpt.log" 2>&1 || { show "$WORK/two.ckpt.log"; criu_log "$name"; record two_procs FAIL "checkpoint"; return; }
  at=$(last_iter "$out"); atc=$(last_iter "$out.child")
  [ "$(entries "$a" 'checkpoint/gpuckpt-cuda-')" -ge 2 ] || { record two_procs FAIL "not both CUDA processes recorded"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  pm container restore --import "$a" > "$WORK/two.rst.log" 2>&1 || { show "$WORK/two.rst.log"; record two_procs FAIL "restore"; return; }
  wait_ctr "$name" "$out" $((at + 20)) 120 && wait_ctr "$name" "$out.child" $((atc + 20)) 60 || { record two_procs FAIL "no progress after restore"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  check_counter two_procs "$out" 512 && check_counter two_procs "$out.child" 512 || return
  record two_procs PASS "parent and child checkpointed and restored together; both continued bit-identically"
}

case_leave_running() {
  gpu_ready leave_running || return
  local name=$PREFIX-leave out=$WORK/out/leave.txt a=$WORK/leave.tar.zst at
  run_counter "$name" "$out" "${CDI_GPU[@]}" -- "$MIB" /out/leave.txt || { record leave_running FAIL "podman run"; return; }
  wait_ctr "$name" "$out" 20 120 || { record leave_running FAIL "workload did not start"; return; }
  pm container checkpoint --leave-running --export "$a" "$name" > "$WORK/leave.ckpt.log" 2>&1 || { show "$WORK/leave.ckpt.log"; criu_log "$name"; record leave_running FAIL "checkpoint --leave-running"; return; }
  at=$(last_iter "$out")
  wait_ctr "$name" "$out" $((at + 30)) 60 || { record leave_running FAIL "did not keep running (at $(last_iter "$out"))"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  check_counter leave_running "$out" "$MIB" || return
  record leave_running PASS "kept running through the checkpoint ($at -> $(last_iter "$out")), unlocked, bit-identical"
}

# criu_under_runc: the pid of the CRIU that runc runs (`criu swrk 3`), not its driver host (a fork of it, reparented)
criu_under_runc() {
  local p
  for p in $(pgrep -f 'criu swrk'); do
    case $(ps -o comm= -p "$(ps -o ppid= -p "$p" | tr -d ' ')" 2>/dev/null) in runc*) echo "$p"; return ;; esac
  done
}

case_kill_mid_dump() {
  gpu_ready kill_mid_dump || return
  local name=$PREFIX-kill out=$WORK/out/kill.txt a=$WORK/kill.tar.zst at ppid cpid='' found=0
  run_counter "$name" "$out" "${CDI_GPU[@]}" -- 4096 /out/kill.txt || { record kill_mid_dump FAIL "podman run"; return; }
  wait_ctr "$name" "$out" 10 120 || { record kill_mid_dump FAIL "workload did not start"; return; }
  local static; static=$(podman inspect -f '{{.StaticDir}}' "$name")
  rm -f "$static/dump.log"
  pm container checkpoint --export "$a" "$name" > "$WORK/kill.ckpt.log" 2>&1 & ppid=$!
  # Kill CRIU (runc's child, run as `criu swrk`) once the GPU state is checkpointed, before CRIU has dumped the
  # memory: the plugin's log line, or the GPU memory image it starts right after the driver's checkpoint.
  for _ in $(seq 1500); do
    if [ -z "$cpid" ] || ! kill -0 "$cpid" 2>/dev/null; then cpid=$(criu_under_runc); fi
    if grep -q "gpuckpt: cuda: checkpointed pid" "$static/dump.log" 2>/dev/null ||
       compgen -G "$static/checkpoint/gpuckpt-gpumem-*" >/dev/null; then found=1; break; fi
    kill -0 "$ppid" 2>/dev/null || break
    sleep 0.02
  done
  ps -eo pid,ppid,comm,args > "$WORK/kill.ps" 2>&1
  [ "$found" = 1 ] || { wait "$ppid"; show "$WORK/kill.ckpt.log" "$WORK/kill.ps"; record kill_mid_dump FAIL "the checkpoint ended before the CUDA checkpoint showed in $static"; return; }
  if [ -z "$cpid" ] || ! kill -0 "$cpid" 2>/dev/null; then
    wait "$ppid"; grep -i "criu\|runc" "$WORK/kill.ps"; record kill_mid_dump FAIL "CRIU (a child of runc) not found after the CUDA checkpoint"; return
  fi
  kill -9 "$cpid"
  wait "$ppid" 2>/dev/null
  at=$(last_iter "$out")
  wait_ctr "$name" "$out" $((at + 20)) 90 || { show "$static/checkpoint/gpuckpt-guardian.log"; record kill_mid_dump FAIL "workload stuck after CRIU was killed (at $(last_iter "$out"))"; return; }
  local guardian; guardian=$(tr '\n' ' ' < "$static/checkpoint/gpuckpt-guardian.log" 2>/dev/null)
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  check_counter kill_mid_dump "$out" 4096 || return
  record kill_mid_dump PASS "CRIU (pid $cpid) killed mid-dump; the container's workload went on $at -> $(last_iter "$out"), unlocked, bit-identical; guardian: ${guardian:-no log}"
}

case_other_gpu() {
  gpu_ready other_gpu || return
  [ "$NGPU" -ge 2 ] || { record other_gpu SKIP "needs 2 GPUs"; return; }
  start_agent || { record other_gpu FAIL "agent did not start"; return; }
  local name=$PREFIX-moved out=$WORK/out/moved.txt at archive tck trs u0 u1 before after minor
  u0=$(gpu_uuid 0); u1=$(gpu_uuid 1)
  run_counter "$name" "$out" --device nvidia.com/gpu=1 -- "$MIB" /out/moved.txt || { show "$WORK/$name.err"; record other_gpu FAIL "podman run (CDI GPU 1)"; return; }
  wait_ctr "$name" "$out" 30 120 || { pm logs "$name" | tail; record other_gpu FAIL "workload did not start"; return; }
  before=$(gpu_of_pid "$(ctr_pid "$name")")
  [ "$before" = "$u1" ] || { record other_gpu FAIL "the workload runs on ${before:-no GPU}, not GPU 1 ($u1)"; return; }
  timed tck gk checkpoint "$name" > "$WORK/moved.ckpt.log" 2>&1 || { show "$WORK/moved.ckpt.log"; criu_log "$name"; record other_gpu FAIL "gpuckpt checkpoint"; return; }
  at=$(last_iter "$out")
  archive=$(ls -t "$WORK"/ck/*.tar* | head -1)
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  timed trs gk restore "$archive" --target-gpus "$u0" > "$WORK/moved.rst.log" 2>&1 || { show "$WORK/moved.rst.log" "$WORK/agent.log"; criu_log "$name"; record other_gpu FAIL "gpuckpt restore --target-gpus GPU 0"; return; }
  wait_ctr "$name" "$out" $((at + 30)) 120 || { show "$WORK/moved.rst.log"; criu_log "$name"; record other_gpu FAIL "no progress after restore (at $(last_iter "$out"))"; return; }
  after=$(gpu_of_pid "$(ctr_pid "$name")")
  minor=$(pm exec "$name" sh -c 'for d in /dev/nvidia[0-9]*; do stat -c "%n %T" "$d"; done' 2>&1 | tr '\n' ' ')
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  [ "$after" = "$u0" ] || { record other_gpu FAIL "restored onto ${after:-no GPU}, not GPU 0 ($u0); the container's GPU nodes (name, minor in hex): $minor"; return; }
  check_counter other_gpu "$out" "$MIB" || return
  record other_gpu PASS "GPU 1 -> GPU 0: checkpoint via agent ${tck}s, restore --target-gpus ${trs}s; the container's GPU nodes after restore: ${minor}; nvidia-smi: on GPU 0; continued $at -> $(last_iter "$out"), bit-identical"
}

case_image_restore() {
  gpu_ready image_restore || return
  [ "$NGPU" -ge 2 ] || { record image_restore SKIP "needs 2 GPUs"; return; }
  local name=$PREFIX-image out=$WORK/out/image.txt a=$WORK/image.tar.zst b=$WORK/image-gpu0.tar.zst at u0 u1 after
  u0=$(gpu_uuid 0); u1=$(gpu_uuid 1)
  run_counter "$name" "$out" --device nvidia.com/gpu=1 -- "$MIB" /out/image.txt || { record image_restore FAIL "podman run (CDI GPU 1)"; return; }
  wait_ctr "$name" "$out" 30 120 || { record image_restore FAIL "workload did not start"; return; }
  pm container checkpoint --export "$a" "$name" > "$WORK/image.ckpt.log" 2>&1 || { show "$WORK/image.ckpt.log"; criu_log "$name"; record image_restore FAIL "podman container checkpoint"; return; }
  at=$(last_iter "$out")
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  retarget_archive "$a" "$b" 1 0 "$u1" "$u0" || { record image_restore FAIL "cannot give the archive GPU 0"; return; }
  pm container restore --keep --import "$b" > "$WORK/image.rst.log" 2>&1 || { show "$WORK/image.rst.log"; criu_log "$name"; record image_restore FAIL "podman container restore"; return; }
  wait_ctr "$name" "$out" $((at + 30)) 120 || { criu_log "$name"; record image_restore FAIL "no progress after restore (at $(last_iter "$out"))"; return; }
  after=$(gpu_of_pid "$(ctr_pid "$name")")
  local made; made=$(grep -rho "made [0-9]* target GPU node(s)" "$(podman inspect -f '{{.StaticDir}}' "$name")" --include=restore.log | head -1)
  pm rm -f -t 0 "$name" >/dev/null 2>&1
  [ "$after" = "$u0" ] || { record image_restore FAIL "restored onto ${after:-no GPU}, not GPU 0 ($u0)"; return; }
  [ -n "$made" ] || { record image_restore FAIL "the plugin did not report making GPU 0's node"; return; }
  check_counter image_restore "$out" "$MIB" || return
  record image_restore PASS "GPU 1 -> GPU 0 with CRIU's /dev image untouched: the plugin $made; nvidia-smi: on GPU 0; continued $at -> $(last_iter "$out"), bit-identical"
}

case_wrong_gpu() {
  gpu_ready wrong_gpu || return
  start_agent || { record wrong_gpu FAIL "agent did not start"; return; }
  local name=$PREFIX-wrong out=$WORK/out/wrong.txt src fixture record_file dir a
  # The source record: a GPU model this node does not have.
  if nvidia-smi -L | grep -q H200; then fixture=$SRC/test/fixtures/nvidia-h100-8gpu; else fixture=$SRC/test/fixtures/nvidia-h200; fi
  run_counter "$name" "$out" "${CDI_GPU[@]}" -- 256 /out/wrong.txt || { record wrong_gpu FAIL "podman run"; return; }
  wait_ctr "$name" "$out" 10 120 || { record wrong_gpu FAIL "workload did not start"; return; }
  gk checkpoint "$name" > "$WORK/wrong.ckpt.log" 2>&1 || { show "$WORK/wrong.ckpt.log"; record wrong_gpu FAIL "checkpoint"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  src=$(ls -t "$WORK"/ck/*.tar* | head -1)
  # The same archive with its GPU record replaced by the other node's (first GPU used).
  dir=$WORK/wrong-archive; rm -rf "$dir"; mkdir -p "$dir"
  tar -C "$dir" -xf "$src" || { record wrong_gpu FAIL "cannot unpack $src"; return; }
  record_file=$(cd "$dir" && ls gpuckpt-gpus.json 2>/dev/null)
  [ -n "$record_file" ] || { record wrong_gpu FAIL "no gpuckpt-gpus.json in the archive"; return; }
  "$CLI" gpus --host-root "$fixture" --json | python3 -c '
import json, sys
node = json.load(sys.stdin)["node"]
first = node["gpus"][0]["id"]
entry = json.load(open(sys.argv[1]))     # gpuckpt-gpus.json: {version, checkpoint_id, record: {node, used_gpu_ids}, devices}
entry["record"]["node"] = node
entry["record"]["used_gpu_ids"] = [first]
for d in entry["devices"]:
    if d.get("gpu_id"):
        d["gpu_id"] = first
json.dump(entry, open(sys.argv[1], "w"))' "$dir/$record_file" || { record wrong_gpu FAIL "cannot rewrite the record"; return; }
  a=$WORK/ck/wrong-gpu.tar.zst
  (cd "$dir" && tar -c . | zstd -q -o "$a") || { record wrong_gpu FAIL "cannot repack"; return; }
  local before; before=$(pgrep -fc 'usr/sbin/criu.*restore' || true)
  if gk restore "$a" > "$WORK/wrong.rst.log" 2>&1; then record wrong_gpu FAIL "restore of a wrong-GPU archive succeeded"; return; fi
  grep -qiE "model|10de:" "$WORK/wrong.rst.log" || { show "$WORK/wrong.rst.log"; record wrong_gpu FAIL "refusal does not name the model mismatch"; return; }
  pm container exists "$name" && { record wrong_gpu FAIL "a container was created anyway"; return; }
  record wrong_gpu PASS "refused before CRIU ran: $(grep -iE 'model|10de:' "$WORK/wrong.rst.log" | head -1 | cut -c1-160)"
}

# CRIU's own time in the log of a runtime's checkpoint/restore: its last "(seconds)" stamp ("-" without a log).
criu_seconds() { [ -s "$1" ] && awk -F'[()]' '/^\([ 0-9.]+\)/ {t=$2} END {printf "%.2f", t + 0}' "$1" || echo -; }
# MiB the plugin wrote for the GPU memory (its "timing: gpu memory image write" line in a dump.log).
written_mib() { local m; m=$(grep -o '[0-9]* MiB written' "$1" 2>/dev/null | tail -1 | cut -d' ' -f1); echo "${m:--}"; }
# The runtime's own time in `podman container checkpoint|restore --print-stats` output (runc running CRIU and the
# plugin): runtime_checkpoint_duration or runtime_restore_duration, microseconds, as seconds.
runtime_seconds() { # STATS-JSON KEY
  python3 -c 'import json, sys
print("%.2f" % (json.load(open(sys.argv[1]))["container_statistics"][0][sys.argv[2]] / 1e6))' "$1" "$2" 2>/dev/null || echo -
}

# CRIU's log of one checkpoint or restore, kept. runc runs CRIU with the container's static dir (podman inspect
# .StaticDir, .../overlay-containers/ID/userdata; the same after `restore --import`, which keeps the container's id) as
# its work dir, where CRIU writes dump.log or restore.log; podman 4 removes both once the command succeeds unless
# --keep, which also keeps every image there (and would change what is measured). So the log is held open from the
# moment it appears: its content outlives the removal. A log left by an earlier command is removed first.
keep_log() { # FILE DEST: in the background until kept_log DEST
  local file=$1 dest=$2
  rm -f "$file" "$dest" "$dest.stop"
  ( while [ ! -e "$file" ]; do [ -e "$dest.stop" ] && exit 0; sleep 0.02; done
    exec 9< "$file" || exit 0
    until [ -e "$dest.stop" ]; do sleep 0.05; done
    cat <&9 > "$dest" ) &
  KEEP_LOG_PID=$!
}
kept_log() { # DEST: the copy is complete (absent when the log never appeared)
  touch "$1.stop"; wait "$KEEP_LOG_PID" 2>/dev/null; rm -f "$1.stop"
}
# One timed runtime command with CRIU's log kept: STATIC-DIR LOG DEST VAR podman-args... (VAR: its wall time)
timed_with_log() {
  local static=$1 log=$2 dest=$3 var=$4 rc; shift 4
  keep_log "$static/$log" "$dest"
  timed "$var" "$@"; rc=$?
  kept_log "$dest"
  return $rc
}
# The median of the numbers on stdin, one a line ("-" when none).
median() { grep -E '^[0-9.]+$' | sort -n | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.2f\n", (v[NR/2] + v[NR/2+1]) / 2}'; }

# Seconds of one plugin phase in a CRIU log: its last "timing: PHASE...: N s" line ("-" when absent). Phases of a
# dump: "cuda lock" (the driver's lock), "cuda checkpoint" (the driver moves GPU memory to host staging memory),
# "gpu memory image write" (chunks hashed, compressed, written, fsynced), "gpu memory drop"; of a restore:
# "gpu memory image fill", "cuda restore".
phase_seconds() { # LOG PHASE
  local s; s=$(grep "timing: $2" "$1" 2>/dev/null | tail -1 | sed -n "s/.*timing: $2[^:]*: \([0-9.]*\) s.*/\1/p")
  echo "${s:--}"
}
# The plugin's phases of a dump log and a restore log ("-" for a missing log): cuda_lock cuda_checkpoint gpu_write
# gpu_drop gpu_fill cuda_restore, tab-separated.
plugin_phases() { # DUMP-LOG RESTORE-LOG
  printf '%s\t%s\t%s\t%s\t%s\t%s' "$(phase_seconds "$1" "cuda lock")" "$(phase_seconds "$1" "cuda checkpoint")" \
    "$(phase_seconds "$1" "gpu memory image write")" "$(phase_seconds "$1" "gpu memory drop")" \
    "$(phase_seconds "$2" "gpu memory image fill")" "$(phase_seconds "$2" "cuda restore")"
}

# Benchmark (#21): GPU memory inline in the runtime's archive vs in the node's chunk store (only a manifest in the
# archive), for each size in STORE_BENCH_MIB (a list, default 4096). STORE_BENCH_MODES picks the runs, MODE:CONTENT
# (default "inline:random node:random node:bf16"): MODE inline or node is `podman container checkpoint --export` /
# `restore --import` with the plugin's settings file naming that store; agent is `gpuckpt checkpoint` / `gpuckpt
# restore` through the agent configured with gpu_memory.store node (the agent starts podman). CONTENT is the counter's
# (random: incompressible; bf16: weights, 1/16 of it evolves). Each row beside, from the same run, CRIU's own time
# (its dump.log / restore.log, kept by keep_log), the runtime's (runc with CRIU and the plugin, --print-stats; podman
# modes only) and the plugin's phases (plugin_phases). node:bf16 is checkpointed a second time after its restore
# (weights unchanged): what the second checkpoint writes, and its phases. STORE_BENCH_RUNS (default 1) runs of each;
# the medians follow. Rows into $STORE_BENCH_TSV when set (appended to when it exists with the same columns; the
# medians beside it, .medians.tsv, cover all its rows). Each restore is checked bit for bit against an uninterrupted run.
# Each repetition's first checkpoint goes into an empty node store (the counter's content repeats from run to run, so
# a store holding an earlier repetition's chunks would write less): the node's own store is put aside for the run
# and put back after (STORE_BENCH_FRESH_STORE=0: the store as it is).
NODE_STORE=/var/lib/gpuckpt/chunks   # chunk_store::kNodeStoreDir
STORE_BENCH_COLUMNS='run	rep	mib	content	container_checkpoint_s	criu_dump_s	runtime_dump_s	container_restore_s	criu_restore_s	runtime_restore_s	archive_mib	gpu_written_mib	cuda_lock_s	cuda_checkpoint_s	gpu_write_s	gpu_drop_s	gpu_fill_s	cuda_restore_s'
case_store_bench() {
  gpu_ready store_bench || return
  local sizes=${STORE_BENCH_MIB:-4096} runs=${STORE_BENCH_RUNS:-1} modes=${STORE_BENCH_MODES:-inline:random node:random node:bf16}
  local settings=$PLUGIN_DIR/gpuckpt_plugin.env tsv=${STORE_BENCH_TSV:-$WORK/store_bench.tsv} saved=$WORK/plugin.env.saved
  local mib rep earlier run mode store content tag name out a tck trs at static failed=0
  [ -f "$settings" ] && cp "$settings" "$saved"
  # An existing table (STORE_BENCH_TSV of an earlier call on the same machine) is appended to: runs split across calls
  # (one command's time limit) share one table of medians.
  [ "$(head -1 "$tsv" 2>/dev/null)" = "$STORE_BENCH_COLUMNS" ] || echo "$STORE_BENCH_COLUMNS" > "$tsv"
  local fresh=${STORE_BENCH_FRESH_STORE:-1} aside=$NODE_STORE.before-$PREFIX
  [ "$fresh" = 1 ] && [ -d "$NODE_STORE" ] && mv "$NODE_STORE" "$aside"
  case " $modes " in *" agent:"*)
    AGENT_GPU_STORE=node start_agent || { record store_bench FAIL "agent did not start"; return; } ;;
  esac
  for mib in $sizes; do
    for run in $modes; do
      earlier=$(awk -F'\t' -v r="$run" -v m="$mib" 'NR > 1 && $1 == r && $3 == m' "$tsv" | wc -l)
      for rep in $(seq $((earlier + 1)) $((earlier + runs))); do
        mode=${run%%:*} content=${run#*:} tag=sb-${mib}-${mode}-${content}-$rep
        store=$mode; [ "$mode" = agent ] && store=node
        [ "$fresh" = 1 ] && rm -rf "$NODE_STORE"
        name=$PREFIX-$tag out=$WORK/out/$tag.txt a=$WORK/$tag.tar
        { [ -f "$saved" ] && grep -v '^GPUCKPT_GPU_STORE=' "$saved"; echo "GPUCKPT_GPU_STORE=$store"; } > "$settings"
        run_counter "$name" "$out" "${CDI_GPU[@]}" -- "$mib" "/out/$tag.txt" --content "$content" || { show "$WORK/$name.err"; record store_bench FAIL "podman run ($run, $mib MiB)"; failed=1; break 3; }
        wait_ctr "$name" "$out" 20 300 || { record store_bench FAIL "workload did not start ($run, $mib MiB)"; failed=1; break 3; }
        static=$(podman inspect -f '{{.StaticDir}}' "$name")
        if [ "$mode" = agent ]; then
          rm -f "$WORK"/ck/*.tar*
          timed_with_log "$static" dump.log "$WORK/$tag.dump.log" tck gk checkpoint "$name" > "$WORK/$tag.ckpt.log" 2>&1 &&
            a=$(ls -t "$WORK"/ck/*.tar* 2>/dev/null | head -1) && [ -f "$a" ]
        else
          timed_with_log "$static" dump.log "$WORK/$tag.dump.log" tck pm container checkpoint --print-stats --export "$a" "$name" \
            > "$WORK/$tag.ckpt.json" 2> "$WORK/$tag.ckpt.log"
        fi || { show "$WORK/$tag.ckpt.log" "$WORK/$tag.dump.log"; record store_bench FAIL "checkpoint ($run, $mib MiB)"; failed=1; break 3; }
        at=$(last_iter "$out")
        if [ "$store" = node ]; then
          [ "$(entries "$a" 'gpuckpt-gpumem-.*manifest.json')" -gt 0 ] && [ "$(entries "$a" 'gpuckpt-gpumem-.*img')" = 0 ] ||
            { record store_bench FAIL "the store-backed archive holds GPU memory images, or no manifest ($run)"; failed=1; break 3; }
        fi
        pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
        if [ "$mode" = agent ]; then
          timed_with_log "$static" restore.log "$WORK/$tag.restore.log" trs gk restore "$a" > "$WORK/$tag.rst.log" 2>&1
        else
          timed_with_log "$static" restore.log "$WORK/$tag.restore.log" trs pm container restore --print-stats --import "$a" \
            > "$WORK/$tag.rst.json" 2> "$WORK/$tag.rst.log"
        fi || { show "$WORK/$tag.rst.log" "$WORK/$tag.restore.log"; record store_bench FAIL "restore ($run, $mib MiB)"; failed=1; break 3; }
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$rep" "$mib" "$content" \
          "$tck" "$(criu_seconds "$WORK/$tag.dump.log")" "$(runtime_seconds "$WORK/$tag.ckpt.json" runtime_checkpoint_duration)" \
          "$trs" "$(criu_seconds "$WORK/$tag.restore.log")" "$(runtime_seconds "$WORK/$tag.rst.json" runtime_restore_duration)" \
          "$(( $(stat -c %s "$a") >> 20 ))" "$(written_mib "$WORK/$tag.dump.log")" \
          "$(plugin_phases "$WORK/$tag.dump.log" "$WORK/$tag.restore.log")" >> "$tsv"
        wait_ctr "$name" "$out" $((at + 10)) 300 || { record store_bench FAIL "no progress after restore ($run, $mib MiB)"; failed=1; break 3; }
        if [ "$run" = node:bf16 ]; then   # the weights did not change since the first checkpoint; 1/16 of it did
          timed_with_log "$static" dump.log "$WORK/$tag.again.dump.log" tck pm container checkpoint --print-stats --export "$a.2" "$name" \
            > "$WORK/$tag.again.ckpt.json" 2> "$WORK/$tag.again.ckpt.log" || { show "$WORK/$tag.again.ckpt.log"; record store_bench FAIL "second checkpoint ($mib MiB)"; failed=1; break 3; }
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t-\t-\t-\t%s\t%s\t%s\n' "$run:second" "$rep" "$mib" "$content" "$tck" \
            "$(criu_seconds "$WORK/$tag.again.dump.log")" "$(runtime_seconds "$WORK/$tag.again.ckpt.json" runtime_checkpoint_duration)" \
            "$(( $(stat -c %s "$a.2") >> 20 ))" "$(written_mib "$WORK/$tag.again.dump.log")" \
            "$(plugin_phases "$WORK/$tag.again.dump.log" /dev/null)" >> "$tsv"
        fi
        pm rm -f -t 0 "$name" >/dev/null 2>&1
        check_counter store_bench "$out" "$mib" --content "$content" || { failed=1; break 3; }
        rm -f "$a" "$a.2"
      done
    done
  done
  if [ -f "$saved" ]; then cp "$saved" "$settings"; else rm -f "$settings"; fi
  [ "$fresh" = 1 ] && rm -rf "$NODE_STORE" && { [ ! -d "$aside" ] || mv "$aside" "$NODE_STORE"; }
  cat "$tsv"
  store_bench_medians "$tsv" | tee "${tsv%.tsv}.medians.tsv"
  [ "$failed" = 1 ] ||
    record store_bench PASS "$(awk -F'\t' 'NR>1 {printf "%s %s MiB (median of %s): ckpt %ss (criu %ss; x%s) rst %ss (criu %ss; x%s) archive %s MiB, GPU written %s MiB; ", $1, $2, $3, $4, $5, $7, $8, $9, $11, $12, $13}' "${tsv%.tsv}.medians.tsv")"
}

# Per run and size, the median of each number column over its repetitions, and the container time over CRIU's
# (the 1.3x target of #21): run mib runs, then STORE_BENCH_COLUMNS' from container_checkpoint_s on, with ckpt_x_criu
# after runtime_dump_s and rst_x_criu after runtime_restore_s.
store_bench_medians() { # TSV
  local tsv=$1 key run mib col vals=()
  printf 'run\tmib\truns\tcontainer_checkpoint_s\tcriu_dump_s\truntime_dump_s\tckpt_x_criu\tcontainer_restore_s\tcriu_restore_s\truntime_restore_s\trst_x_criu\tarchive_mib\tgpu_written_mib\tcuda_lock_s\tcuda_checkpoint_s\tgpu_write_s\tgpu_drop_s\tgpu_fill_s\tcuda_restore_s\n'
  for key in $(awk -F'\t' 'NR>1 && !seen[$1 "@" $3]++ {print $1 "@" $3}' "$tsv"); do
    run=${key%@*} mib=${key#*@} vals=()
    for col in $(seq 5 18); do
      vals+=("$(awk -F'\t' -v r="$run" -v m="$mib" -v c="$col" 'NR>1 && $1 == r && $3 == m {print $c}' "$tsv" | median)")
    done
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$mib" \
      "$(awk -F'\t' -v r="$run" -v m="$mib" 'NR>1 && $1 == r && $3 == m' "$tsv" | wc -l)" \
      "${vals[0]}" "${vals[1]}" "${vals[2]}" "$(ratio "${vals[0]}" "${vals[1]}")" \
      "${vals[3]}" "${vals[4]}" "${vals[5]}" "$(ratio "${vals[3]}" "${vals[4]}")" "${vals[@]:6}"
  done
}
# Benchmark (#21): replicas warm-started from one checkpoint. A counter with STORE_BENCH_MIB's first size (default
# 4096) of random GPU memory, in its own pod sandbox (network and IPC namespaces, as kubelet gives each pod; CRIU with
# `network-lock skip`, as in pod_network_test.sh), checkpointed once into the node's store; then per round
# (STORE_BENCH_RUNS) one restore alone, and STORE_FANOUT (default 4) restores of the same archive at once, each
# into a new sandbox and its own output directory, as N pods of one node would. STORE_FANOUT_STORE: the store
# (default node: the node-local one, whose chunks restores check by the manifest's XXH3-64; an absolute path stands
# for a shared volume, checked by SHA-256 on every read); each restore.log must say that check, and from the node
# store that its raw chunks were mapped (where GPUCKPT_STAGING_MAP_CHUNKS=1 in the settings file). Rows (run, copies, wall seconds of
# the restores, the slowest one's own, and the ratio to the restore alone) into $STORE_FANOUT_TSV (default in the work
# dir), medians after. Every copy is checked bit for bit against an uninterrupted run.
case_store_fanout() {
  gpu_ready store_fanout || return
  local sizes=${STORE_BENCH_MIB:-4096}
  local mib=${sizes%% *} runs=${STORE_BENCH_RUNS:-1} n=${STORE_FANOUT:-4} tsv=${STORE_FANOUT_TSV:-$WORK/store_fanout.tsv}
  local settings=$PLUGIN_DIR/gpuckpt_plugin.env saved=$WORK/plugin.env.fanout conf=$WORK/criu-fanout.conf
  local name=$PREFIX-fan out=$WORK/out/fan.txt a=$WORK/fan.tar sandbox rep i t0 one all slowest at pids rc round copies=() failed=0
  local store=${STORE_FANOUT_STORE:-node} check=XXH3-64
  [ "$store" = node ] || check=SHA-256
  [ -f "$settings" ] && cp "$settings" "$saved"
  { [ -f "$saved" ] && grep -v '^GPUCKPT_GPU_STORE=' "$saved"; echo "GPUCKPT_GPU_STORE=$store"; } > "$settings"
  { [ -f /etc/criu/runc.conf ] && grep -v '^network-lock' /etc/criu/runc.conf; echo "network-lock skip"; } > "$conf"
  printf 'rep\tmib\tcopies\tone_restore_s\tall_restores_s\tslowest_restore_s\tall_x_one\tone_criu_s\tone_gpu_fill_s\tone_cuda_restore_s\tslowest_criu_s\tslowest_gpu_fill_s\tslowest_cuda_restore_s\n' > "$tsv"
  fanout_end() { if [ -f "$saved" ]; then cp "$saved" "$settings"; else rm -f "$settings"; fi; }
  new_sandbox "$PREFIX-fan-src" || { fanout_end; record store_fanout FAIL "cannot make a pod sandbox (unshare, nsenter)"; return; }
  read -ra sandbox <<< "$(sandbox_args "$PREFIX-fan-src")"
  run_counter "$name" "$out" "${CDI_GPU[@]}" "${sandbox[@]}" --annotation "org.criu.config=$conf" -- "$mib" /out/fan.txt ||
    { show "$WORK/$name.err"; fanout_end; record store_fanout FAIL "podman run in a pod sandbox"; return; }
  wait_ctr "$name" "$out" 20 300 || { fanout_end; record store_fanout FAIL "workload did not start"; return; }
  timed_with_log "$(podman inspect -f '{{.StaticDir}}' "$name")" dump.log "$WORK/fan.dump.log" t0 \
    pm container checkpoint --export "$a" "$name" > "$WORK/fan.ckpt.log" 2>&1 ||
    { show "$WORK/fan.ckpt.log"; criu_log "$name"; fanout_end; record store_fanout FAIL "checkpoint"; return; }
  pm rm -f -t 0 "$name" >/dev/null 2>&1; wait_gone "$name"
  cp "$out" "$WORK/fan.at-checkpoint"; at=$(last_iter "$out")
  # fanout_copy TAG: $a.TAG, restoring as container $name-TAG into sandbox $PREFIX-fan-TAG with /out from $WORK/fan-TAG
  # (the output file as it was at the checkpoint: CRIU checks the size of the files it reopens)
  fanout_copy() {
    local dir=$WORK/fan-unpack
    rm -rf "$dir"; mkdir -p "$dir" "$WORK/fan-$1"; chmod 777 "$WORK/fan-$1"
    cp "$WORK/fan.at-checkpoint" "$WORK/fan-$1/fan.txt" && new_sandbox "$PREFIX-fan-$1" && tar -C "$dir" -xf "$a" &&
      sed -i -e "s#$SANDBOX_DIR/$PREFIX-fan-src\.#$SANDBOX_DIR/$PREFIX-fan-$1.#g" -e "s#$WORK/out\([\":]\)#$WORK/fan-$1\1#g" \
        "$dir/spec.dump" "$dir/config.dump" && (cd "$dir" && tar -c . | zstd -q -f -o "$a.$1")
  }
  # fanout_restore TAG: restores copy TAG, its wall time into $WORK/fan-TAG.s and CRIU's log into fan-TAG.restore.log
  # (--keep: podman leaves the log in the container's static dir; what else it keeps of a store-backed import is its
  # 1 MiB of CPU state, left undeleted)
  fanout_restore() {
    local t
    timed t pm container restore --keep --import "$a.$1" --name "$name-$1" > "$WORK/fan-$1.rst.log" 2>&1 || { show "$WORK/fan-$1.rst.log"; return 1; }
    echo "$t" > "$WORK/fan-$1.s"
    cp "$(podman inspect -f '{{.StaticDir}}' "$name-$1")/restore.log" "$WORK/fan-$1.restore.log"
    grep -q "filled .*each chunk checked by $check" "$WORK/fan-$1.restore.log" ||
      { echo "restore $1: restore.log does not say each chunk was checked by $check: $(grep 'filled' "$WORK/fan-$1.restore.log")"; return 1; }
    # From the node store the raw chunks are mapped, not copied, where the settings file turns that on.
    if [ "$store" = node ] && grep -q '^GPUCKPT_STAGING_MAP_CHUNKS=1' "$settings"; then
      grep -Eq "gpuckpt: cuda: pid [0-9]+: mapped [1-9][0-9]* chunk" "$WORK/fan-$1.restore.log" ||
        { echo "restore $1: no chunk was mapped from the node store: $(grep -E 'mapping|mapped' "$WORK/fan-$1.restore.log" | head -2)"; return 1; }
    fi
  }
  # fanout_phases TAG...: CRIU's time, the plugin's fill and the driver's restore, each the largest over the copies
  fanout_phases() {
    local c crius=() fills=() drivers=()
    for c in "$@"; do
      crius+=("$(criu_seconds "$WORK/fan-$c.restore.log")") fills+=("$(phase_seconds "$WORK/fan-$c.restore.log" "gpu memory image fill")")
      drivers+=("$(phase_seconds "$WORK/fan-$c.restore.log" "cuda restore")")
    done
    printf '%s\t%s\t%s' "$(printf '%s\n' "${crius[@]}" | sort -n | tail -1)" "$(printf '%s\n' "${fills[@]}" | sort -n | tail -1)" \
      "$(printf '%s\n' "${drivers[@]}" | sort -n | tail -1)"
  }
  for rep in $(seq "$runs"); do
    fanout_copy "one$rep" || { failed=1; break; }
    for i in $(seq "$n"); do fanout_copy "r$rep-$i" || { failed=1; break 2; }; done
    timed one fanout_restore "one$rep" || { record store_fanout FAIL "restore alone (round $rep)"; failed=1; break; }
    wait_ctr "$name-one$rep" "$WORK/fan-one$rep/fan.txt" $((at + 10)) 300 || { record store_fanout FAIL "no progress after the restore alone"; failed=1; break; }
    pm rm -f -t 0 "$name-one$rep" >/dev/null 2>&1; wait_gone "$name-one$rep"
    copies+=("one$rep")
    pids=() rc=0 round=() t0=$EPOCHREALTIME
    for i in $(seq "$n"); do fanout_restore "r$rep-$i" & pids+=($!); round+=("r$rep-$i"); done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    all=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
    [ "$rc" = 0 ] || { record store_fanout FAIL "a restore of $n at once failed (round $rep)"; failed=1; break; }
    for i in $(seq "$n"); do
      wait_ctr "$name-r$rep-$i" "$WORK/fan-r$rep-$i/fan.txt" $((at + 10)) 300 || { record store_fanout FAIL "copy $i of $n does not run on (round $rep)"; failed=1; break 2; }
      copies+=("r$rep-$i")
    done
    for i in $(seq "$n"); do pm rm -f -t 0 "$name-r$rep-$i" >/dev/null 2>&1; done
    slowest=$(cat "$WORK"/fan-r"$rep"-*.s | sort -n | tail -1)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$mib" "$n" "$one" "$all" "$slowest" "$(ratio "$all" "$one")" \
      "$(fanout_phases "one$rep")" "$(fanout_phases "${round[@]}")" >> "$tsv"
  done
  fanout_end
  if [ "$failed" = 0 ]; then   # one uninterrupted run as long as the longest copy: every copy's lines must be in it
    local c last=0
    for c in "${copies[@]}"; do [ "$(last_iter "$WORK/fan-$c/fan.txt")" -gt "$last" ] && last=$(last_iter "$WORK/fan-$c/fan.txt"); done
    counter_reference "$mib" "$last" "$WORK/fan.ref"
    for c in "${copies[@]}"; do
      same_as_reference "$WORK/fan-$c/fan.txt" "$WORK/fan.ref" || { record store_fanout FAIL "copy $c differs from the uninterrupted run"; failed=1; break; }
    done
  fi
  cat "$tsv"
  printf 'median\t%s\t%s' "$mib" "$n" > "${tsv%.tsv}.medians.tsv"
  for i in 4 5 6; do printf '\t%s' "$(awk -F'\t' -v c="$i" 'NR>1 {print $c}' "$tsv" | median)" >> "${tsv%.tsv}.medians.tsv"; done
  printf '\t%s' "$(ratio "$(awk -F'\t' 'NR>1 {print $5}' "$tsv" | median)" "$(awk -F'\t' 'NR>1 {print $4}' "$tsv" | median)")" >> "${tsv%.tsv}.medians.tsv"
  for i in 8 9 10 11 12 13; do printf '\t%s' "$(awk -F'\t' -v c="$i" 'NR>1 {print $c}' "$tsv" | median)" >> "${tsv%.tsv}.medians.tsv"; done
  echo >> "${tsv%.tsv}.medians.tsv"
  cat "${tsv%.tsv}.medians.tsv"
  [ "$failed" = 1 ] || record store_fanout PASS "$mib MiB, one checkpoint in the store $store (chunks checked by $check), each restore into its own pod sandbox: $(awk -F'\t' '{printf "one restore %ss, %s at once %ss (slowest %ss), x%s of one (medians of %s rounds)", $4, $3, $5, $6, $7, r}' r="$runs" "${tsv%.tsv}.medians.tsv"); all ${#copies[@]} copies bit-identical"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-"}'; }

if [ "$HAVE_GPU" = 1 ]; then
  echo "GPU node: $(nvidia-smi -L | head -1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); $(criu --version | head -1); podman $(podman --version | awk '{print $3}')"
fi
for c in $CASES; do "case_$c"; done
summary "container GPU test"
