#include "node/restore_job.h"

#include <chrono>

#include "archive/archive_pipe.h"
#include "criu/criu_stats.h"
#include "base/log.h"
#include "archive/restore_archive.h"
#include "gpumem/memory_lineage.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The runtime reads the archive from the job's named pipe and names that in its errors; the user named the archive.
std::string naming_archive(std::string message, const fs::path& pipe, const fs::path& archive) {
  const std::string from = pipe.string();
  for (auto at = message.find(from); at != std::string::npos; at = message.find(from, at + archive.string().size()))
    message.replace(at, from.size(), archive.string());
  return message;
}

// One run of the workflow; each step returns false once the job failed.
class RestoreWorkflow {
 public:
  RestoreWorkflow(JobRun& run, const RestoreDeps& deps, RestoreJob job) : run_(run), deps_(deps), job_(std::move(job)) {}

  bool run() {
    if (job_.plan && !place_plan()) return false;
    if (run_.cut_short()) return fail(JobRun::not_started("the restore") + "; no container was created");
    return restore();
  }

 private:
  // The plan is this job's alone: whatever happens, it leaves the state directory when the job ends (the hook
  // removed it already where it placed it for CRIU). True: it was still there.
  bool drop_plan() {
    if (!job_.plan) return false;
    auto removed = remove_restore_plan(deps_.config.state_dir, job_.plan->id);
    if (!removed) log::warn("job " + run_.id() + ": " + removed.error().message);
    return removed && removed.value();
  }

  bool fail(const std::string& problem) {
    const std::string message = run_.with_time_budget(phase_, problem);
    if (drop_plan()) log::info("job " + run_.id() + ": restore plan " + job_.plan->id + " removed");
    log::error("job " + run_.id() + ": restore of " + job_.archive.string() + " failed: " + capped_job_error(message));
    run_.fail(message);
    return false;
  }

  void phase(const char* name) {
    phase_ = name;
    run_.phase(name);
  }

  bool place_plan() {
    phase("planning");
    const auto t = Clock::now();
    RestorePlan& plan = *job_.plan;
    // Bound to this checkpoint (the restored config carries io.gpuckpt.checkpoint-id) and, where the agent names
    // the container itself (containerd: the name is its id), to that container; usable while the runtime may
    // still be restoring.
    plan.expires_at = plan_clock_now() + kPlanGraceSeconds +
                      std::chrono::ceil<std::chrono::seconds>(time_left(run_.deadline(), deps_.config.runtime_timeout))
                          .count();
    if (deps_.config.runtime_kind == "containerd" && !job_.name.empty()) plan.container_id = job_.name;
    // The CRIU plugin puts the restored /dev right with the numbers the plan carries (criu-plugin/restored_dev.h).
    for (auto& device : plan.devices)
      if (auto numbers = deps_.device_numbers(device.host_path)) device.target_numbers = *numbers;
    job_.info["plan"] = to_json(plan);
    if (auto written = write_restore_plan(deps_.config.state_dir, plan); !written)
      return fail(written.error().message);
    // podman does not run precreate hooks on restore, and CRIU restores /dev from its images: when the plan
    // moves devices, spec.dump and the saved /dev nodes change on their way to the runtime (restore).
    auto edits = restore_edits(job_.checkpoint, plan, deps_.device_numbers, run_.archive_limits());
    if (!edits) return fail("restore refused: " + job_.archive.string() + ": " + edits.error().message);
    edit_ = std::move(edits.value());
    run_.update([&](JobStatus& j) { j.phase_seconds["planning"] = seconds_since(t); });
    return true;
  }

  // One pass over the archive per read of the runtime: it reads the archive from a named pipe, which is fed from
  // the stored archive with the edits applied, uncompressed, each time the runtime opens it.
  bool restore() {
    phase("restoring");
    const auto t = Clock::now();
    const fs::path pipe_path = deps_.config.checkpoint_dir / ("." + run_.id() + ".restore.fifo");
    auto pipe = ArchivePipe::create(pipe_path, ArchivePipe::Direction::to_runtime);
    if (!pipe) return fail(pipe.error().message);
    std::optional<Error> stream_error;
    PipeWorker sender(*pipe.value(), [&] {
      const ArchiveEdit unchanged;
      for (;;) {
        auto opened = pipe.value()->await_reader();
        if (!opened) stream_error = opened.error();
        if (!opened || !opened.value()) return;
        auto sent = send_archive(
            job_.archive, [&](const char* data, std::size_t size) { return pipe.value()->send(data, size); },
            edit_ ? *edit_ : unchanged, run_.archive_limits());
        pipe.value()->end_stream();
        // EPIPE: the runtime read what it needed and closed its end (a tar reader stops at the end marker).
        if (!sent && sent.error().errno_value != EPIPE && !stream_error) stream_error = sent.error();
      }
    });
    auto restored = deps_.runtime.restore(pipe_path, job_.name, run_.deadline());
    sender.finish();
    pipe.value().reset();
    if (!restored)
      return fail(naming_archive(restored.error().message, pipe_path, job_.archive) +
                  (stream_error ? " (streaming the archive to the runtime: " + stream_error->message + ")" : ""));
    // Where the archive went as it was (nothing moved), the restored config names no plan and none was needed.
    if (drop_plan() && edit_)
      log::warn("job " + run_.id() + ": restore plan " + job_.plan->id + " was still in the state directory after "
                "the restore: no OCI hook placed it for CRIU (is gpuckpt's hook in the runtime's hooks dir?); removed");
    succeed(restored.value(), seconds_since(t));
    return true;
  }

  // What the plugin's steps of this restore took, as it left them for the restored pid (memory_lineage.h); taken
  // whether or not they can be used, so none stays behind.
  std::optional<PluginRestoreTimings> plugin_steps(const RuntimeContainer& restored) const {
    auto left = memory_lineage::take_restore_timings(deps_.config.node_store_dir.string(), restored.pid);
    if (!left) {
      log::warn("job " + run_.id() + ": the plugin's restore steps: " + left.error().message);
      return std::nullopt;
    }
    if (!*left) return std::nullopt;
    auto parsed = parse_plugin_restore_timings(**left, "the plugin's restore steps of pid " +
                                                           std::to_string(restored.pid));
    if (!parsed) {
      log::warn("job " + run_.id() + ": " + parsed.error().message);
      return std::nullopt;
    }
    return *parsed;
  }

  void succeed(const RuntimeContainer& restored, double restoring) {
    const double total = seconds_since(start_);
    const auto plugin = plugin_steps(restored);
    job_.info["container_id"] = restored.id;
    job_.info["container_name"] = restored.name;
    job_.info["state"] = restored.state;
    run_.succeed([&](JobStatus& j) {
      j.phase_seconds["restoring"] = restoring;
      j.phase_seconds["total"] = total;
      if (restored.restore_stats)
        j.runtime_phase_seconds = restore_runtime_phases(*restored.restore_stats, restoring, plugin);
      else if (plugin)
        j.runtime_phase_seconds = restore_runtime_phases(restoring, *plugin);
      j.result = job_.info;
    });
    log::info("job " + run_.id() + ": restored " + job_.archive.string() + " as " + restored.name + " (" +
              restored.id + ", " + std::to_string(total) + " s)");
  }

  JobRun& run_;
  const RestoreDeps& deps_;
  RestoreJob job_;
  const Clock::time_point start_ = Clock::now();
  const char* phase_ = "queued";
  std::optional<ArchiveEdit> edit_;
};

}  // namespace

void run_restore_job(JobRun& run, const RestoreDeps& deps, RestoreJob job) {
  RestoreWorkflow(run, deps, std::move(job)).run();
}

}  // namespace gpuckpt::node
