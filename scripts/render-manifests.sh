#!/usr/bin/env bash
# Renders what is generated from charts/gpuckpt: manifests/gpuckpt.yaml for clusters installed without Helm
# (`kubectl apply -f`), and the values table of charts/gpuckpt/README.md (from values.yaml's `# --` comments).
#
#   scripts/render-manifests.sh           rewrite both
#   scripts/render-manifests.sh --check   exit 1 with a diff when either is out of date with the chart
#
# The output is deterministic: no generated token (the API token comes from a Secret the operator creates, see
# manifests/README.md) and nothing cluster-specific (helm template, no lookup).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HELM=${HELM:-helm}
OUT="$ROOT/manifests/gpuckpt.yaml"
README="$ROOT/charts/gpuckpt/README.md"
NAMESPACE=gpuckpt-system
RELEASE=gpuckpt
TOKEN_SECRET=gpuckpt-api-token

command -v "$HELM" >/dev/null 2>&1 || { echo "render-manifests: '$HELM' not found; scripts/setup.sh installs helm" >&2; exit 2; }
python3 -c 'import yaml' 2>/dev/null || { echo "render-manifests: python3 with PyYAML needed (scripts/setup.sh installs python3-yaml)" >&2; exit 2; }

render_readme() { python3 "$ROOT/scripts/chart_values_doc.py" "$ROOT/charts/gpuckpt/values.yaml" "$README"; }

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
    stale=0
    render > "$tmp"
    diff -u "$OUT" "$tmp" >&2 || { echo "render-manifests: manifests/gpuckpt.yaml is out of date with charts/gpuckpt" >&2; stale=1; }
    render_readme > "$tmp"
    diff -u "$README" "$tmp" >&2 || { echo "render-manifests: the values table in charts/gpuckpt/README.md is out of date with values.yaml" >&2; stale=1; }
    [ "$stale" = 0 ] || { echo "render-manifests: run scripts/render-manifests.sh and commit the result" >&2; exit 1; }
    ;;
  "")
    mkdir -p "$(dirname "$OUT")"
    render > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
    render_readme > "$README.tmp" && mv "$README.tmp" "$README"
    echo "render-manifests: wrote ${OUT#"$ROOT"/} and the values table of ${README#"$ROOT"/}" >&2
    ;;
  *) echo "usage: scripts/render-manifests.sh [--check]" >&2; exit 2 ;;
esac
