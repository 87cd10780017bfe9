// The agent's storage upkeep, every retention.interval_seconds (node/config.h RetentionConfig): archive retention
// in its checkpoint directory (archive/archive_retention.h), then the chunk store's garbage collection
// (gpumem/chunk_gc.h). Failures are logged, never thrown: the agent stays up.
#pragma once

#include "node/config.h"

namespace gpuckpt::agent {

// Each collection also counts the store's unreferenced chunks again (node/chunk_transfer.h UnreferencedChunks).
void maintain_storage(const node::AgentConfig& config);

// That count made at the agent's start, before any upload is taken: a dry-run collection (nothing removed), so the
// chunks received before a restart still count.
void count_unreferenced_chunks(const node::AgentConfig& config);

}  // namespace gpuckpt::agent
