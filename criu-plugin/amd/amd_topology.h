// The node's AMD GPUs as the shared inventory sees them, and the gpu_id / render-minor remap for a restore,
// decided by the shared matcher (gpu/matcher.h). No parsing here: gpu/inventory.h is the only parser.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_model.h"
#include "base/host_root.h"
#include "base/result.h"

namespace gpuckpt::amd {

struct GpuTarget {
  std::uint32_t gpu_id = 0;   // KFD gpu_id on this node
  int render_minor = -1;
  std::string inventory_id;
};

Result<NodeInventory> read_amd_node(const HostRoot& host);
const GpuDevice* find_gpu_id(const NodeInventory& node, std::uint32_t gpu_id);
const GpuDevice* find_render_minor(const NodeInventory& node, int render_minor);

// The record stored with a checkpoint: this node's inventory and the GPUs the process used.
GpuPropertiesRecord make_record(const NodeInventory& node, std::vector<std::string> used_ids);

// For every used GPU of `source`, the GPU of `target` it lands on (keyed by the source's inventory id).
// A failure lists every candidate and why it was ruled out, so the operator can act on it.
Result<std::map<std::string, GpuTarget>> plan_restore(const GpuPropertiesRecord& source, const NodeInventory& target);

}  // namespace gpuckpt::amd
