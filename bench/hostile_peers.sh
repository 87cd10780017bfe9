#!/usr/bin/env bash
# Measured bounds of a real gpuckpt-agent against hostile peers on loopback (bench/hostile_peers.py), as
# docs/security.md states them; prints one markdown table (and keeps the agents' logs under $KEEP, if set):
#   F3/F2    a transfer target answering chunk PUTs with "present": "no", a 512 MiB error body, one byte a second:
#            the sending agent's job error, its time, the agent's peak RSS, the job record's size
#   shutdown SIGTERM while a transfer stalls on the 1 B/s target: time to exit with the default and a 2 s
#            limits.shutdown_grace_seconds, the job's recorded state
#   F5       a chunk pull from a registry stand-in serving 16 raw chunks of 64 MiB (the largest a chunk may be), with
#            image_registry.chunk_streams 1, 4, 8 (and 2 MiB chunks, the default size, at 8): peak RSS over the idle
#            agent's, per stream, against the documented bound
#   F6       PUT /v1/chunks/ flooded with valid chunks, 8 at once, against small limits.unreferenced_chunk_bytes /
#            limits.unreferenced_chunks: where 507 starts, what was kept, peak RSS; the same with each chunk sent
#            twice at once (one upload broken off half-way); then `gpuckpt store gc --delete` on the garbage (its
#            mtimes set back past the grace period: what an hour's wait does) and a real transfer into the agent
#            right after it, and after the agent's restart
# Run under the e2e lock: flock /tmp/e2e.lock bash bench/hostile_peers.sh [BUILD_DIR]
# shellcheck disable=SC2015,SC2016 # A && B || true is meant; python -c programs are single-quoted on purpose
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
AGENT="$BUILD/agent/gpuckpt-agent" CLI="$BUILD/cli/gpuckpt" FIXTURE="$BUILD/test/support/gpuckpt-store-fixture"
PEERS="$SRC/bench/hostile_peers.py"
. "$SRC/scripts/lib/node-sandbox.sh"
for f in "$AGENT" "$CLI" "$FIXTURE"; do [ -x "$f" ] || { echo "$f is not built" >&2; exit 2; }; done

tmp=$(mktemp -d /tmp/gpuckpt-hostile-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && find "$tmp" -name '*.log' -exec cp --parents {} "$KEEP" \; ; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
token=$(head -c 32 /dev/urandom | base64 | tr -d '/+=')
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
mb() { echo $(( $1 / 1024 )); }   # kB -> MB (MiB)
peak_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
reset_peak() { echo 5 > "/proc/$1/clear_refs"; }
jf() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
api() { curl -s -H "Authorization: Bearer $token" "$@"; }

start_agent() { # NAME EXTRA_YAML: the agent's pid in $agent, its URL in $url
  sandbox_agent_config "$tmp/$1" "$token" "$2"
  sandbox_run_agent "$AGENT" "$tmp/$1" || { echo "agent $1 did not start" >&2; exit 1; }
  agent=$AGENT_PID url=$URL
  pids+=("$agent")
}
start_peer() { # ARGS...: bench/hostile_peers.py ARGS with a port file appended where PORTFILE stands; URL in $peer
  local portfile="$tmp/peer.$RANDOM.port" args=()
  for a in "$@"; do [ "$a" = PORTFILE ] && args+=("$portfile") || args+=("$a"); done
  python3 "$PEERS" "${args[@]}" > "$tmp/peer.log" 2>&1 &
  peer_pid=$!
  pids+=("$peer_pid")
  for _ in $(seq 600); do [ -s "$portfile" ] && break; sleep 0.1; done
  [ -s "$portfile" ] || { cat "$tmp/peer.log" >&2; echo "peer $* did not start" >&2; exit 1; }
  peer="http://127.0.0.1:$(cat "$portfile")"
}
wait_job() { # URL KIND ID FILE SECONDS: polls until the job is done; its status in FILE
  for _ in $(seq $(($5 * 20))); do
    api "$1/v1/$2/$3" > "$4"
    case "$(jf "$4" 'j["state"]')" in succeeded|failed|interrupted) return 0 ;; esac
    sleep 0.05
  done
  return 1
}
cut_error() { # FILE N: the first N characters of the job's error for a table cell (this run's paths and URLs shortened)
  python3 -c '
import json, re, sys
e = json.load(open(sys.argv[1])).get("error") or ""
e = re.sub(r"http://127\.0\.0\.1:[0-9]+", "PEER", e.replace(sys.argv[3], "$TMP"))
print(e[:int(sys.argv[2])].replace("|", "/"))' "$1" "$2" "$tmp"
}
job_seconds() { # LOG ID: from the agent's first line about the job to its last (the agent's own clock, ms)
  python3 -c '
import datetime, sys
t = [datetime.datetime.fromisoformat(l[:23]) for l in open(sys.argv[1]) if ("job " + sys.argv[2] + ":") in l]
print(f"{(t[-1] - t[0]).total_seconds():.2f}" if len(t) > 1 else "?")' "$1" "$2"
}

# ---- the sending agent and its store-backed checkpoint (8 chunks of 64 KiB) -------------------------------------
start_agent sender "gpu_memory: {store: $tmp/sender/chunks}
transfer: {peer_networks: [127.0.0.0/8], chunk_streams: 4}
limits: {job_timeout_seconds: 10}"
S=$url S_PID=$agent
"$FIXTURE" "$tmp/sender/chunks" "$tmp/sender/state/checkpoints/ck-bench.tar" 1 2 3 4 5 6 7 8 > /dev/null
transfer() { # AGENT_URL TO: POST /v1/transfers of ck-bench.tar; the job id in $job
  api -X POST -H "Content-Type: application/json" -d "{\"archive\": \"ck-bench.tar\", \"to\": \"$2\"}" \
    "$1/v1/transfers" > "$tmp/accepted"
  job=$(jf "$tmp/accepted" 'j["id"]')
}

# ---- F3 / F2: hostile transfer targets -----------------------------------------------------------------------
f32=()
for mode in present-no error-body trickle; do
  start_peer target "$mode" PORTFILE
  reset_peak "$S_PID"
  transfer "$S" "$peer"
  wait_job "$S" transfers "$job" "$tmp/job" 60 || true
  alive=$(kill -0 "$S_PID" 2>/dev/null && echo alive || echo "DEAD")
  rec=$(stat -c %s "$tmp/sender/state/jobs/$job.json")
  f32+=("| $mode | $alive | $(jf "$tmp/job" 'j["state"]') in $(job_seconds "$tmp/sender/agent.log" "$job") s | $(mb "$(peak_kb "$S_PID")") MB | $rec B | $(cut_error "$tmp/job" 330) |")
  kill "$peer_pid"; wait "$peer_pid" 2>/dev/null || true
done

# ---- shutdown: SIGTERM while a transfer stalls on the 1 B/s target ----------------------------------------------
shut=()
start_peer target trickle PORTFILE
TRICKLE=$peer
for grace in default 2; do
  extra="limits: {job_timeout_seconds: 300}"
  [ "$grace" = default ] || extra="limits: {job_timeout_seconds: 300, shutdown_grace_seconds: $grace}"
  rm -rf "$tmp/stopping"
  start_agent stopping "gpu_memory: {store: $tmp/stopping/chunks}
transfer: {peer_networks: [127.0.0.0/8]}
$extra"
  "$FIXTURE" "$tmp/stopping/chunks" "$tmp/stopping/state/checkpoints/ck-bench.tar" 1 2 3 > /dev/null
  transfer "$url" "$TRICKLE"
  for _ in $(seq 100); do
    api "$url/v1/transfers/$job" > "$tmp/job"
    [ "$(jf "$tmp/job" 'j.get("phase")')" = uploading-chunks ] && break
    sleep 0.1
  done
  sleep 2   # the uploads have reached the peer and are reading its trickle
  t0=$(now)
  kill -TERM "$agent"
  rc=none
  for _ in $(seq 900); do   # 90 s
    if ! kill -0 "$agent" 2>/dev/null; then rc=0; wait "$agent" || rc=$?; break; fi
    sleep 0.1
  done
  took=$(since "$t0")
  [ "$rc" = none ] && kill -9 "$agent" 2>/dev/null || true
  r="$tmp/stopping/state/jobs/$job.json"
  shut+=("| $grace | $took s (exit $rc) | $(jf "$r" 'j["state"]') | $(cut_error "$r" 420) |")
done

# ---- F5: pull memory per stream from a registry stand-in ---------------------------------------------------------
pull=()
pull_run() { # CHUNK_BYTES COUNT STREAMS
  start_peer registry PORTFILE "$1" "$2"
  local host=${peer#http://}
  rm -rf "$tmp/puller"
  start_agent puller "gpu_memory: {store: $tmp/puller/chunks}
image_registry: {repository: $host/bench/ck, plain_http: true, chunk_streams: $3, timeout_seconds: 120}"
  sleep 0.5
  local idle; idle=$(rss_kb "$agent")
  reset_peak "$agent"
  t0=$(now)
  api -X POST -H "Content-Type: application/json" -d "{\"image\": \"$host/bench/ck:ck-1\"}" "$url/v1/chunk-pulls" > "$tmp/accepted"
  wait_job "$url" chunk-pulls "$(jf "$tmp/accepted" 'j["id"]')" "$tmp/job" 300 || true
  local took; took=$(since "$t0")
  local peak; peak=$(peak_kb "$agent")
  local per=$(( (peak - idle) / $3 / 1024 ))
  local bound=$(( (2 * $1 + 32) / 1048576 ))
  local verdict="holds"
  [ $(( (peak - idle) * 1024 )) -le $(( $3 * (2 * $1 + 32) + 16 * 1048576 )) ] || verdict="EXCEEDED"
  pull+=("| $(( $1 / 1048576 )) MiB x $2 | $3 | $(jf "$tmp/job" 'j["state"]'), $(jf "$tmp/job" '(j.get("result") or {}).get("added")') added, $took s | $(mb "$idle") MB | $(mb "$peak") MB | $per MB | $bound MB: $verdict |")
  kill "$agent"; wait "$agent" 2>/dev/null || true
  kill "$peer_pid"; wait "$peer_pid" 2>/dev/null || true
}
pull_run $((64 << 20)) 16 1
pull_run $((64 << 20)) 16 4
pull_run $((64 << 20)) 16 8
pull_run $((2 << 20)) 64 8

# ---- F6: the unreferenced-chunk quota under a flood ---------------------------------------------------------------
flood=()
chunks_in() { find "$1/sha256" -type f ! -name '.*' 2>/dev/null | wc -l; }
bytes_in() { du -sb "$1/sha256" 2>/dev/null | cut -f1; }
flood_run() { # LABEL QUOTA_YAML MODE N RAW_BYTES PARALLEL: the agent stays up ($agent, $url) for what follows
  rm -rf "$tmp/flooded"
  start_agent flooded "gpu_memory: {store: $tmp/flooded/chunks}
limits: {$2}"
  reset_peak "$agent"
  python3 "$PEERS" flood "$url" "$token" "$3" "$4" "$5" "$6" > "$tmp/flood.json"
  local f="$tmp/flood.json"
  flood+=("| $1 | $4 x $(( $5 / 1024 )) KiB, $6 at once$([ "$3" = pair ] && echo ', each twice') | $(jf "$f" 'j["codes"]' | tr -d "{}'") | $(jf "$f" 'j["first_507_at"]') | $(chunks_in "$tmp/flooded/chunks") chunks, $(( $(bytes_in "$tmp/flooded/chunks") / 1048576 )) MiB | $(mb "$(peak_kb "$agent")") MB | $(jf "$f" 'j["seconds"]') s |")
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["first_507_message"]
try: m=json.loads(m)["error"]["message"]
except ValueError: pass
print(m)' "$f" > "$tmp/flood.message"
}
flood_run "bytes: 256 MiB" "unreferenced_chunk_bytes: 268435456" fresh 48 $((16 << 20)) 8
kill "$agent"; wait "$agent" 2>/dev/null || true
flood_run "chunks: 200" "unreferenced_chunks: 200" pair 300 65536 4
kill "$agent"; wait "$agent" 2>/dev/null || true
flood_run "chunks: 200" "unreferenced_chunks: 200" fresh 400 65536 8
message=$(cat "$tmp/flood.message")

# The garbage aged past the grace period, collected while the agent runs; then a real transfer into it.
B=$url B_STORE="$tmp/flooded/chunks"
before=$(chunks_in "$B_STORE")
find "$B_STORE/sha256" -type f -exec touch -d '2 hours ago' {} +
"$CLI" store gc --store "$B_STORE" --delete --json > "$tmp/gc.json"
after=$(chunks_in "$B_STORE")
after_gc=()
legit() { # LABEL
  transfer "$S" "$B"
  wait_job "$S" transfers "$job" "$tmp/job" 60 || true
  after_gc+=("| $1 | $(jf "$tmp/job" 'j["state"]') | $(jf "$tmp/job" '((j.get("result") or {}).get("chunks") or {}).get("sent")') | $(cut_error "$tmp/job" 330) |")
}
legit "right after gc --delete"
kill "$agent"; wait "$agent" 2>/dev/null || true
start_agent flooded "gpu_memory: {store: $tmp/flooded/chunks}
limits: {unreferenced_chunks: 200}"
B=$url
rm -f "$tmp/flooded/state/checkpoints/ck-bench.tar"
legit "after the agent's restart (the archive removed, its chunks kept)"

echo "## F3/F2: a hostile transfer target (sending agent: 8 chunks of 64 KiB over 4 streams, limits.job_timeout_seconds 10)"
echo
echo "| the target answers | agent | job (agent's log) | peak RSS | job record | job error (first 330 characters) |"
echo "| --- | --- | --- | ---: | ---: | --- |"
printf '%s\n' "${f32[@]}"
echo
echo "## Shutdown: SIGTERM while a transfer reads a 1 B/s answer (limits.job_timeout_seconds 300)"
echo
echo "| limits.shutdown_grace_seconds | SIGTERM to exit | job state | job error (first 420 characters) |"
echo "| --- | ---: | --- | --- |"
printf '%s\n' "${shut[@]}"
echo
echo "## F5: chunk pull memory (registry stand-in, raw chunks)"
echo
echo "| chunks | streams | job | idle RSS | peak RSS | per stream | documented per stream (2 chunk files) |"
echo "| --- | ---: | --- | ---: | ---: | ---: | --- |"
printf '%s\n' "${pull[@]}"
echo
echo "## F6: PUT /v1/chunks/ flooded"
echo
echo "| quota | sent | answers | first 507 at chunk (sending order) | store after | peak RSS | time |"
echo "| --- | --- | --- | ---: | --- | ---: | ---: |"
printf '%s\n' "${flood[@]}"
echo
echo "507 message: $message"
echo
echo "gpuckpt store gc --delete (the garbage's mtimes 2 hours back, the agent running): $before chunk files before, $after after;" \
  "$(jf "$tmp/gc.json" '"removed %d chunks, %d bytes; %d references" % (j["garbage_chunks"], j["garbage_bytes"], j["references"])')"
echo
echo "| a store-backed transfer (8 chunks) into the flooded agent | job | chunks sent | error |"
echo "| --- | --- | ---: | --- |"
printf '%s\n' "${after_gc[@]}"
