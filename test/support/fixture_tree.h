// A writable copy of a fixture host tree (test/fixtures/<name>) for tests that break or renumber files.
#pragma once

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace gpuckpt::test {

inline std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(GPUCKPT_TEST_FIXTURES) / name;
}

class FixtureCopy {
 public:
  explicit FixtureCopy(const std::string& name) {
    static std::atomic<int> counter{0};
    root_ = std::filesystem::temp_directory_path() /
            ("gpuckpt-fixture-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name);
    std::filesystem::remove_all(root_);
    std::filesystem::copy(fixture(name), root_,
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  }
  ~FixtureCopy() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FixtureCopy(const FixtureCopy&) = delete;
  FixtureCopy& operator=(const FixtureCopy&) = delete;

  const std::filesystem::path& root() const { return root_; }
  std::string read(const std::string& relative) const {
    std::ifstream in(root_ / relative);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write(const std::string& relative, const std::string& text) const {
    std::filesystem::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative, std::ios::trunc) << text;
  }
  void remove(const std::string& relative) const { std::filesystem::remove_all(root_ / relative); }

 private:
  std::filesystem::path root_;
};

}  // namespace gpuckpt::test
