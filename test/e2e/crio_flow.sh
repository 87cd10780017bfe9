#!/usr/bin/env bash
# e2e: gpuckpt's install and restore path on a real CRI-O (built from source: CRI-O is no Debian package, so CI
# has none and this test skips there; docs/kubernetes.md "CRI-O for real" says how to build it and records runs).
# CRI-O runs privately (own root, sockets, config dir: scripts/lib/crio-sandbox.sh) with runc, conmon and CRIU.
#   1. the chart's installer (charts/gpuckpt/files/host-files.sh, entries rendered by helm) on a host root where
#      CRI-O runs: CRI-O starts on exactly the hooks.d it wrote and runs a container through CRI;
#   2. the precreate entry an older install left there: CRI-O refuses to start (`unknown stage "precreate"`);
#      the installer run again removes it and CRI-O starts;
#   3. with NRI on, nri-dump (test-only NRI plugin) and gpuckpt-nri attached: a GPU-looking container checkpointed
#      through CRI CheckpointContainer into a kubelet-style path, its archive given io.gpuckpt.checkpoint-id as
#      the agent writes it (spec.dump annotations and CRI-O's io.kubernetes.cri-o.Annotations), restored through
#      CreateContainer with the archive as image and another allocation: what NRI received is saved to
#      CRIO_CAPTURE_DIR (default WORK/capture; test/fixtures/crio/ holds the captured one) and its shape asserted.
# Environment: CRIO (crio binary; else `crio` on PATH), CRI_TOOL (default: the built cri-tool), GPUCKPT_BUILD_DIR,
# GPUCKPT_SOURCE_DIR, KEEP=1 keeps WORK.
# Exit 0 pass, 77 skipped (no root / crio / criu / image), anything else fails. Cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/crio-sandbox.sh"
CRI_TOOL=${CRI_TOOL:-$BUILD/test/e2e/cri-tool}   # any client with cri-tool's command line
NRI=$BUILD/nri-plugin/gpuckpt-nri
NRI_DUMP=$BUILD/test/e2e/nri-dump
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
CRIO=${CRIO:-crio}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -n "${CRIO_LOG:-}" ] && [ -f "$CRIO_LOG" ] && tail -n 15 "$CRIO_LOG" | cut -c1-300 >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || skip "needs root (CRI-O, runc, CRIU)"
command -v "$CRIO" >/dev/null || skip "no CRI-O here (CRIO=$CRIO): it is built from source, see docs/kubernetes.md"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
. "$SRC/scripts/lib/criu-probe.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
command -v helm >/dev/null || skip "helm not installed (scripts/setup.sh)"
podman image exists "$IMAGE" || skip "image $IMAGE missing (scripts/setup.sh builds it)"
podman image exists localhost/gpuckpt-pause:latest || skip "pause image missing (test/e2e/containerd_flow.sh makes it)"
for b in "$CRI_TOOL" "$NRI" "$NRI_DUMP" "$HOOK"; do [ -x "$b" ] || fail "$b not built"; done

TMP=/tmp/gck-crio-$$   # short: podman (the image import) refuses a runroot path over 50 characters
mkdir -m 711 "$TMP"
PIDS=()
cleanup() {
  set +e
  crio_stop
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
cri() { "$CRI_TOOL" "unix://$CRIO_SOCK" "$@"; }
echo "CRI-O: $("$CRIO" --version 2>/dev/null | head -1)"

# The host the installer writes into: CRI-O runs on it (/etc/crio). Paths in the entries are node paths; here the
# node's root is $HOST, so the install dir the entries name is linked to where the installer put the binary.
HOST=$TMP/host INST=$TMP/inst HOOKS_D=$TMP/host/usr/share/containers/oci/hooks.d
mkdir -p "$HOST/etc/crio" "$HOST/usr/lib/criu" "$TMP/chart" "$TMP/state"
helm template gpuckpt "$SRC/charts/gpuckpt" --set host.installDir="$INST" --set host.stateDir="$TMP/state" |
  python3 -c '
import sys, yaml
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc.get("kind") == "ConfigMap":
        for name, text in (doc.get("data") or {}).items():
            if name.startswith("gpuckpt-hook") and name.endswith(".json"):
                open(sys.argv[1] + "/" + name, "w").write(text)
' "$TMP/chart" || fail "helm template"
[ "$(find "$TMP/chart" -name '*.json' | wc -l)" = 3 ] || fail "the chart renders 3 hooks.d entries"
ln -s "$HOST$INST" "$INST"
printf 'not loaded: CRIU on this machine reads its own plugin dir, not the fake host\n' > "$TMP/plugin.so"
install_host_files() {
  env -i PATH="$PATH" GPUCKPT_HOST_MOUNT="$HOST" GPUCKPT_HOOKS_DIR=/usr/share/containers/oci/hooks.d \
    GPUCKPT_CRIU_PLUGIN_DIR=/usr/lib/criu GPUCKPT_INSTALL_DIR="$INST" GPUCKPT_HOOK_JSON_DIR="$TMP/chart" \
    GPUCKPT_SRC_HOOK="$HOOK" GPUCKPT_SRC_PLUGIN="$TMP/plugin.so" GPUCKPT_OWNER=e2e \
    GPUCKPT_VERIFY=false sh "$SRC/charts/gpuckpt/files/host-files.sh" install
}

step "1. CRI-O starts on the hooks.d the installer wrote on a CRI-O node, and runs a container"
install_host_files 2> "$TMP/install.log" || fail "install: $(cat "$TMP/install.log")"
grep "CRI-O runs on this node" "$TMP/install.log" || fail "the installer did not see CRI-O on the node"
echo "hooks.d: $(cd "$HOOKS_D" && echo *)"
if [ -e "$HOOKS_D/gpuckpt-hook-precreate.json" ] || [ ! -f "$HOOKS_D/gpuckpt-hook.json" ]; then fail "installed entries"; fi
crio_start "$TMP/crio" "$HOOKS_D" || fail "CRI-O did not start on the installed hooks.d: $(grep -m3 -E 'fatal|error' "$CRIO_LOG")"
echo "ok: $(cri version)"
{ crio_import_image "$IMAGE" && crio_import_image localhost/gpuckpt-pause:latest; } || fail "image import"
POD=$(cri run-pod gpuckpt-crio-hooks) || fail "RunPodSandbox"
CID=$(cri create gpuckpt-crio-hooks "$POD" plain "$IMAGE" --mount /etc/hosts:/etc/hosts -- sleep 600) || fail "CreateContainer"
cri start "$CID" || fail "StartContainer"
cri list | grep -q "^$CID plain CONTAINER_RUNNING" || fail "the container does not run: $(cri list)"
echo "ok: container $CID runs with gpuckpt's createRuntime and poststop entries in CRI-O's hooks.d"
{ cri stop "$CID" && cri rm "$CID" && cri stop-pod "$POD" && cri rm-pod "$POD"; } || fail "removing step 1's pod"
crio_stop

step "2. the precreate entry an older install left: CRI-O refuses to start; the installer removes it"
cp "$TMP/chart/gpuckpt-hook-precreate.json" "$HOOKS_D/"
if crio_start "$TMP/crio" "$HOOKS_D"; then fail "CRI-O started with a precreate entry in its hooks.d"; fi
grep -o 'level=fatal msg=.*' "$CRIO_LOG" || true
grep -q 'unknown stage \\"precreate\\"' "$CRIO_LOG" || fail "CRI-O's reason: $(tail -3 "$CRIO_LOG")"
echo "ok: CRI-O exits at start on the precreate entry"
install_host_files 2> "$TMP/install.log" || fail "reinstall: $(cat "$TMP/install.log")"
grep -q "removed /usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json" "$TMP/install.log" || fail "not removed"
crio_start "$TMP/crio" "$HOOKS_D" || fail "CRI-O did not start after the reinstall"
echo "ok: reinstalled on the CRI-O node, CRI-O starts again"

step "3. a CRI-O restore as NRI sees it (checkpoint through CRI, restore = CreateContainer from the archive)"
# gpuckpt-nri's node: the 8x H100 fixture, /dev/nvidia0 and /dev/nvidia1 with /dev/null's and /dev/zero's numbers
ROOT=$TMP/node-root STATE=$TMP/node-state
cp -a "$SRC/test/fixtures/nvidia-h100-8gpu" "$ROOT" && mkdir -p "$ROOT/dev" "$STATE"
mknod "$ROOT/dev/nvidia0" c 1 3 && mknod "$ROOT/dev/nvidia1" c 1 5
CAPTURE=${CRIO_CAPTURE_DIR:-$TMP/capture}
# CRI-O's NRI socket can refuse connections for a moment after its CRI socket answers: gpuckpt-nri retries by
# itself, nri-dump is started again until it registers.
"$NRI" --socket "$CRIO_NRI_SOCK" --state-dir "$STATE" --host-root "$ROOT" --hook "$HOOK" --log-level debug \
  > "$TMP/nri.log" 2>&1 & PIDS+=($!)
for _ in $(seq 20); do
  "$NRI_DUMP" --socket "$CRIO_NRI_SOCK" --out "$CAPTURE" --idx 90 2> "$TMP/nri-dump.log" & dump=$!
  sleep 0.5
  if grep -q registered "$TMP/nri-dump.log"; then PIDS+=("$dump"); break; fi
  kill "$dump" 2>/dev/null || true
done
grep -q registered "$TMP/nri-dump.log" || fail "nri-dump did not register: $(cat "$TMP/nri-dump.log")"
for _ in $(seq 100); do grep -q "registered" "$TMP/nri.log" && break; sleep 0.1; done
grep -q registered "$TMP/nri.log" || fail "gpuckpt-nri did not register: $(cat "$TMP/nri.log")"
POD=$(cri run-pod gpuckpt-crio-src) || fail "RunPodSandbox"
# shellcheck disable=SC2016 # expanded by the container's shell
COUNTER='i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'
CID=$(cri create gpuckpt-crio-src "$POD" counter "$IMAGE" --device /dev/null:/dev/nvidia0 --env NVIDIA_VISIBLE_DEVICES=0 \
  --annotation io.gpuckpt.test/from-request=yes --mount /etc/hosts:/etc/hosts -- sh -c "$COUNTER") || fail "CreateContainer"
cri start "$CID" || fail "StartContainer"
sleep 1
CK=$TMP/kubelet/checkpoints/checkpoint-gpuckpt-crio-src_default-counter-2026-11-26T07:00:00Z.tar
mkdir -p "$(dirname "$CK")"
cri checkpoint "$CID" "$CK" || fail "CRI CheckpointContainer"
echo "ok: checkpoint $(stat -c %s "$CK") bytes: $(tar -tf "$CK" | grep -v '^checkpoint/.' | tr '\n' ' ')"
# What the agent does to a CRI-O archive (helper core's design): io.gpuckpt.checkpoint-id in spec.dump's
# annotations and in the JSON of io.kubernetes.cri-o.Annotations.
mkdir "$TMP/ck" && tar -xf "$CK" -C "$TMP/ck"
python3 - "$TMP/ck/spec.dump" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
a = spec["annotations"]
a["io.gpuckpt.checkpoint-id"] = "ck-crio-e2e"
inner = json.loads(a["io.kubernetes.cri-o.Annotations"])
inner["io.gpuckpt.checkpoint-id"] = "ck-crio-e2e"
a["io.kubernetes.cri-o.Annotations"] = json.dumps(inner)
json.dump(spec, open(sys.argv[1], "w"))
PY
CK2=$TMP/kubelet/checkpoints/annotated.tar
tar -cf "$CK2" -C "$TMP/ck" .
{ cri stop "$CID" && cri rm "$CID"; } || fail "removing the checkpointed container"
POD2=$(cri run-pod gpuckpt-crio-dst) || fail "RunPodSandbox (target)"
RID=$(cri create gpuckpt-crio-dst "$POD2" counter "$CK2" --device /dev/zero:/dev/nvidia1 --env NVIDIA_VISIBLE_DEVICES=1 \
  --mount /etc/hosts:/etc/hosts -- sh -c "$COUNTER") || fail "CreateContainer from the checkpoint archive"
cri start "$RID" || fail "StartContainer (restored)"
PID=$(cri pid "$RID")
n=$(cat "/proc/$PID/root/tmp/count")
[ "$n" -gt 5 ] || fail "the restored counter did not continue: $n"
echo "ok: restored container $RID continues counting at $n"
sleep 0.5
RESTORED=$(find "$CAPTURE" -name '*.json' | sort -V | tail -1)
echo "NRI saw at CreateContainer of the restore: $RESTORED"
python3 - "$RESTORED" "$IMAGE" <<'PY' || fail "the restored container's NRI shape"
import json, sys
c = json.load(open(sys.argv[1]))["container"]
a = c.get("annotations", {})
env = c.get("env", [])
devices = c.get("linux", {}).get("devices", [])
print("  annotations:", sorted(a))
print("  io.kubernetes.cri-o.ImageName:", a.get("io.kubernetes.cri-o.ImageName"))
print("  devices:", devices, " NVIDIA_VISIBLE_DEVICES in env:", [e for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES")])
print("  io.gpuckpt.checkpoint-id:", a.get("io.gpuckpt.checkpoint-id"),
      " in io.kubernetes.cri-o.Annotations:", json.loads(a.get("io.kubernetes.cri-o.Annotations", "{}")).get("io.gpuckpt.checkpoint-id"))
PY
grep -E "restore|nothing recorded|GPU" "$TMP/nri.log" | tail -5 || true
echo "PASS"
