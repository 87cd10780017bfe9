#include "criu-plugin/amd/amd_topology.h"

#include <variant>

#include "gpu/inventory.h"
#include "base/log.h"
#include "gpu/matcher.h"

namespace gpuckpt::amd {

Result<NodeInventory> read_amd_node(const HostRoot& host) {
  InventoryOptions options;
  options.use_nvml = false;   // the AMD backend only needs KFD/DRM
  return read_inventory(host, options);
}

const GpuDevice* find_gpu_id(const NodeInventory& node, std::uint32_t gpu_id) {
  for (const auto& gpu : node.gpus) {
    if (gpu.vendor == GpuVendor::Amd && gpu.gpu_id == gpu_id && gpu_id != 0) return &gpu;
  }
  return nullptr;
}

const GpuDevice* find_render_minor(const NodeInventory& node, int render_minor) {
  for (const auto& gpu : node.gpus) {
    if (gpu.render_minor == render_minor && render_minor >= 0) return &gpu;
  }
  return nullptr;
}

GpuPropertiesRecord make_record(const NodeInventory& node, std::vector<std::string> used_ids) {
  GpuPropertiesRecord record;
  record.node = node;
  record.used_gpu_ids = std::move(used_ids);
  return record;
}

Result<std::map<std::string, GpuTarget>> plan_restore(const GpuPropertiesRecord& source, const NodeInventory& target) {
  MatchRequest request;
  request.source = &source;
  request.target = &target;
  request.policy = MatchPolicy::from_env();
  if (!request.policy.check_model) {
    // KFD's queue and memory state belong to one device_id: no setting turns another model into a restore.
    log::warn("amd: GPUCKPT_MODEL_CHECK=0 is ignored for AMD GPUs: KFD restores only onto the same device_id");
    request.policy.check_model = true;
  }
  auto outcome = match_gpus(request);
  if (auto* failure = std::get_if<MatchFailure>(&outcome)) {
    return make_error("no GPU assignment for the checkpoint's AMD GPUs: " + describe(*failure) +
                          ". Restore on a node with matching GPUs, or relax a check (not the model) with "
                          "GPUCKPT_<MEMORY|FIRMWARE|LINK>_CHECK=0",
                      ENODEV);
  }
  const auto& plan = std::get<MatchPlan>(outcome);
  for (const auto& relaxed : plan.relaxations) log::warn("amd: GPU match relaxed: " + relaxed);
  std::map<std::string, GpuTarget> out;
  for (const auto& a : plan.assignments) {
    const GpuDevice* dev = nullptr;
    for (const auto& gpu : target.gpus) {
      if (gpu.id == a.target_id) dev = &gpu;
    }
    if (!dev || dev->gpu_id == 0) {
      return make_error("GPU " + a.target_id + " chosen for " + a.source_id + " has no KFD gpu_id on this node", ENODEV);
    }
    out[a.source_id] = GpuTarget{dev->gpu_id, dev->render_minor, dev->id};
    log::info("amd: GPU " + a.source_id + " -> " + dev->id + " (gpu_id 0x" + [&] {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%x", dev->gpu_id);
      return std::string(buf);
    }() + ", renderD" + std::to_string(dev->render_minor) + ")");
  }
  return out;
}

}  // namespace gpuckpt::amd
