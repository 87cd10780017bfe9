// The hardware seam of the AMD backend: every call that reaches /dev/kfd, a DRM render node or buffer-object
// memory goes through AmdDevice. The system implementation forwards to the kernel; tests use the one fake, the
// simulated KFD/DRM device (test/amd/sim/). Functions return -errno on failure and never throw.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpuckpt::amd {

// Moves bytes between a buffer object (reached through its dmabuf fd) and host memory.
class BoCopier {
 public:
  virtual ~BoCopier() = default;
  virtual const char* name() const = 0;   // "cpu" or "sdma"
  virtual Result<void> read(int dmabuf_fd, std::uint64_t bo_offset, void* dst, std::size_t count) = 0;
  virtual Result<void> write(int dmabuf_fd, std::uint64_t bo_offset, const void* src, std::size_t count) = 0;
};

class AmdDevice {
 public:
  virtual ~AmdDevice() = default;

  // open(2) of a device path ("/dev/kfd", "/dev/dri/renderD128"): an fd (close-on-exec) or -errno.
  virtual int open(const char* path, int flags) = 0;
  virtual int close(int fd) = 0;
  virtual int stat(const char* path, struct stat* st) = 0;
  virtual int fstat(int fd, struct stat* st) = 0;
  // ioctl(2): 0 (or the ioctl's non-negative result) or -errno; EINTR/EAGAIN are retried.
  virtual int ioctl(int fd, unsigned long request, void* arg) = 0;
  // fcntl(F_DUPFD_CLOEXEC, min_fd): a new fd >= min_fd or -errno.
  virtual int dup_above(int fd, int min_fd) = 0;

  // Whether `fd` is a dmabuf; 0 and its inode (the same for every fd of one dma-buf) or -ENOTSUP.
  virtual int dmabuf_inode(int fd, std::uint64_t* inode) = 0;
  // The inodes of the dmabuf fds a process holds (one entry per fd), read from /proc/<host_pid>/fd.
  virtual int process_dmabuf_inodes(const std::string& host_pid, std::vector<std::uint64_t>* inodes) = 0;
  // Every other process of the host (not the caller, not `except_pid`) holding an fd on one of the dma-bufs
  // `inodes`: one entry per (process, dma-buf), read from /proc/*/fd.
  struct DmabufHolder {
    std::string pid;
    std::uint64_t inode = 0;
  };
  virtual int dmabuf_holders(const std::vector<std::uint64_t>& inodes, const std::string& except_pid,
                             std::vector<DmabufHolder>* holders) = 0;

  // The fdinfo text of one of our fds (/proc/self/fdinfo/<fd>). For a DRM file the kernel appends its usage
  // stats (drm-client-id, drm-memory-* / drm-total-*), about the open file description, not about the fd: on an
  // fd CRIU received from the target they describe the target's DRM file.
  virtual int drm_fdinfo(int fd, std::string* text) = 0;
  // The GPU files a process holds, read from /proc/<host_pid>/fd and fdinfo: whether one is /dev/kfd, and every
  // render-node fd with its fdinfo text (two fds on one open file share its drm-client-id).
  struct RenderFile {
    int fd = -1;              // the number in that process
    int render_minor = -1;
    std::string fdinfo;
  };
  struct ProcessGpuFiles {
    bool has_kfd = false;
    std::vector<RenderFile> render;
  };
  virtual int process_gpu_files(const std::string& host_pid, ProcessGpuFiles* files) = 0;
  // A new fd (close-on-exec) on the open file behind fd `target_fd` of process `host_pid` (pidfd_getfd(2), Linux
  // 5.6+, allowed to its ptrace attacher): ioctls on it reach that process's file, as on an fd CRIU received.
  virtual int take_process_fd(const std::string& host_pid, int target_fd) = 0;

  // CPU access to BO memory through the BO's dmabuf fd (the CPU fallback of the copy path). The kernel refuses
  // (-EPERM) to map a VRAM BO allocated without CPU access (no KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC) or a userptr BO.
  virtual int bo_read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) = 0;
  virtual int bo_write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) = 0;

  // An SDMA copy engine on the GPU behind `render_fd` with a staging buffer of `buffer_size` bytes, or the
  // reason there is none (no libdrm_amdgpu, not an amdgpu node, ...); the caller decides on the CPU path.
  virtual Result<std::unique_ptr<BoCopier>> make_sdma_copier(int render_fd, std::size_t buffer_size) = 0;
};

std::unique_ptr<AmdDevice> make_system_amd_device();

// The CPU path: AmdDevice::bo_read/bo_write.
std::unique_ptr<BoCopier> make_cpu_copier(AmdDevice& device);

}  // namespace gpuckpt::amd
