#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "gpu/inventory.h"
#include "gpu/nvml.h"
#include "gpu/properties_record.h"
#include "test/support/fixture_tree.h"

using namespace gpuckpt;
using namespace gpuckpt::test;

namespace {

constexpr const char* kNodes = "sys/class/kfd/kfd/topology/nodes/";

NodeInventory read_ok(const std::filesystem::path& root, bool with_snapshot = true) {
  InventoryOptions options;
  options.use_nvml = false;
  if (with_snapshot && std::filesystem::exists(root / "nvml-snapshot.json")) options.nvml_snapshot = root / "nvml-snapshot.json";
  auto inv = read_inventory(HostRoot(root), options);
  INFO((inv.ok() ? std::string() : inv.error().message));
  REQUIRE(inv.ok());
  return std::move(inv.value());
}

std::string read_error(const std::filesystem::path& root) {
  InventoryOptions options;
  options.use_nvml = false;
  if (std::filesystem::exists(root / "nvml-snapshot.json")) options.nvml_snapshot = root / "nvml-snapshot.json";
  auto inv = read_inventory(HostRoot(root), options);
  REQUIRE_FALSE(inv.ok());
  return inv.error().message;
}

std::size_t links_of_type(const GpuDevice& gpu, const std::string& type) {
  return static_cast<std::size_t>(
      std::count_if(gpu.links.begin(), gpu.links.end(), [&](const GpuLink& l) { return l.type == type; }));
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("MI100 fixture: every property CRIU records, VRAM, PCI, render node", "[unit]") {
  const auto inv = read_ok(fixture("amd-mi100"));
  CHECK(inv.hostname == "mi100-node");
  REQUIRE(inv.gpus.size() == 2);
  const GpuDevice& g = inv.gpus[0];
  CHECK(g.id == "kfd-42700");
  CHECK(g.gpu_id == 42700);
  CHECK(g.kfd_node == 1);
  CHECK(g.vendor == GpuVendor::Amd);
  CHECK(g.name == "AMD Instinct MI100");
  CHECK(g.compute_capability == "gfx908");
  CHECK(g.vendor_id == 0x1002);
  CHECK(g.device_id == 0x738c);
  CHECK(g.pci_address == "0000:23:00.0");
  CHECK(g.render_minor == 128);
  CHECK(g.numa_node == 0);
  CHECK(g.memory_bytes == 34342961152ull);
  CHECK(g.firmware_version == "65");
  CHECK(g.hive_id == 0);
  CHECK(g.uuid == "GPU-6c62a3758b84fd47");   // unique_id 7809984429061111111 in hex
  for (const char* key : {"simd_count", "mem_banks_count", "caches_count", "io_links_count", "max_waves_per_simd",
                          "lds_size_in_kb", "gds_size_in_kb", "num_gws", "wave_front_size", "array_count",
                          "simd_arrays_per_engine", "cu_per_simd_array", "simd_per_cu", "max_slots_scratch_cu",
                          "vendor_id", "device_id", "domain", "drm_render_minor", "hive_id", "num_sdma_engines",
                          "num_sdma_xgmi_engines", "num_sdma_queues_per_engine", "num_cp_queues", "fw_version",
                          "capability", "sdma_fw_version", "vram_public", "vram_size", "location_id"}) {
    INFO(key);
    CHECK(g.properties.count(key) == 1);
  }
  CHECK(g.properties.at("simd_count") == 480);
  CHECK(g.properties.at("sdma_fw_version") == 18);
  CHECK(g.properties.at("vram_public") == 1);
  CHECK(g.device_paths == std::vector<std::string>{"/dev/kfd", "/dev/dri/renderD128"});
  REQUIRE(g.links.size() == 1);   // PCIe to the CPU node, which links back
  CHECK(g.links[0].type == "pcie");
  CHECK(g.links[0].peer_id.empty());
  CHECK(g.links[0].bidirectional);
  CHECK(inv.system.at("kfd_platform_oem") == "0");
}

TEST_CASE("MI250X fixture: two XGMI hives, full mesh inside each, wider links within a package", "[unit]") {
  const auto inv = read_ok(fixture("amd-mi250x"));
  REQUIRE(inv.gpus.size() == 8);
  std::set<std::uint64_t> hives;
  for (const auto& g : inv.gpus) {
    hives.insert(g.hive_id);
    CHECK(links_of_type(g, "xgmi") == 3);
    CHECK(links_of_type(g, "pcie") == 1);
    for (const auto& l : g.links) {
      if (l.type != "xgmi") continue;
      const GpuDevice* peer = find_gpu(inv, l.peer_id);
      REQUIRE(peer);
      CHECK(peer->hive_id == g.hive_id);
      CHECK(l.bidirectional);
      CHECK(l.weight == 15);
    }
  }
  CHECK(hives.size() == 2);
  CHECK(inv.gpus[0].numa_node == 0);
  CHECK(inv.gpus[7].numa_node == 1);
  CHECK(inv.gpus[0].name == "AMD Instinct MI250X/MI250");
  const GpuLink* same_package = nullptr;
  for (const auto& l : inv.gpus[0].links)
    if (l.peer_id == inv.gpus[1].id) same_package = &l;
  REQUIRE(same_package);
  CHECK(same_package->max_bandwidth == 200000);
}

TEST_CASE("MI210 and MI300X fixtures", "[unit]") {
  const auto mi210 = read_ok(fixture("amd-mi210"));
  REQUIRE(mi210.gpus.size() == 4);
  for (const auto& g : mi210.gpus) {
    CHECK(g.compute_capability == "gfx90a");
    CHECK(g.hive_id == 0);
    CHECK(links_of_type(g, "xgmi") == 0);
  }
  const auto mi300x = read_ok(fixture("amd-mi300x"));
  REQUIRE(mi300x.gpus.size() == 8);
  for (const auto& g : mi300x.gpus) {
    CHECK(g.compute_capability == "gfx942");
    CHECK(g.name == "AMD Instinct MI300X");
    CHECK(links_of_type(g, "xgmi") == 7);
    CHECK(g.hive_id == mi300x.gpus[0].hive_id);
    CHECK(g.memory_bytes == 206141652992ull);
  }
}

TEST_CASE("CPU-only fixture: no KFD GPU, the BMC card is ignored, a DRM-only GPU is reported", "[unit]") {
  const auto inv = read_ok(fixture("cpu-only"));
  REQUIRE(inv.gpus.size() == 1);
  const GpuDevice& g = inv.gpus[0];
  CHECK(g.id == "drm-0000:c3:00.0");
  CHECK(g.vendor == GpuVendor::Amd);
  CHECK(g.device_id == 0x744c);
  CHECK(g.render_minor == 128);
  CHECK(g.numa_node == 1);
  CHECK(g.memory_bytes == 25753026560ull);
  CHECK(g.device_paths == std::vector<std::string>{"/dev/dri/renderD128"});
}

TEST_CASE("H200 fixture: procfs + PCI sysfs, NVML facts from the recorded snapshot", "[unit]") {
  const auto inv = read_ok(fixture("nvidia-h200"));
  REQUIRE(inv.gpus.size() == 1);
  const GpuDevice& g = inv.gpus[0];
  CHECK(g.id == "GPU-a2ce77ac-c70f-b672-0aa0-f871c0787910");
  CHECK(g.uuid == g.id);
  CHECK(g.vendor == GpuVendor::Nvidia);
  CHECK(g.name == "NVIDIA H200");
  CHECK(g.vendor_id == 0x10de);
  CHECK(g.device_id == 0x2335);
  CHECK(g.pci_address == "0000:00:06.0");
  CHECK(g.device_minor == 0);
  CHECK(g.firmware_version == "96.00.a5.00.1a");
  CHECK(g.driver_version == "580.159.04");
  CHECK(g.memory_bytes == 150754820096ull);
  CHECK(g.compute_capability == "9.0");
  CHECK(g.mig_mode == "Disabled");
  CHECK(g.numa_node == -1);
  CHECK(g.properties.at("pci_current_link_width") == 16);
  CHECK(g.properties.at("pci_max_link_speed_mts") == 32000);
  CHECK(g.device_paths == std::vector<std::string>{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"});
  CHECK(inv.system.at("nvidia_driver_version") == "580.159.04");
  CHECK(inv.system.at("cuda_driver_version") == "13000");

  const auto without_nvml = read_ok(fixture("nvidia-h200"), false);
  REQUIRE(without_nvml.gpus.size() == 1);
  CHECK(without_nvml.gpus[0].memory_bytes == 0);       // procfs does not say; the matcher treats 0 as unknown
  CHECK(without_nvml.gpus[0].compute_capability.empty());
  CHECK(without_nvml.gpus[0].driver_version == "580.159.04");
}

TEST_CASE("H100 8-GPU fixture: NVLink peers through NVSwitch, NUMA split", "[unit]") {
  const auto inv = read_ok(fixture("nvidia-h100-8gpu"));
  REQUIRE(inv.gpus.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(links_of_type(inv.gpus[i], "nvlink") == 7);
    CHECK(inv.gpus[i].links[0].count == 18);
    CHECK(inv.gpus[i].numa_node == (i < 4 ? 0 : 1));
    CHECK(inv.gpus[i].device_minor == static_cast<int>(i));
  }
}

TEST_CASE("captured 2x H200 fixture: the NV18 pair from the recorded NVML snapshot", "[unit]") {
  const auto inv = read_ok(fixture("nvidia-h200-x2"));
  REQUIRE(inv.gpus.size() == 2);
  REQUIRE(inv.gpus[0].links.size() == 1);
  CHECK(inv.gpus[0].links[0].type == "nvlink");
  CHECK(inv.gpus[0].links[0].peer_id == inv.gpus[1].id);
  CHECK(inv.gpus[0].links[0].count == 18);
  CHECK(inv.gpus[1].device_minor == 1);
  CHECK(inv.gpus[1].device_paths.front() == "/dev/nvidia1");
}

TEST_CASE("an NVML snapshot alone describes GPUs when procfs is not visible", "[unit]") {
  FixtureCopy tree("nvidia-h100-8gpu");
  tree.remove("proc/driver/nvidia");
  const auto inv = read_ok(tree.root());
  REQUIRE(inv.gpus.size() == 8);
  CHECK(inv.gpus[3].device_paths.front() == "/dev/nvidia3");
  CHECK(inv.gpus[3].pci_address == "0000:5d:00.0");
  CHECK(inv.gpus[3].numa_node == 0);   // from PCI sysfs
}

TEST_CASE("the device cgroup (v1 devices.list) hides KFD nodes, and links to hidden GPUs go with them", "[unit]") {
  FixtureCopy tree("amd-mi300x");
  tree.write("sys/fs/cgroup/devices/devices.list", "c 1:3 rwm\nc 226:128 rw\nc 226:130 rw\n");
  const auto inv = read_ok(tree.root());
  REQUIRE(inv.gpus.size() == 2);
  CHECK(inv.gpus[0].render_minor == 128);
  CHECK(inv.gpus[1].render_minor == 130);
  for (const auto& g : inv.gpus) CHECK(links_of_type(g, "xgmi") == 1);

  tree.write("sys/fs/cgroup/devices/devices.list", "a *:* rwm\n");
  CHECK(read_ok(tree.root()).gpus.size() == 8);
  tree.write("sys/fs/cgroup/devices/devices.list", "c 226:* rwm\n");
  CHECK(read_ok(tree.root()).gpus.size() == 8);
}

TEST_CASE("an XGMI link the peer does not list back is unidirectional", "[unit]") {
  FixtureCopy tree("amd-mi250x");
  // node 3's link back to node 2 is io_links/1 (node 3 links: CPU, then 2, 4, 5)
  REQUIRE(contains(tree.read(std::string(kNodes) + "3/io_links/1/properties"), "node_to 2\n"));
  tree.remove(std::string(kNodes) + "3/io_links/1");
  const auto inv = read_ok(tree.root());
  const GpuDevice& a = inv.gpus[0];
  const GpuDevice& b = inv.gpus[1];
  for (const auto& l : a.links)
    if (l.peer_id == b.id) CHECK_FALSE(l.bidirectional);
  CHECK(links_of_type(b, "xgmi") == 2);
}

TEST_CASE("malformed and truncated sysfs/procfs files are errors naming the file", "[unit]") {
  struct Case {
    std::string fixture, name;
    std::function<void(const FixtureCopy&)> damage;
    std::vector<std::string> expect;
  };
  const std::string gpu = std::string(kNodes) + "2/";
  const std::vector<Case> cases = {
      {"amd-mi250x", "garbage line in properties",
       [&](const FixtureCopy& t) { t.write(gpu + "properties", t.read(gpu + "properties") + "simd_count lots\n"); },
       {gpu + "properties", "line 39", "simd_count lots"}},
      {"amd-mi250x", "properties cut off mid-file",
       [&](const FixtureCopy& t) { t.write(gpu + "properties", t.read(gpu + "properties").substr(0, 120)); },
       {gpu + "properties"}},
      {"amd-mi250x", "empty properties of a GPU node",
       [&](const FixtureCopy& t) { t.write(gpu + "properties", ""); }, {gpu + "properties", "lacks 'simd_count'"}},
      {"amd-mi250x", "gpu_id not a number",
       [&](const FixtureCopy& t) { t.write(gpu + "gpu_id", "0x12ab\n"); }, {gpu + "gpu_id", "0x12ab"}},
      {"amd-mi250x", "gpu_id beyond 32 bits",
       [&](const FixtureCopy& t) { t.write(gpu + "gpu_id", "123456789012345678901234567890\n"); },
       {gpu + "gpu_id", "32-bit"}},
      {"amd-mi250x", "io_link without node_to",
       [&](const FixtureCopy& t) { t.write(gpu + "io_links/1/properties", "type 11\nnode_from 2\n"); },
       {gpu + "io_links/1/properties", "node_to"}},
      {"amd-mi250x", "mem bank with a negative size",
       [&](const FixtureCopy& t) { t.write(gpu + "mem_banks/0/properties", "heap_type 1\nsize_in_bytes -1\n"); },
       {gpu + "mem_banks/0/properties", "line 2"}},
      {"nvidia-h200", "information file cut after the model",
       [](const FixtureCopy& t) {
         t.write("proc/driver/nvidia/gpus/0000:00:06.0/information", "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\n");
       },
       {"proc/driver/nvidia/gpus/0000:00:06.0/information", "GPU UUID"}},
      {"nvidia-h200", "device minor not a number",
       [](const FixtureCopy& t) {
         auto text = t.read("proc/driver/nvidia/gpus/0000:00:06.0/information");
         text.replace(text.find("Device Minor: \t 0"), 17, "Device Minor: \t x");
         t.write("proc/driver/nvidia/gpus/0000:00:06.0/information", text);
       },
       {"information", "Device Minor"}},
      {"nvidia-h200", "truncated NVML snapshot",
       [](const FixtureCopy& t) { t.write("nvml-snapshot.json", t.read("nvml-snapshot.json").substr(0, 200)); },
       {"nvml-snapshot.json", "malformed JSON"}},
      {"nvidia-h200", "NVML snapshot from a newer gpuckpt",
       [](const FixtureCopy& t) {
         auto text = t.read("nvml-snapshot.json");
         text.replace(text.find("\"version\": 1"), 12, "\"version\": 7");
         t.write("nvml-snapshot.json", text);
       },
       {"nvml-snapshot.json", "version 7"}},
  };
  for (const auto& c : cases) {
    INFO(c.fixture + ": " + c.name);
    FixtureCopy tree(c.fixture);
    c.damage(tree);
    const std::string message = read_error(tree.root());
    INFO(message);
    for (const auto& part : c.expect) CHECK(contains(message, part));
  }
}

TEST_CASE("an unreadable host root is an error naming it", "[unit]") {
  auto inv = read_inventory(HostRoot("/nonexistent/gpuckpt-root"), InventoryOptions{false, {}, nullptr});
  REQUIRE_FALSE(inv.ok());
  CHECK(contains(inv.error().message, "/nonexistent/gpuckpt-root"));
}

TEST_CASE("every fixture's inventory survives the record's JSON and protobuf forms", "[unit]") {
  for (const char* name : {"amd-mi100", "amd-mi210", "amd-mi250x", "amd-mi300x", "cpu-only", "nvidia-h200",
                           "nvidia-h100-8gpu", "nvidia-h200-x2"}) {
    INFO(name);
    const auto inv = read_ok(fixture(name));
    const auto json = to_json(inv);
    auto back = parse_record(json.dump(), name);
    REQUIRE(back.ok());
    CHECK(to_json(back->node) == json);
    auto pb = record_from_protobuf(to_protobuf(*back), name);
    REQUIRE(pb.ok());
    CHECK(to_json(pb->node) == json);
  }
}

TEST_CASE("gfx names from KFD's packed gfx_target_version", "[unit]") {
  CHECK(gfx_name(90008) == "gfx908");
  CHECK(gfx_name(90010) == "gfx90a");
  CHECK(gfx_name(90402) == "gfx942");
  CHECK(gfx_name(110501) == "gfx1151");
  CHECK(gfx_name(0).empty());
}

TEST_CASE("damaged sysfs and procfs files never throw: the inventory is a value or an error", "[unit]") {
  std::mt19937 rng(1121);
  for (const char* name : {"amd-mi250x", "nvidia-h100-8gpu"}) {
    FixtureCopy tree(name);
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(tree.root()))
      if (entry.is_regular_file() && !entry.is_symlink() && entry.path().filename() != "README.md")
        files.push_back(std::filesystem::relative(entry.path(), tree.root()).string());
    std::sort(files.begin(), files.end());
    for (int i = 0; i < 120; ++i) {
      const std::string& file = files[rng() % files.size()];
      const std::string original = tree.read(file);
      std::string text = original;
      if (!text.empty()) {
        const std::size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0: text[at] = static_cast<char>(rng() & 0xff); break;
          case 1: text.insert(at, std::to_string(rng()) + std::to_string(rng())); break;
          default: text.resize(at); break;
        }
      }
      tree.write(file, text);
      InventoryOptions options{false, tree.root() / "nvml-snapshot.json", nullptr};
      if (std::string(name) == "amd-mi250x") options.nvml_snapshot.clear();
      INFO(file);
      REQUIRE_NOTHROW((void)read_inventory(HostRoot(tree.root()), options));
      tree.write(file, original);
    }
  }
}
