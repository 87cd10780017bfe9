#!/usr/bin/env bash
# README command 2: install what is needed, build, run every test (unit, e2e; gpu tests report skipped
# without a GPU). Same command as CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 ${CTEST_FLAGS:-}
