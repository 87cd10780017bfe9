#!/usr/bin/env bash
# Restore against restart, as a user of a GPU node sees it: a decoding container (bench/decode_workload.py: ~1.1B
# parameters bf16 on the GPU, RVR_CPU_MIB of CPU heap the process wrote, default 1024) under podman with the node's
# installed gpuckpt and whatever its settings file says (the installer's defaults unless RVR_STORE names a store:
# inline, node), per run:
#   cold      `podman run` to the first token (imports, weights on the GPU, heap): what a restart costs
#   ck1       `podman container checkpoint --export` of the running container; its archive's size
#   rst_cold  the page cache dropped (node store and archive read from disk), `podman container restore --import`
#             to the next token the restored process writes
#   ck2       a second checkpoint of the restored container (its memory barely changed); its archive's size
#   rst_warm  restore of that archive with the page cache warm (a second replica on the node), to the next token
# and checks that the restored streams continue step by step. RVR_SETTINGS adds lines to the settings file. Rows into RVR_TSV (default in the work dir), medians
# after, ratios to the cold start of the same run.
#   bash bench/restore_vs_restart.sh [RUNS]      on a GPU node set up by test/gpu/device_node.sh
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-3}
PREFIX=gpuckpt-rvr-$$
KEEP_OUT=${RVR_OUT:-}
. "$SRC/test/gpu/gpu_test_lib.sh"
. "$SRC/test/gpu/node_test_lib.sh"
[ "$HAVE_GPU" = 1 ] || skip "no NVIDIA GPU"
PY=${PYTHON:-}
[ -n "$PY" ] || { [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3; }
[ -n "$PY" ] || PY=$(command -v python3)
PY=$("$PY" -c 'import sys; print(sys.executable)') || skip "no python"
"$PY" -c 'import torch, transformers, numpy' 2>/dev/null || skip "$PY lacks torch, transformers or numpy"
host_python_mounts "$PY" || skip "cannot ask $PY for its prefix"
python_image || skip "cannot build the image (busybox)"
CPU_MIB=${RVR_CPU_MIB:-1024}
TSV=${RVR_TSV:-$WORK/restore_vs_restart.tsv}
SETTINGS=$PLUGIN_DIR/gpuckpt_plugin.env SAVED=$WORK/plugin.env.saved
[ -f "$SETTINGS" ] && cp "$SETTINGS" "$SAVED"
restore_settings() { if [ -f "$SAVED" ]; then cp "$SAVED" "$SETTINGS"; else rm -f "$SETTINGS"; fi; }
NODE_CLEANUP=restore_settings
if [ -n "${RVR_STORE:-}" ]; then
  { [ -f "$SAVED" ] && grep -v '^GPUCKPT_GPU_STORE=' "$SAVED"; echo "GPUCKPT_GPU_STORE=$RVR_STORE"; } > "$SETTINGS"
fi
# RVR_SETTINGS: more lines for the settings file (e.g. "GPUCKPT_STORE_READ_AHEAD=0"), for a run against a default
if [ -n "${RVR_SETTINGS:-}" ]; then
  { [ -f "$SETTINGS" ] && cat "$SETTINGS"; printf '%s\n' $RVR_SETTINGS; } > "$SETTINGS.new" && mv "$SETTINGS.new" "$SETTINGS"
  echo "settings added: $RVR_SETTINGS"
fi
STORE_SETTING=$(grep -h '^GPUCKPT_GPU_STORE=' "$SETTINGS" 2>/dev/null | tail -1 | cut -d= -f2)
echo "settings: ${STORE_SETTING:-the built-in default of the plugin} (GPUCKPT_GPU_STORE in $SETTINGS)"

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}'; }
lines() { [ -f "$1" ] && wc -l < "$1" || echo 0; }
until_lines() { # FILE N TIMEOUT_S NAME: until FILE has more than N lines; 1 when the container stopped or time ran out
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(lines "$1")" -gt "$2" ] && return 0
    [ "$(podman inspect -f '{{.State.Running}}' "$4" 2>/dev/null)" = true ] || { sleep 0.2; [ "$(lines "$1")" -gt "$2" ] && return 0; return 1; }
    sleep 0.02
  done
  return 1
}
continues() { awk 'NR > 1 && $1 != prev + 1 && $1 != 1 {print "step " prev " -> " $1; bad = 1} {prev = $1} END {exit bad}' "$1"; }
mib() { echo $(( $(stat -c %s "$1") >> 20 )); }
# With RVR_OUT: podman's --print-stats answers and the plugin's timing lines of CRIU's last log, per step.
keep() { # NAME STEP [ARCHIVE]
  [ -n "$KEEP_OUT" ] || return 0
  [ -n "${3:-}" ] && tar --zstd -tvf "$3" 2>/dev/null | sort -k3 -n | tail -n 8 > "$KEEP_OUT/$2.archive.txt"
  local static; static=$(podman inspect -f '{{.StaticDir}}' "$1" 2>/dev/null)
  cp "$WORK/$2.log" "$KEEP_OUT/$2.podman.log" 2>/dev/null
  for log in dump.log restore.log; do
    [ -f "$static/$log" ] && grep -E "timing|cpu pages|Error" "$static/$log" > "$KEEP_OUT/$2.$log.txt"
  done
  return 0
}
# A step still running after RVR_STEP_WATCH seconds (default 120): what podman, runc and CRIU are doing then (their
# kernel stacks and wait channels, the tail of the newest CRIU log), into RVR_OUT or the work dir.
watch_step() { # STEP
  ( sleep "${RVR_STEP_WATCH:-120}"
    { echo "--- $1 still running after ${RVR_STEP_WATCH:-120} s"
      ps -eo pid,stat,etime,wchan:32,args | grep -E "criu|podman|runc|conmon" | grep -v grep
      for p in $(pgrep -f '(^|/)criu( |:)|criu: '); do
        for t in /proc/"$p"/task/*; do echo "criu $p task ${t##*/}: $(cat "$t/wchan" 2>/dev/null)"; head -8 "$t/stack" 2>/dev/null; done
      done
      find /var/lib/containers /var/tmp/gpuckpt-storage /run/containers /run/libpod -name '*.log' -mmin -10 2>/dev/null | grep -E "dump|restore" |
        while read -r l; do echo "--- $l"; tail -n 60 "$l"; done
    } > "${KEEP_OUT:-$WORK}/$1.watch.txt" 2>&1 ) &
  WATCH_PID=$!
}
unwatch() { kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null; return 0; }
# Where a restore's time went: podman's --print-stats (podman, runc + CRIU, CRIU's restore) and the plugin's own
# steps, which it leaves in the node store for the restored init's pid (gpumem/memory_lineage.h), taken here as
# the agent takes them. One row per restore into PHASES.
PHASES=${TSV%.tsv}.phases.tsv
NODE_STORE=${RVR_NODE_STORE:-/var/lib/gpuckpt/chunks}
echo -e "run\tstep\tto_token_s\tpodman_s\truntime_s\tcriu_restore_s\tplugin_cpu_pages_s\tplugin_gpu_memory_s\tplugin_gpu_restore_s" > "$PHASES"
restore_parts() { # RUN STEP PODMAN_STATS_LOG TO_TOKEN_S
  local pid spooled
  pid=$(podman inspect -f '{{.State.Pid}}' "$NAME" 2>/dev/null)
  spooled=$NODE_STORE/restore-timings/$pid.json
  python3 - "$3" "$spooled" "$1" "$2" "$4" >> "$PHASES" <<'PY' || echo "restore_parts: $2: podman's statistics unreadable" >&2
import json, sys
text = open(sys.argv[1]).read()
doc = json.loads(text[text.index("{"):])
c = doc["container_statistics"][0]
try:
    plugin = json.load(open(sys.argv[2]))
except OSError:
    plugin = {}
us = lambda v: "%.2f" % (v / 1e6)
s = lambda k: "%.2f" % plugin[k] if k in plugin else "-"
print("\t".join([sys.argv[3], sys.argv[4], sys.argv[5], us(doc["podman_restore_duration"]), us(c["runtime_restore_duration"]),
                 us(c["criu_statistics"]["restore_time"]), s("cpu-pages"), s("gpu-memory"), s("gpu-restore")]))
PY
  rm -f "$spooled"
}
fail() { # the failed step's CRIU log (podman keeps it in the container's static dir) before the container goes
  local static; static=$(podman inspect -f '{{.StaticDir}}' "$NAME" 2>/dev/null)
  for log in dump.log restore.log; do [ -f "$static/$log" ] && { echo "--- $log"; grep -E "Error|gpuckpt|Warn" "$static/$log" | tail -n 40; }; done
  echo "FAIL: $*"; pm rm -f -t 0 "$NAME" >/dev/null 2>&1; exit 1
}

echo -e "run\tcold_s\tck1_s\tarchive1_mib\trst_cold_s\tck2_s\tarchive2_mib\trst_warm_s\tgpu_mib\tcpu_mib" > "$TSV"
for run in $(seq "$RUNS"); do
  NAME=$PREFIX-$run OUT=$WORK/out/$run.txt A1=$WORK/$run.1.tar.zst A2=$WORK/$run.2.tar.zst
  rm -f "$OUT"
  t0=$(now)
  pm run -d --name "$NAME" "${GPU_SAFE_ENV[@]}" "${CDI_GPU[@]}" "${HOST_PY_MOUNTS[@]}" -v "$SRC/bench:/srv:ro" \
    -v "$WORK/out:/out" -e HOME=/tmp "$PY_IMAGE" "$PY" /srv/decode_workload.py --out "/out/$run.txt" --cpu-mib "$CPU_MIB" \
    > "$WORK/$NAME.run" 2>&1 || { show "$WORK/$NAME.run"; fail "podman run"; }
  until_lines "$OUT" 0 300 "$NAME" || { pm logs "$NAME" 2>&1 | tail -5; fail "no first token"; }
  cold=$(since "$t0")
  until_lines "$OUT" 30 120 "$NAME" || fail "decoding stopped"
  gpu_mib=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits | awk '{s += $1} END {print s + 0}')
  watch_step "$run.ck1"
  timed ck1 pm container checkpoint --print-stats --export "$A1" "$NAME" > "$WORK/$run.ck1.log" 2>&1 || { show "$WORK/$run.ck1.log"; fail "checkpoint 1"; }
  unwatch; keep "$NAME" "$run.ck1" "$A1"
  pm rm -f -t 0 "$NAME" >/dev/null 2>&1; wait_gone "$NAME"
  sync; echo 3 > /proc/sys/vm/drop_caches
  n=$(lines "$OUT") t0=$(now)
  watch_step "$run.rst1"
  pm container restore --print-stats --import "$A1" > "$WORK/$run.rst1.log" 2>&1 || { show "$WORK/$run.rst1.log"; fail "restore 1 (page cache dropped)"; }
  until_lines "$OUT" "$n" 120 "$NAME" || fail "no token after restore 1"
  rst_cold=$(since "$t0")
  unwatch; keep "$NAME" "$run.rst1"; restore_parts "$run" rst_cold "$WORK/$run.rst1.log" "$rst_cold"
  until_lines "$OUT" $((n + 30)) 120 "$NAME" || fail "decoding stopped after restore 1"
  watch_step "$run.ck2"
  timed ck2 pm container checkpoint --print-stats --export "$A2" "$NAME" > "$WORK/$run.ck2.log" 2>&1 || { show "$WORK/$run.ck2.log"; fail "checkpoint 2"; }
  unwatch; keep "$NAME" "$run.ck2" "$A2"
  pm rm -f -t 0 "$NAME" >/dev/null 2>&1; wait_gone "$NAME"
  n=$(lines "$OUT") t0=$(now)
  watch_step "$run.rst2"
  pm container restore --print-stats --import "$A2" > "$WORK/$run.rst2.log" 2>&1 || { show "$WORK/$run.rst2.log"; fail "restore 2 (page cache warm)"; }
  until_lines "$OUT" "$n" 120 "$NAME" || fail "no token after restore 2"
  rst_warm=$(since "$t0")
  unwatch; keep "$NAME" "$run.rst2"; restore_parts "$run" rst_warm "$WORK/$run.rst2.log" "$rst_warm"
  until_lines "$OUT" $((n + 10)) 120 "$NAME" || fail "decoding stopped after restore 2"
  pm rm -f -t 0 "$NAME" >/dev/null 2>&1; wait_gone "$NAME"
  continues "$OUT" || fail "the restored stream did not continue step by step"
  echo -e "$run\t$cold\t$ck1\t$(mib "$A1")\t$rst_cold\t$ck2\t$(mib "$A2")\t$rst_warm\t$gpu_mib\t$CPU_MIB" | tee -a "$TSV"
  rm -f "$A1" "$A2"
done
median_of() { awk -F'\t' -v c="$1" 'NR > 1 {print $c}' "$TSV" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
read -r cold ck1 a1 rc ck2 a2 rw <<< "$(for c in 2 3 4 5 6 7 8; do median_of $c; done | xargs)"
printf 'medians of %s runs (store: %s): cold start %s s; checkpoint %s s (%s MiB), second %s s (%s MiB, %.2fx of the first); restore to next token %s s with the page cache dropped (%.2fx of cold), %s s warm (%.2fx)\n' \
  "$RUNS" "${STORE_SETTING:-built-in default}" "$cold" "$ck1" "$a1" "$ck2" "$a2" "$(awk -v a="$ck2" -v b="$ck1" 'BEGIN {print a / b}')" \
  "$rc" "$(awk -v a="$rc" -v b="$cold" 'BEGIN {print a / b}')" "$rw" "$(awk -v a="$rw" -v b="$cold" 'BEGIN {print a / b}')" | tee -a "${TSV%.tsv}.summary.txt"
echo "where each restore's time went ($PHASES):"; column -t -s $'\t' "$PHASES" 2>/dev/null || cat "$PHASES"
