#!/usr/bin/env bash
# e2e (labels e2e, cluster): gpuckpt under a real Kubernetes cluster on this machine (scripts/lib/k8s-sandbox.sh:
# etcd, kube-apiserver with TLS + RBAC + service-account tokens, kube-controller-manager, kube-scheduler, and one
# kubelet node on its own containerd 2.1, all built by scripts/setup-k8s.sh from the Go module proxy):
#   1. the cluster starts; its node, a simulated GPU node (node-sandbox.sh: /dev/null and /dev/zero as
#      /dev/nvidia0 and /dev/nvidia1), gets 2 allocatable nvidia.com/gpu from sim-device-plugin, a device plugin
#      speaking the kubelet's deviceplugin/v1beta1 API;
#   2. a pod asking for nvidia.com/gpu: 1 is scheduled by the scheduler onto the node and started by the
#      kubelet, on the node's pod network (bridge + host-local CNI: an address of the node's /24, a network
#      namespace of its own); the kubelet's device manager chose the GPU, the plugin's Allocate gave its node and
#      NVIDIA_VISIBLE_DEVICES; gpuckpt-nri on the node's containerd recorded the container on that GPU, and the
#      real kubelet's PodResources API (gpuckpt-nri's --pod-resources-socket) reports the same device;
#   3. the kubelet checkpoint API as operators call it: POST /api/v1/nodes/NODE/proxy/checkpoint/NS/POD/CONTAINER
#      through the API server (kubectl create --raw) to the kubelet, which has containerd write the archive into
#      its checkpoint dir; the agent's watcher of that dir annotates it with the GPU record; `gpuckpt inspect`
#      shows containerd's archive, the pod and the GPU the kubelet allocated; the pod keeps running;
#   4. restore by the kubelet: `gpuckpt image` loads the archive as a checkpoint image into the node's containerd,
#      a pod of that image (the source still holds its GPU) gets the other GPU from the kubelet's device manager,
#      containerd restores it, the counter continues from the checkpoint, gpuckpt-nri plans source -> allocated
#      GPU and the spec containerd gives runc has the allocated GPU's node and NVIDIA_VISIBLE_DEVICES.
#   5. a second node (node-b: its own kubelet, containerd, simulated GPUs 2 and 3 of the fixture, agent and
#      gpuckpt-nri): the archive moved to node-b's agent, loaded as a checkpoint image there, a pod of it placed on
#      node-b by the scheduler, restored by node-b's kubelet on the GPU node-b's device manager allocated (its
#      PodResources says so), the counter continues; gpuckpt-nri plans node-a's GPU -> node-b's.
#   6. DRA on node-b: sim-dra-driver (the upstream kubelet-plugin library) publishes GPU 4 in a ResourceSlice, the
#      scheduler allocates it to a ResourceClaim, node-b's kubelet has the driver prepare it (a CDI spec), containerd
#      injects the CDI device; a pod of the checkpoint image using that claim is restored onto GPU 4: gpuckpt-nri
#      reads the DRA allocation from the kubelet's PodResources and the node's CDI spec.
# Each node runs in a network namespace of its own (scripts/lib/k8s-sandbox.sh), where iproute2 is here.
# (kubectl gpuckpt migrate, the Helm DaemonSet and the kubelet on CRI-O, crio_cluster_flow.sh, have tests of their
# own.)
# Exit 0 pass, 77 skipped (no root, or setup.sh / setup-k8s.sh products absent), else fail. Every wait is bounded;
# cleanup always runs. KEEP=1 keeps the work dir.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/node-sandbox.sh"
. "$SRC/scripts/lib/containerd-sandbox.sh"
. "$SRC/scripts/lib/k8s-sandbox.sh"
CLI=$BUILD/cli/gpuckpt
AGENT=$BUILD/agent/gpuckpt-agent
NRI=$BUILD/nri-plugin/gpuckpt-nri
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
NODE=node-a

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - T0 ))"; }
T0=$(date +%s)

k8s_sandbox_ready "$IMAGE" podresources-get sim-dra-driver || skip "$K8S_MISSING"
for b in "$CLI" "$AGENT" "$NRI" "$HOOK"; do [ -x "$b" ] || fail "$b not built"; done

# short: unix socket paths under it (the device plugins', the kubelet's) must fit in 108 bytes
TMP=/tmp/gck8s-$$-$(date +%s)
mkdir -m 700 "$TMP"
NRI_PID='' PLUGIN_PID='' REGISTRY_PID='' AGENT_B_PID='' NRI_B_PID='' PLUGIN_B_PID='' DRA_PID=''
cleanup() {
  set +e
  sandbox_stop_agent
  for p in "$AGENT_B_PID" "$NRI_PID" "$NRI_B_PID" "$PLUGIN_PID" "$PLUGIN_B_PID" "$DRA_PID" "$REGISTRY_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  k8s_stop
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

kubectl() { k8s_kubectl "$@"; }
crictl() { "$K8S_BIN/crictl" --config "$TMP/crictl.yaml" "$@"; }
container_pid() {  # container_pid POD: the pid of the pod's container "counter", through the node's CRI
  local id
  id=$(crictl ps -q --name counter --label "io.kubernetes.pod.name=$1" --state running | head -1)
  [ -n "$id" ] || fail "no running container 'counter' of pod $1 on $NODE"
  crictl inspect -o go-template --template '{{.info.pid}}' "$id"
}
count_of() { sandbox_count_of "$1" || fail "no counter value in process $1"; }   # count_of PID
on_pod_network() {  # on_pod_network POD PID SUBNET_PREFIX: the pod has an address of its node's CNI network and
  # its process lives in a network namespace of its own
  local ip
  ip=$(kubectl get pod "$1" -o jsonpath='{.status.podIP}')
  case "$ip" in "$3".*) ;; *) fail "pod $1 has address '$ip', not one of its node's pod network $3.0/24" ;; esac
  [ "$(readlink "/proc/$2/ns/net")" != "$(readlink /proc/self/ns/net)" ] || fail "pod $1's process is in the host's network namespace"
  echo "$ip"
}

step "1. the cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet $NODE on containerd 2"
sandbox_prepare "$TMP" "$BUILD" "$SRC" || fail "cannot prepare the simulated node in $TMP"
mkdir -p "$TMP/criu-plugins"
cp "$BUILD/criu-plugin/gpuckpt_plugin.so" "$TMP/criu-plugins/" || fail "criu-plugin/gpuckpt_plugin.so not built"
export CRIU_LIBS_DIR=$TMP/criu-plugins   # containerd -> shim -> runc -> CRIU: CRIU loads gpuckpt's plugin from here
k8s_start_control_plane "$TMP/cluster" || fail "the control plane did not start"
echo "ok: control plane at $K8S_API in ${K8S_CONTROL_PLANE_SECONDS}s ($("$K8S_BIN/kube-apiserver" --version))"
k8s_add_node "$NODE" || fail "node $NODE did not start"
KROOT=${K8S_KUBELET_ROOT[$NODE]}
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "${K8S_CTRD_SOCK[$NODE]}" "${K8S_CTRD_SOCK[$NODE]}" > "$TMP/crictl.yaml"
echo "ok: node $NODE Ready in ${K8S_NODE_SECONDS}s (kubelet $(kubectl get node "$NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}'), runtime $(kubectl get node "$NODE" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}'))"
k8s_node_ctrd "$NODE"
# the pod's image comes from a registry on 127.0.0.1, pulled by the kubelet (containerd 2.1 pulls a checkpoint's
# base image again by its rootfsImageRef at every restore)
k8s_start_registry "$TMP/registry" || fail "docker-registry did not start"
BASE=$REGISTRY/gpuckpt-busybox:latest
podman push -q --tls-verify=false "$IMAGE" "docker://$BASE" || fail "podman push $IMAGE to $BASE"
ctrd_registry_host "$REGISTRY"

"$K8S_BIN/sim-device-plugin" --registry-dir "$KROOT/plugins_registry" \
  --device "$GPU0=0:$ROOT/dev/nvidia0" --device "$GPU1=1:$ROOT/dev/nvidia1" > "$TMP/device-plugin.log" 2>&1 &
PLUGIN_PID=$!
k8s_wait_gpus "$NODE" 2 ||
  fail "$NODE does not offer 2 nvidia.com/gpu: $(cat "$TMP/device-plugin.log")"
echo "ok: $NODE allocatable nvidia.com/gpu=2 ($GPU0, $GPU1) from sim-device-plugin"

step "2. a pod asking for one GPU: scheduled, started, its GPU chosen by the kubelet's device manager"
"$NRI" --socket "$CTRD_NRI_SOCK" --state-dir "$STATE" --host-root "$ROOT" --hook "$HOOK" \
  --pod-resources-socket "$KROOT/pod-resources/kubelet.sock" --once > "$TMP/nri.log" 2>&1 &
NRI_PID=$!
for _ in $(seq 100); do grep -q "registered with containerd" "$TMP/nri.log" && break; sleep 0.1; done
grep -q "registered with containerd 2" "$TMP/nri.log" || fail "gpuckpt-nri did not register: $(cat "$TMP/nri.log")"
mkdir -p "$KROOT/checkpoints"
sed -i "s#kubelet_dir: \"\"#kubelet_dir: $KROOT/checkpoints, watch_interval_seconds: 1#" "$TMP/agent.yaml"
sandbox_start_agent "$AGENT" || fail "agent did not start"

k8s_gpu_counter_pod "$BASE" IfNotPresent | kubectl apply -f - > /dev/null || fail "kubectl apply of the GPU pod"
k8s_wait_pod default gpu-counter 90 || fail "the GPU pod did not start"
[ "$(kubectl get pod gpu-counter -o jsonpath='{.spec.nodeName}')" = "$NODE" ] || fail "gpu-counter is not on $NODE"
ALLOCATED=$(sed -n 's/^allocate //p' "$TMP/device-plugin.log" | tail -1)
[ "$ALLOCATED" = "$GPU0" ] || [ "$ALLOCATED" = "$GPU1" ] || fail "the device plugin allocated '$ALLOCATED', not one of its GPUs"
[ "$ALLOCATED" = "$GPU0" ] && INDEX=0 || INDEX=1
PID=$(container_pid gpu-counter)
CID=$(crictl ps -q --name counter --label io.kubernetes.pod.name=gpu-counter --state running | head -1)
[ -c "/proc/$PID/root/dev/nvidia$INDEX" ] || fail "the container has no /dev/nvidia$INDEX"
tr '\0' '\n' < "/proc/$PID/environ" | grep -qx "NVIDIA_VISIBLE_DEVICES=$INDEX" ||
  fail "the container's NVIDIA_VISIBLE_DEVICES is not $INDEX: $(tr '\0' '\n' < "/proc/$PID/environ" | grep NVIDIA || true)"
for _ in $(seq 50); do [ -f "$STATE/containers/$CID.json" ] && break; sleep 0.1; done
python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]; assert g["record"]["used_gpu_ids"]==[sys.argv[2]], g' \
  "$STATE/containers/$CID.json" "$ALLOCATED" || fail "gpuckpt-nri's record of $CID does not name $ALLOCATED"
# what the real kubelet's PodResources API reports (gpuckpt-nri reads the same socket)
[ "$("$K8S_BIN/podresources-get" "$KROOT/pod-resources/kubelet.sock" default gpu-counter counter)" = "nvidia.com/gpu $ALLOCATED" ] ||
  fail "the kubelet's PodResources does not report $ALLOCATED for gpu-counter/counter"
POD_IP=$(on_pod_network gpu-counter "$PID" 10.88.1)
echo "ok: gpu-counter on $NODE at $POD_IP (bridge + host-local CNI); kubelet allocated $ALLOCATED (/dev/nvidia$INDEX, NVIDIA_VISIBLE_DEVICES=$INDEX); gpuckpt-nri recorded it"

step "3. POST /api/v1/nodes/$NODE/proxy/checkpoint/default/gpu-counter/counter through the API server"
# far enough that a fresh start of the restore (10 counts a second) cannot pass it before the test reads it
for _ in $(seq 3); do sandbox_counts_past "$PID" 60 && break; done
[ "$(count_of "$PID")" -gt 60 ] || fail "the pod's counter does not count"
k8s_kubelet_checkpoint "$NODE" default gpu-counter counter || fail "$K8S_CHECKPOINT_ERROR"
ARCHIVE=$K8S_ARCHIVE CKPT_SECONDS=$K8S_CHECKPOINT_SECONDS
case "$ARCHIVE" in
  "$KROOT/checkpoints/checkpoint-gpu-counter_default-counter-"*.tar) ;;
  *) fail "the archive $ARCHIVE is not in the kubelet's checkpoint dir $KROOT/checkpoints" ;;
esac
[ -f "$ARCHIVE" ] || fail "the kubelet named $ARCHIVE, which does not exist"
for _ in $(seq 150); do grep -q "annotated kubelet archive $ARCHIVE" "$TMP/agent.log" && break; sleep 0.1; done
grep -q "annotated kubelet archive $ARCHIVE" "$TMP/agent.log" || fail "the watcher did not annotate it: $(tail -3 "$TMP/agent.log")"
tar -tf "$ARCHIVE" > "$TMP/entries.txt" || fail "$ARCHIVE is not a plain tar after the watcher rewrote it"
for e in config.dump spec.dump status.dump gpuckpt-gpus.json checkpoint/inventory.img; do
  grep -qx "$e" "$TMP/entries.txt" || fail "the annotated archive lacks $e"
done
"$CLI" inspect "$ARCHIVE" --host-root "$ROOT" --json > "$TMP/inspect.json" 2> "$TMP/inspect.err" ||
  fail "gpuckpt inspect: $(cat "$TMP/inspect.err")"
python3 - "$TMP/inspect.json" "$ALLOCATED" <<'PY' || fail "gpuckpt inspect does not show the kubelet's checkpoint and its GPU"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["engine"] == "containerd", i["engine"]
assert i["gpus"]["record"]["used_gpu_ids"] == [sys.argv[2]], i["gpus"]
text = json.dumps(i)
assert "gpu-counter" in text, "the pod's name is not in what inspect shows"
PY
"$CLI" inspect "$ARCHIVE" --host-root "$ROOT" > "$TMP/inspect.txt" 2>&1 || fail "gpuckpt inspect (text)"
grep -qF "$ALLOCATED" "$TMP/inspect.txt" || fail "gpuckpt inspect's text does not name $ALLOCATED: $(head -20 "$TMP/inspect.txt")"
N1=$(tar -xOf "$ARCHIVE" rootfs-diff.tar | tar -xzOf - tmp/count)
sandbox_counts_past "$PID" "$N1" || fail "the checkpointed pod stopped counting"
[ "$(kubectl get pod gpu-counter -o jsonpath='{.status.phase}')" = Running ] || fail "gpu-counter is no longer Running"
echo "ok: $(basename "$ARCHIVE") ($(stat -c %s "$ARCHIVE") bytes, ${CKPT_SECONDS}s through the API server) annotated; inspect shows $ALLOCATED; counter at $N1 in the archive, the pod keeps counting"

step "4. restore by the kubelet: a pod whose image is the checkpoint image, on the GPU the kubelet allocates now"
# The source pod keeps its GPU, so the kubelet's device manager can only give the restore the other one: the
# restore must follow the kubelet's allocation, not the archive's.
if [ "$ALLOCATED" = "$GPU0" ]; then OTHER=$GPU1 OTHER_INDEX=1; else OTHER=$GPU0 OTHER_INDEX=0; fi
cp "$ARCHIVE" "$CK/"   # the archive as the agent keeps it (the kubelet's dir is the kubelet's)
sandbox_stop_agent
echo "runtime: {kind: cri, cri: {endpoint: unix://$CTRD_SOCK}}" >> "$TMP/agent.yaml"
rm -f "$STATE/agent.port"
sandbox_start_agent "$AGENT" || fail "agent did not start (runtime.kind cri)"
"$CLI" image "$(basename "$ARCHIVE")" --tag gpuckpt-e2e-cluster --agent "$URL" --token-file "$TOKEN_FILE" > "$TMP/image.txt" ||
  fail "gpuckpt image: $(tail -3 "$TMP/agent.log")"
CK_IMAGE=$(sed -n 's/^  image: *//p' "$TMP/image.txt")
[ -n "$CK_IMAGE" ] || fail "gpuckpt image printed no image: $(cat "$TMP/image.txt")"
t=$(date +%s.%N)
k8s_gpu_counter_pod "$CK_IMAGE" Never "" gpu-counter-restored | kubectl apply -f - > /dev/null ||
  fail "kubectl apply of the restore pod"
k8s_wait_pod default gpu-counter-restored 120 || fail "the restore pod did not start: $(tail -5 "$TMP/nri.log")"
RESTORE_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t:.1f}')")
[ "$(sed -n 's/^allocate //p' "$TMP/device-plugin.log" | tail -1)" = "$OTHER" ] ||
  fail "the kubelet did not allocate $OTHER to the restore pod: $(cat "$TMP/device-plugin.log")"
RPID=$(container_pid gpu-counter-restored)
NR=$(count_of "$RPID")
[ "$NR" -ge "$N1" ] || fail "the restored counter started over ($NR) instead of continuing from $N1"
RID=$(crictl ps -q --name counter --label io.kubernetes.pod.name=gpu-counter-restored --state running | head -1)
crictl inspect "$RID" > "$TMP/restored-inspect.json"
python3 - "$TMP/restored-inspect.json" "$CK_IMAGE" <<'PY' || fail "containerd does not mark $RID as restored from $CK_IMAGE"
import json, sys
a = json.load(open(sys.argv[1]))["status"]["annotations"]
assert a.get("restored") == "true" and a.get("checkpointImage") == sys.argv[2], a
PY
[ "$("$K8S_BIN/podresources-get" "$KROOT/pod-resources/kubelet.sock" default gpu-counter-restored counter)" = "nvidia.com/gpu $OTHER" ] ||
  fail "the kubelet's PodResources does not report $OTHER for gpu-counter-restored/counter"
sandbox_counts_past "$RPID" "$NR" || fail "the restored counter does not count (at $NR)"
grep -F "as container $RID: plan" "$TMP/nri.log" | grep -qF "($ALLOCATED -> $OTHER)" ||
  fail "gpuckpt-nri did not plan $ALLOCATED -> $OTHER for $RID: $(grep -v ' param: ' "$TMP/nri.log" | tail -4)"
SPEC=$CTRD_WORK/state/io.containerd.runtime.v2.task/k8s.io/$RID/config.json
python3 - "$SPEC" "$OTHER_INDEX" "$INDEX" <<'PY' || fail "the spec containerd gave runc for the restore ($SPEC)"
import json, sys
spec_file, other, source = sys.argv[1:]
spec = json.load(open(spec_file))
devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in spec["linux"].get("devices", [])}
want = ("c", 1, 5) if other == "1" else ("c", 1, 3)
assert devices.get(f"/dev/nvidia{other}") == want, f"the allocated GPU's node is not /dev/nvidia{other} {want}: {devices}"
assert f"/dev/nvidia{source}" not in devices, f"the source GPU's node is in the spec: {devices}"
visible = [e.split("=", 1)[1] for e in spec["process"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
assert visible and set(visible) == {other}, f"NVIDIA_VISIBLE_DEVICES: {visible}"
assert spec["annotations"].get("io.gpuckpt.restore-plan"), spec["annotations"]
PY
sandbox_counts_past "$PID" "$(count_of "$PID")" || fail "the source pod stopped counting"
RIP=$(on_pod_network gpu-counter-restored "$RPID" 10.88.1)
[ "$RIP" != "$POD_IP" ] || fail "the restored pod has the source pod's address $POD_IP"
echo "ok: gpu-counter-restored (at $RIP) Running in ${RESTORE_SECONDS}s, restored by containerd from $CK_IMAGE, on $OTHER (the kubelet's allocation, as its PodResources reports; the archive had $ALLOCATED); counter $N1 -> $NR and counting; spec: /dev/nvidia$OTHER_INDEX, NVIDIA_VISIBLE_DEVICES=$OTHER_INDEX, gpuckpt's restore plan"

step "5. a second node: the checkpoint image restored there by its kubelet, on the GPU that kubelet allocates"
NODE_B=node-b
# node-b's containerd reads CDI specs (step 6: the DRA driver writes them) from a directory of its own
CDI_B=$TMP/node-b-cdi
mkdir -p "$CDI_B"
CTRD_CDI_SPEC_DIR=$CDI_B k8s_add_node "$NODE_B" || fail "node $NODE_B did not start"
KROOT_B=${K8S_KUBELET_ROOT[$NODE_B]}
echo "ok: node $NODE_B Ready in ${K8S_NODE_SECONDS}s; $(kubectl get nodes --no-headers | wc -l) nodes"
if [ "$K8S_NODE_NETNS" = 1 ]; then
  # each node in a network namespace of its own: its kubelet there, its InternalIP that namespace's address
  for n in "$NODE" "$NODE_B"; do
    [ "$(kubectl get node "$n" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')" = "${K8S_NODE_ADDR[$n]}" ] ||
      fail "node $n's InternalIP is not ${K8S_NODE_ADDR[$n]}"
  done
  NS_A=$(readlink "/proc/${K8S_KUBELET_PID[$NODE]}/ns/net") NS_B=$(readlink "/proc/${K8S_KUBELET_PID[$NODE_B]}/ns/net")
  { [ "$NS_A" != "$NS_B" ] && [ "$NS_A" != "$(readlink /proc/self/ns/net)" ]; } ||
    fail "the kubelets of $NODE and $NODE_B do not run in network namespaces of their own ($NS_A, $NS_B)"
  echo "ok: $NODE at ${K8S_NODE_ADDR[$NODE]} and $NODE_B at ${K8S_NODE_ADDR[$NODE_B]}, each in a network namespace of its own"
fi
k8s_node_ctrd "$NODE_B"
ctrd_registry_host "$REGISTRY"
# node-b's simulated GPUs: GPUs 2 and 3 of the same 8-GPU fixture, in a host root of its own
B=$TMP/node-b
ROOT_B=$B/host-root STATE_B=$B/state CK_B=$B/checkpoints
mkdir -p "$B" "$STATE_B" "$CK_B"
cp -a "$SRC/test/fixtures/nvidia-h100-8gpu" "$ROOT_B"
mkdir -p "$ROOT_B/dev"
mknod "$ROOT_B/dev/nvidia2" c 1 3
mknod "$ROOT_B/dev/nvidia3" c 1 5
read -r GPU2 GPU3 < <("$CLI" gpus --host-root "$ROOT_B" --json |
  python3 -c 'import json,sys; print(" ".join(g["id"] for g in json.load(sys.stdin)["node"]["gpus"][2:4]))')
"$K8S_BIN/sim-device-plugin" --registry-dir "$KROOT_B/plugins_registry" \
  --device "$GPU2=2:$ROOT_B/dev/nvidia2" --device "$GPU3=3:$ROOT_B/dev/nvidia3" > "$B/device-plugin.log" 2>&1 &
PLUGIN_B_PID=$!
k8s_wait_gpus "$NODE_B" 2 ||
  fail "$NODE_B does not offer 2 nvidia.com/gpu: $(cat "$B/device-plugin.log")"
"$NRI" --socket "$CTRD_NRI_SOCK" --state-dir "$STATE_B" --host-root "$ROOT_B" --hook "$HOOK" \
  --pod-resources-socket "$KROOT_B/pod-resources/kubelet.sock" --cdi-spec-dir "$CDI_B" --once > "$B/nri.log" 2>&1 &
NRI_B_PID=$!
for _ in $(seq 100); do grep -q "registered with containerd" "$B/nri.log" && break; sleep 0.1; done
grep -q "registered with containerd 2" "$B/nri.log" || fail "gpuckpt-nri on $NODE_B did not register: $(cat "$B/nri.log")"
head -c 32 /dev/urandom | base64 > "$B/token"
chmod 600 "$B/token"
cat > "$B/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $B/token}
state_dir: $STATE_B
checkpoints: {dir: $CK_B, kubelet_dir: ""}
host_root: $ROOT_B
hooks_dir: $HOOKS
runtime: {kind: cri, cri: {endpoint: unix://$CTRD_SOCK}}
YAML
"$AGENT" --config "$B/agent.yaml" > "$B/agent.log" 2>&1 &
AGENT_B_PID=$!
for _ in $(seq 100); do [ -s "$STATE_B/agent.port" ] && break; sleep 0.1; done
[ -s "$STATE_B/agent.port" ] || fail "the agent of $NODE_B did not start: $(tail -5 "$B/agent.log")"
cp "$ARCHIVE" "$CK_B/"   # the archive as moved to the other node's agent
"$CLI" image "$(basename "$ARCHIVE")" --tag gpuckpt-e2e-cluster-b --agent "http://127.0.0.1:$(cat "$STATE_B/agent.port")" \
  --token-file "$B/token" > "$B/image.txt" || fail "gpuckpt image on $NODE_B: $(tail -3 "$B/agent.log")"
CK_IMAGE_B=$(sed -n 's/^  image: *//p' "$B/image.txt")
[ -n "$CK_IMAGE_B" ] || fail "gpuckpt image on $NODE_B printed no image: $(cat "$B/image.txt")"
t=$(date +%s.%N)
k8s_gpu_counter_pod "$CK_IMAGE_B" Never "$NODE_B" gpu-counter-moved | kubectl apply -f - > /dev/null ||
  fail "kubectl apply of the restore pod for $NODE_B"
k8s_wait_pod default gpu-counter-moved 120 || fail "the restore pod on $NODE_B did not start: $(tail -5 "$B/nri.log")"
MOVE_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t:.1f}')")
[ "$(kubectl get pod gpu-counter-moved -o jsonpath='{.spec.nodeName}')" = "$NODE_B" ] || fail "gpu-counter-moved is not on $NODE_B"
ALLOCATED_B=$(sed -n 's/^allocate //p' "$B/device-plugin.log" | tail -1)
if [ "$ALLOCATED_B" = "$GPU2" ]; then INDEX_B=2; elif [ "$ALLOCATED_B" = "$GPU3" ]; then INDEX_B=3; else
  fail "$NODE_B's device plugin allocated '$ALLOCATED_B', not one of its GPUs"; fi
[ "$("$K8S_BIN/podresources-get" "$KROOT_B/pod-resources/kubelet.sock" default gpu-counter-moved counter)" = "nvidia.com/gpu $ALLOCATED_B" ] ||
  fail "$NODE_B's PodResources does not report $ALLOCATED_B for gpu-counter-moved/counter"
crictl_b() { "$K8S_BIN/crictl" --config "$B/crictl.yaml" "$@"; }
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$CTRD_SOCK" "$CTRD_SOCK" > "$B/crictl.yaml"
MID=$(crictl_b ps -q --name counter --label io.kubernetes.pod.name=gpu-counter-moved --state running | head -1)
[ -n "$MID" ] || fail "no running container of gpu-counter-moved on $NODE_B"
MPID=$(crictl_b inspect -o go-template --template '{{.info.pid}}' "$MID")
crictl_b inspect "$MID" > "$B/moved-inspect.json"
python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["status"]["annotations"]
assert a.get("restored") == "true" and a.get("checkpointImage") == sys.argv[2], a
' "$B/moved-inspect.json" "$CK_IMAGE_B" || fail "$NODE_B's containerd does not mark $MID as restored from $CK_IMAGE_B"
NM=$(count_of "$MPID")
[ "$NM" -ge "$N1" ] || fail "the counter moved to $NODE_B started over ($NM) instead of continuing from $N1"
sandbox_counts_past "$MPID" "$NM" || fail "the counter moved to $NODE_B does not count (at $NM)"
grep -F "as container $MID: plan" "$B/nri.log" | grep -qF "($ALLOCATED -> $ALLOCATED_B)" ||
  fail "gpuckpt-nri on $NODE_B did not plan $ALLOCATED -> $ALLOCATED_B: $(grep -v ' param: ' "$B/nri.log" | tail -4)"
SPEC_B=$CTRD_WORK/state/io.containerd.runtime.v2.task/k8s.io/$MID/config.json
python3 - "$SPEC_B" "$INDEX_B" "$INDEX" <<'PY' || fail "the spec $NODE_B's containerd gave runc ($SPEC_B)"
import json, sys
spec_file, target, source = sys.argv[1:]
spec = json.load(open(spec_file))
devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in spec["linux"].get("devices", [])}
want = ("c", 1, 3) if target == "2" else ("c", 1, 5)
assert devices.get(f"/dev/nvidia{target}") == want, f"the allocated GPU's node is not /dev/nvidia{target} {want}: {devices}"
assert f"/dev/nvidia{source}" not in devices, f"the source GPU's node is in the spec: {devices}"
visible = [e.split("=", 1)[1] for e in spec["process"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
assert visible and set(visible) == {target}, f"NVIDIA_VISIBLE_DEVICES: {visible}"
PY
MIP=$(on_pod_network gpu-counter-moved "$MPID" 10.88.2)
echo "ok: gpu-counter-moved (at $MIP) Running on $NODE_B in ${MOVE_SECONDS}s on $ALLOCATED_B ($NODE_B's kubelet's allocation; the archive had $ALLOCATED on $NODE); counter $N1 -> $NM and counting; spec: /dev/nvidia$INDEX_B, NVIDIA_VISIBLE_DEVICES=$INDEX_B"

step "6. DRA: the restore's GPU comes from a ResourceClaim, allocated by the scheduler, prepared by a DRA driver"
# sim-dra-driver (the upstream kubelet-plugin library) publishes node-b's GPU 4 in a ResourceSlice; the scheduler
# allocates it to a ResourceClaim, node-b's kubelet has the driver prepare it (a CDI spec in node-b's CDI dir),
# containerd injects the CDI device, and gpuckpt-nri reads the allocation from the kubelet's PodResources
# dynamic_resources and the CDI spec: the restore must land on GPU 4, named by no device plugin.
mknod "$ROOT_B/dev/nvidia4" c 1 7
GPU4=$("$CLI" gpus --host-root "$ROOT_B" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["node"]["gpus"][4]["id"])')
GPU4_UUID=$("$CLI" gpus --host-root "$ROOT_B" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["node"]["gpus"][4]["uuid"])')
"$K8S_BIN/sim-dra-driver" --kubeconfig "$KUBECONFIG" --node "$NODE_B" --registry-dir "$KROOT_B/plugins_registry" \
  --plugin-dir "$KROOT_B/plugins/gpu.sim.gpuckpt.dev" --cdi-dir "$CDI_B" \
  --device "$GPU4_UUID=4:$ROOT_B/dev/nvidia4" > "$B/dra-driver.log" 2>&1 &
DRA_PID=$!
for _ in $(seq 150); do grep -q "^published 1 devices" "$B/dra-driver.log" && break; kill -0 "$DRA_PID" 2>/dev/null || break; sleep 0.2; done
grep -q "^published 1 devices" "$B/dra-driver.log" || fail "sim-dra-driver did not publish its ResourceSlice: $(tail -5 "$B/dra-driver.log")"
t=$(date +%s.%N)
{ k8s_dra_claim sim-gpu-claim; echo ---; cat <<YAML; } | kubectl apply -f - > /dev/null || fail "kubectl apply of the DeviceClass, ResourceClaim and restore pod"
apiVersion: v1
kind: Pod
metadata: {name: gpu-counter-dra, namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - {name: gpu, resourceClaimName: sim-gpu-claim}
  containers:
  - name: counter
    image: $CK_IMAGE_B
    imagePullPolicy: Never
    command: [sh, -c, '$K8S_GPU_COUNTER']
    resources:
      claims: [{name: gpu}]
YAML
k8s_wait_pod default gpu-counter-dra 120 || fail "the DRA restore pod did not start: $(grep -v ' param: ' "$B/nri.log" | tail -5; tail -5 "$B/dra-driver.log")"
DRA_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t:.1f}')")
[ "$(kubectl get pod gpu-counter-dra -o jsonpath='{.spec.nodeName}')" = "$NODE_B" ] || fail "gpu-counter-dra is not on $NODE_B"
[ "$(kubectl get resourceclaim sim-gpu-claim -o jsonpath='{.status.allocation.devices.results[0].device}')" = gpu-4 ] ||
  fail "the scheduler did not allocate gpu-4 to sim-gpu-claim: $(kubectl get resourceclaim sim-gpu-claim -o yaml | tail -20)"
grep -q "^prepare default/sim-gpu-claim gpu-4" "$B/dra-driver.log" || fail "node-b's kubelet did not have the driver prepare the claim: $(cat "$B/dra-driver.log")"
PR=$("$K8S_BIN/podresources-get" "$KROOT_B/pod-resources/kubelet.sock" default gpu-counter-dra counter)
case "$PR" in
  "dra default/sim-gpu-claim gpu.sim.gpuckpt.dev $NODE_B/gpu-4 sim.gpuckpt.dev/gpu="*-gpu-4) ;;
  *) fail "$NODE_B's PodResources does not report the DRA device for gpu-counter-dra/counter: '$PR'" ;;
esac
DID=$(crictl_b ps -q --name counter --label io.kubernetes.pod.name=gpu-counter-dra --state running | head -1)
[ -n "$DID" ] || fail "no running container of gpu-counter-dra on $NODE_B"
DPID=$(crictl_b inspect -o go-template --template '{{.info.pid}}' "$DID")
ND=$(count_of "$DPID")
[ "$ND" -ge "$N1" ] || fail "the DRA restore started over ($ND) instead of continuing from $N1"
sandbox_counts_past "$DPID" "$ND" || fail "the DRA restore does not count (at $ND)"
grep -F "as container $DID: plan" "$B/nri.log" | grep -qF "($ALLOCATED -> $GPU4)" ||
  fail "gpuckpt-nri on $NODE_B did not plan $ALLOCATED -> $GPU4 from the DRA allocation: $(grep -v ' param: ' "$B/nri.log" | tail -4)"
python3 - "$CTRD_WORK/state/io.containerd.runtime.v2.task/k8s.io/$DID/config.json" "$INDEX" <<'PY' || fail "the spec $NODE_B's containerd gave runc for the DRA restore"
import json, sys
spec = json.load(open(sys.argv[1]))
devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in spec["linux"].get("devices", [])}
assert devices.get("/dev/nvidia4") == ("c", 1, 7), f"the claim's GPU node is not /dev/nvidia4 (c 1 7): {devices}"
assert f"/dev/nvidia{sys.argv[2]}" not in devices, f"the source GPU's node is in the spec: {devices}"
visible = [e.split("=", 1)[1] for e in spec["process"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
assert visible and set(visible) == {"4"}, f"NVIDIA_VISIBLE_DEVICES: {visible}"
PY
[ -c "/proc/$DPID/root/dev/nvidia4" ] && [ ! -e "/proc/$DPID/root/dev/nvidia$INDEX" ] ||
  fail "the DRA restore's /dev does not hold nvidia4 alone: $(ls "/proc/$DPID/root/dev" | tr '\n' ' ')"
echo "ok: gpu-counter-dra Running on $NODE_B in ${DRA_SECONDS}s on $GPU4 (ResourceClaim sim-gpu-claim -> gpu-4, CDI from sim-dra-driver; the archive had $ALLOCATED); counter $N1 -> $ND and counting; /dev/nvidia4 only"

step "done"
echo "1 passed, 0 failed (cluster up in $(python3 -c "print(f'{$K8S_CONTROL_PLANE_SECONDS + $K8S_NODE_SECONDS:.1f}')")s)"
