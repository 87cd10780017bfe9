#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2013 # ok/bad always return 0; flags are single words
# The CLI's conventions (issue 23): every verb's --help names each flag of its usage line with a default or meaning,
# an example and the exit codes; --version; under --json a failure prints a JSON error object on stdout; bad inputs
# to inspect (a directory that is no image directory, a file that is no archive) fail with exit 2 naming the input;
# an unreachable agent's reason is given in full.
set -euo pipefail
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$(dirname "$0")/../../build}" 2>/dev/null && pwd) || { echo "SKIP: no build directory"; exit 77; }
CLI="$BUILD/cli/gpuckpt"
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

verbs=$("$CLI" --help | awk '/^verbs:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}')
[ "$(wc -w <<< "$verbs")" -ge 12 ] && ok || bad "gpuckpt --help lists the verbs ($verbs)"
"$CLI" --help | grep -q "GPUCKPT_AGENT" && "$CLI" --help | grep -q "GPUCKPT_TOKEN_FILE" && "$CLI" --help | grep -q "exit codes:" &&
  ok || bad "gpuckpt --help names the environment variables and exit codes"
for verb in $verbs; do
  rc=0; "$CLI" "$verb" --help > "$tmp/help" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { bad "$verb --help exits 0 (got $rc)"; continue; }
  for part in "usage: gpuckpt" "flags:" "example:" "exit codes: 0 ok, 1 failure, 2 bad input or refused request, 3 no GPU match"; do
    grep -qF "$part" "$tmp/help" || bad "$verb --help has '$part'"
  done
  # every flag of the usage line is described on a line of its own
  usage=$(sed -n '/^usage:/,/^$/p' "$tmp/help")
  for flag in $(grep -o -- '--[a-z][a-z-]*' <<< "$usage" | sort -u); do
    grep -Eq -- "^  $flag([ ,]|$)" "$tmp/help" || bad "$verb --help describes $flag"
  done
  ok
done

"$CLI" --version | grep -Eq '^gpuckpt [0-9]' && ok || bad "gpuckpt --version prints the version"
"$CLI" version --help | grep -q "usage: gpuckpt version" && ok || bad "gpuckpt version --help"

# inspect: a directory that holds no image, a file that is no archive
rc=0; "$CLI" inspect "$tmp" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -qF "$tmp is a directory, neither a CRIU image directory" "$tmp/err" && ok ||
  bad "inspect of a plain directory exits 2 naming it (rc $rc: $(cat "$tmp/err"))"
mkdir "$tmp/criu" && : > "$tmp/criu/inventory.img"
rc=0; "$CLI" inspect "$tmp/criu" > "$tmp/out" 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -q "CRIU image directory with no GPU memory image" "$tmp/out" && ok || bad "a CRIU image dir without GPU images is fine (rc $rc)"
echo "not an archive" > "$tmp/notes.txt"
rc=0; "$CLI" inspect "$tmp/notes.txt" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -qF "$tmp/notes.txt" "$tmp/err" && ! grep -q "multibyte" "$tmp/err" && ok ||
  bad "inspect of a non-archive exits 2 naming it, no errno leftovers (rc $rc: $(cat "$tmp/err"))"

# --json: a JSON error object on stdout, the text still on stderr
rc=0; "$CLI" inspect "$tmp/notes.txt" --json > "$tmp/out" 2> "$tmp/err" || rc=$?
python3 - "$tmp/out" "$tmp/notes.txt" "$rc" <<'PY' && ok || bad "inspect --json prints a JSON error object ($(cat "$tmp/out"))"
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["verb"] == "inspect" and e["exit_code"] == int(sys.argv[3]) == 2, e
assert sys.argv[2] in e["message"] and not e["message"].startswith("gpuckpt inspect:"), e
PY
grep -qF "cannot open checkpoint archive $tmp/notes.txt: Unrecognized archive format" "$tmp/err" && ok || bad "the text still reaches stderr under --json"
rc=0; "$CLI" match --json > "$tmp/out" 2>/dev/null || rc=$?
[ "$rc" = 2 ] && python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert "--source" in e["message"], e' "$tmp/out" && ok ||
  bad "a usage error under --json is a JSON error naming what is missing ($(cat "$tmp/out"))"
"$CLI" gpus --json --host-root "$(dirname "$0")/../fixtures/nvidia-h200" > "$tmp/out" &&
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "error" not in d and d["node"]["gpus"]' "$tmp/out" && ok ||
  bad "a successful --json run prints its own JSON only"

# an unreachable agent: the reason in full
printf 'token-0123456789abcdef\n' > "$tmp/token"
rc=0; "$CLI" runtime --agent http://127.0.0.1:1 --token-file "$tmp/token" 2> "$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "cannot reach the agent at http://127.0.0.1:1: could not connect (nothing listens there" "$tmp/err" && ok ||
  bad "an unreachable agent's reason is given in full (rc $rc: $(cat "$tmp/err"))"

# no agent named: the local runtime is used, and said so even with --quiet (the container does not exist: the
# verb fails after saying it)
rc=0; env -u GPUCKPT_AGENT "$CLI" checkpoint gpuckpt-no-such-container-$$ --quiet --state-dir "$tmp/state" \
  --checkpoint-dir "$tmp/state/c" > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" != 0 ] && grep -q "via the local runtime (podman on this host): no --agent given and GPUCKPT_AGENT is not set" "$tmp/err" &&
  ok || bad "a missing --agent is said, not silent (rc $rc: $(cat "$tmp/err"))"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
