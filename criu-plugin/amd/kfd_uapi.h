// The KFD CRIU ioctls (linux/kfd_ioctl.h) through the device seam, with the errors they mean spelled out.
#pragma once

#include <linux/kfd_ioctl.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/result.h"
#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd {

// 1.7 added the CRIU ioctls, 1.8 made SDMA copies of GTT BOs safe during them: the floor CRIU's plugin uses.
inline constexpr std::uint32_t kKfdMajor = 1;
inline constexpr std::uint32_t kKfdMinMinor = 8;
// kfd_criu_bo_bucket::dmabuf_fd for BOs without a dmabuf (doorbell, MMIO, userptr): KFD_INVALID_FD.
inline constexpr std::uint32_t kKfdInvalidFd = 0xffffffffu;
inline constexpr std::uint32_t kBoContentFlags = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT;
inline constexpr std::uint32_t kBoMappedFlags = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT |
                                                KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL |
                                                KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP;
// Whether the kernel lets the CPU mmap a BO's dma-buf: amdgpu allocates a KFD VRAM BO without
// KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC as AMDGPU_GEM_CREATE_NO_CPU_ACCESS, and refuses to mmap it (EPERM); GTT BOs
// are always CPU-accessible. Only VRAM and GTT BOs have contents to copy.
inline constexpr bool bo_cpu_accessible(std::uint32_t alloc_flags) {
  return !(alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM) || (alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC) != 0;
}
inline constexpr unsigned kDrmMajor = 226;
inline constexpr unsigned kFirstRenderMinor = 128;

struct KfdVersion {
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
  bool supports_criu() const { return major == kKfdMajor && minor >= kKfdMinMinor; }
};

inline Result<KfdVersion> kfd_get_version(AmdDevice& device, int fd) {
  kfd_ioctl_get_version_args args{};
  if (int err = device.ioctl(fd, AMDKFD_IOC_GET_VERSION, &args); err < 0) {
    return make_error("AMDKFD_IOC_GET_VERSION on /dev/kfd failed: " + std::string(std::strerror(-err)), -err);
  }
  return KfdVersion{args.major_version, args.minor_version};
}

inline const char* criu_op_name(std::uint32_t op) {
  switch (op) {
    case KFD_CRIU_OP_PROCESS_INFO: return "PROCESS_INFO";
    case KFD_CRIU_OP_CHECKPOINT: return "CHECKPOINT";
    case KFD_CRIU_OP_UNPAUSE: return "UNPAUSE";
    case KFD_CRIU_OP_RESTORE: return "RESTORE";
    case KFD_CRIU_OP_RESUME: return "RESUME";
  }
  return "unknown";
}

// What KFD's permission checks on AMDKFD_IOC_CRIU_OP (kfd_chardev.c, kfd_ioctl) mean for the operator.
inline std::string criu_op_refusal(int err) {
  if (err == EACCES) {
    return " (KFD allows CRIU operations only to a caller with CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN: run CRIU "
           "with one of them)";
  }
  if (err == EBADF) {
    return " (KFD takes CRIU operations on another process's /dev/kfd only from that process's ptrace parent: "
           "the CRIU that seized it)";
  }
  return "";
}

// AMDKFD_IOC_CRIU_OP; the error names the operation, the kernel's errno and, for a refusal, what it requires.
inline Result<void> kfd_criu_op(AmdDevice& device, int fd, kfd_ioctl_criu_args& args, std::uint32_t op) {
  args.op = op;
  if (int err = device.ioctl(fd, AMDKFD_IOC_CRIU_OP, &args); err < 0) {
    return make_error(std::string("KFD CRIU ") + criu_op_name(op) + " failed: " + std::strerror(-err) +
                          criu_op_refusal(-err),
                      -err);
  }
  return {};
}

}  // namespace gpuckpt::amd
