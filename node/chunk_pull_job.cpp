#include "node/chunk_pull_job.h"

#include <chrono>

#include "node/chunk_transfer.h"
#include "node/registry_chunks.h"
#include "gpumem/chunk_store.h"
#include "base/log.h"

namespace gpuckpt::node {

void run_chunk_pull_job(JobRun& run, const AgentConfig& config, const std::string& image) {
  const auto start = std::chrono::steady_clock::now();
  run.phase("pulling");
  const auto fail = [&](const std::string& why) {
    const std::string message = run.with_time_budget("pulling", "pulling the chunks of " + image + " failed: " + why);
    log::error("job " + run.id() + ": " + capped_job_error(message));
    run.fail(message);
  };
  const RegistryOptions registry = run.registry();
  if (registry.push_timeout.count() == 0) return fail("the job has no time left");
  auto store_dir = agent_store_dir(config.gpu_memory);
  if (!store_dir) return fail(store_dir.error().message);
  auto store = chunk_store::Store::open(*store_dir, true);
  if (!store) return fail(store.error().message);
  auto pulled = pull_chunks(registry, image, **store);
  if (!pulled) return fail(pulled.error().message);
  const double total = seconds_since(start);
  run.succeed([&](JobStatus& j) {
    j.phase_seconds["total"] = total;
    j.result = pulled->to_json();
    j.result["store"] = store_dir->string();
  });
  log::info("job " + run.id() + ": chunks of " + image + " pulled into " + store_dir->string() + ": " +
            std::to_string(pulled->added) + " added (" + std::to_string(pulled->added_bytes) + " bytes), " +
            std::to_string(pulled->present) + " present (" + std::to_string(total) + " s)");
}

}  // namespace gpuckpt::node
