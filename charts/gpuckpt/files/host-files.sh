#!/bin/sh
# Puts gpuckpt's node-side files onto the host and takes them away again. Runs in the agent image (POSIX sh).
#
#   host-files.sh install        copy the OCI hook binary, its hooks.d entries and the CRIU plugin onto the host
#   host-files.sh remove         remove them, if this pod is the one that installed them
#   host-files.sh hold           wait for SIGTERM (the sidecar whose preStop hook runs `remove`)
#   host-files.sh render-config  write the agent config with this pod's node name and IP filled in
#
# Environment (set by the chart; host paths as the container sees them, i.e. under GPUCKPT_HOST_MOUNT):
#   GPUCKPT_HOST_MOUNT      where the host's writable dirs are mounted (/host)
#   GPUCKPT_HOOKS_DIR       hooks.d on the host            GPUCKPT_CRIU_PLUGIN_DIR  CRIU plugin dir on the host
#   GPUCKPT_INSTALL_DIR     hook binary dir on the host    GPUCKPT_HOOK_JSON_DIR    holds the gpuckpt-hook*.json
#   GPUCKPT_SRC_HOOK        hook binary in the image       GPUCKPT_SRC_PLUGIN       CRIU plugin in the image
#   GPUCKPT_OWNER           this pod's UID: the owner mark that makes `remove` safe during rolling updates
#   GPUCKPT_CONFIG_IN/OUT   config template and output     NODE_NAME, NODE_IP       downward API
#
# Order matters: the runtime rejects (CRI-O, podman: stat at load time) a hooks.d entry whose binary is missing,
# so the binary goes in before the JSON and the JSON goes out before the binary. Every file is written to a
# temporary name beside its target and renamed into place, so the runtime never sees a half-written file and a
# running hook keeps its old binary.
set -eu

log() { printf 'gpuckpt host-files: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need() { eval "v=\${$1:-}"; [ -n "$v" ] || die "environment variable $1 is not set (the chart sets it: check the DaemonSet)"; }

host_path() { printf '%s%s' "${GPUCKPT_HOST_MOUNT:-}" "$1"; }

plugin_name=gpuckpt_plugin.so
hook_name=gpuckpt-oci-hook

# put SRC DEST MODE: atomic copy (temp file in DEST's directory, then rename).
put() {
  src=$1 dest=$2 mode=$3
  [ -f "$src" ] || die "$src is missing in the image: the installer copies it onto the host (see installer.source in values.yaml)"
  dir=$(dirname "$dest")
  mkdir -p "$dir" || die "cannot create $dir on the host: is the host path writable (read-only /usr? see docs/troubleshooting.md)"
  tmp="$dir/.$(basename "$dest").gpuckpt-tmp.$$"
  cp "$src" "$tmp" || { rm -f "$tmp"; die "cannot write $tmp on the host"; }
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest" || { rm -f "$tmp"; die "cannot rename $tmp to $dest"; }
  log "installed $dest"
}

owner_file() { printf '%s/.installed-by' "$(host_path "$GPUCKPT_INSTALL_DIR")"; }

cmd_install() {
  for v in GPUCKPT_HOOKS_DIR GPUCKPT_CRIU_PLUGIN_DIR GPUCKPT_INSTALL_DIR GPUCKPT_HOOK_JSON_DIR GPUCKPT_SRC_HOOK \
           GPUCKPT_SRC_PLUGIN GPUCKPT_OWNER; do need "$v"; done
  set -- "$GPUCKPT_HOOK_JSON_DIR"/gpuckpt-hook*.json
  [ -f "$1" ] || die "no gpuckpt-hook*.json in $GPUCKPT_HOOK_JSON_DIR (they come from the chart's ConfigMap)"
  put "$GPUCKPT_SRC_HOOK" "$(host_path "$GPUCKPT_INSTALL_DIR")/bin/$hook_name" 0755
  put "$GPUCKPT_SRC_PLUGIN" "$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/$plugin_name" 0644
  for entry in "$@"; do put "$entry" "$(host_path "$GPUCKPT_HOOKS_DIR")/$(basename "$entry")" 0644; done
  tmp="$(owner_file).tmp.$$"
  printf '%s\n' "$GPUCKPT_OWNER" > "$tmp" && mv -f "$tmp" "$(owner_file)"
  log "owner mark $GPUCKPT_OWNER written to $(owner_file)"
}

cmd_remove() {
  for v in GPUCKPT_HOOKS_DIR GPUCKPT_CRIU_PLUGIN_DIR GPUCKPT_INSTALL_DIR GPUCKPT_OWNER; do need "$v"; done
  owner=$(cat "$(owner_file)" 2>/dev/null || true)
  if [ -n "$owner" ] && [ "$owner" != "$GPUCKPT_OWNER" ]; then
    log "host files belong to pod $owner (a newer pod installed them): leaving them in place"
    return 0
  fi
  rm -f "$(host_path "$GPUCKPT_HOOKS_DIR")"/gpuckpt-hook*.json
  rm -f "$(host_path "$GPUCKPT_INSTALL_DIR")/bin/$hook_name"
  rm -f "$(host_path "$GPUCKPT_CRIU_PLUGIN_DIR")/$plugin_name"
  rm -f "$(owner_file)"
  rmdir "$(host_path "$GPUCKPT_INSTALL_DIR")/bin" 2>/dev/null || true
  log "removed the OCI hook, its hooks.d entries and the CRIU plugin from the host"
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
