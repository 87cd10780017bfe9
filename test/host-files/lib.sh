# shellcheck shell=bash
# Helpers for the tests that run gpuckpt's host files inside debootstrap'd distribution roots (scripts/setup.sh
# makes them under $GPUCKPT_PREFIX/roots). Call them inside a private mount namespace (unshare --mount).

# mount_root BASE WORK: BASE through an overlay at WORK/root (the cached root stays pristine), with /proc, /dev and
# /sys mounted as CRIU and the loader need them. Prints the root's path.
mount_root() {
  local base=$1 w=$2
  mkdir -p "$w/upper" "$w/work" "$w/root"
  mount -t overlay overlay -o "lowerdir=$base,upperdir=$w/upper,workdir=$w/work" "$w/root" || return 1
  mount -t proc proc "$w/root/proc"
  mount --rbind /dev "$w/root/dev"
  mount --rbind /sys "$w/root/sys"
  printf '%s' "$w/root"
}

# bundle_criu ROOT: the CRIU bundle scripts/setup.sh installed (own loader and libraries; trixie's, or sid's where
# trixie's cannot dump here) at the same path in ROOT, with its wrapper as /usr/local/sbin/criu; for roots whose own
# CRIU is too old or absent.
bundle_criu() {
  local root=$1 prefix=${GPUCKPT_PREFIX:-/opt/gpuckpt} bundle
  bundle=$(grep -o "$prefix/criu[^/ ]*" /usr/local/sbin/criu 2>/dev/null | head -1)
  [ -n "$bundle" ] && [ -x "$bundle/usr/sbin/criu" ] || return 1
  mkdir -p "$root$bundle" "$root/usr/local/sbin"
  mount --bind "$bundle" "$root$bundle"
  cp /usr/local/sbin/criu "$root/usr/local/sbin/criu"
}

# root_base DIST: the cached root for DIST on this architecture.
root_base() { printf '%s/%s-%s' "${GPUCKPT_ROOTS_DIR:-${GPUCKPT_PREFIX:-/opt/gpuckpt}/roots}" "$1" "$(dpkg --print-architecture)"; }
