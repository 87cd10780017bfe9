#include "gpu/gpu_detect.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "base/json_reader.h"

namespace gpuckpt {

namespace {

constexpr const char* kGpuEnv[] = {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                   "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "AMD_VISIBLE_DEVICES"};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// A device node that belongs to one GPU (as opposed to /dev/kfd, /dev/nvidiactl, /dev/nvidia-uvm).
bool is_per_gpu_node(std::string_view path) {
  if (starts_with(path, "/dev/dri/renderD") || starts_with(path, "/dev/dri/card")) return true;
  if (!starts_with(path, "/dev/nvidia")) return false;
  const std::string_view rest = path.substr(std::string_view("/dev/nvidia").size());
  return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> split(const std::string& value, char sep) {
  std::vector<std::string> out;
  std::stringstream in(value);
  std::string token;
  while (std::getline(in, token, sep))
    if (!token.empty()) out.push_back(token);
  return out;
}

}  // namespace

GpuUse detect_gpu_use(const nlohmann::json& spec) {
  GpuUse use;
  if (!spec.is_object()) return use;
  std::set<std::string> seen;
  if (auto l = spec.find("linux"); l != spec.end() && l->is_object()) {
    if (auto d = l->find("devices"); d != l->end() && d->is_array()) {
      for (const auto& dev : *d) {
        if (!dev.is_object() || !dev.contains("path") || !dev["path"].is_string()) continue;
        const auto path = dev["path"].get<std::string>();
        if (!is_gpu_device_path(path) || !seen.insert(path).second) continue;
        ContainerGpuDevice g;
        g.container_path = path;
        if (dev.contains("major"))
          g.major = static_cast<std::uint32_t>(json_integer(dev["major"], 0, UINT32_MAX).value_or(0));
        if (dev.contains("minor"))
          g.minor = static_cast<std::uint32_t>(json_integer(dev["minor"], 0, UINT32_MAX).value_or(0));
        use.devices.push_back(g);
      }
    }
  }
  if (auto m = spec.find("mounts"); m != spec.end() && m->is_array()) {
    for (const auto& mount : *m) {
      if (!mount.is_object() || !mount.contains("destination") || !mount["destination"].is_string()) continue;
      const auto dest = mount["destination"].get<std::string>();
      if (!is_gpu_device_path(dest) || !seen.insert(dest).second) continue;
      ContainerGpuDevice g;
      g.container_path = dest;
      use.devices.push_back(g);
    }
  }
  if (auto p = spec.find("process"); p != spec.end() && p->is_object()) {
    if (auto env = p->find("env"); env != p->end() && env->is_array()) {
      for (const auto& e : *env) {
        if (!e.is_string()) continue;
        const auto text = e.get<std::string>();
        const auto eq = text.find('=');
        if (eq == std::string::npos) continue;
        const auto name = text.substr(0, eq);
        const auto value = text.substr(eq + 1);
        for (const char* known : kGpuEnv)
          if (name == known && !value.empty() && value != "void" && value != "none") use.gpu_env[name] = value;
      }
    }
  }
  if (auto a = spec.find("annotations"); a != spec.end() && a->is_object()) {
    for (const auto& [key, value] : a->items()) {
      if (!starts_with(key, "cdi.k8s.io/") || !value.is_string()) continue;
      for (const auto& device : split(value.get<std::string>(), ','))
        if (device.find("/gpu=") != std::string::npos) use.cdi_devices.push_back(device);
    }
  }
  return use;
}

std::vector<std::string> resolve_gpus(GpuUse& use, const NodeInventory& inventory, const DeviceNumberLookup& lookup) {
  std::set<std::string> used;
  auto by_token = [&](const std::string& token, GpuVendor vendor) {
    for (const auto& gpu : inventory.gpus) {
      if (gpu.vendor != vendor) continue;
      if (token == "all" || token == gpu.uuid || token == gpu.id ||
          (gpu.device_minor >= 0 && token == std::to_string(gpu.device_minor)))
        used.insert(gpu.id);
    }
  };
  // Device numbers say which GPU really backs a node; the container path decides only when no GPU node has
  // those numbers (test containers alias /dev/null as /dev/nvidia0).
  for (auto& device : use.devices) {
    if (!is_per_gpu_node(device.container_path)) continue;
    const GpuDevice* by_numbers = nullptr;
    const GpuDevice* by_path = nullptr;
    for (const auto& gpu : inventory.gpus) {
      for (const auto& node : gpu.device_paths) {
        if (!is_per_gpu_node(node)) continue;
        if (!by_path && node == device.container_path) by_path = &gpu;
        if (!by_numbers && (device.major != 0 || device.minor != 0)) {
          auto numbers = lookup(node);
          if (numbers && numbers->first == device.major && numbers->second == device.minor) by_numbers = &gpu;
        }
      }
    }
    if (const GpuDevice* gpu = by_numbers ? by_numbers : by_path) {
      device.gpu_id = gpu->id;
      used.insert(gpu->id);
    }
  }
  if (auto it = use.gpu_env.find("NVIDIA_VISIBLE_DEVICES"); it != use.gpu_env.end())
    for (const auto& token : split(it->second, ',')) by_token(token, GpuVendor::Nvidia);
  for (const auto& cdi : use.cdi_devices) {
    const auto eq = cdi.find('=');
    const auto vendor = cdi.substr(0, cdi.find('/'));
    by_token(cdi.substr(eq + 1), vendor == "amd.com" ? GpuVendor::Amd : GpuVendor::Nvidia);
  }
  std::vector<std::string> ordered;
  for (const auto& gpu : inventory.gpus)
    if (used.count(gpu.id)) ordered.push_back(gpu.id);
  return ordered;
}

}  // namespace gpuckpt
