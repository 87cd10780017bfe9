#include "oci-hook/hook.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/checkpoint_archive.h"
#include "oci-hook/container_store.h"
#include "oci-hook/gpu_detect.h"

namespace gpuckpt::hook {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxConfigBytes = 16 << 20;

Result<nlohmann::json> parse_state(std::string_view text) {
  auto state = nlohmann::json::parse(text, nullptr, false);
  if (state.is_discarded() || !state.is_object())
    return make_error("the OCI state on stdin is not a JSON object (is the hook installed for the right stage?)");
  if (!state.contains("id") || !state["id"].is_string() || !is_safe_id(state["id"].get<std::string>()))
    return make_error("the OCI state on stdin has no valid container id");
  return state;
}

Result<std::string> read_bounded(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read " + path.string());
  // Read as it comes: configs are ~10 KiB, and this runs at every container start.
  std::string data;
  char chunk[64 * 1024];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    data.append(chunk, static_cast<std::size_t>(in.gcount()));
    if (data.size() > kMaxConfigBytes) return make_error(path.string() + " is larger than 16 MiB");
  }
  return data;
}

}  // namespace

Result<Stage> parse_stage(std::string_view name) {
  if (name == "precreate") return Stage::Precreate;
  if (name == "createRuntime" || name == "prestart") return Stage::CreateRuntime;
  if (name == "poststop") return Stage::Poststop;
  return make_error("unknown hook stage '" + std::string(name) + "' (expected precreate, createRuntime or poststop)");
}

Result<RecordOutcome> record_container(std::string_view state_json, const HookOptions& options,
                                       const InventoryReader& inventory, const DeviceNumberLookup& lookup) {
  auto state = parse_state(state_json);
  if (!state) return state.error();
  const std::string id = (*state)["id"].get<std::string>();
  const std::string bundle = state->value("bundle", "");
  if (bundle.empty() || bundle.front() != '/') return make_error("container " + id + ": OCI state has no absolute bundle");
  auto config_text = read_bounded(fs::path(bundle) / "config.json");
  if (!config_text) return config_text.error();
  const auto config = nlohmann::json::parse(config_text.value(), nullptr, false);
  if (config.is_discarded()) return make_error(bundle + "/config.json is not valid JSON");
  GpuUse use = detect_gpu_use(config);
  RecordOutcome outcome;
  if (!use.uses_gpu()) {
    outcome.message = "container " + id + ": no GPU devices, nothing recorded";
    return outcome;
  }
  outcome.gpu_container = true;
  auto node = inventory();
  if (!node) return make_error("container " + id + " uses GPU devices but the node inventory failed: " +
                               node.error().message);
  ContainerGpuState record;
  record.container_id = id;
  record.bundle = bundle;
  record.pid = state->value("pid", 0);
  record.recorded_at = utc_now_rfc3339();
  if (config.contains("annotations") && config["annotations"].is_object())
    for (const auto& [key, value] : config["annotations"].items())
      if (value.is_string() && (key.rfind("io.kubernetes.", 0) == 0 || key.rfind("io.gpuckpt.", 0) == 0))
        record.annotations[key] = value.get<std::string>();
  record.gpus.record.used_gpu_ids = resolve_gpus(use, node.value(), lookup);
  record.gpus.record.node = std::move(node.value());
  record.gpus.devices = use.devices;
  record.gpus.gpu_env = use.gpu_env;
  auto written = write_container_state(options.state_dir, record);
  if (!written) return written.error();
  outcome.message = "container " + id + ": recorded " + std::to_string(use.devices.size()) + " GPU device node(s), " +
                    std::to_string(record.gpus.record.used_gpu_ids.size()) + " GPU(s) of this node";
  // A restored container: put the plan where the CRIU plugin looks (its images directory) before CRIU
  // restores the processes (runc runs createRuntime hooks at CRIU's setup-namespaces notification).
  std::string plan_path;
  if (auto it = record.annotations.find(kAnnotationRestorePlan); it != record.annotations.end())
    plan_path = it->second;
  else if (auto ck = record.annotations.find(kAnnotationCheckpointId);
           ck != record.annotations.end() && is_safe_id(ck->second))
    plan_path = restore_plan_path(options.state_dir, ck->second).string();
  std::error_code ec;
  if (!plan_path.empty() && fs::exists(plan_path, ec)) {
    const fs::path images = fs::path(bundle) / "checkpoint";
    if (fs::is_directory(images, ec)) {
      auto plan = read_bounded(plan_path);
      if (!plan) return make_error("container " + id + ": restore plan " + plan_path + ": " + plan.error().message);
      auto copied = write_file_atomically(images / kPlanFileInImages, plan.value());
      if (!copied) return copied.error();
      outcome.message += "; restore plan placed in " + (images / kPlanFileInImages).string();
    }
  }
  return outcome;
}

Result<PrecreateOutcome> precreate(std::string_view config_json, const HookOptions& options,
                                   const DeviceNumberLookup& lookup) {
  PrecreateOutcome outcome;
  outcome.config = std::string(config_json);
  auto config = nlohmann::json::parse(config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    outcome.message = "precreate input is not a JSON object; passed through unchanged";
    return outcome;
  }
  std::string checkpoint_id;
  if (config.contains("annotations") && config["annotations"].is_object())
    checkpoint_id = config["annotations"].value(kAnnotationCheckpointId, "");
  if (checkpoint_id.empty()) {
    outcome.message = "no io.gpuckpt.checkpoint-id annotation; unchanged";
    return outcome;
  }
  auto plan = read_restore_plan(options.state_dir, checkpoint_id);
  if (!plan) return make_error("restore of checkpoint " + checkpoint_id + " refused: " + plan.error().message);
  if (!plan.value()) {
    outcome.message = "checkpoint " + checkpoint_id + ": no restore plan in " + options.state_dir.string() +
                      "; unchanged";
    return outcome;
  }
  const std::string plan_path = restore_plan_path(options.state_dir, checkpoint_id).string();
  auto changed = apply_restore_plan(config, *plan.value(), lookup, plan_path);
  if (!changed)
    return make_error("restore of checkpoint " + checkpoint_id + " refused: " + changed.error().message);
  outcome.config = config.dump();
  outcome.modified = true;
  outcome.message = "checkpoint " + checkpoint_id + ": restore plan applied (" + std::to_string(changed.value()) +
                    " device node(s) moved, " + std::to_string(plan.value()->env.size()) + " env var(s))";
  return outcome;
}

Result<std::string> forget_container(std::string_view state_json, const HookOptions& options) {
  auto state = parse_state(state_json);
  if (!state) return state.error();
  const std::string id = (*state)["id"].get<std::string>();
  auto removed = remove_container_state(options.state_dir, id);
  if (!removed) return removed.error();
  return "container " + id + ": record removed";
}

}  // namespace gpuckpt::hook
