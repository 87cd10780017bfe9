#!/usr/bin/env bash
# Brings a container runtime to a GPU machine that has none (the device machine: Ubuntu 24.04, no registry),
# from Debian bookworm .debs carried in compressed form (test/gpu/make_device_carry.sh --runtime):
# podman 4.3 + runc 1.1.5 + conmon + catatonit unpacked into a private prefix, with the config podman needs.
# Nothing of the system is replaced: libraries the system lacks are linked into PREFIX/lib and reach the
# binaries through small wrappers (conmon runs with a clean environment, so LD_LIBRARY_PATH set by hand would
# not reach it), and podman's config points at those wrappers.
#
#   source test/gpu/device_runtime.sh; runtime_install DEBS_DIR    sets PODMAN (the podman command to use)
#
# What the machine cannot do, and what is done about it (say so in docs/cuda.md):
# - root there lacks CAP_SYS_RESOURCE, and runc fails "setting rlimit type 7" for every RLIMIT_NOFILE podman
#   puts in the spec (podman always adds one). The runc wrapper removes process.rlimits from the bundle's
#   config.json before runc reads it; the container then keeps the limits it inherits.
# - no iptables (nor netfilter tools of any kind): CRIU 4.1 locks a dumped network namespace with
#   iptables-restore or nftables and has no way to skip that, so containers here share the host's network
#   namespace (netns = "host"), which CRIU does not dump and so does not lock.

RUNTIME_PREFIX=${RUNTIME_PREFIX:-/opt/gpuckpt-runtime}

runtime_log() { printf '[runtime] %s\n' "$*" >&2; }

# link_missing_libraries DEST LIB...: links into DEST each LIB whose soname the system's loader does not know.
link_missing_libraries() {
  local dest=$1 f so; shift
  for f in "$@"; do
    [ -e "$f" ] || continue
    so=$(basename "$f")
    ldconfig -p | grep -q "^[[:space:]]*$so " || ln -sf "$f" "$dest/$so"
  done
}

runtime_install() {
  local debs=$1 root=$RUNTIME_PREFIX/root lib=$RUNTIME_PREFIX/lib bin=$RUNTIME_PREFIX/bin f
  mkdir -p "$root" "$lib" "$bin"
  for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$root"; done
  # Libraries the system lacks (by soname), and only those: the system's own stay in charge.
  link_missing_libraries "$lib" "$root"/usr/lib/x86_64-linux-gnu/*.so.* "$root"/lib/x86_64-linux-gnu/*.so.*
  for prog in podman:usr/bin/podman conmon:usr/bin/conmon runc-real:usr/sbin/runc; do
    cat > "$bin/${prog%%:*}" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $root/${prog#*:} "\$@"
WRAP
    chmod 755 "$bin/${prog%%:*}"
  done
  cat > "$bin/runc" <<'WRAP'
#!/bin/sh
# runc without rlimits in the spec (this machine's root cannot set them): see device_runtime.sh.
bundle=""
prev=""
for a in "$@"; do
  case "$prev" in --bundle|-b) bundle=$a ;; esac
  case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
  prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  python3 - "$bundle/config.json" <<'PY'
import json, sys
path = sys.argv[1]
with open(path) as f:
    spec = json.load(f)
if spec.get("process", {}).pop("rlimits", None) is not None:
    with open(path + ".tmp", "w") as f:
        json.dump(spec, f)
    import os
    os.replace(path + ".tmp", path)
PY
fi
WRAP
  echo "exec $bin/runc-real \"\$@\"" >> "$bin/runc"
  chmod 755 "$bin/runc"
  ln -sf "$root/usr/bin/catatonit" "$bin/catatonit" 2>/dev/null || true
  mkdir -p /etc/containers /usr/share/containers /etc/containers/oci/hooks.d
  cp -n "$root"/usr/share/containers/* /usr/share/containers/ 2>/dev/null || true
  [ -f /etc/containers/policy.json ] || cp "$root/etc/containers/policy.json" /etc/containers/policy.json
  local driver=vfs
  grep -qw overlay /proc/filesystems && driver=overlay
  cat > /etc/containers/storage.conf <<CONF
[storage]
driver = "$driver"
graphroot = "/var/tmp/gpuckpt-storage"
runroot = "/run/gpuckpt-storage"
CONF
  cat > /etc/containers/containers.conf <<CONF
[containers]
netns = "host"
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
conmon_path = ["$bin/conmon"]
runtime = "runc"
hooks_dir = ["/etc/containers/oci/hooks.d"]
helper_binaries_dir = ["$bin", "$root/usr/libexec/podman"]
[engine.runtimes]
runc = ["$bin/runc"]
CONF
  PODMAN="$bin/podman"
  export PATH="$bin:$PATH"
  runtime_log "podman $("$PODMAN" --version 2>&1) with runc $("$bin/runc-real" --version | head -1) (storage: $driver)"
}
