// gpuckpt-nri's behaviour, over NRI's protobuf messages (no I/O but the state directory): the runtime's events
// and requests in, responses out.
//   Configure          subscribe to CreateContainer and RemoveContainer
//   Synchronize        record the GPU containers that already exist
//   CreateContainer    record the container's GPUs like the OCI hook (same library, same record in
//                      <state_dir>/containers/<id>.json); a container the runtime restores from a checkpoint
//                      image the agent registered (common/checkpoint_images.h) is adjusted to the restore plan
//                      made for the GPUs the runtime gave it (its devices, NVIDIA_VISIBLE_DEVICES, CDI): the
//                      checkpoint's device paths get those GPUs' nodes, the environment follows, the plan goes to
//                      the state dir under a new id named by io.gpuckpt.restore-plan, and the OCI hook is added
//                      (createRuntime) to place it for the CRIU plugin. A restore that cannot be planned is
//                      refused (better no container than one on the wrong GPU); anything else is never blocked.
//   StateChange        REMOVE_CONTAINER forgets the record
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/gpu_container_record.h"
#include "common/matcher.h"
#include "common/result.h"
#include "github.com/containerd/nri/pkg/api/api.pb.h"

namespace gpuckpt::nri {

namespace api = ::nri::pkg::api::v1alpha1;

struct NriPluginOptions {
  std::filesystem::path state_dir = "/var/lib/gpuckpt";
  std::filesystem::path host_root = "/";
  MatchPolicy match_policy;
  std::string hook_path;   // gpuckpt-oci-hook on the host, added to restored containers; empty: not added
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
  Result<void> adjust_for_restore(const api::Container& container, api::ContainerAdjustment& adjust);

  NriPluginOptions options_;
  InventoryReader inventory_;
  DeviceNumberLookup lookup_;
  bool shutdown_ = false;
};

}  // namespace gpuckpt::nri
