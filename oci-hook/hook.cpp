#include "oci-hook/hook.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "common/checkpoint_archive.h"
#include "common/json_reader.h"
#include "common/container_store.h"

namespace gpuckpt::hook {

namespace fs = std::filesystem;

namespace {

Result<nlohmann::json> parse_state(std::string_view text) {
  auto state = parse_json(text, "the OCI state on stdin");
  if (!state) return state.error();
  if (!state->is_object())
    return make_error("the OCI state on stdin is not a JSON object (is the hook installed for the right stage?)");
  auto id = state->find("id");
  if (id == state->end() || !id->is_string() || !is_safe_id(id->get<std::string>()))
    return make_error("the OCI state on stdin has no valid container id");
  return state;
}

// The restore plan id a config's annotations name: empty when none, an error when it is not one the agent makes.
Result<std::string> named_plan_id(const nlohmann::json& config) {
  auto annotations = config.find("annotations");
  if (annotations == config.end() || !annotations->is_object()) return std::string{};
  auto id = annotations->find(kAnnotationRestorePlan);
  if (id == annotations->end()) return std::string{};
  if (!id->is_string() || !is_restore_plan_id(id->get<std::string>()))
    return make_error(std::string("annotation ") + kAnnotationRestorePlan +
                      " is not a restore plan id the gpuckpt agent made (rp- and 32 hex digits)");
  return id->get<std::string>();
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
  JsonFields fields("the OCI state of container " + id);
  std::string bundle;
  std::int64_t pid = 0;
  fields.get(*state, "", "bundle", bundle);
  fields.get_integer(*state, "", "pid", pid, 0, std::numeric_limits<int>::max());
  if (fields.failed()) return fields.error();
  if (bundle.empty() || bundle.front() != '/') return make_error("container " + id + ": OCI state has no absolute bundle");
  auto read = read_json_file(fs::path(bundle) / "config.json");
  if (!read) return read.error();
  if (!read.value() || !read.value()->is_object()) return make_error(bundle + "/config.json is not a JSON object");
  const nlohmann::json& config = *read.value();
  auto recorded = record_gpu_container(id, bundle, static_cast<int>(pid), config, options.state_dir, inventory, lookup);
  if (!recorded || !recorded->gpu_container) return recorded;
  RecordOutcome outcome = std::move(recorded.value());
  // A restored container: put the plan where the CRIU plugin looks (its images directory) before CRIU
  // restores the processes (runc runs createRuntime hooks at CRIU's setup-namespaces notification). The plan
  // comes only from the state directory; a plan file that came inside the archive is removed.
  const fs::path images = fs::path(bundle) / "checkpoint";
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(images, ec))) return outcome;
  auto plan_id = named_plan_id(config);
  if (!plan_id) return make_error("container " + id + ": " + plan_id.error().message);
  std::optional<RestorePlan> plan;
  if (!plan_id->empty()) {
    auto read_plan = read_restore_plan(options.state_dir, plan_id.value());
    if (!read_plan) return make_error("container " + id + ": " + read_plan.error().message);
    plan = std::move(read_plan.value());
  }
  if (!plan) {
    if (fs::remove(images / kPlanFileInImages, ec))
      outcome.message += "; removed a restore plan that came with the archive (only the agent makes plans)";
    return outcome;
  }
  auto copied = write_file_atomically(images / kPlanFileInImages, to_json(*plan).dump(2));
  if (!copied) return copied.error();
  outcome.message += "; restore plan " + plan->id + " placed in " + (images / kPlanFileInImages).string();
  return outcome;
}

Result<PrecreateOutcome> precreate(std::string_view config_json, const HookOptions& options,
                                   const DeviceNumberLookup& lookup) {
  PrecreateOutcome outcome;
  outcome.config = std::string(config_json);
  auto parsed = parse_json(config_json, "the precreate config on stdin");
  if (!parsed || !parsed->is_object()) {
    outcome.message = "precreate input is not a JSON object gpuckpt can read; passed through unchanged";
    return outcome;
  }
  auto& config = parsed.value();
  auto plan_id = named_plan_id(config);
  if (!plan_id) return make_error("restore refused: " + plan_id.error().message);
  if (plan_id->empty()) {
    outcome.message = std::string("no ") + kAnnotationRestorePlan + " annotation; unchanged";
    return outcome;
  }
  auto plan = read_restore_plan(options.state_dir, plan_id.value());
  if (!plan) return make_error("restore with plan " + plan_id.value() + " refused: " + plan.error().message);
  if (!plan.value()) {
    outcome.message = "restore plan " + plan_id.value() + " is not in " + options.state_dir.string() + "; unchanged";
    return outcome;
  }
  auto changed = apply_restore_plan(config, *plan.value(), lookup);
  if (!changed)
    return make_error("restore with plan " + plan_id.value() + " refused: " + changed.error().message);
  outcome.config = config.dump();
  outcome.modified = true;
  outcome.message = "restore plan " + plan_id.value() + " (checkpoint " + plan.value()->checkpoint_id +
                    ") applied: " + std::to_string(changed.value()) + " device node(s) moved, " +
                    std::to_string(plan.value()->env.size()) + " env var(s)";
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
