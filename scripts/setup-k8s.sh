#!/usr/bin/env bash
# Builds the real Kubernetes programs the cluster tests run, from their sources on the Go module proxy, once:
# kubelet, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (k8s/toolchain/kubernetes), etcd
# (k8s/toolchain/etcd), crictl (k8s/toolchain/cri-tools), CRI-O's crio and pinns (k8s/toolchain/cri-o: crio with
# cgo, without seccomp, btrfs, devicemapper or ostree support and with Go's OpenPGP instead of gpgme, so that only
# glibc is needed; pinns, CRI-O's small C helper, from the same module's source, static), and the tests' device
# plugin, DRA driver and PodResources client (test/k8s/sim-device-plugin).
# Every module version is pinned by the go.mod and go.sum committed beside it (-mod=readonly: a checksum that does
# not match go.sum stops the build). Installs Debian's CNI plugins (bridge, host-local, loopback) for pod networks.
# Called by scripts/run-tests.sh (not by the demo). Needs root (apt-get, /opt).
#
#   GPUCKPT_PREFIX=/opt/gpuckpt   the programs go to PREFIX/k8s/VERSION/bin, Go's module and build caches to
#                                 PREFIX/k8s/gomodcache and PREFIX/k8s/gocache (kept: a rebuild reuses them)
#
# A second run only checks: PREFIX/k8s/VERSION/bin/.stamp holds a hash of every go.mod, go.sum, the device
# plugin's source, the build flags and the Go version; when it matches and every program is there, nothing is
# built. The first build on 2 cores takes tens of minutes (the README says how long it took here).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD

PREFIX=${GPUCKPT_PREFIX:-/opt/gpuckpt}
log() { printf '[setup-k8s] %s\n' "$*" >&2; }
die() { printf '[setup-k8s] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get and $PREFIX are written)"
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || die "no Go toolchain (expected /usr/local/go/bin/go)"
export PATH=$PATH:/usr/local/go/bin

# Debian's CNI plugins: the pods' network on each node (bridge + host-local IPAM + loopback)
if [ ! -x /usr/lib/cni/bridge ] || [ ! -x /usr/lib/cni/host-local ] || [ ! -x /usr/lib/cni/loopback ]; then
  log "apt-get install containernetworking-plugins"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containernetworking-plugins >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        containernetworking-plugins >/dev/null; } || die "apt-get install containernetworking-plugins failed"
fi
command -v openssl >/dev/null || die "openssl missing (scripts/setup.sh installs it): the cluster's certificates need it"

TOOLCHAIN=$SRC/k8s/toolchain
K8S_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$TOOLCHAIN/kubernetes/go.mod" | head -1)
[ -n "$K8S_VERSION" ] || die "$TOOLCHAIN/kubernetes/go.mod has no 'require k8s.io/kubernetes vX.Y.Z' line"
K8S_HOME=$PREFIX/k8s
BIN=$K8S_HOME/$K8S_VERSION/bin
PROGRAMS=(kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl etcd crictl crio pinns sim-device-plugin
  podresources-get sim-dra-driver)

export GOMODCACHE=$K8S_HOME/gomodcache GOCACHE=$K8S_HOME/gocache GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0
GO_VERSION=$(go env GOVERSION)

# What the build depends on: the pinned module graphs, the fixture's source, the flags below, the Go version.
read -r major minor _ <<< "$(echo "${K8S_VERSION#v}" | tr . ' ')"
LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  # what `kubelet --version`, the node's kubeletVersion and the API server's /version report (upstream's
  # build sets the same; without them they read v0.0.0-master)
  LDFLAGS+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  LDFLAGS+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
stamp() {
  {
    echo "$GO_VERSION $LDFLAGS"
    cat "$0"
    cat "$TOOLCHAIN"/*/go.mod "$TOOLCHAIN"/*/go.sum
    cat "$SRC"/test/k8s/sim-device-plugin/go.mod "$SRC"/test/k8s/sim-device-plugin/go.sum
    find "$SRC"/test/k8s/sim-device-plugin -name '*.go' | LC_ALL=C sort | xargs cat
  } | sha256sum | cut -d' ' -f1
}
STAMP=$(stamp)
all_built() {
  local p
  [ "$(cat "$BIN/.stamp" 2>/dev/null)" = "$STAMP" ] || return 1
  for p in "${PROGRAMS[@]}"; do [ -x "$BIN/$p" ] || return 1; done
}
if all_built; then
  log "Kubernetes $K8S_VERSION programs up to date in $BIN"
  exit 0
fi

# Build into a fresh directory and move it into place at the end: an interrupted build never looks finished.
mkdir -p "$K8S_HOME/$K8S_VERSION"
NEW=$K8S_HOME/$K8S_VERSION/bin.new
rm -rf "$NEW"
mkdir -p "$NEW"
build() {  # build MODULE_DIR OUTPUT PACKAGE...: the packages' programs as OUTPUT (a directory when it ends in /)
  local dir=$1 out=$2; shift 2
  (cd "$dir" && go build -trimpath -ldflags="$LDFLAGS${EXTRA_LDFLAGS:+ $EXTRA_LDFLAGS}" -o "$out" "$@") ||
    die "go build $* (in $dir) failed"
}
started=$(date +%s)
log "building Kubernetes $K8S_VERSION (kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) with $GO_VERSION"
build "$TOOLCHAIN/kubernetes" "$NEW/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
log "building etcd"
build "$TOOLCHAIN/etcd" "$NEW/etcd" go.etcd.io/etcd/server/v3
log "building crictl"
CRI_TOOLS_VERSION=$(awk '$1 == "sigs.k8s.io/cri-tools" && $2 ~ /^v/ {print $2} $1 == "require" && $2 == "sigs.k8s.io/cri-tools" {print $3}' \
  "$TOOLCHAIN/cri-tools/go.mod" | head -1)
EXTRA_LDFLAGS="-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" build "$TOOLCHAIN/cri-tools" "$NEW/" sigs.k8s.io/cri-tools/cmd/crictl
log "building CRI-O (crio, pinns)"
CRIO_VERSION=$(awk '$1 == "github.com/cri-o/cri-o" && $2 ~ /^v/ {print $2} $1 == "require" && $2 == "github.com/cri-o/cri-o" {print $3}' \
  "$TOOLCHAIN/cri-o/go.mod" | sed -n 1p)
LDFLAGS="-s -w" CGO_ENABLED=1 build "$TOOLCHAIN/cri-o" "$NEW/crio" -tags \
  "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper containers_image_ostree_stub" \
  github.com/cri-o/cri-o/cmd/crio
PINNS_SRC=$GOMODCACHE/github.com/cri-o/cri-o@$CRIO_VERSION/pinns/src
cc -std=c99 -Os -Wall -Wextra -static -o "$NEW/pinns" "$PINNS_SRC"/*.c || die "cc of CRI-O's pinns ($PINNS_SRC) failed"
log "building the tests' sim-device-plugin, podresources-get and sim-dra-driver"
build "$SRC/test/k8s/sim-device-plugin" "$NEW/" . ./podresources-get ./sim-dra-driver
seconds=$(( $(date +%s) - started ))

{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in ${seconds}s with $GO_VERSION"
  "$NEW/kubelet" --version
  "$NEW/etcd" --version | sed -n 1p   # sed reads it all: head would end etcd by SIGPIPE, failing the build under pipefail
  "$NEW/crictl" --version
  "$NEW/crio" --version 2>/dev/null | sed -n 1p
  echo "module cache $(du -sh "$GOMODCACHE" | cut -f1), build cache $(du -sh "$GOCACHE" | cut -f1)"
} > "$NEW/BUILD-INFO"
echo "$STAMP" > "$NEW/.stamp"
rm -rf "$BIN"
mv "$NEW" "$BIN"
log "Kubernetes $K8S_VERSION programs in $BIN:"
sed 's/^/[setup-k8s]   /' "$BIN/BUILD-INFO" >&2
