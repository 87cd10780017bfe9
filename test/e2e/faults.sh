#!/usr/bin/env bash
# e2e: faults around a checkpoint job, with real podman + runc + CRIU 4.1 and the built agent:
#   1. the archive directory fills up (a 8 KiB tmpfs): the job fails saying so, the container runs on (podman
#      stopped it with the dump; the agent restores it in place), nothing partial is left;
#   2. the runtime is killed in the middle of `podman container checkpoint`: the job fails, the container runs,
#      nothing partial is left;
#   3. the agent is killed (SIGKILL) while a checkpoint job runs: after a restart the job reads as failed, its
#      temporary files are gone, the container runs.
# Exit 0 pass, 77 skipped (no root/podman/criu), anything else fails. Every wait is bounded; cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/node-sandbox.sh"
AGENT=$BUILD/agent/gpuckpt-agent
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

sandbox_podman_ready "$IMAGE" || skip "$SANDBOX_MISSING"   # root also for the tmpfs mounts
[ -x "$AGENT" ] || fail "$AGENT not built"

TMP=/tmp/gpuckpt-e2e-faults-$$-$(date +%s%N)
mkdir -m 700 "$TMP"
NAME=gpuckpt-faults-$$
cleanup() {
  set +e
  sandbox_stop_agent
  [ -f "$TMP/runtime.pid" ] && kill "$(cat "$TMP/runtime.pid")" 2>/dev/null
  mountpoint -q "$CK" 2>/dev/null && umount "$CK"
  podman rm -f -t 0 "$NAME" >/dev/null 2>&1
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

sandbox_prepare "$TMP" "$BUILD" "$SRC" || fail "cannot prepare the simulated node in $TMP"
TOKEN=$(cat "$TOKEN_FILE")
api() {  # api METHOD PATH [BODY] -> prints "STATUS BODY"
  local out; out=$(curl -s -m 30 -o "$TMP/resp" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "$URL$2")
  echo "$out $(tr -d '\n' < "$TMP/resp")"
}
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1].split(' ',1)[1]); print(d.get(sys.argv[2], ''))" "$1" "$2"; }
wait_job() {  # wait_job ID -> final "STATUS BODY"
  local r
  for _ in $(seq 300); do
    r=$(api GET "/v1/checkpoints/$1")
    case "$(field "$r" state)" in succeeded|failed) echo "$r"; return;; esac
    sleep 0.2
  done
  fail "job $1 did not finish within 60 s"
}
running() { [ "$(podman inspect -f '{{.State.Status}}' "$NAME")" = running ]; }
counting() {  # the counter goes on
  local a b; a=$(podman exec "$NAME" cat /tmp/count); sleep 0.5; b=$(podman exec "$NAME" cat /tmp/count)
  [ "$b" -gt "$a" ]
}
nothing_left() { [ -z "$(ls -A "$CK")" ]; }
checkpoint() { api POST /v1/checkpoints "{\"container\":\"$NAME\"}"; }
restart_agent() { sandbox_stop_agent; rm -f "$STATE/agent.port"; sandbox_start_agent "$AGENT" || fail "agent did not start"; }

podman run -d --name "$NAME" "${ULIMITS[@]}" "$IMAGE" \
  sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null
sleep 0.5

step "1. the archive directory fills up"
mount -t tmpfs -o size=8k gpuckpt-faults "$CK"
sandbox_start_agent "$AGENT" || fail "agent did not start"
r=$(checkpoint); [ "${r%% *}" = 202 ] || fail "POST /v1/checkpoints: $r"
r=$(wait_job "$(field "$r" id)")
[ "$(field "$r" state)" = failed ] || fail "a checkpoint into a full directory did not fail: $r"
ERR=$(field "$r" error)
[[ "${ERR,,}" == *"no space left on device"* ]] || fail "the job does not say the disk is full: $r"
running && counting || fail "the container does not run on after the failed checkpoint"
nothing_left || fail "partial files left: $(ls -A "$CK")"
echo "ok: failed with: $(field "$r" error | cut -c1-200)"
echo "ok: the container runs on, nothing left in the archive directory"
umount "$CK"

step "2. the runtime is killed in the middle of the checkpoint"
# A podman that runs the real checkpoint and is killed 0.3 s into it (SIGKILL to the podman it started).
cat > "$TMP/podman-killed" <<SH
#!/bin/sh
if [ "\$1" = "--hooks-dir" ]; then shift 2; fi
if [ "\$1 \$2" = "container checkpoint" ]; then
  podman "\$@" & p=\$!
  sleep 0.3; kill -KILL \$p 2>/dev/null; wait \$p; exit 137
fi
exec podman "\$@"
SH
chmod +x "$TMP/podman-killed"
cp "$TMP/agent.yaml" "$TMP/agent.yaml.orig"
echo "runtime: {podman_path: $TMP/podman-killed}" >> "$TMP/agent.yaml"
restart_agent
r=$(checkpoint); [ "${r%% *}" = 202 ] || fail "POST /v1/checkpoints: $r"
r=$(wait_job "$(field "$r" id)")
[ "$(field "$r" state)" = failed ] || fail "a checkpoint whose runtime was killed did not fail: $r"
running && counting || fail "the container does not run on after the runtime was killed: $(field "$r" error)"
nothing_left || fail "partial files left: $(ls -A "$CK")"
echo "ok: failed with: $(field "$r" error | cut -c1-200)"
echo "ok: the container runs on, nothing left in the archive directory"

step "3. the agent is killed while a checkpoint job runs"
# A podman whose checkpoint writes part of an archive and then hangs, so the job is mid-way when the agent dies.
cat > "$TMP/podman-hangs" <<SH
#!/bin/sh
if [ "\$1" = "--hooks-dir" ]; then shift 2; fi
if [ "\$1 \$2" = "container checkpoint" ]; then
  echo \$\$ > "$TMP/runtime.pid"
  while [ \$# -gt 0 ] && [ "\$1" != "--export" ]; do shift; done
  head -c 4096 /dev/urandom > "\$2"
  exec sleep 60
fi
exec podman "\$@"
SH
chmod +x "$TMP/podman-hangs"
cp "$TMP/agent.yaml.orig" "$TMP/agent.yaml"
echo "runtime: {podman_path: $TMP/podman-hangs}" >> "$TMP/agent.yaml"
restart_agent
r=$(checkpoint); [ "${r%% *}" = 202 ] || fail "POST /v1/checkpoints: $r"
JOB=$(field "$r" id)
for _ in $(seq 100); do [ -s "$TMP/runtime.pid" ] && [ -n "$(ls -A "$CK")" ] && break; sleep 0.1; done
[ -n "$(ls -A "$CK")" ] || fail "the stand-in runtime wrote nothing"
kill -KILL "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true; AGENT_PID=
kill "$(cat "$TMP/runtime.pid")" 2>/dev/null || true
echo "ok: agent killed during job $JOB ($(ls -A "$CK" | tr '\n' ' '))"
cp "$TMP/agent.yaml.orig" "$TMP/agent.yaml"
restart_agent
r=$(api GET "/v1/checkpoints/$JOB")
[ "${r%% *}" = 200 ] || fail "the job is unknown after the restart: $r"
[ "$(field "$r" state)" = failed ] || fail "the interrupted job is not failed: $r"
[[ "$(field "$r" error)" == "the agent stopped while this job was checkpointing"* ]] || fail "reason: $r"
nothing_left || fail "temporary files left after the restart: $(ls -A "$CK")"
running && counting || fail "the container does not run on"
echo "ok: after the restart the job reads: $(field "$r" error | cut -c1-160)"
echo "ok: its temporary files are gone, the container runs on"
echo PASS
