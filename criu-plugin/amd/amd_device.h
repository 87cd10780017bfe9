// The hardware seam of the AMD backend: every call that reaches /dev/kfd, a DRM render node or buffer-object
// memory goes through AmdDevice. The system implementation forwards to the kernel; tests use the one fake, the
// simulated KFD/DRM device (test/amd/sim/). All functions return -errno on failure and never throw.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gpuckpt::amd {

class AmdDevice {
 public:
  virtual ~AmdDevice() = default;

  // open(2) of a device path relative to "/" (e.g. "/dev/kfd", "/dev/dri/renderD128"): an fd or -errno.
  virtual int open(const char* path, int flags) = 0;
  virtual int close(int fd) = 0;
  // ioctl(2): 0 (or the ioctl's non-negative result) or -errno.
  virtual int ioctl(int fd, unsigned long request, void* arg) = 0;
  // fcntl(F_DUPFD, min_fd): an fd >= min_fd or -errno.
  virtual int dup_above(int fd, int min_fd) = 0;
  // Buffer-object memory is reached through the fd that owns it at the offset the kernel gave for the BO
  // (KFD's mmap offset on /dev/kfd, or the DRM fake offset on a render node). Short transfers are allowed.
  virtual ssize_t pread(int fd, void* buf, std::size_t count, std::uint64_t offset) = 0;
  virtual ssize_t pwrite(int fd, const void* buf, std::size_t count, std::uint64_t offset) = 0;
};

std::unique_ptr<AmdDevice> make_system_amd_device();

}  // namespace gpuckpt::amd
