// This node's GPUs, read under a host root: KFD topology (AMD), /proc/driver/nvidia + PCI sysfs + NVML
// (NVIDIA), DRM render nodes (GPUs without KFD). The only GPU parser in the project.
#pragma once

#include "common/gpu_model.h"
#include "common/host_root.h"
#include "common/result.h"

namespace gpuckpt {

struct InventoryOptions {
  bool use_nvml = true;   // dlopen libnvidia-ml.so.1 when present (only meaningful with host root "/")
};

Result<NodeInventory> read_inventory(const HostRoot& host, const InventoryOptions& options = {});

}  // namespace gpuckpt
