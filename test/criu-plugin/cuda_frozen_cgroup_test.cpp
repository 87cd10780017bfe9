// thaw_frozen_cgroups on fixture /proc and cgroupfs trees: what CRIU killed mid-dump leaves frozen (the
// container's cgroup runc asked it to freeze) is thawed; what is not frozen is left untouched.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "criu-plugin/cuda/frozen_cgroup.h"

using namespace gpuckpt::cuda;
namespace fs = std::filesystem;

namespace {

struct FakeHost {
  fs::path root = fs::temp_directory_path() / ("gpuckpt-freezer-" + std::to_string(::getpid()));
  fs::path proc = root / "proc";
  fs::path cgroup = root / "cgroup";
  FakeHost() { fs::remove_all(root); }
  ~FakeHost() { fs::remove_all(root); }
  void process(int pid, const std::string& cgroup_lines) {
    fs::create_directories(proc / std::to_string(pid));
    std::ofstream(proc / std::to_string(pid) / "cgroup") << cgroup_lines;
  }
  void control(const fs::path& relative, const std::string& file, const std::string& value) {
    fs::create_directories(cgroup / relative);
    std::ofstream(cgroup / relative / file) << value << "\n";
  }
  std::string read(const fs::path& relative, const std::string& file) const {
    std::string value;
    std::ifstream(cgroup / relative / file) >> value;
    return value;
  }
};

}  // namespace

TEST_CASE("cgroup v2: the container's frozen cgroup is thawed, its unfrozen parent left alone", "[unit]") {
  FakeHost host;
  host.process(4100, "0::/machine.slice/libpod-abc.scope/container\n");
  host.control("machine.slice", "cgroup.freeze", "0");
  host.control("machine.slice/libpod-abc.scope", "cgroup.freeze", "1");     // what CRIU froze
  host.control("machine.slice/libpod-abc.scope/container", "cgroup.freeze", "0");
  auto lines = thaw_frozen_cgroups(4100, host.proc.string(), host.cgroup.string());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "thawed " + (host.cgroup / "machine.slice/libpod-abc.scope").string());
  CHECK(host.read("machine.slice/libpod-abc.scope", "cgroup.freeze") == "0");
  CHECK(host.read("machine.slice", "cgroup.freeze") == "0");
}

TEST_CASE("cgroup v2: a running process's cgroups are not written", "[unit]") {
  FakeHost host;
  host.process(4101, "0::/kubepods/pod1/ctr\n");
  host.control("kubepods/pod1/ctr", "cgroup.freeze", "0");
  host.control("kubepods/pod1", "cgroup.freeze", "0");
  CHECK(thaw_frozen_cgroups(4101, host.proc.string(), host.cgroup.string()).empty());
}

TEST_CASE("cgroup v1: a FROZEN freezer cgroup is thawed; other controllers are ignored", "[unit]") {
  FakeHost host;
  host.process(4102, "12:memory:/docker/abc\n7:freezer:/docker/abc\n1:name=systemd:/docker/abc\n");
  host.control("freezer/docker/abc", "freezer.state", "FROZEN");
  host.control("memory/docker/abc", "freezer.state", "FROZEN");   // not a freezer hierarchy: never touched
  auto lines = thaw_frozen_cgroups(4102, host.proc.string(), host.cgroup.string());
  REQUIRE(lines.size() == 1);
  CHECK(host.read("freezer/docker/abc", "freezer.state") == "THAWED");
  CHECK(host.read("memory/docker/abc", "freezer.state") == "FROZEN");
}

TEST_CASE("a cgroup outside the guardian's cgroup namespace is reported, never followed", "[unit]") {
  FakeHost host;
  host.process(4103, "0::/../../escape\n");
  host.control("escape", "cgroup.freeze", "1");
  auto lines = thaw_frozen_cgroups(4103, host.proc.string(), host.cgroup.string());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("outside this cgroup namespace") != std::string::npos);
  CHECK(host.read("escape", "cgroup.freeze") == "1");
}

TEST_CASE("a process that is gone leaves nothing to thaw", "[unit]") {
  FakeHost host;
  CHECK(thaw_frozen_cgroups(4104, host.proc.string(), host.cgroup.string()).empty());
}
