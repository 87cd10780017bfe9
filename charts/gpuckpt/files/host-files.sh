#!/bin/sh
# Puts gpuckpt's node-side files onto the host and takes them away again. Runs in the agent image (POSIX sh).
#
#   host-files.sh install        verify the OCI hook and the CRIU plugin on the host, then put them, their hooks.d
#                                entries and the runtimes' CRIU config in place
#   host-files.sh remove         remove them, if this pod is the one that installed them
#   host-files.sh hold           wait for SIGTERM (the sidecar whose preStop hook runs `remove`)
#   host-files.sh render-config  write the agent config with this pod's node name and IP filled in
#
# Environment (set by the chart; host paths as the host sees them, reached under GPUCKPT_HOST_MOUNT):
#   GPUCKPT_HOST_MOUNT      where host paths are mounted (/host; for `install` the host's root, so that
#                           `chroot $GPUCKPT_HOST_MOUNT` runs the host's own CRIU and loader)
#   GPUCKPT_HOOKS_DIR       hooks.d on the host            GPUCKPT_CRIU_PLUGIN_DIR  CRIU plugin dir on the host
#   GPUCKPT_INSTALL_DIR     hook binary dir on the host    GPUCKPT_HOOK_JSON_DIR    holds the gpuckpt-hook*.json
#   GPUCKPT_SRC_HOOK        hook binary in the image       GPUCKPT_SRC_PLUGIN       CRIU plugin in the image
#   GPUCKPT_OWNER           this pod's UID: the owner mark that makes `remove` safe during rolling updates
#   GPUCKPT_AGENT_PORT      (remove) the agent's port in this pod: `remove` waits while the agent still listens
#   GPUCKPT_REMOVE_WAIT_SECONDS  (remove) at most this long (default 60)
#   GPUCKPT_VERIFY          true (default): before anything is placed, run the hook and load the plugin into the
#                           host's CRIU on the host; false: place them unverified
#   GPUCKPT_CRIU            the host's CRIU (default: `criu` on the host's PATH)
#   GPUCKPT_OTHER_GPU_PLUGINS  disable (default): move CRIU's own GPU plugins (cuda_plugin.so, amdgpu_plugin.so)
#                           aside while gpuckpt's is installed, put them back on removal; refuse: install nothing
#   GPUCKPT_CRIU_CONFIG_DIR    the runtimes' CRIU config dir on the host (/etc/criu); empty: ship no config
#   GPUCKPT_CRIU_CONFIG_SRC    the config to ship      GPUCKPT_CRIU_CONFIG_NAMES  its names there (runc.conf crun.conf)
#   GPUCKPT_PLUGIN_SETTINGS_SRC  the CRIU plugin's settings file (GPU memory) to put beside the plugin as
#                           gpuckpt_plugin.env; empty: none
#   GPUCKPT_CONFIG_IN/OUT   config template and output     NODE_NAME, NODE_IP       downward API
#
# Nothing is placed before everything is verified, and every file is written under a temporary name in its target
# directory (one CRIU does not load: it loads only *.so) and renamed into place: the runtime and CRIU never see a
# half-written or unverified file, a running hook keeps its old binary, and a failed install leaves the node as it
# was. The binary goes in before the JSON (CRI-O and podman reject an entry whose binary is missing) and the JSON
# goes out before the binary. Only files this script names are ever removed.
#
# A hooks.d entry never takes a runtime down: CRI-O exits at start on an entry with a stage it does not know
# (`precreate` is podman's extension, not CRI-O's). Whether CRI-O runs on this node is read from the node itself
# (its config, socket or binary under GPUCKPT_HOST_MOUNT), not from a chart value: on such a node an entry with a
# stage CRI-O rejects is not installed, and one an earlier install left there is removed.
set -eu

log() { printf 'gpuckpt host-files: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need() { eval "v=\${$1:-}"; [ -n "$v" ] || die "environment variable $1 is not set (the chart sets it: check the DaemonSet)"; }

host_path() { printf '%s%s' "${GPUCKPT_HOST_MOUNT:-}" "$1"; }

plugin_name=gpuckpt_plugin.so
hook_name=gpuckpt-oci-hook
new_suffix=.gpuckpt-new                  # staged files: not *.so, so CRIU never loads one
disabled_suffix=.disabled-by-gpuckpt     # another GPU plugin moved aside (not *.so either)
other_gpu_plugins="cuda_plugin.so amdgpu_plugin.so"
config_marker="# gpuckpt: managed file"  # first line of every CRIU config gpuckpt ships; others are not touched
settings_name=gpuckpt_plugin.env          # the plugin's settings, beside it (gpumem/plugin_settings.h)

owner_file() { printf '%s/.installed-by' "$(host_path "$GPUCKPT_INSTALL_DIR")"; }
disabled_list() { printf '%s/.disabled-gpu-plugins' "$(host_path "$GPUCKPT_INSTALL_DIR")"; }
probe_dir() { printf '%s/.probe' "$GPUCKPT_INSTALL_DIR"; }   # host path

# stage SRC DEST MODE: copy SRC beside DEST under the staged name; prints the staged path.
stage() {
  src=$1 dest=$2 mode=$3
  [ -f "$src" ] || die "$src is missing in the image: the installer copies it onto the host (see installer.source in values.yaml)"
  dir=$(dirname "$dest")
  mkdir -p "$dir" || die "cannot create $dir on the host: is the host path writable (read-only /usr? SELinux? see docs/troubleshooting.md)"
  staged="$dir/.$(basename "$dest")$new_suffix"
  cp "$src" "$staged" || { rm -f "$staged"; die "cannot write $staged on the host (SELinux denies container writes to host dirs unless installer runs privileged or as spc_t: see securityMode in values.yaml)"; }
  chmod "$mode" "$staged"
  printf '%s' "$staged"
}

# commit STAGED DEST: rename into place.
commit() {
  mv -f "$1" "$2" || { rm -f "$1"; die "cannot rename $1 to $2"; }
  log "installed $2"
}

# put SRC DEST MODE: stage + commit (files that need no verification).
put() { s=$(stage "$1" "$2" "$3") && commit "$s" "$2"; }

discard_staged() {
  rm -f "$(host_path "$GPUCKPT_INSTALL_DIR")/bin/.$hook_name$new_suffix" \
        "$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/.$plugin_name$new_suffix"
  rm -rf "$(host_path "$(probe_dir)")"
}

fail_install() { discard_staged; die "$* Nothing on the node was changed."; }

on_host() { chroot "${GPUCKPT_HOST_MOUNT:-/}" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

# The staged hook runs on the host (the host's loader and glibc) and passes a plain container's config through.
verify_hook() {
  config='{"ociVersion":"1.0.2","annotations":{"io.gpuckpt.install-check":"1"}}'
  probe=$(probe_dir)
  mkdir -p "$(host_path "$probe")"
  if ! out=$(printf '%s' "$config" | on_host "$GPUCKPT_INSTALL_DIR/bin/.$hook_name$new_suffix" --state-dir "$probe" precreate 2>&1); then
    fail_install "the OCI hook does not run on this node: $out."
  fi
  [ "$out" = "$config" ] || fail_install "the OCI hook ran on this node but changed a plain container's config (got: $out)."
  log "verified: the OCI hook runs on this node"
}

# What the host's CRIU needs of the chroot it runs in here, given in this container's mount namespace only (the
# host's root is a private mount here: nothing reaches the node):
# - a writable /tmp: CRIU probes kernel features in a directory it makes there, and the host's root is mounted
#   read-only ("Fail to make dir /tmp/.criu.move_mount_set_group..." where the node's /tmp is no mount of its own);
# - a /proc of this container's PID namespace: CRIU forks helpers and reads /proc/PID of them (the compat vDSO
#   probe: "vdso: Can't find rt vDSO"), and the host's /proc shows the node's PIDs, not this namespace's.
probe_mounts() {
  tmp=$(host_path /tmp)
  if [ -d "$tmp" ] && [ ! -w "$tmp" ]; then
    case "$GPUCKPT_INSTALL_DIR/" in
      /tmp/*) fail_install "the host's /tmp is read-only here and host.installDir ($GPUCKPT_INSTALL_DIR) is under it: CRIU cannot probe the plugin. Put host.installDir outside /tmp." ;;
    esac
    mount -t tmpfs -o size=16m,mode=1777 gpuckpt-probe-tmp "$tmp" ||
      fail_install "the host's /tmp is read-only here and no tmpfs can be mounted over it for CRIU's feature probe (the installer needs CAP_SYS_ADMIN: securityMode privileged, or installer.verify=false)."
  fi
  proc=$(host_path /proc)
  # this shell, as the host's /proc numbers it, is another process (or none) when the namespaces differ
  if [ -e "$proc/self" ] && [ "$(readlink "$proc/$$/ns/pid" 2>/dev/null)" != "$(readlink /proc/$$/ns/pid)" ]; then
    mount -t proc gpuckpt-probe-proc "$proc" ||
      fail_install "the host's /proc shows another PID namespace and no /proc of this one can be mounted for CRIU's probe (the installer needs CAP_SYS_ADMIN: securityMode privileged, or installer.verify=false)."
  fi
}

# The host's CRIU loads the staged plugin: a dump of a PID that cannot exist loads every plugin in --libdir (and
# calls its init) before it looks for the process, so it fails after the plugin answered, touching nothing.
verify_plugin() {
  criu=${GPUCKPT_CRIU:-}
  [ -n "$criu" ] || criu=$(on_host sh -c 'command -v criu' 2>/dev/null || true)
  if [ -z "$criu" ]; then
    log "WARNING: no criu on this node's PATH (set installer.criuPath if it lives elsewhere): the plugin is installed" \
        "unverified; checkpoints need CRIU >= 4.0 here (gpuckpt doctor checks it)"
    return 0
  fi
  probe=$(probe_dir)
  probe_mounts
  mkdir -p "$(host_path "$probe")/lib" "$(host_path "$probe")/img"
  cp "$GPUCKPT_SRC_PLUGIN" "$(host_path "$probe")/lib/$plugin_name"
  pid_max=$(cat "$(host_path /proc/sys/kernel/pid_max)" 2>/dev/null || echo 4194304)
  on_host "$criu" dump -t "$pid_max" -D "$probe/img" --libdir "$probe/lib" -v4 -o probe.log >/dev/null 2>&1 || true
  probe_log=$(host_path "$probe")/img/probe.log
  if [ ! -f "$probe_log" ]; then
    fail_install "the host's CRIU ($criu) did not run: $(on_host "$criu" --version 2>&1 | head -3 | tr '\n' ' ')."
  fi
  # The plugin checks the CRIU version before it says "loaded" (criu-plugin/plugin.cpp); a too-old CRIU is named.
  if grep -q 'gpuckpt: this CRIU is too old' "$probe_log"; then
    fail_install "the host's CRIU ($criu, $(on_host "$criu" --version 2>/dev/null | sed -n 's/^Version: *//p')) is too old for gpuckpt: $(grep -o 'this CRIU is too old.*' "$probe_log" | head -1) (docs/deploy.md: installing CRIU >= 4.0)."
  fi
  if ! grep -q 'gpuckpt: plugin loaded for dump' "$probe_log"; then
    # The probe's own expected failures (no such process) are not the reason.
    why=$(grep -E 'Error|plugin|gpuckpt' "$probe_log" | grep -vE 'RLIMIT|infect\.c|Dumping FAILED|No such process' | tail -5 | tr '\n' ' ')
    fail_install "the host's CRIU ($criu, $(on_host "$criu" --version 2>/dev/null | sed -n 's/^Version: *//p')) does not load gpuckpt_plugin.so: $why(gpuckpt needs CRIU >= 4.0; a file that does not load at all is a broken image: docs/troubleshooting.md)."
  fi
  log "verified: $criu $(on_host "$criu" --version 2>/dev/null | sed -n 's/^Version: *//p') loads $plugin_name"
}

# CRIU loads every *.so in its directory and asks them in turn: two GPU plugins would both act on one process.
resolve_other_gpu_plugins() {
  dir=$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")
  for other in $other_gpu_plugins; do
    [ -e "$dir/$other" ] || continue
    case "${GPUCKPT_OTHER_GPU_PLUGINS:-disable}" in
      refuse) fail_install "$GPUCKPT_CRIU_PLUGIN_DIR/$other (CRIU's own GPU plugin) is installed and CRIU would load it next to gpuckpt's, both acting on the same processes. Remove it (e.g. the distribution's criu-cuda-plugin/criu-amdgpu-plugin package), or set installer.otherGpuPlugins=disable to let gpuckpt move it aside while it is installed." ;;
      disable)
        mv -f "$dir/$other" "$dir/$other$disabled_suffix" || fail_install "cannot move $GPUCKPT_CRIU_PLUGIN_DIR/$other aside."
        grep -qx "$other" "$(disabled_list)" 2>/dev/null || printf '%s\n' "$other" >> "$(disabled_list)"
        log "moved CRIU's $other aside to $other$disabled_suffix while gpuckpt's plugin is installed (put back on removal)" ;;
      *) fail_install "GPUCKPT_OTHER_GPU_PLUGINS=${GPUCKPT_OTHER_GPU_PLUGINS} (installer.otherGpuPlugins) must be disable or refuse." ;;
    esac
  done
}

restore_other_gpu_plugins() {
  dir=$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")
  [ -f "$(disabled_list)" ] || return 0
  while read -r other; do
    case " $other_gpu_plugins " in *" $other "*) ;; *) continue ;; esac   # only names this script moves
    if [ -e "$dir/$other$disabled_suffix" ] && [ ! -e "$dir/$other" ]; then
      mv -f "$dir/$other$disabled_suffix" "$dir/$other" && log "put CRIU's $other back"
    fi
  done < "$(disabled_list)"
  rm -f "$(disabled_list)"
}

# CRI-O's traces on the node. /var/run is usually an absolute symlink to /run: under the host mount it would point
# into this container, so it is looked at only where it is a real directory.
crio_evidence() {
  for p in /etc/crio /run/crio/crio.sock /usr/bin/crio /usr/local/bin/crio /usr/sbin/crio; do
    [ -e "$(host_path "$p")" ] && { printf '%s' "$p"; return 0; }
  done
  if [ ! -L "$(host_path /var/run)" ] && [ -e "$(host_path /var/run/crio/crio.sock)" ]; then
    printf '%s' /var/run/crio/crio.sock; return 0
  fi
  return 1
}

# The stages a hooks.d entry asks for, space-separated (entries are one JSON object; "stages" holds plain names).
entry_stages() { tr -d '\n' < "$1" | sed -n 's/.*"stages"[[:space:]]*:[[:space:]]*\[\([^]]*\)\].*/\1/p' | tr -d ' \t"' | tr ',' ' '; }

# The stages CRI-O accepts: the OCI runtime-spec hooks, and no extension stage (CRI-O passes none to containers'
# hooks library: internal/lib/container_server.go, hooks.New(ctx, dirs, []string{})).
crio_rejected_stage() {
  for stage in $(entry_stages "$1"); do
    case "$stage" in prestart|createRuntime|createContainer|startContainer|poststart|poststop) ;; *) printf '%s' "$stage"; return 0 ;; esac
  done
  return 1
}

ours() { head -1 "$1" 2>/dev/null | grep -qxF "$config_marker"; }

# Why runc on this node needs `manage-cgroups ignore` in runc.conf, or nothing. runc before 1.2 on cgroup v2 gives
# CRIU no cgroup root (runc 3438ef30b does): CRIU then restores a process into the checkpointed container's cgroup,
# with that container's device filter and limits, not the new container's (a GPU restore could then open GPUs its
# pod was not given: measured with containerd 2.1.9 and CRI-O 1.36.3 on 2x H100, docs/kubernetes.md). With the line
# CRIU leaves it where runc put CRIU: the new container's cgroup. A runc that does not answer on cgroup v2 gets it
# too (the safe side); cgroup v1 and runc >= 1.2 do not need it.
runc_cgroup_reason() {
  [ -e "$(host_path /sys/fs/cgroup/cgroup.controllers)" ] || return 0
  version=$(on_host runc --version 2>/dev/null | sed -n 's/^runc version \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1) || version=
  case "$version" in
    '') echo "cgroup v2 and the host's runc did not say its version" ;;
    0.*|1.0|1.0.*|1.1|1.1.*) echo "runc $version on cgroup v2" ;;
  esac
}

install_criu_configs() {
  [ -n "${GPUCKPT_CRIU_CONFIG_DIR:-}" ] || return 0
  need GPUCKPT_CRIU_CONFIG_SRC
  head -1 "$GPUCKPT_CRIU_CONFIG_SRC" | grep -qxF "$config_marker" || die "$GPUCKPT_CRIU_CONFIG_SRC does not start with '$config_marker'"
  runc_reason=$(runc_cgroup_reason)
  for name in ${GPUCKPT_CRIU_CONFIG_NAMES:-runc.conf crun.conf}; do
    dest="$(host_path "$GPUCKPT_CRIU_CONFIG_DIR")/$name"
    if [ -e "$dest" ] && ! ours "$dest"; then
      log "WARNING: $GPUCKPT_CRIU_CONFIG_DIR/$name exists and is not gpuckpt's: left as it is. Add gpuckpt's options to it yourself (docs/deploy.md#criu-configuration), or remove it to let gpuckpt manage it."
      continue
    fi
    if [ "$name" = runc.conf ] && [ -n "$runc_reason" ]; then
      s=$(stage "$GPUCKPT_CRIU_CONFIG_SRC" "$dest" 0644)
      printf '# Added by the installer (%s): keeps a restored process in its new container'"'"'s cgroup.\nmanage-cgroups ignore\n' \
        "$runc_reason" >> "$s" || { rm -f "$s"; die "cannot write $s on the host"; }
      commit "$s" "$dest"
      log "$GPUCKPT_CRIU_CONFIG_DIR/runc.conf: manage-cgroups ignore ($runc_reason: restores would otherwise land in the checkpointed container's cgroup)"
    else
      put "$GPUCKPT_CRIU_CONFIG_SRC" "$dest" 0644
    fi
  done
}

# The plugin reads its GPU memory settings from gpuckpt_plugin.env beside it (CRIU loads only *.so from there).
install_plugin_settings() {
  [ -n "${GPUCKPT_PLUGIN_SETTINGS_SRC:-}" ] || return 0
  ours "$GPUCKPT_PLUGIN_SETTINGS_SRC" || die "$GPUCKPT_PLUGIN_SETTINGS_SRC does not start with '$config_marker'"
  dest="$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/$settings_name"
  if [ -e "$dest" ] && ! ours "$dest"; then
    log "WARNING: $GPUCKPT_CRIU_PLUGIN_DIR/$settings_name exists and is not gpuckpt's: left as it is (the plugin reads it; remove it to let gpuckpt manage it)."
    return 0
  fi
  put "$GPUCKPT_PLUGIN_SETTINGS_SRC" "$dest" 0644
}

remove_plugin_settings() {
  dest="$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/$settings_name"
  if ours "$dest"; then rm -f "$dest"; fi
}

remove_criu_configs() {
  [ -n "${GPUCKPT_CRIU_CONFIG_DIR:-}" ] || return 0
  for name in ${GPUCKPT_CRIU_CONFIG_NAMES:-runc.conf crun.conf}; do
    dest="$(host_path "$GPUCKPT_CRIU_CONFIG_DIR")/$name"
    if ours "$dest"; then rm -f "$dest"; fi
  done
}

# CRIU 4.0 and 4.1.x crash (segfault) in swrk mode, the way runc, crun, podman, containerd and CRI-O run it, on a
# `network-lock` line in the config file the runtime hands it (fixed in CRIU 4.2, PR #3051): shipping one to such a
# node would break every checkpoint there, GPU or not. Decided by the host CRIU's version, before anything is placed.
check_criu_config_options() {
  [ -n "${GPUCKPT_CRIU_CONFIG_DIR:-}" ] && [ -f "${GPUCKPT_CRIU_CONFIG_SRC:-}" ] || return 0
  grep -Eq '^[[:space:]]*(--)?network-lock([[:space:]=]|$)' "$GPUCKPT_CRIU_CONFIG_SRC" || return 0
  criu=${GPUCKPT_CRIU:-}
  [ -n "$criu" ] || criu=$(on_host sh -c 'command -v criu' 2>/dev/null || true)
  version=""
  [ -z "$criu" ] || version=$(on_host "$criu" --version 2>/dev/null | sed -n 's/^Version: *\([0-9][0-9.]*\).*/\1/p' | head -1)
  if [ -z "$version" ]; then
    log "WARNING: criuConfig.extraOptions sets network-lock and this node's CRIU version is not known: CRIU 4.0 and" \
        "4.1.x crash on that line in the runtimes' config file (every checkpoint fails); it needs CRIU >= 4.2"
    return 0
  fi
  major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}
  if [ "$major" -gt 4 ] || { [ "$major" -eq 4 ] && [ "$minor" -ge 2 ]; }; then return 0; fi
  fail_install "criuConfig.extraOptions sets network-lock, and this node's CRIU ($criu, $version) crashes (segfault) reading that line from the runtimes' config file in swrk mode: every checkpoint through runc, crun, podman, containerd or CRI-O would fail (fixed in CRIU 4.2, PR #3051). Upgrade the node's CRIU to >= 4.2, or drop network-lock from criuConfig.extraOptions."
}

cmd_install() {
  for v in GPUCKPT_HOOKS_DIR GPUCKPT_CRIU_PLUGIN_DIR GPUCKPT_INSTALL_DIR GPUCKPT_HOOK_JSON_DIR GPUCKPT_SRC_HOOK \
           GPUCKPT_SRC_PLUGIN GPUCKPT_OWNER; do need "$v"; done
  set -- "$GPUCKPT_HOOK_JSON_DIR"/gpuckpt-hook*.json
  [ -f "$1" ] || die "no gpuckpt-hook*.json in $GPUCKPT_HOOK_JSON_DIR (they come from the chart's ConfigMap)"
  hook_dest="$(host_path "$GPUCKPT_INSTALL_DIR")/bin/$hook_name"
  plugin_dest="$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/$plugin_name"
  # 1. stage (nothing the runtime or CRIU reads changes)
  staged_hook=$(stage "$GPUCKPT_SRC_HOOK" "$hook_dest" 0755)
  staged_plugin=$(stage "$GPUCKPT_SRC_PLUGIN" "$plugin_dest" 0644)
  # 2. verify on the host
  check_criu_config_options
  case "${GPUCKPT_VERIFY:-true}" in
    true)
      [ -x "$GPUCKPT_HOST_MOUNT/bin/sh" ] || fail_install "GPUCKPT_VERIFY=true needs the host's root at GPUCKPT_HOST_MOUNT=$GPUCKPT_HOST_MOUNT (no bin/sh there)."
      verify_hook
      verify_plugin ;;
    false) log "WARNING: installer.verify=false: the hook and the plugin are placed without running them on this node" ;;
    *) fail_install "GPUCKPT_VERIFY=${GPUCKPT_VERIFY} (installer.verify) must be true or false." ;;
  esac
  # 3. other GPU plugins, then place: binary, plugin, hooks.d entries, CRIU config, owner mark
  resolve_other_gpu_plugins
  rm -rf "$(host_path "$(probe_dir)")"
  commit "$staged_hook" "$hook_dest"
  commit "$staged_plugin" "$plugin_dest"
  install_plugin_settings
  crio=$(crio_evidence) || crio=""
  for entry in "$@"; do
    dest="$(host_path "$GPUCKPT_HOOKS_DIR")/$(basename "$entry")"
    if [ -n "$crio" ] && rejected=$(crio_rejected_stage "$entry"); then
      log "CRI-O runs on this node ($crio found): $(basename "$entry") (stage $rejected) is not installed, because CRI-O" \
          "exits at start on a hooks.d stage it does not know (podman on this node restores without it; gpuckpt-nri" \
          "does that work for CRI-O)"
      if [ -e "$dest" ]; then rm -f "$dest" && log "removed $GPUCKPT_HOOKS_DIR/$(basename "$entry") left by an earlier install"; fi
      continue
    fi
    put "$entry" "$dest" 0644
  done
  install_criu_configs
  tmp="$(owner_file).tmp.$$"
  printf '%s\n' "$GPUCKPT_OWNER" > "$tmp" && mv -f "$tmp" "$(owner_file)"
  log "owner mark $GPUCKPT_OWNER written to $(owner_file)"
}

# The pod stops (a rolling update, a drain) while its agent may still be finishing a job: on SIGTERM it gives running
# jobs limits.shutdown_grace_seconds and lets a runtime call in flight finish, and that call's CRIU needs the plugin
# and gpuckpt's CRIU config. So the files stay until the agent no longer listens on GPUCKPT_AGENT_PORT (the pod's
# own network), at most GPUCKPT_REMOVE_WAIT_SECONDS; without a port (or without bash to probe it) nothing waits.
wait_for_agent_exit() {
  port=${GPUCKPT_AGENT_PORT:-}
  [ -n "$port" ] || return 0
  case "$port" in *[!0-9]*) log "GPUCKPT_AGENT_PORT='$port' is not a port number: not waiting for the agent"; return 0 ;; esac
  limit=${GPUCKPT_REMOVE_WAIT_SECONDS:-60}
  case "$limit" in ''|*[!0-9]*) limit=60 ;; esac
  waited=0
  while [ "$waited" -lt "$limit" ] && bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; do
    [ "$waited" = 0 ] && log "the agent still answers on port $port: waiting for it to end its jobs before removing the host files (at most ${limit} s)"
    sleep 1
    waited=$((waited + 1))
  done
  [ "$waited" -gt 0 ] && log "waited ${waited} s for the agent"
  return 0
}

cmd_remove() {
  for v in GPUCKPT_HOOKS_DIR GPUCKPT_CRIU_PLUGIN_DIR GPUCKPT_INSTALL_DIR GPUCKPT_OWNER; do need "$v"; done
  wait_for_agent_exit
  owner=$(cat "$(owner_file)" 2>/dev/null || true)
  if [ -n "$owner" ] && [ "$owner" != "$GPUCKPT_OWNER" ]; then
    log "host files belong to pod $owner (a newer pod installed them): leaving them in place"
    return 0
  fi
  rm -f "$(host_path "$GPUCKPT_HOOKS_DIR")"/gpuckpt-hook.json "$(host_path "$GPUCKPT_HOOKS_DIR")"/gpuckpt-hook-precreate.json \
        "$(host_path "$GPUCKPT_HOOKS_DIR")"/gpuckpt-hook-poststop.json
  rm -f "$(host_path "$GPUCKPT_INSTALL_DIR")/bin/$hook_name"
  rm -f "$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/$plugin_name"
  remove_plugin_settings
  discard_staged
  restore_other_gpu_plugins
  remove_criu_configs
  rm -f "$(owner_file)"
  rmdir "$(host_path "$GPUCKPT_INSTALL_DIR")/bin" 2>/dev/null || true
  log "removed the OCI hook, its hooks.d entries, the CRIU plugin, its settings and gpuckpt's CRIU config from the host"
}

cmd_hold() {
  child=""
  # The sleeping child goes too: it must not outlive this process (and hold its stdout open).
  trap 'kill "$child" 2>/dev/null; exit 0' TERM INT
  log "holding; host files are removed by the preStop hook when this pod stops"
  while :; do sleep 3600 & child=$!; wait "$child" || true; done
}

cmd_render_config() {
  for v in GPUCKPT_CONFIG_IN GPUCKPT_CONFIG_OUT NODE_NAME; do need "$v"; done
  case "$NODE_NAME${NODE_IP:-}" in *[!A-Za-z0-9.:-]*) die "unexpected characters in NODE_NAME/NODE_IP: $NODE_NAME ${NODE_IP:-}";; esac
  ip=${NODE_IP:-}
  case "$ip" in *:*) ip="[$ip]" ;; esac   # @NODE_IP@ stands in URLs: IPv6 needs brackets
  tmp="$GPUCKPT_CONFIG_OUT.tmp.$$"
  sed -e "s/@NODE_NAME@/$NODE_NAME/g" -e "s/@NODE_IP@/$ip/g" "$GPUCKPT_CONFIG_IN" > "$tmp"
  mv -f "$tmp" "$GPUCKPT_CONFIG_OUT"
  log "agent config written to $GPUCKPT_CONFIG_OUT for node $NODE_NAME"
}

case "${1:-}" in
  install) cmd_install ;;
  remove) cmd_remove ;;
  hold) cmd_hold ;;
  render-config) cmd_render_config ;;
  *) die "usage: host-files.sh install|remove|hold|render-config (got '${1:-}')" ;;
esac
