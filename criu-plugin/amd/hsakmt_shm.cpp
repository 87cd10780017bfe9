#include "criu-plugin/amd/hsakmt_shm.h"

#include <fcntl.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/log.h"

namespace gpuckpt::amd {
namespace {

Result<void> write_new_file(const std::string& path, const void* data, std::size_t size, std::uint64_t length) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (errno == EEXIST) return {};   // created meanwhile by someone else: theirs is as good
    return make_error("cannot create " + path + ": " + std::strerror(errno), errno);
  }
  ::fchmod(fd, 0666);   // the umask must not lock other users of libhsakmt out
  bool ok = ::ftruncate(fd, static_cast<off_t>(length)) == 0 &&
            ::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size);
  const int err = errno;
  ::close(fd);
  if (!ok) return make_error("cannot write " + path + ": " + std::strerror(err), err);
  return {};
}

}  // namespace

HsakmtSharedMem probe_hsakmt_shared_mem(const HostRoot& root) {
  HsakmtSharedMem out;
  const std::string path = root.resolve(kHsakmtShmPath).string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return out;
  out.size = static_cast<std::uint64_t>(st.st_size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (::read(fd, &out.magic, sizeof out.magic) != static_cast<ssize_t>(sizeof out.magic)) out.magic = 0;
    ::close(fd);
  }
  return out;
}

Result<void> restore_hsakmt_shared_mem(const HostRoot& root, const HsakmtSharedMem& saved, bool* recreated) {
  if (recreated) *recreated = false;
  if (saved.size == 0) return {};
  const std::string shm = root.resolve(kHsakmtShmPath).string();
  if (!root.exists(kHsakmtShmPath)) {
    log::warn("amd: " + shm + " was missing; recreating it (libhsakmt's performance counters start over)");
    GPUCKPT_TRY_VOID(write_new_file(shm, &saved.magic, sizeof saved.magic, saved.size));
    if (recreated) *recreated = true;
  }
  if (!root.exists(kHsakmtSemPath)) {
    // A named POSIX semaphore is a /dev/shm file holding one process-shared sem_t (what sem_open creates).
    sem_t sem;
    if (::sem_init(&sem, 1, 1) != 0) return make_error(std::string("sem_init failed: ") + std::strerror(errno), errno);
    GPUCKPT_TRY_VOID(write_new_file(root.resolve(kHsakmtSemPath).string(), &sem, sizeof sem, sizeof sem));
    if (recreated) *recreated = true;
  }
  return {};
}

}  // namespace gpuckpt::amd
