#!/bin/bash
# The modeled fixture trees are what test/fixtures/tools/make_fixtures.py writes: regenerate them into a temporary
# directory and compare, so a hand edit (or a generator change without regenerating) fails here.
# Skipped (77) where the captured H200 data the generator reads (/work/shared/fixtures) is not present.
set -euo pipefail
SRC="$GPUCKPT_SOURCE_DIR"
[ -d /work/shared/fixtures/nvidia-h200-host ] || { echo "no /work/shared/fixtures/nvidia-h200-host here"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 "$SRC/test/fixtures/tools/make_fixtures.py" "$TMP"
status=0
for tree in "$TMP"/*/; do
  name=$(basename "$tree")
  if ! diff -r --no-dereference "$tree" "$SRC/test/fixtures/$name"; then
    echo "test/fixtures/$name differs from what make_fixtures.py writes"
    status=1
  fi
done
exit $status
