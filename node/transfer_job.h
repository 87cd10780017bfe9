// The transfer workflow (POST /v1/transfers): an archive of this node's checkpoint directories pushed to the agent
// at `to` (node/archive_transfer.h). A store-backed checkpoint first sends the chunks the target lacks, over
// transfer.chunk_streams connections (node/chunk_transfer.h); an inline or CPU-only archive goes as it is.
#pragma once

#include <filesystem>
#include <string>

#include "node/config.h"
#include "node/job_scheduler.h"
#include "node/metrics.h"

namespace gpuckpt::node {

struct TransferJob {
  std::filesystem::path archive;
  std::string to;   // the target agent's URL, inside transfer.peer_networks
};

struct TransferDeps {
  const AgentConfig& config;
  const std::string& peer_token;   // presented to the target agent
  Metrics& metrics;
};

void run_transfer_job(JobRun& run, const TransferDeps& deps, const TransferJob& job);

}  // namespace gpuckpt::node
