#!/bin/bash
# Every fixture's `gpuckpt gpus --json` validates against docs/schema/gpu-properties.schema.json, and records the
# reader refuses are refused by the schema too. Skipped (77) without Debian's python3-jsonschema.
set -euo pipefail
PY=/usr/bin/python3
"$PY" -c 'import jsonschema' 2>/dev/null || { echo "python3-jsonschema not installed (scripts/setup.sh installs it)"; exit 77; }
BIN="$GPUCKPT_BUILD_DIR/cli/gpuckpt"
SRC="$GPUCKPT_SOURCE_DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for dir in "$SRC"/test/fixtures/*/; do
  name=$(basename "$dir")
  [ -f "$dir/README.md" ] || continue
  args=(--host-root "$dir")
  [ -f "$dir/nvml-snapshot.json" ] && args+=(--nvml-snapshot "$dir/nvml-snapshot.json")
  "$BIN" gpus --json "${args[@]}" > "$TMP/$name.json"
done
"$PY" - "$SRC/docs/schema/gpu-properties.schema.json" "$TMP" <<'PY'
import copy, glob, json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
files = sorted(glob.glob(sys.argv[2] + "/*.json"))
assert len(files) >= 7, files
for f in files:
    record = json.load(open(f))
    errors = list(validator.iter_errors(record))
    assert not errors, f"{f}: {errors[0].message}"
good = json.load(open(files[0]))
bad = []
r = copy.deepcopy(good); r["version"] = 2; bad.append(("newer version", r))
r = copy.deepcopy(good); del r["used_gpu_ids"]; bad.append(("no used_gpu_ids", r))
r = copy.deepcopy(good); r["node"]["gpus"][0]["vendor"] = "intel"; bad.append(("unknown vendor", r))
r = copy.deepcopy(good); r["node"]["gpus"][0]["memory_bytes"] = -1; bad.append(("negative memory", r))
for what, record in bad:
    assert list(validator.iter_errors(record)), f"schema accepted a record with {what}"
print(f"{len(files)} fixture records valid; {len(bad)} bad records refused")
PY
