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

bool process_alive(int pid);   // exists and is not a zombie

}  // namespace gpuckpt::cuda
