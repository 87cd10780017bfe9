// Which devices the kubelet allocated to one container, as its PodResources API reports them (v1 List/Get:
// per container, per resource name, the device plugin's device ids). The NVIDIA device plugin names GPUs by
// UUID ("GPU-…", MIG: "MIG-…"); AMD's by PCI address; simple or test device plugins by index. This is the one
// trusted source of "which GPUs was this container given" when the runtime drops the request's devices
// (CRI-O's restore) — never "any GPU of this node".
#pragma once

#include <string>
#include <vector>

#include "gpu/gpu_model.h"

namespace gpuckpt {

// The pod and container a runtime creates, as the kubelet names them (PodResources keys).
struct ContainerIdentity {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;          // empty where the caller does not know it
  std::string container_name;
};

struct DeviceAllocation {
  std::string resource_name;            // "nvidia.com/gpu", "amd.com/gpu", ...
  std::vector<std::string> device_ids;  // as the device plugin reported them
};

// The ids (GpuDevice::id) of `inventory`'s GPUs that `allocation` names, in inventory order, without
// duplicates. A device id names a GPU by what find_gpu accepts (id, UUID, PCI address, AMD gpu_id) or, for
// NVIDIA, by device minor ("0"). Ids that name no GPU of the node are returned in `unknown` (a device plugin for another
// resource, or a GPU the inventory does not see): the caller decides.
struct AllocatedGpus {
  std::vector<std::string> gpu_ids;
  std::vector<std::string> unknown;   // "resource/device-id" for each id that names no GPU here
};
AllocatedGpus allocated_gpus(const std::vector<DeviceAllocation>& allocation, const NodeInventory& inventory);

}  // namespace gpuckpt
