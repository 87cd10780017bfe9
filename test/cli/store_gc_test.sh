#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2086 # ok/bad always return 0; the bad-input cases are word lists
# `gpuckpt store gc|refs|unref` on a hand-made chunk store: a dry run lists and keeps the unreferenced
# chunk, --delete removes it and keeps the referenced one, unref drops a checkpoint's references so the next gc frees
# its chunks, a reference naming a chunk the store lacks makes gc exit 1 naming it, bad flags exit 2.
set -euo pipefail
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$(dirname "$0")/../../build}" 2>/dev/null && pwd) || { echo "SKIP: no build directory"; exit 77; }
CLI="$BUILD/cli/gpuckpt"
[ -x "$CLI" ] || { echo "SKIP: $CLI not built"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

store=$tmp/store
garbage=$(printf 'a%.0s' $(seq 64)); kept=$(printf 'b%.0s' $(seq 64)); gone=$(printf 'c%.0s' $(seq 64))
id=0123456789abcdef0123456789abcdef
mkdir -p "$store/sha256/aa" "$store/sha256/bb" "$store/refs"
head -c 100 /dev/urandom > "$store/sha256/aa/$garbage"
head -c 132 /dev/urandom > "$store/sha256/bb/$kept"
touch -d '3 hours ago' "$store/sha256/aa/$garbage" "$store/sha256/bb/$kept"
manifest() {   # checkpoint id, digest
  printf '{"format":"gpuckpt-gpu-memory-manifest","version":1,"checkpoint":"%s","hash":"sha256","store":"/x","vpid":7,' "$1"
  printf '"dump_pid":1,"chunk_size":4096,"regions":[[4096,8192]],"chunks":[["raw",4096,4096,"%s"],["zero",4096]]}' "$2"
}
manifest "$id" "$kept" > "$store/refs/$id-7.json"

"$CLI" store gc --store "$store" > "$tmp/out" && grep -q "would remove 1 unreferenced chunks" "$tmp/out" &&
  grep -q "$garbage  100 bytes" "$tmp/out" && [ -f "$store/sha256/aa/$garbage" ] && ok ||
  bad "a dry run lists the unreferenced chunk and removes nothing: $(cat "$tmp/out")"
"$CLI" store refs --store "$store" --json > "$tmp/refs" && grep -q "\"checkpoint\": \"$id\"" "$tmp/refs" && ok ||
  bad "refs lists the reference: $(cat "$tmp/refs")"
"$CLI" store gc --store "$store" --delete --json > "$tmp/out" && grep -q '"garbage_bytes": 100' "$tmp/out" &&
  [ ! -e "$store/sha256/aa/$garbage" ] && [ -f "$store/sha256/bb/$kept" ] && ok ||
  bad "--delete removes the unreferenced chunk only: $(cat "$tmp/out")"
"$CLI" store unref "$id" --store "$store" > /dev/null && [ ! -e "$store/refs/$id-7.json" ] && ok || bad "unref drops the reference"
rc=0; "$CLI" store unref "$id" --store "$store" 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q "holds no reference of checkpoint $id" "$tmp/err" && ok || bad "unref of an absent checkpoint exits 2 (rc $rc)"
"$CLI" store gc --store "$store" --delete > /dev/null && [ ! -e "$store/sha256/bb/$kept" ] && ok ||
  bad "after unref, gc frees the checkpoint's chunk"

# A reference naming a chunk the store lacks: the checkpoint cannot restore, gc says so and exits 1.
manifest "$id" "$gone" > "$store/refs/$id-7.json"
rc=0; "$CLI" store gc --store "$store" > "$tmp/out" || rc=$?
[ "$rc" = 1 ] && grep -q "MISSING: 1 chunks" "$tmp/out" && grep -q "$gone  (reference $id-7.json)" "$tmp/out" && ok ||
  bad "a missing chunk: exit 1 naming it and its reference (rc $rc: $(cat "$tmp/out"))"

# Bad input: exit 2, the input named.
for args in "gc --grace 5" "gc --grace x" "unref nothex" "prune" ""; do
  rc=0; "$CLI" store $args --store "$store" > /dev/null 2> "$tmp/err" || rc=$?
  [ "$rc" = 2 ] && grep -q "usage: gpuckpt store" "$tmp/err" && ok || bad "store $args: exit 2 with the usage (rc $rc)"
done
rc=0; "$CLI" store gc --store "$tmp/absent" 2> "$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -qF "$tmp/absent" "$tmp/err" && ok || bad "an absent store: exit 2 naming it (rc $rc)"

echo "store gc: $pass passed, $fail failed"
[ "$fail" = 0 ]
