// What the OCI hook and gpuckpt-nri record about GPU containers in the agent's state directory, one JSON file
// per container: <state_dir>/containers/<container-id>.json. The hook and gpuckpt-nri write it
// (gpu_container_record.h), the agent reads it (GET /v1/containers, checkpoint).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "state/checkpoint_record.h"
#include "base/result.h"

namespace gpuckpt {

struct ContainerGpuState {
  static constexpr int kVersion = 1;
  std::string container_id;
  std::string bundle;
  int pid = 0;
  std::string recorded_at;          // UTC, RFC 3339
  std::map<std::string, std::string> annotations;   // io.kubernetes.* and io.gpuckpt.* only
  CheckpointGpuRecord gpus;         // checkpoint_id empty until a checkpoint is taken
};

nlohmann::json to_json(const ContainerGpuState& state);
Result<ContainerGpuState> container_state_from_json(const nlohmann::json& json, std::string_view source);

std::filesystem::path container_state_path(const std::filesystem::path& state_dir, std::string_view container_id);
Result<void> write_container_state(const std::filesystem::path& state_dir, const ContainerGpuState& state);
// std::nullopt: the hook never saw this container use a GPU.
Result<std::optional<ContainerGpuState>> read_container_state(const std::filesystem::path& state_dir,
                                                              std::string_view container_id);
// Every readable record; unreadable ones are logged and skipped.
std::vector<ContainerGpuState> list_container_states(const std::filesystem::path& state_dir);
Result<void> remove_container_state(const std::filesystem::path& state_dir, std::string_view container_id);

std::string utc_now_rfc3339();

}  // namespace gpuckpt
