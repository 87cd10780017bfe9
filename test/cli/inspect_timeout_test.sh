#!/usr/bin/env bash
# gpuckpt inspect stops reading an archive at --timeout. The archive is a tar.zst whose one entry declares 60 GiB of
# zeros (zstd RLE blocks: 4 bytes for each 128 KiB), served through a FIFO at 16 blocks a second, so that only the
# time budget can end the walk, on a machine of any speed (CI's decompresses 60 GiB of RLE in 1.6 s, which is why the
# archive is not a plain file). It exits 2, names the archive and says how to give a trusted large archive longer.
# libarchive reads a pipe to its end when it closes it (so that the writer gets no SIGPIPE), so the command returns
# when the writer stops, 8 s in: the deadline's message is what shows it stopped reading at 2 s.
set -euo pipefail
BUILD=${GPUCKPT_BUILD_DIR:?GPUCKPT_BUILD_DIR must point at the build directory}
CLI=$BUILD/cli/gpuckpt
TMP=$(mktemp -d)
writer=
cleanup() { [ -z "$writer" ] || kill "$writer" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkfifo "$TMP/slow.tar.zst"
python3 - "$TMP/slow.tar.zst" <<'PY' &
import struct, sys, tarfile, time
size = 60 << 30                     # under the 64 GiB entry limit: only time can stop the walk
info = tarfile.TarInfo("checkpoint/pages-1.img"); info.size = size
header = info.tobuf(format=tarfile.GNU_FORMAT)
block = 128 << 10
try:
    with open(sys.argv[1], "wb", buffering=0) as out:
        out.write(b"\x28\xb5\x2f\xfd")   # zstd frame magic
        out.write(bytes([0x00, 7 << 3]))  # no content size, not single-segment; window 2^17
        out.write(struct.pack("<I", len(header) << 3)[:3] + header)                 # raw block: the tar header
        rle = struct.pack("<I", (block << 3) | (1 << 1))[:3] + b"\x00"             # RLE block: 128 KiB of zeros
        for _ in range(16 * 8):          # 8 s of blocks: 1 GiB of the 60, four times the --timeout below
            out.write(rle)
            time.sleep(1 / 16)
except BrokenPipeError:
    pass                                 # the reader stopped, as it should
PY
writer=$!

start=$(date +%s)
rc=0
timeout 300 "$CLI" inspect --timeout 2 "$TMP/slow.tar.zst" > "$TMP/out.txt" 2> "$TMP/err.txt" || rc=$?
elapsed=$(( $(date +%s) - start ))
[ "$rc" = 2 ] || fail "inspect --timeout 2 exited $rc after ${elapsed}s, expected 2: $(cat "$TMP/err.txt")"
grep -q "reading $TMP/slow.tar.zst took longer than 2 s and was stopped" "$TMP/err.txt" \
  || fail "no timeout message naming the archive: $(cat "$TMP/err.txt")"
grep -q "raise --timeout" "$TMP/err.txt" || fail "the message does not say what to do: $(cat "$TMP/err.txt")"
echo "inspect stopped at its 2 s budget on a stream declaring 60 GiB (returned after ${elapsed}s, when the writer stopped)"

"$CLI" inspect --timeout 0 "$TMP/slow.tar.zst" > /dev/null 2> "$TMP/err.txt" && fail "--timeout 0 was accepted"
grep -q -- "--timeout needs a positive number of seconds" "$TMP/err.txt" || fail "bad --timeout: $(cat "$TMP/err.txt")"
echo PASS
