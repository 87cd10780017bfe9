#!/usr/bin/env bash
# shellcheck disable=SC2015 # ok/bad always return 0
# `kubectl gpuckpt migrate` drives two real agents through the node flow: two simulated GPU nodes on this machine
# (own host tree with GPU device nodes, hooks.d, state and checkpoint dirs, token, gpuckpt-agent with the podman
# runtime), a counting container with GPU device aliases started on node-a through node-a's OCI hook, then the
# plugin (through fake-cluster/kubectl, whose "agent pods" run commands against the node's directories and agent)
# checkpoints it on node-a, matches its GPU record on node-b, has node-a's agent push the archive to node-b's agent
# and restores it there. The restored
# container must continue counting.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$SRC/build}" 2>/dev/null && pwd) || { echo "SKIP: no build directory"; exit 77; }
PLUGIN="$SRC/kubectl-plugin/kubectl-gpuckpt"
export GPUCKPT_CLI="$BUILD/cli/gpuckpt" KUBECTL="$SRC/test/charts/fake-cluster/kubectl"
AGENT="$BUILD/agent/gpuckpt-agent" HOOK="$BUILD/oci-hook/gpuckpt-oci-hook"
IMAGE=${GPUCKPT_DEMO_IMAGE:-localhost/gpuckpt-busybox}
skip() { echo "SKIP: $*"; exit 77; }
# shellcheck disable=SC1091 # the repository's shell library
. "$SRC/scripts/lib/criu-probe.sh"
[ "$(id -u)" = 0 ] || skip "needs root (podman checkpoint/restore)"
for b in "$GPUCKPT_CLI" "$AGENT" "$HOOK"; do [ -x "$b" ] || skip "$b not built"; done
for t in podman criu python3 sha256sum; do command -v "$t" >/dev/null || skip "$t missing (scripts/setup.sh)"; done
podman image exists "$IMAGE" || skip "image $IMAGE missing (scripts/setup.sh)"
criu_dump_works || skip "$CRIU_PROBE_REASON"

tmp=$(mktemp -d /tmp/gpuckpt-kp-e2e.XXXXXX)
NAME=gpuckpt-kp-$$
export FAKE_CLUSTER="$tmp/cluster"
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  podman rm -f -t 0 "$NAME" "$NAME-migrated" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

# ---- two nodes ----------------------------------------------------------------------------------------------
mkdir -p "$FAKE_CLUSTER"
echo ml > "$FAKE_CLUSTER/namespace"
printf '%s\n' "ml counter node-a $NAME -" > "$FAKE_CLUSTER/pods.tsv"
printf '%s\n' "node-a agent-a Running" "node-b agent-b Running" > "$FAKE_CLUSTER/agents.tsv"
# One API token for the release's agents, as the chart mounts one Secret on every node: a transfer push presents
# the sending agent's token to the receiving one.
release_token=$(head -c 32 /dev/urandom | base64)
for n in node-a node-b; do
  d="$FAKE_CLUSTER/nodes/$n" fs="$FAKE_CLUSTER/nodes/$n/fs"
  mkdir -p "$fs/var/lib/gpuckpt/checkpoints" "$fs/etc/gpuckpt/auth" "$d/hooks.d"
  cp -a "$SRC/test/fixtures/nvidia-h100-8gpu" "$d/hostroot"
  mkdir -p "$d/hostroot/dev" && mknod "$d/hostroot/dev/nvidia0" c 1 3 && mknod "$d/hostroot/dev/nvidia1" c 1 5
  echo "nvidia-h100-8gpu" > "$d/gpu"
  for f in "$SRC"/oci-hook/gpuckpt-hook*.json; do   # the node's hooks.d entries, as the chart installs them
    sed -e "s#/usr/local/bin/gpuckpt-oci-hook#$HOOK#" \
        -e "s#\"/var/lib/gpuckpt\"#\"$fs/var/lib/gpuckpt\", \"--host-root\", \"$d/hostroot\"#" "$f" > "$d/hooks.d/$(basename "$f")"
  done
  echo "$release_token" > "$fs/etc/gpuckpt/auth/token" && chmod 600 "$fs/etc/gpuckpt/auth/token"
  cat > "$d/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $fs/etc/gpuckpt/auth/token}
state_dir: $fs/var/lib/gpuckpt
checkpoints: {dir: $fs/var/lib/gpuckpt/checkpoints, kubelet_dir: ""}
runtime: {kind: podman}
host_root: $d/hostroot
hooks_dir: $d/hooks.d
transfer: {peer_networks: [127.0.0.0/8]}
YAML
  "$AGENT" --config "$d/agent.yaml" > "$d/agent.log" 2>&1 &
  pids+=($!)
done
for n in node-a node-b; do
  d="$FAKE_CLUSTER/nodes/$n"
  for _ in $(seq 100); do [ -s "$d/fs/var/lib/gpuckpt/agent.port" ] && break; sleep 0.1; done
  [ -s "$d/fs/var/lib/gpuckpt/agent.port" ] || { cat "$d/agent.log"; echo "FAIL: agent on $n did not start"; exit 1; }
  echo "http://127.0.0.1:$(cat "$d/fs/var/lib/gpuckpt/agent.port")" > "$d/agent.url"
done

# ---- the workload on node-a -----------------------------------------------------------------------------------
podman --hooks-dir "$FAKE_CLUSTER/nodes/node-a/hooks.d" run -d --name "$NAME" \
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
  --device /dev/null:/dev/nvidia0 --device /dev/zero:/dev/kfd -e NVIDIA_VISIBLE_DEVICES=0 "$IMAGE" \
  sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; echo "count $i"; sleep 0.1; done' > /dev/null
for _ in $(seq 100); do [ "$(podman exec "$NAME" cat /tmp/count 2>/dev/null || echo 0)" -ge 5 ] && break; sleep 0.1; done

# ---- migrate ----------------------------------------------------------------------------------------------------
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
t0=$SECONDS
rc=0; "$PLUGIN" migrate counter -n ml --to node-b --name "$NAME-migrated" > "$tmp/out" 2> "$tmp/err" || rc=$?
secs=$((SECONDS - t0))
cat "$tmp/err"
if [ "$rc" = 0 ]; then ok; else bad "migrate exits 0 (got $rc)"; fi
grep -q '^\[5/5\] restoring on node-b' "$tmp/err" && ok || bad "progress reached the restore step"
grep -q 'pushed agent to agent .*sha256 .* verified by the target' "$tmp/err" && ok || bad "the archive went agent to agent, verified"
grep -Eq '^ +GPU-[0-9a-f-]+ +GPU-[0-9a-f-]+ ' "$tmp/err" && ok || bad "node-b's GPUs matched the checkpoint's record (real match)"
[ "$(grep -o -- '-- gpuckpt match\|-- gpuckpt transfer\|-- cat' "$FAKE_CLUSTER/calls.log" | tr '\n' ' ')" = "-- gpuckpt match -- gpuckpt transfer " ] && ok || bad "the match ran before the copy, which went agent to agent"
grep -q "job tr-.*: sent " "$FAKE_CLUSTER/nodes/node-a/agent.log" && grep -q "transfer: received " "$FAKE_CLUSTER/nodes/node-b/agent.log" &&
  ok || bad "node-a's agent sent the archive, node-b's received it"
a_archive=$(find "$FAKE_CLUSTER/nodes/node-a/fs/var/lib/gpuckpt/checkpoints" -name '*.tar*' | head -1)
b_archive="$FAKE_CLUSTER/nodes/node-b/fs/var/lib/gpuckpt/checkpoints/$(basename "${a_archive:-none}")"
[ -n "$a_archive" ] && cmp -s "$a_archive" "$b_archive" && ok || bad "the archive arrived on node-b intact"
[ -z "$(find "$FAKE_CLUSTER/nodes/node-b/fs" -name '.*.incoming')" ] && ok || bad "no partial archive left on node-b"
state=$(podman inspect -f '{{.State.Status}}' "$NAME-migrated" 2>/dev/null || echo missing)
[ "$state" = running ] && ok || bad "the migrated container runs (state $state)"
last=$(tar -xOf "$a_archive" ctr.log 2>/dev/null | tail -1 | awk '{print $NF}' || echo 0)
for _ in $(seq 50); do now=$(podman exec "$NAME-migrated" cat /tmp/count 2>/dev/null || echo 0); [ "$now" -gt "${last:-0}" ] && break; sleep 0.1; done
[ -n "$last" ] && [ "$now" -gt "$last" ] && ok || bad "it continued counting (last before checkpoint ${last:-?}, now ${now:-?})"
grep -q "\"$NAME-migrated\"\|$NAME-migrated" "$FAKE_CLUSTER/nodes/node-b/agent.log" 2>/dev/null || true
# kubectl gpuckpt jobs: the source agent's checkpoint job (GET /v1/checkpoints through gpuckpt jobs in its pod)
"$PLUGIN" jobs node-a > "$tmp/jobs" 2>&1 && grep -Eq '^ck-[0-9TZ]+-[0-9a-f]+ +checkpoint +succeeded ' "$tmp/jobs" &&
  ok || bad "kubectl gpuckpt jobs lists node-a's checkpoint job: $(cat "$tmp/jobs")"
"$PLUGIN" jobs node-a --state failed > "$tmp/jobs" 2>&1 && ! grep -q '^ck-' "$tmp/jobs" && ok || bad "--state failed filters it out"
# gpuckpt job ID --follow against node-a's agent: the checkpoint job, to its end
a_url=$(cat "$FAKE_CLUSTER/nodes/node-a/agent.url") a_token="$FAKE_CLUSTER/nodes/node-a/fs/etc/gpuckpt/auth/token"
job_id=$(awk '/^ck-/ {print $1; exit}' <(GPUCKPT_AGENT=$a_url GPUCKPT_TOKEN_FILE=$a_token "$GPUCKPT_CLI" jobs --kind checkpoint) || true)
rc=0; "$GPUCKPT_CLI" job "${job_id:-none}" --follow --agent "$a_url" --token-file "$a_token" > "$tmp/job" 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -q "^$job_id checkpoint succeeded (phase done)" "$tmp/job" && grep -q "archive: .*$job_id" "$tmp/job" &&
  ok || bad "gpuckpt job --follow reports the finished checkpoint job (rc $rc: $(cat "$tmp/job"))"
rc=0; "$GPUCKPT_CLI" job ck-20000101T000000Z-00000000 --agent "$a_url" --token-file "$a_token" > "$tmp/job" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "no checkpoint job 'ck-20000101T000000Z-00000000'" "$tmp/job" && ok || bad "an unknown job id is named (rc $rc: $(cat "$tmp/job"))"
# the agents' logs: every line timestamped with its level; job polls (GET) at debug, the requests that change
# something at info
alog="$FAKE_CLUSTER/nodes/node-a/agent.log"
[ -s "$alog" ] && ! grep -Evq '^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z gpuckpt-agent: (error|warn|info|debug): ' "$alog" &&
  ok || bad "every agent log line starts with its UTC time, component and level: $(grep -Ev '^20[0-9]{2}-' "$alog" | head -2)"
grep -q 'gpuckpt-agent: info: POST /v1/checkpoints -> 202' "$alog" && ! grep -Eq 'info: GET /v1/[^ ]* -> 2[0-9]{2} ' "$alog" &&
  grep -q "info: GET /v1/checkpoints/ck-20000101T000000Z-00000000 -> 404" "$alog" &&
  ok || bad "POST and refusals logged at info, the successful job polls not: $(grep 'GET /v1/' "$alog" | head -3)"
echo "migrate took ${secs}s (checkpoint, copy, match, restore through two agents)"
if [ "$fail" != 0 ]; then for n in node-a node-b; do echo "--- agent $n"; tail -20 "$FAKE_CLUSTER/nodes/$n/agent.log"; done; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
