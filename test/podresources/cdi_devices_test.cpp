// cdi_device_nodes: a DRA driver's CDI device name -> the device nodes its spec gives, on spec files written here.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>

#include <fstream>

#include "podresources/cdi_devices.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt;
using namespace gpuckpt::test;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

// A spec as the NVIDIA DRA driver writes one per claim (JSON), device-level node plus spec-wide shared nodes.
std::string claim_spec_json(const std::string& device, const std::string& node, const std::string& numbers = "") {
  return R"({"cdiVersion": "0.6.0", "kind": "k8s.gpu.example.com/device",
  "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
  "devices": [{"name": ")" + device + R"(", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=1"],
    "deviceNodes": [{"path": ")" + node + R"(", "hostPath": ")" + node + "\"" + numbers + R"(}]}}]})";
}

const DeviceNumberLookup kLookup = [](const std::string& path) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
  if (path == "/dev/nvidia1") return std::pair<std::uint32_t, std::uint32_t>{195, 1};
  return make_error("no " + path, ENOENT);
};

std::vector<ContainerGpuDevice> nodes_ok(const CdiSpecDirs& dirs, const std::string& name) {
  auto nodes = cdi_device_nodes(dirs, name, kLookup);
  INFO((nodes.ok() ? std::string() : nodes.error().message));
  REQUIRE(nodes.ok());
  return *nodes;
}

std::string error_of(const CdiSpecDirs& dirs, const std::string& name) {
  auto nodes = cdi_device_nodes(dirs, name, kLookup);
  REQUIRE_FALSE(nodes.ok());
  return nodes.error().message;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("CDI: a device's own nodes, numbers from the spec or from the host's node", "[unit]") {
  TempDir dir("gpuckpt-cdi");
  const CdiSpecDirs dirs{{dir.path / "etc", dir.path / "run"}};
  write(dir.path / "run/claim-a.json", claim_spec_json("uid-a-gpu-1", "/dev/nvidia1"));
  write(dir.path / "run/claim-b.json", claim_spec_json("uid-b-gpu-3", "/dev/nvidia3", R"(, "major": 195, "minor": 3)"));

  auto nodes = nodes_ok(dirs, "k8s.gpu.example.com/device=uid-a-gpu-1");
  REQUIRE(nodes.size() == 1);   // the spec-wide /dev/nvidiactl names no GPU: not here
  CHECK(nodes[0].container_path == "/dev/nvidia1");
  CHECK(nodes[0].major == 195);
  CHECK(nodes[0].minor == 1);
  nodes = nodes_ok(dirs, "k8s.gpu.example.com/device=uid-b-gpu-3");
  REQUIRE(nodes.size() == 1);
  CHECK((nodes[0].major == 195 && nodes[0].minor == 3));

  // Same name, other kind: not this device.
  CHECK(contains(error_of(dirs, "other.example.com/device=uid-a-gpu-1"), "defines device other.example.com/device=uid-a-gpu-1"));
}

TEST_CASE("CDI: YAML specs, and a later directory wins over an earlier one", "[unit]") {
  TempDir dir("gpuckpt-cdi");
  const CdiSpecDirs dirs{{dir.path / "etc", dir.path / "run"}};
  write(dir.path / "etc/nvidia.yaml", R"(cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      major: 195
      minor: 0
- name: all
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia0}
    - {path: /dev/nvidia1}
)");
  auto nodes = nodes_ok(dirs, "nvidia.com/gpu=0");
  REQUIRE(nodes.size() == 1);
  CHECK((nodes[0].container_path == "/dev/nvidia0" && nodes[0].major == 195 && nodes[0].minor == 0));
  CHECK(nodes_ok(dirs, "nvidia.com/gpu=all").size() == 2);

  write(dir.path / "run/nvidia.json", R"({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}]})");
  nodes = nodes_ok(dirs, "nvidia.com/gpu=0");
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].container_path == "/dev/nvidia1");
}

TEST_CASE("CDI: conflicts, links, oversized and malformed specs and names are errors naming the file", "[unit]") {
  TempDir dir("gpuckpt-cdi");
  const CdiSpecDirs dirs{{dir.path / "run"}};
  write(dir.path / "run/a.json", claim_spec_json("dup", "/dev/nvidia1"));
  write(dir.path / "run/b.json", claim_spec_json("dup", "/dev/nvidia2"));
  const std::string dup = error_of(dirs, "k8s.gpu.example.com/device=dup");
  CHECK(contains(dup, "defined twice in " + (dir.path / "run").string()));
  CHECK(contains(dup, "a.json and b.json"));
  fs::remove(dir.path / "run/b.json");

  fs::create_symlink(dir.path / "run/a.json", dir.path / "run/c.json");
  CHECK(contains(error_of(dirs, "k8s.gpu.example.com/device=dup"), "c.json is a symbolic link"));
  fs::remove(dir.path / "run/c.json");

  write(dir.path / "run/big.json", std::string(kCdiMaxSpecBytes + 1, ' '));
  CHECK(contains(error_of(dirs, "k8s.gpu.example.com/device=dup"), "big.json is"));
  fs::remove(dir.path / "run/big.json");

  write(dir.path / "run/broken.yaml", "kind: [unclosed\n");
  CHECK(contains(error_of(dirs, "k8s.gpu.example.com/device=dup"), "broken.yaml is not valid YAML"));
  fs::remove(dir.path / "run/broken.yaml");

  write(dir.path / "run/escape.json", claim_spec_json("escape", "/dev/../etc/shadow"));
  CHECK(contains(error_of(dirs, "k8s.gpu.example.com/device=escape"), "is not a canonical path under /dev"));
  fs::remove(dir.path / "run/escape.json");

  // Files that are not specs by name, and directories, are not read.
  write(dir.path / "run/notes.txt", "{");
  fs::create_directories(dir.path / "run/sub.json");
  CHECK(nodes_ok(dirs, "k8s.gpu.example.com/device=dup").size() == 1);

  for (const std::string bad : {"", "nvidia.com/gpu", "nvidia.com=0", "/gpu=0", "nvidia.com/gpu=", "a/b=c d", "a/b=c/d"})
    CHECK(contains(error_of(dirs, bad), "is not a fully qualified CDI device name"));
}

TEST_CASE("CDI: a device no spec defines names the directories and what to check", "[unit]") {
  TempDir dir("gpuckpt-cdi");
  const CdiSpecDirs dirs{{dir.path / "etc", dir.path / "absent"}};
  fs::create_directories(dir.path / "etc");
  const std::string message = error_of(dirs, "k8s.gpu.example.com/device=uid-gpu-0");
  CHECK(contains(message, (dir.path / "etc").string() + ", " + (dir.path / "absent").string()));
  CHECK(contains(message, "--cdi-spec-dir"));
}
