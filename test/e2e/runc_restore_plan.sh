#!/usr/bin/env bash
# e2e: the OCI hook under a real `runc restore --image-path DIR` (runc 1.1 + CRIU 4.1), as containerd's shim and
# CRI-O's conmon run it: CRIU's images are in a directory that is not under the bundle, and the hook, run by runc
# as its createRuntime hook at CRIU's setup-namespaces notification, finds it from runc's command line.
#   1. a restore naming a plan bound to its checkpoint: the plan lands in that images directory (not the bundle)
#      and leaves the state directory; the restored process continues;
#   2. a second restore naming the used plan is refused by the hook (runc fails the restore) and gets no plan;
#   3. `runc run` of a container naming a live plan (no restore): the plan is neither placed nor used up.
# Exit 0 pass, 77 skipped (no root/runc/criu/podman image), anything else fails. Cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -f "${STATE:-/nonexistent}/hook.log" ] && tail -n 5 "$STATE/hook.log" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || skip "needs root (runc, CRIU)"
command -v runc >/dev/null || skip "runc not installed"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
command -v podman >/dev/null || skip "podman not installed (the test's root filesystem comes from its image)"
podman image exists "$IMAGE" || skip "image $IMAGE missing (scripts/setup.sh builds it)"
[ -x "$HOOK" ] || fail "$HOOK not built"

TMP=/tmp/gpuckpt-e2e-runc-plan-$$-$(date +%s%N)
mkdir -m 700 "$TMP"
RUNC=(runc --root "$TMP/runc-root")
ID=gpuckpt-plan-$$
cleanup() {
  set +e
  for c in "$ID" "$ID-r1" "$ID-r2" "$ID-run"; do "${RUNC[@]}" delete -f "$c" >/dev/null 2>&1; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

STATE=$TMP/state
mkdir -p "$STATE/restore-plans" "$TMP/bundle/rootfs"
CTR=$(podman create "$IMAGE" true)
podman export "$CTR" | tar -C "$TMP/bundle/rootfs" -x
podman rm "$CTR" >/dev/null
new_plan() {  # new_plan: writes a plan bound to checkpoint ck-runc-e2e, usable for 10 minutes; prints its id
  local id; id="rp-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  cat > "$STATE/restore-plans/$id.json" <<JSON
{"version": 1, "id": "$id", "checkpoint_id": "ck-runc-e2e", "expires_at": $(( $(date +%s) + 600 )),
 "assignments": [{"source_id": "GPU-a", "target_id": "GPU-b"}], "devices": [], "env": {}, "relaxations": []}
JSON
  echo "$id"
}
# spec BUNDLE PLAN ARGS...: a runc spec in BUNDLE naming PLAN, with the hook as its createRuntime hook
spec() {
  local bundle=$1 plan=$2; shift 2
  python3 - "$bundle/config.json" "$HOOK" "$STATE" "$plan" "$@" <<'PY'
import json, os, sys
path, hook, state, plan, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
os.system(f"cd {os.path.dirname(path)} && rm -f config.json && runc spec")
spec = json.load(open(path))
spec["process"]["terminal"] = False
spec["process"]["args"] = args
spec["root"]["readonly"] = False
spec["annotations"] = {"io.gpuckpt.checkpoint-id": "ck-runc-e2e", "io.gpuckpt.restore-plan": plan}
spec["hooks"] = {"createRuntime": [{"path": hook, "args": [hook, "--state-dir", state, "createRuntime"]}]}
json.dump(spec, open(path, "w"))
PY
}
placed_in() { [ -f "$1/gpuckpt-restore-plan.json" ] && python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["id"] == sys.argv[2]' "$1/gpuckpt-restore-plan.json" "$2"; }

step "0. a counter under runc, checkpointed into an images directory outside its bundle"
# shellcheck disable=SC2016 # expanded by the container's shell
spec "$TMP/bundle" "" sh -c 'i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done'
(cd "$TMP/bundle" && "${RUNC[@]}" run -d "$ID" </dev/null >/dev/null 2>&1) || fail "runc run"
sleep 1
IMAGES=$TMP/var/lib/runtime/containers/$ID/ctrd-restore/checkpoint   # containerd's shape, not under the bundle
mkdir -p "$IMAGES"
"${RUNC[@]}" checkpoint --image-path "$IMAGES" --work-path "$TMP/work" "$ID" || fail "runc checkpoint: $(tail -3 "$TMP/work/dump.log" 2>/dev/null)"
N1=$(cat "$TMP/bundle/rootfs/count")
cp -a "$IMAGES" "$TMP/images-copy"   # for the second restore
echo "ok: checkpointed at $N1 into $IMAGES"

step "1. restore: the hook finds the images directory on runc's command line and uses the plan up"
PLAN=$(new_plan)
spec "$TMP/bundle" "$PLAN" sh -c 'true'   # the restored process comes from the images; the spec names the plan
(cd "$TMP/bundle" && "${RUNC[@]}" restore -d --image-path "$IMAGES" --work-path "$TMP/work1" "$ID-r1" \
  </dev/null >/dev/null 2>"$TMP/restore1.err") || fail "runc restore: $(cat "$TMP/restore1.err")"
placed_in "$IMAGES" "$PLAN" || fail "the plan is not in the images directory $IMAGES"
[ ! -e "$TMP/bundle/checkpoint" ] || fail "something was written into the bundle's checkpoint dir"
[ ! -e "$STATE/restore-plans/$PLAN.json" ] || fail "the used plan is still in the state directory"
grep -q "restore plan $PLAN placed in $IMAGES/gpuckpt-restore-plan.json (runc restore --image-path)" "$STATE/hook.log" ||
  fail "hook.log does not say where the plan went and how it was found"
sleep 0.5
N2=$(cat "$TMP/bundle/rootfs/count")
[ "$N2" -ge "$N1" ] || fail "the restored counter did not continue ($N1 -> $N2)"
"${RUNC[@]}" delete -f "$ID-r1" >/dev/null 2>&1 || true
echo "ok: plan in $IMAGES, gone from the state dir, counter continues ($N1 -> $N2)"

step "2. a second restore naming the used plan is refused"
if (cd "$TMP/bundle" && "${RUNC[@]}" restore -d --image-path "$TMP/images-copy" --work-path "$TMP/work2" "$ID-r2" \
      </dev/null >/dev/null 2>"$TMP/restore2.err"); then
  fail "a restore naming a used plan succeeded"
fi
grep -q "restore of container $ID-r2 with plan $PLAN refused: .*used already" "$STATE/hook.log" ||
  fail "hook.log gives no reason for the refusal"
[ ! -e "$TMP/images-copy/gpuckpt-restore-plan.json" ] || fail "a refused restore got a plan"
echo "ok: refused: $(grep -o "refused: the plan is not in.*" "$STATE/hook.log" | tail -1 | cut -c1-100)"

step "3. runc run (no restore) of a container naming a live plan: not placed, not used up"
LIVE=$(new_plan)
spec "$TMP/bundle" "$LIVE" true
(cd "$TMP/bundle" && "${RUNC[@]}" run "$ID-run" </dev/null >/dev/null 2>&1) || fail "runc run of a plain container"
[ -e "$STATE/restore-plans/$LIVE.json" ] || fail "a container that is not a restore used up a plan"
echo "ok: the live plan stays for its restore"
echo PASS
