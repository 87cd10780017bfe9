#include "criu-plugin/cuda/cuda_driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

namespace gpuckpt::cuda {
namespace {

// The driver API's argument structs (cuda.h, CUDA 12.8 - 13.0): every one is 64 bytes, must be zeroed, and
// reserved fields must stay zero.
struct LockArgs {
  unsigned int timeout_ms;
  unsigned int reserved0;
  unsigned long long reserved1[7];
};
struct PlainArgs {
  unsigned long long reserved[8];
};
struct GpuPairAbi {
  Uuid old_uuid;
  Uuid new_uuid;
};
struct RestoreArgs {
  GpuPairAbi* gpu_pairs;
  unsigned int gpu_pairs_count;
  char reserved[44];
  unsigned long long reserved1;
};
static_assert(sizeof(LockArgs) == 64 && sizeof(PlainArgs) == 64 && sizeof(RestoreArgs) == 64);
static_assert(sizeof(GpuPairAbi) == 32);

using LockFn = int (*)(int, LockArgs*);
using PlainFn = int (*)(int, PlainArgs*);
using RestoreFn = int (*)(int, RestoreArgs*);
using GetStateFn = int (*)(int, int*);
using GetTidFn = int (*)(int, int*);
using ErrorNameFn = int (*)(int, const char**);

class DlopenDriver final : public Driver {
 public:
  int lock(int pid, unsigned timeout_ms) override {
    LockArgs args{};
    args.timeout_ms = timeout_ms;
    return lock_(pid, &args);
  }
  int checkpoint(int pid) override {
    PlainArgs args{};
    return checkpoint_(pid, &args);
  }
  int restore(int pid, const std::vector<UuidPair>& pairs) override {
    std::vector<GpuPairAbi> abi(pairs.size());
    for (std::size_t i = 0; i < pairs.size(); ++i) abi[i] = GpuPairAbi{pairs[i].source, pairs[i].target};
    RestoreArgs args{};
    if (!abi.empty()) {
      args.gpu_pairs = abi.data();
      args.gpu_pairs_count = static_cast<unsigned>(abi.size());
    }
    return restore_(pid, &args);
  }
  int unlock(int pid) override {
    PlainArgs args{};
    return unlock_(pid, &args);
  }
  int get_state(int pid, ProcessState* state) override {
    int raw = -1;
    int ret = get_state_(pid, &raw);
    if (ret == kCudaSuccess) *state = static_cast<ProcessState>(raw);
    return ret;
  }
  int get_restore_thread_id(int pid, int* tid) override { return get_tid_(pid, tid); }
  std::string describe(int cuda_result) override {
    const char* name = nullptr;
    if (error_name_ == nullptr || error_name_(cuda_result, &name) != kCudaSuccess || name == nullptr)
      name = "CUresult";
    return std::string(name) + " (" + std::to_string(cuda_result) + ")";
  }

  LockFn lock_ = nullptr;
  PlainFn checkpoint_ = nullptr;
  RestoreFn restore_ = nullptr;
  PlainFn unlock_ = nullptr;
  GetStateFn get_state_ = nullptr;
  GetTidFn get_tid_ = nullptr;
  ErrorNameFn error_name_ = nullptr;
};

}  // namespace

const char* to_string(ProcessState state) {
  switch (state) {
    case ProcessState::Running: return "running";
    case ProcessState::Locked: return "locked";
    case ProcessState::Checkpointed: return "checkpointed";
    case ProcessState::Failed: return "failed";
  }
  return "unknown";
}

Result<std::unique_ptr<Driver>> load_driver(const std::string& library) {
  // Kept open for the life of the process: the driver does not support being unloaded.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    return make_error("the NVIDIA driver library " + library + " cannot be loaded (" + dlerror() + ")", ENOENT);
  auto driver = std::make_unique<DlopenDriver>();
  std::string missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  resolve(driver->lock_, "cuCheckpointProcessLock");
  resolve(driver->checkpoint_, "cuCheckpointProcessCheckpoint");
  resolve(driver->restore_, "cuCheckpointProcessRestore");
  resolve(driver->unlock_, "cuCheckpointProcessUnlock");
  resolve(driver->get_state_, "cuCheckpointProcessGetState");
  resolve(driver->get_tid_, "cuCheckpointProcessGetRestoreThreadId");
  if (!missing.empty())
    return make_error(library + " has no " + missing + ": the NVIDIA driver is older than r550 (CUDA 12.4) and "
                      "cannot checkpoint processes; install driver 570 or newer", ENOTSUP);
  driver->error_name_ = reinterpret_cast<ErrorNameFn>(dlsym(handle, "cuGetErrorName"));
  return std::unique_ptr<Driver>(std::move(driver));
}

Result<std::unique_ptr<Driver>> load_node_driver(const std::string& chosen_library) {
  if (!chosen_library.empty()) return load_driver(chosen_library);
  auto first = load_driver("libcuda.so.1");
  if (first || first.error().errno_value != ENOENT) return first;
  for (const char* path : {"/run/nvidia/driver/usr/lib64/libcuda.so.1",
                           "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                           "/run/nvidia/driver/usr/lib/aarch64-linux-gnu/libcuda.so.1",
                           "/usr/local/nvidia/lib64/libcuda.so.1", "/home/kubernetes/bin/nvidia/lib64/libcuda.so.1"}) {
    if (::access(path, R_OK) != 0) continue;
    auto found = load_driver(path);
    if (found || found.error().errno_value != ENOENT) return found;
  }
  return make_error(first.error().message + "; not found in the GPU operator's, GKE's or /usr/local/nvidia's driver "
                    "root either. Set GPUCKPT_CUDA_LIBRARY to the node's libcuda.so.1", ENOENT);
}

}  // namespace gpuckpt::cuda
