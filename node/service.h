// The agent's work, without HTTP: checkpoint and restore jobs, the GPU and container views, metrics. The HTTP
// layer (http_api.h) maps requests onto it; tests drive it directly with a fake runtime.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/request_stop.h"
#include "node/config.h"
#include "node/job_events.h"
#include "node/metrics.h"
#include "node/requests.h"
#include "common/checkpoint_archive.h"
#include "common/checkpoint_image.h"
#include "common/container_runtime.h"
#include "common/gpu_model.h"
#include "common/restore_plan.h"
#include "common/result.h"

namespace gpuckpt::node {

// Error kinds travel in Error::errno_value; http_status() maps them (docs/api.md lists them).
//   EINVAL 400 bad input · EACCES 403 path outside the allowed dirs · ENOENT 404 · EBUSY 409 conflict ·
//   EFBIG 413 too large · EBADMSG 422 unusable archive · EDOM 422 no GPU match · ESHUTDOWN 503 the agent is
//   stopping · other 500
int http_status(const Error& error);

// A job's error as stored (its record), listed (GET /v1/jobs) and logged: longer ones are cut (at a UTF-8
// character's start) and say so. What a peer or a runtime answered is inside it, and it is no place for megabytes.
inline constexpr std::size_t kMaxJobErrorBytes = 4096;
// Chunk pulls running at once (JobService's pulls lane), besides limits.max_concurrent_jobs.
inline constexpr int kMaxConcurrentPulls = 2;
std::string capped_job_error(std::string message);

struct JobStatus {
  std::string id;
  std::string kind;     // "checkpoint" | "restore" | "image" | "transfer"
  // "queued" | "running" | "succeeded" | "failed" | "interrupted" (the agent stopped and cut it short, or it never
  // started: JobService::shutdown)
  std::string state;
  std::string phase;    // the step running now or last: "checkpointing", "annotating", "restoring", ...
  std::string error;
  std::string created_at;
  std::string finished_at;
  std::map<std::string, double> phase_seconds;
  // The runtime's call ("checkpointing") in parts that do not overlap, from CRIU's statistics where the archive
  // carries them (common/criu_stats.h checkpoint_runtime_phases); empty where it does not.
  std::map<std::string, double> runtime_phase_seconds;
  nlohmann::json request;
  nlohmann::json result = nlohmann::json::object();
};
nlohmann::json to_json(const JobStatus& job);

struct JobServiceDeps {
  std::shared_ptr<ContainerRuntime> runtime;
  std::function<Result<NodeInventory>()> inventory;
  DeviceNumberLookup device_numbers;
  // The bearer token this agent presents to other agents when it pushes an archive (the release's shared API
  // token); empty: transfers are refused.
  std::string peer_token;
  // Told when a job begins its work and when it ends (agent/pod_events.h posts Kubernetes Events from it); may be
  // empty. Called on the job's thread: it must not block.
  JobObserver observer;
};

class JobService {
 public:
  JobService(AgentConfig config, JobServiceDeps deps);
  ~JobService();   // waits for running jobs
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  // Every start_* first takes a place among the unfinished jobs: at most limits.max_queued_jobs in all and
  // limits.max_queued_jobs_per_client for one `client` (the API's caller identity, http_server.h); beyond, the
  // error is EAGAIN (HTTP 429) before any work is done.
  // An accepted job has limits.job_timeout_seconds from its acceptance, its wait for a slot included. Everything
  // it runs ends by then: the runtime's calls (container_runtime.h JobDeadline: a command killed with its process
  // group, a gRPC call cancelled), every archive walk (ArchiveLimits::deadline), the registry push. What it leaves
  // is cleaned up as after any failure (pipes, temporary archives, half-written layouts, its restore plan; an
  // archive is only ever renamed into place complete) and the job fails naming the setting and the phase.
  // Validates synchronously (bad names, unknown container -> error), then runs in the background.
  // `image_tag` non-empty: also write the archive as an OCI image layout <checkpoints.dir>/<id>.oci tagged with it.
  Result<std::string> start_checkpoint(const ContainerRef& ref, const std::string& image_tag = "",
                                       const std::string& client = "");
  // Validates the archive (path, format, integrity) and matches GPUs synchronously, then restores in the background.
  Result<std::string> start_restore(const RestoreRequest& request, const std::string& client = "");
  // Validates the archive like a restore, then writes its checkpoint image and loads it into the runtime's image
  // store in the background (result.image.loaded_as: the name a pod uses). Fails when the runtime has no store
  // the agent can fill.
  Result<std::string> start_image(const ImageRequest& request, const std::string& client = "");
  // Pushes an archive of the checkpoint directories to the agent at request.to (node/archive_transfer.h) in the
  // background: validated synchronously (the archive exists there, `to` is inside transfer.peer_networks).
  Result<std::string> start_transfer(const TransferRequest& request, const std::string& client = "");
  // Pulls the chunks of a store-backed checkpoint image from a registry into this agent's chunk store
  // (node/registry_chunks.h) in the background: validated synchronously (the image's name, a store configured).
  Result<std::string> start_chunk_pull(const ChunkPullRequest& request, const std::string& client = "");
  std::optional<JobStatus> job(const std::string& id) const;
  void wait_idle();
  // The agent's stop (SIGTERM), bounded: new jobs are refused (ESHUTDOWN) and queued ones end `interrupted` at once
  // without having done anything; running ones get limits.shutdown_grace_seconds to finish. Then they are cut short
  // as their deadline would cut them: every peer and registry request ends (RequestStop), no runtime call, image or
  // waiting for another checkpoint of the container starts, and each job's own failure path cleans up as after a
  // timeout. A runtime call in flight is let finish within its own limit (checkpoints.runtime_timeout_seconds):
  // CRIU killed mid-dump leaves the container frozen. The jobs cut short end `interrupted`, their error saying so.
  // Returns once no job runs.
  void shutdown();

  Result<nlohmann::json> gpus() const;
  // POST /v1/match: whether this node's GPUs can take a checkpoint whose GPU properties record is `record`, judged
  // as a restore judges it (this agent's inventory, NVML included, and its match_policy): common/properties_record's
  // match JSON, "matched" true or false.
  Result<nlohmann::json> match(const GpuPropertiesRecord& record) const;
  // GET /v1/checkpoints|restores|images: the jobs of `kind` (`state` "" for any), newest first, at most `limit`.
  std::vector<JobStatus> list_jobs(const std::string& kind, const std::string& state, std::size_t limit) const;
  // GET /v1/node: common/node_report.h's checks as this agent sees the node (CRIU only when it runs on the host).
  nlohmann::json node_report() const;
  // GET /v1/runtime: the runtime's kind, name and version, and how a restore comes about there.
  nlohmann::json runtime_report() const;
  Result<nlohmann::json> containers() const;
  // GET /metrics: the job and API counters, and the archive directory's use and free space as they are now.
  std::string metrics_text() const;
  Metrics& metrics() { return metrics_; }

  // An archive the API may name: inside checkpoints.dir (or kubelet_dir), no "..", no symlinks, a regular file.
  Result<std::filesystem::path> resolve_archive(std::string_view name) const;
  // resolve_archive, then the whole archive validated and inspected; it must hold CRIU images. Errors say it cannot
  // `purpose` ("be restored").
  Result<std::pair<std::filesystem::path, CheckpointInfo>> checked_archive(std::string_view name,
                                                                          const char* purpose) const;

  const AgentConfig& config() const { return config_; }

  // Removes restore plans nobody may use any more (common/restore_plan.h): at start and periodically (main).
  void sweep_restore_plans();
  static constexpr int kPlanSweepIntervalSeconds = 60;
  static constexpr std::size_t kPlanSweepEntries = 4096;   // per sweep: the directory holds pending restores only
  // A plan outlives the runtime's restore call (runtime_timeout) by this much.
  static constexpr std::int64_t kPlanGraceSeconds = 60;

 private:
  std::string new_job_id(const char* prefix);
  Result<void> job_room(const std::string& client) const;   // with mutex_ held
  // Once shutdown() cut the jobs short: the job `job_id` fails with `what` "not started" instead of starting it.
  bool cut_short() const { return stop_requests_.stopped(); }
  std::string not_started(const std::string& what) const;
  Result<void> check_job_room(const std::string& client) const;
  Result<std::string> add_job(const char* kind, nlohmann::json request, const std::string& client);
  void update(const std::string& id, const std::function<void(JobStatus&)>& change);
  // Runs `work` once a slot is free; the observer hears of it with `pod`, the pod the job concerns (may be empty).
  // Which slots a job waits for: checkpoints, restores, images and transfers share limits.max_concurrent_jobs;
  // chunk pulls have kMaxConcurrentPulls of their own, so pulls from a slow (or hostile) registry never hold the
  // slots a checkpoint or restore needs.
  enum class Lane { jobs, pulls };
  void launch(const std::string& job_id, PodRef pod, std::function<void(JobDeadline)> work, Lane lane = Lane::jobs);
  // The pod whose container `archive` checkpointed: from its spec (`info`, when read), else from the checkpoint job
  // of this agent that wrote it.
  PodRef pod_of_archive(const std::filesystem::path& archive, const CheckpointInfo* info) const;
  // config_.archive_limits, ending at `deadline`.
  ArchiveLimits job_limits(JobDeadline deadline) const;
  // A failure's message, saying first that the job's time ran out in `phase` when it has.
  std::string with_time_budget(JobDeadline deadline, const std::string& phase, const std::string& message) const;
  void fail_unexpectedly(const std::string& job_id, const std::string& what);
  void persist(const JobStatus& job);   // with mutex_ held
  void mark_phase(const std::string& job_id, const char* phase);
  void mark_failed(const std::string& job_id, const std::string& message);
  void mark_interrupted(const std::string& job_id, const std::string& message);
  // The job's end state "succeeded" (phase done, finished now), with what `fill` adds (result, phase times).
  void mark_succeeded(const std::string& job_id, const std::function<void(JobStatus&)>& fill);
  // Writes `archive`'s checkpoint image as <checkpoints.dir>/<job id, lower case>.oci tagged `tag`.
  Result<CheckpointImage> write_image(const std::string& job_id, const std::filesystem::path& archive,
                                      const std::string& tag, JobDeadline deadline);
  // Loads `image` into the runtime's store and registers its names for gpuckpt-nri with `record` (when given).
  // The store's name, or "" when the runtime has no store the agent fills.
  Result<std::string> load_and_register(const std::string& job_id, const CheckpointImage& image,
                                        const std::optional<CheckpointGpuRecord>& record, JobDeadline deadline);
  // Pushes `image` to image_registry and registers its names there; "REPOSITORY:TAG@sha256:...". When `archive`
  // (the image's layer) is store-backed, its chunks follow it (registry_chunks.h): `chunks` is that push's report,
  // left null for an inline or CPU-only checkpoint. The image pushed without its chunks is a failure.
  Result<std::string> push_and_register(const std::string& job_id, const CheckpointImage& image,
                                        const std::filesystem::path& archive,
                                        const std::optional<CheckpointGpuRecord>& record, JobDeadline deadline,
                                        nlohmann::json& chunks);
  std::shared_ptr<std::timed_mutex> container_lock(const std::string& container_id);
  void run_chunk_pull(const std::string& job_id, const std::string& image, JobDeadline deadline);
  void run_checkpoint(const std::string& job_id, const ContainerRef& ref, const RuntimeContainer& container,
                      const std::string& image_tag, JobDeadline deadline);
  void run_restore(const std::string& job_id, const std::filesystem::path& archive, const CheckpointInfo& checkpoint,
                   std::optional<RestorePlan> plan, std::string name, nlohmann::json info, JobDeadline deadline);
  void run_transfer(const std::string& job_id, const std::filesystem::path& archive, const std::string& to,
                    JobDeadline deadline);
  void run_image(const std::string& job_id, std::filesystem::path archive, std::string tag,
                 std::optional<CheckpointGpuRecord> record, nlohmann::json info, JobDeadline deadline);

  AgentConfig config_;
  JobServiceDeps deps_;
  Metrics metrics_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<std::string, JobStatus> jobs_;
  std::map<std::string, std::shared_ptr<std::timed_mutex>> container_locks_;
  int running_ = 0;                                         // unfinished jobs
  std::map<std::string, std::string> job_clients_;          // unfinished job id -> its client
  std::map<std::string, std::size_t> unfinished_by_client_;
  int active_ = 0;
  std::condition_variable slot_;
  // Jobs waiting for a slot, by the order of their acceptance: a slot goes to the longest waiting one (first come,
  // first served), and one that gives up at its deadline leaves the line.
  std::deque<std::uint64_t> waiting_;
  int active_pulls_ = 0;                  // the pulls lane's, likewise
  std::deque<std::uint64_t> waiting_pulls_;
  std::uint64_t next_ticket_ = 0;
  bool stopping_ = false;              // shutdown() began: no new jobs, queued ones leave the line
  std::set<std::string> cut_short_;    // jobs still running when shutdown()'s grace ended
  RequestStop stop_requests_;          // stopped then: ends every peer and registry request of the jobs
};

}  // namespace gpuckpt::node
