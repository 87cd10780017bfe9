// The gpuckpt-gpus.json document, apart from the archive code so that the OCI hook does not load libarchive.
#include "state/checkpoint_record.h"
#include "base/json_reader.h"
#include "gpu/properties_record.h"

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
  JsonFields fields{std::string(source)};
  CheckpointGpuRecord out;
  out.version = fields.version(json, CheckpointGpuRecord::kVersion, "gpuckpt record");
  fields.get(json, "", "checkpoint_id", out.checkpoint_id);
  const nlohmann::json* record_json = fields.object(json, "", "record", true);
  if (const auto* devices = fields.array(json, "", "devices"))
    for (std::size_t i = 0; i < devices->size() && !fields.failed(); ++i) {
      const std::string at = "devices[" + std::to_string(i) + "]";
      ContainerGpuDevice d;
      fields.get((*devices)[i], at, "container_path", d.container_path, true);
      fields.get_integer((*devices)[i], at, "major", d.major);
      fields.get_integer((*devices)[i], at, "minor", d.minor);
      fields.get((*devices)[i], at, "gpu_id", d.gpu_id);
      out.devices.push_back(std::move(d));
    }
  fields.get(json, "", "gpu_env", out.gpu_env);
  if (fields.failed()) return fields.error();
  GPUCKPT_TRY(out.record, record_from_json(*record_json), std::string(source) + ": record");
  return out;
}

}  // namespace gpuckpt
