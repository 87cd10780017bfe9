// The system side of the seam where it can run without an AMD GPU: the CPU copy path's mmap windows (on a
// memfd standing in for a dmabuf), dmabuf recognition, the SDMA path declining where there is no amdgpu, and the
// /proc reads of the GEM refusal finding nothing in a process without GPU files.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <cerrno>
#include <numeric>
#include <string>
#include <vector>

#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd::test {

TEST_CASE("System device: CPU copies through mmap windows at unaligned offsets", "[unit]") {
  auto device = make_system_amd_device();
  const int fd = ::memfd_create("bo", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::size_t size = 3 * 4096 + 123;
  REQUIRE(::ftruncate(fd, size) == 0);
  std::vector<std::uint8_t> data(size);
  std::iota(data.begin(), data.end(), std::uint8_t{7});
  // A write that starts inside the first page and crosses two page boundaries.
  REQUIRE(device->bo_write(fd, 1000, data.data() + 1000, 9000) == 0);
  std::vector<std::uint8_t> back(9000);
  REQUIRE(::pread(fd, back.data(), back.size(), 1000) == 9000);
  CHECK(std::equal(back.begin(), back.end(), data.begin() + 1000));
  std::vector<std::uint8_t> read(5000);
  REQUIRE(device->bo_read(fd, 4095, read.data(), read.size()) == 0);
  CHECK(std::equal(read.begin(), read.end(), data.begin() + 4095));
  auto copier = make_cpu_copier(*device);
  CHECK(std::string(copier->name()) == "cpu");
  CHECK_FALSE(copier->read(-1, 0, read.data(), 16).ok());
  ::close(fd);
}

TEST_CASE("System device: only dma-bufs are taken for dmabufs; SDMA declines without amdgpu", "[unit]") {
  auto device = make_system_amd_device();
  const int fd = ::memfd_create("not-a-dmabuf", MFD_CLOEXEC);
  std::uint64_t inode = 0;
  CHECK(device->dmabuf_inode(fd, &inode) == -ENOTSUP);
  std::vector<std::uint64_t> inodes;
  CHECK(device->process_dmabuf_inodes("self", &inodes) == 0);
  CHECK(inodes.empty());
  // /dev/null is no amdgpu render node: libdrm_amdgpu (if present) fails to initialise, and the backend gets
  // the reason, which the copy-path policy names when it falls back to the CPU.
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  auto sdma = device->make_sdma_copier(null_fd, 1 << 20);
  REQUIRE_FALSE(sdma.ok());
  CHECK(sdma.error().message.rfind("SDMA: ", 0) == 0);
  ::close(null_fd);
  ::close(fd);
}

TEST_CASE("System device: a process without GPU files has no render files or KFD; fdinfo is read", "[unit]") {
  auto device = make_system_amd_device();
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  AmdDevice::ProcessGpuFiles files;
  REQUIRE(device->process_gpu_files(std::to_string(::getpid()), &files) == 0);
  CHECK_FALSE(files.has_kfd);
  CHECK(files.render.empty());
  std::string text;
  REQUIRE(device->drm_fdinfo(fd, &text) == 0);
  CHECK(text.find("pos:") != std::string::npos);   // the kernel's fdinfo of our fd, with no DRM keys
  CHECK(device->process_gpu_files("999999999", &files) == -ENOENT);
  // pidfd_getfd: a new fd on the same open file (here our own, which ptrace rules allow to ourselves).
  const int taken = device->take_process_fd(std::to_string(::getpid()), fd);
  REQUIRE(taken >= 0);
  CHECK(taken != fd);
  CHECK(::fcntl(taken, F_GETFD) == FD_CLOEXEC);
  struct stat a {}, b {};
  ::fstat(fd, &a);
  ::fstat(taken, &b);
  CHECK(a.st_ino == b.st_ino);
  CHECK(device->take_process_fd(std::to_string(::getpid()), 99999) == -EBADF);
  ::close(taken);
  ::close(fd);
}

}  // namespace gpuckpt::amd::test
