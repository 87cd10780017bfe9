#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2016 # ok/bad always return 0; checks are eval'ed strings (using the variables)
# A real gpuckpt-agent stopped (SIGTERM) while a job of it stalls on a peer that trickles its answers, a byte every
# 0.2 s, for as long as it is read (the job's own budget, limits.job_timeout_seconds, is 300 s away), and a second
# job waits in the queue behind it (limits.max_concurrent_jobs 1). The agent must exit within its
# limits.shutdown_grace_seconds (2 s) and a little: the stalled job cut short, the queued one never started, both
# recorded `interrupted` in <state_dir>/jobs/<id>.json with an error saying that the agent was stopping, and a
# restarted agent shows them so.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$SRC/build}" 2>/dev/null && pwd) || { echo "SKIP: no build directory"; exit 77; }
AGENT="$BUILD/agent/gpuckpt-agent"
[ -x "$AGENT" ] || { echo "SKIP: gpuckpt-agent not built"; exit 77; }
for t in curl python3; do command -v "$t" >/dev/null || { echo "SKIP: $t missing"; exit 77; }; done
. "$SRC/scripts/lib/node-sandbox.sh"

tmp=$(mktemp -d /tmp/gpuckpt-shutdown.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

# The peer: every request is answered 200 with a body announced as 1 MB that comes a byte every 0.2 s. It notes each
# request it gets in peer.requests.
cat > "$tmp/peer.py" <<'PY'
import http.server, socketserver, sys, time
class Trickle(http.server.BaseHTTPRequestHandler):
    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(sys.argv[2], "a") as f:
            f.write(self.command + " " + self.path + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        try:
            for _ in range(1000000):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass
    do_GET = do_PUT = do_POST = answer
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Trickle)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
PY
python3 "$tmp/peer.py" "$tmp/peer.port" "$tmp/peer.requests" &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/peer.port" ] && break; sleep 0.1; done
[ -s "$tmp/peer.port" ] || { echo "FAIL: the trickling peer did not start"; exit 1; }
PEER="http://127.0.0.1:$(cat "$tmp/peer.port")"

d="$tmp/agent"
sandbox_agent_config "$d" "$(head -c 32 /dev/urandom | base64 | tr -d '/+=')" \
  "transfer: {peer_networks: [127.0.0.0/8]}
limits: {job_timeout_seconds: 300, shutdown_grace_seconds: 2, max_concurrent_jobs: 1}"
start_agent() {
  sandbox_run_agent "$AGENT" "$d" || { echo "FAIL: the agent did not start"; exit 1; }
  agent=$AGENT_PID A=$URL
  pids+=("$agent")
}
api() { curl -s -H "Authorization: Bearer $(cat "$d/token")" "$@"; }
field() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

start_agent
head -c $((1024 * 1024)) /dev/urandom > "$d/state/checkpoints/ck-stalled.tar.zst"
for n in 1 2; do
  api -X POST -H "Content-Type: application/json" -d "{\"archive\": \"ck-stalled.tar.zst\", \"to\": \"$PEER\"}" \
    "$A/v1/transfers" > "$tmp/job$n"
done
first=$(field "$tmp/job1" 'j["id"]') second=$(field "$tmp/job2" 'j["id"]')
# The first job is stalled once the peer was asked and the job still runs; the second waits for the only slot.
for _ in $(seq 100); do
  [ -s "$tmp/peer.requests" ] && api "$A/v1/transfers/$first" | grep -q '"phase":"sending"' && break
  sleep 0.1
done
api "$A/v1/transfers/$first" > "$tmp/before1"; api "$A/v1/transfers/$second" > "$tmp/before2"
expect '[ "$(field "$tmp/before1" "j[\"state\"]")" = running ] && [ -s "$tmp/peer.requests" ]' \
  "the first job runs, stalled on the peer ($(cat "$tmp/before1"); peer got: $(cat "$tmp/peer.requests" 2>/dev/null))"
expect '[ "$(field "$tmp/before2" "j[\"state\"]")" = queued ]' "the second job waits in the queue ($(cat "$tmp/before2"))"

start=$(date +%s.%N)
kill -TERM "$agent"
rc=none
for _ in $(seq 300); do   # 30 s: the job's budget is 300 s, the peer never stops
  if ! kill -0 "$agent" 2>/dev/null; then rc=0; wait "$agent" || rc=$?; break; fi
  sleep 0.1
done
took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
echo "the agent exited ${took} s after SIGTERM (rc $rc; limits.shutdown_grace_seconds 2)"
expect '[ "$rc" = 0 ]' "the agent exits 0 after SIGTERM (rc $rc after $took s; still alive after 30 s is 'none')"
expect 'python3 -c "import sys; sys.exit(0 if 2 <= float(sys.argv[1]) < 6 else 1)" "$took"' \
  "it exits after the 2 s grace and well before the job's 300 s budget (took $took s)"
[ "$rc" = none ] && kill -9 "$agent" 2>/dev/null || true

rec1="$d/state/jobs/$first.json" rec2="$d/state/jobs/$second.json"
expect '[ "$(field "$rec1" "j[\"state\"]")" = interrupted ]' "the stalled job's record says interrupted ($(head -c 600 "$rec1"))"
expect 'field "$rec1" "j[\"error\"]" | grep -q "^interrupted: the agent was stopping and cut this job short after limits.shutdown_grace_seconds (2 s), in phase sending"' \
  "its error says the agent was stopping, after which grace, in which phase"
expect 'field "$rec1" "j[\"error\"]" | grep -q "the target agent at $PEER was not done with GET /v1/incoming/ck-stalled.tar.zst when the agent stopped its jobs"' \
  "and which request to which peer was cut ($(field "$rec1" 'j["error"]'))"
expect '[ -n "$(field "$rec1" "j[\"finished_at\"]")" ]' "it has finished_at"
expect '[ "$(field "$rec2" "j[\"state\"]")" = interrupted ] && field "$rec2" "j[\"error\"]" | grep -q "the agent stopped before this job had a slot; nothing of it was done"' \
  "the queued job's record says interrupted, nothing done ($(head -c 600 "$rec2"))"
expect '[ "$(grep -c "GET /v1/incoming" "$tmp/peer.requests")" = 1 ]' "the queued job never reached the peer"
expect 'grep -q "still runs after limits.shutdown_grace_seconds (2 s): cutting it short" "$d/agent.log"' "the agent logged the cut"
expect '[ "$(field "$rec1" "j[\"request\"][\"to\"]")" = "$PEER" ]' "the record keeps its request"

# A restarted agent shows them as they were left.
start_agent
api "$A/v1/transfers/$first" > "$tmp/after1"
api "$A/v1/transfers?state=interrupted" > "$tmp/listed"
expect '[ "$(field "$tmp/after1" "j[\"state\"]")" = interrupted ]' "after a restart the job still reads interrupted ($(cat "$tmp/after1"))"
expect '[ "$(field "$tmp/listed" "len(j[\"jobs\"])")" = 2 ]' \
  "GET /v1/transfers?state=interrupted lists both ($(head -c 300 "$tmp/listed"))"
kill -TERM "$agent"; wait "$agent" || true

echo "shutdown: $pass passed, $fail failed"
[ "$fail" = 0 ]
