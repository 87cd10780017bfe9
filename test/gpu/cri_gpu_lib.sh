# shellcheck shell=bash
# shellcheck disable=SC2034 # CRI_GPU_WHY, PODRES_PID, NRI_PID, ...: set for the sourcing test (its skips, cleanup)
# Sourced by the CRI GPU tests (cri_gpu_test.sh: containerd 2.1; crio_gpu_test.sh: CRI-O): what both do the same
# way, from installing the carry into a private prefix to the checks on a restored CUDA counter. The test that
# sources it owns the runtime: it starts it, defines `cri` (cri-tool against its socket) and the three functions
# below, and then calls cri_gpu_run_case for each case.
#   runtime_plan_path RID          where gpuckpt's hook must put the restore plan of restored container RID
#                                  (the runtime's CRIU images dir)
#   runtime_restore_log RID DEST   copies CRIU's restore.log of RID to DEST (absent: the plan check fails)
#   runtime_log                    the runtime's log file (shown on failures)
# Variables the test sets before sourcing: SRC (the source tree), CARRY (the carry directory), WORK (this run's
# work directory), P (the prefix under WORK). Set here: CLI AGENT HOOK NRI CRI_TOOL PODRES (after
# cri_gpu_install), NGPU, LIBCUDA DRIVER_ROOT (cri_gpu_build_counter), REGISTRY BASE PAUSE_IMAGE
# (cri_gpu_push_images), CRI_GPU_CRIU_ROOT (where the carried CRIU is unpacked), STATE CK KDIR TOKEN_FILE URL, and per case SRC_GPU DST U_SRC U_DST N_CK TCK MB THAW.
# CRI_GPU_RESTORES lists what each case restores from: `path` (the kubelet-style archive as CreateContainer's
# image) and `image` (the checkpoint image `gpuckpt image` loads). COUNTER_MIB: the counter's GPU memory.
# CRI_GPU_STORE (inline, node or a path; unset: the plugin's default): the GPU memory store, in the plugin's settings
# file beside it and the agent's gpu_memory.store. CRI_GPU_TSV: one row per restore (the columns of
# cri_gpu_tsv_header: the CRI checkpoint and restore beside CRIU's own time, the kubelet archive beside the CPU
# pages in it), medians by cri_gpu_medians. CRI_GPU_HOST_ROOT (default /): the host root gpuckpt-nri and the agent
# read the GPUs from (a simulated GPU node's fixture tree).

CRI_GPU_RESTORES=${CRI_GPU_RESTORES:-path image}
CRI_GPU_HOST_ROOT=${CRI_GPU_HOST_ROOT:-/}
MIB=${COUNTER_MIB:-512}
STATE=$WORK/state CK=$WORK/checkpoints KDIR=$WORK/kubelet/checkpoints TOKEN_FILE=$WORK/token
mkdir -p "$STATE" "$CK" "$KDIR" "$WORK/hooks.d" "$WORK/pod-resources"
# Functions that can fail for a reason the test reports as a skip set CRI_GPU_WHY and return 1 (they set
# variables and start processes, so they are not called in a command substitution).
CRI_GPU_WHY=''

# ---- the carry -> $P: nothing outside $WORK is written --------------------------------------------------------
# cri_gpu_install: the .debs (runc, docker-registry, busybox, and what the runtime needs), gpuckpt's binaries
# (cri-bin.tar.xz) and the libraries this system lacks (lib-extra.tar.xz), wrappers for all of them in $P/bin
# (the hook runs with the spec's empty environment), a runc without process.rlimits, the carry's CRIU, and
# gpuckpt's CRIU plugin with the libraries beside it in $WORK/criu-plugins (its RPATH is $ORIGIN; CRIU loads only
# *.so names). Prints what it did to stdout; returns 1 on a failed unpack.
cri_gpu_install() {
  local d b
  mkdir -p "$P/root" "$P/lib" "$P/bin" "$P/libexec" "$P/lib-extra" "$WORK/criu-plugins"
  for d in "$CARRY"/debs/*.deb; do dpkg-deb -x "$d" "$P/root" || return 1; done
  tar -C "$P/libexec" -xJf "$CARRY/cri-bin.tar.xz" || return 1
  tar -C "$P/lib-extra" -xJf "$CARRY/lib-extra.tar.xz" || return 1
  link_missing_libraries "$P/lib" "$P"/lib-extra/*.so* "$P"/root/usr/lib/x86_64-linux-gnu/*.so.* "$P"/root/lib/x86_64-linux-gnu/*.so.*
  for b in "$P"/libexec/*; do cri_gpu_wrap "$b"; done
  # runc without process.rlimits: root on the GPU machine lacks CAP_SYS_RESOURCE (test/gpu/device_runtime.sh)
  cat > "$P/bin/runc" <<WRAP
#!/bin/sh
bundle=""; prev=""
for a in "\$@"; do
  case "\$prev" in --bundle|-b) bundle=\$a ;; esac
  case "\$a" in --bundle=*) bundle=\${a#--bundle=} ;; esac
  prev=\$a
done
if [ -n "\$bundle" ] && [ -f "\$bundle/config.json" ]; then
  python3 -c 'import json, os, sys
p = sys.argv[1]; s = json.load(open(p))
if s.get("process", {}).pop("rlimits", None) is not None:
    json.dump(s, open(p + ".tmp", "w")); os.replace(p + ".tmp", p)' "\$bundle/config.json"
fi
# what each runtime asked of runc, from which cgroup, for which container cgroup (the logs: runc-calls.log)
{ echo "runc \$*"; echo "  own cgroup: \$(tr '\\n' ' ' < /proc/self/cgroup)"
  [ -n "\$bundle" ] && echo "  spec: \$(grep -o '"cgroupsPath": *"[^"]*"' "\$bundle/config.json" 2>/dev/null)"
} >> $WORK/runc-calls.log 2>&1
LD_LIBRARY_PATH=$P/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec $P/root/usr/sbin/runc "\$@"
WRAP
  # CRIU: the carried bundle, unpacked under $P by its own name (criu: trixie's 4.1.1, criu-sid: sid's 4.2.1; runc finds
  # `criu` on PATH)
  CRI_GPU_CRIU_ROOT=$P/$(tar -tzf "$CARRY/criu.tar.gz" | head -1 | cut -d/ -f1)
  printf '#!/bin/sh\nGPUCKPT_CRIU_ROOT=%s exec %s "$@"\n' "$CRI_GPU_CRIU_ROOT" "$CARRY/bin/criu" > "$P/bin/criu"
  ln -sf "$P/root/usr/bin/docker-registry" "$P/bin/docker-registry"
  ln -sf "$P/root/bin/busybox" "$P/bin/busybox"
  chmod 755 "$P/bin/runc" "$P/bin/criu"
  cp "$CARRY"/lib/* "$WORK/criu-plugins/"
  [ -z "${CRI_GPU_STORE:-}" ] || echo "GPUCKPT_GPU_STORE=$CRI_GPU_STORE" > "$WORK/criu-plugins/gpuckpt_plugin.env"
}
cri_gpu_wrap() { # BINARY: $P/bin/NAME runs it with the carry's libraries
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$P/lib" "$1" > "$P/bin/$(basename "$1")"
  chmod 755 "$P/bin/$(basename "$1")"
}
# cri_gpu_check_install [BINARY...]: sets CLI AGENT HOOK NRI CRI_TOOL PODRES; fails when one is missing or when
# they (or the BINARYs) link a library neither the system nor the carry has
cri_gpu_check_install() {
  local b missing
  CLI=$P/bin/gpuckpt AGENT=$P/bin/gpuckpt-agent HOOK=$P/bin/gpuckpt-oci-hook NRI=$P/bin/gpuckpt-nri
  CRI_TOOL=$P/bin/cri-tool PODRES=$P/bin/podresources-server
  for b in "$CLI" "$AGENT" "$HOOK" "$NRI" "$CRI_TOOL" "$PODRES"; do
    [ -x "$P/libexec/$(basename "$b")" ] || { CRI_GPU_WHY="$(basename "$b") not in $CARRY/cri-bin.tar.xz"; return 1; }
  done
  missing=$(for b in "$P"/libexec/* "$@"; do LD_LIBRARY_PATH=$P/lib ldd "$b" | awk '/not found/{print $1}'; done | sort -u | tr '\n' ' ')
  [ -z "$missing" ] || { CRI_GPU_WHY="libraries neither on this system nor in the carry: $missing"; return 1; }
}

# ---- /etc/criu/runc.conf for the run, put back after it -------------------------------------------------------
# cri_gpu_criu_conf LINES: runc hands CRIU this file (runc < 1.2 on cgroup v2 needs manage-cgroups=ignore; a node
# whose runtime passes CRIU no CRIU_LIBS_DIR finds gpuckpt's plugin through `libdir`, as the chart writes it)
cri_gpu_criu_conf() {
  [ -f /etc/criu/runc.conf ] && cp -p /etc/criu/runc.conf "$WORK/runc.conf.orig"
  mkdir -p /etc/criu && printf '%s\n' "$1" > /etc/criu/runc.conf
  CRI_GPU_CRIU_CONF_SET=1
}
cri_gpu_criu_conf_restore() {
  [ -n "${CRI_GPU_CRIU_CONF_SET:-}" ] || return 0
  if [ -f "$WORK/runc.conf.orig" ]; then cp -p "$WORK/runc.conf.orig" /etc/criu/runc.conf; else rm -f /etc/criu/runc.conf; fi
  CRI_GPU_CRIU_CONF_SET=''
}

# cri_gpu_cleanup STOP-RUNTIME: what both tests' exit traps do first: their logs saved (the test's save_logs), the
# agent, gpuckpt-nri, the PodResources server and the registry stopped, the runtime stopped, runc.conf put back
cri_gpu_cleanup() {
  local p
  save_logs
  sandbox_stop_agent
  for p in "$NRI_PID" "$PODRES_PID" "$REGISTRY_PID"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  "$1"
  cri_gpu_criu_conf_restore
}

# ---- GPUs -------------------------------------------------------------------------------------------------------
cri_gpu_count() { # sets NGPU (0 without a GPU, nvidia-smi or nvcc)
  NGPU=0
  if [ -e /dev/nvidia0 ] && command -v nvidia-smi >/dev/null && command -v nvcc >/dev/null; then
    NGPU=$(nvidia-smi -L | grep -c '^GPU ')
  fi
}
gpu_uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1"; }
gpu_of_pid() { nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', *' -v p="$1" '$1 == p {print $2; exit}'; }
driver_libcuda() { ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/{print $NF; exit}'; }
timed() { # VAR cmd...: runs cmd, stores its wall time in seconds in VAR
  local var=$1 t0=$EPOCHREALTIME rc; shift
  "$@"; rc=$?
  printf -v "$var" '%s' "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')"
  return $rc
}
gpu_nodes() { local f; for f in "${1:-}/dev"/nvidia[0-9]*; do [ -c "$f" ] && printf '%s ' "${f##*/}"; done; }
# The host's GPU nodes a process in PID's cgroup may open: what the container's device cgroup allows (a GPU node
# in a container's /dev alone grants nothing, and libcuda, root in the container, may make more)
usable_gpus() { # PID
  local cg n
  cg=$(awk -F: '$1 == "0" && $2 == "" {print $3}' "/proc/$1/cgroup")
  [ -n "$cg" ] || { echo "?"; return; }
  for n in $(gpu_nodes); do
    ( echo "$BASHPID" > "/sys/fs/cgroup$cg/cgroup.procs" && : < "/dev/$n" ) 2>/dev/null && printf '%s ' "$n"
  done
}
show() { for f in "$@"; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done; return 0; }

# ---- the images: the counter's (busybox + gpu_counter + its libraries; the driver's files are bound in) and the
# ---- pod sandbox's, pushed to a registry on 127.0.0.1 (the machine has no other) ------------------------------
cri_gpu_build_counter() { # sets LIBCUDA DRIVER_ROOT; builds $WORK/gpu_counter and the containers' /etc/hosts
  printf '127.0.0.1 localhost\n' > "$WORK/hosts"
  LIBCUDA=$(driver_libcuda)
  DRIVER_ROOT=$(findmnt -n -o TARGET --target "$(dirname "$LIBCUDA")")
  nvcc -O2 -o "$WORK/gpu_counter" "$SRC/test/gpu/gpu_counter.cu" > "$WORK/nvcc.log" 2>&1 ||
    { cat "$WORK/nvcc.log"; CRI_GPU_WHY="nvcc cannot build test/gpu/gpu_counter.cu"; return 1; }
}
make_rootfs() { # DIR [with-counter]
  local root=$1 lib app
  mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc,out,usr/lib64,usr/lib/x86_64-linux-gnu}
  cp "$P/root/bin/busybox" "$root/bin/busybox"
  for app in sh cat ls sleep env stat head wc; do ln -sf busybox "$root/bin/$app"; done
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  [ -n "${2:-}" ] || return 0
  cp "$WORK/gpu_counter" "$root/bin/gpu_counter"
  for lib in $(ldd "$WORK/gpu_counter" "$LIBCUDA" | awk '/=> \// && $1 !~ /^libcuda/ {print $3}' | sort -u); do
    [ -e "$root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$root/usr/lib64/"
}
# cri_gpu_push_images pause-only|all: starts the registry (sets REGISTRY REGISTRY_PID), pushes the pause image
# (PAUSE_IMAGE) and with `all` the counter's (BASE; needs cri_gpu_build_counter: else cri_gpu_push_counter later)
cri_gpu_push_images() {
  ctrd_start_registry "$WORK/registry" || { CRI_GPU_WHY="docker-registry did not start"; return 1; }
  BASE=$REGISTRY/gpuckpt-gpu-counter:latest PAUSE_IMAGE=$REGISTRY/gpuckpt-pause:latest
  make_rootfs "$WORK/rootfs-pause"
  python3 "$SRC/test/gpu/push_oci_image.py" "$REGISTRY" "${PAUSE_IMAGE#*/}" "$WORK/rootfs-pause" /bin/sleep 2147483647 >/dev/null ||
    { CRI_GPU_WHY="cannot push the pause image to $REGISTRY"; return 1; }
  rm -rf "$WORK/rootfs-pause"
  [ "$1" != pause-only ] || return 0
  cri_gpu_push_counter
}
cri_gpu_push_counter() {
  make_rootfs "$WORK/rootfs-counter" with-counter
  python3 "$SRC/test/gpu/push_oci_image.py" "$REGISTRY" "${BASE#*/}" "$WORK/rootfs-counter" /bin/gpu_counter >/dev/null ||
    { CRI_GPU_WHY="cannot push the counter image to $REGISTRY"; return 1; }
  rm -rf "$WORK/rootfs-counter"
}

# ---- the kubelet's PodResources server, gpuckpt-nri, the agent ------------------------------------------------
# cri_gpu_start_podres: every pod of every case with the GPU the case gives it (GPU 1 only where there are two)
cri_gpu_start_podres() {
  local u0 u1=''
  u0=$(gpu_uuid 0)
  [ "$NGPU" -ge 2 ] && u1=$(gpu_uuid 1)
  python3 - "$WORK/pod-resources.json" "$u0" "$u1" <<'PY'
import json, sys
u0, u1 = sys.argv[2], sys.argv[3]
gpus = {"gpuckpt-cri-moved-src": u1, "gpuckpt-cri-moved-path": u0, "gpuckpt-cri-moved-image": u0,
        "gpuckpt-cri-unmoved-src": u0, "gpuckpt-cri-unmoved-path": u0, "gpuckpt-cri-unmoved-image": u0}
pods = [{"name": n, "namespace": "default", "containers": [{"name": "counter",
         "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [u]}]}]} for n, u in gpus.items() if u]
json.dump({"pods": pods}, open(sys.argv[1], "w"))
PY
  "$PODRES" "$WORK/pod-resources/kubelet.sock" "$WORK/pod-resources.json" > "$WORK/podres.log" 2>&1 &
  PODRES_PID=$!
  for _ in $(seq 100); do grep -qx listening "$WORK/podres.log" && break; sleep 0.1; done
  grep -qx listening "$WORK/podres.log" || { show "$WORK/podres.log"; return 1; }
}
# cri_gpu_start_nri NRI_SOCKET RUNTIME_NAME [POD_RESOURCES_SOCKET]: gpuckpt-nri as the chart starts it (--hook),
# until it registered with RUNTIME_NAME (a runtime's NRI socket can refuse connections for a moment after its CRI
# socket answers: gpuckpt-nri retries by itself); the kubelet's PodResources socket defaults to the simulated one's
# (CRI_GPU_NRI_ARGS: more of its arguments, e.g. --cdi-spec-dir)
cri_gpu_start_nri() {
  "$NRI" --socket "$1" --state-dir "$STATE" --host-root "$CRI_GPU_HOST_ROOT" --hook "$HOOK" \
    --pod-resources-socket "${3:-$WORK/pod-resources/kubelet.sock}" ${CRI_GPU_NRI_ARGS[@]+"${CRI_GPU_NRI_ARGS[@]}"} \
    --once > "$WORK/nri.log" 2>&1 &
  NRI_PID=$!
  for _ in $(seq 150); do grep -q "registered with $2" "$WORK/nri.log" && break; sleep 0.1; done
  grep -q "registered with $2" "$WORK/nri.log" || { show "$WORK/nri.log"; return 1; }
}
# cri_gpu_start_agent CRI_ENDPOINT: the agent with its kubelet-dir watcher (sets AGENT_PID URL)
cri_gpu_start_agent() {
  local gpu_memory=''
  [ -z "${CRI_GPU_STORE:-}" ] || gpu_memory="gpu_memory: {store: $CRI_GPU_STORE}"
  head -c 32 /dev/urandom | base64 > "$TOKEN_FILE"; chmod 600 "$TOKEN_FILE"
  cat > "$WORK/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 0}
auth: {token_file: $TOKEN_FILE}
state_dir: $STATE
checkpoints: {dir: $CK, kubelet_dir: $KDIR, watch_interval_seconds: 1, runtime_timeout_seconds: 300}
host_root: $CRI_GPU_HOST_ROOT
hooks_dir: $WORK/hooks.d
criu_plugin_dir: $WORK/criu-plugins
runtime: {kind: cri, cri: {endpoint: $1}}
$gpu_memory
YAML
  sandbox_start_agent "$AGENT"
}

# ---- one case: the source pod on GPU SRC, checkpointed through CRI, restored onto GPU DST -----------------------
gpu_args() { # GPU OUTDIR: what the device plugin and kubelet give a container for GPU N, plus the test's mounts
  local a=(--device "/dev/nvidia$1:/dev/nvidia$1" --device /dev/nvidiactl:/dev/nvidiactl --device /dev/nvidia-uvm:/dev/nvidia-uvm)
  [ -e /dev/nvidia-uvm-tools ] && a+=(--device /dev/nvidia-uvm-tools:/dev/nvidia-uvm-tools)
  a+=(--env "NVIDIA_VISIBLE_DEVICES=$1" --env "LD_LIBRARY_PATH=$(dirname "$LIBCUDA")" --mount "$DRIVER_ROOT:$DRIVER_ROOT"
      --mount "$WORK/hosts:/etc/hosts" --mount "$2:/out")
  printf '%s\n' "${a[@]}"
}
COUNTER=(-- /bin/gpu_counter "$MIB" /out/count.txt --sleep-ms 20)

# restore_from CASE FROM IMAGE [--user-image REF]: creates and starts the restore pod and records the result
restore_from() {
  local case=$1 from=$2 image=$3 pod rid rpid out=$WORK/out-$1-$2 trs first after nodes usable rdev rcg plan_path plan_id args
  shift 3
  mkdir -p "$out"
  pod=$(cri run-pod "gpuckpt-cri-$case-$from") || { record "$case-$from" FAIL "RunPodSandbox"; return; }
  mapfile -t args < <(gpu_args "$DST" "$out")
  rid=$(cri create "gpuckpt-cri-$case-$from" "$pod" counter "$image" "$@" "${args[@]}" "${COUNTER[@]}" 2>&1) ||
    { show "$(runtime_log)" "$WORK/nri.log"; record "$case-$from" FAIL "CreateContainer from $image: $rid"; return; }
  timed trs cri start "$rid" 2> "$WORK/start.err" ||
    { show "$WORK/start.err" "$(runtime_log)" "$STATE/hook.log"; record "$case-$from" FAIL "StartContainer (restore): $(tail -1 "$WORK/start.err")"; return; }
  rpid=$(cri pid "$rid")
  wait_iter "$out/count.txt" $((N_CK + 30)) 120 ||
    { record "$case-$from" FAIL "the restored counter does not run (last iteration: $(last_iter "$out/count.txt"))"; return; }
  after=$(gpu_of_pid "$rpid")
  echo "$case-$from: restored pid $rpid in cgroup $(awk -F: '$1 == "0" {print $3}' "/proc/$rpid/cgroup"); nvidia-smi compute apps: $(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr '\n' ' ')"
  first=$(head -n 1 "$out/count.txt" | cut -d' ' -f1)
  nodes=$(gpu_nodes "/proc/$rpid/root") usable=$(usable_gpus "$rpid")
  rdev=$(stat -c %t:%T "/proc/$rpid/root/dev/nvidia$DST" 2>/dev/null)
  rcg=$(awk -F: '$1 == "0" {print $3}' "/proc/$rpid/cgroup")
  runtime_restore_log "$rid" "$out/restore.log"
  [ -z "${CRI_GPU_TSV:-}" ] ||
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$case" "$from" "$TCK" "$(criu_log_seconds "$WORK/out-$case-src/dump.log")" \
      "$trs" "$(criu_log_seconds "$out/restore.log")" "$ARCHIVE_MIB" "$PAGES_MIB" "$(awk -v a="$ARCHIVE_MIB" -v p="$PAGES_MIB" 'BEGIN {printf "%.2f", a - p}')" \
      "$(grep -o '[0-9]* MiB written' "$WORK/out-$case-src/dump.log" 2>/dev/null | tail -1 | cut -d' ' -f1)" >> "$CRI_GPU_TSV"
  cri stop "$rid" >/dev/null; cri stop-pod "$pod" >/dev/null
  [ "$after" = "$U_DST" ] || { record "$case-$from" FAIL "restored onto ${after:-no GPU}, not GPU $DST ($U_DST); container's GPU nodes: $nodes"; return; }
  [ "$rdev" = "$(stat -c %t:%T "/dev/nvidia$DST")" ] ||
    { record "$case-$from" FAIL "the restored container's /dev/nvidia$DST is '${rdev:-absent}', not the host's $(stat -c %t:%T "/dev/nvidia$DST")"; return; }
  # the new container's cgroup (both runtimes name it by the container's ID), never the source's or the caller's
  case "$rcg" in
    *"$rid"*) ;;
    *) record "$case-$from" FAIL "the restored process is in cgroup $rcg, not the new container $rid's (runc < 1.2 on cgroup v2 does not tell CRIU the new container's cgroup, runc 3438ef30b: CRIU then restores into the source's, with the source's device filter and limits; manage-cgroups=ignore in /etc/criu/runc.conf keeps it in the new one)"; return ;;
  esac
  if [ "$SRC_USABLE" = "nvidia$SRC_GPU " ]; then
    [ "$usable" = "nvidia$DST " ] ||
      { record "$case-$from" FAIL "the restored container's device cgroup ($rcg) lets it open the host's '$usable', expected nvidia$DST only"; return; }
  else
    DEVCG="device cgroup not enforced on this machine: the source could open '$SRC_USABLE', the restored '$usable'"
  fi
  [ "$first" -gt "$N_CK" ] || { record "$case-$from" FAIL "the restored counter started at $first, not after $N_CK (reached before the checkpoint)"; return; }
  check_counter "$case-$from" "$out/count.txt" || return
  if [ "$SRC_GPU" != "$DST" ]; then
    plan_path=$(runtime_plan_path "$rid")
    plan_id=$(sed -n "s#.*restore plan \(rp-[0-9a-f]*\) placed in $plan_path.*#\1#p" "$STATE/hook.log" 2>/dev/null | tail -1)
    [ -n "$plan_id" ] || { show "$STATE/hook.log"; record "$case-$from" FAIL "the hook placed no restore plan in $plan_path"; return; }
    # plans are single use: the hook removes the plan from the state dir once placed; gpuckpt-nri names its GPUs
    grep -qF "plan $plan_id ($U_SRC -> $U_DST)" "$WORK/nri.log" ||
      { record "$case-$from" FAIL "restore plan $plan_id is not GPU $SRC_GPU -> $DST: $(grep -F "$plan_id" "$WORK/nri.log")"; return; }
    # and the CRIU plugin restored by it (CRIU's restore log)
    { grep -q "GPU mapping from the restore plan" "$out/restore.log" && grep -qF "cuda: GPU $U_SRC -> $U_DST" "$out/restore.log"; } ||
      { record "$case-$from" FAIL "the CRIU plugin did not restore by plan $plan_id ($out/restore.log)"; return; }
  fi
  record "$case-$from" PASS "GPU $SRC_GPU -> $DST: checkpoint ${TCK}s (${THAW:-the plugin thawed nothing}; the source ran on), archive ${MB} MB, restore (StartContainer) ${trs}s; nvidia-smi: on GPU $DST; /dev: $nodes(the source's: $SRC_NODES); ${DEVCG:-its device cgroup opens only $usable}; continued from the checkpoint (past $N_CK) at $first .. $(last_iter "$out/count.txt"), bit-identical${plan_id:+; plan $plan_id placed in $(dirname "$plan_path")}"
}
check_counter() { # CASE FILE: FILE equals an uninterrupted run up to its last iteration
  counter_reference "$MIB" "$(last_iter "$2")" "$2.ref"
  same_as_reference "$2" "$2.ref" || { record "$1" FAIL "state differs from the uninterrupted run"; return 1; }
}

# MiB of CRIU's page images (pages-N.img: the process's memory CRIU dumped) in a checkpoint archive
cpu_pages_mib() { tar -tvf "$1" | awk '$6 ~ /(^|\/)pages-[0-9]+\.img$/ {s += $3} END {printf "%.2f", s / 1048576}'; }
# CRIU's own seconds in its log: the last "(seconds)" stamp ("-" without a log)
criu_log_seconds() { [ -s "$1" ] && awk -F'[()]' '/^\([ 0-9.]+\)/ {t=$2} END {printf "%.2f", t + 0}' "$1" || echo -; }
cri_gpu_tsv_header() { printf 'case\tfrom\tcri_checkpoint_s\tcriu_dump_s\tcri_restore_s\tcriu_restore_s\tarchive_mib\tcpu_pages_mib\tarchive_over_pages_mib\tgpu_written_mib\n'; }
# cri_gpu_medians TSV: per restore source (from), the median of each number column over the cases, and the ratios
# to CRIU's time (checkpoint, restore)
cri_gpu_medians() {
  local from col vals
  printf 'from\truns\tcri_checkpoint_s\tcriu_dump_s\tckpt_x_criu\tcri_restore_s\tcriu_restore_s\trst_x_criu\tarchive_mib\tcpu_pages_mib\tarchive_over_pages_mib\tgpu_written_mib\n'
  for from in $(awk -F'\t' 'NR > 1 && !seen[$2]++ {print $2}' "$1"); do
    vals=()
    for col in 3 4 5 6 7 8 9 10; do
      vals+=("$(awk -F'\t' -v f="$from" -v c="$col" 'NR > 1 && $2 == f {print $c}' "$1" | grep -E '^[0-9.]+$' | sort -n |
        awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.2f\n", (v[NR/2] + v[NR/2+1]) / 2}')")
    done
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$from" "$(awk -F'\t' -v f="$from" 'NR > 1 && $2 == f' "$1" | wc -l)" \
      "${vals[0]}" "${vals[1]}" "$(awk -v a="${vals[0]}" -v b="${vals[1]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')" \
      "${vals[2]}" "${vals[3]}" "$(awk -v a="${vals[2]}" -v b="${vals[3]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')" \
      "${vals[4]}" "${vals[5]}" "${vals[6]}" "${vals[7]}"
  done
}

fail_all() { local f; for f in $CRI_GPU_RESTORES; do record "$case-$f" FAIL "$1"; done; }   # in cri_gpu_run_case
# cri_gpu_run_case CASE SRC_GPU DST_GPU BASE_IMAGE_ID: the source container from BASE (ImageStatus id BASE_IMAGE_ID,
# as kubelet sends it), a CRI checkpoint into the kubelet's dir, then a restore from each of CRI_GPU_RESTORES
cri_gpu_run_case() {
  local case=$1 pod cid pid before archive ck_image ck_id out=$WORK/out-$1-src args at
  SRC_GPU=$2 DST=$3 U_SRC=$(gpu_uuid "$2") U_DST=$(gpu_uuid "$3")
  mkdir -p "$out"
  pod=$(cri run-pod "gpuckpt-cri-$case-src") || { fail_all "RunPodSandbox"; return; }
  mapfile -t args < <(gpu_args "$SRC_GPU" "$out")
  cid=$(cri create "gpuckpt-cri-$case-src" "$pod" counter "$4" --user-image "$BASE" "${args[@]}" "${COUNTER[@]}" 2>&1) ||
    { fail_all "CreateContainer: $cid"; return; }
  cri start "$cid" || { fail_all "StartContainer (source)"; return; }
  pid=$(cri pid "$cid")
  wait_iter "$out/count.txt" 30 120 || { show "$(runtime_log)"; fail_all "the source counter does not run"; return; }
  [ -f "$STATE/containers/$cid.json" ] || { show "$WORK/nri.log"; fail_all "gpuckpt-nri did not record $cid"; return; }
  before=$(gpu_of_pid "$pid")
  SRC_NODES=$(gpu_nodes "/proc/$pid/root") SRC_USABLE=$(usable_gpus "$pid") DEVCG=''
  echo "source on GPU $SRC_GPU: /dev has $SRC_NODES; its device cgroup lets it open the host's $SRC_USABLE"
  [ "$before" = "$U_SRC" ] || { fail_all "the source runs on ${before:-no GPU}, not GPU $SRC_GPU"; return; }
  archive=$KDIR/checkpoint-gpuckpt-cri-$case-src_default-counter-$(date -u +%Y-%m-%dT%H:%M:%SZ).tar
  # the iteration before the checkpoint: a restored counter that continues starts past it (a restart: at 1)
  N_CK=$(last_iter "$out/count.txt")
  timed TCK cri checkpoint "$cid" "$archive" || { show "$(runtime_log)"; fail_all "CRI CheckpointContainer"; return; }
  # CRIU's dump log is in the archive (the runtime makes its checkpoint dir CRIU's work dir): kept with the logs
  tar -xOf "$archive" dump.log > "$out/dump.log" 2>/dev/null
  THAW=$(grep -o "thawed .* for the driver's lock" "$out/dump.log" | head -1)
  # The source runs on after a CRI checkpoint (kubelet's semantics): the runtime froze it for the checkpoint and
  # the plugin thawed and froze it again for the driver's lock; neither frozen nor locked may remain.
  at=$(last_iter "$out/count.txt")
  wait_iter "$out/count.txt" $((at + 20)) 60 ||
    { fail_all "the source did not run on after the checkpoint (stuck at iteration $(last_iter "$out/count.txt"))"; return; }
  # stopped here; the restores write their own files (each restore pod mounts its own /out)
  cri stop "$cid" >/dev/null; cri stop-pod "$pod" >/dev/null
  for _ in $(seq 100); do grep -q "annotated kubelet archive $archive" "$WORK/agent.log" && break; sleep 0.1; done
  grep -q "annotated kubelet archive $archive" "$WORK/agent.log" || { show "$WORK/agent.log"; fail_all "the agent's watcher did not annotate $archive"; return; }
  MB=$(du -m "$archive" | cut -f1)
  ARCHIVE_MIB=$(stat -c %s "$archive" | awk '{printf "%.2f", $1 / 1048576}') PAGES_MIB=$(cpu_pages_mib "$archive")
  echo "$case: kubelet archive $ARCHIVE_MIB MiB, CPU pages in it $PAGES_MIB MiB; GPU memory: $(tar -tf "$archive" | grep -c 'gpuckpt-gpumem-.*img$') image(s), $(tar -tf "$archive" | grep -c 'gpuckpt-gpumem-.*manifest') manifest(s)"
  case " $CRI_GPU_RESTORES " in *" path "*) restore_from "$case" path "$archive" --user-image "$archive" ;; esac   # as the kubelet sends a pod's image
  case " $CRI_GPU_RESTORES " in *" image "*) ;; *) return ;; esac
  cp "$archive" "$CK/"
  "$CLI" image "$(basename "$archive")" --tag "gpuckpt-cri-$case" --agent "$URL" --token-file "$TOKEN_FILE" > "$WORK/image.txt" 2>&1 ||
    { show "$WORK/image.txt" "$WORK/agent.log"; record "$case-image" FAIL "gpuckpt image"; return; }
  ck_image=$(sed -n 's/^  image: *//p' "$WORK/image.txt")
  ck_id=$(cri image-id "$ck_image") || { record "$case-image" FAIL "CRI ImageStatus $ck_image"; return; }
  restore_from "$case" image "$ck_id" --user-image "$ck_image"
}
# cri_gpu_run_cases CASES BASE_IMAGE_ID: moved (GPU 1 -> 0, needs 2 GPUs) and unmoved (GPU 0 -> 0)
cri_gpu_run_cases() {
  local c
  [ -z "${CRI_GPU_TSV:-}" ] || [ "$(head -1 "$CRI_GPU_TSV" 2>/dev/null)" = "$(cri_gpu_tsv_header)" ] || cri_gpu_tsv_header > "$CRI_GPU_TSV"
  for c in $1; do
    case $c in
      moved) if [ "$NGPU" -ge 2 ]; then cri_gpu_run_case moved 1 0 "$2"; else record moved SKIP "needs 2 GPUs"; fi ;;
      unmoved|unmoved[0-9]*) cri_gpu_run_case "$c" 0 0 "$2" ;;   # unmoved1 unmoved2 ...: repetitions
      *) record "$c" FAIL "unknown case (moved, unmoved, unmovedN)" ;;
    esac
  done
  [ -z "${CRI_GPU_TSV:-}" ] || { cat "$CRI_GPU_TSV"; cri_gpu_medians "$CRI_GPU_TSV" | tee "${CRI_GPU_TSV%.tsv}.medians.tsv"; }
}
