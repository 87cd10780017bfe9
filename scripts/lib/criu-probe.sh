# shellcheck shell=bash
# Sourced by the tests and the demo: can this machine's CRIU dump a process at all?
#   criu_dump_works [CRIU]   0: yes; 1: no, with the reason in CRIU_PROBE_REASON (the CPU, CRIU's version and
#                            the last lines of its log). One dump of a sleeping process with --leave-running,
#                            bounded by 20 s; the answer is cached per boot, CPU model and CRIU binary.
# Why: CRIU 4.1.1 hangs in its parasite's cure (dump.log ends at "Waiting for PID to trap ... new_sp=...") on
# some virtual CPUs (seen 2026-11-26 on an "Oxide Virtual Turin-like Processor", AMD family 26, kernel 6.18;
# sid's CRIU 4.2.1 dumps there; docs/kubernetes.md): every dump on such
# a machine hangs until it is killed, whatever runtime drives CRIU. A test that checkpoints cannot say anything
# about gpuckpt there; it reports SKIPPED with this reason instead of hanging.
criu_dump_works() {
  local criu=${1:-criu} cpu boot key cache dir pid rc
  command -v "$criu" >/dev/null 2>&1 || { CRIU_PROBE_REASON="no criu on PATH"; return 1; }
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
  key=$(printf '%s|%s|%s' "$boot" "$cpu" "$(sha256sum < "$(command -v "$criu")")" | sha256sum | cut -c1-16)
  cache=/tmp/gpuckpt-criu-probe-$key
  if [ -f "$cache" ]; then
    CRIU_PROBE_REASON=$(tail -n +2 "$cache")
    [ "$(head -1 "$cache")" = ok ]
    return
  fi
  dir=$(mktemp -d /tmp/gpuckpt-criu-probe.XXXXXX)
  setsid sleep 600 </dev/null >/dev/null 2>&1 &
  pid=$!
  timeout 20 "$criu" dump -t "$pid" -D "$dir" -o dump.log -v4 --leave-running >/dev/null 2>&1
  rc=$?
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ "$rc" = 0 ]; then
    CRIU_PROBE_REASON=""
    printf 'ok\n' > "$cache"
  else
    CRIU_PROBE_REASON="CRIU cannot dump a process on this machine ($("$criu" --version 2>/dev/null | head -1), CPU '$cpu', kernel $(uname -r)): 'criu dump' of a sleeping process $([ "$rc" = 124 ] && echo "hung for 20 s" || echo "failed ($rc)"); dump.log ends: $(tail -n 2 "$dir/dump.log" 2>/dev/null | tr '\n' ' ')"
    printf 'no\n%s\n' "$CRIU_PROBE_REASON" > "$cache"
  fi
  rm -rf "$dir"
  [ "$rc" = 0 ]
}
