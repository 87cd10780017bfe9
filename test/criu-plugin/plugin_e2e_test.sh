#!/usr/bin/env bash
# e2e (no GPU needed): real CRIU dumps and restores a plain counting process with gpuckpt_plugin.so in --libdir.
# Environment: CRIU (default `criu`), CRIU_HOOKS (the hook count that CRIU has, asserted when given).
# Checks from CRIU's own logs that the plugin was loaded with the hook count this CRIU takes and declined
# cleanly (no GPU here), and that the restored process went on counting from where it was.
# A CRIU older than 4.2 on a machine without hardware breakpoints runs with its FI_NO_BREAKPOINTS switch (the
# dump would hang otherwise; scripts/lib/criu-probe.sh says why).
# Exit 0 pass, 77 skipped (no root / no working CRIU), anything else fails.
set -uo pipefail

BUILD=${GPUCKPT_BUILD_DIR:?set GPUCKPT_BUILD_DIR to the CMake build directory}
PLUGIN=$BUILD/criu-plugin/gpuckpt_plugin.so
CRIU=${CRIU:-criu}

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; for f in "$WORK"/*.log "$WORK"/img/*.log; do [ -f "$f" ] && { echo "--- $f (gpuckpt/errors)"; grep -E "gpuckpt|Error|rror " "$f" | tail -40; }; done; exit 1; }

[ "$(id -u)" = 0 ] || skip "CRIU needs root"
command -v "$CRIU" >/dev/null || skip "no CRIU at '$CRIU' (scripts/setup.sh installs criu, criu-trixie and criu-sid; scripts/build-criu-dev.sh criu-dev)"
command -v python3 >/dev/null || skip "no python3 for the counting workload"
"$CRIU" check >/dev/null 2>&1 || skip "'criu check' fails on this kernel"
# shellcheck disable=SC1091 # the repository's shell library
. "$(dirname "$0")/../../scripts/lib/criu-probe.sh"
if ! criu_dump_works "$CRIU"; then
  # CRIU < 4.2 on a machine without hardware breakpoints: its own no-breakpoint path (dump and restore), so the
  # plugin is still tested inside this CRIU's hook table. Runtimes cannot pass this on (scripts/lib/criu-probe.sh).
  [ "$CRIU_PROBE_NO_BREAKPOINTS" = 1 ] || skip "$CRIU_PROBE_REASON"
  export CRIU_FAULT=$CRIU_FAULT_NO_BREAKPOINTS
  echo "NOTE: $CRIU runs with CRIU_FAULT=$CRIU_FAULT (FI_NO_BREAKPOINTS): hardware breakpoints do not work here"
fi
[ -f "$PLUGIN" ] || { echo "FAILED: $PLUGIN not built"; exit 1; }
# A sanitizer build's plugin needs its runtime loaded first, which CRIU (not instrumented) does not do.
ldd "$PLUGIN" 2>/dev/null | grep -qE 'lib(asan|ubsan)' && skip "plugin built with sanitizers cannot load into CRIU"
if command -v nm >/dev/null; then
  EXPORTED=$(nm -D --defined-only "$PLUGIN" | awk '{print $NF}' | tr '\n' ' ')
  [ "$EXPORTED" = "CR_PLUGIN_DESC " ] || { echo "FAILED: the plugin exports '$EXPORTED', only CR_PLUGIN_DESC allowed"; exit 1; }
fi

WORK=$(mktemp -d /tmp/gpuckpt-plugin-e2e.XXXXXX)
COUNTER_PID=
RESTORED_PID=
cleanup() {
  for p in $COUNTER_PID $RESTORED_PID; do kill -9 "$p" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# Only our plugin in the library directory CRIU scans.
mkdir -p "$WORK/lib" "$WORK/img"
cp "$PLUGIN" "$WORK/lib/"

gone() { # wait until PID $1 no longer exists (this VM's init reaps orphans slowly)
  for _ in $(seq 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  return 1
}

# A counter in its own session (criu dumps it without --shell-job), counting into a file. One process with no
# children: a killed child would linger until this VM's init reaps it and block the restore of its PID. It drops
# every fd it inherited beyond stdio: a harness's fd on a mount outside this root would make CRIU refuse the dump.
setsid python3 -c '
import os, sys, time
os.closerange(3, 1 << 16)
i = 0
while True:
    i += 1
    with open(sys.argv[1] + ".tmp", "w") as f: f.write(str(i))
    __import__("os").replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(0.05)
' "$WORK/count" </dev/null >/dev/null 2>&1 &
COUNTER_PID=$!
for _ in $(seq 100); do [ -s "$WORK/count" ] && break; sleep 0.05; done
sleep 0.5

"$CRIU" dump -t "$COUNTER_PID" -D "$WORK/img" -o dump.log -v4 --libdir "$WORK/lib" \
  || fail "criu dump failed"
wait "$COUNTER_PID" 2>/dev/null
gone "$COUNTER_PID" || fail "the dumped process $COUNTER_PID did not go away"
AT_DUMP=$(cat "$WORK/count")
mv "$WORK/img/dump.log" "$WORK/dump.log"

HOOKS=${CRIU_HOOKS:-1[2-5]}   # CRIU_HOOKS: the hook count this CRIU has (4.1: 12, 4.2: 13, criu-dev: 15); else any
grep -q "Plugin \"gpuckpt\" (version 512 hooks $HOOKS)" "$WORK/dump.log" \
  || fail "CRIU did not load gpuckpt as a 0.2.0 plugin with $HOOKS hooks: $(grep 'Plugin "gpuckpt"' "$WORK/dump.log")"
grep -q "gpuckpt: plugin loaded for dump; host CRIU has $HOOKS plugin hooks (cr_plugin_ctl is" "$WORK/dump.log" \
  || fail "the plugin did not detect the host's hook count ($HOOKS) from cr_plugin_ctl"
grep -q 'gpuckpt: cuda: no NVIDIA GPU on this node' "$WORK/dump.log" || fail "the CUDA backend did not decline"
grep -q 'gpuckpt: amd: ' "$WORK/dump.log" || fail "the AMD backend was not offered the dump"
grep -E 'Error|gpuckpt: .*(error|failed)' "$WORK/dump.log" | grep -v 'rlimit' && fail "errors in the dump log"
# CRIU logs every hook it calls ("plugin: `NAME' hook N -> ADDRESS", -v4): the hooks this CRIU has reach the
# plugin, and none beyond them. PAUSE_DEVICES 10, CHECKPOINT_DEVICES 11 (4.0 on), DUMP_DEVICES_LATE 14 (criu-dev's
# 15 hooks: called after every task's memory is dumped, where the AMD backend unpauses the GPU).
called() { grep -q "plugin: \`gpuckpt' hook $2 -> " "$WORK/$1"; }
called dump.log 10 || fail "CRIU did not call gpuckpt's PAUSE_DEVICES (hook 10)"
called dump.log 11 || fail "CRIU did not call gpuckpt's CHECKPOINT_DEVICES (hook 11)"
if [ -n "${CRIU_HOOKS:-}" ] && [ "$CRIU_HOOKS" -ge 15 ]; then
  called dump.log 14 || fail "this CRIU has DUMP_DEVICES_LATE ($CRIU_HOOKS hooks) but did not call gpuckpt's (hook 14)"
elif [ -n "${CRIU_HOOKS:-}" ]; then
  called dump.log 14 && fail "a CRIU with $CRIU_HOOKS hooks called hook 14 of gpuckpt"
fi

"$CRIU" restore -D "$WORK/img" -o restore.log -v4 -d --libdir "$WORK/lib" --pidfile "$WORK/restored.pid" \
  || fail "criu restore failed"
RESTORED_PID=$(cat "$WORK/restored.pid")
mv "$WORK/img/restore.log" "$WORK/restore.log"
grep -q 'gpuckpt: plugin loaded for restore' "$WORK/restore.log" || fail "the plugin was not loaded for restore"
grep -q 'gpuckpt: the image inventory does not list gpuckpt: the checkpoint used no GPU, plugin inactive' \
  "$WORK/restore.log" || fail "the plugin did not decline the GPU-less image"
grep -q 'Restore finished successfully' "$WORK/restore.log" || fail "CRIU did not finish the restore"
called restore.log 9 || fail "CRIU did not call gpuckpt's RESUME_DEVICES_LATE (hook 9)"
# CRIU 4.2 and later set up their fdstore before the plugins' init (the AMD parallel restore socket goes there).
if [ -n "${CRIU_HOOKS:-}" ]; then
  [ "$CRIU_HOOKS" -ge 13 ] && STORE=yes || STORE=no
  grep -q "gpuckpt: plugin loaded for restore; .*; CRIU's fdstore usable from init(RESTORE): $STORE" "$WORK/restore.log" \
    || fail "the plugin did not find CRIU's fdstore usable from init(RESTORE) = $STORE with $CRIU_HOOKS hooks"
fi
if [ -n "${CRIU_HOOKS:-}" ] && [ "$CRIU_HOOKS" -ge 13 ]; then
  called restore.log 12 || fail "this CRIU has POST_FORKING ($CRIU_HOOKS hooks) but did not call gpuckpt's (hook 12)"
fi

# It continues from where it was: the count resumes at the dumped value and grows.
sleep 1
AFTER=$(cat "$WORK/count")
[ "$RESTORED_PID" = "$COUNTER_PID" ] || fail "restored as pid $RESTORED_PID, dumped $COUNTER_PID"
[ "$AFTER" -gt "$AT_DUMP" ] || fail "count $AFTER after restore is not past $AT_DUMP at dump"
[ "$AFTER" -lt $((AT_DUMP + 200)) ] || fail "count $AFTER jumped far past $AT_DUMP: not the restored process?"
kill -0 "$RESTORED_PID" || fail "the restored process died"
echo "PASS: dumped at $AT_DUMP, restored process $RESTORED_PID counts on ($AFTER); gpuckpt loaded and declined"
