// The CUDA backend: CRIU hooks for processes that use NVIDIA GPUs through the driver's process checkpoint API.
// Everything it touches comes in through CudaBackendDeps, so the tests run the real hook functions against the
// simulated driver (test/criu-plugin/sim/), a fixture host tree and a temporary image directory; the plugin's
// entry (cuda_factory.cpp) hands in node_deps(): the driver host, the host's root, CRIU's services and the
// settings read once from CRIU's environment.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/host_root.h"
#include "base/result.h"
#include "criu-plugin/backend.h"
#include "criu-plugin/cuda/driver_host.h"
#include "criu-plugin/cuda/gpu_memory_path.h"

namespace gpuckpt::cuda {

// The backend's tunables, each logged once as "param: NAME:VALUE" where the backend uses it (docs/cuda.md).
struct CudaSettings {
  bool parallel = true;                  // GPUCKPT_CUDA_PARALLEL: driver calls for several processes at once
  bool guardian = true;                  // GPUCKPT_CUDA_GUARDIAN: the driver host repairs a dump CRIU abandoned
  long init_wait_ms = 2000;              // GPUCKPT_CUDA_INIT_WAIT_MS: how long a process inside cuInit() is awaited
  unsigned lock_timeout_ms = 10000;      // GPUCKPT_CUDA_LOCK_TIMEOUT_MS: the lock's timeout when CRIU armed none
  std::string driver_library;            // GPUCKPT_CUDA_LIBRARY: the libcuda.so.1 to load ("" = search for it)

  // The environment CRIU runs in. A value that is not a non-negative number is logged and its default used: a
  // typo must not break every dump on the node.
  static CudaSettings from_env();
};

// Time as the backend sees it: deadlines, the wait for a process inside cuInit(), the timings it logs.
struct CudaClock {
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<void(std::chrono::milliseconds)> sleep_for;
  static CudaClock steady();
};

// What the backend asks of the CRIU that loaded the plugin (criu-plugin/criu_host.h in production).
struct CudaCriuServices {
  std::function<int()> image_dir_fd;                // criu_get_image_dir(); -1 = unknown
  std::function<Result<void>()> add_to_inventory;   // names the plugin in CRIU's inventory image
  std::function<unsigned()> remaining_alarm_ms;     // what is left of CRIU's --timeout alarm; 0 = none armed
  std::function<bool()> alarm_timed_out;
  std::function<int()> final_state;                 // opts.final_state (criu::kTaskAlive with --leave-running)
  std::function<bool()> set_interrupt_only_mode;    // seize without the cgroup freezer
};

struct CudaBackendDeps {
  // Starts the process that makes every driver call (driver_host.h): forked from CRIU with libcuda loaded in it
  // in production, the simulated driver in tests. `image_dir_fd` is where the dump guardian logs.
  std::function<Result<std::unique_ptr<DriverSession>>(DriverHost::Mode mode, int image_dir_fd)> start_driver;
  HostRoot host{"/"};   // /proc (the processes' files, tasks, cgroups, roots), /sys/fs/cgroup, /dev, the driver's /proc
  CudaSettings settings;
  CudaClock clock = CudaClock::steady();
  CudaCriuServices criu;
  // Ends a restored process whose GPU state could not be put back (kill(2) in production): left as it is, it
  // would hang in its next CUDA call.
  std::function<int(int pid, int signal)> kill_task;
  // Never set on a node: the plugin tests build with real CRIU on machines without a GPU (gpu_memory_path.h).
  MemoryPathStandIns stand_ins;
};

// A node's: the driver host with the node's libcuda, the host's root /, CRIU's services (criu-plugin/criu_host.h),
// kill(2), the steady clock and the settings of CRIU's environment (CudaSettings::from_env).
CudaBackendDeps node_deps();

std::unique_ptr<plugin::Backend> make_cuda_backend(CudaBackendDeps deps);

}  // namespace gpuckpt::cuda
