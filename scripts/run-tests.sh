#!/usr/bin/env bash
# README command 2: install what is needed, build, run every test (unit, e2e; gpu tests report skipped
# without a GPU). Same command as CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the real Kubernetes programs the cluster tests run (label cluster), built once from the Go module proxy
bash scripts/setup-k8s.sh
bash scripts/build.sh
# The fuzz harnesses, in a clang build of their own (only the parsers and the harnesses): each runs briefly
# from its seeds (ctest label fuzz). Long runs: scripts/fuzz.sh.
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CC=clang-14 CXX=clang++-14 cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUCKPT_FUZZ=ON \
  ${CMAKE_FLAGS:-} >/dev/null
cmake --build "$FUZZ_BUILD_DIR" -j "$(nproc)"
# Unit tests (own temp dirs and ports, no runtime daemons) run on every core; e2e and gpu tests, which start
# runtimes, CRIU and containers, one at a time.
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 -L unit -j "$(nproc)" ${CTEST_FLAGS:-} &&
  ctest --output-on-failure --timeout 600 -LE unit ${CTEST_FLAGS:-})
# Each harness fuzzes for a fixed time on one core in its own work dir: one per core.
(cd "$FUZZ_BUILD_DIR" && ctest --output-on-failure -L fuzz -j "$(nproc)")
