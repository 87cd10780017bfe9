// The simulated NVIDIA driver behind the CUDA backend's driver seam (criu-plugin/cuda/cuda_driver.h): the
// process checkpoint API's state machine as NVIDIA documents it (CUDA driver API, "CUDA Checkpointing"):
//   cuCheckpointProcessLock        RUNNING -> LOCKED; a lock that times out leaves the process RUNNING
//   cuCheckpointProcessCheckpoint  LOCKED -> CHECKPOINTED
//   cuCheckpointProcessRestore     CHECKPOINTED -> LOCKED; GPU UUID pairs remap the process's GPUs, and a pair
//                                  list must name every GPU the process had (docs/cuda.md, verified on H100/H200)
//   cuCheckpointProcessUnlock      LOCKED -> RUNNING
//   cuCheckpointProcessGetState / GetRestoreThreadId  for any process the driver knows
// A call in the wrong state answers CUDA_ERROR_ILLEGAL_STATE and changes nothing (what driver 580 answers an
// unlock of a CHECKPOINTED process, NVIDIA/cuda-checkpoint#44); a pid the driver does not know as a CUDA process
// answers CUDA_ERROR_INVALID_VALUE. A failure injected with fail() answers its CUresult and leaves the process in
// the state the real driver leaves it in after that call failed: RUNNING after a lock, LOCKED after a checkpoint
// (unless a test names FAILED), CHECKPOINTED after a restore (driver 580's failed restore, cuda-checkpoint#44),
// LOCKED after an unlock. Thread-safe: the backend calls it from one thread per process.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_model.h"
#include "criu-plugin/cuda/cuda_backend.h"
#include "criu-plugin/cuda/cuda_driver.h"
#include "criu-plugin/cuda/driver_host.h"

namespace gpuckpt::cuda::sim {

// CUresult values (cuda.h) the simulator answers.
inline constexpr int kInvalidValue = 1;       // CUDA_ERROR_INVALID_VALUE
inline constexpr int kOutOfMemory = 2;        // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr int kNotInitialized = 3;     // CUDA_ERROR_NOT_INITIALIZED
inline constexpr int kInvalidDevice = 101;    // CUDA_ERROR_INVALID_DEVICE
inline constexpr int kOperatingSystem = 304;  // CUDA_ERROR_OPERATING_SYSTEM
inline constexpr int kIllegalState = 401;     // CUDA_ERROR_ILLEGAL_STATE
inline constexpr int kNotReady = 600;         // CUDA_ERROR_NOT_READY: the lock's timeout
inline constexpr int kNotSupported = 801;     // CUDA_ERROR_NOT_SUPPORTED

enum class Call { Lock, Checkpoint, Restore, Unlock, GetState, GetRestoreThreadId };
const char* to_string(Call call);

struct CallRecord {
  Call call;
  int pid = 0;
  int result = 0;
  std::vector<std::pair<std::string, std::string>> pairs;   // a restore's UUID pairs, format_uuid() text
  unsigned timeout_ms = 0;                                   // a lock's timeout
};

class SimCudaDriver final : public Driver {
 public:
  // The GPUs of the node the driver runs on (format_uuid() text): what a restore may place a process on.
  explicit SimCudaDriver(std::vector<std::string> node_gpus) : node_gpus_(std::move(node_gpus)) {}

  // A CUDA process the driver knows: its restore thread (as the driver names it) and the GPUs it uses.
  void add_process(int pid, int restore_tid, std::vector<std::string> gpus,
                   ProcessState state = ProcessState::Running);
  // The next `times` calls of `call` for `pid` answer `result`; the process is then in the state the real driver
  // leaves it in after that call failed, or in `state_after` when given.
  void fail(Call call, int pid, int result, int times = 1, std::optional<ProcessState> state_after = std::nullopt);

  // Around every call, outside the driver's lock: a test's way to make calls meet, to hold an answer back, or to
  // start a thread of the driver's own as libcuda does. `before_call` runs first and answers in place of the
  // driver when it returns anything but kCudaSuccess; `after_call` runs once the call took effect, before it returns.
  std::function<int(Call, int pid)> before_call;
  std::function<void(Call, int pid)> after_call;

  ProcessState state(int pid) const;
  std::vector<std::string> gpus(int pid) const;   // where the process's GPU state lives now
  std::vector<CallRecord> calls() const;
  std::vector<CallRecord> calls(Call call) const;

  int lock(int pid, unsigned timeout_ms) override;
  int checkpoint(int pid) override;
  int restore(int pid, const std::vector<UuidPair>& pairs) override;
  int unlock(int pid) override;
  int get_state(int pid, ProcessState* state) override;
  int get_restore_thread_id(int pid, int* tid) override;
  // cuGetErrorName's name and the number: "CUDA_ERROR_ILLEGAL_STATE (401)".
  std::string describe(int cuda_result) override;

 private:
  struct Process {
    ProcessState state = ProcessState::Running;
    int restore_tid = 0;
    std::vector<std::string> gpus;
  };
  struct Failure {
    int result = 0;
    int times = 0;
    std::optional<ProcessState> state_after;
  };
  // The call's answer, with the lock held: an injected failure, an unknown pid, a call in the wrong state, or 0.
  int admit(Call call, int pid, ProcessState needed, CallRecord& record);
  // `call` between before_call and after_call; `apply` makes it, with the lock held.
  template <class Apply>
  int around(Call call, int pid, Apply&& apply);
  int restore_locked(Process& process, const std::vector<UuidPair>& pairs);

  mutable std::mutex mutex_;
  std::vector<std::string> node_gpus_;
  std::map<int, Process> processes_;
  std::map<std::pair<Call, int>, Failure> failures_;
  std::vector<CallRecord> calls_;
};

// What the simulated driver session saw of the backend: the processes it tracked, the staged memory, done().
struct SessionLog {
  std::map<int, ProcessState> tracked;
  std::map<int, int> staged;   // pid -> vpid
  bool done = false;
  int starts = 0;
  std::vector<DriverHost::Mode> modes;
  std::optional<std::chrono::steady_clock::time_point> last_deadline;
};

// Starts sessions on `driver` the way the backend's start_driver does: in-process, `inventory` as the node's GPUs.
// `start_error`, when set, is the error every start answers (no driver on the node).
struct SimSessions {
  std::shared_ptr<SimCudaDriver> driver;
  NodeInventory inventory;
  std::shared_ptr<SessionLog> log = std::make_shared<SessionLog>();
  std::optional<Error> start_error;

  std::function<Result<std::unique_ptr<DriverSession>>(DriverHost::Mode, int)> starter();
};

// A clock that moves only when the backend sleeps: waits cost no time and runs are repeatable.
class SimClock {
 public:
  CudaClock clock();
  std::chrono::milliseconds slept() const;

 private:
  struct State {
    std::mutex mutex;
    std::chrono::steady_clock::time_point now{std::chrono::hours(1)};
    std::chrono::milliseconds slept{0};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace gpuckpt::cuda::sim
