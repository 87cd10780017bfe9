// Recording a GPU container: detection over its OCI spec, the node inventory, and the record in the state
// directory (container_store.h). The OCI hook (createRuntime, from the bundle's config.json) and gpuckpt-nri
// (CreateContainer/Synchronize, from NRI's view of the container) both record through this one function, so the
// agent reads the same record whichever of them saw the container.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/device_nodes.h"
#include "gpu/gpu_model.h"
#include "base/result.h"

namespace gpuckpt {

using InventoryReader = std::function<Result<NodeInventory>()>;

// What happened, for the one log line each caller writes.
struct RecordOutcome {
  bool gpu_container = false;
  std::string message;
};
// The most GPU device nodes one container's record keeps (more are left out, with a warning).
inline constexpr std::size_t kMaxRecordedDevices = 256;

// Detection, inventory (read only when the container uses a GPU), <state_dir>/containers/<id>.json.
// `bundle` may be empty, `pid` 0.
Result<RecordOutcome> record_gpu_container(const std::string& id, const std::string& bundle, int pid,
                                           const nlohmann::json& spec, const std::filesystem::path& state_dir,
                                           const InventoryReader& inventory, const DeviceNumberLookup& lookup);

}  // namespace gpuckpt
