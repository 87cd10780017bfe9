#!/usr/bin/env bash
# The rooms' include arrows (cmake/rooms.txt, docs/architecture.md "Rooms") hold over the tree, and the checker fails
# on each kind of crossing planted in a copy of the rooms: a room including a room above it, the OCI hook including
# a libarchive room, a room target linking a room its arrows do not name, and a table with a cycle.
set -euo pipefail
src=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
check="$src/test/base/include_arrows.py"

python3 "$check" "$src"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rooms=$(sed -n 's/^room \([a-z0-9_-]*\):.*/\1/p' "$src/cmake/rooms.txt")
fresh() {
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree/cmake"
  cp "$src/cmake/rooms.txt" "$tmp/tree/cmake/"
  for dir in $rooms oci-hook; do cp -r "$src/$dir" "$tmp/tree/$dir"; done
}
# Fails, and its message names `expected`.
fails_naming() {
  local what=$1 expected=$2 out
  if out=$(python3 "$check" "$tmp/tree" 2>&1); then
    echo "FAIL: the checker passed $what" >&2; exit 1
  fi
  grep -qF -- "$expected" <<< "$out" || { echo "FAIL: $what: the message does not name '$expected':" >&2; echo "$out" >&2; exit 1; }
  echo "ok: refused $what"
}

fresh
python3 "$check" "$tmp/tree" >/dev/null || { echo "FAIL: the unplanted copy of the rooms does not pass" >&2; exit 1; }

fresh
echo '#include "archive/checkpoint_archive.h"' >> "$tmp/tree/gpu/gpu_model.h"
fails_naming "gpu/ including archive/" "gpu/gpu_model.h:"

fresh
echo '#include "gpumem/chunk_store.h"' >> "$tmp/tree/restore/restore_plan.cpp"
fails_naming "restore/ including gpumem/ (no arrow between them)" "restore/restore_plan.cpp:"

fresh
echo '#include "archive/checkpoint_archive.h"' >> "$tmp/tree/oci-hook/hook.cpp"
fails_naming "the OCI hook including archive/ (libarchive)" "oci-hook/hook.cpp:"

fresh
sed -i 's/^target_link_libraries(gpuckpt_state PUBLIC gpuckpt_gpu/& gpuckpt_gpumem/' "$tmp/tree/state/CMakeLists.txt"
fails_naming "state/'s target linking gpumem" "gpuckpt_state links rooms"

fresh
sed -i 's/^room base:.*/room base: runtime/' "$tmp/tree/cmake/rooms.txt"
fails_naming "a table with a cycle" "the arrows have a cycle"
