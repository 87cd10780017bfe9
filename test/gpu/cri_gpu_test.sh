#!/usr/bin/env bash
# Issue 20 item 7 on the GPU machine: a CUDA counter container checkpointed through CRI CheckpointContainer and
# restored through CRI CreateContainer + StartContainer, on containerd 2.1.9 + runc 1.1.5 + the carry's CRIU with
# gpuckpt's CRIU plugin (CRIU_LIBS_DIR), gpuckpt-nri on containerd's NRI socket (it records GPU containers and
# injects the OCI hook as a createRuntime hook), the agent (kubelet-dir watcher; `gpuckpt image`) and a simulated
# kubelet PodResources server. The machine has no container runtime and no network: everything comes from the
# carry (test/gpu/make_device_carry.sh --cri) into a private prefix under this run's work directory; the images
# are pushed to a docker-registry on 127.0.0.1 (containerd 2.1 pulls the base image by rootfsImageRef at restore).
# test/e2e/containerd2_flow.sh is the same flow with simulated GPUs; this one adds the CUDA facts.
#
# The checkpoint: containerd pauses (freezes) the container before runc checkpoints it; the plugin thaws it for
# the driver's lock where CRIU has not (CRIU 4.1) and the source must run on afterwards. The restore: runc < 1.2
# on cgroup v2 (Debian 12's 1.1.5) does not give CRIU the new container's cgroup, so CRIU puts the restored process
# into a copy of the source's cgroup, without the new container's device filter: the device-cgroup assertion
# then fails with that reason unless /etc/criu/runc.conf has manage-cgroups=ignore (docs/kubernetes.md).
#
# Cases (CRI_GPU_CASES picks; default both), each restored twice: from the archive path (CreateContainer image =
# the kubelet-style archive) and from the checkpoint image the agent loads (`gpuckpt image`):
#   moved    (2 GPUs) the pod had GPU 1; the restore pods are given GPU 0 (PodResources and the container's
#            devices): the restored process runs on GPU 0 (nvidia-smi --query-compute-apps), its container has
#            the host's /dev/nvidia0 and its device cgroup lets it open no other GPU node, gpuckpt-nri planned
#            GPU 1 -> GPU 0, the hook put the plan into containerd's CRIU images dir and the CRIU plugin restored
#            by it, and the counter continues from the checkpoint bit-identically to an uninterrupted run
#   unmoved  the pod had GPU 0 and the restore pods get GPU 0: same checks, on GPU 0
# Each case prints "== CASE-FROM: PASS|FAIL|SKIP reason" with checkpoint/restore seconds and the archive's MB.
#   bash test/gpu/cri_gpu_test.sh CARRY_DIR
#   CRI_GPU_TEST_OUT  copy logs here (containerd, gpuckpt-nri, agent, hook, podres, registry, CRIU dump/restore
#                     logs, the counters' outputs)
#   COUNTER_MIB       GPU memory of the counter (default 512)
#   CRI_GPU_CRIU_CONF lines for /etc/criu/runc.conf during the run, the file put back after it (runc < 1.2 on
#                     cgroup v2: manage-cgroups=ignore)
# Exit 0 all ran passed, 1 a failure, 77 nothing passed (no root, no GPU, no carry).
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/test/gpu/gpu_test_lib.sh"
. "$SRC/test/gpu/device_runtime.sh"   # link_missing_libraries
. "$SRC/scripts/lib/node-sandbox.sh"  # sandbox_start_agent / sandbox_stop_agent
. "$SRC/scripts/lib/containerd-sandbox.sh"
CASES=${CRI_GPU_CASES:-moved unmoved}
MIB=${COUNTER_MIB:-512}
LOGS=${CRI_GPU_TEST_OUT:-}

skip_all() { echo "== cri_gpu: SKIP $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip_all "needs root (containerd, runc, CRIU)"
CARRY=$(cd "${1:?usage: cri_gpu_test.sh CARRY_DIR}" 2>/dev/null && pwd) || skip_all "no carry directory $1"
for f in containerd2.tar.xz cri-bin.tar.xz lib-extra.tar.xz criu.tar.gz bin/criu lib/gpuckpt_plugin.so; do
  [ -e "$CARRY/$f" ] || skip_all "$CARRY/$f missing (test/gpu/make_device_carry.sh --cri)"
done
for d in runc_ docker-registry_ busybox-static_; do
  compgen -G "$CARRY/debs/$d*.deb" >/dev/null || skip_all "$CARRY/debs/$d*.deb missing (make_device_carry.sh --cri)"
done

WORK=/tmp/gpuckpt-cri-gpu-$$-$(date +%s)
mkdir -m 700 "$WORK"
P=$WORK/prefix
AGENT_PID='' NRI_PID='' REGISTRY_PID='' PODRES_PID=''
save_logs() {
  [ -n "$LOGS" ] || return 0
  mkdir -p "$LOGS"
  for f in containerd/containerd.log nri.log agent.log state/hook.log podres.log registry/registry.log install.log; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$LOGS/"
  done
  cp -r "$WORK"/out-* "$LOGS/" 2>/dev/null
  # CRIU's logs of the CRI checkpoints and restores (containerd's and runc's work directories)
  find "$WORK/containerd" -name '*.log' \( -name 'dump*' -o -name 'restore*' -o -name 'criu*' \) 2>/dev/null |
    while read -r f; do cp "$f" "$LOGS/$(echo "${f#"$WORK"/containerd/}" | tr / _)"; done
  return 0
}
cleanup() {
  set +e
  save_logs
  sandbox_stop_agent
  for p in "$NRI_PID" "$PODRES_PID" "$REGISTRY_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  ctrd_stop
  if [ -n "${CRI_GPU_CRIU_CONF:-}" ]; then
    if [ -f "$WORK/runc.conf.orig" ]; then cp -p "$WORK/runc.conf.orig" /etc/criu/runc.conf; else rm -f /etc/criu/runc.conf; fi
  fi
  rm -rf /tmp/gpuckpt-cri-*-logs
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -n "${CRI_GPU_CRIU_CONF:-}" ]; then
  [ -f /etc/criu/runc.conf ] && cp -p /etc/criu/runc.conf "$WORK/runc.conf.orig"
  mkdir -p /etc/criu && printf '%s\n' "$CRI_GPU_CRIU_CONF" > /etc/criu/runc.conf
fi

# ---- install from the carry into $P: nothing outside $WORK is written ------------------------------------------
# Binaries that link libraries this system lacks get wrappers (the hook runs with the spec's empty environment).
install_carry() {
  local d b
  mkdir -p "$P/root" "$P/lib" "$P/bin" "$P/libexec" "$P/lib-extra" "$P/containerd2/usr/bin"
  tar -C "$P/containerd2/usr/bin" -xJf "$CARRY/containerd2.tar.xz" || return 1
  for d in "$CARRY"/debs/*.deb; do dpkg-deb -x "$d" "$P/root" || return 1; done
  tar -C "$P/libexec" -xJf "$CARRY/cri-bin.tar.xz" || return 1
  tar -C "$P/lib-extra" -xJf "$CARRY/lib-extra.tar.xz" || return 1
  link_missing_libraries "$P/lib" "$P"/lib-extra/*.so* "$P"/root/usr/lib/x86_64-linux-gnu/*.so.* "$P"/root/lib/x86_64-linux-gnu/*.so.*
  for b in "$P"/libexec/*; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$P/lib" "$b" > "$P/bin/$(basename "$b")"
    chmod 755 "$P/bin/$(basename "$b")"
  done
  # runc without process.rlimits: root on the GPU machine lacks CAP_SYS_RESOURCE (test/gpu/device_runtime.sh)
  cat > "$P/bin/runc" <<WRAP
#!/bin/sh
bundle=""; prev=""
for a in "\$@"; do
  case "\$prev" in --bundle|-b) bundle=\$a ;; esac
  case "\$a" in --bundle=*) bundle=\${a#--bundle=} ;; esac
  prev=\$a
done
if [ -n "\$bundle" ] && [ -f "\$bundle/config.json" ]; then
  python3 -c 'import json, os, sys
p = sys.argv[1]; s = json.load(open(p))
if s.get("process", {}).pop("rlimits", None) is not None:
    json.dump(s, open(p + ".tmp", "w")); os.replace(p + ".tmp", p)' "\$bundle/config.json"
fi
LD_LIBRARY_PATH=$P/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $P/root/usr/sbin/runc "\$@"
WRAP
  # CRIU: the carried bundle, unpacked under $P (runc finds `criu` on PATH)
  printf '#!/bin/sh\nGPUCKPT_CRIU_ROOT=%s exec %s "$@"\n' "$P/criu" "$CARRY/bin/criu" > "$P/bin/criu"
  ln -sf "$P/root/usr/bin/docker-registry" "$P/bin/docker-registry"
  ln -sf "$P/root/bin/busybox" "$P/bin/busybox"
  chmod 755 "$P/bin/runc" "$P/bin/criu"
  # gpuckpt's CRIU plugin and the libraries beside it (its RPATH is $ORIGIN); CRIU loads only *.so names
  mkdir -p "$WORK/criu-plugins"
  cp "$CARRY"/lib/* "$WORK/criu-plugins/"
}
export PATH=$P/bin:$PATH
install_carry > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; skip_all "cannot install the carry"; }
CTRD_BIN_DIR=$P/containerd2/usr/bin
CLI=$P/bin/gpuckpt AGENT=$P/bin/gpuckpt-agent HOOK=$P/bin/gpuckpt-oci-hook NRI=$P/bin/gpuckpt-nri
CRI_TOOL=$P/bin/cri-tool PODRES=$P/bin/podresources-server
for b in "$CLI" "$AGENT" "$HOOK" "$NRI" "$CRI_TOOL" "$PODRES"; do
  [ -x "$P/libexec/$(basename "$b")" ] || skip_all "$(basename "$b") not in $CARRY/cri-bin.tar.xz"
done
missing=$(for b in "$P"/libexec/*; do LD_LIBRARY_PATH=$P/lib ldd "$b" | awk '/not found/{print $1}'; done | sort -u | tr '\n' ' ')
[ -z "$missing" ] || skip_all "libraries neither on this system nor in the carry's lib-extra.tar.xz: $missing"
echo "installed: containerd $("$CTRD_BIN_DIR/containerd" --version | awk '{print $3}'), $(runc --version | head -1),"\
  "$(criu --version | head -1), $(docker-registry --version 2>&1 | head -1)"

# ---- GPU preconditions ---------------------------------------------------------------------------------------
NGPU=0
if [ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null && command -v nvcc >/dev/null; then
  NGPU=$(nvidia-smi -L | grep -c '^GPU ')
fi
if [ "$NGPU" = 0 ]; then
  for c in $CASES; do record "$c" SKIP "no NVIDIA GPU with nvidia-smi and nvcc here"; done
  summary "CRI GPU test"; exit $?
fi
echo "GPU node: $NGPU x $(nvidia-smi -L | head -1 | cut -d'(' -f1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
gpu_uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }
gpu_of_pid() { nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', *' -v p="$1" '$1 == p {print $2; exit}'; }
driver_libcuda() { ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/{print $NF; exit}'; }
timed() { # VAR cmd...: runs cmd, stores its wall time in seconds in VAR
  local var=$1 t0=$EPOCHREALTIME rc; shift
  "$@"; rc=$?
  printf -v "$var" '%s' "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')"
  return $rc
}
cri() { "$CRI_TOOL" "$CTRD_SOCK" "$@"; }
gpu_nodes() { local f; for f in "${1:-}/dev"/nvidia[0-9]*; do [ -c "$f" ] && printf '%s ' "${f##*/}"; done; }
# The host's GPU nodes a process in PID's cgroup may open: what the container's device cgroup allows (a GPU node
# in a container's /dev alone grants nothing, and libcuda, root in the container, may make more)
usable_gpus() { # PID
  local cg n
  cg=$(awk -F: '$1 == "0" && $2 == "" {print $3}' "/proc/$1/cgroup")
  [ -n "$cg" ] || { echo "?"; return; }
  for n in $(gpu_nodes); do
    ( echo "$BASHPID" > "/sys/fs/cgroup$cg/cgroup.procs" && : < "/dev/$n" ) 2>/dev/null && printf '%s ' "$n"
  done
}
show() { for f in "$@"; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done; return 0; }

# ---- the images: the counter's (busybox + gpu_counter + its libraries; the driver's files are bound in) and
# ---- the pod sandbox's, pushed to a registry on 127.0.0.1 ---------------------------------------------------
LIBCUDA=$(driver_libcuda)
DRIVER_ROOT=$(findmnt -n -o TARGET --target "$(dirname "$LIBCUDA")")
nvcc -O2 -o "$WORK/gpu_counter" "$SRC/test/gpu/gpu_counter.cu" > "$WORK/nvcc.log" 2>&1 ||
  { cat "$WORK/nvcc.log"; skip_all "nvcc cannot build test/gpu/gpu_counter.cu"; }
make_rootfs() { # DIR [with-counter]
  local root=$1 lib app
  mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc,out,usr/lib64,usr/lib/x86_64-linux-gnu}
  cp "$P/root/bin/busybox" "$root/bin/busybox"
  for app in sh cat ls sleep env stat head wc; do ln -sf busybox "$root/bin/$app"; done
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  [ -n "${2:-}" ] || return 0
  cp "$WORK/gpu_counter" "$root/bin/gpu_counter"
  for lib in $(ldd "$WORK/gpu_counter" "$LIBCUDA" | awk '/=> \// && $1 !~ /^libcuda/ {print $3}' | sort -u); do
    cp -Ln "$lib" "$root/usr/lib/x86_64-linux-gnu/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$root/usr/lib64/"
}

ctrd_start_registry "$WORK/registry" || skip_all "docker-registry did not start"
BASE=$REGISTRY/gpuckpt-gpu-counter:latest
CTRD_PAUSE_IMAGE=$REGISTRY/gpuckpt-pause:latest
make_rootfs "$WORK/rootfs-counter" with-counter
make_rootfs "$WORK/rootfs-pause"
python3 "$SRC/test/gpu/push_oci_image.py" "$REGISTRY" "${BASE#*/}" "$WORK/rootfs-counter" /bin/gpu_counter >/dev/null ||
  skip_all "cannot push the counter image to $REGISTRY"
python3 "$SRC/test/gpu/push_oci_image.py" "$REGISTRY" "${CTRD_PAUSE_IMAGE#*/}" "$WORK/rootfs-pause" /bin/sleep 2147483647 >/dev/null ||
  skip_all "cannot push the pause image to $REGISTRY"
rm -rf "$WORK/rootfs-counter" "$WORK/rootfs-pause"
# the sandbox image comes from the registry too (containerd-sandbox.sh imports it with podman, absent here)
ctrd_import_pause_image() { ctrd_registry_host "$REGISTRY" && cri pull "$CTRD_PAUSE_IMAGE" >/dev/null; }

# ---- containerd 2.1, the PodResources server, gpuckpt-nri, the agent --------------------------------------------
STATE=$WORK/state CK=$WORK/checkpoints KDIR=$WORK/kubelet/checkpoints TOKEN_FILE=$WORK/token
mkdir -p "$STATE" "$CK" "$KDIR" "$WORK/hooks.d" "$WORK/pod-resources"
printf '127.0.0.1 localhost\n' > "$WORK/hosts"
export CRIU_LIBS_DIR=$WORK/criu-plugins   # containerd -> shim -> runc -> CRIU loads gpuckpt's plugin from here
ctrd_start "$WORK/containerd" || skip_all "containerd 2.1 did not start"
ctrd_registry_host "$REGISTRY"
BASE_REF=$(cri pull "$BASE") || { show "$CTRD_LOG"; skip_all "CRI PullImage $BASE"; }
BASE_ID=$(cri image-id "$BASE") || skip_all "CRI ImageStatus $BASE"
echo "containerd $CTRD_VERSION on $CTRD_SOCK; $BASE pulled through CRI ($BASE_REF)"

# The kubelet's PodResources answers: every pod of every case, with the GPU the case gives it.
U0=$(gpu_uuid 0) U1=''
[ "$NGPU" -ge 2 ] && U1=$(gpu_uuid 1)
python3 - "$WORK/pod-resources.json" "$U0" "$U1" <<'PY'
import json, sys
u0, u1 = sys.argv[2], sys.argv[3]
gpus = {"gpuckpt-cri-moved-src": u1, "gpuckpt-cri-moved-path": u0, "gpuckpt-cri-moved-image": u0,
        "gpuckpt-cri-unmoved-src": u0, "gpuckpt-cri-unmoved-path": u0, "gpuckpt-cri-unmoved-image": u0}
pods = [{"name": n, "namespace": "default", "containers": [{"name": "counter",
         "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [u]}]}]} for n, u in gpus.items() if u]
json.dump({"pods": pods}, open(sys.argv[1], "w"))
PY
"$PODRES" "$WORK/pod-resources/kubelet.sock" "$WORK/pod-resources.json" > "$WORK/podres.log" 2>&1 &
PODRES_PID=$!
for _ in $(seq 100); do grep -qx listening "$WORK/podres.log" && break; sleep 0.1; done
grep -qx listening "$WORK/podres.log" || { show "$WORK/podres.log"; skip_all "podresources-server did not start"; }
"$NRI" --socket "$CTRD_NRI_SOCK" --state-dir "$STATE" --host-root / --hook "$HOOK" \
  --pod-resources-socket "$WORK/pod-resources/kubelet.sock" --once > "$WORK/nri.log" 2>&1 &
NRI_PID=$!
for _ in $(seq 100); do grep -q "registered with containerd" "$WORK/nri.log" && break; sleep 0.1; done
grep -q "registered with containerd" "$WORK/nri.log" || { show "$WORK/nri.log"; skip_all "gpuckpt-nri did not register"; }
head -c 32 /dev/urandom | base64 > "$TOKEN_FILE"; chmod 600 "$TOKEN_FILE"
cat > "$WORK/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $TOKEN_FILE}
state_dir: $STATE
checkpoints: {dir: $CK, kubelet_dir: $KDIR, watch_interval_seconds: 1, runtime_timeout_seconds: 300}
host_root: /
hooks_dir: $WORK/hooks.d
criu_plugin_dir: $WORK/criu-plugins
runtime: {kind: cri, cri: {endpoint: unix://$CTRD_SOCK}}
YAML
sandbox_start_agent "$AGENT" || skip_all "the agent did not start"

# ---- one case: the source pod on GPU SRC, checkpointed through CRI, restored twice onto GPU DST ---------------
gpu_args() { # GPU OUTDIR: what the device plugin and kubelet give a container for GPU N, plus the test's mounts
  local a=(--device "/dev/nvidia$1:/dev/nvidia$1" --device /dev/nvidiactl:/dev/nvidiactl --device /dev/nvidia-uvm:/dev/nvidia-uvm)
  [ -e /dev/nvidia-uvm-tools ] && a+=(--device /dev/nvidia-uvm-tools:/dev/nvidia-uvm-tools)
  a+=(--env "NVIDIA_VISIBLE_DEVICES=$1" --env "LD_LIBRARY_PATH=$(dirname "$LIBCUDA")" --mount "$DRIVER_ROOT:$DRIVER_ROOT"
      --mount "$WORK/hosts:/etc/hosts" --mount "$2:/out")
  printf '%s\n' "${a[@]}"
}
COUNTER=(-- /bin/gpu_counter "$MIB" /out/count.txt --sleep-ms 20)

# restore_from CASE FROM IMAGE [--user-image REF]: sets RESTORE_OK (0/1) and records the result
restore_from() {
  local case=$1 from=$2 image=$3 pod rid rpid out=$WORK/out-$1-$2 trs first after nodes usable rdev rcg plan_path plan_id args
  shift 3
  mkdir -p "$out"
  pod=$(cri run-pod "gpuckpt-cri-$case-$from") || { record "$case-$from" FAIL "RunPodSandbox"; return; }
  mapfile -t args < <(gpu_args "$DST" "$out")
  rid=$(cri create "gpuckpt-cri-$case-$from" "$pod" counter "$image" "$@" "${args[@]}" "${COUNTER[@]}" 2>&1) ||
    { show "$CTRD_LOG" "$WORK/nri.log"; record "$case-$from" FAIL "CreateContainer from $image: $rid"; return; }
  timed trs cri start "$rid" 2> "$WORK/start.err" ||
    { show "$WORK/start.err" "$CTRD_LOG" "$STATE/hook.log"; record "$case-$from" FAIL "StartContainer (restore): $(tail -1 "$WORK/start.err")"; return; }
  rpid=$(cri pid "$rid")
  wait_iter "$out/count.txt" $((N_CK + 30)) 120 ||
    { record "$case-$from" FAIL "the restored counter does not run (last iteration: $(last_iter "$out/count.txt"))"; return; }
  after=$(gpu_of_pid "$rpid")
  echo "$case-$from: restored pid $rpid; nvidia-smi compute apps: $(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr '\n' ' ')"
  first=$(head -n 1 "$out/count.txt" | cut -d' ' -f1)
  nodes=$(gpu_nodes "/proc/$rpid/root") usable=$(usable_gpus "$rpid")
  rdev=$(stat -c %t:%T "/proc/$rpid/root/dev/nvidia$DST" 2>/dev/null)
  rcg=$(awk -F: '$1 == "0" {print $3}' "/proc/$rpid/cgroup")
  find "$WORK/containerd" -path "*$rid*" -name restore.log -exec cp {} "$out/restore.log" \; 2>/dev/null
  cri stop "$rid" >/dev/null; cri stop-pod "$pod" >/dev/null
  [ "$after" = "$U_DST" ] || { record "$case-$from" FAIL "restored onto ${after:-no GPU}, not GPU $DST ($U_DST); container's GPU nodes: $nodes"; return; }
  [ "$rdev" = "$(stat -c %t:%T "/dev/nvidia$DST")" ] ||
    { record "$case-$from" FAIL "the restored container's /dev/nvidia$DST is '${rdev:-absent}', not the host's $(stat -c %t:%T "/dev/nvidia$DST")"; return; }
  if [ "$SRC_USABLE" = "nvidia$SRC_GPU " ]; then
    [ "$usable" = "nvidia$DST " ] ||
      { record "$case-$from" FAIL "the restored container's device cgroup lets it open the host's '$usable', expected nvidia$DST only; the restored process is in cgroup $rcg (runc < 1.2 on cgroup v2 does not tell CRIU the new container's cgroup, runc 3438ef30b: CRIU then restores into a copy of the source's, without its device filter; manage-cgroups=ignore in /etc/criu/runc.conf keeps it in the new one)"; return; }
  else
    DEVCG="device cgroup not enforced on this machine: the source could open '$SRC_USABLE', the restored '$usable'"
  fi
  [ "$first" -gt "$N_CK" ] || { record "$case-$from" FAIL "the restored counter started at $first, not after $N_CK (reached before the checkpoint)"; return; }
  check_counter "$case-$from" "$out/count.txt" || return
  if [ "$SRC_GPU" != "$DST" ]; then
    plan_path=$CTRD_ROOT/io.containerd.grpc.v1.cri/containers/$rid/ctrd-restore/checkpoint/gpuckpt-restore-plan.json
    plan_id=$(sed -n "s#.*restore plan \(rp-[0-9a-f]*\) placed in $plan_path.*#\1#p" "$STATE/hook.log" | tail -1)
    [ -n "$plan_id" ] || { show "$STATE/hook.log"; record "$case-$from" FAIL "the hook placed no restore plan in $plan_path"; return; }
    # plans are single use: the hook removes the plan from the state dir once placed; gpuckpt-nri names its GPUs
    grep -qF "plan $plan_id ($U_SRC -> $U_DST)" "$WORK/nri.log" ||
      { record "$case-$from" FAIL "restore plan $plan_id is not GPU $SRC_GPU -> $DST: $(grep -F "$plan_id" "$WORK/nri.log")"; return; }
    # and the CRIU plugin restored by it (CRIU's restore log from containerd's CRIU work dir)
    grep -q "GPU mapping from the restore plan" "$out/restore.log" && grep -qF "cuda: GPU $U_SRC -> $U_DST" "$out/restore.log" ||
      { record "$case-$from" FAIL "the CRIU plugin did not restore by plan $plan_id ($out/restore.log)"; return; }
  fi
  record "$case-$from" PASS "GPU $SRC_GPU -> $DST: checkpoint ${TCK}s (${THAW:-the plugin thawed nothing}; the source ran on), archive ${MB} MB, restore (StartContainer) ${trs}s; nvidia-smi: on GPU $DST; /dev: $nodes(the source's: $SRC_NODES); ${DEVCG:-its device cgroup opens only $usable}; continued from the checkpoint (past $N_CK) at $first .. $(last_iter "$out/count.txt"), bit-identical${plan_id:+; plan $plan_id placed in ctrd-restore/checkpoint}"
}
check_counter() { # CASE FILE: FILE equals an uninterrupted run up to its last iteration
  counter_reference "$MIB" "$(last_iter "$2")" "$2.ref"
  same_as_reference "$2" "$2.ref" || { record "$1" FAIL "state differs from the uninterrupted run"; return 1; }
}

fail_both() { record "$case-path" FAIL "$1"; record "$case-image" SKIP "no checkpoint ($1)"; }   # in run_case
run_case() { # CASE SRC_GPU DST_GPU
  local case=$1 pod cid pid before archive ck_image ck_id out=$WORK/out-$1-src args
  SRC_GPU=$2 DST=$3 U_SRC=$(gpu_uuid "$2") U_DST=$(gpu_uuid "$3")
  mkdir -p "$out"
  pod=$(cri run-pod "gpuckpt-cri-$case-src") || { fail_both "RunPodSandbox"; return; }
  mapfile -t args < <(gpu_args "$SRC_GPU" "$out")
  cid=$(cri create "gpuckpt-cri-$case-src" "$pod" counter "$BASE_ID" --user-image "$BASE" "${args[@]}" "${COUNTER[@]}" 2>&1) ||
    { fail_both "CreateContainer: $cid"; return; }
  cri start "$cid" || { fail_both "StartContainer (source)"; return; }
  pid=$(cri pid "$cid")
  wait_iter "$out/count.txt" 30 120 || { show "$CTRD_LOG"; fail_both "the source counter does not run"; return; }
  [ -f "$STATE/containers/$cid.json" ] || { show "$WORK/nri.log"; fail_both "gpuckpt-nri did not record $cid"; return; }
  before=$(gpu_of_pid "$pid")
  SRC_NODES=$(gpu_nodes "/proc/$pid/root") SRC_USABLE=$(usable_gpus "$pid") DEVCG=''
  echo "source on GPU $SRC_GPU: /dev has $SRC_NODES; its device cgroup lets it open the host's $SRC_USABLE"
  [ "$before" = "$U_SRC" ] || { fail_both "the source runs on ${before:-no GPU}, not GPU $SRC_GPU"; return; }
  archive=$KDIR/checkpoint-gpuckpt-cri-$case-src_default-counter-$(date -u +%Y-%m-%dT%H:%M:%SZ).tar
  # the iteration before the checkpoint: a restored counter that continues starts past it (a restart: at 1)
  N_CK=$(last_iter "$out/count.txt")
  timed TCK cri checkpoint "$cid" "$archive" || { show "$CTRD_LOG"; fail_both "CRI CheckpointContainer"; return; }
  # CRIU's dump log is in the archive (containerd makes its checkpoint dir CRIU's work dir): kept with the logs
  tar -xOf "$archive" dump.log > "$out/dump.log" 2>/dev/null
  THAW=$(grep -o "thawed .* for the driver's lock" "$out/dump.log" | head -1)
  # The source runs on after a CRI checkpoint (kubelet's semantics): containerd froze it for the checkpoint and
  # the plugin thawed and froze it again for the driver's lock; neither frozen nor locked may remain.
  local at
  at=$(last_iter "$out/count.txt")
  wait_iter "$out/count.txt" $((at + 20)) 60 ||
    { fail_both "the source did not run on after the checkpoint (stuck at iteration $(last_iter "$out/count.txt"))"; return; }
  # stopped here; the restores write their own files (each restore pod mounts its own /out)
  cri stop "$cid" >/dev/null; cri stop-pod "$pod" >/dev/null
  for _ in $(seq 100); do grep -q "annotated kubelet archive $archive" "$WORK/agent.log" && break; sleep 0.1; done
  grep -q "annotated kubelet archive $archive" "$WORK/agent.log" || { show "$WORK/agent.log"; fail_both "the agent's watcher did not annotate $archive"; return; }
  MB=$(du -m "$archive" | cut -f1)
  restore_from "$case" path "$archive" --user-image "$archive"   # as the kubelet sends a pod's image
  cp "$archive" "$CK/"
  "$CLI" image "$(basename "$archive")" --tag "gpuckpt-cri-$case" --agent "$URL" --token-file "$TOKEN_FILE" > "$WORK/image.txt" 2>&1 ||
    { show "$WORK/image.txt" "$WORK/agent.log"; record "$case-image" FAIL "gpuckpt image"; return; }
  ck_image=$(sed -n 's/^  image: *//p' "$WORK/image.txt")
  ck_id=$(cri image-id "$ck_image") || { record "$case-image" FAIL "CRI ImageStatus $ck_image"; return; }
  restore_from "$case" image "$ck_id" --user-image "$ck_image"
}

for c in $CASES; do
  case $c in
    moved) if [ "$NGPU" -ge 2 ]; then run_case moved 1 0; else record moved SKIP "needs 2 GPUs"; fi ;;
    unmoved) run_case unmoved 0 0 ;;
    *) record "$c" FAIL "unknown case (moved, unmoved)" ;;
  esac
done
summary "CRI GPU test (containerd $CTRD_VERSION)"
