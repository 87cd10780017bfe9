#!/usr/bin/env bash
# e2e (labels e2e, cluster): `kubectl gpuckpt migrate` given wrong input and a hostile path, on the real two-node
# cluster of scripts/lib/k8s-sandbox.sh with the chart's DaemonSet (as scripts/demo-cluster.sh sets it up; four
# simulated GPUs a node). Each failing case must exit non-zero with an error that names what went wrong and what to
# do, and lose nothing: the source pod still Running on node-a and counting, no containerd task left paused on either
# node, the archive a checkpoint made still on node-a, no archive under its final name and no pod copy left on node-b.
#   1. wrong names: a pod that does not exist, a node that does not exist;
#   2. a target without a free GPU: node-b's four GPUs held by another pod (the kubelet would refuse the copy);
#   3. an archive tampered with in transit: the agent-to-agent push (plain HTTP between the pods) goes through a hop
#      that flips a byte of every PUT body (test/k8s/transfer_hop.py, reached by an iptables DNAT rule for the target
#      agent's pod IP): the target must refuse it at the commit's SHA-256;
#   4. the target's agent pod deleted while the archive is on its way (the hop slows the push down so that the
#      deletion lands inside it); then, the hop gone and the DaemonSet's new agent Ready, the same migrate with
#      --delete-source succeeds and the counter continues on node-b: nothing was lost and "run it again" works;
#   5. owner references: the pod of a Deployment (and of a StatefulSet) is refused for --delete-source, naming the
#      owner, before anything is checkpointed; without --delete-source the Deployment's pod and a bare ReplicaSet's
#      pod are migrated to a copy that the owner does not adopt (the copy keeps running, the owner keeps its pod);
#   6. helm upgrade in the middle of a checkpoint job: `kubectl gpuckpt checkpoint` of a pod holding 128 MiB more
#      (so that its dump takes seconds), and while its job runs a helm upgrade that replaces both agent pods at once
#      (maxUnavailable 2, no surge: node-a's agent gets its SIGTERM inside the job). The job succeeds (the old pod's
#      host files stay until its agent ended the job) and its archive is on node-a, whole; no container is left
#      paused, the pod counts on.
# Every case prints its exit code, time and error line; the summary at the end lists them.
# MIGRATE_HOSTILE_CASES="1 5" runs only those cases (each stands alone); KUBECTL_GPUCKPT=FILE runs another
# kubectl-gpuckpt (an older one, to see which of these it fails).
# Exit 0 pass, 77 skipped (no root, or setup.sh / setup-k8s.sh products absent), else fail. KEEP=1 keeps the work dir.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/containerd-sandbox.sh"
. "$SRC/scripts/lib/k8s-sandbox.sh"
. "$SRC/scripts/lib/k8s-gpuckpt-chart.sh"
BUSYBOX=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
IMAGE_REPO=localhost/gpuckpt IMAGE_TAG=e2e-migrate-$$
NS=gpuckpt RELEASE=gpuckpt AGENT_PORT=7469

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - T0 ))"; }
CASES=" ${MIGRATE_HOSTILE_CASES:-1 2 3 4 5 6} "
run_case() { [[ "$CASES" == *" $1 "* ]]; }
since() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }
T0=$(date +%s)

k8s_gpuckpt_ready "$BUSYBOX" || skip "$K8S_MISSING"
[ -x "$BUILD/agent/gpuckpt-agent" ] || fail "$BUILD is not built"

k8s_gpuckpt_workdir gckm   # TMP; VIEW, for K8S_NODE_VIEW: on each node, that node's work dir
PLUGIN_A='' PLUGIN_B='' HOP_PID='' HOP_RULE=() DELETE_PID='' LOGS_PID='' CK_PID=''
cleanup() {
  set +e
  if [ -n "${K8S_WORK:-}" ] && [ "${KEEP:-0}" = 1 ]; then
    for p in $(k8s_kubectl -n "$NS" get pods -o name 2>/dev/null); do
      k8s_kubectl -n "$NS" logs "$p" -c agent > "$TMP/${p#pod/}-agent.log" 2>&1
    done
  fi
  [ ${#HOP_RULE[@]} -gt 0 ] && iptables -t nat -D "${HOP_RULE[@]}" 2>/dev/null
  k8s_gpuckpt_teardown "$IMAGE_REPO:$IMAGE_TAG" "$HOP_PID" "$DELETE_PID" "$LOGS_PID" "$CK_PID" "$PLUGIN_A" "$PLUGIN_B" \
    "${REGISTRY_PID:-}"
}
trap cleanup EXIT

kubectl() { k8s_kubectl "$@"; }
node_dir() { echo "$TMP/cluster/nodes/$1"; }
archive_dir() { echo "$(node_dir "$1")/host/var/lib/gpuckpt/checkpoints"; }   # the chart's host.archiveDir on NODE
agent_on() { kubectl -n "$NS" get pods -l app.kubernetes.io/name=gpuckpt --field-selector "spec.nodeName=$1,status.phase=Running" -o jsonpath='{.items[0].metadata.name}'; }
count_in() { k8s_pod_count "$1" || fail "no counter value in pod $1"; }
# workload KIND NAME NODE [GPUS [MIB]]: the tests' GPU pod (k8s_gpu_counter_pod) as KIND (Pod, Deployment,
# ReplicaSet, StatefulSet) named NAME, pinned to NODE, asking for GPUS simulated GPUs (default 1), its shell holding
# MIB MiB more memory (default 0: a checkpoint of it takes that much longer); labels app=NAME
workload() {
  # shellcheck disable=SC2016 # python, not shell
  k8s_gpu_counter_pod "$BASE" IfNotPresent "$3" | python3 -c '
import sys, yaml
kind, name, gpus, mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pod = yaml.safe_load(sys.stdin)
for c in pod["spec"]["containers"]:
    c["resources"]["limits"]["nvidia.com/gpu"] = gpus
    if mib:
        c["command"][-1] = f"ballast=$(head -c {mib << 20} /dev/zero | tr \"\\\\0\" x); " + c["command"][-1]
labels = {"app": name}
if kind == "Pod":
    pod["metadata"].update(name=name, labels=labels)
    out = pod
else:
    spec = dict(pod["spec"], restartPolicy="Always")   # what a controller requires of its template
    out = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"},
           "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": spec}}}
    if kind == "StatefulSet":
        out["spec"]["serviceName"] = name
yaml.safe_dump(out, sys.stdout)' "$1" "$2" "${4:-1}" "${5:-0}" | kubectl apply -f - > /dev/null || fail "kubectl apply of $1 $2"
}
pod_of() { kubectl get pods -l "app=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep -v -- '-migrated$' | head -n 1; }

# mig ARGS...: kubectl gpuckpt ARGS; its output in $TMP/mig.txt (printed); sets RC and SECS
mig() {
  local t
  t=$(date +%s.%N)
  RC=0
  KUBECTL=$K8S_BIN/kubectl KUBECONFIG=$KUBECONFIG GPUCKPT_NAMESPACE=$NS timeout 200 \
    bash "${KUBECTL_GPUCKPT:-$SRC/kubectl-plugin/kubectl-gpuckpt}" "$@" > "$TMP/mig.txt" 2>&1 || RC=$?
  SECS=$(since "$t")
  sed 's/^/   | /' "$TMP/mig.txt"
  echo "   (exit $RC in ${SECS}s)"
}
RESULTS=()
# outcome CASE WANT_RC PATTERN: the migrate exited WANT_RC with an error line matching PATTERN (grep -E)
outcome() {
  local name=$1 want=$2 pattern=$3 line matched
  [ "$RC" = "$want" ] || fail "$name: kubectl gpuckpt exited $RC, want $want"
  matched=$(grep -m1 -E -- "$pattern" "$TMP/mig.txt") || fail "$name: no line matches /$pattern/ in its output"
  line=$(grep -m1 '^error: ' "$TMP/mig.txt" || true)
  [ "$line" != "$matched" ] || line=""
  RESULTS+=("$name: exit $RC in ${SECS}s: $matched${line:+ | $line}")
}
no_paused_tasks() {  # no containerd task paused on either node (a checkpoint pauses the container while it dumps)
  local n
  for n in node-a node-b; do
    k8s_node_ctrd "$n"
    if ctrd_ctr tasks ls | awk 'NR > 1 && $3 != "RUNNING" && $3 != "STOPPED"' | grep .; then
      fail "$1: a task in $n's containerd is not running (left paused?)"
    fi
  done
}
source_ok() {  # source_ok CASE POD: Running on node-a, counting, its task RUNNING in node-a's containerd
  local a b cid status
  [ "$(kubectl get pod "$2" -o jsonpath='{.status.phase} {.spec.nodeName}')" = "Running node-a" ] ||
    fail "$1: the source pod $2 is not Running on node-a: $(kubectl get pod "$2" -o wide 2>&1 | tail -1)"
  a=$(count_in "$2"); sleep 0.5; b=$(count_in "$2")
  [ "$b" -gt "$a" ] || fail "$1: the source pod $2 does not count ($a, then $b)"
  cid=$(kubectl get pod "$2" -o jsonpath='{.status.containerStatuses[0].containerID}')
  k8s_node_ctrd node-a
  status=$(ctrd_ctr tasks ls | awk -v id="${cid#containerd://}" '$1 == id {print $3}')
  [ "$status" = RUNNING ] || fail "$1: the source's task is '$status' in node-a's containerd, not RUNNING"
  no_paused_tasks "$1"
}
# lost_nothing CASE: after a failed migrate of gpu-counter to node-b
lost_nothing() {
  local made f
  source_ok "$1" gpu-counter
  # the archive the migrate reported on node-a is still there
  made=$(sed -n 's/^ *archive node-a:\(\/.*\)$/\1/p' "$TMP/mig.txt")
  if [ -n "$made" ]; then
    [ -f "$(node_dir node-a)/${made#"$VIEW"/}" ] || fail "$1: the archive $made on node-a is gone"
    echo "   the archive $(basename "$made") stays on node-a"
  fi
  # nothing under a final name on node-b (a partial .NAME.incoming is the target's to resume or expire)
  for f in "$(archive_dir node-b)"/.[!.]* "$(archive_dir node-b)"/*; do
    [ -e "$f" ] || continue
    case ${f##*/} in .*) echo "   node-b keeps the partial ${f##*/} (resumed by the next push of that name, or expired)" ;;
      *) fail "$1: node-b holds ${f##*/} after a failed migrate" ;; esac
  done
  # no copy of the pod on node-b: none created, or the one created deleted again
  for _ in $(seq 50); do kubectl get pod gpu-counter-migrated > /dev/null 2>&1 || break; sleep 0.2; done
  ! kubectl get pod gpu-counter-migrated > /dev/null 2>&1 ||
    fail "$1: the copy gpu-counter-migrated was left: $(kubectl get pod gpu-counter-migrated -o wide | tail -1)"
}
whole_archive() {  # whole_archive FILE: a checkpoint archive tar reads to its end, CRIU's inventory in it
  local list
  list=$(tar -tf "$1" 2>/dev/null) || return 1
  grep -qx 'checkpoint/inventory.img' <<< "$list"
}
# hop MODE: the source agent's connections to node-b's agent pod go through transfer_hop.py MODE
hop() {
  local port
  port=$(k8s_free_port)
  python3 "$SRC/test/k8s/transfer_hop.py" "$1" "$port" "$AGENT_B_IP" "$AGENT_PORT" "$TMP/hop-$1.log" 24576 &
  HOP_PID=$!
  for _ in $(seq 50); do grep -q '^listening' "$TMP/hop-$1.log" 2>/dev/null && break; sleep 0.1; done
  grep -q '^listening' "$TMP/hop-$1.log" || fail "transfer_hop.py $1 does not listen"
  HOP_RULE=(PREROUTING -s 10.88.1.0/24 -d "$AGENT_B_IP/32" -p tcp --dport "$AGENT_PORT"
    -m comment --comment "gpuckpt-migrate-hostile $$" -j DNAT --to-destination "$K8S_NODE_IP:$port")
  iptables -t nat -I "${HOP_RULE[@]}" || { HOP_RULE=(); fail "iptables cannot add the hop's DNAT rule"; }
}
no_hop() {
  [ ${#HOP_RULE[@]} -eq 0 ] || iptables -t nat -D "${HOP_RULE[@]}"
  HOP_RULE=()
  if [ -n "$HOP_PID" ]; then kill "$HOP_PID" 2>/dev/null; wait "$HOP_PID" 2>/dev/null || true; fi
  HOP_PID=''
}

step "the image, the cluster (node-a, node-b: four simulated GPUs each), helm install"
BUILD_DIR=$BUILD bash "$SRC/scripts/build-image.sh" "$IMAGE_REPO:$IMAGE_TAG" 2>&1 | tail -1 || fail "scripts/build-image.sh failed"
podman save -q --format oci-archive -o "$TMP/gpuckpt-image.tar" "$IMAGE_REPO:$IMAGE_TAG" || fail "podman save"
export K8S_NODE_VIEW=$VIEW
export CRIU_LIBS_DIR=$VIEW/host/usr/lib/criu
k8s_start_control_plane "$TMP/cluster" || fail "the control plane did not start"
k8s_service_proxy || fail "no route from pods to the API server"
# containerd 2.x pulls a checkpoint's base image again by its rootfsImageRef when it restores: a local registry
k8s_start_registry "$TMP/registry" || fail "docker-registry did not start"
BASE=$REGISTRY/gpuckpt-busybox:latest
podman push -q --tls-verify=false "$BUSYBOX" "docker://$BASE" || fail "podman push $BUSYBOX to $BASE"
for n in node-a node-b; do
  k8s_add_node "$n" || fail "node $n did not start"
  k8s_node_ctrd "$n"
  ctrd_registry_host "$REGISTRY"
  ctrd_ctr images import "$TMP/gpuckpt-image.tar" > /dev/null || fail "ctr images import into $n's containerd"
  kubectl label node "$n" nvidia.com/gpu.present=true > /dev/null
  s=${n#node-}
  mkdir -p "$TMP/gpus-$n"
  devices=()
  for i in 0 1 2 3; do
    mknod "$TMP/gpus-$n/nvidia$i" c 1 3
    devices+=(--device "GPU-$s$i$i$i$i$i$i$i-0000-0000-0000-000000000000=$i:$TMP/gpus-$n/nvidia$i")
  done
  "$K8S_BIN/sim-device-plugin" --registry-dir "$(node_dir "$n")/kubelet/plugins_registry" "${devices[@]}" \
    > "$TMP/plugin-$n.log" 2>&1 &
  if [ "$n" = node-a ]; then PLUGIN_A=$!; else PLUGIN_B=$!; fi
done
for n in node-a node-b; do
  k8s_wait_gpus "$n" 4 ||
    fail "$n does not offer 4 nvidia.com/gpu: $(cat "$TMP/plugin-$n.log")"
done
k8s_gpuckpt_values "$TMP/values.yaml" "$VIEW" "$IMAGE_REPO" "$IMAGE_TAG"
helm --kubeconfig "$KUBECONFIG" install "$RELEASE" "$SRC/charts/gpuckpt" -n "$NS" --create-namespace \
  -f "$TMP/values.yaml" > "$TMP/helm-install.txt" 2>&1 || fail "helm install: $(cat "$TMP/helm-install.txt")"
# the workloads start while the DaemonSet rolls out
workload Pod gpu-counter node-a
workload Deployment gpu-deploy node-a
workload ReplicaSet gpu-rs node-a
workload StatefulSet gpu-sts node-a
kubectl -n "$NS" rollout status daemonset/"$RELEASE" --timeout 240s > /dev/null 2>&1 ||
  fail "the DaemonSet did not become Ready: $(kubectl -n "$NS" get pods -o wide)"
AGENT_B=$(agent_on node-b)
AGENT_B_IP=$(kubectl -n "$NS" get pod "$AGENT_B" -o jsonpath='{.status.podIP}')
k8s_wait_pod default gpu-counter 90 || fail "gpu-counter did not start"
for w in gpu-deploy gpu-rs gpu-sts; do
  for _ in $(seq 100); do [ -n "$(pod_of "$w")" ] && break; sleep 0.2; done
  k8s_wait_pod default "$(pod_of "$w")" 90 || fail "the pod of $w did not start"
done
echo "ok: agents $(agent_on node-a) and $AGENT_B ($AGENT_B_IP) Ready; gpu-counter and the pods of gpu-deploy, gpu-rs, gpu-sts Running on node-a"

if run_case 1; then
step "1. wrong names: no such pod, no such node"
mig migrate no-such-pod -n default --node node-b
outcome "no such pod" 1 'pod default/no-such-pod not found'
lost_nothing "no such pod"
mig migrate gpu-counter -n default --node node-c
outcome "no such node" 1 "node node-c not found \('kubectl get nodes' lists them\)"
lost_nothing "no such node"
[ -z "$(ls -A "$(archive_dir node-a)" 2>/dev/null)" ] || fail "a wrong name made a checkpoint on node-a: $(ls "$(archive_dir node-a)")"
echo "ok: both refused before anything was checkpointed"
fi

if run_case 2; then
step "2. a target without a free GPU: node-b's four GPUs held by gpu-hog"
workload Pod gpu-hog node-b 4
k8s_wait_pod default gpu-hog 90 || fail "gpu-hog did not start"
mig migrate gpu-counter -n default --node node-b --delete-source --stable 2 --wait 60
outcome "no free GPU on the target" 3 'node-b has 0 of 4 nvidia.com/gpu free'
lost_nothing "no free GPU on the target"
kubectl delete pod gpu-hog --wait=true --timeout 60s > /dev/null
echo "ok: refused, nothing left on node-b"
fi

if run_case 3; then
step "3. an archive tampered with on its way: a hop that flips a byte of every PUT body"
hop flip
mig migrate gpu-counter -n default --node node-b --delete-source --stable 2 --wait 60
grep -q '^flipped ' "$TMP/hop-flip.log" || fail "the hop flipped nothing (did the push go around it?): $(cat "$TMP/hop-flip.log")"
outcome "archive tampered in transit" 1 'sha256|SHA-256'
lost_nothing "archive tampered in transit"
no_hop
echo "ok: the target refused the tampered archive ($(grep -c '^flipped ' "$TMP/hop-flip.log") PUT bodies flipped)"
fi

if run_case 4; then
step "4. node-b's agent pod deleted while the archive is on its way; then the same migrate again"
hop slow
mig_bg_out=$TMP/mig-restart.txt
( for _ in $(seq 300); do grep -q '^slow ' "$TMP/hop-slow.log" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  echo "deleting $AGENT_B at $(date +%T.%N)" >> "$TMP/hop-slow.log"
  k8s_kubectl -n "$NS" delete pod "$AGENT_B" --wait=false > /dev/null ) &
DELETE_PID=$!
mig migrate gpu-counter -n default --node node-b --delete-source --stable 2 --wait 60
wait "$DELETE_PID" || true
DELETE_PID=''
cp "$TMP/mig.txt" "$mig_bg_out"
grep -q "^deleting $AGENT_B" "$TMP/hop-slow.log" || fail "the agent pod was not deleted during the push: $(cat "$TMP/hop-slow.log")"
outcome "target agent restarted mid-transfer" 1 'moving .* failed'
no_hop
kubectl -n "$NS" rollout status daemonset/"$RELEASE" --timeout 120s > /dev/null 2>&1 || fail "no new agent on node-b"
lost_nothing "target agent restarted mid-transfer"
AGENT_B=$(agent_on node-b)
echo "ok: the push failed with the agent gone; $AGENT_B replaces it"
BEFORE=$(count_in gpu-counter)
mig migrate gpu-counter -n default --node node-b --delete-source --stable 2 --wait 90
outcome "the same migrate again" 0 'restored on node-b as pod default/gpu-counter-migrated'
AFTER=$(count_in gpu-counter-migrated)
[ "$(kubectl get pod gpu-counter-migrated -o jsonpath='{.spec.nodeName}')" = node-b ] || fail "gpu-counter-migrated is not on node-b"
[ "$AFTER" -ge "$BEFORE" ] || fail "the counter on node-b started over at $AFTER (it was at $BEFORE on node-a)"
! kubectl get pod gpu-counter > /dev/null 2>&1 || fail "--delete-source left gpu-counter on node-a"
echo "ok: moved on the second try: counter $BEFORE on node-a before, $AFTER on node-b after"
fi

if run_case 5; then
step "5. owner references: a Deployment's, a ReplicaSet's and a StatefulSet's pod"
n_archives() { local f n=0; for f in "$(archive_dir node-a)"/*; do [ -e "$f" ] && n=$((n + 1)); done; echo "$n"; }
DEPLOY_POD=$(pod_of gpu-deploy)
had=$(n_archives)
mig migrate "$DEPLOY_POD" -n default --node node-b --delete-source
outcome "Deployment pod, --delete-source" 2 "is owned by Deployment/gpu-deploy \(through ReplicaSet/gpu-deploy-[a-z0-9]+\), which recreates it"
grep -q -- '--force-owned' "$TMP/mig.txt" || fail "the refusal does not name --force-owned"
mig migrate gpu-sts-0 -n default --node node-b --delete-source
outcome "StatefulSet pod, --delete-source" 2 'is owned by StatefulSet/gpu-sts, which recreates it'
[ "$(n_archives)" = "$had" ] || fail "a refused migrate checkpointed on node-a"
! kubectl get pod "$DEPLOY_POD-migrated" gpu-sts-0-migrated > /dev/null 2>&1 || fail "a refused migrate created a copy"
echo "ok: both refused before a checkpoint, naming the owner"
# without --delete-source the owner's pod stays and the copy must stand alone: a controller adopts every orphan its
# selector matches and deletes one pod of the two
for w in gpu-deploy gpu-rs; do
  src=$(pod_of "$w")
  mig migrate "$src" -n default --node node-b --wait 90
  outcome "$w pod, no --delete-source" 0 "WARNING: default/$src is owned by"
  sleep 5   # the ReplicaSet controller's resync of an adopted orphan is immediate; give it time to act
  kubectl get pod "$src-migrated" > /dev/null 2>&1 || fail "$w: its owner deleted the copy $src-migrated"
  owners=$(kubectl get pod "$src-migrated" -o jsonpath='{.metadata.ownerReferences}')
  [ -z "$owners" ] || fail "$w: the copy $src-migrated was adopted: $owners"
  k8s_wait_pod default "$src-migrated" 10 || fail "$w: the copy is not Running"
  kubectl get pod "$src" > /dev/null 2>&1 || fail "$w: the owner's pod $src is gone"
  [ "$(pod_of "$w")" = "$src" ] || fail "$w: the owner replaced its pod $src by $(pod_of "$w")"
  echo "ok: $w: the copy $src-migrated runs on node-b unowned; $src stays with its owner"
done
fi

if run_case 6; then
step "6. helm upgrade in the middle of a checkpoint job"
workload Pod gpu-big node-a 0 128
k8s_wait_pod default gpu-big 90 || fail "gpu-big did not start"
for _ in $(seq 300); do kubectl exec gpu-big -c counter -- test -s /tmp/count 2>/dev/null && break; sleep 0.2; done
old_agent=$(agent_on node-a)
kubectl -n "$NS" logs -f "$old_agent" -c agent > "$TMP/old-agent-a.log" 2>&1 &
LOGS_PID=$!
( mig checkpoint gpu-big -n default; cp "$TMP/mig.txt" "$TMP/ck-upgrade.txt"; echo "$RC $SECS" > "$TMP/ck-upgrade.rc" ) &
CK_PID=$!
for _ in $(seq 150); do grep -q 'job ck-.*accepted' "$TMP/old-agent-a.log" 2>/dev/null && break; sleep 0.1; done
grep -q 'job ck-.*accepted' "$TMP/old-agent-a.log" || fail "no checkpoint job started on $old_agent: $(tail -5 "$TMP/old-agent-a.log")"
t=$(date +%s.%N)
helm --kubeconfig "$KUBECONFIG" upgrade "$RELEASE" "$SRC/charts/gpuckpt" -n "$NS" -f "$TMP/values.yaml" \
  --set agent.logLevel=debug --set updateStrategy.rollingUpdate.maxSurge=0 \
  --set updateStrategy.rollingUpdate.maxUnavailable=2 > "$TMP/helm-upgrade.txt" 2>&1 ||
  fail "helm upgrade: $(cat "$TMP/helm-upgrade.txt")"
wait "$CK_PID" || true
read -r CK_RC CK_SECS < "$TMP/ck-upgrade.rc"
kubectl -n "$NS" rollout status daemonset/"$RELEASE" --timeout 180s > /dev/null 2>&1 || fail "the DaemonSet did not roll out"
UPGRADE_SECS=$(since "$t")
kill "$LOGS_PID" 2>/dev/null || true; wait "$LOGS_PID" 2>/dev/null || true
sed 's/^/   | /' "$TMP/ck-upgrade.txt"
echo "   (exit $CK_RC in ${CK_SECS}s)"
grep -q "signal Terminated: shutting down" "$TMP/old-agent-a.log" || fail "the old agent $old_agent was not stopped by the upgrade"
job=$(grep 'job ck-.*accepted' "$TMP/old-agent-a.log" | tail -n 1 | sed 's/.*job \(ck-[^:]*\):.*/\1/')
grep -E "job $job|signal Terminated|stopping|stopped" "$TMP/old-agent-a.log" | sed 's/^/   agent: /'
# what became of the job, from the node's new agent (job records outlive the agent)
mig jobs node-a --kind checkpoint
state=$(awk -v id="$job" '$0 ~ id {for (i = 1; i <= NF; i++) if ($i ~ /^(succeeded|failed|interrupted|running|queued)$/) print $i}' "$TMP/mig.txt" | head -n 1)
[ -n "$state" ] || fail "the new agent on node-a does not list the job $job"
# The old pod's host files (the CRIU plugin, gpuckpt's CRIU config) stay until its agent has ended the job, so the
# runtime call in flight finishes: the job succeeds.
[ "$state" = succeeded ] || fail "the checkpoint job $job ended $state across the upgrade: $(grep "job $job" "$TMP/old-agent-a.log" | tail -n 3)"
written=$(sed -n "s|.*job $job: checkpoint of counter written to \([^ ]*\) .*|\1|p" "$TMP/old-agent-a.log")
if [ "$state" = succeeded ]; then
  [ -n "$written" ] || fail "the job $job succeeded but the old agent named no archive"
  f="$(node_dir node-a)/${written#"$VIEW"/}"
  [ -s "$f" ] || fail "the job's archive $written is not on node-a after the upgrade"
  whole_archive "$f" || fail "the archive $written is not whole (no checkpoint/inventory.img)"
  echo "   the job's archive $(basename "$written") is on node-a, whole"
fi
if [ "$CK_RC" != 0 ]; then
  grep -q "stopped during the checkpoint.*jobs node-a --kind checkpoint" "$TMP/ck-upgrade.txt" ||
    fail "the checkpoint command failed (exit $CK_RC) without saying that the agent stopped and where its job is"
fi
# an archive under a final name is a whole one: nothing half-written is left there
for f in "$(archive_dir node-a)"/*; do
  whole_archive "$f" || fail "a half-written archive $f is on node-a"
done
RESULTS+=("helm upgrade mid-checkpoint: kubectl gpuckpt checkpoint exit $CK_RC in ${CK_SECS}s ($(grep -m1 '^error: ' "$TMP/ck-upgrade.txt" | cut -c1-160)); job $job $state${written:+, archive $(basename "$written") whole}; upgrade rolled in ${UPGRADE_SECS}s")
[ "$(kubectl get pod gpu-big -o jsonpath='{.status.phase}')" = Running ] || fail "gpu-big is not Running after the upgrade"
a=$(count_in gpu-big); sleep 0.5; b=$(count_in gpu-big)
[ "$b" -gt "$a" ] || fail "gpu-big does not count after the upgrade ($a, then $b): left paused?"
no_paused_tasks "helm upgrade mid-checkpoint"
echo "ok: the job $job $state; gpu-big counts on ($a, $b), no task paused"
fi

step "summary"
for r in "${RESULTS[@]}"; do echo "  $r"; done
echo "1 passed, 0 failed in $(( $(date +%s) - T0 ))s"
