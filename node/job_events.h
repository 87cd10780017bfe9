// What a job tells the outside as it runs: it began its work, it succeeded, it failed, with the pod it concerns
// when it concerns one. The agent turns these into Kubernetes Events on that pod (agent/pod_events.h); the jobs
// know nothing of Kubernetes.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace gpuckpt::node {

struct JobStatus;

// A pod as a Kubernetes object: uid empty when not known.
struct PodRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
  bool empty() const { return namespace_name.empty() || name.empty(); }
};

// Whether `pod` names a pod Kubernetes could have: namespace a DNS label (63), name a DNS subdomain (253), uid
// empty or of [0-9a-f-] (36). Anything else is never put into an API path.
bool is_valid_pod_ref(const PodRef& pod);

// The pod a checkpoint's container ran in, as its runtime wrote it into the container's spec (spec.dump
// annotations): CRI-O's io.kubernetes.pod.{namespace,name,uid}, containerd's io.kubernetes.cri.sandbox-*. Empty
// for a container no kubelet made (podman), or when the names are not valid Kubernetes names.
PodRef pod_of_checkpoint_spec(const nlohmann::json& spec);

enum class JobStage { started, succeeded, failed };

// `job` as it is at that moment (its request; its result or error once it ended).
using JobObserver = std::function<void(JobStage stage, const JobStatus& job, const PodRef& pod)>;

}  // namespace gpuckpt::node
