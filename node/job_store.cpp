#include "node/job_store.h"

#include <unistd.h>

#include <cctype>

#include "base/json_reader.h"
#include "base/log.h"
#include "restore/restore_plan.h"
#include "state/container_store.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

std::string image_layout_name(std::string_view job_id) {
  std::string name = std::string(job_id) + ".oci";
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

fs::path job_record_path(const fs::path& state_dir, std::string_view job_id) {
  return state_dir / "jobs" / (std::string(job_id) + ".json");
}

Result<void> save_job(const fs::path& state_dir, const JobStatus& job) {
  if (!is_safe_id(job.id)) return make_error("job id '" + job.id + "' is not a safe file name");
  return write_file_atomically(job_record_path(state_dir, job.id), to_json(job).dump());
}

void remove_job_record(const fs::path& state_dir, std::string_view job_id) {
  std::error_code ec;
  fs::remove(job_record_path(state_dir, job_id), ec);
}

std::vector<JobStatus> load_jobs(const fs::path& state_dir) {
  std::vector<JobStatus> jobs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_dir / "jobs", ec)) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name.front() == '.') continue;
    auto json = read_json_file(entry.path());
    if (!json || !json.value()) {
      log::warn("skipping job record " + entry.path().string() + (json ? "" : ": " + json.error().message));
      continue;
    }
    const auto& j = *json.value();
    JsonFields fields(entry.path().string());
    JobStatus job;
    std::string kind, state;
    fields.get(j, "", "id", job.id, true);
    fields.get(j, "", "kind", kind, true);
    fields.get(j, "", "state", state, true);
    fields.get(j, "", "phase", job.phase);
    fields.get(j, "", "error", job.error);
    fields.get(j, "", "created_at", job.created_at);
    fields.get(j, "", "finished_at", job.finished_at);
    if (const auto* seconds = fields.object(j, "", "phase_seconds"))
      for (const auto& [phase, value] : seconds->items())
        if (value.is_number()) job.phase_seconds[phase] = value.get<double>();
    if (const auto* seconds = fields.object(j, "", "runtime_phase_seconds"))
      for (const auto& [phase, value] : seconds->items())
        if (value.is_number()) job.runtime_phase_seconds[phase] = value.get<double>();
    if (const auto* request = fields.object(j, "", "request")) job.request = *request;
    if (const auto* result = fields.object(j, "", "result")) job.result = *result;
    if (!fields.failed() && (!is_safe_id(job.id) || job.id + ".json" != name))
      fields.fail("id", "does not match the file name");
    const auto known_kind = job_kind_from_string(kind);
    const auto known_state = job_state_from_string(state);
    if (!fields.failed() && !known_kind) fields.fail("kind", "is not a job kind this agent knows: '" + kind + "'");
    if (!fields.failed() && !known_state)
      fields.fail("state", "is not one of " + job_state_choices() + ": '" + state + "'");
    if (fields.failed()) {
      log::warn("skipping job record: " + fields.error().message);
      continue;
    }
    job.kind = *known_kind;
    job.state = *known_state;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

JobStatus recover_interrupted(JobStatus job, const fs::path& temp_dir) {
  std::error_code ec;
  int removed = 0;
  const std::string prefix = "." + job.id + ".";
  for (const auto& entry : fs::directory_iterator(temp_dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::error_code rm;
    if (fs::remove_all(entry.path(), rm) > 0) {
      ++removed;
      log::info("job " + job.id + ": removed its temporary file " + entry.path().string());
    }
  }
  const std::string cleaned = removed ? "; " + std::to_string(removed) + " temporary file(s) removed" : "";
  job.finished_at = utc_now_rfc3339();
  // A checkpoint archive is renamed into place only once complete and synced (while the runtime may still be
  // finishing: phase checkpointing): if it is there, the job's work is done (only the bookkeeping was lost).
  const fs::path archive = temp_dir / (job.id + ".tar.zst");
  if (job.kind == JobKind::checkpoint &&
      (job.phase == "checkpointing" || job.phase == "annotating" || job.phase == "writing-image") &&
      fs::is_regular_file(archive, ec)) {
    const bool image_lost = job.phase == "writing-image";
    if (image_lost) {   // the layout is written in place under the job's (lower-case) name: a partial one goes
      const std::string layout = image_layout_name(job.id);
      if (fs::remove_all(temp_dir / layout, ec) > 0) log::info("job " + job.id + ": removed its partial image " + layout);
    }
    job.state = image_lost ? JobState::failed : JobState::succeeded;
    job.phase = image_lost ? job.phase : "done";
    job.result = {{"archive", archive.string()}, {"archive_bytes", fs::file_size(archive, ec)},
                  {"checkpoint_id", job.id}, {"recovered_after_restart", true}};
    if (image_lost)
      job.error = "the agent stopped while writing the OCI image; the archive " + archive.string() +
                  " is complete, the image is not (checkpoint again with an image tag)" + cleaned;
    return job;
  }
  if (job.kind == JobKind::image) {   // the archive is untouched; the layout may be partial or not loaded
    const std::string layout = image_layout_name(job.id);
    if (fs::remove_all(temp_dir / layout, ec) > 0) log::info("job " + job.id + ": removed its unfinished image " + layout);
    job.state = JobState::failed;
    job.error = "the agent stopped while this job was " + job.phase + "; the archive is untouched, the image " +
                layout + " was removed (ask for the image again)" + cleaned;
    return job;
  }
  if (job.kind == JobKind::pull) {   // chunks that landed are whole (written under a temporary name, renamed)
    job.state = JobState::failed;
    job.error = "the agent stopped while this job was " + job.phase + "; the chunks already pulled stay in the "
                "store (a pull again skips them): pull again" + cleaned;
    return job;
  }
  job.state = JobState::failed;
  job.error = "the agent stopped while this job was " + job.phase + "; it did not finish" + cleaned +
              (job.kind == JobKind::checkpoint ? " (the container was left as the runtime left it: check it, checkpoint again)"
                                        : " (check whether the runtime created the container, restore again)");
  return job;
}

void remove_stale_partials(const fs::path& dir) {
  std::error_code ec;
  const std::string ours = ".partial-" + std::to_string(::getpid()) + "-";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.front() != '.' || name.find(".partial-") == std::string::npos || name.find(ours) != std::string::npos)
      continue;
    std::error_code rm;
    if (entry.is_regular_file(rm) && fs::remove(entry.path(), rm))
      log::info("removed " + entry.path().string() + ", left by an interrupted archive rewrite");
  }
}

}  // namespace gpuckpt::node
