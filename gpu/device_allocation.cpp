#include "gpu/device_allocation.h"

#include <algorithm>
#include <charconv>

#include "gpu/gpu_detect.h"

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

// The GPUs one DRA device stands for: those whose nodes its CDI devices inject, else the one its device name names.
std::vector<const GpuDevice*> dra_device_gpus(const DeviceAllocation& device, const NodeInventory& inventory,
                                              const CdiDeviceNodes& cdi, const DeviceNumberLookup& lookup,
                                              std::vector<std::string>& problems) {
  std::vector<const GpuDevice*> gpus;
  GpuUse use;
  for (const auto& name : device.cdi_devices) {
    if (!cdi) {
      problems.push_back("CDI device " + name + ": no CDI spec directory is read");
      continue;
    }
    auto nodes = cdi(name);
    if (!nodes) {
      problems.push_back(nodes.error().message);
      continue;
    }
    use.devices.insert(use.devices.end(), nodes->begin(), nodes->end());
  }
  for (const auto& id : resolve_gpus(use, inventory, lookup))
    if (const GpuDevice* gpu = find_gpu(inventory, id)) gpus.push_back(gpu);
  if (gpus.empty())
    for (const auto& pool_device : device.device_ids) {
      const auto slash = pool_device.rfind('/');
      const std::string name = slash == std::string::npos ? pool_device : pool_device.substr(slash + 1);
      if (const GpuDevice* gpu = find_gpu(inventory, name)) gpus.push_back(gpu);
    }
  return gpus;
}

}  // namespace

AllocatedGpus allocated_gpus(const std::vector<DeviceAllocation>& allocation, const NodeInventory& inventory,
                             const CdiDeviceNodes& cdi, const DeviceNumberLookup& lookup) {
  AllocatedGpus out;
  std::vector<const GpuDevice*> named;
  for (const auto& resource : allocation) {
    if (resource.dynamic()) {
      std::vector<std::string> problems;
      const auto gpus = dra_device_gpus(resource, inventory, cdi, lookup, problems);
      named.insert(named.end(), gpus.begin(), gpus.end());
      if (gpus.empty()) {
        std::string device = resource.resource_name;
        for (const auto& id : resource.device_ids) device += "/" + id;
        device += " (claim " + resource.claim + ")";
        for (const auto& problem : problems) device += ": " + problem;
        out.unknown.push_back(std::move(device));
      }
      continue;
    }
    for (const auto& device_id : resource.device_ids) {
      const GpuDevice* gpu = find_gpu(inventory, device_id);
      if (!gpu) gpu = gpu_by_minor(inventory, device_id);
      if (gpu)
        named.push_back(gpu);
      else
        out.unknown.push_back(resource.resource_name + "/" + device_id);
    }
  }
  for (const auto& gpu : inventory.gpus)
    if (std::find(named.begin(), named.end(), &gpu) != named.end()) out.gpu_ids.push_back(gpu.id);
  return out;
}

}  // namespace gpuckpt
