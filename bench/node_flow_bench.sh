#!/usr/bin/env bash
# Benchmark (not a test): the node flow against the runtime's own archive path, on the CPU machine.
#   podman = `podman container checkpoint --export` / `podman container restore --import` by hand (zstd, podman's
#            default and the agent's archive format)
#   podman-plain = the same with `--compress none`: podman's own work without compression, the floor of its path
#   agent  = `gpuckpt checkpoint` / `gpuckpt restore --target-gpus` through the agent (the e2e sandbox: fixture
#            8-GPU node, the built OCI hook and agent), which runs the same podman commands and adds its own work:
#            the GPU record and annotations at checkpoint, the restore plan (another GPU) at restore
# The container holds BENCH_MIB of touched, incompressible memory (bench/mem_holder.c) and GPU device aliases
# (/dev/null as /dev/nvidia0), so the hook records it and a restore onto the other GPU has a plan to apply.
# Rounds rotate which side goes first; every figure is wall time around the command, archives on /tmp.
#   sudo bash bench/node_flow_bench.sh            BENCH_MIB=4096 BENCH_RUNS=3 BENCH_LABEL=run
#   GPUCKPT_BUILD_DIR=build (built agent, hook, CLI; BENCH_NOTE says what they are built from in the header);
#   results: bench/results/cpu-DATE-node-flow-LABEL.txt
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${GPUCKPT_BUILD_DIR:-$SRC/build}" && pwd)
MIB=${BENCH_MIB:-4096}
RUNS=${BENCH_RUNS:-3}
LABEL=${BENCH_LABEL:-run}
CLI=$BUILD/cli/gpuckpt
IMAGE=${GPUCKPT_TEST_IMAGE:-localhost/gpuckpt-busybox}
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
. "$SRC/scripts/lib/node-sandbox.sh"

WORK=/tmp/gpuckpt-bench-node-flow-$$
NAME=gpuckpt-bench-flow-$$
RESULT=$SRC/bench/results/cpu-$(date -u +%Y-%m-%d)-node-flow-$LABEL.txt
mkdir -m 700 "$WORK" || exit 1
cleanup() {
  set +e
  sandbox_stop_agent
  podman rm -f -t 0 "$NAME" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
gcc -O2 -static -o "$WORK/mem_holder" "$SRC/bench/mem_holder.c" || exit 1
sandbox_prepare "$WORK" "$BUILD" "$SRC" || { echo "cannot prepare the sandbox node" >&2; exit 1; }
sandbox_start_agent "$BUILD/agent/gpuckpt-agent" || exit 1
AGENT=(--agent "$URL" --token-file "$TOKEN_FILE" --timeout 900)

now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
log() { echo "$*" | tee -a "$RESULT"; }
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval('d'+sys.argv[2]))" "$1" "$2"; }
wait_log() {  # wait_log PATTERN SECONDS: the container's log shows PATTERN
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do podman logs "$NAME" 2>/dev/null | grep -q "$1" && return 0; sleep 0.5; done
  return 1
}
continues() {  # the restored workload counts on
  local before after
  before=$(podman logs "$NAME" 2>/dev/null | grep -c tick)
  sleep 2.5
  after=$(podman logs "$NAME" 2>/dev/null | grep -c tick)
  [ "$after" -gt "$before" ]
}
start_workload() {
  podman --hooks-dir "$HOOKS" run -d --name "$NAME" "${ULIMITS[@]}" -v "$WORK/mem_holder:/mem_holder:ro" \
    --device /dev/null:/dev/nvidia0 -e NVIDIA_VISIBLE_DEVICES=0 "$IMAGE" /mem_holder "$MIB" >/dev/null || return 1
  wait_log "ready" 300
}

podman_round() {  # podman_round SIDE ROUND COMPRESSION
  local archive=$WORK/podman.tar.$3 t ck rs
  sync; t=$(now)
  podman container checkpoint --compress "$3" --export "$archive" "$NAME" >/dev/null ||
    { log "podman checkpoint failed"; return 1; }
  ck=$(since "$t")
  local bytes; bytes=$(stat -c %s "$archive")
  podman rm -f -t 0 "$NAME" >/dev/null
  sync; t=$(now)
  podman --hooks-dir "$HOOKS" container restore --import "$archive" --name "$NAME" >/dev/null ||
    { log "podman restore failed"; return 1; }
  rs=$(since "$t")
  continues || { log "podman: the restored workload does not continue"; return 1; }
  rm -f "$archive"
  log "$(printf '%s\t%s\t%s\t%s\t%s\t-\t-' "$1" "$2" "$ck" "$rs" "$bytes")"
}

CURRENT_GPU=
agent_round() {
  local t ck rs archive target
  sync; t=$(now)
  "$CLI" checkpoint "${AGENT[@]}" "$NAME" --json > "$WORK/ck.json" 2>"$WORK/cli.err" || { log "agent checkpoint failed: $(cat "$WORK/ck.json")"; return 1; }
  ck=$(since "$t")
  archive=$(field "$WORK/ck.json" '["result"]["archive"]')
  local bytes; bytes=$(stat -c %s "$archive")
  local phases; phases=$(field "$WORK/ck.json" '["phase_seconds"]')
  podman rm -f -t 0 "$NAME" >/dev/null
  if [ "$CURRENT_GPU" = "$GPU1" ]; then target=$GPU0; else target=$GPU1; fi
  sync; t=$(now)
  "$CLI" restore "${AGENT[@]}" "$archive" --name "$NAME" --target-gpus "$target" --json > "$WORK/rs.json" 2>"$WORK/cli.err" ||
    { log "agent restore failed: $(cat "$WORK/rs.json")"; return 1; }
  rs=$(since "$t")
  CURRENT_GPU=$target
  continues || { log "agent: the restored workload does not continue"; return 1; }
  rm -f "$archive"
  log "$(printf 'agent\t%s\t%s\t%s\t%s\t%s\t%s' "$1" "$ck" "$rs" "$bytes" "$phases" \
    "$(field "$WORK/rs.json" '["phase_seconds"]')")"
}

{
  echo "# node flow bench $(date -u +%FT%TZ): $MIB MiB incompressible memory, $RUNS rounds, label $LABEL"
  echo "# $(uname -r), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $(podman --version); $(criu --version | head -1)"
  echo "# commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)$(git -C "$SRC" diff --quiet 2>/dev/null || echo '+dirty')"
  echo "# binaries: $BUILD${BENCH_NOTE:+ ($BENCH_NOTE)}"
  printf 'side\tround\tcheckpoint_s\trestore_s\tarchive_bytes\tagent_checkpoint_phases\tagent_restore_phases\n'
} | tee -a "$RESULT"
start_workload || { log "the workload did not start"; exit 1; }
CURRENT_GPU=$GPU0
run_side() {
  case $1 in
    podman) podman_round podman "$2" zstd ;;
    podman-plain) podman_round podman-plain "$2" none ;;
    agent) agent_round "$2" ;;
  esac
}
SIDES=(podman podman-plain agent)
for round in $(seq "$RUNS"); do
  for i in 0 1 2; do run_side "${SIDES[$(((round - 1 + i) % 3))]}" "$round" || exit 1; done
done
python3 - "$RESULT" <<'PY' | tee -a "$RESULT"
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.startswith(("podman\t", "podman-plain\t", "agent\t"))]
med = lambda side, col: statistics.median(float(r[col]) for r in rows if r[0] == side)
for what, col in (("checkpoint", 2), ("restore", 3)):
    a = med("agent", col)
    for side in ("podman", "podman-plain"):
        if any(r[0] == side for r in rows):
            p = med(side, col)
            print(f"# median {what}: {side} {p:.2f} s, agent {a:.2f} s, agent - {side} {a - p:+.2f} s = {100 * (a - p) / p:+.1f}%")
PY
