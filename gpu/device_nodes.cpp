#include "gpu/device_nodes.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "base/host_root.h"

namespace gpuckpt {

namespace fs = std::filesystem;

DeviceNumberLookup stat_device_numbers(fs::path host_root) {
  return [root = HostRoot(std::move(host_root))](const std::string& host_path)
             -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    const fs::path real = root.resolve(host_path);
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0)
      return make_error("cannot stat device node " + real.string() + ": " + std::strerror(errno), errno);
    if (!S_ISCHR(st.st_mode)) return make_error(real.string() + " is not a character device");
    return std::make_pair(static_cast<std::uint32_t>(major(st.st_rdev)), static_cast<std::uint32_t>(minor(st.st_rdev)));
  };
}

bool is_gpu_device_path(std::string_view path) {
  if (path.size() > 128 || fs::path(path).lexically_normal().string() != path) return false;
  auto numbered = [](std::string_view rest) {
    return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  auto plain_name = [](std::string_view name) {
    return !name.empty() && name != "." && name != ".." && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
  };
  if (path == "/dev/kfd") return true;
  for (std::string_view prefix : {"/dev/dri/renderD", "/dev/dri/card"})
    if (path.substr(0, prefix.size()) == prefix) return numbered(path.substr(prefix.size()));
  if (path.substr(0, 17) == "/dev/nvidia-caps/") return plain_name(path.substr(17));
  if (path.substr(0, 11) == "/dev/nvidia") return path.find('/', 5) == std::string_view::npos && plain_name(path.substr(5));
  return false;
}

}  // namespace gpuckpt
