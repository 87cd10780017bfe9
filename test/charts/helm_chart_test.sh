#!/usr/bin/env bash
# helm lint + helm template of charts/gpuckpt across value sets, with assertions on the rendered objects.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v helm >/dev/null 2>&1 || { echo "SKIP: helm not found (scripts/setup.sh installs it)"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml missing (scripts/setup.sh installs it)"; exit 77; }
exec python3 "$SRC/test/charts/chart_test.py" "$SRC"
