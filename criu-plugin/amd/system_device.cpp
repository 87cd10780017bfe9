// The kernel side of the seam: plain syscalls. BO memory is reached by mapping the BO's dmabuf (a dmabuf fd
// supports mmap, not pread/pwrite); the mapping is a window of at most one pass of the bounded buffer.
#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "criu-plugin/amd/amd_device.h"
#include "criu-plugin/amd/sdma_copier.h"

namespace gpuckpt::amd {
namespace {

int map_window(int fd, std::uint64_t offset, std::size_t count, int prot, void** base, std::size_t* length,
               std::size_t* skew) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset & ~(page - 1);
  *skew = static_cast<std::size_t>(offset - start);
  *length = *skew + count;
  *base = ::mmap(nullptr, *length, prot, MAP_SHARED, fd, static_cast<off_t>(start));
  return *base == MAP_FAILED ? -errno : 0;
}

class SystemAmdDevice final : public AmdDevice {
 public:
  int open(const char* path, int flags) override {
    const int fd = ::open(path, flags | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
  }
  int close(int fd) override { return ::close(fd) < 0 ? -errno : 0; }
  int stat(const char* path, struct stat* st) override { return ::stat(path, st) < 0 ? -errno : 0; }
  int fstat(int fd, struct stat* st) override { return ::fstat(fd, st) < 0 ? -errno : 0; }
  int ioctl(int fd, unsigned long request, void* arg) override {
    int ret;
    int retries = 200;
    do {
      ret = ::ioctl(fd, request, arg);
    } while (ret < 0 && (errno == EINTR || errno == EAGAIN) && retries-- > 0);
    return ret < 0 ? -errno : ret;
  }
  int dup_above(int fd, int min_fd) override {
    const int ret = ::fcntl(fd, F_DUPFD_CLOEXEC, min_fd);
    return ret < 0 ? -errno : ret;
  }
  // A dma-buf's file is named "dmabuf:<name>" on the internal dmabuf filesystem; /proc shows "/dmabuf:...".
  static bool is_dmabuf_link(const std::string& link) {
    return link.rfind("/dmabuf:", 0) == 0 || link.rfind("anon_inode:dmabuf", 0) == 0;
  }
  static std::string link_of(const std::string& path) {
    char buf[256];
    const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
    return n < 0 ? std::string() : std::string(buf, static_cast<std::size_t>(n));
  }
  int dmabuf_inode(int fd, std::uint64_t* inode) override {
    if (!is_dmabuf_link(link_of("/proc/self/fd/" + std::to_string(fd)))) return -ENOTSUP;
    struct stat st {};
    if (::fstat(fd, &st) < 0) return -errno;
    *inode = st.st_ino;
    return 0;
  }
  int process_dmabuf_inodes(const std::string& host_pid, std::vector<std::uint64_t>* inodes) override {
    const std::string dir = "/proc/" + host_pid + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) return -errno;
    while (const dirent* e = ::readdir(d)) {
      const std::string path = dir + "/" + e->d_name;
      struct stat st {};
      if (is_dmabuf_link(link_of(path)) && ::stat(path.c_str(), &st) == 0) inodes->push_back(st.st_ino);
    }
    ::closedir(d);
    return 0;
  }
  int dmabuf_holders(const std::vector<std::uint64_t>& inodes, const std::string& except_pid,
                     std::vector<DmabufHolder>* holders) override {
    const std::string self = std::to_string(::getpid());
    DIR* proc = ::opendir("/proc");
    if (!proc) return -errno;
    while (const dirent* p = ::readdir(proc)) {
      const std::string pid = p->d_name;
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (pid == self || pid == except_pid) continue;
      std::vector<std::uint64_t> held;
      if (process_dmabuf_inodes(pid, &held) < 0) continue;   // gone, or not ours to read
      std::sort(held.begin(), held.end());
      held.erase(std::unique(held.begin(), held.end()), held.end());
      for (auto inode : held) {
        if (std::find(inodes.begin(), inodes.end(), inode) != inodes.end()) holders->push_back({pid, inode});
      }
    }
    ::closedir(proc);
    return 0;
  }
  static int read_text(const std::string& path, std::string* text) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text->append(buf, static_cast<std::size_t>(n));
    const int err = n < 0 ? -errno : 0;
    ::close(fd);
    return err;
  }
  int drm_fdinfo(int fd, std::string* text) override {
    return read_text("/proc/self/fdinfo/" + std::to_string(fd), text);
  }
  // Files are told apart by the device they reach (stat through the /proc link), not by the link's text: in
  // another mount namespace the path the link shows need not be /dev/...
  int process_gpu_files(const std::string& host_pid, ProcessGpuFiles* files) override {
    struct stat kfd {};
    const bool kfd_known = ::stat("/dev/kfd", &kfd) == 0 && S_ISCHR(kfd.st_mode);
    const std::string dir = "/proc/" + host_pid + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) return -errno;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      struct stat st {};
      if (::stat((dir + "/" + e->d_name).c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
      if (kfd_known && st.st_rdev == kfd.st_rdev) {
        files->has_kfd = true;
        continue;
      }
      if (major(st.st_rdev) != 226 || minor(st.st_rdev) < 128) continue;
      RenderFile file;
      file.fd = std::atoi(e->d_name);
      file.render_minor = static_cast<int>(minor(st.st_rdev));
      if (read_text("/proc/" + host_pid + "/fdinfo/" + e->d_name, &file.fdinfo) < 0) continue;   // closed meanwhile
      files->render.push_back(std::move(file));
    }
    ::closedir(d);
    return 0;
  }
  int take_process_fd(const std::string& host_pid, int target_fd) override {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, std::atoi(host_pid.c_str()), 0));
    if (pidfd < 0) return -errno;
    const int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, target_fd, 0));
    const int err = errno;
    ::close(pidfd);
    return fd < 0 ? -err : fd;
  }
  int bo_read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) override {
    void* base;
    std::size_t length, skew;
    if (int err = map_window(dmabuf_fd, offset, count, PROT_READ, &base, &length, &skew)) return err;
    std::memcpy(dst, static_cast<char*>(base) + skew, count);
    ::munmap(base, length);
    return 0;
  }
  int bo_write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) override {
    void* base;
    std::size_t length, skew;
    if (int err = map_window(dmabuf_fd, offset, count, PROT_READ | PROT_WRITE, &base, &length, &skew)) return err;
    std::memcpy(static_cast<char*>(base) + skew, src, count);
    ::munmap(base, length);
    return 0;
  }
  Result<std::unique_ptr<BoCopier>> make_sdma_copier(int render_fd, std::size_t buffer_size) override {
    return make_libdrm_sdma_copier(render_fd, buffer_size);
  }
};

class CpuCopier final : public BoCopier {
 public:
  explicit CpuCopier(AmdDevice& device) : device_(device) {}
  const char* name() const override { return "cpu"; }
  Result<void> read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) override {
    if (int err = device_.bo_read(dmabuf_fd, offset, dst, count)) {
      return make_error("CPU read of " + std::to_string(count) + " bytes at BO offset " + std::to_string(offset) +
                            " failed: " + std::strerror(-err), -err);
    }
    return {};
  }
  Result<void> write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) override {
    if (int err = device_.bo_write(dmabuf_fd, offset, src, count)) {
      return make_error("CPU write of " + std::to_string(count) + " bytes at BO offset " + std::to_string(offset) +
                            " failed: " + std::strerror(-err), -err);
    }
    return {};
  }

 private:
  AmdDevice& device_;
};

}  // namespace

std::unique_ptr<AmdDevice> make_system_amd_device() { return std::make_unique<SystemAmdDevice>(); }
std::unique_ptr<BoCopier> make_cpu_copier(AmdDevice& device) { return std::make_unique<CpuCopier>(device); }

}  // namespace gpuckpt::amd
