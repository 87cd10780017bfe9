// Which devices the kubelet allocated to one container, as its PodResources API reports them (v1 List/Get:
// per container, per resource name, the device plugin's device ids; and per ResourceClaim, the devices a DRA
// driver prepared, with the CDI devices that stand for them). The NVIDIA device plugin names GPUs by
// UUID ("GPU-…", MIG: "MIG-…"); AMD's by PCI address; simple or test device plugins by index. This is the one
// trusted source of "which GPUs was this container given" when the runtime drops the request's devices
// (CRI-O's restore) — never "any GPU of this node".
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/result.h"
#include "gpu/device_nodes.h"
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
  std::string resource_name;            // device plugin: "nvidia.com/gpu", "amd.com/gpu", ...; DRA: the driver
  std::vector<std::string> device_ids;  // device plugin: as it reported them; DRA: the device's "POOL/DEVICE"
  // DRA only: the ResourceClaim ("namespace/name") the device was allocated for, and the fully qualified CDI
  // device names the driver answered for it (the runtime injects these; a device may have none).
  std::string claim{};
  std::vector<std::string> cdi_devices{};
  bool dynamic() const { return !claim.empty(); }
};

// The device nodes a CDI device stands for (cdi_device_nodes over the node's CDI spec directories).
using CdiDeviceNodes = std::function<Result<std::vector<ContainerGpuDevice>>(const std::string& qualified_name)>;

// The ids (GpuDevice::id) of `inventory`'s GPUs that `allocation` names, in inventory order, without
// duplicates. A device plugin's id names a GPU by what find_gpu accepts (id, UUID, PCI address, AMD gpu_id) or,
// for NVIDIA, by device minor ("0"). A DRA device names the GPUs whose nodes its CDI devices inject (through
// `cdi` and resolve_gpus, so by device numbers, else by path), or, with no CDI device that names one, the GPU its
// device name names as a device plugin's id would (drivers that name devices by UUID). Devices that name no GPU
// of the node are returned in `unknown` (a device plugin for another resource, a DRA device that is no GPU, a CDI
// spec that cannot be read, or a GPU the inventory does not see): the caller decides.
struct AllocatedGpus {
  std::vector<std::string> gpu_ids;
  std::vector<std::string> unknown;   // "resource/device-id" for each id that names no GPU here
};
AllocatedGpus allocated_gpus(const std::vector<DeviceAllocation>& allocation, const NodeInventory& inventory,
                             const CdiDeviceNodes& cdi = {}, const DeviceNumberLookup& lookup = {});

}  // namespace gpuckpt
