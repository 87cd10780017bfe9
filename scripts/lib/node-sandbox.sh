# shellcheck shell=bash
# Sourced by the demo, the e2e tests and the benches: a throw-away gpuckpt node under one work directory.
#   sandbox_podman_ready IMAGE       whether this machine can checkpoint podman's containers: root, podman, a CRIU
#                                     that dumps here (criu-probe.sh), podman's IMAGE; 0, or 1 with SANDBOX_MISSING
#                                     saying what is missing and what makes it
#   sandbox_prepare WORK BUILD SRC   simulated GPU node (8x H100 fixture; /dev/nvidia0 and /dev/nvidia1 made with
#                                     /dev/null's and /dev/zero's numbers), hooks.d entries for the built hook,
#                                     an agent token and config. Sets ROOT HOOKS STATE CK TOKEN_FILE GPU0 GPU1.
#   sandbox_start_agent AGENT        starts the agent (port chosen by the kernel). Sets AGENT_PID URL.
#   sandbox_stop_agent               stops it (safe to call twice).
#   sandbox_api METHOD PATH [BODY]   calls the agent's API with the token; prints "STATUS BODY"
#   sandbox_json_field "STATUS BODY" '["key"]...'   one field of an answer's body
#   sandbox_wait_job COLLECTION ID   polls a job until it succeeded, failed or was interrupted (60 s); prints the last answer
#   sandbox_count_of PID             the counter the tests' containers keep in /tmp/count, as process PID sees it
#                                     (rewritten 10 times a second: an empty read is retried, for 1 s); 1 if none
#   sandbox_counts_past PID N        whether that counter passes N within 10 s
#   sandbox_program_image PROGRAM ROOTFS IMAGE
#                                     podman's IMAGE of one dynamically linked PROGRAM (x86-64) with its libraries,
#                                     as /bin/NAME, its CMD and root's shell, its tree made in ROOTFS
# Agents of their own, for agent-to-agent tests on loopback (no GPU node, no hook):
#   sandbox_agent_config DIR TOKEN [EXTRA_YAML [CHECKPOINTS_KEYS]]
#                                     DIR/token holding TOKEN and DIR/agent.yaml: 127.0.0.1 (port chosen by the
#                                     kernel), podman, state and archives in DIR/state(/checkpoints), host root and
#                                     hooks.d under DIR; CHECKPOINTS_KEYS more keys of checkpoints:, EXTRA_YAML's
#                                     lines appended
#   sandbox_run_agent AGENT DIR      starts AGENT on DIR/agent.yaml, its log appended to DIR/agent.log, and waits
#                                     up to 10 s for its port. Sets AGENT_PID URL; 1 if it did not start (its log on
#                                     stderr, the process ended)
# shellcheck source=scripts/lib/criu-probe.sh
. "$(dirname "${BASH_SOURCE[0]}")/criu-probe.sh"

# sandbox_missing WHY: SANDBOX_MISSING=WHY (read by the callers of sandbox_podman_ready), and 1
# shellcheck disable=SC2034
sandbox_missing() { SANDBOX_MISSING=$1; return 1; }
sandbox_podman_ready() {
  [ "$(id -u)" = 0 ] || { sandbox_missing "needs root (podman checkpoint/restore)"; return; }
  command -v podman >/dev/null || { sandbox_missing "podman not installed (scripts/setup.sh)"; return; }
  command -v criu >/dev/null || { sandbox_missing "criu not installed (scripts/setup.sh)"; return; }
  criu_dump_works || { sandbox_missing "$CRIU_PROBE_REASON"; return; }
  podman image exists "$1" || sandbox_missing "image $1 missing (scripts/setup.sh builds it)"
}

sandbox_prepare() {
  local work=$1 build=$2 src=$3 f
  ROOT=$work/host-root HOOKS=$work/hooks.d STATE=$work/state CK=$work/checkpoints TOKEN_FILE=$work/token
  cp -a "$src/test/fixtures/nvidia-h100-8gpu" "$ROOT"
  mkdir -p "$ROOT/dev" "$HOOKS" "$CK"
  mknod "$ROOT/dev/nvidia0" c 1 3
  mknod "$ROOT/dev/nvidia1" c 1 5
  for f in "$src"/oci-hook/gpuckpt-hook*.json; do
    sed -e "s#/usr/local/bin/gpuckpt-oci-hook#$build/oci-hook/gpuckpt-oci-hook#" \
        -e "s#\"/var/lib/gpuckpt\"#\"$STATE\", \"--host-root\", \"$ROOT\"#" "$f" > "$HOOKS/$(basename "$f")"
  done
  head -c 32 /dev/urandom | base64 > "$TOKEN_FILE"
  chmod 600 "$TOKEN_FILE"
  cat > "$work/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $TOKEN_FILE}
state_dir: $STATE
checkpoints: {dir: $CK, kubelet_dir: ""}
host_root: $ROOT
hooks_dir: $HOOKS
YAML
  read -r GPU0 GPU1 < <("$build/cli/gpuckpt" gpus --host-root "$ROOT" --json |
    python3 -c 'import json,sys; print(" ".join(g["id"] for g in json.load(sys.stdin)["node"]["gpus"][:2]))')
  [ -n "${GPU0:-}" ] && [ -n "${GPU1:-}" ]
}

sandbox_start_agent() {
  : > "${STATE%/state}/agent.log"
  sandbox_run_agent "$1" "${STATE%/state}"
}

sandbox_agent_config() {
  local dir=$1
  mkdir -p "$dir/state/checkpoints"
  printf '%s\n' "$2" > "$dir/token" && chmod 600 "$dir/token"
  cat > "$dir/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $dir/token}
state_dir: $dir/state
checkpoints: {dir: $dir/state/checkpoints, kubelet_dir: ""${4:+, $4}}
runtime: {kind: podman}
host_root: $dir
hooks_dir: $dir/hooks.d
${3:-}
YAML
}

sandbox_run_agent() {
  local agent=$1 dir=$2 _
  rm -f "$dir/state/agent.port"
  "$agent" --config "$dir/agent.yaml" >> "$dir/agent.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 100); do [ -s "$dir/state/agent.port" ] && break; sleep 0.1; done
  if [ ! -s "$dir/state/agent.port" ]; then
    cat "$dir/agent.log" >&2
    kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
    AGENT_PID=
    return 1
  fi
  URL=http://127.0.0.1:$(cat "$dir/state/agent.port")
}

sandbox_stop_agent() {
  if [ -n "${AGENT_PID:-}" ]; then
    kill "$AGENT_PID" 2>/dev/null
    wait "$AGENT_PID" 2>/dev/null
    AGENT_PID=
  fi
  return 0
}

sandbox_api() {
  local out work=${STATE%/state}
  out=$(curl -s -m 30 -o "$work/api-response" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $(cat "$TOKEN_FILE")" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "$URL$2")
  echo "$out $(tr -d '\n' < "$work/api-response")"
}

sandbox_json_field() {
  python3 -c "import json,sys; d=json.loads(sys.argv[1].split(' ',1)[1]); print(eval('d'+sys.argv[2]))" "$1" "$2"
}

sandbox_wait_job() {
  local r _
  for _ in $(seq 300); do
    r=$(sandbox_api GET "/v1/$1/$2")
    case "$r" in *'"state":"succeeded"'*|*'"state": "succeeded"'*|*'"state":"failed"'*|*'"state": "failed"'*|*'"state":"interrupted"'*|*'"state": "interrupted"'*)
      echo "$r"; return 0 ;;
    esac
    sleep 0.2
  done
  echo "job $2 did not finish within 60 s" >&2
  return 1
}

sandbox_count_of() {
  local n _
  for _ in $(seq 50); do
    n=$(cat "/proc/$1/root/tmp/count" 2>/dev/null || true)
    [ -n "$n" ] && { echo "$n"; return 0; }
    sleep 0.02
  done
  return 1
}

sandbox_counts_past() {
  local n _
  for _ in $(seq 100); do
    n=$(sandbox_count_of "$1") && [ "$n" -gt "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

sandbox_program_image() {
  local program=$1 rootfs=$2 image=$3 lib name
  name=$(basename "$program")
  mkdir -p "$rootfs"/{bin,tmp,proc,sys,dev,etc,lib64,lib/x86_64-linux-gnu}
  chmod 1777 "$rootfs/tmp"
  cp "$program" "$rootfs/bin/"
  for lib in $(ldd "$program" | awk '/=> \// {print $3}'); do cp -L "$lib" "$rootfs/lib/x86_64-linux-gnu/"; done
  cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
  echo "root:x:0:0:root:/:/bin/$name" > "$rootfs/etc/passwd"
  tar -C "$rootfs" -c . | podman import -q --change "CMD [\"/bin/$name\"]" - "$image" >/dev/null
}
