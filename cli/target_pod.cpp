#include "cli/target_pod.h"

#include <cctype>

namespace gpuckpt::cli {

namespace {

using nlohmann::json;

// Labels a controller uses to claim pods: a copy carrying them would be adopted (and possibly deleted) by the
// source's ReplicaSet, StatefulSet, DaemonSet or Job.
constexpr const char* kControllerLabels[] = {
    "pod-template-hash",           "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
    "pod-template-generation",     "apps.kubernetes.io/pod-index", "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name", "controller-uid",           "job-name"};

constexpr std::size_t kMaxName = 253;

// obj[key] when it is a string, else `absent` (the document is whatever the user's kubectl printed).
std::string string_at(const json& obj, const char* key, const std::string& absent = "") {
  if (!obj.is_object()) return absent;
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : absent;
}

}  // namespace

bool is_object_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxName) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name)
    if (!alnum(c) && c != '-' && c != '.') return false;
  return true;
}

Result<json> target_pod(const json& source, const TargetPodOptions& options) {
  if (!source.is_object() || string_at(source, "kind", "Pod") != "Pod")
    return make_error("the source is not a pod (expected the output of 'kubectl get pod NAME -o json')");
  const json& metadata = source.contains("metadata") ? source["metadata"] : json();
  const json& spec = source.contains("spec") ? source["spec"] : json();
  const std::string source_name = string_at(metadata, "name");
  if (source_name.empty() || !spec.is_object() || !spec.contains("containers") || !spec["containers"].is_array())
    return make_error("the source pod has no metadata.name or spec.containers");
  const std::string ns = string_at(metadata, "namespace", "default");
  if (options.node.empty() || options.container.empty() || options.image.empty())
    return make_error("the target pod needs a node, a container and an image");
  if (options.pull != "Never" && options.pull != "IfNotPresent")
    return make_error("pull policy '" + options.pull + "' is not Never or IfNotPresent");

  std::string name = options.name;
  if (name.empty()) {
    const std::string suffix = "-migrated";
    std::string base = source_name.substr(0, kMaxName - suffix.size());
    while (!base.empty() && !std::isalnum(static_cast<unsigned char>(base.back()))) base.pop_back();
    name = base + suffix;
  }
  if (!is_object_name(name))
    return make_error("'" + name + "' is not a valid pod name (lower-case letters, digits, '-', '.'; at most 253)");

  json meta = {{"name", name}, {"namespace", ns}};
  if (metadata.contains("labels") && metadata["labels"].is_object()) {
    json labels = metadata["labels"];
    for (const char* owned : kControllerLabels) labels.erase(owned);
    if (!labels.empty()) meta["labels"] = labels;
  }
  json annotations = metadata.contains("annotations") && metadata["annotations"].is_object() ? metadata["annotations"]
                                                                                              : json::object();
  annotations["gpuckpt.io/migrated-from"] = ns + "/" + source_name;
  annotations["gpuckpt.io/checkpoint-image"] = options.image;
  meta["annotations"] = annotations;

  json target_spec = spec;
  target_spec["nodeName"] = options.node;
  for (const char* dropped : {"nodeSelector", "ephemeralContainers", "priority", "preemptionPolicy"})
    target_spec.erase(dropped);
  if (target_spec.contains("affinity") && target_spec["affinity"].is_object()) {
    target_spec["affinity"].erase("nodeAffinity");
    if (target_spec["affinity"].empty()) target_spec.erase("affinity");
  }
  bool found = false;
  for (auto& c : target_spec["containers"])
    if (string_at(c, "name") == options.container) {
      c["image"] = options.image;
      c["imagePullPolicy"] = options.pull;
      found = true;
    }
  if (!found) return make_error("pod " + ns + "/" + source_name + " has no container '" + options.container + "'");
  return json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", target_spec}};
}

}  // namespace gpuckpt::cli
