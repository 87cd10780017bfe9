#!/usr/bin/env bash
# Runs shellcheck over the deployment scripts: the kubectl plugin, the cluster demo, the chart's host-files.sh
# (POSIX sh: it runs in the agent image), the manifest renderer and these tests.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# from the source tree: a sourced "$SRC/scripts/lib/..." resolves to ./scripts/lib/..., which is given as input
cd "$SRC"
command -v shellcheck >/dev/null 2>&1 || { echo "SKIP: shellcheck not found (scripts/setup.sh installs it)"; exit 77; }
shellcheck "$SRC/kubectl-plugin/kubectl-gpuckpt" "$SRC/kubectl-plugin/krew/make-release.sh" "$SRC/scripts/lib/containerd-sandbox.sh" "$SRC/scripts/lib/crio-sandbox.sh" "$SRC/scripts/lib/k8s-sandbox.sh" "$SRC/scripts/lib/k8s-gpuckpt-chart.sh" "$SRC/scripts/setup-k8s.sh" "$SRC/scripts/render-manifests.sh" "$SRC/scripts/build-image.sh" "$SRC/scripts/lib/criu-probe.sh" "$SRC/scripts/demo-cluster.sh" "$SRC/test/k8s/demo_cluster.sh" "$SRC"/test/charts/*.sh "$SRC"/test/host-files/*.sh \
  "$SRC/test/charts/fake-cluster/kubectl" "$SRC/test/charts/fake-cluster/gpuckpt"
shellcheck --shell=sh "$SRC/charts/gpuckpt/files/host-files.sh"
echo "1 passed, 0 failed"
