#!/usr/bin/env bash
# Benchmark (not a test): the AMD backend's BO content pipeline, one thread per GPU vs one thread, in GB/s,
# against the disk's sequential write/read speed measured in the same run. Arguments go to the program:
#   bench/amd_bo_io.sh [--dir /var/tmp/x] [--gpus 4] [--bos-per-gpu 2] [--bo-size 128M] [--buffer 64M]
# BUILD_DIR selects the build tree (default: build-amd, configured if missing).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$src/build-amd}"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target gpuckpt_amd_bo_io_bench >/dev/null
echo "machine: $(nproc) cores, $(uname -r), disk under /var/tmp: $(df -h --output=source,fstype /var/tmp | tail -1)"
exec "$build/test/amd/gpuckpt_amd_bo_io_bench" "$@"
