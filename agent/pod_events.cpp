#include "agent/pod_events.h"

#include <cstdio>
#include <ctime>
#include <optional>
#include <filesystem>

#include "base/caught.h"
#include "base/log.h"

namespace gpuckpt::agent {

namespace {

using Clock = std::chrono::system_clock;

// "2026-11-26T10:27:20Z" (Time) or, with `micros`, "2026-11-26T10:27:20.123456Z" (MicroTime).
std::string rfc3339(Clock::time_point at, bool micros) {
  const auto since = at.time_since_epoch();
  const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since).count();
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[48];
  std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  if (micros) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(since).count() % 1000000;
    n += static_cast<std::size_t>(std::snprintf(text + n, sizeof text - n, ".%06lld", static_cast<long long>(us)));
  }
  std::snprintf(text + n, sizeof text - n, "Z");
  return text;
}

// Printable ASCII (anything else as \xNN), at most kMaxEventMessageBytes.
std::string bounded_message(const std::string& message) {
  std::string out = log::escaped(message, kMaxEventMessageBytes);
  if (out.size() > kMaxEventMessageBytes) out = out.substr(0, kMaxEventMessageBytes - 3) + "...";
  return out;
}

std::string file_name(const nlohmann::json& value) {
  return value.is_string() ? std::filesystem::path(value.get<std::string>()).filename().string() : std::string("?");
}

std::string seconds_text(const node::JobStatus& job) {
  const auto it = job.phase_seconds.find("total");
  if (it == job.phase_seconds.end()) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", it->second);
  return text;
}

}  // namespace

PodEvent job_pod_event(node::JobStage stage, const node::JobStatus& job, const node::PodRef& pod,
                       const std::string& node_name) {
  PodEvent event;
  event.pod = pod;
  event.warning = stage == node::JobStage::failed;
  const std::string suffix = stage == node::JobStage::started     ? "Started"
                             : stage == node::JobStage::succeeded ? "Succeeded"
                                                                  : "Failed";
  const std::string id = "gpuckpt job " + job.id;
  const auto& request = job.request;
  const auto& result = job.result;
  const std::string archive = file_name(request.value("archive", nlohmann::json()));
  if (job.kind == node::JobKind::checkpoint) {
    event.action = "Checkpoint";
    const std::string container = request.value("container", "?");
    if (stage == node::JobStage::started)
      event.message = "checkpointing container " + container + " on node " + node_name + " (" + id + ")";
    else if (stage == node::JobStage::succeeded)
      event.message = "container " + container + " checkpointed on node " + node_name + " to " +
                      file_name(result.value("archive", nlohmann::json())) + " (" +
                      std::to_string(result.value("archive_bytes", 0ULL)) + " bytes, " +
                      std::to_string(result.value("used_gpu_ids", nlohmann::json::array()).size()) + " GPU(s), " +
                      seconds_text(job) + "; " + id + ")";
    else
      event.message = "checkpoint of container " + container + " on node " + node_name + " failed (" + id + "): " +
                      job.error;
  } else if (job.kind == node::JobKind::restore) {
    event.action = "Restore";
    if (stage == node::JobStage::started)
      event.message = "restoring checkpoint " + archive + " on node " + node_name + " (" + id + ")";
    else if (stage == node::JobStage::succeeded)
      event.message = "checkpoint " + archive + " restored on node " + node_name + " as container " +
                      result.value("container_name", "?") + " (" + result.value("container_id", "?") + ", " +
                      seconds_text(job) + "; " + id + ")";
    else
      event.message = "restore of checkpoint " + archive + " on node " + node_name + " failed (" + id + "): " + job.error;
  } else if (job.kind == node::JobKind::image) {
    event.action = "LoadCheckpointImage";
    const auto image = result.value("image", nlohmann::json::object());
    if (stage == node::JobStage::started)
      event.message = "making checkpoint " + archive + " an image in node " + node_name + "'s image store (" + id + ")";
    else if (stage == node::JobStage::succeeded)
      event.message = "checkpoint " + archive + " is image " +
                      image.value("loaded_as", image.value("pushed_as", std::string("?"))) + " on node " + node_name +
                      (image.contains("pushed_as") ? ", pushed as " + image.value("pushed_as", "") : std::string()) +
                      " (" + seconds_text(job) + "; " + id + ")";
    else
      event.message = "checkpoint image of " + archive + " on node " + node_name + " failed (" + id + "): " + job.error;
  } else {   // transfer: the migrate's copy, node to node
    event.action = "Migrate";
    const std::string to = request.value("to", "?");
    if (stage == node::JobStage::started)
      event.message = "moving checkpoint " + archive + " from node " + node_name + " to the agent at " + to + " (" +
                      id + ")";
    else if (stage == node::JobStage::succeeded)
      event.message = "checkpoint " + archive + " moved from node " + node_name + " to the agent at " + to + " (" +
                      std::to_string(result.value("sent_bytes", 0ULL)) + " bytes sent, " + seconds_text(job) + "; " +
                      id + ")";
    else
      event.message = "moving checkpoint " + archive + " from node " + node_name + " to the agent at " + to +
                      " failed (" + id + "): " + job.error;
  }
  event.reason = (job.kind == node::JobKind::image ? std::string("CheckpointImage") : event.action) + suffix;
  return event;
}

nlohmann::json core_v1_event(const PodEvent& event, const std::string& node_name, Clock::time_point now,
                             std::uint64_t sequence) {
  // metadata.name: a DNS subdomain of at most 253 characters, like the pod's name it starts with.
  std::string stem = event.pod.name.substr(0, 200);
  while (!stem.empty() && (stem.back() == '-' || stem.back() == '.')) stem.pop_back();
  char unique[48];
  std::snprintf(unique, sizeof unique, ".%llx%llx",
                static_cast<unsigned long long>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count()),
                static_cast<unsigned long long>(sequence));
  nlohmann::json involved = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", event.pod.namespace_name},
                             {"name", event.pod.name}};
  if (!event.pod.uid.empty()) involved["uid"] = event.pod.uid;
  const std::string second = rfc3339(now, false);
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", stem + unique}, {"namespace", event.pod.namespace_name}}},
          {"involvedObject", involved},
          {"reason", event.reason},
          {"message", bounded_message(event.message)},
          {"type", event.warning ? "Warning" : "Normal"},
          {"source", {{"component", "gpuckpt-agent"}, {"host", node_name}}},
          {"count", 1},
          {"firstTimestamp", second},
          {"lastTimestamp", second},
          {"eventTime", rfc3339(now, true)},
          {"action", event.action},
          {"reportingComponent", "gpuckpt.io/agent"},
          {"reportingInstance", ("gpuckpt-agent-" + node_name).substr(0, 128)}};
}

PodEventRecorder::PodEventRecorder(node::KubeEndpoint api, std::string node_name, node::EventsConfig config,
                                   node::Metrics& metrics)
    : client_(std::move(api), std::chrono::seconds(config.timeout_seconds), std::chrono::seconds(config.timeout_seconds)),
      node_name_(std::move(node_name)),
      config_(config),
      metrics_(metrics),
      worker_([this] { run(); }) {}

PodEventRecorder::~PodEventRecorder() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void PodEventRecorder::record(PodEvent event) {
  if (!node::is_valid_pod_ref(event.pod)) {
    log::debug("pod event " + event.reason + " not sent: '" + log::escaped(event.pod.namespace_name, 64) + "/" +
               log::escaped(event.pod.name, 64) + "' is not a pod name");
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() < static_cast<std::size_t>(config_.queue_length) && !stopping_) {
      queue_.push_back(std::move(event));
      wake_.notify_one();
      return;
    }
  }
  metrics_.pod_event_dropped("queue_full");
  log::warn("pod event " + event.reason + " on " + event.pod.namespace_name + "/" + event.pod.name +
            " dropped: events.queue_length (" + std::to_string(config_.queue_length) + ") are waiting to be posted");
}

void PodEventRecorder::record_job(node::JobStage stage, const node::JobStatus& job, const node::PodRef& pod) {
  if (!pod.empty()) record(job_pod_event(stage, job, pod, node_name_));
}

void PodEventRecorder::run() {
  std::uint64_t sequence = 0;
  std::optional<std::chrono::steady_clock::time_point> drain_until;
  for (;;) {
    PodEvent event;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && !drain_until)
        drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(config_.timeout_seconds);
      if (queue_.empty()) return;
      if (drain_until && std::chrono::steady_clock::now() >= *drain_until) {
        for (const auto& left : queue_) {
          metrics_.pod_event_dropped("shutdown");
          log::warn("pod event " + left.reason + " on " + left.pod.namespace_name + "/" + left.pod.name +
                    " dropped: the agent is stopping");
        }
        queue_.clear();
        return;
      }
      event = std::move(queue_.front());
      queue_.pop_front();
    }
    const std::string what = "pod event " + event.reason + " on " + event.pod.namespace_name + "/" + event.pod.name;
    // The API server's answer is untrusted: whatever posting meets drops this event, never the agent.
    if (auto posted = caught(what, [&] { return post(event, ++sequence); }); !posted) {
      metrics_.pod_event_dropped("api_error");
      log::warn(what + " not posted: " + posted.error().message);
    } else {
      metrics_.pod_event_posted();
      log::debug(what + " posted");
    }
  }
}

Result<void> PodEventRecorder::post(const PodEvent& event, std::uint64_t sequence) {
  const std::string path = "/api/v1/namespaces/" + event.pod.namespace_name + "/events";
  GPUCKPT_TRY(auto answer, client_.post(path, core_v1_event(event, node_name_, Clock::now(), sequence).dump()));
  if (answer.status != 201 && answer.status != 200)
    return make_error("POST " + client_.url_of(path) + " returned " + std::to_string(answer.status) + ": " +
                      log::escaped(answer.body, 200) + " (may the agent's service account create events?)");
  return {};
}

}  // namespace gpuckpt::agent
