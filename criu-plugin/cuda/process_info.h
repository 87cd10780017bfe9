// What /proc says about a process: the NVIDIA device files it holds open and its descendants.
#pragma once

#include <string>
#include <vector>

namespace gpuckpt::cuda {

inline constexpr unsigned kNvidiaMajor = 195;   // /dev/nvidia<minor>, /dev/nvidiactl (255), -modeset (254)

struct NvidiaFiles {
  std::vector<int> gpu_minors;   // N of every /dev/nvidiaN open, sorted, unique
  bool any = false;              // any NVIDIA device file open (nvidiactl, nvidia-uvm, a GPU)
};

// By the device numbers of the open files (stat through /proc/PID/fd), so a container's renamed device nodes
// still count. `proc` is the procfs mount ("/proc"; a fixture tree in tests).
NvidiaFiles nvidia_files(int pid, const std::string& proc = "/proc");

// Every descendant of `pid` (children, grandchildren, ...), from /proc/PID/task/TID/children.
std::vector<int> descendants(int pid, const std::string& proc = "/proc");

bool process_alive(int pid);

// The thread of process `pid` that the driver names `tid`, as this (the host's) PID namespace numbers it. The
// driver may answer with the thread id the process itself sees, which inside a container's PID namespace is
// another number than the one ptrace needs here: a thread of `pid` whose innermost NSpid is `tid` wins, then
// one whose id here is `tid`. -1 when `pid` has no such thread.
int thread_id_here(int pid, int tid, const std::string& proc = "/proc");   // exists and is not a zombie

}  // namespace gpuckpt::cuda
