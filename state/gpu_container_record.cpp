#include "state/gpu_container_record.h"

#include "state/container_store.h"
#include "gpu/gpu_detect.h"
#include "base/log.h"

namespace gpuckpt {

Result<RecordOutcome> record_gpu_container(const std::string& id, const std::string& bundle, int pid,
                                           const nlohmann::json& config, const std::filesystem::path& state_dir,
                                           const InventoryReader& inventory, const DeviceNumberLookup& lookup) {
  GpuUse use = detect_gpu_use(config);
  RecordOutcome outcome;
  if (!use.uses_gpu()) {
    outcome.message = "container " + id + ": no GPU devices, nothing recorded";
    return outcome;
  }
  outcome.gpu_container = true;
  // A spec may list any number of device nodes (20,000 made a 2.5 MB state file read at every restore); no node has
  // this many GPU nodes, so the record keeps the first ones and the log says so.
  if (use.devices.size() > kMaxRecordedDevices) {
    log::warn("container " + log::escaped(id, 80) + " lists " + std::to_string(use.devices.size()) +
              " GPU device nodes; recording the first " + std::to_string(kMaxRecordedDevices));
    use.devices.resize(kMaxRecordedDevices);
  }
  auto node = inventory();
  if (!node) return make_error("container " + id + " uses GPU devices but the node inventory failed: " +
                               node.error().message);
  ContainerGpuState record;
  record.container_id = id;
  record.bundle = bundle;
  record.pid = pid;
  record.recorded_at = utc_now_rfc3339();
  if (config.contains("annotations") && config["annotations"].is_object())
    for (const auto& [key, value] : config["annotations"].items())
      if (value.is_string() && (key.rfind("io.kubernetes.", 0) == 0 || key.rfind("io.gpuckpt.", 0) == 0))
        record.annotations[key] = value.get<std::string>();
  record.gpus.record.used_gpu_ids = resolve_gpus(use, node.value(), lookup);
  record.gpus.record.node = std::move(node.value());
  record.gpus.devices = use.devices;
  record.gpus.gpu_env = use.gpu_env;
  GPUCKPT_TRY_VOID(write_container_state(state_dir, record));
  outcome.message = "container " + id + ": recorded " + std::to_string(use.devices.size()) + " GPU device node(s), " +
                    std::to_string(record.gpus.record.used_gpu_ids.size()) + " GPU(s) of this node";
  return outcome;
}

}  // namespace gpuckpt
