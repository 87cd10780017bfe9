#!/usr/bin/env bash
# Benchmark (not a test): the serial baseline against gpuckpt, in one run on one GPU machine.
#   baseline = what CRIU's upstream cuda plugin does, step by step from outside: cuda lock + checkpoint, criu dump;
#              criu restore, cuda restore + unlock (bench/cuckpt.c, CRIU without plugins)
#   gpuckpt  = criu dump / criu restore with gpuckpt_plugin.so doing the CUDA work from inside CRIU and writing
#              GPU memory itself (GPU memory images: parallel, sparse, zstd)
#   gpuckpt-off = the same with GPUCKPT_CUDA_MEMORY_IMAGE=0 (CRIU's page path carries GPU memory)
# Checkpoint time = until the image is on disk (sync included); restore time = until the process runs on the GPU.
#   CRIU=/path/to/criu GPUCKPT_PLUGIN_DIR=dir-with-gpuckpt_plugin.so bash bench/cuda_bench.sh [SIZES_MIB...]
#   BENCH_DIRS="/dev/shm /tmp" (where images go), BENCH_OUT=dir for logs and the table (bench.tsv)
#   BENCH_CASES="sizes pair pair2gpu" (default; pair2gpu only where there are 2+ GPUs): which cases run
#   BENCH_CONTENTS="random zeros bf16" (gpu_counter --content: incompressible / 75% zeros / bf16 weights)
#   BENCH_METHODS="baseline gpuckpt" (add gpuckpt-off to see the plugin without its memory path), BENCH_RUNS=1
#   BENCH_FLOOR_GIB=8 (size of the floor measurements; 0 skips them)
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
CRIU=${CRIU:-criu}
LIBDIR=${GPUCKPT_PLUGIN_DIR:?set GPUCKPT_PLUGIN_DIR}
SIZES=${*:-1024 4096 16384}
CASES=${BENCH_CASES:-sizes pair pair2gpu}
DIRS=${BENCH_DIRS:-/dev/shm /tmp}
CONTENTS=${BENCH_CONTENTS:-random zeros bf16}
METHODS=${BENCH_METHODS:-baseline gpuckpt}
RUNS=${BENCH_RUNS:-1}
FLOOR_GIB=${BENCH_FLOOR_GIB:-8}
OUTDIR=${BENCH_OUT:-/tmp/gpuckpt-bench}
mkdir -p "$OUTDIR" /tmp/gpuckpt-bench-bin /tmp/gpuckpt-empty-libdir
BIN=/tmp/gpuckpt-bench-bin
gcc -O2 -o $BIN/cuckpt "$SRC/bench/cuckpt.c" -ldl || exit 1
nvcc -O2 -o $BIN/gpu_counter "$SRC/test/gpu/gpu_counter.cu" || exit 1
gcc -O2 -o $BIN/io_floor "$SRC/bench/io_floor.c" -lpthread || exit 1
TSV=$OUTDIR/bench.tsv
printf 'case\tmethod\timages\tckpt_s\trestore_s\timage_MB\tcuda_ckpt_s\tcriu_dump_s\tcriu_restore_s\tcuda_restore_s\tok\tmem_write_s\tmem_fill_s\tgpumem_MB\tpages_MB\n' > "$TSV"

now() { date +%s.%N; }
sub() { python3 -c "print(f'{$1-$2:.2f}')"; }
last_iter() { tail -n 1 "$1" 2>/dev/null | cut -d' ' -f1; }
wait_iter() { local d=$((SECONDS + ${3:-120})) it; while [ $SECONDS -lt $d ]; do it=$(last_iter "$1"); [ -n "$it" ] && [ "$it" -ge "$2" ] && return 0; sleep 0.05; done; return 1; }
gone() { for _ in $(seq 1200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done; return 1; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# start NPROC MIB OUT [CHILD_GPU] [CONTENT]: one gpu_counter (NPROC=1) or a parent with a child (NPROC=2), each
# holding MIB on a GPU (the child on device CHILD_GPU, default 0), memory shaped as CONTENT (default random)
start() {
  local extra="--content ${5:-random}"; [ "$1" = 2 ] && extra="$extra --child --child-gpu ${4:-0}"
  rm -f "$3" "$3.child"
  setsid $BIN/gpu_counter "$2" "$3" $extra </dev/null >/dev/null 2>&1 & PID=$!
  wait_iter "$3" 5 120 || return 1
  [ "$1" = 2 ] && { wait_iter "$3.child" 5 120 || return 1; CHILD=$(pgrep -P $PID | head -1); }
  return 0
}
pids_of() { echo "$PID${CHILD:+ $CHILD}"; }
verify_continues() { local a; a=$(last_iter "$1"); wait_iter "$1" $((a + 5)) 60 && ! grep -q BAD "$1"; }

run_case() { # NAME NPROC MIB METHOD DIR [CHILD_GPU] [CONTENT]
  local name=$1 nproc=$2 mib=$3 method=$4 where=$5 out=/tmp/gpuckpt-bench.out img="$5/gpuckpt-bench-img"
  CHILD=
  rm -rf "$img"; mkdir -p "$img"
  start "$nproc" "$mib" "$out" "${6:-0}" "${7:-random}" || { echo "$name: workload did not start"; return; }
  local t0 t1 t2 t3 t4 t5 cuda_ckpt="" criu_dump="" criu_restore="" cuda_restore="" ok=yes mem_write="" mem_fill=""
  local path_env=""; [ "$method" = gpuckpt-off ] && path_env="GPUCKPT_CUDA_MEMORY_IMAGE=0"
  if [ "$method" = baseline ]; then
    t0=$(now)
    for p in $(pids_of); do $BIN/cuckpt lock $p && $BIN/cuckpt checkpoint $p || ok=no; done
    t1=$(now)
    timeout -s KILL 150 "$CRIU" dump -t $PID -D "$img" -o dump.log -v4 --libdir /tmp/gpuckpt-empty-libdir || ok=no
    sync; t2=$(now)
    cuda_ckpt=$(sub $t1 $t0); criu_dump=$(sub $t2 $t1)
  else
    t0=$(now)
    env $path_env timeout -s KILL 150 "$CRIU" dump -t $PID -D "$img" -o dump.log -v4 --libdir "$LIBDIR" || ok=no
    sync; t2=$(now)
    cuda_ckpt=$(grep -o 'timing: cuda checkpoint of [0-9]* process(es) [a-z ]*: [0-9.]*' "$img/dump.log" | awk '{print $NF}')
    mem_write=$(grep -o 'timing: gpu memory image write: [0-9.]*' "$img/dump.log" | awk '{print $NF}')
    criu_dump=$(python3 -c "print(f'{$t2-$t0-${cuda_ckpt:-0}:.2f}')")
  fi
  wait $PID 2>/dev/null; for p in $(pids_of); do gone $p; done
  local size gpumem pages
  size=$(du -sm "$img" | cut -f1)
  gpumem=$(du -cm "$img"/gpuckpt-gpumem-*.img* 2>/dev/null | tail -1 | cut -f1)
  pages=$(du -cm "$img"/pages-*.img 2>/dev/null | tail -1 | cut -f1)
  drop_caches
  t3=$(now)
  if [ "$method" = baseline ]; then
    timeout -s KILL 150 "$CRIU" restore -D "$img" -o restore.log -v4 -d --libdir /tmp/gpuckpt-empty-libdir || ok=no
    t4=$(now)
    for p in $(pids_of); do $BIN/cuckpt restore $p >/dev/null && $BIN/cuckpt unlock $p || ok=no; done
    t5=$(now)
    criu_restore=$(sub $t4 $t3); cuda_restore=$(sub $t5 $t4)
  else
    env $path_env timeout -s KILL 150 "$CRIU" restore -D "$img" -o restore.log -v4 -d --libdir "$LIBDIR" || ok=no
    t5=$(now)
    cuda_restore=$(grep -o 'timing: cuda restore of [0-9]* process(es) [a-z ]*: [0-9.]*' "$img/restore.log" | awk '{print $NF}')
    mem_fill=$(grep -o 'timing: gpu memory image fill: [0-9.]*' "$img/restore.log" | awk '{print $NF}')
    criu_restore=$(python3 -c "print(f'{$t5-$t3-${cuda_restore:-0}:.2f}')")
  fi
  verify_continues "$out" || ok=no
  [ -n "$CHILD" ] && { verify_continues "$out.child" || ok=no; }
  cp "$img/dump.log" "$OUTDIR/$name-$method-$(basename "$where")-dump.log" 2>/dev/null
  cp "$img/restore.log" "$OUTDIR/$name-$method-$(basename "$where")-restore.log" 2>/dev/null
  for p in $(pids_of); do kill -9 $p 2>/dev/null; done
  for p in $(pids_of); do gone $p; done
  rm -rf "$img"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$method" "$where" "$(sub $t2 $t0)" \
    "$(sub $t5 $t3)" "$size" "$cuda_ckpt" "$criu_dump" "$criu_restore" "$cuda_restore" "$ok" "${mem_write:--}" \
    "${mem_fill:--}" "${gpumem:-0}" "${pages:-0}" | tee -a "$TSV"
}

echo "=== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
echo "transparent_hugepage: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null) (defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null))"
GPU_COUNT=$(nvidia-smi -L | wc -l)
FLOORS=$OUTDIR/floors.txt
: > "$FLOORS"
if [ "$FLOOR_GIB" != 0 ]; then
  echo "=== floors (same run): parallel O_DIRECT write+fsync / read, 1 and 8 streams; memory copy, 1 and 16 threads"
  for where in $DIRS; do
    for streams in 1 8; do
      $BIN/io_floor write "$where" "$FLOOR_GIB" $streams | tee -a "$FLOORS"
      drop_caches
      $BIN/io_floor read "$where" $streams | tee -a "$FLOORS"
    done
  done
  for threads in 1 16; do $BIN/io_floor memcpy "$FLOOR_GIB" $threads | tee -a "$FLOORS"; done
fi
has_case() { case " $CASES " in *" $1 "*) return 0 ;; esac; return 1; }
for where in $DIRS; do
  if has_case sizes; then
    for mib in $SIZES; do
      for content in $CONTENTS; do
        for _ in $(seq "$RUNS"); do
          for method in $METHODS; do run_case "1x${mib}MiB-$content" 1 "$mib" $method "$where" 0 "$content"; done
        done
      done
    done
  fi
  # Two CUDA processes (parent + child) of 4 GiB each: gpuckpt checkpoints and restores them in parallel.
  if has_case pair; then
    for method in $METHODS; do run_case "2x4096MiB" 2 4096 $method "$where"; done
  fi
  # The same two processes on two GPUs (parent on GPU0, child on GPU1): each has its own GPU copy path.
  if has_case pair2gpu && [ "$GPU_COUNT" -ge 2 ]; then
    for method in $METHODS; do run_case "2x4096MiB-2gpu" 2 4096 $method "$where" 1; done
  fi
done

echo
echo "=== checkpoint / restore seconds (median over runs, lower is better); x = baseline / this method"
python3 - "$TSV" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
groups = {}
for r in rows:
    groups.setdefault((r["case"], r["images"], r["method"]), []).append(r)
def med(rs, k):
    vals = [float(r[k]) for r in rs if r[k] not in ("", "-")]
    return statistics.median(vals) if vals else None
def spread(rs, k):
    vals = [float(r[k]) for r in rs if r[k] not in ("", "-")]
    return f"{min(vals):.2f}-{max(vals):.2f}" if len(vals) > 1 else ""
print(f"{'case':<20}{'images':<10}{'method':<13}{'n':>2}{'ckpt_s':>8}{'rest_s':>8}{'img_MB':>8}{'ckpt x':>8}{'rest x':>8}{'img %':>7}  ok   detail")
for (case, images, method), rs in groups.items():
    b = groups.get((case, images, "baseline"))
    c, r_, img = med(rs, "ckpt_s"), med(rs, "restore_s"), med(rs, "image_MB")
    bc, br, bi = (med(b, "ckpt_s"), med(b, "restore_s"), med(b, "image_MB")) if b else (None, None, None)
    cx = f"{bc / c:.2f}" if bc and c else "-"
    rx = f"{br / r_:.2f}" if br and r_ else "-"
    ip = f"{100 * img / bi:.0f}" if bi and img is not None else "-"
    ok = "yes" if all(x["ok"] == "yes" for x in rs) else "NO"
    x = rs[-1]
    detail = f"cuda {x['cuda_ckpt_s']}+criu {x['criu_dump_s']} / criu {x['criu_restore_s']}+cuda {x['cuda_restore_s']}"
    if x["mem_write_s"] != "-":
        detail += f"; mem write {x['mem_write_s']} fill {x['mem_fill_s']}; gpumem {x['gpumem_MB']} MB pages {x['pages_MB']} MB"
    sp = spread(rs, "ckpt_s")
    if sp:
        detail += f"; ckpt {sp} rest {spread(rs, 'restore_s')}"
    print(f"{case:<20}{images:<10}{method:<13}{len(rs):>2}{c:>8.2f}{r_:>8.2f}{img:>8.0f}{cx:>8}{rx:>8}{ip:>7}  {ok:<4} {detail}")
EOF
