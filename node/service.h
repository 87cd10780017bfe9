// The agent's work, without HTTP: checkpoint and restore jobs, the GPU and container views, metrics. The HTTP
// layer (http_api.h) maps requests onto it; tests drive it directly with a fake runtime. It checks each request
// synchronously, then hands the job to the scheduler (job_scheduler.h) with its workflow (checkpoint_job.h,
// restore_job.h, image_job.h, transfer_job.h, chunk_pull_job.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/config.h"
#include "node/job_events.h"
#include "node/job_scheduler.h"
#include "node/job_state.h"
#include "node/job_status.h"
#include "node/metrics.h"
#include "node/requests.h"
#include "archive/checkpoint_archive.h"
#include "archive/checkpoint_image.h"
#include "runtime/container_runtime.h"
#include "gpu/gpu_model.h"
#include "restore/restore_plan.h"
#include "base/result.h"

namespace gpuckpt::node {

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
  // as a restore judges it (this agent's inventory, NVML included, and its match_policy): gpu/properties_record's
  // match JSON, "matched" true or false.
  Result<nlohmann::json> match(const GpuPropertiesRecord& record) const;
  // GET /v1/checkpoints|restores|images: the jobs of `kind` (in `state` when given), newest first, at most `limit`.
  std::vector<JobStatus> list_jobs(JobKind kind, std::optional<JobState> state, std::size_t limit) const;
  // GET /v1/node: runtime/node_report.h's checks as this agent sees the node (CRIU only when it runs on the host).
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

  // Removes restore plans nobody may use any more (restore/restore_plan.h): at start and periodically (main).
  void sweep_restore_plans();
  // Observes, then removes, the plugin's timings of restores no job of this agent took (kubelet's through CRI), once
  // they are kRestoreTimingsGraceSeconds old (a job takes its own right after its runtime returns). With the plans.
  void sweep_restore_timings();
  static constexpr long kRestoreTimingsGraceSeconds = 30;
  static constexpr int kPlanSweepIntervalSeconds = 60;
  static constexpr std::size_t kPlanSweepEntries = 4096;   // per sweep: the directory holds pending restores only

 private:
  // The pod whose container `archive` checkpointed: from its spec (`info`, when read), else from the checkpoint job
  // of this agent that wrote it.
  PodRef pod_of_archive(const std::filesystem::path& archive, const CheckpointInfo* info) const;
  // One checkpoint of a container at a time: its lock, made on first use.
  std::shared_ptr<std::timed_mutex> container_lock(const std::string& container_id);

  AgentConfig config_;
  JobServiceDeps deps_;
  Metrics metrics_;
  JobScheduler scheduler_;   // after config_ and metrics_, which it uses
  std::mutex locks_mutex_;
  std::map<std::string, std::shared_ptr<std::timed_mutex>> container_locks_;
};

}  // namespace gpuckpt::node
