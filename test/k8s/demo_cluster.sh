#!/usr/bin/env bash
# e2e (labels e2e, cluster): README command 3, scripts/demo-cluster.sh, on the built tree (its setup and build
# skipped: ctest runs after them). Passes when the demo ends with the process continuing on the other node, moved
# there by kubectl gpuckpt migrate: the counter restored on node-b is at least its value on node-a just before the
# move and goes on counting, and the host is left as it was (the demo checks both and says so).
#   bash test/k8s/demo_cluster.sh [containerd|crio]   the nodes' runtime (GPUCKPT_DEMO_RUNTIME; default containerd)
# Exit 0 pass, 77 skipped (no root, or setup.sh / setup-k8s.sh products absent), else fail.
set -euo pipefail
export GPUCKPT_DEMO_RUNTIME=${1:-containerd}
BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/k8s-sandbox.sh"
. "$SRC/scripts/lib/k8s-gpuckpt-chart.sh"
skip() { echo "SKIP: $*"; exit 77; }
# what the demo would stop at as missing is a skip here
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
k8s_gpuckpt_ready "${GPUCKPT_DEMO_IMAGE:-localhost/gpuckpt-busybox}" || skip "$K8S_MISSING"
if [ "$GPUCKPT_DEMO_RUNTIME" = crio ]; then
  for p in crio pinns; do [ -x "$K8S_BIN/$p" ] || skip "$K8S_BIN/$p missing (scripts/setup-k8s.sh builds it)"; done
  command -v conmon >/dev/null || skip "conmon not installed (scripts/setup.sh)"
fi

LOG=$(mktemp /tmp/gpuckpt-demo-cluster.XXXXXX)
trap 'rm -f "$LOG"' EXIT
rc=0
GPUCKPT_DEMO_SKIP_SETUP=1 BUILD_DIR=$BUILD bash "$SRC/scripts/demo-cluster.sh" 2>&1 | tee "$LOG" || rc=$?
[ "$rc" = 0 ] || { echo "FAIL: scripts/demo-cluster.sh exited $rc"; exit 1; }
last=$(tail -n 1 "$LOG")
[[ "$last" =~ ^demo\ OK\ in\ [0-9.]+\ s:\ the\ process\ continues\ on\ node-b:\ counter\ ([0-9]+)\ on\ node-a\ before\ the\ move,\ ([0-9]+)\ then\ ([0-9]+)\ on\ node-b\ \((.*)\)$ ]] ||
  { echo "FAIL: the demo's last line does not say the process continues on node-b: $last"; exit 1; }
ckpt=${BASH_REMATCH[1]} after=${BASH_REMATCH[2]} later=${BASH_REMATCH[3]} how=${BASH_REMATCH[4]}
# README command 3 shows kubectl gpuckpt migrate: its fallback to single steps passes the demo, not this test
[ "$how" = "kubectl gpuckpt migrate" ] || { echo "FAIL: the demo moved the pod by $how"; exit 1; }
{ [ "$after" -ge "$ckpt" ] && [ "$later" -gt "$after" ]; } ||
  { echo "FAIL: counter $ckpt on node-a before the move, $after then $later on node-b: not a continuation"; exit 1; }
grep -q "as they were" "$LOG" || { echo "FAIL: the demo did not check the host was left as it was"; exit 1; }
# the installer saw CRI-O on a CRI-O node (its socket at /run/crio/crio.sock there) and left out the precreate
# entry CRI-O rejects; a containerd node keeps it (podman restores through it)
for n in node-a node-b; do
  hooks=$(sed -n "s/^   hooks.d the installer wrote on $n: //p" "$LOG")
  case "$GPUCKPT_DEMO_RUNTIME:$hooks" in
    crio:"gpuckpt-hook-poststop.json gpuckpt-hook.json") ;;
    containerd:"gpuckpt-hook-poststop.json gpuckpt-hook-precreate.json gpuckpt-hook.json") ;;
    *) echo "FAIL: on $GPUCKPT_DEMO_RUNTIME, the installer wrote '$hooks' into $n's hooks.d"; exit 1 ;;
  esac
done
echo "1 passed, 0 failed (counter $ckpt -> $after -> $later on node-b, by $how)"
