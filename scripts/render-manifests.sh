#!/usr/bin/env bash
# Renders manifests/gpuckpt.yaml from charts/gpuckpt for clusters installed without Helm (`kubectl apply -f`).
#
#   scripts/render-manifests.sh           rewrite manifests/gpuckpt.yaml
#   scripts/render-manifests.sh --check   exit 1 with a diff when manifests/ is out of date with the chart
#
# The output is deterministic: no generated token (the API token comes from a Secret the operator creates, see
# manifests/README.md) and nothing cluster-specific (helm template, no lookup).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HELM=${HELM:-helm}
OUT="$ROOT/manifests/gpuckpt.yaml"
NAMESPACE=gpuckpt-system
RELEASE=gpuckpt
TOKEN_SECRET=gpuckpt-api-token

command -v "$HELM" >/dev/null 2>&1 || { echo "render-manifests: '$HELM' not found; scripts/setup.sh installs helm" >&2; exit 2; }

render() {
  cat <<YAML
# gpuckpt $(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/gpuckpt/Chart.yaml"): plain manifests rendered from charts/gpuckpt by scripts/render-manifests.sh. Do not edit.
# Before applying, create the API token Secret (manifests/README.md):
#   kubectl create namespace $NAMESPACE
#   kubectl -n $NAMESPACE create secret generic $TOKEN_SECRET --from-literal=token="\$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')"
---
apiVersion: v1
kind: Namespace
metadata:
  name: $NAMESPACE
  labels:
    app.kubernetes.io/part-of: gpuckpt
    # hostPath volumes need the privileged Pod Security level.
    pod-security.kubernetes.io/enforce: privileged
YAML
  "$HELM" template "$RELEASE" "$ROOT/charts/gpuckpt" --namespace "$NAMESPACE" \
    --set auth.existingSecret="$TOKEN_SECRET"
}

case "${1:-}" in
  --check)
    tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
    render > "$tmp"
    if ! diff -u "$OUT" "$tmp" >&2; then
      echo "render-manifests: manifests/gpuckpt.yaml is out of date with charts/gpuckpt: run scripts/render-manifests.sh and commit the result" >&2
      exit 1
    fi
    ;;
  "")
    mkdir -p "$(dirname "$OUT")"
    render > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
    echo "render-manifests: wrote ${OUT#"$ROOT"/}" >&2
    ;;
  *) echo "usage: scripts/render-manifests.sh [--check]" >&2; exit 2 ;;
esac
