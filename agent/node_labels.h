// This node's GPU fingerprint as Kubernetes node labels (gpuckpt.io/*), so restores can be scheduled onto
// nodes with compatible GPUs: computed purely from the inventory, published with a merge PATCH on the node.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "agent/config.h"
#include "common/gpu_model.h"
#include "common/result.h"

namespace gpuckpt::agent {

inline constexpr const char* kLabelPrefix = "gpuckpt.io/";

// Keys without a value on this node map to std::nullopt (the PATCH removes them).
std::map<std::string, std::optional<std::string>> compute_node_labels(const NodeInventory& inventory);

// A valid label value: at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric.
std::string to_label_value(std::string_view text);

// The merge-patch body for PATCH /api/v1/nodes/{name}.
std::string node_label_patch(const std::map<std::string, std::optional<std::string>>& labels);

Result<void> publish_node_labels(const NodeLabelsConfig& config, const std::string& node_name,
                                 const std::map<std::string, std::optional<std::string>>& labels);

}  // namespace gpuckpt::agent
