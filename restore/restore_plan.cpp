#include "restore/restore_plan.h"

#include <limits>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <cstring>
#include <ctime>
#include <sstream>

#include "base/json_reader.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

// "nvidia" for /dev/nvidia3, "renderD" for /dev/dri/renderD129, "card" for /dev/dri/card1.
std::string device_kind(std::string_view path) {
  std::string base(fs::path(path).filename().string());
  while (!base.empty() && std::isdigit(static_cast<unsigned char>(base.back()))) base.pop_back();
  return base;
}

const GpuDevice* find_gpu(const std::vector<GpuDevice>& gpus, std::string_view id) {
  for (const auto& g : gpus)
    if (g.id == id) return &g;
  return nullptr;
}

// Rewrites the tokens of a *_VISIBLE_DEVICES value that name a moved GPU (by uuid/id or by index).
std::string remap_visible_devices(const std::string& value, const std::vector<std::pair<const GpuDevice*,
                                  const GpuDevice*>>& moves) {
  if (value == "all" || value == "none" || value == "void" || value.empty()) return value;
  std::string out;
  std::stringstream in(value);
  std::string token;
  while (std::getline(in, token, ',')) {
    std::string mapped = token;
    for (const auto& [src, dst] : moves) {
      if (!src || !dst) continue;
      if ((!src->uuid.empty() && token == src->uuid) || token == src->id) {
        mapped = !dst->uuid.empty() ? dst->uuid : dst->id;
        break;
      }
      if (src->device_minor >= 0 && token == std::to_string(src->device_minor) && dst->device_minor >= 0) {
        mapped = std::to_string(dst->device_minor);
        break;
      }
    }
    out += (out.empty() ? "" : ",") + mapped;
  }
  return out;
}

}  // namespace

std::string restored_device_path(const std::string& container_path, const std::string& host_path) {
  return device_kind(container_path) == "nvidia" && device_kind(host_path) == "nvidia" ? host_path : container_path;
}

nlohmann::json to_json(const RestorePlan& plan) {
  nlohmann::json assignments = nlohmann::json::array();
  for (const auto& a : plan.assignments) assignments.push_back({{"source_id", a.source_id}, {"target_id", a.target_id}});
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : plan.devices) {
    devices.push_back({{"container_path", d.container_path}, {"host_path", d.host_path},
                       {"restored_path", d.path_after_restore()}, {"source_gpu_id", d.source_gpu_id},
                       {"target_gpu_id", d.target_gpu_id}});
    if (d.target_numbers) {
      devices.back()["target_major"] = d.target_numbers->first;
      devices.back()["target_minor"] = d.target_numbers->second;
    }
  }
  return {{"version", plan.version}, {"id", plan.id}, {"checkpoint_id", plan.checkpoint_id},
          {"container_id", plan.container_id}, {"expires_at", plan.expires_at}, {"assignments", assignments},
          {"devices", devices}, {"env", plan.env}, {"relaxations", plan.relaxations}};
}

Result<RestorePlan> restore_plan_from_json(const nlohmann::json& json, std::string_view source) {
  JsonFields fields(std::string(source) + " (restore plan)");
  RestorePlan plan;
  plan.version = fields.version(json, RestorePlan::kVersion, "restore plan");
  fields.get(json, "", "id", plan.id);
  fields.get(json, "", "checkpoint_id", plan.checkpoint_id, true);
  fields.get(json, "", "container_id", plan.container_id);
  fields.get_integer(json, "", "expires_at", plan.expires_at, 0, std::numeric_limits<std::int64_t>::max());
  if (const auto* assignments = fields.array(json, "", "assignments"))
    for (std::size_t i = 0; i < assignments->size() && !fields.failed(); ++i) {
      const std::string at = "assignments[" + std::to_string(i) + "]";
      GpuAssignment a;
      fields.get((*assignments)[i], at, "source_id", a.source_id, true);
      fields.get((*assignments)[i], at, "target_id", a.target_id, true);
      plan.assignments.push_back(std::move(a));
    }
  if (const auto* devices = fields.array(json, "", "devices"))
    for (std::size_t i = 0; i < devices->size() && !fields.failed(); ++i) {
      const std::string at = "devices[" + std::to_string(i) + "]";
      DeviceRewrite d;
      fields.get((*devices)[i], at, "container_path", d.container_path, true);
      fields.get((*devices)[i], at, "host_path", d.host_path, true);
      fields.get((*devices)[i], at, "restored_path", d.restored_path);
      fields.get((*devices)[i], at, "source_gpu_id", d.source_gpu_id);
      fields.get((*devices)[i], at, "target_gpu_id", d.target_gpu_id);
      const bool has_major = (*devices)[i].is_object() && (*devices)[i].contains("target_major");
      if (has_major != ((*devices)[i].is_object() && (*devices)[i].contains("target_minor")))
        fields.fail(at, "target_major and target_minor come together or not at all");
      if (has_major) {
        std::uint32_t major_number = 0, minor_number = 0;
        fields.get_integer((*devices)[i], at, "target_major", major_number, true);
        fields.get_integer((*devices)[i], at, "target_minor", minor_number, true);
        d.target_numbers = std::make_pair(major_number, minor_number);
      }
      if (!fields.failed() && (!is_gpu_device_path(d.container_path) || !is_gpu_device_path(d.host_path) ||
                               !is_gpu_device_path(d.path_after_restore())))
        fields.fail(at, "a path is not a canonical GPU device node (/dev/nvidia*, /dev/kfd, /dev/dri/renderD*, ...)");
      plan.devices.push_back(std::move(d));
    }
  fields.get(json, "", "env", plan.env);
  fields.get(json, "", "relaxations", plan.relaxations);
  if (fields.failed()) return fields.error();
  return plan;
}

Result<RestorePlan> make_restore_plan(const CheckpointGpuRecord& checkpoint, const NodeInventory& target,
                                      const MatchPlan& match) {
  RestorePlan plan;
  plan.checkpoint_id = checkpoint.checkpoint_id;
  plan.assignments = match.assignments;
  plan.relaxations = match.relaxations;
  std::vector<std::pair<const GpuDevice*, const GpuDevice*>> moves;
  for (const auto& a : match.assignments)
    moves.emplace_back(find_gpu(checkpoint.record.node.gpus, a.source_id), find_gpu(target.gpus, a.target_id));
  for (const auto& device : checkpoint.devices) {
    if (device.gpu_id.empty()) continue;   // shared nodes (/dev/kfd, /dev/nvidiactl) exist on every GPU node
    if (!is_gpu_device_path(device.container_path))
      return make_error("the checkpoint's record names a device '" + device.container_path.substr(0, 256) +
                        "' that is not a canonical GPU device node; refusing to place it");
    const GpuAssignment* assignment = nullptr;
    for (const auto& a : match.assignments)
      if (a.source_id == device.gpu_id) assignment = &a;
    if (!assignment)
      return make_error("the checkpoint's device " + device.container_path + " belongs to GPU " + device.gpu_id +
                        ", which the GPU match did not assign; the record and the match disagree");
    const GpuDevice* gpu = find_gpu(target.gpus, assignment->target_id);
    if (!gpu) return make_error("target GPU " + assignment->target_id + " is not in this node's inventory");
    const std::string kind = device_kind(device.container_path);
    std::string host_path;
    for (const auto& p : gpu->device_paths)
      if (device_kind(p) == kind) host_path = p;
    if (!is_gpu_device_path(host_path))
      return make_error("target GPU " + gpu->id + " has no canonical device node like " + device.container_path +
                        " (its nodes: " + std::to_string(gpu->device_paths.size()) + "); cannot place it");
    if (host_path.empty())
      return make_error("target GPU " + gpu->id + " has no device node like " + device.container_path +
                        " (its nodes: " + std::to_string(gpu->device_paths.size()) + "); cannot place it");
    plan.devices.push_back({device.container_path, host_path, device.gpu_id, gpu->id,
                            restored_device_path(device.container_path, host_path)});
  }
  for (const auto& [name, value] : checkpoint.gpu_env) {
    const std::string mapped = remap_visible_devices(value, moves);
    if (mapped != value) plan.env[name] = mapped;
  }
  return plan;
}

namespace {

// The object or array at `key` of `parent`, made where it is null. Sections of the wrong type are refused, not
// replaced: a spec like that did not come from a runtime.
Result<nlohmann::json*> spec_section(nlohmann::json& parent, const char* key, nlohmann::json empty, const char* where) {
  auto& value = parent[key];
  if (value.is_null()) value = empty;
  if (value.type() != empty.type())
    return make_error(std::string("the runtime spec's ") + where + " is " + json_type(value) + ", expected an " +
                      empty.type_name());
  return &value;
}

std::string spec_device_path(const nlohmann::json& device) {
  return device.contains("path") ? device["path"].get<std::string>() : std::string();
}

// Which of the spec's devices each rewrite moves, and which are left at a path that a node moves to (they would
// shadow it). Matched against the devices as they came, before any moves: a swap (nvidia0 -> nvidia1,
// nvidia1 -> nvidia0) must not move a node twice.
struct DeviceMoves {
  std::vector<std::vector<std::size_t>> sources;   // by rewrite: the devices it moves
  std::vector<bool> shadowing;                      // by device
};

DeviceMoves match_device_moves(const nlohmann::json& devices, const RestorePlan& plan) {
  const std::size_t count = devices.size();
  DeviceMoves moves;
  moves.sources.resize(plan.devices.size());
  moves.shadowing.assign(count, false);
  std::vector<bool> moved_away(count, false);
  for (std::size_t r = 0; r < plan.devices.size(); ++r)
    for (std::size_t i = 0; i < count; ++i)
      if (spec_device_path(devices[i]) == plan.devices[r].container_path) {
        moves.sources[r].push_back(i);
        moved_away[i] = true;
      }
  for (const auto& rewrite : plan.devices)
    for (std::size_t i = 0; i < count; ++i)
      if (!moved_away[i] && spec_device_path(devices[i]) == rewrite.path_after_restore()) moves.shadowing[i] = true;
  return moves;
}

// One rewrite: the devices it moves (`sources`, or a new entry where there are none) go to the path after restore
// with the host node's numbers, and linux.resources.devices allows that node. Returns the device entries changed.
Result<int> apply_device_rewrite(nlohmann::json& linux_section, nlohmann::json& devices, const DeviceRewrite& rewrite,
                                 const std::vector<std::size_t>& sources, const DeviceNumberLookup& lookup) {
  const std::string& restored_path = rewrite.path_after_restore();
  if (!is_gpu_device_path(rewrite.container_path) || !is_gpu_device_path(rewrite.host_path) ||
      !is_gpu_device_path(restored_path))
    return make_error("restore plan device " + rewrite.container_path.substr(0, 256) + " -> " +
                      rewrite.host_path.substr(0, 256) + " is not a canonical GPU device node");
  auto numbers = lookup(rewrite.host_path);
  // By hand, not GPUCKPT_TRY: EINVAL (a plan that does not fit this node), whatever errno the lookup had.
  if (!numbers) return make_error("restore plan device " + rewrite.container_path + " -> " + rewrite.host_path +
                                  ": " + numbers.error().message);
  const auto [maj, min] = numbers.value();
  int changed = 0;
  for (std::size_t i : sources) {
    auto& d = devices[i];
    const auto old_major = d.contains("major") ? json_integer(d["major"], 0, UINT32_MAX) : std::nullopt;
    const auto old_minor = d.contains("minor") ? json_integer(d["minor"], 0, UINT32_MAX) : std::nullopt;
    if (old_major != static_cast<std::int64_t>(maj) || old_minor != static_cast<std::int64_t>(min) ||
        spec_device_path(d) != restored_path)
      ++changed;
    d["path"] = restored_path;
    d["major"] = maj;
    d["minor"] = min;
    d["type"] = "c";
  }
  if (sources.empty()) {
    devices.push_back({{"path", restored_path}, {"type", "c"}, {"major", maj}, {"minor", min},
                       {"fileMode", 8630}, {"uid", 0}, {"gid", 0}});
    ++changed;
  }
  GPUCKPT_TRY(nlohmann::json* const resources,
              spec_section(linux_section, "resources", nlohmann::json::object(), "linux.resources"));
  GPUCKPT_TRY(nlohmann::json* const allow,
              spec_section(*resources, "devices", nlohmann::json::array(), "linux.resources.devices"));
  allow->push_back({{"allow", true}, {"type", "c"}, {"major", maj}, {"minor", min}, {"access", "rwm"}});
  return changed;
}

// process.env with each of `env` set, in place where the spec has the variable, else appended.
Result<void> set_spec_env(nlohmann::json& spec, const std::map<std::string, std::string>& env) {
  GPUCKPT_TRY(nlohmann::json* const process, spec_section(spec, "process", nlohmann::json::object(), "process"));
  GPUCKPT_TRY(nlohmann::json* const spec_env, spec_section(*process, "env", nlohmann::json::array(), "process.env"));
  for (const auto& [name, value] : env) {
    bool replaced = false;
    for (auto& entry : *spec_env) {
      if (entry.is_string() && entry.get<std::string>().rfind(name + "=", 0) == 0) {
        entry = name + "=" + value;
        replaced = true;
      }
    }
    if (!replaced) spec_env->push_back(name + "=" + value);
  }
  return {};
}

}  // namespace

Result<int> apply_restore_plan(nlohmann::json& spec, const RestorePlan& plan, const DeviceNumberLookup& lookup) {
  if (!spec.is_object()) return make_error("the runtime spec is not a JSON object");
  GPUCKPT_TRY(nlohmann::json* const linux_section, spec_section(spec, "linux", nlohmann::json::object(), "linux"));
  GPUCKPT_TRY(nlohmann::json* const devices,
              spec_section(*linux_section, "devices", nlohmann::json::array(), "linux.devices"));
  for (std::size_t i = 0; i < devices->size(); ++i) {
    const auto& d = (*devices)[i];
    if (!d.is_object() || (d.contains("path") && !d["path"].is_string()))
      return make_error("the runtime spec's linux.devices[" + std::to_string(i) + "] is not a device object");
  }
  const std::size_t original_count = devices->size();
  const DeviceMoves moves = match_device_moves(*devices, plan);
  int changed = 0;
  for (std::size_t r = 0; r < plan.devices.size(); ++r) {
    GPUCKPT_TRY(const int rewritten,
                apply_device_rewrite(*linux_section, *devices, plan.devices[r], moves.sources[r], lookup));
    changed += rewritten;
  }
  for (std::size_t i = original_count; i-- > 0;)
    if (moves.shadowing[i]) {
      devices->erase(devices->begin() + static_cast<std::ptrdiff_t>(i));
      ++changed;
    }
  if (!plan.env.empty()) GPUCKPT_TRY_VOID(set_spec_env(spec, plan.env));
  GPUCKPT_TRY(nlohmann::json* const annotations,
              spec_section(spec, "annotations", nlohmann::json::object(), "annotations"));
  (*annotations)[kAnnotationRestorePlan] = plan.id;
  // The plan is bound to its checkpoint: the config it rewrites says which (an archive may lack the annotation).
  if (!plan.checkpoint_id.empty()) (*annotations)[kAnnotationCheckpointId] = plan.checkpoint_id;
  return changed;
}

std::string new_restore_plan_id() {
  std::random_device random;
  char id[3 + 32 + 1];
  std::snprintf(id, sizeof id, "rp-%08x%08x%08x%08x", random(), random(), random(), random());
  return id;
}

bool is_restore_plan_id(std::string_view id) {
  if (id.size() != 35 || id.substr(0, 3) != "rp-") return false;
  return std::all_of(id.begin() + 3, id.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

fs::path restore_plan_path(const fs::path& state_dir, std::string_view plan_id) {
  return state_dir / "restore-plans" / (std::string(plan_id) + ".json");
}

Result<void> write_restore_plan(const fs::path& state_dir, const RestorePlan& plan) {
  if (!is_restore_plan_id(plan.id))
    return make_error("restore plan id '" + plan.id.substr(0, 64) + "' was not made by new_restore_plan_id");
  return write_file_atomically(restore_plan_path(state_dir, plan.id), to_json(plan).dump(2));
}

Result<std::optional<RestorePlan>> read_restore_plan(const fs::path& state_dir, std::string_view plan_id) {
  if (!is_restore_plan_id(plan_id))
    return make_error("restore plan id '" + std::string(plan_id.substr(0, 64)) +
                      "' is not one the agent makes (rp- and 32 hex digits)");
  const fs::path path = restore_plan_path(state_dir, plan_id);
  GPUCKPT_TRY(const auto json, read_json_file(path));
  if (!json) return std::optional<RestorePlan>{};
  GPUCKPT_TRY(auto plan, restore_plan_from_json(*json, path.string()));
  if (plan.id != plan_id) return make_error(path.string() + ": the plan inside has id '" + plan.id.substr(0, 64) + "'");
  return std::optional<RestorePlan>(std::move(plan));
}

bool plan_expired(const RestorePlan& plan, std::int64_t now) { return plan.expires_at == 0 || now >= plan.expires_at; }

std::int64_t plan_clock_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

Result<void> check_plan_binding(const RestorePlan& plan, const PlanUser& user, std::int64_t now) {
  const std::string what = "restore plan " + plan.id + " (checkpoint " + plan.checkpoint_id.substr(0, 128) + ")";
  if (plan.expires_at == 0)
    return make_error(what + " has no expiry (made by a gpuckpt before plans were bound): refused; restore again "
                      "through gpuckpt, which makes a fresh plan", ETIME);
  if (now >= plan.expires_at)
    return make_error(what + " expired " + std::to_string(now - plan.expires_at) + " s ago: refused; restore again "
                      "through gpuckpt, which makes a fresh plan", ETIME);
  if (!plan.container_id.empty()) {
    if (!user.container_id)
      return make_error(what + " is bound to container " + plan.container_id.substr(0, 128) +
                        ", which this stage cannot see (precreate gets no container id): refused", EACCES);
    if (*user.container_id != plan.container_id)
      return make_error(what + " is bound to container " + plan.container_id.substr(0, 128) + ", not to " +
                        user.container_id->substr(0, 128) + ": refused", EACCES);
    return {};
  }
  if (user.checkpoint_id != plan.checkpoint_id)
    return make_error(what + " is bound to its checkpoint, but the container's annotation " +
                      std::string(kAnnotationCheckpointId) + " is '" + user.checkpoint_id.substr(0, 128) +
                      "': refused", EACCES);
  return {};
}

Result<bool> remove_restore_plan(const fs::path& state_dir, std::string_view plan_id) {
  if (!is_restore_plan_id(plan_id))
    return make_error("restore plan id '" + std::string(plan_id.substr(0, 64)) + "' is not one the agent makes");
  const fs::path path = restore_plan_path(state_dir, plan_id);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return make_error("cannot remove restore plan " + path.string() + ": " + std::strerror(errno), errno);
  }
  sync_parent_directory(path);
  return true;
}

PlanSweep sweep_restore_plans(const fs::path& state_dir, std::int64_t now, std::size_t max_entries) {
  constexpr std::int64_t kTempFileAge = 3600;   // no writer holds a temporary file this long
  PlanSweep sweep;
  std::error_code ec;
  fs::directory_iterator it(state_dir / "restore-plans", ec);
  for (; !ec && it != fs::directory_iterator() && sweep.examined < max_entries; it.increment(ec)) {
    ++sweep.examined;
    const fs::path path = it->path();
    const std::string name = path.filename().string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    bool stale = false;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 &&
        is_restore_plan_id(std::string_view(name).substr(0, name.size() - 5))) {
      auto plan = read_restore_plan(state_dir, name.substr(0, name.size() - 5));
      stale = !plan || !plan.value() || plan_expired(*plan.value(), now);
    } else {
      stale = name.rfind(".rp-", 0) == 0 && now - static_cast<std::int64_t>(st.st_mtime) > kTempFileAge;
    }
    if (stale && ::unlink(path.c_str()) == 0) ++sweep.removed;
  }
  return sweep;
}

Result<RestorePlan> plan_for_allocation(const CheckpointGpuRecord& checkpoint, const NodeInventory& node,
                                        const std::optional<std::vector<std::string>>& allocated,
                                        const MatchPolicy& policy) {
  MatchRequest match;
  match.source = &checkpoint.record;
  match.target = &node;
  match.allowed_target_ids = allocated;
  match.policy = policy;
  auto outcome = match_gpus(match);
  if (auto* failure = std::get_if<MatchFailure>(&outcome)) {
    std::string why = failure->summary;
    for (const auto& r : failure->rejections)
      why += "; " + r.source_id + " -> " + r.candidate_id + ": " + r.property + " (" + r.detail + ")";
    return make_error(why, EDOM);
  }
  auto plan = make_restore_plan(checkpoint, node, std::get<MatchPlan>(outcome));
  if (!plan) return make_error(plan.error().message, EDOM);
  plan->id = new_restore_plan_id();
  return plan;
}

}  // namespace gpuckpt
