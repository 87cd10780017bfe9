#!/usr/bin/env bash
# shellcheck disable=SC2016 # checks are eval'ed strings
# Why the installer refuses `network-lock` in the runtimes' CRIU config on CRIU < 4.2, shown with the real parts:
# runc checkpoints a running busybox container whose `org.criu.config` annotation names a config file, so runc runs
# CRIU in swrk mode and CRIU reads that file over RPC (as it reads /etc/criu/runc.conf on a node).
#   - trixie's CRIU 4.1.1 with a `network-lock skip` line there: the checkpoint fails (CRIU crashes reading it), and
#     the same checkpoint without the line succeeds (where this CRIU can dump here), so the line is the cause;
#   - sid's CRIU 4.2.x with the same line: the checkpoint succeeds.
# Needs root, runc, busybox-static and the CRIU bundles scripts/setup.sh installs. Exit 0 pass, 77 skipped, else fail.
set -uo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (runc, CRIU)"
command -v runc >/dev/null || skip "no runc (scripts/setup.sh installs it)"
[ -x /bin/busybox ] || skip "no /bin/busybox (busybox-static; scripts/setup.sh installs it)"
OLD=/usr/local/sbin/criu-trixie NEW=/usr/local/sbin/criu-sid
if [ ! -x "$OLD" ] || [ ! -x "$NEW" ]; then echo "FAIL: no CRIU bundles at $OLD and $NEW: scripts/setup.sh installs them"; exit 1; fi
# shellcheck disable=SC1091 # the probe library of the repository
. "$SRC/scripts/lib/criu-probe.sh"
criu_config_network_lock_ok "$OLD" && skip "$OLD ($("$OLD" --version | head -1)) is not a CRIU with the crash"
criu_config_network_lock_ok "$NEW" || skip "$NEW: $CRIU_PROBE_REASON"
criu_dump_works "$NEW" || skip "$NEW cannot dump here: $CRIU_PROBE_REASON"

WORK=$(mktemp -d /tmp/gpuckpt-criu-config-crash.XXXXXX)
ID=gpuckpt-criu-conf-$$
cleanup() { runc delete -f "$ID" >/dev/null 2>&1; rm -rf "$WORK"; }
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

# A busybox bundle: host network (nothing for CRIU to lock), a config file named by org.criu.config.
mkdir -p "$WORK/bundle/rootfs/bin" "$WORK/bundle/rootfs/proc" "$WORK/bundle/rootfs/dev" "$WORK/bundle/rootfs/tmp"
cp /bin/busybox "$WORK/bundle/rootfs/bin/busybox"
ln -s busybox "$WORK/bundle/rootfs/bin/sh"; ln -s busybox "$WORK/bundle/rootfs/bin/sleep"
(cd "$WORK/bundle" && runc spec) || { echo "FAIL: runc spec"; exit 1; }
CONF=$WORK/criu.conf
python3 - "$WORK/bundle/config.json" "$CONF" <<'PY' || { echo "FAIL: editing config.json"; exit 1; }
import json, sys
path, conf = sys.argv[1], sys.argv[2]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/sleep", "600"]
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
c.setdefault("annotations", {})["org.criu.config"] = conf
c["root"]["readonly"] = False
json.dump(c, open(path, "w"))
PY

checkpoint() { # CRIU CONFIG-TEXT: a --leave-running checkpoint of a new container; runc's output in $WORK/out
  printf '%s' "$2" > "$CONF"
  runc delete -f "$ID" >/dev/null 2>&1
  rm -rf "$WORK/img" "$WORK/wp"; mkdir -p "$WORK/img" "$WORK/wp"
  (cd "$WORK/bundle" && runc run -d "$ID" </dev/null >/dev/null 2>&1) || { echo "runc run failed" > "$WORK/out"; return 1; }
  timeout 60 runc --criu "$1" checkpoint --leave-running --image-path "$WORK/img" --work-path "$WORK/wp" "$ID" \
    > "$WORK/out" 2>&1
}

checkpoint "$OLD" $'timeout 60\nnetwork-lock skip\n'; rc=$?
expect '[ $rc != 0 ] && [ $rc != 124 ] && [ ! -s "$WORK/img/inventory.img" ]' \
  "CRIU 4.1.1 given network-lock in its RPC config file fails the checkpoint at once (rc $rc): $(tail -3 "$WORK/out")"
echo "CRIU 4.1.1 with network-lock in org.criu.config: rc $rc: $(grep -v '^$' "$WORK/out" | tail -2 | tr '\n' ' ')"
if criu_dump_works "$OLD"; then
  checkpoint "$OLD" $'timeout 60\n'; rc=$?
  expect '[ $rc = 0 ] && [ -s "$WORK/img/inventory.img" ]' \
    "CRIU 4.1.1 without the line checkpoints the same container (rc $rc): $(tail -3 "$WORK/out")"
else
  echo "note: the control dump with CRIU 4.1.1 without the line is not run: $CRIU_PROBE_REASON"
fi
checkpoint "$NEW" $'timeout 60\nnetwork-lock skip\n'; rc=$?
expect '[ $rc = 0 ] && [ -s "$WORK/img/inventory.img" ]' \
  "CRIU $("$NEW" --version | sed -n 's/^Version: *//p') takes network-lock in its RPC config file (rc $rc): $(tail -3 "$WORK/out")"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
