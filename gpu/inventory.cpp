#include "gpu/inventory.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "base/log.h"
#include "gpu/nvml.h"

namespace gpuckpt {

namespace {

constexpr const char* kKfdNodes = "sys/class/kfd/kfd/topology/nodes";
constexpr std::uint32_t kAmdVendor = 0x1002;
constexpr std::uint32_t kNvidiaVendor = 0x10de;
constexpr std::uint32_t kDrmMajor = 226;
// KFD CRAT io_link types (the values CRIU's amdgpu plugin compares); anything else keeps its number.
constexpr std::uint64_t kIoLinkPcie = 2;
constexpr std::uint64_t kIoLinkXgmi = 11;
// KFD mem_banks heap types that are VRAM
constexpr std::uint64_t kHeapFrameBufferPublic = 1;
constexpr std::uint64_t kHeapFrameBufferPrivate = 2;

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool is_number(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// A decimal 32-bit number, or nullopt (never throws: sysfs text is input, not trusted).
std::optional<std::uint32_t> to_u32(std::string_view s) {
  if (!is_number(s) || s.size() > 10) return std::nullopt;
  const unsigned long long v = std::stoull(std::string(s));
  if (v > 0xffffffffull) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

std::vector<std::string> numeric_entries(const HostRoot& host, const std::string& dir) {
  std::vector<std::string> names;
  auto listed = host.list_dir(dir);
  if (!listed) return names;
  for (auto& name : *listed)
    if (to_u32(name)) names.push_back(name);
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return *to_u32(a) < *to_u32(b); });
  return names;
}

// A KFD "name value" properties file. Every line must parse: a half-written or truncated file is an error, not a
// GPU with made-up zeros.
Result<std::map<std::string, std::uint64_t>> read_kfd_properties(const HostRoot& host, const std::string& path) {
  GPUCKPT_TRY(const std::string text, host.read_file(path));
  std::map<std::string, std::uint64_t> props;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (trim(line).empty()) continue;
    std::istringstream fields(line);
    std::string name, value, extra;
    fields >> name >> value;
    if (name.empty() || !is_number(value) || (fields >> extra) || value.size() > 20)
      return make_error(host.resolve(path).string() + ": line " + std::to_string(number) +
                        ": expected 'name <unsigned number>', read '" + trim(line) + "'");
    try {
      props[name] = std::stoull(value);
    } catch (const std::exception&) {
      return make_error(host.resolve(path).string() + ": line " + std::to_string(number) + ": value out of range");
    }
  }
  return props;
}

// cgroup v1 device controller as the container sees it; nullopt when that cannot be known (cgroup v2, or no
// device controller mounted), in which case only the kernel's own refusal (EPERM on the node's files) hides a GPU.
struct DeviceRule {
  char type;  // 'a', 'c', 'b'
  long major, minor;  // -1 = '*'
};
std::optional<std::vector<DeviceRule>> cgroup_v1_device_rules(const HostRoot& host) {
  auto text = host.read_file("sys/fs/cgroup/devices/devices.list");
  if (!text) return std::nullopt;
  std::vector<DeviceRule> rules;
  std::istringstream in(*text);
  std::string type, numbers, access;
  while (in >> type >> numbers >> access) {
    DeviceRule rule{type.empty() ? '?' : type[0], -1, -1};
    const auto colon = numbers.find(':');
    if (colon != std::string::npos) {
      const std::string major = numbers.substr(0, colon), minor = numbers.substr(colon + 1);
      rule.major = major == "*" ? -1 : std::strtol(major.c_str(), nullptr, 10);
      rule.minor = minor == "*" ? -1 : std::strtol(minor.c_str(), nullptr, 10);
    }
    rules.push_back(rule);
  }
  return rules;
}

bool cgroup_allows(const std::vector<DeviceRule>& rules, std::uint32_t major, std::uint32_t minor) {
  for (const auto& r : rules) {
    if (r.type == 'a') return true;
    if (r.type == 'c' && (r.major < 0 || r.major == static_cast<long>(major)) &&
        (r.minor < 0 || r.minor == static_cast<long>(minor)))
      return true;
  }
  return false;
}

std::string pci_address(std::uint64_t domain, std::uint64_t location_id) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", static_cast<unsigned>(domain & 0xffff),
                static_cast<unsigned>((location_id >> 8) & 0xff), static_cast<unsigned>((location_id >> 3) & 0x1f),
                static_cast<unsigned>(location_id & 0x7));
  return text;
}

int pci_numa_node(const HostRoot& host, const std::string& pci) {
  auto line = host.read_line("sys/bus/pci/devices/" + pci + "/numa_node");
  if (!line) return -1;
  try {
    const int node = std::stoi(*line);
    return node >= 0 ? node : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

const char* amd_marketing_name(std::uint32_t device_id) {
  switch (device_id) {
    case 0x738c: return "AMD Instinct MI100";
    case 0x740f: return "AMD Instinct MI210";
    case 0x740c: return "AMD Instinct MI250X/MI250";
    case 0x74a1: return "AMD Instinct MI300X";
  }
  return nullptr;
}

struct KfdLinkRaw {
  std::uint32_t from = 0, to = 0;
  std::map<std::string, std::uint64_t> props;
};

// What reading the KFD topology gathers beyond the GPUs themselves: the nodes' links are resolved once every
// visible node is known.
struct KfdScan {
  std::optional<std::vector<DeviceRule>> rules;   // the device cgroup's, when it can be known
  std::string amdgpu_version;
  std::set<std::uint32_t> cpu_nodes;
  std::map<std::uint32_t, std::size_t> gpu_at_node;  // KFD node index -> index in inv.gpus
  std::vector<KfdLinkRaw> links;
  std::size_t hidden_nodes = 0;   // nodes this container may not see (cgroup), which may be GPUs DRM still lists
};

// The topology's system properties and generation into inv.system; returns the amdgpu module's version ("" when
// unknown).
std::string read_kfd_system(const HostRoot& host, NodeInventory& inv) {
  if (auto sys = read_kfd_properties(host, "sys/class/kfd/kfd/topology/system_properties"); sys) {
    for (const auto& [k, v] : *sys) inv.system["kfd_" + k] = std::to_string(v);
  }
  if (auto gen = host.read_line("sys/class/kfd/kfd/topology/generation_id"); gen) inv.system["kfd_generation_id"] = *gen;
  if (auto v = host.read_line("sys/module/amdgpu/version"); v) return *v;
  return "";
}

// The io_links of one node, CPU nodes too: their links back to GPUs make GPU->CPU links bidirectional.
Result<void> read_kfd_io_links(const HostRoot& host, const std::string& dir, std::uint32_t node_index,
                               std::vector<KfdLinkRaw>& links) {
  for (const auto& link : numeric_entries(host, dir + "/io_links")) {
    const std::string file = dir + "/io_links/" + link + "/properties";
    GPUCKPT_TRY(auto lp, read_kfd_properties(host, file));
    if (!lp.count("type") || !lp.count("node_to"))
      return make_error(host.resolve(file).string() + ": missing 'type' or 'node_to' (truncated file?)");
    links.push_back({node_index, static_cast<std::uint32_t>(lp.at("node_to")), std::move(lp)});
  }
  return {};
}

// VRAM: the first frame-buffer heap, public or private (what CRIU records as vram_size/vram_public)
Result<void> read_kfd_vram(const HostRoot& host, const std::string& dir, GpuDevice& gpu) {
  for (const auto& bank : numeric_entries(host, dir + "/mem_banks")) {
    GPUCKPT_TRY(const auto bp, read_kfd_properties(host, dir + "/mem_banks/" + bank + "/properties"));
    const auto heap = bp.count("heap_type") ? bp.at("heap_type") : 0;
    if (heap == kHeapFrameBufferPublic || heap == kHeapFrameBufferPrivate) {
      gpu.memory_bytes = bp.count("size_in_bytes") ? bp.at("size_in_bytes") : 0;
      gpu.properties["vram_size"] = gpu.memory_bytes;
      gpu.properties["vram_public"] = heap == kHeapFrameBufferPublic ? 1 : 0;
      break;
    }
  }
  return {};
}

// The GPU a KFD GPU node describes; `props` holds every key the caller required of a GPU node.
Result<GpuDevice> amd_gpu_of_kfd_node(const HostRoot& host, const std::string& dir, std::uint32_t node_index,
                                      std::uint32_t gpu_id, const std::map<std::string, std::uint64_t>& props,
                                      const std::string& amdgpu_version) {
  GpuDevice gpu;
  gpu.vendor = GpuVendor::Amd;
  gpu.gpu_id = gpu_id;
  gpu.kfd_node = node_index;
  gpu.id = "kfd-" + std::to_string(gpu_id);
  gpu.vendor_id = static_cast<std::uint32_t>(props.at("vendor_id"));
  gpu.device_id = static_cast<std::uint32_t>(props.at("device_id"));
  const auto render_minor = props.at("drm_render_minor");
  gpu.render_minor = static_cast<int>(render_minor);
  gpu.hive_id = props.count("hive_id") ? props.at("hive_id") : 0;
  gpu.pci_address = pci_address(props.count("domain") ? props.at("domain") : 0, props.at("location_id"));
  const std::string gfx = props.count("gfx_target_version") ? gfx_name(props.at("gfx_target_version")) : "";
  gpu.compute_capability = gfx;
  std::string kfd_name;
  if (auto n = host.read_line(dir + "/name"); n) kfd_name = trim(*n);
  if (const char* marketing = amd_marketing_name(gpu.device_id)) gpu.name = marketing;
  else if (!gfx.empty()) gpu.name = gfx;
  else gpu.name = kfd_name;
  if (props.count("unique_id") && props.at("unique_id") != 0) {
    char text[32];
    std::snprintf(text, sizeof text, "GPU-%016llx", static_cast<unsigned long long>(props.at("unique_id")));
    gpu.uuid = text;
  }
  if (props.count("fw_version")) gpu.firmware_version = std::to_string(props.at("fw_version"));
  gpu.driver_version = amdgpu_version;
  gpu.properties = props;
  GPUCKPT_TRY_VOID(read_kfd_vram(host, dir, gpu));
  if (!gpu.properties.count("caches_count")) {
    gpu.properties["caches_count"] = numeric_entries(host, dir + "/caches").size();
  }
  gpu.numa_node = pci_numa_node(host, gpu.pci_address);
  gpu.device_paths = {"/dev/kfd", "/dev/dri/renderD" + std::to_string(render_minor)};
  return gpu;
}

// One KFD topology node: a CPU node is noted, a GPU node this container may use joins inv.gpus, one it may not
// counts as hidden; every node's links are kept for later.
Result<void> read_kfd_node(const HostRoot& host, const std::string& name, KfdScan& scan, NodeInventory& inv) {
  const std::string dir = std::string(kKfdNodes) + "/" + name;
  const std::uint32_t node_index = *to_u32(name);
  auto gpu_id_text = host.read_line(dir + "/gpu_id");
  if (!gpu_id_text) {
    // The kernel answers EPERM for nodes the device cgroup hides; the directory stays visible.
    log::debug("KFD node " + name + " skipped: " + gpu_id_text.error().message);
    ++scan.hidden_nodes;
    return {};
  }
  const auto parsed_gpu_id = to_u32(*gpu_id_text);
  if (!parsed_gpu_id)
    return make_error(host.resolve(dir + "/gpu_id").string() + ": expected a 32-bit number, read '" + *gpu_id_text + "'");
  const std::uint32_t gpu_id = *parsed_gpu_id;
  GPUCKPT_TRY(const auto props, read_kfd_properties(host, dir + "/properties"));
  GPUCKPT_TRY_VOID(read_kfd_io_links(host, dir, node_index, scan.links));

  if (gpu_id == 0) {
    scan.cpu_nodes.insert(node_index);
    return {};
  }
  for (const char* required : {"simd_count", "vendor_id", "device_id", "location_id", "drm_render_minor"})
    if (!props.count(required))
      return make_error(host.resolve(dir + "/properties").string() + ": GPU node lacks '" + required +
                        "' (truncated file?)");
  const auto render_minor = props.at("drm_render_minor");
  if (scan.rules && !cgroup_allows(*scan.rules, kDrmMajor, static_cast<std::uint32_t>(render_minor))) {
    log::info("KFD node " + name + " (gpu_id " + std::to_string(gpu_id) + ") left out: the device cgroup denies renderD" +
              std::to_string(render_minor));
    ++scan.hidden_nodes;
    return {};
  }
  GPUCKPT_TRY(auto gpu, amd_gpu_of_kfd_node(host, dir, node_index, gpu_id, props, scan.amdgpu_version));
  scan.gpu_at_node[node_index] = inv.gpus.size();
  inv.gpus.push_back(std::move(gpu));
  return {};
}

// The links of the GPUs read, now that every visible node is known. A link to a node we cannot see (hidden by the
// cgroup) is left out, as CRIU does; bidirectional = the peer lists a link of the same type back.
void attach_kfd_links(const KfdScan& scan, NodeInventory& inv) {
  const auto& links = scan.links;
  auto has_back = [&](std::uint32_t from, std::uint32_t to, std::uint64_t type) {
    return std::any_of(links.begin(), links.end(), [&](const KfdLinkRaw& l) {
      return l.from == to && l.to == from && l.props.at("type") == type;
    });
  };
  for (const auto& raw : links) {
    auto self = scan.gpu_at_node.find(raw.from);
    if (self == scan.gpu_at_node.end()) continue;
    GpuDevice& gpu = inv.gpus[self->second];
    auto peer_gpu = scan.gpu_at_node.find(raw.to);
    const bool peer_is_cpu = scan.cpu_nodes.count(raw.to) > 0;
    if (peer_gpu == scan.gpu_at_node.end() && !peer_is_cpu) continue;
    const std::uint64_t type = raw.props.at("type");
    GpuLink link;
    link.type = type == kIoLinkXgmi ? "xgmi" : type == kIoLinkPcie ? "pcie" : "type-" + std::to_string(type);
    link.peer_node = raw.to;
    if (peer_gpu != scan.gpu_at_node.end()) link.peer_id = inv.gpus[peer_gpu->second].id;
    auto get = [&](const char* key) {
      auto it = raw.props.find(key);
      return it == raw.props.end() ? 0u : static_cast<std::uint32_t>(it->second);
    };
    link.weight = get("weight");
    link.min_bandwidth = get("min_bandwidth");
    link.max_bandwidth = get("max_bandwidth");
    link.bidirectional = has_back(raw.from, raw.to, type);
    gpu.links.push_back(std::move(link));
    if (peer_is_cpu && gpu.numa_node < 0) gpu.numa_node = static_cast<int>(raw.to);  // KFD CPU nodes follow NUMA
  }
}

// hidden_nodes: KFD nodes this container may not see (cgroup), which may be GPUs DRM still lists.
Result<void> read_kfd(const HostRoot& host, NodeInventory& inv, std::size_t& hidden_nodes) {
  if (!host.exists(kKfdNodes)) return {};
  KfdScan scan;
  scan.rules = cgroup_v1_device_rules(host);
  scan.amdgpu_version = read_kfd_system(host, inv);
  const std::size_t first_gpu = inv.gpus.size();
  for (const auto& name : numeric_entries(host, kKfdNodes)) {
    GPUCKPT_TRY_VOID(read_kfd_node(host, name, scan, inv));
  }
  hidden_nodes += scan.hidden_nodes;
  attach_kfd_links(scan, inv);
  log::debug("KFD: " + std::to_string(inv.gpus.size() - first_gpu) + " GPU node(s), " +
             std::to_string(scan.cpu_nodes.size()) + " CPU node(s)");
  return {};
}

// "Key:   value" lines of /proc/driver/nvidia/gpus/<bus>/information
std::map<std::string, std::string> colon_fields(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    fields[trim(line.substr(0, colon))] = trim(line.substr(colon + 1));
  }
  return fields;
}

// PCIe link speed as sysfs prints it ("32.0 GT/s PCIe") -> MT/s
std::uint64_t link_speed_mts(const std::string& text) {
  try {
    return static_cast<std::uint64_t>(std::stod(text) * 1000.0 + 0.5);
  } catch (const std::exception&) {
    return 0;
  }
}

void read_pci_facts(const HostRoot& host, GpuDevice& gpu) {
  const std::string dir = "sys/bus/pci/devices/" + gpu.pci_address;
  if (auto v = host.read_uint(dir + "/vendor"); v) gpu.vendor_id = static_cast<std::uint32_t>(*v);
  if (auto d = host.read_uint(dir + "/device"); d) gpu.device_id = static_cast<std::uint32_t>(*d);
  gpu.numa_node = pci_numa_node(host, gpu.pci_address);
  for (const char* name : {"current_link_width", "max_link_width"})
    if (auto w = host.read_uint(dir + "/" + name); w) gpu.properties[std::string("pci_") + name] = *w;
  for (const char* name : {"current_link_speed", "max_link_speed"})
    if (auto s = host.read_line(dir + "/" + name); s && link_speed_mts(*s))
      gpu.properties[std::string("pci_") + name + "_mts"] = link_speed_mts(*s);
}

// The GPUs /proc/driver/nvidia/gpus lists, those the driver does not exclude, into inv.gpus.
Result<void> read_nvidia_procfs(const HostRoot& host, const std::string& driver, NodeInventory& inv) {
  const std::string gpus_dir = "proc/driver/nvidia/gpus";
  auto buses = host.list_dir(gpus_dir);
  if (!buses) return {};
  for (const auto& bus : *buses) {
    const std::string file = gpus_dir + "/" + bus + "/information";
    GPUCKPT_TRY(const std::string text, host.read_file(file));
    auto f = colon_fields(text);
    for (const char* required : {"Model", "GPU UUID", "Bus Location", "Device Minor"})
      if (!f.count(required) || f[required].empty())
        return make_error(host.resolve(file).string() + ": no '" + required + ":' line (truncated file?)");
    if (f["GPU Excluded"] == "Yes") {
      log::info("NVIDIA GPU " + f["GPU UUID"] + " left out: the driver marks it excluded");
      continue;
    }
    GpuDevice gpu;
    gpu.vendor = GpuVendor::Nvidia;
    gpu.vendor_id = kNvidiaVendor;
    gpu.name = f["Model"];
    gpu.uuid = f["GPU UUID"];
    gpu.id = gpu.uuid;
    gpu.pci_address = normalize_pci_bus_id(f["Bus Location"]);
    const auto minor = to_u32(f["Device Minor"]);
    if (!minor || *minor > 0x7fffffffu)
      return make_error(host.resolve(file).string() + ": 'Device Minor' is not a number: '" + f["Device Minor"] + "'");
    gpu.device_minor = static_cast<int>(*minor);
    gpu.firmware_version = f["Video BIOS"];
    gpu.driver_version = driver;
    read_pci_facts(host, gpu);
    gpu.device_paths = {"/dev/nvidia" + std::to_string(gpu.device_minor), "/dev/nvidiactl", "/dev/nvidia-uvm"};
    inv.gpus.push_back(std::move(gpu));
  }
  return {};
}

// What NVML says of each device into the GPU procfs listed (from inv.gpus[first] on), or a GPU of its own where
// procfs is not visible (a container without /proc/driver/nvidia). Returns each device's GPU id by PCI bus id.
std::map<std::string, std::string> merge_nvml_devices(const HostRoot& host, const NvmlSnapshot& snap, std::size_t first,
                                                      NodeInventory& inv) {
  std::map<std::string, std::string> id_by_bus;
  for (const auto& d : snap.devices) {
    auto it = std::find_if(inv.gpus.begin() + static_cast<std::ptrdiff_t>(first), inv.gpus.end(),
                           [&](const GpuDevice& g) { return g.pci_address == d.pci_bus_id || g.uuid == d.uuid; });
    if (it == inv.gpus.end()) {
      GpuDevice gpu;
      gpu.vendor = GpuVendor::Nvidia;
      gpu.vendor_id = kNvidiaVendor;
      gpu.uuid = d.uuid;
      gpu.id = d.uuid;
      gpu.pci_address = d.pci_bus_id;
      gpu.device_minor = d.minor_number;
      gpu.name = d.name;
      gpu.firmware_version = d.vbios_version;
      gpu.driver_version = snap.driver_version;
      read_pci_facts(host, gpu);
      if (d.minor_number >= 0)
        gpu.device_paths = {"/dev/nvidia" + std::to_string(d.minor_number), "/dev/nvidiactl", "/dev/nvidia-uvm"};
      inv.gpus.push_back(std::move(gpu));
      it = inv.gpus.end() - 1;
    }
    GpuDevice& gpu = *it;
    gpu.memory_bytes = d.memory_total_bytes;
    gpu.compute_capability = d.compute_capability;
    gpu.mig_mode = d.mig_mode;
    if (gpu.numa_node < 0) gpu.numa_node = d.numa_node;
    if (gpu.driver_version.empty()) gpu.driver_version = snap.driver_version;
    if (gpu.firmware_version.empty()) gpu.firmware_version = d.vbios_version;
    id_by_bus[d.pci_bus_id] = gpu.id;
  }
  return id_by_bus;
}

// The NVLink peers NVML reports, as links of the GPUs both ends of which are known.
void add_nvlink_links(const NvmlSnapshot& snap, const std::map<std::string, std::string>& id_by_bus,
                      NodeInventory& inv) {
  for (const auto& d : snap.devices) {
    auto self = id_by_bus.find(d.pci_bus_id);
    auto gpu = std::find_if(inv.gpus.begin(), inv.gpus.end(), [&](const GpuDevice& g) { return g.id == self->second; });
    for (const auto& peer : d.nvlink_peers) {
      auto peer_id = id_by_bus.find(peer.pci_bus_id);
      if (peer_id == id_by_bus.end()) continue;
      GpuLink link;
      link.type = "nvlink";
      link.peer_id = peer_id->second;
      link.count = peer.links;
      link.bidirectional = true;   // NVLink carries traffic both ways
      gpu->links.push_back(std::move(link));
    }
  }
}

Result<void> read_nvidia(const HostRoot& host, const InventoryOptions& options, NodeInventory& inv) {
  const std::string driver = nvidia_driver_version(host);
  if (!driver.empty()) inv.system["nvidia_driver_version"] = driver;
  const std::size_t first = inv.gpus.size();
  GPUCKPT_TRY_VOID(read_nvidia_procfs(host, driver, inv));

  // NVML adds what procfs does not say: memory, compute capability, MIG mode, NVLink peers.
  std::unique_ptr<NvmlSource> owned;
  const NvmlSource* nvml = options.nvml;
  if (!nvml && !options.nvml_snapshot.empty()) nvml = (owned = make_nvml_replay(options.nvml_snapshot)).get();
  if (!nvml && options.use_nvml) nvml = (owned = make_driver_nvml()).get();
  if (!nvml) return {};
  auto snap = nvml->snapshot();
  if (!snap) {
    if (snap.error().errno_value == ENOENT && options.nvml_snapshot.empty()) {
      log::debug(snap.error().message);
      return {};
    }
    return snap.error();
  }
  if (!snap->driver_version.empty()) inv.system["nvidia_driver_version"] = snap->driver_version;
  if (snap->cuda_driver_version) inv.system["cuda_driver_version"] = std::to_string(snap->cuda_driver_version);
  add_nvlink_links(*snap, merge_nvml_devices(host, *snap, first, inv), inv);
  return {};
}

void read_drm(const HostRoot& host, NodeInventory& inv, std::size_t hidden_kfd_nodes) {
  auto entries = host.list_dir("sys/class/drm");
  if (!entries) return;
  const auto rules = cgroup_v1_device_rules(host);
  for (const auto& name : *entries) {
    const auto render = name.rfind("renderD", 0) == 0 ? to_u32(name.substr(7)) : std::nullopt;
    if (!render || *render > 0x7fffffffu) continue;
    const int minor = static_cast<int>(*render);
    if (rules && !cgroup_allows(*rules, kDrmMajor, static_cast<std::uint32_t>(minor))) continue;
    const std::string dev = "sys/class/drm/" + name + "/device";
    auto target = host.read_link(dev);
    std::string pci = target ? std::filesystem::path(*target).filename().string() : "";
    auto vendor = host.read_uint(dev + "/vendor");
    if (pci.empty() || !vendor) continue;
    auto same_pci = std::find_if(inv.gpus.begin(), inv.gpus.end(), [&](const GpuDevice& g) { return g.pci_address == pci; });
    if (same_pci != inv.gpus.end()) {   // KFD or NVIDIA already knows it; only add the render node it lacks
      if (same_pci->render_minor < 0) {
        same_pci->render_minor = minor;
        same_pci->device_paths.push_back("/dev/dri/" + name);
      }
      continue;
    }
    if (*vendor == kAmdVendor && hidden_kfd_nodes > 0) {
      // Likely one of the KFD nodes hidden from us (cgroup v2 only shows as EPERM there): not ours to report.
      log::debug(name + " left out: an AMD GPU without a visible KFD node while KFD hides some nodes");
      continue;
    }
    GpuDevice gpu;
    gpu.vendor = *vendor == kAmdVendor ? GpuVendor::Amd : *vendor == kNvidiaVendor ? GpuVendor::Nvidia : GpuVendor::Other;
    gpu.id = "drm-" + pci;
    gpu.pci_address = pci;
    gpu.render_minor = minor;
    read_pci_facts(host, gpu);
    if (auto uevent = host.read_file(dev + "/uevent"); uevent) {
      std::istringstream in(*uevent);
      std::string line;
      while (std::getline(in, line))
        if (line.rfind("DRIVER=", 0) == 0) gpu.name = line.substr(7);
    }
    if (auto vram = host.read_uint(dev + "/mem_info_vram_total"); vram) gpu.memory_bytes = *vram;
    if (const char* marketing = gpu.vendor == GpuVendor::Amd ? amd_marketing_name(gpu.device_id) : nullptr)
      gpu.name = marketing;
    gpu.device_paths = {"/dev/dri/" + name};
    inv.gpus.push_back(std::move(gpu));
  }
}

}  // namespace

std::string nvidia_driver_version(const HostRoot& host) {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (...)"
  auto line = host.read_line("proc/driver/nvidia/version");
  if (!line) return "";
  std::istringstream in(*line);
  std::string word;
  while (in >> word)
    if (std::isdigit(static_cast<unsigned char>(word[0])) && word.find('.') != std::string::npos) return word;
  return "";
}

std::string gfx_name(std::uint64_t version) {
  if (version == 0) return "";
  char text[32];
  std::snprintf(text, sizeof text, "gfx%u%x%x", static_cast<unsigned>(version / 10000),
                static_cast<unsigned>((version / 100) % 100), static_cast<unsigned>(version % 100));
  return text;
}

Result<NodeInventory> read_inventory(const HostRoot& host, const InventoryOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(host.root(), ec))
    return make_error("host root " + host.root().string() + " is not a readable directory", ENOENT);
  NodeInventory inv;
  if (auto h = host.read_line("proc/sys/kernel/hostname"); h) inv.hostname = *h;
  else if (auto e = host.read_line("etc/hostname"); e) inv.hostname = *e;
  std::size_t hidden_kfd_nodes = 0;
  GPUCKPT_TRY_VOID(read_kfd(host, inv, hidden_kfd_nodes));
  GPUCKPT_TRY_VOID(read_nvidia(host, options, inv));
  read_drm(host, inv, hidden_kfd_nodes);
  return inv;
}

}  // namespace gpuckpt
