#!/usr/bin/env bash
# e2e: gpuckpt on containerd 1.7 (Debian trixie's 1.7.24, started by this test under its own root, state and
# sockets) + runc + CRIU 4.1 + gpuckpt-nri (NRI enabled), with pods and containers created through CRI by
# cri-tool (the agent's CRI client):
#   0. gpuckpt-nri registers over containerd's NRI socket; a GPU-looking container created through CRI (device
#      aliases /dev/null as /dev/nvidia0, NVIDIA_VISIBLE_DEVICES=0) is recorded on the simulated node's GPU 0, a
#      plain one is not, a removed one is forgotten;
#   1. the CRI client reports containerd's name and version; CRI CheckpointContainer is UNIMPLEMENTED in 1.7 and
#      both cri-tool and the agent (runtime.kind: cri) say so with the version and what to do;
#   2. the agent (runtime.kind: containerd) checkpoints it through containerd's task API while it keeps running;
#      the archive has the podman/CRI-O layout, the GPU record and annotations; `gpuckpt inspect` and checkpointctl
#      call it containerd's;
#   3. the agent restores it as a new containerd container: it continues counting;
#   4. restored with another allocation (target GPU 1): GPU 1's node is /dev/nvidia1, NVIDIA_VISIBLE_DEVICES=1,
#      and the restore plan reached CRIU's images directory;
#   5. an archive that containerd did not write is refused with a reason; nothing is left behind;
#   6. gpuckpt-nri acts only on a restore, recognised by containerd 2.x's own marks (CRI annotations
#      restored=true, checkpointImage=<the checkpoint image>; containerd 1.7 cannot restore through CRI, so this
#      test sets those annotations on a CreateContainer as containerd 2.x does, and NRI shows them the same way in
#      1.7 and 2.1.9) of a checkpoint image the agent registered: 6a an ordinary container of the loaded
#      checkpoint image is left alone, the restore-shaped one gets the allocation (the device plugin's GPU 1 at
#      /dev/nvidia1); 6b with runtime.kind cri (as on containerd >= 2.0 nodes), `gpuckpt runtime` says restores
#      are pods, `gpuckpt image` turns the archive into a checkpoint image in containerd's store (what `kubectl
#      gpuckpt migrate` does on the target), and a bare tag `busybox` makes no busybox container a restore; 6 the
#      restore-shaped container on the base image: GPU 1's node is /dev/nvidia1, NVIDIA_VISIBLE_DEVICES follows, a
#      plan for GPU 0 -> GPU 1 bound to the container is in the state dir under the id its annotation names, the
#      OCI hook that places it for CRIU is in its createRuntime hooks; the marks naming an image the agent never
#      registered change nothing; a restore without any GPU devices (and no PodResources) is refused, saying why.
# containerd 2.1.9's own CRI restore is driven by test/e2e/containerd2_flow.sh.
# Exit 0 pass, 77 skipped (no root/containerd/criu), anything else fails. Every wait is bounded; cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/node-sandbox.sh"
. "$SRC/scripts/lib/containerd-sandbox.sh"
CLI=$BUILD/cli/gpuckpt
AGENT=$BUILD/agent/gpuckpt-agent
CRI_TOOL=$BUILD/test/e2e/cri-tool
NRI=$BUILD/nri-plugin/gpuckpt-nri
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -n "${CTRD_LOG:-}" ] && tail -n 20 "$CTRD_LOG" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || skip "needs root (containerd, runc, CRIU)"
command -v containerd >/dev/null || skip "containerd not installed (scripts/setup.sh)"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
. "$SRC/scripts/lib/criu-probe.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
podman image exists "$IMAGE" || skip "image $IMAGE missing (scripts/setup.sh builds it)"
for b in "$CLI" "$AGENT" "$CRI_TOOL" "$NRI"; do [ -x "$b" ] || fail "$b not built"; done

TMP=/tmp/gpuckpt-e2e-containerd-$$-$(date +%s%N)
mkdir -m 700 "$TMP"
AGENT_PID=
NRI_PID=
cleanup() {
  set +e
  sandbox_stop_agent
  [ -n "$NRI_PID" ] && kill "$NRI_PID" 2>/dev/null && wait "$NRI_PID" 2>/dev/null
  ctrd_stop
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

sandbox_prepare "$TMP" "$BUILD" "$SRC" || fail "cannot prepare the simulated node in $TMP"
use_runtime() {  # use_runtime YAML: restart the agent with this runtime section
  sandbox_stop_agent || true   # the agent's exit status after SIGTERM is not ours to judge
  sed -i '/^runtime:/d' "$TMP/agent.yaml"
  echo "runtime: $1" >> "$TMP/agent.yaml"
  rm -f "$STATE/agent.port"
  sandbox_start_agent "$AGENT" || fail "agent did not start: $(tail -5 "$TMP/agent.log")"
}
cri() { "$CRI_TOOL" "$CTRD_SOCK" "$@"; }
count_of() { sandbox_count_of "$1" || fail "no counter value in process $1"; }   # count_of PID
adjusted_to_gpu1() {  # adjusted_to_gpu1 CID: gpuckpt-nri gave the container GPU 1's node (as /dev/nvidia1) and a plan
  ctrd_ctr containers info "$1" | python3 -c '
import json, sys
spec = json.load(sys.stdin)["Spec"]
dev = {d["path"]: (d["major"], d["minor"]) for d in spec["linux"]["devices"]}
assert dev["/dev/nvidia1"] == (1, 5) and "/dev/nvidia0" not in dev, dev
assert spec["annotations"]["io.gpuckpt.restore-plan"].startswith("rp-"), spec["annotations"]'
}
not_adjusted() {  # not_adjusted CID: the container is as the request made it (no plan, no hook from gpuckpt-nri)
  ctrd_ctr containers info "$1" | python3 -c '
import json, sys
spec = json.load(sys.stdin)["Spec"]
assert "io.gpuckpt.restore-plan" not in spec.get("annotations", {}), spec["annotations"]
assert not spec.get("hooks", {}).get("createRuntime"), spec["hooks"]'
}
# The CRI annotations containerd 2.x sets on the container it restores from checkpoint image $1.
restore_marks() { echo --annotation restored=true --annotation checkpointedAt=2026-11-26T06:00:00Z --annotation "checkpointImage=$1"; }

step "start containerd"
ctrd_start "$TMP/containerd" || fail "containerd did not start"
ctrd_import_image "$IMAGE" || fail "cannot import $IMAGE into containerd"
echo "ok: containerd $(containerd --version | awk '{print $3}') on $CTRD_SOCK"

step "0. gpuckpt-nri records GPU containers created through CRI"
# No kubelet here: no PodResources socket; the restore allocation is the devices the request carries (containerd
# keeps them).
"$NRI" --socket "$CTRD_NRI_SOCK" --state-dir "$STATE" --host-root "$ROOT" --hook "$BUILD/oci-hook/gpuckpt-oci-hook" --pod-resources-socket '' \
  --once > "$TMP/nri.log" 2>&1 &
NRI_PID=$!
for _ in $(seq 100); do grep -q "registered with containerd" "$TMP/nri.log" && break; sleep 0.1; done
grep -q "registered with containerd 1.7" "$TMP/nri.log" || fail "gpuckpt-nri did not register: $(cat "$TMP/nri.log")"
echo "ok: $(grep -o 'NRI: registered with .*' "$TMP/nri.log")"
POD=$(cri run-pod gpuckpt-e2e) || fail "RunPodSandbox"
# shellcheck disable=SC2016 # expanded by the container's shell; written then renamed: a read (or the rootfs diff) never sees it half-written
COUNTER='i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'
CID=$(cri create gpuckpt-e2e "$POD" counter "$IMAGE" --device /dev/null:/dev/nvidia0 \
  --env NVIDIA_VISIBLE_DEVICES=0 -- sh -c "$COUNTER") || fail "CreateContainer"
cri start "$CID" || fail "StartContainer"
PLAIN=$(cri create gpuckpt-e2e "$POD" plain "$IMAGE" -- sleep 600) || fail "CreateContainer (plain)"
REC=$STATE/containers/$CID.json
[ -f "$REC" ] || fail "gpuckpt-nri did not record $CID: $(tail -3 "$TMP/nri.log")"
python3 - "$REC" "$GPU0" <<'PY' || fail "NRI record content"
import json, sys
g = json.load(open(sys.argv[1]))["gpus"]
assert g["record"]["used_gpu_ids"] == [sys.argv[2]], g["record"]["used_gpu_ids"]
assert {d["container_path"]: d["gpu_id"] for d in g["devices"]}["/dev/nvidia0"] == sys.argv[2], g["devices"]
assert g["gpu_env"]["NVIDIA_VISIBLE_DEVICES"] == "0"
PY
[ ! -e "$STATE/containers/$PLAIN.json" ] || fail "the plain container was recorded"
cri rm "$PLAIN" || fail "RemoveContainer"
echo "ok: recorded $CID on $GPU0 (the hook's record format), the plain container not"

step "1. the CRI client: version, and CheckpointContainer is UNIMPLEMENTED before containerd 2.0"
V=$(cri version) || fail "CRI Version"
[[ "$V" == "containerd 1.7."* ]] || fail "CRI Version answered '$V'"
echo "ok: CRI Version -> $V"
PID=$(cri pid "$CID")
[ "$PID" -gt 0 ] && [ -e "/proc/$PID" ] || fail "CRI verbose status gave pid '$PID'"
set +e
cri checkpoint "$CID" "$TMP/cri.tar" 2> "$TMP/unimplemented.txt"
rc=$?
set -e
[ "$rc" = 3 ] || fail "cri-tool checkpoint: expected exit 3 (not supported), got $rc: $(cat "$TMP/unimplemented.txt")"
grep -q "containerd 1.7" "$TMP/unimplemented.txt" && grep -q "from 2.0" "$TMP/unimplemented.txt" &&
  grep -q "runtime.kind: containerd" "$TMP/unimplemented.txt" || fail "unclear error: $(cat "$TMP/unimplemented.txt")"
echo "ok: $(grep cri-tool: "$TMP/unimplemented.txt" | cut -c1-200)..."
use_runtime "{kind: cri, cri: {endpoint: unix://$CTRD_SOCK}}"
grep -q "runtime: containerd 1.7" "$TMP/agent.log" || fail "the agent did not log the CRI runtime's version"
# Read whole first: grep -q stops at the first match, and curl then writing into a closed pipe fails the pipeline
# under pipefail whenever /metrics outgrows the pipe's buffer before grep is done.
METRICS=$(curl -s "$URL/metrics")
grep -q '^gpuckpt_runtime_info{kind="cri",name="containerd",version="1\.7\.' <<< "$METRICS" ||
  fail "the CRI runtime's name and version are not in /metrics"
r=$(sandbox_api POST /v1/checkpoints '{"namespace":"default","pod":"gpuckpt-e2e","container":"counter"}')
[ "${r%% *}" = 202 ] || fail "POST /v1/checkpoints (cri): $r"
r=$(sandbox_wait_job checkpoints "$(sandbox_json_field "$r" '["id"]')")
[ "$(sandbox_json_field "$r" '["state"]')" = failed ] && [[ "$r" == *"does not implement CheckpointContainer"* ]] ||
  fail "the agent's CRI checkpoint on containerd 1.7 should fail with the reason: $r"
echo "ok: the agent (runtime.kind: cri) reports the missing CheckpointContainer"
[ -z "$(ls -A "$CK")" ] || fail "a failed checkpoint left files: $(ls -A "$CK")"

step "2. checkpoint through containerd's task API (runtime.kind: containerd)"
use_runtime "{kind: containerd, containerd: {address: $CTRD_SOCK}}"
sleep 1
r=$(sandbox_api POST /v1/checkpoints '{"namespace":"default","pod":"gpuckpt-e2e","container":"counter","image":"gpuckpt-e2e-ck"}')
[ "${r%% *}" = 202 ] || fail "POST /v1/checkpoints (containerd): $r"
r=$(sandbox_wait_job checkpoints "$(sandbox_json_field "$r" '["id"]')")
[ "$(sandbox_json_field "$r" '["state"]')" = succeeded ] || fail "containerd checkpoint job: $r"
ARCHIVE=$(sandbox_json_field "$r" '["result"]["archive"]')
r_ck=$r
N1=$(tar -xOf "$ARCHIVE" rootfs-diff.tar | tar -xOf - tmp/count)
echo "ok: checkpoint in $(sandbox_json_field "$r" '["phase_seconds"]["total"]') s -> $ARCHIVE (counter at $N1)"
sandbox_counts_past "$PID" "$N1" || fail "the checkpointed container stopped counting"
echo "ok: the container keeps running after the checkpoint"
tar -tf "$ARCHIVE" > "$TMP/entries.txt" || fail "tar cannot list $ARCHIVE"
for e in config.dump spec.dump rootfs-diff.tar deleted.files checkpoint/inventory.img; do
  grep -qx "$e" "$TMP/entries.txt" || fail "archive lacks $e"
done
"$CLI" inspect "$ARCHIVE" --host-root "$ROOT" --json > "$TMP/inspect.json" || fail "gpuckpt inspect"
python3 - "$TMP/inspect.json" "$GPU0" <<'PY' || fail "inspect does not see containerd's checkpoint"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["engine"] == "containerd", i["engine"]
assert i["criu_images"] and "/dev/nvidia0" in i["spec_devices"], i
assert i["annotations"]["io.gpuckpt.used-gpus"] == sys.argv[2], i["annotations"]
assert i["gpus"]["record"]["used_gpu_ids"] == [sys.argv[2]]
PY
echo "ok: gpuckpt inspect: engine containerd, CRIU images, /dev/nvidia0, GPU record + io.gpuckpt.* annotations"
if command -v checkpointctl >/dev/null; then
  checkpointctl show "$ARCHIVE" > "$TMP/checkpointctl.txt" 2>&1 || fail "checkpointctl: $(cat "$TMP/checkpointctl.txt")"
  grep -q containerd "$TMP/checkpointctl.txt" || fail "checkpointctl: $(cat "$TMP/checkpointctl.txt")"
  echo "ok: checkpointctl reads it as containerd's"
fi

step "3. restore through containerd as a new container: it continues"
r=$(sandbox_api POST /v1/restores "{\"archive\":\"$(basename "$ARCHIVE")\",\"name\":\"gpuckpt-e2e-restored\",\"target_gpus\":[\"$GPU0\"]}")
[ "${r%% *}" = 202 ] || fail "POST /v1/restores: $r"
r=$(sandbox_wait_job restores "$(sandbox_json_field "$r" '["id"]')")
[ "$(sandbox_json_field "$r" '["state"]')" = succeeded ] || fail "restore job: $r"
RPID=$(ctrd_ctr tasks ls | awk '$1 == "gpuckpt-e2e-restored" {print $2}')
[ -n "$RPID" ] && [ -e "/proc/$RPID" ] || fail "no running task gpuckpt-e2e-restored: $(ctrd_ctr tasks ls)"
NR=$(count_of "$RPID")
[ "$NR" -ge "$N1" ] || fail "the restored counter started over ($NR) instead of continuing from $N1"
sandbox_counts_past "$RPID" "$NR" || fail "the restored counter does not count: at $NR"
N2=$(count_of "$RPID")
echo "ok: restored in $(sandbox_json_field "$r" '["phase_seconds"]["total"]') s; counter checkpointed at $N1, continues at $N2"
LAYOUT=$(sandbox_json_field "$r_ck" '["result"]["image"]["layout"]')
[ "$(ls -A "$CK" | sort)" = "$(printf '%s\n' "$(basename "$ARCHIVE")" "$(basename "$LAYOUT")" | sort)" ] ||
  fail "restore left files in $CK: $(ls -A "$CK")"

step "4. restored with another allocation (GPU 1): the devices and the CRIU plugin's plan follow"
r=$(sandbox_api POST /v1/restores "{\"archive\":\"$(basename "$ARCHIVE")\",\"name\":\"gpuckpt-e2e-moved\",\"target_gpus\":[\"$GPU1\"]}")
[ "${r%% *}" = 202 ] || fail "POST /v1/restores (GPU 1): $r"
r=$(sandbox_wait_job restores "$(sandbox_json_field "$r" '["id"]')")
[ "$(sandbox_json_field "$r" '["state"]')" = succeeded ] || fail "restore onto GPU 1: $r"
MPID=$(ctrd_ctr tasks ls | awk '$1 == "gpuckpt-e2e-moved" {print $2}')
[ -n "$MPID" ] || fail "no running task gpuckpt-e2e-moved"
DEV=$(stat -c '%t:%T' "/proc/$MPID/root/dev/nvidia1")
[ "$DEV" = 1:5 ] || fail "/dev/nvidia1 in the restored container is $DEV, expected 1:5 (GPU 1's node on this node)"
[ ! -e "/proc/$MPID/root/dev/nvidia0" ] || fail "/dev/nvidia0 (the source GPU's name) is still in the restored container"
# The restored processes keep their environment (it is in their memory); the spec's is what new processes
# (exec) get, as with podman.
ctrd_ctr containers info gpuckpt-e2e-moved | python3 -c 'import json,sys; assert "NVIDIA_VISIBLE_DEVICES=1" in json.load(sys.stdin)["Spec"]["process"]["env"]' ||
  fail "NVIDIA_VISIBLE_DEVICES not remapped in the restored container's spec"
grep -q "restore plan rp-.* placed in .*/checkpoint/gpuckpt-restore-plan.json" "$TMP/agent.log" ||
  fail "the restore plan did not reach CRIU's images directory: $(tail -3 "$TMP/agent.log")"
sandbox_counts_past "$MPID" "$(count_of "$MPID")" || fail "the moved container does not count"
echo "ok: /dev/nvidia0 became GPU 1's /dev/nvidia1 ($DEV), spec NVIDIA_VISIBLE_DEVICES=1, plan in CRIU's images dir, still counting"

mkdir "$CK/.gpuckpt-containerd-restore-999999999-dead"   # left by an agent that stopped mid-restore
step "5. an archive containerd did not write is refused"
zstd -dcq "$ARCHIVE" > "$TMP/plain.tar" || fail "$ARCHIVE is not zstd-compressed"
python3 - "$TMP/plain.tar" "$CK/foreign.tar" <<'PY'
import io, json, sys, tarfile
src, dst = tarfile.open(sys.argv[1]), tarfile.open(sys.argv[2], "w")
for m in src.getmembers():
    data = src.extractfile(m).read() if m.isfile() else None
    if m.name == "config.dump":
        c = json.loads(data); c.pop("containerd"); c.pop("engine"); data = json.dumps(c).encode(); m.size = len(data)
    dst.addfile(m, io.BytesIO(data) if data is not None else None)
PY
r=$(sandbox_api POST /v1/restores '{"archive":"foreign.tar","name":"gpuckpt-e2e-foreign"}')
r=$(sandbox_wait_job restores "$(sandbox_json_field "$r" '["id"]')")
[ "$(sandbox_json_field "$r" '["state"]')" = failed ] && [[ "$r" == *"not written by containerd"* ]] || fail "foreign archive: $r"
ctrd_ctr containers ls -q | grep -qx gpuckpt-e2e-foreign && fail "a refused restore left a container"
echo "ok: refused with the reason, no container left"
[ ! -e "$CK/.gpuckpt-containerd-restore-999999999-dead" ] || fail "a stale restore work directory was left"

step "6a. the agent loaded the checkpoint image into containerd's image store (content, diff, images API)"
LOADED=$(sandbox_json_field "$r_ck" '["result"]["image"]["loaded_as"]')
[ "$LOADED" = localhost/gpuckpt-checkpoint:gpuckpt-e2e-ck ] || fail "checkpoint image not loaded: $r_ck"
ctrd_ctr images ls -q > "$TMP/images.txt"   # whole, then grep: grep -q in a pipe may cut ctr off (SIGPIPE, pipefail)
grep -qx "$LOADED" "$TMP/images.txt" || fail "containerd does not list $LOADED: $(cat "$TMP/images.txt")"
ctrd_ctr content get "$(sandbox_json_field "$r_ck" '["result"]["image"]["manifest_digest"]')" |
  python3 -c 'import json,sys; a=json.load(sys.stdin)["annotations"]; assert a["org.criu.checkpoint.container.name"] == "counter" and a["io.gpuckpt.used-gpus"], a' ||
  fail "the loaded manifest lacks the checkpoint annotations"
PLAIN_CID=$(cri create gpuckpt-e2e "$POD" plain-of-image "$LOADED" --device /dev/zero:/dev/nvidia1 \
  --env NVIDIA_VISIBLE_DEVICES=1 -- /bin/true) || fail "CreateContainer of the loaded checkpoint image: $(tail -2 "$TMP/nri.log")"
not_adjusted "$PLAIN_CID" || fail "an ordinary container of the checkpoint image was treated as a restore"
# shellcheck disable=SC2046 # restore_marks prints separate arguments
LOADED_CID=$(cri create gpuckpt-e2e "$POD" from-image "$LOADED" --device /dev/zero:/dev/nvidia1 \
  --env NVIDIA_VISIBLE_DEVICES=1 $(restore_marks "$LOADED") -- /bin/true) ||
  fail "CreateContainer of a restore from the loaded checkpoint image: $(tail -2 "$TMP/nri.log")"
adjusted_to_gpu1 "$LOADED_CID" || fail "the restore from the loaded image was not adjusted by gpuckpt-nri"
echo "ok: $LOADED in containerd's store with org.criu.checkpoint.* and io.gpuckpt.*; an ordinary container of it untouched, a restore of it with GPU 1: /dev/nvidia1 -> 1:5, plan named"

step "6b. a moved archive becomes a checkpoint image on a CRI node (runtime.kind: cri, containerd's API on its CRI socket)"
# What `kubectl gpuckpt migrate` asks of the target node's agent before it creates the pod (the archive stands for
# one copied from another node: it is in this agent's checkpoint directory).
use_runtime "{kind: cri, cri: {endpoint: unix://$CTRD_SOCK}}"
RT=$("$CLI" runtime --agent "$URL" --token-file "$TOKEN_FILE") || fail "gpuckpt runtime"
[[ "$RT" == "cri containerd 1.7."*" pod" ]] || fail "gpuckpt runtime answered '$RT' (expected cri containerd 1.7.x ... pod)"
"$CLI" image "$(basename "$ARCHIVE")" --tag gpuckpt-e2e-moved --agent "$URL" --token-file "$TOKEN_FILE" > "$TMP/image.txt" ||
  fail "gpuckpt image on the CRI agent: $(tail -3 "$TMP/agent.log")"
MOVED=$(sed -n 's/^  image: *//p' "$TMP/image.txt")
[ "$MOVED" = localhost/gpuckpt-checkpoint:gpuckpt-e2e-moved ] || fail "gpuckpt image printed: $(cat "$TMP/image.txt")"
ctrd_ctr images ls -q > "$TMP/images.txt"
grep -qx "$MOVED" "$TMP/images.txt" || fail "containerd does not list $MOVED: $(cat "$TMP/images.txt")"
[ -z "$(find "$CK" -maxdepth 1 -name 'im-*.oci')" ] || fail "the loaded image's layout was left beside the archive"
# shellcheck disable=SC2046
MOVED_CID=$(cri create gpuckpt-e2e "$POD" from-moved "$MOVED" --device /dev/zero:/dev/nvidia1 \
  --env NVIDIA_VISIBLE_DEVICES=1 $(restore_marks "$MOVED") -- /bin/true) ||
  fail "CreateContainer from the moved image: $(tail -2 "$TMP/nri.log")"
adjusted_to_gpu1 "$MOVED_CID" || fail "the container created from the moved image was not adjusted by gpuckpt-nri"
# A token holder's bare tag: the image is registered as localhost/gpuckpt-checkpoint:busybox, never as busybox.
"$CLI" image "$(basename "$ARCHIVE")" --tag busybox --agent "$URL" --token-file "$TOKEN_FILE" > "$TMP/image-busybox.txt" ||
  fail "gpuckpt image --tag busybox: $(tail -3 "$TMP/agent.log")"
ctrd_ctr images tag "$IMAGE:latest" docker.io/library/busybox:latest >/dev/null || fail "ctr images tag busybox"
BUSY_CID=$(cri create gpuckpt-e2e "$POD" busybox docker.io/library/busybox:latest -- /bin/true) ||
  fail "an ordinary busybox container was refused: $(tail -2 "$TMP/nri.log")"
not_adjusted "$BUSY_CID" || fail "an ordinary busybox container was adjusted after a tag 'busybox' was loaded"
ctrd_ctr containers info "$BUSY_CID" | python3 -c 'import json,sys; d=json.load(sys.stdin)["Spec"]["linux"].get("devices") or []; assert not [x for x in d if "nvidia" in x["path"]], d' ||
  fail "the busybox container received a GPU device"
echo "ok: gpuckpt runtime -> '$RT'; gpuckpt image -> $MOVED in containerd's store in $(sed -n 's/^  took: *//p' "$TMP/image.txt") ($(stat -c %s "$ARCHIVE") byte archive); created from it with GPU 1: adjusted"

step "6. a restore of the checkpoint image with another allocation: gpuckpt-nri adjusts it to the plan"
# containerd 2.x's restore: the container runs on the checkpoint's base image, the CRI annotations name the
# checkpoint image (containerd 1.7 cannot restore: the marks are set here as 2.x sets them).
# shellcheck disable=SC2046
ALLOC=$(cri create gpuckpt-e2e "$POD" restored-alloc "$IMAGE" --device /dev/zero:/dev/nvidia1 \
  --env NVIDIA_VISIBLE_DEVICES=1 $(restore_marks "$LOADED") -- sleep 600) || fail "CreateContainer refused: $(tail -2 "$TMP/nri.log")"
cri start "$ALLOC" || fail "StartContainer of the adjusted container"
APID=$(cri pid "$ALLOC")
DEV=$(stat -c '%t:%T' "/proc/$APID/root/dev/nvidia1") || fail "no /dev/nvidia1 in the adjusted container"
[ "$DEV" = 1:5 ] || fail "/dev/nvidia1 in the adjusted container is $DEV, expected 1:5 (the allocated GPU 1)"
tr '\0' '\n' < "/proc/$APID/environ" | grep -qx NVIDIA_VISIBLE_DEVICES=1 || fail "NVIDIA_VISIBLE_DEVICES not adjusted"
ctrd_ctr containers info "$ALLOC" > "$TMP/alloc.json"
python3 - "$TMP/alloc.json" "$STATE" "$GPU0" "$GPU1" "$BUILD/oci-hook/gpuckpt-oci-hook" "$ALLOC" <<'PY' || fail "plan/annotation/hook of the adjusted container"
import json, os, sys
spec = json.load(open(sys.argv[1]))["Spec"]
plan_id = spec["annotations"]["io.gpuckpt.restore-plan"]
plan = json.load(open(os.path.join(sys.argv[2], "restore-plans", plan_id + ".json")))
assert [(a["source_id"], a["target_id"]) for a in plan["assignments"]] == [(sys.argv[3], sys.argv[4])], plan
assert plan["container_id"] == sys.argv[6], plan["container_id"]
assert plan["expires_at"] > 0, plan
assert any(h["path"] == sys.argv[5] for h in spec["hooks"]["createRuntime"]), spec["hooks"]
PY
grep -q "within the 1 GPU(s) it was given" "$TMP/nri.log" || fail "gpuckpt-nri did not plan within the allocation"
# shellcheck disable=SC2046
UNREG=$(cri create gpuckpt-e2e "$POD" restored-unregistered "$IMAGE" --device /dev/zero:/dev/nvidia1 \
  $(restore_marks docker.io/library/never-registered:1) -- /bin/true) || fail "a restore gpuckpt has no part in was refused"
not_adjusted "$UNREG" || fail "a restore of an image the agent never registered was adjusted"
# shellcheck disable=SC2046
if cri create gpuckpt-e2e "$POD" restored-nogpu "$IMAGE" $(restore_marks "$LOADED") -- /bin/true > "$TMP/nogpu.txt" 2>&1; then
  fail "a restore with no GPU allocation known was created"
fi
grep -q "the GPUs pod .* was given are unknown" "$TMP/nri.log" || fail "the refusal does not say what is missing: $(tail -2 "$TMP/nri.log")"
echo "ok: /dev/nvidia1 = $DEV (GPU 1), NVIDIA_VISIBLE_DEVICES=1, plan $GPU0 -> $GPU1 bound to $ALLOC named by the annotation, hook added; an unregistered image untouched; no allocation: refused"
echo PASS
