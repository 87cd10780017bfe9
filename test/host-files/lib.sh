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

# bundle_criu ROOT: the trixie CRIU bundle from scripts/setup.sh (own loader and libraries) at the same path in
# ROOT, with its wrapper as /usr/local/sbin/criu; for roots whose own CRIU is too old or absent.
bundle_criu() {
  local root=$1 prefix=${GPUCKPT_PREFIX:-/opt/gpuckpt}
  [ -x "$prefix/criu/usr/sbin/criu" ] || return 1
  mkdir -p "$root$prefix/criu" "$root/usr/local/sbin"
  mount --bind "$prefix/criu" "$root$prefix/criu"
  cp /usr/local/sbin/criu "$root/usr/local/sbin/criu"
}

# root_base DIST: the cached root for DIST on this architecture.
root_base() { printf '%s/%s-%s' "${GPUCKPT_ROOTS_DIR:-${GPUCKPT_PREFIX:-/opt/gpuckpt}/roots}" "$1" "$(dpkg --print-architecture)"; }
