#!/usr/bin/env bash
# Builds CRIU's development branch from a CRIU git repository and installs the binary as /usr/local/sbin/criu-dev,
# so that the plugin runs inside the next release's hook table (test criu_plugin_e2e_criu_dev; skipped without it).
# Not part of scripts/setup.sh: the build takes about 10 minutes on 2 cores.
#
#   scripts/build-criu-dev.sh CRIU_GIT_DIR [REF] [BUILD_DIR]
#     CRIU_GIT_DIR  a clone (or bare mirror) of https://github.com/checkpoint-restore/criu
#     REF           default 2cf8f13ca (criu-dev, 2025-11-16, v4.2-22: 15 plugin hooks, RESTORE_EXT_FILE with
#                   retry_needed, DUMP_DEVICES_LATE), the commit docs/amd.md records a run of
#     BUILD_DIR     default /tmp/gpuckpt-criu-dev (the source is exported there with `git archive`)
# Needs root (apt-get, /usr/local/sbin). Build dependencies are Debian packages, installed when missing.
set -euo pipefail

log() { printf '[criu-dev] %s\n' "$*" >&2; }
die() { printf '[criu-dev] ERROR: %s\n' "$*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 CRIU_GIT_DIR [REF] [BUILD_DIR]"
REPO=$1
REF=${2:-2cf8f13ca1f11a0491977e438b262e646137256c}
BUILD=${3:-/tmp/gpuckpt-criu-dev}
[ "$(id -u)" = 0 ] || die "run as root (apt-get, /usr/local/sbin)"
git -C "$REPO" rev-parse --verify -q "$REF^{commit}" >/dev/null \
  || die "$REPO has no commit '$REF': fetch CRIU's criu-dev branch into it, or name a commit it has"

PACKAGES=(make gcc pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  python3-protobuf libnl-3-dev libnet1-dev libcap-dev libgnutls28-dev libdrm-dev uuid-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed (apt-get update first?)"
fi

DESCRIBE=$(git -C "$REPO" describe --tags "$REF" 2>/dev/null || git -C "$REPO" rev-parse --short "$REF")
rm -rf "$BUILD"
mkdir -p "$BUILD"
git -C "$REPO" archive --format=tar "$REF" | tar -x -C "$BUILD"
log "building CRIU $DESCRIBE in $BUILD"
# GITID: an archive has no .git, from which CRIU's Makefile would take it; `criu --version` shows it.
nice -n 10 make -C "$BUILD" -j2 GITID="$DESCRIBE" criu > "$BUILD/build.log" 2>&1 \
  || { tail -30 "$BUILD/build.log" >&2; die "CRIU's build failed: $BUILD/build.log"; }
install -m 755 "$BUILD/criu/criu" /usr/local/sbin/criu-dev
/usr/local/sbin/criu-dev check >/dev/null 2>&1 || log "warning: 'criu-dev check' fails here: see /usr/local/sbin/criu-dev check"
log "installed /usr/local/sbin/criu-dev: $(/usr/local/sbin/criu-dev --version | tr '\n' ' ')"
