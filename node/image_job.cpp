#include "node/image_job.h"

#include <algorithm>
#include <chrono>

#include "node/chunk_transfer.h"
#include "node/job_store.h"
#include "node/registry_chunks.h"
#include "node/registry_push.h"
#include "archive/checkpoint_images.h"
#include "gpumem/chunk_store.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void register_names(const JobRun& run, const AgentConfig& config, const std::string& name,
                    const CheckpointImage& image, const CheckpointGpuRecord& record) {
  if (auto registered = register_checkpoint_image(config.state_dir, name, image.manifest_digest, record); !registered)
    log::warn("job " + run.id() + ": checkpoint image " + name + " not registered for gpuckpt-nri: " +
              registered.error().message);
}

// A store-backed checkpoint's GPU memory is chunks in this node's store, not in the image: they go too, or a
// restore from the registry on another node stops at the first missing chunk. `push_end`: the push's own end.
Result<void> push_image_chunks(const JobRun& run, const AgentConfig& config, RegistryOptions registry,
                               Clock::time_point push_end, const CheckpointImage& image, const fs::path& archive,
                               nlohmann::json& chunks) {
  GPUCKPT_TRY(auto named, manifest_chunks(archive, run.archive_limits()));
  if (named.empty()) return {};
  GPUCKPT_TRY(auto store_dir, agent_store_dir(config.gpu_memory));
  GPUCKPT_TRY(auto store, chunk_store::Store::open(store_dir, false));
  std::error_code ec;
  const auto subject_size = fs::file_size(image.layout / "blobs" / "sha256" / image.manifest_digest.substr(7), ec);
  if (ec) return make_error("cannot read the image's manifest: " + ec.message());
  registry.push_timeout = std::chrono::ceil<std::chrono::seconds>(
      std::max(push_end - Clock::now(), Clock::duration::zero()));
  registry.timeout = std::min(registry.timeout, registry.push_timeout);
  GPUCKPT_TRY(auto sent, push_chunks(registry, *store, named, image.reference, image.manifest_digest, subject_size));
  chunks = sent.to_json();
  log::info("job " + run.id() + ": its " + std::to_string(sent.chunks) + " chunks pushed as " + sent.artifact + " (" +
            std::to_string(sent.uploaded) + " uploaded, " + std::to_string(sent.uploaded_bytes) + " bytes; " +
            std::to_string(sent.present) + " the registry had)");
  return {};
}

}  // namespace

Result<CheckpointImage> write_job_image(const JobRun& run, const AgentConfig& config, const fs::path& archive,
                                        const std::string& tag) {
  return write_checkpoint_image(archive, config.checkpoint_dir / image_layout_name(run.id()), tag,
                                run.archive_limits());
}

Result<std::string> load_and_register(const JobRun& run, const ImageDeps& deps, const CheckpointImage& image,
                                      const std::optional<CheckpointGpuRecord>& record) {
  auto loaded = deps.runtime.load_image(image.layout, image.reference, run.deadline());
  // gpuckpt-nri acts on a restore of this checkpoint only through an index entry (archive/checkpoint_images.h):
  // under the name the runtime's store holds it by, once it holds it; where the agent cannot load into the store
  // (CRI-O: ENOTSUP), under the name it tells the operator to copy it in as. Never under the tag alone: a tag
  // "busybox" must not make docker.io/library/busybox:latest a checkpoint.
  std::string name;
  if (loaded && !loaded->empty()) name = loaded.value();
  else if (!loaded && loaded.error().errno_value == ENOTSUP) name = checkpoint_image_name(image.reference);
  if (record && !name.empty()) register_names(run, deps.config, name, image, *record);
  return loaded;
}

Result<std::string> push_and_register(const JobRun& run, const AgentConfig& config, const CheckpointImage& image,
                                      const fs::path& archive, const std::optional<CheckpointGpuRecord>& record,
                                      nlohmann::json& chunks) {
  const RegistryOptions registry = run.registry();
  if (registry.push_timeout.count() == 0)
    return make_error("the push to " + registry.repository + " was not started: the job has no time left", ETIMEDOUT);
  const auto push_end = Clock::now() + registry.push_timeout;
  auto pushed = push_checkpoint_image(registry, image.layout, image.reference);
  if (!pushed) return pushed;
  log::info("job " + run.id() + ": checkpoint image pushed as " + pushed.value());
  if (auto with_chunks = push_image_chunks(run, config, registry, push_end, image, archive, chunks); !with_chunks)
    return make_error("the image is pushed as " + pushed.value() + ", but not its GPU memory: " +
                      with_chunks.error().message +
                      " (a restore from the registry elsewhere would miss its chunks; push the image again)");
  // A node that pulls it names it REPOSITORY:TAG (or with the digest): gpuckpt-nri there finds the record if
  // this node is that node; other nodes register it when they load it.
  if (record)
    for (const std::string& reference : {config.image_registry.repository + ":" + image.reference, pushed.value()})
      register_names(run, config, reference, image, *record);
  return pushed;
}

namespace {

// What the image job did beside writing it: the store's name or why not, the registry's name or why not.
struct Published {
  std::string loaded_as, load_error;
  std::optional<Result<std::string>> pushed;
  std::string push_error;
  nlohmann::json chunks = nullptr;
  double load_seconds = 0, push_seconds = 0;
  bool in_registry() const { return pushed && pushed->ok(); }
};

Published publish(JobRun& run, const ImageDeps& deps, const CheckpointImage& image, const ImageJob& job) {
  Published out;
  run.phase("loading-image");
  const auto t = Clock::now();
  auto loaded = run.cut_short()
                    ? Result<std::string>(make_error(JobRun::not_started("loading the image into the runtime's store")))
                    : load_and_register(run, deps, image, job.record);
  if (!loaded)
    out.load_error = run.with_time_budget("loading-image", "loading the checkpoint image into the runtime's store "
                                                           "failed: " + loaded.error().message);
  else if (loaded->empty())
    out.load_error = "runtime.kind " + deps.config.runtime_kind + " gives the agent no image store to load into "
                     "(runtime.kind cri on containerd, containerd and podman do)";
  else
    out.loaded_as = loaded.value();
  out.load_seconds = seconds_since(t);
  if (!deps.config.image_registry.repository.empty()) {
    run.phase("pushing-image");
    const auto push_start = Clock::now();
    out.pushed = push_and_register(run, deps.config, image, job.archive, job.record, out.chunks);
    out.push_seconds = seconds_since(push_start);
    if (!out.pushed->ok())
      out.push_error = run.with_time_budget("pushing-image", "pushing it to " + deps.config.image_registry.repository +
                                                                 " failed: " + out.pushed->error().message);
  }
  return out;
}

}  // namespace

void run_image_job(JobRun& run, const ImageDeps& deps, ImageJob job) {
  const auto start = Clock::now();
  auto fail = [&](const std::string& message) {
    log::error("job " + run.id() + ": checkpoint image of " + job.archive.string() + " failed: " +
               capped_job_error(message));
    run.fail(message);
  };
  run.phase("writing-image");
  if (run.cut_short()) return fail(JobRun::not_started("writing the checkpoint image") + "; the archive is untouched");
  auto image = write_job_image(run, deps.config, job.archive, job.tag);
  if (!image)
    return fail(run.with_time_budget("writing-image", "writing the checkpoint image failed: " + image.error().message));
  const double write_s = seconds_since(start);
  const Published published = publish(run, deps, *image, job);
  if (!published.load_error.empty() && !published.in_registry())
    return fail(published.load_error +
                (published.push_error.empty() ? std::string(" and no image_registry is configured")
                                              : "; " + published.push_error) +
                " (the image layout " + image->layout.string() + " is kept: load or push it by hand, or remove it)");
  // The store or the registry holds the image now; a second full copy beside the archive would only take space.
  std::error_code ec;
  fs::remove_all(image->layout, ec);
  const double total = seconds_since(start);
  nlohmann::json& about = job.info["image"];
  about = {{"reference", image->reference}, {"manifest_digest", image->manifest_digest}};
  if (published.load_error.empty()) about["loaded_as"] = published.loaded_as;
  else about["load_error"] = published.load_error;
  if (published.in_registry()) about["pushed_as"] = published.pushed->value();
  if (!published.chunks.is_null()) about["chunks"] = published.chunks;
  if (!published.push_error.empty()) about["push_error"] = published.push_error;
  run.succeed([&](JobStatus& j) {
    j.phase_seconds["writing-image"] = write_s;
    j.phase_seconds["loading-image"] = published.load_seconds;
    if (published.pushed) j.phase_seconds["pushing-image"] = published.push_seconds;
    j.phase_seconds["total"] = total;
    j.result = job.info;
  });
  log::info("job " + run.id() + ": checkpoint image of " + job.archive.string() + " is " +
            (published.load_error.empty() ? "loaded as " + published.loaded_as : std::string("not in the node's store")) +
            (published.in_registry() ? ", pushed as " + published.pushed->value() : std::string()) + " (" +
            std::to_string(total) + " s)");
}

}  // namespace gpuckpt::node
