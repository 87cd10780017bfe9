// The gpuckpt-gpus.json document, apart from the archive code so that the OCI hook does not load libarchive.
#include "common/checkpoint_archive.h"
#include "common/properties_record.h"

namespace gpuckpt {

nlohmann::json to_json(const CheckpointGpuRecord& record) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : record.devices)
    devices.push_back({{"container_path", d.container_path}, {"major", d.major}, {"minor", d.minor},
                       {"gpu_id", d.gpu_id}});
  return {{"version", record.version},
          {"checkpoint_id", record.checkpoint_id},
          {"record", to_json(record.record)},
          {"devices", devices},
          {"gpu_env", record.gpu_env}};
}

Result<CheckpointGpuRecord> checkpoint_record_from_json(const nlohmann::json& json, std::string_view source) {
  const std::string where(source);
  try {
    CheckpointGpuRecord out;
    out.version = json.at("version").get<int>();
    if (out.version > CheckpointGpuRecord::kVersion)
      return make_error(where + ": gpuckpt record version " + std::to_string(out.version) +
                        " is newer than this gpuckpt understands (" + std::to_string(CheckpointGpuRecord::kVersion) +
                        "); upgrade gpuckpt on this node");
    out.checkpoint_id = json.value("checkpoint_id", "");
    auto record = record_from_json(json.at("record"));
    if (!record) return make_error(where + ": " + record.error().message);
    out.record = std::move(record.value());
    for (const auto& d : json.value("devices", nlohmann::json::array()))
      out.devices.push_back({d.at("container_path").get<std::string>(), d.value("major", 0u), d.value("minor", 0u),
                             d.value("gpu_id", "")});
    out.gpu_env = json.value("gpu_env", std::map<std::string, std::string>{});
    return out;
  } catch (const nlohmann::json::exception& e) {
    return make_error(where + ": malformed gpuckpt record: " + e.what());
  }
}

}  // namespace gpuckpt
