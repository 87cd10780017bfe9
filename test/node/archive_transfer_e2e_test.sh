#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2016,SC2034 # ok/bad always return 0; checks are eval'ed strings (using the variables)
# Archive transfers between two real gpuckpt-agent processes on loopback (node/archive_transfer.h): node A pushes
# an archive to node B's agent. A clean push lands byte-identical; a stream dropped in the middle (a proxy between
# the agents cuts the first connection) resumes from the offset B already holds; a corrupted byte fails B's digest
# check and leaves nothing of the archive on B; B refuses pushes without the token or with a wrong one, names it
# does not accept, more than the declared total and totals over its max_archive_bytes; A refuses to push outside
# its transfer.peer_networks. Store-backed checkpoints (node/chunk_transfer.h), each agent with its own chunk
# store: the first uploads all its chunks (PUT /v1/chunks/<digest>, over transfer.chunk_streams = 3 connections:
# A's result, log and metrics say 3), a second sharing most of them only the new ones, the commit only references
# them, B's store then holds every chunk its archives name (referenced, read back whole) and B's archive is A's
# byte for byte, so sending it again succeeds moving nothing; a chunk corrupt in A's store is refused by B and fails
# the transfer with nothing kept or referenced; a chunk upload whose connection drops is tried again; chunk uploads by hand are authenticated, bounded and verified; an
# exported archive uploaded by hand is imported, one whose carried chunk was corrupted on the way refused.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$SRC/build}" 2>/dev/null && pwd) || { echo "SKIP: no build directory"; exit 77; }
AGENT="$BUILD/agent/gpuckpt-agent" CLI="$BUILD/cli/gpuckpt" PROXY="$SRC/test/support/flaky_proxy.py"
FIXTURE="$BUILD/test/support/gpuckpt-store-fixture"
[ -x "$AGENT" ] && [ -x "$CLI" ] && [ -x "$FIXTURE" ] || { echo "SKIP: gpuckpt-agent, gpuckpt or gpuckpt-store-fixture not built"; exit 77; }
for t in curl python3 sha256sum tar; do command -v "$t" >/dev/null || { echo "SKIP: $t missing"; exit 77; }; done
. "$SRC/scripts/lib/node-sandbox.sh"

tmp=$(mktemp -d /tmp/gpuckpt-transfer.XXXXXX)
pids=()
cleanup() {
  # a killed agent's status (143) is not the test's: errexit would make it the script's
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

token=$(head -c 32 /dev/urandom | base64 | tr -d '/+=')
start_agent() { # NAME [EXTRA YAML]
  sandbox_agent_config "$tmp/$1" "$token" "${2:-}" "max_archive_bytes: 67108864"
  sandbox_run_agent "$AGENT" "$tmp/$1" || { echo "FAIL: agent $1 did not start"; exit 1; }
  pids+=("$AGENT_PID")
  echo "$URL" > "$tmp/$1/url"
}
start_agent a "transfer: {peer_networks: [127.0.0.0/8], chunk_streams: 3}
gpu_memory: {store: $tmp/a/chunks}"
start_agent b "gpu_memory: {store: $tmp/b/chunks}"
A=$(cat "$tmp/a/url") B=$(cat "$tmp/b/url")
B_PORT=${B##*:}
A_DIR="$tmp/a/state/checkpoints" B_DIR="$tmp/b/state/checkpoints"

# An archive of 20 MiB: three chunks of the sender's 8 MiB.
archive="$A_DIR/ck-transfer-test.tar.zst"
head -c $((20 * 1024 * 1024 + 12345)) /dev/urandom > "$archive"
size=$(stat -c %s "$archive") sum=$(sha256sum "$archive" | cut -d' ' -f1)

proxy() { # MODE AT: a proxy in front of B, its URL in $PROXY_URL
  rm -f "$tmp/proxy.port"
  python3 "$PROXY" "$1" "$2" "$B_PORT" "$tmp/proxy.port" > "$tmp/proxy.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do [ -s "$tmp/proxy.port" ] && break; sleep 0.1; done
  PROXY_URL="http://127.0.0.1:$(cat "$tmp/proxy.port")"
}
transfer() { # TO [ARCHIVE]: the CLI's transfer through agent A; output in $tmp/out, $tmp/err
  "$CLI" transfer "${2:-$archive}" --to "$1" --agent "$A" --token-file "$tmp/a/token" --json --timeout 120 > "$tmp/out" 2> "$tmp/err"
}
field() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$tmp/out" "$1"; }
curl_b() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }

# ---- a clean push ---------------------------------------------------------------------------------------------
transfer "$B" && ok || bad "a clean push succeeds: $(cat "$tmp/err")"
expect '[ "$(sha256sum "$B_DIR/ck-transfer-test.tar.zst" | cut -d" " -f1)" = "$sum" ]' "B holds the same bytes"
expect '[ "$(field "j[\"result\"][\"sent_bytes\"]")" = "$size" ] && [ "$(field "j[\"result\"][\"sha256\"]")" = "$sum" ]' \
  "the job reports every byte sent and the digest ($(head -c 600 "$tmp/out"))"
expect '[ "$(field "j[\"result\"][\"archive\"]")" = "$B_DIR/ck-transfer-test.tar.zst" ]' "the job names the path on B"
expect '[ -z "$(find "$B_DIR" -name ".*.incoming")" ]' "no partial file left on B"
# Again: B already has these bytes under that name: nothing sent, success.
transfer "$B" && ok || bad "a repeated push succeeds: $(cat "$tmp/err")"
expect '[ "$(field "j[\"result\"][\"already_present\"]")" = True ] && [ "$(field "j[\"result\"][\"sent_bytes\"]")" = 0 ]' \
  "a repeated push sends nothing"
# A different archive of the same name on B is never replaced.
cp "$archive" "$tmp/keep" && printf 'x' >> "$archive"
rc=0; transfer "$B" || rc=$?
expect '[ "$rc" != 0 ] && grep -q "a different archive named ck-transfer-test.tar.zst" "$tmp/err"' "a different file of that name is refused (rc $rc): $(cat "$tmp/err")"
expect '[ "$(sha256sum "$B_DIR/ck-transfer-test.tar.zst" | cut -d" " -f1)" = "$sum" ]' "B's archive is unchanged"
mv "$tmp/keep" "$archive"
rm -f "$B_DIR/ck-transfer-test.tar.zst"

# ---- a stream dropped in the middle resumes -------------------------------------------------------------------
proxy drop $((12 * 1024 * 1024))
transfer "$PROXY_URL" && ok || bad "a push through a dropped stream succeeds: $(cat "$tmp/err")"
expect '[ "$(sha256sum "$B_DIR/ck-transfer-test.tar.zst" 2>/dev/null | cut -d" " -f1)" = "$sum" ]' "the resumed archive is byte-identical"
resumed=$(field 'j["result"]["resumed"]' 2>/dev/null || echo "?")
first=$(field 'j["result"]["resumed"][0]' 2>/dev/null || echo 0)
# The cut came inside the second chunk: B kept the first chunk and part of the second, and the push resumed there.
expect '[ "$first" -gt $((8 * 1024 * 1024)) ] && [ "$first" -lt $((16 * 1024 * 1024)) ] && [ "$((first % (8 * 1024 * 1024)))" != 0 ]' \
  "resumed from the offset B held inside the second chunk (resumed $resumed)"
expect '[ "$(field "j[\"result\"][\"sent_bytes\"]")" -lt "$((size + 8 * 1024 * 1024))" ]' "not resent from the start"
expect 'grep -q "resuming" "$tmp/a/agent.log"' "agent A logged the resume"
rm -f "$B_DIR/ck-transfer-test.tar.zst"

# ---- a corrupted byte fails the digest, nothing usable is left --------------------------------------------------
proxy flip $((3 * 1024 * 1024))
rc=0; transfer "$PROXY_URL" || rc=$?
expect '[ "$rc" = 1 ] && grep -q "was discarded, nothing of it is kept: its SHA-256 is" "$tmp/err"' "a corrupted byte fails the push (rc $rc): $(cat "$tmp/err")"
expect '[ -z "$(ls -A "$B_DIR")" ]' "nothing of the archive on B ($(find "$B_DIR" -mindepth 1 | tr '\n' ' '))"
# and a clean push afterwards works
transfer "$B" && [ "$(sha256sum "$B_DIR/ck-transfer-test.tar.zst" | cut -d" " -f1)" = "$sum" ] && ok || bad "a clean push after a corrupted one: $(cat "$tmp/err")"
rm -f "$B_DIR/ck-transfer-test.tar.zst"

# ---- hostile pushers --------------------------------------------------------------------------------------------
n="$B/v1/incoming/ck-x.tar.zst"
expect '[ "$(curl_b -X PUT --data-binary @"$archive" "$n?offset=0&total=$size")" = 401 ]' "a push without token is refused"
expect '[ "$(curl_b -X PUT -H "Authorization: Bearer wrong-token-000000" --data-binary "abc" "$n?offset=0&total=3")" = 401 ]' "a push with a wrong token is refused"
expect '[ "$(curl_b -X POST -H "Authorization: Bearer wrong-token-000000" -H "Content-Type: application/json" -d "{\"size\":3,\"sha256\":\"$sum\"}" "$n/commit")" = 401 ]' "a commit with a wrong token is refused"
expect '[ -z "$(ls -A "$B_DIR")" ]' "nothing was written by refused pushes"
auth=(-H "Authorization: Bearer $token")
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "abc" "$B/v1/incoming/..%2F..%2Fetc%2Fpasswd.tar?offset=0&total=3")" -ge 400 ]' "a path as name is refused"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "abc" "$B/v1/incoming/.hidden.tar?offset=0&total=3")" = 400 ]' "a dot file name is refused"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "abc" "$B/v1/incoming/notes.txt?offset=0&total=3")" = 400 ]' "a name that is no archive name is refused"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "abc" "$n?offset=0&total=$((1 << 30))")" = 413 ] && grep -q max_archive_bytes "$tmp/body"' "a total over max_archive_bytes is refused"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "abcdef" "$n?offset=0&total=3")" = 413 ]' "bytes beyond the declared total are refused"
expect '[ "$(stat -c %s "$B_DIR/.ck-x.tar.zst.incoming")" = 0 ]' "and none of them was kept"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "abc" "$n?offset=7&total=10")" = 409 ] && grep -q "holds 0 bytes" "$tmp/body"' "a PUT at another offset than B holds is refused"
expect '[ "$(curl_b -X POST "${auth[@]}" -H "Content-Type: application/json" -d "{\"size\":0,\"sha256\":\"$sum\"}" "$n/commit")" = 422 ] && [ ! -e "$B_DIR/ck-x.tar.zst" ] && [ ! -e "$B_DIR/.ck-x.tar.zst.incoming" ]' \
  "a commit whose digest does not match removes the partial file"
big=$(head -c $((17 * 1024 * 1024)) /dev/zero | tr '\0' 'a' > "$tmp/big"; echo "$tmp/big")
code=$(curl_b -X PUT "${auth[@]}" --data-binary @"$big" "$n?offset=0&total=$((20 * 1024 * 1024))" || true)
expect '[ "$code" = 413 ] && [ ! -s "$B_DIR/.ck-x.tar.zst.incoming" ]' "a chunk over 16 MiB is refused before any of it is written (answer $code)"
rm -f "$B_DIR/.ck-x.tar.zst.incoming"
expect '[ "$(curl_b -X POST "${auth[@]}" -H "Content-Type: application/json" --data-binary @"$big" "$B/v1/restores")" = 413 ]' "other routes keep limits.max_request_bytes"
for i in $(seq 1 8); do curl_b -X PUT "${auth[@]}" --data-binary "a" "$B/v1/incoming/ck-$i.tar?offset=0&total=5" > /dev/null; done
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary "a" "$B/v1/incoming/ck-9.tar?offset=0&total=5")" = 429 ]' "at most 8 partial transfers at once"
rm -f "$B_DIR"/.ck-*.incoming

# ---- store-backed checkpoints: only the chunks B lacks move, as PUT /v1/chunks/<digest> over 3 streams ---------
A_STORE="$tmp/a/chunks" B_STORE="$tmp/b/chunks"
# Eight 64 KiB chunks; the second checkpoint shares six of them (the weights) and has two new ones.
"$FIXTURE" "$A_STORE" "$A_DIR/ck-store-1.tar" 1 2 3 4 5 6 7 8 > /dev/null
"$FIXTURE" "$A_STORE" "$A_DIR/ck-store-2.tar" 1 2 3 4 5 6 9 10 > /dev/null
store_field() { "$CLI" store gc --store "$B_STORE" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
metric() { # AGENT_URL NAME: the value of one series of GET /metrics
  curl -s "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'
}
transfer "$B" "$A_DIR/ck-store-1.tar" && ok || bad "a store-backed checkpoint is sent: $(cat "$tmp/err")"
expect '[ "$(field "j[\"result\"][\"chunks\"][\"named\"]")" = 8 ] && [ "$(field "j[\"result\"][\"chunks\"][\"sent\"]")" = 8 ] && [ "$(field "j[\"result\"][\"chunks\"][\"target_had\"]")" = 0 ]' \
  "the first transfer uploads all 8 chunks ($(head -c 900 "$tmp/out"))"
expect '[ "$(field "j[\"result\"][\"chunks\"][\"sent_bytes\"]")" = $((8 * (65536 + 32))) ]' "in the version-1 wire form, byte for byte (8 x (32 + 64 KiB))"
# Parallel: A used transfer.chunk_streams (3) connections at once, and says so in its result, log and metrics.
expect '[ "$(field "j[\"result\"][\"chunks\"][\"streams\"]")" = 3 ] && grep -q "8 of 8 chunks uploaded ([0-9]* bytes) over 3 streams" "$tmp/a/agent.log"' \
  "A uploaded over 3 streams ($(grep -o "chunks uploaded.*streams" "$tmp/a/agent.log" | tail -1))"
expect '[ "$(metric "$A" gpuckpt_transfer_chunk_streams)" = 3 ] && [ "$(metric "$A" gpuckpt_transfer_chunks_sent_total)" = 8 ]' "A's metrics count 8 chunks over 3 streams"
expect '[ "$(metric "$B" "gpuckpt_chunks_received_total{result=\"added\"}")" = 8 ] && [ "$(grep -c "PUT /v1/chunks/[0-9a-f]\{64\} -> 201" "$tmp/b/agent.log")" = 8 ]' \
  "B received 8 chunk uploads"
# The commit only referenced what had come (no chunk data inside it).
expect '[ "$(field "j[\"result\"][\"chunks\"][\"admitted\"][\"references\"]")" = 1 ] && [ "$(field "j[\"result\"][\"chunks\"][\"admitted\"][\"carried_chunks\"]")" = 0 ] && [ "$(field "j[\"result\"][\"chunks\"][\"admitted\"][\"added_chunks\"]")" = 0 ]' \
  "B's commit referenced the chunks and imported none"
expect '[ "$(store_field chunks)" = 8 ] && [ "$(store_field references)" = 1 ] && [ "$(store_field missing_chunks)" = 0 ]' "B's store holds the 8 chunks, referenced"
expect '[ "$(sha256sum < "$B_DIR/ck-store-1.tar")" = "$(sha256sum < "$A_DIR/ck-store-1.tar")" ]' "B's archive is A's, byte for byte"
transfer "$B" "$A_DIR/ck-store-2.tar" && ok || bad "a second store-backed checkpoint is sent: $(cat "$tmp/err")"
expect '[ "$(field "j[\"result\"][\"chunks\"][\"sent\"]")" = 2 ] && [ "$(field "j[\"result\"][\"chunks\"][\"target_had\"]")" = 6 ] && [ "$(field "j[\"result\"][\"chunks\"][\"streams\"]")" = 2 ]' \
  "the second transfer uploads only the 2 new chunks ($(head -c 900 "$tmp/out"))"
expect '[ "$(field "j[\"result\"][\"chunks\"][\"sent_bytes\"]")" = $((2 * (65536 + 32))) ] && [ "$(metric "$B" "gpuckpt_chunks_received_total{result=\"added\"}")" = 10 ]' \
  "and not the shared ones' bytes"
expect '[ "$(metric "$A" gpuckpt_transfer_chunks_skipped_total)" = 6 ]' "A counts the 6 chunks B had"
expect '[ "$(store_field chunks)" = 10 ] && [ "$(store_field references)" = 2 ] && [ "$(store_field missing_chunks)" = 0 ]' "B's store holds 10 chunks in 2 references"
expect '! tar -tf "$B_DIR/ck-store-2.tar" | grep -q gpuckpt-chunks' "B's archive is store-backed (no carried chunks)"
mkdir -p "$tmp/images" && tar -xf "$B_DIR/ck-store-2.tar" -C "$tmp/images" checkpoint
GPUCKPT_GPU_STORE="$B_STORE" "$CLI" inspect "$tmp/images/checkpoint" > "$tmp/inspect" 2>&1 && ok || bad "inspect of B's archive against B's store: $(cat "$tmp/inspect")"
expect 'grep -q "every chunk checked in $B_STORE: ok" "$tmp/inspect"' "the restore-side reader reads every chunk from B's store"
expect '[ -z "$(find "$A_DIR" -name ".*.export.tar")" ]' "A made no temporary export"
# The same checkpoint again: B has the archive and every chunk; nothing moves, it succeeds.
transfer "$B" "$A_DIR/ck-store-2.tar" && ok || bad "re-sending the same store-backed checkpoint succeeds: $(cat "$tmp/err")"
expect '[ "$(field "j[\"result\"][\"already_present\"]")" = True ] && [ "$(field "j[\"result\"][\"chunks\"][\"sent\"]")" = 0 ] && [ "$(field "j[\"result\"][\"chunks\"][\"target_had\"]")" = 8 ] && [ "$(field "j[\"result\"][\"sent_bytes\"]")" = 0 ]' \
  "a re-send moves nothing ($(head -c 900 "$tmp/out"))"
expect '[ "$(store_field references)" = 2 ]' "and B still holds 2 references"
"$CLI" transfer "$A_DIR/ck-store-2.tar" --to "$B" --agent "$A" --token-file "$tmp/a/token" --timeout 120 > "$tmp/human" 2>&1 || true
expect 'grep -q "chunks:   0 of 8 uploaded (0 bytes) over 0 streams, 8 the target had" "$tmp/human" && grep -q "(the target already had it)" "$tmp/human"' \
  "gpuckpt transfer says so ($(cat "$tmp/human"))"

flip() { # FILE: a chunk file's payload byte 1000 flipped (again: repaired); the payload is at 4096 in a store's
  # version-2 (raw) file, at 32 in a version-1 one (the wire form)
  python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(8); at = (4096 if int.from_bytes(f.read(4), "little") == 2 else 32) + 1000; f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x5a]))' "$1"
}
# Hostile: a chunk corrupt in A's store (a flipped payload byte) is refused by B; the transfer fails naming it,
# nothing of the checkpoint is kept or referenced on B.
ls "$A_STORE"/sha256/*/* | sort > "$tmp/before"
"$FIXTURE" "$A_STORE" "$A_DIR/ck-store-3.tar" 1 11 > /dev/null
new_chunk=$(ls "$A_STORE"/sha256/*/* | sort | comm -13 "$tmp/before" -)
new_digest=$(basename "$new_chunk")
# The chunk as an upload sends it: the version-1 form an export carries (not the store's file, whose layout may differ).
GPUCKPT_GPU_STORE="$A_STORE" "$CLI" export "$A_DIR/ck-store-3.tar" -o "$tmp/wire.tar" > /dev/null
tar -xOf "$tmp/wire.tar" "gpuckpt-chunks/sha256/${new_digest:0:2}/$new_digest" > "$tmp/wire-chunk"
flip "$new_chunk"
rc=0; transfer "$B" "$A_DIR/ck-store-3.tar" || rc=$?
expect '[ "$rc" != 0 ] && grep -q "chunk $new_digest is refused: SHA-256 mismatch" "$tmp/err"' "the corrupt chunk fails the transfer, named (rc $rc): $(head -c 600 "$tmp/err")"
expect '[ ! -e "$B_STORE/sha256/${new_digest:0:2}/$new_digest" ] && [ ! -e "$B_DIR/ck-store-3.tar" ] && [ "$(store_field references)" = 2 ] && [ "$(store_field chunks)" = 10 ]' \
  "nothing of it is kept or referenced on B"
expect '[ "$(metric "$B" "gpuckpt_chunks_received_total{result=\"refused\"}")" = 1 ]' "B counts the refused chunk"
expect '[ -z "$(find "$B_STORE/sha256" -name ".*")" ]' "no temporary chunk file left on B"
# PUT /v1/chunks/ by hand: authenticated, bounded, named by a digest.
chunk="$tmp/wire-chunk"
flip "$chunk" # corrupt as A's store's copy is
expect '[ "$(curl_b -X PUT --data-binary @"$chunk" "$B/v1/chunks/$new_digest")" = 401 ]' "a chunk upload without the token is refused"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary @"$chunk" "$B/v1/chunks/not-a-digest")" = 400 ] && grep -q "is not a SHA-256 digest" "$tmp/body"' "a chunk name that is no digest is refused"
expect '[ "$(curl_b -X PUT "${auth[@]}" -H "Content-Length: $((65 * 1024 * 1024))" --data-binary "x" "$B/v1/chunks/$new_digest")" = 413 ]' "a chunk body over the largest chunk file is refused before it is read"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary @"$chunk" "$B/v1/chunks/$new_digest")" = 422 ] && grep -q "SHA-256 mismatch" "$tmp/body" && [ ! -e "$B_STORE/sha256/${new_digest:0:2}/$new_digest" ]' \
  "the corrupt chunk uploaded by hand is refused, naming why ($(head -c 300 "$tmp/body"))"
flip "$chunk"; flip "$new_chunk" # both repaired
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary @"$chunk" "$B/v1/chunks/$new_digest")" = 201 ] && [ -e "$B_STORE/sha256/${new_digest:0:2}/$new_digest" ]' \
  "the chunk, repaired, is taken ($(head -c 300 "$tmp/body"))"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary @"$chunk" "$B/v1/chunks/$new_digest")" = 200 ] && grep -q "\"present\": true" "$tmp/body"' "again: present"
rm -f "$B_STORE/sha256/${new_digest:0:2}/$new_digest"
# An exported archive (carrying its chunks) uploaded by hand is still admitted by import; one whose carried chunk was
# corrupted on the way, inside an archive whose own digest matches, is refused with nothing kept.
GPUCKPT_GPU_STORE="$A_STORE" "$CLI" export "$A_DIR/ck-store-3.tar" -o "$tmp/carried.tar" > /dev/null
cp "$tmp/carried.tar" "$tmp/carried-good.tar"
python3 - "$tmp/carried.tar" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    member = [m for m in t.getmembers() if m.name.startswith("gpuckpt-chunks/") and m.isfile()][-1]
with open(sys.argv[1], "r+b") as f:
    f.seek(member.offset_data + 32 + 1000); b = f.read(1); f.seek(member.offset_data + 32 + 1000); f.write(bytes([b[0] ^ 0x5a]))
PY
csize=$(stat -c %s "$tmp/carried.tar") csum=$(sha256sum "$tmp/carried.tar" | cut -d' ' -f1)
n="$B/v1/incoming/ck-store-3.tar"
expect '[ "$(curl_b -X PUT "${auth[@]}" --data-binary @"$tmp/carried.tar" "$n?offset=0&total=$csize")" = 200 ]' "the corrupted archive arrives"
expect '[ "$(curl_b -X POST "${auth[@]}" -H "Content-Type: application/json" -d "{\"size\":$csize,\"sha256\":\"$csum\",\"store_backed\":true}" "$n/commit")" = 422 ] && grep -q "is refused" "$tmp/body"' \
  "its commit is refused naming the chunk ($(head -c 400 "$tmp/body"))"
expect '[ ! -e "$B_DIR/ck-store-3.tar" ] && [ ! -e "$B_DIR/.ck-store-3.tar.incoming" ] && [ "$(store_field references)" = 2 ]' "nothing of it is kept or referenced on B"
csize=$(stat -c %s "$tmp/carried-good.tar") csum=$(sha256sum "$tmp/carried-good.tar" | cut -d' ' -f1)
curl_b -X PUT "${auth[@]}" --data-binary @"$tmp/carried-good.tar" "$n?offset=0&total=$csize" > /dev/null
expect '[ "$(curl_b -X POST "${auth[@]}" -H "Content-Type: application/json" -d "{\"size\":$csize,\"sha256\":\"$csum\",\"store_backed\":true}" "$n/commit")" = 200 ] && [ -e "$B_STORE/sha256/${new_digest:0:2}/$new_digest" ] && [ "$(store_field references)" = 3 ] && ! tar -tf "$B_DIR/ck-store-3.tar" | grep -q gpuckpt-chunks' \
  "the same export intact is imported: its chunk in B's store, referenced, the archive store-backed ($(head -c 400 "$tmp/body"))"
# A chunk upload whose connection drops midway (the proxy cuts the stream inside the 4th chunk) is tried again.
"$FIXTURE" "$A_STORE" "$A_DIR/ck-store-4.tar" 20 21 22 23 24 25 > /dev/null
proxy drop $((3 * 65568 + 30000))
transfer "$PROXY_URL" "$A_DIR/ck-store-4.tar" && ok || bad "a store-backed transfer through a dropped stream succeeds: $(cat "$tmp/err")"
expect '[ "$(field "j[\"result\"][\"chunks\"][\"sent\"]")" = 6 ] && [ "$(field "j[\"result\"][\"chunks\"][\"retries\"]")" -ge 1 ] && grep -q "upload of chunk [0-9a-f]\{64\} to $PROXY_URL: .*; again" "$tmp/a/agent.log"' \
  "the dropped chunk upload was tried again ($(head -c 900 "$tmp/out"))"
expect '[ "$(store_field references)" = 4 ] && [ "$(store_field missing_chunks)" = 0 ] && [ -z "$(find "$B_STORE/sha256" -name ".*")" ]' \
  "B holds every chunk, referenced, no temporary file left"
# The missing-chunks endpoint is authenticated and checks what it is asked.
expect '[ "$(curl_b -X POST -H "Content-Type: application/json" -d "{\"digests\":[]}" "$B/v1/chunks/missing")" = 401 ]' "asking without the token is refused"
expect '[ "$(curl_b -X POST "${auth[@]}" -H "Content-Type: application/json" -d "{\"digests\":[\"../../etc/passwd\"]}" "$B/v1/chunks/missing")" = 400 ]' "a digest that is no digest is refused"

# ---- the sender only pushes inside transfer.peer_networks ------------------------------------------------------
rc=0; transfer "http://8.8.8.8:7469" || rc=$?
expect '[ "$rc" = 2 ] && grep -q "outside transfer.peer_networks" "$tmp/err"' "a push outside peer_networks is refused (rc $rc): $(cat "$tmp/err")"
rc=0; transfer "http://attacker.example:7469" || rc=$?
expect '[ "$rc" = 2 ] && grep -q "must be http://A.B.C.D:PORT" "$tmp/err"' "a host name is refused (rc $rc)"
rc=0; transfer "$B" "$tmp/a/token" || rc=$?
expect '[ "$rc" = 2 ]' "a file outside the checkpoint directory is refused (rc $rc): $(cat "$tmp/err")"

echo "archive transfer: $pass passed, $fail failed"
((fail == 0))
