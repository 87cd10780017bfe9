#include "test/criu-plugin/sim/sim_cuda_driver.h"

#include <algorithm>

#include "criu-plugin/cuda/uuid.h"

namespace gpuckpt::cuda::sim {
namespace {

// The state the real driver leaves a process in when `call` failed.
ProcessState state_after_failure(Call call, ProcessState before) {
  switch (call) {
    case Call::Lock: return ProcessState::Running;          // documented: a timed-out lock leaves it RUNNING
    case Call::Restore: return ProcessState::Checkpointed;  // cuda-checkpoint#44: stays CHECKPOINTED
    case Call::Checkpoint:
    case Call::Unlock: return ProcessState::Locked;
    case Call::GetState:
    case Call::GetRestoreThreadId: return before;
  }
  return before;
}

}  // namespace

const char* to_string(Call call) {
  switch (call) {
    case Call::Lock: return "lock";
    case Call::Checkpoint: return "checkpoint";
    case Call::Restore: return "restore";
    case Call::Unlock: return "unlock";
    case Call::GetState: return "get-state";
    case Call::GetRestoreThreadId: return "get-restore-thread-id";
  }
  return "?";
}

void SimCudaDriver::add_process(int pid, int restore_tid, std::vector<std::string> gpus, ProcessState state) {
  std::lock_guard lock(mutex_);
  processes_[pid] = Process{state, restore_tid, std::move(gpus)};
}

void SimCudaDriver::fail(Call call, int pid, int result, int times, std::optional<ProcessState> state_after) {
  std::lock_guard lock(mutex_);
  failures_[{call, pid}] = Failure{result, times, state_after};
}

ProcessState SimCudaDriver::state(int pid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it == processes_.end() ? ProcessState::Failed : it->second.state;
}

std::vector<std::string> SimCudaDriver::gpus(int pid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it == processes_.end() ? std::vector<std::string>{} : it->second.gpus;
}

std::vector<CallRecord> SimCudaDriver::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

std::vector<CallRecord> SimCudaDriver::calls(Call call) const {
  std::vector<CallRecord> out;
  for (const auto& record : calls())
    if (record.call == call) out.push_back(record);
  return out;
}

int SimCudaDriver::admit(Call call, int pid, ProcessState needed, CallRecord& record) {
  record.call = call;
  record.pid = pid;
  auto process = processes_.find(pid);
  if (auto failure = failures_.find({call, pid}); failure != failures_.end() && failure->second.times > 0) {
    --failure->second.times;
    if (process != processes_.end())
      process->second.state = failure->second.state_after.value_or(state_after_failure(call, process->second.state));
    return failure->second.result;
  }
  if (process == processes_.end()) return kInvalidValue;
  const bool any_state = call == Call::GetState || call == Call::GetRestoreThreadId;
  if (!any_state && process->second.state != needed) return kIllegalState;
  return kCudaSuccess;
}

int SimCudaDriver::restore_locked(Process& process, const std::vector<UuidPair>& pairs) {
  if (pairs.empty()) {
    // Every GPU stays itself: each must be on this node.
    for (const auto& gpu : process.gpus)
      if (std::find(node_gpus_.begin(), node_gpus_.end(), gpu) == node_gpus_.end()) return kInvalidDevice;
    process.state = ProcessState::Locked;
    return kCudaSuccess;
  }
  std::map<std::string, std::string> target_of;
  std::set<std::string> targets;
  for (const auto& pair : pairs) {
    const std::string source = format_uuid(pair.source), target = format_uuid(pair.target);
    if (!target_of.emplace(source, target).second || !targets.insert(target).second) return kInvalidValue;
    if (std::find(node_gpus_.begin(), node_gpus_.end(), target) == node_gpus_.end()) return kInvalidDevice;
  }
  std::vector<std::string> placed;
  for (const auto& gpu : process.gpus) {
    auto it = target_of.find(gpu);
    if (it == target_of.end()) return kInvalidValue;   // a pair list must name every GPU the process had
    placed.push_back(it->second);
  }
  process.gpus = std::move(placed);
  process.state = ProcessState::Locked;
  return kCudaSuccess;
}

template <class Apply>
int SimCudaDriver::around(Call call, int pid, Apply&& apply) {
  if (before_call) {
    if (const int answer = before_call(call, pid); answer != kCudaSuccess) return answer;
  }
  int result;
  {
    std::lock_guard lock(mutex_);
    CallRecord record;
    result = apply(record);
    record.result = result;
    calls_.push_back(record);
  }
  if (after_call) after_call(call, pid);
  return result;
}

int SimCudaDriver::lock(int pid, unsigned timeout_ms) {
  return around(Call::Lock, pid, [&](CallRecord& record) {
    record.timeout_ms = timeout_ms;
    const int result = admit(Call::Lock, pid, ProcessState::Running, record);
    if (result == kCudaSuccess) processes_[pid].state = ProcessState::Locked;
    return result;
  });
}

int SimCudaDriver::checkpoint(int pid) {
  return around(Call::Checkpoint, pid, [&](CallRecord& record) {
    const int result = admit(Call::Checkpoint, pid, ProcessState::Locked, record);
    if (result == kCudaSuccess) processes_[pid].state = ProcessState::Checkpointed;
    return result;
  });
}

int SimCudaDriver::restore(int pid, const std::vector<UuidPair>& pairs) {
  return around(Call::Restore, pid, [&](CallRecord& record) {
    for (const auto& pair : pairs) record.pairs.emplace_back(format_uuid(pair.source), format_uuid(pair.target));
    const int result = admit(Call::Restore, pid, ProcessState::Checkpointed, record);
    return result == kCudaSuccess ? restore_locked(processes_[pid], pairs) : result;
  });
}

int SimCudaDriver::unlock(int pid) {
  return around(Call::Unlock, pid, [&](CallRecord& record) {
    const int result = admit(Call::Unlock, pid, ProcessState::Locked, record);
    if (result == kCudaSuccess) processes_[pid].state = ProcessState::Running;
    return result;
  });
}

int SimCudaDriver::get_state(int pid, ProcessState* state) {
  return around(Call::GetState, pid, [&](CallRecord& record) {
    const int result = admit(Call::GetState, pid, ProcessState::Running, record);
    if (result == kCudaSuccess) *state = processes_[pid].state;
    return result;
  });
}

int SimCudaDriver::get_restore_thread_id(int pid, int* tid) {
  return around(Call::GetRestoreThreadId, pid, [&](CallRecord& record) {
    const int result = admit(Call::GetRestoreThreadId, pid, ProcessState::Running, record);
    if (result == kCudaSuccess) *tid = processes_[pid].restore_tid;
    return result;
  });
}

std::string SimCudaDriver::describe(int cuda_result) {
  const char* name = "CUresult";
  switch (cuda_result) {
    case kCudaSuccess: name = "CUDA_SUCCESS"; break;
    case kInvalidValue: name = "CUDA_ERROR_INVALID_VALUE"; break;
    case kOutOfMemory: name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case kNotInitialized: name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case kInvalidDevice: name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case kOperatingSystem: name = "CUDA_ERROR_OPERATING_SYSTEM"; break;
    case kIllegalState: name = "CUDA_ERROR_ILLEGAL_STATE"; break;
    case kNotReady: name = "CUDA_ERROR_NOT_READY"; break;
    case kNotSupported: name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: break;
  }
  return std::string(name) + " (" + std::to_string(cuda_result) + ")";
}

namespace {

class SimSession final : public DriverSession {
 public:
  SimSession(std::shared_ptr<SimCudaDriver> driver, NodeInventory inventory, std::shared_ptr<SessionLog> log)
      : driver_(std::move(driver)), inventory_(std::move(inventory)), log_(std::move(log)) {}
  Driver& driver() override { return *driver_; }
  void answer_by(std::optional<std::chrono::steady_clock::time_point> deadline) override {
    if (deadline) log_->last_deadline = deadline;
  }
  Result<NodeInventory> inventory() override { return inventory_; }
  void track(int pid, ProcessState initial) override { log_->tracked[pid] = initial; }
  void staged(int pid, int vpid) override { log_->staged[pid] = vpid; }
  void done() override { log_->done = true; }
  int host_pid() const override { return 0; }

 private:
  std::shared_ptr<SimCudaDriver> driver_;
  NodeInventory inventory_;
  std::shared_ptr<SessionLog> log_;
};

}  // namespace

std::function<Result<std::unique_ptr<DriverSession>>(DriverHost::Mode, int)> SimSessions::starter() {
  return [this](DriverHost::Mode mode, int) -> Result<std::unique_ptr<DriverSession>> {
    ++log->starts;
    log->modes.push_back(mode);
    if (start_error) return *start_error;
    return std::unique_ptr<DriverSession>(new SimSession(driver, inventory, log));
  };
}

CudaClock SimClock::clock() {
  auto state = state_;
  return CudaClock{[state] {
                     std::lock_guard lock(state->mutex);
                     return state->now;
                   },
                   [state](std::chrono::milliseconds pause) {
                     std::lock_guard lock(state->mutex);
                     state->now += pause;
                     state->slept += pause;
                   }};
}

std::chrono::milliseconds SimClock::slept() const {
  std::lock_guard lock(state_->mutex);
  return state_->slept;
}

}  // namespace gpuckpt::cuda::sim
