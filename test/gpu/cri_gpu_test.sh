#!/usr/bin/env bash
# containerd's CRI on the GPU machine: a CUDA counter container checkpointed through CRI CheckpointContainer and
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
. "$SRC/test/gpu/cri_gpu_lib.sh"
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
  cri_gpu_cleanup ctrd_stop
  rm -rf /tmp/gpuckpt-cri-*-logs
  rm -rf "$WORK"
}
trap cleanup EXIT
[ -z "${CRI_GPU_CRIU_CONF:-}" ] || cri_gpu_criu_conf "$CRI_GPU_CRIU_CONF"

# ---- install from the carry into $P: nothing outside $WORK is written ------------------------------------------
install_containerd() { mkdir -p "$P/containerd2/usr/bin" && tar -C "$P/containerd2/usr/bin" -xJf "$CARRY/containerd2.tar.xz" && cri_gpu_install; }
export PATH=$P/bin:$PATH
install_containerd > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; skip_all "cannot install the carry"; }
CTRD_BIN_DIR=$P/containerd2/usr/bin
cri_gpu_check_install "$CTRD_BIN_DIR/containerd" || skip_all "$CRI_GPU_WHY"
echo "installed: containerd $("$CTRD_BIN_DIR/containerd" --version | awk '{print $3}'), $(runc --version | head -1),"\
  "$(criu --version | head -1), $(docker-registry --version 2>&1 | head -1)"

# ---- GPU preconditions ---------------------------------------------------------------------------------------
cri_gpu_count
if [ "$NGPU" = 0 ]; then
  for c in $CASES; do record "$c" SKIP "no NVIDIA GPU with nvidia-smi and nvcc here"; done
  summary "CRI GPU test"; exit $?
fi
echo "GPU node: $NGPU x $(nvidia-smi -L | head -1 | cut -d'(' -f1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
cri() { "$CRI_TOOL" "$CTRD_SOCK" "$@"; }
runtime_log() { echo "$CTRD_LOG"; }
runtime_plan_path() { echo "$CTRD_ROOT/io.containerd.grpc.v1.cri/containers/$1/ctrd-restore/checkpoint/gpuckpt-restore-plan.json"; }
runtime_restore_log() { find "$WORK/containerd" -path "*$1*" -name restore.log -exec cp {} "$2" \; 2>/dev/null; }

# ---- the images, pushed to a registry on 127.0.0.1 (containerd 2.1 pulls the base image at every restore) ----
cri_gpu_build_counter || skip_all "$CRI_GPU_WHY"
cri_gpu_push_images all || skip_all "$CRI_GPU_WHY"
CTRD_PAUSE_IMAGE=$PAUSE_IMAGE
# the sandbox image comes from the registry too (containerd-sandbox.sh imports it with podman, absent here)
ctrd_import_pause_image() { ctrd_registry_host "$REGISTRY" && cri pull "$CTRD_PAUSE_IMAGE" >/dev/null; }

# ---- containerd 2.1, the PodResources server, gpuckpt-nri, the agent --------------------------------------------
export CRIU_LIBS_DIR=$WORK/criu-plugins   # containerd -> shim -> runc -> CRIU loads gpuckpt's plugin from here
ctrd_start "$WORK/containerd" || skip_all "containerd 2.1 did not start"
ctrd_registry_host "$REGISTRY"
BASE_REF=$(cri pull "$BASE") || { show "$CTRD_LOG"; skip_all "CRI PullImage $BASE"; }
BASE_ID=$(cri image-id "$BASE") || skip_all "CRI ImageStatus $BASE"
echo "containerd $CTRD_VERSION on $CTRD_SOCK; $BASE pulled through CRI ($BASE_REF)"
cri_gpu_start_podres || skip_all "podresources-server did not start"
cri_gpu_start_nri "$CTRD_NRI_SOCK" containerd || skip_all "gpuckpt-nri did not register"
cri_gpu_start_agent "unix://$CTRD_SOCK" || skip_all "the agent did not start"

cri_gpu_run_cases "$CASES" "$BASE_ID"
summary "CRI GPU test (containerd $CTRD_VERSION)"
