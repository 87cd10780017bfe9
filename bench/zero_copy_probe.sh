#!/usr/bin/env bash
# Probe (#21): does cuCheckpointProcessRestore work from staging memory that is a private file mapping (the page
# cache's pages) instead of anonymous memory, how fast, and does the driver write to it (copy-on-write)? N processes
# (default 1) each hold MIB of device memory (bench/zero_copy_probe.cu); each is locked and checkpointed (the driver
# moves its device memory into new anonymous staging mappings), the staging memory is written to files, and in mode
# remap each staging mapping is replaced by a MAP_PRIVATE mapping of its file (anon: left as it is); then all N are
# restored at once, and each checks its device memory against its checksum from before. Prints per process the
# staging mappings' smaps before and after the restore and the restore's wall time.
#   bench/zero_copy_probe.sh MIB remap|anon [N]      (root, an NVIDIA GPU, nvcc, gcc, python3)
set -u
MIB=${1:-4096} MODE=${2:-remap} N=${3:-1}
SRC=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d /var/tmp/zcprobe.XXXXXX)
trap 'for p in "${PIDS[@]:-}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$D"' EXIT
# ZC_BUILD: a directory to keep the two binaries in (built once); else built into the temporary directory
B=${ZC_BUILD:-$D}
mkdir -p "$B"
[ -x "$B/probe" ] || nvcc -O2 -o "$B/probe" "$SRC/zero_copy_probe.cu" >/dev/null || exit 1
[ -x "$B/cuckpt" ] || gcc -O2 -o "$B/cuckpt" "$SRC/cuckpt.c" -ldl || exit 1
PIDS=()
for i in $(seq "$N"); do
  mkfifo "$D/fifo$i"
  "$B/probe" "$MIB" "$D/fifo$i" > "$D/out$i" 2>&1 &
  PIDS+=($!)
done
wait_line() { # FILE REGEX
  for _ in $(seq 600); do grep -qE "$2" "$1" && return 0; sleep 0.1; done
  echo "timeout waiting for '$2' in $1:"; cat "$1"; return 1
}
for i in $(seq "$N"); do wait_line "$D/out$i" '^ready' || exit 1; done
# staging PID BEFORE AFTER: the anonymous read-write mappings of at least 1 MiB in AFTER but not in BEFORE
staging() {
  python3 - "$2" "$3" <<'PY'
import sys
def vmas(path):
    out = set()
    for line in open(path):
        f = line.split()
        if len(f) == 5 and f[1].startswith("rw"):
            s, e = (int(x, 16) for x in f[0].split("-"))
            if e - s >= 1 << 20: out.add((s, e))
    return out
for s, e in sorted(vmas(sys.argv[2]) - vmas(sys.argv[1])): print(f"{s:x} {e - s}")
PY
}
smaps() { # PID START: Rss / Private_Dirty / Private_Clean / Shared_Clean of the mapping at START (kB)
  python3 - "$1" "$2" <<'PY'
import sys
pid, start = sys.argv[1], int(sys.argv[2], 16)
cur, keep = None, {}
for line in open(f"/proc/{pid}/smaps"):
    f = line.split()
    if "-" in f[0] and len(f[0].split("-")) == 2 and all(c in "0123456789abcdef-" for c in f[0]):
        cur = int(f[0].split("-")[0], 16)
        path = f[5] if len(f) > 5 else "[anon]"
        if cur == start: keep["path"] = path
    elif cur == start and f[0].rstrip(":") in ("Rss", "Private_Dirty", "Private_Clean", "Shared_Clean", "AnonHugePages"):
        keep[f[0].rstrip(":")] = f[1]
print(" ".join(f"{k}={v}" for k, v in keep.items()) if keep else "gone")
PY
}
for i in $(seq "$N"); do
  p=${PIDS[$((i - 1))]}
  cp "/proc/$p/maps" "$D/maps-before$i"
  "$B/cuckpt" lock "$p" && "$B/cuckpt" checkpoint "$p" || exit 1
  cp "/proc/$p/maps" "$D/maps-after$i"
  staging "$p" "$D/maps-before$i" "$D/maps-after$i" > "$D/staging$i"
  k=0
  while read -r start len; do
    k=$((k + 1))
    python3 - "$p" "$start" "$len" "$D/vma$i-$k.bin" <<'PY'
import sys
pid, start, length, out = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3]), sys.argv[4]
with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem, open(out, "wb") as f:
    mem.seek(start)
    left = length
    while left:
        b = mem.read(min(left, 64 << 20)); f.write(b); left -= len(b)
PY
    if [ "$MODE" = remap ]; then
      echo "remap $start $len $D/vma$i-$k.bin" > "$D/fifo$i"
      wait_line "$D/out$i" "^remap $start .*: " || exit 1
    fi
    echo "process $i staging $start $len: before restore: $(smaps "$p" "$start")"
  done < "$D/staging$i"
done
grep -h '^remap' "$D"/out* | grep -v ': ok$' && { echo "a remap failed"; exit 1; }
t0=$EPOCHREALTIME restores=()
for i in $(seq "$N"); do ( s=$EPOCHREALTIME; "$B/cuckpt" restore "${PIDS[$((i - 1))]}"; echo "$?" > "$D/rc$i"
  awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f\n", b - a}' > "$D/t$i" ) & restores+=($!); done
wait "${restores[@]}"   # not the probes, which run on
echo "mode $MODE, $N process(es) of $MIB MiB: all restored in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}') s; each: $(cat "$D"/t* | tr '\n' ' ')rc $(cat "$D"/rc* | tr '\n' ' ')"
for i in $(seq "$N"); do
  p=${PIDS[$((i - 1))]}
  "$B/cuckpt" unlock "$p"
  while read -r start len; do echo "process $i staging $start: after restore: $(smaps "$p" "$start")"; done < "$D/staging$i"
  echo verify > "$D/fifo$i"; wait_line "$D/out$i" '^verify' && grep -h '^verify' "$D/out$i"
  echo quit > "$D/fifo$i"
done
