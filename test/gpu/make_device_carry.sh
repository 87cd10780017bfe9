#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks for the gpu tests and the benchmark: the CRIU bundle
# with a relocatable wrapper (.carry/bin/criu), the stripped plugin and the libraries Ubuntu 24.04 may not have,
# next to it (the plugin's RPATH is $ORIGIN; CRIU only loads *.so names, so libfoo.so.N files are ignored).
#   bash test/gpu/make_device_carry.sh [BUILD_DIR]     then name .carry in the device tool's carry list
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
CRIU_BUNDLE=${GPUCKPT_CRIU_BUNDLE:-/opt/gpuckpt/criu}
CARRY=$ROOT/.carry
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/lib"
cp -a "$CRIU_BUNDLE" "$CARRY/criu"
cat > "$CARRY/bin/criu" <<'WRAP'
#!/bin/sh
D=$(cd "$(dirname "$0")/../criu" && pwd)
exec "$D/usr/lib64/ld-linux-x86-64.so.2" --library-path "$D/usr/lib/x86_64-linux-gnu:$D/lib/x86_64-linux-gnu" "$D/usr/sbin/criu" "$@"
WRAP
chmod +x "$CARRY/bin/criu"
strip --strip-debug -o "$CARRY/lib/gpuckpt_plugin.so" "$BUILD/criu-plugin/gpuckpt_plugin.so"
for lib in $(ldd "$BUILD/criu-plugin/gpuckpt_plugin.so" | awk '/=> \//{print $3}'); do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libz.so.*) ;;   # present everywhere, and newer there
    *) cp -L "$lib" "$CARRY/lib/" ;;
  esac
done
du -sh "$CARRY"; ls "$CARRY/lib"
