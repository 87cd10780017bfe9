#!/usr/bin/env bash
# e2e (no GPU needed): gpuckpt moves a process's staging memory itself, with real CRIU 4.1 and the stand-in plugin
# (stand_in/stand_ins.h: the installed plugin's entry and backend, with stand-ins for what only a GPU node has).
# A plain process with one large private anonymous mapping stands in for a CUDA process after the driver's
# checkpoint (the mechanism - read it in parallel, write the GPU memory image, make it durable, drop the pages
# inside the task so CRIU dumps an empty VMA, fill it back at restore - does not depend on CUDA). The stand-in
# plugin's GPUCKPT_TEST_STAGING_VMA names the mapping. Checks, with the process's own checksum of the mapping:
#   1. --leave-running: the pages are dropped, then put back before the process runs on (bit-identical);
#   2. a dump that fails after the drop (the process holds a deleted 2 MiB file, over CRIU's default ghost-file
#      limit of 1 MiB; CRIU finds out while dumping files, after CHECKPOINT_DEVICES): it gets its memory back;
#   3. a full dump: CRIU's pages image no longer carries the mapping, `gpuckpt inspect` checks the image, restore
#      fills it back bit-identical;
#   4. a corrupt chunk fails the restore with the file and chunk named, and no process is left running;
#   5. GPUCKPT_CUDA_MEMORY_IMAGE=0: CRIU dumps the memory itself, as before;
#   6. an image that matches no restored process fails the restore (its memory would be missing);
#   7. the node's settings file beside the plugin (gpuckpt_plugin.env) sets the path when the environment does not,
#      the environment overrides it, and a file with a typo is logged and ignored (the dump runs with the defaults).
#   8. GPUCKPT_GPU_STORE: the memory goes into a chunk store, CRIU's images keep a manifest; a missing chunk stops
#      the restore at the plugin's init (before CRIU forks anything), naming checkpoint, digest and path, in CRIU's
#      log and in the node's syslog (/dev/log, here a socket the test reads in a private mount namespace); with the
#      chunk back it restores bit-identical; a second dump of the same memory writes no chunk.
#   9. gpuckpt export of that checkpoint, import into an empty store, restore from that store alone: bit-identical.
#  10. that store as the node store: its raw chunks are mapped into the process, not copied (bit-identical, the
#      store's files unchanged); a damaged raw chunk fails the restore, named.
#  11. unchanged chunks recognised by XXH3-64 (gpumem/memory_lineage.h): a second dump of a running process names
#      every stored chunk by its first manifest's digest (the same manifest chunks, nothing written); after the
#      process changed its memory nothing is recognised and the new chunks are stored; a restore from the node store
#      keeps the restored process's manifest, so its next dump recognises again; GPUCKPT_STORE_RECOGNISE_UNCHANGED=0
#      hashes every chunk; the records of processes that are gone are removed.
#  12. CPU pages in the chunk store (criu-plugin/cpu_pages): with a store, CRIU's page images (here 96 MiB of the
#      process's own random heap) leave the images for the store at the end of the dump (the images keep a few KiB
#      and a pages manifest), `gpuckpt inspect` names it, the restore rebuilds them before CRIU reads a page (heap
#      and staging memory bit-identical); the restored process's next checkpoint writes almost nothing new; a
#      missing CPU chunk stops the restore at the plugin's init, named; GPUCKPT_CPU_PAGES_STORE=0 and an inline
#      store keep the page images whole, as before.
# The node-local store is this run's own directory in every case (GPUCKPT_TEST_NODE_STORE): the host's
# /var/lib/gpuckpt/chunks (its lineage records) is never written.
# Exit 0 pass, 77 skipped (no root / no working CRIU), anything else fails.
set -uo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?set GPUCKPT_BUILD_DIR to the CMake build directory}
PLUGIN=$BUILD/test/criu-plugin/stand-in/gpuckpt_plugin.so   # the installed plugin with the stand-ins (stand_in/stand_ins.h)
HELPER=$BUILD/test/criu-plugin/staging_process
GPUCKPT=$BUILD/cli/gpuckpt
CRIU=${CRIU:-criu}
SIZE_MIB=${STAGING_E2E_MIB:-192}

skip() { echo "SKIPPED: $*"; exit 77; }
fail() {
  echo "FAILED: $*"
  for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "--- $f (gpuckpt/errors)"; grep -E "gpuckpt|Error|rror " "$f" | tail -30; }; done
  exit 1
}

[ "$(id -u)" = 0 ] || skip "CRIU needs root"
command -v "$CRIU" >/dev/null || skip "no criu on PATH (scripts/setup.sh installs one)"
"$CRIU" check >/dev/null 2>&1 || skip "'criu check' fails on this kernel"
# shellcheck disable=SC1091 # the repository's shell library
. "$(dirname "$0")/../../scripts/lib/criu-probe.sh"
criu_dump_works "$CRIU" || skip "$CRIU_PROBE_REASON"
for f in "$PLUGIN" "$HELPER" "$GPUCKPT"; do [ -x "$f" ] || [ -f "$f" ] || { echo "FAILED: $f not built"; exit 1; }; done
ldd "$PLUGIN" 2>/dev/null | grep -qE 'lib(asan|ubsan)' && skip "plugin built with sanitizers cannot load into CRIU"

WORK=$(mktemp -d /tmp/gpuckpt-staging-e2e.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ "${MADE_DEVLOG:-0}" = 1 ] && rm -f /dev/log
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/lib"
cp "$PLUGIN" "$WORK/lib/"

gone() { for _ in $(seq 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done; return 1; }

start_process() { # $1 = name; sets PID ADDR SUM
  rm -f "$WORK/$1.out" "$WORK/$1.out.check"
  head -c $((2 << 20)) /dev/zero > "$WORK/$1.ghost"
  setsid "$HELPER" "$SIZE_MIB" "$WORK/$1.out" "$WORK/$1.ghost" </dev/null >/dev/null 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 200); do [ -s "$WORK/$1.out" ] && break; sleep 0.05; done
  [ -s "$WORK/$1.out" ] || fail "the staging process did not start"
  rm -f "$WORK/$1.ghost"
  read -r ADDR SUM < "$WORK/$1.out"
}

checksum_now() { # $1 = name, $2 = pid: the process's checksum of its mapping, now
  rm -f "$WORK/$1.out.check"
  kill -USR1 "$2" || fail "pid $2 is not running"
  for _ in $(seq 200); do [ -s "$WORK/$1.out.check" ] && break; sleep 0.05; done
  [ -s "$WORK/$1.out.check" ] || fail "pid $2 did not answer with its checksum"
  cat "$WORK/$1.out.check"
}

pages_bytes() { du -cb "$1"/pages-*.img 2>/dev/null | tail -1 | cut -f1; }

dump() { # $1 = image dir, $2 = pid, rest: criu options (--ghost-limit 8M unless given: the held file fits)
  local dir=$1 pid=$2; shift 2
  mkdir -p "$dir"
  local limit=(--ghost-limit 8M)
  [[ " $* " == *" --ghost-limit "* ]] && limit=()
  GPUCKPT_TEST_STAGING_VMA=$ADDR GPUCKPT_TEST_NODE_STORE=${GPUCKPT_TEST_NODE_STORE:-$WORK/node-store} "$CRIU" dump -t "$pid" -D "$dir" -o dump.log -v4 --libdir "$WORK/lib" "${limit[@]}" "$@"
  local rc=$?
  mv "$dir/dump.log" "$WORK/$(basename "$dir")-dump.log" 2>/dev/null
  return $rc
}

RESTORE_PREFIX=()   # a command CRIU's restore runs under (case 8: a private /dev/log)
restore() { # $1 = image dir; sets RPID (empty when the restore wrote no pidfile)
  rm -f "$1/restored.pid"
  GPUCKPT_TEST_NODE_STORE=${GPUCKPT_TEST_NODE_STORE:-$WORK/node-store} "${RESTORE_PREFIX[@]}" "$CRIU" restore -D "$1" -o restore.log -v4 -d --libdir "$WORK/lib" --pidfile "$1/restored.pid"
  local rc=$?
  mv "$1/restore.log" "$WORK/$(basename "$1")-restore.log" 2>/dev/null
  RPID=$(cat "$1/restored.pid" 2>/dev/null)
  [ -n "$RPID" ] && PIDS+=("$RPID")
  return $rc
}

MIB=$((1 << 20))

# --- 1. --leave-running -------------------------------------------------------------------------------------
start_process a
dump "$WORK/leave" "$PID" --leave-running || fail "criu dump --leave-running failed"
LOG=$WORK/leave-dump.log
grep -q "param: GPUCKPT_IMAGE_THREADS:" "$LOG" || fail "the image settings were not logged"
grep -q "gpuckpt: cuda: TEST SWITCH GPUCKPT_TEST_STAGING_VMA" "$LOG" || fail "the test switch was not announced"
grep -q "gpuckpt: cuda: wrote the staging memory of 1 process" "$LOG" || fail "the staging memory was not written"
grep -Eq "gpuckpt: cuda: pid [0-9]+: dropped 1 staging region" "$LOG" || fail "the pages were not dropped inside the task"
grep -q "gpuckpt: cuda: --leave-running: filled" "$LOG" || fail "the memory was not put back for --leave-running"
[ -f "$WORK/leave/gpuckpt-gpumem-$PID.img" ] || fail "no GPU memory image gpuckpt-gpumem-$PID.img"
[ "$(pages_bytes "$WORK/leave")" -lt $((SIZE_MIB * MIB / 4)) ] \
  || fail "CRIU's pages image still carries the staging memory ($(pages_bytes "$WORK/leave") bytes)"
[ "$(checksum_now a "$PID")" = "$SUM" ] || fail "--leave-running: the memory is not what it was before the dump"
echo "ok 1: --leave-running: pages image $(pages_bytes "$WORK/leave") bytes, memory bit-identical after the dump"

# --- 2. the dump fails after the drop -------------------------------------------------------------------------
dump "$WORK/failed" "$PID" --ghost-limit 1M && fail "the dump did not fail"
grep -q "ghost" "$WORK/failed-dump.log" || fail "the dump failed, but not on the ghost file"
grep -Eq "gpuckpt: cuda: pid [0-9]+: dropped 1 staging region" "$WORK/failed-dump.log" || fail "the failed dump did not get as far as the drop"
grep -q "gpuckpt: cuda: the dump failed: filled" "$WORK/failed-dump.log" || fail "the memory was not put back"
kill -0 "$PID" || fail "the process did not survive the failed dump"
[ "$(checksum_now a "$PID")" = "$SUM" ] || fail "after the failed dump the memory is not what it was"
echo "ok 2: a dump that failed after the drop gave the process its memory back"

# --- 3. full dump and restore ---------------------------------------------------------------------------------
dump "$WORK/full" "$PID" || fail "criu dump failed"
gone "$PID" || fail "the dumped process $PID did not go away"
[ "$(pages_bytes "$WORK/full")" -lt $((SIZE_MIB * MIB / 4)) ] || fail "the pages image carries the staging memory"
INSPECT=$("$GPUCKPT" inspect "$WORK/full/gpuckpt-gpumem-$PID.img") || fail "gpuckpt inspect: $INSPECT"
grep -q "every chunk checked: ok" <<<"$INSPECT" || fail "inspect did not check the chunks: $INSPECT"
grep -Eq "\(([1-9][0-9]*) zero, ([1-9][0-9]*) zstd" <<<"$INSPECT" || fail "expected zero and zstd chunks: $INSPECT"
IMG_BYTES=$(cat "$WORK/full/gpuckpt-gpumem-$PID".img* | wc -c)   # the main file and its data shards
[ "$IMG_BYTES" -lt $((SIZE_MIB * MIB * 3 / 4)) ] || fail "the image ($IMG_BYTES bytes) is not smaller than the memory"
restore "$WORK/full" || fail "criu restore failed"
grep -q "gpuckpt: cuda: filled the staging memory of 1 process" "$WORK/full-restore.log" \
  || fail "the restore did not fill the staging memory"
[ "$RPID" = "$PID" ] || fail "restored as pid $RPID, dumped $PID"
[ "$(checksum_now a "$RPID")" = "$SUM" ] || fail "the restored memory is not bit-identical"
# Before the fill the plugin asked for huge pages inside the task (GPUCKPT_STAGING_HUGE_PAGES, on by default):
# where the kernel's THP mode honours madvise, the restored mapping holds some.
grep -q "gpuckpt: cuda: asked for huge pages on the staging memory of 1 process" "$WORK/full-restore.log" \
  || fail "the restore did not ask for huge pages on the staging memory"
HUGE_KB=$(awk -v at="$ADDR" '$1 ~ /^[0-9a-f]+-[0-9a-f]+$/ { split($1, r, "-"); inside = (r[1] == at) }
                             inside && $1 == "AnonHugePages:" { print $2 }' "/proc/$RPID/smaps")
if grep -Eq '\[(always|madvise)\]' /sys/kernel/mm/transparent_hugepage/enabled; then
  [ "${HUGE_KB:-0}" -gt 0 ] || fail "the restored staging memory at $ADDR holds no huge pages (AnonHugePages ${HUGE_KB:-none})"
fi
echo "ok 3: pages image $(pages_bytes "$WORK/full") bytes, GPU memory image $IMG_BYTES bytes for $SIZE_MIB MiB; restored bit-identical, ${HUGE_KB:-0} kB in huge pages"

# --- 4. a corrupt chunk fails the restore ---------------------------------------------------------------------
dump "$WORK/corrupt" "$RPID" || fail "criu dump of the restored process failed"
gone "$RPID" || fail "pid $RPID did not go away"
FILE=$WORK/corrupt/gpuckpt-gpumem-$PID.img
# The first chunk is random (stored raw): flip a byte of its payload (after the 64-byte file header and the
# 48-byte record header of whichever chunk was written first - every record is checked, so any one will do).
printf '\xff' | dd of="$FILE" bs=1 seek=$((64 + 48 + 4096)) conv=notrunc status=none
restore "$WORK/corrupt" && fail "the restore with a corrupt chunk succeeded"
grep -Eq "gpuckpt-gpumem-$PID.img: chunk [0-9]+ of region 0" "$WORK/corrupt-restore.log" \
  || fail "the restore error does not name the file and chunk"
gone "$PID" || fail "a process with wrong memory was left running"
echo "ok 4: $(grep -Eo "gpuckpt-gpumem-$PID.img: chunk [0-9]+ of region 0[^:]*: [a-z ]+" "$WORK/corrupt-restore.log" | head -1)"

# --- 5. forced off ------------------------------------------------------------------------------------------------
start_process b
GPUCKPT_CUDA_MEMORY_IMAGE=0 dump "$WORK/off" "$PID" || fail "criu dump with GPUCKPT_CUDA_MEMORY_IMAGE=0 failed"
gone "$PID" || fail "pid $PID did not go away"
[ ! -e "$WORK/off/gpuckpt-gpumem-$PID.img" ] || fail "an image was written although the path is off"
grep -q "GPUCKPT_CUDA_MEMORY_IMAGE=0: CRIU dumps the GPU memory" "$WORK/off-dump.log" || fail "the fallback was not logged"
[ "$(pages_bytes "$WORK/off")" -gt $((SIZE_MIB * MIB / 2)) ] || fail "CRIU did not dump the memory itself"
restore "$WORK/off" || fail "criu restore (path off) failed"
[ "$(checksum_now b "$RPID")" = "$SUM" ] || fail "path off: the restored memory is not bit-identical"
echo "ok 5: with the path off CRIU carried the memory ($(pages_bytes "$WORK/off") bytes) and the restore is bit-identical"
# --- 6. an image no restored process takes ---------------------------------------------------------------------
start_process c
dump "$WORK/unmatched" "$PID" || fail "criu dump failed"
gone "$PID" || fail "pid $PID did not go away"
mv "$WORK/unmatched/gpuckpt-gpumem-$PID.img" "$WORK/unmatched/gpuckpt-gpumem-999999.img"
restore "$WORK/unmatched" && fail "the restore succeeded although the process's GPU memory image matches no process"
grep -q "gpuckpt-gpumem-999999.img match(es) no restored process" "$WORK/unmatched-restore.log" \
  || fail "the unmatched image was not named"
gone "$PID" || fail "a process without its memory was left running"
echo "ok 6: an image that matches no restored process fails the restore"
# --- 7. the node's settings file beside the plugin (what reaches CRIU when containerd/CRI-O start it) ----------
start_process d
printf '# gpuckpt: managed file\nGPUCKPT_CUDA_MEMORY_IMAGE=0\nGPUCKPT_IMAGE_THREADS=3\n' > "$WORK/lib/gpuckpt_plugin.env"
dump "$WORK/file-off" "$PID" --leave-running || fail "criu dump with the settings file failed"
grep -q "param: settings file:$WORK/lib/gpuckpt_plugin.env (2 settings)" "$WORK/file-off-dump.log" || fail "the settings file was not read"
grep -q "param: GPUCKPT_CUDA_MEMORY_IMAGE:0" "$WORK/file-off-dump.log" && grep -q "param: GPUCKPT_IMAGE_THREADS:3" "$WORK/file-off-dump.log" ||
  fail "the settings file's values were not used"
[ ! -e "$WORK/file-off/gpuckpt-gpumem-$PID.img" ] || fail "the file turned gpuckpt's path off, yet an image was written"
GPUCKPT_CUDA_MEMORY_IMAGE=1 dump "$WORK/file-env" "$PID" --leave-running || fail "criu dump (environment over the file) failed"
[ -f "$WORK/file-env/gpuckpt-gpumem-$PID.img" ] || fail "the environment did not override the settings file"
printf 'GPUCKPT_CUDA_MEMORY_IMAGE=0\nGPUCKPT_IMAGE_THREDS=3\n' > "$WORK/lib/gpuckpt_plugin.env"   # a typo
dump "$WORK/file-typo" "$PID" --leave-running || fail "a settings file with a typo broke the dump"
grep -q "line 2: unknown setting 'GPUCKPT_IMAGE_THREDS'.*the file is ignored, the plugin's defaults apply" "$WORK/file-typo-dump.log" ||
  fail "the bad settings file was not reported"
[ -f "$WORK/file-typo/gpuckpt-gpumem-$PID.img" ] || fail "with the bad file ignored, the default (gpuckpt's path) did not apply"
[ "$(checksum_now d "$PID")" = "$SUM" ] || fail "the process's memory changed across the settings-file dumps"
rm -f "$WORK/lib/gpuckpt_plugin.env"
echo "ok 7: the settings file beside the plugin turns the path off, the environment overrides it, a typo is logged and ignored"
# --- 8. a chunk store instead of images ------------------------------------------------------------------------
start_process e
export GPUCKPT_GPU_STORE=$WORK/store/chunks
dump "$WORK/stored" "$PID" || fail "criu dump into the chunk store failed"
gone "$PID" || fail "pid $PID did not go away"
MANIFEST=$WORK/stored/gpuckpt-gpumem-$PID.manifest.json
[ -f "$MANIFEST" ] || fail "no manifest in CRIU's images"
ls "$WORK/stored"/gpuckpt-gpumem-*.img* >/dev/null 2>&1 && fail "image files were written beside the manifest"
[ "$(stat -c %a "$GPUCKPT_GPU_STORE")" = 700 ] || fail "the store is not root-only"
CHUNKS=$(find "$GPUCKPT_GPU_STORE/sha256" -type f | wc -l)
[ "$CHUNKS" -gt 0 ] && [ -z "$(find "$GPUCKPT_GPU_STORE/sha256" -type f ! -perm 600)" ] || fail "no chunks, or chunks not 0600"
[ "$(du -cb "$WORK"/stored/* | tail -1 | cut -f1)" -lt $((SIZE_MIB * MIB / 4)) ] || fail "CRIU's images still carry the memory"
INSPECT=$("$GPUCKPT" inspect "$WORK/stored") || fail "gpuckpt inspect of the store-backed images: $INSPECT"
grep -q "every chunk checked in $GPUCKPT_GPU_STORE: ok" <<<"$INSPECT" || fail "inspect did not check the store: $INSPECT"
# A missing chunk: the restore stops at the plugin's init, before CRIU restores any process.
VICTIM=$(find "$GPUCKPT_GPU_STORE/sha256" -type f | head -1)
mv "$VICTIM" "$WORK/victim"
# The plugin's errors also go to syslog (a runtime may delete CRIU's log with a failed restore): this restore's
# /dev/log is a socket read into $WORK/syslog.txt, in a mount namespace of its own (an empty file stands in for a
# missing /dev/log on the host while it runs, as the mount point).
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1]); s.settimeout(60)
with open(sys.argv[2], "wb") as out:
    try:
        while True:
            out.write(s.recv(65536) + b"\n"); out.flush()
    except socket.timeout:
        pass' "$WORK/syslog.sock" "$WORK/syslog.txt" &
SYSLOG_READER=$!
for _ in $(seq 100); do [ -S "$WORK/syslog.sock" ] && break; sleep 0.05; done
[ -e /dev/log ] || { : > /dev/log && MADE_DEVLOG=1; }
RESTORE_PREFIX=(unshare -m --propagation private sh -c 'mount --bind "$0" /dev/log && exec "$@"' "$WORK/syslog.sock")
restore "$WORK/stored" && fail "the restore with a missing chunk succeeded"
RESTORE_PREFIX=()
[ "${MADE_DEVLOG:-0}" = 1 ] && rm -f /dev/log && MADE_DEVLOG=0
sleep 0.2; kill "$SYSLOG_READER" 2>/dev/null; wait "$SYSLOG_READER" 2>/dev/null
LOG=$WORK/stored-restore.log
grep -q "checkpoint [0-9a-f]\{32\}.*chunk $(basename "$VICTIM").*expected at $VICTIM: missing" "$LOG" ||
  fail "the restore error does not name checkpoint, chunk and path"
grep -q "gpuckpt-plugin\[[0-9]*\]: .*chunk $(basename "$VICTIM").*expected at $VICTIM: missing" "$WORK/syslog.txt" ||
  fail "the restore error did not reach syslog: $(head -c 600 "$WORK/syslog.txt" 2>/dev/null)"
grep -q "Forking task" "$LOG" && fail "CRIU forked a task before the missing chunk stopped it"
kill -0 "$PID" 2>/dev/null && fail "a process was left running"
mv "$WORK/victim" "$VICTIM"
restore "$WORK/stored" || fail "criu restore from the chunk store failed"
grep -q "gpuckpt: cuda: checkpoint [0-9a-f]*: gpuckpt-gpumem-$PID.manifest.json: all [0-9]* chunks present" "$WORK/stored-restore.log" ||
  fail "the restore did not check the store first"
[ "$(checksum_now e "$RPID")" = "$SUM" ] || fail "the memory restored from the chunk store is not bit-identical"
# The same memory again: nothing new in the store.
dump "$WORK/stored-again" "$RPID" || fail "the second dump into the chunk store failed"
gone "$RPID" || fail "pid $RPID did not go away"   # case 9 restores it under the same pid
grep -q "timing: gpu memory image write: .* 0 MiB written" "$WORK/stored-again-dump.log" ||
  fail "the second dump of unchanged memory wrote chunks: $(grep 'timing: gpu memory image write' "$WORK/stored-again-dump.log")"
# The process's own CPU pages (stack, libc's data) change as it runs: those chunks may be new, no GPU chunk is.
NEW_CPU=$(grep -Eo "timing: cpu pages into the chunk store .* chunks, [0-9]+ new" "$WORK/stored-again-dump.log" | grep -Eo "[0-9]+ new" | cut -d' ' -f1)
[ "$(find "$GPUCKPT_GPU_STORE/sha256" -type f | wc -l)" = "$((CHUNKS + ${NEW_CPU:-0}))" ] ||
  fail "the store grew by more than the CPU chunks on the second dump (${NEW_CPU:-0} new)"
echo "ok 8: chunk store: $CHUNKS chunks, a manifest in CRIU's images; a missing chunk stopped the restore before any fork (named in CRIU's log and syslog); restored bit-identical; a second dump wrote nothing"

# --- 9. moved by hand to another store: gpuckpt export / import ------------------------------------------------
# The store-backed images in a runtime's archive layout; exported with their chunks; the first store put away;
# imported into an empty one; CRIU restores from that one alone.
mkdir -p "$WORK/archive"
echo '{"name":"staging","id":"0123"}' > "$WORK/archive/config.dump"
echo '{}' > "$WORK/archive/spec.dump"
cp -a "$WORK/stored-again" "$WORK/archive/checkpoint"
tar -C "$WORK/archive" -cf "$WORK/ck.tar" . || fail "cannot pack the archive"
"$GPUCKPT" export "$WORK/ck.tar" --store "$GPUCKPT_GPU_STORE" -o "$WORK/moved.tar" > "$WORK/export.out" 2>&1 ||
  fail "gpuckpt export: $(cat "$WORK/export.out")"
mv "$GPUCKPT_GPU_STORE" "$WORK/store-a-away"
export GPUCKPT_GPU_STORE=$WORK/store-b
"$GPUCKPT" import "$WORK/moved.tar" --store "$GPUCKPT_GPU_STORE" -o "$WORK/back.tar" --json > "$WORK/import.json" 2>&1 ||
  fail "gpuckpt import: $(cat "$WORK/import.json")"
grep -q "\"added_chunks\": $CHUNKS" "$WORK/import.json" || fail "import did not add the $CHUNKS chunks: $(cat "$WORK/import.json")"
tar -tf "$WORK/back.tar" | grep -q gpuckpt-chunks && fail "the imported archive still carries the chunks"
mkdir -p "$WORK/imported" && tar -C "$WORK/imported" -xf "$WORK/back.tar" || fail "cannot unpack the imported archive"
restore "$WORK/imported/checkpoint" || fail "criu restore of the imported checkpoint from the second store failed"
[ "$(checksum_now e "$RPID")" = "$SUM" ] || fail "the memory restored after export/import is not bit-identical"
echo "ok 9: exported with its $CHUNKS chunks, imported into an empty store, restored from it alone bit-identical"

# --- 10. the node store's chunks copied by default, mapped when asked--------------------------------------------------------
# store-b stands in for the node-local store (the test switch GPUCKPT_TEST_NODE_STORE; it is root's, mode 0700):
# its raw chunks are mapped into the restored process's staging memory, each checked by XXH3-64 first; the rest
# (zstd) is copied. Then a damaged raw chunk: the restore fails naming it, and no process is left.
kill -9 "$RPID"; gone "$RPID" || fail "pid $RPID did not go away"
export GPUCKPT_TEST_NODE_STORE=$GPUCKPT_GPU_STORE
LOG=$WORK/checkpoint-restore.log
# Unless the switch says so, chunks are copied: a restored process that keeps store files mapped cannot be dumped
# again inside a container (the files lie outside its mounts; seen with driver 580, whose restore leaves them).
restore "$WORK/imported/checkpoint" || fail "criu restore from the node store (switch unset) failed"
grep -Eq "gpuckpt: cuda: pid [0-9]+: mapped [0-9]+ chunk" "$LOG" && fail "chunks were mapped with GPUCKPT_STAGING_MAP_CHUNKS unset"
[ "$(grep -c " $GPUCKPT_GPU_STORE/sha256/" "/proc/$RPID/maps")" = 0 ] || fail "the restored process maps store files with the switch unset"
[ "$(checksum_now e "$RPID")" = "$SUM" ] || fail "the memory copied from the node store is not bit-identical"
kill -9 "$RPID"; gone "$RPID" || fail "pid $RPID did not go away"
export GPUCKPT_STAGING_MAP_CHUNKS=1
restore "$WORK/imported/checkpoint" || fail "criu restore with chunks mapped from the node store failed"
MAPPED=$(grep -Eo "gpuckpt: cuda: pid [0-9]+: mapped [0-9]+ chunk" "$LOG" | grep -Eo "[0-9]+ chunk" | grep -Eo "[0-9]+")
[ "${MAPPED:-0}" -gt 0 ] || fail "no chunk was mapped: $(grep -E 'mapping|mapped' "$LOG" | head -3)"
grep -q "filled .*$MAPPED chunks mapped from the store, each chunk checked by XXH3-64" "$LOG" ||
  fail "the fill does not account for the mapped chunks: $(grep 'filled' "$LOG")"
[ "$(checksum_now e "$RPID")" = "$SUM" ] || fail "the memory mapped from the node store is not bit-identical"
FILE_MAPS=$(grep -c " $GPUCKPT_GPU_STORE/sha256/" "/proc/$RPID/maps")
[ "$FILE_MAPS" = "$MAPPED" ] || fail "$MAPPED chunks mapped, yet the process maps $FILE_MAPS store files"
# The process writes into every page of its memory: the store's files keep their bytes (MAP_PRIVATE).
SUMS_BEFORE=$(find "$GPUCKPT_GPU_STORE/sha256" -type f -exec sha256sum {} + | sort | sha256sum)
rm -f "$WORK/e.out.written"; kill -USR2 "$RPID"
for _ in $(seq 200); do [ -s "$WORK/e.out.written" ] && break; sleep 0.05; done
[ -s "$WORK/e.out.written" ] || fail "pid $RPID did not write into its memory"
[ "$(checksum_now e "$RPID")" != "$SUM" ] || fail "the process's writes did not change its memory"
kill -9 "$RPID"; gone "$RPID" || fail "pid $RPID did not go away"
[ "$(find "$GPUCKPT_GPU_STORE/sha256" -type f -exec sha256sum {} + | sort | sha256sum)" = "$SUMS_BEFORE" ] ||
  fail "the process's writes reached the store's files"
RAW=$(find "$GPUCKPT_GPU_STORE/sha256" -type f -size $((4096 + 2 * MIB))c | head -1)
[ -n "$RAW" ] || fail "no raw chunk in the page-aligned layout (4096 + 2 MiB bytes) in the store"
printf '\x5a' | dd of="$RAW" bs=1 seek=$((4096 + 12345)) conv=notrunc 2>/dev/null
restore "$WORK/imported/checkpoint" && fail "the restore with a damaged chunk in the node store succeeded"
grep -q "$(basename "$RAW")).*XXH3-64" "$LOG" || fail "the damaged chunk is not named: $(grep -E 'XXH3|rror' "$LOG" | head -3)"
[ -z "$RPID" ] || gone "$RPID" || fail "a process with damaged memory was left running"
unset GPUCKPT_STAGING_MAP_CHUNKS
echo "ok 10: unset switch: every chunk copied, no store file mapped; with GPUCKPT_STAGING_MAP_CHUNKS=1 $MAPPED chunks mapped from the node store (each checked by XXH3-64), the rest copied: bit-identical, the process's writes stay its own; a damaged chunk failed the restore, named"

# --- 11. unchanged chunks recognised by XXH3-64 ---------------------------------------------------------------
# A node store of its own (the test switch); each dump leaves the process running, as kubelet's checkpoint does.
export GPUCKPT_GPU_STORE=$WORK/store-c GPUCKPT_TEST_NODE_STORE=$WORK/store-c
RECORDS=$GPUCKPT_GPU_STORE/processes
recognised() { grep -Eo "[0-9]+ chunks recognised unchanged by XXH3-64" "$WORK/$1-dump.log" | grep -Eo "^[0-9]+" || echo 0; }
written_mib() { grep -Eo "timing: gpu memory image write: .* ([0-9]+) MiB written" "$WORK/$1-dump.log" | grep -Eo "[0-9]+ MiB written" | grep -Eo "^[0-9]+"; }
manifest_chunks() { python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["chunks"]))' "$1"; }
stored_chunks() { python3 -c 'import json,sys; print(sum(c[0] != "zero" for c in json.load(open(sys.argv[1]))["chunks"]))' "$1"; }
start_process f
dump "$WORK/lin-1" "$PID" --leave-running || fail "the first dump into the node store failed"
ls "$RECORDS"/*-"$PID"-*.json >/dev/null 2>&1 || fail "the dump kept no record of pid $PID in $RECORDS"
[ "$(stat -c %a "$RECORDS")" = 700 ] || fail "$RECORDS is not root-only"
[ "$(recognised lin-1)" = 0 ] || fail "the first dump recognised chunks it had no manifest for"
STORED=$(stored_chunks "$WORK/lin-1/gpuckpt-gpumem-$PID.manifest.json")
dump "$WORK/lin-2" "$PID" --leave-running || fail "the second dump failed"
[ "$(recognised lin-2)" = "$STORED" ] ||
  fail "the second dump of unchanged memory recognised $(recognised lin-2) of $STORED stored chunks: $(grep -E 'recognis|hashed' "$WORK/lin-2-dump.log" | head -3)"
[ "$(written_mib lin-2)" = 0 ] || fail "the second dump of unchanged memory wrote $(written_mib lin-2) MiB"
[ "$(manifest_chunks "$WORK/lin-1/gpuckpt-gpumem-$PID.manifest.json")" = "$(manifest_chunks "$WORK/lin-2/gpuckpt-gpumem-$PID.manifest.json")" ] ||
  fail "the recognised chunks are not the first manifest's"
[ "$(checksum_now f "$PID")" = "$SUM" ] || fail "the process's memory changed across the dumps"
# The process changes every page: nothing is recognised, every chunk is hashed and stored.
rm -f "$WORK/f.out.written"; kill -USR2 "$PID"
for _ in $(seq 200); do [ -s "$WORK/f.out.written" ] && break; sleep 0.05; done
[ -s "$WORK/f.out.written" ] || fail "pid $PID did not write into its memory"
CHANGED=$(checksum_now f "$PID")
dump "$WORK/lin-3" "$PID" || fail "the dump of changed memory failed"
gone "$PID" || fail "pid $PID did not go away"
[ "$(recognised lin-3)" = 0 ] || fail "the dump of changed memory recognised $(recognised lin-3) chunks"
[ "$(written_mib lin-3)" -gt 0 ] || fail "the dump of changed memory wrote nothing"
# Restored from the node store (every chunk checked by XXH3-64): the restored process's manifest is kept. Copied,
# not mapped: the test switch names one anonymous mapping, which mapped chunk files would split (a CUDA process's
# next dump reads the driver's new staging memory instead).
GPUCKPT_STAGING_MAP_CHUNKS=0 restore "$WORK/lin-3" || fail "the restore of the changed memory failed"
[ "$(checksum_now f "$RPID")" = "$CHANGED" ] || fail "the changed memory did not restore bit-identical"
ls "$RECORDS"/*-"$RPID"-*.json >/dev/null 2>&1 || fail "the restore kept no record of pid $RPID"
# The restore's own steps, left in the node store for the restored pid (the agent takes them for its job record).
SPOOLED=$GPUCKPT_GPU_STORE/restore-timings/$RPID.json
[ -f "$SPOOLED" ] || fail "the restore left no $SPOOLED: $(grep 'restore steps' "$WORK/lin-3-restore.log")"
[ "$(stat -c %a "$(dirname "$SPOOLED")")" = 700 ] || fail "$(dirname "$SPOOLED") is not root-only"
python3 - "$SPOOLED" <<'PY' || fail "the restore's steps are not what a stand-in restore from a store takes: $(cat "$SPOOLED")"
import json, sys
t = json.load(open(sys.argv[1]))
assert set(t) == {"cpu-pages", "gpu-memory", "gpu-restore"}, t
assert t["gpu-memory"] > 0, t
assert all(0 <= v < 600 for v in t.values()), t
PY
grep -qF "timing: restore steps of pid $RPID: $(cat "$SPOOLED")" "$WORK/lin-3-restore.log" ||
  fail "CRIU's log does not say the restore's steps as spooled: $(grep 'restore steps' "$WORK/lin-3-restore.log")"
[ -z "$(ls "$RECORDS"/*-"$PID"-*.json 2>/dev/null)" ] || [ "$PID" = "$RPID" ] ||
  fail "the record of pid $PID (gone) was not removed"
dump "$WORK/lin-4" "$RPID" --leave-running || fail "the dump of the restored process failed"
STORED=$(stored_chunks "$WORK/lin-3/gpuckpt-gpumem-$PID.manifest.json")
[ "$(recognised lin-4)" = "$STORED" ] || fail "the restored process's dump recognised $(recognised lin-4) of $STORED chunks"
GPUCKPT_STORE_RECOGNISE_UNCHANGED=0 dump "$WORK/lin-5" "$RPID" --leave-running || fail "the dump with recognition off failed"
[ "$(recognised lin-5)" = 0 ] || fail "GPUCKPT_STORE_RECOGNISE_UNCHANGED=0 still recognised chunks"
grep -q "param: GPUCKPT_STORE_RECOGNISE_UNCHANGED:0" "$WORK/lin-5-dump.log" || fail "the switch was not logged"
[ "$(manifest_chunks "$WORK/lin-4/gpuckpt-gpumem-$PID.manifest.json")" = "$(manifest_chunks "$WORK/lin-5/gpuckpt-gpumem-$PID.manifest.json")" ] ||
  fail "recognised and hashed chunks differ"
[ "$(checksum_now f "$RPID")" = "$CHANGED" ] || fail "the restored process's memory changed across the dumps"
kill -9 "$RPID"; gone "$RPID" || fail "pid $RPID did not go away"
unset GPUCKPT_GPU_STORE GPUCKPT_TEST_NODE_STORE
echo "ok 11: a second dump recognised all $STORED stored chunks by XXH3-64 (same chunks, 0 MiB written); changed memory: none, new chunks stored; after a restore from the node store the next dump recognised them again; the switch off hashes every chunk"

# --- 12. CPU pages in the chunk store ------------------------------------------------------------------------------
HEAP_MIB=96
start_heap_process() { # $1 = name; sets PID ADDR SUM HEAP
  rm -f "$WORK/$1.out" "$WORK/$1.out.heap"
  setsid "$HELPER" --heap "$HEAP_MIB" 16 "$WORK/$1.out" </dev/null >/dev/null 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 400); do [ -s "$WORK/$1.out" ] && break; sleep 0.05; done
  [ -s "$WORK/$1.out" ] || fail "the heap process did not start"
  read -r ADDR SUM < "$WORK/$1.out"
  HEAP=$(cat "$WORK/$1.out.heap")
}
heap_now() { checksum_now "$1" "$2" > /dev/null; cat "$WORK/$1.out.heap"; }
new_cpu_mib() { grep -Eo "timing: cpu pages into the chunk store .* new \(([0-9.]+) MiB written\)" "$WORK/$1-dump.log" | grep -Eo "\(([0-9.]+) MiB" | tr -d '(' | cut -d. -f1; }
export GPUCKPT_GPU_STORE=$WORK/store12
start_heap_process h
dump "$WORK/cpu-1" "$PID" || fail "criu dump with CPU pages into the store failed"
gone "$PID" || fail "pid $PID did not go away"
grep -q "timing: cpu pages into the chunk store $GPUCKPT_GPU_STORE: [1-9][0-9]* page image(s)" "$WORK/cpu-1-dump.log" ||
  fail "the dump did not move the page images: $(grep 'cpu pages' "$WORK/cpu-1-dump.log")"
ls "$WORK/cpu-1"/gpuckpt-pages-*.manifest.json >/dev/null 2>&1 || fail "no pages manifest in CRIU's images"
[ "$(pages_bytes "$WORK/cpu-1")" = 0 ] || fail "CRIU's page images still hold $(pages_bytes "$WORK/cpu-1") bytes"
# The plugin's steps beside CRIU's stats-dump, for the job record's split of the checkpoint's time.
TIMINGS="$WORK/cpu-1/gpuckpt-dump-timings.json"
[ -f "$TIMINGS" ] || fail "the dump wrote no $(basename "$TIMINGS")"
python3 - "$TIMINGS" <<'PY' || fail "the plugin's dump timings are not what a stand-in dump into a store takes: $(cat "$TIMINGS")"
import json, sys
t = json.load(open(sys.argv[1]))
assert set(t) == {"gpu-lock", "gpu-checkpoint", "gpu-memory-images", "cpu-pages-store"}, t
assert t["gpu-memory-images"] > 0 and t["cpu-pages-store"] > 0, t
assert all(0 <= v < 600 for v in t.values()), t
PY
IMAGES1=$(du -cb "$WORK"/cpu-1/* | tail -1 | cut -f1)
[ "$IMAGES1" -lt $((HEAP_MIB * MIB / 16)) ] || fail "CRIU's images still carry the heap ($IMAGES1 bytes)"
INSPECT=$("$GPUCKPT" inspect "$WORK/cpu-1") || fail "gpuckpt inspect of images with a pages manifest: $INSPECT"
grep -q "CPU pages manifest" <<<"$INSPECT" || fail "inspect did not show the pages manifest: $INSPECT"
restore "$WORK/cpu-1" || fail "criu restore with CPU pages from the store failed"
grep -q "timing: cpu pages from the chunk store: [1-9]" "$WORK/cpu-1-restore.log" || fail "the restore did not rebuild the page images"
STEPS=$(grep -o "timing: restore steps of pid $RPID: {.*}" "$WORK/cpu-1-restore.log" | sed 's/^[^{]*//')
python3 -c 'import json,sys; t = json.loads(sys.argv[1]); assert t["cpu-pages"] > 0, t' "$STEPS" ||
  fail "the restore's steps do not count the page images' rebuild: $STEPS"
[ "$(heap_now h "$RPID")" = "$HEAP" ] || fail "the restored heap is not bit-identical"
[ "$(checksum_now h "$RPID")" = "$SUM" ] || fail "the restored staging memory is not bit-identical"
# The restored process, checkpointed again: its heap is in the store already.
CPU1=$(new_cpu_mib cpu-1)
dump "$WORK/cpu-2" "$RPID" || fail "the second dump failed"
gone "$RPID" || fail "pid $RPID did not go away"
CPU2=$(new_cpu_mib cpu-2)
[ "${CPU1:-0}" -ge "$HEAP_MIB" ] || fail "the first dump wrote ${CPU1:-?} MiB of CPU chunks for a $HEAP_MIB MiB heap"
[ "${CPU2:-999}" -le $((HEAP_MIB / 10)) ] || fail "the second dump wrote ${CPU2:-?} MiB of new CPU chunks (unchanged heap of $HEAP_MIB MiB)"
# A CPU chunk gone: named at the plugin's init, nothing forked.
PAGES_MANIFESTS=("$WORK"/cpu-2/gpuckpt-pages-*.manifest.json)
VICTIM=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(next(c[3] for c in m["chunks"] if c[0] != "zero"))' \
  "${PAGES_MANIFESTS[0]}")
VICTIM_PATH=$GPUCKPT_GPU_STORE/sha256/${VICTIM:0:2}/$VICTIM
mv "$VICTIM_PATH" "$WORK/victim12" || fail "no chunk $VICTIM_PATH"
restore "$WORK/cpu-2" && fail "the restore with a missing CPU chunk succeeded"
grep -q "CPU memory in CRIU's page image pages-[0-9]*.img.*chunk $VICTIM.*missing" "$WORK/cpu-2-restore.log" ||
  fail "the restore error does not name the page image and the chunk: $(grep -m3 'gpuckpt' "$WORK/cpu-2-restore.log" | tail -1)"
grep -q "Forking task" "$WORK/cpu-2-restore.log" && fail "CRIU forked a task before the missing CPU chunk stopped it"
mv "$WORK/victim12" "$VICTIM_PATH"
restore "$WORK/cpu-2" || fail "the restore with the chunk back failed"
[ "$(heap_now h "$RPID")" = "$HEAP" ] || fail "the twice-restored heap is not bit-identical"
kill -9 "$RPID"; gone "$RPID" || fail "pid $RPID did not go away"
# Switched off, and inline: the page images stay whole.
start_heap_process i
GPUCKPT_CPU_PAGES_STORE=0 dump "$WORK/cpu-off" "$PID" --leave-running || fail "the dump with GPUCKPT_CPU_PAGES_STORE=0 failed"
[ "$(pages_bytes "$WORK/cpu-off")" -ge $((HEAP_MIB * MIB)) ] || fail "GPUCKPT_CPU_PAGES_STORE=0 still moved the page images"
ls "$WORK/cpu-off"/gpuckpt-pages-*.manifest.json >/dev/null 2>&1 && fail "GPUCKPT_CPU_PAGES_STORE=0 wrote a pages manifest"
unset GPUCKPT_GPU_STORE
dump "$WORK/cpu-inline" "$PID" --leave-running || fail "the inline dump failed"
[ "$(pages_bytes "$WORK/cpu-inline")" -ge $((HEAP_MIB * MIB)) ] || fail "an inline dump moved the page images"
[ "$(heap_now i "$PID")" = "$HEAP" ] || fail "the heap changed across the dumps"
kill -9 "$PID"
echo "ok 12: CPU pages: $IMAGES1 bytes of images left for a $HEAP_MIB MiB heap; first dump ${CPU1} MiB of new CPU chunks, the restored process's next ${CPU2} MiB; restored bit-identical; a missing chunk named at init; off and inline keep the page images"
echo "PASS"
