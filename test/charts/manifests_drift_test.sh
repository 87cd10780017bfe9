#!/usr/bin/env bash
# manifests/ and the chart README's values table must be what scripts/render-manifests.sh renders from the chart
# now; the manifests must hold no secret.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v helm >/dev/null 2>&1 || { echo "SKIP: helm not found (scripts/setup.sh installs it)"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml missing"; exit 77; }
bash "$SRC/scripts/render-manifests.sh" --check
python3 - "$SRC/manifests/gpuckpt.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = [d["kind"] for d in docs]
fail = []
if "Secret" in kinds: fail.append("manifests contain a Secret (a token in git)")
ns = next((d for d in docs if d["kind"] == "Namespace"), None)
if not ns or ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") != "privileged":
    fail.append("Namespace with pod-security enforce=privileged missing (hostPath volumes need it)")
ds = next(d for d in docs if d["kind"] == "DaemonSet")
vol = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "api-token")
if vol["secret"]["secretName"] != "gpuckpt-api-token": fail.append("DaemonSet must mount the gpuckpt-api-token Secret the README creates")
if any(d["metadata"].get("namespace") not in (None, "gpuckpt-system") for d in docs): fail.append("objects outside gpuckpt-system")
for f in fail: print("FAIL", f)
print(f"{4 - len(fail)} passed, {len(fail)} failed")
sys.exit(1 if fail else 0)
PY
