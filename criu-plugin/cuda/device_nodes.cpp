#include "criu-plugin/cuda/device_nodes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpuckpt::cuda {

Result<int> ensure_gpu_nodes(const std::string& root, const std::vector<GpuNode>& nodes) {
  if (nodes.empty()) return 0;
  // O_NOFOLLOW on each step: the process's /dev must be its own directory, not a link to somewhere of the host's.
  const int root_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return make_error("cannot open " + root + ": " + std::strerror(errno), errno);
  const int dev_fd = ::openat(root_fd, "dev", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int open_errno = errno;
  ::close(root_fd);
  if (dev_fd < 0)
    return make_error(root + "/dev is not a directory the plugin may use (" + std::strerror(open_errno) +
                          "); cannot give the restored process its GPU nodes",
                      open_errno);
  int created = 0;
  for (const auto& node : nodes) {
    const std::string name = "nvidia" + std::to_string(node.minor);
    const std::string where = root + "/dev/" + name;
    const dev_t wanted = makedev(node.major, node.minor);
    struct stat st {};
    if (::fstatat(dev_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISCHR(st.st_mode) && st.st_rdev == wanted) continue;
      ::close(dev_fd);
      return make_error(where + " is " + (S_ISCHR(st.st_mode) ? "device " + std::to_string(major(st.st_rdev)) + ":" +
                                                                   std::to_string(minor(st.st_rdev))
                                                             : std::string("not a character device")) +
                            ", not the GPU's " + std::to_string(node.major) + ":" + std::to_string(node.minor) +
                            "; left as it is",
                        EEXIST);
    }
    if (errno != ENOENT || ::mknodat(dev_fd, name.c_str(), S_IFCHR | 0666, wanted) != 0 ||
        ::fchmodat(dev_fd, name.c_str(), 0666, 0) != 0) {
      const int e = errno;
      ::close(dev_fd);
      return make_error("cannot make " + where + " (" + std::to_string(node.major) + ":" +
                            std::to_string(node.minor) + "): " + std::strerror(e),
                        e);
    }
    ++created;
  }
  ::close(dev_fd);
  return created;
}

}  // namespace gpuckpt::cuda
