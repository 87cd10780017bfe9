#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2013 # ok/bad always return 0; flags are single words
# The CLI's conventions: every verb's --help names each flag of its usage line with a default or meaning,
# and every flag the verb accepts (probed: each flag any verb's source names, given to each verb before --help);
# an example and the exit codes, the same as docs/cli.md's and each one observed; -o json|yaml|wide; deprecated
# spellings warn; docs/cli.md holds every verb's help as it is; --version; under --json a failure prints a JSON error object on stdout; bad inputs
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

# Every flag a verb accepts is in its help. A probe "VERB FLAG --help --help" exits 0 with the help when VERB takes
# FLAG (alone or with a value: the first --help is then its value) and does nothing else; 2 when VERB refuses FLAG.
# Probed: each flag named in the verb's source file and in the shared parsers it uses, unless its help describes it.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
flags_in() { cat "$@" | grep -oE '"(--[a-z][a-z-]*[a-z]|-[a-zA-Z])[="]' | tr -d '"=' | sort -u | grep -vxE -- '--help|-h|-o|--output' || true; }
probed=0
for verb in $verbs; do
  "$CLI" "$verb" --help > "$tmp/help" 2>&1
  file="$SRC/cli/verb_${verb//-/_}.cpp"
  [ -f "$file" ] || file="$SRC/cli/verb_${verb//-/_}s.cpp"   # job: verb_jobs.cpp
  sources=("$SRC"/cli/*.cpp "$SRC"/cli/*.h)
  if [ -f "$file" ]; then
    sources=("$file")
    grep -q "NodeTarget" "$file" && sources+=("$SRC/cli/node_client.cpp")
    grep -q "InventoryArgs" "$file" && sources+=("$SRC/cli/cli_args.h")
  fi
  for flag in $(flags_in "${sources[@]}"); do
    cut -c1-24 "$tmp/help" | grep -E -- "^  -" | grep -Eq -- "^ .*[ ]$flag([ ,]|$)" && continue   # described
    grep -qF -- "$flag: the old spelling, deprecated" "$tmp/help" && continue
    probed=$((probed + 1))
    rc=0; "$CLI" "$verb" "$flag" --help --help > "$tmp/probe" 2>&1 < /dev/null || rc=$?
    [ "$rc" = 0 ] && grep -q "^usage: gpuckpt" "$tmp/probe" && bad "$verb accepts $flag but its --help does not describe it"
  done
  # and refuses what it does not know, with exit 2
  rc=0; "$CLI" "$verb" --no-such-flag-$$ < /dev/null > /dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || bad "$verb --no-such-flag exits 2 (got $rc)"
done
[ "$probed" -ge 5 ] && ok || bad "the probe tried the flags the help leaves out ($probed)"

# The exit codes: the same in the help and docs/cli.md, and each one seen.
codes=$("$CLI" --help | sed -n 's/^exit codes: //p')
grep -qF -- "$codes" "$SRC/docs/cli.md" && ok || bad "docs/cli.md states the exit codes as the help does ($codes)"
for code in 0 1 2 3; do
  grep -Eq -- "^\| $code \|" "$SRC/docs/cli.md" || bad "docs/cli.md's exit code table has $code"
done
H200="$(dirname "$0")/../fixtures/nvidia-h200"
"$CLI" gpus --json --host-root "$H200" > "$tmp/h200.json" && ok || bad "exit 0: gpus"
rc=0; "$CLI" match --source "$tmp/h200.json" --host-root "$(dirname "$0")/../fixtures/nvidia-h100-8gpu" > /dev/null 2>&1 || rc=$?
[ "$rc" = 3 ] && ok || bad "exit 3: an H200 record on an H100 node (got $rc)"

# docs/cli.md holds each verb's help as the binary prints it (scripts/cli_doc.sh writes that part).
"$SRC/scripts/cli_doc.sh" --check "$CLI" > "$tmp/doc-check" 2>&1 && ok ||
  bad "docs/cli.md is out of date with the CLI's help: run scripts/cli_doc.sh ($(head -5 "$tmp/doc-check"))"

# -o json|yaml: the verb's JSON, or that document as YAML; failures as an error object in that form; -o wide: more
# columns; a format a verb has no use for is refused.
"$CLI" gpus -o json --host-root "$H200" | cmp -s - "$tmp/h200.json" && ok || bad "gpus -o json is gpus --json"
"$CLI" gpus -o yaml --host-root "$H200" > "$tmp/h200.yaml" &&
  python3 -c 'import json,sys,yaml; assert yaml.safe_load(open(sys.argv[1])) == json.load(open(sys.argv[2]))' "$tmp/h200.yaml" "$tmp/h200.json" &&
  ok || bad "gpus -o yaml is the same document as YAML"
rc=0; "$CLI" inspect "$tmp/no-such.tar" -o yaml > "$tmp/out" 2>/dev/null || rc=$?
[ "$rc" = 2 ] && python3 -c 'import sys,yaml; e=yaml.safe_load(open(sys.argv[1]))["error"]; assert e["exit_code"] == 2 and e["verb"] == "inspect", e' "$tmp/out" &&
  ok || bad "a failure under -o yaml is a YAML error object (rc $rc: $(cat "$tmp/out"))"
rc=0; "$CLI" inspect "$tmp/no-such.tar" --output=json > "$tmp/out" 2>/dev/null || rc=$?
[ "$rc" = 2 ] && python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["error"]["verb"] == "inspect"' "$tmp/out" &&
  ok || bad "a failure under --output=json is a JSON error object (rc $rc)"
"$CLI" gpus -o wide --host-root "$H200" | head -1 | grep -q "DRIVER" && "$CLI" gpus -o wide --host-root "$H200" | grep -q "580.159.04" &&
  ! "$CLI" gpus --host-root "$H200" | grep -q "580.159.04" && ok || bad "gpus -o wide adds the driver column"
rc=0; "$CLI" version -o json > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q "version has none" "$tmp/err" && ok || bad "-o json on a verb without structured output exits 2 (rc $rc)"
rc=0; "$CLI" inspect x -o wide > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q "inspect has none" "$tmp/err" && ok || bad "-o wide on a verb without a table exits 2 (rc $rc)"
rc=0; "$CLI" gpus -o toml > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q "got 'toml'" "$tmp/err" && ok || bad "-o toml exits 2 naming it (rc $rc)"

# Usage errors under -o json|yaml (or --json) come out in that form too: every verb's unknown flag, main's own refusals
# (a verb without structured output, an unknown verb, -o before the verb) and a flag left without its value.
json_error() { # json_error FILE VERB [TEXT]: FILE is {"error": {"verb": VERB, "exit_code": 2, "message" with TEXT}}
  python3 - "$@" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["verb"] == sys.argv[2] and e["exit_code"] == 2, e
assert len(sys.argv) < 4 or sys.argv[3] in e["message"], e
PY
}
yaml_error() { # yaml_error FILE VERB TEXT: the same as YAML
  python3 -c 'import sys,yaml; e=yaml.safe_load(open(sys.argv[1]))["error"]; assert e["verb"] == sys.argv[2] and e["exit_code"] == 2 and sys.argv[3] in e["message"], e' "$@"
}
for verb in $verbs; do
  # export and import write an archive: their -o names it (-o OUT in their usage), --json is their JSON
  json_flag=(-o json)
  "$CLI" "$verb" --help 2>/dev/null | head -1 | grep -q -- '-o OUT' && json_flag=(--json)
  rc=0; "$CLI" "$verb" --no-such-flag-$$ "${json_flag[@]}" < /dev/null > "$tmp/out" 2> /dev/null || rc=$?
  [ "$rc" = 2 ] && json_error "$tmp/out" "$verb" 2> /dev/null && ok ||
    bad "$verb: a usage error under ${json_flag[*]} is a JSON error object (rc $rc: $(head -c 300 "$tmp/out"))"
done
rc=0; "$CLI" version -o json > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && json_error "$tmp/out" version "version has none" && ok || bad "version -o json: a JSON error object (rc $rc: $(cat "$tmp/out"))"
rc=0; "$CLI" target-pod -o yaml < /dev/null > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && yaml_error "$tmp/out" target-pod "target-pod has none" && ok || bad "target-pod -o yaml: a YAML error object (rc $rc: $(cat "$tmp/out"))"
rc=0; "$CLI" inspect x -o wide --json > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && json_error "$tmp/out" inspect "-o wide is for" && ok || bad "inspect -o wide --json: a JSON error object (rc $rc: $(cat "$tmp/out"))"
rc=0; "$CLI" gpuckpt-no-such-verb -o json > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && json_error "$tmp/out" "" "unknown verb 'gpuckpt-no-such-verb'" && grep -q "unknown verb" "$tmp/err" && ok ||
  bad "an unknown verb under -o json: a JSON error object, the text on stderr (rc $rc: $(cat "$tmp/out"))"
rc=0; "$CLI" -o yaml gpus > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && yaml_error "$tmp/out" "" "-o goes after the verb" && ok || bad "-o before the verb: a YAML error object saying where -o goes (rc $rc: $(cat "$tmp/out"))"
rc=0; "$CLI" match --source -o json > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && json_error "$tmp/out" match "--source needs a value" && ok ||
  bad "match --source -o json: the missing value is named, --json is not taken for it (rc $rc: $(cat "$tmp/out"))"
mkdir "$tmp/empty-store"
rc=0; "$CLI" store refs --store "$tmp/empty-store" -o json > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["error"]["message"]; assert m.startswith("the chunk store "), m' "$tmp/out" &&
  ok || bad "store refs' error object carries the message without its 'gpuckpt store refs:' prefix ($(cat "$tmp/out"))"
rc=0; "$CLI" gpus -o toml > "$tmp/out" 2> /dev/null || rc=$?
[ "$rc" = 2 ] && [ ! -s "$tmp/out" ] && ok || bad "-o toml: no form to print the error in, text on stderr only (rc $rc: $(cat "$tmp/out"))"

# One name per concept: the old spellings still work and warn (checkpoint --image -> --tag; match --assigned ->
# --target-gpus is in cli_inventory_test).
rc=0; env -u GPUCKPT_AGENT "$CLI" checkpoint gpuckpt-no-such-container-$$ --image t:1 --quiet --state-dir "$tmp/state" \
  --checkpoint-dir "$tmp/state/c" > /dev/null 2> "$tmp/err" || rc=$?
grep -q -- "--image is deprecated, use --tag" "$tmp/err" && ok || bad "checkpoint --image warns (rc $rc: $(cat "$tmp/err"))"

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
