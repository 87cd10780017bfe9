// This node's GPU fingerprint as Kubernetes node labels (gpuckpt.io/*), so restores can be scheduled onto
// nodes with compatible GPUs: computed purely from the inventory, published either with a merge PATCH on the node
// (method api) or as a Node Feature Discovery local feature file that nfd-worker publishes (method
// nfd_feature_file: the agent needs no Kubernetes API access).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "node/config.h"
#include "gpu/gpu_model.h"
#include "base/result.h"

namespace gpuckpt::agent {

inline constexpr const char* kLabelPrefix = "gpuckpt.io/";

// Keys without a value on this node map to std::nullopt (the PATCH removes them).
std::map<std::string, std::optional<std::string>> compute_node_labels(const NodeInventory& inventory);

// A valid label value: at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric.
std::string to_label_value(std::string_view text);

// The merge-patch body for PATCH /api/v1/nodes/{name}.
std::string node_label_patch(const std::map<std::string, std::optional<std::string>>& labels);

// The NFD local feature file: one `key=value` line per label that has a value (a label left out is removed by
// nfd-worker), and an expiry `interval_seconds * 3` after `now`, so the labels go away when the agent stops
// refreshing them (uninstalled, or its node lost its GPUs).
std::string nfd_feature_file(const std::map<std::string, std::optional<std::string>>& labels,
                             std::chrono::system_clock::time_point now, int interval_seconds);

// Publishes by config.method: PATCH through the API server at `api`, or the feature file written atomically
// (temp + rename).
Result<void> publish_node_labels(const node::NodeLabelsConfig& config, const node::KubeEndpoint& api,
                                 const std::string& node_name,
                                 const std::map<std::string, std::optional<std::string>>& labels);

}  // namespace gpuckpt::agent
