#!/usr/bin/env bash
# e2e (no GPU needed): the shared chunk store (GPUCKPT_GPU_STORE=/PATH, an RWX volume mounted on every node) on a
# real network filesystem, with two nodes mounting one export through two separate mounts.
#
# The filesystem is sshfs (FUSE over SFTP) served by an sshd on 127.0.0.1: this machine's kernel has no NFS client
# and no nfsd, and Debian has a userspace NFS server (nfs-ganesha) but no userspace NFS client that mounts
# (docs/formats.md "The shared store on a network filesystem"). Each node is what test/e2e/store_flow.sh makes:
# its own CRIU plugin directory with the stand-in plugin and its own settings file, podman with that node's CRIU,
# and here its own sshfs mount of the export as its store. The workload is test/criu-plugin/staging_process (a
# private mapping standing in for a CUDA process's staged GPU memory; its own checksum proves a restore
# bit-identical; its content is seeded, so two of one size hold the same memory).
#   1. checkpoint on node A, restore on node B: B reads every chunk from its mount (checked by SHA-256, as from any
#      shared store), nothing is written into the export or any node-local store, the restored process runs on;
#   1b. the nodes' agents (gpuckpt-agent, each with its mount as gpu_memory.store): node A's agent sends that
#      archive to node B's (the transfer a migration makes): every chunk is already there, none is uploaded;
#   2. two checkpoints of equal memory at once, one per node: both succeed, every chunk file in the export is sound
#      (header, size, content matching its name), no temporary file is left, and both restore bit-identical;
#   3. garbage collection on node A while node B restores: the restore succeeds, no chunk a kept checkpoint names
#      is removed (their mtimes are set old first, so only the references protect them), the garbage is removed;
#      and a chunk a killed collection left in trash/ is moved back by the restore that needs it (a rename without
#      replacing, which NFS and FUSE filesystems do not take as renameat2 flags);
#   4. the server goes away mid-restore (sshd and its sessions killed while node B's restore reads chunks): the
#      restore fails with an error naming the store path, no container is left running, the archive is unchanged.
# Timings are printed per step. Exit 0 pass, 77 skipped (no root, no sshfs/sshd/FUSE, no podman/CRIU), else fail.
# Every wait is bounded; cleanup always runs (KEEP=1 keeps the work dir).
set -euo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
SRC=${GPUCKPT_SOURCE_DIR:?GPUCKPT_SOURCE_DIR must point at the source tree}
PLUGIN=$BUILD/test/criu-plugin/stand-in/gpuckpt_plugin.so
HELPER=$BUILD/test/criu-plugin/staging_process
CLI=$BUILD/cli/gpuckpt
AGENT=$BUILD/agent/gpuckpt-agent
MIB=${SHARED_STORE_E2E_MIB:-64}
SLOW_MIB=${SHARED_STORE_E2E_SLOW_MIB:-512}   # the restore the server dies under: long enough to be hit mid-way
VMA=100000000000

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }

[ "$(id -u)" = 0 ] || skip "needs root (runc, CRIU, FUSE mounts)"
command -v sshfs >/dev/null || skip "sshfs not installed (scripts/setup.sh installs sshfs and openssh-server)"
[ -x /usr/sbin/sshd ] || skip "sshd not installed (scripts/setup.sh installs openssh-server)"
[ -c /dev/fuse ] && grep -qw fuse /proc/filesystems || skip "no FUSE in this kernel (/dev/fuse, fuse in /proc/filesystems)"
command -v criu >/dev/null || skip "criu not installed (scripts/setup.sh)"
. "$SRC/scripts/lib/criu-probe.sh"
. "$SRC/scripts/lib/node-sandbox.sh"
criu_dump_works || skip "$CRIU_PROBE_REASON"
CRIU_BIN=$(command -v criu)
command -v podman >/dev/null || skip "podman not installed (scripts/setup.sh)"
for f in "$PLUGIN" "$HELPER" "$CLI" "$AGENT"; do [ -f "$f" ] || fail "$f not built"; done
ldd "$PLUGIN" 2>/dev/null | grep -qE 'lib(asan|ubsan)' && skip "plugin built with sanitizers cannot load into CRIU"

# short: the stores' paths are settings-file values (at most 64 characters, gpumem/plugin_settings.h)
TMP=$(mktemp -d /tmp/gpuckpt-ss.XXXXXX)
chmod 700 "$TMP"
NAME=gpuckpt-e2e-shared-$$
IMAGE=localhost/gpuckpt-e2e-shared-$$:latest
EXPORT=$TMP/export          # the server's directory
SSHD_PID=''
AGENT_PIDS=()
cleanup() {
  set +e
  for p in "${AGENT_PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  for c in $(podman ps -a --format '{{.Names}}' | grep "^$NAME"); do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  podman rmi -f "$IMAGE" >/dev/null 2>&1
  for node in a b; do mountpoint -q "$TMP/node-$node/mnt" && fusermount3 -u -z "$TMP/node-$node/mnt"; done
  stop_server
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# ---- the server and the two mounts -----------------------------------------------------------------------------
step "the export: sshd on 127.0.0.1, mounted with sshfs by node A and node B"
T0=$(now)
mkdir -p "$EXPORT/chunks" /run/sshd
chmod 700 "$EXPORT/chunks"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/client_key"
cp "$TMP/client_key.pub" "$TMP/authorized_keys"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$TMP/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $PORT
HostKey $TMP/host_key
AuthorizedKeysFile $TMP/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
PidFile $TMP/sshd.pid
EOF
/usr/sbin/sshd -f "$TMP/sshd_config" -E "$TMP/sshd.log" || fail "sshd did not start: $(cat "$TMP/sshd.log")"
for _ in $(seq 50); do [ -s "$TMP/sshd.pid" ] && break; sleep 0.1; done
SSHD_PID=$(cat "$TMP/sshd.pid")
# stop_server: sshd and every session it serves (their children), as a server that goes away
stop_server() {
  [ -n "$SSHD_PID" ] || return 0
  local kids
  kids=$(pgrep -P "$SSHD_PID" || true)
  kill -9 "$SSHD_PID" $kids 2>/dev/null || true
  SSHD_PID=''
}
node_dir() { echo "$TMP/node-$1"; }
store_of() { echo "$TMP/node-$1/mnt/chunks"; }
# dir_cache=no: a node sees the other's new files and references at once (the default caches listings for 20 s,
# which would hide the other node's new reference from a collection; see docs/formats.md)
SSHFS_OPTS=IdentityFile=$TMP/client_key,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes,dir_cache=no
for node in a b; do
  dir=$(node_dir $node)
  mkdir -p "$dir/criu-plugins" "$dir/mnt" "$dir/chunks"
  sshfs -p "$PORT" -o "$SSHFS_OPTS" "root@127.0.0.1:$EXPORT" "$dir/mnt" || fail "sshfs mount for node $node failed"
  [ "$(stat -f -c %T "$dir/mnt")" = fuseblk ] || [ "$(awk -v m="$dir/mnt" '$2 == m {print $3}' /proc/mounts)" = fuse.sshfs ] ||
    fail "$dir/mnt is not an sshfs mount"
  cp "$PLUGIN" "$dir/criu-plugins/"
  cat > "$dir/criu" <<SH
#!/bin/sh
export CRIU_LIBS_DIR=$dir/criu-plugins GPUCKPT_TEST_STAGING_VMA=0x$VMA GPUCKPT_TEST_NODE_STORE=$dir/chunks
exec $CRIU_BIN "\$@"
SH
  chmod 755 "$dir/criu"
  printf '# gpuckpt: managed file\nGPUCKPT_GPU_STORE=%s\n' "$(store_of $node)" > "$dir/criu-plugins/gpuckpt_plugin.env"
done
echo "a file node A writes" > "$(store_of a)/probe"
[ "$(cat "$(store_of b)/probe")" = "a file node A writes" ] || fail "node B does not see node A's file: not one export"
rm "$(store_of a)/probe"
echo "ok: sshd :$PORT (pid $SSHD_PID), $(awk -v m="$(node_dir a)/mnt" '$2 == m {print $1, "->", $2, $3}' /proc/mounts) and node B's mount ($(since "$T0") s)"

# export_files: every file in the export's store with its inode (a chunk written again gets a new one), sorted
export_files() { find "$EXPORT/chunks" -type f -printf '%P %i\n' | sort; }
chunk_count() { find "$EXPORT/chunks/sha256" -type f | wc -l; }

# ---- the stand-in's image ----------------------------------------------------------------------------------------
step "the stand-in's image"
sandbox_program_image "$HELPER" "$TMP/rootfs" "$IMAGE" || fail "podman import of the stand-in's image"
echo "ok: $IMAGE"

standin_ready() {   # PID: sets SUM once the stand-in has filled its memory
  local line=''
  for _ in $(seq 600); do
    line=$(cat "/proc/$1/root/tmp/staging.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  [ -n "$line" ] || fail "the stand-in (pid $1) did not report its memory within 60 s"
  SUM=${line#* }
}
checksum_now() {   # PID: the stand-in's checksum of its memory as it is now
  local check=/proc/$1/root/tmp/staging.out.check
  rm -f "$check"
  kill -USR1 "$1" || fail "pid $1 is not running"
  for _ in $(seq 400); do [ -s "$check" ] && break; sleep 0.05; done
  [ -s "$check" ] || fail "pid $1 did not answer with its checksum"
  cat "$check"
}
pm() { local node=$1; shift; podman --runtime-flag "criu=$(node_dir "$node")/criu" "$@"; }
ctr_pid() { podman inspect -f '{{.State.Pid}}' "$1"; }
static_dir() { podman inspect -f '{{.StaticDir}}' "$1"; }
state_of() { podman inspect -f '{{.State.Status}}' "$1" 2>/dev/null || echo gone; }
# start NODE NAME SIZE_MIB: the stand-in running on NODE (SUM: its checksum)
start() {
  pm "$1" run -d --name "$2" --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$IMAGE" \
    /bin/staging_process --at "$VMA" "$3" /tmp/staging.out >/dev/null || fail "podman run of $2"
  standin_ready "$(ctr_pid "$2")"
}
# checkpoint NODE NAME ARCHIVE: exported (uncompressed), the container removed; CHECKPOINT and DIGESTS from its
# manifest, which must say the dump wrote to NODE's mount
checkpoint() {
  pm "$1" container checkpoint --export "$3" --compress none --keep "$2" > "$3.out" 2>&1 ||
    fail "podman checkpoint of $2 on node ${1^^}: $(cat "$3.out"; grep -h gpuckpt "$(static_dir "$2")/dump.log" | tail -5)"
  cp "$(static_dir "$2")/dump.log" "$3.dump.log"
  tar -xOf "$3" checkpoint/gpuckpt-gpumem-1.manifest.json > "$3.manifest.json" || fail "$3 holds no manifest"
  python3 - "$3.manifest.json" "$(store_of "$1")" > "$3.chunks" <<'PY' || fail "$3's manifest does not name node ${1^^}'s mount"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["store"] == sys.argv[2], m["store"]
print(m["checkpoint"], ",".join(sorted({c[3] for c in m["chunks"] if c[0] != "zero"})))
PY
  read -r CHECKPOINT DIGESTS < "$3.chunks"
  # The CPU pages went to the same mount (their manifests beside the GPU one): every chunk the archive names.
  mkdir -p "$3.pages" && tar -C "$3.pages" --strip-components=1 -xf "$3" --wildcards 'checkpoint/gpuckpt-pages-*.manifest.json' ||
    fail "$3 holds no pages manifest"
  python3 - "$(store_of "$1")" "$3.manifest.json" "$3.pages"/*.json > "$3.all-chunks" <<'PY' || fail "$3's pages manifests do not name node ${1^^}'s mount"
import json, sys
digests = set()
for path in sys.argv[2:]:
    m = json.load(open(path))
    assert m["store"] == sys.argv[1], (path, m["store"])
    digests |= {c[3] for c in m["chunks"] if c[0] != "zero"}
print(len(digests))
PY
  ALL_CHUNKS=$(cat "$3.all-chunks")
  podman rm -f -t 0 "$2" >/dev/null 2>&1 || true
}
# restore NODE NAME ARCHIVE: restored on NODE, restore.log kept beside the archive
restore() {
  local rc=0
  pm "$1" container restore --import "$3" --keep --name "$2" > "$3.restore.out" 2>&1 || rc=$?
  cp "$(static_dir "$2" 2>/dev/null)/restore.log" "$3.restore.log" 2>/dev/null || true
  return $rc
}

# ================================================================================================================
step "1. checkpoint on node A, restore on node B from its own mount, nothing copied"
start a "$NAME-1" "$MIB"
SUM1=$SUM
T=$(now)
checkpoint a "$NAME-1" "$TMP/one.tar"
T_CK1=$(since "$T")
CK1=$CHECKPOINT DIGESTS1=$DIGESTS ALL_CHUNKS1=$ALL_CHUNKS
grep -q "timing: gpu memory image write" "$TMP/one.tar.dump.log" || fail "dump.log has no chunk write timing"
echo "ok: checkpoint $CK1 on node A: $(tr ',' '\n' <<<"$DIGESTS1" | wc -l) chunks in $(store_of a), $(chunk_count) files in the export ($T_CK1 s; $(grep -o 'timing: gpu memory image write: .*' "$TMP/one.tar.dump.log"))"
before=$(export_files)
local_before=$(find "$(node_dir b)/chunks" /var/lib/gpuckpt/chunks -type f 2>/dev/null | sort | md5sum)
T=$(now)
restore b "$NAME-1" "$TMP/one.tar" || fail "restore on node B: $(cat "$TMP/one.tar.restore.out")"
T_RS1=$(since "$T")
log=$TMP/one.tar.restore.log
grep -q "gpuckpt: param: settings file:$(node_dir b)/criu-plugins/gpuckpt_plugin.env" "$log" ||
  fail "CRIU on node B did not read node B's settings: $(grep 'param: settings' "$log")"
grep -q "gpuckpt: cuda: checkpoint $CK1: .*all [0-9]* chunks present in $(store_of b) " "$log" ||
  fail "restore.log does not say the chunks were found in node B's mount: $(grep gpuckpt "$log" | tail -5)"
grep -q "filled .* 0 already stored.* each chunk checked by SHA-256" "$log" || fail "restore.log does not say the chunks from the shared store were checked by SHA-256: $(grep gpuckpt "$log" | tail -5)"
[ "$(export_files)" = "$before" ] || fail "the restore on node B changed the export's files"
[ "$(find "$(node_dir b)/chunks" /var/lib/gpuckpt/chunks -type f 2>/dev/null | sort | md5sum)" = "$local_before" ] ||
  fail "a node-local store changed: something was copied"
pid=$(ctr_pid "$NAME-1")
[ "$(checksum_now "$pid")" = "$SUM1" ] || fail "the memory restored on node B is not bit-identical"
sleep 1
[ "$(state_of "$NAME-1")" = running ] && [ "$(checksum_now "$pid")" = "$SUM1" ] || fail "the restored process did not run on"
echo "ok: restored on node B ($T_RS1 s; $(grep -o 'timing: gpu memory image fill: .*' "$log")): read from $(store_of b), bit-identical ($SUM1), running; no file written to the export or a node store"
podman rm -f -t 0 "$NAME-1" >/dev/null

# ================================================================================================================
step "1b. the nodes' agents: sending node A's archive to node B's agent (as a migration does) moves no chunk"
TOKEN=$(head -c 32 /dev/urandom | base64 | tr -d '/+=')
start_agent() {   # NODE [EXTRA YAML]: the node's gpuckpt-agent on 127.0.0.1, its store the node's mount; sets URL
  local d
  d=$(node_dir "$1")/agent
  sandbox_agent_config "$d" "$TOKEN" "gpu_memory: {store: $(store_of "$1")}
${2:-}"
  sandbox_run_agent "$AGENT" "$d" 2>/dev/null || fail "agent of node $1 did not start: $(tail -5 "$d/agent.log")"
  AGENT_PIDS+=("$AGENT_PID")
}
start_agent a "transfer: {peer_networks: [127.0.0.0/8]}"
A_URL=$URL
start_agent b
B_URL=$URL
cp "$TMP/one.tar" "$(node_dir a)/agent/state/checkpoints/ck-shared-one.tar"
before=$(export_files)
T=$(now)
"$CLI" transfer "$(node_dir a)/agent/state/checkpoints/ck-shared-one.tar" --to "$B_URL" --agent "$A_URL" \
  --token-file "$(node_dir a)/agent/token" --json --timeout 120 > "$TMP/transfer.json" 2> "$TMP/transfer.err" ||
  fail "the transfer from node A's agent to node B's failed: $(cat "$TMP/transfer.err")"
T_TR=$(since "$T")
python3 - "$TMP/transfer.json" "$ALL_CHUNKS1" <<'PY' || fail "the transfer moved chunks although both stores are one export: $(head -c 1500 "$TMP/transfer.json")"
import json, sys
c = json.load(open(sys.argv[1]))["result"]["chunks"]
n = int(sys.argv[2])
assert c["named"] == n and c["target_had"] == n and c["sent"] == 0 and c["sent_bytes"] == 0, c
print(f"ok: node B's agent had all {n} chunks already (its mount): 0 sent, 0 bytes; commit {c.get('admitted')}")
PY
! grep -q "PUT /v1/chunks/" "$(node_dir b)/agent/agent.log" || fail "node B's agent received chunk uploads"
cmp -s "$TMP/one.tar" "$(node_dir b)/agent/state/checkpoints/ck-shared-one.tar" || fail "node B's agent does not hold node A's archive byte for byte"
new=$(comm -13 <(echo "$before") <(export_files) | awk '{print $1}' | grep -v '^refs/' || true)
[ -z "$new" ] || fail "the transfer wrote into the export's chunks: $new"
echo "ok: archive sent to node B's agent in $T_TR s with no chunk moved; the export gained only references ($(comm -13 <(echo "$before") <(export_files) | wc -l))"
for p in "${AGENT_PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
AGENT_PIDS=()

# ================================================================================================================
step "2. two checkpoints of equal memory at once, node A and node B writing the same chunks"
rm -rf "${EXPORT:?}/chunks/"*   # an empty store: every chunk is written by both at once
start a "$NAME-2a" "$MIB"
SUM2=$SUM
start b "$NAME-2b" "$MIB"
[ "$SUM" = "$SUM2" ] || fail "the two stand-ins do not hold the same memory"
T=$(now)
(checkpoint a "$NAME-2a" "$TMP/two-a.tar") & pa=$!
(checkpoint b "$NAME-2b" "$TMP/two-b.tar") & pb=$!
wait $pa || fail "node A's concurrent checkpoint failed"
wait $pb || fail "node B's concurrent checkpoint failed"
T_CK2=$(since "$T")
read -r CKA DA < "$TMP/two-a.tar.chunks"
read -r CKB DB < "$TMP/two-b.tar.chunks"
[ "$DA" = "$DB" ] && [ "$CKA" != "$CKB" ] || fail "the concurrent checkpoints do not name the same chunks under their own ids"
for n in a b; do
  echo "   node ${n^^}: $(grep -o 'timing: gpu memory image write: .*' "$TMP/two-$n.tar.dump.log")"
done
! find "$EXPORT/chunks" -name '*.partial' | grep -q . || fail "temporary files left in the store: $(find "$EXPORT/chunks" -name '*.partial')"
python3 - "$EXPORT/chunks" "$DA" <<'PY' || fail "the store is not sound after the concurrent writes"
# Every chunk file: its header (docs/formats.md "Chunk store"), its size, its content's SHA-256 its name (raw
# chunks; zstd ones by their size and header only, no zstd module here).
import hashlib, os, struct, sys
root, wanted = sys.argv[1], set(sys.argv[2].split(","))
seen = set()
for fanout in os.listdir(os.path.join(root, "sha256")):
    for name in os.listdir(os.path.join(root, "sha256", fanout)):
        data = open(os.path.join(root, "sha256", fanout, name), "rb").read()
        magic, version, encoding, raw, stored = struct.unpack_from("<8sIB3xII", data)
        assert magic == b"GPUCKCHK" and version in (1, 2), (name, magic, version)
        offset = 4096 if version == 2 else 32
        assert len(data) == offset + stored, (name, len(data), offset, stored)
        if encoding == 0:
            assert hashlib.sha256(data[offset:]).hexdigest() == name, f"{name}: its content has another SHA-256"
        seen.add(name)
missing = wanted - seen
assert not missing, f"{len(missing)} chunks the checkpoints name are not in the store"
print(f"ok: {len(seen)} chunk files sound, each named by its content; both checkpoints' {len(wanted)} chunks there")
PY
refs=$(find "$EXPORT/chunks/refs" -name '*.json' | wc -l)
[ "$refs" -ge 2 ] || fail "the export holds $refs references, not both checkpoints'"
echo "ok: both checkpoints succeeded at once ($T_CK2 s for both), $refs references, no temporary file"
for n in a b; do
  restore $n "$NAME-2$n" "$TMP/two-$n.tar" || fail "restore of node ${n^^}'s concurrent checkpoint: $(cat "$TMP/two-$n.tar.restore.out")"
  [ "$(checksum_now "$(ctr_pid "$NAME-2$n")")" = "$SUM2" ] || fail "node ${n^^}'s concurrent checkpoint restores other memory"
  podman rm -f -t 0 "$NAME-2$n" >/dev/null
done
echo "ok: both concurrent checkpoints restore bit-identical"

# ================================================================================================================
step "3. a chunk a killed collection left in trash/: the restore on node B that needs it moves it back"
VICTIM=${DA%%,*}
mkdir -p "$EXPORT/chunks/trash"
mv "$EXPORT/chunks/sha256/${VICTIM:0:2}/$VICTIM" "$EXPORT/chunks/trash/$VICTIM"
restore b "$NAME-3" "$TMP/two-a.tar" ||
  fail "the restore on node B with a chunk in trash/ failed: $(cat "$TMP/two-a.tar.restore.out"; grep gpuckpt "$TMP/two-a.tar.restore.log" | tail -3)"
[ -f "$EXPORT/chunks/sha256/${VICTIM:0:2}/$VICTIM" ] && [ ! -e "$EXPORT/chunks/trash/$VICTIM" ] ||
  fail "the chunk in trash/ is not back at its name"
[ "$(checksum_now "$(ctr_pid "$NAME-3")")" = "$SUM2" ] || fail "the restore with a chunk from trash/ is not bit-identical"
echo "ok: chunk $VICTIM moved back from trash/ by the restore, which is bit-identical"
podman rm -f -t 0 "$NAME-3" >/dev/null

step "3. garbage collection on node A while node B restores"
# Every chunk looks old, so only the references keep the kept checkpoints' chunks; 1000 unreferenced chunk files
# (as a deleted checkpoint leaves) are garbage.
python3 - "$EXPORT/chunks" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(1000):
    name = os.urandom(32).hex()
    os.makedirs(os.path.join(root, "sha256", name[:2]), mode=0o700, exist_ok=True)
    with open(os.path.join(root, "sha256", name[:2], name), "wb") as f:
        f.write(b"garbage")
PY
find "$EXPORT/chunks/sha256" -type f -exec touch -d '3 hours ago' {} +
total=$(chunk_count)
T=$(now)
"$CLI" store gc --delete --grace 60 --store "$(store_of a)" --json > "$TMP/gc.json" 2> "$TMP/gc.err" & gc=$!
restore b "$NAME-3" "$TMP/two-a.tar" & rs=$!
rs_rc=0; wait $rs || rs_rc=$?
T_RS3=$(since "$T")
gc_rc=0; wait $gc || gc_rc=$?
T_GC=$(since "$T")
[ "$rs_rc" = 0 ] || fail "the restore on node B during the collection failed: $(cat "$TMP/two-a.tar.restore.out"; grep gpuckpt "$TMP/two-a.tar.restore.log" | tail -3)"
[ "$gc_rc" = 0 ] || fail "the collection on node A failed: $(cat "$TMP/gc.err")"
[ "$(checksum_now "$(ctr_pid "$NAME-3")")" = "$SUM2" ] || fail "the restore during the collection is not bit-identical"
python3 - "$EXPORT/chunks" "$DA" "$TMP/gc.json" <<'PY' || fail "the collection removed a chunk a kept checkpoint names"
import json, os, sys
root = sys.argv[1]
wanted = {d for d in sys.argv[2].split(",") if d}
gone = [d for d in wanted if not os.path.isfile(os.path.join(root, "sha256", d[:2], d))]
assert not gone, f"{len(gone)} chunks of kept checkpoints gone, e.g. {gone[0]}"
PY
left=$(chunk_count)
garbage_left=$(find "$EXPORT/chunks/sha256" -type f -size 7c | wc -l)
[ "$garbage_left" = 0 ] || fail "$garbage_left garbage chunks were not removed"
echo "ok: restore on node B ($T_RS3 s) during the collection on node A ($T_GC s, overlapping): bit-identical; the kept checkpoints' chunks all there; 1000 garbage chunks removed ($total -> $left files); the collection $(awk -v r="$T_RS3" -v g="$T_GC" 'BEGIN {print (g > r ? "was still running when the restore finished" : "finished first")}')"
echo "   gc: $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print({k: v for k, v in j.items() if not isinstance(v, (list, dict))})' "$TMP/gc.json")"
podman rm -f -t 0 "$NAME-3" >/dev/null
# What this filesystem does not give: flock(2) on sshfs is local to the mount (FUSE without a lock operation), so
# a collection on node B does not see node A's lock. Reported, not failed: docs/formats.md says to collect from
# one node on such a filesystem.
python3 - "$(store_of a)/gc.lock" "$CLI" "$(store_of b)" <<'PY'
import fcntl, os, subprocess, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
r = subprocess.run([sys.argv[2], "store", "gc", "--store", sys.argv[3]], capture_output=True, text=True)
print("note: with node A holding gc.lock, a collection on node B " +
      ("was refused: the lock is shared" if r.returncode != 0 and "another garbage collection" in r.stderr
       else "ran (exit %d): flock is per mount here, so collect from one node only" % r.returncode))
PY

# ================================================================================================================
step "4. the server goes away in the middle of a restore on node B"
start a "$NAME-4" "$SLOW_MIB"
checkpoint a "$NAME-4" "$TMP/four.tar"
sha=$(sha256sum < "$TMP/four.tar")
sync; echo 3 > /proc/sys/vm/drop_caches   # node B's reads go to the server, not to the page cache
T=$(now)
restore b "$NAME-4" "$TMP/four.tar" & rs=$!
# The moment the plugin starts filling the staging memory from the store (its log line just before), found in
# CRIU's restore.log in podman's directory of the container (podman inspect would wait for the restore's lock)
touch "$TMP/four.start"
for _ in $(seq 1000); do
  find /var/lib/containers/storage/overlay-containers -mindepth 3 -maxdepth 3 -name restore.log -newer "$TMP/four.start" \
    -exec grep -qs "gpuckpt: cuda: asked for huge pages on the staging memory" {} \; -print 2>/dev/null | grep -q . && break
  sleep 0.01
done
T_KILL=$(since "$T")
stop_server
rs_rc=0; wait $rs || rs_rc=$?
T_RS4=$(since "$T")
[ "$rs_rc" != 0 ] || fail "the restore succeeded although the server went away $T_KILL s into it (make SHARED_STORE_E2E_SLOW_MIB larger)"
log=$TMP/four.tar.restore.log
tr "\n" " " < "$TMP/four.tar.restore.out" | grep -q "criu failed.*log file: .*restore.log" || fail "podman's error does not name CRIU's restore.log: $(cat "$TMP/four.tar.restore.out")"
# the plugin's error: the chunk it could not read, by its path in node B's mount
why=$(grep -E "gpuckpt: cuda: .*$(store_of b)/sha256/[0-9a-f]{2}/[0-9a-f]{64}" "$log" | grep -v "all [0-9]* chunks present" | head -1)
[ -n "$why" ] || fail "restore.log has no error naming a chunk in $(store_of b): $(grep gpuckpt "$log" | tail -5)"
grep -q "killing restored pid .*: its GPU memory could not be put back, so the restore failed" "$log" ||
  fail "restore.log does not say the half-restored process was killed: $(grep gpuckpt "$log" | tail -3)"
! grep -q "filled (namespace pid" "$log" || fail "restore.log says the memory was filled although the server went away"
[ "$(state_of "$NAME-4")" != running ] || fail "a container runs although its restore failed"
! podman ps --format '{{.Names}}' | grep -q "^$NAME-4" || fail "podman lists $NAME-4 as running"
[ "$(sha256sum < "$TMP/four.tar")" = "$sha" ] || fail "the failed restore changed the archive"
echo "ok: server killed $T_KILL s into the restore; it failed after $T_RS4 s: ${why#*gpuckpt: }"
echo "ok: no container running ($(state_of "$NAME-4")), the archive byte-identical"

printf '\ntimings (%s MiB, %s MiB for 4): checkpoint %s s, restore on B %s s, agent transfer A->B %s s, two checkpoints at once %s s, restore during gc %s s (gc %s s), failed restore %s s\n' \
  "$MIB" "$SLOW_MIB" "$T_CK1" "$T_RS1" "$T_TR" "$T_CK2" "$T_RS3" "$T_GC" "$T_RS4"
echo PASS
