#!/usr/bin/env bash
# shellcheck disable=SC2016 # checks are eval'ed strings
# gpuckpt doctor against this machine's real CRIU: the built plugin in a plugin directory passes "criu-plugin"
# (CRIU loaded it), a broken file there fails it with CRIU's reason and exit 1, CRIU's own GPU plugin beside it fails
# "other-gpu-plugins"; --json carries the same. Exit 0 pass, 77 skipped (no root / no working CRIU).
set -uo pipefail
BUILD=${GPUCKPT_BUILD_DIR:?set GPUCKPT_BUILD_DIR to the CMake build directory}
GPUCKPT=$BUILD/cli/gpuckpt
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "CRIU needs root"
if ! command -v criu >/dev/null || ! criu check >/dev/null 2>&1; then skip "no working criu on PATH (scripts/setup.sh installs one)"; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
expect() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; cat "$tmp/out"; fi; }

mkdir -p "$tmp/good" "$tmp/bad" "$tmp/archives"
cp "$BUILD/criu-plugin/gpuckpt_plugin.so" "$tmp/good/"
"$GPUCKPT" doctor --plugin-dir "$tmp/good" --archive-dir "$tmp/archives" > "$tmp/out" 2>&1
expect 'grep -Eq "^PASS +criu +CRIU [4-9]" "$tmp/out"' "CRIU found, version >= 4"
expect 'grep -Eq "^PASS +criu-plugin +CRIU .* loads $tmp/good/gpuckpt_plugin.so" "$tmp/out"' "the real CRIU loaded the built plugin"
expect 'grep -Eq "^(PASS|WARN|FAIL) +thp +transparent huge pages" "$tmp/out" && grep -Eq "^PASS +archive-space .* free in $tmp/archives" "$tmp/out"' \
  "THP and free-space lines"

printf 'not an ELF file\n' > "$tmp/bad/gpuckpt_plugin.so"
printf 'x' > "$tmp/bad/cuda_plugin.so"
"$GPUCKPT" doctor --plugin-dir "$tmp/bad" --archive-dir "$tmp/archives" > "$tmp/out" 2>&1; rc=$?
expect '[ $rc = 1 ]' "a failing check exits 1 (rc $rc)"
expect 'grep -Eq "^FAIL +criu-plugin .*Unable to load" "$tmp/out" && grep -q "fix: while it is there every dump and restore" "$tmp/out"' \
  "a plugin CRIU cannot load fails with CRIU's reason and the fix"
expect 'grep -Eq "^FAIL +other-gpu-plugins .*cuda_plugin.so" "$tmp/out"' "CRIU's own GPU plugin beside gpuckpt's fails"
"$GPUCKPT" doctor --plugin-dir "$tmp/bad" --archive-dir "$tmp/archives" --json > "$tmp/out" 2>&1
expect 'python3 -c "import json,sys; r=json.load(open(sys.argv[1])); c={x[\"name\"]: x for x in r[\"checks\"]}; assert r[\"status\"] == \"fail\" and c[\"criu-plugin\"][\"status\"] == \"fail\" and \"fix\" in c[\"criu-plugin\"]" "$tmp/out"' \
  "--json: the same checks, status fail"
"$GPUCKPT" doctor --frobnicate > "$tmp/out" 2>&1; rc=$?
expect '[ $rc = 2 ] && grep -q "usage: gpuckpt doctor" "$tmp/out"' "unknown argument: exit 2 with usage"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
