// The checkpoint workflow (POST /v1/checkpoints): one checkpoint of a container at a time; its GPU record (what the
// OCI hook or gpuckpt-nri saw, else this node's inventory); the runtime's export through a named pipe into the final
// archive, annotated on its way (checkpoint_annotation); the runtime's call split by CRIU's statistics where the
// archive carries them; with an image tag, its checkpoint image written, loaded and pushed (image_job.h).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "node/config.h"
#include "node/job_scheduler.h"
#include "node/metrics.h"
#include "runtime/container_runtime.h"
#include "gpu/gpu_model.h"
#include "base/result.h"

namespace gpuckpt::node {

struct CheckpointJob {
  ContainerRef ref;
  RuntimeContainer container;   // as found when the job was accepted
  std::string image_tag;        // empty: no image
};

struct CheckpointDeps {
  const AgentConfig& config;
  ContainerRuntime& runtime;
  const std::function<Result<NodeInventory>()>& inventory;
  std::shared_ptr<std::timed_mutex> container_lock;   // held while the job checkpoints its container
  Metrics& metrics;
};

void run_checkpoint_job(JobRun& run, const CheckpointDeps& deps, const CheckpointJob& job);

}  // namespace gpuckpt::node
