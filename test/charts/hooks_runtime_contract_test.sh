#!/usr/bin/env bash
# shellcheck disable=SC2016 # checks are eval'ed strings that use these variables
# Contract (CI has no CRI-O: test/e2e/crio_flow.sh runs the real one): every hooks.d entry the chart can install,
# judged by CRI-O's and podman's rule (runtime/oci_hooks_rules.h: containers' hooks library as CRI-O v1.36.3 vendors
# it) through `gpuckpt doctor` on fixture host roots after the chart's installer (host-files.sh) ran there:
#   - the entries the chart renders (helm template, default values and a custom state/install dir) plus the
#     repository's own oci-hook/gpuckpt-hook*.json: CRI-O rejects exactly the ones whose stages are not OCI stages
#     (precreate), podman none;
#   - on a CRI-O node the installer leaves only entries CRI-O accepts (doctor passes), and removes an older
#     install's precreate entry; on a podman-only node precreate stays and doctor passes;
#   - the precreate entry put back on the CRI-O node makes doctor fail with the fix.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
GPUCKPT=$BUILD/cli/gpuckpt
command -v helm >/dev/null 2>&1 || { echo "SKIP: helm not found (scripts/setup.sh installs it)"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml missing"; exit 77; }
[ -x "$GPUCKPT" ] || { echo "FAIL: $GPUCKPT not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

render() {  # render DIR [helm --set ...]: the hooks.d entries of the chart's ConfigMap into DIR
  local dir=$1; shift
  mkdir -p "$dir"
  helm template gpuckpt "$SRC/charts/gpuckpt" "$@" | python3 -c '
import sys, yaml
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc.get("kind") == "ConfigMap":
        for name, text in (doc.get("data") or {}).items():
            if name.startswith("gpuckpt-hook") and name.endswith(".json"):
                open(sys.argv[1] + "/" + name, "w").write(text)
' "$dir"
}
# hooks-d-entries of `gpuckpt doctor` on host root $1: "status detail"
verdict() {
  { "$GPUCKPT" doctor --host-root "$1" --no-criu --json 2>/dev/null || true; } | python3 -c '
import json, sys
c = {x["name"]: x for x in json.load(sys.stdin)["checks"]}["hooks-d-entries"]
print(c["status"], c["detail"], c.get("fix", ""))'
}
stages_of() { python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["stages"]))' "$1"; }

render "$tmp/default"
render "$tmp/custom" --set host.stateDir=/var/lib/other --set host.installDir=/usr/local/gpuckpt --set installer.hookTimeoutSeconds=30
mkdir -p "$tmp/repo" && cp "$SRC"/oci-hook/gpuckpt-hook*.json "$tmp/repo/"
expect '[ "$(ls "$tmp/default" | wc -l)" = 3 ] && [ "$(ls "$tmp/repo" | wc -l)" = 3 ]' "the chart renders 3 entries; the repository has 3"

# Each entry alone in CRI-O's hooks dir, then podman's: CRI-O rejects exactly the non-OCI stages.
for entry in "$tmp"/default/*.json "$tmp"/custom/*.json "$tmp"/repo/*.json; do
  for runtime in crio podman; do
    root=$tmp/one-$runtime
    rm -rf "$root"; mkdir -p "$root/usr/share/containers/oci/hooks.d"
    if [ $runtime = crio ]; then mkdir -p "$root/etc/crio"; else mkdir -p "$root/usr/bin" && : > "$root/usr/bin/podman"; fi
    cp "$entry" "$root/usr/share/containers/oci/hooks.d/"
    path=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hook"]["path"])' "$entry")
    mkdir -p "$root$(dirname "$path")" && : > "$root$path"
    v=$(verdict "$root")
    rejected=no
    for s in $(stages_of "$entry"); do
      case "$s" in prestart|createRuntime|createContainer|startContainer|poststart|poststop) ;; *) [ $runtime = crio ] && rejected=yes ;; esac
    done
    name=${entry#"$tmp"/}
    if [ $rejected = yes ]; then
      expect '[ "${v%% *}" = fail ] && [[ "$v" == *"CRI-O: unknown stage"* ]]' "$name ($(stages_of "$entry")): CRI-O rejects it (doctor: $v)"
    else
      expect '[ "${v%% *}" = pass ]' "$name ($(stages_of "$entry")) on $runtime: accepted (doctor: $v)"
    fi
  done
done
expect 'grep -q "\"precreate\"" "$tmp/default/gpuckpt-hook-precreate.json"' "the chart still renders the precreate entry (for podman nodes)"

# The installer on a CRI-O node, with an older install's precreate entry there; then on a podman-only node.
run_installer() {  # run_installer HOST_ROOT
  mkdir -p "$tmp/image" && printf '#!/bin/sh\n' > "$tmp/image/hook" && : > "$tmp/image/plugin.so"
  env -i PATH="$PATH" GPUCKPT_HOST_MOUNT="$1" GPUCKPT_HOOKS_DIR=/usr/share/containers/oci/hooks.d \
    GPUCKPT_CRIU_PLUGIN_DIR=/usr/lib/criu GPUCKPT_INSTALL_DIR=/opt/gpuckpt GPUCKPT_HOOK_JSON_DIR="$tmp/default" \
    GPUCKPT_SRC_HOOK="$tmp/image/hook" GPUCKPT_SRC_PLUGIN="$tmp/image/plugin.so" GPUCKPT_OWNER=contract \
    GPUCKPT_VERIFY=false sh "$SRC/charts/gpuckpt/files/host-files.sh" install 2>/dev/null
}
crio=$tmp/crio-node
mkdir -p "$crio/etc/crio/crio.conf.d" "$crio/usr/share/containers/oci/hooks.d" "$crio/usr/bin"
: > "$crio/usr/bin/podman"   # podman beside CRI-O: the directory they share follows CRI-O's rule
# what an older install left: its hook binary and its precreate entry (a missing binary only makes a runtime
# skip the entry; the stage is what stops CRI-O)
mkdir -p "$crio/opt/gpuckpt/bin" && printf '#!/bin/sh\n' > "$crio/opt/gpuckpt/bin/gpuckpt-oci-hook" &&
  chmod 755 "$crio/opt/gpuckpt/bin/gpuckpt-oci-hook"
cp "$tmp/default/gpuckpt-hook-precreate.json" "$crio/usr/share/containers/oci/hooks.d/"
v=$(verdict "$crio")
expect '[ "${v%% *}" = fail ] && [[ "$v" == *"rm /usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json"* ]]' \
  "before the fix: doctor fails on the older install's precreate entry, with the fix ($v)"
run_installer "$crio"
v=$(verdict "$crio")
expect '[ "${v%% *}" = pass ] && [ ! -e "$crio/usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json" ]' \
  "CRI-O node after the installer: no entry CRI-O rejects, the old one removed ($v)"
expect '[ -f "$crio/usr/share/containers/oci/hooks.d/gpuckpt-hook.json" ] && [ -f "$crio/usr/share/containers/oci/hooks.d/gpuckpt-hook-poststop.json" ]' \
  "CRI-O node: createRuntime and poststop entries installed"
cp "$tmp/default/gpuckpt-hook-precreate.json" "$crio/usr/share/containers/oci/hooks.d/"
v=$(verdict "$crio")
expect '[ "${v%% *}" = fail ]' "the precreate entry put back: doctor fails again ($v)"

podman=$tmp/podman-node
mkdir -p "$podman/usr/bin" "$podman/usr/share/containers/oci/hooks.d" && : > "$podman/usr/bin/podman"
run_installer "$podman"
v=$(verdict "$podman")
expect '[ "${v%% *}" = pass ] && [ -f "$podman/usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json" ]' \
  "podman-only node: precreate installed, accepted ($v)"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
