#!/usr/bin/env bash
# Every object the chart renders (all value sets of chart_test.py) validated against the Kubernetes OpenAPI
# schemas (npm kubernetes-models, installed by scripts/setup.sh), plus a broken object that must be rejected.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODULES=${GPUCKPT_K8S_VALIDATE:-/opt/gpuckpt/k8s-validate}/node_modules
command -v helm >/dev/null 2>&1 || { echo "SKIP: helm not found (scripts/setup.sh installs it)"; exit 77; }
command -v node >/dev/null 2>&1 || { echo "SKIP: node not found (scripts/setup.sh installs it)"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml missing"; exit 77; }
[ -f "$MODULES/kubernetes-models/package.json" ] || { echo "SKIP: $MODULES/kubernetes-models missing (scripts/setup.sh installs it)"; exit 77; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 "$SRC/test/charts/chart_test.py" "$SRC" --dump-objects "$tmp/objects.json" > "$tmp/chart.log" ||
  { cat "$tmp/chart.log"; echo "FAIL: rendering the value sets failed"; exit 1; }
python3 - "$tmp/objects.json" "$SRC/manifests/gpuckpt.yaml" <<'PY'
import json, sys, yaml
objs = json.load(open(sys.argv[1]))
objs += [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]   # the plain manifests too
json.dump(objs, open(sys.argv[1], "w"))
PY
node "$SRC/test/charts/validate_k8s.mjs" "$MODULES" < "$tmp/objects.json" > "$tmp/valid.log"
echo "$(grep -c '^valid' "$tmp/valid.log") objects valid against the Kubernetes schemas"

# Control: the validator must reject what the API server would (wrong types, missing required fields).
python3 - "$tmp/objects.json" "$tmp/broken.json" <<'PY'
import json, sys
ds = next(o for o in json.load(open(sys.argv[1])) if o["kind"] == "DaemonSet")
bad_mode = json.loads(json.dumps(ds)); bad_mode["spec"]["template"]["spec"]["volumes"][0]["configMap"]["defaultMode"] = "0444"
no_image_name = json.loads(json.dumps(ds)); del no_image_name["spec"]["template"]["spec"]["containers"][0]["name"]
bad_ro = json.loads(json.dumps(ds)); bad_ro["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = "yes"
json.dump([bad_mode, no_image_name, bad_ro], open(sys.argv[2], "w"))
PY
if node "$SRC/test/charts/validate_k8s.mjs" "$MODULES" < "$tmp/broken.json" > "$tmp/broken.log" 2>&1; then
  cat "$tmp/broken.log"; echo "FAIL: the validator accepted broken DaemonSets"; exit 1
fi
n=$(grep -c '^INVALID' "$tmp/broken.log" || true)
[ "$n" = 3 ] || { cat "$tmp/broken.log"; echo "FAIL: expected 3 rejected objects, got $n"; exit 1; }
echo "control: 3 broken DaemonSets rejected"
echo "2 passed, 0 failed"
