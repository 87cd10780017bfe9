#include "common/restore_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/host_root.h"

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

bool is_safe_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || !std::isalnum(static_cast<unsigned char>(id.front()))) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

nlohmann::json to_json(const RestorePlan& plan) {
  nlohmann::json assignments = nlohmann::json::array();
  for (const auto& a : plan.assignments) assignments.push_back({{"source_id", a.source_id}, {"target_id", a.target_id}});
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : plan.devices)
    devices.push_back({{"container_path", d.container_path}, {"host_path", d.host_path},
                       {"source_gpu_id", d.source_gpu_id}, {"target_gpu_id", d.target_gpu_id}});
  return {{"version", plan.version}, {"checkpoint_id", plan.checkpoint_id}, {"assignments", assignments},
          {"devices", devices}, {"env", plan.env}, {"relaxations", plan.relaxations}};
}

Result<RestorePlan> restore_plan_from_json(const nlohmann::json& json, std::string_view source) {
  try {
    RestorePlan plan;
    plan.version = json.at("version").get<int>();
    if (plan.version > RestorePlan::kVersion)
      return make_error(std::string(source) + ": restore plan version " + std::to_string(plan.version) +
                        " is newer than this gpuckpt understands; upgrade the OCI hook and agent together");
    plan.checkpoint_id = json.at("checkpoint_id").get<std::string>();
    for (const auto& a : json.value("assignments", nlohmann::json::array()))
      plan.assignments.push_back({a.at("source_id").get<std::string>(), a.at("target_id").get<std::string>()});
    for (const auto& d : json.value("devices", nlohmann::json::array()))
      plan.devices.push_back({d.at("container_path").get<std::string>(), d.at("host_path").get<std::string>(),
                              d.value("source_gpu_id", ""), d.value("target_gpu_id", "")});
    plan.env = json.value("env", std::map<std::string, std::string>{});
    plan.relaxations = json.value("relaxations", std::vector<std::string>{});
    return plan;
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string(source) + ": malformed restore plan: " + e.what());
  }
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
    if (host_path.empty())
      return make_error("target GPU " + gpu->id + " has no device node like " + device.container_path +
                        " (its nodes: " + std::to_string(gpu->device_paths.size()) + "); cannot place it");
    plan.devices.push_back({device.container_path, host_path, device.gpu_id, gpu->id});
  }
  for (const auto& [name, value] : checkpoint.gpu_env) {
    const std::string mapped = remap_visible_devices(value, moves);
    if (mapped != value) plan.env[name] = mapped;
  }
  return plan;
}

DeviceNumberLookup stat_device_numbers(fs::path host_root) {
  return [root = HostRoot(std::move(host_root))](const std::string& host_path)
             -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    const fs::path real = root.resolve(host_path);
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0)
      return make_error("cannot stat device node " + real.string() + ": " + std::strerror(errno), errno);
    if (!S_ISCHR(st.st_mode)) return make_error(real.string() + " is not a character device");
    return std::make_pair(static_cast<std::uint32_t>(major(st.st_rdev)), static_cast<std::uint32_t>(minor(st.st_rdev)));
  };
}

Result<int> apply_restore_plan(nlohmann::json& spec, const RestorePlan& plan, const DeviceNumberLookup& lookup,
                               const std::string& plan_path) {
  if (!spec.is_object()) return make_error("the runtime spec is not a JSON object");
  int changed = 0;
  auto& linux_section = spec["linux"];
  if (!linux_section.is_object()) linux_section = nlohmann::json::object();
  auto& devices = linux_section["devices"];
  if (!devices.is_array()) devices = nlohmann::json::array();
  for (const auto& rewrite : plan.devices) {
    auto numbers = lookup(rewrite.host_path);
    if (!numbers) return make_error("restore plan device " + rewrite.container_path + " -> " + rewrite.host_path +
                                    ": " + numbers.error().message);
    const auto [maj, min] = numbers.value();
    bool found = false;
    for (auto& d : devices) {
      if (d.value("path", "") != rewrite.container_path) continue;
      found = true;
      if (d.value("major", -1) != static_cast<long>(maj) || d.value("minor", -1) != static_cast<long>(min)) ++changed;
      d["major"] = maj;
      d["minor"] = min;
      d["type"] = "c";
    }
    if (!found) {
      devices.push_back({{"path", rewrite.container_path}, {"type", "c"}, {"major", maj}, {"minor", min},
                         {"fileMode", 8630}, {"uid", 0}, {"gid", 0}});
      ++changed;
    }
    auto& resources = linux_section["resources"];
    if (!resources.is_object()) resources = nlohmann::json::object();
    auto& allow = resources["devices"];
    if (!allow.is_array()) allow = nlohmann::json::array();
    allow.push_back({{"allow", true}, {"type", "c"}, {"major", maj}, {"minor", min}, {"access", "rwm"}});
  }
  if (!plan.env.empty()) {
    auto& process = spec["process"];
    if (!process.is_object()) process = nlohmann::json::object();
    auto& env = process["env"];
    if (!env.is_array()) env = nlohmann::json::array();
    for (const auto& [name, value] : plan.env) {
      bool replaced = false;
      for (auto& entry : env) {
        const std::string text = entry.is_string() ? entry.get<std::string>() : "";
        if (text.rfind(name + "=", 0) == 0) {
          entry = name + "=" + value;
          replaced = true;
        }
      }
      if (!replaced) env.push_back(name + "=" + value);
    }
  }
  auto& annotations = spec["annotations"];
  if (!annotations.is_object()) annotations = nlohmann::json::object();
  annotations[kAnnotationRestorePlan] = plan_path;
  return changed;
}

fs::path restore_plan_path(const fs::path& state_dir, std::string_view checkpoint_id) {
  return state_dir / "restore-plans" / (std::string(checkpoint_id) + ".json");
}

Result<void> write_file_atomically(const fs::path& path, std::string_view data) {
  static std::atomic<unsigned> counter{0};
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return make_error("cannot create " + path.parent_path().string() + ": " + ec.message(), EIO);
  const fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                                               "-" + std::to_string(counter++));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error("cannot write " + temp.string() + ": " + std::strerror(errno), errno);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fs::remove(temp, ec);
      return make_error("cannot write " + temp.string() + ": " + std::strerror(err), err);
    }
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    return make_error("cannot rename " + temp.string() + " to " + path.string(), EIO);
  }
  return {};
}

Result<std::optional<nlohmann::json>> read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::optional<nlohmann::json>{};
  std::stringstream text;
  text << in.rdbuf();
  auto json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded()) return make_error(path.string() + " is not valid JSON");
  return std::optional<nlohmann::json>(std::move(json));
}

Result<void> write_restore_plan(const fs::path& state_dir, const RestorePlan& plan) {
  if (!is_safe_id(plan.checkpoint_id))
    return make_error("checkpoint id '" + plan.checkpoint_id + "' is not a safe file name");
  return write_file_atomically(restore_plan_path(state_dir, plan.checkpoint_id), to_json(plan).dump(2));
}

Result<std::optional<RestorePlan>> read_restore_plan(const fs::path& state_dir, std::string_view checkpoint_id) {
  if (!is_safe_id(checkpoint_id))
    return make_error("checkpoint id '" + std::string(checkpoint_id) + "' is not a safe file name");
  const fs::path path = restore_plan_path(state_dir, checkpoint_id);
  auto json = read_json_file(path);
  if (!json) return json.error();
  if (!json.value()) return std::optional<RestorePlan>{};
  auto plan = restore_plan_from_json(*json.value(), path.string());
  if (!plan) return plan.error();
  return std::optional<RestorePlan>(std::move(plan.value()));
}

}  // namespace gpuckpt
