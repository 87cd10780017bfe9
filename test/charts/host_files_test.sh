#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034 # checks are eval'ed strings that use these variables
# charts/gpuckpt/files/host-files.sh against a fake host tree: install puts the hook binary, hooks.d JSON and
# CRIU plugin in place (binary before JSON), moves CRIU's own GPU plugins aside (or refuses), ships the runtimes'
# CRIU config without touching one that is not gpuckpt's; remove takes them away only for the pod that installed
# them and puts the other plugins back; render-config fills in the node; bad input fails with a message naming it.
# Verification on the host (the host's CRIU loads the plugin, the hook runs) needs a real root: installer_e2e_test.sh.
set -euo pipefail
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
SCRIPT="$SRC/charts/gpuckpt/files/host-files.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

# The image side: files the installer copies.
mkdir -p "$tmp/image"
printf '#!/bin/sh\necho hook-v1\n' > "$tmp/image/hook"
printf 'plugin-v1' > "$tmp/image/plugin.so"
mkdir -p "$tmp/image/chart"
for stage in createRuntime precreate poststop; do
  f=gpuckpt-hook-$stage.json; [ "$stage" = createRuntime ] && f=gpuckpt-hook.json
  printf '{"version":"1.0.0","hook":{"path":"/opt/gpuckpt/bin/gpuckpt-oci-hook"},"when":{"always":true},"stages":["%s"]}\n' "$stage" > "$tmp/image/chart/$f"
done
printf 'not a hook entry\n' > "$tmp/image/chart/host-files.sh"
mkdir -p "$tmp/host/usr/share/containers/oci/hooks.d" "$tmp/host/usr/lib/criu" "$tmp/host/etc/criu"
printf '# gpuckpt: managed file\ntimeout 60\n' > "$tmp/image/chart/criu-runtime.conf"
printf '# gpuckpt: managed file\nGPUCKPT_IMAGE_THREADS=8\n' > "$tmp/image/chart/gpuckpt_plugin.env"

run() { # OWNER ACTION [extra env...]
  local owner=$1 action=$2; shift 2
  env -i PATH="$PATH" GPUCKPT_HOST_MOUNT="$tmp/host" GPUCKPT_HOOKS_DIR=/usr/share/containers/oci/hooks.d \
    GPUCKPT_CRIU_PLUGIN_DIR=/usr/lib/criu GPUCKPT_INSTALL_DIR=/opt/gpuckpt GPUCKPT_HOOK_JSON_DIR="$tmp/image/chart" \
    GPUCKPT_SRC_HOOK="$tmp/image/hook" GPUCKPT_SRC_PLUGIN="$tmp/image/plugin.so" GPUCKPT_OWNER="$owner" \
    GPUCKPT_VERIFY=false GPUCKPT_CRIU_CONFIG_DIR=/etc/criu GPUCKPT_CRIU_CONFIG_SRC="$tmp/image/chart/criu-runtime.conf" \
    GPUCKPT_PLUGIN_SETTINGS_SRC="$tmp/image/chart/gpuckpt_plugin.env" \
    "$@" sh "$SCRIPT" "$action"
}
H="$tmp/host"
HOOKS_D="$H/usr/share/containers/oci/hooks.d"
HOOK="$H/opt/gpuckpt/bin/gpuckpt-oci-hook" JSON="$HOOKS_D/gpuckpt-hook.json" PLUGIN="$H/usr/lib/criu/gpuckpt_plugin.so"

# install
run pod-a install 2> "$tmp/log"
expect '[ -x "$HOOK" ] && [ "$("$HOOK")" = hook-v1 ]' "hook binary installed and executable"
expect 'for f in "$tmp"/image/chart/gpuckpt-hook*.json; do cmp -s "$f" "$HOOKS_D/$(basename "$f")" || exit 1; done' "all three hooks.d entries installed unchanged"
expect '[ "$(ls "$HOOKS_D")" = "$(printf "gpuckpt-hook-poststop.json\ngpuckpt-hook-precreate.json\ngpuckpt-hook.json")" ]' "only the hook entries go into hooks.d"
expect 'cmp -s "$PLUGIN" "$tmp/image/plugin.so"' "CRIU plugin installed"
expect '[ "$(stat -c %a "$PLUGIN")" = 644 ] && [ "$(stat -c %a "$JSON")" = 644 ] && [ "$(stat -c %a "$HOOK")" = 755 ]' "file modes 755/644/644"
expect '[ "$(cat "$H/opt/gpuckpt/.installed-by")" = pod-a ]' "owner mark is the installing pod"
expect '[ -z "$(find "$H" -name "*gpuckpt-new*" -o -name ".probe")" ]' "no staged files left"
expect 'cmp -s "$H/etc/criu/runc.conf" "$tmp/image/chart/criu-runtime.conf" && cmp -s "$H/etc/criu/crun.conf" "$tmp/image/chart/criu-runtime.conf"' \
  "the runtimes' CRIU config shipped as runc.conf and crun.conf"
expect 'cmp -s "$H/usr/lib/criu/gpuckpt_plugin.env" "$tmp/image/chart/gpuckpt_plugin.env" && [ "$(stat -c %a "$H/usr/lib/criu/gpuckpt_plugin.env")" = 644 ]' \
  "the plugin's settings file is written beside the plugin (the plugin reads it there)"
expect 'grep -q "installer.verify=false" "$tmp/log"' "an unverified install says so"
expect 'awk "/installed .*bin\/gpuckpt-oci-hook/ {b = NR} /installed .*hooks.d\/gpuckpt-hook/ {if (!b) early = 1; n++} END {exit !(b && !early && n == 3)}" "$tmp/log"' \
  "binary installed before the hooks.d JSON (runtimes reject an entry whose binary is missing)"

# upgrade: a newer pod reinstalls over a running hook (rename keeps the old inode intact for running hooks)
exec 9< "$HOOK"   # an open handle, like a hook running right now
printf '#!/bin/sh\necho hook-v2\n' > "$tmp/image/hook"
run pod-b install 2>/dev/null
expect '[ "$("$HOOK")" = hook-v2 ]' "reinstall replaces the binary"
expect 'grep -q hook-v1 /proc/self/fd/9' "the replaced binary's old content stays intact for a running hook"
exec 9<&-
expect '[ "$(cat "$H/opt/gpuckpt/.installed-by")" = pod-b ]' "owner mark moves to the newer pod"

# the old pod stops after the new one installed (surge/rolling update): it must not remove pod-b's files
run pod-a remove 2> "$tmp/log"
expect '[ -f "$HOOK" ] && [ -f "$JSON" ] && [ -f "$PLUGIN" ]' "an older pod's preStop leaves the newer pod's files"
expect 'grep -q "belong to pod pod-b" "$tmp/log"' "it says why it left them"

# the owner stops (uninstall): everything goes, the JSON first
run pod-b remove 2>/dev/null
expect '[ -z "$(ls "$HOOKS_D")" ] && [ ! -e "$HOOK" ] && [ ! -e "$PLUGIN" ] && [ ! -e "$H/opt/gpuckpt/.installed-by" ] && [ ! -e "$H/usr/lib/criu/gpuckpt_plugin.env" ]' \
  "owner's preStop removes all host files, the plugin's settings included"
expect '[ -d "$H/usr/share/containers/oci/hooks.d" ] && [ -d "$H/usr/lib/criu" ]' "shared host directories stay"
if run pod-b remove 2>/dev/null; then ok; else bad "remove is idempotent"; fi

# A rolling update stops the owner while its agent still ends a job: the plugin and the CRIU config that job's CRIU
# needs stay until the agent no longer listens on its port, at most GPUCKPT_REMOVE_WAIT_SECONDS.
listen() { # SECONDS: a stand-in agent listening on 127.0.0.1 for that long; prints its port
  python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16); s.settimeout(0.1)
print(s.getsockname()[1], flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    try:
        s.accept()[0].close()
    except socket.timeout:
        pass' "$1" > "$tmp/port" &
  for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
}
run pod-e install 2>/dev/null
listen 2.5; port=$(cat "$tmp/port"); listener=$!
run pod-e remove GPUCKPT_AGENT_PORT="$port" GPUCKPT_REMOVE_WAIT_SECONDS=30 2> "$tmp/log" &
remover=$!
sleep 1
expect '[ -f "$PLUGIN" ] && [ -f "$H/etc/criu/runc.conf" ] && [ -f "$JSON" ]' \
  "while the pod's agent still listens, its preStop keeps the plugin, the CRIU config and the hook"
wait "$remover"; wait "$listener" 2>/dev/null || true
expect '[ ! -e "$PLUGIN" ] && [ ! -e "$H/etc/criu/runc.conf" ] && [ -z "$(ls "$HOOKS_D")" ]' "once the agent is gone, they are removed"
expect 'grep -q "waited [1-9][0-9]* s for the agent" "$tmp/log"' "it says how long it waited"
run pod-e install 2>/dev/null
: > "$tmp/port"; listen 20; port=$(cat "$tmp/port"); listener=$!
start=$(date +%s)
run pod-e remove GPUCKPT_AGENT_PORT="$port" GPUCKPT_REMOVE_WAIT_SECONDS=2 2>/dev/null
expect '[ ! -e "$PLUGIN" ] && [ $(($(date +%s) - start)) -le 6 ]' "an agent that does not end is waited for at most GPUCKPT_REMOVE_WAIT_SECONDS"
kill "$listener" 2>/dev/null; wait "$listener" 2>/dev/null || true

# CRIU's own GPU plugins: moved aside while gpuckpt's is installed (default), put back on removal; refuse: no change
run pod-b remove 2>/dev/null
printf 'cuda' > "$H/usr/lib/criu/cuda_plugin.so"; printf 'amd' > "$H/usr/lib/criu/amdgpu_plugin.so"
printf 'other' > "$H/usr/lib/criu/inotify_plugin.so"
printf 'timeout 5\n' > "$H/etc/criu/runc.conf"   # the operator's own
printf 'GPUCKPT_IMAGE_THREADS=2\n' > "$H/usr/lib/criu/gpuckpt_plugin.env"   # the operator's own settings
run pod-d install 2> "$tmp/log"
expect '[ ! -e "$H/usr/lib/criu/cuda_plugin.so" ] && [ "$(cat "$H/usr/lib/criu/cuda_plugin.so.disabled-by-gpuckpt")" = cuda ] && [ ! -e "$H/usr/lib/criu/amdgpu_plugin.so" ]' \
  "cuda_plugin.so and amdgpu_plugin.so moved aside under names CRIU does not load"
expect '[ -f "$H/usr/lib/criu/inotify_plugin.so" ] && [ -f "$PLUGIN" ]' "other plugins untouched, gpuckpt's installed"
expect 'grep -q "moved CRIU.s cuda_plugin.so aside" "$tmp/log"' "it says what it moved"
expect '[ "$(cat "$H/etc/criu/runc.conf")" = "timeout 5" ] && grep -q "runc.conf exists and is not gpuckpt" "$tmp/log"' \
  "a runc.conf that is not gpuckpt's is left alone, with a warning"
run pod-d install 2>/dev/null
expect '[ "$(cat "$H/usr/lib/criu/cuda_plugin.so.disabled-by-gpuckpt")" = cuda ]' "reinstall keeps the moved plugins"
run pod-d remove 2>/dev/null
expect '[ "$(cat "$H/usr/lib/criu/cuda_plugin.so")" = cuda ] && [ "$(cat "$H/usr/lib/criu/amdgpu_plugin.so")" = amd ] && [ -z "$(ls "$H/usr/lib/criu" | grep disabled)" ]' \
  "removal puts CRIU's plugins back"
expect '[ "$(cat "$H/etc/criu/runc.conf")" = "timeout 5" ] && [ ! -e "$H/etc/criu/crun.conf" ]' "removal takes gpuckpt's CRIU config only"
expect '[ "$(cat "$H/usr/lib/criu/gpuckpt_plugin.env")" = GPUCKPT_IMAGE_THREADS=2 ]' "a settings file that is not gpuckpt's is neither replaced nor removed"
expect '[ -f "$H/usr/lib/criu/inotify_plugin.so" ] && [ ! -e "$PLUGIN" ]' "removal removes only gpuckpt's plugin"
if run pod-e install GPUCKPT_OTHER_GPU_PLUGINS=refuse 2> "$tmp/log"; then bad "refuse must fail the install"; else ok; fi
expect 'grep -q "cuda_plugin.so (CRIU.s own GPU plugin) is installed" "$tmp/log" && grep -q "Nothing on the node was changed" "$tmp/log"' \
  "refuse names the plugin and the fix"
expect '[ ! -e "$PLUGIN" ] && [ ! -e "$HOOK" ] && [ ! -e "$JSON" ] && [ -f "$H/usr/lib/criu/cuda_plugin.so" ] && [ -z "$(find "$H" -name "*gpuckpt-new*")" ]' \
  "refuse leaves the node as it was"
rm -f "$H/usr/lib/criu/"*_plugin.so "$H/etc/criu/runc.conf" "$H/usr/lib/criu/gpuckpt_plugin.env"

# cgroup v2 with a runc that is older than 1.2 or does not answer (none runs in this fake root): runc.conf gets
# `manage-cgroups ignore`, so that a restore stays in its new container's cgroup; crun.conf is shipped unchanged.
mkdir -p "$H/sys/fs/cgroup" && : > "$H/sys/fs/cgroup/cgroup.controllers"
run pod-g install 2> "$tmp/log"
expect 'cmp -s <(head -2 "$H/etc/criu/runc.conf") "$tmp/image/chart/criu-runtime.conf" && [ "$(tail -1 "$H/etc/criu/runc.conf")" = "manage-cgroups ignore" ] && cmp -s "$H/etc/criu/crun.conf" "$tmp/image/chart/criu-runtime.conf"' \
  "cgroup v2, runc not known to be >= 1.2: runc.conf keeps restores in the new container's cgroup, crun.conf as shipped"
expect 'grep -q "runc.conf: manage-cgroups ignore (cgroup v2 and the host.s runc did not say its version" "$tmp/log"' \
  "the installer says why it added the line"
run pod-g remove 2>/dev/null
rm -rf "$H/sys"

# A node where CRI-O runs (seen on the node, not told by a value): no hooks.d entry with a stage CRI-O rejects is
# installed (it exits at start on `precreate`), and one an older install left is removed; podman-only nodes keep it.
PRECREATE="$HOOKS_D/gpuckpt-hook-precreate.json"
run pod-f remove 2>/dev/null
mkdir -p "$H/etc/crio"
cp "$tmp/image/chart/gpuckpt-hook-precreate.json" "$PRECREATE"   # an older release's install
run pod-f install 2> "$tmp/log"
expect '[ ! -e "$PRECREATE" ] && [ -f "$JSON" ] && [ -f "$HOOKS_D/gpuckpt-hook-poststop.json" ]' \
  "CRI-O node (/etc/crio): the precreate entry is not installed, createRuntime and poststop are"
expect 'grep -q "CRI-O runs on this node (/etc/crio found): gpuckpt-hook-precreate.json (stage precreate) is not installed" "$tmp/log"' \
  "it says why, naming what on the node showed CRI-O"
expect 'grep -q "removed /usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json left by an earlier install" "$tmp/log"' \
  "the precreate entry an older install left is removed, and it says so"
rm -rf "$H/etc/crio"
mkdir -p "$H/run/crio" && : > "$H/run/crio/crio.sock"
run pod-f install 2> "$tmp/log"
expect '[ ! -e "$PRECREATE" ] && grep -q "(/run/crio/crio.sock found)" "$tmp/log"' "CRI-O's socket alone marks a CRI-O node"
rm -rf "$H/run/crio"
run pod-f install 2> "$tmp/log"
expect 'cmp -s "$tmp/image/chart/gpuckpt-hook-precreate.json" "$PRECREATE" && ! grep -q "CRI-O runs" "$tmp/log"' \
  "a node without CRI-O (podman) gets the precreate entry"
run pod-f remove 2>/dev/null

# failures name what is wrong
if run pod-c install GPUCKPT_SRC_PLUGIN="$tmp/image/missing.so" 2> "$tmp/log"; then bad "missing plugin must fail"; else ok; fi
expect 'grep -q "missing.so is missing in the image" "$tmp/log"' "missing source named"
expect '[ ! -e "$JSON" ]' "a failed install does not leave a hooks.d entry behind"
if env -i PATH="$PATH" sh "$SCRIPT" install 2> "$tmp/log"; then bad "install without env must fail"; else ok; fi
expect 'grep -q "GPUCKPT_HOOKS_DIR is not set" "$tmp/log"' "missing environment named"
if sh "$SCRIPT" frobnicate 2> "$tmp/log"; then bad "unknown action must fail"; else ok; fi
expect 'grep -q "usage: host-files.sh" "$tmp/log"' "usage on unknown action"

# render-config
printf 'url: https://kubernetes.default.svc/api/v1/nodes/@NODE_NAME@/proxy\nb: https://@NODE_IP@:10250\n' > "$tmp/config.in"
env -i PATH="$PATH" GPUCKPT_CONFIG_IN="$tmp/config.in" GPUCKPT_CONFIG_OUT="$tmp/config.out" NODE_NAME=gpu-node-1 NODE_IP=10.0.0.7 \
  sh "$SCRIPT" render-config 2>/dev/null
expect 'grep -q "nodes/gpu-node-1/proxy" "$tmp/config.out" && grep -q "https://10.0.0.7:10250" "$tmp/config.out"' "node name and IP filled in"
env -i PATH="$PATH" GPUCKPT_CONFIG_IN="$tmp/config.in" GPUCKPT_CONFIG_OUT="$tmp/config.v6" NODE_NAME=n NODE_IP=fd00::7 \
  sh "$SCRIPT" render-config 2>/dev/null
expect 'grep -q "https://\[fd00::7\]:10250" "$tmp/config.v6"' "IPv6 node IP bracketed in the URL"
if env -i PATH="$PATH" GPUCKPT_CONFIG_IN="$tmp/config.in" GPUCKPT_CONFIG_OUT="$tmp/config.out2" NODE_NAME='x/y;rm' \
  sh "$SCRIPT" render-config 2> "$tmp/log"; then bad "odd node name must be refused"; else ok; fi
expect '[ ! -e "$tmp/config.out2" ] && grep -q "unexpected characters" "$tmp/log"' "odd node name refused, nothing written"

# hold exits on SIGTERM (pod stop) promptly
sh "$SCRIPT" hold > /dev/null 2> "$tmp/hold.log" & holder=$!
for _ in $(seq 100); do grep -q holding "$tmp/hold.log" 2>/dev/null && break; sleep 0.05; done  # its trap is set once it logs
sleeper=''; for _ in $(seq 100); do sleeper=$(pgrep -P "$holder" sleep) && break; sleep 0.05; done   # forked after the log line
kill -TERM "$holder"
t0=$SECONDS; if wait "$holder"; then ok; else bad "hold exits 0 on SIGTERM"; fi
expect '[ $((SECONDS - t0)) -lt 5 ]' "hold stops promptly"
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }  # exited, maybe unreaped
# kill(2) returns before the signalled child has run to its end: give it 2 s (a loaded CI machine took longer
# than none once).
gone_soon() { for _ in $(seq 40); do gone "$1" && return 0; sleep 0.05; done; return 1; }
expect '[ -n "$sleeper" ] && gone_soon "$sleeper"' "hold leaves no child running (its sleep $sleeper is gone)"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
