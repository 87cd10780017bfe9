// The chunk pull workflow (POST /v1/chunk-pulls): the chunks of a store-backed checkpoint image pulled from
// image_registry into this agent's chunk store (node/registry_chunks.h), in the scheduler's pulls lane.
#pragma once

#include <string>

#include "node/config.h"
#include "node/job_scheduler.h"

namespace gpuckpt::node {

// `image`: the checkpoint image's name, checked when the job was accepted.
void run_chunk_pull_job(JobRun& run, const AgentConfig& config, const std::string& image);

}  // namespace gpuckpt::node
