// allocated_gpus: the kubelet's device ids for a container -> the node's GPUs, on the fixture nodes.
#include <catch2/catch_test_macros.hpp>

#include "gpu/device_allocation.h"
#include "gpu/inventory.h"
#include "test/support/fixture_tree.h"

using namespace gpuckpt;
using namespace gpuckpt::test;

namespace {

NodeInventory fixture_inventory(const std::string& name) {
  const auto root = fixture(name);
  InventoryOptions options;
  options.use_nvml = false;
  if (std::filesystem::exists(root / "nvml-snapshot.json")) options.nvml_snapshot = root / "nvml-snapshot.json";
  auto inventory = read_inventory(HostRoot(root), options);
  INFO((inventory.ok() ? std::string() : inventory.error().message));
  REQUIRE(inventory.ok());
  return std::move(inventory.value());
}

using Ids = std::vector<std::string>;

}  // namespace

TEST_CASE("allocated_gpus on the captured 2x H200: device plugin UUIDs and indexes, in inventory order", "[unit]") {
  const auto node = fixture_inventory("nvidia-h200-x2");
  REQUIRE(node.gpus.size() == 2);
  const std::string gpu0 = "GPU-3df50d36-548a-08c1-7cd5-41ff6e7b3cad", gpu1 = "GPU-cd626b4e-8c05-6521-8a3e-41d9ae0beccd";
  REQUIRE(node.gpus[0].uuid == gpu0);
  REQUIRE(node.gpus[1].uuid == gpu1);

  // deviceIDStrategy=uuid (the NVIDIA device plugin's default), listed in the kubelet's order, not the node's.
  auto gpus = allocated_gpus({{"nvidia.com/gpu", {gpu1, gpu0}}}, node);
  CHECK(gpus.gpu_ids == Ids{node.gpus[0].id, node.gpus[1].id});
  CHECK(gpus.unknown.empty());

  // deviceIDStrategy=index: "1" is /dev/nvidia1.
  gpus = allocated_gpus({{"nvidia.com/gpu", {"1"}}}, node);
  CHECK(gpus.gpu_ids == Ids{node.gpus[1].id});
  CHECK(gpus.unknown.empty());

  // One GPU named twice (UUID, index, and again under another resource) is one GPU.
  gpus = allocated_gpus({{"nvidia.com/gpu", {gpu0, "0"}}, {"nvidia.com/gpu.shared", {gpu0}}}, node);
  CHECK(gpus.gpu_ids == Ids{node.gpus[0].id});
  CHECK(gpus.unknown.empty());
}

TEST_CASE("allocated_gpus: ids that name no GPU here are reported with their resource, not guessed", "[unit]") {
  const auto node = fixture_inventory("nvidia-h200-x2");
  const auto gpus = allocated_gpus({{"nvidia.com/gpu", {"GPU-00000000-0000-0000-0000-000000000000", "2", "-1", "1x"}},
                                    {"nvidia.com/mig-1g.18gb", {"MIG-5c8d1a2e-95f4-5c3b-9d3e-1f2a3b4c5d6e"}},
                                    {"example.com/nic", {"vf-3"}},
                                    {"nvidia.com/gpu", {node.gpus[1].uuid}}},
                                   node);
  CHECK(gpus.gpu_ids == Ids{node.gpus[1].id});
  CHECK(gpus.unknown == Ids{"nvidia.com/gpu/GPU-00000000-0000-0000-0000-000000000000", "nvidia.com/gpu/2",
                            "nvidia.com/gpu/-1", "nvidia.com/gpu/1x",
                            "nvidia.com/mig-1g.18gb/MIG-5c8d1a2e-95f4-5c3b-9d3e-1f2a3b4c5d6e", "example.com/nic/vf-3"});

  const auto none = allocated_gpus({}, node);
  CHECK(none.gpu_ids.empty());
  CHECK(none.unknown.empty());
}

TEST_CASE("allocated_gpus on the 8x H100: indexes and PCI addresses, in inventory order", "[unit]") {
  const auto node = fixture_inventory("nvidia-h100-8gpu");
  REQUIRE(node.gpus.size() == 8);
  REQUIRE(node.gpus[2].pci_address == "0000:3a:00.0");
  const auto gpus = allocated_gpus({{"nvidia.com/gpu", {"7", "0000:3a:00.0", "8"}}}, node);
  CHECK(gpus.gpu_ids == Ids{node.gpus[2].id, node.gpus[7].id});
  CHECK(gpus.unknown == Ids{"nvidia.com/gpu/8"});
}

TEST_CASE("allocated_gpus on the MI250X: AMD's device plugin names GPUs by PCI address; indexes are NVIDIA's only",
          "[unit]") {
  const auto node = fixture_inventory("amd-mi250x");
  REQUIRE(node.gpus.size() >= 6);
  const auto gpus = allocated_gpus(
      {{"amd.com/gpu", {node.gpus[5].pci_address, node.gpus[3].pci_address, std::to_string(node.gpus[4].gpu_id), "0"}}},
      node);
  CHECK(gpus.gpu_ids == Ids{node.gpus[3].id, node.gpus[4].id, node.gpus[5].id});
  CHECK(gpus.unknown == Ids{"amd.com/gpu/0"});
}

TEST_CASE("allocated_gpus: a DRA device is the GPU its CDI devices' nodes are, by numbers first", "[unit]") {
  const auto node = fixture_inventory("nvidia-h200-x2");
  REQUIRE(node.gpus.size() == 2);
  // The host's nodes: nvidia0 is 195:0, nvidia1 195:1.
  const DeviceNumberLookup lookup = [](const std::string& path) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    if (path == "/dev/nvidia0") return std::pair<std::uint32_t, std::uint32_t>{195, 0};
    if (path == "/dev/nvidia1") return std::pair<std::uint32_t, std::uint32_t>{195, 1};
    return make_error("no node " + path, ENOENT);
  };
  std::vector<std::string> asked;
  const CdiDeviceNodes cdi = [&](const std::string& name) -> Result<std::vector<ContainerGpuDevice>> {
    asked.push_back(name);
    // what the NVIDIA DRA driver's specs look like: the GPU's node and the shared ones
    if (name == "k8s.gpu.nvidia.com/device=uid-gpu-1")
      return std::vector<ContainerGpuDevice>{{"/dev/nvidia1", 195, 1, ""}, {"/dev/nvidiactl", 195, 255, ""}};
    // a container that sees the host's nvidia1 at /dev/nvidia0: the numbers decide
    if (name == "example.com/gpu=renamed") return std::vector<ContainerGpuDevice>{{"/dev/nvidia0", 195, 1, ""}};
    // no numbers in the spec and none found: the path decides
    if (name == "example.com/gpu=path-only") return std::vector<ContainerGpuDevice>{{"/dev/nvidia0", 0, 0, ""}};
    if (name == "example.com/gpu=shared-only") return std::vector<ContainerGpuDevice>{{"/dev/nvidia-uvm", 511, 0, ""}};
    return make_error("no CDI spec defines device " + name, ENOENT);
  };
  const auto dra = [](std::string device, std::vector<std::string> cdi_names) {
    return DeviceAllocation{"gpu.nvidia.com", {"node-a/" + device}, "ml/big-gpu", std::move(cdi_names)};
  };

  auto gpus = allocated_gpus({dra("gpu-1", {"k8s.gpu.nvidia.com/device=uid-gpu-1"})}, node, cdi, lookup);
  CHECK(gpus.gpu_ids == Ids{node.gpus[1].id});
  CHECK(gpus.unknown.empty());
  CHECK(asked == Ids{"k8s.gpu.nvidia.com/device=uid-gpu-1"});

  gpus = allocated_gpus({dra("gpu-x", {"example.com/gpu=renamed"})}, node, cdi, lookup);
  CHECK(gpus.gpu_ids == Ids{node.gpus[1].id});
  gpus = allocated_gpus({dra("gpu-x", {"example.com/gpu=path-only"})}, node, cdi, lookup);
  CHECK(gpus.gpu_ids == Ids{node.gpus[0].id});

  // A driver that names its devices by UUID, with CDI devices that name no GPU node: the device name decides.
  gpus = allocated_gpus({dra(node.gpus[0].uuid, {"example.com/gpu=shared-only"})}, node, cdi, lookup);
  CHECK(gpus.gpu_ids == Ids{node.gpus[0].id});
  CHECK(gpus.unknown.empty());

  // Device plugin and DRA devices together, one GPU each.
  gpus = allocated_gpus({{"nvidia.com/gpu", {node.gpus[0].uuid}}, dra("gpu-1", {"k8s.gpu.nvidia.com/device=uid-gpu-1"})},
                        node, cdi, lookup);
  CHECK(gpus.gpu_ids == Ids{node.gpus[0].id, node.gpus[1].id});
}

TEST_CASE("allocated_gpus: a DRA device that names no GPU here is reported with its claim and why", "[unit]") {
  const auto node = fixture_inventory("nvidia-h200-x2");
  const CdiDeviceNodes cdi = [](const std::string& name) -> Result<std::vector<ContainerGpuDevice>> {
    return make_error("no CDI spec in /etc/cdi defines device " + name, ENOENT);
  };
  const DeviceAllocation nic{"net.example.com", {"node-a/vf-3"}, "ml/nic", {"example.com/net=vf-3"}};
  auto gpus = allocated_gpus({nic}, node, cdi);
  CHECK(gpus.gpu_ids.empty());
  CHECK(gpus.unknown ==
        Ids{"net.example.com/node-a/vf-3 (claim ml/nic): no CDI spec in /etc/cdi defines device example.com/net=vf-3"});
  // Without a CDI reader the device's name alone is read (a GPU-0123 name would do).
  gpus = allocated_gpus({nic}, node);
  REQUIRE(gpus.unknown.size() == 1);
  CHECK(gpus.unknown[0].find("no CDI spec directory is read") != std::string::npos);
}
