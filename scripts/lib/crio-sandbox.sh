# shellcheck shell=bash
# Sourced by tests: a private CRI-O (built from source: docs/kubernetes.md "CRI-O for real"; CRI-O is no Debian
# package) under one work directory, with its own root, runroot, CRI socket, NRI socket and config dir, so it never
# touches a system CRI-O or podman's storage.
#   crio_start WORK HOOKS_DIR   writes WORK/crio.conf (runc, cgroupfs, no infra container, NRI on its own socket,
#                               CRIU support, hooks_dir = HOOKS_DIR) and starts `crio`. Sets CRIO_SOCK CRIO_PID
#                               CRIO_NRI_SOCK CRIO_LOG. Returns 1 if crio exits or does not report ready
#                               (sd_notify) within 30 s (the log says why).
#   crio_import_image IMAGE     copies a podman image into CRI-O's storage (before RunPodSandbox: the pause
#                               image localhost/gpuckpt-pause:latest, which scripts/lib/containerd-sandbox.sh makes)
#   crio_stop                   stops CRI-O, the conmon monitors and containers it started; unmounts; safe twice
# Environment: CRIO (the crio binary; default `crio` on PATH), PINNS (default: beside crio), CONMON, RUNC,
# CRIO_PAUSE_IMAGE. Drop-ins the caller puts in WORK/conf.d before crio_start apply over crio.conf. Optional, for
# a CRI-O under a kubelet (scripts/lib/k8s-sandbox.sh):
#   CRIO_WRAPPER=(PROGRAM ARGS...)   a command that execs crio, the rest of its command line appended (the node's
#                                     network namespace)
#   CRIO_CNI_BIN_DIR=DIR              where the CNI plugins are (Debian's: /usr/lib/cni); WORK/cni holds the
#                                     network's config
#   CRIO_INSECURE_REGISTRY="HOST:PORT..."  registries CRI-O pulls from over plain HTTP (the tests' registry, by
#                                     each name it has)
#   CRIU_LIBS_DIR=DIR                 where CRIU loads its plugins from: passed through conmon to the runc it starts
# Where this machine's root holds fewer capabilities than the kernel has (a container host: the CPU machines lack
# CAP_SYS_RESOURCE), CRI-O runs runc through WORK/runc-within-caller, which fits a bundle to what the caller holds
# before runc creates or restores it, as containerd does by itself: its oomScoreAdj no lower than the caller's own
# (containerd's restrict_oom_score_adj; the kubelet gives node-critical pods -997) and its capabilities within
# the caller's bounding set (containerd gives a privileged container the caller's capabilities, CRI-O every one
# the kernel knows).
# No signature_policy is set (CRI-O then reads the host's /etc/containers/policy.json, podman's): CRI-O 1.36.3
# refuses every restore from a checkpoint image when one is, "signature validation is not supported for container
# restore" (server/container_restore.go looks at the policy path, set or namespaced).

crio_start() {
  local work=$1 hooks_dir=$2 crio=${CRIO:-crio}
  local pinns=${PINNS:-$(dirname "$(command -v "$crio")")/pinns}
  CRIO_WORK=$work CRIO_SOCK=$work/crio.sock CRIO_NRI_SOCK=$work/nri.sock CRIO_LOG=$work/crio.log
  local monitor_env="\"PATH=$PATH\"" plugin_dirs='' registries=()
  mkdir -p "$work/root" "$work/runroot" "$work/conf.d" "$work/nri-plugins" "$work/nri-conf" "$work/cni" "$work/logs"
  [ -z "${CRIU_LIBS_DIR:-}" ] || monitor_env+=", \"CRIU_LIBS_DIR=$CRIU_LIBS_DIR\""
  [ -z "${CRIO_CNI_BIN_DIR:-}" ] || plugin_dirs="plugin_dirs = [\"$CRIO_CNI_BIN_DIR\"]"
  # its own registries.conf (containers-registries.conf(5), through --registries-conf), not the host's
  # /etc/containers/registries.conf, which the tests leave alone
  printf 'unqualified-search-registries = []\n' > "$work/registries.conf"
  local registry
  for registry in ${CRIO_INSECURE_REGISTRY:-}; do
    printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$registry" >> "$work/registries.conf"
  done
  registries=(--registries-conf "$work/registries.conf")
  local runc=${RUNC:-/usr/sbin/runc}
  if ! crio_root_holds_every_capability; then
    crio_runc_within_caller "$runc" > "$work/runc-within-caller" && chmod 755 "$work/runc-within-caller" || return 1
    runc=$work/runc-within-caller
  fi
  cat > "$work/crio.conf" <<TOML
[crio]
root = "$work/root"
runroot = "$work/runroot"
storage_driver = "overlay"
log_dir = "$work/logs"
version_file = "$work/version"
version_file_persist = "$work/version-persist"
clean_shutdown_file = "$work/clean.shutdown"
[crio.api]
listen = "$CRIO_SOCK"
stream_address = "127.0.0.1"
stream_port = "0"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
# an infra container fails here: its oom_score_adj needs CAP_SYS_RESOURCE
drop_infra_ctr = true
hooks_dir = ["$hooks_dir"]
container_exits_dir = "$work/exits"
container_attach_socket_dir = "$work/attach"
namespaces_dir = "$work/ns"
pinns_path = "$pinns"
enable_criu_support = true
[crio.runtime.runtimes.runc]
runtime_path = "$runc"
runtime_root = "$work/runc"
monitor_path = "${CONMON:-/usr/bin/conmon}"
# conmon gets only this environment and hands it to the runc it starts (restores): runc finds criu on the caller's
# PATH, as CRI-O itself does for checkpoints, and CRIU its plugins in CRIU_LIBS_DIR
monitor_env = [$monitor_env]
[crio.image]
# CRI-O makes these directories at start (default under /etc/crio, the host's): the node's own
signature_policy_dir = "$work/policies"
namespaced_auth_dir = "$work/auth"
# pulled (or found) at RunPodSandbox even when no infra container runs: the local busybox-based one
pause_image = "${CRIO_PAUSE_IMAGE:-localhost/gpuckpt-pause:latest}"
[crio.network]
network_dir = "$work/cni"
$plugin_dirs
[crio.nri]
enable_nri = true
nri_listen = "$CRIO_NRI_SOCK"
nri_plugin_dir = "$work/nri-plugins"
nri_plugin_config_dir = "$work/nri-conf"
TOML
  # CRI-O listens on its CRI socket before it loads hooks.d (where a bad entry makes it exit): it is up when it
  # tells systemd READY=1 (sd_notify, after its server is set up), which a datagram socket here receives.
  rm -f "$CRIO_SOCK" "$CRIO_NRI_SOCK" "$work/notify.sock" "$work/ready"
  python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(30)
try:
    while b"READY=1" not in s.recv(4096):
        pass
    open(sys.argv[2], "w").close()
except OSError:
    pass
' "$work/notify.sock" "$work/ready" &
  local notify=$!
  for _ in $(seq 50); do [ -S "$work/notify.sock" ] && break; sleep 0.1; done
  NOTIFY_SOCKET=$work/notify.sock ${CRIO_WRAPPER[@]+"${CRIO_WRAPPER[@]}"} "$crio" --config "$work/crio.conf" \
    --config-dir "$work/conf.d" "${registries[@]}" > "$CRIO_LOG" 2>&1 &
  CRIO_PID=$!
  for _ in $(seq 300); do
    [ -e "$work/ready" ] && break
    kill -0 "$CRIO_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill "$notify" 2>/dev/null || true
  wait "$notify" 2>/dev/null || true
  if [ ! -e "$work/ready" ] || ! kill -0 "$CRIO_PID" 2>/dev/null; then
    kill "$CRIO_PID" 2>/dev/null || true
    wait "$CRIO_PID" 2>/dev/null || true
    CRIO_PID=''
    return 1
  fi
}

# crio_root_holds_every_capability: whether this shell's bounding set holds every capability the kernel has
crio_root_holds_every_capability() {
  local bnd last
  bnd=$(awk '$1 == "CapBnd:" {print $2}' /proc/self/status) last=$(cat /proc/sys/kernel/cap_last_cap)
  (( 16#${bnd:-0} == (1 << (last + 1)) - 1 ))
}

# crio_runc_within_caller RUNC: a runc that, at create, run and restore, raises the bundle's process.oomScoreAdj to
# its own oom_score_adj and drops from the process's capability sets those outside its own bounding set, then
# execs RUNC with the same arguments
crio_runc_within_caller() {
  cat <<SH
#!/bin/sh
# made by scripts/lib/crio-sandbox.sh: see crio_restrict_oom_wrapper there
case " \$* " in
  *" create "*|*" run "*|*" restore "*)
    python3 - "\$@" <<'PY' || exit 1
import json, os, sys
args, bundle = sys.argv[1:], "."
for i, a in enumerate(args):
    if a in ("--bundle", "-b") and i + 1 < len(args):
        bundle = args[i + 1]
    elif a.startswith("--bundle="):
        bundle = a.split("=", 1)[1]
path = os.path.join(bundle, "config.json")
if os.path.exists(path):
    spec = json.load(open(path))
    proc = spec.get("process") or {}
    changed = False
    own = int(open("/proc/self/oom_score_adj").read())
    if proc.get("oomScoreAdj") is not None and proc["oomScoreAdj"] < own:
        proc["oomScoreAdj"] = own
        changed = True
    names = ("CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
             "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT "
             "SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE "
             "AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ "
             "PERFMON BPF CHECKPOINT_RESTORE").split()
    bounding = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("CapBnd:")), 16)
    held = {"CAP_" + n for i, n in enumerate(names) if bounding >> i & 1}
    for key, caps in (proc.get("capabilities") or {}).items():
        kept = [c for c in caps or [] if c in held]
        if caps and kept != caps:
            proc["capabilities"][key] = kept
            changed = True
    if changed:
        with open(path + ".new", "w") as f:
            json.dump(spec, f)
        os.replace(path + ".new", path)
PY
    ;;
esac
exec "$1" "\$@"
SH
}

crio_import_image() {
  podman save -q "$1" | podman --root "$CRIO_WORK/root" --runroot "$CRIO_WORK/runroot" --storage-driver overlay \
    load -q >/dev/null
}

crio_stop() {
  [ -n "${CRIO_WORK:-}" ] || return 0
  local p m
  if [ -n "${CRIO_PID:-}" ] && kill -0 "$CRIO_PID" 2>/dev/null; then
    kill "$CRIO_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$CRIO_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$CRIO_PID" 2>/dev/null || true
    wait "$CRIO_PID" 2>/dev/null || true   # its exit status is not the caller's to judge (callers may run set -e)
  fi
  # containers and their conmon monitors outlive CRI-O: those whose runc state is ours go
  for p in $(runc --root "$CRIO_WORK/runc" list -q 2>/dev/null); do
    runc --root "$CRIO_WORK/runc" kill "$p" KILL 2>/dev/null || true
    runc --root "$CRIO_WORK/runc" delete -f "$p" 2>/dev/null || true
  done
  for p in $(pgrep -x conmon); do
    if tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline" | grep -q -- "$CRIO_WORK/"; then kill -9 "$p" 2>/dev/null || true; fi
  done
  while read -r _ m _; do
    case "$m" in "$CRIO_WORK"/*) umount -l "$m" 2>/dev/null || true ;; esac
  done < <(sort -r -k2 /proc/self/mounts)
  CRIO_PID='' CRIO_WORK=''
  return 0
}
