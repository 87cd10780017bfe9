#!/usr/bin/env bash
# e2e: gpuckpt on containerd 2.1 (Debian sid's 2.1.9 in setup.sh's private prefix, started by this test under its
# own root, state and sockets; runc 1.1.5, cgroupfs, the `criu` on PATH (setup.sh: trixie's 4.1.1, or sid's 4.2.1
# where that cannot dump) with gpuckpt's plugin dir in CRIU_LIBS_DIR, gpuckpt-nri on containerd's NRI socket),
# driven with the CRI calls kubelet makes (cri-tool):
#   0. the base image comes from a registry (Debian's docker-registry on 127.0.0.1): CRI PullImage, as kubelet;
#      containerd 2.1 pulls it again by the checkpoint's rootfsImageRef at every restore;
#   1. a GPU-looking container (/dev/null as /dev/nvidia0, NVIDIA_VISIBLE_DEVICES=0: GPU 0 of the simulated
#      node) created through CRI is recorded by gpuckpt-nri;
#   2. CRI CheckpointContainer into a kubelet-style directory (checkpoint-<pod>_<ns>-<container>-<time>.tar):
#      containerd writes a plain tar, the agent's kubelet-dir watcher annotates it in place (still a plain tar),
#      `gpuckpt inspect` sees containerd's archive, GPU 0 and the base image containerd will pull;
#   3. restore as kubelet does, with the pod's allocation moved to GPU 1 (a simulated kubelet PodResources server
#      reports GPU 1 for the restore pods' container "counter"): (a) CreateContainer whose image and
#      user_specified_image are the archive path, no devices or env in the request (GPU 1 from PodResources
#      alone), (b) a checkpoint image (`gpuckpt image` loads the archive into containerd's store; CreateContainer
#      with ImageStatus's id + user_specified_image, and the device plugin's /dev/zero as /dev/nvidia1,
#      NVIDIA_VISIBLE_DEVICES=1), then StartContainer. For each restored container: the counter continued from
#      the checkpoint; gpuckpt-nri recognised the restore and planned GPU 0 -> GPU 1; the spec containerd gave runc
#      has GPU 1's node under its own name /dev/nvidia1 with GPU 1's numbers (1:5), no /dev/nvidia0, a cgroup rule
#      allowing 1:5 (and the device cgroup allows it), NVIDIA_VISIBLE_DEVICES=1, the plan's annotation and
#      gpuckpt's createRuntime hook; the hook put the plan into the CRIU images directory containerd restored
#      from (ctrd-restore/checkpoint) before CRIU restored the mounts; the restored container's /dev, which CRIU
#      restores from its image of the source's (/dev/nvidia0 = 1:3), holds GPU 1's /dev/nvidia1 (1:5) and no
#      /dev/nvidia0 for its processes, none of which is a CUDA process (gpuckpt's CRIU plugin, from the plan).
#      (c) a restore from the archive path whose request has no user_specified_image: containerd marks it with an
#      empty checkpointImage, gpuckpt-nri leaves it as containerd made it and says why.
#   4. a plain container of the same base image in a pod PodResources also gives GPU 1 gets nothing from gpuckpt.
# nri-dump (test-only NRI plugin) saves what containerd sends NRI plugins at each CreateContainer under
# CTRD_CAPTURE_DIR (default WORK/capture; test/fixtures/containerd2/ holds a captured set).
# Exit 0 pass, 77 skipped (no root, or setup.sh's containerd 2.1/CRIU/docker-registry/image absent), else fail.
# Every wait is bounded; cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/node-sandbox.sh"
. "$SRC/scripts/lib/containerd-sandbox.sh"
CLI=$BUILD/cli/gpuckpt
AGENT=$BUILD/agent/gpuckpt-agent
CRI_TOOL=$BUILD/test/e2e/cri-tool
NRI=$BUILD/nri-plugin/gpuckpt-nri
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
PODRES=$BUILD/test/podresources/podresources-server
NRI_DUMP=$BUILD/test/e2e/nri-dump
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -n "${CTRD_LOG:-}" ] && tail -n 20 "$CTRD_LOG" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || skip "needs root (containerd, runc, CRIU)"
[ -x "$CTRD_BIN_DIR/containerd" ] || skip "containerd 2.1 not installed in $CTRD_BIN_DIR (scripts/setup.sh)"
[[ "$("$CTRD_BIN_DIR/containerd" --version | awk '{sub(/^v/, "", $3); print $3}')" == 2.1.* ]] ||
  fail "$CTRD_BIN_DIR/containerd is not 2.1.x: $("$CTRD_BIN_DIR/containerd" --version)"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
. "$SRC/scripts/lib/criu-probe.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
command -v docker-registry >/dev/null || skip "docker-registry not installed (scripts/setup.sh)"
podman image exists "$IMAGE" || skip "image $IMAGE missing (scripts/setup.sh builds it)"
for b in "$CLI" "$AGENT" "$CRI_TOOL" "$NRI" "$HOOK" "$PODRES" "$NRI_DUMP"; do [ -x "$b" ] || fail "$b not built"; done

TMP=/tmp/gpuckpt-e2e-containerd2-$$-$(date +%s%N)
mkdir -m 700 "$TMP"
AGENT_PID='' NRI_PID='' REGISTRY_PID='' PODRES_PID='' DUMP_PID=''
cleanup() {
  set +e
  sandbox_stop_agent
  for p in "$NRI_PID" "$DUMP_PID" "$PODRES_PID" "$REGISTRY_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  ctrd_stop
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

cri() { "$CRI_TOOL" "$CTRD_SOCK" "$@"; }
count_of() { sandbox_count_of "$1" || fail "no counter value in process $1"; }   # count_of PID
# shellcheck disable=SC2016 # expanded by the container's shell; written then renamed: a read never sees it half-written
COUNTER='i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'

sandbox_prepare "$TMP" "$BUILD" "$SRC" || fail "cannot prepare the simulated node in $TMP"
KDIR=$TMP/kubelet/checkpoints
mkdir -p "$KDIR"
printf '127.0.0.1 localhost\n' > "$TMP/hosts"   # kubelet's /etc/hosts mount of every container
sed -i "s#kubelet_dir: \"\"#kubelet_dir: $KDIR, watch_interval_seconds: 1#" "$TMP/agent.yaml"

step "0. containerd 2.1, a registry on 127.0.0.1, the base image pulled through CRI"
ctrd_start_registry "$TMP/registry" || fail "docker-registry did not start"
BASE=$REGISTRY/gpuckpt-busybox:latest
podman push -q --tls-verify=false "$IMAGE" "docker://$BASE" || fail "podman push $IMAGE to $BASE"
mkdir -p "$TMP/criu-plugins"
cp "$BUILD/criu-plugin/gpuckpt_plugin.so" "$TMP/criu-plugins/" || fail "criu-plugin/gpuckpt_plugin.so not built"
export CRIU_LIBS_DIR=$TMP/criu-plugins   # containerd -> shim -> runc -> CRIU: CRIU loads gpuckpt's plugin from here
ctrd_start "$TMP/containerd" || fail "containerd 2.1 did not start"
ctrd_registry_host "$REGISTRY"
BASE_REF=$(cri pull "$BASE") || fail "CRI PullImage $BASE"
BASE_ID=$(cri image-id "$BASE") || fail "CRI ImageStatus $BASE"
echo "ok: containerd $CTRD_VERSION on $CTRD_SOCK; $BASE pulled through CRI ($BASE_REF)"

step "1. gpuckpt-nri registers; a GPU container created through CRI is recorded on GPU 0"
# nri-dump (test-only NRI plugin) saves what containerd tells NRI plugins at each CreateContainer; its index (10)
# is before gpuckpt-nri's (50), so it sees the container before any plugin's adjustment
CAPTURE=${CTRD_CAPTURE_DIR:-$TMP/capture}
"$NRI_DUMP" --socket "$CTRD_NRI_SOCK" --out "$CAPTURE" --idx 10 2> "$TMP/nri-dump.log" &
DUMP_PID=$!
"$NRI" --socket "$CTRD_NRI_SOCK" --state-dir "$STATE" --host-root "$ROOT" --hook "$HOOK" --once > "$TMP/nri.log" 2>&1 &
NRI_PID=$!
for _ in $(seq 100); do grep -q "registered with containerd" "$TMP/nri.log" && break; sleep 0.1; done
grep -q "registered with containerd 2.1" "$TMP/nri.log" || fail "gpuckpt-nri did not register: $(cat "$TMP/nri.log")"
for _ in $(seq 100); do grep -q registered "$TMP/nri-dump.log" && break; sleep 0.1; done
grep -q registered "$TMP/nri-dump.log" || fail "nri-dump did not register: $(cat "$TMP/nri-dump.log")"
sandbox_start_agent "$AGENT" || fail "agent did not start"
POD=$(cri run-pod gpuckpt-src) || fail "RunPodSandbox"
CID=$(cri create gpuckpt-src "$POD" counter "$BASE_ID" --user-image "$BASE" --device /dev/null:/dev/nvidia0 \
  --env NVIDIA_VISIBLE_DEVICES=0 --mount "$TMP/hosts:/etc/hosts" -- sh -c "$COUNTER") 2>&1 ||
  fail "CreateContainer: $CID"
cri start "$CID" || fail "StartContainer"
PID=$(cri pid "$CID")
[ -f "$STATE/containers/$CID.json" ] || fail "gpuckpt-nri did not record $CID: $(tail -3 "$TMP/nri.log")"
python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]; assert g["record"]["used_gpu_ids"]==[sys.argv[2]], g' \
  "$STATE/containers/$CID.json" "$GPU0" || fail "the NRI record does not name GPU 0"
echo "ok: $CID recorded on $GPU0"

step "2. CRI CheckpointContainer into the kubelet's checkpoint dir; the watcher annotates it"
sandbox_counts_past "$PID" 10 || fail "the source container does not count"
ARCHIVE=$KDIR/checkpoint-gpuckpt-src_default-counter-$(date -u +%Y-%m-%dT%H:%M:%SZ).tar
cri checkpoint "$CID" "$ARCHIVE" || fail "CRI CheckpointContainer"
for _ in $(seq 100); do grep -q "annotated kubelet archive $ARCHIVE" "$TMP/agent.log" && break; sleep 0.1; done
grep -q "annotated kubelet archive $ARCHIVE" "$TMP/agent.log" || fail "the watcher did not annotate it: $(tail -3 "$TMP/agent.log")"
tar -tf "$ARCHIVE" > "$TMP/entries.txt" || fail "$ARCHIVE is not a plain tar after the watcher rewrote it"
for e in config.dump spec.dump status.dump gpuckpt-gpus.json checkpoint/inventory.img; do
  grep -qx "$e" "$TMP/entries.txt" || fail "the annotated archive lacks $e"
done
N1=$(tar -xOf "$ARCHIVE" rootfs-diff.tar | tar -xzOf - tmp/count)
sandbox_counts_past "$PID" "$N1" || fail "the checkpointed container stopped counting"
"$CLI" inspect "$ARCHIVE" --host-root "$ROOT" --json > "$TMP/inspect.json" 2> "$TMP/inspect.err" || fail "gpuckpt inspect"
python3 - "$TMP/inspect.json" "$GPU0" <<'PY' || fail "inspect does not see containerd's checkpoint"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["engine"] == "containerd", i["engine"]
assert i["gpus"]["record"]["used_gpu_ids"] == [sys.argv[2]], i["gpus"]
PY
echo "ok: $(basename "$ARCHIVE"): plain tar, annotated (GPU 0), counter at $N1, source keeps running"
cri stop "$CID" || fail "StopContainer (source)"
cri stop-pod "$POD" || fail "StopPodSandbox (source)"

step "3. the pod's allocation moved to GPU 1: the PodResources server reports it"
mkdir -p "$TMP/pod-resources"
python3 - "$TMP/pod-resources.json" "$GPU1" <<'PY'
import json, sys
pods = [{"name": n, "namespace": "default", "containers": [{"name": "counter",
         "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [sys.argv[2]]}]}]}
        for n in ("gpuckpt-restored-path", "gpuckpt-restored-image", "gpuckpt-plain")]
json.dump({"pods": pods}, open(sys.argv[1], "w"))
PY
"$PODRES" "$TMP/pod-resources/kubelet.sock" "$TMP/pod-resources.json" > "$TMP/podres.log" 2>&1 &
PODRES_PID=$!
for _ in $(seq 100); do grep -qx listening "$TMP/podres.log" && break; sleep 0.1; done
grep -qx listening "$TMP/podres.log" || fail "podresources-server did not start: $(cat "$TMP/podres.log")"
# gpuckpt-nri learns allocations from the kubelet's PodResources socket: restart it with ours
kill "$NRI_PID"; wait "$NRI_PID" 2>/dev/null || true   # its status after SIGTERM is not ours to judge
"$NRI" --socket "$CTRD_NRI_SOCK" --state-dir "$STATE" --host-root "$ROOT" --hook "$HOOK" \
  --pod-resources-socket "$TMP/pod-resources/kubelet.sock" --once >> "$TMP/nri.log" 2>&1 &
NRI_PID=$!
for _ in $(seq 100); do [ "$(grep -c "registered with containerd" "$TMP/nri.log")" -ge 2 ] && break; sleep 0.1; done
[ "$(grep -c "registered with containerd" "$TMP/nri.log")" -ge 2 ] || fail "gpuckpt-nri did not register again: $(tail -3 "$TMP/nri.log")"
echo "ok: PodResources reports $GPU1 for the container 'counter' of the restore pods and of a plain pod"

# bundle_spec ID: the OCI spec containerd gave runc for the container (NRI's adjustments applied)
bundle_spec() {
  local spec=$CTRD_WORK/state/io.containerd.runtime.v2.task/k8s.io/$1/config.json
  [ -f "$spec" ] || fail "no bundle spec $spec"
  echo "$spec"
}

# restored_check NAME RID: what gpuckpt-nri, its hook and gpuckpt's CRIU plugin did to one restored container (see
# the header).
restored_check() {
  local name=$1 rid=$2 rpid nr spec plan_path plan_id
  rpid=$(cri pid "$rid")
  [ "$rpid" -gt 0 ] || fail "$name: no running process"
  nr=$(count_of "$rpid")
  [ "$nr" -ge "$N1" ] || fail "$name: the restored counter started over ($nr) instead of continuing from $N1"
  sandbox_counts_past "$rpid" "$nr" || fail "$name: the restored counter does not count (at $nr)"
  plan_path=$CTRD_ROOT/io.containerd.grpc.v1.cri/containers/$rid/ctrd-restore/checkpoint/gpuckpt-restore-plan.json
  grep -q "restore plan rp-[0-9a-f]* placed in $plan_path" "$STATE/hook.log" ||
    fail "$name: the hook did not place a restore plan in containerd's CRIU images dir ($plan_path): $(tail -3 "$STATE/hook.log" 2>/dev/null)"
  plan_id=$(sed -n "s#.*restore plan \(rp-[0-9a-f]*\) placed in $plan_path.*#\1#p" "$STATE/hook.log" | tail -1)
  # the plan is single use: the hook moved it out of the state dir, containerd deletes ctrd-restore once the
  # container runs; what it held is in gpuckpt-nri's log
  grep -qF "as container $rid: plan $plan_id ($GPU0 -> $GPU1)," "$TMP/nri.log" ||
    fail "$name: gpuckpt-nri did not plan $plan_id as $GPU0 -> $GPU1: $(grep -v ' param: ' "$TMP/nri.log" | tail -3)"
  spec=$(bundle_spec "$rid")
  python3 - "$spec" "$plan_id" "$HOOK" <<'PY' || fail "$name: the spec containerd gave runc ($spec)"
import json, sys
spec_file, plan_id, hook = sys.argv[1:]
spec = json.load(open(spec_file))
devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in spec["linux"].get("devices", [])}
assert devices.get("/dev/nvidia1") == ("c", 1, 5), f"GPU 1's node is not /dev/nvidia1 c 1:5: {devices}"
assert "/dev/nvidia0" not in devices, f"the source GPU's node is in the spec: {devices}"
rules = spec["linux"]["resources"].get("devices", [])
assert any(r.get("allow") and r.get("type") == "c" and r.get("major") == 1 and r.get("minor") == 5 and
           "r" in r.get("access", "") and "w" in r.get("access", "") for r in rules), f"no cgroup rule allows c 1:5 rw: {rules}"
visible = [e.split("=", 1)[1] for e in spec["process"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
assert visible and set(visible) == {"1"}, f"NVIDIA_VISIBLE_DEVICES: {visible}"
assert spec["annotations"].get("io.gpuckpt.restore-plan") == plan_id, spec["annotations"]
assert any(h["path"] == hook for h in spec.get("hooks", {}).get("createRuntime", [])), spec.get("hooks")
PY
  # cgroup v1 devices controller (where there is one): what runc applied from that spec
  local cg
  cg=$(sed -n 's/^[0-9]*:devices:\(.*\)/\1/p' "/proc/$rpid/cgroup")
  if [ -n "$cg" ] && [ -f "/sys/fs/cgroup/devices$cg/devices.list" ]; then
    grep -Eq '^(c 1:5|c \*:\*|a \*:\*) rw' "/sys/fs/cgroup/devices$cg/devices.list" ||
      fail "$name: the device cgroup does not allow 1:5: $(tr '\n' ' ' < "/sys/fs/cgroup/devices$cg/devices.list")"
  fi
  # What the restored processes see (a shell and its children, no CUDA process): CRIU restored /dev from its image
  # of the source's, which holds GPU 0's /dev/nvidia0 (1:3); the plugin gave it the plan's nodes before they ran.
  local dev=/proc/$rpid/root/dev nodes
  nodes=$(cd "$dev" && for f in nvidia*; do [ -e "$f" ] && stat -c '%n %F %t:%T' "$f"; done | tr '\n' ' ')
  [ "$(stat -c '%F %t:%T' "$dev/nvidia1" 2>/dev/null)" = "character special file 1:5" ] ||
    fail "$name: the restored container's /dev has no GPU 1 node /dev/nvidia1 (1:5); its nvidia nodes: ${nodes:-none}"
  [ ! -e "$dev/nvidia0" ] && [ ! -L "$dev/nvidia0" ] ||
    fail "$name: the restored container's /dev still has the source GPU's /dev/nvidia0; its nvidia nodes: $nodes"
  echo "ok: $name: counter $N1 -> $nr; spec: /dev/nvidia1 c 1:5 (GPU 1), no /dev/nvidia0, cgroup rule c 1:5 rw, NVIDIA_VISIBLE_DEVICES=1; plan $plan_id ($GPU0 -> $GPU1) placed in ctrd-restore/checkpoint; inside: $nodes"
}

step "3a. restore from the archive path (RunPodSandbox + CreateContainer image=path + StartContainer)"
# As kubelet sends it: image and user_specified_image are the pod's image, here the archive's path (containerd
# records user_specified_image as the restore's checkpointImage). No devices or env in the request: the GPU comes
# from the kubelet's allocation alone (PodResources), as where a runtime drops the request's devices.
POD_A=$(cri run-pod gpuckpt-restored-path) || fail "RunPodSandbox (restore a)"
RID_A=$(cri create gpuckpt-restored-path "$POD_A" counter "$ARCHIVE" --user-image "$ARCHIVE" \
  --mount "$TMP/hosts:/etc/hosts" -- sh -c "$COUNTER" 2>&1) || fail "CreateContainer from $ARCHIVE: $RID_A"
cri start "$RID_A" 2> "$TMP/start-a.err" || fail "StartContainer (restore a): $(cat "$TMP/start-a.err")"
restored_check "restore from the archive path" "$RID_A"

step "3b. restore from a checkpoint image loaded by the agent (gpuckpt image)"
cp "$ARCHIVE" "$CK/"   # the archive as moved to the target node's agent
sandbox_stop_agent
sed -i '/^runtime:/d' "$TMP/agent.yaml"
echo "runtime: {kind: cri, cri: {endpoint: unix://$CTRD_SOCK}}" >> "$TMP/agent.yaml"
rm -f "$STATE/agent.port"
sandbox_start_agent "$AGENT" || fail "agent did not start (runtime.kind cri)"
"$CLI" image "$(basename "$ARCHIVE")" --tag gpuckpt-e2e-ctrd2 --agent "$URL" --token-file "$TOKEN_FILE" > "$TMP/image.txt" ||
  fail "gpuckpt image: $(tail -3 "$TMP/agent.log")"
CK_IMAGE=$(sed -n 's/^  image: *//p' "$TMP/image.txt")
[ "$CK_IMAGE" = localhost/gpuckpt-checkpoint:gpuckpt-e2e-ctrd2 ] || fail "gpuckpt image printed: $(cat "$TMP/image.txt")"
CK_ID=$(cri image-id "$CK_IMAGE") || fail "CRI ImageStatus $CK_IMAGE"
# As kubelet sends it: image = ImageStatus's id, user_specified_image = the pod's image; the device plugin's
# device and env for GPU 1
POD_B=$(cri run-pod gpuckpt-restored-image) || fail "RunPodSandbox (restore b)"
RID_B=$(cri create gpuckpt-restored-image "$POD_B" counter "$CK_ID" --user-image "$CK_IMAGE" --device /dev/zero:/dev/nvidia1 \
  --env NVIDIA_VISIBLE_DEVICES=1 --mount "$TMP/hosts:/etc/hosts" -- sh -c "$COUNTER" 2>&1) ||
  fail "CreateContainer from $CK_IMAGE: $RID_B"
cri start "$RID_B" 2> "$TMP/start-b.err" || fail "StartContainer (restore b): $(cat "$TMP/start-b.err")"
restored_check "restore from the checkpoint image" "$RID_B"

step "3c. a restore whose request names no user_specified_image: nothing names the checkpoint, gpuckpt-nri says so"
POD_C=$(cri run-pod gpuckpt-restored-unnamed) || fail "RunPodSandbox (restore c)"
RID_C=$(cri create gpuckpt-restored-unnamed "$POD_C" counter "$ARCHIVE" --mount "$TMP/hosts:/etc/hosts" \
  -- sh -c "$COUNTER" 2>&1) || fail "CreateContainer from $ARCHIVE without user_specified_image: $RID_C"
grep -q "containerd restore as container $RID_C left as containerd made it: .*no user_specified_image" "$TMP/nri.log" ||
  fail "gpuckpt-nri did not say why it left $RID_C alone: $(grep -v ' param: ' "$TMP/nri.log" | tail -3)"
cri rm "$RID_C" >/dev/null 2>&1 || true
echo "ok: $RID_C: gpuckpt-nri left it as containerd made it and said why (no checkpointImage)"

step "4. a plain container of the same base image, in a pod the kubelet gave GPU 1, is left as containerd made it"
POD_P=$(cri run-pod gpuckpt-plain) || fail "RunPodSandbox (plain)"
RID_P=$(cri create gpuckpt-plain "$POD_P" counter "$BASE_ID" --user-image "$BASE" --mount "$TMP/hosts:/etc/hosts" \
  -- sh -c "$COUNTER" 2>&1) || fail "CreateContainer (plain): $RID_P"
cri start "$RID_P" || fail "StartContainer (plain)"
python3 - "$(bundle_spec "$RID_P")" <<'PY' || fail "gpuckpt-nri changed a container that is no restore"
import json, sys
spec = json.load(open(sys.argv[1]))
assert not [d for d in spec["linux"].get("devices", []) if d["path"].startswith("/dev/nvidia")], spec["linux"]["devices"]
assert not [e for e in spec["process"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")], spec["process"]["env"]
assert not [k for k in spec.get("annotations", {}) if k.startswith("io.gpuckpt.")], spec["annotations"]
assert not spec.get("hooks", {}).get("createRuntime"), spec["hooks"]
PY
! grep -q "as container $RID_P" "$TMP/nri.log" || fail "gpuckpt-nri took the plain container for a restore: $(grep "$RID_P" "$TMP/nri.log")"
echo "ok: plain container $RID_P: no GPU node, env, gpuckpt annotation or hook"
echo PASS
