#!/usr/bin/env bash
# e2e (labels e2e, cluster): `helm install` of charts/gpuckpt on the real two-node cluster of
# scripts/lib/k8s-sandbox.sh, the agent running as the chart's DaemonSet (not as host processes):
#   1. the image of scripts/build-image.sh (podman, offline) is imported into each node's containerd
#      (ctr -n k8s.io images import; the chart's pullPolicy Never: no registry is asked);
#   2. helm install: the scheduler places one agent pod on each node, the init containers render the config and
#      install the host files (hook binary, hooks.d entries, CRIU plugin, its settings, the runtimes' CRIU config)
#      into that node's directories, and both pods pass their readiness probe. Every host path of the chart
#      points at per-node directories (K8S_NODE_VIEW: one path, a different directory on each node): this
#      machine's /usr/lib/criu, /etc/criu, hooks.d and /opt/gpuckpt are never written;
#   3. a pod with a simulated GPU (sim-device-plugin, the kubelet's device manager) is checkpointed through the
#      kubelet API (POST .../proxy/checkpoint through the API server); containerd's CRIU loads the plugin the
#      installer put on that node; the agent pod on that node annotates the kubelet's archive and posts the
#      CheckpointAnnotated Event with the chart's RBAC (`kubectl get events` shows it; no 403/forbidden in any
#      gpuckpt container's log);
#   4. helm upgrade with a changed value rolls the DaemonSet: new pods on both nodes, Ready, the old ones gone (the
#      old agent shut down on the kubelet's SIGTERM, not killed at the end of the grace period), the host files
#      still there (now owned by the new pods), and the new agent annotates the next kubelet checkpoint;
#   5. helm uninstall: the pods' preStop hooks remove the host files; the per-node directories hold none of
#      them afterwards.
# Times of each step (image build, import, install to Ready, upgrade, uninstall) are printed.
# Exit 0 pass, 77 skipped (no root, or setup.sh / setup-k8s.sh products absent), else fail. Every wait is bounded;
# cleanup always runs. KEEP=1 keeps the work dir.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/containerd-sandbox.sh"
. "$SRC/scripts/lib/k8s-sandbox.sh"
. "$SRC/scripts/lib/k8s-gpuckpt-chart.sh"
BUSYBOX=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
IMAGE_REPO=localhost/gpuckpt IMAGE_TAG=e2e-helm-$$
NS=gpuckpt RELEASE=gpuckpt

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - T0 ))"; }
since() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
T0=$(date +%s)

k8s_gpuckpt_ready "$BUSYBOX" || skip "$K8S_MISSING"
[ -x "$BUILD/agent/gpuckpt-agent" ] || fail "$BUILD is not built"

k8s_gpuckpt_workdir gckh   # TMP; VIEW, for K8S_NODE_VIEW: on each node, that node's work dir
# what must stay as it is on this machine (the chart's defaults would write there)
host_state() {
  for d in /usr/lib/criu /etc/criu /usr/share/containers/oci/hooks.d /var/lib/gpuckpt /opt/gpuckpt/bin \
    /etc/kubernetes/node-feature-discovery; do
    if [ -e "$d" ]; then find "$d" -maxdepth 2 -printf '%p %s %T@\n' 2>/dev/null | sort; else echo "$d absent"; fi
  done
}
host_state > "$TMP/host-before.txt"
PLUGIN_A='' PLUGIN_B='' LOGS_PID=''
cleanup() {
  set +e
  if [ -n "${K8S_WORK:-}" ] && [ "${KEEP:-0}" = 1 ]; then
    for p in $(k8s_kubectl -n "$NS" get pods -o name 2>/dev/null); do
      for c in agent nri host-files; do k8s_kubectl -n "$NS" logs "$p" -c "$c" > "$TMP/${p#pod/}-$c.log" 2>&1; done
    done
  fi
  k8s_gpuckpt_teardown "$IMAGE_REPO:$IMAGE_TAG" "$PLUGIN_A" "$PLUGIN_B" "$LOGS_PID"
}
trap cleanup EXIT

kubectl() { k8s_kubectl "$@"; }
node_dir() { echo "$TMP/cluster/nodes/$1"; }
# the host files the installer writes, as paths under a node's work dir (the chart's host paths below VIEW)
HOST_FILES=(host/opt/gpuckpt/bin/gpuckpt-oci-hook host/usr/lib/criu/gpuckpt_plugin.so host/usr/lib/criu/gpuckpt_plugin.env
  host/etc/criu/runc.conf host/etc/criu/crun.conf)
ds_pods() { kubectl -n "$NS" get pods -l app.kubernetes.io/name=gpuckpt -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.uid}{"\n"}{end}'; }
pod_on() { ds_pods | awk -v n="$1" '$2 == n {print $1}'; }
ds_ready() {  # ds_ready SECONDS: the DaemonSet rolled out, 2 pods Ready, one per node
  kubectl -n "$NS" rollout status daemonset/"$RELEASE" --timeout "${1}s" > /dev/null 2>&1 || {
    kubectl -n "$NS" get pods -o wide >&2
    for p in $(kubectl -n "$NS" get pods -o name); do kubectl -n "$NS" describe "$p" | tail -n 15 >&2
      for c in render-config install-host-files agent nri host-files; do
        echo "--- $p $c" >&2; kubectl -n "$NS" logs "$p" -c "$c" --tail 15 >&2 2>&1; done
    done
    return 1; }
  [ "$(kubectl -n "$NS" get daemonset "$RELEASE" -o jsonpath='{.status.numberReady}')" = 2 ] || return 1
  [ "$(ds_pods | awk '{print $2}' | sort -u | wc -l)" = 2 ] || return 1
}
no_forbidden() {  # no 403 or "forbidden" in any gpuckpt container's log
  local p c
  for p in $(kubectl -n "$NS" get pods -o name); do
    for c in agent nri host-files; do
      if kubectl -n "$NS" logs "$p" -c "$c" 2>/dev/null | grep -iE '\b403\b|forbidden'; then
        fail "$p container $c logged a 403/forbidden: the chart's RBAC does not cover what it did"
      fi
    done
  done
}
host_files_present() {  # host_files_present NODE
  local f
  for f in "${HOST_FILES[@]}"; do [ -s "$(node_dir "$1")/$f" ] || fail "node $1 has no $f (the installer writes it)"; done
  ls "$(node_dir "$1")/host/hooks.d"/gpuckpt-hook*.json > /dev/null 2>&1 || fail "node $1 has no hooks.d entry"
  grep -qx "libdir $VIEW/host/usr/lib/criu" "$(node_dir "$1")/host/etc/criu/runc.conf" ||
    fail "node $1's runc.conf does not point CRIU at the installed plugin"
}
checkpoint_annotated() {  # checkpoint_annotated POD NODE: kubelet checkpoint; the node's agent pod annotates it
  local pod=$1 node=$2 agent archive
  k8s_kubelet_checkpoint "$node" default "$pod" counter || fail "$K8S_CHECKPOINT_ERROR"
  archive=$K8S_ARCHIVE
  agent=$(pod_on "$node")
  # the agent names it by the chart's host path (K8S_NODE_VIEW/kubelet/checkpoints), the kubelet by its root dir
  for _ in $(seq 100); do kubectl -n "$NS" logs "$agent" -c agent 2>/dev/null | grep -qF "annotated kubelet archive $VIEW/kubelet/checkpoints/$(basename "$archive")" && break; sleep 0.2; done
  kubectl -n "$NS" logs "$agent" -c agent | grep -F "annotated kubelet archive $VIEW/kubelet/checkpoints/$(basename "$archive")" ||
    fail "agent pod $agent did not annotate $archive: $(kubectl -n "$NS" logs "$agent" -c agent --tail 5)"
  tar -tf "$archive" | grep -qx gpuckpt-gpus.json || fail "$archive has no gpuckpt-gpus.json after the agent's annotation"
  for _ in $(seq 50); do
    kubectl get events -n default --field-selector "involvedObject.name=$pod,reason=CheckpointAnnotated" -o name | grep -q . && break
    sleep 0.2
  done
  kubectl get events -n default --field-selector "involvedObject.name=$pod,reason=CheckpointAnnotated" | grep CheckpointAnnotated ||
    fail "no CheckpointAnnotated Event on $pod in kubectl get events"
  ARCHIVE=$archive
}

step "1. the image (scripts/build-image.sh, offline) and the cluster (two nodes, each its own directories)"
t=$(date +%s.%N)
BUILD_DIR=$BUILD bash "$SRC/scripts/build-image.sh" "$IMAGE_REPO:$IMAGE_TAG" 2>&1 | tail -1 || fail "scripts/build-image.sh failed"
podman image exists "$IMAGE_REPO:$IMAGE_TAG" || fail "scripts/build-image.sh made no $IMAGE_REPO:$IMAGE_TAG"
BUILD_SECONDS=$(since "$t")
podman save -q --format oci-archive -o "$TMP/gpuckpt-image.tar" "$IMAGE_REPO:$IMAGE_TAG" || fail "podman save"
echo "ok: $IMAGE_REPO:$IMAGE_TAG built in ${BUILD_SECONDS}s ($(stat -c %s "$TMP/gpuckpt-image.tar") bytes as an OCI archive)"

export K8S_NODE_VIEW=$VIEW
# containerd -> runc -> CRIU runs in the node's mount namespace: it loads its plugins from the directory the
# chart's installer fills on that node (nothing is there before helm install)
export CRIU_LIBS_DIR=$VIEW/host/usr/lib/criu
k8s_start_control_plane "$TMP/cluster" || fail "the control plane did not start"
k8s_service_proxy || fail "no route from pods to the API server"
echo "ok: control plane in ${K8S_CONTROL_PLANE_SECONDS}s"
IMPORT_SECONDS=''
for n in node-a node-b; do
  k8s_add_node "$n" || fail "node $n did not start"
  echo "ok: node $n Ready in ${K8S_NODE_SECONDS}s"
  k8s_node_ctrd "$n"
  ctrd_import_image "$BUSYBOX" || fail "cannot import $BUSYBOX into $n's containerd"
  t=$(date +%s.%N)
  ctrd_ctr images import "$TMP/gpuckpt-image.tar" > /dev/null || fail "ctr images import into $n's containerd"
  IMPORT_SECONDS="$IMPORT_SECONDS $n $(since "$t")s"
  # what GPU feature discovery labels on a GPU node (the chart's default node affinity)
  kubectl label node "$n" nvidia.com/gpu.present=true > /dev/null
  mkdir -p "$TMP/gpus-$n"
done
echo "ok: $IMAGE_REPO:$IMAGE_TAG imported into each node's containerd:$IMPORT_SECONDS"
# simulated GPUs, two a node, allocated by each kubelet's device manager
for i in 0 1; do mknod "$TMP/gpus-node-a/nvidia$i" c 1 $(( 3 + 2 * i )); mknod "$TMP/gpus-node-b/nvidia$i" c 1 $(( 3 + 2 * i )); done
"$K8S_BIN/sim-device-plugin" --registry-dir "$(node_dir node-a)/kubelet/plugins_registry" \
  --device "GPU-a0000000-0000-0000-0000-000000000000=0:$TMP/gpus-node-a/nvidia0" \
  --device "GPU-a1111111-1111-1111-1111-111111111111=1:$TMP/gpus-node-a/nvidia1" > "$TMP/plugin-a.log" 2>&1 &
PLUGIN_A=$!
"$K8S_BIN/sim-device-plugin" --registry-dir "$(node_dir node-b)/kubelet/plugins_registry" \
  --device "GPU-b0000000-0000-0000-0000-000000000000=0:$TMP/gpus-node-b/nvidia0" \
  --device "GPU-b1111111-1111-1111-1111-111111111111=1:$TMP/gpus-node-b/nvidia1" > "$TMP/plugin-b.log" 2>&1 &
PLUGIN_B=$!

step "2. helm install: one agent pod per node, host files installed, readiness"
k8s_gpuckpt_values "$TMP/values.yaml" "$VIEW" "$IMAGE_REPO" "$IMAGE_TAG"
t=$(date +%s.%N)
helm --kubeconfig "$KUBECONFIG" install "$RELEASE" "$SRC/charts/gpuckpt" -n "$NS" --create-namespace \
  -f "$TMP/values.yaml" > "$TMP/helm-install.txt" 2>&1 || fail "helm install: $(cat "$TMP/helm-install.txt")"
ds_ready 240 || fail "the DaemonSet did not become Ready on both nodes"
INSTALL_SECONDS=$(since "$t")
ds_pods | tee "$TMP/pods-1.txt"
for n in node-a node-b; do
  [ -n "$(pod_on "$n")" ] || fail "no agent pod on $n"
  host_files_present "$n"
done
echo "ok: helm install -> 2 pods Ready (one per node) in ${INSTALL_SECONDS}s; each node's directories hold the hook, its hooks.d entries, the CRIU plugin, its settings and the runtimes' CRIU config"

step "3. a kubelet checkpoint of a simulated-GPU pod, annotated by the agent pod of its node; Events; RBAC"
k8s_gpu_counter_pod "$BUSYBOX" Never node-a | kubectl apply -f - > /dev/null || fail "kubectl apply of the GPU pod"
k8s_wait_pod default gpu-counter 90 || fail "the GPU pod did not start"
grep -q '^allocate ' "$TMP/plugin-a.log" || fail "node-a's kubelet allocated no simulated GPU: $(cat "$TMP/plugin-a.log")"
checkpoint_annotated gpu-counter node-a
ARCHIVE_1=$ARCHIVE
# CRIU under containerd loaded the plugin the installer put on node-a (it logs into the dump log)
no_forbidden
echo "ok: $(basename "$ARCHIVE_1") annotated by $(pod_on node-a); CheckpointAnnotated Event posted; no 403/forbidden in the pods' logs"

step "4. helm upgrade: the DaemonSet rolls, the new agents work"
# the old agent's log to its end: it must stop on the kubelet's SIGTERM through its own shutdown
OLD_AGENT=$(pod_on node-a)
kubectl -n "$NS" logs -f "$OLD_AGENT" -c agent > "$TMP/old-agent.log" 2>&1 &
LOGS_PID=$!
t=$(date +%s.%N)
helm --kubeconfig "$KUBECONFIG" upgrade "$RELEASE" "$SRC/charts/gpuckpt" -n "$NS" -f "$TMP/values.yaml" \
  --set agent.logLevel=debug > "$TMP/helm-upgrade.txt" 2>&1 || fail "helm upgrade: $(cat "$TMP/helm-upgrade.txt")"
for _ in $(seq 150); do
  [ "$(kubectl -n "$NS" get daemonset "$RELEASE" -o jsonpath='{.status.updatedNumberScheduled}')" = 2 ] && break
  sleep 0.2
done
ds_ready 240 || fail "the DaemonSet did not roll out after helm upgrade"
# the old pods are gone, not only replaced (their containers stop on SIGTERM, not at the end of the grace period)
for _ in $(seq 300); do [ "$(ds_pods | wc -l)" = 2 ] && break; sleep 0.2; done
[ "$(ds_pods | wc -l)" = 2 ] || fail "old agent pods still there after the rollout: $(kubectl -n "$NS" get pods)"
UPGRADE_SECONDS=$(since "$t")
ds_pods | tee "$TMP/pods-2.txt"
while read -r _ _ uid; do grep -q "$uid" "$TMP/pods-2.txt" && fail "pod $uid of the install survived the upgrade"; done < "$TMP/pods-1.txt"
for _ in $(seq 50); do kill -0 "$LOGS_PID" 2>/dev/null || break; sleep 0.2; done
grep -q "signal Terminated: shutting down" "$TMP/old-agent.log" ||
  fail "the old agent $OLD_AGENT did not shut down on SIGTERM: $(tail -3 "$TMP/old-agent.log")"
for n in node-a node-b; do host_files_present "$n"; done
checkpoint_annotated gpu-counter node-a
no_forbidden
echo "ok: helm upgrade -> both pods replaced and Ready in ${UPGRADE_SECONDS}s (the old agent shut down on SIGTERM); host files in place; the new agent annotated $(basename "$ARCHIVE")"

step "5. helm uninstall: the installer's files leave the nodes"
t=$(date +%s.%N)
helm --kubeconfig "$KUBECONFIG" uninstall "$RELEASE" -n "$NS" --wait --timeout 120s > "$TMP/helm-uninstall.txt" 2>&1 ||
  fail "helm uninstall: $(cat "$TMP/helm-uninstall.txt")"
for _ in $(seq 300); do [ -z "$(ds_pods)" ] && break; sleep 0.2; done
[ -z "$(ds_pods)" ] || fail "agent pods left after helm uninstall: $(ds_pods)"
UNINSTALL_SECONDS=$(since "$t")
for n in node-a node-b; do
  for f in "${HOST_FILES[@]}"; do [ ! -e "$(node_dir "$n")/$f" ] || fail "node $n still has $f after helm uninstall"; done
  ! ls "$(node_dir "$n")/host/hooks.d"/gpuckpt-hook*.json > /dev/null 2>&1 || fail "node $n still has a gpuckpt hooks.d entry"
done
[ -f "$ARCHIVE_1" ] || fail "the kubelet's archive $ARCHIVE_1 is gone after helm uninstall"
host_state > "$TMP/host-after.txt"
diff "$TMP/host-before.txt" "$TMP/host-after.txt" || fail "this machine's own CRIU/hooks/gpuckpt directories changed"
echo "ok: helm uninstall in ${UNINSTALL_SECONDS}s; no installer file left on either node; the archives stay; this machine's /usr/lib/criu, /etc/criu, hooks.d untouched"

step "done"
echo "times: image build ${BUILD_SECONDS}s, import${IMPORT_SECONDS}, install to Ready ${INSTALL_SECONDS}s, upgrade ${UPGRADE_SECONDS}s, uninstall ${UNINSTALL_SECONDS}s"
echo "1 passed, 0 failed"
