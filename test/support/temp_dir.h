// A temporary directory for a test, open as a directory fd (what the image writers and readers take), removed
// with everything in it when the test ends.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace gpuckpt::test {

struct TempDir {
  std::filesystem::path path;
  int fd = -1;
  explicit TempDir(const char* prefix = "gpuckpt-test") {
    std::string tmpl = std::string("/tmp/") + prefix + ".XXXXXX";
    path = ::mkdtemp(tmpl.data());
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  ~TempDir() {
    ::close(fd);
    std::filesystem::remove_all(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace gpuckpt::test
