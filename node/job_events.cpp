#include "node/job_events.h"

namespace gpuckpt::node {

namespace {

bool is_dns_name(const std::string& text, std::size_t max, bool dots) {
  if (text.empty() || text.size() > max) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(text.front()) || !alnum(text.back())) return false;
  for (char c : text)
    if (!alnum(c) && c != '-' && !(dots && c == '.')) return false;
  return true;
}

bool is_valid_pod_uid(const std::string& uid) {
  if (uid.size() > 36) return false;
  for (char c : uid)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-')) return false;
  return true;
}

// Names as Kubernetes takes them; a uid that is not one is left out.
PodRef checked(PodRef pod) {
  if (!is_valid_pod_uid(pod.uid)) pod.uid.clear();
  return is_valid_pod_ref(pod) ? pod : PodRef{};
}

}  // namespace

bool is_valid_pod_ref(const PodRef& pod) {
  return is_dns_name(pod.namespace_name, 63, false) && is_dns_name(pod.name, 253, true) && is_valid_pod_uid(pod.uid);
}

PodRef pod_of_checkpoint_spec(const nlohmann::json& spec) {
  if (!spec.is_object()) return {};
  const auto annotations = spec.find("annotations");
  if (annotations == spec.end() || !annotations->is_object()) return {};
  auto text = [&](const char* key) {
    const auto it = annotations->find(key);
    return it != annotations->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  PodRef crio{text("io.kubernetes.pod.namespace"), text("io.kubernetes.pod.name"), text("io.kubernetes.pod.uid")};
  if (!crio.empty()) return checked(crio);
  PodRef containerd{text("io.kubernetes.cri.sandbox-namespace"), text("io.kubernetes.cri.sandbox-name"),
                    text("io.kubernetes.cri.sandbox-uid")};
  if (!containerd.empty()) return checked(containerd);
  return {};
}

}  // namespace gpuckpt::node
