// The cgroup freezer state a dump leaves behind when CRIU dies in it. runc hands CRIU the container's cgroup
// to freeze (freeze_cgroup) and CRIU thaws it when it finishes; CRIU killed mid-dump leaves the container frozen
// for good. The dump guardian thaws what holds the process frozen before it puts the GPU state back.
#pragma once

#include <string>
#include <vector>

namespace gpuckpt::cuda {

// Thaws every freezer cgroup that holds process `pid` frozen: under cgroup v2 its own cgroup and each ancestor
// whose cgroup.freeze is 1; under v1 its freezer cgroup when freezer.state is FROZEN or FREEZING. `proc` and
// `cgroup_root` are the procfs and cgroupfs mounts (fixture trees in tests). Returns one line per cgroup
// touched ("thawed PATH" or "cannot thaw PATH: why") for the guardian's log; empty when nothing was frozen.
std::vector<std::string> thaw_frozen_cgroups(int pid, const std::string& proc = "/proc",
                                             const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace gpuckpt::cuda
