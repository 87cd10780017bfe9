#include "node/checkpoint_job.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "node/image_job.h"
#include "archive/archive_pipe.h"
#include "archive/checkpoint_archive.h"
#include "archive/checkpoint_image.h"
#include "state/container_store.h"
#include "criu/criu_stats.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// One run of the workflow: each step a method, what they find kept as members for the job's result.
class CheckpointWorkflow {
 public:
  CheckpointWorkflow(JobRun& run, const CheckpointDeps& deps, const CheckpointJob& job)
      : run_(run), deps_(deps), job_(job), container_(job.container), serial_(*deps.container_lock, std::defer_lock) {}

  // False: the job failed (its record says why).
  bool run();

 private:
  bool fail(const std::string& problem) {
    const std::string message = run_.with_time_budget(late_phase_ ? late_phase_ : phase_, problem);
    log::error("job " + run_.id() + ": checkpoint of " + container_.name + " failed: " + capped_job_error(message));
    run_.fail(message);
    return false;
  }

  // Runs `step` as the job's phase `name`, its time recorded; notes the step during which the deadline passed.
  template <class Step>
  auto timed(const char* name, Step&& step) {
    phase_ = name;
    run_.phase(name);
    const auto t = Clock::now();
    auto result = step();
    if (Clock::now() >= run_.deadline() && late_phase_ == nullptr) late_phase_ = name;
    const double s = seconds_since(t);
    run_.update([&](JobStatus& j) { j.phase_seconds[name] = s; });
    return result;
  }

  // One checkpoint of a container at a time. In slices: the agent's stop ends the wait too.
  bool take_container() {
    while (!serial_.try_lock_for(std::chrono::milliseconds(100)))
      if (Clock::now() >= run_.deadline() || run_.cut_short())
        return fail(run_.cut_short()
                        ? JobRun::not_started("the checkpoint") + " (another checkpoint of the container still ran)"
                        : "that checkpoint still runs");
    return true;
  }

  Result<void> read_gpu_record() {
    GPUCKPT_TRY(auto state, read_container_state(deps_.config.state_dir, container_.id));
    if (state) {
      record_.record = state->gpus.record;
      record_.devices = state->gpus.devices;
      record_.gpu_env = state->gpus.gpu_env;
      return {};
    }
    // No GPU use recorded: the archive still says where it was taken.
    GPUCKPT_TRY(record_.record.node, deps_.inventory());
    return {};
  }

  // One pass over the archive: the runtime exports into a named pipe while the receiver reads it, adds the GPU
  // record and annotations and writes the final archive (temporary name, fsync, rename) as it goes.
  bool export_archive() {
    std::error_code ec;
    fs::create_directories(deps_.config.checkpoint_dir, ec);
    const fs::path pipe_path = deps_.config.checkpoint_dir / ("." + run_.id() + ".runtime.fifo");
    final_path_ = deps_.config.checkpoint_dir / (run_.id() + ".tar.zst");
    auto pipe = ArchivePipe::create(pipe_path, ArchivePipe::Direction::from_runtime);
    if (!pipe) return fail(pipe.error().message);
    // CRIU's statistics of the dump, where the runtime puts them into its archive (podman and CRI-O at its top);
    // gpuckpt's plugin's own steps beside them (criu_stats.h).
    ArchiveEdit annotation = checkpoint_annotation(record_);
    for (const std::string& name : {std::string(kCriuDumpStatsFile), std::string("checkpoint/") + kCriuDumpStatsFile})
      annotation.peek[name] = [this](const std::string& image) { criu_stats_ = image; };
    for (const std::string& name :
         {std::string(kPluginDumpTimingsFile), std::string("checkpoint/") + kPluginDumpTimingsFile})
      annotation.peek[name] = [this](const std::string& text) { plugin_timings_ = text; };
    PipeWorker receiver(*pipe.value(), [&] {
      auto read = [&](char* buffer, std::size_t size) { return pipe.value()->receive(buffer, size); };
      bytes_ = receive_archive(read, "the runtime's export " + pipe_path.string(), final_path_, annotation,
                               run_.archive_limits());
      // A refused or unwritable archive: the runtime still writes until it is done (podman holds the pipe open for
      // reading as well, so it would never see EPIPE): take the rest so that it can finish.
      std::vector<char> rest(1 << 16);
      while (!bytes_) {
        auto got = read(rest.data(), rest.size());
        if (!got || got.value() == 0) break;
      }
    });
    auto dumped = timed("checkpointing", [&] { return deps_.runtime.checkpoint(container_, pipe_path, run_.deadline()); });
    timed("annotating", [&] {   // what is left once the runtime exited: the last block, fsync, rename
      receiver.finish();
      return 0;
    });
    pipe.value().reset();
    if (!dumped) {
      if (bytes_) fs::remove(final_path_, ec);
      return fail(dumped.error().message);
    }
    if (!bytes_)   // the runtime finished its checkpoint (podman stopped the container): undo that
      return fail("the runtime's checkpoint archive could not be written: " + bytes_.error().message +
                  deps_.runtime.put_back(container_));
    return true;
  }

  // The runtime's call in its parts, from CRIU's statistics where the archive carried them.
  void split_runtime_call() {
    if (!criu_stats_) return;
    auto stats = parse_criu_dump_stats(*criu_stats_, "the archive's " + std::string(kCriuDumpStatsFile));
    if (!stats) {
      log::warn("job " + run_.id() + ": the runtime's checkpoint is not split into its parts: " + stats.error().message);
      return;
    }
    const double runtime_seconds = run_.status().phase_seconds["checkpointing"];
    std::optional<PluginDumpTimings> plugin;
    if (plugin_timings_) {
      auto parsed = parse_plugin_dump_timings(*plugin_timings_, "the archive's " + std::string(kPluginDumpTimingsFile));
      if (parsed) plugin = *parsed;
      else log::warn("job " + run_.id() + ": the plugin's steps are not split out: " + parsed.error().message);
    }
    runtime_phases_ = checkpoint_runtime_phases(*stats, runtime_seconds, plugin);
    criu_pages_ = {{"scanned", stats->pages_scanned}, {"written", stats->pages_written}};
  }

  // The archive's OCI image, loaded into the runtime's store and pushed to image_registry. The image failing is
  // the job failing; its load or push failing is said in the result.
  bool publish_image() {
    const ImageDeps image_deps{deps_.config, deps_.runtime};
    auto written = timed("writing-image", [&]() -> Result<CheckpointImage> {
      if (run_.cut_short()) return make_error(JobRun::not_started("writing it"));
      return write_job_image(run_, deps_.config, final_path_, job_.image_tag);
    });
    if (!written)
      return fail("the archive " + final_path_.string() + " is complete, but its OCI image failed: " +
                  written.error().message);
    image_ = written.value();
    auto loaded = timed("loading-image", [&]() -> Result<std::string> {
      if (run_.cut_short()) return make_error(JobRun::not_started("loading it into the runtime's store"));
      return load_and_register(run_, image_deps, *image_, record_);
    });
    if (loaded) loaded_as_ = loaded.value();
    else load_error_ = run_.with_time_budget("loading-image", loaded.error().message);
    if (!deps_.config.image_registry.repository.empty()) {
      auto pushed = timed("pushing-image", [&] {
        return push_and_register(run_, deps_.config, *image_, final_path_, record_, pushed_chunks_);
      });
      if (pushed) pushed_as_ = pushed.value();
      else push_error_ = run_.with_time_budget("pushing-image", pushed.error().message);
    }
    return true;
  }

  nlohmann::json image_result() const {
    nlohmann::json image = {{"layout", image_->layout.string()}, {"reference", image_->reference},
                            {"manifest_digest", image_->manifest_digest},
                            {"pull", "podman pull oci:" + image_->layout.string() + ":" + image_->reference}};
    if (!loaded_as_.empty()) image["loaded_as"] = loaded_as_;
    if (!load_error_.empty()) image["load_error"] = load_error_;
    if (!pushed_as_.empty()) image["pushed_as"] = pushed_as_;
    if (!push_error_.empty()) image["push_error"] = push_error_;
    if (!pushed_chunks_.is_null()) image["chunks"] = pushed_chunks_;
    return image;
  }

  void succeed() {
    const double total = seconds_since(start_);
    run_.succeed([&](JobStatus& j) {
      j.phase_seconds["total"] = total;
      j.result = {{"archive", final_path_.string()},
                  {"archive_bytes", bytes_.value()},
                  {"container_id", container_.id},
                  {"container_name", container_.name},
                  {"checkpoint_id", run_.id()},
                  {"used_gpu_ids", record_.record.used_gpu_ids},
                  {"gpu_devices", to_json(record_)["devices"]}};
      if (!container_.pod_uid.empty()) j.result["pod_uid"] = container_.pod_uid;
      j.runtime_phase_seconds = runtime_phases_;
      if (!criu_pages_.is_null()) j.result["criu_pages"] = criu_pages_;
      if (image_) j.result["image"] = image_result();
    });
    deps_.metrics.checkpoint_written(bytes_.value());
    log::info("job " + run_.id() + ": checkpoint of " + container_.name + " written to " + final_path_.string() +
              " (" + std::to_string(bytes_.value()) + " bytes, " + std::to_string(record_.record.used_gpu_ids.size()) +
              " GPU(s), " + std::to_string(total) + " s)");
  }

  JobRun& run_;
  const CheckpointDeps& deps_;
  const CheckpointJob& job_;
  const RuntimeContainer& container_;
  const Clock::time_point start_ = Clock::now();
  const char* phase_ = "waiting for another checkpoint of the container";
  const char* late_phase_ = nullptr;   // the step during which the deadline passed
  std::unique_lock<std::timed_mutex> serial_;
  CheckpointGpuRecord record_;
  fs::path final_path_;
  Result<std::uint64_t> bytes_ = make_error("the archive was not received");
  std::optional<std::string> criu_stats_, plugin_timings_;
  std::map<std::string, double> runtime_phases_;
  nlohmann::json criu_pages_ = nullptr;
  std::optional<CheckpointImage> image_;
  std::string loaded_as_, load_error_, pushed_as_, push_error_;
  nlohmann::json pushed_chunks_ = nullptr;
};

bool CheckpointWorkflow::run() {
  if (!take_container()) return false;
  // A request that waited for another checkpoint of the same container finds it stopped: say so.
  if (auto now = deps_.runtime.find(job_.ref); now && now->state != "running")
    return fail("container " + container_.name + " is " + now->state +
                " now (checkpointed by an earlier request?)");
  record_.checkpoint_id = run_.id();
  if (auto recorded = timed("reading-gpu-record", [&] { return read_gpu_record(); }); !recorded)
    return fail(recorded.error().message);
  // Past this point the runtime is called and the container frozen: never begun once the agent cut its jobs short.
  if (run_.cut_short()) return fail(JobRun::not_started("the checkpoint") + "; the container was not touched");
  if (!export_archive()) return false;
  split_runtime_call();
  if (!job_.image_tag.empty() && !publish_image()) return false;
  succeed();
  return true;
}

}  // namespace

void run_checkpoint_job(JobRun& run, const CheckpointDeps& deps, const CheckpointJob& job) {
  CheckpointWorkflow(run, deps, job).run();
}

}  // namespace gpuckpt::node
