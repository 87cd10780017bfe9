#include "node/service.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>

#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "node/job_store.h"
#include "node/registry_chunks.h"
#include "node/registry_push.h"
#include "common/archive_pipe.h"
#include "common/checkpoint_archive.h"
#include "common/checkpoint_export.h"
#include "common/chunk_store.h"
#include "common/checkpoint_image.h"
#include "common/checkpoint_images.h"
#include "common/log.h"
#include "common/matcher.h"
#include "common/node_report.h"
#include "common/properties_record.h"
#include "common/container_store.h"
#include "common/criu_stats.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Error with_errno(Error e, int value) {
  e.errno_value = value;
  return e;
}

// What a restore or image job reports about its archive.
nlohmann::json archive_summary(const fs::path& archive, const CheckpointInfo& info) {
  return {{"archive", archive.string()}, {"container_name", info.container_name}, {"engine", info.engine},
          {"gpu_record", info.gpus.has_value()}};
}

bool is_finished(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "interrupted";
}

bool is_inside(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

}  // namespace

std::string capped_job_error(std::string message) {
  if (message.size() <= kMaxJobErrorBytes) return message;
  const std::size_t total = message.size();
  std::size_t cut = kMaxJobErrorBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;   // not inside a character
  message.resize(cut);
  return message + "... (" + std::to_string(total - cut) + " more bytes cut)";
}

int http_status(const Error& error) {
  switch (error.errno_value) {
    case EINVAL: return 400;
    case EACCES: case EPERM: return 403;
    case ENOENT: return 404;
    case EBUSY: case EEXIST: return 409;
    case EFBIG: return 413;
    case EAGAIN: return 429;
    case EBADMSG: case EDOM: return 422;
    case EDQUOT: return 507;
    case ESHUTDOWN: return 503;
    default: return 500;
  }
}

nlohmann::json to_json(const JobStatus& job) {
  nlohmann::json j = {{"id", job.id},           {"kind", job.kind},       {"state", job.state},
                      {"phase", job.phase},     {"created_at", job.created_at},
                      {"phase_seconds", job.phase_seconds}, {"request", job.request}, {"result", job.result}};
  if (!job.runtime_phase_seconds.empty()) j["runtime_phase_seconds"] = job.runtime_phase_seconds;
  if (!job.error.empty()) j["error"] = job.error;
  if (!job.finished_at.empty()) j["finished_at"] = job.finished_at;
  return j;
}

JobService::JobService(AgentConfig config, JobServiceDeps deps) : config_(std::move(config)), deps_(std::move(deps)) {
  // Jobs of an earlier run: finished ones stay visible, interrupted ones are closed and their files removed.
  for (auto& job : load_jobs(config_.state_dir)) {
    if (job.state == "queued" || job.state == "running") {
      job = recover_interrupted(std::move(job), config_.checkpoint_dir);
      log::warn("job " + job.id + " was interrupted by an agent restart: " + job.state +
                (job.error.empty() ? "" : ": " + job.error));
      if (auto saved = save_job(config_.state_dir, job); !saved) log::warn(saved.error().message);
    }
    jobs_[job.id] = std::move(job);
  }
  remove_stale_partials(config_.checkpoint_dir);
  if (!config_.kubelet_checkpoint_dir.empty()) remove_stale_partials(config_.kubelet_checkpoint_dir);
  sweep_restore_plans();
}

void JobService::sweep_restore_plans() {
  const auto swept = gpuckpt::sweep_restore_plans(config_.state_dir, plan_clock_now(), kPlanSweepEntries);
  if (swept.removed)
    log::info("removed " + std::to_string(swept.removed) + " expired or unreadable restore plan(s) from " +
              (config_.state_dir / "restore-plans").string());
}

void JobService::persist(const JobStatus& job) {
  if (auto saved = save_job(config_.state_dir, job); !saved)
    log::warn("job " + job.id + ": cannot save its record: " + saved.error().message);
}

JobService::~JobService() { wait_idle(); }

void JobService::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return running_ == 0; });
}

void JobService::shutdown() {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  slot_.notify_all();   // the queued ones leave the line (launch)
  const std::string grace = "limits.shutdown_grace_seconds (" + std::to_string(config_.shutdown_grace.count()) + " s)";
  if (running_ > 0)
    log::info("stopping: " + std::to_string(running_) + " unfinished job(s); the running ones get " + grace +
              " to finish");
  if (idle_.wait_for(lock, config_.shutdown_grace, [&] { return running_ == 0; })) return;
  for (const auto& [id, client] : job_clients_) {
    cut_short_.insert(id);
    const JobStatus& job = jobs_.at(id);
    log::warn("job " + id + " (" + job.kind + ", phase " + job.phase + ") still runs after " + grace +
              ": cutting it short");
  }
  stop_requests_.stop();
  idle_.wait(lock, [&] { return running_ == 0; });
}

std::string JobService::not_started(const std::string& what) const {
  return what + " was not started (the agent is stopping)";
}

std::string JobService::new_job_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  const auto now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", static_cast<unsigned>(rng() & 0xffffffffu));
  return std::string(prefix) + "-" + stamp + "-" + suffix;
}

Result<void> JobService::job_room(const std::string& client) const {
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

Result<void> JobService::check_job_room(const std::string& client) const {
  std::lock_guard lock(mutex_);
  return job_room(client);
}

Result<std::string> JobService::add_job(const char* kind, nlohmann::json request, const std::string& client) {
  std::lock_guard lock(mutex_);
  GPUCKPT_TRY_VOID(job_room(client));   // again: others may have come meanwhile
  JobStatus job;
  const std::string k = kind;
  job.id = new_job_id(k == "checkpoint" ? "ck" : k == "image" ? "im" : k == "transfer" ? "tr" : k == "pull" ? "pl" : "rs");
  job.kind = kind;
  job.state = "queued";
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

void JobService::update(const std::string& id, const std::function<void(JobStatus&)>& change) {
  std::lock_guard lock(mutex_);
  auto& job = jobs_.at(id);
  change(job);
  persist(job);
}

void JobService::mark_phase(const std::string& job_id, const char* phase) {
  update(job_id, [&](JobStatus& j) {
    j.state = "running";
    j.phase = phase;
  });
}

void JobService::mark_failed(const std::string& job_id, const std::string& message) {
  update(job_id, [&](JobStatus& j) {
    j.state = "failed";
    j.error = capped_job_error(message);
    j.finished_at = utc_now_rfc3339();
  });
}

void JobService::mark_interrupted(const std::string& job_id, const std::string& message) {
  update(job_id, [&](JobStatus& j) {
    j.state = "interrupted";
    j.error = capped_job_error(message);
    j.finished_at = utc_now_rfc3339();
  });
}

void JobService::mark_succeeded(const std::string& job_id, const std::function<void(JobStatus&)>& fill) {
  update(job_id, [&](JobStatus& j) {
    j.state = "succeeded";
    j.phase = "done";
    j.finished_at = utc_now_rfc3339();
    fill(j);
  });
}

std::string JobService::metrics_text() const {
  return metrics_.render(archive_dir_usage(config_.checkpoint_dir));
}

std::optional<JobStatus> JobService::job(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

PodRef JobService::pod_of_archive(const fs::path& archive, const CheckpointInfo* info) const {
  if (info)
    if (PodRef pod = pod_of_checkpoint_spec(info->spec); !pod.empty()) return pod;
  std::lock_guard lock(mutex_);
  for (const auto& [id, job] : jobs_) {
    if (job.kind != "checkpoint" || job.state != "succeeded" || job.result.value("archive", "") != archive.string())
      continue;
    PodRef pod{job.request.value("namespace", ""), job.request.value("pod", ""), job.result.value("pod_uid", "")};
    if (!is_valid_pod_ref(pod)) pod.uid.clear();
    return is_valid_pod_ref(pod) ? pod : PodRef{};
  }
  return {};
}

void JobService::launch(const std::string& job_id, PodRef pod, std::function<void(JobDeadline)> work, Lane lane) {
  const auto accepted = Clock::now();
  const JobDeadline deadline = accepted + config_.job_timeout;
  std::uint64_t ticket = 0;
  // The lane's line, its running count and its limit (all under mutex_).
  std::deque<std::uint64_t>& line = lane == Lane::pulls ? waiting_pulls_ : waiting_;
  int& active = lane == Lane::pulls ? active_pulls_ : active_;
  const int limit = lane == Lane::pulls ? kMaxConcurrentPulls : config_.max_concurrent_jobs;
  {
    std::lock_guard in_line(mutex_);   // its place in the line for a slot is taken here, in the order of acceptance
    ticket = next_ticket_++;
    line.push_back(ticket);
  }
  // Detached: a finished job leaves nothing behind; wait_idle() (and the destructor) wait on running_.
  std::thread([this, job_id, pod = std::move(pod), accepted, deadline, ticket, work = std::move(work), &line, &active,
               limit, lane] {
    auto tell = [&](JobStage stage) {
      if (!deps_.observer) return;
      // The observer is the agent's: whatever it does wrong, the job's outcome stays what it is.
      try {
        if (auto now = job(job_id)) deps_.observer(stage, *now, pod);
      } catch (const std::exception& e) {
        log::warn("job " + job_id + ": its observer failed: " + e.what());
      }
    };
    bool has_slot = false, stopped_in_line = false;
    {
      std::unique_lock slot_lock(mutex_);
      slot_.wait_until(slot_lock, deadline, [&] { return stopping_ || (active < limit && line.front() == ticket); });
      has_slot = !stopping_ && active < limit && line.front() == ticket;
      stopped_in_line = stopping_;
      if (has_slot) ++active;
      line.erase(std::find(line.begin(), line.end(), ticket));
    }
    slot_.notify_all();   // the next in line may take a free slot now, or step up behind one that gave up
    const double queued_s = seconds_since(accepted);
    update(job_id, [&](JobStatus& j) { j.phase_seconds["queued"] = queued_s; });
    if (stopped_in_line) {
      const std::string message = "the agent stopped before this job had a slot; nothing of it was done: ask again "
                                  "once the agent is back";
      log::warn("job " + job_id + ": " + message);
      mark_interrupted(job_id, message);
    } else if (!has_slot) {
      const std::string message = with_time_budget(
          deadline, "queued", lane == Lane::pulls ? "every one of the " + std::to_string(kMaxConcurrentPulls) +
                                                        " chunk pull slots was busy"
                                                  : "every one of limits.max_concurrent_jobs (" +
                                                        std::to_string(config_.max_concurrent_jobs) + ") was busy");
      log::error("job " + job_id + ": " + message);
      mark_failed(job_id, message);
    }
    // Whatever a job meets (a bug, bad_alloc), it fails that job and never the agent.
    try {
      if (has_slot) {
        tell(JobStage::started);
        work(deadline);
      }
    } catch (const std::exception& e) {
      fail_unexpectedly(job_id, e.what());
    } catch (...) {
      fail_unexpectedly(job_id, "unknown exception");
    }
    {   // A job shutdown() cut short failed for that: it says so (the failure, what it cleaned up, follows).
      std::lock_guard cut(mutex_);
      JobStatus& j = jobs_.at(job_id);
      if (cut_short_.count(job_id) && j.state == "failed") {
        j.state = "interrupted";
        j.error = capped_job_error("interrupted: the agent was stopping and cut this job short after "
                                   "limits.shutdown_grace_seconds (" + std::to_string(config_.shutdown_grace.count()) +
                                   " s), in phase " + j.phase + "; ask for it again once the agent is back: " + j.error);
        persist(j);
        log::warn("job " + job_id + ": " + j.error);
      }
    }
    // Before the job counts as done: whoever waits for the agent to be idle has heard of it by then.
    if (const auto finished = job(job_id))
      tell(finished->state == "succeeded" ? JobStage::succeeded : JobStage::failed);
    std::lock_guard done(mutex_);
    const JobStatus& finished = jobs_.at(job_id);
    metrics_.job_finished(finished.kind, finished.state == "succeeded", seconds_since(accepted),
                          finished.phase_seconds, finished.runtime_phase_seconds);
    if (has_slot) --active;
    --running_;
    if (auto it = job_clients_.find(job_id); it != job_clients_.end()) {
      if (--unfinished_by_client_[it->second] == 0) unfinished_by_client_.erase(it->second);
      job_clients_.erase(it);
    }
    slot_.notify_all();   // each waiter checks whether it is first in line
    idle_.notify_all();
  }).detach();
}

ArchiveLimits JobService::job_limits(JobDeadline deadline) const {
  ArchiveLimits limits = config_.archive_limits;
  limits.deadline = deadline;
  return limits;
}

std::string JobService::with_time_budget(JobDeadline deadline, const std::string& phase,
                                           const std::string& message) const {
  if (Clock::now() < deadline) return message;
  return "the job ran out of time: limits.job_timeout_seconds (" + std::to_string(config_.job_timeout.count()) +
         " s) passed while " + phase + " (" + message + ")";
}

void JobService::fail_unexpectedly(const std::string& job_id, const std::string& what) {
  log::error("job " + job_id + ": internal error: " + capped_job_error(what));
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || is_finished(it->second.state)) return;
  it->second.state = "failed";
  it->second.error = capped_job_error("internal error in phase " + it->second.phase + ": " + what);
  it->second.finished_at = utc_now_rfc3339();
  persist(it->second);
}

std::shared_ptr<std::timed_mutex> JobService::container_lock(const std::string& container_id) {
  std::lock_guard lock(mutex_);
  auto& slot = container_locks_[container_id];
  if (!slot) slot = std::make_shared<std::timed_mutex>();
  return slot;
}

Result<fs::path> JobService::resolve_archive(std::string_view name) const {
  if (name.empty()) return make_error("'archive' is empty: name an archive in " + config_.checkpoint_dir.string());
  if (name.size() > 4096 || name.find('\0') != std::string_view::npos)
    return make_error("'archive' is not a valid path");
  const fs::path requested(name);
  for (const auto& part : requested)
    if (part == "..")
      return with_errno(make_error("archive '" + std::string(name) + "' contains '..'; refused"), EACCES);
  std::vector<fs::path> allowed = {config_.checkpoint_dir};
  if (!config_.kubelet_checkpoint_dir.empty()) allowed.push_back(config_.kubelet_checkpoint_dir);
  const fs::path candidate = (requested.is_absolute() ? requested : config_.checkpoint_dir / requested).lexically_normal();
  const fs::path* base = nullptr;
  for (const auto& dir : allowed)
    if (is_inside(candidate, dir.lexically_normal())) base = &dir;
  if (!base)
    return with_errno(make_error("archive '" + std::string(name) + "' is outside " + config_.checkpoint_dir.string() +
                                 "; the agent only reads archives from its checkpoint directories"), EACCES);
  // Below the configured directory every component must be a real directory or file: a symlink could lead anywhere.
  std::error_code ec;
  fs::path walked = base->lexically_normal();
  for (const auto& part : candidate.lexically_relative(walked)) {
    walked /= part;
    const auto status = fs::symlink_status(walked, ec);
    if (ec || !fs::exists(status))
      return with_errno(make_error("archive '" + std::string(name) + "' does not exist (" + candidate.string() + ")"),
                        ENOENT);
    if (fs::is_symlink(status))
      return with_errno(make_error("archive '" + std::string(name) + "' goes through a symlink; refused"), EACCES);
  }
  if (!fs::is_regular_file(fs::symlink_status(candidate, ec)))
    return make_error("archive '" + std::string(name) + "' is not a regular file");
  return candidate;
}

Result<std::pair<fs::path, CheckpointInfo>> JobService::checked_archive(std::string_view name,
                                                                          const char* purpose) const {
  GPUCKPT_TRY(auto archive, resolve_archive(name));
  // Read inside the request (its handler answers when this returns): held to the request's deadline.
  ArchiveLimits limits = config_.archive_limits;
  limits.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config_.request_deadline_seconds);
  auto info = inspect_checkpoint_archive(archive, limits);
  if (!info) {
    const int code = info.error().errno_value == EFBIG ? EFBIG : EBADMSG;
    return with_errno(make_error("archive " + std::string(name) + " cannot " + purpose + ": " + info.error().message),
                      code);
  }
  if (!info->has_criu_images)
    return with_errno(make_error("archive " + std::string(name) + " has no CRIU images (checkpoint/inventory.img)"),
                      EBADMSG);
  return std::make_pair(std::move(archive), std::move(info.value()));
}

Result<nlohmann::json> JobService::gpus() const {
  GPUCKPT_TRY(auto inventory, deps_.inventory());
  return to_json(inventory);
}

Result<nlohmann::json> JobService::match(const GpuPropertiesRecord& record) const {
  GPUCKPT_TRY(auto inventory, deps_.inventory());
  MatchRequest request;
  request.source = &record;
  request.target = &inventory;
  request.policy = config_.match_policy;
  const auto outcome = match_gpus(request);
  if (const auto* plan = std::get_if<MatchPlan>(&outcome)) return to_json(*plan, record, inventory);
  return to_json(std::get<MatchFailure>(outcome));
}

std::vector<JobStatus> JobService::list_jobs(const std::string& kind, const std::string& state,
                                               std::size_t limit) const {
  std::vector<JobStatus> out;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, job] : jobs_)
      if (job.kind == kind && (state.empty() || job.state == state)) out.push_back(job);
  }
  // Ids start with the kind's prefix and the UTC second they were made: created_at then id orders them.
  std::sort(out.begin(), out.end(), [](const JobStatus& a, const JobStatus& b) {
    return a.created_at != b.created_at ? a.created_at > b.created_at : a.id > b.id;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

nlohmann::json JobService::node_report() const {
  NodeReportOptions options;
  options.system = HostRoot(config_.host_root);
  options.files = HostRoot("/");   // the chart mounts these directories at their own paths
  options.criu_plugin_dir = config_.criu_plugin_dir.string();
  options.hooks_dir = config_.hooks_dir.string();
  options.archive_dir = config_.checkpoint_dir.string();
  if (auto inventory = deps_.inventory())
    for (const auto& gpu : inventory->gpus) options.gpu_memory_bytes += gpu.memory_bytes;
  // In the chart's pod the node's CRIU is out of reach (and the image's would answer for the image); an agent that
  // sees the host directly (host_root /) asks the CRIU on its PATH, the one the runtime uses.
  std::unique_ptr<CriuProbe> probe;
  if (config_.host_root == "/") probe = make_criu_probe("criu");
  options.criu = probe.get();
  return to_json(check_node(options));
}

nlohmann::json JobService::runtime_report() const {
  const RuntimeInfo runtime = metrics_.runtime();
  // The config was checked against kRuntimeKinds, so the kind is there.
  const RuntimeKind* kind = find_runtime_kind(config_.runtime_kind);
  return {{"kind", config_.runtime_kind}, {"name", runtime.name}, {"version", runtime.version},
          {"restores", kind != nullptr ? to_string(kind->restores) : "pod"}};
}

Result<nlohmann::json> JobService::containers() const {
  nlohmann::json out = nlohmann::json::array();
  auto running = deps_.runtime->list();
  for (const auto& state : list_container_states(config_.state_dir)) {
    nlohmann::json c = {{"id", state.container_id},
                        {"recorded_at", state.recorded_at},
                        {"annotations", state.annotations},
                        {"used_gpu_ids", state.gpus.record.used_gpu_ids},
                        {"devices", to_json(state.gpus)["devices"]},
                        {"gpu_env", state.gpus.gpu_env}};
    if (running) {
      for (const auto& r : running.value())
        if (r.id == state.container_id) {
          c["name"] = r.name;
          c["state"] = r.state;
        }
      if (!c.contains("state")) c["state"] = "gone";
    }
    out.push_back(c);
  }
  return out;
}

Result<std::string> JobService::start_checkpoint(const ContainerRef& ref, const std::string& image_tag,
                                                   const std::string& client) {
  GPUCKPT_TRY_VOID(check_job_room(client));
  if (!image_tag.empty() && !is_safe_id(image_tag))
    return make_error("'image' must be an image tag (letters, digits, '.', '_', '-'), got '" + image_tag + "'");
  if (!is_valid_container_name(ref.container))
    return make_error("'container' must be a container name (letters, digits, '_', '.', '-'), got '" + ref.container + "'");
  if (!ref.pod.empty() && !is_valid_container_name(ref.pod))
    return make_error("'pod' is not a valid name: '" + ref.pod + "'");
  if (!ref.namespace_name.empty() && !is_valid_container_name(ref.namespace_name))
    return make_error("'namespace' is not a valid name: '" + ref.namespace_name + "'");
  GPUCKPT_TRY(auto container, deps_.runtime->find(ref));  // ENOENT 404, EINVAL 400, runtime failures 500
  if (container.state != "running")
    return with_errno(make_error("container " + ref.container + " is " + container.state +
                                 ", not running; only running containers can be checkpointed"), EBUSY);
  nlohmann::json request = {{"namespace", ref.namespace_name}, {"pod", ref.pod}, {"container", ref.container}};
  if (!image_tag.empty()) request["image"] = image_tag;
  GPUCKPT_TRY(const std::string id, add_job("checkpoint", request, client));
  log::info("job " + id + ": checkpoint of container " + container.name + " (" + container.id + ") accepted");
  PodRef pod{ref.namespace_name, ref.pod, container.pod_uid};
  if (!is_valid_pod_ref(pod)) pod.uid.clear();
  if (!is_valid_pod_ref(pod)) pod = {};
  launch(id, std::move(pod), [this, id, ref, c = container, image_tag](JobDeadline deadline) {
    run_checkpoint(id, ref, c, image_tag, deadline);
  });
  return id;
}

void JobService::run_checkpoint(const std::string& job_id, const ContainerRef& ref,
                                  const RuntimeContainer& container, const std::string& image_tag,
                                  JobDeadline deadline) {
  const auto start = Clock::now();
  const char* phase = "waiting for another checkpoint of the container";
  const char* late_phase = nullptr;   // the step during which the deadline passed
  auto fail = [&](const std::string& problem) {
    const std::string message = with_time_budget(deadline, late_phase ? late_phase : phase, problem);
    log::error("job " + job_id + ": checkpoint of " + container.name + " failed: " + capped_job_error(message));
    mark_failed(job_id, message);
  };
  auto lock_holder = container_lock(container.id);
  std::unique_lock serial(*lock_holder, std::defer_lock);
  // In slices: the agent's stop ends the wait too.
  while (!serial.try_lock_for(std::chrono::milliseconds(100)))
    if (Clock::now() >= deadline || cut_short())
      return fail(cut_short() ? not_started("the checkpoint") + " (another checkpoint of the container still ran)"
                              : "that checkpoint still runs");
  auto timed = [&](const char* name, auto&& step) {
    phase = name;
    mark_phase(job_id, name);
    const auto t = Clock::now();
    auto result = step();
    if (Clock::now() >= deadline && late_phase == nullptr) late_phase = name;
    const double s = seconds_since(t);
    update(job_id, [&](JobStatus& j) { j.phase_seconds[name] = s; });
    return result;
  };

  // A request that waited for another checkpoint of the same container finds it stopped: say so.
  if (auto now = deps_.runtime->find(ref); now && now->state != "running")
    return fail("container " + container.name + " is " + now->state + " now (checkpointed by an earlier request?)");

  CheckpointGpuRecord record;
  record.checkpoint_id = job_id;
  auto recorded = timed("reading-gpu-record", [&]() -> Result<void> {
    GPUCKPT_TRY(auto state, read_container_state(config_.state_dir, container.id));
    if (state) {
      record.record = state->gpus.record;
      record.devices = state->gpus.devices;
      record.gpu_env = state->gpus.gpu_env;
      return {};
    }
    // No GPU use recorded: the archive still says where it was taken.
    GPUCKPT_TRY(record.record.node, deps_.inventory());
    return {};
  });
  if (!recorded) return fail(recorded.error().message);
  // Past this point the runtime is called and the container frozen: never begun once the agent cut its jobs short.
  if (cut_short()) return fail(not_started("the checkpoint") + "; the container was not touched");

  // One pass over the archive: the runtime exports into a named pipe while the receiver reads it, adds the GPU
  // record and annotations and writes the final archive (temporary name, fsync, rename) as it goes.
  std::error_code ec;
  fs::create_directories(config_.checkpoint_dir, ec);
  const fs::path pipe_path = config_.checkpoint_dir / ("." + job_id + ".runtime.fifo");
  const fs::path final_path = config_.checkpoint_dir / (job_id + ".tar.zst");
  auto pipe = ArchivePipe::create(pipe_path, ArchivePipe::Direction::from_runtime);
  if (!pipe) return fail(pipe.error().message);
  Result<std::uint64_t> bytes = make_error("the archive was not received");
  // CRIU's statistics of the dump, where the runtime puts them into its archive (podman and CRI-O at its top).
  // gpuckpt's plugin's own steps beside them (criu_stats.h).
  std::optional<std::string> criu_stats, plugin_timings;
  ArchiveEdit annotation = checkpoint_annotation(record);
  for (const std::string& name : {std::string(kCriuDumpStatsFile), std::string("checkpoint/") + kCriuDumpStatsFile})
    annotation.peek[name] = [&criu_stats](const std::string& image) { criu_stats = image; };
  for (const std::string& name :
       {std::string(kPluginDumpTimingsFile), std::string("checkpoint/") + kPluginDumpTimingsFile})
    annotation.peek[name] = [&plugin_timings](const std::string& text) { plugin_timings = text; };
  PipeWorker receiver(*pipe.value(), [&] {
    auto read = [&](char* buffer, std::size_t size) { return pipe.value()->receive(buffer, size); };
    bytes = receive_archive(read, "the runtime's export " + pipe_path.string(), final_path, annotation,
                            job_limits(deadline));
    // A refused or unwritable archive: the runtime still writes until it is done (podman holds the pipe open for
    // reading as well, so it would never see EPIPE): take the rest so that it can finish.
    std::vector<char> rest(1 << 16);
    while (!bytes) {
      auto got = read(rest.data(), rest.size());
      if (!got || got.value() == 0) break;
    }
  });
  auto dumped = timed("checkpointing", [&] { return deps_.runtime->checkpoint(container, pipe_path, deadline); });
  timed("annotating", [&] {   // what is left once the runtime exited: the last block, fsync, rename
    receiver.finish();
    return 0;
  });
  pipe.value().reset();
  if (!dumped) {
    if (bytes) fs::remove(final_path, ec);
    return fail(dumped.error().message);
  }
  if (!bytes)   // the runtime finished its checkpoint (podman stopped the container): undo that
    return fail("the runtime's checkpoint archive could not be written: " + bytes.error().message +
                deps_.runtime->put_back(container));
  std::map<std::string, double> runtime_phases;
  nlohmann::json criu_pages(nullptr);
  if (criu_stats) {
    if (auto stats = parse_criu_dump_stats(*criu_stats, "the archive's " + std::string(kCriuDumpStatsFile)); stats) {
      double runtime_seconds = 0;
      if (auto j = job(job_id)) runtime_seconds = j->phase_seconds["checkpointing"];
      std::optional<PluginDumpTimings> plugin;
      if (plugin_timings) {
        auto parsed = parse_plugin_dump_timings(*plugin_timings, "the archive's " + std::string(kPluginDumpTimingsFile));
        if (parsed) plugin = *parsed;
        else log::warn("job " + job_id + ": the plugin's steps are not split out: " + parsed.error().message);
      }
      runtime_phases = checkpoint_runtime_phases(*stats, runtime_seconds, plugin);
      criu_pages = {{"scanned", stats->pages_scanned}, {"written", stats->pages_written}};
    } else {
      log::warn("job " + job_id + ": the runtime's checkpoint is not split into its parts: " + stats.error().message);
    }
  }
  std::optional<CheckpointImage> image;
  std::string loaded_as, load_error, pushed_as, push_error;
  nlohmann::json pushed_chunks(nullptr);
  if (!image_tag.empty()) {
    auto written = timed("writing-image", [&]() -> Result<CheckpointImage> {
      if (cut_short()) return make_error(not_started("writing it"));
      return write_image(job_id, final_path, image_tag, deadline);
    });
    if (!written) return fail("the archive " + final_path.string() + " is complete, but its OCI image failed: " +
                              written.error().message);
    image = written.value();
    auto loaded = timed("loading-image", [&]() -> Result<std::string> {
      if (cut_short()) return make_error(not_started("loading it into the runtime's store"));
      return load_and_register(job_id, *image, record, deadline);
    });
    if (loaded) loaded_as = loaded.value();
    else load_error = with_time_budget(deadline, "loading-image", loaded.error().message);
    if (!config_.image_registry.repository.empty()) {
      auto pushed = timed("pushing-image", [&] {
        return push_and_register(job_id, *image, final_path, record, deadline, pushed_chunks);
      });
      if (pushed) pushed_as = pushed.value();
      else push_error = with_time_budget(deadline, "pushing-image", pushed.error().message);
    }
  }
  const double total = seconds_since(start);
  mark_succeeded(job_id, [&](JobStatus& j) {
    j.phase_seconds["total"] = total;
    j.result = {{"archive", final_path.string()},
                {"archive_bytes", bytes.value()},
                {"container_id", container.id},
                {"container_name", container.name},
                {"checkpoint_id", job_id},
                {"used_gpu_ids", record.record.used_gpu_ids},
                {"gpu_devices", to_json(record)["devices"]}};
    if (!container.pod_uid.empty()) j.result["pod_uid"] = container.pod_uid;
    j.runtime_phase_seconds = runtime_phases;
    if (!criu_pages.is_null()) j.result["criu_pages"] = criu_pages;
    if (image)
      j.result["image"] = {{"layout", image->layout.string()}, {"reference", image->reference},
                           {"manifest_digest", image->manifest_digest},
                           {"pull", "podman pull oci:" + image->layout.string() + ":" + image->reference}};
    if (image && !loaded_as.empty()) j.result["image"]["loaded_as"] = loaded_as;
    if (image && !load_error.empty()) j.result["image"]["load_error"] = load_error;
    if (image && !pushed_as.empty()) j.result["image"]["pushed_as"] = pushed_as;
    if (image && !push_error.empty()) j.result["image"]["push_error"] = push_error;
    if (image && !pushed_chunks.is_null()) j.result["image"]["chunks"] = pushed_chunks;
  });
  metrics_.checkpoint_written(bytes.value());
  log::info("job " + job_id + ": checkpoint of " + container.name + " written to " + final_path.string() + " (" +
            std::to_string(bytes.value()) + " bytes, " + std::to_string(record.record.used_gpu_ids.size()) +
            " GPU(s), " + std::to_string(total) + " s)");
}

Result<CheckpointImage> JobService::write_image(const std::string& job_id, const fs::path& archive,
                                                  const std::string& tag, JobDeadline deadline) {
  return write_checkpoint_image(archive, config_.checkpoint_dir / image_layout_name(job_id), tag,
                                job_limits(deadline));
}

Result<std::string> JobService::load_and_register(const std::string& job_id, const CheckpointImage& image,
                                                    const std::optional<CheckpointGpuRecord>& record,
                                                    JobDeadline deadline) {
  auto loaded = deps_.runtime->load_image(image.layout, image.reference, deadline);
  // gpuckpt-nri acts on a restore of this checkpoint only through an index entry (common/checkpoint_images.h):
  // under the name the runtime's store holds it by, once it holds it; where the agent cannot load into the store
  // (CRI-O: ENOTSUP), under the name it tells the operator to copy it in as. Never under the tag alone: a tag
  // "busybox" must not make docker.io/library/busybox:latest a checkpoint.
  std::string name;
  if (loaded && !loaded->empty()) name = loaded.value();
  else if (!loaded && loaded.error().errno_value == ENOTSUP) name = checkpoint_image_name(image.reference);
  if (record && !name.empty())
    if (auto registered = register_checkpoint_image(config_.state_dir, name, image.manifest_digest, *record); !registered)
      log::warn("job " + job_id + ": checkpoint image " + name + " not registered for gpuckpt-nri: " +
                registered.error().message);
  return loaded;
}

Result<std::string> JobService::push_and_register(const std::string& job_id, const CheckpointImage& image,
                                                    const fs::path& archive,
                                                    const std::optional<CheckpointGpuRecord>& record,
                                                    JobDeadline deadline, nlohmann::json& chunks) {
  // The push's own deadline, and each request's, end by the job's (or at the agent's stop).
  RegistryOptions registry = config_.image_registry;
  registry.stop = &stop_requests_;
  registry.push_timeout = std::chrono::ceil<std::chrono::seconds>(time_left(deadline, registry.push_timeout));
  registry.timeout = std::min(registry.timeout, registry.push_timeout);
  if (registry.push_timeout.count() == 0)
    return with_errno(make_error("the push to " + registry.repository + " was not started: the job has no time left"),
                      ETIMEDOUT);
  const auto push_end = std::chrono::steady_clock::now() + registry.push_timeout;
  auto pushed = push_checkpoint_image(registry, image.layout, image.reference);
  if (!pushed) return pushed;
  log::info("job " + job_id + ": checkpoint image pushed as " + pushed.value());
  // A store-backed checkpoint's GPU memory is chunks in this node's store, not in the image: they go too, or a
  // restore from the registry on another node stops at the first missing chunk.
  const auto without_chunks = [&](const std::string& why) {
    return make_error("the image is pushed as " + pushed.value() + ", but not its GPU memory: " + why +
                      " (a restore from the registry elsewhere would miss its chunks; push the image again)");
  };
  auto named = manifest_chunks(archive, job_limits(deadline));
  if (!named) return without_chunks(named.error().message);
  if (!named->empty()) {
    auto store_dir = agent_store_dir(config_.gpu_memory);
    if (!store_dir) return without_chunks(store_dir.error().message);
    auto store = chunk_store::Store::open(*store_dir, false);
    if (!store) return without_chunks(store.error().message);
    std::error_code ec;
    const auto subject_size = fs::file_size(image.layout / "blobs" / "sha256" / image.manifest_digest.substr(7), ec);
    if (ec) return without_chunks("cannot read the image's manifest: " + ec.message());
    registry.push_timeout = std::chrono::ceil<std::chrono::seconds>(
        std::max(push_end - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero()));
    registry.timeout = std::min(registry.timeout, registry.push_timeout);
    auto sent = push_chunks(registry, **store, *named, image.reference, image.manifest_digest, subject_size);
    if (!sent) return without_chunks(sent.error().message);
    chunks = sent->to_json();
    log::info("job " + job_id + ": its " + std::to_string(sent->chunks) + " chunks pushed as " + sent->artifact + " (" +
              std::to_string(sent->uploaded) + " uploaded, " + std::to_string(sent->uploaded_bytes) + " bytes; " +
              std::to_string(sent->present) + " the registry had)");
  }
  // A node that pulls it names it REPOSITORY:TAG (or with the digest): gpuckpt-nri there finds the record if
  // this node is that node; other nodes register it when they load it.
  const std::string by_tag = config_.image_registry.repository + ":" + image.reference;
  if (record)
    for (const std::string& reference : {by_tag, pushed.value()})
      if (auto registered = register_checkpoint_image(config_.state_dir, reference, image.manifest_digest, *record);
          !registered)
        log::warn("job " + job_id + ": checkpoint image " + reference + " not registered for gpuckpt-nri: " +
                  registered.error().message);
  return pushed;
}

Result<std::string> JobService::start_image(const ImageRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(check_job_room(client));
  if (!request.tag.empty() && !is_safe_id(request.tag))
    return make_error("'image' must be an image tag (letters, digits, '.', '_', '-'), got '" + request.tag + "'");
  GPUCKPT_TRY(auto checked, checked_archive(request.archive, "become a checkpoint image"));
  auto& [archive, info] = checked;
  nlohmann::json req = {{"archive", request.archive}};
  if (!request.tag.empty()) req["image"] = request.tag;
  GPUCKPT_TRY(const std::string id, add_job("image", req, client));
  std::string tag = request.tag;   // default: the job's id, lower case (as its layout's name)
  if (tag.empty())
    for (char c : id) tag += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  nlohmann::json summary = archive_summary(archive, info);
  log::info("job " + id + ": checkpoint image of " + archive.string() + " accepted (tag " + tag + ")");
  launch(id, pod_of_archive(archive, &info),
         [this, id, path = archive, tag, gpus = info.gpus, summary](JobDeadline deadline) {
    run_image(id, path, tag, gpus, summary, deadline);
  });
  return id;
}

void JobService::run_image(const std::string& job_id, fs::path archive, std::string tag,
                             std::optional<CheckpointGpuRecord> record, nlohmann::json info, JobDeadline deadline) {
  const auto start = Clock::now();
  auto fail = [&](const std::string& message) {
    log::error("job " + job_id + ": checkpoint image of " + archive.string() + " failed: " + capped_job_error(message));
    mark_failed(job_id, message);
  };
  mark_phase(job_id, "writing-image");
  if (cut_short()) return fail(not_started("writing the checkpoint image") + "; the archive is untouched");
  auto image = write_image(job_id, archive, tag, deadline);
  if (!image)
    return fail(with_time_budget(deadline, "writing-image",
                                 "writing the checkpoint image failed: " + image.error().message));
  const double write_s = seconds_since(start);
  mark_phase(job_id, "loading-image");
  const auto t = Clock::now();
  auto loaded = cut_short() ? Result<std::string>(make_error(not_started("loading the image into the runtime's store")))
                            : load_and_register(job_id, *image, record, deadline);
  const std::string load_error =
      !loaded ? with_time_budget(deadline, "loading-image", "loading the checkpoint image into the runtime's store "
                                                            "failed: " + loaded.error().message)
      : loaded->empty() ? "runtime.kind " + config_.runtime_kind + " gives the agent no image store to load into "
                          "(runtime.kind cri on containerd, containerd and podman do)"
                        : std::string();
  const double load_s = seconds_since(t);
  std::optional<Result<std::string>> pushed;
  nlohmann::json pushed_chunks(nullptr);
  if (!config_.image_registry.repository.empty()) {
    mark_phase(job_id, "pushing-image");
    pushed = push_and_register(job_id, *image, archive, record, deadline, pushed_chunks);
  }
  const bool in_registry = pushed && pushed->ok();
  const std::string push_error =
      pushed && !pushed->ok() ? with_time_budget(deadline, "pushing-image", "pushing it to " +
                                                 config_.image_registry.repository + " failed: " +
                                                 pushed->error().message)
                              : std::string();
  if (!load_error.empty() && !in_registry)
    return fail(load_error + (push_error.empty() ? std::string(" and no image_registry is configured") : "; " + push_error) +
                " (the image layout " + image->layout.string() + " is kept: load or push it by hand, or remove it)");
  // The store or the registry holds the image now; a second full copy beside the archive would only take space.
  std::error_code ec;
  fs::remove_all(image->layout, ec);
  const double total = seconds_since(start);
  info["image"] = {{"reference", image->reference}, {"manifest_digest", image->manifest_digest}};
  if (load_error.empty()) info["image"]["loaded_as"] = loaded.value();
  else info["image"]["load_error"] = load_error;
  if (in_registry) info["image"]["pushed_as"] = pushed->value();
  if (!pushed_chunks.is_null()) info["image"]["chunks"] = pushed_chunks;
  if (!push_error.empty()) info["image"]["push_error"] = push_error;
  mark_succeeded(job_id, [&](JobStatus& j) {
    j.phase_seconds["writing-image"] = write_s;
    j.phase_seconds["loading-image"] = load_s;
    if (pushed) j.phase_seconds["pushing-image"] = seconds_since(t) - load_s;
    j.phase_seconds["total"] = total;
    j.result = info;
  });
  log::info("job " + job_id + ": checkpoint image of " + archive.string() + " is " +
            (load_error.empty() ? "loaded as " + loaded.value() : std::string("not in the node's store")) +
            (in_registry ? ", pushed as " + pushed->value() : std::string()) + " (" + std::to_string(total) + " s)");
}

Result<std::string> JobService::start_transfer(const TransferRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(check_job_room(client));
  if (deps_.peer_token.empty()) return make_error("this agent has no token to present to other agents", EIO);
  GPUCKPT_TRY_VOID(check_peer_url(request.to, config_.transfer.peer_networks));
  GPUCKPT_TRY(auto archive, resolve_archive(request.archive));
  if (!is_transfer_name(archive.filename().string()))
    return make_error("'" + archive.filename().string() + "' is not an archive name another agent accepts (.tar, "
                      ".tar.gz or .tar.zst)");
  GPUCKPT_TRY(const std::string id, add_job("transfer", {{"archive", archive.string()}, {"to", request.to}}, client));
  log::info("job " + id + ": transfer of " + archive.string() + " to " + request.to + " accepted");
  launch(id, pod_of_archive(archive, nullptr),
         [this, id, path = archive, to = request.to](JobDeadline deadline) {
    run_transfer(id, path, to, deadline);
  });
  return id;
}

Result<std::string> JobService::start_chunk_pull(const ChunkPullRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(check_job_room(client));
  GPUCKPT_TRY_VOID(parse_image_name(request.image));
  GPUCKPT_TRY_VOID(agent_store_dir(config_.gpu_memory), "nothing to pull chunks into");
  GPUCKPT_TRY(const std::string id, add_job("pull", {{"image", request.image}}, client));
  log::info("job " + id + ": chunk pull of " + request.image + " accepted");
  launch(id, PodRef{}, [this, id, image = request.image](JobDeadline deadline) { run_chunk_pull(id, image, deadline); },
         Lane::pulls);
  return id;
}

void JobService::run_chunk_pull(const std::string& job_id, const std::string& image, JobDeadline deadline) {
  const auto start = Clock::now();
  mark_phase(job_id, "pulling");
  const auto fail = [&](const std::string& why) {
    const std::string message = with_time_budget(deadline, "pulling", "pulling the chunks of " + image + " failed: " +
                                                 why);
    log::error("job " + job_id + ": " + capped_job_error(message));
    mark_failed(job_id, message);
  };
  RegistryOptions registry = config_.image_registry;
  registry.stop = &stop_requests_;
  registry.push_timeout = std::chrono::ceil<std::chrono::seconds>(time_left(deadline, registry.push_timeout));
  registry.timeout = std::min(registry.timeout, registry.push_timeout);
  if (registry.push_timeout.count() == 0) return fail("the job has no time left");
  auto store_dir = agent_store_dir(config_.gpu_memory);
  if (!store_dir) return fail(store_dir.error().message);
  auto store = chunk_store::Store::open(*store_dir, true);
  if (!store) return fail(store.error().message);
  auto pulled = pull_chunks(registry, image, **store);
  if (!pulled) return fail(pulled.error().message);
  const double total = seconds_since(start);
  mark_succeeded(job_id, [&](JobStatus& j) {
    j.phase_seconds["total"] = total;
    j.result = pulled->to_json();
    j.result["store"] = store_dir->string();
  });
  log::info("job " + job_id + ": chunks of " + image + " pulled into " + store_dir->string() + ": " +
            std::to_string(pulled->added) + " added (" + std::to_string(pulled->added_bytes) + " bytes), " +
            std::to_string(pulled->present) + " present (" + std::to_string(total) + " s)");
}

void JobService::run_transfer(const std::string& job_id, const fs::path& archive, const std::string& to,
                                JobDeadline deadline) {
  const auto start = Clock::now();
  const auto fail = [&](const std::string& phase, const std::string& why) {
    const std::string message = with_time_budget(deadline, phase, "sending " + archive.string() + " to " + to +
                                                 " failed: " + why);
    log::error("job " + job_id + ": " + capped_job_error(message));
    mark_failed(job_id, message);
  };
  // A store-backed checkpoint: first the chunks the target lacks, uploaded over transfer.chunk_streams connections
  // (node/chunk_transfer.h), then its archive as it is; an inline or CPU-only archive goes as it is.
  mark_phase(job_id, "asking");
  auto named = manifest_chunks(archive, job_limits(deadline));
  if (!named) {
    // Not readable as a checkpoint here: it goes as bytes, and the target validates it whole before any use.
    log::warn("job " + job_id + ": " + archive.string() + " is sent as it is: " + named.error().message);
    named = std::set<chunk_store::Digest>{};
  }
  nlohmann::json chunks(nullptr);
  double asking_seconds = 0, uploading_seconds = 0;
  if (!named->empty()) {
    auto missing = ask_missing_chunks(to, deps_.peer_token, *named, deadline, &stop_requests_);
    if (!missing) return fail("asking", missing.error().message);
    asking_seconds = seconds_since(start);
    ChunkUploadReport uploaded;
    if (!missing->empty()) {
      mark_phase(job_id, "uploading-chunks");
      const auto upload_start = Clock::now();
      auto store_dir = agent_store_dir(config_.gpu_memory);
      if (!store_dir) return fail("uploading-chunks", archive.filename().string() + " is store-backed and " +
                                                          store_dir.error().message);
      auto store = chunk_store::Store::open(*store_dir, false);
      if (!store) return fail("uploading-chunks", store.error().message);
      auto done = upload_chunks(to, deps_.peer_token, **store, *missing,
                                static_cast<unsigned>(config_.transfer.chunk_streams), deadline,
                                [&](const ChunkUploadReport& so_far) {
                                  update(job_id, [&](JobStatus& j) {
                                    j.result["chunks_done"] = so_far.sent + so_far.present;
                                  });
                                },
                                &stop_requests_);
      if (!done) return fail("uploading-chunks", done.error().message);
      uploaded = *done;
      uploading_seconds = seconds_since(upload_start);
    }
    const std::size_t skipped = named->size() - missing->size() + uploaded.present;
    metrics_.chunks_sent(uploaded.sent, uploaded.sent_bytes, skipped, uploaded.streams);
    chunks = {{"named", named->size()},        {"target_had", named->size() - missing->size()},
              {"sent", uploaded.sent},         {"sent_bytes", uploaded.sent_bytes},
              {"present_on_upload", uploaded.present}, {"retries", uploaded.retries},
              {"streams", uploaded.streams}};
  }
  mark_phase(job_id, "sending");
  PushOptions options;
  options.url = to;
  options.name = archive.filename().string();
  options.store_backed = !named->empty();
  options.token = deps_.peer_token;
  options.deadline = deadline;
  options.stop = &stop_requests_;
  auto pushed = push_archive(archive, options, [&](std::uint64_t held) {
    update(job_id, [&](JobStatus& j) { j.result["target_bytes"] = held; });
  });
  if (!pushed) return fail("sending", pushed.error().message);
  const double total = seconds_since(start);
  // What the target's commit did: the references it wrote (null when it had the archive already).
  if (!chunks.is_null()) chunks["admitted"] = (*pushed)["chunks"];
  (*pushed)["chunks"] = chunks;
  mark_succeeded(job_id, [&](JobStatus& j) {
    if (!chunks.is_null()) {
      j.phase_seconds["asking"] = asking_seconds;
      if (uploading_seconds > 0) j.phase_seconds["uploading-chunks"] = uploading_seconds;
    }
    j.phase_seconds["sending"] = total - asking_seconds - uploading_seconds;
    j.phase_seconds["total"] = total;
    j.result = pushed.value();
  });
  log::info("job " + job_id + ": sent " + archive.string() + " to " + to + " as " + pushed->value("archive", "") + " (" +
            std::to_string(pushed->value("sent_bytes", 0ULL)) + " archive bytes sent" +
            (chunks.is_null() ? std::string()
                              : ", " + chunks["sent"].dump() + " of " + chunks["named"].dump() + " chunks uploaded (" +
                                    chunks["sent_bytes"].dump() + " bytes) over " + chunks["streams"].dump() +
                                    " streams, " + std::to_string(named->size() - chunks["sent"].get<std::size_t>()) +
                                    " the target had") +
            ", " + std::to_string(total) + " s)");
}

Result<std::string> JobService::start_restore(const RestoreRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(check_job_room(client));
  if (!request.name.empty() && !is_valid_container_name(request.name))
    return make_error("'name' must be a container name (letters, digits, '_', '.', '-'), got '" + request.name + "'");
  GPUCKPT_TRY(auto checked, checked_archive(request.archive, "be restored"));
  auto& [archive, info] = checked;
  std::optional<RestorePlan> plan;
  nlohmann::json summary = archive_summary(archive, info);
  if (info.gpus && !info.gpus->record.used_gpu_ids.empty()) {
    GPUCKPT_TRY(auto inventory, deps_.inventory(), "reading this node's GPUs to place checkpoint " + request.archive);
    auto made = plan_for_allocation(*info.gpus, inventory, request.target_gpus, config_.match_policy);
    if (!made) return with_errno(make_error("no GPU on this node can take checkpoint " + request.archive + ": " +
                                            made.error().message), EDOM);
    plan = std::move(made.value());
    summary["plan"] = to_json(*plan);
  }
  const std::string name = request.name;
  nlohmann::json req = {{"archive", request.archive}, {"name", name}};
  if (request.target_gpus) req["target_gpus"] = *request.target_gpus;
  GPUCKPT_TRY(const std::string id, add_job("restore", req, client));
  log::info("job " + id + ": restore of " + archive.string() + " accepted (" +
            (plan ? std::to_string(plan->assignments.size()) + " GPU(s) matched" : std::string("no GPU state")) + ")");
  PodRef pod = pod_of_archive(archive, &info);
  launch(id, std::move(pod),
         [this, id, path = archive, checkpoint = std::move(info), plan, name, summary](JobDeadline deadline) {
    run_restore(id, path, checkpoint, plan, name, summary, deadline);
  });
  return id;
}

namespace {

// The runtime reads the archive from the job's named pipe and names that in its errors; the user named the archive.
std::string naming_archive(std::string message, const fs::path& pipe, const fs::path& archive) {
  const std::string from = pipe.string();
  for (auto at = message.find(from); at != std::string::npos; at = message.find(from, at + archive.string().size()))
    message.replace(at, from.size(), archive.string());
  return message;
}

}  // namespace

void JobService::run_restore(const std::string& job_id, const fs::path& archive, const CheckpointInfo& checkpoint,
                               std::optional<RestorePlan> plan, std::string name, nlohmann::json info,
                               JobDeadline deadline) {
  const auto start = Clock::now();
  const char* phase_now = "queued";
  // The plan is this job's alone: whatever happens, it leaves the state directory when the job ends (the hook
  // removed it already where it placed it for CRIU).
  auto drop_plan = [&] {
    if (!plan) return false;
    auto removed = remove_restore_plan(config_.state_dir, plan->id);
    if (!removed) log::warn("job " + job_id + ": " + removed.error().message);
    return removed && removed.value();
  };
  auto fail = [&](const std::string& problem) {
    const std::string message = with_time_budget(deadline, phase_now, problem);
    if (drop_plan()) log::info("job " + job_id + ": restore plan " + plan->id + " removed");
    log::error("job " + job_id + ": restore of " + archive.string() + " failed: " + capped_job_error(message));
    mark_failed(job_id, message);
  };
  auto phase = [&](const char* p) {
    phase_now = p;
    mark_phase(job_id, p);
  };
  std::optional<ArchiveEdit> edit;
  if (plan) {
    phase("planning");
    const auto t = Clock::now();
    // Bound to this checkpoint (the restored config carries io.gpuckpt.checkpoint-id) and, where the agent names
    // the container itself (containerd: the name is its id), to that container; usable while the runtime may
    // still be restoring.
    plan->expires_at = plan_clock_now() + kPlanGraceSeconds +
                       std::chrono::ceil<std::chrono::seconds>(time_left(deadline, config_.runtime_timeout)).count();
    if (config_.runtime_kind == "containerd" && !name.empty()) plan->container_id = name;
    // The CRIU plugin puts the restored /dev right with the numbers the plan carries (criu-plugin/restored_dev.h).
    for (auto& device : plan->devices)
      if (auto numbers = deps_.device_numbers(device.host_path)) device.target_numbers = *numbers;
    info["plan"] = to_json(*plan);
    auto written = write_restore_plan(config_.state_dir, *plan);
    if (!written) return fail(written.error().message);
    // podman does not run precreate hooks on restore, and CRIU restores /dev from its images: when the plan
    // moves devices, spec.dump and the saved /dev nodes change on their way to the runtime (below).
    auto edits = restore_edits(checkpoint, *plan, deps_.device_numbers, job_limits(deadline));
    if (!edits) return fail("restore refused: " + archive.string() + ": " + edits.error().message);
    edit = std::move(edits.value());
    update(job_id, [&](JobStatus& j) { j.phase_seconds["planning"] = seconds_since(t); });
  }
  if (cut_short()) return fail(not_started("the restore") + "; no container was created");
  // One pass over the archive per read of the runtime: it reads the archive from a named pipe, which is fed from
  // the stored archive with the edits applied, uncompressed, each time the runtime opens it.
  phase("restoring");
  const auto t = Clock::now();
  const fs::path pipe_path = config_.checkpoint_dir / ("." + job_id + ".restore.fifo");
  auto pipe = ArchivePipe::create(pipe_path, ArchivePipe::Direction::to_runtime);
  if (!pipe) return fail(pipe.error().message);
  std::optional<Error> stream_error;
  PipeWorker sender(*pipe.value(), [&] {
    const ArchiveEdit unchanged;
    for (;;) {
      auto opened = pipe.value()->await_reader();
      if (!opened) stream_error = opened.error();
      if (!opened || !opened.value()) return;
      auto sent = send_archive(
          archive, [&](const char* data, std::size_t size) { return pipe.value()->send(data, size); },
          edit ? *edit : unchanged, job_limits(deadline));
      pipe.value()->end_stream();
      // EPIPE: the runtime read what it needed and closed its end (a tar reader stops at the end marker).
      if (!sent && sent.error().errno_value != EPIPE && !stream_error) stream_error = sent.error();
    }
  });
  auto restored = deps_.runtime->restore(pipe_path, name, deadline);
  sender.finish();
  pipe.value().reset();
  if (!restored)
    return fail(naming_archive(restored.error().message, pipe_path, archive) +
                (stream_error ? " (streaming the archive to the runtime: " + stream_error->message + ")" : ""));
  // Where the archive went as it was (nothing moved), the restored config names no plan and none was needed.
  if (drop_plan() && edit)
    log::warn("job " + job_id + ": restore plan " + plan->id + " was still in the state directory after the restore: "
              "no OCI hook placed it for CRIU (is gpuckpt's hook in the runtime's hooks dir?); removed");
  const double restoring = seconds_since(t);
  const double total = seconds_since(start);
  info["container_id"] = restored->id;
  info["container_name"] = restored->name;
  info["state"] = restored->state;
  mark_succeeded(job_id, [&](JobStatus& j) {
    j.phase_seconds["restoring"] = restoring;
    j.phase_seconds["total"] = total;
    if (restored->restore_stats) j.runtime_phase_seconds = restore_runtime_phases(*restored->restore_stats, restoring);
    j.result = info;
  });
  log::info("job " + job_id + ": restored " + archive.string() + " as " + restored->name + " (" + restored->id +
            ", " + std::to_string(total) + " s)");
}

}  // namespace gpuckpt::node
