#!/usr/bin/env bash
# e2e (labels e2e, cluster): gpuckpt under the real kubelet on CRI-O. The cluster of scripts/lib/k8s-sandbox.sh
# (etcd, kube-apiserver with TLS + RBAC, controller-manager, scheduler) with two nodes whose kubelets run on
# CRI-O (built by scripts/setup-k8s.sh from the Go module proxy), each a simulated GPU node (node-a: GPUs 0 and 1
# of the 8-GPU fixture, node-b: GPUs 2 and 3; /dev/null's and /dev/zero's numbers) with sim-device-plugin,
# gpuckpt's hooks.d entries (createRuntime, poststop: CRI-O refuses precreate), gpuckpt-nri on CRI-O's NRI socket
# and CRIU loading gpuckpt's plugin (CRIU_LIBS_DIR through conmon's environment):
#   1. both nodes Ready on cri-o, 2 allocatable nvidia.com/gpu each;
#   2. a GPU pod on node-a: the kubelet's device manager chose its GPU, gpuckpt-nri recorded it, the kubelet's
#      PodResources reports it;
#   3. POST /api/v1/nodes/node-a/proxy/checkpoint/... through the API server: CRI-O writes the archive into the
#      kubelet's checkpoint dir, node-a's agent annotates it, `gpuckpt inspect` shows a CRI-O archive and its GPU;
#   4. the archive moved to node-b's agent (runtime cri on node-b's CRI-O, an image registry): `gpuckpt image`
#      cannot load into CRI-O's containers/storage and says so, and pushes the checkpoint image to the registry;
#   5. a pod of that image on node-b, pulled and restored by node-b's kubelet through CRI-O onto the GPU node-b's
#      device manager allocated (its PodResources says so): the counter continues, gpuckpt-nri planned node-a's
#      GPU -> node-b's, CRI-O's final spec has the allocated GPU's node and NVIDIA_VISIBLE_DEVICES, and the
#      restored process's /dev holds the allocated GPU's node and not the source's.
# Exit 0 pass, 77 skipped (no root, or setup.sh / setup-k8s.sh products absent, CRI-O among them), else fail.
# Every wait is bounded; cleanup always runs. KEEP=1 keeps the work dir.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
BUILD=$(cd "$BUILD" && pwd)   # the hooks.d entries name the hook by this path
. "$SRC/scripts/lib/node-sandbox.sh"
. "$SRC/scripts/lib/containerd-sandbox.sh"
. "$SRC/scripts/lib/k8s-sandbox.sh"
CLI=$BUILD/cli/gpuckpt
AGENT=$BUILD/agent/gpuckpt-agent
NRI=$BUILD/nri-plugin/gpuckpt-nri
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
NODE_A=node-a NODE_B=node-b

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - T0 ))"; }
T0=$(date +%s)

k8s_sandbox_ready "$IMAGE" crio pinns podresources-get || skip "$K8S_MISSING"
command -v conmon >/dev/null || skip "conmon not installed (scripts/setup.sh)"
for b in "$CLI" "$AGENT" "$NRI" "$HOOK"; do [ -x "$b" ] || fail "$b not built"; done

# short: unix socket paths under it (the device plugins', the kubelet's) must fit in 108 bytes
TMP=/tmp/gckcrio-$$-$(date +%s)
mkdir -m 711 "$TMP"
PIDS=() REGISTRY_PID=''
cleanup() {
  set +e
  sandbox_stop_agent
  for p in ${PIDS[@]+"${PIDS[@]}"} "$REGISTRY_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  k8s_stop
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
kubectl() { k8s_kubectl "$@"; }
count_of() { sandbox_count_of "$1" || fail "no counter value in process $1"; }   # count_of PID
container_id() {  # container_id NODE POD: the running container "counter" of POD, through NODE's CRI-O
  local id
  id=$(k8s_crictl "$1" ps -q --name counter --label "io.kubernetes.pod.name=$2" --state running | head -1)
  [ -n "$id" ] || fail "no running container 'counter' of pod $2 on $1"
  echo "$id"
}
container_pid() { k8s_crictl "$1" inspect -o go-template --template '{{.info.pid}}' "$2"; }   # NODE ID
# node_gpus NODE DIR FIRST: a simulated GPU node's host root under DIR with GPUs FIRST and FIRST+1 of the fixture
# (char devices of /dev/null's and /dev/zero's numbers), gpuckpt's hooks.d entries for it (no precreate: CRI-O
# refuses one), its state dir; sets GPU_IDS
node_gpus() {
  local dir=$2 first=$3 f
  cp -a "$SRC/test/fixtures/nvidia-h100-8gpu" "$dir/host-root"
  mkdir -p "$dir/host-root/dev" "$dir/hooks.d" "$dir/state" "$dir/checkpoints"
  mknod "$dir/host-root/dev/nvidia$first" c 1 3
  mknod "$dir/host-root/dev/nvidia$((first + 1))" c 1 5
  for f in "$SRC"/oci-hook/gpuckpt-hook.json "$SRC"/oci-hook/gpuckpt-hook-poststop.json; do
    sed -e "s#/usr/local/bin/gpuckpt-oci-hook#$HOOK#" \
        -e "s#\"/var/lib/gpuckpt\"#\"$dir/state\", \"--host-root\", \"$dir/host-root\"#" "$f" > "$dir/hooks.d/$(basename "$f")"
  done
  GPU_IDS=$("$CLI" gpus --host-root "$dir/host-root" --json |
    python3 -c 'import json,sys; f=int(sys.argv[1]); print(" ".join(g["id"] for g in json.load(sys.stdin)["node"]["gpus"][f:f+2]))' "$first")
}
# node_agents NODE DIR FIRST: sim-device-plugin (GPUs FIRST, FIRST+1), gpuckpt-nri on the node's NRI socket with the
# kubelet's PodResources, and waits for both
node_agents() {
  local node=$1 dir=$2 first=$3 kroot=${K8S_KUBELET_ROOT[$1]} a b
  read -r a b <<< "$GPU_IDS"
  "$K8S_BIN/sim-device-plugin" --registry-dir "$kroot/plugins_registry" \
    --device "$a=$first:$dir/host-root/dev/nvidia$first" --device "$b=$((first + 1)):$dir/host-root/dev/nvidia$((first + 1))" \
    > "$dir/device-plugin.log" 2>&1 &
  PIDS+=($!)
  k8s_wait_gpus "$node" 2 || fail "$node does not offer 2 nvidia.com/gpu: $(cat "$dir/device-plugin.log")"
  "$NRI" --socket "${K8S_NRI_SOCK[$node]}" --state-dir "$dir/state" --host-root "$dir/host-root" --hook "$HOOK" \
    --pod-resources-socket "$kroot/pod-resources/kubelet.sock" > "$dir/nri.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "registered with" "$dir/nri.log" && break; sleep 0.1; done
  grep -q "registered with cri-o" "$dir/nri.log" || fail "gpuckpt-nri on $node did not register with CRI-O: $(cat "$dir/nri.log")"
}

step "1. the cluster: control plane, $NODE_A and $NODE_B on CRI-O"
mkdir -p "$TMP/criu-plugins" "$TMP/a" "$TMP/b"
cp "$BUILD/criu-plugin/gpuckpt_plugin.so" "$TMP/criu-plugins/" || fail "criu-plugin/gpuckpt_plugin.so not built"
export CRIU_LIBS_DIR=$TMP/criu-plugins   # CRI-O -> conmon -> runc -> CRIU: CRIU loads gpuckpt's plugin from here
k8s_start_control_plane "$TMP/cluster" || fail "the control plane did not start"
# CRI-O pulls every image, the pause image among them, from the tests' registry
k8s_start_registry "$TMP/registry" || fail "docker-registry did not start"
node_gpus "$NODE_A" "$TMP/a" 0
GPUS_A=$GPU_IDS
node_gpus "$NODE_B" "$TMP/b" 2
GPUS_B=$GPU_IDS
K8S_NODE_RUNTIME=crio K8S_CRIO_HOOKS_DIR=$TMP/a/hooks.d k8s_add_node "$NODE_A" || fail "node $NODE_A did not start"
K8S_NODE_RUNTIME=crio K8S_CRIO_HOOKS_DIR=$TMP/b/hooks.d k8s_add_node "$NODE_B" || fail "node $NODE_B did not start"
for n in "$NODE_A" "$NODE_B"; do
  v=$(kubectl get node "$n" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}')
  case "$v" in cri-o://*) ;; *) fail "node $n runs '$v', not CRI-O" ;; esac
done
GPU_IDS=$GPUS_A node_agents "$NODE_A" "$TMP/a" 0
GPU_IDS=$GPUS_B node_agents "$NODE_B" "$TMP/b" 2
echo "ok: $NODE_A and $NODE_B Ready (kubelet $(kubectl get node "$NODE_A" -o jsonpath='{.status.nodeInfo.kubeletVersion}'), $v), 2 nvidia.com/gpu each; gpuckpt-nri registered with both CRI-Os"

step "2. a GPU pod on $NODE_A"
KROOT_A=${K8S_KUBELET_ROOT[$NODE_A]} KROOT_B=${K8S_KUBELET_ROOT[$NODE_B]}
# The base image needs a command of its own: CRI-O's restore drops the pod's command and fails with "no command
# specified" on an image without one (the pause image is busybox with CMD sleep; test/e2e/crio_flow.sh).
BASE=$REGISTRY/gpuckpt-pause:latest
mkdir -p "$KROOT_A/checkpoints"
cat > "$TMP/a/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $TMP/a/token}
state_dir: $TMP/a/state
checkpoints: {dir: $TMP/a/checkpoints, kubelet_dir: $KROOT_A/checkpoints, watch_interval_seconds: 1}
host_root: $TMP/a/host-root
hooks_dir: $TMP/a/hooks.d
runtime: {kind: cri, cri: {endpoint: unix://${K8S_CRI_SOCK[$NODE_A]}}}
YAML
head -c 32 /dev/urandom | base64 > "$TMP/a/token"
chmod 600 "$TMP/a/token"
sandbox_run_agent "$AGENT" "$TMP/a" || fail "the agent of $NODE_A did not start"
k8s_gpu_counter_pod "$BASE" IfNotPresent "$NODE_A" | kubectl apply -f - > /dev/null || fail "kubectl apply of the GPU pod"
k8s_wait_pod default gpu-counter 90 || fail "the GPU pod did not start: $(tail -5 "$TMP/a/nri.log")"
ALLOCATED=$(sed -n 's/^allocate //p' "$TMP/a/device-plugin.log" | tail -1)
case " $GPUS_A " in *" $ALLOCATED "*) ;; *) fail "$NODE_A's device plugin allocated '$ALLOCATED', not one of its GPUs ($GPUS_A)" ;; esac
[ "$ALLOCATED" = "${GPUS_A%% *}" ] && INDEX=0 || INDEX=1
CID=$(container_id "$NODE_A" gpu-counter)
PID=$(container_pid "$NODE_A" "$CID")
[ -c "/proc/$PID/root/dev/nvidia$INDEX" ] || fail "the container has no /dev/nvidia$INDEX"
for _ in $(seq 50); do [ -f "$TMP/a/state/containers/$CID.json" ] && break; sleep 0.1; done
python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]; assert g["record"]["used_gpu_ids"]==[sys.argv[2]], g' \
  "$TMP/a/state/containers/$CID.json" "$ALLOCATED" || fail "gpuckpt on $NODE_A did not record $CID on $ALLOCATED"
[ "$("$K8S_BIN/podresources-get" "$KROOT_A/pod-resources/kubelet.sock" default gpu-counter counter)" = "nvidia.com/gpu $ALLOCATED" ] ||
  fail "the kubelet's PodResources does not report $ALLOCATED for gpu-counter/counter"
echo "ok: gpu-counter on $NODE_A (CRI-O container $CID), kubelet allocated $ALLOCATED (/dev/nvidia$INDEX); gpuckpt recorded it"

step "3. POST /api/v1/nodes/$NODE_A/proxy/checkpoint/default/gpu-counter/counter through the API server"
for _ in $(seq 3); do sandbox_counts_past "$PID" 60 && break; done
[ "$(count_of "$PID")" -gt 60 ] || fail "the pod's counter does not count"
k8s_kubelet_checkpoint "$NODE_A" default gpu-counter counter || fail "$K8S_CHECKPOINT_ERROR"
ARCHIVE=$K8S_ARCHIVE CKPT_SECONDS=$K8S_CHECKPOINT_SECONDS
case "$ARCHIVE" in
  "$KROOT_A/checkpoints/checkpoint-gpu-counter_default-counter-"*.tar) ;;
  *) fail "the archive $ARCHIVE is not in the kubelet's checkpoint dir $KROOT_A/checkpoints" ;;
esac
for _ in $(seq 150); do grep -q "annotated kubelet archive $ARCHIVE" "$TMP/a/agent.log" && break; sleep 0.1; done
grep -q "annotated kubelet archive $ARCHIVE" "$TMP/a/agent.log" || fail "the watcher did not annotate it: $(tail -3 "$TMP/a/agent.log")"
"$CLI" inspect "$ARCHIVE" --host-root "$TMP/a/host-root" --json > "$TMP/inspect.json" 2> "$TMP/inspect.err" ||
  fail "gpuckpt inspect: $(cat "$TMP/inspect.err")"
python3 - "$TMP/inspect.json" "$ALLOCATED" <<'PY' || fail "gpuckpt inspect does not show CRI-O's checkpoint and its GPU"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["engine"] == "cri-o", i["engine"]
assert i["gpus"]["record"]["used_gpu_ids"] == [sys.argv[2]], i["gpus"]
assert "gpu-counter" in json.dumps(i), "the pod's name is not in what inspect shows"
PY
N1=$(tar -xOf "$ARCHIVE" rootfs-diff.tar | tar -xOf - tmp/count) || fail "the archive's rootfs diff has no /tmp/count"
sandbox_counts_past "$PID" "$N1" || fail "the checkpointed pod stopped counting"
echo "ok: $(basename "$ARCHIVE") ($(stat -c %s "$ARCHIVE") bytes, ${CKPT_SECONDS}s through the API server) written by CRI-O, annotated; inspect: cri-o, $ALLOCATED; counter at $N1, the pod keeps counting"

step "4. the archive on $NODE_B's agent: a checkpoint image CRI-O's kubelet can pull"
cat > "$TMP/b/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $TMP/b/token}
state_dir: $TMP/b/state
checkpoints: {dir: $TMP/b/checkpoints, kubelet_dir: ""}
host_root: $TMP/b/host-root
hooks_dir: $TMP/b/hooks.d
runtime: {kind: cri, cri: {endpoint: unix://${K8S_CRI_SOCK[$NODE_B]}}}
image_registry: {repository: $REGISTRY/gpuckpt-checkpoints, plain_http: true}
YAML
head -c 32 /dev/urandom | base64 > "$TMP/b/token"
chmod 600 "$TMP/b/token"
AGENT_A_PID=$AGENT_PID
AGENT_PID=''
sandbox_run_agent "$AGENT" "$TMP/b" || fail "the agent of $NODE_B did not start"
PIDS+=("$AGENT_A_PID")
cp "$ARCHIVE" "$TMP/b/checkpoints/"   # the archive as moved to the other node's agent
"$CLI" image "$(basename "$ARCHIVE")" --tag gpuckpt-e2e-crio --agent "$URL" --token-file "$TMP/b/token" > "$TMP/b/image.txt" ||
  fail "gpuckpt image on $NODE_B: $(tail -3 "$TMP/b/agent.log")"
cat "$TMP/b/image.txt"
grep -q "^  note: .*containers/storage" "$TMP/b/image.txt" ||
  fail "gpuckpt image does not say why CRI-O's store cannot take the image: $(cat "$TMP/b/image.txt")"
CK_IMAGE=$(sed -n 's/^  image: *//p' "$TMP/b/image.txt")
case "$CK_IMAGE" in "$REGISTRY/gpuckpt-checkpoints"*) ;; *) fail "the checkpoint image '$CK_IMAGE' is not in $REGISTRY" ;; esac
grep -qx "  pull:     IfNotPresent" "$TMP/b/image.txt" || fail "a pushed image needs pull policy IfNotPresent: $(cat "$TMP/b/image.txt")"
echo "ok: $CK_IMAGE pushed (CRI-O's store takes no load, as gpuckpt says)"

step "5. restore by $NODE_B's kubelet through CRI-O, on the GPU that kubelet allocates"
t=$(date +%s.%N)
k8s_gpu_counter_pod "$CK_IMAGE" IfNotPresent "$NODE_B" gpu-counter-moved | kubectl apply -f - > /dev/null ||
  fail "kubectl apply of the restore pod"
k8s_wait_pod default gpu-counter-moved 120 ||
  fail "the restore pod did not start: $(grep -v ' param: ' "$TMP/b/nri.log" | tail -4; grep -i error "${K8S_RUNTIME_WORK[$NODE_B]}/crio.log" | tail -3 | cut -c1-400)"
MOVE_SECONDS=$(python3 -c "import time; print(f'{time.time() - $t:.1f}')")
ALLOCATED_B=$(sed -n 's/^allocate //p' "$TMP/b/device-plugin.log" | tail -1)
if [ "$ALLOCATED_B" = "${GPUS_B%% *}" ]; then INDEX_B=2; elif [ "$ALLOCATED_B" = "${GPUS_B##* }" ]; then INDEX_B=3; else
  fail "$NODE_B's device plugin allocated '$ALLOCATED_B', not one of its GPUs ($GPUS_B)"; fi
[ "$("$K8S_BIN/podresources-get" "$KROOT_B/pod-resources/kubelet.sock" default gpu-counter-moved counter)" = "nvidia.com/gpu $ALLOCATED_B" ] ||
  fail "$NODE_B's PodResources does not report $ALLOCATED_B for gpu-counter-moved/counter"
MID=$(container_id "$NODE_B" gpu-counter-moved)
MPID=$(container_pid "$NODE_B" "$MID")
NM=$(count_of "$MPID")
[ "$NM" -ge "$N1" ] || fail "the counter moved to $NODE_B started over ($NM) instead of continuing from $N1"
sandbox_counts_past "$MPID" "$NM" || fail "the counter moved to $NODE_B does not count (at $NM)"
grep -F "CRI-O restore" "$TMP/b/nri.log" | grep -qF "($ALLOCATED -> $ALLOCATED_B)" ||
  fail "gpuckpt-nri on $NODE_B did not plan $ALLOCATED -> $ALLOCATED_B: $(grep -v ' param: ' "$TMP/b/nri.log" | tail -4)"
CRIO_B=${K8S_RUNTIME_WORK[$NODE_B]}
python3 - "$CRIO_B/root/overlay-containers/$MID/userdata/config.json" "$INDEX_B" "$INDEX" <<'PY' || fail "the spec $NODE_B's CRI-O gave runc"
import json, sys
spec_file, target, source = sys.argv[1:]
spec = json.load(open(spec_file))
devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in spec["linux"].get("devices") or []}
want = ("c", 1, 3) if target == "2" else ("c", 1, 5)
assert devices.get(f"/dev/nvidia{target}") == want, f"the allocated GPU's node is not /dev/nvidia{target} {want}: {devices}"
assert f"/dev/nvidia{source}" not in devices, f"the source GPU's node is in the spec: {devices}"
env = dict(e.split("=", 1) for e in spec["process"]["env"])
assert env.get("NVIDIA_VISIBLE_DEVICES") == target, f"NVIDIA_VISIBLE_DEVICES: {env.get('NVIDIA_VISIBLE_DEVICES')}"
assert spec["annotations"].get("io.gpuckpt.restore-plan", "").startswith("rp-"), "no restore plan annotation"
PY
# every process of the container sees the allocated GPU's node and not the source's (CRIU's /dev image is the
# source's: gpuckpt's plugin puts the allocation's nodes there)
[ -c "/proc/$MPID/root/dev/nvidia$INDEX_B" ] && [ ! -e "/proc/$MPID/root/dev/nvidia$INDEX" ] ||
  fail "the restored process's /dev does not hold nvidia$INDEX_B alone: $(ls "/proc/$MPID/root/dev" | tr '\n' ' ')"
echo "ok: gpu-counter-moved Running on $NODE_B in ${MOVE_SECONDS}s (CRI-O container $MID) on $ALLOCATED_B ($NODE_B's kubelet's allocation; the archive had $ALLOCATED on $NODE_A); counter $N1 -> $NM and counting; spec and /dev: nvidia$INDEX_B only"

step "done"
echo "1 passed, 0 failed"
