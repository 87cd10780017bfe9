# shellcheck shell=bash disable=SC2034  # its variables are for the scripts that source it
# Sourced by the container GPU tests (container_gpu_test.sh, pod_network_test.sh, soak_test.sh): the node they
# run on (podman, CRIU, gpuckpt installed by test/gpu/device_node.sh or the build's for this run only), the agent
# as the chart configures it, and what they ask the node (GPUs, the processes on them). Set before sourcing:
#   SRC (the checkout), PREFIX (names of this run's containers, pods and images), KEEP_OUT (keep logs here, or
#   empty: a temp dir, removed); optional BUILD (default $SRC/build). Cleans up on exit; a script with more to
#   clean sets NODE_CLEANUP to a function of its own, run first.
BUILD=${BUILD:-$SRC/build}
PLUGIN_DIR=/usr/lib/criu   # CRIU's compiled-in default: what runc's CRIU loads with no --libdir
STATE=/var/lib/gpuckpt     # the installed hook's state dir (oci-hook/gpuckpt-hook*.json)
NODE_CLEANUP=${NODE_CLEANUP:-}
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v podman >/dev/null || skip "no podman"
command -v criu >/dev/null || skip "no criu"
. "$SRC/scripts/lib/criu-probe.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
pick() { command -v "$1" 2>/dev/null || echo "$2"; }
CLI=$(pick gpuckpt "$BUILD/cli/gpuckpt")
AGENT_BIN=$(pick gpuckpt-agent "$BUILD/agent/gpuckpt-agent")
[ -x "$CLI" ] && [ -x "$AGENT_BIN" ] || skip "gpuckpt and gpuckpt-agent are neither installed nor built in $BUILD"

WORK=${KEEP_OUT:-$(mktemp -d /tmp/gpuckpt-ctest.XXXXXX)}
mkdir -p "$WORK/out" "$WORK/ck"
chmod 777 "$WORK/out"
AGENT_PID=
INSTALLED=()   # files this run put on the host, removed at the end
HOOK_ARGS=()   # --hooks-dir when the hook is not installed on this host
cleanup() {
  set +e
  [ -n "$NODE_CLEANUP" ] && "$NODE_CLEANUP"
  [ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
  for c in $(podman ps -a --format '{{.Names}}' | grep "^$PREFIX"); do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  remove_sandboxes "$PREFIX"
  for i in $(podman images --format '{{.Repository}}' | grep "$PREFIX"); do podman rmi -f "$i" >/dev/null 2>&1; done
  for f in "${INSTALLED[@]}"; do if [ -d "$f" ]; then rmdir "$f"; else rm -f "$f"; fi; done
  [ -n "${KEEP_OUT:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# The node's gpuckpt: installed (device_node.sh, the chart) or, for the CPU cases, the build's for this run only.
if [ ! -f "$PLUGIN_DIR/gpuckpt_plugin.so" ]; then
  [ -f "$BUILD/criu-plugin/gpuckpt_plugin.so" ] || skip "gpuckpt_plugin.so is neither in $PLUGIN_DIR nor built"
  [ -d "$PLUGIN_DIR" ] || { mkdir -p "$PLUGIN_DIR" && INSTALLED+=("$PLUGIN_DIR"); }
  cp "$BUILD/criu-plugin/gpuckpt_plugin.so" "$PLUGIN_DIR/gpuckpt_plugin.so" && INSTALLED=("$PLUGIN_DIR/gpuckpt_plugin.so" "${INSTALLED[@]}")
fi
if ! ls /etc/containers/oci/hooks.d/gpuckpt-hook.json >/dev/null 2>&1 &&
   ! ls /usr/share/containers/oci/hooks.d/gpuckpt-hook.json >/dev/null 2>&1; then
  mkdir -p "$WORK/hooks.d"
  STATE=$WORK/state
  for f in "$SRC"/oci-hook/gpuckpt-hook*.json; do
    sed -e "s#/usr/local/bin/gpuckpt-oci-hook#$BUILD/oci-hook/gpuckpt-oci-hook#" \
        -e "s#\"/var/lib/gpuckpt\"#\"$STATE\"#" "$f" > "$WORK/hooks.d/$(basename "$f")"
  done
  HOOK_ARGS=(--hooks-dir "$WORK/hooks.d")
fi
pm() { podman "${HOOK_ARGS[@]}" "$@"; }
# The base image: busybox with merged-/usr links (device_node.sh builds it; setup.sh's busybox image elsewhere).
BASE=localhost/gpuckpt-base
podman image exists "$BASE" || BASE=localhost/gpuckpt-busybox
podman image exists "$BASE" || skip "no base image (localhost/gpuckpt-base or localhost/gpuckpt-busybox)"

# ---- the agent, as the chart configures it: the installed hook's state dir, podman, this node's GPUs ------
start_agent() {
  [ -n "$AGENT_PID" ] && return 0
  head -c 32 /dev/urandom | base64 > "$WORK/token"; chmod 600 "$WORK/token"
  mkdir -p "$STATE"
  rm -f "$STATE/agent.port"
  # AGENT_GPU_STORE: the agent's gpu_memory.store (node, inline or a shared path; unset: the chart's default)
  local gpu_memory=''
  [ -z "${AGENT_GPU_STORE:-}" ] || gpu_memory="gpu_memory: {store: $AGENT_GPU_STORE}"
  cat > "$WORK/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $WORK/token}
state_dir: $STATE
checkpoints: {dir: $WORK/ck, kubelet_dir: "", runtime_timeout_seconds: 300}
runtime: {kind: podman, podman_path: $(command -v podman)}
host_root: /
hooks_dir: ${HOOK_ARGS[1]:-/etc/containers/oci/hooks.d}
criu_plugin_dir: $PLUGIN_DIR
$gpu_memory
YAML
  "$AGENT_BIN" --config "$WORK/agent.yaml" > "$WORK/agent.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 100); do [ -s "$STATE/agent.port" ] && break; sleep 0.1; done
  [ -s "$STATE/agent.port" ] || { cat "$WORK/agent.log"; return 1; }
  AGENT_URL=http://127.0.0.1:$(cat "$STATE/agent.port")
}
gk() { "$CLI" "$@" --agent "$AGENT_URL" --token-file "$WORK/token"; }
timed() { # VAR cmd...: runs cmd, stores its wall time in seconds in VAR
  local var=$1 t0=$EPOCHREALTIME rc; shift
  "$@"; rc=$?
  printf -v "$var" '%s' "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')"
  return $rc
}

# ---- GPU preconditions and the workload image ---------------------------------------------------------------
HAVE_GPU=0 NGPU=0
if [ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null && command -v nvcc >/dev/null; then
  HAVE_GPU=1; NGPU=$(nvidia-smi -L | grep -c '^GPU ')
fi
# The host's libcuda.so.1 and the mount holding it (the driver root: /usr/local/nvidia on the device machine).
driver_libcuda() { ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/{print $NF; exit}'; }
driver_root() { findmnt -n -o TARGET --target "$(dirname "$(driver_libcuda)")"; }
criu_log() { # NAME: CRIU's errors from the runtime's last checkpoint/restore of container NAME
  local dir; dir=$(podman inspect -f '{{.StaticDir}}' "$1" 2>/dev/null) || return 0
  for f in "$dir/dump.log" "$dir/restore.log"; do
    [ -f "$f" ] && { echo "--- $f"; grep -E "Error|gpuckpt" "$f" | tail -n 40; }
  done
  return 0
}
# Entries of ARCHIVE matching PATTERN, counted. (Not `tar -tf | grep -q` under pipefail: grep -q quits at the
# first match and tar, still listing a GiB archive, dies of SIGPIPE, failing the pipeline.)
entries() { tar -tf "$1" 2>/dev/null | grep -c -- "$2"; }
show() { for f in "$@"; do [ -f "$f" ] && { echo "--- $f"; tail -n 25 "$f"; }; done; }
wait_gone() { for _ in $(seq 100); do pm container exists "$1" || return 0; sleep 0.1; done; return 1; }

# The GPU (UUID) a host process runs on, as the driver reports it.
gpu_of_pid() { nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', *' -v p="$1" '$1 == p {print $2; exit}'; }
ctr_pid() { podman inspect -f '{{.State.Pid}}' "$1" 2>/dev/null; }
gpu_uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }

# ---- the CUDA counter (test/gpu/gpu_counter.cu) as a container workload -------------------------------------
COUNTER_IMAGE=localhost/$PREFIX-counter
build_counter_image() {
  podman image exists "$COUNTER_IMAGE" && return 0
  local root=$WORK/counter-root lib
  rm -rf "$root"
  mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc,out,usr/lib64,usr/lib/x86_64-linux-gnu}
  nvcc -O2 -o "$WORK/gpu_counter" "$SRC/test/gpu/gpu_counter.cu" || return 1
  cp "$WORK/gpu_counter" "$root/bin/gpu_counter"
  cp "$(readlink -f "$(command -v busybox)")" "$root/bin/busybox"
  for app in sh cat ls sleep env tail stat; do ln -sf busybox "$root/bin/$app"; done
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  # The counter's libraries and the driver's (libcuda itself comes from the CDI spec or the bound driver root).
  local libcuda; libcuda=$(driver_libcuda)
  for lib in $(ldd "$WORK/gpu_counter" ${libcuda:+"$libcuda"} | awk '/=> \// && $1 !~ /^libcuda/ {print $3}' | sort -u); do
    cp -Ln "$lib" "$root/usr/lib/x86_64-linux-gnu/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$root/usr/lib64/"
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  tar -C "$root" -c . | podman import -q - "$COUNTER_IMAGE" >/dev/null
}
check_counter() { # CASE FILE MIB [args]: FILE equals an uninterrupted run up to its last iteration
  counter_reference "$3" "$(last_iter "$2")" "$2.ref" "${@:4}"
  same_as_reference "$2" "$2.ref" || { record "$1" FAIL "state differs from the uninterrupted run"; return 1; }
}
# The ways a container gets the GPU: CDI (Kubernetes with the NVIDIA toolkit's CDI mode) and the older one.
CDI_GPU=(--device nvidia.com/gpu=0)
run_counter() { # NAME OUTFILE GPU-ARGS... -- counter args
  local name=$1 out=$2; shift 2
  local gpu=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do gpu+=("$1"); shift; done
  shift
  # A file left by an earlier run in a kept work dir (CONTAINER_TEST_OUT) would pass wait_ctr before this counter
  # has even allocated its memory.
  rm -f "$out"
  pm run -d --name "$name" "${gpu[@]}" -v "$WORK/out:/out" "$COUNTER_IMAGE" \
    /bin/gpu_counter "$@" --sleep-ms 20 >/dev/null 2>"$WORK/$name.err"
}
wait_ctr() { # NAME FILE N TIMEOUT_S: like wait_iter, but gives up at once when the container is not running
  local deadline=$((SECONDS + $4)) it
  while [ $SECONDS -lt $deadline ]; do
    it=$(last_iter "$2"); [ -n "$it" ] && [ "$it" -ge "$3" ] && return 0
    [ "$(podman inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ] || { echo "container $1 is not running:"; pm logs "$1" 2>&1 | tail -5; return 1; }
    sleep 0.2
  done
  return 1
}

# host_python_mounts PY: sets HOST_PY_MOUNTS to the podman -v arguments that give a container the host's python
# PY and its packages, read-only: /usr without what is mounted below it, the driver root on its own (CDI's file
# mounts land inside it), and the virtualenv PY lives in.
host_python_mounts() {
  local venv root lib
  venv=$("$1" -c 'import sys; print(sys.prefix)') || return 1
  # shellcheck disable=SC2054  # "ro,bind" is one podman volume option list
  HOST_PY_MOUNTS=(-v /usr:/usr:ro,bind -v /etc/ld.so.cache:/etc/ld.so.cache:ro)
  lib=$(driver_libcuda)
  if [ -n "$lib" ]; then
    root=$(driver_root)
    [ "$root" != / ] && [ "$root" != /usr ] && HOST_PY_MOUNTS+=(-v "$root:$root:ro")
  fi
  case "$venv" in /usr|/usr/*) ;; *) HOST_PY_MOUNTS+=(-v "$venv:$venv:ro") ;; esac
}

# retarget_archive SRC DST FROM_INDEX TO_INDEX FROM_UUID TO_UUID: what a runtime restoring a checkpoint image for a
# pod given another GPU does (CRI-O, containerd >= 2.1, where the agent edits nothing): DST is SRC with the spec
# given GPU TO_INDEX (the new allocation, as the device plugin / CDI and gpuckpt-nri give it) and the GPU mapping
# where the plugin reads it; CRIU's /dev image is the checkpoint's (it names the old GPU).
retarget_archive() {
  local src=$1 dst=$2 from=$3 to=$4 dir; dir=$(mktemp -d "$WORK/retarget.XXXXXX")
  tar -C "$dir" -xf "$src" || return 1
  python3 - "$dir/spec.dump" "$from" "$to" <<'PY' || return 1
import json, sys
path, old, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = json.load(open(path))
for d in spec["linux"]["devices"]:
    if d["path"] == f"/dev/nvidia{old}":
        d["path"], d["minor"] = f"/dev/nvidia{new}", new
spec["linux"].setdefault("resources", {}).setdefault("devices", []).append({"allow": True, "type": "c", "major": 195, "minor": new, "access": "rwm"})
json.dump(spec, open(path, "w"))
PY
  printf '{"version":1,"pairs":[{"source_uuid":"%s","target_uuid":"%s"}]}\n' "$5" "$6" > "$dir/checkpoint/gpuckpt-gpu-map.json"
  (cd "$dir" && tar -c . | zstd -q -f -o "$dst") || return 1
  rm -rf "$dir"
}

# ---- pods and host-python containers ------------------------------------------------------------------------
# NVLink multicast stays off in every GPU container (the GPU machines' rule: a program that uses it can put the
# host's GPUs out of service); containers start with their own environment, so it is passed explicitly.
GPU_SAFE_ENV=(-e NCCL_NVLS_ENABLE=0 -e TORCH_SYMM_MEM_DISABLE_MULTICAST=1 -e NVSHMEM_DISABLE_NVLS=1)
# python_image: PY_IMAGE, busybox with merged-/usr links, so the host's /usr (python, its libraries) can be bound in.
PY_IMAGE=localhost/$PREFIX-py
python_image() {
  podman image exists "$PY_IMAGE" && return 0
  command -v busybox >/dev/null || return 1
  local root; root=$(mktemp -d "$WORK/image.XXXXXX")
  mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc,usr,opt,srv}
  cp "$(readlink -f "$(command -v busybox)")" "$root/bin/busybox" && ln -s busybox "$root/bin/sh"
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  tar -C "$root" -c . | podman import -q - "$PY_IMAGE" >/dev/null
  local rc=$?
  rm -rf "$root"
  return $rc
}
# A pod's sandbox, as a Kubernetes node makes it: a network namespace (what CNI configures: loopback only here) and an
# IPC namespace, persisted at $SANDBOX_DIR/NAME.net and .ipc, that the pod's containers join by path (podman
# --network ns:PATH --ipc ns:PATH, as runc joins the pause container's namespaces under CRI). Checkpoints of such a
# container leave the namespaces to their owner, as for a pod's container (CRIU: external). Not podman's own pods:
# their infra container does not start on the GPU machine (runc: "error reopening /dev/null inside container:
# operation not permitted"), and podman refuses to export containers that join another container's namespaces.
SANDBOX_DIR=/run/gpuckpt-test-sandboxes
new_sandbox() {
  mkdir -p "$SANDBOX_DIR"
  # unshare persists a namespace by bind mount, which needs a mount with private propagation
  mountpoint -q "$SANDBOX_DIR" || { mount --bind "$SANDBOX_DIR" "$SANDBOX_DIR" && mount --make-private "$SANDBOX_DIR"; } || return 1
  touch "$SANDBOX_DIR/$1.net" "$SANDBOX_DIR/$1.ipc" &&
    unshare --net="$SANDBOX_DIR/$1.net" --ipc="$SANDBOX_DIR/$1.ipc" true &&
    nsenter --net="$SANDBOX_DIR/$1.net" busybox ip link set lo up
}
sandbox_args() { echo "--network ns:$SANDBOX_DIR/$1.net --ipc ns:$SANDBOX_DIR/$1.ipc"; }
remove_sandboxes() { # PREFIX: this run's sandboxes
  local f
  for f in "$SANDBOX_DIR/$1"*.net "$SANDBOX_DIR/$1"*.ipc; do
    [ -e "$f" ] || continue
    umount "$f" 2>/dev/null; rm -f "$f"
  done
}
# into_sandbox SRC DST OLD NEW: SRC's archive with its containers' sandbox OLD replaced by NEW (spec.dump and
# config.dump name the namespaces' paths): what a runtime does restoring a checkpoint into a new pod.
into_sandbox() {
  local dir; dir=$(mktemp -d "$WORK/sandbox.XXXXXX")
  tar -C "$dir" -xf "$1" || return 1
  sed -i "s#$SANDBOX_DIR/$3\.#$SANDBOX_DIR/$4.#g" "$dir/spec.dump" "$dir/config.dump" || return 1
  grep -q "$SANDBOX_DIR/$4\.net" "$dir/spec.dump" || { echo "no sandbox $3 in $1"; return 1; }
  (cd "$dir" && tar -c . | zstd -q -f -o "$2") || return 1
  rm -rf "$dir"
}
