#include "node/transfer_job.h"

#include <chrono>
#include <optional>
#include <set>

#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "gpumem/chunk_store.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// One run of the workflow; each step returns false once the job failed.
class TransferWorkflow {
 public:
  TransferWorkflow(JobRun& run, const TransferDeps& deps, const TransferJob& job) : run_(run), deps_(deps), job_(job) {}

  bool run() {
    run_.phase("asking");
    auto named = manifest_chunks(job_.archive, run_.archive_limits());
    if (!named) {
      // Not readable as a checkpoint here: it goes as bytes, and the target validates it whole before any use.
      log::warn("job " + run_.id() + ": " + job_.archive.string() + " is sent as it is: " + named.error().message);
      named = std::set<chunk_store::Digest>{};
    }
    named_ = std::move(named.value());
    if (!named_.empty() && !send_chunks()) return false;
    return push();
  }

 private:
  bool fail(const std::string& phase, const std::string& why) {
    const std::string message = run_.with_time_budget(phase, "sending " + job_.archive.string() + " to " + job_.to +
                                                                 " failed: " + why);
    log::error("job " + run_.id() + ": " + capped_job_error(message));
    run_.fail(message);
    return false;
  }

  // The chunks the target lacks, uploaded before the archive that names them.
  bool send_chunks() {
    auto missing = ask_missing_chunks(job_.to, deps_.peer_token, named_, run_.deadline(), run_.stop());
    if (!missing) return fail("asking", missing.error().message);
    asking_seconds_ = seconds_since(start_);
    ChunkUploadReport uploaded;
    if (!missing->empty()) {
      run_.phase("uploading-chunks");
      const auto upload_start = Clock::now();
      auto store_dir = agent_store_dir(deps_.config.gpu_memory);
      if (!store_dir)
        return fail("uploading-chunks", job_.archive.filename().string() + " is store-backed and " +
                                            store_dir.error().message);
      auto store = chunk_store::Store::open(*store_dir, false);
      if (!store) return fail("uploading-chunks", store.error().message);
      auto done = upload_chunks(job_.to, deps_.peer_token, **store, *missing,
                                static_cast<unsigned>(deps_.config.transfer.chunk_streams), run_.deadline(),
                                [&](const ChunkUploadReport& so_far) {
                                  run_.update([&](JobStatus& j) {
                                    j.result["chunks_done"] = so_far.sent + so_far.present;
                                  });
                                },
                                run_.stop());
      if (!done) return fail("uploading-chunks", done.error().message);
      uploaded = *done;
      uploading_seconds_ = seconds_since(upload_start);
    }
    const std::size_t skipped = named_.size() - missing->size() + uploaded.present;
    deps_.metrics.chunks_sent(uploaded.sent, uploaded.sent_bytes, skipped, uploaded.streams);
    chunks_ = {{"named", named_.size()},        {"target_had", named_.size() - missing->size()},
               {"sent", uploaded.sent},         {"sent_bytes", uploaded.sent_bytes},
               {"present_on_upload", uploaded.present}, {"retries", uploaded.retries},
               {"streams", uploaded.streams}};
    return true;
  }

  bool push() {
    run_.phase("sending");
    PushOptions options;
    options.url = job_.to;
    options.name = job_.archive.filename().string();
    options.store_backed = !named_.empty();
    options.token = deps_.peer_token;
    options.deadline = run_.deadline();
    options.stop = run_.stop();
    auto pushed = push_archive(job_.archive, options, [&](std::uint64_t held) {
      run_.update([&](JobStatus& j) { j.result["target_bytes"] = held; });
    });
    if (!pushed) return fail("sending", pushed.error().message);
    // What the target's commit did: the references it wrote (null when it had the archive already).
    if (!chunks_.is_null()) chunks_["admitted"] = (*pushed)["chunks"];
    (*pushed)["chunks"] = chunks_;
    succeed(pushed.value());
    return true;
  }

  void succeed(const nlohmann::json& pushed) {
    const double total = seconds_since(start_);
    run_.succeed([&](JobStatus& j) {
      if (!chunks_.is_null()) {
        j.phase_seconds["asking"] = asking_seconds_;
        if (uploading_seconds_ > 0) j.phase_seconds["uploading-chunks"] = uploading_seconds_;
      }
      j.phase_seconds["sending"] = total - asking_seconds_ - uploading_seconds_;
      j.phase_seconds["total"] = total;
      j.result = pushed;
    });
    log::info("job " + run_.id() + ": sent " + job_.archive.string() + " to " + job_.to + " as " +
              pushed.value("archive", "") + " (" + std::to_string(pushed.value("sent_bytes", 0ULL)) +
              " archive bytes sent" +
              (chunks_.is_null() ? std::string()
                                 : ", " + chunks_["sent"].dump() + " of " + chunks_["named"].dump() +
                                       " chunks uploaded (" + chunks_["sent_bytes"].dump() + " bytes) over " +
                                       chunks_["streams"].dump() + " streams, " +
                                       std::to_string(named_.size() - chunks_["sent"].get<std::size_t>()) +
                                       " the target had") +
              ", " + std::to_string(total) + " s)");
  }

  JobRun& run_;
  const TransferDeps& deps_;
  const TransferJob& job_;
  const Clock::time_point start_ = Clock::now();
  std::set<chunk_store::Digest> named_;   // the chunks the archive's manifests name; none: it goes as it is
  nlohmann::json chunks_ = nullptr;
  double asking_seconds_ = 0, uploading_seconds_ = 0;
};

}  // namespace

void run_transfer_job(JobRun& run, const TransferDeps& deps, const TransferJob& job) {
  TransferWorkflow(run, deps, job).run();
}

}  // namespace gpuckpt::node
