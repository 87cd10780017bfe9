// Jobs outlive the agent process: every change of a job is written to <state_dir>/jobs/<job id>.json
// (atomic, fsynced), and a restarted agent reads them back. A job that was queued or running when the agent
// stopped did not finish: recovery marks it failed (or succeeded, when its archive had already been renamed
// into place, which happens only once it is complete) and removes its temporary files, which all carry its id:
// <checkpoints.dir>/.<job id>.* (runtime output, the archive being annotated, the restore copy), and a partial
// OCI image layout <checkpoints.dir>/<job id, lower case>.oci when it died writing one.
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "node/job_status.h"
#include "base/result.h"

namespace gpuckpt::node {

// The OCI image layout a job writes in the checkpoint directory: <job id, lower case>.oci (podman names a pulled
// oci: layout after its path, and image names cannot have capitals).
std::string image_layout_name(std::string_view job_id);

std::filesystem::path job_record_path(const std::filesystem::path& state_dir, std::string_view job_id);
Result<void> save_job(const std::filesystem::path& state_dir, const JobStatus& job);
void remove_job_record(const std::filesystem::path& state_dir, std::string_view job_id);
// Every readable record; unreadable ones are logged and skipped (never fatal).
std::vector<JobStatus> load_jobs(const std::filesystem::path& state_dir);

// For a job that was queued or running when the agent stopped: removes its temporary files under `temp_dir`
// and returns it finished, saying what happened.
JobStatus recover_interrupted(JobStatus job, const std::filesystem::path& temp_dir);

// Files in `dir` a rewrite left behind when its process died (".<name>.partial-<pid>-<n>", pid not ours).
void remove_stale_partials(const std::filesystem::path& dir);

}  // namespace gpuckpt::node
