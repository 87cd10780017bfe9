# gpuckpt_protobuf_lite: the protobuf lite runtime, compiled here as position-independent code and linked statically
# into everything gpuckpt builds. Debian ships libprotobuf.a without -fPIC (it cannot go into the CRIU plugin, a
# shared object) and libprotobuf.so.32 ties a host file to one distribution's protobuf and libstdc++. The sources are
# Debian's own source package of the installed protoc's version (scripts/setup.sh unpacks it with its patches), so
# generated code and runtime always match. Our .proto files use `optimize_for = LITE_RUNTIME`.
set(GPUCKPT_PROTOBUF_SOURCE_DIR "${GPUCKPT_PREFIX}/src/protobuf-${Protobuf_VERSION}" CACHE PATH
    "Unpacked protobuf source package matching protoc ${Protobuf_VERSION} (scripts/setup.sh puts it there)")
set(_pb_list "${GPUCKPT_PROTOBUF_SOURCE_DIR}/cmake/libprotobuf-lite.cmake")
if(NOT EXISTS "${_pb_list}")
  message(FATAL_ERROR "protobuf ${Protobuf_VERSION} sources not found at ${GPUCKPT_PROTOBUF_SOURCE_DIR} "
                      "(no cmake/libprotobuf-lite.cmake): run scripts/setup.sh, or set GPUCKPT_PROTOBUF_SOURCE_DIR "
                      "to an unpacked protobuf source tree of the same version as protoc")
endif()

# The lite runtime's file list, as protobuf's own CMake build names it.
file(STRINGS "${_pb_list}" _pb_lines REGEX "src/google/protobuf/.*\\.cc$")
set(_pb_sources "")
foreach(_line IN LISTS _pb_lines)
  string(STRIP "${_line}" _line)
  string(REPLACE "\${protobuf_SOURCE_DIR}" "${GPUCKPT_PROTOBUF_SOURCE_DIR}" _line "${_line}")
  list(APPEND _pb_sources "${_line}")
endforeach()
list(LENGTH _pb_sources _pb_count)
if(_pb_count LESS 10)
  message(FATAL_ERROR "${_pb_list} lists only ${_pb_count} lite sources: not a protobuf source tree this build knows")
endif()

add_library(gpuckpt_protobuf_lite STATIC ${_pb_sources})
target_include_directories(gpuckpt_protobuf_lite SYSTEM PUBLIC "${GPUCKPT_PROTOBUF_SOURCE_DIR}/src")
target_compile_definitions(gpuckpt_protobuf_lite PRIVATE HAVE_PTHREAD)
target_compile_options(gpuckpt_protobuf_lite PRIVATE -w)   # third-party code: its warnings are not ours to fix
target_link_libraries(gpuckpt_protobuf_lite PUBLIC Threads::Threads)
set_target_properties(gpuckpt_protobuf_lite PROPERTIES
  POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
