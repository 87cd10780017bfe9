#!/usr/bin/env bash
# shellcheck disable=SC2016 # checks are eval'ed strings
# The chart's installer (charts/gpuckpt/files/host-files.sh install) with verification on, against real hosts: the
# debootstrap'd trixie root (its own CRIU 4.1) and bullseye root (glibc 2.31; with and without a CRIU) stand in for
# the node, mounted where the chart mounts the host's root. It installs the hook and plugin as built after the host's
# own CRIU loaded the plugin and the hook ran there; it refuses a plugin that CRIU cannot load and a hook that does
# not run under the host's glibc, naming why, and leaves the node exactly as it was (previous files intact, nothing
# staged left behind). Exit 0 pass, 77 skipped, else fail.
set -uo pipefail
BUILD=${GPUCKPT_BUILD_DIR:?set GPUCKPT_BUILD_DIR to the CMake build directory}
SRC=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
SCRIPT=$SRC/charts/gpuckpt/files/host-files.sh
# shellcheck disable=SC1091 # a test helper beside this file
. "$(dirname "$0")/lib.sh" || { echo "FAIL: $(dirname "$0")/lib.sh missing"; exit 1; }

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (mount namespace, chroot, CRIU)"
unshare --mount true 2>/dev/null || skip "cannot create a mount namespace here"
command -v dpkg >/dev/null || skip "not a Debian system (dpkg --print-architecture names the roots)"
for d in trixie bullseye; do
  [ -x "$(root_base $d)/usr/bin/perl" ] || { echo "FAIL: no $d root at $(root_base $d): scripts/setup.sh makes it"; exit 1; }
done

if [ "${1:-}" != --inside ]; then
  WORK=$(mktemp -d /tmp/gpuckpt-installer-e2e.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
  unshare --mount --propagation private bash "$0" --inside "$WORK"
  exit $?
fi
WORK=$2

pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { if eval "$1"; then ok; else bad "$2"; fi; }

# The image side: the built files, the chart's hooks.d entries (as the chart renders them: same shape) and config.
IMG=$WORK/image
mkdir -p "$IMG/chart"
cp "$BUILD/oci-hook/gpuckpt-oci-hook" "$IMG/hook"
cp "$BUILD/criu-plugin/gpuckpt_plugin.so" "$IMG/plugin.so"
for stage in createRuntime precreate poststop; do
  f=gpuckpt-hook-$stage.json; [ "$stage" = createRuntime ] && f=gpuckpt-hook.json
  printf '{"version":"1.0.0","hook":{"path":"/opt/gpuckpt/bin/gpuckpt-oci-hook"},"when":{"always":true},"stages":["%s"]}\n' "$stage" > "$IMG/chart/$f"
done
# The runtimes' CRIU config as the chart renders it (host.criuPluginDir /usr/lib/criu).
command -v helm >/dev/null || { echo "SKIP: helm not found (scripts/setup.sh installs it)"; exit 77; }
helm template t "$SRC/charts/gpuckpt" --show-only templates/configmap.yaml |
  python3 -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(sys.stdin)["data"]["criu-runtime.conf"])' > "$IMG/criu.conf" \
  || { echo "FAIL: cannot render the chart's criu-runtime.conf"; exit 1; }
printf 'not an ELF file\n' > "$IMG/broken-plugin.so"
# A hook linked against this build machine's glibc the usual way: it needs GLIBC_2.32 (__libc_single_threaded).
printf '#include <sys/single_threaded.h>\nint main(void) { return __libc_single_threaded ? 0 : 1; }\n' > "$WORK/newglibc.c"
gcc -o "$IMG/new-glibc-hook" "$WORK/newglibc.c" 2>/dev/null || { echo "SKIP: no gcc for the too-new hook"; exit 77; }

install_into() { # ROOT OWNER [VAR=VALUE...]: the chart's install, host root at ROOT; log in $WORK/log
  local root=$1 owner=$2; shift 2
  env -i PATH="$PATH" GPUCKPT_HOST_MOUNT="$root" GPUCKPT_HOOKS_DIR=/usr/share/containers/oci/hooks.d \
    GPUCKPT_CRIU_PLUGIN_DIR=/usr/lib/criu GPUCKPT_INSTALL_DIR=/opt/gpuckpt GPUCKPT_HOOK_JSON_DIR="$IMG/chart" \
    GPUCKPT_SRC_HOOK="$IMG/hook" GPUCKPT_SRC_PLUGIN="$IMG/plugin.so" GPUCKPT_OWNER="$owner" GPUCKPT_VERIFY=true \
    GPUCKPT_CRIU_CONFIG_DIR=/etc/criu GPUCKPT_CRIU_CONFIG_SRC="$IMG/criu.conf" "$@" sh "$SCRIPT" install 2> "$WORK/log"
}
# Every file (not directory: the chart's hostPath volumes create those) where the installer writes, with its hash.
snapshot() { (cd "$1" && find usr/lib/criu usr/share/containers opt/gpuckpt etc/criu -xdev ! -type d 2>/dev/null | sort |
  while read -r f; do echo "$f $(sha256sum < "$f" | cut -c1-16)"; done); }
unchanged() { snapshot "$1" > "$WORK/after"; diff "$WORK/before" "$WORK/after" >&2; }

# --- trixie: its own CRIU 4.1 ------------------------------------------------------------------------------
T=$(mount_root "$(root_base trixie)" "$WORK/trixie") || { echo "FAIL: overlay mount of the trixie root"; exit 1; }
install_into "$T" pod-a; rc=$?
expect '[ $rc = 0 ]' "install with verification on trixie succeeds (rc $rc): $(cat "$WORK/log")"
expect 'grep -q "verified: the OCI hook runs on this node" "$WORK/log"' "the hook was run on the host"
expect 'grep -q "verified: /usr/sbin/criu 4.1.1 loads gpuckpt_plugin.so" "$WORK/log"' "the host's CRIU loaded the plugin"
expect 'cmp -s "$T/usr/lib/criu/gpuckpt_plugin.so" "$IMG/plugin.so" && cmp -s "$T/opt/gpuckpt/bin/gpuckpt-oci-hook" "$IMG/hook"' \
  "the verified plugin and hook are in place"
expect '[ -f "$T/usr/share/containers/oci/hooks.d/gpuckpt-hook.json" ] && [ -f "$T/etc/criu/runc.conf" ]' "hooks.d entries and CRIU config in place"
expect '[ -z "$(find "$T/usr/lib/criu" "$T/opt/gpuckpt" -name "*gpuckpt-new*" -o -name .probe)" ]' "no staged files or probe left"
expect 'chroot "$T" criu check >/dev/null 2>&1' "criu check still passes with the plugin installed"
# runc hands CRIU /etc/criu/runc.conf: with the shipped one, the node's CRIU loads the installed plugin from there.
chroot "$T" criu dump -t 4194304 -D /tmp --config /etc/criu/runc.conf -v4 -o runc-conf.log >/dev/null 2>&1
expect 'grep -q "gpuckpt: plugin loaded for dump" "$T/tmp/runc-conf.log" && grep -qx "timeout 60" "$T/etc/criu/runc.conf"' \
  "CRIU run with the shipped runc.conf (timeout 60, libdir) loads the installed plugin"

# A plugin the host's CRIU cannot load: refused, the installed one untouched.
snapshot "$T" > "$WORK/before"
install_into "$T" pod-b GPUCKPT_SRC_PLUGIN="$IMG/broken-plugin.so"; rc=$?
expect '[ $rc != 0 ]' "a plugin CRIU cannot load fails the install"
expect 'grep -q "does not load gpuckpt_plugin.so" "$WORK/log" && grep -q "Nothing on the node was changed" "$WORK/log"' \
  "the refusal names the plugin and says nothing changed: $(cat "$WORK/log")"
expect 'unchanged "$T"' "the node is exactly as before (previous plugin, hook, entries, owner)"

# network-lock in the runtimes' config on CRIU 4.1.1, which crashes on that line in swrk mode: refused, nothing placed.
{ cat "$IMG/criu.conf"; echo "network-lock skip"; } > "$IMG/criu-network-lock.conf"
snapshot "$T" > "$WORK/before"
install_into "$T" pod-n GPUCKPT_CRIU_CONFIG_SRC="$IMG/criu-network-lock.conf"; rc=$?
expect '[ $rc != 0 ] && grep -q "sets network-lock, and this node.s CRIU (/usr/sbin/criu, 4.1.1) crashes" "$WORK/log" &&
  grep -q "Upgrade the node.s CRIU to >= 4.2, or drop network-lock" "$WORK/log" && grep -q "Nothing on the node was changed" "$WORK/log"' \
  "network-lock on CRIU 4.1.1 is refused naming the version and the fix: $(cat "$WORK/log")"
expect 'unchanged "$T"' "a refused network-lock changes nothing on the node"

# --- bullseye: glibc 2.31 --------------------------------------------------------------------------------------
B=$(mount_root "$(root_base bullseye)" "$WORK/bullseye") || { echo "FAIL: overlay mount of the bullseye root"; exit 1; }
# A hook that needs a newer glibc than the node's: refused before anything is placed.
snapshot "$B" > "$WORK/before"
install_into "$B" pod-c GPUCKPT_SRC_HOOK="$IMG/new-glibc-hook"; rc=$?
expect '[ $rc != 0 ] && grep -q "the OCI hook does not run on this node" "$WORK/log" && grep -q "GLIBC_2.3" "$WORK/log"' \
  "a hook needing a newer glibc is refused, naming the missing version: $(cat "$WORK/log")"
expect 'unchanged "$B"' "nothing placed on the node"
# No CRIU on the node: the hook is verified, the plugin is installed with a warning.
install_into "$B" pod-d; rc=$?
expect '[ $rc = 0 ] && grep -q "no criu on this node.s PATH" "$WORK/log" && [ -f "$B/usr/lib/criu/gpuckpt_plugin.so" ]' \
  "without CRIU the install says the plugin is unverified: $(cat "$WORK/log")"
# With a CRIU (the trixie bundle): verified under the node's glibc 2.31 hook run.
bundle_criu "$B" || bad "no CRIU bundle at ${GPUCKPT_PREFIX:-/opt/gpuckpt}/criu (scripts/setup.sh)"
install_into "$B" pod-e; rc=$?
expect '[ $rc = 0 ] && grep -q "verified: the OCI hook runs" "$WORK/log" && grep -q "verified: /usr/local/sbin/criu [0-9.]* loads" "$WORK/log"' \
  "bullseye with a CRIU: hook and plugin verified: $(cat "$WORK/log")"

# The same config on a node whose CRIU is 4.2.x (sid's bundle from scripts/setup.sh): installed as written.
SID=${GPUCKPT_PREFIX:-/opt/gpuckpt}/criu-sid
if [ -x /usr/local/sbin/criu-sid ] && [ -x "$SID/usr/sbin/criu" ]; then
  mkdir -p "$B$SID" && mount --bind "$SID" "$B$SID" && cp /usr/local/sbin/criu-sid "$B/usr/local/sbin/criu-sid"
  install_into "$B" pod-f GPUCKPT_CRIU=/usr/local/sbin/criu-sid GPUCKPT_CRIU_CONFIG_SRC="$IMG/criu-network-lock.conf"; rc=$?
  expect '[ $rc = 0 ] && grep -qx "network-lock skip" "$B/etc/criu/runc.conf"' \
    "network-lock on CRIU 4.2.x is installed into runc.conf (rc $rc): $(cat "$WORK/log")"
else
  bad "no sid CRIU bundle at $SID (scripts/setup.sh installs it)"
fi

umount -R "$T" 2>/dev/null || umount -lR "$T"
umount -R "$B" 2>/dev/null || umount -lR "$B"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
