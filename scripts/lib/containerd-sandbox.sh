# shellcheck shell=bash
# Sourced by tests: a private containerd (1.7 or 2.x, installed by scripts/setup.sh) under one work directory,
# with its own root, state, gRPC socket and NRI socket, so it never touches a system containerd.
#   CTRD_BIN_DIR=DIR                  (before ctrd_start) the containerd, ctr and shim to run: default the
#                                     directory of the `containerd` on PATH (1.7); setup.sh puts 2.1 in
#                                     $GPUCKPT_PREFIX/containerd2/usr/bin. The config format follows the version.
#   CTRD_CNI_BIN_DIR=DIR              (before ctrd_start, optional, 2.x) where the CNI plugins are (Debian's
#                                     containernetworking-plugins: /usr/lib/cni); WORK/cni holds the network's
#                                     config (none there: the runtime reports its network not ready)
#   CTRD_CRIU_WORK_PATH=DIR           (before ctrd_start, optional) runc's CriuWorkPath option: CRIU's dump.log and
#                                     restore.log go there (by default into the task's bundle, which containerd
#                                     deletes when a restore fails, taking CRIU's reasons with it)
#   CTRD_CDI_SPEC_DIR=DIR             (before ctrd_start, optional, 2.x) CDI on, its spec files read from DIR
#                                     only (a DRA driver's devices); unset: CDI off
#   CTRD_WRAPPER=(PROGRAM ARGS...)   (before ctrd_start, optional) a command that execs containerd, the rest of
#                                     its command line appended (k8s-sandbox.sh: unshare into the node's mounts)
#   ctrd_start WORK [NRI_PLUGIN_DIR]  writes WORK/containerd.toml and starts containerd (runc, cgroupfs,
#                                     restrict_oom_score_adj, NRI on, a local pause image). Sets CTRD_SOCK
#                                     CTRD_PID CTRD_NRI_SOCK CTRD_LOG CTRD_VERSION CTRD_ROOT. Fails (after
#                                     printing the log) if the socket does not answer within 20 s. containerd,
#                                     its shims, runc and CRIU inherit the caller's environment: CRIU_LIBS_DIR
#                                     set there is where CRIU loads its plugins from.
#   ctrd_import_image PODMAN_IMAGE    copies a podman image into containerd's k8s.io namespace
#   ctrd_ctr ARGS...                  ctr against this containerd (namespace k8s.io)
#   ctrd_stop                         stops containerd, its shims (1.7's and 2.x's pod shims) and their containers;
#                                     unmounts; safe twice
# The pause image is localhost/gpuckpt-pause:latest, made from the local busybox image (no registry here).

CTRD_PAUSE_IMAGE=localhost/gpuckpt-pause:latest

ctrd_ctr() { "$CTRD_BIN_DIR/ctr" --address "$CTRD_SOCK" --namespace k8s.io "$@"; }

ctrd_start() {
  local work=$1 nri_plugins=${2:-$1/nri-plugins} _
  CTRD_BIN_DIR=${CTRD_BIN_DIR:-$(dirname "$(command -v containerd)")}
  CTRD_WORK=$work CTRD_SOCK=$work/containerd.sock CTRD_NRI_SOCK=$work/nri.sock CTRD_LOG=$work/containerd.log
  # shellcheck disable=SC2034 # for the caller: where containerd keeps containers (CRI restore work dirs)
  CTRD_ROOT=$work/root
  CTRD_VERSION=$("$CTRD_BIN_DIR/containerd" --version | awk '{sub(/^v/, "", $3); print $3}')
  mkdir -p "$work/root" "$work/state" "$nri_plugins" "$work/nri-conf"
  case "$CTRD_VERSION" in
    1.*) ctrd_config_v2 "$work" "$nri_plugins" ;;
    2.*) ctrd_config_v3 "$work" "$nri_plugins" ;;
    *) echo "containerd-sandbox: $CTRD_BIN_DIR/containerd reports version '$CTRD_VERSION' (1.x or 2.x expected)" >&2
       return 1 ;;
  esac > "$work/containerd.toml"
  # the shim is found on PATH: this containerd's own
  PATH=$CTRD_BIN_DIR:$PATH ${CTRD_WRAPPER[@]+"${CTRD_WRAPPER[@]}"} "$CTRD_BIN_DIR/containerd" --config "$work/containerd.toml" > "$CTRD_LOG" 2>&1 &
  CTRD_PID=$!
  for _ in $(seq 200); do
    "$CTRD_BIN_DIR/ctr" --address "$CTRD_SOCK" version >/dev/null 2>&1 && break
    kill -0 "$CTRD_PID" 2>/dev/null || break
    sleep 0.1
  done
  if ! "$CTRD_BIN_DIR/ctr" --address "$CTRD_SOCK" version >/dev/null 2>&1; then
    tail -n 30 "$CTRD_LOG" >&2
    return 1
  fi
  ctrd_import_pause_image
}

# The top-level keys both config versions share (before any table): VERSION WORK
ctrd_config_head() {
  local work=$2
  cat <<TOML
version = $1
root = "$work/root"
state = "$work/state"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$work/containerd.sock.ttrpc"
[debug]
  level = "info"
TOML
}

# containerd 1.x: config version 2, CRI under io.containerd.grpc.v1.cri
ctrd_config_v2() {
  local work=$1 nri_plugins=$2
  ctrd_config_head 2 "$work"
  cat <<TOML
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$CTRD_PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: never lower a container's oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "$work/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
$(ctrd_config_criu_work_path "      ")
TOML
  ctrd_config_nri "$work" "$nri_plugins"
}

# containerd 2.x: config version 3; CRI split into io.containerd.cri.v1.runtime (runtimes, CNI, security) and
# io.containerd.cri.v1.images (pulls, the sandbox image as pinned_images.sandbox). CRI checkpoint/restore needs no
# switch: runc runs CRIU (found on PATH) with the environment containerd has.
ctrd_config_v3() {
  local work=$1 nri_plugins=$2
  ctrd_config_head 3 "$work"
  cat <<TOML
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$CTRD_PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$work/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: never lower a container's oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
$(if [ -n "${CTRD_CDI_SPEC_DIR:-}" ]; then printf '  enable_cdi = true\n  cdi_spec_dirs = ["%s"]\n' "$CTRD_CDI_SPEC_DIR"
  else echo '  enable_cdi = false'; fi)
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    conf_dir = "$work/cni"
$([ -n "${CTRD_CNI_BIN_DIR:-}" ] && printf '    bin_dirs = ["%s"]\n' "$CTRD_CNI_BIN_DIR")
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
$(ctrd_config_criu_work_path "        ")
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
  ctrd_config_nri "$work" "$nri_plugins"
}

# runc's CriuWorkPath option (same key in both versions) when CTRD_CRIU_WORK_PATH is set: INDENT
ctrd_config_criu_work_path() {
  [ -n "${CTRD_CRIU_WORK_PATH:-}" ] && printf '%sCriuWorkPath = "%s"\n' "$1" "$CTRD_CRIU_WORK_PATH"
  return 0
}

# NRI (same keys in both versions): enabled, on this containerd's own socket
ctrd_config_nri() {
  cat <<TOML
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  plugin_path = "$2"
  plugin_config_path = "$1/nri-conf"
  socket_path = "$CTRD_NRI_SOCK"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "5s"
TOML
}

# ctrd_registry_host HOST:PORT: pulls from this registry go over plain HTTP (a test registry on 127.0.0.1)
ctrd_registry_host() {
  mkdir -p "$CTRD_WORK/certs.d/$1"
  printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve", "push"]\n  skip_verify = true\n' \
    "$1" "$1" > "$CTRD_WORK/certs.d/$1/hosts.toml"
}

ctrd_import_image() {
  local image=$1 tar=$CTRD_WORK/image-$$.tar
  podman save -q --format oci-archive -o "$tar" "$image" >/dev/null || return 1
  ctrd_ctr images import --base-name "${image%%:*}" "$tar" >/dev/null || { rm -f "$tar"; return 1; }
  rm -f "$tar"
}

# The CRI sandbox ("pause") container: busybox sleeping; containerd starts it for every pod.
# ctrd_make_pause_image: makes it in podman's store, once
ctrd_make_pause_image() {
  local base=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox} rootfs c
  podman image exists "$CTRD_PAUSE_IMAGE" && return 0
  rootfs=$(mktemp /tmp/gpuckpt-pause-rootfs.XXXXXX) || return 1
  c=$(podman create "$base" true) || { rm -f "$rootfs"; return 1; }
  podman export -o "$rootfs" "$c" >/dev/null
  podman rm -f "$c" >/dev/null
  podman import --change 'CMD ["/bin/sleep", "2147483647"]' --change 'STOPSIGNAL SIGKILL' \
    "$rootfs" "$CTRD_PAUSE_IMAGE" >/dev/null || { rm -f "$rootfs"; return 1; }
  rm -f "$rootfs"
}

ctrd_import_pause_image() {
  ctrd_make_pause_image && ctrd_import_image "$CTRD_PAUSE_IMAGE"
}

# The shims this containerd started: their command line names its socket (-address SOCK). containerd 2.x runs one
# shim per pod that serves the sandbox and its containers and outlives their tasks, with no shim.pid left in the
# state dir once they are deleted.
ctrd_shim_pids() {
  local p argv
  for p in /proc/[0-9]*; do
    mapfile -d '' -t argv 2>/dev/null < "$p/cmdline" || continue
    [[ "${argv[0]:-}" == */containerd-shim-* ]] || continue
    printf '%s\n' "${argv[@]}" | grep -qxF -- "$CTRD_SOCK" && echo "${p#/proc/}"
  done
  return 0
}

ctrd_stop() {
  [ -n "${CTRD_SOCK:-}" ] || return 0
  local id m
  if [ -n "${CTRD_PID:-}" ] && kill -0 "$CTRD_PID" 2>/dev/null; then
    for id in $(ctrd_ctr tasks ls -q 2>/dev/null); do ctrd_ctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
    sleep 0.3
    for id in $(ctrd_ctr tasks ls -q 2>/dev/null); do ctrd_ctr tasks delete -f "$id" >/dev/null 2>&1; done
    for id in $(ctrd_ctr containers ls -q 2>/dev/null); do ctrd_ctr containers delete "$id" >/dev/null 2>&1; done
    kill "$CTRD_PID" 2>/dev/null
    wait "$CTRD_PID" 2>/dev/null
  fi
  # shims of this containerd that outlived it: their pid files are in our state dir (1.7), or they name its socket
  for m in "$CTRD_WORK"/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
    [ -f "$m" ] && kill -9 "$(cat "$m")" 2>/dev/null
  done
  # (re-read before each signal: only processes that are this containerd's shims now)
  for id in $(ctrd_shim_pids); do kill "$id" 2>/dev/null; done   # on SIGTERM a shim removes its /run/containerd/s socket
  for _ in $(seq 20); do [ -z "$(ctrd_shim_pids)" ] && break; sleep 0.1; done
  for id in $(ctrd_shim_pids); do kill -9 "$id" 2>/dev/null; done
  while read -r _ m _; do
    case "$m" in "$CTRD_WORK"/*) umount -l "$m" 2>/dev/null ;; esac
  done < <(sort -r -k2 /proc/self/mounts)
  CTRD_PID='' CTRD_SOCK=''
  return 0
}

# A registry on 127.0.0.1 for the base images (containerd 2.1 pulls the checkpoint's base image by rootfsImageRef
# at every restore, even when it is local, and that pull ignores certs.d: only a loopback registry may answer in
# plain HTTP there): ctrd_start_registry DIR starts Debian's docker-registry with its storage
# under DIR on a free port of CTRD_REGISTRY_LISTEN (default 127.0.0.1; 0.0.0.0: also the machine's other
# addresses) and waits until it answers; sets REGISTRY (127.0.0.1:port) and REGISTRY_PID. Fails (after
# printing its log) when it does not answer within 10 s.
ctrd_start_registry() {
  local dir=$1 port _ listen=${CTRD_REGISTRY_LISTEN:-127.0.0.1}
  port=$(python3 -c 'import socket, sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$listen")
  REGISTRY=127.0.0.1:$port
  mkdir -p "$dir"
  printf 'version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %s, secret: gpuckpt-test}\n' \
    "$dir/storage" "$listen:$port" > "$dir/registry.yml"
  docker-registry serve "$dir/registry.yml" > "$dir/registry.log" 2>&1 &
  # shellcheck disable=SC2034 # read by the sourcing test (its cleanup stops it)
  REGISTRY_PID=$!
  for _ in $(seq 100); do curl -sf "http://$REGISTRY/v2/" >/dev/null && return 0; sleep 0.1; done
  cat "$dir/registry.log" >&2
  return 1
}
