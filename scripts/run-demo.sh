#!/usr/bin/env bash
# README command 1: install what is needed, build, then checkpoint and restore a real running container
# through gpuckpt on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/demo.sh "${BUILD_DIR:-build}"
