#!/usr/bin/env bash
# A CUDA pod under a real kubelet on the GPU machine: one node of scripts/lib/k8s-sandbox.sh (etcd and
# kube-apiserver with TLS and RBAC; no scheduler or controller-manager: the pods name their node), its kubelet
# (ContainerCheckpoint on) on containerd 2.1.9 + runc 1.1.5 + the carry's CRIU with gpuckpt's plugin, gpuckpt-nri
# on containerd's NRI socket reading the kubelet's own PodResources API, the agent with its kubelet-dir watcher (as
# test/gpu/cri_gpu_test.sh runs them), and the node's GPU advertised to the kubelet by test/k8s/sim-device-plugin
# with the real device nodes: /dev/nvidia0, and /dev/nvidiactl, /dev/nvidia-uvm(-tools) with every allocation, as
# the NVIDIA device plugin passes them. The machine has no container runtime and no network: everything comes from
# the carry (test/gpu/make_device_carry.sh --k8s), installed under this run's work directory.
#   1. a pod of the CUDA counter (test/gpu/gpu_counter.cu) asking for nvidia.com/gpu: 1: the kubelet's device
#      manager allocates the GPU, its PodResources API reports it, gpuckpt-nri records the container on it,
#      nvidia-smi shows the process on it;
#   2. POST /api/v1/nodes/NODE/proxy/checkpoint/default/gpu-counter/counter through the API server (kubectl create
#      --raw, as operators call it): the archive in the kubelet's checkpoint dir, annotated by the agent; the source
#      runs on;
#   3. the source pod deleted (it holds the node's only GPU), the archive loaded as a checkpoint image (`gpuckpt
#      image`), a NEW pod of that image on the same node: the kubelet allocates the GPU, containerd restores the
#      process, the pod is Running, the process is on the GPU (nvidia-smi) in the new container's cgroup, whose
#      device filter opens that GPU only, and the counter continues from the checkpoint bit-identically to an
#      uninterrupted run.
# Prints "== kubelet_gpu: PASS|FAIL|SKIP reason" (with the checkpoint and restore seconds) and exits 0, 1 or 77
# (no root, no GPU, no carry).
#   bash test/gpu/kubelet_gpu_test.sh [CARRY_DIR]   the carry (default: .carry-k8s in the source tree); the carry's
#                                                   own copy runs where the checkout is older:
#                                                   bash CARRY/src/test/gpu/kubelet_gpu_test.sh CARRY
#   KUBELET_GPU_ALLOCATION  device-plugin (default) or dra: the GPU comes from a ResourceClaim instead, allocated
#                         by the real kube-scheduler from the ResourceSlice of test/k8s/sim-device-plugin/sim-dra-driver
#                         (the upstream kubelet-plugin library; the GPU's node and the driver's control nodes in a CDI
#                         spec, containerd with CDI on), prepared through the kubelet; kube-controller-manager runs
#                         too (it releases the source pod's reservation, so the restore pod's claim can be allocated
#                         again); gpuckpt-nri reads the claim's device from PodResources and the CDI spec
#   KUBELET_GPU_SIM=1     no GPU needed: a simulated GPU node (the cluster tests' fixture; /dev/nvidia0 made with
#                         /dev/null's numbers) and test/gpu/gpu_counter_sim.sh as the counter: every step but the
#                         CUDA facts, so the carry and the sandbox are known to work before a GPU machine is taken
#   KUBELET_GPU_K8S_DIR   where the carry's k8s*.tar.xz pieces are unpacked (default: under the work directory); a
#                         carry without them runs the programs an earlier call unpacked there (the two-call way)
#   KUBELET_GPU_NETWORK   pod: the node's bridge + host-local CNI network, CRIU's network lock skipped (needs CRIU
#                         >= 4.2: the lock setting in runc.conf); host: hostNetwork pods. Default pod where the
#                         carried CNI plugins can make a pod network here (one ADD on a scratch namespace), else host
#   KUBELET_GPU_TEST_OUT  a directory for kubelet_gpu_logs.tar.gz: every component's log, CRIU's dump and restore
#                         logs, the counters' outputs
#   COUNTER_MIB           GPU memory of the counter (default 512); CRI_GPU_STORE as in cri_gpu_test.sh
#   CRI_GPU_CRIU_CONF     the lines of /etc/criu/runc.conf during the run (default: `network-lock skip` for a pod
#                         network, `manage-cgroups=ignore` on cgroup v2 with runc < 1.2); the file is put back after
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/test/gpu/gpu_test_lib.sh"
. "$SRC/test/gpu/device_runtime.sh"   # link_missing_libraries
. "$SRC/scripts/lib/node-sandbox.sh"  # sandbox_start_agent / sandbox_stop_agent
. "$SRC/scripts/lib/containerd-sandbox.sh"
. "$SRC/scripts/lib/k8s-sandbox.sh"
NAME=kubelet_gpu NODE=node-a SIM=${KUBELET_GPU_SIM:-0} LOGS=${KUBELET_GPU_TEST_OUT:-} ALLOC=${KUBELET_GPU_ALLOCATION:-device-plugin}
case $ALLOC in device-plugin) ;; dra) NAME=kubelet_gpu_dra ;; *) echo "KUBELET_GPU_ALLOCATION=$ALLOC: use device-plugin or dra" >&2; exit 2 ;; esac
T0=$(date +%s)

skip_all() { record "$NAME" SKIP "$*"; exit 77; }
fail() { record "$NAME" FAIL "$*"; exit 1; }
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - T0 ))"; }
[ "$(id -u)" = 0 ] || skip_all "needs root (kubelet, containerd, runc, CRIU)"
if [ "$SIM" != 1 ]; then
  { [ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null && command -v nvcc >/dev/null; } ||
    skip_all "no NVIDIA GPU with nvidia-smi and nvcc here (KUBELET_GPU_SIM=1 runs it with a simulated GPU)"
fi
CARRY_ARG=${1:-$SRC/.carry-k8s}
CARRY=$(cd "$CARRY_ARG" 2>/dev/null && pwd) || skip_all "no carry directory $CARRY_ARG (test/gpu/make_device_carry.sh --k8s)"
for f in containerd2.tar.xz cri-bin.tar.xz lib-extra.tar.xz criu.tar.gz bin/criu lib/gpuckpt_plugin.so; do
  [ -e "$CARRY/$f" ] || skip_all "$CARRY/$f missing (test/gpu/make_device_carry.sh --k8s)"
done
for d in runc_ docker-registry_ busybox-static_; do
  compgen -G "$CARRY/debs/$d*.deb" >/dev/null || skip_all "$CARRY/debs/$d*.deb missing (make_device_carry.sh --k8s)"
done

# short: the unix sockets under it (the device plugin's, the kubelet's) must fit in 108 bytes
WORK=/tmp/gckg-$$
rm -rf "$WORK"
mkdir -m 700 "$WORK"
P=$WORK/prefix
. "$SRC/test/gpu/cri_gpu_lib.sh"
K8S_DIR=${KUBELET_GPU_K8S_DIR:-$P/k8s}
AGENT_PID='' NRI_PID='' REGISTRY_PID='' PODRES_PID='' PLUGIN_PID=''
kubectl() { k8s_kubectl "$@"; }
cri() { "$CRI_TOOL" "$CTRD_SOCK" "$@"; }
# every log of the run, into one file (the device tool brings back few files)
save_logs() {
  [ -n "$LOGS" ] || return 0
  mkdir -p "$LOGS"
  [ -n "${K8S_WORK:-}" ] && kubectl get pods -o wide > "$WORK/pods.txt" 2>&1 && kubectl get events -A > "$WORK/events.txt" 2>&1
  (cd "$WORK" && find . -xdev -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' -o -name '*.yaml' \) \
     -not -path './prefix/*' -not -path '*/pki/*' -not -name '*.kubeconfig' -size -20M -print0 |
   tar --null -T - -czf "$LOGS/kubelet_gpu_logs.tar.gz") 2>/dev/null
  return 0
}
stop_cluster() {
  # the kubelet tears the pods down (their CNI networks with them) while it runs
  [ -n "${K8S_WORK:-}" ] && kubectl delete pods --all --grace-period=1 --wait=true --timeout=30s >/dev/null 2>&1
  [ -z "$PLUGIN_PID" ] || { kill "$PLUGIN_PID" 2>/dev/null; wait "$PLUGIN_PID" 2>/dev/null; }
  k8s_stop
}
cleanup() {
  set +e
  cri_gpu_cleanup stop_cluster
  rm -rf "$WORK"
}
trap cleanup EXIT

step "1. the carry installed into $P"
install_carry() {
  local piece
  mkdir -p "$P/containerd2/usr/bin" && tar -C "$P/containerd2/usr/bin" -xJf "$CARRY/containerd2.tar.xz" && cri_gpu_install || return 1
  mkdir -p "$K8S_DIR"
  for piece in "$CARRY"/k8s*.tar.xz; do
    [ -f "$piece" ] || continue
    tar -C "$K8S_DIR" -xJf "$piece" || return 1
  done
  # openssl makes the cluster's certificates: the carried one only where the machine has none
  if ! command -v openssl >/dev/null; then
    printf '#!/bin/sh\nOPENSSL_CONF=%s LD_LIBRARY_PATH=%s exec %s "$@"\n' "$P/root/etc/ssl/openssl.cnf" "$P/lib" \
      "$P/root/usr/bin/openssl" > "$P/bin/openssl" && chmod 755 "$P/bin/openssl"
  fi
}
export PATH=$P/bin:$PATH
install_carry > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; skip_all "cannot install the carry"; }
CTRD_BIN_DIR=$P/containerd2/usr/bin K8S_BIN=$K8S_DIR/bin K8S_CNI_BIN_DIR=$K8S_DIR/cni
cri_gpu_check_install "$CTRD_BIN_DIR/containerd" || skip_all "$CRI_GPU_WHY"
programs=(bin/etcd bin/kube-apiserver bin/kubelet bin/kubectl bin/sim-device-plugin bin/podresources-get cni/bridge cni/host-local cni/loopback)
[ "$ALLOC" = dra ] && programs+=(bin/kube-scheduler bin/kube-controller-manager bin/sim-dra-driver)
for p in "${programs[@]}"; do
  [ -x "$K8S_DIR/$p" ] || skip_all "$K8S_DIR/$p missing (the carry's k8s*.tar.xz pieces, unpacked into KUBELET_GPU_K8S_DIR)"
done
command -v openssl >/dev/null || skip_all "no openssl here and none in the carry (make_device_carry.sh --k8s)"
CRIU_VERSION=$(criu --version | sed -n 's/^Version: //p')
echo "installed: $("$K8S_BIN/kubelet" --version), $("$K8S_BIN/etcd" --version | head -1), containerd" \
  "$("$CTRD_BIN_DIR/containerd" --version | awk '{print $3}'), $(runc --version | head -1), CRIU $CRIU_VERSION"

step "2. the GPU and the counter's image"
if [ "$SIM" = 1 ]; then
  # the cluster tests' simulated GPU node: the 8-GPU fixture, its GPU 0 as /dev/nvidia0 and the driver's control
  # node as /dev/nvidiactl (/dev/null's and /dev/zero's numbers)
  ROOT=$WORK/host-root
  { cp -a "$SRC/test/fixtures/nvidia-h100-8gpu" "$ROOT" && mkdir -p "$ROOT/dev" && mknod "$ROOT/dev/nvidia0" c 1 3 &&
    mknod "$ROOT/dev/nvidiactl" c 1 5; } || fail "cannot make the simulated GPU node in $ROOT"
  CRI_GPU_HOST_ROOT=$ROOT GPU_NODE=$ROOT/dev/nvidia0 SHARED_NODES=("$ROOT/dev/nvidiactl:/dev/nvidiactl")
  GPU_ID=$("$CLI" gpus --host-root "$ROOT" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["node"]["gpus"][0]["id"])') ||
    fail "gpuckpt gpus cannot read the fixture in $ROOT"
  install -m 755 "$SRC/test/gpu/gpu_counter_sim.sh" "$WORK/gpu_counter"
  cri_gpu_push_images pause-only || skip_all "$CRI_GPU_WHY"
  make_rootfs "$WORK/rootfs-counter"
  cp "$WORK/gpu_counter" "$WORK/rootfs-counter/bin/gpu_counter"
  ln -sf busybox "$WORK/rootfs-counter/bin/printf"
  python3 "$SRC/test/gpu/push_oci_image.py" "$REGISTRY" "${BASE#*/}" "$WORK/rootfs-counter" /bin/gpu_counter >/dev/null ||
    skip_all "cannot push the counter image to $REGISTRY"
  DRIVER_MOUNT='' GPU_DESC="simulated GPU $GPU_ID (/dev/nvidia0 = /dev/null's 1:3)"
else
  cri_gpu_count
  [ "$NGPU" -ge 1 ] || skip_all "nvidia-smi lists no GPU"
  GPU_ID=$(gpu_uuid 0) GPU_NODE=/dev/nvidia0 SHARED_NODES=(/dev/nvidiactl:/dev/nvidiactl /dev/nvidia-uvm:/dev/nvidia-uvm)
  [ -e /dev/nvidia-uvm-tools ] && SHARED_NODES+=(/dev/nvidia-uvm-tools:/dev/nvidia-uvm-tools)
  cri_gpu_build_counter || skip_all "$CRI_GPU_WHY"
  cri_gpu_push_images all || skip_all "$CRI_GPU_WHY"
  # the driver's files bound in read-only, as the CRI test does (its own mount, or libcuda's directory where that
  # is on the root file system)
  LIB_DIR=$(dirname "$LIBCUDA") DRIVER_MOUNT=$DRIVER_ROOT
  if [ "$DRIVER_ROOT" = / ]; then DRIVER_ROOT=$LIB_DIR DRIVER_MOUNT=/gpuckpt-driver LIB_DIR=/gpuckpt-driver; fi
  GPU_DESC="GPU 0 of $NGPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0) ($GPU_ID)"
fi
echo "$GPU_DESC; counter image $BASE, pause image $PAUSE_IMAGE"

step "3. the cluster: etcd, kube-apiserver, kubelet $NODE on containerd $("$CTRD_BIN_DIR/containerd" --version | awk '{print $3}')"
export CRIU_LIBS_DIR=$WORK/criu-plugins   # containerd -> shim -> runc -> CRIU loads gpuckpt's plugin from here
CTRD_PAUSE_IMAGE=$PAUSE_IMAGE
# the sandbox image comes from the registry (containerd-sandbox.sh imports it with podman, absent here)
ctrd_import_pause_image() { ctrd_registry_host "$REGISTRY" && cri pull "$CTRD_PAUSE_IMAGE" >/dev/null; }
# with device plugins the pods name their node; DRA needs the scheduler (it allocates claims) and the
# controller-manager (it ends a deleted pod's reservation of its claim)
[ "$ALLOC" = dra ] || K8S_CONTROL_PLANE_MINIMAL=1
# one node: the machine's network namespace (the GPU machine has no iproute2 for a namespace of its own, and the
# test's registry, started above, answers on the machine's loopback)
K8S_NODE_NETNS=0
k8s_start_control_plane "$WORK/cluster" || fail "the control plane did not start"
echo "ok: control plane at $K8S_API in ${K8S_CONTROL_PLANE_SECONDS}s"
CDI_DIR=$WORK/cdi
mkdir -p "$CDI_DIR"
if [ "$ALLOC" = dra ]; then
  CTRD_CDI_SPEC_DIR=$CDI_DIR k8s_add_node "$NODE" || fail "node $NODE did not start"
else
  k8s_add_node "$NODE" || fail "node $NODE did not start"
fi
k8s_node_ctrd "$NODE"
KROOT=${K8S_KUBELET_ROOT[$NODE]}
echo "ok: node $NODE Ready in ${K8S_NODE_SECONDS}s ($(kubectl get node "$NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}, kernel {.status.nodeInfo.kernelVersion}'))"

if [ "$ALLOC" = dra ]; then
  plugin_args=(--kubeconfig "$KUBECONFIG" --node "$NODE" --registry-dir "$KROOT/plugins_registry"
    --plugin-dir "$KROOT/plugins/gpu.sim.gpuckpt.dev" --cdi-dir "$CDI_DIR" --device "$GPU_ID=0:$GPU_NODE")
  for n in "${SHARED_NODES[@]}"; do plugin_args+=(--shared-device "$n"); done
  "$K8S_BIN/sim-dra-driver" "${plugin_args[@]}" > "$WORK/device-plugin.log" 2>&1 &
  PLUGIN_PID=$!
  for _ in $(seq 150); do grep -q '^published 1 devices' "$WORK/device-plugin.log" && break; sleep 0.2; done
  grep -q '^published 1 devices' "$WORK/device-plugin.log" || fail "sim-dra-driver did not publish the GPU: $(tail -5 "$WORK/device-plugin.log")"
  k8s_dra_claim gpu-claim | kubectl apply -f - > /dev/null || fail "kubectl apply of the DeviceClass and the ResourceClaim"
  echo "ok: $NODE publishes gpu-0 ($GPU_ID) in a ResourceSlice of sim-dra-driver; ResourceClaim gpu-claim (DeviceClass sim-gpu); with every claim: ${SHARED_NODES[*]#*:}"
  CRI_GPU_NRI_ARGS=(--cdi-spec-dir "$CDI_DIR")
else
  plugin_args=(--registry-dir "$KROOT/plugins_registry" --device "$GPU_ID=0:$GPU_NODE")
  for n in "${SHARED_NODES[@]}"; do plugin_args+=(--shared-device "$n"); done
  "$K8S_BIN/sim-device-plugin" "${plugin_args[@]}" > "$WORK/device-plugin.log" 2>&1 &
  PLUGIN_PID=$!
  k8s_wait_gpus "$NODE" 1 ||
    fail "$NODE does not offer 1 nvidia.com/gpu: $(cat "$WORK/device-plugin.log")"
  echo "ok: $NODE allocatable nvidia.com/gpu=1 ($GPU_ID; with every allocation: ${SHARED_NODES[*]#*:})"
fi
cri_gpu_start_nri "$CTRD_NRI_SOCK" containerd "$KROOT/pod-resources/kubelet.sock" || fail "gpuckpt-nri did not register with containerd"
KDIR=$KROOT/checkpoints
mkdir -p "$KDIR"
cri_gpu_start_agent "unix://$CTRD_SOCK" || fail "the agent did not start"

# pod_network_probe: can the carried CNI plugins give a pod a network of its own here (a bridge, a veth pair)? One
# ADD and DEL of the node's bridge and subnet on a scratch namespace; PROBE_WHY says why not
pod_network_probe() {
  local ns=$WORK/probe-netns conf=$WORK/probe-cni.json rc
  printf '{"cniVersion": "1.0.0", "name": "gpuckpt-probe", "type": "bridge", "bridge": "%s", "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.1.0/24"}]], "dataDir": "%s"}}\n' \
    "${K8S_NODE_BRIDGE[$NODE]}" "$WORK/probe-ipam" > "$conf"
  { touch "$ns" && unshare --net="$ns" true; } || { PROBE_WHY="unshare cannot make a network namespace"; return 1; }
  CNI_COMMAND=ADD CNI_CONTAINERID=gpuckpt-probe CNI_NETNS=$ns CNI_IFNAME=eth0 CNI_PATH=$K8S_CNI_BIN_DIR \
    "$K8S_CNI_BIN_DIR/bridge" < "$conf" > "$WORK/probe.log" 2>&1
  rc=$?
  CNI_COMMAND=DEL CNI_CONTAINERID=gpuckpt-probe CNI_NETNS=$ns CNI_IFNAME=eth0 CNI_PATH=$K8S_CNI_BIN_DIR \
    "$K8S_CNI_BIN_DIR/bridge" < "$conf" >> "$WORK/probe.log" 2>&1
  umount "$ns" 2>/dev/null; rm -f "$ns"
  [ "$rc" = 0 ] || PROBE_WHY="the CNI bridge plugin cannot make a pod network here: $(tr '\n' ' ' < "$WORK/probe.log" | tail -c 300)"
  return "$rc"
}
NETWORK=${KUBELET_GPU_NETWORK:-}
if [ -z "$NETWORK" ]; then
  if ! printf '%s\n' 4.2 "$CRIU_VERSION" | sort -V -C; then
    NETWORK=host NETWORK_WHY="CRIU $CRIU_VERSION cannot skip the network lock from runc.conf (4.2 can)"
  elif pod_network_probe; then
    NETWORK=pod
  else
    NETWORK=host NETWORK_WHY=$PROBE_WHY
  fi
fi
case $NETWORK in pod|host) ;; *) fail "KUBELET_GPU_NETWORK=$NETWORK: use pod or host" ;; esac
echo "network: $NETWORK${NETWORK_WHY:+ ($NETWORK_WHY)}"
# CRIU's settings for runc (runc hands CRIU /etc/criu/runc.conf; put back after the run)
if [ -z "${CRI_GPU_CRIU_CONF+set}" ]; then
  CRI_GPU_CRIU_CONF=''
  # a pod's network namespace is the sandbox's: CRIU does not dump it but would lock it (iptables: absent on the
  # GPU machine), and a stopped container would leave its pod locked (docs/cuda.md, Pods and TCP)
  [ "$NETWORK" = pod ] && CRI_GPU_CRIU_CONF="network-lock skip"
  # runc < 1.2 gives CRIU no cgroup on cgroup v2: it would restore into the source container's (docs/kubernetes.md)
  if [ -f /sys/fs/cgroup/cgroup.controllers ] &&
     ! printf '%s\n' 1.2 "$(runc --version | awk 'NR == 1 {sub(/\+.*/, "", $3); print $3}')" | sort -V -C; then
    CRI_GPU_CRIU_CONF+=${CRI_GPU_CRIU_CONF:+$'\n'}manage-cgroups=ignore
  fi
fi
[ -z "$CRI_GPU_CRIU_CONF" ] || { cri_gpu_criu_conf "$CRI_GPU_CRIU_CONF"; echo "/etc/criu/runc.conf for the run: $(tr '\n' ';' < /etc/criu/runc.conf)"; }

# counter_pod NAME IMAGE PULL_POLICY OUT_DIR: the counter on $NODE with one nvidia.com/gpu (or ResourceClaim
# gpu-claim), writing OUT_DIR/count.txt
counter_pod() {
  local driver_mount='' driver_volume='' env='' placement="nodeName: $NODE" gpu='resources: {limits: {nvidia.com/gpu: 1}}' claims=''
  if [ "$ALLOC" = dra ]; then
    placement="nodeSelector: {kubernetes.io/hostname: $NODE}" gpu='resources: {claims: [{name: gpu}]}'
    claims=$'\n'"  resourceClaims: [{name: gpu, resourceClaimName: gpu-claim}]"
  fi
  if [ -n "$DRIVER_MOUNT" ]; then
    driver_mount=$'\n'"    - {name: driver, mountPath: $DRIVER_MOUNT, readOnly: true}"
    driver_volume=$'\n'"  - {name: driver, hostPath: {path: $DRIVER_ROOT, type: Directory}}"
    env=$'\n'"    env: [{name: LD_LIBRARY_PATH, value: \"$LIB_DIR\"}]"
  fi
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  $placement$claims
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  enableServiceLinks: false
  hostNetwork: $([ "$NETWORK" = host ] && echo true || echo false)
  containers:
  - name: counter
    image: $2
    imagePullPolicy: $3
    command: [/bin/gpu_counter, "$MIB", /out/count.txt, --sleep-ms, "20"]$env
    $gpu
    volumeMounts:
    - {name: out, mountPath: /out}$driver_mount
  volumes:
  - {name: out, hostPath: {path: $4, type: Directory}}$driver_volume
YAML
}
container_id() { kubectl get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's#^containerd://##'; }
cgroup_of() { # PID: its cgroup (v2), or its memory controller's (v1)
  awk -F: '$1 == "0" && $2 == "" {v2 = $3} $2 ~ /(^|,)memory(,|$)/ {v1 = $3} END {print (v2 != "" ? v2 : v1)}' "/proc/$1/cgroup"
}
# how often the GPU was given (Allocate of the device plugin, NodePrepareResources of the DRA driver), the last one's
# devices, and what the kubelet's PodResources should report for a container given it
if [ "$ALLOC" = dra ]; then
  allocations() { grep -c '^prepare ' "$WORK/device-plugin.log"; }
  last_allocated() { sed -n 's/^prepare default\/gpu-claim //p' "$WORK/device-plugin.log" | tail -1; }
  ALLOCATED=gpu-0
  reported_ok() { case "$1" in "dra default/gpu-claim gpu.sim.gpuckpt.dev $NODE/gpu-0 sim.gpuckpt.dev/gpu="*-gpu-0) return 0 ;; esac; return 1; }
else
  allocations() { grep -c '^allocate ' "$WORK/device-plugin.log"; }
  last_allocated() { sed -n 's/^allocate //p' "$WORK/device-plugin.log" | tail -1; }
  ALLOCATED=$GPU_ID
  reported_ok() { [ "$1" = "nvidia.com/gpu $GPU_ID" ]; }
fi
on_pod_network() { # POD PID: the pod's address (of the node's 10.88.1.0/24) and its own network namespace
  local ip
  ip=$(kubectl get pod "$1" -o jsonpath='{.status.podIP}')
  case "$ip" in 10.88.1.*) ;; *) echo "pod $1 has address '$ip', not one of the node's pod network 10.88.1.0/24"; return 1 ;; esac
  [ "$(readlink "/proc/$2/ns/net")" != "$(readlink /proc/self/ns/net)" ] || { echo "pod $1's process is in the host's network namespace"; return 1; }
  echo "$ip"
}

step "4. a pod asking for the GPU, started by the kubelet"
OUT_SRC=$WORK/out-src OUT_RST=$WORK/out-restored
mkdir -p "$OUT_SRC" "$OUT_RST"
counter_pod gpu-counter "$BASE" IfNotPresent "$OUT_SRC" > "$WORK/pod-src.yaml"
kubectl apply -f "$WORK/pod-src.yaml" > /dev/null || fail "kubectl apply of the GPU pod"
k8s_wait_pod default gpu-counter 120 || { show "$CTRD_LOG" "$WORK/nri.log"; fail "the GPU pod did not start"; }
CID=$(container_id gpu-counter)
PID=$(cri pid "$CID") || fail "no pid for container $CID of gpu-counter"
wait_iter "$OUT_SRC/count.txt" 30 120 || fail "the pod's counter does not run (last iteration: $(last_iter "$OUT_SRC/count.txt"))"
{ [ "$(allocations)" = 1 ] && [ "$(last_allocated)" = "$ALLOCATED" ]; } ||
  fail "the $ALLOC was not asked once for $ALLOCATED: $(cat "$WORK/device-plugin.log")"
REPORTED=$("$K8S_BIN/podresources-get" "$KROOT/pod-resources/kubelet.sock" default gpu-counter counter)
reported_ok "$REPORTED" || fail "the kubelet's PodResources reports '$REPORTED' for gpu-counter/counter, not $ALLOCATED ($GPU_ID)"
for _ in $(seq 50); do [ -f "$STATE/containers/$CID.json" ] && break; sleep 0.1; done
python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]; assert g["record"]["used_gpu_ids"]==[sys.argv[2]], g' \
  "$STATE/containers/$CID.json" "$GPU_ID" || { show "$WORK/nri.log"; fail "gpuckpt-nri's record of $CID does not name $GPU_ID"; }
[ -c "/proc/$PID/root/dev/nvidia0" ] || fail "the container has no /dev/nvidia0"
for n in "${SHARED_NODES[@]}"; do   # what the device plugin gives besides the GPU, with the host node's numbers
  [ "$(stat -c %t:%T "/proc/$PID/root${n#*:}" 2>/dev/null)" = "$(stat -c %t:%T "${n%%:*}")" ] ||
    fail "the container's ${n#*:} is not the node's ${n%%:*} ($(stat -c %t:%T "${n%%:*}"))"
done
tr '\0' '\n' < "/proc/$PID/environ" | grep -qx "NVIDIA_VISIBLE_DEVICES=0" || fail "the container's NVIDIA_VISIBLE_DEVICES is not 0"
SRC_FACTS="/dev/nvidia0 $(stat -c %t:%T "/proc/$PID/root/dev/nvidia0")"
if [ "$SIM" != 1 ]; then
  [ "$(gpu_of_pid "$PID")" = "$GPU_ID" ] || fail "nvidia-smi does not show the pod's process $PID on $GPU_ID: $(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr '\n' ' ')"
  SRC_USABLE=$(usable_gpus "$PID")
  SRC_FACTS+="; nvidia-smi: on $GPU_ID; its device cgroup opens the host's ${SRC_USABLE:-nothing}"
fi
if [ "$NETWORK" = pod ]; then POD_IP=$(on_pod_network gpu-counter "$PID") || fail "$POD_IP"; SRC_FACTS+="; at $POD_IP"; fi
echo "ok: gpu-counter (container $CID, pid $PID in $(cgroup_of "$PID")): the kubelet allocated $GPU_ID (PodResources), gpuckpt-nri recorded it; $SRC_FACTS"

step "5. POST /api/v1/nodes/$NODE/proxy/checkpoint/default/gpu-counter/counter through the API server"
N_CK=$(last_iter "$OUT_SRC/count.txt")
timed TCK kubectl create --raw "/api/v1/nodes/$NODE/proxy/checkpoint/default/gpu-counter/counter" -f /dev/null \
  > "$WORK/checkpoint.json" 2> "$WORK/checkpoint.err" ||
  { show "$CTRD_LOG" "$WORK/checkpoint.err"; fail "the kubelet checkpoint API failed: $(tail -c 400 "$WORK/checkpoint.err")"; }
ARCHIVE=$(python3 -c 'import json,sys; i=json.load(open(sys.argv[1]))["items"]; assert len(i)==1, i; print(i[0])' "$WORK/checkpoint.json") ||
  fail "the kubelet's answer does not name one archive: $(cat "$WORK/checkpoint.json")"
case "$ARCHIVE" in
  "$KDIR/checkpoint-gpu-counter_default-counter-"*.tar) ;;
  *) fail "the archive $ARCHIVE is not in the kubelet's checkpoint dir $KDIR" ;;
esac
at=$(last_iter "$OUT_SRC/count.txt")
wait_iter "$OUT_SRC/count.txt" $((at + 20)) 60 ||
  fail "the source did not run on after the checkpoint (stuck at iteration $(last_iter "$OUT_SRC/count.txt"))"
for _ in $(seq 300); do grep -q "annotated kubelet archive $ARCHIVE" "$WORK/agent.log" && break; sleep 0.1; done
grep -q "annotated kubelet archive $ARCHIVE" "$WORK/agent.log" || { show "$WORK/agent.log"; fail "the agent's watcher did not annotate $ARCHIVE"; }
tar -xOf "$ARCHIVE" dump.log > "$WORK/dump.log" 2>/dev/null
MB=$(du -m "$ARCHIVE" | cut -f1)
echo "ok: $(basename "$ARCHIVE") (${MB} MB) in ${TCK}s through the API server and the kubelet, annotated by the agent; the counter was at $N_CK and ran on"

step "6. the source pod deleted (it holds the GPU); a new pod of the checkpoint image on $NODE"
kubectl delete pod gpu-counter --grace-period=1 --wait=true --timeout=60s > /dev/null || fail "kubectl delete pod gpu-counter"
cp "$ARCHIVE" "$CK/"   # the archive as the agent keeps it (the kubelet's dir is the kubelet's)
"$CLI" image "$(basename "$ARCHIVE")" --tag gpuckpt-kubelet-gpu --agent "$URL" --token-file "$TOKEN_FILE" > "$WORK/image.txt" 2>&1 ||
  { show "$WORK/image.txt" "$WORK/agent.log"; fail "gpuckpt image"; }
CK_IMAGE=$(sed -n 's/^  image: *//p' "$WORK/image.txt")
[ -n "$CK_IMAGE" ] || fail "gpuckpt image printed no image: $(cat "$WORK/image.txt")"
counter_pod gpu-counter-restored "$CK_IMAGE" Never "$OUT_RST" > "$WORK/pod-restored.yaml"
t=$EPOCHREALTIME
kubectl apply -f "$WORK/pod-restored.yaml" > /dev/null || fail "kubectl apply of the restore pod"
k8s_wait_pod default gpu-counter-restored 180 || { show "$CTRD_LOG" "$WORK/nri.log" "$STATE/hook.log"; fail "the restore pod did not start"; }
TRS=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
RID=$(container_id gpu-counter-restored)
RPID=$(cri pid "$RID") || fail "no pid for container $RID of gpu-counter-restored"
find "${K8S_CTRD_WORK[$NODE]}" -path "*$RID*" -name restore.log -exec cp {} "$WORK/restore.log" \; 2>/dev/null
wait_iter "$OUT_RST/count.txt" $((N_CK + 30)) 120 ||
  fail "the restored counter does not run (last iteration: $(last_iter "$OUT_RST/count.txt"))"
FIRST=$(head -n 1 "$OUT_RST/count.txt" | cut -d' ' -f1)
[ "$FIRST" -gt "$N_CK" ] || fail "the restored counter started at $FIRST, not after $N_CK (reached before the checkpoint): a fresh start, not a restore"
{ [ "$(allocations)" = 2 ] && [ "$(last_allocated)" = "$ALLOCATED" ]; } ||
  fail "the kubelet did not have $ALLOCATED ($GPU_ID) given to the restore pod: $(cat "$WORK/device-plugin.log")"
REPORTED=$("$K8S_BIN/podresources-get" "$KROOT/pod-resources/kubelet.sock" default gpu-counter-restored counter)
reported_ok "$REPORTED" || fail "the kubelet's PodResources reports '$REPORTED' for gpu-counter-restored/counter, not $ALLOCATED ($GPU_ID)"
RCG=$(cgroup_of "$RPID")
case "$RCG" in
  *"$RID"*) ;;
  *) fail "the restored process is in cgroup $RCG, not the new container $RID's (runc < 1.2 on cgroup v2 without manage-cgroups=ignore: CRIU restores into the source's)" ;;
esac
RDEV=$(stat -c %t:%T "/proc/$RPID/root/dev/nvidia0" 2>/dev/null)
[ "$RDEV" = "$(stat -c %t:%T "$GPU_NODE")" ] || fail "the restored container's /dev/nvidia0 is '${RDEV:-absent}', not the node's $(stat -c %t:%T "$GPU_NODE")"
RST_FACTS="/dev/nvidia0 $RDEV"
if [ "$SIM" != 1 ]; then
  AFTER=$(gpu_of_pid "$RPID")
  [ "$AFTER" = "$GPU_ID" ] || fail "nvidia-smi shows the restored process $RPID on '${AFTER:-no GPU}', not $GPU_ID"
  USABLE=$(usable_gpus "$RPID")
  if [ "$SRC_USABLE" = "nvidia0 " ]; then
    [ "$USABLE" = "nvidia0 " ] || fail "the restored container's device cgroup ($RCG) lets it open the host's '$USABLE', expected nvidia0 only"
    RST_FACTS+="; its device cgroup opens only nvidia0"
  else
    RST_FACTS+="; device cgroup not enforced here: the source could open '$SRC_USABLE', the restored '$USABLE'"
  fi
  RST_FACTS+="; nvidia-smi: on $GPU_ID"
fi
if [ "$NETWORK" = pod ]; then
  RIP=$(on_pod_network gpu-counter-restored "$RPID") || fail "$RIP"
  RST_FACTS+="; at $RIP (the source was at $POD_IP)"
fi
PLAN=$(grep -F "as container $RID: plan" "$WORK/nri.log" | tail -1)
# what the restored counter wrote so far (it runs on) against an uninterrupted run of as many iterations
cp "$OUT_RST/count.txt" "$OUT_RST/count.snapshot"
sed -i '$d' "$OUT_RST/count.snapshot"   # the last line may be half-written
counter_reference "$MIB" "$(last_iter "$OUT_RST/count.snapshot")" "$OUT_RST/count.ref" ||
  fail "the uninterrupted reference run of $WORK/gpu_counter failed"
DIFF=$(same_as_reference "$OUT_RST/count.snapshot" "$OUT_RST/count.ref") ||
  fail "the restored counter's state differs from an uninterrupted run's: $DIFF"
echo "checkpoint_seconds=$TCK restore_seconds=$TRS archive_mb=$MB counter_at_checkpoint=$N_CK restored_from=$FIRST network=$NETWORK"
record "$NAME" PASS "$GPU_DESC, given by $([ "$ALLOC" = dra ] && echo "ResourceClaim gpu-claim (DRA)" || echo "the device plugin"): checkpoint through the kubelet API ${TCK}s (archive ${MB} MB; the source ran on); new pod of the checkpoint image Running in ${TRS}s (restored by containerd, in cgroup $RCG; $RST_FACTS); the counter went on from the checkpoint (at $N_CK) at $FIRST .. $(last_iter "$OUT_RST/count.snapshot"), bit-identical to an uninterrupted run${PLAN:+; gpuckpt-nri: ${PLAN#*: }}"
exit 0
