// Locking every CUDA process of a dump at once, all or nothing. The driver's lock waits until a process's
// submitted CUDA work is done; the ranks of a job wait for each other (a collective needs every rank), so locking
// them one after another, each alone, can wait out the timeout on a rank whose peer is already locked (2x H100,
// driver 580: CUDA_ERROR_NOT_READY after 9.9 s). Locked together they drain together. If any lock fails, every
// process already locked is unlocked again: a dump never leaves part of a job paused.
#pragma once

#include <functional>
#include <vector>

namespace gpuckpt::cuda {

struct LockAttempt {
  int pid = 0;
  int result = 0;         // the lock's CUresult (0 = locked)
  double seconds = 0;     // how long the lock took
  int unlock_result = 0;  // when rolled back: the unlock's CUresult
  bool rolled_back = false;
};

struct LockAllOutcome {
  std::vector<LockAttempt> attempts;   // in the order of the pids given
  bool all_locked = false;
};

// Calls `lock(pid)` for every pid at the same time (one thread each), waits for all, and when one failed calls
// `unlock(pid)` for each that succeeded (again in parallel). Both return a CUresult.
LockAllOutcome lock_all(const std::vector<int>& pids, const std::function<int(int)>& lock,
                        const std::function<int(int)>& unlock);

}  // namespace gpuckpt::cuda
