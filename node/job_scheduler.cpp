#include "node/job_scheduler.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "node/job_store.h"
#include "base/log.h"
#include "state/container_store.h"

namespace gpuckpt::node {

using Clock = std::chrono::steady_clock;

namespace {

Error with_errno(Error e, int value) {
  e.errno_value = value;
  return e;
}

std::string budget_message(const AgentConfig& config, JobDeadline deadline, const std::string& phase,
                           const std::string& message) {
  if (Clock::now() < deadline) return message;
  return "the job ran out of time: limits.job_timeout_seconds (" + std::to_string(config.job_timeout.count()) +
         " s) passed while " + phase + " (" + message + ")";
}

}  // namespace

JobRun::JobRun(JobScheduler& scheduler, std::string id, JobDeadline deadline)
    : scheduler_(scheduler), id_(std::move(id)), deadline_(deadline) {}

JobStatus JobRun::status() const { return scheduler_.job(id_).value_or(JobStatus{}); }

void JobRun::phase(const char* phase) {
  update([&](JobStatus& j) {
    j.state = JobState::running;
    j.phase = phase;
  });
}

void JobRun::update(const std::function<void(JobStatus&)>& change) { scheduler_.update(id_, change); }

void JobRun::fail(const std::string& message) { scheduler_.end(id_, JobState::failed, message); }

void JobRun::succeed(const std::function<void(JobStatus&)>& fill) {
  update([&](JobStatus& j) {
    j.state = JobState::succeeded;
    j.phase = "done";
    j.finished_at = utc_now_rfc3339();
    fill(j);
  });
}

bool JobRun::cut_short() const { return scheduler_.stop_requests_.stopped(); }

std::string JobRun::not_started(const std::string& what) {
  return what + " was not started (the agent is stopping)";
}

std::string JobRun::with_time_budget(const std::string& phase, const std::string& message) const {
  return budget_message(scheduler_.config_, deadline_, phase, message);
}

const RequestStop* JobRun::stop() const { return &scheduler_.stop_requests_; }

ArchiveLimits JobRun::archive_limits() const {
  ArchiveLimits limits = scheduler_.config_.archive_limits;
  limits.deadline = deadline_;
  return limits;
}

RegistryOptions JobRun::registry() const {
  RegistryOptions registry = scheduler_.config_.image_registry;
  registry.stop = &scheduler_.stop_requests_;
  registry.push_timeout = std::chrono::ceil<std::chrono::seconds>(time_left(deadline_, registry.push_timeout));
  registry.timeout = std::min(registry.timeout, registry.push_timeout);
  return registry;
}

JobScheduler::JobScheduler(const AgentConfig& config, Metrics& metrics, JobObserver observer)
    : config_(config), metrics_(metrics), observer_(std::move(observer)) {
  // Jobs of an earlier run: finished ones stay visible, interrupted ones are closed and their files removed.
  for (auto& job : load_jobs(config_.state_dir)) {
    if (!is_finished(job.state)) {
      job = recover_interrupted(std::move(job), config_.checkpoint_dir);
      log::warn("job " + job.id + " was interrupted by an agent restart: " + std::string(to_string(job.state)) +
                (job.error.empty() ? "" : ": " + job.error));
      if (auto saved = save_job(config_.state_dir, job); !saved) log::warn(saved.error().message);
    }
    jobs_[job.id] = std::move(job);
  }
}

JobScheduler::~JobScheduler() { wait_idle(); }

void JobScheduler::persist(const JobStatus& job) {
  if (auto saved = save_job(config_.state_dir, job); !saved)
    log::warn("job " + job.id + ": cannot save its record: " + saved.error().message);
}

void JobScheduler::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return running_ == 0; });
}

void JobScheduler::shutdown() {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  slot_.notify_all();   // the queued ones leave the line (wait_for_slot)
  const std::string grace = "limits.shutdown_grace_seconds (" + std::to_string(config_.shutdown_grace.count()) + " s)";
  if (running_ > 0)
    log::info("stopping: " + std::to_string(running_) + " unfinished job(s); the running ones get " + grace +
              " to finish");
  if (idle_.wait_for(lock, config_.shutdown_grace, [&] { return running_ == 0; })) return;
  for (const auto& [id, client] : job_clients_) {
    cut_short_.insert(id);
    const JobStatus& job = jobs_.at(id);
    log::warn("job " + id + " (" + std::string(to_string(job.kind)) + ", phase " + job.phase + ") still runs after " +
              grace + ": cutting it short");
  }
  stop_requests_.stop();
  idle_.wait(lock, [&] { return running_ == 0; });
}

std::string JobScheduler::new_job_id(JobKind kind) {
  static std::mt19937_64 rng{std::random_device{}()};
  const auto now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", static_cast<unsigned>(rng() & 0xffffffffu));
  return std::string(job_id_prefix(kind)) + "-" + stamp + "-" + suffix;
}

Result<void> JobScheduler::room(const std::string& client) const {
  if (stopping_)
    return with_errno(make_error("the agent is stopping and takes no new jobs; ask again once it is back (or ask "
                                 "another node's agent)"), ESHUTDOWN);
  if (running_ >= config_.max_queued_jobs)
    return with_errno(make_error("the agent has " + std::to_string(running_) + " jobs queued or running, its limit "
                                 "(limits.max_queued_jobs); retry once some have finished"), EAGAIN);
  const auto it = unfinished_by_client_.find(client);
  if (it != unfinished_by_client_.end() && it->second >= config_.max_queued_jobs_per_client)
    return with_errno(make_error("this client has " + std::to_string(it->second) + " jobs queued or running, its "
                                 "limit (limits.max_queued_jobs_per_client); retry once some have finished"), EAGAIN);
  return {};
}

Result<void> JobScheduler::check_room(const std::string& client) const {
  std::lock_guard lock(mutex_);
  return room(client);
}

Result<std::string> JobScheduler::add(JobKind kind, nlohmann::json request, const std::string& client) {
  std::lock_guard lock(mutex_);
  GPUCKPT_TRY_VOID(room(client));   // again: others may have come meanwhile
  JobStatus job;
  job.id = new_job_id(kind);
  job.kind = kind;
  job.state = JobState::queued;
  job.phase = "queued";
  job.created_at = utc_now_rfc3339();
  job.request = std::move(request);
  // Finished jobs are kept for GET; beyond kMaxJobs the oldest finished ones are forgotten.
  constexpr std::size_t kMaxJobs = 1000;
  while (jobs_.size() >= kMaxJobs) {
    auto oldest = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
      if (is_finished(it->second.state) &&
          (oldest == jobs_.end() || it->second.finished_at < oldest->second.finished_at))
        oldest = it;
    if (oldest == jobs_.end()) break;
    remove_job_record(config_.state_dir, oldest->first);
    jobs_.erase(oldest);
  }
  jobs_[job.id] = job;
  persist(job);
  metrics_.job_accepted(job.kind);
  ++running_;
  job_clients_[job.id] = client;
  ++unfinished_by_client_[client];
  return job.id;
}

void JobScheduler::update(const std::string& id, const std::function<void(JobStatus&)>& change) {
  std::lock_guard lock(mutex_);
  auto& job = jobs_.at(id);
  change(job);
  persist(job);
}

void JobScheduler::end(const std::string& id, JobState state, const std::string& message) {
  update(id, [&](JobStatus& j) {
    j.state = state;
    j.error = capped_job_error(message);
    j.finished_at = utc_now_rfc3339();
  });
}

std::optional<JobStatus> JobScheduler::job(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

std::vector<JobStatus> JobScheduler::list(JobKind kind, std::optional<JobState> state, std::size_t limit) const {
  std::vector<JobStatus> out;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, job] : jobs_)
      if (job.kind == kind && (!state || job.state == *state)) out.push_back(job);
  }
  // Ids start with the kind's prefix and the UTC second they were made: created_at then id orders them.
  std::sort(out.begin(), out.end(), [](const JobStatus& a, const JobStatus& b) {
    return a.created_at != b.created_at ? a.created_at > b.created_at : a.id > b.id;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

std::optional<JobStatus> JobScheduler::find(const std::function<bool(const JobStatus&)>& match) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, job] : jobs_)
    if (match(job)) return job;
  return std::nullopt;
}

int JobScheduler::slot_limit(Lane lane) const {
  return lane == Lane::pulls ? kMaxConcurrentPulls : config_.max_concurrent_jobs;
}

void JobScheduler::launch(const std::string& job_id, PodRef pod, std::function<void(JobRun&)> work, Lane lane) {
  const auto accepted = Clock::now();
  const JobDeadline deadline = accepted + config_.job_timeout;
  std::uint64_t ticket = 0;
  {
    std::lock_guard in_line(mutex_);   // its place in the line for a slot is taken here, in the order of acceptance
    ticket = next_ticket_++;
    slots(lane).line.push_back(ticket);
  }
  // Detached: a finished job leaves nothing behind; wait_idle() (and the destructor) wait on running_.
  std::thread([this, job_id, pod = std::move(pod), accepted, deadline, ticket, work = std::move(work), lane] {
    const bool has_slot = wait_for_slot(job_id, ticket, lane, deadline);
    update(job_id, [&](JobStatus& j) { j.phase_seconds["queued"] = seconds_since(accepted); });
    if (has_slot) run_work(job_id, pod, work, deadline);
    say_cut_short(job_id);
    // Before the job counts as done: whoever waits for the agent to be idle has heard of it by then.
    if (const auto finished = job(job_id))
      tell(finished->state == JobState::succeeded ? JobStage::succeeded : JobStage::failed, job_id, pod);
    finish(job_id, has_slot, lane, seconds_since(accepted));
  }).detach();
}

bool JobScheduler::wait_for_slot(const std::string& job_id, std::uint64_t ticket, Lane lane, JobDeadline deadline) {
  bool has_slot = false, stopped_in_line = false;
  {
    std::unique_lock slot_lock(mutex_);
    LaneSlots& lane_slots = slots(lane);
    const int limit = slot_limit(lane);
    auto first_with_room = [&] { return lane_slots.active < limit && lane_slots.line.front() == ticket; };
    slot_.wait_until(slot_lock, deadline, [&] { return stopping_ || first_with_room(); });
    has_slot = !stopping_ && first_with_room();
    stopped_in_line = stopping_;
    if (has_slot) ++lane_slots.active;
    lane_slots.line.erase(std::find(lane_slots.line.begin(), lane_slots.line.end(), ticket));
  }
  slot_.notify_all();   // the next in line may take a free slot now, or step up behind one that gave up
  if (stopped_in_line) {
    const std::string message = "the agent stopped before this job had a slot; nothing of it was done: ask again "
                                "once the agent is back";
    log::warn("job " + job_id + ": " + message);
    end(job_id, JobState::interrupted, message);
  } else if (!has_slot) {
    const std::string message = budget_message(
        config_, deadline, "queued",
        lane == Lane::pulls
            ? "every one of the " + std::to_string(kMaxConcurrentPulls) + " chunk pull slots was busy"
            : "every one of limits.max_concurrent_jobs (" + std::to_string(config_.max_concurrent_jobs) + ") was busy");
    log::error("job " + job_id + ": " + message);
    end(job_id, JobState::failed, message);
  }
  return has_slot;
}

void JobScheduler::run_work(const std::string& job_id, const PodRef& pod, const std::function<void(JobRun&)>& work,
                            JobDeadline deadline) {
  // Whatever a job meets (a bug, bad_alloc), it fails that job and never the agent.
  try {
    tell(JobStage::started, job_id, pod);
    JobRun run(*this, job_id, deadline);
    work(run);
  } catch (const std::exception& e) {
    fail_unexpectedly(job_id, e.what());
  } catch (...) {
    fail_unexpectedly(job_id, "unknown exception");
  }
}

void JobScheduler::tell(JobStage stage, const std::string& job_id, const PodRef& pod) {
  if (!observer_) return;
  // The observer is the agent's: whatever it does wrong, the job's outcome stays what it is.
  try {
    if (auto now = job(job_id)) observer_(stage, *now, pod);
  } catch (const std::exception& e) {
    log::warn("job " + job_id + ": its observer failed: " + e.what());
  }
}

void JobScheduler::say_cut_short(const std::string& job_id) {
  // A job shutdown() cut short failed for that: it says so (the failure, what it cleaned up, follows).
  std::lock_guard cut(mutex_);
  JobStatus& j = jobs_.at(job_id);
  if (!cut_short_.count(job_id) || j.state != JobState::failed) return;
  j.state = JobState::interrupted;
  j.error = capped_job_error("interrupted: the agent was stopping and cut this job short after "
                             "limits.shutdown_grace_seconds (" + std::to_string(config_.shutdown_grace.count()) +
                             " s), in phase " + j.phase + "; ask for it again once the agent is back: " + j.error);
  persist(j);
  log::warn("job " + job_id + ": " + j.error);
}

void JobScheduler::finish(const std::string& job_id, bool had_slot, Lane lane, double seconds) {
  std::lock_guard done(mutex_);
  const JobStatus& finished = jobs_.at(job_id);
  metrics_.job_finished(finished.kind, finished.state == JobState::succeeded, seconds, finished.phase_seconds,
                        finished.runtime_phase_seconds);
  if (had_slot) --slots(lane).active;
  --running_;
  if (auto it = job_clients_.find(job_id); it != job_clients_.end()) {
    if (--unfinished_by_client_[it->second] == 0) unfinished_by_client_.erase(it->second);
    job_clients_.erase(it);
  }
  slot_.notify_all();   // each waiter checks whether it is first in line
  idle_.notify_all();
}

void JobScheduler::fail_unexpectedly(const std::string& job_id, const std::string& what) {
  log::error("job " + job_id + ": internal error: " + capped_job_error(what));
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || is_finished(it->second.state)) return;
  it->second.state = JobState::failed;
  it->second.error = capped_job_error("internal error in phase " + it->second.phase + ": " + what);
  it->second.finished_at = utc_now_rfc3339();
  persist(it->second);
}

}  // namespace gpuckpt::node
