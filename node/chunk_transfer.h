// Moving a store-backed checkpoint between agents (docs/node-flow.md "Transfers of store-backed checkpoints"): its
// archive holds only manifests, its GPU memory is chunks in the source node's chunk store. The source asks the
// target which of the manifests' chunks its store lacks (POST /v1/chunks/missing), exports a temporary archive that
// carries only those (checkpoint_export.h), and pushes it like any archive (archive_transfer.h). On commit the target
// imports the carried chunks into its store, checks that every chunk is there, writes the references that keep
// them, and only then puts the archive in place; whatever fails discards the received file.
//
// The target's store is its gpu_memory.store setting (node or a path); an agent whose setting is inline or unset
// keeps no chunk store and refuses store-backed archives, naming the setting.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/checkpoint_archive.h"
#include "common/chunk_store.h"
#include "common/container_runtime.h"
#include "common/result.h"
#include "node/config.h"

namespace gpuckpt::node {

// Digests in one POST /v1/chunks/missing: 512 of them and their JSON are about 35 KiB, inside the default
// limits.max_request_bytes (64 KiB) that bounds every request body.
inline constexpr std::size_t kMaxMissingQuery = 512;

// The chunk store directory this agent's checkpoints use, or an error (EBUSY) naming gpu_memory.store when the
// agent keeps none.
Result<std::filesystem::path> agent_store_dir(const GpuMemoryConfig& config);

// POST /v1/chunks/missing: {"digests": ["<64 lowercase hex>", ...]} (at most kMaxMissingQuery, no duplicates) ->
// {"missing": [the digests the store lacks, in the order asked], "present": count}. Present chunks are touched, so a
// garbage collection between this answer and the commit that references them keeps them.
Result<nlohmann::json> missing_chunks(const GpuMemoryConfig& config, const nlohmann::json& body);

// The target's step on a received, digest-verified archive before it is put in place (IncomingArchives' admit
// hook). Without manifests: nothing to do (null). With carried chunks: imported into the store in place
// (import_checkpoint). Without: every chunk must be in the store already (reference_checkpoint). Either way the
// references are written. Answers what was done: {"manifests", "carried_chunks", "added_chunks", "added_bytes",
// "present_chunks", "references"}. Errors: EBADMSG for what the archive did wrong, ETIMEDOUT past limits.deadline
// (the chunks that landed stay, unreferenced: a commit again skips them), others as they came.
Result<nlohmann::json> admit_received_archive(const std::filesystem::path& received, const GpuMemoryConfig& config,
                                              const ArchiveLimits& limits);

// The sender's side: the distinct non-zero chunks the archive's manifests name (empty for an inline or CPU-only
// archive).
Result<std::set<chunk_store::Digest>> manifest_chunks(const std::filesystem::path& archive, const ArchiveLimits& limits);

// Which of `digests` the agent at `url` lacks, asked kMaxMissingQuery at a time.
Result<std::set<chunk_store::Digest>> ask_missing_chunks(const std::string& url, const std::string& token,
                                                         const std::set<chunk_store::Digest>& digests,
                                                         JobDeadline deadline);

}  // namespace gpuckpt::node
