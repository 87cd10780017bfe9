#!/usr/bin/env bash
# The OCI hook and the CRIU plugin as built, inside other distributions' roots (debootstrap'd by scripts/setup.sh
# into $GPUCKPT_PREFIX/roots): Debian bullseye (glibc 2.31, GCC 10's libstdc++) and trixie (glibc 2.41). In each:
#   - the root's own dynamic loader resolves every symbol of both files (ldd -r);
#   - the hook runs: precreate passes a plain container's config through unchanged, a truncated restore plan is
#     refused with its reason (a C++ exception thrown and caught under that glibc), createRuntime records nothing;
#   - CRIU passes `criu check`, then dumps and restores a CPU-only counting process with the plugin in its
#     plugin directory: CRIU loads the plugin, the plugin declines (no GPU), the process counts on.
# CRIU: the root's own package where it has one (trixie); bullseye's 3.16 predates the plugin ABI gpuckpt needs,
# so there the CRIU bundle scripts/setup.sh installed (own loader) is bind-mounted in. A CRIU that hangs on this
# machine's CPU without the plugin too (trixie's 4.1.1 on some virtual AMD CPUs) skips the dump and restore checks.
# Each root is used through an overlay, so the cached root stays pristine. Exit 0 pass, 77 skipped, else fail.
set -uo pipefail
BUILD=${GPUCKPT_BUILD_DIR:?set GPUCKPT_BUILD_DIR to the CMake build directory}
PREFIX=${GPUCKPT_PREFIX:-/opt/gpuckpt}
# shellcheck disable=SC1091 # a test helper beside this file
. "$(dirname "$0")/lib.sh" || { echo "FAIL: $(dirname "$0")/lib.sh missing"; exit 1; }
HOOK=$BUILD/oci-hook/gpuckpt-oci-hook
PLUGIN=$BUILD/criu-plugin/gpuckpt_plugin.so
DISTS=${GPUCKPT_FOREIGN_DISTS:-bullseye trixie}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (mount namespace, chroot, CRIU)"
unshare --mount true 2>/dev/null || skip "cannot create a mount namespace here"
command -v dpkg >/dev/null || skip "not a Debian system (dpkg --print-architecture names the roots)"
for f in "$HOOK" "$PLUGIN"; do [ -f "$f" ] || { echo "FAIL: $f not built"; exit 1; }; done

WORK=$(mktemp -d /tmp/gpuckpt-foreign-roots.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# One distribution, inside a private mount namespace (this script re-entered with --in-root). Prints PASS/FAIL lines.
in_root() {
  local dist=$1 base=$2 w=$3
  local root
  root=$(mount_root "$base" "$w") || { echo "FAIL $dist: overlay mount of $base"; return; }
  mkdir -p "$root/opt/gpuckpt/bin" "$root/usr/lib/gpuckpt-test" "$root/var/lib/gpuckpt" "$root/tmp/img"
  cp "$HOOK" "$root/opt/gpuckpt/bin/gpuckpt-oci-hook"
  cp "$PLUGIN" "$root/usr/lib/gpuckpt-test/gpuckpt_plugin.so"
  local criu=/usr/sbin/criu
  if [ ! -x "$root/usr/sbin/criu" ]; then
    bundle_criu "$root" || { echo "FAIL $dist: no CRIU in the root and no bundle at $PREFIX/criu (scripts/setup.sh)"; return; }
    criu=/usr/local/sbin/criu
  fi
  local c="chroot $root"
  echo "INFO $dist: $($c ldd --version 2>&1 | head -1); CRIU $($c "$criu" --version 2>&1 | sed -n 's/^Version: *//p')"

  # 1. the root's loader resolves both files completely
  for f in /opt/gpuckpt/bin/gpuckpt-oci-hook /usr/lib/gpuckpt-test/gpuckpt_plugin.so; do
    local out; out=$($c ldd -r "$f" 2>&1); local rc=$?
    if [ $rc = 0 ] && ! grep -qE 'not found|undefined symbol|version .* not found' <<<"$out"; then echo "PASS $dist: ldd -r $f"
    else echo "FAIL $dist: ldd -r $f (rc $rc):"; printf '    %s\n' "$out"; fi
  done

  # 2. the hook runs
  local hook="$c /opt/gpuckpt/bin/gpuckpt-oci-hook --state-dir /var/lib/gpuckpt"
  local config='{"ociVersion":"1.0.2","process":{"args":["sh"]},"annotations":{"a":"b"}}'
  local got; got=$(printf '%s' "$config" | $hook precreate 2>"$w/hook.err"); local rc=$?
  if [ $rc = 0 ] && [ "$got" = "$config" ]; then echo "PASS $dist: hook precreate passes a plain config through"
  else echo "FAIL $dist: hook precreate (rc $rc, output '$got'): $(cat "$w/hook.err")"; fi
  # A truncated restore plan: the JSON parser throws, the hook catches it and refuses with the reason.
  local plan=rp-0123456789abcdef0123456789abcdef
  mkdir -p "$root/var/lib/gpuckpt/restore-plans"
  printf '{"version": 1,' > "$root/var/lib/gpuckpt/restore-plans/$plan.json"
  got=$(printf '{"ociVersion":"1.0.2","annotations":{"io.gpuckpt.restore-plan":"%s"}}' "$plan" | $hook precreate 2>"$w/hook.err"); rc=$?
  if [ $rc = 1 ] && grep -q 'malformed JSON' "$w/hook.err"; then echo "PASS $dist: hook refuses a truncated restore plan (C++ exception thrown and caught)"
  else echo "FAIL $dist: truncated plan not refused (rc $rc): $(cat "$w/hook.err")"; fi
  mkdir -p "$root/tmp/bundle"
  echo '{"ociVersion":"1.0.2","process":{"args":["sh"]},"linux":{"devices":[]}}' > "$root/tmp/bundle/config.json"
  printf '%s' '{"ociVersion":"1.0.2","id":"plain-1","status":"creating","pid":1,"bundle":"/tmp/bundle"}' \
    | $hook createRuntime 2>"$w/hook.err"; rc=$?
  if [ $rc = 0 ] && [ ! -e "$root/var/lib/gpuckpt/containers/plain-1.json" ] && ! grep -q error "$w/hook.err"; then
    echo "PASS $dist: hook createRuntime runs and records no GPU for a plain container"
  else echo "FAIL $dist: hook createRuntime (rc $rc): $(cat "$w/hook.err")"; fi

  # 3. CRIU with the plugin present: check, dump, restore
  if $c "$criu" check >"$w/check.out" 2>&1 && grep -q 'Looks good' "$w/check.out"; then echo "PASS $dist: criu check"
  else echo "FAIL $dist: criu check: $(tail -3 "$w/check.out")"; fi
  # A single process, no children, in its own session; its file is in the root. perl-base is in every Debian root.
  # It closes what it inherited beyond stdio (ctest's log, say): CRIU refuses fds on mounts outside the root.
  # shellcheck disable=SC2016 # perl's variables
  $c setsid perl -MPOSIX -e 'POSIX::close($_) for 3 .. 1023; my $i = 0; while (1) { $i++; open(my $f, ">", "/tmp/count.tmp") or die; print $f $i; close $f;
    rename("/tmp/count.tmp", "/tmp/count"); select(undef, undef, undef, 0.05); }' </dev/null >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 100); do [ -s "$root/tmp/count" ] && break; sleep 0.05; done
  timeout 30 chroot "$root" "$criu" dump -t "$pid" -D /tmp/img --libdir /usr/lib/gpuckpt-test -v4 -o dump.log >/dev/null 2>&1; rc=$?
  local control=""
  if [ $rc = 124 ]; then
    # Did the plugin make CRIU hang, or does this CRIU hang on this CPU whatever it loads (scripts/lib/criu-probe.sh)?
    # The same dump of the same process with an empty plugin directory decides.
    mkdir -p "$root/tmp/img-control" "$root/usr/lib/gpuckpt-empty"
    timeout 20 chroot "$root" "$criu" dump -t "$pid" -D /tmp/img-control --libdir /usr/lib/gpuckpt-empty --leave-running -v4 -o dump.log >/dev/null 2>&1
    control=$?
  fi
  [ $rc = 0 ] || kill -9 "$pid" 2>/dev/null   # a failed dump leaves it running
  wait "$pid" 2>/dev/null
  local at_dump; at_dump=$(cat "$root/tmp/count" 2>/dev/null)
  if [ "$control" = 124 ]; then
    echo "SKIP $dist: criu dump: this root's CRIU hangs on this machine without the plugin too (CPU '$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)'; dump.log ends: $(tail -1 "$root/tmp/img-control/dump.log" 2>/dev/null))"
    echo "SKIP $dist: criu restore: nothing was dumped"
    umount -R "$root" 2>/dev/null || umount -lR "$root" 2>/dev/null
    return
  fi
  if [ $rc = 0 ] && grep -q 'Plugin "gpuckpt"' "$root/tmp/img/dump.log" && grep -q 'gpuckpt: plugin loaded for dump' "$root/tmp/img/dump.log"; then
    echo "PASS $dist: criu dump with the plugin loaded (count $at_dump)"
  else echo "FAIL $dist: criu dump (rc $rc$([ -n "$control" ] && echo ", hung with the plugin; without it rc $control")):"; grep -E 'Error|gpuckpt|Plugin' "$root/tmp/img/dump.log" 2>/dev/null | tail -8 | sed 's/^/    /'; fi
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  timeout 60 chroot "$root" "$criu" restore -D /tmp/img --libdir /usr/lib/gpuckpt-test -d --pidfile /tmp/restored.pid -v4 -o restore.log >/dev/null 2>&1; rc=$?
  local restored; restored=$(cat "$root/tmp/restored.pid" 2>/dev/null)
  sleep 0.5
  local after; after=$(cat "$root/tmp/count" 2>/dev/null)
  if [ $rc = 0 ] && grep -q 'gpuckpt: plugin loaded for restore' "$root/tmp/img/restore.log" && [ -n "$at_dump" ] && [ -n "$after" ] && [ "$after" -gt "$at_dump" ]; then
    echo "PASS $dist: criu restore with the plugin loaded; the process counts on ($at_dump -> $after)"
  else echo "FAIL $dist: criu restore (rc $rc, count $at_dump -> $after):"; grep -E 'Error|gpuckpt' "$root/tmp/img/restore.log" 2>/dev/null | tail -8 | sed 's/^/    /'; fi
  [ -n "$restored" ] && kill -9 "$restored" 2>/dev/null
  umount -R "$root" 2>/dev/null || umount -lR "$root" 2>/dev/null
}

if [ "${1:-}" = --in-root ]; then
  shift; in_root "$@"; exit 0
fi

pass=0 fail=0 skipped=0
for dist in $DISTS; do
  base=$(root_base "$dist")
  if [ ! -x "$base/usr/bin/perl" ]; then
    echo "FAIL: no $dist root at $base: scripts/setup.sh makes it with debootstrap"; fail=$((fail + 1)); continue
  fi
  mkdir -p "$WORK/$dist"
  unshare --mount --propagation private bash "$0" --in-root "$dist" "$base" "$WORK/$dist" > "$WORK/$dist.out" 2>&1
  cat "$WORK/$dist.out"
  p=$(grep -c '^PASS' "$WORK/$dist.out"); f=$(grep -c '^FAIL' "$WORK/$dist.out"); s=$(grep -c '^SKIP' "$WORK/$dist.out")
  [ $((p + s)) -ge 8 ] || { echo "FAIL $dist: only $((p + s)) of 8 checks ran"; f=$((f + 1)); }
  pass=$((pass + p)); fail=$((fail + f)); skipped=$((skipped + s))
done
echo "$pass passed, $fail failed, $skipped skipped"
[ "$fail" = 0 ]
