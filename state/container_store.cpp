#include "state/container_store.h"

#include <ctime>

#include "base/atomic_file.h"
#include "base/json_reader.h"
#include "base/log.h"

namespace gpuckpt {

namespace fs = std::filesystem;

std::string utc_now_rfc3339() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

nlohmann::json to_json(const ContainerGpuState& state) {
  return {{"version", ContainerGpuState::kVersion}, {"container_id", state.container_id}, {"bundle", state.bundle},
          {"pid", state.pid}, {"recorded_at", state.recorded_at}, {"annotations", state.annotations},
          {"gpus", to_json(state.gpus)}};
}

Result<ContainerGpuState> container_state_from_json(const nlohmann::json& json, std::string_view source) {
  JsonFields fields{std::string(source)};
  ContainerGpuState state;
  fields.version(json, ContainerGpuState::kVersion, "container record");
  fields.get(json, "", "container_id", state.container_id, true);
  fields.get(json, "", "bundle", state.bundle);
  fields.get_integer(json, "", "pid", state.pid);
  fields.get(json, "", "recorded_at", state.recorded_at);
  fields.get(json, "", "annotations", state.annotations);
  const nlohmann::json* gpus = fields.object(json, "", "gpus", true);
  if (fields.failed()) return fields.error();
  GPUCKPT_TRY(state.gpus, checkpoint_record_from_json(*gpus, std::string(source) + ": gpus"));
  return state;
}

fs::path container_state_path(const fs::path& state_dir, std::string_view container_id) {
  return state_dir / "containers" / (std::string(container_id) + ".json");
}

Result<void> write_container_state(const fs::path& state_dir, const ContainerGpuState& state) {
  if (!is_safe_id(state.container_id))
    return make_error("container id '" + state.container_id + "' is not a safe file name");
  return write_file_atomically(container_state_path(state_dir, state.container_id), to_json(state).dump(2));
}

Result<std::optional<ContainerGpuState>> read_container_state(const fs::path& state_dir,
                                                              std::string_view container_id) {
  if (!is_safe_id(container_id)) return make_error("container id '" + std::string(container_id) + "' is not valid");
  const fs::path path = container_state_path(state_dir, container_id);
  GPUCKPT_TRY(const auto json, read_json_file(path));
  if (!json) return std::optional<ContainerGpuState>{};
  GPUCKPT_TRY(auto state, container_state_from_json(*json, path.string()));
  return std::optional<ContainerGpuState>(std::move(state));
}

std::vector<ContainerGpuState> list_container_states(const fs::path& state_dir) {
  std::vector<ContainerGpuState> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_dir / "containers", ec)) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name.front() == '.') continue;
    auto state = read_container_state(state_dir, entry.path().stem().string());
    if (!state) {
      log::warn("skipping container record " + entry.path().string() + ": " + state.error().message);
      continue;
    }
    if (state.value()) out.push_back(std::move(*state.value()));
  }
  return out;
}

Result<void> remove_container_state(const fs::path& state_dir, std::string_view container_id) {
  if (!is_safe_id(container_id)) return make_error("container id '" + std::string(container_id) + "' is not valid");
  std::error_code ec;
  fs::remove(container_state_path(state_dir, container_id), ec);
  if (ec) return make_error("cannot remove record of " + std::string(container_id) + ": " + ec.message(), EIO);
  return {};
}

}  // namespace gpuckpt
