#!/usr/bin/env bash
# Configures and builds gpuckpt into ${BUILD_DIR:-build} (warnings are errors). Extra CMake flags: $CMAKE_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUCKPT_WERROR=ON ${CMAKE_FLAGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
