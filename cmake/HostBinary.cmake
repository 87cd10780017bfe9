# Files gpuckpt installs on nodes it does not control (the OCI hook, the CRIU plugin) must run on any distribution
# the chart may land on: one that cannot load them breaks every container start (the hook is registered for all
# containers) or every checkpoint on the node (CRIU aborts when any plugin fails to load).
#
# gpuckpt_host_binary(TARGET) makes TARGET depend on nothing but glibc, at most GPUCKPT_GLIBC_FLOOR:
#   - libstdc++ and libgcc linked statically; protobuf is the static lite runtime (ProtobufLite.cmake);
#   - glibc symbols bound against the oldest supported glibc: the link runs against a Debian bullseye root
#     (GPUCKPT_HOST_SYSROOT, glibc 2.31; scripts/setup.sh makes it with debootstrap), and base/glibc_compat.c
#     supplies the few symbols this compiler's static runtime expects from a newer glibc;
#   - debug info moved into TARGET_FILE.debug next to it (linked by .gnu_debuglink), so the installed file is small.
# test/host-files/ checks the floor (objdump) and runs the files in bullseye and trixie roots.
set(GPUCKPT_GLIBC_FLOOR 2.31 CACHE STRING "Newest glibc symbol version the hook and the plugin may need")

execute_process(COMMAND dpkg --print-architecture OUTPUT_VARIABLE GPUCKPT_DEB_ARCH
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT GPUCKPT_DEB_ARCH)
  set(GPUCKPT_DEB_ARCH unknown)
endif()
set(GPUCKPT_HOST_SYSROOT "${GPUCKPT_PREFIX}/roots/bullseye-${GPUCKPT_DEB_ARCH}" CACHE PATH
    "Root of the oldest supported distribution (glibc ${GPUCKPT_GLIBC_FLOOR}, with libc6-dev) the host files link against")

set(_sysroot_ok FALSE)
if(EXISTS "${GPUCKPT_HOST_SYSROOT}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libc_nonshared.a")
  set(_sysroot_ok TRUE)
endif()
if(GPUCKPT_SANITIZE)
  message(STATUS "host files: sanitizer build, linked against this system's glibc (not for installing on nodes)")
elseif(NOT _sysroot_ok)
  message(WARNING "host files: no glibc ${GPUCKPT_GLIBC_FLOOR} root at ${GPUCKPT_HOST_SYSROOT} (with libc6-dev): "
                  "the hook and the plugin link against this system's glibc and will not run on older nodes. "
                  "Run scripts/setup.sh, or set GPUCKPT_HOST_SYSROOT.")
endif()
set(GPUCKPT_HOST_SYSROOT_USED ${_sysroot_ok})
if(GPUCKPT_SANITIZE)
  set(GPUCKPT_HOST_SYSROOT_USED FALSE)
endif()

find_program(GPUCKPT_OBJCOPY NAMES objcopy REQUIRED)

function(gpuckpt_host_binary target)
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  set_target_properties(${target} PROPERTIES GPUCKPT_STATIC_CRYPTO ON)   # gpuckpt_crypto: libcrypto.a (Dependencies.cmake)
  if(GPUCKPT_HOST_SYSROOT_USED)
    # --sysroot alone still lets gcc take crt*.o and libc.so from its own (host) library directories first.
    set(_lib "${GPUCKPT_HOST_SYSROOT}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
    target_link_options(${target} PRIVATE "--sysroot=${GPUCKPT_HOST_SYSROOT}" "-B${_lib}" "-L${_lib}"
                        "-L${GPUCKPT_HOST_SYSROOT}/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
    # Before glibc 2.34 threads and dlopen live in libpthread and libdl.
    target_link_libraries(${target} PRIVATE gpuckpt_glibc_compat ${CMAKE_DL_LIBS} pthread)
  endif()
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${GPUCKPT_OBJCOPY} --only-keep-debug $<TARGET_FILE:${target}> $<TARGET_FILE:${target}>.debug
    COMMAND ${GPUCKPT_OBJCOPY} --strip-debug --strip-unneeded
            --add-gnu-debuglink=$<TARGET_FILE:${target}>.debug $<TARGET_FILE:${target}>
    WORKING_DIRECTORY $<TARGET_FILE_DIR:${target}>
    COMMENT "host file ${target}: debug info into $<TARGET_FILE_NAME:${target}>.debug"
    VERBATIM)
endfunction()
