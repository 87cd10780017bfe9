// Does a container use GPUs, and which of this node's GPUs? Parse (OCI runtime spec) -> model (GpuUse) ->
// resolution against the node inventory. No I/O here: device numbers come through a lookup the caller passes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/device_nodes.h"
#include "gpu/gpu_model.h"

namespace gpuckpt {

struct GpuUse {
  std::vector<ContainerGpuDevice> devices;       // GPU device nodes in linux.devices or bind-mounted
  std::map<std::string, std::string> gpu_env;   // NVIDIA_VISIBLE_DEVICES, CUDA_/ROCR_/HIP_VISIBLE_DEVICES, ...
  std::vector<std::string> cdi_devices;          // "nvidia.com/gpu=0" from cdi.k8s.io/* annotations
  bool uses_gpu() const { return !devices.empty() || !gpu_env.empty() || !cdi_devices.empty(); }
};

// From an OCI runtime spec (bundle config.json or the precreate input). Malformed sections are ignored:
// detection must never stop a container from starting.
GpuUse detect_gpu_use(const nlohmann::json& spec);

// Fills ContainerGpuDevice::gpu_id and returns the ids of the node's GPUs the container uses, in inventory
// order. A device matches a GPU when its major:minor equals one of the GPU's device nodes (via `lookup`) or its
// container path is one of them; NVIDIA_VISIBLE_DEVICES / CDI name GPUs by index (device minor), UUID or "all".
std::vector<std::string> resolve_gpus(GpuUse& use, const NodeInventory& inventory, const DeviceNumberLookup& lookup);

}  // namespace gpuckpt
