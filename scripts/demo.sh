#!/usr/bin/env bash
# The gpuckpt demo: a counting container is checkpointed to an archive through gpuckpt (CLI -> agent -> podman
# + CRIU), the archive is shown with its GPU annotations, and the container is restored onto another GPU and
# continues counting from where it was. Every step prints what it does and how long it took.
#
#   scripts/demo.sh BUILD_DIR        (make demo / scripts/run-demo.sh run it after setup and build)
#   KEEP=1 scripts/demo.sh build     keep the work directory (archive, agent log, state) afterwards
#
# This machine has no GPU: the agent and the OCI hook read a simulated 8x H100 node (test/fixtures) whose
# /dev/nvidia0 and /dev/nvidia1 are made here with the numbers of /dev/null and /dev/zero, and the container
# gets GPU-looking device aliases, so the whole GPU path (record, annotate, match, move the device) runs for real.
set -euo pipefail
. "$(dirname "$0")/lib/node-sandbox.sh"
. "$(dirname "$0")/lib/criu-probe.sh"

BUILD=$(cd "${1:?usage: scripts/demo.sh BUILD_DIR}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
CLI=$BUILD/cli/gpuckpt AGENT=$BUILD/agent/gpuckpt-agent HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
IMAGE=${GPUCKPT_DEMO_IMAGE:-localhost/gpuckpt-busybox}
NAME=gpuckpt-demo-$$
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

die() { printf '\ndemo FAILED: %s\n' "$*" >&2; exit 1; }
criu_dump_works || die "$CRIU_PROBE_REASON. Nothing of gpuckpt can checkpoint on this machine: run the demo on another machine (or CPU type), or a CRIU that dumps here."
now() { date +%s%N; }
T_START=$(now)
T_STEP=$T_START
STEP=0
step() {
  local t; t=$(now)
  [ "$STEP" -gt 0 ] && printf '   (step %d took %d ms)\n' "$STEP" $(( (t - T_STEP) / 1000000 ))
  STEP=$((STEP + 1)); T_STEP=$t
  printf '\n[%d] %s\n' "$STEP" "$*"
}
run() { printf '   $ %s\n' "$*"; "$@"; }

[ "$(id -u)" = 0 ] || die "run as root (podman checkpoint/restore needs it)"
for tool in podman criu curl python3; do command -v "$tool" >/dev/null || die "$tool is missing: run scripts/setup.sh"; done
for b in "$CLI" "$AGENT" "$HOOK"; do [ -x "$b" ] || die "$b is not built: run scripts/build.sh"; done
podman image exists "$IMAGE" || die "image $IMAGE is missing: run scripts/setup.sh"

WORK=$(mktemp -d /tmp/gpuckpt-demo.XXXXXX)
AGENT_PID=
cleanup() {
  set +e
  sandbox_stop_agent
  for c in "$NAME" "$NAME-restored"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK (archive in $WORK/checkpoints)"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

step "Prepare: a simulated GPU node, hooks.d entries for the built OCI hook, an agent token and config"
sandbox_prepare "$WORK" "$BUILD" "$SRC" || die "cannot prepare the simulated node in $WORK"
"$CLI" gpus --host-root "$ROOT" | head -3
echo "   ... (8 simulated H100s; this machine itself has no GPU)"
step "Start gpuckpt-agent on 127.0.0.1 (bearer token, state in $STATE)"
sandbox_start_agent "$AGENT" || die "the agent did not start"
export GPUCKPT_AGENT=$URL GPUCKPT_TOKEN_FILE=$TOKEN_FILE
echo "   agent listening at $URL: $(curl -sf "$URL/healthz")"

step "Start a counting container with GPU device aliases (/dev/nvidia0, /dev/kfd, NVIDIA_VISIBLE_DEVICES=0)"
run podman --hooks-dir "$HOOKS" run -d --name "$NAME" "${ULIMITS[@]}" \
  --device /dev/null:/dev/nvidia0 --device /dev/zero:/dev/kfd -e NVIDIA_VISIBLE_DEVICES=0 "$IMAGE" \
  sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; echo "count $i"; sleep 0.1; done' >/dev/null
sleep 2
echo "   the OCI hook recorded it (GET /v1/containers):"
curl -sf -H "Authorization: Bearer $(cat "$TOKEN_FILE")" "$URL/v1/containers" |
  python3 -c 'import json,sys
for c in json.load(sys.stdin)["containers"]:
    print("     %s %s uses %s via %s" % (c["id"][:12], c.get("name", "?"), ", ".join(c["used_gpu_ids"]) or "no GPU",
          " ".join(d["container_path"] for d in c["devices"])))'
echo "   counter now: $(podman exec "$NAME" cat /tmp/count)"

step "Checkpoint it through gpuckpt (CLI -> agent -> podman + CRIU), GPU record added to the archive"
run "$CLI" checkpoint "$NAME"
ARCHIVE=$(ls "$CK"/*.tar.zst)
[ -f "$ARCHIVE" ] || die "no archive was written"
LAST=$(tar -xOf "$ARCHIVE" ctr.log | tail -1 | awk '{print $NF}')
echo "   the archive is $ARCHIVE; the container is gone: $(podman inspect -f '{{.State.Status}}' "$NAME")"
echo "   the last count it logged before the checkpoint: $LAST"

step "Inspect the archive: what it holds, which GPUs it needs, whether this node can take it"
run "$CLI" inspect "$ARCHIVE" --host-root "$ROOT"
echo "   gpuckpt's entries and annotations inside (podman, CRI-O and checkpointctl ignore them):"
tar -tf "$ARCHIVE" | grep -E '^(\./)?gpuckpt' | sed 's/^/     /'
tar -xOf "$ARCHIVE" spec.dump | python3 -c 'import json,sys
for k, v in sorted(json.load(sys.stdin)["annotations"].items()):
    if k.startswith("io.gpuckpt."): print("     %s=%s" % (k, v))'
if command -v checkpointctl >/dev/null; then run checkpointctl show "$ARCHIVE" | tail -4; fi

step "Restore it through gpuckpt onto the other GPU ($GPU1)"
podman rm -f -t 0 "$NAME" >/dev/null
run "$CLI" restore "$ARCHIVE" --name "$NAME-restored" --target-gpus "$GPU1"

step "Show that it continued from where it was"
sleep 1
NOW=$(podman exec "$NAME-restored" cat /tmp/count)
echo "   last count before the checkpoint: $LAST; count now: $NOW"
[ "$NOW" -gt "$LAST" ] || die "the counter did not continue ($LAST -> $NOW)"
echo "   restored container log around the checkpoint:"
podman logs "$NAME-restored" 2>/dev/null | grep -n -A2 -x "count $LAST" | head -3 | sed 's/^/     /'
# A moved NVIDIA GPU takes its own node name (the driver reopens /dev/nvidia<minor> when it restores a process):
# GPU 1's node is /dev/nvidia1 inside now, with this node's numbers for it, and the source's /dev/nvidia0 is gone.
MOVED=$(podman exec "$NAME-restored" stat -c '%t:%T' /dev/nvidia1 2>/dev/null) || die "no /dev/nvidia1 in the restored container"
[ "$MOVED" = 1:5 ] || die "/dev/nvidia1 in the restored container is $MOVED, expected 1:5 (GPU 1's node here)"
! podman exec "$NAME-restored" test -e /dev/nvidia0 || die "/dev/nvidia0 (the source GPU's node) is still in the restored container"
echo "   the GPU moved: /dev/nvidia0 (1:3, GPU 0) became /dev/nvidia1 ($MOVED, GPU 1) inside;" \
     "$(podman exec "$NAME-restored" env | grep NVIDIA_VISIBLE_DEVICES)"
echo "   agent metrics:"
curl -sf "$URL/metrics" | grep -E '^gpuckpt_(checkpoints|restores)_total\{result="success"\}|^gpuckpt_job_duration_seconds_sum\{kind="(checkpoint|restore)",result="success"\}' | sed 's/^/     /'

step "Clean up"
echo "   removing the containers, stopping the agent, deleting $WORK (KEEP=1 keeps it, with the archive)"
printf '\ndemo OK in %d ms\n' $(( ($(now) - T_START) / 1000000 ))
