#!/usr/bin/env bash
# Turns the GPU machine (no container runtime, no registry) into a gpuckpt GPU node, from one carried folder
# made by test/gpu/make_device_carry.sh --runtime:
#   1. CRIU 4.1.1 (the trixie bundle) as `criu` on PATH;
#   2. podman 4.3 + runc + conmon from compressed Debian .debs (test/gpu/device_runtime.sh says how, and what
#      this machine cannot do);
#   3. gpuckpt's host files put in place by the chart's own installer (charts/gpuckpt/files/host-files.sh): the
#      OCI hook into podman's hooks.d, the CRIU plugin into CRIU's default plugin directory (/usr/lib/criu), the
#      CLI and the agent into /usr/local/bin;
#   4. a CDI spec for the node's GPUs (test/gpu/make_cdi_spec.py), as the NVIDIA toolkit writes on Kubernetes
#      GPU nodes, so containers get GPUs as `--device nvidia.com/gpu=N`;
#   5. a busybox base image.
#   bash test/gpu/device_node.sh CARRY_DIR
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=$(cd "${1:?usage: device_node.sh CARRY_DIR}" && pwd)
log() { printf '[node] %s\n' "$*" >&2; }

# 1. CRIU (runc finds it on PATH)
printf '#!/bin/sh\nexec %s/bin/criu "$@"\n' "$CARRY" > /usr/local/sbin/criu
chmod 755 /usr/local/sbin/criu
log "$(criu --version | head -1); criu check: $(criu check 2>&1 | tail -1)"


grep -qx "network-lock skip" /etc/criu/runc.conf 2>/dev/null && rm -f /etc/criu/runc.conf   # left by an earlier try

# 2. podman + runc
. "$SRC/test/gpu/device_runtime.sh"
runtime_install "$CARRY/debs"
ln -sf "$PODMAN" /usr/local/bin/podman
for tool in zstd busybox; do
  [ -x "$RUNTIME_PREFIX/root/usr/bin/$tool" ] && ln -sf "$RUNTIME_PREFIX/root/usr/bin/$tool" /usr/local/bin/$tool
  [ -x "$RUNTIME_PREFIX/root/bin/$tool" ] && ln -sf "$RUNTIME_PREFIX/root/bin/$tool" /usr/local/bin/$tool
done

# 3. gpuckpt's host files, by the chart's installer; the CLI and agent beside them. The libraries they link
# that this distribution lacks (by soname) go into their own directory on the loader's path.
mkdir -p /usr/local/lib/gpuckpt-extra /usr/local/lib/gpuckpt
tar -C /usr/local/lib/gpuckpt-extra -xJf "$CARRY/lib-extra.tar.xz"
link_missing_libraries /usr/local/lib/gpuckpt /usr/local/lib/gpuckpt-extra/*.so*
echo /usr/local/lib/gpuckpt > /etc/ld.so.conf.d/zz-gpuckpt.conf
ldconfig
bins=$(mktemp -d)
tar -C "$bins" -xJf "$CARRY/gpuckpt-bin.tar.xz"
install -m 755 "$bins/gpuckpt" "$bins/gpuckpt-agent" /usr/local/bin/
GPUCKPT_HOST_MOUNT=/ GPUCKPT_HOOKS_DIR=/etc/containers/oci/hooks.d GPUCKPT_CRIU_PLUGIN_DIR=/usr/lib/criu \
GPUCKPT_INSTALL_DIR=/usr/local GPUCKPT_HOOK_JSON_DIR="$SRC/oci-hook" GPUCKPT_SRC_HOOK="$bins/gpuckpt-oci-hook" \
GPUCKPT_SRC_PLUGIN="$CARRY/lib/gpuckpt_plugin.so" GPUCKPT_OWNER=device-node \
  sh "$SRC/charts/gpuckpt/files/host-files.sh" install
rm -rf "$bins"
# Libraries the plugin needs that this distribution lacks (make_device_carry.sh copied them beside it).
for lib in "$CARRY"/lib/*.so.*; do [ -e "$lib" ] && cp --update=none "$lib" /usr/lib/criu/; done
mkdir -p /var/lib/gpuckpt

# 4. CDI spec
python3 "$SRC/test/gpu/make_cdi_spec.py" --out /etc/cdi/nvidia.json

# 5. base image: busybox, with the usual merged-/usr links so host /usr can be bound in
if ! podman image exists localhost/gpuckpt-base; then
  root=$(mktemp -d)
  mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc,out,usr,opt}
  cp "$(readlink -f "$(command -v busybox)")" "$root/bin/busybox"
  for app in $("$root/bin/busybox" --list); do [ "$app" = busybox ] || ln -sf busybox "$root/bin/$app"; done
  ln -s usr/lib "$root/lib"
  ln -s usr/lib64 "$root/lib64"
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  tar -C "$root" -c . | podman import -q - localhost/gpuckpt-base >/dev/null
  rm -rf "$root"
fi
log "node ready: podman $(podman --version | awk '{print $3}'), hook in /etc/containers/oci/hooks.d, plugin in /usr/lib/criu"
