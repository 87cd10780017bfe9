#include "gpu/device_allocation.h"

#include <algorithm>
#include <charconv>

namespace gpuckpt {

namespace {

const GpuDevice* gpu_by_minor(const NodeInventory& inventory, std::string_view key) {
  int minor = -1;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), minor);
  if (ec != std::errc() || end != key.data() + key.size() || minor < 0) return nullptr;
  for (const auto& gpu : inventory.gpus)
    if (gpu.vendor == GpuVendor::Nvidia && gpu.device_minor == minor) return &gpu;
  return nullptr;
}

}  // namespace

AllocatedGpus allocated_gpus(const std::vector<DeviceAllocation>& allocation, const NodeInventory& inventory) {
  AllocatedGpus out;
  std::vector<const GpuDevice*> named;
  for (const auto& resource : allocation)
    for (const auto& device_id : resource.device_ids) {
      const GpuDevice* gpu = find_gpu(inventory, device_id);
      if (!gpu) gpu = gpu_by_minor(inventory, device_id);
      if (gpu)
        named.push_back(gpu);
      else
        out.unknown.push_back(resource.resource_name + "/" + device_id);
    }
  for (const auto& gpu : inventory.gpus)
    if (std::find(named.begin(), named.end(), &gpu) != named.end()) out.gpu_ids.push_back(gpu.id);
  return out;
}

}  // namespace gpuckpt
