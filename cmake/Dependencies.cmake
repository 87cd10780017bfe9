# Every third-party dependency comes from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
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
