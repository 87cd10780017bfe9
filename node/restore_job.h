// The restore workflow (POST /v1/restores): the restore plan made when the job was accepted written for the OCI
// hook, bound to this checkpoint (and container), the archive's edits for the plan's devices; then the archive
// streamed, edited, through a named pipe to the runtime's restore, as often as it opens it. The plan leaves the
// state directory when the job ends, whatever happens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "node/config.h"
#include "node/job_scheduler.h"
#include "archive/checkpoint_archive.h"
#include "runtime/container_runtime.h"
#include "restore/restore_plan.h"

namespace gpuckpt::node {

// A plan outlives the runtime's restore call (runtime_timeout) by this much.
inline constexpr std::int64_t kPlanGraceSeconds = 60;

struct RestoreJob {
  std::filesystem::path archive;
  CheckpointInfo checkpoint;
  std::optional<RestorePlan> plan;   // none: the checkpoint holds no GPU state
  std::string name;                  // the restored container's, or "" for the runtime's choice
  nlohmann::json info;               // the archive's summary: the job's result grows from it
};

struct RestoreDeps {
  const AgentConfig& config;
  ContainerRuntime& runtime;
  const DeviceNumberLookup& device_numbers;
};

void run_restore_job(JobRun& run, const RestoreDeps& deps, RestoreJob job);

}  // namespace gpuckpt::node
