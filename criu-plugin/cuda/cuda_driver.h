// The NVIDIA driver's process checkpoint API (libcuda.so.1, r550+), behind a small interface: the one seam the
// CUDA backend needs to the driver. The real one dlopen()s libcuda; nothing links against it, so the plugin
// loads on nodes without a driver and declines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "criu-plugin/cuda/remap.h"

namespace gpuckpt::cuda {

// CUprocessState
enum class ProcessState : int { Running = 0, Locked = 1, Checkpointed = 2, Failed = 3 };
const char* to_string(ProcessState state);

inline constexpr int kCudaSuccess = 0;

class Driver {
 public:
  virtual ~Driver() = default;
  // Each returns the CUresult (0 = success).
  virtual int lock(int pid, unsigned timeout_ms) = 0;
  virtual int checkpoint(int pid) = 0;
  virtual int restore(int pid, const std::vector<UuidPair>& pairs) = 0;
  virtual int unlock(int pid) = 0;
  virtual int get_state(int pid, ProcessState* state) = 0;
  virtual int get_restore_thread_id(int pid, int* tid) = 0;
  // "CUDA_ERROR_INVALID_VALUE (1)"
  virtual std::string describe(int cuda_result) = 0;
};

// dlopen(library) and resolve the checkpoint entry points. The error says what is missing (no driver, or a
// driver older than r550 without the API).
Result<std::unique_ptr<Driver>> load_driver(const std::string& library);

// The driver as the plugin finds it on a node: `chosen_library` (GPUCKPT_CUDA_LIBRARY) if not empty, else
// libcuda.so.1 from the loader's path, else the driver roots Kubernetes GPU nodes use when the driver is not in
// the host's loader path (the GPU operator's /run/nvidia/driver, /usr/local/nvidia, GKE's /home/kubernetes/bin/nvidia).
Result<std::unique_ptr<Driver>> load_node_driver(const std::string& chosen_library);

}  // namespace gpuckpt::cuda
