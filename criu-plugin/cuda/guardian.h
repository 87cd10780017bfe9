// The dump guardian: a small process outside CRIU's process tree that outlives a CRIU killed in the middle of
// a dump. CRIU's own clean-up (fini) never runs then, and a process it left locked or checkpointed would hang on
// its next CUDA call. The guardian learns every process the backend locks; when CRIU's end of the pipe closes
// without "done", it restores and unlocks each one that still lives, and writes what it did to
// gpuckpt-guardian.log in the image directory.
#pragma once

#include <memory>

#include "common/result.h"
#include "criu-plugin/cuda/cuda_driver.h"

namespace gpuckpt::cuda {

class DumpGuardian {
 public:
  DumpGuardian() = default;
  DumpGuardian(const DumpGuardian&) = delete;
  DumpGuardian& operator=(const DumpGuardian&) = delete;
  ~DumpGuardian();

  // Forks the guardian (double fork: it is not CRIU's child, so CRIU never waits for it). `driver` is the
  // already loaded driver the guardian will call; `image_dir_fd` (may be -1) is where its log goes.
  Result<void> start(Driver* driver, int image_dir_fd);
  bool running() const { return fd_ >= 0; }

  // The process was found in `initial` state and is now under gpuckpt's control.
  void track(int pid, ProcessState initial);
  // CRIU finished (whatever the outcome) and the backend's fini put every process where it belongs.
  void done();

 private:
  void send(const char* line);
  int fd_ = -1;
};

}  // namespace gpuckpt::cuda
