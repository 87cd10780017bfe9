#include "oci-hook/container_store.h"

#include <ctime>

#include "common/log.h"
#include "common/restore_plan.h"

namespace gpuckpt::hook {

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
  try {
    if (json.at("version").get<int>() > ContainerGpuState::kVersion)
      return make_error(std::string(source) + ": container record version is newer than this gpuckpt");
    ContainerGpuState state;
    state.container_id = json.at("container_id").get<std::string>();
    state.bundle = json.value("bundle", "");
    state.pid = json.value("pid", 0);
    state.recorded_at = json.value("recorded_at", "");
    state.annotations = json.value("annotations", std::map<std::string, std::string>{});
    auto gpus = checkpoint_record_from_json(json.at("gpus"), source);
    if (!gpus) return gpus.error();
    state.gpus = std::move(gpus.value());
    return state;
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string(source) + ": malformed container record: " + e.what());
  }
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
  auto json = read_json_file(path);
  if (!json) return json.error();
  if (!json.value()) return std::optional<ContainerGpuState>{};
  auto state = container_state_from_json(*json.value(), path.string());
  if (!state) return state.error();
  return std::optional<ContainerGpuState>(std::move(state.value()));
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

}  // namespace gpuckpt::hook
