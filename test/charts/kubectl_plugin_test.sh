#!/usr/bin/env bash
# kubectl-gpuckpt against a fake cluster (fake-cluster/kubectl; in the "agent pods", the real gpuckpt CLI reads
# each node's GPUs from a fixture host tree, only checkpoint/restore - which need a live agent - are stand-ins):
# checkpoint, migrate, restore and nodes run their real flows (archives move between the fake nodes'
# directories agent to agent, never through kubectl exec; GPU matching is the real matcher on real archive records),
# --dry-run prints the plan without effects, bad arguments fail with exit 2 and a message naming them.
# shellcheck disable=SC2016,SC2015,SC2034 # checks are eval'ed strings; ok/bad always return 0
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PLUGIN="$SRC/kubectl-plugin/kubectl-gpuckpt"
FAKE="$SRC/test/charts/fake-cluster"
FIXTURES="$SRC/test/fixtures"
export GPUCKPT_CLI="${GPUCKPT_BUILD_DIR:-$SRC/build}/cli/gpuckpt"
[ -x "$GPUCKPT_CLI" ] || { echo "SKIP: $GPUCKPT_CLI not built (build the gpuckpt target first)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

export FAKE_CLUSTER="$tmp/cluster" KUBECTL="$FAKE/kubectl"
unset GPUCKPT_NAMESPACE GPUCKPT_AGENT_PORT GPUCKPT_TOKEN_FILE GPUCKPT_ARCHIVE_DIR FAKE_CORRUPT || true

new_cluster() {
  rm -rf "$FAKE_CLUSTER"; mkdir -p "$FAKE_CLUSTER"
  echo ml > "$FAKE_CLUSTER/namespace"
  printf '%s\n' "ml train gpu-a main -" "ml multi gpu-a main,sidecar -" "ml annotated gpu-a main,sidecar sidecar" \
    "ml cpu-job gpu-a main -" "ml solo gpu-a main,sidecar main" > "$FAKE_CLUSTER/pods.tsv"
  printf '%s\n' "gpu-a gpuckpt-aaaaa Running" "gpu-b gpuckpt-bbbbb Running" "gpu-c gpuckpt-ccccc Running" \
    "gpu-d gpuckpt-ddddd Pending" > "$FAKE_CLUSTER/agents.tsv"
  # node:fixture host tree (gpu-b: two H200s, so an H200 checkpoint fits; gpu-c: H100s, it does not)
  for n in gpu-a:nvidia-h200 gpu-b:nvidia-h200-x2 gpu-c:nvidia-h100-8gpu gpu-d:amd-mi300x cpu-e:cpu-only; do
    d="$FAKE_CLUSTER/nodes/${n%%:*}"; mkdir -p "$d/fs"; echo "${n#*:}" > "$d/gpu"
    ln -s "$FIXTURES/${n#*:}" "$d/hostroot"
    cp "$tmp/template-${n#*:}.tar" "$d/template.tar" 2>/dev/null || true
  done
  printf '%s\n' "kubernetes.io/hostname=gpu-a" "gpuckpt.io/gpu-model=H200" "gpuckpt.io/gpu-count=1" > "$FAKE_CLUSTER/nodes/gpu-a/labels"
  # train as the API server returns it: a ReplicaSet's pod pinned to gpu-a, one GPU, with server-set fields
  mkdir -p "$FAKE_CLUSTER/pods/ml"
  cat > "$FAKE_CLUSTER/pods/ml/train.json" <<'JSON'
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "train", "namespace": "ml", "uid": "6f1c2d3e-0000-4000-8000-000000000001", "resourceVersion": "48213",
   "creationTimestamp": "2026-11-21T00:00:00Z", "generateName": "train-7d9f8c-", "labels": {"app": "train", "pod-template-hash": "7d9f8c"},
   "annotations": {"team": "ml"}, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9f8c", "uid": "u-1", "controller": true}],
   "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]},
 "spec": {"nodeName": "gpu-a", "nodeSelector": {"kubernetes.io/hostname": "gpu-a"}, "priority": 0, "restartPolicy": "Always",
   "containers": [{"name": "main", "image": "registry.example/ml/train:1.4", "imagePullPolicy": "Always",
                   "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}, "requests": {"nvidia.com/gpu": "1"}}},
                  {"name": "sidecar", "image": "busybox:1.36"}]},
 "status": {"phase": "Running", "podIP": "10.1.2.3", "hostIP": "192.168.0.10"}}
JSON
  # solo: the same pod without an owner; train's ReplicaSet belongs to a Deployment
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); m=p["metadata"]; m["name"]="solo"; del m["ownerReferences"], m["generateName"]; json.dump(p, open(sys.argv[2], "w"))' \
    "$FAKE_CLUSTER/pods/ml/train.json" "$FAKE_CLUSTER/pods/ml/solo.json"
  mkdir -p "$FAKE_CLUSTER/owners/ml/replicaset" && echo "Deployment/train" > "$FAKE_CLUSTER/owners/ml/replicaset/train-7d9f8c"
  mkdir -p "$FAKE_CLUSTER/selectors/ml/ReplicaSet" &&
    echo '{"matchLabels":{"app":"train","pod-template-hash":"7d9f8c"}}' > "$FAKE_CLUSTER/selectors/ml/ReplicaSet/train-7d9f8c"
  : > "$FAKE_CLUSTER/calls.log"
}
run() { "$PLUGIN" "$@" > "$tmp/out" 2> "$tmp/err"; }

# A checkpoint archive in the layout podman/CRI-O write, with the GPU record of the node it was taken on (the
# record from the real `gpuckpt gpus --json` on that fixture; the container used its first GPU).
make_template() { # FIXTURE [nogpu]
  local fixture=$1 dir="$tmp/tpl-$1"
  mkdir -p "$dir/checkpoint"
  "$GPUCKPT_CLI" gpus --json --host-root "$FIXTURES/$fixture" > "$dir/record.json"
  python3 - "$dir" "${2:-}" <<'PY'
import json, os, sys
d, nogpu = sys.argv[1], sys.argv[2]
rec = json.load(open(f"{d}/record.json"))
gpu = rec["node"]["gpus"][0]
rec["used_gpu_ids"] = [gpu["id"]]
json.dump({"version": 1, "checkpoint_id": "ckpt-test", "record": rec,
           "devices": [{"container_path": gpu["device_paths"][0], "major": 195, "minor": 0, "gpu_id": gpu["id"]}],
           "gpu_env": {"NVIDIA_VISIBLE_DEVICES": "0"}}, open(f"{d}/gpuckpt-gpus.json", "w"))
json.dump({"id": "c0ffee", "name": "train", "rootfsImageName": "localhost/train:latest", "createdTime": "2026-11-21T00:00:00Z"},
          open(f"{d}/config.dump", "w"))
json.dump({"ociVersion": "1.0.0", "annotations": {"io.gpuckpt.checkpoint-id": "ckpt-test"}}, open(f"{d}/spec.dump", "w"))
open(f"{d}/checkpoint/pages-1.img", "wb").write(os.urandom(400000))   # payload the copy must carry intact
if nogpu: os.remove(f"{d}/gpuckpt-gpus.json")
PY
  rm "$dir/record.json"
  tar -C "$dir" -cf "$tmp/template-$fixture${2:+-nogpu}.tar" .
}
for f in nvidia-h200 nvidia-h200-x2 nvidia-h100-8gpu amd-mi300x; do make_template "$f"; done
make_template nvidia-h200 nogpu
archives() { find "$FAKE_CLUSTER/nodes/$1/fs" -type f 2>/dev/null | sed "s|^$FAKE_CLUSTER/nodes/$1/fs||" | sort; }

# ---- checkpoint -----------------------------------------------------------------------------------------------
new_cluster
run checkpoint train && ok || bad "checkpoint train succeeds: $(cat "$tmp/err")"
arch=$(cat "$tmp/out")
expect '[[ "$arch" == gpu-a:/var/lib/gpuckpt/checkpoints/checkpoint-train_ml-main-*.tar ]]' "checkpoint prints NODE:PATH ($arch)"
expect '[ -f "$FAKE_CLUSTER/nodes/gpu-a/fs${arch#gpu-a:}" ]' "the archive exists on the pod's node"
expect 'grep -q "^\[1/3\] locating pod ml/train" "$tmp/err" && grep -q "^\[3/3\] checkpointing ml/train container main on gpu-a (agent gpuckpt-aaaaa)" "$tmp/err"' "progress steps on stderr"
expect 'grep -q "gpuckpt checkpoint: main via http://127.0.0.1:7469" "$tmp/err" && grep -q "GPUs: *nvidia-h200" "$tmp/err"' "the agent CLI's own progress and summary are passed through"
expect 'grep -qx -- "exec -n gpuckpt-system gpuckpt-aaaaa -c agent -- gpuckpt checkpoint --agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token --namespace ml --pod train main" "$FAKE_CLUSTER/calls.log"' \
  "checkpoint runs gpuckpt in the agent container against its local API with the mounted token"

run checkpoint multi && bad "several containers without -c must fail" || ok
expect 'grep -q "several containers (main sidecar): choose one with -c CONTAINER" "$tmp/err"' "asks for -c, listing the containers"
run checkpoint multi -c sidecar && ok || bad "checkpoint -c sidecar"
expect 'grep -q "checkpoint-multi_ml-sidecar" "$tmp/out"' "-c picks the container"
run checkpoint annotated && ok || bad "checkpoint with default-container annotation"
expect 'grep -q "annotated_ml-sidecar" "$tmp/out"' "kubectl.kubernetes.io/default-container is honoured"
run checkpoint multi -c nope && bad "unknown container must fail" || ok
expect 'grep -q "has no container '"'"'nope'"'"' (containers: main sidecar)" "$tmp/err"' "unknown container named"
run checkpoint ghost -n other && bad "missing pod must fail" || ok
expect 'grep -q "pod other/ghost not found" "$tmp/err"' "missing pod named with its namespace"

# ---- migrate --------------------------------------------------------------------------------------------------
new_cluster
run migrate train --node gpu-b && ok || bad "migrate to a matching node succeeds: $(cat "$tmp/err")"
src=$(archives gpu-a); dst=$(archives gpu-b)
expect '[ -n "$src" ] && [ "$src" = "$(grep -v restored <<< "$dst")" ]' "archive moved to the same path on gpu-b ($dst)"
expect 'cmp -s "$FAKE_CLUSTER/nodes/gpu-a/fs$src" "$FAKE_CLUSTER/nodes/gpu-b/fs$src"' "the bytes arrived intact"
expect '[ "$(cat "$FAKE_CLUSTER/nodes/gpu-b/restored")" = "$src" ]' "restored on gpu-b from the moved archive"
expect '[ ! -e "$FAKE_CLUSTER/nodes/gpu-a/restored" ]' "nothing restored on the source"
expect 'grep -q "^\[5/5\] restoring on gpu-b" "$tmp/err" && grep -q "sha256 .* verified" "$tmp/err"' "progress with the verified copy"
expect 'grep -q "the source pod ml/train stays on gpu-a" "$tmp/err"' "says the source pod is still there"
order=$(grep -o -- '-- gpuckpt [a-z-]*\|-- cat' "$FAKE_CLUSTER/calls.log" | tr '\n' ' ' || true)
expect '[ "$order" = "-- gpuckpt runtime -- gpuckpt checkpoint -- gpuckpt inspect -- gpuckpt match -- gpuckpt transfer -- gpuckpt restore " ]' \
  "runtime, checkpoint, the record read on the source, matched on the target, then the copy, then restore ($order)"
expect 'grep -qx -- "exec -n gpuckpt-system gpuckpt-aaaaa -c agent -- gpuckpt transfer --agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token $src --to http://10.244.2.2:7469" "$FAKE_CLUSTER/calls.log"' \
  "the source node's agent pushes the archive to the target agent's pod IP"
# No archive bytes through the API server: everything that went through kubectl exec, in and out, is far less than
# the archive (400 kB of random pages), and no exec read or wrote the archive.
size=$(stat -c %s "$FAKE_CLUSTER/nodes/gpu-a/fs$src")
through=$(awk '{n += $1 + $2} END {print n + 0}' "$FAKE_CLUSTER/exec-bytes.log")
expect '[ "$size" -gt 400000 ] && [ "$through" -lt $((size / 8)) ]' "kubectl exec carried $through bytes of a $size-byte archive"
expect '! grep -Eq -- "-- (cat|sh -c)" "$FAKE_CLUSTER/calls.log"' "no exec streams a file"
expect 'grep -q "gpuckpt-aaaaa -c agent -- gpuckpt inspect /var/lib/gpuckpt/checkpoints/.* --json" "$FAKE_CLUSTER/calls.log" && grep -q "gpuckpt-bbbbb -c agent -- gpuckpt match --source -" "$FAKE_CLUSTER/calls.log"' \
  "the record comes from the source node, the match runs on the target"
expect 'grep -q "WARNING: ml/train is owned by Deployment/train (through ReplicaSet/train-7d9f8c)" "$tmp/err"' "an owned pod's owner is named, up to its Deployment"
expect '[ ! -d "$FAKE_CLUSTER/created" ] && grep -q "^ml train " "$FAKE_CLUSTER/pods.tsv"' "a podman node gets no pod; the source stays"
expect 'grep -Eq "^ +GPU-a2ce77ac-c70f-b672-0aa0-f871c0787910 +GPU-" "$tmp/err"' "the real matcher's mapping for gpu-b is shown"

new_cluster
rc=0; run migrate train --to gpu-c || rc=$?
expect 'grep -q "warning: --to is deprecated, use --node" "$tmp/err"' "the old spelling --to still works, with a warning"
expect '[ "$rc" = 3 ]' "migrate onto non-matching GPUs exits 3 (got $rc)"
expect 'grep -q "node gpu-c has no GPUs matching the checkpoint" "$tmp/err" && grep -q "no match: " "$tmp/err"' "says why, with the real matcher's verdict"
expect 'grep -q "nothing was copied; the archive stays on gpu-a at /var/lib/gpuckpt/checkpoints/" "$tmp/err"' "says nothing was copied and where the archive is"
expect '[ -z "$(archives gpu-c)" ] && ! grep -q -- "-- gpuckpt transfer" "$FAKE_CLUSTER/calls.log"' "matching happens before the copy: nothing reached gpu-c ($(archives gpu-c))"
expect '[ -n "$(archives gpu-a)" ]' "the source archive stays"
expect '[ ! -e "$FAKE_CLUSTER/nodes/gpu-c/restored" ]' "no restore attempted on a non-matching node"

new_cluster
rc=0; FAKE_CORRUPT=1 run migrate train --to gpu-b || rc=$?
expect '[ "$rc" = 1 ]' "a corrupted transfer fails the migration"
expect 'grep -q "was discarded, nothing of it is kept: its SHA-256 is" "$tmp/err" && grep -q "the target keeps no archive of it and the archive stays where it was" "$tmp/err"' "says the checksum did not match"
expect '[ -z "$(archives gpu-b)" ]' "no archive, partial or final, left on the target ($(archives gpu-b))"

new_cluster
run migrate train --to gpu-a && bad "migrating onto the pod's own node must fail" || ok
expect 'grep -q "already runs on gpu-a" "$tmp/err"' "same-node migrate explained"
run migrate train --to cpu-e && bad "migrating to a node without agent must fail" || ok
expect 'grep -q "no running gpuckpt agent on node cpu-e" "$tmp/err"' "node without an agent named"
run migrate train --to nowhere && bad "unknown node must fail" || ok
expect 'grep -q "node nowhere not found" "$tmp/err"' "unknown node named"

# ---- migrate onto a CRI node: checkpoint image + a pod created from it ---------------------------------------------
cri_node() { echo "cri containerd 2.1.0 pod" > "$FAKE_CLUSTER/nodes/gpu-b/runtime"; }
new_cluster; cri_node
run migrate train --to gpu-b && ok || bad "migrate to a CRI node succeeds: $(cat "$tmp/err")"
src=$(archives gpu-a)
pod_json="$FAKE_CLUSTER/created/ml/train-migrated.json"
expect '[ -f "$pod_json" ]' "a pod train-migrated was created ($(find "$FAKE_CLUSTER/created" 2>&1 | tr '\n' ' '))"
expect '[ "$(cat "$FAKE_CLUSTER/nodes/gpu-b/images" 2>/dev/null)" = "$src localhost/gpuckpt-checkpoint:$(basename "${src%%.tar*}")" ]' "the moved archive was loaded into gpu-b's image store"
expect '[ ! -e "$FAKE_CLUSTER/nodes/gpu-b/restored" ]' "no agent restore on a CRI node"
# the created pod, field by field (each failed check is reported by name)
problems=$(python3 - "$pod_json" "localhost/gpuckpt-checkpoint:$(basename "${src%%.tar*}")" 2>&1 <<'PY'
import json, sys
p, image = json.load(open(sys.argv[1])), sys.argv[2]
spec, meta = p["spec"], p["metadata"]
main, sidecar = spec["containers"]
checks = {
    "placed on gpu-b": spec.get("nodeName") == "gpu-b",
    "main runs the checkpoint image": main["image"] == image and main["imagePullPolicy"] == "Never",
    "the sidecar keeps its image": sidecar["image"] == "busybox:1.36",
    "GPU limits and requests kept (the device plugin allocates, gpuckpt-nri follows)":
        main["resources"] == {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}, "requests": {"nvidia.com/gpu": "1"}},
    "server-set metadata gone": sorted(meta) == ["annotations", "labels", "name", "namespace"],
    "no status": sorted(p) == ["apiVersion", "kind", "metadata", "spec"],
    "node selection and priority gone": not {"nodeSelector", "priority"} & set(spec),
    "labels kept but the ReplicaSet's": meta["labels"] == {"app": "train"},
    "annotations kept, source and image added": meta["annotations"] == {
        "team": "ml", "gpuckpt.io/migrated-from": "ml/train", "gpuckpt.io/checkpoint-image": image},
    "same namespace": meta["namespace"] == "ml",
}
for name, ok in checks.items():
    if not ok: print(name)
PY
)
expect '[ -z "$problems" ]' "the created pod: $problems"
expect 'grep -q "^ml train " "$FAKE_CLUSTER/pods.tsv" && grep -q "the source pod ml/train stays on gpu-a" "$tmp/err"' "the source pod is left alone by default"
order=$(grep -o -- '-- gpuckpt [a-z-]*\|^create -f -' "$FAKE_CLUSTER/calls.log" | tr '\n' ' ' || true)
expect '[ "$order" = "-- gpuckpt runtime -- gpuckpt checkpoint -- gpuckpt inspect -- gpuckpt match -- gpuckpt transfer -- gpuckpt image -- gpuckpt target-pod create -f - " ]' \
  "runtime, checkpoint, match, load the image, make the pod, create it ($order)"
expect 'grep -q "^\[6/6\] creating the pod on gpu-b" "$tmp/err" && grep -q "restored on gpu-b as pod ml/train-migrated" "$tmp/err"' "progress names the pod"
expect 'grep -q "Its owner selects its pods by {\"matchLabels\":{\"app\":\"train\",\"pod-template-hash\":\"7d9f8c\"}}: the copy lacks the labels" "$tmp/err"' \
  "the owner's selector is named"

# a bare ReplicaSet selects its pods by app=train alone: the copy must not carry it, or the ReplicaSet adopts it and
# deletes one of the two; an owner whose selector cannot be read: no labels at all
new_cluster; cri_node
echo '{"matchLabels":{"app":"train"}}' > "$FAKE_CLUSTER/selectors/ml/ReplicaSet/train-7d9f8c"
run migrate train --to gpu-b && ok || bad "migrate of a bare ReplicaSet's pod: $(cat "$tmp/err")"
expect '[ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"metadata\"].get(\"labels\"))" "$pod_json")" = None ]' \
  "the copy of a bare ReplicaSet's pod lacks the label the ReplicaSet selects by"
new_cluster; cri_node
rm "$FAKE_CLUSTER/selectors/ml/ReplicaSet/train-7d9f8c"
run migrate train --to gpu-b && ok || bad "migrate of a pod whose owner's selector is unreadable: $(cat "$tmp/err")"
expect 'grep -q "selector cannot be read: the copy gets no labels" "$tmp/err" && [ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"metadata\"].get(\"labels\"))" "$pod_json")" = None ]' \
  "an owner whose selector cannot be read: the copy has no labels"
new_cluster; cri_node
run migrate train --to gpu-b >/dev/null
before=$(archives gpu-b)
run migrate train --to gpu-b && bad "a second migration onto a taken name must fail" || ok
expect 'grep -q "AlreadyExists" "$tmp/err" && grep -q "^ml train " "$FAKE_CLUSTER/pods.tsv"' "a taken name fails, the source stays"
expect '[ -n "$before" ] && [ "$(archives gpu-b)" = "$before" ] && grep -q "already on the target with the same sha256" "$tmp/err"' \
  "an archive of the same name and bytes on the target is used, not copied, and not removed on failure ($(archives gpu-b | tr '\n' ' '))"
echo "other bytes" > "$FAKE_CLUSTER/nodes/gpu-b/fs$before"
rc=0; run migrate train --to gpu-b --name train-2 || rc=$?
expect '[ "$rc" = 1 ] && grep -q "already has a different archive named .*: not replaced" "$tmp/err" && [ "$(cat "$FAKE_CLUSTER/nodes/gpu-b/fs$before")" = "other bytes" ]' \
  "a different file of the archive's name on the target is neither replaced nor removed (rc $rc)"

# a node whose store the agent cannot fill (CRI-O) with an image_registry: the pod pulls the pushed image
new_cluster; cri_node
echo "registry.example:5000/ml/checkpoints" > "$FAKE_CLUSTER/nodes/gpu-b/registry"
run migrate train --to gpu-b && ok || bad "migrate through a registry: $(cat "$tmp/err")"
expect '[ "$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))[\"spec\"][\"containers\"][0]; print(c[\"image\"].split(\"@\")[0], c[\"imagePullPolicy\"])" "$FAKE_CLUSTER/created/ml/train-migrated.json")" = "registry.example:5000/ml/checkpoints:$(basename "${src%%.tar*}") IfNotPresent" ]' \
  "a pushed image is pulled (IfNotPresent) by its registry name"

new_cluster; cri_node
run migrate solo --to gpu-b --name solo-b --delete-source --stable 2 && ok || bad "migrate --name --delete-source: $(cat "$tmp/err")"
expect '[ -f "$FAKE_CLUSTER/created/ml/solo-b.json" ] && ! grep -q "^ml solo " "$FAKE_CLUSTER/pods.tsv"' "pod solo-b created and the source deleted"
order=$(grep -o '^create -f -\|^get pod -n ml solo-b -o jsonpath={.status.phase}{range\|^delete pod -n ml solo' "$FAKE_CLUSTER/calls.log" | uniq | tr '\n' ' ' || true)
expect '[ "$order" = "create -f - get pod -n ml solo-b -o jsonpath={.status.phase}{range delete pod -n ml solo " ]' "the source is deleted only after the target was seen ready ($order)"
looks=$(grep -c '^get pod -n ml solo-b -o jsonpath={.status.phase}{range' "$FAKE_CLUSTER/calls.log" || true)
expect '[ "$looks" -ge 3 ]' "readiness is watched over the --stable window, not seen once ($looks looks)"
expect '! grep -q WARNING "$tmp/err"' "a pod without an owner gets no owner warning"

new_cluster; cri_node
rc=0; run migrate train --to gpu-b --delete-source || rc=$?
expect '[ "$rc" = 2 ] && grep -q "pod ml/train is owned by Deployment/train (through ReplicaSet/train-7d9f8c), which recreates it" "$tmp/err"' "--delete-source refuses an owned pod, naming the owner (rc $rc)"
expect 'grep -q -- "--force-owned" "$tmp/err" && ! grep -q "^exec" "$FAKE_CLUSTER/calls.log" && [ -z "$(archives gpu-a)$(archives gpu-b)" ]' "nothing was done; --force-owned is named"
run migrate train --to gpu-b --delete-source --force-owned --stable 1 && ok || bad "--force-owned deletes an owned source: $(cat "$tmp/err")"
expect '! grep -q "^ml train " "$FAKE_CLUSTER/pods.tsv" && grep -q "its owner Deployment/train (through ReplicaSet/train-7d9f8c) will create a new one" "$tmp/err"' "the owned source is deleted, with the owner's consequence said"

new_cluster; cri_node
rc=0; FAKE_CREATED_CRASHLOOP=1 run migrate solo --to gpu-b --delete-source --wait 5 --stable 2 || rc=$?
expect '[ "$rc" = 1 ] && grep -q "container main of pod ml/solo-migrated was not ready for 2s in a row within 5s (phase .Running., ready .true., restarts [0-9]*)" "$tmp/err"' \
  "a crash-looping target (Running, ready at each look, restarting) is never taken as ready (rc $rc)"
expect 'grep -q "^ml solo " "$FAKE_CLUSTER/pods.tsv" && ! grep -qx "delete pod -n ml solo" "$FAKE_CLUSTER/calls.log"' "a crash-looping target never deletes the source"
expect '[ -z "$(archives gpu-b)" ] && [ -n "$(archives gpu-a)" ]' "its copy is removed from the target, the source archive stays"
expect '[ ! -e "$FAKE_CLUSTER/created/ml/solo-migrated.json" ] && grep -q "deleted the pod ml/solo-migrated this command had created on gpu-b" "$tmp/err"' \
  "the crash-looping copy is deleted: it must not run beside the source"

new_cluster; cri_node
rc=0; FAKE_CREATED_READY=false run migrate solo --to gpu-b --delete-source --wait 3 --stable 1 || rc=$?
expect '[ "$rc" = 1 ] && grep -q "ready .false." "$tmp/err" && grep -q "^ml solo " "$FAKE_CLUSTER/pods.tsv"' "a Running pod that is never ready keeps the source (rc $rc)"

new_cluster; cri_node
rc=0; FAKE_CREATED_PHASE=Failed FAKE_CREATED_REASON=UnexpectedAdmissionError \
  FAKE_CREATED_MESSAGE="Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0" \
  run migrate solo --to gpu-b --delete-source || rc=$?
expect '[ "$rc" = 1 ] && grep -q "pod ml/solo-migrated is Failed, not running (UnexpectedAdmissionError: Allocate failed .* Available: 0)" "$tmp/err"' \
  "a target pod that fails stops the migration, with the kubelet's reason (rc $rc)"
expect 'grep -q "^ml solo " "$FAKE_CLUSTER/pods.tsv" && ! grep -qx "delete pod -n ml solo" "$FAKE_CLUSTER/calls.log"' "a failed target never deletes the source"
expect '[ ! -e "$FAKE_CLUSTER/created/ml/solo-migrated.json" ]' "the failed copy is deleted (a second migrate can take its name)"

# a copy that vanishes (a controller adopted it and deleted it): said at once, not after --wait
new_cluster; cri_node
t0=$SECONDS; rc=0; FAKE_CREATED_VANISHES=1 run migrate solo --to gpu-b --delete-source --wait 60 || rc=$?
expect '[ "$rc" = 1 ] && [ $((SECONDS - t0)) -lt 30 ] && grep -q "pod ml/solo-migrated was deleted while this command waited" "$tmp/err"' \
  "a copy deleted by someone else stops the wait at once (rc $rc, $((SECONDS - t0)) s)"
expect 'grep -q "^ml solo " "$FAKE_CLUSTER/pods.tsv" && ! grep -q "could not delete" "$tmp/err"' "the source stays; nothing said about deleting the vanished copy"

# a target whose GPUs are all held: refused before the checkpoint (the kubelet would refuse the copy at admission)
new_cluster; cri_node
echo "nvidia.com/gpu 2" > "$FAKE_CLUSTER/nodes/gpu-b/allocatable"
printf '%s\n' "Running 2" "Succeeded 1" > "$FAKE_CLUSTER/nodes/gpu-b/requests"
rc=0; run migrate solo --to gpu-b --delete-source || rc=$?
expect '[ "$rc" = 3 ] && grep -q "node gpu-b has 0 of 2 nvidia.com/gpu free (the pods on it hold 2); ml/solo asks for 1. Nothing was checkpointed" "$tmp/err"' \
  "a target without a free GPU is refused with exit 3 (rc $rc)"
expect '! grep -q "^exec.* checkpoint" "$FAKE_CLUSTER/calls.log" && [ -z "$(archives gpu-a)$(archives gpu-b)" ]' "nothing checkpointed, nothing copied"
printf '%s\n' "Running 1" "Failed 1" > "$FAKE_CLUSTER/nodes/gpu-b/requests"
run migrate solo --to gpu-b && ok || bad "a finished pod's GPUs count as free: $(cat "$tmp/err")"

new_cluster; cri_node
rc=0; FAKE_IMAGE_FAILS="the CRI runtime is cri-o 1.31" run migrate solo --to gpu-b --delete-source || rc=$?
expect '[ "$rc" = 1 ] && grep -q "loading /var/lib/gpuckpt/checkpoints/.* into gpu-b.s image store failed" "$tmp/err" && grep -q "cri-o 1.31" "$tmp/err"' "an image that cannot be loaded fails clearly (rc $rc)"
expect '[ ! -d "$FAKE_CLUSTER/created" ] && grep -q "^ml solo " "$FAKE_CLUSTER/pods.tsv"' "no pod created, the source stays"
expect '[ -z "$(archives gpu-b)" ] && [ -n "$(archives gpu-a)" ]' "the copy on gpu-b is removed, the archive on gpu-a stays"

# a node whose agent restores containers: Kubernetes cannot report the restored container's readiness
new_cluster
rc=0; run migrate solo --to gpu-b --delete-source || rc=$?
expect '[ "$rc" = 2 ] && grep -q "restores containers, not pods" "$tmp/err" && [ -z "$(archives gpu-a)" ]' "--delete-source onto a container-restoring node is refused before anything (rc $rc)"

new_cluster; cri_node
run --dry-run migrate train --to gpu-b --delete-source --force-owned && ok || bad "dry-run migrate to a CRI node: $(cat "$tmp/err")"
expect '[ ! -d "$FAKE_CLUSTER/created" ] && grep -q "^ml train " "$FAKE_CLUSTER/pods.tsv" && [ -z "$(archives gpu-b)" ]' "dry run creates and deletes nothing"
expect 'grep -q "^+ .*gpuckpt-bbbbb -c agent -- gpuckpt image --agent .* /var/lib/gpuckpt/checkpoints/ARCHIVE.tar$" "$tmp/err" && grep -q "^+ .*kubectl create -f - <<EOF" "$tmp/err" && grep -q "^+ .*kubectl delete pod -n ml train" "$tmp/err"' \
  "the plan: load the image, create the pod, delete the source"
expect 'grep -q "\"nodeName\": \"gpu-b\"" "$tmp/err"' "the plan shows the pod's manifest"

# ---- restore --------------------------------------------------------------------------------------------------
new_cluster
run checkpoint train; arch=$(cat "$tmp/out")
run restore "$arch" --node gpu-b --name train-restored && ok || bad "restore NODE:PATH onto another node: $(cat "$tmp/err")"
expect 'grep -q "as train-restored" "$tmp/err" && grep -q -- "-- gpuckpt restore --agent .* --name train-restored$" "$FAKE_CLUSTER/calls.log"' "--name reaches gpuckpt restore"
expect '[ "$(cat "$FAKE_CLUSTER/nodes/gpu-b/restored")" = "${arch#gpu-a:}" ]' "restored on gpu-b"
run restore "$arch" --node gpu-a && ok || bad "restore on the archive's own node"
expect 'grep -q "the archive is already there" "$tmp/err" && [ "$(cat "$FAKE_CLUSTER/nodes/gpu-a/restored")" = "${arch#gpu-a:}" ]' "no copy when the archive is local to the node"
cp "$FAKE_CLUSTER/nodes/gpu-a/fs${arch#gpu-a:}" "$tmp/local-ckpt.tar"
run restore "$tmp/local-ckpt.tar" --node gpu-d && bad "restore via a Pending agent must fail" || ok
expect 'grep -q "no running gpuckpt agent on node gpu-d" "$tmp/err"' "only running agents are used"
run restore "$tmp/local-ckpt.tar" --node gpu-b && ok || bad "restore of a local file: $(cat "$tmp/err")"
expect 'cmp -s "$tmp/local-ckpt.tar" "$FAKE_CLUSTER/nodes/gpu-b/fs/var/lib/gpuckpt/checkpoints/local-ckpt.tar"' "local archive uploaded intact"
expect 'grep -q "uploaded [0-9.]* [KMG]*i*B, sha256 .* verified" "$tmp/err"' "upload reports size and verified checksum"
expect 'grep -qx /var/lib/gpuckpt/checkpoints/local-ckpt.tar "$FAKE_CLUSTER/nodes/gpu-b/restored"' "uploaded archive restored"
# a node whose agent restores pods (what its agent says, not a runtime name in the plugin): refused before any copy
cri_node; : > "$FAKE_CLUSTER/calls.log"; rm -f "$FAKE_CLUSTER/nodes/gpu-b/restored"
rc=0; run restore "$arch" --node gpu-b || rc=$?
expect '[ "$rc" = 2 ] && grep -q "the agent on gpu-b restores pods, not containers" "$tmp/err" && grep -q "Nothing was copied" "$tmp/err"' \
  "restore onto a node whose agent restores pods: exit 2 before anything is copied (rc $rc: $(cat "$tmp/err"))"
expect '[ ! -e "$FAKE_CLUSTER/nodes/gpu-b/restored" ] && ! grep -q -- "-- gpuckpt \(transfer\|restore\) " "$FAKE_CLUSTER/calls.log"' \
  "nothing copied or restored on the pod-restoring node"
echo "containerd containerd 1.7.24 container" > "$FAKE_CLUSTER/nodes/gpu-b/runtime"
run restore "$arch" --node gpu-b && ok || bad "restore onto a runtime.kind containerd node (its agent restores containers): $(cat "$tmp/err")"

# ---- nodes ----------------------------------------------------------------------------------------------------
run nodes && ok || bad "nodes lists agents"
expect 'grep -Eq "^gpu-a +gpuckpt-aaaaa +Running +gpu-count=1 gpu-model=H200$" "$tmp/out"' "gpu-a shown with its gpuckpt.io labels"
expect 'grep -Eq "^gpu-b .*\(no gpuckpt.io labels yet\)" "$tmp/out" && grep -Eq "^gpu-d +gpuckpt-ddddd +Pending" "$tmp/out"' "unlabelled and pending agents shown"
: > "$FAKE_CLUSTER/calls.log"
run nodes "$arch" && ok || bad "nodes ARCHIVE: $(cat "$tmp/err")"
expect 'grep -Eq "^gpu-a .* yes$" "$tmp/out" && grep -Eq "^gpu-b .* yes$" "$tmp/out"' "nodes with H200s say yes (the real matcher)"
expect 'grep -Eq "^gpu-c .* no \(GPUs differ\)$" "$tmp/out"' "the H100 node says no"
expect 'grep -Eq "^gpu-d .* unknown \(agent Pending\)$" "$tmp/out"' "a pending agent is unknown, not no"
expect 'grep -q "matching its GPU record on every node" "$tmp/err"' "says it matches the record"
expect '[ "$(grep -c -- "-- gpuckpt match --source - --agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token" "$FAKE_CLUSTER/calls.log")" = 3 ]' \
  "only the record travels: one match per running agent, judged by that agent"
# a checkpoint without GPU state restores anywhere
cp "$tmp/template-nvidia-h200-nogpu.tar" "$FAKE_CLUSTER/nodes/gpu-a/fs/var/lib/gpuckpt/checkpoints/plain.tar"
run nodes gpu-a:/var/lib/gpuckpt/checkpoints/plain.tar && ok || bad "nodes on a GPU-less checkpoint: $(cat "$tmp/err")"
expect 'grep -Eq "^gpu-c .* yes \(no GPU state\)$" "$tmp/out" && grep -q "holds no GPU state" "$tmp/err"' "no GPU state: every node can take it"
printf 'not a tar' > "$FAKE_CLUSTER/nodes/gpu-a/fs/var/lib/gpuckpt/checkpoints/junk.tar"
run nodes gpu-a:/var/lib/gpuckpt/checkpoints/junk.tar && bad "a junk archive must fail" || ok
expect 'grep -q "cannot inspect /var/lib/gpuckpt/checkpoints/junk.tar on gpu-a" "$tmp/err"' "a junk archive is named"
expect '[ "$(grep -c "gpuckpt restore\|gpuckpt checkpoint" <<< "$(tail -n 12 "$FAKE_CLUSTER/calls.log")")" = 0 ]' "nodes changes nothing"

# ---- one matcher: the target's agent judges, with its own view of the node (NVML), not a host-root guess --------
# An 8x H100 NVLink node: the agent reads NVML (the fixture's recorded snapshot), so its checkpoints' records carry
# the NVLink links. `gpuckpt match --host-root /host` in the pod reads no NVML and rejects such a record even on
# its own node; the agent's judgement (POST /v1/match) takes it.
F="$FIXTURES/nvidia-h100-8gpu" nv="$tmp/tpl-nvlink"
mkdir -p "$nv/checkpoint"
"$GPUCKPT_CLI" gpus --json --host-root "$F" --nvml-snapshot "$F/nvml-snapshot.json" > "$nv/node.json"
python3 - "$nv" <<'PY2'
import json, os, sys
d = sys.argv[1]
rec = json.load(open(f"{d}/node.json"))
a, b = rec["node"]["gpus"][:2]
assert any(l.get("peer_id") == b["id"] or b["id"] in json.dumps(l) for l in a["links"]), "the fixture's GPUs 0 and 1 are NVLinked"
rec["used_gpu_ids"] = [a["id"], b["id"]]
json.dump(rec, open(f"{d}/record.json", "w"))
json.dump({"version": 1, "checkpoint_id": "ckpt-nv", "record": rec,
           "devices": [{"container_path": g["device_paths"][0], "major": 195, "minor": i, "gpu_id": g["id"]} for i, g in enumerate((a, b))],
           "gpu_env": {"NVIDIA_VISIBLE_DEVICES": "0,1"}}, open(f"{d}/gpuckpt-gpus.json", "w"))
json.dump({"id": "c0ffee", "name": "nv", "rootfsImageName": "localhost/train:latest", "createdTime": "2026-11-21T00:00:00Z"}, open(f"{d}/config.dump", "w"))
json.dump({"ociVersion": "1.0.0"}, open(f"{d}/spec.dump", "w"))
open(f"{d}/checkpoint/pages-1.img", "wb").write(os.urandom(1000))
os.remove(f"{d}/node.json")
PY2
rc=0; "$GPUCKPT_CLI" match --source "$nv/record.json" --host-root "$F" > "$tmp/blind" 2>&1 || rc=$?
expect '[ "$rc" = 3 ] && grep -q " links " "$tmp/blind"' "control: without NVML the NVLink record fails its own node on links (rc $rc)"
rm "$nv/record.json"
new_cluster
tar -C "$nv" -cf "$FAKE_CLUSTER/nodes/gpu-c/template.tar" .
d="$FAKE_CLUSTER/nodes/gpu-f"; mkdir -p "$d/fs"; echo nvidia-h100-8gpu > "$d/gpu"; ln -s "$F" "$d/hostroot"
echo "gpu-f gpuckpt-fffff Running" >> "$FAKE_CLUSTER/agents.tsv"
echo "ml nv gpu-c main -" >> "$FAKE_CLUSTER/pods.tsv"
run migrate nv --to gpu-f && ok || bad "an NVLink checkpoint migrates to an identical NVLink node: $(cat "$tmp/err")"
expect '[ "$(cat "$FAKE_CLUSTER/nodes/gpu-f/restored" 2>/dev/null)" = "$(archives gpu-c)" ]' "restored on gpu-f"
run nodes "gpu-c:$(archives gpu-c)" && ok || bad "nodes on the NVLink checkpoint: $(cat "$tmp/err")"
expect 'grep -Eq "^gpu-c .* yes$" "$tmp/out" && grep -Eq "^gpu-f .* yes$" "$tmp/out" && grep -Eq "^gpu-b .* no \(GPUs differ\)$" "$tmp/out"' \
  "the NVLink checkpoint matches its own node and its twin, not the H200 node"

# ---- dry run --------------------------------------------------------------------------------------------------
new_cluster
run --dry-run migrate train --to gpu-b && ok || bad "dry-run migrate: $(cat "$tmp/err")"
expect '[ -z "$(archives gpu-a)$(archives gpu-b)" ]' "dry run writes no archive"
expect '[ -z "$(grep "^exec" "$FAKE_CLUSTER/calls.log" | grep -v -- "-- gpuckpt runtime ")" ]' "dry run execs nothing in the cluster but the runtime lookup"
plan=$(grep '^+ ' "$tmp/err")
steps=$(grep -o -- '-- gpuckpt [a-z]*\|-- cat' <<< "$plan" | tr '\n' ' ' || true)
expect '[ "$steps" = "-- gpuckpt checkpoint -- gpuckpt inspect -- gpuckpt match -- gpuckpt transfer -- gpuckpt restore " ]' "plan in order: checkpoint, match, copy, restore ($steps)"
expect 'grep -q "gpuckpt-aaaaa -c agent -- gpuckpt checkpoint --agent http://127.0.0.1:7469" <<< "$plan"' "plan: checkpoint on the source agent"
expect 'grep -q "gpuckpt-aaaaa -c agent -- gpuckpt transfer --agent http://127.0.0.1:7469 --token-file /etc/gpuckpt/auth/token /var/lib/gpuckpt/checkpoints/ARCHIVE.tar --to http://10.244.2.2:7469" <<< "$plan"' "plan: the source agent pushes the archive to the target agent"
expect 'grep -q "gpuckpt-bbbbb -c agent -- gpuckpt match" <<< "$plan" && grep -q "gpuckpt-bbbbb -c agent -- gpuckpt restore" <<< "$plan"' "plan: match and restore on the target"
run --dry-run --agent-namespace gpu-sys --agent-port 8000 --token-file /t checkpoint train -n ml || true
expect 'grep -q "no gpuckpt agent\|no running gpuckpt agent on node gpu-a (namespace gpu-sys" "$tmp/err"' "--agent-namespace is used for the agent lookup"

# ---- kubectl conventions: --context/--kubeconfig reach every kubectl call; --dry-run=client|server|none ----------
new_cluster
run --context prod --kubeconfig /k/config --dry-run=client migrate train --to gpu-b && ok || bad "--context/--kubeconfig: $(cat "$tmp/err")"
calls=$(wc -l < "$FAKE_CLUSTER/calls.log")
expect '[ "$calls" -gt 0 ] && [ "$(grep -c -- "^--context prod --kubeconfig /k/config " "$FAKE_CLUSTER/calls.log")" = "$calls" ]' "every kubectl call carries --context and --kubeconfig"
expect 'grep -q "^+ .*kubectl --context prod --kubeconfig /k/config exec" "$tmp/err"' "the dry-run plan shows them too"
expect '[ -z "$(grep " exec " "$FAKE_CLUSTER/calls.log" | grep -v -- "-- gpuckpt runtime ")" ]' "--dry-run=client execs nothing but the runtime lookup"

# ---- krew: the release archive and manifest --------------------------------------------------------------------
"$SRC/kubectl-plugin/krew/make-release.sh" "$tmp/krew" https://releases.example/gpuckpt https://example/gpuckpt >/dev/null &&
  ok || bad "krew make-release.sh failed"
python3 - "$tmp/krew" "$PLUGIN" <<'PY' && ok || bad "krew manifest"
import glob, hashlib, io, sys, tarfile, yaml
out, plugin = sys.argv[1], sys.argv[2]
m = yaml.safe_load(open(out + "/gpuckpt.yaml"))
assert m["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and m["kind"] == "Plugin", m
assert m["metadata"]["name"] == "gpuckpt" and m["spec"]["version"].startswith("v"), m
(archive,) = glob.glob(out + "/kubectl-gpuckpt-*.tar.gz")
sha = hashlib.sha256(open(archive, "rb").read()).hexdigest()
t = tarfile.open(archive)
assert t.extractfile("kubectl-gpuckpt").read() == open(plugin, "rb").read()
assert t.getmember("kubectl-gpuckpt").mode & 0o111
for p in m["spec"]["platforms"]:
    assert p["sha256"] == sha and p["bin"] == "kubectl-gpuckpt", p
    assert p["uri"].endswith("/" + m["spec"]["version"] + "/" + archive.rsplit("/", 1)[1]), p["uri"]
    assert {f["from"] for f in p["files"]} <= set(t.getnames()), p["files"]
assert {(p["selector"]["matchLabels"]["os"]) for p in m["spec"]["platforms"]} == {"linux", "darwin"}
PY

# ---- usage errors (exit 2) ------------------------------------------------------------------------------------
new_cluster
usage_case() { # EXPECTED_TEXT ARGS...
  local want=$1 rc=0; shift
  run "$@" || rc=$?
  if [ "$rc" = 2 ] && grep -qF -- "$want" "$tmp/err"; then ok; else bad "'$*' should exit 2 with '$want' (rc $rc: $(cat "$tmp/err"))"; fi
}
usage_case "Usage:"
usage_case "unknown command 'frob'" frob
usage_case "--dry-run=server is not supported" --dry-run=server migrate train --to gpu-b
usage_case "--dry-run must be none, client or server" --dry-run=maybe nodes
usage_case "checkpoint needs a POD" checkpoint
usage_case "checkpoint takes one POD" checkpoint a b
usage_case "unknown option '--force' for checkpoint" checkpoint train --force
usage_case "restore needs --node NODE" restore gpu-a:/var/lib/gpuckpt/checkpoints/x.tar
usage_case "restore needs an ARCHIVE" restore --node gpu-b
usage_case "neither NODE:/PATH nor an existing local file" restore no-such-file --node gpu-b
usage_case "must not contain '..'" restore gpu-a:/var/lib/gpuckpt/../../etc/passwd --node gpu-b
usage_case "must be a plain file name" restore 'gpu-a:/var/lib/gpuckpt/checkpoints/a;b' --node gpu-b
usage_case "migrate needs --node NODE" migrate train
usage_case "is not a port number" --agent-port abc nodes
usage_case "must be an absolute path" --archive-dir rel nodes
usage_case "nodes takes at most one ARCHIVE" nodes a:/x b:/y
usage_case "-c needs a container name" checkpoint train -c
usage_case "--to needs a node name" migrate train --to
usage_case "--wait 'soon' is not a positive number of seconds" migrate train --to gpu-b --wait soon
usage_case "--agent-namespace needs a namespace" --agent-namespace
usage_case "--stable 'x' is not a number of seconds" migrate train --to gpu-b --stable x
usage_case "--stable 300s must be shorter than --wait 300s" migrate train --to gpu-b --stable 300
usage_case "--force-owned only goes with --delete-source" migrate train --to gpu-b --force-owned
usage_case "jobs needs a NODE" jobs
usage_case "unknown option '--frob' for jobs" jobs gpu-a --frob
usage_case "doctor needs a NODE" doctor
usage_case "unknown option '--frob' for doctor" doctor gpu-a --frob
# doctor NODE: the real `gpuckpt doctor` in NODE's agent pod, reading the host mounted at /host (here gpu-b's fixture
# tree), CRIU left to the installer; its exit status (1: a check failed, the fixture has no plugin installed) is kept
new_cluster
rc=0; run doctor gpu-b --json || rc=$?
expect '[ "$rc" = 1 ] && python3 -c "import json, sys
c = {x[\"name\"]: x for x in json.load(open(sys.argv[1]))[\"checks\"]}
assert c[\"gpu-driver\"][\"status\"] == \"pass\" and \"580.\" in c[\"gpu-driver\"][\"detail\"], c[\"gpu-driver\"]
assert c[\"criu\"][\"status\"] == \"warn\" and c[\"criu-plugin\"][\"status\"] == \"fail\"" "$tmp/out"' \
  "doctor NODE: gpu-b's checks as JSON from its agent pod, exit 1 for the failed check"
expect 'grep -q "exec -n gpuckpt-system gpuckpt-bbbbb -c agent -- gpuckpt doctor --host-root /host --no-criu --json" "$FAKE_CLUSTER/calls.log"' \
  "doctor NODE ran in gpu-b's agent pod with the host root and without CRIU"
run --help && grep -q "kubectl gpuckpt migrate POD --node NODE" "$tmp/out" && ok || bad "--help prints usage on stdout"
run version && grep -q "^kubectl gpuckpt [0-9]" "$tmp/out" && ok || bad "version"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
