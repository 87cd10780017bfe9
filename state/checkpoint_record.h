// gpuckpt-gpus.json, the GPU record a checkpoint carries, and the io.gpuckpt.* annotations that name it
// (docs/formats.md). Apart from the archive code, so that the OCI hook reads and writes it without libarchive.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/device_nodes.h"
#include "gpu/gpu_model.h"
#include "base/result.h"

namespace gpuckpt {

inline constexpr const char* kRecordEntry = "gpuckpt-gpus.json";
inline constexpr const char* kAnnotationVersion = "io.gpuckpt.version";
inline constexpr const char* kAnnotationCheckpointId = "io.gpuckpt.checkpoint-id";
inline constexpr const char* kAnnotationUsedGpus = "io.gpuckpt.used-gpus";   // comma-separated GpuDevice ids
inline constexpr const char* kAnnotationRecordEntry = "io.gpuckpt.record";   // names kRecordEntry

// gpuckpt-gpus.json: what the OCI hook recorded at creation, stored with the checkpoint.
struct CheckpointGpuRecord {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string checkpoint_id;
  GpuPropertiesRecord record;
  std::vector<ContainerGpuDevice> devices;
  std::map<std::string, std::string> gpu_env;   // NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, ... at creation
};

nlohmann::json to_json(const CheckpointGpuRecord& record);
Result<CheckpointGpuRecord> checkpoint_record_from_json(const nlohmann::json& json, std::string_view source);

}  // namespace gpuckpt
