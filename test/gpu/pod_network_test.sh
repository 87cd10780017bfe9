#!/usr/bin/env bash
# GPU containers in pods, as on Kubernetes: each pod has its own network and IPC namespaces (its sandbox, made as CNI
# makes it: node_test_lib.sh new_sandbox), the workload container joins them, and a restore goes into a NEW pod. The
# workload is an inference server over HTTP/1.1 on the GPU (test/gpu/inference_server.py: a Llama-shaped model,
# seeded random weights, greedy decoding whose KV cache stays on the GPU between requests); clients run in the pod's
# network namespace (nsenter), one of them holding its connection open across each checkpoint. Every answer is
# compared with an uninterrupted server's answers to the same requests.
#
# Cases (POD_TESTS picks; default all):
#   lock_probe       which network lock CRIU can use on this kernel (nftables / iptables tried on a scratch netns),
#                    printed for the record; the pods use `network-lock skip` (see docs/cuda.md, Pods and TCP)
#   refused          no TCP option: `gpuckpt checkpoint` through the agent of a server with an open client
#                    connection fails (CRIU: "Connected TCP socket"); the server keeps running, unlocked, and the
#                    open connection's next answer is right
#   leave_running    CRIU `tcp-established`: `podman container checkpoint --leave-running` with the connection
#                    open; the same connection's next answer is right
#   restore_same     CRIU `tcp-close`: checkpoint through the agent (the container stops); what the open connection
#                    sees is recorded (it must end promptly, not hang); restored into a new pod (own netns) on the
#                    same GPU; a new connection continues the stream exactly
#   other_gpu        (2 GPUs) the same from GPU 1, restored onto GPU 0 from the archive given the new GPU the way a
#                    runtime restoring a checkpoint image does (retarget_archive); nvidia-smi shows it on GPU 0
#   two_at_once      one archive restored twice at the same time into two new pods: both run, each in its own
#                    network namespace, both continue the stream exactly
# Without a GPU (or POD_MODEL=cpu-hash) the server's "model" is a SHA-256 chain: the network and CRIU path only.
# Needs root, podman, criu, busybox, unshare/nsenter, the node's gpuckpt (see node_test_lib.sh). Exit 77 when nothing passed.
#   POD_TEST_OUT  keep logs and archives here     PYTHON  the host python (default: /opt/torch/.venv/bin/python3,
#   else python3); in the containers it is bound read-only with its packages
set -uo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/test/gpu/gpu_test_lib.sh"
CASES=${POD_TESTS:-lock_probe refused leave_running restore_same other_gpu two_at_once}
PREFIX=gpuckpt-pod-$$
KEEP_OUT=${POD_TEST_OUT:-}
CLIENTS=()
stop_clients() { for p in "${CLIENTS[@]}"; do kill "$p" 2>/dev/null; done; }
NODE_CLEANUP=stop_clients
. "$SRC/test/gpu/node_test_lib.sh"

PY=${PYTHON:-}
[ -n "$PY" ] || { [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3; }
[ -n "$PY" ] || PY=$(command -v python3)
PY=$("$PY" -c 'import sys; print(sys.executable)') || skip "no python"   # the interpreter, not a wrapper (pyenv's shim)
MODEL=${POD_MODEL:-}
if [ -z "$MODEL" ]; then
  MODEL="cpu-hash"
  [ "$HAVE_GPU" = 1 ] && "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null && MODEL=llama
fi
N=8                 # tokens per request
REF_REQUESTS=80     # the uninterrupted run: more requests than any case makes
host_python_mounts "$PY" || skip "cannot ask $PY for its prefix"
GPU0=-; [ "$MODEL" = llama ] && GPU0=0   # the GPU the servers get (none for the CPU model)

python_image || skip "cannot build the image (busybox)"

# The CRIU options of a container: a config file named by the container's org.criu.config annotation (runc reads it
# at every checkpoint and restore instead of /etc/criu/runc.conf), rewritten per case. Pods use `network-lock skip`.
CRIU_CONF=$WORK/criu-pod.conf
# The pods' config file holds `network-lock`: a CRIU that crashes on it in swrk mode (4.0, 4.1.x) is replaced for
# this run by one that takes it, or the test skips saying why (it would otherwise time out in every checkpoint).
criu_prefer_config_network_lock "$WORK" || skip "$CRIU_PROBE_REASON"
criu_options() { { [ -f /etc/criu/runc.conf ] && grep -v -E '^(tcp-|network-lock)' /etc/criu/runc.conf; printf '%s\n' "$@"; } > "$CRIU_CONF"; }
criu_options "network-lock skip"

netns_of() { readlink "/proc/$(ctr_pid "$1")/ns/net"; }
serve() { # NAME POD GPU-INDEX|-: the server in POD
  local gpu=("${GPU_SAFE_ENV[@]}")
  [ "$3" != - ] && gpu+=(--device "nvidia.com/gpu=$3")
  local sandbox; read -ra sandbox <<< "$(sandbox_args "$2")"
  pm run -d --name "$1" "${sandbox[@]}" "${gpu[@]}" "${HOST_PY_MOUNTS[@]}" -v "$SRC/test/gpu:/srv:ro" -e HOME=/tmp \
    --annotation "org.criu.config=$CRIU_CONF" "$PY_IMAGE" "$PY" /srv/inference_server.py --model "$MODEL" \
    > "$WORK/$1.run" 2>&1 || { show "$WORK/$1.run"; return 1; }
}
in_netns() { local pid; pid=$(ctr_pid "$1"); shift; nsenter --net="/proc/$pid/ns/net" "$@"; }
client() { # NAME OUT REQUESTS: a new connection, REQUESTS requests
  in_netns "$1" "$PY" "$SRC/test/gpu/inference_client.py" run 127.0.0.1:8080 "$2" --requests "$3" --n "$N" 2>>"$WORK/client.err"
}
hold() { # NAME OUT REQUESTS TAG: a client holding its connection open; $WORK/TAG.{ready,go,fate}
  rm -f "$WORK/$4".{ready,go,fate}
  in_netns "$1" "$PY" "$SRC/test/gpu/inference_client.py" hold 127.0.0.1:8080 "$2" --requests "$3" --n "$N" \
    --ready "$WORK/$4.ready" --go "$WORK/$4.go" --result "$WORK/$4.fate" 2>>"$WORK/client.err" &
  CLIENTS+=($!)
  for _ in $(seq 1200); do [ -f "$WORK/$4.ready" ] && return 0; kill -0 $! 2>/dev/null || break; sleep 0.1; done
  return 1
}
fate() { # TAG: lets the holding client ask once more; what happened to its connection (it waits up to 40 s)
  touch "$WORK/$1.go"
  for _ in $(seq 400); do [ -s "$WORK/$1.fate" ] && { cat "$WORK/$1.fate"; return; }; sleep 0.1; done
  echo "no answer in 40 s"
}
# Every line of OUT is the reference's line for the same step, and the steps follow one another.
matches_reference() {
  local missing
  missing=$(grep -vxF -f "$WORK/reference.txt" "$1" | head -2)
  [ -z "$missing" ] || { echo "answers not in the uninterrupted run: $missing"; return 1; }
  awk -v n="$N" 'NR>1 && $1!=prev+n {print "step " prev " -> " $1; bad=1} {prev=$1} END {exit bad}' "$1"
}

# ---- the uninterrupted run ----------------------------------------------------------------------------------
reference() {
  [ -s "$WORK/reference.txt" ] && return 0
  new_sandbox "$PREFIX-ref" && serve "$PREFIX-ref-srv" "$PREFIX-ref" "$GPU0" || return 1
  client "$PREFIX-ref-srv" "$WORK/reference.txt" "$REF_REQUESTS" || { pm logs "$PREFIX-ref-srv" 2>&1 | tail -5; return 1; }
  pm rm -f -t 0 "$PREFIX-ref-srv" >/dev/null 2>&1
  echo "reference: $(wc -l < "$WORK/reference.txt") answers of $N tokens ($MODEL); first: $(head -1 "$WORK/reference.txt")"
}
# A server in a new pod with a client holding its connection after REQUESTS answers: NAME POD GPU TAG OUT
started_with_connection() {
  new_sandbox "$2" && serve "$1" "$2" "$3" || return 1
  rm -f "$5"
  hold "$1" "$5" 3 "$4" || { pm logs "$1" 2>&1 | tail -5; return 1; }
}

# ---- cases --------------------------------------------------------------------------------------------------
case_lock_probe() {
  local m img pid out=""
  unshare -n setsid sleep 300 </dev/null >/dev/null 2>&1 & pid=$!
  sleep 0.3
  pid=$(pgrep -P "$pid" -x sleep || echo "$pid")
  for m in nftables iptables; do
    img=$WORK/probe-$m; mkdir -p "$img"
    if timeout 60 criu dump -t "$pid" -D "$img" -o dump.log --leave-running --network-lock "$m" >/dev/null 2>&1; then
      out+="$m: locks a netns; "
    else
      out+="$m: $(grep -E 'Error' "$img/dump.log" | grep -v rlimit | tail -1 | cut -c1-140); "
    fi
  done
  kill "$pid" 2>/dev/null
  echo "== lock_probe: $(uname -r): $out"
}

case_refused() {
  reference || { record refused FAIL "the uninterrupted run"; return; }
  start_agent || { record refused FAIL "agent did not start"; return; }
  local name=$PREFIX-refused out=$WORK/refused.txt
  criu_options "network-lock skip"
  started_with_connection "$name" "$PREFIX-p-refused" "$GPU0" refused "$out" || { record refused FAIL "server or client did not start"; return; }
  if gk checkpoint "$name" > "$WORK/refused.ckpt.log" 2>&1; then record refused FAIL "checkpoint with an open TCP connection and no TCP option succeeded"; return; fi
  # what the user sees (the CLI's output) names CRIU's reason
  local why; why=$(grep -o "CRIU said: .*Connected TCP socket[^|]*" "$WORK/refused.ckpt.log" | head -1)
  [ -n "$why" ] || { show "$WORK/refused.ckpt.log"; criu_log "$name"; record refused FAIL "the failure does not say why (CRIU's 'Connected TCP socket')"; return; }
  [ "$(podman inspect -f '{{.State.Running}}' "$name")" = true ] || { record refused FAIL "the server is not running after the refused checkpoint"; return; }
  local f; f=$(fate refused)
  [ "$f" = answered ] || { record refused FAIL "the open connection after the refused checkpoint: $f"; return; }
  matches_reference "$out" || { record refused FAIL "answers differ from the uninterrupted run"; return; }
  record refused PASS "checkpoint refused, the CLI says: '$why'; server running, the open connection answered, $(wc -l < "$out") answers equal the uninterrupted run"
}

case_leave_running() {
  reference || { record leave_running FAIL "the uninterrupted run"; return; }
  local name=$PREFIX-live out=$WORK/live.txt a=$WORK/live.tar tck
  criu_options "network-lock skip" "tcp-established"
  started_with_connection "$name" "$PREFIX-p-live" "$GPU0" live "$out" || { record leave_running FAIL "server or client did not start"; return; }
  timed tck pm container checkpoint --leave-running --keep --export "$a" "$name" > "$WORK/live.ckpt.log" 2>&1 \
    || { show "$WORK/live.ckpt.log"; criu_log "$name"; record leave_running FAIL "podman checkpoint --leave-running"; return; }
  local f; f=$(fate live)
  [ "$f" = answered ] || { record leave_running FAIL "the open connection after the checkpoint: $f"; return; }
  client "$name" "$out" 3 || { record leave_running FAIL "a new connection after the checkpoint"; return; }
  matches_reference "$out" || { record leave_running FAIL "answers differ from the uninterrupted run"; return; }
  local tcp; tcp=$(entries "$a" 'checkpoint/tcp-stream-')
  [ "$tcp" -ge 1 ] || { record leave_running FAIL "no TCP stream image in the archive"; return; }
  record leave_running PASS "tcp-established, --leave-running ${tck}s ($tcp TCP stream image(s)); the open connection answered on, $(wc -l < "$out") answers equal the uninterrupted run"
  pm rm -f -t 0 "$name" >/dev/null 2>&1
}

# checkpoint_stopping NAME TAG: checkpoint through the agent (the container stops) with tcp-close; sets ARCHIVE, TCK,
# FATE (what the held connection saw) and FATE_S (how long that took)
checkpoint_stopping() {
  criu_options "network-lock skip" "tcp-close"
  timed TCK gk checkpoint "$1" > "$WORK/$2.ckpt.log" 2>&1 || { show "$WORK/$2.ckpt.log" "$WORK/agent.log"; criu_log "$1"; return 1; }
  ARCHIVE=$(ls -t "$WORK"/ck/*.tar* | head -1)
  timed FATE_S fate "$2" > "$WORK/$2.fate.txt"; FATE=$(cat "$WORK/$2.fate.txt")
  pm rm -f -t 0 "$1" >/dev/null 2>&1; wait_gone "$1"
}
restore_into() { # ARCHIVE OLD-POD NEW-POD NAME: a runtime's restore into a new pod
  new_sandbox "$3" && into_sandbox "$1" "$WORK/$4-$3.tar.zst" "$2" "$3" || return 1
  pm container restore --import "$WORK/$4-$3.tar.zst" --name "$4" > "$WORK/$4.rst.log" 2>&1 \
    || { show "$WORK/$4.rst.log"; criu_log "$4"; return 1; }
  rm -f "$WORK/$4-$3.tar.zst"
}

case_restore_same() {
  reference || { record restore_same FAIL "the uninterrupted run"; return; }
  start_agent || { record restore_same FAIL "agent did not start"; return; }
  local name=$PREFIX-same out=$WORK/same.txt ns0 ns1 trs gpu0 gpu1
  started_with_connection "$name" "$PREFIX-p-same" "$GPU0" same "$out" || { record restore_same FAIL "server or client did not start"; return; }
  ns0=$(netns_of "$name"); [ "$MODEL" = llama ] && gpu0=$(gpu_of_pid "$(ctr_pid "$name")")
  checkpoint_stopping "$name" same || { record restore_same FAIL "gpuckpt checkpoint"; return; }
  case $FATE in answered|timeout|"no answer"*) record restore_same FAIL "the open connection after a stopping checkpoint: $FATE (${FATE_S}s): it must end"; return ;; esac
  SAME_ARCHIVE=$ARCHIVE SAME_STEP=$(last_iter "$out")
  timed trs restore_into "$ARCHIVE" "$PREFIX-p-same" "$PREFIX-p-same2" "$name" || { record restore_same FAIL "podman restore into a new pod"; return; }
  ns1=$(netns_of "$name")
  [ "$ns0" != "$ns1" ] || { record restore_same FAIL "restored in the old network namespace $ns0"; return; }
  client "$name" "$out" 4 || { pm logs "$name" 2>&1 | tail -5; record restore_same FAIL "no answer from the restored server"; return; }
  [ "$MODEL" = llama ] && gpu1=$(gpu_of_pid "$(ctr_pid "$name")")
  [ "${gpu0:-}" = "${gpu1:-}" ] || { record restore_same FAIL "restored onto ${gpu1:-no GPU}, was ${gpu0:-none}"; return; }
  matches_reference "$out" || { record restore_same FAIL "answers differ from the uninterrupted run"; return; }
  record restore_same PASS "tcp-close: checkpoint via agent ${TCK}s, archive $(du -m "$ARCHIVE" | cut -f1) MB; the open connection: $FATE after ${FATE_S}s; restored into a new pod (netns $ns0 -> $ns1) ${trs}s; $(wc -l < "$out") answers equal the uninterrupted run${gpu1:+ (on $gpu1)}"
}

case_other_gpu() {
  [ "$MODEL" = llama ] || { record other_gpu SKIP "no GPU model here"; return; }
  [ "$NGPU" -ge 2 ] || { record other_gpu SKIP "needs 2 GPUs"; return; }
  reference || { record other_gpu FAIL "the uninterrupted run"; return; }
  start_agent || { record other_gpu FAIL "agent did not start"; return; }
  local name=$PREFIX-moved out=$WORK/moved.txt u0 u1 before after b=$WORK/moved-gpu0.tar.zst trs
  u0=$(gpu_uuid 0); u1=$(gpu_uuid 1)
  new_sandbox "$PREFIX-p-moved" && serve "$name" "$PREFIX-p-moved" 1 || { record other_gpu FAIL "server on GPU 1"; return; }
  hold "$name" "$out" 3 moved || { record other_gpu FAIL "client did not start"; return; }
  before=$(gpu_of_pid "$(ctr_pid "$name")")
  [ "$before" = "$u1" ] || { record other_gpu FAIL "the server runs on ${before:-no GPU}, not GPU 1"; return; }
  checkpoint_stopping "$name" moved || { record other_gpu FAIL "gpuckpt checkpoint"; return; }
  retarget_archive "$ARCHIVE" "$b" 1 0 "$u1" "$u0" || { record other_gpu FAIL "cannot give the archive GPU 0"; return; }
  timed trs restore_into "$b" "$PREFIX-p-moved" "$PREFIX-p-moved2" "$name" || { record other_gpu FAIL "podman restore into a new pod onto GPU 0"; return; }
  client "$name" "$out" 4 || { record other_gpu FAIL "no answer from the restored server"; return; }
  after=$(gpu_of_pid "$(ctr_pid "$name")")
  [ "$after" = "$u0" ] || { record other_gpu FAIL "restored onto ${after:-no GPU}, not GPU 0"; return; }
  matches_reference "$out" || { record other_gpu FAIL "answers differ from the uninterrupted run"; return; }
  record other_gpu PASS "GPU 1 -> GPU 0: checkpoint via agent ${TCK}s, the open connection: $FATE; restored into a new pod ${trs}s; nvidia-smi: on GPU 0; $(wc -l < "$out") answers equal the uninterrupted run"
}

case_two_at_once() {
  reference || { record two_at_once FAIL "the uninterrupted run"; return; }
  [ -f "${SAME_ARCHIVE:-}" ] || { record two_at_once SKIP "needs restore_same's archive"; return; }
  local i pids=() ns=() rc=0 t0=$EPOCHREALTIME took first=$((SAME_STEP + N))
  for i in 1 2; do restore_into "$SAME_ARCHIVE" "$PREFIX-p-same" "$PREFIX-p-twin$i" "$PREFIX-twin$i" & pids+=($!); done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
  [ "$rc" = 0 ] || { record two_at_once FAIL "a restore failed"; return; }
  for i in 1 2; do ns+=("$(netns_of "$PREFIX-twin$i")"); done
  [ "${ns[0]}" != "${ns[1]}" ] || { record two_at_once FAIL "both in one network namespace ${ns[0]}"; return; }
  for i in 1 2; do
    client "$PREFIX-twin$i" "$WORK/twin$i.new" 4 || { record two_at_once FAIL "twin $i does not answer"; return; }
    [ "$(head -1 "$WORK/twin$i.new" | cut -d' ' -f1)" = "$first" ] || { record two_at_once FAIL "twin $i answered step $(head -1 "$WORK/twin$i.new" | cut -d' ' -f1), expected $first"; return; }
    matches_reference "$WORK/twin$i.new" || { record two_at_once FAIL "twin $i's answers differ from the uninterrupted run"; return; }
  done
  record two_at_once PASS "one archive restored twice at once (${took}s), netns ${ns[0]} and ${ns[1]}; both continue from step $first, answers equal the uninterrupted run"
}

if [ "$HAVE_GPU" = 1 ]; then
  echo "GPU node: $(nvidia-smi -L | head -1); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
fi
echo "$(criu --version | head -1); podman $(podman --version | awk '{print $3}'); model $MODEL; python $PY"
for c in $CASES; do "case_$c"; done
summary "pod network test"
