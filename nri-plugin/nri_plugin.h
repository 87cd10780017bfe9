// gpuckpt-nri's behaviour, over NRI's protobuf messages (no I/O but the state directory and the injected
// readers): the runtime's events and requests in, responses out.
//   Configure          subscribe to CreateContainer and RemoveContainer
//   Synchronize        record the GPU containers that already exist
//   CreateContainer    record the container's GPUs like the OCI hook (state/gpu_container_record.h). A container
//                      the runtime restores (restore/restore_recognition.h) from a checkpoint the agent made
//                      available on this node (archive/checkpoint_images.h) gets the GPUs its pod was given — the
//                      kubelet's allocation (PodResources), else the devices the runtime kept from the request —
//                      and nothing else: the checkpoint's device nodes under the target GPUs' own names with the
//                      device-cgroup rules NRI adds with them, the source GPUs' nodes it had removed, the GPU
//                      environment, a restore plan bound to this container with a short lifetime, the
//                      io.gpuckpt.restore-plan annotation, and the OCI hook as createRuntime hook unless the
//                      runtime runs it already (CRI-O from hooks.d; containerd has none). A restore whose GPUs
//                      are unknown or cannot take the checkpoint is refused with the reason; any other container
//                      is never blocked or changed.
//   RemoveContainer    forget the record (StateChange REMOVE_CONTAINER too, for runtimes before NRI 0.9)
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/device_allocation.h"
#include "state/gpu_container_record.h"
#include "gpu/matcher.h"
#include "base/result.h"
#include "github.com/containerd/nri/pkg/api/api.pb.h"

namespace gpuckpt::nri {

namespace api = ::nri::pkg::api::v1alpha1;

// The kubelet's device allocation of one container (PodResources): std::nullopt when the kubelet does not list
// the container, an error when it cannot be asked.
using AllocationReader =
    std::function<Result<std::optional<std::vector<DeviceAllocation>>>(const ContainerIdentity&)>;

struct NriPluginOptions {
  std::filesystem::path state_dir = "/var/lib/gpuckpt";
  std::filesystem::path host_root = "/";
  MatchPolicy match_policy;
  std::string hook_path;   // gpuckpt-oci-hook on the host, added to restored containers that do not
                           // have it already; empty: not added
  AllocationReader allocation;   // empty: no PodResources; only the devices the runtime kept count
  CdiDeviceNodes cdi;            // the nodes of the CDI devices DRA drivers answered; empty: DRA devices name
                                 // GPUs by their device names only
  std::chrono::seconds plan_lifetime{600};   // a plan unused this long after CreateContainer expires
};

// The events gpuckpt-nri subscribes to, as NRI's bit mask (bit N-1 for event N).
std::int32_t subscribed_events();

// The OCI-spec-shaped view of an NRI container that GPU detection reads (process.env, linux.devices, mounts,
// annotations).
nlohmann::json container_spec(const api::Container& container);

class NriPlugin {
 public:
  NriPlugin(NriPluginOptions options, InventoryReader inventory, DeviceNumberLookup lookup);

  // One request to the plugin service (`method` as ttrpc names it, e.g. "CreateContainer"); the response's
  // serialised protobuf, or an error for the runtime (unknown method, unreadable request).
  Result<std::string> handle(std::string_view method, std::string_view payload);
  bool shutdown_requested() const { return shutdown_; }

 private:
  void record(const api::Container& container, const InventoryReader& inventory);
  void forget(const api::Container& container);
  Result<void> adjust_for_restore(const api::CreateContainerRequest& request, api::ContainerAdjustment& adjust);
  // `container_name`: the pod's container (restored_container_name), which NRI's name may not be.
  Result<std::vector<std::string>> allocated_gpus_of(const api::CreateContainerRequest& request,
                                                     const std::string& container_name, const NodeInventory& node,
                                                     const std::string& what);

  NriPluginOptions options_;
  InventoryReader inventory_;
  DeviceNumberLookup lookup_;
  bool shutdown_ = false;
};

}  // namespace gpuckpt::nri
