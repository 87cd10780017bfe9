#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks for the gpu tests and the benchmark: the CRIU bundle
# (compressed; .carry/bin/criu unpacks it into /opt/gpuckpt/criu at its first run and runs it with its own
# loader), the stripped plugin and the libraries Ubuntu 24.04 may not have, next to it (the plugin's RPATH is
# $ORIGIN; CRIU only loads *.so names, so libfoo.so.N files are ignored).
#   bash test/gpu/make_device_carry.sh [--runtime] [BUILD_DIR]     then name .carry in the device tool's carry list
# --runtime adds what test/gpu/device_node.sh needs to make the machine a container node: podman, runc, conmon,
# catatonit, zstd and busybox as Debian .debs (compressed as they are), and the stripped CLI, agent and OCI hook
# (gpuckpt-bin.tar.xz) with the non-glibc libraries they link (lib-extra.tar.xz; device_node.sh installs only those
# the system lacks). Both are xz-compressed: the carry, with the working tree, must stay under 64 MiB.
# --cri adds what test/gpu/cri_gpu_test.sh installs into its private prefix: containerd 2.1.9 (containerd2.tar.xz:
# containerd, containerd-shim-runc-v2 and ctr; GPUCKPT_CONTAINERD2_TAR, default /work/gpucarry/containerd2.tar.xz),
# runc 1.1.5, docker-registry and busybox-static .debs, and cri-bin.tar.xz (the stripped CLI, agent, OCI hook,
# gpuckpt-nri, cri-tool and podresources-server) with lib-extra.tar.xz for all of them.
# --crio adds what test/gpu/crio_gpu_test.sh installs (no containerd): crio.tar.xz (the stripped crio and pinns
# built from source; GPUCKPT_CRIO_BIN_DIR, default /work/crio-src/bin), the same runc, docker-registry and busybox
# .debs plus conmon and the libraries crio and conmon link (glib, seccomp, sqlite: linked only where the machine
# lacks them), cri-bin.tar.xz and lib-extra.tar.xz.
# Each of the three adds src/: the GPU test scripts with what they source (bash CARRY/src/test/gpu/crio_gpu_test.sh
# CARRY; bash CARRY/src/test/gpu/device_node.sh CARRY), so the carry runs where the checkout is older.
# The device tool carries from the session's own checkout: run this there (or copy .carry there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNTIME=0 CRI=0 CRIO=0
case "${1:-}" in --runtime) RUNTIME=1; shift ;; --cri) CRI=1; shift ;; --crio) CRIO=1; shift ;; esac
BUILD=${1:-$ROOT/build}
CRIU_BUNDLE=${GPUCKPT_CRIU_BUNDLE:-/opt/gpuckpt/criu}   # /opt/gpuckpt/criu-sid: CRIU 4.2.1
CARRY=${GPUCKPT_CARRY_DIR:-$ROOT/.carry}
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/lib"
tar -C "$(dirname "$CRIU_BUNDLE")" -czf "$CARRY/criu.tar.gz" "$(basename "$CRIU_BUNDLE")"
# The wrapper unpacks the bundle under /opt/gpuckpt by the bundle's own name (criu: trixie's 4.1.1; criu-sid: sid's
# 4.2.1, which also has `network-lock skip`).
{ printf '#!/bin/sh\n# CRIU from Debian (%s) with its own loader and libraries (see shared/ENVIRONMENT.md).\n' "$(basename "$CRIU_BUNDLE")"
  printf 'D=${GPUCKPT_CRIU_ROOT:-/opt/gpuckpt/%s}\n' "$(basename "$CRIU_BUNDLE")"; } > "$CARRY/bin/criu"
cat >> "$CARRY/bin/criu" <<'WRAP'
if [ ! -x "$D/usr/sbin/criu" ]; then
  mkdir -p "$(dirname "$D")" && tar -C "$(dirname "$D")" -xzf "$(dirname "$0")/../criu.tar.gz" || exit 1
fi
exec "$D/usr/lib64/ld-linux-x86-64.so.2" --library-path "$D/usr/lib/x86_64-linux-gnu:$D/lib/x86_64-linux-gnu" "$D/usr/sbin/criu" "$@"
WRAP
chmod +x "$CARRY/bin/criu"
strip --strip-debug -o "$CARRY/lib/gpuckpt_plugin.so" "$BUILD/criu-plugin/gpuckpt_plugin.so"
for lib in $(ldd "$BUILD/criu-plugin/gpuckpt_plugin.so" | awk '/=> \//{print $3}'); do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libz.so.*) ;;   # present everywhere, and newer there
    *) cp -L "$lib" "$CARRY/lib/" ;;
  esac
done
if [ "$RUNTIME" = 1 ]; then
  mkdir -p "$CARRY/debs"
  (cd "$CARRY/debs" && apt-get download podman runc conmon catatonit golang-github-containers-common \
     golang-github-containers-image libdevmapper1.02.1 libglib2.0-0 libgpgme11 libassuan0 libgpg-error0 libsubid4 \
     busybox-static zstd >/dev/null 2>&1) || { echo "apt-get download of the runtime .debs failed" >&2; exit 1; }
  extra=$(mktemp -d) bins=$(mktemp -d)
  for b in cli/gpuckpt agent/gpuckpt-agent oci-hook/gpuckpt-oci-hook; do
    strip --strip-debug -o "$bins/$(basename "$b")" "$BUILD/$b"
    for lib in $(ldd "$BUILD/$b" | awk '/=> \//{print $3}'); do
      case $(basename "$lib") in libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*) ;; *) cp -Ln "$lib" "$extra/" ;; esac
    done
  done
  XZ_OPT=-9 tar -C "$extra" -cJf "$CARRY/lib-extra.tar.xz" .
  XZ_OPT=-9 tar -C "$bins" -cJf "$CARRY/gpuckpt-bin.tar.xz" .
  rm -rf "$extra" "$bins"
fi
# cri_carry DEB...: the .debs (from apt's cache or downloaded), cri-bin.tar.xz and lib-extra.tar.xz of the CRI tests
cri_carry() {
  local deb extra bins b lib
  mkdir -p "$CARRY/debs"
  for deb in runc_1.1.5+ds1-1+deb12u1_amd64.deb docker-registry_2.8.2+ds1-1_amd64.deb busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb "$@"; do
    if [ -f "/var/cache/apt/archives/$deb" ]; then cp "/var/cache/apt/archives/$deb" "$CARRY/debs/"
    else (cd "$CARRY/debs" && apt-get download "${deb%%_*}" >/dev/null) || { echo "cannot get $deb" >&2; exit 1; }
    fi
  done
  extra=$(mktemp -d) bins=$(mktemp -d)
  for b in cli/gpuckpt agent/gpuckpt-agent oci-hook/gpuckpt-oci-hook nri-plugin/gpuckpt-nri test/e2e/cri-tool \
           test/podresources/podresources-server; do
    strip --strip-debug -o "$bins/$(basename "$b")" "$BUILD/$b"
    for lib in $(ldd "$BUILD/$b" | awk '/=> \//{print $3}'); do
      # libxml2 (libarchive's) and its ICU: Ubuntu 24.04 has libxml2.so.2 (with its own ICU 74); ICU 72's 33 MB
      # would push the carry past the device tool's 64 MiB
      case $(basename "$lib") in libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libxml2.so.*|libicu*) ;; *) cp -Ln "$lib" "$extra/" ;; esac
    done
  done
  XZ_OPT=-9 tar -C "$extra" -cJf "$CARRY/lib-extra.tar.xz" .
  XZ_OPT=-9 tar -C "$bins" -cJf "$CARRY/cri-bin.tar.xz" .
  rm -rf "$extra" "$bins"
}
if [ "$CRI" = 1 ]; then
  cp "${GPUCKPT_CONTAINERD2_TAR:-/work/gpucarry/containerd2.tar.xz}" "$CARRY/containerd2.tar.xz"
  cri_carry
fi
if [ "$CRIO" = 1 ]; then
  cri_carry conmon_2.1.6+ds1-1_amd64.deb libglib2.0-0_2.74.6-2+deb12u9_amd64.deb libseccomp2_2.5.4-1+deb12u1_amd64.deb \
    libsqlite3-0_3.40.1-2+deb12u2_amd64.deb
  crio_bin=${GPUCKPT_CRIO_BIN_DIR:-/work/crio-src/bin}
  bins=$(mktemp -d)
  strip -o "$bins/crio" "$crio_bin/crio"
  cp "$crio_bin/pinns" "$bins/"
  XZ_OPT='-9 -T2' tar -C "$bins" -cJf "$CARRY/crio.tar.xz" crio pinns
  rm -rf "$bins"
fi
# src/: the GPU test scripts with what they source and install, and the two GPU fixtures wrong_gpu matches against
# (bash CARRY/src/test/gpu/SCRIPT CARRY), so the carry runs where the checkout is older
if [ "$RUNTIME$CRI$CRIO" != 000 ]; then
  for f in test/gpu scripts/lib oci-hook/gpuckpt-hook.json oci-hook/gpuckpt-hook-poststop.json \
           charts/gpuckpt/files/host-files.sh bench/hash_floor.py test/fixtures/nvidia-h200 test/fixtures/nvidia-h100-8gpu; do
    mkdir -p "$CARRY/src/$(dirname "$f")" && cp -r "$ROOT/$f" "$CARRY/src/$f"
  done
fi
du -sh "$CARRY"; ls -l "$CARRY" "$CARRY/lib"
