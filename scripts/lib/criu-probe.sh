# shellcheck shell=bash disable=SC2034 # CRIU_PROBE_* are read by the scripts that source this file
# Sourced by the tests and the demo: can this machine's CRIU dump a process at all?
#   criu_dump_works [CRIU]   0: yes; 1: no, with the reason in CRIU_PROBE_REASON (the CPU, CRIU's version and
#                            the last lines of its log). One dump of a sleeping process with --leave-running,
#                            bounded by 20 s; the answer is cached per boot, CPU model and CRIU binary.
#                            CRIU_PROBE_NO_BREAKPOINTS=1 when the dump hung only because of hardware breakpoints
#                            (below) and one with CRIU_FAULT=$CRIU_FAULT_NO_BREAKPOINTS dumped.
# Why: CRIU stops its parasite before the final rt_sigreturn of the cure with a hardware breakpoint (DR0/DR7 set
# through PTRACE_POKEUSER, then PTRACE_CONT). Some hypervisors do not deliver debug-register breakpoints to the
# guest (AMD SEV guests without debug virtualization, CRIU issue #2658; seen 2026-11-26 on "AMD EPYC" / "Oxide
# Virtual Turin-like" guests with kernel 6.18): the trap never comes, the task returns from sigreturn into its own
# code, and CRIU waits in wait4() forever (dump.log ends at "Waiting for PID to trap ... new_sp=..."). CRIU 4.2
# probes this at start (commit 1eaa870cc, "kerndat: check that hardware breakpoints work", PR #2660) and then
# steps to the sigreturn with PTRACE_SYSCALL instead; CRIU 4.1.x and older hang in every dump, whatever runtime
# drives them. Their fault-injection switch FI_NO_BREAKPOINTS (CRIU_FAULT=130, same number in 4.0 - criu-dev)
# takes the same no-breakpoint path in dump and restore: a test that runs such a CRIU itself may set it. Runtimes
# (runc, podman, containerd, CRI-O) start CRIU with their own environment, so it would have to be set for each
# runtime process; gpuckpt does not do that on nodes (a fault-injection switch is no production setting): such a
# machine needs CRIU >= 4.2.
CRIU_FAULT_NO_BREAKPOINTS=130
criu_dump_works() {
  local criu=${1:-criu} cpu boot key cache
  CRIU_PROBE_NO_BREAKPOINTS=0
  command -v "$criu" >/dev/null 2>&1 || { CRIU_PROBE_REASON="no criu on PATH"; return 1; }
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
  key=$(printf '%s|%s|%s' "$boot" "$cpu" "$(sha256sum < "$(command -v "$criu")")" | sha256sum | cut -c1-16)
  cache=/tmp/gpuckpt-criu-probe-v2-$key
  if [ ! -f "$cache" ]; then
    criu_probe_dump "$criu" "$cpu" > "$cache.$$" && mv "$cache.$$" "$cache"
  fi
  CRIU_PROBE_REASON=$(tail -n +2 "$cache")
  case $(head -1 "$cache") in
    ok) return 0 ;;
    no-breakpoints) CRIU_PROBE_NO_BREAKPOINTS=1; return 1 ;;
    *) return 1 ;;
  esac
}

# One dump of a sleeping process (with CRIU_FAULT=$3 when given); exit status 0, 124 (hung for 20 s) or CRIU's.
criu_probe_dump_once() { # CRIU DIR [FAULT]
  local pid rc
  setsid sleep 600 </dev/null >/dev/null 2>&1 &
  pid=$!
  if [ -n "${3:-}" ]; then
    CRIU_FAULT=$3 timeout 20 "$1" dump -t "$pid" -D "$2" -o dump.log -v4 --leave-running >/dev/null 2>&1
  else
    timeout 20 "$1" dump -t "$pid" -D "$2" -o dump.log -v4 --leave-running >/dev/null 2>&1
  fi
  rc=$?
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return "$rc"
}

# Prints the cache: a first line ok | no-breakpoints | no, then the reason.
criu_probe_dump() { # CRIU CPU
  local dir rc what
  dir=$(mktemp -d /tmp/gpuckpt-criu-probe.XXXXXX)
  criu_probe_dump_once "$1" "$dir"
  rc=$?
  if [ "$rc" = 0 ]; then
    printf 'ok\n'
    rm -rf "$dir"
    return
  fi
  what="CRIU cannot dump a process on this machine ($("$1" --version 2>/dev/null | head -1), CPU '$2', kernel $(uname -r)): 'criu dump' of a sleeping process $([ "$rc" = 124 ] && echo "hung for 20 s" || echo "failed ($rc)"); dump.log ends: $(tail -n 2 "$dir/dump.log" 2>/dev/null | tr '\n' ' ')"
  if [ "$rc" = 124 ] && grep -q 'Waiting for .* to trap' "$dir/dump.log" 2>/dev/null \
     && rm -rf "${dir:?}"/* && criu_probe_dump_once "$1" "$dir" "$CRIU_FAULT_NO_BREAKPOINTS"; then
    printf 'no-breakpoints\n%s. Cause: this machine does not deliver hardware breakpoints (debug registers) to processes, which this CRIU relies on to stop its parasite before sigreturn (CRIU 4.2 detects it and does without them: commit 1eaa870cc, PR #2660, issue #2658); with CRIU_FAULT=%s (FI_NO_BREAKPOINTS) the same dump succeeds\n' \
      "$what" "$CRIU_FAULT_NO_BREAKPOINTS"
  else
    printf 'no\n%s\n' "$what"
  fi
  rm -rf "$dir"
}

# criu_config_network_lock_ok [CRIU]   0: this CRIU takes a `network-lock` line in a config file it reads in RPC
#                                      (swrk) mode; 1: it does not, with the reason in CRIU_PROBE_REASON.
# Why: runc, podman, containerd and CRI-O run CRIU in swrk mode and have it read an RPC config file (runc.conf, or
# the one `org.criu.config` names). CRIU 4.0 and 4.1.x parse that file with a NULL argv and segfault on an option
# that takes an argument from it, `network-lock` among them (fixed in CRIU 4.2, PR #3051): every checkpoint through
# such a runtime then fails. Decided by version: the fix is in every 4.2 and later.
criu_config_network_lock_ok() {
  local criu=${1:-criu} v major minor
  v=$("$criu" --version 2>/dev/null | sed -n 's/^Version: *\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  [ -n "$v" ] || { CRIU_PROBE_REASON="cannot tell the version of '$criu'"; return 1; }
  major=${v%% *}; minor=${v##* }
  if [ "$major" -gt 4 ] || { [ "$major" = 4 ] && [ "$minor" -ge 2 ]; }; then return 0; fi
  CRIU_PROBE_REASON="CRIU $major.$minor ($criu) crashes in swrk mode on a 'network-lock' line in its RPC config file (runc.conf, org.criu.config); fixed in CRIU 4.2 (PR #3051)"
  return 1
}

# criu_prefer_config_network_lock WORKDIR   when `criu` on PATH cannot take `network-lock` in its RPC config file,
# put a CRIU that can and that dumps here (sid's 4.2.x bundle from scripts/setup.sh) first on PATH for this process
# and the runtimes it starts (runc finds `criu` on PATH). 0: `criu` on PATH now takes it; 1: none here does, with
# the reason in CRIU_PROBE_REASON.
criu_prefer_config_network_lock() {
  local c
  criu_config_network_lock_ok criu && return 0
  local why=$CRIU_PROBE_REASON
  for c in /usr/local/sbin/criu-sid /usr/sbin/criu; do
    if [ ! -x "$c" ] || ! criu_config_network_lock_ok "$c" || ! criu_dump_works "$c"; then continue; fi
    mkdir -p "$1/criu-bin" && ln -sfn "$c" "$1/criu-bin/criu" || return 1
    export PATH="$1/criu-bin:$PATH"
    echo "CRIU: $why; running with $c ($("$c" --version | head -1))"
    return 0
  done
  CRIU_PROBE_REASON="$why, and no CRIU >= 4.2 that dumps is installed here (scripts/setup.sh installs sid's as criu-sid)"
  return 1
}
