// Kubernetes Events (core/v1, POST /api/v1/namespaces/NS/events) on the pod a job concerns: checkpoint, restore,
// checkpoint image and archive move (the migrate's copy) start, success and failure, and kubelet-written
// checkpoints the agent annotated or could not use. `kubectl describe pod` lists them.
// Best effort, never in a job's way: record() only queues (a bounded queue; beyond, events are dropped), one
// thread posts them with the events timeout; whatever is not posted is logged and counted
// (gpuckpt_pod_events_dropped_total).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "node/config.h"
#include "node/job_events.h"
#include "node/kube_client.h"
#include "node/metrics.h"
#include "node/service.h"

namespace gpuckpt::agent {

struct PodEvent {
  node::PodRef pod;
  bool warning = false;   // type Warning (a failure), else Normal
  std::string reason;     // CamelCase: "CheckpointStarted"
  std::string action;     // what was done: "Checkpoint"
  std::string message;
};

// Kubernetes keeps at most this much of an event's message; longer ones are cut (and end in "...").
inline constexpr std::size_t kMaxEventMessageBytes = 1024;

// A job's event: reason <Kind>Started, <Kind>Succeeded, <Kind>Failed (a Warning carrying the job's error), Kind
// Checkpoint, Restore, CheckpointImage or Migrate (an archive pushed to another node's agent); the message names
// the container or archive, `node_name`, the outcome and the job's id.
PodEvent job_pod_event(node::JobStage stage, const node::JobStatus& job, const node::PodRef& pod,
                       const std::string& node_name);

// The Event object as the API server takes it: involvedObject the pod (its uid when known: `kubectl describe pod`
// lists the events whose involvedObject.uid is the pod's; the rest only `kubectl get events` shows), source
// {component gpuckpt-agent, host `node_name`}, count 1, firstTimestamp = lastTimestamp = `now` (seconds),
// eventTime `now` (microseconds) with reportingComponent/reportingInstance/action as the API server requires
// alongside it, the message made printable ASCII and cut to kMaxEventMessageBytes. metadata.name is
// <pod>.<now in ns, hex><sequence, hex>, unique per agent.
nlohmann::json core_v1_event(const PodEvent& event, const std::string& node_name,
                             std::chrono::system_clock::time_point now, std::uint64_t sequence);

class PodEventRecorder {
 public:
  PodEventRecorder(node::KubeEndpoint api, std::string node_name, node::EventsConfig config, node::Metrics& metrics);
  // Posts what is still queued for at most events.timeout_seconds more; the rest is dropped ("shutdown").
  ~PodEventRecorder();
  PodEventRecorder(const PodEventRecorder&) = delete;
  PodEventRecorder& operator=(const PodEventRecorder&) = delete;

  // Queues `event`, or drops it ("queue_full") when events.queue_length are waiting. Never blocks on the network.
  void record(PodEvent event);
  // JobServiceDeps::observer's work: the event of a job that concerns a pod (`pod` not empty).
  void record_job(node::JobStage stage, const node::JobStatus& job, const node::PodRef& pod);

 private:
  void run();
  Result<void> post(const PodEvent& event, std::uint64_t sequence);

  node::KubeClient client_;
  std::string node_name_;
  node::EventsConfig config_;
  node::Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<PodEvent> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace gpuckpt::agent
