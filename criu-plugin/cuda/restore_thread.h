// The CUDA restore thread: a helper thread the driver starts in every CUDA process; the driver's checkpoint,
// restore and unlock calls are carried out by that thread inside the target. While CRIU holds the task it is
// ptrace-stopped like every other thread, so around each driver call we let exactly this one thread run and
// stop it again. Only the tracer (CRIU's main thread, where hooks run) may do this.
#pragma once

#include <csignal>
#include <cstdint>

#include "base/result.h"

namespace gpuckpt::cuda {

class RunningRestoreThread {
 public:
  RunningRestoreThread() = default;
  RunningRestoreThread(RunningRestoreThread&& other) noexcept { *this = std::move(other); }
  RunningRestoreThread& operator=(RunningRestoreThread&& other) noexcept;
  ~RunningRestoreThread();   // stops the thread again if stop() was not called

  // Lets thread `tid` run with every signal but SIGTRAP blocked. When `tid` is not traced by this thread
  // (the task was never seized, or CRIU already let it go) it is running anyway: that is not an error.
  static Result<RunningRestoreThread> start(int tid);

  // Interrupts the thread and waits until it is in a ptrace stop again, with its options and signal mask back.
  Result<void> stop();

  int tid() const { return tid_; }

 private:
  int tid_ = -1;
  bool traced_ = false;
  std::uint64_t saved_mask_ = 0;
};

}  // namespace gpuckpt::cuda
