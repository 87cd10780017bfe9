#!/usr/bin/env bash
# Builds the krew release of kubectl-gpuckpt: OUT/kubectl-gpuckpt-VERSION.tar.gz (the plugin script, LICENSE,
# README) and OUT/gpuckpt.yaml, the krew manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin) whose
# sha256 is that archive's. The plugin is a bash script: one archive serves every OS/arch krew installs it on.
#   kubectl-plugin/krew/make-release.sh OUT URL_BASE HOMEPAGE
#     URL_BASE: where releases are downloaded from (the archive is URL_BASE/vVERSION/kubectl-gpuckpt-VERSION.tar.gz)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: make-release.sh OUT URL_BASE HOMEPAGE}
URL_BASE=${2:?usage: make-release.sh OUT URL_BASE HOMEPAGE}
HOMEPAGE=${3:?usage: make-release.sh OUT URL_BASE HOMEPAGE}
VERSION=$(sed -n 's/^VERSION=\([0-9][0-9.]*\)$/\1/p' "$SRC/kubectl-plugin/kubectl-gpuckpt")
[ -n "$VERSION" ] || { echo "no VERSION= line in kubectl-gpuckpt" >&2; exit 1; }
mkdir -p "$OUT"
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
install -m 0755 "$SRC/kubectl-plugin/kubectl-gpuckpt" "$stage/kubectl-gpuckpt"
install -m 0644 "$SRC/LICENSE" "$stage/LICENSE"
install -m 0644 "$SRC/kubectl-plugin/README.md" "$stage/README.md"
archive=$OUT/kubectl-gpuckpt-$VERSION.tar.gz
# Reproducible: fixed order, owner and time, so the same sources give the same sha256.
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - kubectl-gpuckpt LICENSE README.md |
  gzip -n > "$archive"
sha=$(sha256sum "$archive" | cut -d' ' -f1)
platform() {  # platform OS ARCH
  cat <<YAML
  - selector:
      matchLabels:
        os: $1
        arch: $2
    uri: $URL_BASE/v$VERSION/kubectl-gpuckpt-$VERSION.tar.gz
    sha256: $sha
    bin: kubectl-gpuckpt
    files:
    - from: kubectl-gpuckpt
      to: .
    - from: LICENSE
      to: .
YAML
}
{
  cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: gpuckpt
spec:
  version: v$VERSION
  homepage: $HOMEPAGE
  shortDescription: Checkpoint, move and restore GPU containers
  description: |
    Drives the gpuckpt node agents (Helm chart charts/gpuckpt): checkpoints a container that uses GPUs, moves
    the archive to another node, checks that node's GPUs can take it and restores it there.
  caveats: |
    Needs the gpuckpt chart installed in the cluster, bash >= 4, and RBAC to get pods/nodes and to create
    pods/exec in the agents' namespace.
  platforms:
YAML
  for os_arch in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do platform "${os_arch%/*}" "${os_arch#*/}"; done
} > "$OUT/gpuckpt.yaml"
echo "$OUT/gpuckpt.yaml ($archive, sha256 $sha)"
