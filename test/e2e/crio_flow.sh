#!/usr/bin/env bash
# e2e: gpuckpt's install and restore path on a real CRI-O (built from source: CRI-O is no Debian package, so CI
# has none and this test skips there; docs/kubernetes.md "CRI-O for real" says how to build it and records runs).
# CRI-O runs privately (own root, sockets, config dir: scripts/lib/crio-sandbox.sh) with runc, conmon and CRIU.
#   1. the chart's installer (charts/gpuckpt/files/host-files.sh, entries rendered by helm) on a host root where
#      CRI-O runs: CRI-O starts on exactly the hooks.d it wrote and runs a container through CRI;
#   2. the precreate entry an older install left there: CRI-O refuses to start (`unknown stage "precreate"`);
#      the installer run again removes it and CRI-O starts;
#   3. a restore onto the pod's GPU, on a simulated GPU node (scripts/lib/node-sandbox.sh: /dev/nvidia0 and
#      /dev/nvidia1 are real char devices with /dev/null's and /dev/zero's numbers), with gpuckpt-nri as the chart
#      starts it, the agent's kubelet-dir watcher and a simulated kubelet PodResources server giving the restore's
#      pod GPU 1: a container on GPU 0 checkpointed through CRI CheckpointContainer into the kubelet's dir (the
#      agent annotates and registers the archive), restored through CreateContainer with the archive as image.
#      CRI-O's restore drops the request's devices and env; in the restored container's final OCI spec (CRI-O's
#      config.json, container dir and bundle): GPU 1's node /dev/nvidia1 with its numbers, no /dev/nvidia0, a
#      device-cgroup rule allowing it, NVIDIA_VISIBLE_DEVICES=1, the restore plan; the counter continued. A plain
#      container of the same image in a pod also given GPU 1 gets none of it. nri-dump saves what NRI received to
#      CRIO_CAPTURE_DIR (default WORK/capture; test/fixtures/crio/ holds the captured requests, which the unit
#      tests replay).
# Environment: CRIO (crio binary; default: the one scripts/setup-k8s.sh built, else `crio` on PATH), CRI_TOOL (default: the built cri-tool), GPUCKPT_BUILD_DIR,
# GPUCKPT_SOURCE_DIR, KEEP=1 keeps WORK.
# Exit 0 pass, 77 skipped (no root / crio / criu / image), anything else fails. Cleanup always runs.
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
. "$SRC/scripts/lib/crio-sandbox.sh"
. "$SRC/scripts/lib/node-sandbox.sh"
CRI_TOOL=${CRI_TOOL:-$BUILD/test/e2e/cri-tool}   # any client with cri-tool's command line
NRI=$BUILD/nri-plugin/gpuckpt-nri
NRI_DUMP=$BUILD/test/e2e/nri-dump
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
AGENT=$BUILD/agent/gpuckpt-agent
PODRES=$BUILD/test/podresources/podresources-server
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
# scripts/setup-k8s.sh builds CRI-O from the Go module proxy beside the Kubernetes programs
CRIO_BUILT=${GPUCKPT_PREFIX:-/opt/gpuckpt}/k8s/v1.37.2/bin/crio
CRIO=${CRIO:-$([ -x "$CRIO_BUILT" ] && echo "$CRIO_BUILT" || echo crio)}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -n "${CRIO_LOG:-}" ] && [ -f "$CRIO_LOG" ] && tail -n 15 "$CRIO_LOG" | cut -c1-300 >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || skip "needs root (CRI-O, runc, CRIU)"
command -v "$CRIO" >/dev/null || skip "no CRI-O here (CRIO=$CRIO): scripts/setup-k8s.sh builds it"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
. "$SRC/scripts/lib/criu-probe.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
command -v helm >/dev/null || skip "helm not installed (scripts/setup.sh)"
podman image exists "$IMAGE" || skip "image $IMAGE missing (scripts/setup.sh builds it)"
podman image exists localhost/gpuckpt-pause:latest || skip "pause image missing (test/e2e/containerd_flow.sh makes it)"
for b in "$CRI_TOOL" "$NRI" "$NRI_DUMP" "$HOOK" "$AGENT" "$PODRES" "$BUILD/cli/gpuckpt"; do [ -x "$b" ] || fail "$b not built"; done

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
cri list | grep -Eiq "^$CID plain (container_)?running$" || fail "the container does not run: $(cri list)"
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

step "3. a CRI-O restore onto the pod's GPU: gpuckpt-nri gives back what CRI-O's restore drops"
# The simulated GPU node (scripts/lib/node-sandbox.sh: 8x H100 fixture; /dev/nvidia0 = 1:3 and /dev/nvidia1 = 1:5
# under ROOT; the agent with its kubelet-dir watcher; hooks.d entries for the built hook on ROOT and STATE). CRI-O
# runs the createRuntime and poststop entries: the installer writes no precreate entry on a CRI-O node (steps 1-2).
crio_stop
mkdir "$TMP/node"
sandbox_prepare "$TMP/node" "$BUILD" "$SRC" || fail "cannot prepare the simulated node"
rm "$HOOKS/gpuckpt-hook-precreate.json"
KDIR=$TMP/kubelet/checkpoints
mkdir -p "$KDIR" "$TMP/pod-resources"
sed -i "s#kubelet_dir: \"\"#kubelet_dir: $KDIR, watch_interval_seconds: 1#" "$TMP/node/agent.yaml"
crio_start "$TMP/crio" "$HOOKS" || fail "CRI-O did not start on the node's hooks.d"
# The kubelet's PodResources: the restore's pod and a plain pod were each given GPU 1 (nvidia.com/gpu).
python3 - "$TMP/pod-resources.json" "$GPU1" <<'PY'
import json, sys
gpu1 = [{"resource_name": "nvidia.com/gpu", "device_ids": [sys.argv[2]]}]
json.dump({"pods": [{"name": "gpuckpt-crio-dst", "namespace": "default", "containers": [{"name": "counter", "devices": gpu1}]},
                    {"name": "gpuckpt-crio-plain", "namespace": "default", "containers": [{"name": "plain", "devices": gpu1}]}]},
          open(sys.argv[1], "w"))
PY
"$PODRES" "$TMP/pod-resources/kubelet.sock" "$TMP/pod-resources.json" > "$TMP/podres.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do grep -qx listening "$TMP/podres.log" && break; sleep 0.1; done
grep -qx listening "$TMP/podres.log" || fail "podresources-server did not start: $(cat "$TMP/podres.log")"
CAPTURE=${CRIO_CAPTURE_DIR:-$TMP/capture}
# CRI-O's NRI socket can refuse connections for a moment after its CRI socket answers: gpuckpt-nri retries by
# itself, nri-dump (index 10: before gpuckpt-nri, it sees the request as CRI-O sent it) is started again until it
# registers. gpuckpt-nri runs as the chart starts it (with --hook).
"$NRI" --socket "$CRIO_NRI_SOCK" --state-dir "$STATE" --host-root "$ROOT" --hook "$HOOK" \
  --pod-resources-socket "$TMP/pod-resources/kubelet.sock" --log-level debug > "$TMP/nri.log" 2>&1 & PIDS+=($!)
for _ in $(seq 20); do
  "$NRI_DUMP" --socket "$CRIO_NRI_SOCK" --out "$CAPTURE" --idx 10 2> "$TMP/nri-dump.log" & dump=$!
  sleep 0.5
  if grep -q registered "$TMP/nri-dump.log"; then PIDS+=("$dump"); break; fi
  kill "$dump" 2>/dev/null || true
done
grep -q registered "$TMP/nri-dump.log" || fail "nri-dump did not register: $(cat "$TMP/nri-dump.log")"
for _ in $(seq 100); do grep -q "registered with" "$TMP/nri.log" && break; sleep 0.1; done
grep -q "registered with cri-o" "$TMP/nri.log" || fail "gpuckpt-nri did not register: $(cat "$TMP/nri.log")"
sandbox_start_agent "$AGENT" || fail "agent did not start"
PIDS+=("$AGENT_PID")
echo "ok: CRI-O on the node's hooks.d; gpuckpt-nri, nri-dump, the agent (kubelet dir $KDIR), PodResources: GPU 1 = $GPU1"

# The base image needs a command of its own: CRI-O's restore drops the request's command too and fails with "no
# command specified" on an image without one (gpuckpt-busybox has none; the pause image, busybox with CMD sleep,
# has one).
BASE=localhost/gpuckpt-pause:latest
POD=$(cri run-pod gpuckpt-crio-src) || fail "RunPodSandbox"
# shellcheck disable=SC2016 # expanded by the container's shell; written then renamed: a read never sees it half-written
COUNTER='i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done'
# GPU 0 as the device plugin gives it: its node (here /dev/null's numbers, as /dev/nvidia0 on ROOT) and the env
CID=$(cri create gpuckpt-crio-src "$POD" counter "$BASE" --device /dev/null:/dev/nvidia0 --env NVIDIA_VISIBLE_DEVICES=0 \
  --annotation io.gpuckpt.test/from-request=yes --mount /etc/hosts:/etc/hosts -- sh -c "$COUNTER") || fail "CreateContainer"
cri start "$CID" || fail "StartContainer"
python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["gpus"]; assert g["record"]["used_gpu_ids"]==[sys.argv[2]], g' \
  "$STATE/containers/$CID.json" "$GPU0" || fail "gpuckpt-nri did not record $CID on GPU 0: $(tail -3 "$TMP/nri.log")"
sleep 1
ARCHIVE=$KDIR/checkpoint-gpuckpt-crio-src_default-counter-$(date -u +%Y-%m-%dT%H:%M:%SZ).tar
cri checkpoint "$CID" "$ARCHIVE" || fail "CRI CheckpointContainer"
for _ in $(seq 100); do grep -q "annotated kubelet archive $ARCHIVE" "$TMP/node/agent.log" && break; sleep 0.1; done
grep -q "annotated kubelet archive $ARCHIVE" "$TMP/node/agent.log" ||
  fail "the agent's watcher did not annotate the archive: $(tail -3 "$TMP/node/agent.log")"
CK_ID=$(tar -xOf "$ARCHIVE" spec.dump | python3 -c '
import json, sys
a = json.load(sys.stdin)["annotations"]
carried = json.loads(a["io.kubernetes.cri-o.Annotations"])["io.gpuckpt.checkpoint-id"]
assert carried == a["io.gpuckpt.checkpoint-id"], a
print(carried)') || fail "the annotated archive does not carry its checkpoint id where CRI-O restores annotations from"
tar -xOf "$ARCHIVE" rootfs-diff.tar > "$TMP/rootfs-diff.tar" || fail "the archive has no rootfs-diff.tar"
N1=$(tar -xOf "$TMP/rootfs-diff.tar" tmp/count) || fail "the checkpoint's rootfs diff has no /tmp/count"
echo "ok: $(basename "$ARCHIVE") annotated and registered by the agent as $CK_ID (GPU 0), counter at $N1"
{ cri stop "$CID" && cri rm "$CID"; } || fail "removing the checkpointed container"

# Restore as kubelet does: a new pod, CreateContainer with the archive as image and the new allocation's devices
# and env (GPU 1), which CRI-O's restore drops (server/container_restore.go).
POD2=$(cri run-pod gpuckpt-crio-dst) || fail "RunPodSandbox (target)"
RID=$(cri create gpuckpt-crio-dst "$POD2" counter "$ARCHIVE" --device /dev/zero:/dev/nvidia1 --env NVIDIA_VISIBLE_DEVICES=1 \
  --mount /etc/hosts:/etc/hosts -- sh -c "$COUNTER" 2> "$TMP/create.err") ||
  fail "CreateContainer from the checkpoint archive: $(cat "$TMP/create.err"; grep -E 'refused|error' "$TMP/nri.log" | tail -2)"
cri start "$RID" 2> "$TMP/start.err" || fail "StartContainer (restored): $(cat "$TMP/start.err")"
RPID=$(cri pid "$RID")
n=$(cat "/proc/$RPID/root/tmp/count")
[ "$n" -ge "$N1" ] || fail "the restored counter started over ($n) instead of continuing from $N1"
grep "CRI-O restore" "$TMP/nri.log" | grep -o 'plan rp-.*' | cut -c1-200 || true
echo "ok: restored container $RID continues counting ($N1 -> $n)"

# The restored container's final OCI spec, as CRI-O wrote it after NRI's adjustment (its container dir and its
# bundle; runc restores from the bundle's).
spec_check() {  # spec_check ID EXPECT(restored|plain) GPU0_ID
  local dir found=0
  for dir in "$TMP/crio/root/overlay-containers/$1/userdata" "$TMP/crio/runroot/overlay-containers/$1/userdata"; do
    [ -f "$dir/config.json" ] || continue
    found=$((found + 1))
    python3 - "$dir/config.json" "$2" "$HOOK" <<'PY' || return 1
import json, sys
spec, expect, hook = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
devices = {d["path"]: (d.get("type"), d.get("major"), d.get("minor")) for d in spec["linux"].get("devices") or []}
rules = spec["linux"].get("resources", {}).get("devices") or []
env = dict(e.split("=", 1) for e in spec["process"]["env"])
annotations = spec.get("annotations", {})
allows_gpu1 = [r for r in rules if r.get("allow") and r.get("type") == "c" and r.get("major") == 1 and r.get("minor") == 5
               and "r" in r.get("access", "") and "w" in r.get("access", "")]
gpu_nodes = sorted(p for p in devices if p.startswith("/dev/nvidia"))
nri_hooks = [h for h in spec.get("hooks", {}).get("createRuntime", []) if h.get("path") == hook]
print(f"  {sys.argv[1]}: devices {gpu_nodes} {[devices[p] for p in gpu_nodes]}, cgroup rules allowing 1:5 {allows_gpu1}, "
      f"NVIDIA_VISIBLE_DEVICES={env.get('NVIDIA_VISIBLE_DEVICES')}, restore plan {annotations.get('io.gpuckpt.restore-plan')}, "
      f"createRuntime hooks of gpuckpt {len(nri_hooks)}")
assert len(nri_hooks) == 1, "gpuckpt's createRuntime hook is not there exactly once"
if expect == "restored":
    assert devices.get("/dev/nvidia1") == ("c", 1, 5), "GPU 1's node /dev/nvidia1 (1:5) is not in linux.devices"
    assert "/dev/nvidia0" not in devices, "the source GPU's node /dev/nvidia0 is in linux.devices"
    assert rules and not rules[0].get("allow") and rules[0].get("access") == "rwm", "no deny-all device rule first"
    assert allows_gpu1, "no device-cgroup rule allows GPU 1's node (c 1:5 rw)"
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "1", "NVIDIA_VISIBLE_DEVICES is not GPU 1's"
    assert annotations.get("io.gpuckpt.restore-plan", "").startswith("rp-"), "no restore plan annotation"
else:
    assert not gpu_nodes, "a plain container got GPU device nodes"
    assert not allows_gpu1, "a plain container got a device-cgroup rule for GPU 1"
    assert not any(k.startswith("NVIDIA_") for k in env), "a plain container got NVIDIA_ env"
    assert "io.gpuckpt.restore-plan" not in annotations, "a plain container names a restore plan"
PY
  done
  [ "$found" = 2 ] || { echo "CRI-O's config.json of $1 not found in its container dir and bundle" >&2; return 1; }
}
spec_check "$RID" restored || fail "the restored container's OCI spec lacks what gpuckpt-nri gives a restore onto GPU 1"
echo "ok: the restored container's spec has GPU 1's node /dev/nvidia1 (1:5), its cgroup rule and NVIDIA_VISIBLE_DEVICES=1"
# What runc made of it: the restored process's device cgroup (v1 here) allows GPU 1's node.
CG=$(sed -n 's/^[0-9]*:devices:\(.*\)/\1/p' "/proc/$RPID/cgroup")
if [ -n "$CG" ] && [ -f "/sys/fs/cgroup/devices$CG/devices.list" ]; then
  grep -Eq '^c 1:5 rw' "/sys/fs/cgroup/devices$CG/devices.list" ||
    fail "the restored container's device cgroup does not allow 1:5: $(tr '\n' ' ' < "/sys/fs/cgroup/devices$CG/devices.list")"
  echo "ok: its device cgroup ($CG) allows c 1:5 rw"
fi
# gpuckpt's hook (CRI-O ran it once, from hooks.d) put the plan where CRIU restored from: CRI-O's container dir.
PLAN_DIR=$TMP/crio/root/overlay-containers/$RID/userdata/checkpoint
grep -q "container $RID: restore plan rp-[0-9a-f]* placed in $PLAN_DIR/gpuckpt-restore-plan.json" "$STATE/hook.log" ||
  fail "the hook did not place the restore plan in CRI-O's CRIU images dir $PLAN_DIR: $(tail -3 "$STATE/hook.log")"
echo "ok: the restore plan reached CRIU's images dir ($PLAN_DIR)"
# Not asserted: /dev inside comes from CRIU's image of the source's /dev; gpuckpt's CRIU plugin, which makes the
# allocated GPU's node there, is not loaded here (no CRIU_LIBS_DIR): test/k8s/crio_cluster_flow.sh loads it
# through conmon's environment and checks /dev.
echo "inside the restored container: $(cd "/proc/$RPID/root/dev" && for f in nvidia*; do stat -c '%n %t:%T' "$f" 2>/dev/null || echo "no /dev/nvidia*"; done | tr '\n' ' ')"

# A plain container of the same image, in a pod the kubelet also gave GPU 1, with none of its devices in the
# request: not a restore, gpuckpt-nri gives it nothing.
POD3=$(cri run-pod gpuckpt-crio-plain) || fail "RunPodSandbox (plain)"
PLAIN=$(cri create gpuckpt-crio-plain "$POD3" plain "$BASE" --mount /etc/hosts:/etc/hosts -- sleep 600) ||
  fail "CreateContainer (plain)"
cri start "$PLAIN" || fail "StartContainer (plain)"
spec_check "$PLAIN" plain || fail "a plain container of the same image got something from gpuckpt-nri"
echo "ok: a plain container of $BASE in a pod given GPU 1 gets no GPU node, rule, env or plan"

RESTORED=$(find "$CAPTURE" -name '2-counter.pb')
[ -f "$RESTORED" ] || fail "nri-dump did not save the restored container's CreateContainer"
echo "NRI's CreateContainer of the restore (as CRI-O sent it): $RESTORED"
grep -E "CRI-O restore|refused" "$TMP/nri.log" | tail -3 | cut -c1-300 || true
grep -E "restore plan" "$STATE/hook.log" | tail -2 | cut -c1-300 || true
echo "PASS"
