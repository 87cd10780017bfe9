// This node's GPUs, read under a host root: KFD topology (AMD), /proc/driver/nvidia + PCI sysfs + NVML
// (NVIDIA), DRM render nodes (GPUs without KFD). The only GPU parser in the project.
#pragma once

#include <filesystem>

#include "gpu/gpu_model.h"
#include "base/host_root.h"
#include "base/result.h"

namespace gpuckpt {

class NvmlSource;

struct InventoryOptions {
  bool use_nvml = true;                   // ask NVML (the driver library, dlopen) when it is present
  std::filesystem::path nvml_snapshot;    // non-empty: replay this recorded NVML snapshot instead of the library
  const NvmlSource* nvml = nullptr;       // an explicit source (overrides both of the above)
};

// Fails on an unreadable host root and on malformed or truncated sysfs/procfs files (the message names the
// file and the line); a node without GPUs, or without one of the subsystems, is an inventory with fewer GPUs.
// KFD nodes hidden from this container by its device cgroup are left out (see docs/formats.md).
Result<NodeInventory> read_inventory(const HostRoot& host, const InventoryOptions& options = {});

// The NVIDIA kernel module's version from proc/driver/nvidia/version ("580.159.04"); "" when there is none.
std::string nvidia_driver_version(const HostRoot& host);

// gfx_target_version as KFD prints it (decimal, e.g. 90010) -> "gfx90a"; "" for 0.
std::string gfx_name(std::uint64_t gfx_target_version);

}  // namespace gpuckpt
