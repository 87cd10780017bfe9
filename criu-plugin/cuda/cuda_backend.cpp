// The CUDA backend: checkpoint and restore of CUDA processes through the driver's process checkpoint API, from
// inside CRIU. Dump: PAUSE_DEVICES refuses CUDA state shared between processes that the driver cannot restore
// and locks every CUDA process of the tree at once, CHECKPOINT_DEVICES moves the GPU state of all of
// them into host memory (in parallel) so CRIU dumps it as plain memory; fini puts every process back when the
// dump failed or runs with --leave-running. Restore: RESUME_DEVICES_LATE moves the state back onto this node's
// GPUs (remapped when needed) and unlocks, again for all processes in parallel. GPU memory takes gpuckpt's own
// path where it can (gpu_memory_path.h): written in parallel after the driver's checkpoint, dropped from CRIU's
// dump, filled back before the driver's restore.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpu/inventory.h"
#include "base/log.h"
#include "gpu/properties_record.h"
#include "criu-plugin/criu_abi.h"
#include "criu-plugin/cuda/cuda_backend.h"
#include "criu-plugin/cuda/cuda_driver.h"
#include "criu-plugin/cuda/device_nodes.h"
#include "criu-plugin/cuda/driver_host.h"
#include "criu-plugin/cuda/frozen_cgroup.h"
#include "criu-plugin/cuda/gpu_memory_path.h"
#include "criu-plugin/cuda/lock_all.h"
#include "criu-plugin/cuda/lock_budget.h"
#include "criu-plugin/cuda/process_info.h"
#include "criu-plugin/cuda/record_files.h"
#include "criu-plugin/cuda/remap.h"
#include "criu-plugin/cuda/restore_thread.h"
#include "criu-plugin/cuda/shared_state.h"

namespace gpuckpt::cuda {
namespace {

using plugin::Backend;
using TimePoint = std::chrono::steady_clock::time_point;

std::string fixed(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", value);
  return buf;
}

// Runs `work(i)` for i in [0, n): on threads when `parallel` (driver calls only; no ptrace off the main thread).
template <class Work>
void for_each_maybe_parallel(std::size_t n, bool parallel, Work&& work) {
  if (!parallel || n < 2) {
    for (std::size_t i = 0; i < n; ++i) work(i);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t i = 0; i < n; ++i) threads.emplace_back([&work, i] { work(i); });
  for (auto& t : threads) t.join();
}

struct Tracked {
  int pid = 0;
  ProcessState initial = ProcessState::Running;
  bool locked_by_us = false;
  bool checkpoint_attempted = false;
  int checkpoint_result = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaBackendDeps deps) : deps_(std::move(deps)), proc_(deps_.host.resolve("proc").string()) {}

  const char* name() const override { return "cuda"; }

  int init(int stage) override {
    stage_ = stage;
    parallel_ = deps_.settings.parallel;
    log::param("GPUCKPT_CUDA_PARALLEL", parallel_ ? "1" : "0");
    if (stage == criu::kStagePreDump) {
      log::info("cuda: pre-dump copies no GPU state and writes no GPU memory image (the GPU is only checkpointed "
                "by a full dump); inactive");
      return 0;
    }
    if (stage == criu::kStageDump) {
      dump_timings_ = {};
      return init_dump();
    }
    if (stage == criu::kStageRestore) {
      restore_timings_ = {};
      return init_restore();
    }
    return 0;
  }

  void add_restore_timings(PluginRestoreTimings& timings) const override {
    timings.gpu_memory_seconds += restore_timings_.gpu_memory_seconds;
    timings.gpu_restore_seconds += restore_timings_.gpu_restore_seconds;
  }

  std::optional<std::string> restore_node_store() const override {
    if (stage_ != criu::kStageRestore || !restore_round_done_) return std::nullopt;
    return memory_.node_store();
  }

  void add_dump_timings(PluginDumpTimings& timings) const override {
    timings.gpu_lock_seconds += dump_timings_.gpu_lock_seconds;
    timings.gpu_checkpoint_seconds += dump_timings_.gpu_checkpoint_seconds;
    timings.gpu_memory_seconds += dump_timings_.gpu_memory_seconds;
  }

  void fini(int stage, int ret) override {
    if (enabled_ && stage == criu::kStageDump && (host_ || memory_.any_staged())) fini_dump(ret);
    if (host_) host_->done();
    host_.reset();
    driver_ = nullptr;
    enabled_ = false;
  }

  // CRIU calls this for the root first, before it seizes anything, then for each child just before seizing it.
  // The first call therefore pauses the whole tree: every CUDA process in it is checked for state the driver
  // cannot restore, then locked at the same time as the others (lock_all.h says why); later calls find their
  // process done. A process that starts using CUDA after the first call is paused alone at its own call.
  int pause_devices(int pid) override {
    if (!enabled_ || stage_ != criu::kStageDump) return -ENOTSUP;
    if (!tree_paused_) {
      tree_paused_ = true;
      if (int rc = pause_tree(pid); rc != 0) return rc;
    }
    if (std::any_of(tracked_.begin(), tracked_.end(), [&](const Tracked& t) { return t.pid == pid; })) return 0;
    const NvidiaFiles files = nvidia_files(pid, proc_);
    if (!files.any && memory_.is_stand_in(pid)) {
      if (auto added = deps_.criu.add_to_inventory(); !added) {
        log::error("cuda: " + added.error().message);
        return -EIO;
      }
      log::warn("cuda: pid " + std::to_string(pid) + " maps the stand-in's staging memory: it is moved as a "
                "checkpointed CUDA process's would be, with no driver call");
      stand_in_pids_.push_back(pid);
      return 0;
    }
    if (!files.any) {
      // Not a CUDA process, or one checkpointed before this dump (its device files are closed then): CRIU dumps
      // it as plain memory and it stays as it is.
      log::debug("cuda: pid " + std::to_string(pid) + " has no NVIDIA device open; not ours");
      return -ENOTSUP;
    }
    log::info("cuda: pid " + std::to_string(pid) + " uses the GPU but was not when the dump began; paused alone");
    return pause_processes({pid});
  }

  int checkpoint_devices(int pid) override {
    if (!enabled_ || stage_ != criu::kStageDump) return -ENOTSUP;
    // CRIU asks process by process; all of them are frozen by now, so the first call does every one at once.
    if (std::find(stand_in_pids_.begin(), stand_in_pids_.end(), pid) != stand_in_pids_.end()) {
      if (!checkpoint_round_done_) checkpoint_round();
      return 0;
    }
    auto it = std::find_if(tracked_.begin(), tracked_.end(), [&](const Tracked& t) { return t.pid == pid; });
    if (it == tracked_.end()) return -ENOTSUP;
    if (!checkpoint_round_done_) checkpoint_round();
    return it->checkpoint_result;
  }

  int resume_devices_late(int pid) override {
    if (!enabled_ || stage_ != criu::kStageRestore) return -ENOTSUP;
    if (!restore_round_done_) restore_all(pid);
    auto it = restore_results_.find(pid);
    if (it == restore_results_.end()) return -ENOTSUP;
    return it->second;
  }

 private:
  // Every CUDA process of the tree under `root` (root included), paused at once.
  int pause_tree(int root) {
    std::vector<int> cuda_pids;
    for (int pid : with_descendants(root))
      if (nvidia_files(pid, proc_).any) cuda_pids.push_back(pid);
    if (cuda_pids.empty()) return 0;
    log::info("cuda: " + std::to_string(cuda_pids.size()) + " CUDA process(es) in the tree of pid " +
              std::to_string(root) + "; pausing them together");
    return pause_processes(cuda_pids);
  }

  std::vector<int> with_descendants(int root) const {
    std::vector<int> pids{root};
    for (int child : descendants(root, proc_)) pids.push_back(child);
    return pids;
  }

  // Refuses what the driver cannot restore, then locks every running one of `pids` at once; all or nothing.
  // Every driver call below ends, with the plugin's own message, a margin before CRIU's alarm (lock_budget.h), and
  // runs with the processes thawed where their runtime froze them (frozen_cgroup.h), frozen again afterwards.
  int pause_processes(const std::vector<int>& pids) {
    if (int refused = refuse_shared_state(pids); refused != 0) return refused;
    if (auto host = ensure_dump_host(); !host) {
      log::error("cuda: pid " + std::to_string(pids.front()) + " uses the GPU but " + host.error().message);
      return -EIO;
    }
    const auto start = now();
    const LockBudget budget = lock_budget(deps_.criu.remaining_alarm_ms(), deps_.settings.lock_timeout_ms);
    const auto lock_deadline = start + std::chrono::milliseconds(budget.lock_ms);
    host_->answer_by(start + std::chrono::milliseconds(budget.answer_ms));
    struct ClearDeadline {
      DriverSession& host;
      ~ClearDeadline() { host.answer_by(std::nullopt); }
    } clear_deadline{*host_};
    std::vector<TemporaryThaw> thaws;
    for (int pid : pids) {
      auto thaw = TemporaryThaw::begin(pid, std::min(std::chrono::milliseconds(1000), until(lock_deadline)), proc_,
                                       deps_.host.resolve("sys/fs/cgroup").string());
      if (!thaw) {
        log::error("cuda: pid " + std::to_string(pid) + " is frozen and the driver's lock needs it running: " +
                   thaw.error().message);
        return -EIO;   // the thaws already made are undone as `thaws` goes
      }
      if (thaw->thawed_any())
        log::info("cuda: pid " + std::to_string(pid) + " is frozen (containerd and CRI-O pause a container before "
                  "they have it checkpointed; CRIU 4.1 thaws it only after this hook): thawed " + thaw->describe() +
                  " for the driver's lock, frozen again after it");
      thaws.push_back(std::move(*thaw));
    }
    const int rc = lock_thawed(pids, lock_deadline);
    for (auto it = thaws.rbegin(); it != thaws.rend(); ++it) {
      if (auto refrozen = it->refreeze(); !refrozen) {
        log::error("cuda: " + refrozen.error().message + ". The dump stops rather than go on with a container its "
                   "runtime froze running");
        for (const auto& t : tracked_) {
          if (t.locked_by_us && std::find(pids.begin(), pids.end(), t.pid) != pids.end()) release_lock(t.pid);
        }
        return -EIO;
      }
    }
    return rc;
  }

  int lock_thawed(const std::vector<int>& pids, TimePoint lock_deadline) {
    std::vector<Tracked> entries;
    for (int pid : pids) {
      auto state = lockable_state(pid);
      if (!state) {
        log::error("cuda: " + state.error().message);
        return -state.error().errno_value;
      }
      Tracked entry;
      entry.pid = pid;
      entry.initial = *state;
      entries.push_back(entry);
    }
    if (auto added = deps_.criu.add_to_inventory(); !added) {
      log::error("cuda: " + added.error().message);
      return -EIO;
    }
    std::vector<int> running;
    for (const auto& entry : entries) {
      host_->track(entry.pid, entry.initial);   // before the lock: the guardian must know what it may find locked
      if (entry.initial == ProcessState::Running) {
        running.push_back(entry.pid);
      } else {
        log::info("cuda: pid " + std::to_string(entry.pid) + " is already " + to_string(entry.initial) +
                  "; it is dumped as it is and left so");
      }
    }
    if (!running.empty() && !lock_together(running, lock_deadline)) return -EIO;
    for (auto& entry : entries) {
      entry.locked_by_us = entry.initial == ProcessState::Running;
      if (entry.initial != ProcessState::Checkpointed) memory_.before_checkpoint(entry.pid);
      tracked_.push_back(entry);
      record_gpus(entry.pid, nvidia_files(entry.pid, proc_));
    }
    return 0;
  }

  // CUDA state shared between processes, on a driver that cannot restore it: refused before any driver call,
  // so the job never stops. Returns 0 (go on) or -ECANCELED.
  int refuse_shared_state(const std::vector<int>& pids) {
    const auto start = now();
    const SharedState shared = find_shared_state(pids, proc_);
    const std::string driver = nvidia_driver_version(deps_.host);
    log::info("timing: cuda shared-state check of " + std::to_string(pids.size()) + " process(es): " +
              fixed(seconds_since(start) * 1000) + " ms");
    if (!shared.any()) return 0;
    const std::string what = describe(shared);
    if (!shared.between_processes()) {
      log::warn("cuda: " + what + ": no other process on this node shares it, so the checkpoint goes on; the "
                "communicator's network connections to other nodes are not restored by gpuckpt");
      return 0;
    }
    const std::string needs = "driver >= " + std::to_string(kSharedStateDriverMajor) + " with all of the "
                              "job's processes started in one `cuda-checkpoint --launch-job` job";
    if (driver_restores_shared_state(driver)) {
      std::vector<int> outside_job;
      for (const auto& [pid, evidence] : shared.by_pid)
        if (!in_checkpoint_job(pid, proc_)) outside_job.push_back(pid);
      if (outside_job.empty()) {
        log::info("cuda: " + what + "; NVIDIA driver " + driver + " restores it: every such process is in a "
                  "cuda-checkpoint job");
      } else {
        log::warn("cuda: " + what + ". NVIDIA driver " + driver + " restores CUDA state shared between processes "
                  "only for processes started in one `cuda-checkpoint --launch-job` job, and pid " +
                  std::to_string(outside_job.front()) + " has no CUDA_CHECKPOINT_JOB_FILE: its restore may fail");
      }
      return 0;
    }
    log::error("cuda: refusing to checkpoint: " + what + ". NVIDIA driver " +
               (driver.empty() ? std::string("(version unknown)") : driver) + " cannot restore CUDA state shared "
               "between processes: its restore fails with CUDA_ERROR_NOT_SUPPORTED and would leave the job "
               "paused. That needs " + needs + ". Nothing was locked; the job keeps running. Upgrade the node's "
               "driver, or checkpoint the job with its framework's own checkpointing");
    return -ECANCELED;
  }

  // The process's checkpoint state once the driver knows it as a CUDA process; an error that says why not.
  Result<ProcessState> lockable_state(int pid) {
    int tid = -1;
    int rc = driver_->get_restore_thread_id(pid, &tid);
    if (rc == kNoAnswer)
      return make_error("the driver did not answer for pid " + std::to_string(pid) + " in time: it waits for a "
                        "thread of the process that does not run (is the process stopped or frozen by something "
                        "other than its runtime?)", EIO);
    if (rc != kCudaSuccess) {
      // The cuInit() race: the process has the device open but the driver's checkpoint support is not up yet.
      const auto start = now();
      while (rc != kCudaSuccess && rc != kNoAnswer &&
             seconds_since(start) * 1000 < static_cast<double>(deps_.settings.init_wait_ms)) {
        deps_.clock.sleep_for(std::chrono::milliseconds(50));
        rc = driver_->get_restore_thread_id(pid, &tid);
      }
      if (rc != kCudaSuccess)
        return make_error("pid " + std::to_string(pid) + " has NVIDIA devices open but the driver does not know it "
                          "as a CUDA process after " + std::to_string(deps_.settings.init_wait_ms) + " ms (" +
                          driver_->describe(rc) +
                          "): it is probably still inside cuInit(). Retry the checkpoint once it has started "
                          "(GPUCKPT_CUDA_INIT_WAIT_MS sets the wait)", EAGAIN);
    }
    ProcessState state = ProcessState::Failed;
    rc = driver_->get_state(pid, &state);
    if (rc != kCudaSuccess)
      return make_error("cannot read the CUDA state of pid " + std::to_string(pid) + ": " + driver_->describe(rc), EIO);
    if (state == ProcessState::Failed)
      return make_error("pid " + std::to_string(pid) + " is in the driver's FAILED checkpoint state; it cannot be "
                        "checkpointed (an earlier checkpoint or restore of it broke)", EIO);
    return state;
  }

  // Locks `pids` at once, each lock ending by `lock_deadline`; on any failure every one is unlocked again.
  bool lock_together(const std::vector<int>& pids, TimePoint lock_deadline) {
    const auto timeout_ms = static_cast<unsigned>(until(lock_deadline).count());
    const auto start = now();
    const LockAllOutcome outcome = lock_all(
        pids, [&](int pid) { return driver_->lock(pid, timeout_ms); }, [&](int pid) { return driver_->unlock(pid); });
    dump_timings_.gpu_lock_seconds += seconds_since(start);
    const std::string took = fixed(seconds_since(start));
    if (outcome.all_locked) {
      for (const auto& attempt : outcome.attempts)
        log::info("cuda: locked pid " + std::to_string(attempt.pid) + " in " + fixed(attempt.seconds) + " s");
      log::info("timing: cuda lock of " + std::to_string(pids.size()) + " process(es) at once: " + took + " s");
      return true;
    }
    for (const auto& attempt : outcome.attempts) {
      if (attempt.result != kCudaSuccess) {
        log::error("cuda: locking pid " + std::to_string(attempt.pid) + " failed after " + fixed(attempt.seconds) +
                   " s (timeout " + std::to_string(timeout_ms) + " ms): " + driver_->describe(attempt.result) +
                   ". Its submitted CUDA work did not finish in time. A kernel that runs longer than that needs a "
                   "longer criu --timeout; one that waits for a process outside this dump (a collective whose peer "
                   "is elsewhere) never finishes while that peer runs on, so a retry will not help");
        // A lock that timed out may still hold part of the process. One the driver has not answered is the
        // host's to release when the driver grants it.
        if (attempt.result != kNoAnswer) (void)driver_->unlock(attempt.pid);
      } else if (attempt.rolled_back) {
        log::info("cuda: pid " + std::to_string(attempt.pid) + " was locked; unlocked again: " +
                  (attempt.unlock_result == kCudaSuccess ? std::string("ok")
                                                               : driver_->describe(attempt.unlock_result)));
      }
    }
    if (deps_.criu.alarm_timed_out()) log::error("cuda: CRIU's --timeout expired while locking");
    return false;
  }

  int init_dump() {
    memory_.configure(deps_.criu.image_dir_fd(), deps_.stand_ins);
    if (!deps_.host.exists("proc/driver/nvidia/gpus")) {
      if (memory_.stand_in_on()) {
        enabled_ = true;
        log::info("cuda: no NVIDIA GPU on this node; active for the stand-in's process only");
        return 0;
      }
      log::info("cuda: no NVIDIA GPU on this node (/proc/driver/nvidia/gpus is absent); CUDA backend inactive");
      return 0;
    }
    log::param("GPUCKPT_CUDA_GUARDIAN", deps_.settings.guardian ? "1" : "0");
    log::param("GPUCKPT_CUDA_INIT_WAIT_MS", std::to_string(deps_.settings.init_wait_ms));
    log::param("GPUCKPT_CUDA_LOCK_TIMEOUT_MS", std::to_string(deps_.settings.lock_timeout_ms));
    if (!deps_.criu.set_interrupt_only_mode())
      log::warn("cuda: this CRIU cannot seize without the cgroup freezer; a frozen cgroup would stop the CUDA "
                "restore thread");
    enabled_ = true;
    log::info("cuda: CUDA backend active for dump");
    return 0;
  }

  int init_restore() {
    const int dir_fd = deps_.criu.image_dir_fd();
    auto records = read_process_records(dir_fd);
    if (!records) {
      log::error("cuda: " + records.error().message);
      return -1;
    }
    memory_.configure(dir_fd, deps_.stand_ins);
    if (auto complete = memory_.check_store(); !complete) {
      log::error("cuda: " + complete.error().message);
      return -1;
    }
    if (records->by_pid.empty()) {
      if (memory_.has_images()) {
        // Only a stand-in's dump writes GPU memory images without a CUDA process record.
        log::info("cuda: the checkpoint holds GPU memory images but no CUDA process state; filling memory only");
        enabled_ = true;
        return 0;
      }
      log::info("cuda: the checkpoint holds no CUDA process state; CUDA backend inactive for restore");
      return 0;
    }
    const ProcessRecords& recs = *records;
    std::string needed = describe_needed_gpus(recs);
    auto host = deps_.start_driver(DriverHost::Mode::Restore, dir_fd);
    if (!host) {
      log::error("cuda: the checkpoint needs CUDA (" + needed + ") but " + host.error().message +
                 ". Restore it on a node with the NVIDIA driver (r570 or newer)");
      return -1;
    }
    host_ = std::move(*host);
    driver_ = &host_->driver();
    auto inventory = host_->inventory();
    if (!inventory) {
      log::error("cuda: the checkpoint needs CUDA (" + needed + ") but this node's GPUs cannot be read: " +
                 inventory.error().message);
      return -1;
    }
    const auto node_gpus = nvidia_uuids(*inventory);
    if (node_gpus.empty()) {
      log::error("cuda: the checkpoint needs CUDA (" + needed + ") but this node has no NVIDIA GPU. Restore it on "
                 "a node with matching GPUs");
      return -1;
    }
    restore_records_ = recs;
    restore_inventory_ = *inventory;
    if (auto planned = plan_restore_pairs(dir_fd); !planned) {
      log::error("cuda: " + planned.error().message);
      return -1;
    }
    enabled_ = true;
    return 0;
  }

  // The mapping and each process's UUID pairs, from the first of: the mapping file, the restore plan, this node's
  // inventory (choose_restore_mapping). Made in init, so a checkpoint no GPU here can take fails before CRIU
  // restores anything, and made again at the first RESUME_DEVICES_LATE when init had no file to go by: the OCI
  // hook places the restore plan at createRuntime, which runc runs at CRIU's setup-namespaces notification,
  // after the plugin's init (seen on 2x H200: without this the plan's GPU 1 -> GPU 0 was never used).
  Result<void> plan_restore_pairs(int dir_fd) {
    GPUCKPT_TRY(restore_mapping_, choose_restore_mapping(dir_fd, restore_records_, restore_inventory_));
    const GpuMapping& mapping = restore_mapping_;
    const auto node_gpus = nvidia_uuids(restore_inventory_);
    for (const auto& [from, to] : mapping) log::info("cuda: GPU " + from + " -> " + to);
    pairs_by_pid_.clear();
    for (const auto& [pid, record] : restore_records_.by_pid) {
      GPUCKPT_TRY(const auto pairs, build_restore_pairs(record_uuids(record), mapping, node_gpus),
                  "pid " + std::to_string(pid));
      pairs_by_pid_[pid] = pairs;
      log::info("cuda: pid " + std::to_string(pid) + " restores with " + std::to_string(pairs.size()) +
                " GPU pair(s)" + (pairs.empty() ? " (every GPU stays itself)" : ""));
    }
    GPUCKPT_TRY(default_pairs_, build_restore_pairs(record_uuids(restore_records_.merged), mapping, node_gpus));
    return {};
  }

  Result<GpuMapping> choose_restore_mapping(int dir_fd, const ProcessRecords& recs, const NodeInventory& inventory) {
    mapping_from_file_ = true;
    auto file = read_image_file(dir_fd, kMappingFileName);
    if (file) {
      log::info(std::string("cuda: GPU mapping from ") + kMappingFileName);
      return parse_mapping(*file, kMappingFileName);
    }
    if (file.error().errno_value != ENOENT) return file.error();
    auto plan = read_image_file(dir_fd, kRestorePlanFileName);
    if (plan) {
      log::info(std::string("cuda: GPU mapping from the restore plan ") + kRestorePlanFileName);
      return parse_restore_plan(*plan, kRestorePlanFileName);
    }
    if (plan.error().errno_value != ENOENT) return plan.error();
    mapping_from_file_ = false;
    return choose_mapping(recs.merged, inventory);
  }

  // The record of the GPUs `pid` has open, written next to CRIU's images.
  void record_gpus(int pid, const NvidiaFiles& files) {
    if (!inventory_) {
      auto inventory = host_->inventory();
      if (!inventory) {
        log::warn("cuda: this node's GPUs cannot be read (" + inventory.error().message + "); the checkpoint "
                  "records no GPU properties and restores only onto the same GPUs");
        inventory_ = NodeInventory{};
      } else {
        inventory_ = std::move(*inventory);
      }
    }
    GpuPropertiesRecord record;
    record.node = *inventory_;
    for (int minor : files.gpu_minors) {
      auto gpu = std::find_if(record.node.gpus.begin(), record.node.gpus.end(),
                              [&](const GpuDevice& g) { return g.vendor == GpuVendor::Nvidia && g.device_minor == minor; });
      if (gpu == record.node.gpus.end()) {
        log::warn("cuda: pid " + std::to_string(pid) + " has /dev/nvidia" + std::to_string(minor) +
                  " open, which this node's inventory does not list");
        continue;
      }
      record.used_gpu_ids.push_back(gpu->id);
    }
    if (files.gpu_minors.empty()) {
      // Only nvidiactl / nvidia-uvm open: the driver has not opened a GPU for it yet. It may use any of them.
      for (const auto& gpu : record.node.gpus)
        if (gpu.vendor == GpuVendor::Nvidia) record.used_gpu_ids.push_back(gpu.id);
    }
    std::string gpus;
    for (const auto& id : record.used_gpu_ids) gpus += (gpus.empty() ? "" : ", ") + id;
    log::info("cuda: pid " + std::to_string(pid) + " sees GPU(s): " + (gpus.empty() ? "none" : gpus));
    if (auto written = write_process_record(deps_.criu.image_dir_fd(), pid, record); !written)
      log::warn("cuda: " + written.error().message);
  }

  // The driver's checkpoint of every tracked process, then gpuckpt's copy of their staging memory.
  void checkpoint_round() {
    checkpoint_round_done_ = true;
    if (!tracked_.empty()) checkpoint_all();
    std::vector<int> staged = stand_in_pids_;
    for (const auto& t : tracked_)
      if (t.checkpoint_attempted && t.checkpoint_result == 0) staged.push_back(t.pid);
    if (staged.empty()) return;
    const auto start = now();
    memory_.stage(staged, [this](int pid, int vpid) {
      if (host_) host_->staged(pid, vpid);
    });
    dump_timings_.gpu_memory_seconds += seconds_since(start);
  }

  void checkpoint_all() {
    checkpoint_round_done_ = true;
    std::vector<Tracked*> work;
    for (auto& t : tracked_)
      if (t.initial == ProcessState::Running || t.initial == ProcessState::Locked) work.push_back(&t);
    std::vector<RunningRestoreThread> threads(work.size());
    std::vector<bool> ready(work.size(), false);
    for (std::size_t i = 0; i < work.size(); ++i) {
      work[i]->checkpoint_attempted = true;
      int tid = -1;
      int rc = driver_->get_restore_thread_id(work[i]->pid, &tid);
      if (rc != kCudaSuccess) {
        log::error("cuda: pid " + std::to_string(work[i]->pid) + " lost its CUDA restore thread: " +
                   driver_->describe(rc));
        work[i]->checkpoint_result = -EIO;
        continue;
      }
      auto started = start_restore_thread(work[i]->pid, tid);
      if (!started) {
        log::error("cuda: pid " + std::to_string(work[i]->pid) + ": " + started.error().message);
        work[i]->checkpoint_result = -EIO;
        continue;
      }
      threads[i] = std::move(*started);
      ready[i] = true;
    }
    std::vector<int> results(work.size(), 0);
    std::vector<double> took(work.size(), 0);
    auto start = now();
    for_each_maybe_parallel(work.size(), parallel_, [&](std::size_t i) {
      if (!ready[i]) return;
      auto t0 = now();
      results[i] = driver_->checkpoint(work[i]->pid);
      took[i] = seconds_since(t0);
    });
    const double wall = seconds_since(start);
    dump_timings_.gpu_checkpoint_seconds += wall;
    for (std::size_t i = 0; i < work.size(); ++i) {
      if (!ready[i]) continue;
      auto stopped = threads[i].stop();
      if (results[i] != kCudaSuccess) {
        log::error("cuda: checkpointing pid " + std::to_string(work[i]->pid) + " failed: " +
                   driver_->describe(results[i]));
        work[i]->checkpoint_result = -EIO;
      } else if (!stopped) {
        log::error("cuda: pid " + std::to_string(work[i]->pid) + ": " + stopped.error().message);
        work[i]->checkpoint_result = -EIO;
      } else {
        log::info("cuda: checkpointed pid " + std::to_string(work[i]->pid) + " in " + fixed(took[i]) + " s");
      }
    }
    log::info("timing: cuda checkpoint of " + std::to_string(work.size()) + " process(es) " +
              (parallel_ ? "in parallel" : "one by one") + ": " + fixed(wall) + " s");
  }

  // Puts the GPU state back and unlocks, for `pids` at once; returns one result per pid (0 or -errno).
  std::vector<int> restore_processes(const std::vector<int>& pids, const std::vector<ProcessState>& initial,
                                     bool remap) {
    std::vector<int> results(pids.size(), 0);
    std::vector<RunningRestoreThread> threads(pids.size());
    std::vector<bool> ready(pids.size(), false);
    for (std::size_t i = 0; i < pids.size(); ++i) {
      int tid = -1;
      int rc = driver_->get_restore_thread_id(pids[i], &tid);
      if (rc != kCudaSuccess) {
        log::error("cuda: pid " + std::to_string(pids[i]) + " has no CUDA restore thread: " + driver_->describe(rc));
        results[i] = -EIO;
        continue;
      }
      auto started = start_restore_thread(pids[i], tid);
      if (!started) {
        log::error("cuda: pid " + std::to_string(pids[i]) + ": " + started.error().message);
        results[i] = -EIO;
        continue;
      }
      threads[i] = std::move(*started);
      ready[i] = true;
    }
    std::vector<std::string> errors(pids.size());
    std::vector<double> took(pids.size(), 0);
    auto start = now();
    for_each_maybe_parallel(pids.size(), parallel_, [&](std::size_t i) {
      if (!ready[i]) return;
      auto t0 = now();
      ProcessState now = ProcessState::Failed;
      int rc = driver_->get_state(pids[i], &now);
      if (rc == kCudaSuccess && now == ProcessState::Checkpointed && initial[i] != ProcessState::Checkpointed) {
        rc = driver_->restore(pids[i], remap ? pairs_for(pids[i]) : std::vector<UuidPair>{});
        if (rc != kCudaSuccess) errors[i] = "restore: " + driver_->describe(rc);
        now = ProcessState::Locked;
      }
      if (errors[i].empty() && rc == kCudaSuccess && now == ProcessState::Locked &&
          initial[i] == ProcessState::Running) {
        rc = driver_->unlock(pids[i]);
        if (rc != kCudaSuccess) errors[i] = "unlock: " + driver_->describe(rc);
      } else if (errors[i].empty() && rc != kCudaSuccess) {
        errors[i] = "state: " + driver_->describe(rc);
      } else if (errors[i].empty() && now == ProcessState::Failed) {
        errors[i] = "is in the driver's FAILED checkpoint state: its GPU state could not be put back";
      }
      took[i] = seconds_since(t0);
    });
    const double wall = seconds_since(start);
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (!ready[i]) continue;
      auto stopped = threads[i].stop();
      if (!errors[i].empty()) {
        log::error("cuda: pid " + std::to_string(pids[i]) + " " + errors[i]);
        results[i] = -EIO;
      } else if (!stopped) {
        log::error("cuda: pid " + std::to_string(pids[i]) + ": " + stopped.error().message);
        results[i] = -EIO;
      } else {
        log::info("cuda: restored pid " + std::to_string(pids[i]) + " in " + fixed(took[i]) + " s");
      }
    }
    log::info("timing: cuda restore of " + std::to_string(pids.size()) + " process(es) " +
              (parallel_ ? "in parallel" : "one by one") + ": " + fixed(wall) + " s");
    return results;
  }

  // Lets the driver's restore thread of `pid` run; `driver_tid` is the driver's name for it, which inside a
  // container's PID namespace is not the number ptrace needs here.
  Result<RunningRestoreThread> start_restore_thread(int pid, int driver_tid) {
    const int tid = thread_id_here(pid, driver_tid, proc_);
    if (tid < 0)
      return make_error("the driver names thread " + std::to_string(driver_tid) + " as its restore thread, but "
                        "process " + std::to_string(pid) + " has no such thread", ESRCH);
    if (tid != driver_tid)
      log::debug("cuda: pid " + std::to_string(pid) + ": restore thread " + std::to_string(driver_tid) +
                 " in its PID namespace is " + std::to_string(tid) + " here");
    return RunningRestoreThread::start(tid);
  }

  // The driver's restore opens every target GPU as /dev/nvidia<minor> in the process's root: make the nodes
  // a restore onto other GPUs needs where the restored /dev lacks them (device_nodes.h says when it does).
  Result<void> give_target_nodes(int pid) {
    const auto pairs = pairs_for(pid);
    std::vector<GpuNode> nodes;
    for (const auto& pair : pairs) {
      const int minor_number = nvidia_minor(restore_inventory_, pair.target);
      if (minor_number < 0)
        return make_error("target GPU " + format_uuid(pair.target) + " has no device minor in this node's "
                          "inventory", ENODEV);
      GpuNode node{static_cast<unsigned>(minor_number), kNvidiaMajor};
      struct stat st {};
      const std::string host_node = deps_.host.resolve("dev/nvidia" + std::to_string(minor_number)).string();
      if (::stat(host_node.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) node.major = major(st.st_rdev);
      nodes.push_back(node);
    }
    auto made = ensure_gpu_nodes(proc_ + "/" + std::to_string(pid) + "/root", nodes);
    if (!made) return make_error("its GPU device nodes: " + made.error().message, made.error().errno_value);
    if (made.value() > 0)
      log::info("cuda: pid " + std::to_string(pid) + ": made " + std::to_string(made.value()) +
                " target GPU node(s) in its /dev that the restored /dev lacked (restored onto other GPUs)");
    return {};
  }

  std::vector<UuidPair> pairs_for(int pid) const {
    auto it = pairs_by_pid_.find(pid);
    return it != pairs_by_pid_.end() ? it->second : default_pairs_;
  }

  // The pairs as they must be when the driver restores: a mapping placed after init decides them; with none,
  // GPUs may only stay where they are (require_plan_for_moves).
  Result<void> settle_mapping() {
    if (mapping_from_file_) return {};
    const int dir_fd = deps_.criu.image_dir_fd();
    const bool placed = ::faccessat(dir_fd, kRestorePlanFileName, F_OK, 0) == 0 ||
                        ::faccessat(dir_fd, kMappingFileName, F_OK, 0) == 0;
    if (!placed) return require_plan_for_moves(restore_mapping_);
    log::info("cuda: a GPU mapping was placed after init (the OCI hook's restore plan): it decides the pairs");
    return plan_restore_pairs(dir_fd);
  }

  void restore_all(int first_pid) {
    restore_round_done_ = true;
    std::vector<int> candidates{first_pid};
    for (int child : descendants(first_pid, proc_)) candidates.push_back(child);
    if (driver_ != nullptr) {
      if (auto settled = settle_mapping(); !settled) {
        for (int pid : candidates) {
          log::error("cuda: killing restored pid " + std::to_string(pid) + ": " + settled.error().message);
          restore_results_[pid] = -EIO;
          deps_.kill_task(pid, SIGKILL);
        }
        return;
      }
    }
    // The staging memory first: the driver's restore reads it.
    const auto fill_start = now();
    const auto fill_results = memory_.fill(candidates);
    restore_timings_.gpu_memory_seconds += seconds_since(fill_start);
    for (const auto& [pid, result] : fill_results) {
      restore_results_[pid] = result;
      if (result != 0) {
        log::error("cuda: killing restored pid " + std::to_string(pid) + ": its GPU memory could not be put back, "
                   "so the restore failed");
        deps_.kill_task(pid, SIGKILL);
      }
    }
    if (driver_ == nullptr) return;
    // Only the restore thread id can be asked while the task is stopped: every other driver call is served by
    // that thread inside the task, so it would wait for a thread CRIU holds (restore_processes lets it run).
    std::vector<int> pids;
    for (int pid : candidates) {
      auto filled = restore_results_.find(pid);
      if (filled != restore_results_.end() && filled->second != 0) continue;
      int tid = -1;
      if (driver_->get_restore_thread_id(pid, &tid) == kCudaSuccess) pids.push_back(pid);
    }
    if (pids.empty()) return;
    std::vector<int> ready;
    for (int pid : pids) {
      auto nodes = give_target_nodes(pid);
      if (nodes) {
        ready.push_back(pid);
        continue;
      }
      log::error("cuda: killing restored pid " + std::to_string(pid) + ": " + nodes.error().message);
      restore_results_[pid] = -EIO;
      deps_.kill_task(pid, SIGKILL);
    }
    pids = std::move(ready);
    if (pids.empty()) return;
    const auto restore_start = now();
    auto results = restore_processes(pids, std::vector<ProcessState>(pids.size(), ProcessState::Running), true);
    restore_timings_.gpu_restore_seconds += seconds_since(restore_start);
    for (std::size_t i = 0; i < pids.size(); ++i) {
      restore_results_[pids[i]] = results[i];
      if (results[i] == 0) memory_.release_mapped(pids[i]);
      if (results[i] != 0) {
        // Left as it is, the process would hang in its next CUDA call: end it so the failure is visible.
        log::error("cuda: killing restored pid " + std::to_string(pids[i]) + ": its GPU state could not be "
                   "restored, so the restore failed");
        deps_.kill_task(pids[i], SIGKILL);
      }
    }
  }

  void fini_dump(int ret) {
    const int final_state = deps_.criu.final_state();
    const bool keep_running = final_state == criu::kTaskAlive;
    if (ret == 0 && !keep_running) {
      if (final_state < 0) log::warn("cuda: CRIU's final task state is unknown; assuming the tasks are killed");
      return;
    }
    const std::string why = ret != 0 ? "the dump failed" : "--leave-running";
    // The memory before the driver's restore, which reads it.
    const std::set<int> unfilled = memory_.refill(why);
    std::vector<int> pids;
    std::vector<ProcessState> initial;
    for (const auto& t : tracked_) {
      if (!t.locked_by_us && !t.checkpoint_attempted) continue;
      if (unfilled.count(t.pid) != 0) {
        log::error("cuda: pid " + std::to_string(t.pid) + " stays checkpointed: restoring it without its GPU memory "
                   "would give it wrong data. Its memory is in " + gpu_image::kFilePrefix + "*.img in the image "
                   "directory");
        continue;
      }
      pids.push_back(t.pid);
      initial.push_back(t.initial);
    }
    if (!pids.empty() && driver_ != nullptr) {
      log::info("cuda: " + why + ": returning " +
                std::to_string(pids.size()) + " process(es) to their state before the dump");
      (void)restore_processes(pids, initial, false);
    }
  }

  TimePoint now() const { return deps_.clock.now(); }
  double seconds_since(TimePoint start) const { return std::chrono::duration<double>(now() - start).count(); }
  std::chrono::milliseconds until(TimePoint deadline) const {
    return std::max(std::chrono::milliseconds(1), std::chrono::ceil<std::chrono::milliseconds>(deadline - now()));
  }

  void release_lock(int pid) {
    if (const int rc = driver_->unlock(pid); rc != kCudaSuccess)
      log::warn("cuda: unlocking pid " + std::to_string(pid) + " after the failed lock: " + driver_->describe(rc));
  }

  // The driver host for this dump, forked at the first CUDA process: before any driver call, and only on dumps
  // that hold a CUDA process.
  Result<void> ensure_dump_host() {
    if (host_) return {};
    const bool guarded = deps_.settings.guardian;
    GPUCKPT_TRY(host_, deps_.start_driver(guarded ? DriverHost::Mode::Dump : DriverHost::Mode::DumpUnguarded,
                                          deps_.criu.image_dir_fd()));
    driver_ = &host_->driver();
    log::info("cuda: driver host started (pid " + std::to_string(host_->host_pid()) + "); CRIU makes no driver "
              "call itself" + (guarded ? "" : "; no guardian (GPUCKPT_CUDA_GUARDIAN=0)"));
    return {};
  }

  CudaBackendDeps deps_;
  std::string proc_;   // the host's procfs
  int stage_ = -1;
  bool enabled_ = false;
  bool parallel_ = true;
  std::unique_ptr<DriverSession> host_;
  Driver* driver_ = nullptr;   // host_'s driver: every call runs in the driver host
  std::optional<NodeInventory> inventory_;
  std::vector<Tracked> tracked_;
  std::vector<int> stand_in_pids_;   // stand-ins (deps_.stand_ins): memory path only, no driver
  GpuMemoryPath memory_;
  bool checkpoint_round_done_ = false;
  PluginDumpTimings dump_timings_;   // this dump's lock, driver checkpoint and memory images
  PluginRestoreTimings restore_timings_;   // this restore's fill and driver restore
  bool restore_round_done_ = false;
  bool tree_paused_ = false;   // the first PAUSE_DEVICES paused every CUDA process of the tree
  std::map<int, int> restore_results_;
  std::map<int, std::vector<UuidPair>> pairs_by_pid_;
  std::vector<UuidPair> default_pairs_;
  ProcessRecords restore_records_;
  NodeInventory restore_inventory_;
  GpuMapping restore_mapping_;   // the mapping plan_restore_pairs last chose
  bool mapping_from_file_ = false;   // the mapping came from a mapping file or restore plan in the images dir
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(CudaBackendDeps deps) {
  return std::make_unique<CudaBackend>(std::move(deps));
}

}  // namespace gpuckpt::cuda
