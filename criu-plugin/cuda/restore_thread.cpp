#include "criu-plugin/cuda/restore_thread.h"

#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gpuckpt::cuda {
namespace {

long trace(enum __ptrace_request request, int tid, void* addr, void* data) {
  return ptrace(request, tid, addr, data);
}

Error ptrace_error(const char* what, int tid) {
  int e = errno;
  return make_error(std::string(what) + " on CUDA restore thread " + std::to_string(tid) + " failed: " +
                    std::strerror(e), e);
}

void* as_data(unsigned long value) { return reinterpret_cast<void*>(value); }

}  // namespace

RunningRestoreThread& RunningRestoreThread::operator=(RunningRestoreThread&& other) noexcept {
  if (this != &other) {
    if (tid_ >= 0 && traced_) (void)stop();
    tid_ = other.tid_;
    traced_ = other.traced_;
    saved_mask_ = other.saved_mask_;
    other.tid_ = -1;
    other.traced_ = false;
  }
  return *this;
}

RunningRestoreThread::~RunningRestoreThread() {
  if (tid_ >= 0 && traced_) (void)stop();
}

Result<RunningRestoreThread> RunningRestoreThread::start(int tid) {
  RunningRestoreThread thread;
  thread.tid_ = tid;
  if (trace(PTRACE_GETSIGMASK, tid, as_data(sizeof(thread.saved_mask_)), &thread.saved_mask_) != 0) {
    if (errno == ESRCH) return thread;   // not our tracee, so not stopped by us: it runs already
    return ptrace_error("PTRACE_GETSIGMASK", tid);
  }
  thread.traced_ = true;
  // Nothing but the driver's own work may run: a signal handler here would run application code in a task
  // CRIU considers frozen.
  std::uint64_t block = ~0ULL & ~(1ULL << (SIGTRAP - 1));
  if (trace(PTRACE_SETSIGMASK, tid, as_data(sizeof(block)), &block) != 0) {
    thread.traced_ = false;
    return ptrace_error("PTRACE_SETSIGMASK", tid);
  }
  // No PTRACE_O_SUSPEND_SECCOMP while it runs: the driver's thread must obey the task's seccomp filter.
  if (trace(PTRACE_SETOPTIONS, tid, nullptr, nullptr) != 0 || trace(PTRACE_CONT, tid, nullptr, nullptr) != 0) {
    Error error = ptrace_error("PTRACE_CONT", tid);
    (void)trace(PTRACE_SETSIGMASK, tid, as_data(sizeof(thread.saved_mask_)), &thread.saved_mask_);
    thread.traced_ = false;
    return error;
  }
  return thread;
}

Result<void> RunningRestoreThread::stop() {
  if (tid_ < 0 || !traced_) {
    tid_ = -1;
    return {};
  }
  const int tid = tid_;
  tid_ = -1;
  traced_ = false;
  if (trace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) return ptrace_error("PTRACE_INTERRUPT", tid);
  for (;;) {
    int status = 0;
    pid_t got = waitpid(tid, &status, __WALL);
    if (got < 0) {
      if (errno == EINTR) continue;
      return ptrace_error("waitpid", tid);
    }
    if (WIFEXITED(status) || WIFSIGNALED(status))
      return make_error("CUDA restore thread " + std::to_string(tid) + " exited while the driver used it", ESRCH);
    if (!WIFSTOPPED(status)) continue;
    if ((status >> 16) == PTRACE_EVENT_STOP) break;
    // A signal-delivery stop (only SIGTRAP is unblocked): hand the signal back and wait for our interrupt.
    if (trace(PTRACE_CONT, tid, nullptr, as_data(static_cast<unsigned long>(WSTOPSIG(status)))) != 0)
      return ptrace_error("PTRACE_CONT", tid);
  }
  // The options compel uses for a seized task.
  unsigned long options = PTRACE_O_SUSPEND_SECCOMP | PTRACE_O_TRACESYSGOOD;
  if (trace(PTRACE_SETOPTIONS, tid, nullptr, as_data(options)) != 0 &&
      trace(PTRACE_SETOPTIONS, tid, nullptr, as_data(PTRACE_O_TRACESYSGOOD)) != 0)
    return ptrace_error("PTRACE_SETOPTIONS", tid);
  if (trace(PTRACE_SETSIGMASK, tid, as_data(sizeof(saved_mask_)), &saved_mask_) != 0)
    return ptrace_error("PTRACE_SETSIGMASK", tid);
  return {};
}

}  // namespace gpuckpt::cuda
