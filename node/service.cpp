#include "node/service.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "node/archive_transfer.h"
#include "node/checkpoint_job.h"
#include "node/chunk_pull_job.h"
#include "node/chunk_transfer.h"
#include "node/image_job.h"
#include "node/job_store.h"
#include "node/registry_chunks.h"
#include "node/restore_job.h"
#include "node/transfer_job.h"
#include "archive/checkpoint_archive.h"
#include "base/log.h"
#include "criu/criu_stats.h"
#include "gpu/matcher.h"
#include "gpumem/memory_lineage.h"
#include "runtime/node_report.h"
#include "gpu/properties_record.h"
#include "state/container_store.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

Error with_errno(Error e, int value) {
  e.errno_value = value;
  return e;
}

// What a restore or image job reports about its archive.
nlohmann::json archive_summary(const fs::path& archive, const CheckpointInfo& info) {
  return {{"archive", archive.string()}, {"container_name", info.container_name}, {"engine", info.engine},
          {"gpu_record", info.gpus.has_value()}};
}

bool is_inside(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

}  // namespace

JobService::JobService(AgentConfig config, JobServiceDeps deps)
    : config_(std::move(config)), deps_(std::move(deps)), scheduler_(config_, metrics_, deps_.observer) {
  remove_stale_partials(config_.checkpoint_dir);
  if (!config_.kubelet_checkpoint_dir.empty()) remove_stale_partials(config_.kubelet_checkpoint_dir);
  sweep_restore_plans();
}

JobService::~JobService() { wait_idle(); }

void JobService::sweep_restore_plans() {
  const auto swept = gpuckpt::sweep_restore_plans(config_.state_dir, plan_clock_now(), kPlanSweepEntries);
  if (swept.removed)
    log::info("removed " + std::to_string(swept.removed) + " expired or unreadable restore plan(s) from " +
              (config_.state_dir / "restore-plans").string());
}

void JobService::sweep_restore_timings() {
  std::size_t observed = 0, refused = 0;
  for (const std::string& text :
       memory_lineage::take_stale_restore_timings(config_.node_store_dir.string(), kRestoreTimingsGraceSeconds)) {
    auto timings = parse_plugin_restore_timings(text, "a restore's timings in " +
                                                          (config_.node_store_dir / memory_lineage::kRestoreTimingsDir).string());
    if (!timings) {
      ++refused;
      log::warn(timings.error().message);
      continue;
    }
    metrics_.runtime_restore_observed(restore_steps(*timings));
    ++observed;
  }
  if (observed + refused > 0)
    log::info("restores no job ran: the plugin's steps of " + std::to_string(observed) + " observed (" +
              std::to_string(refused) + " unreadable), their files removed");
}

void JobService::wait_idle() { scheduler_.wait_idle(); }

void JobService::shutdown() { scheduler_.shutdown(); }

std::string JobService::metrics_text() const {
  return metrics_.render(archive_dir_usage(config_.checkpoint_dir));
}

std::optional<JobStatus> JobService::job(const std::string& id) const { return scheduler_.job(id); }

std::vector<JobStatus> JobService::list_jobs(JobKind kind, std::optional<JobState> state, std::size_t limit) const {
  return scheduler_.list(kind, state, limit);
}

PodRef JobService::pod_of_archive(const fs::path& archive, const CheckpointInfo* info) const {
  if (info)
    if (PodRef pod = pod_of_checkpoint_spec(info->spec); !pod.empty()) return pod;
  const auto job = scheduler_.find([&](const JobStatus& j) {
    return j.kind == JobKind::checkpoint && j.state == JobState::succeeded &&
           j.result.value("archive", "") == archive.string();
  });
  if (!job) return {};
  PodRef pod{job->request.value("namespace", ""), job->request.value("pod", ""), job->result.value("pod_uid", "")};
  if (!is_valid_pod_ref(pod)) pod.uid.clear();
  return is_valid_pod_ref(pod) ? pod : PodRef{};
}

std::shared_ptr<std::timed_mutex> JobService::container_lock(const std::string& container_id) {
  std::lock_guard lock(locks_mutex_);
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
  GPUCKPT_TRY_VOID(scheduler_.check_room(client));
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
  GPUCKPT_TRY(const std::string id, scheduler_.add(JobKind::checkpoint, request, client));
  log::info("job " + id + ": checkpoint of container " + container.name + " (" + container.id + ") accepted");
  PodRef pod{ref.namespace_name, ref.pod, container.pod_uid};
  if (!is_valid_pod_ref(pod)) pod.uid.clear();
  if (!is_valid_pod_ref(pod)) pod = {};
  scheduler_.launch(id, std::move(pod), [this, job = CheckpointJob{ref, container, image_tag}](JobRun& run) {
    run_checkpoint_job(run, {config_, *deps_.runtime, deps_.inventory, container_lock(job.container.id), metrics_},
                       job);
  });
  return id;
}

Result<std::string> JobService::start_image(const ImageRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(scheduler_.check_room(client));
  if (!request.tag.empty() && !is_safe_id(request.tag))
    return make_error("'image' must be an image tag (letters, digits, '.', '_', '-'), got '" + request.tag + "'");
  GPUCKPT_TRY(auto checked, checked_archive(request.archive, "become a checkpoint image"));
  auto& [archive, info] = checked;
  nlohmann::json req = {{"archive", request.archive}};
  if (!request.tag.empty()) req["image"] = request.tag;
  GPUCKPT_TRY(const std::string id, scheduler_.add(JobKind::image, req, client));
  std::string tag = request.tag;   // default: the job's id, lower case (as its layout's name)
  if (tag.empty())
    for (char c : id) tag += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  log::info("job " + id + ": checkpoint image of " + archive.string() + " accepted (tag " + tag + ")");
  scheduler_.launch(id, pod_of_archive(archive, &info),
                    [this, job = ImageJob{archive, tag, info.gpus, archive_summary(archive, info)}](JobRun& run) {
                      run_image_job(run, {config_, *deps_.runtime}, job);
                    });
  return id;
}

Result<std::string> JobService::start_transfer(const TransferRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(scheduler_.check_room(client));
  if (deps_.peer_token.empty()) return make_error("this agent has no token to present to other agents", EIO);
  GPUCKPT_TRY_VOID(check_peer_url(request.to, config_.transfer.peer_networks));
  GPUCKPT_TRY(auto archive, resolve_archive(request.archive));
  if (!is_transfer_name(archive.filename().string()))
    return make_error("'" + archive.filename().string() + "' is not an archive name another agent accepts (.tar, "
                      ".tar.gz or .tar.zst)");
  GPUCKPT_TRY(const std::string id,
              scheduler_.add(JobKind::transfer, {{"archive", archive.string()}, {"to", request.to}}, client));
  log::info("job " + id + ": transfer of " + archive.string() + " to " + request.to + " accepted");
  scheduler_.launch(id, pod_of_archive(archive, nullptr), [this, job = TransferJob{archive, request.to}](JobRun& run) {
    run_transfer_job(run, {config_, deps_.peer_token, metrics_}, job);
  });
  return id;
}

Result<std::string> JobService::start_chunk_pull(const ChunkPullRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(scheduler_.check_room(client));
  GPUCKPT_TRY_VOID(parse_image_name(request.image));
  GPUCKPT_TRY_VOID(agent_store_dir(config_.gpu_memory), "nothing to pull chunks into");
  GPUCKPT_TRY(const std::string id, scheduler_.add(JobKind::pull, {{"image", request.image}}, client));
  log::info("job " + id + ": chunk pull of " + request.image + " accepted");
  scheduler_.launch(
      id, PodRef{}, [this, image = request.image](JobRun& run) { run_chunk_pull_job(run, config_, image); },
      JobScheduler::Lane::pulls);
  return id;
}

Result<std::string> JobService::start_restore(const RestoreRequest& request, const std::string& client) {
  GPUCKPT_TRY_VOID(scheduler_.check_room(client));
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
  nlohmann::json req = {{"archive", request.archive}, {"name", request.name}};
  if (request.target_gpus) req["target_gpus"] = *request.target_gpus;
  GPUCKPT_TRY(const std::string id, scheduler_.add(JobKind::restore, req, client));
  log::info("job " + id + ": restore of " + archive.string() + " accepted (" +
            (plan ? std::to_string(plan->assignments.size()) + " GPU(s) matched" : std::string("no GPU state")) + ")");
  PodRef pod = pod_of_archive(archive, &info);
  scheduler_.launch(id, std::move(pod),
                    [this, job = RestoreJob{archive, std::move(info), std::move(plan), request.name, std::move(summary)}](
                        JobRun& run) { run_restore_job(run, {config_, *deps_.runtime, deps_.device_numbers}, job); });
  return id;
}

}  // namespace gpuckpt::node
