#include <catch2/catch_test_macros.hpp>

#include <nlohmann/json.hpp>

#include "gpu/gpu_detect.h"

using gpuckpt::GpuDevice;
using gpuckpt::GpuVendor;
using gpuckpt::NodeInventory;
using gpuckpt::detect_gpu_use;
using gpuckpt::resolve_gpus;
using nlohmann::json;

namespace {

// The shape podman hands a hook (trimmed from a real `podman run --device /dev/null:/dev/nvidia0 ...`).
json podman_spec() {
  return json::parse(R"({
    "ociVersion": "1.0.2-dev",
    "process": {"env": ["container=podman", "NVIDIA_VISIBLE_DEVICES=0", "PATH=/usr/bin", "HOME=/"]},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    "annotations": {"io.container.manager": "libpod"},
    "linux": {"devices": [
      {"path": "/dev/nvidia0", "type": "c", "major": 1, "minor": 3, "fileMode": 8630, "uid": 0, "gid": 0},
      {"path": "/dev/kfd", "type": "c", "major": 1, "minor": 5, "fileMode": 8630, "uid": 0, "gid": 0}]}
  })");
}

NodeInventory two_nvidia_gpus() {
  NodeInventory inv;
  for (int i = 0; i < 2; ++i) {
    GpuDevice g;
    g.id = "GPU-" + std::to_string(i) + "aaaaaaa";
    g.uuid = g.id;
    g.vendor = GpuVendor::Nvidia;
    g.device_minor = i;
    g.device_paths = {"/dev/nvidia" + std::to_string(i)};
    inv.gpus.push_back(g);
  }
  return inv;
}

gpuckpt::DeviceNumberLookup table(std::map<std::string, std::pair<std::uint32_t, std::uint32_t>> numbers) {
  return [numbers](const std::string& path) -> gpuckpt::Result<std::pair<std::uint32_t, std::uint32_t>> {
    auto it = numbers.find(path);
    if (it == numbers.end()) return gpuckpt::make_error("no " + path);
    return it->second;
  };
}

}  // namespace

TEST_CASE("a container with GPU device nodes and NVIDIA_VISIBLE_DEVICES is detected", "[unit]") {
  const auto use = detect_gpu_use(podman_spec());
  REQUIRE(use.uses_gpu());
  REQUIRE(use.devices.size() == 2);
  CHECK(use.devices[0].container_path == "/dev/nvidia0");
  CHECK(use.devices[0].major == 1);
  CHECK(use.devices[0].minor == 3);
  CHECK(use.devices[1].container_path == "/dev/kfd");
  CHECK(use.gpu_env.at("NVIDIA_VISIBLE_DEVICES") == "0");
}

TEST_CASE("plain containers are not GPU containers", "[unit]") {
  auto spec = podman_spec();
  spec["linux"]["devices"] = json::array({{{"path", "/dev/fuse"}, {"type", "c"}, {"major", 10}, {"minor", 229}}});
  spec["process"]["env"] = json::array({"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"});
  CHECK_FALSE(detect_gpu_use(spec).uses_gpu());
  CHECK_FALSE(detect_gpu_use(json::object()).uses_gpu());
  CHECK_FALSE(detect_gpu_use(json("not an object")).uses_gpu());
  spec["linux"] = "garbage";   // malformed sections never throw
  CHECK_FALSE(detect_gpu_use(spec).uses_gpu());
}

TEST_CASE("GPU nodes bind-mounted and CDI annotations are detected", "[unit]") {
  json spec = {{"mounts", json::array({{{"destination", "/dev/dri/renderD128"}, {"source", "/dev/dri/renderD128"}}})},
               {"annotations", {{"cdi.k8s.io/nvidia-gpu", "nvidia.com/gpu=GPU-1aaaaaaa"}}}};
  const auto use = detect_gpu_use(spec);
  REQUIRE(use.devices.size() == 1);
  CHECK(use.devices[0].container_path == "/dev/dri/renderD128");
  REQUIRE(use.cdi_devices == std::vector<std::string>{"nvidia.com/gpu=GPU-1aaaaaaa"});
  auto resolved = use;
  CHECK(resolve_gpus(resolved, two_nvidia_gpus(), table({})) == std::vector<std::string>{"GPU-1aaaaaaa"});
}

TEST_CASE("GPUs resolve by device numbers, by path and by NVIDIA_VISIBLE_DEVICES", "[unit]") {
  const auto inv = two_nvidia_gpus();
  SECTION("major:minor of the host node wins over the container path") {
    auto use = detect_gpu_use(podman_spec());
    use.gpu_env.clear();
    use.devices[0].container_path = "/dev/nvidia7";   // renamed inside the container
    use.devices[0].major = 195;
    use.devices[0].minor = 1;
    const auto ids = resolve_gpus(use, inv, table({{"/dev/nvidia0", {195, 0}}, {"/dev/nvidia1", {195, 1}}}));
    CHECK(ids == std::vector<std::string>{"GPU-1aaaaaaa"});
    CHECK(use.devices[0].gpu_id == "GPU-1aaaaaaa");
    CHECK(use.devices[1].gpu_id.empty());   // /dev/kfd is shared, never one GPU
  }
  SECTION("an alias at a GPU's path (test containers) resolves by path") {
    auto use = detect_gpu_use(podman_spec());
    const auto ids = resolve_gpus(use, inv, table({{"/dev/nvidia0", {195, 0}}, {"/dev/nvidia1", {195, 1}}}));
    CHECK(ids == std::vector<std::string>{"GPU-0aaaaaaa"});
    CHECK(use.devices[0].gpu_id == "GPU-0aaaaaaa");
  }
  SECTION("NVIDIA_VISIBLE_DEVICES=all") {
    json spec = {{"process", {{"env", json::array({"NVIDIA_VISIBLE_DEVICES=all"})}}}};
    auto use = detect_gpu_use(spec);
    CHECK(resolve_gpus(use, inv, table({})) == std::vector<std::string>{"GPU-0aaaaaaa", "GPU-1aaaaaaa"});
  }
  SECTION("a node without GPUs resolves nothing but keeps the devices") {
    auto use = detect_gpu_use(podman_spec());
    CHECK(resolve_gpus(use, NodeInventory{}, table({})).empty());
    CHECK(use.devices.size() == 2);
  }
}
