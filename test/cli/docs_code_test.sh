#!/usr/bin/env bash
# shellcheck disable=SC2015 # ok/bad always return 0
# Docs and help that restate the code are held against it:
# - the kubectl plugin's "What a restore is on a node" lines name the runtime kinds `gpuckpt runtime --help` lists
#   (node/runtime_kinds.h, the table the agent's GET /v1/runtime answers from), each with the same restore unit, as
#   docs/api.md and docs/kubernetes.md say, and the chart's schema offers exactly those kinds;
# - every GPUCKPT_* variable the CLI reads (getenv in cli/, and MatchPolicy::from_env's in gpu/matcher.cpp where a
#   cli/ verb calls it) is in `gpuckpt --help`'s environment lines and in docs/cli.md's Environment table, and
#   every one the kubectl plugin reads is in its --help, and every one any component reads is somewhere in docs/;
# - docs/README.md links every page; every repository path the README, the plugin's README, the chart's NOTES and
#   docs/ name in backticks exists.
set -euo pipefail
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$(dirname "$0")/../../build}" 2>/dev/null && pwd) || { echo "SKIP: no build directory"; exit 77; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CLI="$BUILD/cli/gpuckpt"
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# ---- the CRIU that takes `network-lock` in a runtime's config file: installer, doctor, tests and docs agree -----------
installer_floor=$(sed -n 's/.*\[ "\$major" -eq 4 \] && \[ "\$minor" -ge \([0-9]*\) \].*/4.\1/p' "$SRC/charts/gpuckpt/files/host-files.sh" | head -1)
probe_floor=$(sed -n 's/.*\[ "\$major" = 4 \] && \[ "\$minor" -ge \([0-9]*\) \].*/4.\1/p' "$SRC/scripts/lib/criu-probe.sh" | head -1)
doctor_floor=$(sed -n 's/.*major == 4 && minor >= \([0-9]*\)))) {.*/4.\1/p' "$SRC/runtime/node_report.cpp" | head -1)
[ -n "$installer_floor" ] && [ "$installer_floor" = "$probe_floor" ] && [ "$installer_floor" = "$doctor_floor" ] && ok ||
  bad "the installer ($installer_floor), scripts/lib/criu-probe.sh ($probe_floor) and gpuckpt doctor ($doctor_floor) disagree on the CRIU that takes network-lock in a config file"
grep -qF "**\`network-lock\` in a config file needs CRIU >= $installer_floor.**" "$SRC/docs/cuda.md" && ok ||
  bad "docs/cuda.md (Pods and TCP) does not say that network-lock in a config file needs CRIU >= $installer_floor"

# ---- runtime kinds: "KIND UNIT" lines, sorted, from each side ----------------------------------------------------
agent_kinds=$("$CLI" runtime --help | awk '/^runtime kinds/ {on = 1; next} on && /^  [a-z]+ +(container|pod) / {print $1, $2} on && /^$/ {on = 0}' | sort)
[ "$(wc -l <<< "$agent_kinds")" -ge 4 ] && ok || bad "gpuckpt runtime --help lists the runtime kinds ($agent_kinds)"
plugin_kinds=$(bash "$SRC/kubectl-plugin/kubectl-gpuckpt" --help |
  sed -n 's/^  \(container\|pod\) (\([a-z, ]*\)):.*/\1 \2/p' |
  while read -r unit kinds; do for k in ${kinds//,/ }; do echo "$k $unit"; done; done | sort)
[ -n "$plugin_kinds" ] && ok || bad "kubectl gpuckpt --help has its 'container (KIND, ...)' / 'pod (KIND, ...)' lines"
[ "$plugin_kinds" = "$agent_kinds" ] && ok ||
  bad "kubectl gpuckpt --help and gpuckpt runtime --help disagree on what a restore is per runtime kind: $(diff <(echo "$plugin_kinds") <(echo "$agent_kinds") | grep '^[<>]' | tr '\n' ' ')"
# docs/api.md and docs/kubernetes.md say it in prose: "`container` where/for ... `podman` ... `pod` where/for ... `cri` ..."
for doc in docs/api.md docs/kubernetes.md; do
  said=$(python3 - "$SRC/$doc" "$(cut -d' ' -f1 <<< "$agent_kinds" | tr '\n' ' ')" <<'PY'
import re, sys
text, kinds = " ".join(open(sys.argv[1]).read().split()), sys.argv[2].split()
m = re.search(r"`container` (?:where|for) (.*?)`pod` (?:where|for) (.*?)[.)]", text)
if m:
    for unit, part in (("container", m.group(1)), ("pod", m.group(2))):
        for kind in re.findall(r"`([a-z]+)`", part):
            if kind in kinds:
                print(kind, unit)
PY
)
  [ "$(sort <<< "$said")" = "$agent_kinds" ] && ok ||
    bad "$doc's sentence on what a restore is per runtime kind disagrees with gpuckpt runtime --help: $(sort <<< "$said" | tr '\n' ' ')"
done
# the chart offers exactly the kinds the agent knows (values.schema.json's runtime.kind)
chart_kinds=$(python3 -c 'import json,sys; print("\n".join(sorted(json.load(open(sys.argv[1]))["properties"]["runtime"]["properties"]["kind"]["enum"])))' \
  "$SRC/charts/gpuckpt/values.schema.json")
[ "$chart_kinds" = "$(cut -d' ' -f1 <<< "$agent_kinds" | sort)" ] && ok ||
  bad "the chart's runtime.kind enum ($(echo $chart_kinds)) is the agent's kinds ($(cut -d' ' -f1 <<< "$agent_kinds" | tr '\n' ' '))"
# the plugin decides by asking the agent, never by a runtime name of its own
grep -q 'restores_as "$agent"' "$SRC/kubectl-plugin/kubectl-gpuckpt" && grep -q 'restores_as "$dst_agent"' "$SRC/kubectl-plugin/kubectl-gpuckpt" &&
  ok || bad "kubectl gpuckpt restore and migrate ask the target's agent (restores_as) what a restore is there"

# ---- environment variables ---------------------------------------------------------------------------------------
read_by_cli=$(cat "$SRC"/cli/*.cpp "$SRC"/cli/*.h | grep -oE 'getenv\("GPUCKPT_[A-Z0-9_]+"\)' | grep -oE 'GPUCKPT_[A-Z0-9_]+' || true)
if grep -q 'MatchPolicy::from_env' "$SRC"/cli/*.cpp; then
  read_by_cli+=$'\n'$(grep -oE 'env_flag\("GPUCKPT_[A-Z0-9_]+"' "$SRC/gpu/matcher.cpp" | grep -oE 'GPUCKPT_[A-Z0-9_]+')
fi
read_by_cli=$(sort -u <<< "$read_by_cli" | sed '/^$/d')
[ "$(wc -l <<< "$read_by_cli")" -ge 8 ] && ok || bad "found the variables the CLI reads ($read_by_cli)"
help_env=$("$CLI" --help | sed -n '/^environment:/,/^exit codes:/p')
doc_env=$(sed -n '/^## Environment/,/^## /p' "$SRC/docs/cli.md")
for name in $read_by_cli; do
  grep -qw -- "$name" <<< "$help_env" && ok || bad "gpuckpt --help's environment lines name $name (the CLI reads it)"
  grep -E '^\| ' <<< "$doc_env" | grep -q -- "\`$name\`" && ok || bad "docs/cli.md's Environment table names \`$name\` (the CLI reads it)"
done

# every variable a gpuckpt component reads (the agent, the hook, gpuckpt-nri, the CRIU plugin) is in docs/
read_anywhere=$(cd "$SRC" && grep -rhoE '(getenv|env_flag|env_number|value|\.get)\("GPUCKPT_[A-Z0-9_]+"' \
  cli base gpu state gpumem criu restore archive runtime node agent criu-plugin oci-hook nri-plugin podresources | grep -oE 'GPUCKPT_[A-Z0-9_]+' | sort -u)
[ "$(wc -l <<< "$read_anywhere")" -ge 15 ] && ok || bad "found the variables the components read ($read_anywhere)"
for name in $read_anywhere; do
  grep -qw -- "$name" "$SRC"/docs/*.md && ok || bad "docs/ name $name (a gpuckpt component reads it)"
done

# the kubectl plugin's help names every variable it reads
plugin_help=$(bash "$SRC/kubectl-plugin/kubectl-gpuckpt" --help)
for name in $(grep -oE '\$\{(GPUCKPT_[A-Z_]+|KUBECTL):-' "$SRC/kubectl-plugin/kubectl-gpuckpt" | grep -oE '[A-Z_]+' | sort -u); do
  grep -qw -- "$name" <<< "$plugin_help" && ok || bad "kubectl gpuckpt --help names $name (the plugin reads it)"
done

# docs/README.md's index links every page of docs/
for page in "$SRC"/docs/*.md; do
  name=${page##*/}
  [ "$name" = README.md ] && continue
  grep -qF "]($name)" "$SRC/docs/README.md" && ok || bad "docs/README.md links $name"
done

# ---- paths: every file of the repository a doc names in backticks is there ----------------------------------------
missing=$(cd "$SRC" && python3 - README.md kubectl-plugin/README.md charts/gpuckpt/templates/NOTES.txt docs/*.md <<'PY'
import glob, os, re, sys
tops = ("agent/", "bench/", "charts/", "cli/", "cmake/", "base/", "gpu/", "state/", "gpumem/", "criu/", "restore/", "archive/", "runtime/",
        "criu-plugin/", "docs/", "fuzz/", "kubectl-plugin/",
        "manifests/", "node/", "nri-plugin/", "oci-hook/", "podresources/", "proto/", "rpc/", "scripts/", "test/")
for doc in sys.argv[1:]:
    for number, line in enumerate(open(doc), 1):
        for token in re.findall(r"`([A-Za-z0-9_./<>*-]+)`", line):
            path = token.split(":")[0].rstrip(".")
            if not path.startswith(tops):
                continue
            if any(c in path for c in "<>*"):   # a pattern: something must match it
                found = glob.glob(re.sub(r"<[^>]*>", "*", path))
            else:                                # a file, a directory, or a module named without its extension
                found = [p for p in (path, path + ".h", path + ".cpp") if os.path.exists(p)]
            if not found:
                print(f"{doc}:{number}: {token}")
PY
)
[ -z "$missing" ] && ok || bad "docs name repository paths that do not exist: $(tr '\n' ' ' <<< "$missing")"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
