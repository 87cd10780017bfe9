#!/usr/bin/env bash
# Builds the gpuckpt image (Containerfile) from the build tree with podman, offline: no registry is contacted.
#
#   scripts/build-image.sh [TAG]      default TAG: localhost/gpuckpt:<chart appVersion>
#
#   BUILD_DIR    the CMake build tree (default build; scripts/build.sh makes it)
#   BASE_IMAGE   the base to build from (default: localhost/gpuckpt-base:trixie-ARCH, imported once from the trixie
#                root scripts/setup.sh debootstraps; pass docker.io/library/debian:trixie-slim where a registry is
#                reachable)
# The image gets this machine's architecture; for a multi-arch image build on each and join them with
# `podman manifest create` / `podman manifest add`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PREFIX=${GPUCKPT_PREFIX:-/opt/gpuckpt}
log() { printf '[build-image] %s\n' "$*" >&2; }
die() { printf '[build-image] ERROR: %s\n' "$*" >&2; exit 1; }

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/gpuckpt/Chart.yaml)
TAG=${1:-localhost/gpuckpt:$version}
command -v podman >/dev/null || die "podman not found (scripts/setup.sh installs it)"
[ -x "$BUILD_DIR/agent/gpuckpt-agent" ] || die "$BUILD_DIR is not built: run scripts/build.sh first"

ctx=$(mktemp -d /tmp/gpuckpt-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
cmake --install "$BUILD_DIR" --prefix "$ctx/rootfs/usr" >/dev/null || die "cmake --install $BUILD_DIR failed"
for f in usr/bin/gpuckpt-agent usr/bin/gpuckpt usr/bin/gpuckpt-nri usr/libexec/gpuckpt/gpuckpt-oci-hook usr/lib/gpuckpt/gpuckpt_plugin.so; do
  [ -f "$ctx/rootfs/$f" ] || die "the install of $BUILD_DIR has no $f"
done

# The agent's, the CLI's and gpuckpt-nri's libraries beyond glibc, from this build machine (the ones they were linked against).
libdir=$ctx/rootfs/usr/lib/gpuckpt/lib
mkdir -p "$libdir"
for bin in "$BUILD_DIR/agent/gpuckpt-agent" "$BUILD_DIR/cli/gpuckpt" "$BUILD_DIR/nri-plugin/gpuckpt-nri"; do   # the build tree's: no RUNPATH yet
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case $name in libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) continue ;; esac
    cp -L "$path" "$libdir/$name"
  done
  missing=$(ldd "$bin" | grep 'not found' || true)
  [ -z "$missing" ] || die "$bin: libraries not found here: $missing"
done

# The base: a local stand-in for the registry's Debian image, imported once from the debootstrap'd trixie root.
if [ -z "${BASE_IMAGE:-}" ]; then
  arch=$(dpkg --print-architecture)
  BASE_IMAGE=localhost/gpuckpt-base:trixie-$arch
  if ! podman image exists "$BASE_IMAGE"; then
    root=$PREFIX/roots/trixie-$arch
    [ -x "$root/bin/sh" ] || die "no trixie root at $root to make the base image from: run scripts/setup.sh"
    log "importing $root as $BASE_IMAGE (once)"
    tar -C "$root" --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -c . | podman import -q - "$BASE_IMAGE" >/dev/null \
      || die "podman import of $root failed"
  fi
fi

log "building $TAG from $BASE_IMAGE"
podman build -q --pull=never --build-arg "BASE_IMAGE=$BASE_IMAGE" -f Containerfile -t "$TAG" "$ctx" >/dev/null \
  || die "podman build failed"
log "built $TAG ($(podman image inspect --format '{{.Architecture}}, {{.Size}} bytes' "$TAG"))"
