// The image workflow (POST /v1/images): an archive's checkpoint image written as an OCI layout, loaded into the
// runtime's image store and, with an image_registry, pushed there with its chunks; the layout removed once the store
// or the registry holds it. Its steps also finish a checkpoint asked with an image tag (checkpoint_job.h).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "node/config.h"
#include "node/job_scheduler.h"
#include "archive/checkpoint_archive.h"
#include "archive/checkpoint_image.h"
#include "runtime/container_runtime.h"

namespace gpuckpt::node {

struct ImageJob {
  std::filesystem::path archive;
  std::string tag;
  std::optional<CheckpointGpuRecord> record;   // the archive's GPU record, registered for gpuckpt-nri
  nlohmann::json info;                          // the archive's summary: the job's result grows from it
};

struct ImageDeps {
  const AgentConfig& config;
  ContainerRuntime& runtime;
};

void run_image_job(JobRun& run, const ImageDeps& deps, ImageJob job);

// Writes `archive`'s checkpoint image as <checkpoints.dir>/<job id, lower case>.oci tagged `tag`.
Result<CheckpointImage> write_job_image(const JobRun& run, const AgentConfig& config,
                                        const std::filesystem::path& archive, const std::string& tag);
// Loads `image` into the runtime's store and registers its names for gpuckpt-nri with `record` (when given).
// The store's name, or "" when the runtime has no store the agent fills.
Result<std::string> load_and_register(const JobRun& run, const ImageDeps& deps, const CheckpointImage& image,
                                      const std::optional<CheckpointGpuRecord>& record);
// Pushes `image` to image_registry and registers its names there; "REPOSITORY:TAG@sha256:...". When `archive`
// (the image's layer) is store-backed, its chunks follow it (registry_chunks.h): `chunks` is that push's report,
// left null for an inline or CPU-only checkpoint. The image pushed without its chunks is a failure.
Result<std::string> push_and_register(const JobRun& run, const AgentConfig& config, const CheckpointImage& image,
                                      const std::filesystem::path& archive,
                                      const std::optional<CheckpointGpuRecord>& record, nlohmann::json& chunks);

}  // namespace gpuckpt::node
