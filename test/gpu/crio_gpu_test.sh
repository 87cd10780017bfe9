#!/usr/bin/env bash
# CRI-O on the GPU machine: a CUDA counter container created through CRI-O's CRI, checkpointed
# through CRI CheckpointContainer into a kubelet-style dir and restored through CRI CreateContainer (image = the
# archive path, as the kubelet sends a pod's image) + StartContainer. CRI-O (built from source:
# docs/kubernetes.md "CRI-O for real") runs privately (scripts/lib/crio-sandbox.sh) with conmon and runc 1.1.5
# from Debian 12 .debs, the carry's CRIU, gpuckpt's hooks.d entries (createRuntime, poststop: what the installer
# writes on a CRI-O node), gpuckpt-nri on CRI-O's NRI socket (CRI-O's restore drops the request's devices and env:
# gpuckpt-nri gives them back from the PodResources allocation), the agent (kubelet-dir watcher) and a simulated
# kubelet PodResources server. test/gpu/cri_gpu_test.sh is the same with containerd 2.1; cri_gpu_lib.sh holds what
# both do; test/e2e/crio_flow.sh is this flow with simulated GPUs.
#
# gpuckpt's CRIU plugin: conmon starts runc (restore) with only CRI-O's monitor_env, so CRIU_LIBS_DIR does not reach
# CRIU. As on a real node, /etc/criu/runc.conf (which runc hands CRIU) names the plugin's dir with `libdir`, the way
# the chart writes it; the file is put back after the run. CRI-O deletes CRIU's restore.log after a successful
# restore: the test's criu wrapper keeps it through a hard link, for the check that the plugin restored by the plan.
# CRI-O pulls images with /etc/containers/policy.json, which a CRI-O node has (containers-common); where it is absent the test
# writes an accept-anything one for the run and removes it after.
#
# Cases (CRI_GPU_CASES picks; default both), each restored from the archive path:
#   moved    (2 GPUs) the pod had GPU 1; the restore pod is given GPU 0 (PodResources; the request's devices,
#            which CRI-O drops): the restored process runs on GPU 0 (nvidia-smi --query-compute-apps), its
#            container has the host's /dev/nvidia0 and its device cgroup lets it open no other GPU node,
#            gpuckpt-nri planned GPU 1 -> GPU 0, the hook put the plan into CRI-O's CRIU images dir and the CRIU
#            plugin restored by it, and the counter continues from the checkpoint bit-identically
#   unmoved  the pod had GPU 0 and the restore pod gets GPU 0: same checks, on GPU 0
# Each case prints "== CASE-path: PASS|FAIL|SKIP reason" with checkpoint/restore seconds and the archive's MB.
#   bash test/gpu/crio_gpu_test.sh CARRY_DIR      (CARRY_DIR: test/gpu/make_device_carry.sh --crio)
#   CRI_GPU_TEST_OUT  copy logs here (crio, gpuckpt-nri, agent, hook, podres, registry, CRIU logs, the counters')
#   COUNTER_MIB       GPU memory of the counter (default 512)
#   CRI_GPU_CRIU_CONF more lines for /etc/criu/runc.conf (runc < 1.2 on cgroup v2: manage-cgroups=ignore)
# Exit 0 all ran passed, 1 a failure, 77 nothing passed (no root, no GPU, no carry).
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/test/gpu/gpu_test_lib.sh"
. "$SRC/test/gpu/device_runtime.sh"   # link_missing_libraries
. "$SRC/scripts/lib/node-sandbox.sh"  # sandbox_start_agent / sandbox_stop_agent
. "$SRC/scripts/lib/containerd-sandbox.sh"   # ctrd_start_registry
. "$SRC/scripts/lib/crio-sandbox.sh"
CASES=${CRI_GPU_CASES:-moved unmoved}
LOGS=${CRI_GPU_TEST_OUT:-}
# CRI-O restores from the archive path here (checkpoint images: not run); read by cri_gpu_lib.sh
export CRI_GPU_RESTORES=path

skip_all() { echo "== crio_gpu: SKIP $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip_all "needs root (CRI-O, runc, CRIU)"
CARRY=$(cd "${1:?usage: crio_gpu_test.sh CARRY_DIR}" 2>/dev/null && pwd) || skip_all "no carry directory $1"
for f in crio.tar.xz cri-bin.tar.xz lib-extra.tar.xz criu.tar.gz bin/criu lib/gpuckpt_plugin.so; do
  [ -e "$CARRY/$f" ] || skip_all "$CARRY/$f missing (test/gpu/make_device_carry.sh --crio)"
done
for d in runc_ conmon_ docker-registry_ busybox-static_; do
  compgen -G "$CARRY/debs/$d*.deb" >/dev/null || skip_all "$CARRY/debs/$d*.deb missing (make_device_carry.sh --crio)"
done

# short: podman-style storage paths under it must stay short (crio-sandbox.sh)
WORK=/tmp/gck-crio-gpu-$$
mkdir -m 711 "$WORK"
P=$WORK/prefix
. "$SRC/test/gpu/cri_gpu_lib.sh"
AGENT_PID='' NRI_PID='' REGISTRY_PID='' PODRES_PID='' POLICY_WRITTEN=''
save_logs() {
  [ -n "$LOGS" ] || return 0
  mkdir -p "$LOGS"
  for f in crio/crio.log nri.log agent.log state/hook.log podres.log registry/registry.log install.log runc-calls.log; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$LOGS/"
  done
  cp -r "$WORK"/out-* "$WORK/criu-logs" "$LOGS/" 2>/dev/null
  return 0
}
cleanup() {
  set +e
  cri_gpu_cleanup crio_stop
  [ -z "$POLICY_WRITTEN" ] || rm -f /etc/containers/policy.json
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ ! -e /etc/containers/policy.json ]; then
  mkdir -p /etc/containers
  printf '{"default": [{"type": "insecureAcceptAnything"}]}\n' > /etc/containers/policy.json
  POLICY_WRITTEN=1
fi

# ---- install from the carry into $P: nothing outside $WORK is written (but the two files above) ------------------
CRIO_DIR=$WORK/crio
install_crio() {
  mkdir -p "$P/crio" "$WORK/criu-logs" && tar -C "$P/crio" -xJf "$CARRY/crio.tar.xz" && cri_gpu_install || return 1
  cri_gpu_wrap "$P/crio/crio"
  cri_gpu_wrap "$P/root/usr/bin/conmon"
  # CRI-O deletes CRIU's restore.log (in the container's bundle, created by CRI-O before it starts conmon) once runc
  # restore returned: a hard link to it, made before CRIU opens it (O_TRUNC keeps the inode), keeps what CRIU
  # writes. exec, never a child: runc moves the process it started (this one) into the new container's cgroup, and
  # a child forked before that move would stay behind with the whole restored tree (which then shows as CRI-O
  # restoring "outside the device cgroup", a result of the wrapper, not of CRI-O). calls.log: each call, and its
  # cgroup a second in (after runc's move), read by a process that is not CRIU's child (CRIU fails a restore on a
  # child's exit it did not expect).
  cat > "$P/bin/criu" <<WRAP
#!/bin/sh
for f in $CRIO_DIR/runroot/overlay-containers/*/userdata/restore.log; do
  [ -f "\$f" ] || continue
  id=\${f%/userdata/restore.log}; ln -f "\$f" "$WORK/criu-logs/\${id##*/}-restore.log"
done
echo "criu \$* (pid \$\$, parent \$(tr '\\0' ' ' < /proc/\$PPID/cmdline | cut -c1-200))" >> $WORK/criu-logs/calls.log
( ( sleep 1; echo "  criu \$\$'s cgroup 1 s in: \$(cat /proc/\$\$/cgroup 2>&1 | tr '\\n' ' ')" >> $WORK/criu-logs/calls.log ) & )
GPUCKPT_CRIU_ROOT=$CRI_GPU_CRIU_ROOT exec "$CARRY/bin/criu" "\$@"
WRAP
  chmod 755 "$P/bin/criu"
}
export PATH=$P/bin:$PATH
install_crio > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; skip_all "cannot install the carry"; }
cri_gpu_check_install "$P/crio/crio" "$P/root/usr/bin/conmon" || skip_all "$CRI_GPU_WHY"
CRIO=$P/bin/crio PINNS=$P/crio/pinns CONMON=$P/bin/conmon RUNC=$P/bin/runc
echo "installed: $("$CRIO" --version 2>/dev/null | head -1), conmon $(conmon --version | head -1),"\
  "$(runc --version | head -1), $(criu --version | head -1), $(docker-registry --version 2>&1 | head -1)"

cri() { "$CRI_TOOL" "unix://$CRIO_SOCK" "$@"; }
runtime_log() { echo "$CRIO_LOG"; }
runtime_plan_path() { echo "$CRIO_DIR/root/overlay-containers/$1/userdata/checkpoint/gpuckpt-restore-plan.json"; }
runtime_restore_log() { cp "$WORK/criu-logs/$1-restore.log" "$2" 2>/dev/null; }

# ---- CRI-O on gpuckpt's hooks.d, its pause image from the registry, the PodResources server, gpuckpt-nri, the agent
# The entries the installer writes on a CRI-O node (no precreate: CRI-O exits on it), for the carried hook.
for f in gpuckpt-hook.json gpuckpt-hook-poststop.json; do
  sed -e "s#/usr/local/bin/gpuckpt-oci-hook#$HOOK#" -e "s#\"/var/lib/gpuckpt\"#\"$STATE\", \"--host-root\", \"/\"#" \
    "$SRC/oci-hook/$f" > "$WORK/hooks.d/$f"
done
cri_gpu_push_images pause-only || skip_all "$CRI_GPU_WHY"
mkdir -p "$CRIO_DIR/conf.d"
# AppArmor (where the kernel has it) would need CRI-O's profile loaded with apparmor_parser, and HostPort mapping
# iptables or nft: the GPU machine has neither (CRI-O exits at start without them; the pods use the node's network)
printf '[crio.runtime]\napparmor_profile = "unconfined"\ndisable_hostport_mapping = true\n' > "$CRIO_DIR/conf.d/10-gpu-test.conf"
# the test registry speaks plain HTTP (CRI-O 1.36 ignores insecure_registries: crio_start's registries.conf marks it
# `insecure`)
CRIO_INSECURE_REGISTRY=$REGISTRY CRIO_PAUSE_IMAGE=$PAUSE_IMAGE crio_start "$CRIO_DIR" "$WORK/hooks.d" ||
  { show "$CRIO_LOG"; skip_all "CRI-O did not start: $(grep -m1 'level=fatal' "$CRIO_LOG" | cut -c1-400)"; }
echo "CRI-O on $CRIO_SOCK: $(cri version)"
cri pull "$PAUSE_IMAGE" > /dev/null 2> "$WORK/pull.err" || skip_all "CRI PullImage $PAUSE_IMAGE: $(cat "$WORK/pull.err")"

# ---- GPU preconditions: the rest needs GPUs --------------------------------------------------------------------
cri_gpu_count
if [ "$NGPU" = 0 ]; then
  # what ran without one: the install, CRI-O on gpuckpt's hooks.d, a pull through CRI
  for c in $CASES; do record "$c" SKIP "no NVIDIA GPU with nvidia-smi and nvcc here (CRI-O started and pulled $PAUSE_IMAGE)"; done
  summary "CRI-O GPU test"; exit $?
fi
# only now: runc.conf is the host's, read by every runc checkpoint and restore while it is there
cri_gpu_criu_conf "libdir $WORK/criu-plugins${CRI_GPU_CRIU_CONF:+
$CRI_GPU_CRIU_CONF}"
echo "GPU node: $NGPU x $(nvidia-smi -L | head -1 | cut -d'(' -f1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
cri_gpu_build_counter || skip_all "$CRI_GPU_WHY"
cri_gpu_push_counter || skip_all "$CRI_GPU_WHY"
BASE_REF=$(cri pull "$BASE" 2> "$WORK/pull.err") || skip_all "CRI PullImage $BASE: $(cat "$WORK/pull.err")"
BASE_ID=$(cri image-id "$BASE") || skip_all "CRI ImageStatus $BASE"
echo "$BASE pulled through CRI ($BASE_REF)"
cri_gpu_start_podres || skip_all "podresources-server did not start"
cri_gpu_start_nri "$CRIO_NRI_SOCK" cri-o || skip_all "gpuckpt-nri did not register"
cri_gpu_start_agent "unix://$CRIO_SOCK" || skip_all "the agent did not start"

cri_gpu_run_cases "$CASES" "$BASE_ID"
summary "CRI GPU test (CRI-O $("$CRIO" --version 2>/dev/null | awk 'NR == 1 {print $3}'))"
