#!/usr/bin/env bash
# README command 3: gpuckpt on a real two-node Kubernetes cluster on this machine, as an operator would try it
# first. After setup (scripts/setup.sh, scripts/setup-k8s.sh, scripts/build.sh: each only checks when done):
#   1. the image the chart runs (scripts/build-image.sh) and the cluster of scripts/lib/k8s-sandbox.sh: etcd,
#      kube-apiserver, controller-manager, scheduler, kubelets node-a and node-b, each on its own containerd 2.x,
#      each a simulated GPU node (test/k8s/sim-device-plugin registers two GPUs with its kubelet);
#   2. helm install of charts/gpuckpt: one agent pod per node (the image imported into each node's containerd; the
#      chart's host paths point at per-node directories, so this machine's own are not written);
#   3. a counting pod asking for nvidia.com/gpu: 1 on node-a;
#   4. the kubelet checkpoint API through the API server (kubectl create --raw .../proxy/checkpoint/...); node-a's
#      agent pod annotates the archive with the GPU record;
#   5. kubectl gpuckpt migrate to node-b: node-a's agent checkpoints the pod, the target agent matches its GPUs,
#      the archive goes agent to agent, node-b's agent loads it as a checkpoint image into node-b's containerd,
#      a copy of the pod with that image is created on node-b, the source pod is deleted. Should migrate fail,
#      the demo says so with its last lines and does those steps itself from step 4's archive (gpuckpt image
#      run in node-b's agent pod, a pod of the image), so that a broken plugin shows without hiding the rest;
#   6. node-b's kubelet restores it on the GPU its device manager allocates, and the counter continues: at least
#      its value on node-a just before the move, and counting;
#   7. teardown: helm uninstall, the cluster stopped, this machine's directories as they were.
#
#   bash scripts/demo-cluster.sh             setup + build, then the demo
#   GPUCKPT_DEMO_SKIP_SETUP=1 BUILD_DIR=DIR bash scripts/demo-cluster.sh
#                                             the demo only, on a built tree (the ctest runs it so)
#   KEEP=1 ...                                keep the work dir (logs, archive) afterwards
#   GPUCKPT_DEMO_RUNTIME=crio ...             the nodes run CRI-O (built by setup-k8s.sh) instead of containerd 2.x:
#                                             the chart's image and the pods' images are pulled from the demo's
#                                             registry, and the agents push checkpoint images there (CRI-O's store
#                                             takes no load)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
cd "$SRC"
if [ "${GPUCKPT_DEMO_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
  bash scripts/setup-k8s.sh
  bash scripts/build.sh
fi
BUILD=$(cd "${BUILD_DIR:-build}" && pwd)
. "$SRC/scripts/lib/containerd-sandbox.sh"
. "$SRC/scripts/lib/k8s-sandbox.sh"
. "$SRC/scripts/lib/k8s-gpuckpt-chart.sh"
BUSYBOX=${GPUCKPT_DEMO_IMAGE:-localhost/gpuckpt-busybox}
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
IMAGE_REPO=localhost/gpuckpt IMAGE_TAG=demo-cluster-$$
RUNTIME=${GPUCKPT_DEMO_RUNTIME:-containerd}
case "$RUNTIME" in containerd | crio) ;; *) echo "GPUCKPT_DEMO_RUNTIME=$RUNTIME: containerd or crio" >&2; exit 2 ;; esac
NS=gpuckpt RELEASE=gpuckpt
TOKEN_IN_POD=/etc/gpuckpt/auth/token

die() { printf '\ndemo FAILED: %s\n' "$*" >&2; exit 1; }
trap 'printf "\ndemo FAILED at line %s: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR
now() { date +%s%N; }
T_START=$(now) T_STEP=$(now) STEP=0
step() {
  local t; t=$(now)
  [ "$STEP" -gt 0 ] && printf '   (step %d took %.1f s)\n' "$STEP" "$(( (t - T_STEP) / 1000000 ))e-3"
  STEP=$((STEP + 1)); T_STEP=$t
  printf '\n[%d] %s\n' "$STEP" "$*"
}
say() { printf '   %s\n' "$*"; }
show() { printf '   $ %s\n' "$*"; }

k8s_gpuckpt_ready "$BUSYBOX" || die "$K8S_MISSING"
if [ "$RUNTIME" = crio ]; then
  for p in crio pinns; do [ -x "$K8S_BIN/$p" ] || die "$K8S_BIN/$p missing (scripts/setup-k8s.sh builds it)"; done
  command -v conmon >/dev/null || die "conmon not installed (scripts/setup.sh)"
fi
[ -x "$BUILD/agent/gpuckpt-agent" ] || die "$BUILD is not built: run scripts/build.sh"

k8s_gpuckpt_workdir gckdemo   # TMP; VIEW, for K8S_NODE_VIEW: on each node, that node's work dir
host_state() {   # what must be as it was afterwards (the chart's defaults would write there)
  for d in /usr/lib/criu /etc/criu /etc/crio /run/crio /usr/share/containers/oci/hooks.d /var/lib/gpuckpt /opt/gpuckpt/bin /var/lib/kubelet; do
    if [ -e "$d" ]; then find "$d" -maxdepth 2 -printf '%p %s %T@\n' 2>/dev/null | sort; else echo "$d absent"; fi
  done
  iptables -t nat -S 2>/dev/null | grep -c gpuckpt-k8s-sandbox || true
  ip -o link show | awk -F': ' '{print $2}' | grep -c '^gck' || true
}
host_state > "$TMP/host-before.txt"
PLUGIN_A='' PLUGIN_B='' REGISTRY_PID=''
cleanup() {
  set +e
  k8s_gpuckpt_teardown "$IMAGE_REPO:$IMAGE_TAG" "$PLUGIN_A" "$PLUGIN_B" "$REGISTRY_PID"
}
trap cleanup EXIT
kubectl() { k8s_kubectl "$@"; }
node_dir() { echo "$TMP/cluster/nodes/$1"; }
count_in() { k8s_pod_count "$1" || die "no counter value in pod $1"; }

step "The gpuckpt image (scripts/build-image.sh, offline) and a two-node cluster on $RUNTIME (scripts/lib/k8s-sandbox.sh)"
t=$(now)
BUILD_DIR=$BUILD bash "$SRC/scripts/build-image.sh" "$IMAGE_REPO:$IMAGE_TAG" 2>&1 | tail -1 | sed 's/^/   /'
say "image built in $(( ($(now) - t) / 1000000000 )) s"
podman image exists "$IMAGE_REPO:$IMAGE_TAG" || die "scripts/build-image.sh made no $IMAGE_REPO:$IMAGE_TAG"
if [ "$RUNTIME" = containerd ]; then
  podman save -q --format oci-archive -o "$TMP/gpuckpt-image.tar" "$IMAGE_REPO:$IMAGE_TAG" || die "podman save"
fi
export K8S_NODE_VIEW=$VIEW
# the runtime -> runc -> CRIU loads gpuckpt's CRIU plugin from where the chart's installer puts it on each node
export CRIU_LIBS_DIR=$VIEW/host/usr/lib/criu
k8s_start_control_plane "$TMP/cluster" || die "the control plane did not start"
k8s_service_proxy || die "no route from pods to the API server"
say "control plane up in ${K8S_CONTROL_PLANE_SECONDS}s ($("$K8S_BIN/kube-apiserver" --version))"
# the pod's base image from a registry on 127.0.0.1: containerd 2.x pulls a checkpoint's base image again by its
# rootfsImageRef when it restores
k8s_start_registry "$TMP/registry" || die "docker-registry did not start"
if [ "$RUNTIME" = crio ]; then
  # CRI-O pulls what it runs: the chart's image from the registry; the pods' base is the pause image (busybox with
  # a command of its own, which a CRI-O restore needs), pushed there by the sandbox
  t=$(now)
  podman push -q --tls-verify=false "$IMAGE_REPO:$IMAGE_TAG" "docker://$REGISTRY/gpuckpt:$IMAGE_TAG" ||
    die "podman push $IMAGE_REPO:$IMAGE_TAG to $REGISTRY"
  say "$IMAGE_REPO:$IMAGE_TAG pushed to the registry in $(( ($(now) - t) / 1000000 )) ms"
  CHART_IMAGE=$REGISTRY/gpuckpt BASE=$REGISTRY/gpuckpt-pause:latest
else
  CHART_IMAGE=$IMAGE_REPO BASE=$REGISTRY/gpuckpt-busybox:latest
  podman push -q --tls-verify=false "$BUSYBOX" "docker://$BASE" || die "podman push $BUSYBOX to $BASE"
fi
for n in node-a node-b; do
  if [ "$RUNTIME" = crio ]; then
    # CRI-O reads the hooks.d the chart's installer writes on the node
    mkdir -p "$(node_dir "$n")/host/hooks.d"
    K8S_NODE_RUNTIME=crio K8S_CRIO_HOOKS_DIR=$VIEW/host/hooks.d k8s_add_node "$n" || die "node $n did not start"
    how="pulls the chart's image from the registry"
  else
    k8s_add_node "$n" || die "node $n did not start"
    k8s_node_ctrd "$n"
    ctrd_registry_host "$REGISTRY"
    t=$(now)
    ctrd_ctr images import "$TMP/gpuckpt-image.tar" > /dev/null || die "ctr images import into $n's containerd"
    how="$IMAGE_REPO:$IMAGE_TAG imported into its containerd in $(( ($(now) - t) / 1000000 )) ms"
  fi
  # what GPU feature discovery labels on a GPU node (the chart's default node affinity)
  kubectl label node "$n" nvidia.com/gpu.present=true > /dev/null
  say "node $n Ready in ${K8S_NODE_SECONDS}s, $how"
done
# simulated GPUs, two a node (/dev/null and /dev/zero's numbers), allocated by each kubelet's device manager
declare -A PLUGIN_LOG
for n in node-a node-b; do
  s=${n#node-}
  mkdir -p "$TMP/gpus-$n"
  for i in 0 1; do mknod "$TMP/gpus-$n/nvidia$i" c 1 $(( 3 + 2 * i )); done
  PLUGIN_LOG[$n]=$TMP/plugin-$n.log
  "$K8S_BIN/sim-device-plugin" --registry-dir "$(node_dir "$n")/kubelet/plugins_registry" \
    --device "GPU-${s}0000000-0000-0000-0000-000000000000=0:$TMP/gpus-$n/nvidia0" \
    --device "GPU-${s}1111111-1111-1111-1111-111111111111=1:$TMP/gpus-$n/nvidia1" > "${PLUGIN_LOG[$n]}" 2>&1 &
  if [ "$n" = node-a ]; then PLUGIN_A=$!; else PLUGIN_B=$!; fi
done
for n in node-a node-b; do
  k8s_wait_gpus "$n" 2 ||
    die "$n does not offer 2 nvidia.com/gpu: $(cat "${PLUGIN_LOG[$n]}")"
done
show kubectl get nodes
kubectl get nodes -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].type,GPUS:.status.allocatable.nvidia\.com/gpu,KUBELET:.status.nodeInfo.kubeletVersion,RUNTIME:.status.nodeInfo.containerRuntimeVersion' | sed 's/^/   /'

step "helm install gpuckpt: one agent pod per node"
# (pods reach the registry at the machine's address; 127.0.0.1 is theirs)
k8s_gpuckpt_values "$TMP/values.yaml" "$VIEW" "$CHART_IMAGE" "$IMAGE_TAG" "$RUNTIME" "$K8S_NODE_IP:${REGISTRY##*:}"
show helm install $RELEASE charts/gpuckpt -n $NS --create-namespace -f values.yaml
helm --kubeconfig "$KUBECONFIG" install "$RELEASE" "$SRC/charts/gpuckpt" -n "$NS" --create-namespace \
  -f "$TMP/values.yaml" > "$TMP/helm-install.txt" 2>&1 || die "helm install: $(cat "$TMP/helm-install.txt")"
kubectl -n "$NS" rollout status daemonset/"$RELEASE" --timeout 240s > /dev/null 2>&1 ||
  die "the DaemonSet did not become Ready: $(kubectl -n "$NS" get pods -o wide; kubectl -n "$NS" get events --field-selector type=Warning 2>&1 | tail -5 | cut -c1-400)"
agent_on() { kubectl -n "$NS" get pods -l app.kubernetes.io/name=gpuckpt --field-selector "spec.nodeName=$1" -o jsonpath='{.items[0].metadata.name}'; }
AGENT_A=$(agent_on node-a) AGENT_B=$(agent_on node-b)
{ [ -n "$AGENT_A" ] && [ -n "$AGENT_B" ]; } || die "no agent pod on each node: $(kubectl -n "$NS" get pods -o wide)"
show kubectl -n $NS get pods -o wide
kubectl -n "$NS" get pods -o wide | awk '{print "   " $1, $2, $3, $7}'
for n in node-a node-b; do
  say "hooks.d the installer wrote on $n: $(cd "$(node_dir "$n")/host/hooks.d" && echo *)"
done

step "A counting pod with one (simulated) GPU on node-a"
k8s_gpu_counter_pod "$BASE" IfNotPresent node-a | kubectl apply -f - > /dev/null || die "kubectl apply of the GPU pod"
k8s_wait_pod default gpu-counter 90 || die "the GPU pod did not start"
GPU_A=$(sed -n 's/^allocate //p' "${PLUGIN_LOG[node-a]}" | tail -1)
[ -n "$GPU_A" ] || die "node-a's kubelet allocated no GPU: $(cat "${PLUGIN_LOG[node-a]}")"
for _ in $(seq 100); do [ "$(count_in gpu-counter)" -gt 30 ] && break; sleep 0.1; done
say "gpu-counter Running on node-a, kubelet allocated $GPU_A; counter at $(count_in gpu-counter)"

step "Checkpoint through the kubelet API (API server -> node-a's kubelet -> $RUNTIME + CRIU)"
show kubectl create --raw /api/v1/nodes/node-a/proxy/checkpoint/default/gpu-counter/counter -f /dev/null
BEFORE=$(count_in gpu-counter)
k8s_kubelet_checkpoint node-a default gpu-counter counter || die "$K8S_CHECKPOINT_ERROR"
ARCHIVE=$K8S_ARCHIVE
NAME=$(basename "$ARCHIVE")
say "kubelet wrote $NAME ($(stat -c %s "$ARCHIVE") bytes); counter was at $BEFORE just before"
for _ in $(seq 100); do
  kubectl -n "$NS" logs "$AGENT_A" -c agent 2>/dev/null | grep -qF "annotated kubelet archive $VIEW/kubelet/checkpoints/$NAME" && break
  sleep 0.2
done
kubectl -n "$NS" logs "$AGENT_A" -c agent | grep -qF "annotated kubelet archive $VIEW/kubelet/checkpoints/$NAME" ||
  die "agent pod $AGENT_A did not annotate $NAME: $(kubectl -n "$NS" logs "$AGENT_A" -c agent --tail 5)"
tar -xOf "$ARCHIVE" gpuckpt-gpus.json > "$TMP/gpus.json"
# (containerd gzips the rootfs diff, CRI-O does not: tar tells them apart in a file)
tar -xOf "$ARCHIVE" rootfs-diff.tar > "$TMP/rootfs-diff.tar"
N_CKPT=$(tar -xOf "$TMP/rootfs-diff.tar" tmp/count)
say "agent pod $AGENT_A annotated it with gpuckpt-gpus.json: $(python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))
devices = ", ".join(d["container_path"] for d in g.get("devices", []))
env = ", ".join(f"{k}={v}" for k, v in g.get("gpu_env", {}).items())
used = ", ".join(g["record"]["used_gpu_ids"]) or "none: the agent pod sees no NVIDIA driver on this GPU-less machine"
print(f"devices {devices} ({env}), GPUs in the record: {used}")' "$TMP/gpus.json")"
say "counter in the checkpoint: $N_CKPT"
kubectl get events -n default --field-selector reason=CheckpointAnnotated --no-headers 2>/dev/null | head -1 | sed 's/^/   event: /'

step "Migrate it to node-b: kubectl gpuckpt migrate"
BEFORE_MOVE=$(count_in gpu-counter)
say "counter on node-a just before the move: $BEFORE_MOVE"
show kubectl gpuckpt migrate gpu-counter --node node-b --name gpu-counter-moved --delete-source
MIGRATED=0
if KUBECTL=$K8S_BIN/kubectl KUBECONFIG=$KUBECONFIG GPUCKPT_NAMESPACE=$NS timeout 200 \
  bash "$SRC/kubectl-plugin/kubectl-gpuckpt" migrate gpu-counter -n default --node node-b --name gpu-counter-moved \
  --delete-source --stable 3 --wait 90 > "$TMP/migrate.txt" 2>&1; then
  MIGRATED=1
  sed 's/^/   /' "$TMP/migrate.txt"
else
  say "kubectl gpuckpt migrate did not work on this cluster; its last lines:"
  tail -n 6 "$TMP/migrate.txt" | sed 's/^/   | /'
  kubectl delete pod gpu-counter-moved --ignore-not-found --wait=true --timeout 60s > /dev/null || true
  say "doing its steps one by one from the kubelet's archive: to node-b's agent, loaded there as a checkpoint image"
  BEFORE_MOVE=$N_CKPT
  DEST=$(node_dir node-b)/host/var/lib/gpuckpt/checkpoints
  show cp "$ARCHIVE" "node-b:$VIEW/host/var/lib/gpuckpt/checkpoints/"
  mkdir -p "$DEST"
  cp "$ARCHIVE" "$DEST/"
  show kubectl -n $NS exec "$AGENT_B" -c agent -- gpuckpt image "$NAME" --tag gpuckpt-demo-moved --agent http://127.0.0.1:7469 --token-file $TOKEN_IN_POD
  kubectl -n "$NS" exec "$AGENT_B" -c agent -- gpuckpt image "$NAME" --tag gpuckpt-demo-moved --agent http://127.0.0.1:7469 \
    --token-file "$TOKEN_IN_POD" > "$TMP/image.txt" 2>&1 || die "gpuckpt image on node-b: $(cat "$TMP/image.txt")"
  CK_IMAGE=$(sed -n 's/^  image: *//p' "$TMP/image.txt")
  CK_PULL=$(sed -n 's/^  pull: *//p' "$TMP/image.txt")
  [ -n "$CK_IMAGE" ] || die "gpuckpt image printed no image: $(cat "$TMP/image.txt")"
  say "checkpoint image $CK_IMAGE (pull policy ${CK_PULL:-Never})"
  if kubectl get pod gpu-counter > /dev/null 2>&1; then
    show kubectl delete pod gpu-counter
    LAST=$(count_in gpu-counter)
    kubectl delete pod gpu-counter --wait=true --timeout 60s > /dev/null || die "kubectl delete pod gpu-counter"
    say "source pod deleted on node-a (its counter had reached $LAST)"
  fi
fi

step "Restore on node-b: a pod of the checkpoint image, restored by node-b's kubelet"
if [ "$MIGRATED" = 0 ]; then
k8s_gpu_counter_pod "$CK_IMAGE" "${CK_PULL:-Never}" node-b gpu-counter-moved | kubectl apply -f - > /dev/null ||
  die "kubectl apply of the restore pod"
fi
k8s_wait_pod default gpu-counter-moved 120 || die "the restore pod on node-b did not start"
[ "$(kubectl get pod gpu-counter-moved -o jsonpath='{.spec.nodeName}')" = node-b ] || die "gpu-counter-moved is not on node-b"
GPU_B=$(sed -n 's/^allocate //p' "${PLUGIN_LOG[node-b]}" | tail -1)
AFTER=$(count_in gpu-counter-moved)
[ "$AFTER" -ge "$BEFORE_MOVE" ] || die "the counter on node-b started over at $AFTER instead of continuing from $BEFORE_MOVE"
sleep 1
LATER=$(count_in gpu-counter-moved)
[ "$LATER" -gt "$AFTER" ] || die "the counter on node-b does not count ($AFTER, then $LATER)"
show kubectl get pod gpu-counter-moved -o wide
kubectl get pod gpu-counter-moved -o wide | awk '{print "   " $1, $2, $3, $7}'
say "node-b's kubelet allocated $GPU_B (the checkpoint had $GPU_A on node-a)"
say "counter: $BEFORE_MOVE on node-a before the move -> $AFTER on node-b after the restore -> $LATER a second later"
[ "$MIGRATED" = 1 ] && HOW="kubectl gpuckpt migrate" || HOW="single steps: kubectl gpuckpt migrate failed here"
say "moved by $HOW"
RESULT="the process continues on node-b: counter $BEFORE_MOVE on node-a before the move, $AFTER then $LATER on node-b ($HOW)"

step "Teardown: helm uninstall, the cluster stopped, this machine as it was"
helm --kubeconfig "$KUBECONFIG" uninstall "$RELEASE" -n "$NS" --wait --timeout 120s > "$TMP/helm-uninstall.txt" 2>&1 ||
  die "helm uninstall: $(cat "$TMP/helm-uninstall.txt")"
for p in "$PLUGIN_A" "$PLUGIN_B" "$REGISTRY_PID"; do
  if kill "$p" 2>/dev/null; then wait "$p" 2>/dev/null || true; fi
done
PLUGIN_A='' PLUGIN_B='' REGISTRY_PID=''
k8s_stop || die "k8s_stop failed"
podman rmi -f "$IMAGE_REPO:$IMAGE_TAG" > /dev/null 2>&1 || true
host_state > "$TMP/host-after.txt"
if ! diff "$TMP/host-before.txt" "$TMP/host-after.txt" > "$TMP/host-diff.txt"; then
  sed 's/^/   /' "$TMP/host-diff.txt"
  die "this machine is not as it was (diff above)"
fi
say "this machine's CRIU, hooks.d, gpuckpt and kubelet directories, NAT rules and bridges are as they were"
printf '   (step %d took %.1f s)\n' "$STEP" "$(( ($(now) - T_STEP) / 1000000 ))e-3"
printf '\ndemo OK in %.1f s: %s\n' "$(( ($(now) - T_START) / 1000000 ))e-3" "$RESULT"
