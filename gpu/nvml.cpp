#include "gpu/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "base/log.h"

namespace gpuckpt {

using nlohmann::json;

std::string normalize_pci_bus_id(std::string_view bus_id) {
  std::string id(bus_id);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  // domain:bus:device.function with an 8-digit domain whose top half is zero -> the 4-digit form sysfs uses
  const auto colon = id.find(':');
  if (colon == 8 && id.compare(0, 4, "0000") == 0) id.erase(0, 4);
  return id;
}

namespace {

// The subset of nvml.h gpuckpt calls; types and values as the header defines them.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;
constexpr int NVML_P2P_STATUS_OK = 0;
constexpr int NVML_FEATURE_ENABLED = 1;
constexpr unsigned kMaxNvLinks = 18;   // NVML_NVLINK_MAX_LINKS up to Hopper; later parts stop earlier with an error

struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

class DriverNvml final : public NvmlSource {
 public:
  Result<NvmlSnapshot> snapshot() const override {
    GPUCKPT_TRY(void* const lib, initialised_library());
    return read(lib);
  }

 private:
  template <class Fn>
  static Fn sym(void* lib, const char* name) {
    return reinterpret_cast<Fn>(::dlsym(lib, name));
  }

  // One NVML session per process: loaded and initialised at the first snapshot, never shut down. The agent reads
  // the inventory for every job, and with nvmlInit/nvmlShutdown around each read its open descriptors grew by one
  // per GPU checkpoint/restore cycle on driver 580 (test/gpu/soak_test.sh); NVML is thread-safe once initialised.
  // A failed load or init is retried at the next snapshot (a driver loaded after the agent started).
  static Result<void*> initialised_library() {
    static std::mutex mutex;
    static void* lib = nullptr;
    static bool initialised = false;
    std::lock_guard lock(mutex);
    if (!lib) lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return make_error(std::string("NVML not available: ") + ::dlerror(), ENOENT);
    if (initialised) return lib;
    auto init = sym<nvmlReturn_t (*)()>(lib, "nvmlInit_v2");
    auto error_string = sym<const char* (*)(nvmlReturn_t)>(lib, "nvmlErrorString");
    if (!init) return make_error("libnvidia-ml.so.1 lacks nvmlInit_v2 (driver too old?)", ENOSYS);
    if (nvmlReturn_t rc = init(); rc != NVML_SUCCESS)
      return make_error(std::string("nvmlInit failed: ") + (error_string ? error_string(rc) : std::to_string(rc)), EIO);
    initialised = true;
    return lib;
  }

  // The NVML entry points a snapshot calls; all but count, by_index, name, uuid, memory and pci may be missing
  // (older drivers), and what they would say is then left out.
  struct Api {
    nvmlReturn_t (*driver_version)(char*, unsigned);
    nvmlReturn_t (*cuda_version)(int*);
    nvmlReturn_t (*count)(unsigned*);
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*);
    nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
    nvmlReturn_t (*capability)(nvmlDevice_t, int*, int*);
    nvmlReturn_t (*mig)(nvmlDevice_t, unsigned*, unsigned*);
    nvmlReturn_t (*minor)(nvmlDevice_t, unsigned*);
    nvmlReturn_t (*vbios)(nvmlDevice_t, char*, unsigned);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*);
    nvmlReturn_t (*numa)(nvmlDevice_t, unsigned*);
    nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*);
    nvmlReturn_t (*link_remote)(nvmlDevice_t, unsigned, nvmlPciInfo_t*);
    nvmlReturn_t (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int*);
  };

  static Api resolve_api(void* lib) {
    Api a{};
    a.driver_version = sym<decltype(a.driver_version)>(lib, "nvmlSystemGetDriverVersion");
    a.cuda_version = sym<decltype(a.cuda_version)>(lib, "nvmlSystemGetCudaDriverVersion_v2");
    a.count = sym<decltype(a.count)>(lib, "nvmlDeviceGetCount_v2");
    a.by_index = sym<decltype(a.by_index)>(lib, "nvmlDeviceGetHandleByIndex_v2");
    a.name = sym<decltype(a.name)>(lib, "nvmlDeviceGetName");
    a.uuid = sym<decltype(a.uuid)>(lib, "nvmlDeviceGetUUID");
    a.memory = sym<decltype(a.memory)>(lib, "nvmlDeviceGetMemoryInfo");
    a.capability = sym<decltype(a.capability)>(lib, "nvmlDeviceGetCudaComputeCapability");
    a.mig = sym<decltype(a.mig)>(lib, "nvmlDeviceGetMigMode");
    a.minor = sym<decltype(a.minor)>(lib, "nvmlDeviceGetMinorNumber");
    a.vbios = sym<decltype(a.vbios)>(lib, "nvmlDeviceGetVbiosVersion");
    a.pci = sym<decltype(a.pci)>(lib, "nvmlDeviceGetPciInfo_v3");
    a.numa = sym<decltype(a.numa)>(lib, "nvmlDeviceGetNumaNodeId");
    a.link_state = sym<decltype(a.link_state)>(lib, "nvmlDeviceGetNvLinkState");
    a.link_remote = sym<decltype(a.link_remote)>(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    a.p2p = sym<decltype(a.p2p)>(lib, "nvmlDeviceGetP2PStatus");
    return a;
  }

  // What NVML says of one device; a query that fails leaves its field at the default.
  static NvmlDevice read_device(const Api& api, nvmlDevice_t dev, unsigned index) {
    char text[128] = {};
    NvmlDevice d;
    d.index = index;
    if (api.name(dev, text, sizeof text) == NVML_SUCCESS) d.name = text;
    if (api.uuid(dev, text, sizeof text) == NVML_SUCCESS) d.uuid = text;
    nvmlMemory_t mem{};
    if (api.memory(dev, &mem) == NVML_SUCCESS) d.memory_total_bytes = mem.total;
    int major = 0, minor_cc = 0;
    if (api.capability && api.capability(dev, &major, &minor_cc) == NVML_SUCCESS)
      d.compute_capability = std::to_string(major) + "." + std::to_string(minor_cc);
    unsigned current = 0, pending = 0;
    if (api.mig && api.mig(dev, &current, &pending) == NVML_SUCCESS)
      d.mig_mode = current == NVML_FEATURE_ENABLED ? "Enabled" : "Disabled";
    unsigned value = 0;
    if (api.minor && api.minor(dev, &value) == NVML_SUCCESS) d.minor_number = static_cast<int>(value);
    if (api.vbios && api.vbios(dev, text, sizeof text) == NVML_SUCCESS) d.vbios_version = text;
    nvmlPciInfo_t info{};
    if (api.pci(dev, &info) == NVML_SUCCESS) d.pci_bus_id = normalize_pci_bus_id(info.busId);
    if (api.numa && api.numa(dev, &value) == NVML_SUCCESS) d.numa_node = static_cast<int>(value);
    return d;
  }

  // NVLink peers: a link whose far end is another GPU counts towards that GPU; links into NVSwitches connect
  // every pair that NVML reports as NVLink-P2P capable. handles[i] is snap.devices[i]'s.
  static void read_nvlink_peers(const Api& api, const std::vector<nvmlDevice_t>& handles, NvmlSnapshot& snap) {
    if (!api.link_state || !api.link_remote) return;
    std::map<std::string, std::size_t> by_bus;
    for (std::size_t i = 0; i < snap.devices.size(); ++i) by_bus[snap.devices[i].pci_bus_id] = i;
    std::vector<unsigned> switch_links(handles.size(), 0);   // NVLinks that end at something other than a GPU
    for (std::size_t i = 0; i < handles.size(); ++i) {
      std::map<std::string, std::uint32_t> direct;
      for (unsigned link = 0; link < kMaxNvLinks; ++link) {
        int active = 0;
        if (api.link_state(handles[i], link, &active) != NVML_SUCCESS) break;
        if (active != NVML_FEATURE_ENABLED) continue;
        nvmlPciInfo_t remote{};
        if (api.link_remote(handles[i], link, &remote) != NVML_SUCCESS) continue;
        const std::string bus = normalize_pci_bus_id(remote.busId);
        if (by_bus.count(bus)) ++direct[bus];
        else ++switch_links[i];
      }
      for (const auto& [bus, links] : direct) snap.devices[i].nvlink_peers.push_back({bus, links});
    }
    if (!api.p2p) return;
    for (std::size_t i = 0; i < handles.size(); ++i) {
      for (std::size_t j = 0; j < handles.size(); ++j) {
        if (i == j || !switch_links[i] || !switch_links[j]) continue;
        int status = -1;
        if (api.p2p(handles[i], handles[j], NVML_P2P_CAPS_INDEX_NVLINK, &status) != NVML_SUCCESS ||
            status != NVML_P2P_STATUS_OK)
          continue;
        snap.devices[i].nvlink_peers.push_back({snap.devices[j].pci_bus_id, std::min(switch_links[i], switch_links[j])});
      }
    }
  }

  static Result<NvmlSnapshot> read(void* lib) {
    const Api api = resolve_api(lib);
    if (!api.count || !api.by_index || !api.name || !api.uuid || !api.memory || !api.pci)
      return make_error("libnvidia-ml.so.1 lacks the NVML entry points gpuckpt needs (driver too old?)", ENOSYS);
    NvmlSnapshot snap;
    char text[128] = {};
    if (api.driver_version && api.driver_version(text, sizeof text) == NVML_SUCCESS) snap.driver_version = text;
    if (api.cuda_version) api.cuda_version(&snap.cuda_driver_version);
    unsigned n = 0;
    api.count(&n);
    std::vector<nvmlDevice_t> handles;
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (api.by_index(i, &dev) != NVML_SUCCESS) continue;
      snap.devices.push_back(read_device(api, dev, i));
      handles.push_back(dev);
    }
    read_nvlink_peers(api, handles, snap);
    return snap;
  }
};

class ReplayNvml final : public NvmlSource {
 public:
  explicit ReplayNvml(std::filesystem::path file) : file_(std::move(file)) {}
  Result<NvmlSnapshot> snapshot() const override {
    std::ifstream in(file_);
    if (!in) return make_error(file_.string() + ": cannot read the NVML snapshot", ENOENT);
    std::stringstream text;
    text << in.rdbuf();
    json j = json::parse(text.str(), nullptr, false);
    if (j.is_discarded()) return make_error(file_.string() + ": malformed JSON in the NVML snapshot");
    return nvml_snapshot_from_json(j, file_.string());
  }

 private:
  std::filesystem::path file_;
};

}  // namespace

std::unique_ptr<NvmlSource> make_driver_nvml() { return std::make_unique<DriverNvml>(); }
std::unique_ptr<NvmlSource> make_nvml_replay(std::filesystem::path file) {
  return std::make_unique<ReplayNvml>(std::move(file));
}

json to_json(const NvmlSnapshot& s) {
  json devices = json::array();
  for (const auto& d : s.devices) {
    json peers = json::array();
    for (const auto& p : d.nvlink_peers) peers.push_back({{"pci_bus_id", p.pci_bus_id}, {"links", p.links}});
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"uuid", d.uuid},
                       {"pci_bus_id", d.pci_bus_id},
                       {"memory_total_bytes", d.memory_total_bytes},
                       {"compute_capability", d.compute_capability},
                       {"mig_mode", d.mig_mode},
                       {"minor_number", d.minor_number},
                       {"vbios_version", d.vbios_version},
                       {"numa_node", d.numa_node},
                       {"nvlink_peers", std::move(peers)}});
  }
  return {{"format", "gpuckpt-nvml-snapshot"},
          {"version", NvmlSnapshot::kVersion},
          {"driver_version", s.driver_version},
          {"cuda_driver_version", s.cuda_driver_version},
          {"devices", std::move(devices)}};
}

Result<NvmlSnapshot> nvml_snapshot_from_json(const json& j, std::string_view source) {
  auto fail = [&](const std::string& what) { return make_error(std::string(source) + ": " + what); };
  try {
    if (!j.is_object() || j.value("format", "") != "gpuckpt-nvml-snapshot")
      return fail("not an NVML snapshot (expected \"format\": \"gpuckpt-nvml-snapshot\")");
    const int version = j.at("version").get<int>();
    if (version < 1 || version > NvmlSnapshot::kVersion)
      return fail("NVML snapshot version " + std::to_string(version) + " is not one this gpuckpt reads (1)");
    NvmlSnapshot s;
    s.driver_version = j.value("driver_version", "");
    s.cuda_driver_version = j.value("cuda_driver_version", 0);
    for (const auto& d : j.at("devices")) {
      NvmlDevice dev;
      dev.index = d.at("index").get<std::uint32_t>();
      dev.name = d.value("name", "");
      dev.uuid = d.at("uuid").get<std::string>();
      dev.pci_bus_id = normalize_pci_bus_id(d.at("pci_bus_id").get<std::string>());
      dev.memory_total_bytes = d.value("memory_total_bytes", std::uint64_t{0});
      dev.compute_capability = d.value("compute_capability", "");
      dev.mig_mode = d.value("mig_mode", "");
      dev.minor_number = d.value("minor_number", -1);
      dev.vbios_version = d.value("vbios_version", "");
      dev.numa_node = d.value("numa_node", -1);
      for (const auto& p : d.value("nvlink_peers", json::array()))
        dev.nvlink_peers.push_back({normalize_pci_bus_id(p.at("pci_bus_id").get<std::string>()),
                                    p.at("links").get<std::uint32_t>()});
      s.devices.push_back(std::move(dev));
    }
    return s;
  } catch (const json::exception& e) {
    return fail(std::string("invalid NVML snapshot: ") + e.what());
  }
}

}  // namespace gpuckpt
