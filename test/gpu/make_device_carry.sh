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
# --k8s adds, to what --cri carries, what test/gpu/kubelet_gpu_test.sh needs for a one-node Kubernetes cluster:
# etcd as scripts/setup-k8s.sh built it (GPUCKPT_K8S_BIN, default /opt/gpuckpt/k8s/v1.37.2/bin), kubelet,
# kube-apiserver, kube-scheduler, kube-controller-manager and kubectl as one program
# (k8s/toolchain/kubernetes/multicall, built here from setup-k8s.sh's module and build caches: the same packages,
# their shared code once; links by each name; the scheduler and controller-manager for the DRA variant), the tests'
# sim-device-plugin, podresources-get and sim-dra-driver built here from this checkout's
# test/k8s/sim-device-plugin, Debian's CNI plugins bridge, host-local and loopback
# (/usr/lib/cni), all stripped, as xz pieces (k8s-NAME.tar.xz; every piece unpacks into one directory: bin/, cni/), and
# the openssl and libssl3 .debs (used only where the machine has no openssl). CRIU is sid's 4.2.1 there
# (GPUCKPT_CRIU_BUNDLE default /opt/gpuckpt/criu-sid): a pod network needs `network-lock skip` from runc.conf.
# The device tool carries at most 64 MiB with the working tree: while the carry is over GPUCKPT_CARRY_LIMIT_MIB
# (default 56) its largest k8s pieces move to CARRY-1/, which a first device call unpacks
# (bash CARRY-1/unpack.sh DIR) for the second (KUBELET_GPU_K8S_DIR=DIR bash CARRY/src/test/gpu/kubelet_gpu_test.sh
# CARRY); the script ends with the sizes and the device commands. Measured 2026-12-04 (v1.37.2, xz -9): CARRY 53.8
# MiB (containerd2 13.7, debs 11.5, criu 8.9, lib-extra 6.4, k8s-tools 5.0, lib 4.2, cri-bin 3.5, src 0.5), CARRY-1
# 30.7 MiB (k8s-core 24.4: the multi-call program, 141 MB stripped; k8s-etcd 6.3); 5-7 min on 2 loaded cores.
# Each of these adds src/: the GPU test scripts with what they source (bash CARRY/src/test/gpu/crio_gpu_test.sh
# CARRY; bash CARRY/src/test/gpu/device_node.sh CARRY), so the carry runs where the checkout is older.
# The device tool carries from the session's own checkout: run this there (or copy .carry there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNTIME=0 CRI=0 CRIO=0 K8S=0
case "${1:-}" in --runtime) RUNTIME=1; shift ;; --cri) CRI=1; shift ;; --crio) CRIO=1; shift ;; --k8s) CRI=1 K8S=1; shift ;; esac
BUILD=${1:-$ROOT/build}
if [ "$K8S" = 1 ]; then
  CRIU_BUNDLE=${GPUCKPT_CRIU_BUNDLE:-/opt/gpuckpt/criu-sid} CARRY=${GPUCKPT_CARRY_DIR:-$ROOT/.carry-k8s}
else
  CRIU_BUNDLE=${GPUCKPT_CRIU_BUNDLE:-/opt/gpuckpt/criu}   # /opt/gpuckpt/criu-sid: CRIU 4.2.1
  CARRY=${GPUCKPT_CARRY_DIR:-$ROOT/.carry}
fi
rm -rf "$CARRY"
[ "$K8S" = 0 ] || rm -rf "$CARRY-1"
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
  ctrd_tar=${GPUCKPT_CONTAINERD2_TAR:-/work/gpucarry/containerd2.tar.xz}
  if [ -f "$ctrd_tar" ]; then
    cp "$ctrd_tar" "$CARRY/containerd2.tar.xz"
  else   # from scripts/setup.sh's containerd 2.1 (stripped)
    ctrd_bin=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin bins=$(mktemp -d)
    for b in containerd containerd-shim-runc-v2 ctr; do strip -o "$bins/$b" "$ctrd_bin/$b" || exit 1; done
    XZ_OPT=-9 tar -C "$bins" -cJf "$CARRY/containerd2.tar.xz" containerd containerd-shim-runc-v2 ctr
    rm -rf "$bins"
  fi
  if [ "$K8S" = 1 ]; then cri_carry openssl libssl3; else cri_carry; fi
fi
# k8s_piece NAME DIR/FILE...: k8s-NAME.tar.xz of the stripped FILEs, each under DIR/ (bin/ or cni/)
k8s_piece() {
  local name=$1 tree f; shift
  tree=$(mktemp -d)
  for f in "$@"; do
    mkdir -p "$tree/${f%%/*}"
    strip -o "$tree/${f%%/*}/$(basename "$f")" "${f#*/}" 2>/dev/null || cp "${f#*/}" "$tree/${f%%/*}/"
  done
  (cd "$tree" && XZ_OPT=-9 tar -cJf "$CARRY/k8s-$name.tar.xz" ./*)
  rm -rf "$tree"
}
if [ "$K8S" = 1 ]; then
  k8s_bin=${GPUCKPT_K8S_BIN:-${GPUCKPT_PREFIX:-/opt/gpuckpt}/k8s/v1.37.2/bin}
  { [ -x "$k8s_bin/etcd" ] && [ -x "$k8s_bin/kubelet" ]; } || { echo "$k8s_bin/etcd or kubelet missing (scripts/setup-k8s.sh builds them)" >&2; exit 1; }
  k8s_piece etcd "bin/$k8s_bin/etcd"
  # go_build DIR OUT LDFLAGS PACKAGE...: as setup-k8s.sh builds (its caches, pinned modules, -trimpath, no cgo)
  go_build() {
    (cd "$1" && PATH=$PATH:/usr/local/go/bin GOMODCACHE=${GPUCKPT_PREFIX:-/opt/gpuckpt}/k8s/gomodcache \
       GOCACHE=${GPUCKPT_PREFIX:-/opt/gpuckpt}/k8s/gocache GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0 \
       go build -trimpath -ldflags="$3" -o "$2" "${@:4}") || { echo "go build ${*:4} (in $1) failed" >&2; exit 1; }
  }
  built=$(mktemp -d)
  # the version kubelet --version and the API server report, set as setup-k8s.sh sets it
  k8s_version=$("$k8s_bin/kubelet" --version | awk '{print $2}')
  read -r major minor _ <<< "$(echo "${k8s_version#v}" | tr . ' ')"
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ldflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$built/core/bin"
  go_build "$ROOT/k8s/toolchain/kubernetes" "$built/core/bin/kube-multicall" "$ldflags" ./multicall
  for p in kubelet kube-apiserver kube-scheduler kube-controller-manager kubectl; do ln -s kube-multicall "$built/core/bin/$p"; done
  (cd "$built/core" && XZ_OPT=-9 tar -cJf "$CARRY/k8s-core.tar.xz" bin)
  # the device plugin of this checkout (its --shared-device gives every allocation the real GPU's control nodes)
  go_build "$ROOT/test/k8s/sim-device-plugin" "$built/" "-s -w" . ./podresources-get ./sim-dra-driver
  k8s_piece tools "bin/$built/sim-device-plugin" "bin/$built/podresources-get" cni//usr/lib/cni/bridge \
    cni//usr/lib/cni/host-local cni//usr/lib/cni/loopback
  k8s_piece dra "bin/$built/sim-dra-driver"
  rm -rf "$built"
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
# the device tool's limit: the run's carry within it, the largest k8s pieces moved to a first call's carry
if [ "$K8S" = 1 ]; then
  limit_mib=${GPUCKPT_CARRY_LIMIT_MIB:-56}
  while [ "$(du -sb "$CARRY" | cut -f1)" -gt $((limit_mib * 1048576)) ]; do
    piece=$(du -b "$CARRY"/k8s-*.tar.xz 2>/dev/null | sort -n | tail -1 | cut -f2)
    [ -n "$piece" ] || { echo "$CARRY is over $limit_mib MiB without its k8s pieces" >&2; exit 1; }
    mkdir -p "$CARRY-1" && mv "$piece" "$CARRY-1/"
  done
  if [ -d "$CARRY-1" ]; then
    # shellcheck disable=SC2016 # expanded by unpack.sh
    printf '#!/bin/sh\n# unpacks the k8s pieces beside it into DIR (bin/, cni/) for kubelet_gpu_test.sh (KUBELET_GPU_K8S_DIR=DIR)\n%s\n' \
      'mkdir -p "${1:?usage: unpack.sh DIR}" && for f in "$(dirname "$0")"/k8s-*.tar.xz; do tar -C "$1" -xJf "$f" || exit 1; done && ls "$1"/bin' \
      > "$CARRY-1/unpack.sh"
    [ "$(du -sb "$CARRY-1" | cut -f1)" -le $((limit_mib * 1048576)) ] || { echo "$CARRY-1 is over $limit_mib MiB too: three calls would be needed" >&2; exit 1; }
  fi
  # the paths as the device tool's carry list names them: relative to the checkout that holds the carry
  top=$(git -C "$(dirname "$CARRY")" rev-parse --show-toplevel 2>/dev/null || dirname "$CARRY")
  rel=${CARRY#"$top"/}
  echo "pieces (MiB):"
  for d in "$CARRY" "$CARRY-1"; do
    [ -d "$d" ] || continue
    (cd "$d" && du -bs -- * | awk -v d="${d#"$top"/}" '{printf "  %-28s %6.2f\n", d "/" $2, $1 / 1048576}')
    du -sb "$d" | awk -v d="${d#"$top"/}" '{printf "  %-28s %6.2f in all\n", d "/", $1 / 1048576}'
  done
  if [ -d "$CARRY-1" ]; then
    echo "device calls, back to back (the machine keeps /root only while warm, 30 s):"
    echo "  1. carry [\"$rel-1\"]: bash $rel-1/unpack.sh /root/gpuckpt-k8s"
    echo "  2. carry [\"$rel\"]: set -o pipefail; KUBELET_GPU_K8S_DIR=/root/gpuckpt-k8s KUBELET_GPU_TEST_OUT=\$OUT bash $rel/src/test/gpu/kubelet_gpu_test.sh $rel 2>&1 | tee \$OUT/kubelet_gpu.log"
  else
    echo "device call: carry [\"$rel\"]: set -o pipefail; KUBELET_GPU_TEST_OUT=\$OUT bash $rel/src/test/gpu/kubelet_gpu_test.sh $rel 2>&1 | tee \$OUT/kubelet_gpu.log"
  fi
else
  du -sh "$CARRY"; ls -l "$CARRY" "$CARRY/lib"
fi
