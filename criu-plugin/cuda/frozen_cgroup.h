// The cgroup freezer around a CUDA process. Every driver call but the restore-thread query is a handshake with
// a thread inside the process, so a frozen process never answers one. Two places meet a frozen process:
//  - PAUSE_DEVICES under a container runtime that pauses the container before it checkpoints it: containerd's
//    task.Checkpoint (every CRI CheckpointContainer) freezes the container's cgroup (runc pause) and hands the
//    frozen cgroup to CRIU (runc's freeze_cgroup). CRIU thaws it for plugins that ask it to seize without the
//    freezer, but CRIU 4.1.x runs PAUSE_DEVICES for the first process before that thaw (CRIU 4.2 thaws first,
//    criu commit fddca67cc). TemporaryThaw thaws the process for the driver's lock and freezes it again.
//  - CRIU killed mid-dump leaves the cgroup as it was then; the dump guardian thaws what holds the process
//    frozen before it puts the GPU state back (thaw_frozen_cgroups).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpuckpt::cuda {

// One cgroup's freezer: cgroup.freeze (v2) or freezer.state (v1) in `dir`.
struct FreezerControl {
  std::filesystem::path dir;
  bool v2 = true;
};

// Where the freezer holds a process: `own` is its cgroup (v2) or its freezer cgroup (v1), whose state says
// whether the kernel has it frozen; `holding` the controls set to frozen that keep it so: under v2 its cgroup
// and each ancestor whose cgroup.freeze is 1, under v1 its freezer cgroup when FROZEN or FREEZING.
struct ProcessFreezer {
  FreezerControl own;
  std::vector<FreezerControl> holding;
};

// The freezer of process `pid`; nullopt when it has none (the process is gone, or its cgroups have no freezer).
// An error when its cgroup path cannot be used here (outside this cgroup namespace). `proc` and `cgroup_root`
// are the procfs and cgroupfs mounts (fixture trees in tests).
Result<std::optional<ProcessFreezer>> process_freezer(int pid, const std::string& proc = "/proc",
                                                      const std::string& cgroup_root = "/sys/fs/cgroup");

// Thaws every control that holds process `pid` frozen (the guardian's repair). Returns one line per cgroup
// touched ("thawed PATH" or "cannot thaw PATH: why") for the guardian's log; empty when nothing was frozen.
std::vector<std::string> thaw_frozen_cgroups(int pid, const std::string& proc = "/proc",
                                             const std::string& cgroup_root = "/sys/fs/cgroup");

// The controls that held a process frozen, thawed for as long as this lives, and then frozen again: exactly
// those, so a container its runtime froze is frozen when the plugin returns to CRIU, whatever happened.
class TemporaryThaw {
 public:
  // Thaws what holds `pid` frozen (nothing when it runs) and waits up to `settle` for the kernel to report its
  // cgroup thawed. On an error everything is frozen again: a control that cannot be written, or a process that
  // stays frozen (a frozen cgroup this cannot reach, such as a frozen parent under cgroup v1).
  static Result<TemporaryThaw> begin(int pid, std::chrono::milliseconds settle, const std::string& proc = "/proc",
                                     const std::string& cgroup_root = "/sys/fs/cgroup");

  TemporaryThaw(TemporaryThaw&& other) noexcept;
  TemporaryThaw& operator=(TemporaryThaw&&) = delete;
  TemporaryThaw(const TemporaryThaw&) = delete;
  TemporaryThaw& operator=(const TemporaryThaw&) = delete;
  ~TemporaryThaw();   // refreeze() if not done

  // Freezes again what begin() thawed (once; later calls do nothing). An error names each control that could
  // not be written.
  Result<void> refreeze();

  bool thawed_any() const { return !thawed_.empty(); }
  // "/sys/fs/cgroup/a/b (cgroup v2), ..." for the log
  std::string describe() const;

 private:
  explicit TemporaryThaw(std::vector<FreezerControl> thawed) : thawed_(std::move(thawed)) {}
  std::vector<FreezerControl> thawed_;
};

}  // namespace gpuckpt::cuda
