// The agent's storage upkeep, every retention.interval_seconds (node/config.h RetentionConfig): archive retention
// in its checkpoint directory (common/archive_retention.h), then the chunk store's garbage collection
// (common/chunk_gc.h). Failures are logged, never thrown: the agent stays up.
#pragma once

#include "node/config.h"

namespace gpuckpt::agent {

void maintain_storage(const node::AgentConfig& config);

}  // namespace gpuckpt::agent
