#!/usr/bin/env bash
# e2e (no GPU needed): GPU memory in the chunk store (docs/formats.md "Chunk store") through the real runtimes,
# as users checkpoint containers: podman (+ runc + CRIU) or containerd 2.1 driven with the CRI calls kubelet makes
# (cri-tool: RunPodSandbox, CreateContainer, CheckpointContainer to a kubelet-style archive, restore by
# CreateContainer from the archive's path + StartContainer), with gpuckpt's plugin installed as a node has it: the
# plugin and its settings file gpuckpt_plugin.env (which sets GPUCKPT_GPU_STORE) in CRIU's plugin directory.
#
#   store_flow.sh podman|containerd2
#
# The workload is test/criu-plugin/staging_process inside a container: a private anonymous mapping standing in for
# a CUDA process's staged GPU memory, named to the stand-in plugin (test/criu-plugin/stand_in/stand_ins.h: the
# installed plugin's code with stand-ins for a GPU node) by GPUCKPT_TEST_STAGING_VMA (random,
# zero and bf16-like stretches; the process's own checksum of it proves a restore bit-identical). The switch is
# read from CRIU's environment only (never from a node's settings file), and the runtimes pass their callers'
# environment to CRIU differently:
#   - containerd: containerd -> shim -> runc -> CRIU inherit containerd's environment. containerd is started with
#     CRIU_LIBS_DIR (the node's plugin directory) and the switch; the stand-in maps its memory at the address the
#     switch names (staging_process --at), since the switch must be set before the pod's shim starts.
#   - podman 4.3: `runc checkpoint` gets only PATH and XDG_RUNTIME_DIR from podman, `runc restore` only conmon's
#     environment, so nothing set on podman reaches CRIU. The node's CRIU is named to runc with its own global
#     option (podman --runtime-flag criu=NODE/criu): a script that puts CRIU_LIBS_DIR and the switch into CRIU's
#     environment and runs the real criu.
# Two "nodes" on this machine: node A and node B, each with its own plugin directory and settings file and its own
# node-local store (a directory in the node's state dir, root-only; it stands in for /var/lib/gpuckpt/chunks,
# which tests running beside this one share); and a directory standing in for an RWX volume mounted on both.
#   local:  checkpoint and restore on node A, GPUCKPT_GPU_STORE = node A's store;
#   shared: checkpoint on node A, restore (and checkpoint again) on node B, both with GPUCKPT_GPU_STORE = the
#           shared directory; nothing is copied (node B's own store stays empty).
# Each checks: the runtime's archive (podman's --export, --compress none; the CRI archive kubelet keeps) holds a
# manifest and no GPU memory image, and is at most its CRIU pages images + 1 MiB (the kubelet archive's size
# target); every chunk the manifest names is in the expected store, and no other store gained one; with one chunk
# removed, the restore fails before the container runs, CRIU's restore.log naming the checkpoint, the chunk and
# its path, and the archive is byte-identical afterwards; with the chunk back it restores and the memory is
# bit-identical; a second checkpoint of the unchanged memory writes no chunk (the store's files, inodes included,
# are the same) and names the same chunks under a new checkpoint id. containerd's CheckpointContainer leaves the
# source running: its memory is checked after the dump too.
# Exit 0 pass, 77 skipped (no root, or the runtime / CRIU / registry this flavour needs is missing), else fail.
# Every wait is bounded; cleanup always runs (KEEP=1 keeps the work dir).
set -euo pipefail

RUNTIME=${1:-}
BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
PLUGIN=$BUILD/test/criu-plugin/stand-in/gpuckpt_plugin.so   # the installed plugin with the stand-ins
HELPER=$BUILD/test/criu-plugin/staging_process
CRI_TOOL=$BUILD/test/e2e/cri-tool
CTRD_BIN_DIR=${GPUCKPT_PREFIX:-/opt/gpuckpt}/containerd2/usr/bin
MIB=${STORE_E2E_MIB:-64}
VMA=100000000000   # where the stand-in maps its memory (hex): far below the mmap area and above any PIE binary
MIB_BYTES=$((1 << 20))

skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL: $*" >&2
  [ -n "${CTRD_LOG:-}" ] && [ -f "$CTRD_LOG" ] && { echo "--- $CTRD_LOG" >&2; tail -n 15 "$CTRD_LOG" >&2; }
  exit 1
}
step() { printf '\n== %s\n' "$*"; }

case "$RUNTIME" in podman|containerd2) ;; *) echo "usage: store_flow.sh podman|containerd2" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || skip "needs root (runc, CRIU)"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
. "$SRC/scripts/lib/criu-probe.sh"
. "$SRC/scripts/lib/node-sandbox.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
CRIU_BIN=$(command -v criu)
command -v podman >/dev/null || skip "podman not installed (scripts/setup.sh; it also builds the stand-in's image here)"
if [ "$RUNTIME" = containerd2 ]; then
  [ -x "$CTRD_BIN_DIR/containerd" ] || skip "containerd 2.1 not installed in $CTRD_BIN_DIR (scripts/setup.sh)"
  [[ "$("$CTRD_BIN_DIR/containerd" --version | awk '{sub(/^v/, "", $3); print $3}')" == 2.1.* ]] ||
    fail "$CTRD_BIN_DIR/containerd is not 2.1.x: $("$CTRD_BIN_DIR/containerd" --version)"
  command -v docker-registry >/dev/null || skip "docker-registry not installed (scripts/setup.sh): containerd 2.1 pulls the base image at every restore"
  [ -x "$CRI_TOOL" ] || fail "$CRI_TOOL not built"
  . "$SRC/scripts/lib/containerd-sandbox.sh"
fi
for f in "$PLUGIN" "$HELPER"; do [ -f "$f" ] || fail "$f not built"; done
ldd "$PLUGIN" 2>/dev/null | grep -qE 'lib(asan|ubsan)' && skip "plugin built with sanitizers cannot load into CRIU"

# short: the stores' paths are settings-file values (at most 64 characters, gpumem/plugin_settings.h)
TMP=$(mktemp -d /tmp/gpuckpt-store.XXXXXX)
NAME=gpuckpt-e2e-store-$$
IMAGE=localhost/gpuckpt-e2e-store-$$:latest   # podman names are lower case
RWX=$TMP/rwx/chunks                           # the shared volume, "mounted" on both nodes
REGISTRY_PID=''
cleanup() {
  set +e
  if [ "$RUNTIME" = podman ]; then
    for c in $(podman ps -a --format '{{.Names}}' | grep "^$NAME"); do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  else
    ctrd_stop
    [ -n "$REGISTRY_PID" ] && kill "$REGISTRY_PID" 2>/dev/null && wait "$REGISTRY_PID" 2>/dev/null
    rm -rf "/tmp/$NAME"-*-logs   # the pods' log directories (cri-tool: /tmp/POD-logs)
  fi
  podman rmi -f "$IMAGE" >/dev/null 2>&1
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# ---- the nodes ------------------------------------------------------------------------------------------------
# node_dir NODE: node A's or B's directory: criu-plugins/ (the plugin, its settings file), chunks/ (its own store),
# criu (its CRIU, for podman)
node_dir() { echo "$TMP/node-$1"; }
for node in a b; do
  dir=$(node_dir $node)
  mkdir -p "$dir/criu-plugins"
  cp "$PLUGIN" "$dir/criu-plugins/"
  cat > "$dir/criu" <<SH
#!/bin/sh
# node $node's CRIU as runc runs it: its plugin directory, and the test switch naming the stand-in's memory
export CRIU_LIBS_DIR=$dir/criu-plugins GPUCKPT_TEST_STAGING_VMA=0x$VMA
exec $CRIU_BIN "\$@"
SH
  chmod 755 "$dir/criu"
done
# use_store NODE DIR: the node's settings file (what the chart's installer writes from the agent's gpu_memory values)
use_store() { printf '# gpuckpt: managed file\nGPUCKPT_GPU_STORE=%s\n' "$2" > "$(node_dir "$1")/criu-plugins/gpuckpt_plugin.env"; }
# chunk_files DIR: every chunk file of a store with its inode (a chunk written again gets a new one), sorted
chunk_files() { [ -d "$1/sha256" ] && find "$1/sha256" -type f -printf '%P %i\n' | sort; return 0; }
chunk_count() { chunk_files "$1" | wc -l; }

# ---- the stand-in's image: staging_process and its libraries ------------------------------------------------
step "the stand-in's image"
ROOTFS=$TMP/rootfs
sandbox_program_image "$HELPER" "$ROOTFS" "$IMAGE" || fail "podman import of the stand-in's image"
STANDIN=(/bin/staging_process --at "$VMA" "$MIB" /tmp/staging.out)
echo "ok: $IMAGE: $(du -sh "$ROOTFS" | cut -f1) (staging_process --at 0x$VMA, $MIB MiB)"

# ---- the stand-in's memory, as its own checksum -----------------------------------------------------------------
# standin_ready PID: its "ADDRESS CHECKSUM" line (sets SUM) once it has filled its memory
standin_ready() {
  local line=''
  for _ in $(seq 300); do
    line=$(cat "/proc/$1/root/tmp/staging.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  [ -n "$line" ] || fail "the stand-in (pid $1) did not report its memory within 30 s"
  [ "${line%% *}" = "$VMA" ] || fail "the stand-in's memory is at ${line%% *}, not at 0x$VMA"
  SUM=${line#* }
}
# checksum_now PID: the stand-in's checksum of its memory as it is now
checksum_now() {
  local check=/proc/$1/root/tmp/staging.out.check
  rm -f "$check"
  kill -USR1 "$1" || fail "pid $1 is not running"
  for _ in $(seq 200); do [ -s "$check" ] && break; sleep 0.05; done
  [ -s "$check" ] || fail "pid $1 did not answer with its checksum"
  cat "$check"
}

# ---- what a runtime's archive holds -----------------------------------------------------------------------------
# archive_check ARCHIVE STORE WHAT: a GPU memory manifest and no GPU memory image; CRIU's page images there but
# empty, with a pages manifest each (the CPU pages went into the store too); at most 1 MiB in all; every chunk the
# manifests name in STORE. Sets CHECKPOINT (the GPU manifest's checkpoint id), DIGESTS (its chunks) and
# CPU_DIGESTS (the pages manifests' chunks).
archive_check() {
  local archive=$1 store=$2 what=$3 listing size pages
  listing=$(tar -tvf "$archive") || fail "$what: $archive is not a tar"
  grep -Eq ' checkpoint/gpuckpt-gpumem-1\.manifest\.json$' <<<"$listing" || fail "$what: no manifest in the archive"
  ! grep -Eq ' checkpoint/gpuckpt-gpumem-[0-9]+\.img' <<<"$listing" || fail "$what: the archive carries a GPU memory image"
  size=$(stat -c %s "$archive")
  grep -Eq ' checkpoint/pages-[0-9]+\.img$' <<<"$listing" || fail "$what: no CRIU pages image in the archive"
  pages=$(awk '$NF ~ /^checkpoint\/pages-[0-9]+\.img$/ {s += $3} END {print s + 0}' <<<"$listing")
  [ "$pages" = 0 ] || fail "$what: CRIU's page images in the archive hold $pages bytes: the CPU pages did not go into the store"
  grep -Eq ' checkpoint/gpuckpt-pages-[0-9]+\.manifest\.json$' <<<"$listing" || fail "$what: no pages manifest in the archive"
  [ "$size" -le "$MIB_BYTES" ] || fail "$what: the archive is $size bytes, more than 1 MiB"
  mkdir -p "$TMP/pages-manifests" && rm -f "$TMP"/pages-manifests/*
  tar -C "$TMP/pages-manifests" --strip-components=1 -xf "$archive" --wildcards 'checkpoint/gpuckpt-pages-*.manifest.json' ||
    fail "$what: cannot read the pages manifests"
  python3 - "$store" "$TMP"/pages-manifests/*.json > "$TMP/cpu.digests" <<'PY' || fail "$what: the pages manifests' chunks are not all in $store"
import json, os, sys
store, digests = sys.argv[1], set()
for path in sys.argv[2:]:
    m = json.load(open(path))
    assert m["kind"] == "cpu-pages" and m["store"] == store, (path, m["kind"], m["store"])
    digests |= {c[3] for c in m["chunks"] if c[0] != "zero"}
missing = [d for d in digests if not os.path.isfile(os.path.join(store, "sha256", d[:2], d))]
assert digests and not missing, f"{len(missing)} of {len(digests)} chunks missing"
print(",".join(sorted(digests)))
PY
  CPU_DIGESTS=$(cat "$TMP/cpu.digests")
  tar -xOf "$archive" checkpoint/gpuckpt-gpumem-1.manifest.json > "$TMP/manifest.json"
  python3 - "$TMP/manifest.json" "$store" "$MIB" > "$TMP/manifest.chunks" <<'PY' || fail "$what: the manifest's chunks are not all in $store"
import json, os, sys
m = json.load(open(sys.argv[1]))
store, mib = sys.argv[2], int(sys.argv[3])
assert m["store"] == store, f"the manifest says the dump wrote to {m['store']}, not {store}"
assert sum(length for _, length in m["regions"]) == mib << 20, m["regions"]
digests = [c[3] for c in m["chunks"] if c[0] != "zero"]
missing = [d for d in digests if not os.path.isfile(os.path.join(store, "sha256", d[:2], d))]
assert digests and not missing, f"{len(missing)} of {len(digests)} chunks missing, e.g. {missing[:1]}"
print(m["checkpoint"], ",".join(sorted(set(digests))))
PY
  read -r CHECKPOINT DIGESTS < "$TMP/manifest.chunks"
  echo "ok: $what: $(basename "$archive") is $size bytes: manifests, empty page images; checkpoint $CHECKPOINT, its $(tr ',' '\n' <<<"$DIGESTS" | wc -l) GPU and $(tr ',' '\n' <<<"$CPU_DIGESTS" | wc -l) CPU chunks in $store"
}

# only_cpu_chunks_added BEFORE STORE WHAT: the chunk files STORE has beyond the listing BEFORE (chunk_files) are CPU
# chunks of the last archive_check'ed archive: a process's own small pages (stack, libc's data) change as it runs,
# its GPU memory did not.
only_cpu_chunks_added() {
  local added
  added=$(comm -13 <(echo "$1" | awk '{print $1}' | sort) <(chunk_files "$2" | awk '{print $1}' | sort) | awk -F/ '{print $NF}')
  for d in $added; do
    [[ ",$CPU_DIGESTS," == *",$d,"* ]] || fail "$3: the store gained chunk $d, which is none of the checkpoint's CPU chunks"
  done
}

# restore_error_check LOG NODE WHAT: CRIU's restore.log (with NODE's settings) says which checkpoint lacks which
# chunk where, and CRIU restored nothing (the plugin stopped it at init)
restore_error_check() {
  local log=$1 node=$2 what=$3
  [ -f "$log" ] || fail "$what: no restore.log at $log"
  grep -q "gpuckpt: param: settings file:$(node_dir "$node")/criu-plugins/gpuckpt_plugin.env (1 settings)" "$log" ||
    fail "$what: CRIU did not read node ${node^^}'s settings file: $(grep 'gpuckpt: param: settings' "$log")"
  grep -q "gpuckpt: cuda: checkpoint $CHECKPOINT: .*chunk $(basename "$VICTIM") .*is expected at $VICTIM: missing" "$log" ||
    fail "$what: restore.log does not name the checkpoint $CHECKPOINT, the chunk and $VICTIM: $(grep gpuckpt "$log" | tail -3)"
  ! grep -q "Forking task" "$log" || fail "$what: CRIU forked a task before the missing chunk stopped it"
  echo "ok: $what: $(grep -o "checkpoint $CHECKPOINT: .*: missing" "$log" | head -1)"
}

# remove_chunk STORE: takes one chunk the checkpoint needs out of the store (VICTIM: its path)
remove_chunk() { VICTIM=$1/sha256/${DIGESTS:0:2}/${DIGESTS%%,*}; mv "$VICTIM" "$TMP/victim"; }
put_chunk_back() { mv "$TMP/victim" "$VICTIM"; }

# ================================================================================================================
# podman
# ================================================================================================================
# pm NODE ARGS...: podman with NODE's CRIU
pm() { local node=$1; shift; podman --runtime-flag "criu=$(node_dir "$node")/criu" "$@"; }
ctr_pid() { podman inspect -f '{{.State.Pid}}' "$1"; }
static_dir() { podman inspect -f '{{.StaticDir}}' "$1"; }

# podman_case MODE CHECKPOINT_NODE RESTORE_NODE STORE
podman_case() {
  local mode=$1 from=$2 to=$3 store=$4 name=$NAME-$1 pid sum before first second sha log
  step "podman, $mode store ($store): checkpoint on node ${from^^}, restore on node ${to^^}"
  use_store "$from" "$store"
  use_store "$to" "$store"
  before="$(chunk_files "$(node_dir a)/chunks")|$(chunk_files "$(node_dir b)/chunks")|$(chunk_files "$RWX")"
  pm "$from" run -d --name "$name" --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$IMAGE" "${STANDIN[@]}" >/dev/null ||
    fail "podman run of the stand-in"
  pid=$(ctr_pid "$name")
  standin_ready "$pid"
  sum=$SUM
  first=$TMP/$mode-1.tar
  pm "$from" container checkpoint --export "$first" --compress none --keep "$name" > "$TMP/$mode-ck1.out" 2>&1 ||
    fail "podman checkpoint on node ${from^^}: $(cat "$TMP/$mode-ck1.out")"
  log=$(static_dir "$name")/dump.log
  grep -q "gpuckpt: param: settings file:$(node_dir "$from")/criu-plugins/gpuckpt_plugin.env (1 settings)" "$log" ||
    fail "CRIU did not read node ${from^^}'s settings file: $(grep 'gpuckpt: param: settings' "$log")"
  grep -q "gpuckpt: cuda: pid [0-9]*: wrote gpuckpt-gpumem-1.manifest.json (chunks in $store)" "$log" ||
    fail "CRIU's dump.log does not say the plugin wrote a manifest over $store: $(grep 'gpuckpt: cuda' "$log" | tail -3)"
  archive_check "$first" "$store" "podman export ($mode)"
  # No other store gained a chunk: before the dump every store's files were $before
  case "$store" in
    "$RWX") [ "$(chunk_files "$(node_dir a)/chunks")|$(chunk_files "$(node_dir b)/chunks")" = "${before%|*}" ] ||
              fail "a node-local store changed while the dump wrote to the shared one" ;;
    *) [ "$(chunk_files "$(node_dir b)/chunks")|$(chunk_files "$RWX")" = "${before#*|}" ] ||
         fail "node B's store or the shared one changed while node A's dump wrote to its own" ;;
  esac
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || fail "podman rm $name"

  remove_chunk "$store"
  sha=$(sha256sum < "$first")
  if pm "$to" container restore --import "$first" --keep > "$TMP/$mode-rs-missing.out" 2>&1; then
    fail "podman restored on node ${to^^} although chunk $VICTIM is missing"
  fi
  [ "$(podman inspect -f '{{.State.Status}}' "$name" 2>/dev/null || echo gone)" != running ] ||
    fail "the container runs although its restore failed"
  log=$(static_dir "$name")/restore.log
  restore_error_check "$log" "$to" "podman restore on node ${to^^} with a chunk missing"
  [ "$(sha256sum < "$first")" = "$sha" ] || fail "the failed restore changed the archive"
  echo "ok: the archive is byte-identical after the failed restore"
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || fail "podman rm $name"

  put_chunk_back
  pm "$to" container restore --import "$first" > "$TMP/$mode-rs.out" 2>&1 ||
    fail "podman restore on node ${to^^} with every chunk there: $(cat "$TMP/$mode-rs.out")"
  pid=$(ctr_pid "$name")
  [ "$(checksum_now "$pid")" = "$sum" ] || fail "the restored memory is not bit-identical"
  echo "ok: restored on node ${to^^} from $store: memory bit-identical ($sum)"

  before=$(chunk_files "$store")
  second=$TMP/$mode-2.tar
  pm "$to" container checkpoint --export "$second" --compress none --keep "$name" > "$TMP/$mode-ck2.out" 2>&1 ||
    fail "second podman checkpoint on node ${to^^}: $(cat "$TMP/$mode-ck2.out")"
  grep -q "timing: gpu memory image write: .* 0 MiB written" "$(static_dir "$name")/dump.log" ||
    fail "the second dump of unchanged memory wrote: $(grep 'timing: gpu memory image write' "$(static_dir "$name")/dump.log")"
  local digests=$DIGESTS ck=$CHECKPOINT
  archive_check "$second" "$store" "second podman export ($mode)"
  only_cpu_chunks_added "$before" "$store" "the second checkpoint of unchanged GPU memory"
  [ "$DIGESTS" = "$digests" ] && [ "$CHECKPOINT" != "$ck" ] ||
    fail "the second checkpoint does not name the first one's chunks under its own id"
  echo "ok: the second checkpoint (node ${to^^}) wrote no GPU chunk: $(chunk_count "$store") files in $store"
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || fail "podman rm $name"
  [ "$store" != "$RWX" ] || [ "$(chunk_count "$(node_dir b)/chunks")" = 0 ] ||
    fail "node B's own store has chunks: something was copied"
}

# ================================================================================================================
# containerd 2.1 through CRI
# ================================================================================================================
cri() { "$CRI_TOOL" "$CTRD_SOCK" "$@"; }
KDIR=$TMP/kubelet/checkpoints
CTRD_NODE=''
# ctrd_node NODE: containerd of NODE running (the other node's stopped): CRIU_LIBS_DIR and the switch in its
# environment, so its shims, runc and CRIU have them; the stand-in's image pulled through CRI
ctrd_node() {
  [ "$CTRD_NODE" = "$1" ] && return 0
  ctrd_stop
  CTRD_CRIU_WORK_PATH=$(node_dir "$1")/criu-work   # CRIU's logs outlive a failed restore's bundle
  mkdir -p "$CTRD_CRIU_WORK_PATH"
  CRIU_LIBS_DIR=$(node_dir "$1")/criu-plugins GPUCKPT_TEST_STAGING_VMA=0x$VMA ctrd_start "$(node_dir "$1")/containerd" ||
    fail "containerd 2.1 of node ${1^^} did not start"
  ctrd_registry_host "$REGISTRY"
  cri pull "$REMOTE" >/dev/null || fail "CRI PullImage $REMOTE on node ${1^^}"
  CTRD_NODE=$1
}

# containerd_case MODE CHECKPOINT_NODE RESTORE_NODE STORE
containerd_case() {
  local mode=$1 from=$2 to=$3 store=$4 pod cid pid sum first second sha log before rid digests ck
  step "containerd 2.1 (CRI), $mode store ($store): checkpoint on node ${from^^}, restore on node ${to^^}"
  use_store "$from" "$store"
  use_store "$to" "$store"
  ctrd_node "$from"
  before="$(chunk_files "$(node_dir a)/chunks")|$(chunk_files "$(node_dir b)/chunks")|$(chunk_files "$RWX")"
  pod=$(cri run-pod "$NAME-src-$mode") || fail "RunPodSandbox"
  cid=$(cri create "$NAME-src-$mode" "$pod" standin "$REMOTE" --user-image "$REMOTE" -- "${STANDIN[@]}" 2>&1) ||
    fail "CreateContainer: $cid"
  cri start "$cid" || fail "StartContainer"
  pid=$(cri pid "$cid")
  standin_ready "$pid"
  sum=$SUM
  # kubelet's archive: checkpoint-<pod>_<namespace>-<container>-<time>.tar
  first=$KDIR/checkpoint-$NAME-src-${mode}_default-standin-$(date -u +%Y-%m-%dT%H:%M:%SZ).tar
  cri checkpoint "$cid" "$first" 2> "$TMP/$mode-ck1.err" || fail "CRI CheckpointContainer on node ${from^^}: $(cat "$TMP/$mode-ck1.err")"
  archive_check "$first" "$store" "CRI checkpoint archive ($mode)"
  case "$store" in
    "$RWX") [ "$(chunk_files "$(node_dir a)/chunks")|$(chunk_files "$(node_dir b)/chunks")" = "${before%|*}" ] ||
              fail "a node-local store changed while the dump wrote to the shared one" ;;
    *) [ "$(chunk_files "$(node_dir b)/chunks")|$(chunk_files "$RWX")" = "${before#*|}" ] ||
         fail "node B's store or the shared one changed while node A's dump wrote to its own" ;;
  esac
  # CheckpointContainer leaves the container running: the plugin put the memory back before it ran on
  [ "$(checksum_now "$pid")" = "$sum" ] || fail "the source's memory changed across CheckpointContainer"
  echo "ok: the source runs on after CheckpointContainer with its memory bit-identical"
  # kubelet checkpoints the same container again (nothing changed): no chunk written
  before=$(chunk_files "$store")
  digests=$DIGESTS ck=$CHECKPOINT
  second=$KDIR/checkpoint-$NAME-src-${mode}_default-standin-again.tar
  cri checkpoint "$cid" "$second" 2> "$TMP/$mode-ck2.err" || fail "second CRI CheckpointContainer: $(cat "$TMP/$mode-ck2.err")"
  archive_check "$second" "$store" "second CRI checkpoint archive ($mode)"
  only_cpu_chunks_added "$before" "$store" "the second checkpoint of unchanged GPU memory"
  [ "$DIGESTS" = "$digests" ] && [ "$CHECKPOINT" != "$ck" ] ||
    fail "the second checkpoint does not name the first one's chunks under its own id"
  DIGESTS=$digests CHECKPOINT=$ck
  echo "ok: the second checkpoint wrote no GPU chunk: $(chunk_count "$store") files in $store"
  cri stop "$cid" || fail "StopContainer (source)"
  cri stop-pod "$pod" || fail "StopPodSandbox (source)"
  cri rm-pod "$pod" || fail "RemovePodSandbox (source)"

  ctrd_node "$to"
  remove_chunk "$store"
  sha=$(sha256sum < "$first")
  # As kubelet restores: a pod, CreateContainer whose image (and user_specified_image) is the archive's path
  pod=$(cri run-pod "$NAME-missing-$mode") || fail "RunPodSandbox (restore, chunk missing)"
  rid=$(cri create "$NAME-missing-$mode" "$pod" standin "$first" --user-image "$first" -- "${STANDIN[@]}" 2>&1) ||
    fail "CreateContainer from $first: $rid"
  if cri start "$rid" 2> "$TMP/$mode-rs-missing.err"; then
    fail "containerd restored on node ${to^^} although chunk $VICTIM is missing"
  fi
  ! cri list | grep -q "^$rid .* running$" || fail "the container runs although its restore failed"
  tr '\n' ' ' < "$TMP/$mode-rs-missing.err" | grep -q "criu failed: type RESTORE.*log file: $CTRD_CRIU_WORK_PATH/restore.log" ||
    fail "StartContainer's error does not name CRIU's log: $(cat "$TMP/$mode-rs-missing.err")"
  restore_error_check "$CTRD_CRIU_WORK_PATH/restore.log" "$to" "CRI restore on node ${to^^} with a chunk missing"
  [ "$(sha256sum < "$first")" = "$sha" ] || fail "the failed restore changed the archive"
  echo "ok: the archive is byte-identical after the failed restore"
  cri rm "$rid" >/dev/null 2>&1 || true
  cri stop-pod "$pod" >/dev/null 2>&1 || true
  cri rm-pod "$pod" >/dev/null 2>&1 || true

  put_chunk_back
  pod=$(cri run-pod "$NAME-restored-$mode") || fail "RunPodSandbox (restore)"
  rid=$(cri create "$NAME-restored-$mode" "$pod" standin "$first" --user-image "$first" -- "${STANDIN[@]}" 2>&1) ||
    fail "CreateContainer from $first: $rid"
  cri start "$rid" 2> "$TMP/$mode-rs.err" || fail "StartContainer (restore on node ${to^^}): $(cat "$TMP/$mode-rs.err")"
  pid=$(cri pid "$rid")
  [ "$(checksum_now "$pid")" = "$sum" ] || fail "the restored memory is not bit-identical"
  echo "ok: restored on node ${to^^} from $store: memory bit-identical ($sum)"
  cri stop "$rid" >/dev/null 2>&1 || true
  cri stop-pod "$pod" >/dev/null 2>&1 || true
  [ "$store" != "$RWX" ] || [ "$(chunk_count "$(node_dir b)/chunks")" = 0 ] ||
    fail "node B's own store has chunks: something was copied"
}

# ================================================================================================================
if [ "$RUNTIME" = podman ]; then
  podman_case local a a "$(node_dir a)/chunks"
  podman_case shared a b "$RWX"
else
  step "a registry on 127.0.0.1 (containerd 2.1 pulls the base image by rootfsImageRef at every restore)"
  mkdir -p "$KDIR"
  ctrd_start_registry "$TMP/registry" || fail "docker-registry did not start"
  REMOTE=$REGISTRY/gpuckpt-e2e-store:latest
  podman push -q --tls-verify=false "$IMAGE" "docker://$REMOTE" || fail "podman push $IMAGE to $REMOTE"
  echo "ok: $REMOTE"
  containerd_case local a a "$(node_dir a)/chunks"
  containerd_case shared a b "$RWX"
fi
[ "$(stat -c %a "$(node_dir a)/chunks")" = 700 ] && [ "$(stat -c %a "$RWX")" = 700 ] || fail "a store is not root-only"
echo PASS
