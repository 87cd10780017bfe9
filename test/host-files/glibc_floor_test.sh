#!/usr/bin/env bash
# The host files as built depend on glibc only, at most GPUCKPT_GLIBC_FLOOR (cmake/HostBinary.cmake): their
# DT_NEEDED lists only glibc's libraries, no symbol needs a newer GLIBC_ version or any GLIBCXX_/CXXABI_/GCC_
# version (static libstdc++/libgcc), no libprotobuf; debug info lives in FILE.debug, linked by .gnu_debuglink.
#   glibc_floor_test.sh FLOOR SYSROOT_USED(ON|OFF|TRUE|FALSE)
set -uo pipefail
BUILD=${GPUCKPT_BUILD_DIR:?set GPUCKPT_BUILD_DIR to the CMake build directory}
FLOOR=${1:?glibc floor}
SYSROOT_USED=${2:-}
if ! command -v objdump >/dev/null || ! command -v readelf >/dev/null; then echo "SKIP: binutils missing"; exit 77; fi
case "$SYSROOT_USED" in
  ON|TRUE|1) ;;
  *) echo "FAIL: the host files were not linked against a glibc $FLOOR root (GPUCKPT_HOST_SYSROOT missing or a"
     echo "      sanitizer build): run scripts/setup.sh, which makes it, and reconfigure"; exit 1 ;;
esac
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }

for f in "$BUILD/oci-hook/gpuckpt-oci-hook" "$BUILD/criu-plugin/gpuckpt_plugin.so"; do
  name=$(basename "$f")
  [ -f "$f" ] || { bad "$f not built"; continue; }
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort)
  extra=$(printf '%s\n' "$needed" | grep -vE '^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+)$')
  needed=$(tr "\n" " " <<<"$needed")   # one line
  if [ -z "$extra" ]; then ok; else bad "$name needs libraries beyond glibc: $extra (all of: $needed)"; fi
  newest=$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  if [ -n "$newest" ] && version_le "$newest" "$FLOOR"; then ok; else
    bad "$name needs GLIBC_$newest, newer than the floor $FLOOR:"; objdump -T "$f" | grep -E "GLIBC_$newest" | head; fi
  foreign=$(objdump -T "$f" | grep -oE '(GLIBCXX|CXXABI|GCC)_[0-9.]+' | sort -u | tr '\n' ' ')
  if [ -z "$foreign" ]; then ok; else bad "$name binds to libstdc++/libgcc symbol versions: $foreign"; fi
  if objdump -T "$f" | grep -q 'google.*protobuf\|_ZN6google'; then bad "$name refers to protobuf dynamically"; else ok; fi
  if readelf -S "$f" | grep -q '\.debug_info'; then bad "$name still carries .debug_info"; else ok; fi
  link=$(readelf --string-dump=.gnu_debuglink "$f" 2>/dev/null | sed -n 's/^ *\[ *0\] *//p')
  if [ "$link" = "$name.debug" ] && readelf -S "$f.debug" 2>/dev/null | grep -q '\.debug_info'; then ok; else
    bad "$name: no .gnu_debuglink to $name.debug with the debug info (got '$link')"; fi
  echo "$name: $(stat -c %s "$f") bytes, needs GLIBC_$newest at most, libraries: $needed"
done
echo "$pass passed, $fail failed (glibc floor $FLOOR)"
[ "$fail" = 0 ]
