#include "agent/storage_maintenance.h"

#include <cerrno>
#include <ctime>
#include <map>
#include <memory>

#include "archive/archive_retention.h"
#include "gpumem/chunk_gc.h"
#include "gpumem/chunk_store.h"
#include "gpumem/gpu_image.h"
#include "base/log.h"
#include "node/chunk_transfer.h"

namespace gpuckpt::agent {

namespace {

retention::Policy policy_of(const node::RetentionConfig& c) {
  retention::Policy p;
  p.keep_count = c.keep_count;
  if (c.max_age_hours) p.max_age = std::chrono::hours(*c.max_age_hours);
  p.max_bytes = c.max_bytes;
  p.include_newest = c.include_newest;
  return p;
}

// The store the plugin writes to under this config: a path, else the node's (a store made under an earlier
// setting still needs collecting after a switch to inline).
std::string store_dir_of(const node::GpuMemoryConfig& c) {
  auto parsed = gpu_image::parse_store(c.store, "gpu_memory.store");
  if (parsed && !parsed->empty()) return *parsed;
  return chunk_store::kNodeStoreDir;
}

// A collection of `store` under `options`, the store's unreferenced chunks counted again from what it found.
Result<chunk_gc::Report> collect_and_count(chunk_store::Store& store, chunk_gc::Options options) {
  auto& unreferenced = node::unreferenced_chunks_of(store.root());
  const auto since = unreferenced.epoch();
  options.list_young = true;
  auto report = chunk_gc::collect(store, options);
  if (!report) return report;
  std::map<chunk_store::Digest, std::uint64_t> young;
  for (const auto& chunk : report->young) young.emplace(chunk.digest, chunk.bytes);
  unreferenced.recount(young, since);
  report->young.clear();
  return report;
}

}  // namespace

void count_unreferenced_chunks(const node::AgentConfig& config) {
  auto opened = chunk_store::Store::open(store_dir_of(config.gpu_memory), false);
  if (!opened) return;   // no store yet: nothing is unreferenced
  chunk_gc::Options options;
  options.grace = std::chrono::seconds(config.retention.gc_grace_seconds);
  auto report = collect_and_count(**opened, options);
  if (!report) {
    log::warn("chunk store count at start: " + report.error().message);
    return;
  }
  const auto usage = node::unreferenced_chunks_of((*opened)->root()).usage();
  log::info("chunk store " + (*opened)->root().string() + ": " + std::to_string(usage.chunks) + " unreferenced "
            "chunk(s), " + std::to_string(usage.bytes) + " bytes, count against limits.unreferenced_chunks and "
            "limits.unreferenced_chunk_bytes");
}

void maintain_storage(const node::AgentConfig& config) {
  std::unique_ptr<chunk_store::Store> store;
  const std::string store_dir = store_dir_of(config.gpu_memory);
  if (auto opened = chunk_store::Store::open(store_dir, false); opened) store = std::move(*opened);
  else if (opened.error().errno_value != ENOENT) log::warn("storage upkeep: " + opened.error().message);

  const auto policy = policy_of(config.retention);
  if (policy.enabled()) {
    const auto outcome = retention::apply(config.checkpoint_dir, policy, store.get(), config.archive_limits,
                                          static_cast<std::int64_t>(std::time(nullptr)));
    for (const auto& path : outcome.deleted) log::info("retention: deleted " + path.string());
    for (const auto& problem : outcome.problems) log::warn("retention: " + problem);
    if (!outcome.deleted.empty())
      log::info("retention: " + std::to_string(outcome.deleted.size()) + " archive(s), " +
                std::to_string(outcome.deleted_bytes) + " bytes deleted; " +
                std::to_string(outcome.references_removed) + " chunk store reference(s) dropped");
  }
  if (!store) return;   // no store on this node: nothing to collect
  chunk_gc::Options options;
  options.remove = true;
  options.grace = std::chrono::seconds(config.retention.gc_grace_seconds);
  auto report = collect_and_count(*store, options);
  if (!report) {
    log::warn("chunk store gc: " + report.error().message);
    return;
  }
  log::info("chunk store gc of " + store_dir + ": removed " + std::to_string(report->garbage_chunks) + " chunk(s), " +
            std::to_string(report->garbage_bytes) + " bytes; " + std::to_string(report->chunks) + " chunk(s) in " +
            std::to_string(report->refs) + " reference(s)");
  if (report->missing_chunks > 0)
    log::warn("chunk store gc of " + store_dir + ": " + std::to_string(report->missing_chunks) + " chunk(s) named by "
              "references are missing (first: " + report->missing[0].digest.hex() + ", reference " +
              report->missing[0].ref + "): those checkpoints cannot be restored from this store");
}

}  // namespace gpuckpt::agent
