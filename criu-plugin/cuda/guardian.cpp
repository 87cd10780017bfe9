#include "criu-plugin/cuda/guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "criu-plugin/cuda/process_info.h"

namespace gpuckpt::cuda {
namespace {

// Runs in the guardian process: only plain syscalls and the driver, no CRIU services (its log fd is gone).
[[noreturn]] void guard(int pipe_fd, int log_fd, Driver* driver) {
  std::map<int, ProcessState> tracked;
  std::string buffer;
  bool finished = false;
  char chunk[256];
  for (;;) {
    ssize_t n = ::read(pipe_fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
    std::size_t eol;
    while ((eol = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, eol);
      buffer.erase(0, eol + 1);
      int pid = 0, state = 0;
      if (line == "done") finished = true;
      else if (std::sscanf(line.c_str(), "track %d %d", &pid, &state) == 2) tracked[pid] = static_cast<ProcessState>(state);
    }
  }
  if (finished || tracked.empty()) _exit(0);
  dprintf(log_fd, "gpuckpt guardian: CRIU ended without finishing the dump; returning %zu process(es) to their "
                  "state before the dump\n", tracked.size());
  for (const auto& [pid, initial] : tracked) {
    // CRIU's death detaches its tracees; give the kernel a moment to let them run again.
    for (int attempt = 0; attempt < 50 && process_alive(pid); ++attempt) {
      ProcessState now = ProcessState::Failed;
      int rc = driver->get_state(pid, &now);
      if (rc != kCudaSuccess) {
        dprintf(log_fd, "pid %d: cannot read its CUDA state: %s\n", pid, driver->describe(rc).c_str());
        usleep(100000);
        continue;
      }
      if (now == ProcessState::Checkpointed && initial != ProcessState::Checkpointed) {
        rc = driver->restore(pid, {});
        dprintf(log_fd, "pid %d: restore: %s\n", pid, rc == 0 ? "ok" : driver->describe(rc).c_str());
        if (rc != kCudaSuccess) { usleep(100000); continue; }
        continue;   // read the state again: now locked
      }
      if (now == ProcessState::Locked && initial == ProcessState::Running) {
        rc = driver->unlock(pid);
        dprintf(log_fd, "pid %d: unlock: %s\n", pid, rc == 0 ? "ok" : driver->describe(rc).c_str());
        if (rc != kCudaSuccess) { usleep(100000); continue; }
      }
      dprintf(log_fd, "pid %d: now %s\n", pid, to_string(now == ProcessState::Locked && initial == ProcessState::Running
                                                        ? ProcessState::Running : now));
      break;
    }
  }
  _exit(0);
}

}  // namespace

DumpGuardian::~DumpGuardian() {
  if (fd_ >= 0) ::close(fd_);   // without done(): the guardian acts, as if CRIU had died
}

Result<void> DumpGuardian::start(Driver* driver, int image_dir_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno), errno);
  pid_t child = ::fork();
  if (child < 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return make_error(std::string("fork of the dump guardian: ") + std::strerror(e), e);
  }
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) _exit(0);
    int log_fd = image_dir_fd >= 0 ? ::openat(image_dir_fd, "gpuckpt-guardian.log",
                                              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)
                                   : -1;
    if (log_fd < 0) log_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    // Keep nothing of CRIU's open: not its log, not its images, not a pipe a container runtime reads to EOF.
    int null_fd = ::open("/dev/null", O_RDWR);
    for (int target = 0; target < 3; ++target) ::dup2(null_fd, target);
    for (int fd = 3; fd < 65536; ++fd)
      if (fd != fds[0] && fd != log_fd) ::close(fd);
    ::signal(SIGPIPE, SIG_IGN);
    guard(fds[0], log_fd, driver);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  fd_ = fds[1];
  return {};
}

void DumpGuardian::send(const char* line) {
  if (fd_ < 0) return;
  std::size_t len = std::strlen(line);
  while (len > 0) {
    ssize_t n = ::write(fd_, line, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    line += n;
    len -= static_cast<std::size_t>(n);
  }
}

void DumpGuardian::track(int pid, ProcessState initial) {
  char line[64];
  std::snprintf(line, sizeof line, "track %d %d\n", pid, static_cast<int>(initial));
  send(line);
}

void DumpGuardian::done() {
  send("done\n");
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace gpuckpt::cuda
