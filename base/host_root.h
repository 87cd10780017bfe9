// The OS seam for files: every sysfs/procfs/dev path is read under a host root ("/" on a node, "/host" in the
// agent's pod, a fixture tree in tests). Paths given here are always relative to that root; a path that would
// leave the root (.., absolute symlink targets outside it) is refused.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpuckpt {

class HostRoot {
 public:
  explicit HostRoot(std::filesystem::path root = "/");

  const std::filesystem::path& root() const { return root_; }

  // The real path of `relative` ("sys/class/kfd/...") under the root; leading '/' is allowed and ignored.
  std::filesystem::path resolve(std::string_view relative) const;

  bool exists(std::string_view relative) const;
  Result<std::string> read_file(std::string_view relative, std::size_t max_bytes = 1 << 20) const;
  // The first line with the trailing newline removed.
  Result<std::string> read_line(std::string_view relative) const;
  Result<std::uint64_t> read_uint(std::string_view relative) const;   // decimal or 0x-hex
  // Entry names in a directory, sorted; an error if it cannot be read.
  Result<std::vector<std::string>> list_dir(std::string_view relative) const;
  // The target of a symlink, e.g. sys/class/drm/renderD128/device -> ../../../0000:03:00.0.
  Result<std::string> read_link(std::string_view relative) const;

 private:
  std::filesystem::path root_;
};

}  // namespace gpuckpt
