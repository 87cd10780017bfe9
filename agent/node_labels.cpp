#include "agent/node_labels.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/log.h"
#include "node/kube_client.h"

namespace gpuckpt::agent {

using namespace gpuckpt::node;

namespace {

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// One value when every GPU agrees, "mixed" otherwise.
template <class F>
std::string common_value(const NodeInventory& inv, F field) {
  std::set<std::string> values;
  for (const auto& g : inv.gpus) values.insert(field(g));
  if (values.size() == 1) return *values.begin();
  return "mixed";
}

}  // namespace

std::string to_label_value(std::string_view text) {
  std::string out;
  for (char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '-';
  if (out.size() > 63) out.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  const auto first = std::find_if(out.begin(), out.end(), alnum);
  return std::string(first, out.end());
}

std::map<std::string, std::optional<std::string>> compute_node_labels(const NodeInventory& inventory) {
  std::map<std::string, std::optional<std::string>> labels;
  const std::string p = kLabelPrefix;
  labels[p + "gpu-count"] = std::to_string(inventory.gpus.size());
  for (const char* key : {"gpu-vendor", "gpu-model", "gpu-memory-gib", "gpu-driver", "gpu-compute", "gpu-fingerprint"})
    labels[p + key] = std::nullopt;
  if (inventory.gpus.empty()) return labels;
  labels[p + "gpu-vendor"] = to_label_value(common_value(inventory, [](const GpuDevice& g) { return std::string(to_string(g.vendor)); }));
  labels[p + "gpu-model"] = to_label_value(common_value(inventory, [](const GpuDevice& g) { return g.name; }));
  labels[p + "gpu-memory-gib"] = to_label_value(
      common_value(inventory, [](const GpuDevice& g) { return std::to_string(g.memory_bytes >> 30); }));
  labels[p + "gpu-driver"] = to_label_value(common_value(inventory, [](const GpuDevice& g) { return g.driver_version; }));
  labels[p + "gpu-compute"] =
      to_label_value(common_value(inventory, [](const GpuDevice& g) { return g.compute_capability; }));
  // Everything a restore must agree on, order-independent: two nodes with the same fingerprint accept each
  // other's checkpoints under the default match policy.
  std::vector<std::string> parts;
  for (const auto& g : inventory.gpus) {
    std::ostringstream s;
    s << to_string(g.vendor) << '|' << g.vendor_id << ':' << g.device_id << '|' << g.name << '|' << g.memory_bytes
      << '|' << g.compute_capability << '|' << g.driver_version << '|' << g.firmware_version;
    parts.push_back(s.str());
  }
  std::sort(parts.begin(), parts.end());
  std::string joined;
  for (const auto& s : parts) joined += s + "\n";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(joined)));
  labels[p + "gpu-fingerprint"] = hex;
  for (auto& [key, value] : labels)
    if (value && value->empty()) value = std::nullopt;
  return labels;
}

std::string node_label_patch(const std::map<std::string, std::optional<std::string>>& labels) {
  nlohmann::json patch_labels = nlohmann::json::object();
  for (const auto& [key, value] : labels) patch_labels[key] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  return nlohmann::json{{"metadata", {{"labels", patch_labels}}}}.dump();
}

std::string nfd_feature_file(const std::map<std::string, std::optional<std::string>>& labels,
                             std::chrono::system_clock::time_point now, int interval_seconds) {
  const std::time_t expiry = std::chrono::system_clock::to_time_t(now + std::chrono::seconds(3L * interval_seconds));
  std::tm tm{};
  gmtime_r(&expiry, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string out = "# gpuckpt-agent: this node's GPU fingerprint, published by nfd-worker; rewritten every " +
                    std::to_string(interval_seconds) + " s\n# +expiry-time=" + stamp + "\n";
  for (const auto& [key, value] : labels)
    if (value) out += key + "=" + *value + "\n";
  return out;
}

namespace {

Result<void> write_feature_file(const NodeLabelsConfig& config,
                                const std::map<std::string, std::optional<std::string>>& labels) {
  const std::filesystem::path path = config.feature_file;
  auto written = write_file_atomically(path, nfd_feature_file(labels, std::chrono::system_clock::now(),
                                                              config.interval_seconds));
  if (!written)
    return make_error("node labels: cannot write the NFD feature file " + path.string() + ": " + written.error().message +
                      " (is the features.d directory mounted writable? nodeLabels.featureDir in the chart)");
  ::chmod(path.c_str(), 0644);   // nfd-worker may run as another user
  return {};
}

Result<void> patch_node(const KubeEndpoint& api, const std::string& node_name,
                        const std::map<std::string, std::optional<std::string>>& labels) {
  const KubeClient client(api, std::chrono::seconds(10), std::chrono::seconds(30));
  const auto result = client.patch("/api/v1/nodes/" + node_name, node_label_patch(labels),
                                   "application/merge-patch+json");
  if (!result) return make_error("node labels: PATCH node " + node_name + " failed: " + result.error().message);
  if (result->status != 200)
    return make_error("node labels: PATCH node " + node_name + " returned " + std::to_string(result->status) + ": " +
                      log::escaped(result->body, 300) + " (does the service account have 'patch' on nodes?)");
  return {};
}

}  // namespace

Result<void> publish_node_labels(const NodeLabelsConfig& config, const KubeEndpoint& api, const std::string& node_name,
                                 const std::map<std::string, std::optional<std::string>>& labels) {
  if (config.method == "nfd_feature_file") return write_feature_file(config, labels);
  return patch_node(api, node_name, labels);
}

}  // namespace gpuckpt::agent
