#include "cli/target_pod.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

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

// `labels` less what makes `selector` (options.owner_selector) match them. A selector is a LabelSelector
// (matchLabels, matchExpressions) or a ReplicationController's plain map; it matches when every requirement holds.
// Labels it does not match are kept as they are. Else the keys of matchLabels and of the In and Exists expressions go
// (NotIn and DoesNotExist hold for a pod without the label: no removal defeats a selector made only of those).
Result<json> unclaimed_labels(json labels, const json& selector) {
  if (!selector.is_object()) return make_error("the owner's selector " + selector.dump() + " is not an object");
  const bool label_selector = selector.contains("matchLabels") || selector.contains("matchExpressions");
  const json match_labels = label_selector ? selector.value("matchLabels", json::object()) : selector;
  const json expressions = label_selector ? selector.value("matchExpressions", json::array()) : json::array();
  if (!match_labels.is_object() || !expressions.is_array())
    return make_error("the owner's selector " + selector.dump() + " is no LabelSelector (matchLabels must be an "
                      "object, matchExpressions a list)");
  auto has = [&](const std::string& key) { return labels.contains(key) && labels[key].is_string(); };
  bool matches = true;
  std::vector<std::string> removable;
  for (const auto& [key, value] : match_labels.items()) {
    matches = matches && has(key) && labels[key] == value;
    removable.push_back(key);
  }
  for (const auto& expression : expressions) {
    const std::string key = string_at(expression, "key"), op = string_at(expression, "operator");
    const json values = expression.is_object() ? expression.value("values", json::array()) : json::array();
    const bool in = has(key) && values.is_array() && std::find(values.begin(), values.end(), labels[key]) != values.end();
    if (op == "In") matches = matches && in;
    else if (op == "NotIn") matches = matches && !in;
    else if (op == "Exists") matches = matches && has(key);
    else if (op == "DoesNotExist") matches = matches && !has(key);
    else return make_error("the owner's selector has an expression with operator '" + op + "'");
    if (op == "In" || op == "Exists") removable.push_back(key);
  }
  if (!matches) return labels;
  if (removable.empty())
    return make_error("the owner's selector " + selector.dump() + " matches the copy whatever labels it lacks (only "
                      "NotIn/DoesNotExist, or empty): its owner would adopt it");
  for (const std::string& key : removable) labels.erase(key);
  return labels;
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
  json labels = metadata.contains("labels") && metadata["labels"].is_object() && !options.no_labels ? metadata["labels"]
                                                                                                     : json::object();
  for (const char* owned : kControllerLabels) labels.erase(owned);
  if (!options.owner_selector.is_null()) {
    GPUCKPT_TRY(labels, unclaimed_labels(std::move(labels), options.owner_selector));
  }
  if (!labels.empty()) meta["labels"] = labels;
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
