#!/usr/bin/env bash
# Benchmark (not a test): the serial baseline against gpuckpt, in one run on one GPU machine.
#   baseline = what CRIU's upstream cuda plugin does, step by step from outside: cuda lock + checkpoint, criu dump;
#              criu restore, cuda restore + unlock (bench/cuckpt.c, CRIU without plugins)
#   gpuckpt  = criu dump / criu restore with gpuckpt_plugin.so doing the CUDA work from inside CRIU
# Checkpoint time = until the image is on disk (sync included); restore time = until the process runs on the GPU.
#   CRIU=/path/to/criu GPUCKPT_PLUGIN_DIR=dir-with-gpuckpt_plugin.so bash bench/cuda_bench.sh [SIZES_MIB...]
#   BENCH_DIRS="/tmp /dev/shm" (where images go), BENCH_OUT=dir for logs and the table (bench.tsv)
#   BENCH_CASES="sizes pair pair2gpu" (default; pair2gpu only where there are 2+ GPUs): which cases run
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
CRIU=${CRIU:-criu}
LIBDIR=${GPUCKPT_PLUGIN_DIR:?set GPUCKPT_PLUGIN_DIR}
SIZES=${*:-1024 4096 16384}
CASES=${BENCH_CASES:-sizes pair pair2gpu}
DIRS=${BENCH_DIRS:-/tmp}
OUTDIR=${BENCH_OUT:-/tmp/gpuckpt-bench}
mkdir -p "$OUTDIR" /tmp/gpuckpt-bench-bin /tmp/gpuckpt-empty-libdir
BIN=/tmp/gpuckpt-bench-bin
gcc -O2 -o $BIN/cuckpt "$SRC/bench/cuckpt.c" -ldl || exit 1
nvcc -O2 -o $BIN/gpu_counter "$SRC/test/gpu/gpu_counter.cu" || exit 1
TSV=$OUTDIR/bench.tsv
printf 'case\tmethod\timages\tckpt_s\trestore_s\timage_MB\tcuda_ckpt_s\tcriu_dump_s\tcriu_restore_s\tcuda_restore_s\tok\n' > "$TSV"

now() { date +%s.%N; }
sub() { python3 -c "print(f'{$1-$2:.2f}')"; }
last_iter() { tail -n 1 "$1" 2>/dev/null | cut -d' ' -f1; }
wait_iter() { local d=$((SECONDS + ${3:-120})) it; while [ $SECONDS -lt $d ]; do it=$(last_iter "$1"); [ -n "$it" ] && [ "$it" -ge "$2" ] && return 0; sleep 0.05; done; return 1; }
gone() { for _ in $(seq 1200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done; return 1; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# start NPROC MIB OUT [CHILD_GPU]: one gpu_counter (NPROC=1) or a parent with a child (NPROC=2), each holding MIB
# on a GPU (the child on device CHILD_GPU, default 0)
start() {
  local extra=""; [ "$1" = 2 ] && extra="--child --child-gpu ${4:-0}"
  rm -f "$3" "$3.child"
  setsid $BIN/gpu_counter "$2" "$3" $extra </dev/null >/dev/null 2>&1 & PID=$!
  wait_iter "$3" 5 120 || return 1
  [ "$1" = 2 ] && { wait_iter "$3.child" 5 120 || return 1; CHILD=$(pgrep -P $PID | head -1); }
  return 0
}
pids_of() { echo "$PID${CHILD:+ $CHILD}"; }
verify_continues() { local a; a=$(last_iter "$1"); wait_iter "$1" $((a + 5)) 60 && ! grep -q BAD "$1"; }

run_case() { # NAME NPROC MIB METHOD DIR [CHILD_GPU]
  local name=$1 nproc=$2 mib=$3 method=$4 where=$5 out=/tmp/gpuckpt-bench.out img="$5/gpuckpt-bench-img"
  CHILD=
  rm -rf "$img"; mkdir -p "$img"
  start "$nproc" "$mib" "$out" "${6:-0}" || { echo "$name: workload did not start"; return; }
  local t0 t1 t2 t3 t4 t5 cuda_ckpt="" criu_dump="" criu_restore="" cuda_restore="" ok=yes
  if [ "$method" = baseline ]; then
    t0=$(now)
    for p in $(pids_of); do $BIN/cuckpt lock $p && $BIN/cuckpt checkpoint $p || ok=no; done
    t1=$(now)
    timeout -s KILL 150 "$CRIU" dump -t $PID -D "$img" -o dump.log -v4 --libdir /tmp/gpuckpt-empty-libdir || ok=no
    sync; t2=$(now)
    cuda_ckpt=$(sub $t1 $t0); criu_dump=$(sub $t2 $t1)
  else
    t0=$(now)
    timeout -s KILL 150 "$CRIU" dump -t $PID -D "$img" -o dump.log -v4 --libdir "$LIBDIR" || ok=no
    sync; t2=$(now)
    cuda_ckpt=$(grep -o 'timing: cuda checkpoint of [0-9]* process(es) [a-z ]*: [0-9.]*' "$img/dump.log" | awk '{print $NF}')
    criu_dump=$(python3 -c "print(f'{$t2-$t0-${cuda_ckpt:-0}:.2f}')")
  fi
  wait $PID 2>/dev/null; for p in $(pids_of); do gone $p; done
  local size; size=$(du -sm "$img" | cut -f1)
  drop_caches
  t3=$(now)
  if [ "$method" = baseline ]; then
    timeout -s KILL 150 "$CRIU" restore -D "$img" -o restore.log -v4 -d --libdir /tmp/gpuckpt-empty-libdir || ok=no
    t4=$(now)
    for p in $(pids_of); do $BIN/cuckpt restore $p >/dev/null && $BIN/cuckpt unlock $p || ok=no; done
    t5=$(now)
    criu_restore=$(sub $t4 $t3); cuda_restore=$(sub $t5 $t4)
  else
    timeout -s KILL 150 "$CRIU" restore -D "$img" -o restore.log -v4 -d --libdir "$LIBDIR" || ok=no
    t5=$(now)
    cuda_restore=$(grep -o 'timing: cuda restore of [0-9]* process(es) [a-z ]*: [0-9.]*' "$img/restore.log" | awk '{print $NF}')
    criu_restore=$(python3 -c "print(f'{$t5-$t3-${cuda_restore:-0}:.2f}')")
  fi
  verify_continues "$out" || ok=no
  [ -n "$CHILD" ] && { verify_continues "$out.child" || ok=no; }
  cp "$img/dump.log" "$OUTDIR/$name-$method-$(basename "$where")-dump.log" 2>/dev/null
  cp "$img/restore.log" "$OUTDIR/$name-$method-$(basename "$where")-restore.log" 2>/dev/null
  for p in $(pids_of); do kill -9 $p 2>/dev/null; done
  for p in $(pids_of); do gone $p; done
  rm -rf "$img"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$method" "$where" "$(sub $t2 $t0)" "$(sub $t5 $t3)" \
    "$size" "$cuda_ckpt" "$criu_dump" "$criu_restore" "$cuda_restore" "$ok" | tee -a "$TSV"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
GPU_COUNT=$(nvidia-smi -L | wc -l)
has_case() { case " $CASES " in *" $1 "*) return 0 ;; esac; return 1; }
for where in $DIRS; do
  if has_case sizes; then
    for mib in $SIZES; do
      for method in baseline gpuckpt; do run_case "1x${mib}MiB" 1 "$mib" $method "$where"; done
    done
  fi
  # Two CUDA processes (parent + child) of 4 GiB each: gpuckpt checkpoints and restores them in parallel.
  if has_case pair; then
    for method in baseline gpuckpt; do run_case "2x4096MiB" 2 4096 $method "$where"; done
  fi
  # The same two processes on two GPUs (parent on GPU0, child on GPU1): each has its own GPU copy path.
  if has_case pair2gpu && [ "$GPU_COUNT" -ge 2 ]; then
    for method in baseline gpuckpt; do run_case "2x4096MiB-2gpu" 2 4096 $method "$where" 1; done
  fi
done

echo
echo "=== checkpoint / restore seconds (lower is better); ratio = baseline / gpuckpt"
python3 - "$TSV" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
key = lambda r: (r["case"], r["images"])
base = {key(r): r for r in rows if r["method"] == "baseline"}
print(f"{'case':<12}{'images':<10}{'method':<10}{'ckpt_s':>8}{'rest_s':>8}{'img_MB':>8}  {'ckpt x':>7}{'rest x':>7}  ok   detail")
for r in rows:
    b = base.get(key(r))
    rc = float(b["ckpt_s"]) / float(r["ckpt_s"]) if b else 0
    rr = float(b["restore_s"]) / float(r["restore_s"]) if b else 0
    detail = f"cuda {r['cuda_ckpt_s']}+criu {r['criu_dump_s']} / criu {r['criu_restore_s']}+cuda {r['cuda_restore_s']}"
    print(f"{r['case']:<12}{r['images']:<10}{r['method']:<10}{r['ckpt_s']:>8}{r['restore_s']:>8}{r['image_MB']:>8}  {rc:>7.2f}{rr:>7.2f}  {r['ok']:<4} {detail}")
EOF
