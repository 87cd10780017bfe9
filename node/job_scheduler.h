// The node's jobs as data: their records (kept in <state_dir>/jobs, job_store.h), the limits on unfinished jobs,
// the line for a slot, each job's time budget and the agent's stop. It knows nothing of what a job does: the work
// is a function it runs on a thread of its own once a slot is free, handed a JobRun (the workflows:
// checkpoint_job.h, restore_job.h, image_job.h, transfer_job.h, chunk_pull_job.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node/config.h"
#include "node/job_events.h"
#include "node/job_state.h"
#include "node/job_status.h"
#include "node/metrics.h"
#include "node/request_stop.h"
#include "archive/checkpoint_archive.h"
#include "runtime/container_runtime.h"
#include "base/result.h"

namespace gpuckpt::node {

// Seconds from `start` to now: how long a job, or one of its steps, took.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Chunk pulls running at once (the pulls lane), besides limits.max_concurrent_jobs.
inline constexpr int kMaxConcurrentPulls = 2;

class JobScheduler;

// One job's run as its workflow sees it: its id and deadline, its record (phase, times, end) kept by the
// scheduler, and whether the agent cut its jobs short.
class JobRun {
 public:
  JobRun(JobScheduler& scheduler, std::string id, JobDeadline deadline);

  const std::string& id() const { return id_; }
  JobDeadline deadline() const { return deadline_; }
  // The job's record as it is now.
  JobStatus status() const;
  // Running, in step `phase` from now on.
  void phase(const char* phase);
  void update(const std::function<void(JobStatus&)>& change);
  void fail(const std::string& message);
  // Its end "succeeded" (phase done, finished now), with what `fill` adds (result, phase times).
  void succeed(const std::function<void(JobStatus&)>& fill);
  // Once shutdown() cut the jobs short: a workflow starts nothing more (no runtime call, no image, no wait).
  bool cut_short() const;
  // "<what> was not started (the agent is stopping)".
  static std::string not_started(const std::string& what);
  // A failure's message, saying first that the job's time ran out in `phase` when it has.
  std::string with_time_budget(const std::string& phase, const std::string& message) const;
  // Ends every peer and registry request of the job at the agent's stop (registry_client.h, bounded_request.h).
  const RequestStop* stop() const;
  // The archive walks' limits (config archive_limits), ending at the job's deadline.
  ArchiveLimits archive_limits() const;
  // image_registry for a push or pull of the job: its own deadline, and each request's, end by the job's (or at
  // the agent's stop).
  RegistryOptions registry() const;

 private:
  JobScheduler& scheduler_;
  std::string id_;
  JobDeadline deadline_;
};

class JobScheduler {
 public:
  // Reads the records of an earlier run: finished jobs stay visible, interrupted ones are closed (job_store.h).
  // `config` (its limits, state and checkpoint dirs) must outlive the scheduler; `observer` may be empty.
  JobScheduler(const AgentConfig& config, Metrics& metrics, JobObserver observer);
  ~JobScheduler();   // waits for the unfinished jobs
  JobScheduler(const JobScheduler&) = delete;
  JobScheduler& operator=(const JobScheduler&) = delete;

  // A place among the unfinished jobs for `client` (the API's caller identity): at most limits.max_queued_jobs in
  // all and limits.max_queued_jobs_per_client for one client (beyond: EAGAIN), none once the agent stops
  // (ESHUTDOWN).
  Result<void> check_room(const std::string& client) const;
  // Takes that place (checked again) and records the job queued; its id starts with the kind's prefix.
  Result<std::string> add(JobKind kind, nlohmann::json request, const std::string& client);

  // Which slots a job waits for: checkpoints, restores, images and transfers share limits.max_concurrent_jobs;
  // chunk pulls have kMaxConcurrentPulls of their own, so pulls from a slow (or hostile) registry never hold the
  // slots a checkpoint or restore needs.
  enum class Lane { jobs, pulls };
  // Runs `work` once a slot is free, within limits.job_timeout_seconds from now; the observer hears of it with
  // `pod`, the pod the job concerns (may be empty). Whatever `work` throws fails that job, never the agent.
  void launch(const std::string& job_id, PodRef pod, std::function<void(JobRun&)> work, Lane lane = Lane::jobs);

  std::optional<JobStatus> job(const std::string& id) const;
  // The jobs of `kind` (in `state` when given), newest first, at most `limit`.
  std::vector<JobStatus> list(JobKind kind, std::optional<JobState> state, std::size_t limit) const;
  // The first job `match` takes, in id order.
  std::optional<JobStatus> find(const std::function<bool(const JobStatus&)>& match) const;

  void wait_idle();
  // JobService::shutdown (service.h): bounded by limits.shutdown_grace_seconds; returns once no job runs.
  void shutdown();

 private:
  friend class JobRun;
  std::string new_job_id(JobKind kind);
  Result<void> room(const std::string& client) const;   // with mutex_ held
  void persist(const JobStatus& job);                     // with mutex_ held
  void update(const std::string& id, const std::function<void(JobStatus&)>& change);
  void end(const std::string& id, JobState state, const std::string& message);
  // The lane's line, its running count and its limit (all under mutex_).
  struct LaneSlots {
    std::deque<std::uint64_t> line;   // by the order of acceptance: a slot goes to the longest waiting one
    int active = 0;
  };
  LaneSlots& slots(Lane lane) { return lane == Lane::pulls ? pulls_ : jobs_lane_; }
  int slot_limit(Lane lane) const;
  // launch's thread, step by step.
  bool wait_for_slot(const std::string& job_id, std::uint64_t ticket, Lane lane, JobDeadline deadline);
  void run_work(const std::string& job_id, const PodRef& pod, const std::function<void(JobRun&)>& work,
                JobDeadline deadline);
  void tell(JobStage stage, const std::string& job_id, const PodRef& pod);
  void say_cut_short(const std::string& job_id);
  void finish(const std::string& job_id, bool had_slot, Lane lane, double seconds);
  void fail_unexpectedly(const std::string& job_id, const std::string& what);

  const AgentConfig& config_;
  Metrics& metrics_;
  JobObserver observer_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<std::string, JobStatus> jobs_;
  int running_ = 0;                                         // unfinished jobs
  std::map<std::string, std::string> job_clients_;          // unfinished job id -> its client
  std::map<std::string, std::size_t> unfinished_by_client_;
  std::condition_variable slot_;
  LaneSlots jobs_lane_, pulls_;
  std::uint64_t next_ticket_ = 0;
  bool stopping_ = false;              // shutdown() began: no new jobs, queued ones leave the line
  std::set<std::string> cut_short_;    // jobs still running when shutdown()'s grace ended
  RequestStop stop_requests_;          // stopped then: ends every peer and registry request of the jobs
};

}  // namespace gpuckpt::node
