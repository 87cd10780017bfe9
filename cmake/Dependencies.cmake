# Every third-party dependency comes from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)   # the agent's CRI and containerd clients (libgrpc++-dev, protobuf-compiler-grpc)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(LibArchive REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBDRM REQUIRED IMPORTED_TARGET libdrm libdrm_amdgpu)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)   # PkgConfig::HTTPLIB
if(GPUCKPT_BUILD_TESTS)
  find_package(Catch2 3 REQUIRED)
  include(Catch)
endif()
# GPU memory images (gpumem/gpu_image.cpp): zstd linked statically (its Debian archive is PIC) and xxHash used
# header-only, so the CRIU plugin needs neither library on the node it loads on.
find_library(GPUCKPT_ZSTD_STATIC NAMES libzstd.a REQUIRED)
find_path(GPUCKPT_ZSTD_INCLUDE zstd.h REQUIRED)
find_path(GPUCKPT_XXHASH_INCLUDE xxhash.h REQUIRED)
add_library(gpuckpt_zstd_static STATIC IMPORTED)
set_target_properties(gpuckpt_zstd_static PROPERTIES IMPORTED_LOCATION ${GPUCKPT_ZSTD_STATIC}
  INTERFACE_INCLUDE_DIRECTORIES "${GPUCKPT_ZSTD_INCLUDE};${GPUCKPT_XXHASH_INCLUDE}")
# Chunk store digests (gpumem/chunk_store.cpp): SHA-256 from OpenSSL's libcrypto (libssl-dev). The host files
# (the plugin, the hook: gpuckpt_host_binary sets GPUCKPT_STATIC_CRYPTO) link Debian's PIC libcrypto.a, of which the
# SHA-256 code pulls in a few KiB needing nothing but glibc; every other binary links libcrypto.so, which
# cpp-httplib and gRPC load anyway (one copy of OpenSSL per process). gpuckpt_crypto picks per linked target.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_library(GPUCKPT_CRYPTO_STATIC NAMES libcrypto.a REQUIRED)
add_library(gpuckpt_crypto_static STATIC IMPORTED)
set_target_properties(gpuckpt_crypto_static PROPERTIES IMPORTED_LOCATION ${GPUCKPT_CRYPTO_STATIC}
  INTERFACE_INCLUDE_DIRECTORIES "${OPENSSL_INCLUDE_DIR}")
add_library(gpuckpt_crypto INTERFACE)
target_link_libraries(gpuckpt_crypto INTERFACE
  "$<IF:$<BOOL:$<TARGET_PROPERTY:GPUCKPT_STATIC_CRYPTO>>,gpuckpt_crypto_static,OpenSSL::Crypto>")
