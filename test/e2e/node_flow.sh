#!/usr/bin/env bash
# e2e: the node flow with real podman + runc + CRIU 4.1, the built OCI hook and agent on 127.0.0.1.
#   1. a container with GPU device aliases is detected by the hook and recorded (a plain one is not);
#   2. POST /v1/checkpoints produces an annotated archive that checkpointctl reads and podman restores, and an
#      OCI checkpoint image that the agent loads into podman's store (loaded_as) and podman restores from;
#   3. bad requests (wrong token, unknown container, traversal, truncated/malformed archive) get 4xx, change nothing;
#   4. POST /v1/restores onto another (fixture) GPU: the workload continues, the target's node is /dev/nvidia1;
#   5. the precreate stage applies a pending restore plan at creation, refuses one it cannot apply or that is bound to
#      another checkpoint.
# The node's GPUs come from a fixture host root (8x H100) whose /dev/nvidia0 and /dev/nvidia1 are made here as
# /dev/null's and /dev/zero's numbers, so "moving GPU" is visible inside the container.
# Exit 0 pass, 77 skipped (no root/podman/criu), anything else fails. Every wait is bounded; cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/node-sandbox.sh"
CLI=$BUILD/cli/gpuckpt
AGENT=$BUILD/agent/gpuckpt-agent
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

sandbox_podman_ready "$IMAGE" || skip "$SANDBOX_MISSING"
for b in "$CLI" "$AGENT" "$HOOK"; do [ -x "$b" ] || fail "$b not built"; done

# Lower case: podman names an image pulled from an oci: layout after the layout's path.
TMP=/tmp/gpuckpt-e2e-node-$$-$(date +%s%N)
mkdir -m 700 "$TMP"
NAME=gpuckpt-e2e-$$
AGENT_PID=
cleanup() {
  set +e
  sandbox_stop_agent
  for c in "$NAME" "$NAME-plain" "$NAME-moved" "$NAME-direct" "$NAME-image"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  for i in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E "gpuckpt-checkpoint:e2e-$$\$|gpuckpt-e2e-node"); do
    podman rmi -f "$i" >/dev/null 2>&1
  done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

sandbox_prepare "$TMP" "$BUILD" "$SRC" || fail "cannot prepare the simulated node in $TMP"
TOKEN=$(cat "$TOKEN_FILE")

step "start the agent"
sandbox_start_agent "$AGENT" || fail "agent did not start within 10 s"
curl -sf "$URL/healthz" >/dev/null || fail "agent /healthz"
api() {  # api METHOD PATH [BODY] -> prints "STATUS BODY"
  local out; out=$(curl -s -m 30 -o "$TMP/resp" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "$URL$2")
  echo "$out $(tr -d '\n' < "$TMP/resp")"
}
expect() {  # expect STATUS "STATUS BODY" WHAT
  [ "${2%% *}" = "$1" ] || fail "$3: expected HTTP $1, got: $2"
  echo "ok: $3 -> $1"
}
json_field() { python3 -c "import json,sys; d=json.loads(sys.argv[1].split(' ',1)[1]); print(eval('d'+sys.argv[2]))" "$1" "$2"; }
wait_job() {  # wait_job COLLECTION ID -> final "STATUS BODY"
  local r
  for _ in $(seq 300); do
    r=$(api GET "/v1/$1/$2")
    case "$r" in *'"state":"succeeded"'*|*'"state": "succeeded"'*|*'"state":"failed"'*|*'"state": "failed"'*) echo "$r"; return;; esac
    sleep 0.2
  done
  fail "job $2 did not finish within 60 s"
}

step "1. the hook records a container with GPU device aliases, not a plain one"
podman --hooks-dir "$HOOKS" run -d --name "$NAME" "${ULIMITS[@]}" \
  --device /dev/null:/dev/nvidia0 --device /dev/zero:/dev/kfd -e NVIDIA_VISIBLE_DEVICES=0 "$IMAGE" \
  sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; echo $i; sleep 0.1; done' >/dev/null
podman --hooks-dir "$HOOKS" run -d --name "$NAME-plain" "${ULIMITS[@]}" "$IMAGE" sleep 600 >/dev/null
ID=$(podman inspect -f '{{.Id}}' "$NAME")
PLAIN_ID=$(podman inspect -f '{{.Id}}' "$NAME-plain")
REC=$STATE/containers/$ID.json
[ -f "$REC" ] || fail "no hook record $REC"
[ ! -e "$STATE/containers/$PLAIN_ID.json" ] || fail "the plain container was recorded"
python3 - "$REC" "$GPU0" <<'PY' || fail "hook record content"
import json, sys
r = json.load(open(sys.argv[1]))
g = r["gpus"]
assert g["record"]["used_gpu_ids"] == [sys.argv[2]], g["record"]["used_gpu_ids"]
paths = {d["container_path"]: d for d in g["devices"]}
assert paths["/dev/nvidia0"]["gpu_id"] == sys.argv[2] and "/dev/kfd" in paths, paths
assert g["gpu_env"]["NVIDIA_VISIBLE_DEVICES"] == "0"
assert len(g["record"]["node"]["gpus"]) == 8
PY
echo "ok: recorded $ID -> $GPU0"
r=$(api GET /v1/containers); expect 200 "$r" "GET /v1/containers"
[[ "$r" == *"$ID"* ]] || fail "/v1/containers does not list $ID"

# The containers this test (or a restore of its archives, named after $NAME) could have made: other engineers'
# containers on this shared machine come and go meanwhile.
ours_ps() { podman ps -a -q --filter "name=^$NAME" | sort | tr '\n' ' '; }
step "3a. bad requests get 4xx and change nothing"
BEFORE_CK=$(ls -A "$CK" | sort | tr '\n' ' ')
BEFORE_PS=$(ours_ps)
r=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong" -X POST --data "{\"container\":\"$NAME\"}" "$URL/v1/checkpoints")
[ "$r" = 401 ] || fail "wrong token: $r"; echo "ok: wrong token -> 401"
r=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data "{\"container\":\"$NAME\"}" "$URL/v1/checkpoints")
[ "$r" = 401 ] || fail "no token: $r"; echo "ok: no token -> 401"
expect 404 "$(api POST /v1/checkpoints '{"container":"no-such-container"}')" "unknown container"
expect 400 "$(api POST /v1/checkpoints '{"container":"../../etc"}')" "traversal in a container name"
expect 403 "$(api POST /v1/restores '{"archive":"../../../etc/passwd"}')" "traversal in an archive name"
expect 403 "$(api POST /v1/restores '{"archive":"/etc/passwd"}')" "archive outside the checkpoint dir"
expect 404 "$(api GET /v1/checkpoints/ck-does-not-exist)" "unknown checkpoint job"
[ "$(ls -A "$CK" | sort | tr '\n' ' ')" = "$BEFORE_CK" ] || fail "a bad request changed $CK"
[ "$(ours_ps)" = "$BEFORE_PS" ] || fail "a bad request changed the containers"
[ "$(podman inspect -f '{{.State.Status}}' "$NAME")" = running ] || fail "container stopped by a bad request"

step "2. checkpoint through the agent API"
sleep 1.5   # let the counter run
r=$(api POST /v1/checkpoints "{\"namespace\":\"default\",\"pod\":\"e2e\",\"container\":\"$NAME\",\"image\":\"e2e-$$\"}")
expect 202 "$r" "POST /v1/checkpoints"
JOB=$(json_field "$r" '["id"]')
r=$(wait_job checkpoints "$JOB")
[ "$(json_field "$r" '["state"]')" = succeeded ] || fail "checkpoint job: $r"
ARCHIVE=$(json_field "$r" '["result"]["archive"]')
echo "ok: checkpoint $JOB in $(json_field "$r" '["phase_seconds"]["total"]') s -> $ARCHIVE ($(json_field "$r" '["result"]["archive_bytes"]') bytes)"
# Where the runtime's call went, from the stats-dump CRIU wrote and podman put into the archive: four parts, none
# negative, together within the call; CRIU froze the counter for some time and wrote some pages.
python3 - "${r#* }" <<'PY' || fail "the checkpoint job does not split its runtime call by CRIU's statistics: $r"
import json, sys
job = json.loads(sys.argv[1])
parts, steps = job["runtime_phase_seconds"], job["phase_seconds"]
assert sorted(parts) == ["criu-cpu-pages", "criu-freezing", "criu-frozen-other", "runtime-other"], parts
assert all(v >= 0 for v in parts.values()) and sum(parts.values()) <= steps["checkpointing"] + 1e-9, (parts, steps)
assert parts["criu-freezing"] + parts["criu-frozen-other"] + parts["criu-cpu-pages"] > 0, parts
assert job["result"]["criu_pages"]["written"] > 0, job["result"]
print("ok: the runtime's %.3f s: " % steps["checkpointing"] + ", ".join("%s %.3f s" % kv for kv in sorted(parts.items())) +
      "; CRIU wrote %d pages" % job["result"]["criu_pages"]["written"])
PY
LAYOUT=$(json_field "$r" '["result"]["image"]["layout"]')
only_archive_and_image() { [ "$(ls -A "$CK" | sort)" = "$(printf '%s\n' "$(basename "$ARCHIVE")" "$(basename "$LAYOUT")" | sort)" ]; }
only_archive_and_image || fail "checkpoint dir holds more than the archive and its image: $(ls -A "$CK")"
N1=$(tar -xOf "$ARCHIVE" ctr.log | tail -1 | awk '{print $NF}')
"$CLI" inspect "$ARCHIVE" --host-root "$ROOT" --json > "$TMP/inspect.json" || fail "gpuckpt inspect"
python3 - "$TMP/inspect.json" "$GPU0" "$JOB" <<'PY' || fail "archive annotations"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["gpus"]["record"]["used_gpu_ids"] == [sys.argv[2]]
assert i["gpus"]["checkpoint_id"] == sys.argv[3]
a = i["annotations"]
assert a["io.gpuckpt.checkpoint-id"] == sys.argv[3] and a["io.gpuckpt.used-gpus"] == sys.argv[2], a
assert i["criu_images"] and i["fits_this_node"]
PY
echo "ok: archive annotated (gpuckpt-gpus.json + io.gpuckpt.* in spec.dump)"
if command -v checkpointctl >/dev/null; then
  checkpointctl show "$ARCHIVE" > "$TMP/checkpointctl.txt" 2>&1 || fail "checkpointctl: $(cat "$TMP/checkpointctl.txt")"
  grep -q "$NAME" "$TMP/checkpointctl.txt" || fail "checkpointctl does not show $NAME: $(cat "$TMP/checkpointctl.txt")"
  echo "ok: checkpointctl reads it"
fi
podman container restore --import "$ARCHIVE" --name "$NAME-direct" >/dev/null || fail "plain podman restore of the annotated archive"
podman rm -f -t 0 "$NAME-direct" >/dev/null
echo "ok: podman restores the annotated archive by itself"
IMAGE_NAME=$(json_field "$r" '["result"]["image"]["loaded_as"]')
[ "$IMAGE_NAME" = "localhost/gpuckpt-checkpoint:e2e-$$" ] || fail "the agent did not load the checkpoint image into podman: $r"
podman image exists "$IMAGE_NAME" || fail "podman has no image $IMAGE_NAME"
! podman image exists "localhost$LAYOUT" || fail "the name podman made from the layout's path was left"
podman image inspect "$IMAGE_NAME" --format '{{index .Annotations "io.gpuckpt.used-gpus"}}' | grep -qx "$GPU0" ||
  fail "the checkpoint image lacks the GPU annotation"
podman container restore --name "$NAME-image" "$IMAGE_NAME" >/dev/null || fail "podman restore from the checkpoint image"
[ "$(podman inspect -f '{{.State.Status}}' "$NAME-image")" = running ] || fail "container from the image is not running"
podman rm -f -t 0 "$NAME-image" >/dev/null
echo "ok: the agent loaded the OCI checkpoint image into podman as $IMAGE_NAME in $(json_field "$r" '["phase_seconds"]["loading-image"]') s; it carries io.gpuckpt.* and restores with podman"

step "3b. malformed and truncated archives are refused"
head -c $(( $(stat -c %s "$ARCHIVE") / 2 )) "$ARCHIVE" > "$CK/truncated.tar.zst"
echo "not an archive" > "$CK/junk.tar.zst"
BEFORE_PS=$(ours_ps)
expect 422 "$(api POST /v1/restores '{"archive":"truncated.tar.zst"}')" "truncated archive"
expect 422 "$(api POST /v1/restores '{"archive":"junk.tar.zst"}')" "malformed archive"
[ "$(ours_ps)" = "$BEFORE_PS" ] || fail "a refused restore created a container"
rm -f "$CK/truncated.tar.zst" "$CK/junk.tar.zst"

step "4. restore through the agent onto GPU $GPU1"
podman rm -f -t 0 "$NAME" >/dev/null
r=$(api POST /v1/restores "{\"archive\":\"$(basename "$ARCHIVE")\",\"name\":\"$NAME-moved\",\"target_gpus\":[\"$GPU1\"]}")
expect 202 "$r" "POST /v1/restores"
r=$(wait_job restores "$(json_field "$r" '["id"]')")
[ "$(json_field "$r" '["state"]')" = succeeded ] || fail "restore job: $r"
echo "ok: restored in $(json_field "$r" '["phase_seconds"]["total"]') s"
python3 - "${r#* }" <<'PY' || fail "the restore job does not split podman's restore by its --print-stats: $r"
import json, sys
job = json.loads(sys.argv[1])
parts, steps = job["runtime_phase_seconds"], job["phase_seconds"]
assert sorted(parts) == ["criu-restore", "podman-other", "runtime-other"], parts
assert all(v >= 0 for v in parts.values()) and sum(parts.values()) <= steps["restoring"] + 1e-9, (parts, steps)
assert parts["criu-restore"] > 0, parts
print("ok: podman's restore %.3f s: " % steps["restoring"] + ", ".join("%s %.3f s" % kv for kv in sorted(parts.items())))
PY
[ "$(podman inspect -f '{{.State.Status}}' "$NAME-moved")" = running ] || fail "restored container not running"
sleep 1
N2=$(podman exec "$NAME-moved" cat /tmp/count)
[ "$N2" -gt "$N1" ] || fail "the counter did not continue: checkpointed at $N1, now $N2"
echo "ok: counter checkpointed at $N1, continues at $N2"
# The target GPU's node under its own name (NVIDIA's driver opens /dev/nvidia<minor> at restore); the source's is gone.
DEV=$(podman exec "$NAME-moved" stat -c '%t:%T' /dev/nvidia1)
[ "$DEV" = "1:5" ] || fail "/dev/nvidia1 in the restored container is $DEV, expected 1:5 (the target GPU's node)"
if podman exec "$NAME-moved" stat /dev/nvidia0 >/dev/null 2>&1; then fail "/dev/nvidia0 (the source GPU's name) is still in the restored container"; fi
podman exec "$NAME-moved" env | grep -qx 'NVIDIA_VISIBLE_DEVICES=1' || fail "NVIDIA_VISIBLE_DEVICES not remapped"
echo "ok: /dev/nvidia0 became the target GPU's /dev/nvidia1 ($DEV), NVIDIA_VISIBLE_DEVICES=1"
NEW_ID=$(podman inspect -f '{{.Id}}' "$NAME-moved")
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['gpus']['record']['used_gpu_ids']==[sys.argv[2]], r['gpus']['record']['used_gpu_ids']" \
  "$STATE/containers/$NEW_ID.json" "$GPU1" || fail "the hook did not record the restored container on $GPU1"
echo "ok: the hook recorded the restored container on $GPU1"
grep -q "container $NEW_ID: .*restore plan rp-[0-9a-f]* placed in .*/checkpoint/gpuckpt-restore-plan.json" "$STATE/hook.log" ||
  fail "the hook did not place the restore plan in the CRIU images directory: $(tail -2 "$STATE/hook.log")"
[ -z "$(ls -A "$STATE/restore-plans" 2>/dev/null)" ] || fail "a used restore plan was left: $(ls -A "$STATE/restore-plans")"
echo "ok: the hook placed the restore plan in the CRIU images directory before CRIU restored the processes, and used it up"
only_archive_and_image || fail "restore left files in $CK: $(ls -A "$CK")"

step "5. precreate (podman run): the plan an annotation names by id rewrites the devices; one that cannot apply refuses"
PLAN="rp-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -p "$STATE/restore-plans"
cat > "$STATE/restore-plans/$PLAN.json" <<JSON
{"version": 1, "id": "$PLAN", "checkpoint_id": "ck-e2e-precreate", "expires_at": $(( $(date +%s) + 600 )),
 "assignments": [{"source_id": "$GPU0", "target_id": "$GPU1"}],
 "devices": [{"container_path": "/dev/nvidia0", "host_path": "/dev/nvidia1", "source_gpu_id": "$GPU0", "target_gpu_id": "$GPU1"}],
 "env": {"NVIDIA_VISIBLE_DEVICES": "1"}, "relaxations": []}
JSON
PLAN_ANNOTATIONS=(--annotation io.gpuckpt.checkpoint-id=ck-e2e-precreate --annotation "io.gpuckpt.restore-plan=$PLAN")
OUT=$(podman --hooks-dir "$HOOKS" run --rm "${ULIMITS[@]}" "${PLAN_ANNOTATIONS[@]}" \
  --device /dev/null:/dev/nvidia0 -e NVIDIA_VISIBLE_DEVICES=0 "$IMAGE" \
  sh -c 'stat -c %t:%T /dev/nvidia0; echo $NVIDIA_VISIBLE_DEVICES') || fail "podman run with a restore plan"
[ "$(echo $OUT)" = "1:5 1" ] || fail "precreate did not apply the plan: $OUT"
echo "ok: precreate applied the plan (/dev/nvidia0 -> 1:5, NVIDIA_VISIBLE_DEVICES=1)"
if podman --hooks-dir "$HOOKS" run --rm "${ULIMITS[@]}" --annotation io.gpuckpt.checkpoint-id=ck-another \
     --annotation "io.gpuckpt.restore-plan=$PLAN" --device /dev/null:/dev/nvidia0 "$IMAGE" true > "$TMP/other.txt" 2>&1; then
  fail "a restore plan was applied to a container of another checkpoint"
fi
grep -q "restore with plan $PLAN refused: .*bound to its checkpoint" "$STATE/hook.log" ||
  fail "no reason for the other checkpoint's container: $(tail -3 "$STATE/hook.log")"
echo "ok: the plan is bound to its checkpoint: a container of another checkpoint naming it is refused"
sed -i 's#"/dev/nvidia1"#"/dev/nvidia7"#' "$STATE/restore-plans/$PLAN.json"
if podman --hooks-dir "$HOOKS" run --rm "${ULIMITS[@]}" "${PLAN_ANNOTATIONS[@]}" \
     --device /dev/null:/dev/nvidia0 "$IMAGE" true > "$TMP/refused.txt" 2>&1; then
  fail "a restore plan that cannot be applied did not stop the container"
fi
grep -q "precreate" "$TMP/refused.txt" || fail "podman did not report the hook: $(cat "$TMP/refused.txt")"
grep -q "restore with plan $PLAN refused: .*/dev/nvidia7" "$STATE/hook.log" ||
  fail "no reason in $STATE/hook.log: $(tail -3 "$STATE/hook.log")"
echo "ok: an unappliable plan is refused; hook.log says why: $(grep -o "restore with plan $PLAN refused.*" "$STATE/hook.log" | head -1)"
if podman --hooks-dir "$HOOKS" run --rm "${ULIMITS[@]}" --annotation io.gpuckpt.checkpoint-id=ck-thief \
     --annotation io.gpuckpt.restore-plan=/etc/shadow --device /dev/null:/dev/nvidia0 "$IMAGE" true > "$TMP/thief.txt" 2>&1; then
  fail "a restore-plan annotation naming a host path was accepted"
fi
grep -q "is not a restore plan id the gpuckpt agent made" "$STATE/hook.log" || fail "no reason for the host-path annotation"
echo "ok: an annotation naming a host file (/etc/shadow) as the plan is refused"
OUT=$(podman --hooks-dir "$HOOKS" run --rm "${ULIMITS[@]}" --annotation io.gpuckpt.checkpoint-id=ck-no-plan \
  --device /dev/null:/dev/nvidia0 "$IMAGE" stat -c %t:%T /dev/nvidia0) || fail "podman run with no plan"
[ "$OUT" = "1:3" ] || fail "a container without a plan was modified: $OUT"
echo "ok: without a plan the container starts unmodified"

step "metrics"
M=$(curl -sf "$URL/metrics")
grep -q 'gpuckpt_checkpoints_total{result="success"} 1' <<<"$M" || fail "metrics: $M"
grep -q 'gpuckpt_restores_total{result="success"} 1' <<<"$M" || fail "metrics: $M"
echo "ok: metrics count 1 checkpoint, 1 restore"
echo PASS
