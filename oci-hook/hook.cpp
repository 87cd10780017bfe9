#include "oci-hook/hook.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "state/checkpoint_record.h"
#include "criu/criu_images_dir.h"
#include "base/host_root.h"
#include "base/json_reader.h"
#include "state/container_store.h"

namespace gpuckpt::hook {

namespace fs = std::filesystem;

namespace {

Result<nlohmann::json> parse_state(std::string_view text) {
  GPUCKPT_TRY(auto state, parse_json(text, "the OCI state on stdin"));
  if (!state.is_object())
    return make_error("the OCI state on stdin is not a JSON object (is the hook installed for the right stage?)");
  auto id = state.find("id");
  if (id == state.end() || !id->is_string() || !is_safe_id(id->get<std::string>()))
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

namespace {

struct CreatedContainer {
  std::string id;
  std::string bundle;
  int pid = 0;
  nlohmann::json config;
};

Result<CreatedContainer> read_created_container(std::string_view state_json) {
  GPUCKPT_TRY(auto state, parse_state(state_json));
  CreatedContainer c;
  c.id = state["id"].get<std::string>();
  JsonFields fields("the OCI state of container " + c.id);
  std::int64_t pid = 0;
  fields.get(state, "", "bundle", c.bundle);
  fields.get_integer(state, "", "pid", pid, 0, std::numeric_limits<int>::max());
  if (fields.failed()) return fields.error();
  c.pid = static_cast<int>(pid);
  if (c.bundle.empty() || c.bundle.front() != '/')
    return make_error("container " + c.id + ": OCI state has no absolute bundle");
  GPUCKPT_TRY(auto config, read_json_file(fs::path(c.bundle) / "config.json"));
  if (!config || !config->is_object()) return make_error(c.bundle + "/config.json is not a JSON object");
  c.config = std::move(*config);
  return c;
}

std::string checkpoint_annotation(const nlohmann::json& config) {
  auto annotations = config.find("annotations");
  if (annotations == config.end() || !annotations->is_object()) return {};
  auto id = annotations->find(kAnnotationCheckpointId);
  return id != annotations->end() && id->is_string() ? id->get<std::string>() : std::string();
}

// The plan `plan_id` if `user` may use it now. A plan nobody may use any more (expired, malformed) is removed.
// std::nullopt: no such plan (used already, swept, or never made).
Result<std::optional<RestorePlan>> usable_plan(const HookOptions& options, const std::string& plan_id,
                                               const PlanUser& user) {
  auto plan = read_restore_plan(options.state_dir, plan_id);
  if (!plan) {
    (void)remove_restore_plan(options.state_dir, plan_id);
    return plan.error();
  }
  if (!plan.value()) return plan;
  if (auto bound = check_plan_binding(*plan.value(), user, plan_clock_now()); !bound) {
    if (bound.error().errno_value == ETIME) (void)remove_restore_plan(options.state_dir, plan_id);
    return bound.error();
  }
  return plan;
}

constexpr std::size_t kSweepPerCall = 16;   // the hook sweeps a few stale plans per plan it handles

// A restore's part of createRuntime: the plan the config names goes into CRIU's images directory, where the
// plugin reads the GPU mapping, and leaves the state directory (single use). The plan comes only from the state
// directory; a plan file that came inside the archive is removed. Not a restore: nothing to do.
Result<std::string> place_restore_plan(const CreatedContainer& c, const HookOptions& options) {
  auto plan_id = named_plan_id(c.config);
  auto images = find_criu_images_dir(HostRoot(options.process_root), options.runtime_pid, c.bundle);
  if (!images) {
    if (!plan_id || !plan_id->empty())
      return make_error("restore of container " + c.id + " refused: it names a restore plan, but " +
                        images.error().message);
    return "container " + c.id + ": " + images.error().message + "; no restore plan involved";
  }
  if (!images.value()) return std::string();
  const fs::path placed = images.value()->path / kPlanFileInImages;
  if (!plan_id) return make_error("restore of container " + c.id + " refused: " + plan_id.error().message);
  std::error_code ec;
  if (plan_id->empty())
    return fs::remove(placed, ec) ? "container " + c.id + ": removed a restore plan that came with the archive "
                                    "(only gpuckpt's agent and gpuckpt-nri make plans)"
                                  : std::string();
  const std::string what = "restore of container " + c.id + " with plan " + plan_id.value();
  auto plan = usable_plan(options, plan_id.value(), PlanUser{c.id, checkpoint_annotation(c.config)});
  if (!plan) return make_error(what + " refused: " + plan.error().message, plan.error().errno_value);
  if (!plan.value())
    return make_error(what + " refused: the plan is not in " + options.state_dir.string() + "/restore-plans: it "
                      "was used already (plans are single use) or expired; restore again through gpuckpt", ENOENT);
  auto claimed = remove_restore_plan(options.state_dir, plan_id.value());
  if (!claimed) return make_error(what + " refused: " + claimed.error().message, claimed.error().errno_value);
  if (!claimed.value())
    return make_error(what + " refused: another container used the plan at the same moment", EBUSY);
  if (auto copied = write_file_atomically(placed, to_json(*plan.value()).dump(2)); !copied)
    return make_error(what + " refused: " + copied.error().message, copied.error().errno_value);
  const auto swept = sweep_restore_plans(options.state_dir, plan_clock_now(), kSweepPerCall);
  return "container " + c.id + ": restore plan " + plan_id.value() + " placed in " + placed.string() + " (" +
         images.value()->found_by + ") and removed from the state directory" +
         (swept.removed ? "; swept " + std::to_string(swept.removed) + " stale plan(s)" : "");
}

}  // namespace

CreateRuntimeOutcome create_runtime(std::string_view state_json, const HookOptions& options,
                                    const InventoryReader& inventory, const DeviceNumberLookup& lookup) {
  auto c = read_created_container(state_json);
  if (!c) return {c.error(), std::string()};
  auto recorded = record_gpu_container(c->id, c->bundle, c->pid, c->config, options.state_dir, inventory, lookup);
  return {std::move(recorded), place_restore_plan(c.value(), options)};
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
  // Not consumed here: podman runs createRuntime next, which places the plan for CRIU and removes it.
  auto plan = usable_plan(options, plan_id.value(), PlanUser{std::nullopt, checkpoint_annotation(config)});
  if (!plan)
    return make_error("restore with plan " + plan_id.value() + " refused: " + plan.error().message,
                      plan.error().errno_value);
  if (!plan.value()) {
    // A used plan grants nothing again. The config of a restored container that is started again names it.
    outcome.message = "restore plan " + plan_id.value() + " is not in " + options.state_dir.string() +
                      " (used already or expired): nothing applied, unchanged";
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
  GPUCKPT_TRY(auto state, parse_state(state_json));
  const std::string id = state["id"].get<std::string>();
  GPUCKPT_TRY_VOID(remove_container_state(options.state_dir, id));
  return "container " + id + ": record removed";
}

}  // namespace gpuckpt::hook
