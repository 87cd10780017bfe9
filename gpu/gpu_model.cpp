#include "gpu/gpu_model.h"

#include <cstdio>

namespace gpuckpt {

const char* to_string(GpuVendor vendor) {
  switch (vendor) {
    case GpuVendor::Nvidia: return "nvidia";
    case GpuVendor::Amd: return "amd";
    case GpuVendor::Other: return "other";
  }
  return "other";
}

bool vendor_from_string(std::string_view name, GpuVendor& out) {
  if (name == "nvidia") out = GpuVendor::Nvidia;
  else if (name == "amd") out = GpuVendor::Amd;
  else if (name == "other") out = GpuVendor::Other;
  else return false;
  return true;
}

const GpuDevice* find_gpu(const NodeInventory& inventory, std::string_view key) {
  if (key.empty()) return nullptr;
  for (const auto& gpu : inventory.gpus)
    if (gpu.id == key) return &gpu;
  for (const auto& gpu : inventory.gpus) {
    if (!gpu.uuid.empty() && gpu.uuid == key) return &gpu;
    if (!gpu.pci_address.empty() && gpu.pci_address == key) return &gpu;
    if (gpu.gpu_id != 0 && std::to_string(gpu.gpu_id) == key) return &gpu;
  }
  return nullptr;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (value == static_cast<double>(static_cast<std::uint64_t>(value)))
    std::snprintf(text, sizeof text, "%llu %s", static_cast<unsigned long long>(value), kUnits[unit]);
  else
    std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace gpuckpt
