// The kernel side of the seam: plain syscalls, nothing else.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd {
namespace {

class SystemAmdDevice final : public AmdDevice {
 public:
  int open(const char* path, int flags) override {
    int fd = ::open(path, flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
  }
  int close(int fd) override { return ::close(fd) < 0 ? -errno : 0; }
  int ioctl(int fd, unsigned long request, void* arg) override {
    int ret;
    do {
      ret = ::ioctl(fd, request, arg);
    } while (ret < 0 && (errno == EINTR || errno == EAGAIN));
    return ret < 0 ? -errno : ret;
  }
  int dup_above(int fd, int min_fd) override {
    int ret = ::fcntl(fd, F_DUPFD, min_fd);
    return ret < 0 ? -errno : ret;
  }
  ssize_t pread(int fd, void* buf, std::size_t count, std::uint64_t offset) override {
    ssize_t n = ::pread(fd, buf, count, static_cast<off_t>(offset));
    return n < 0 ? -errno : n;
  }
  ssize_t pwrite(int fd, const void* buf, std::size_t count, std::uint64_t offset) override {
    ssize_t n = ::pwrite(fd, buf, count, static_cast<off_t>(offset));
    return n < 0 ? -errno : n;
  }
};

}  // namespace

std::unique_ptr<AmdDevice> make_system_amd_device() { return std::make_unique<SystemAmdDevice>(); }

}  // namespace gpuckpt::amd
