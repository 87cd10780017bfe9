// thaw_frozen_cgroups and TemporaryThaw on fixture /proc and cgroupfs trees: what holds a process frozen (the
// container's cgroup its runtime froze) is thawed; what is not frozen is left untouched; a temporary thaw
// freezes exactly what it thawed again, on every path.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "criu-plugin/cuda/frozen_cgroup.h"

using namespace gpuckpt;
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
  Result<TemporaryThaw> thaw(int pid, int settle_ms) const {
    return TemporaryThaw::begin(pid, std::chrono::milliseconds(settle_ms), proc.string(), cgroup.string());
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

// TemporaryThaw: what PAUSE_DEVICES does when containerd has paused the container (its cgroup frozen) before
// CRIU 4.1 calls the hook. The fixture's cgroup.events stands for the kernel's report after the thaw.
TEST_CASE("cgroup v2: the container's frozen cgroup is thawed for the lock and only it is frozen again",
          "[unit]") {
  FakeHost host;
  host.process(4200, "0::/k8s.io/ctr\n");
  host.control("k8s.io", "cgroup.freeze", "0");
  host.control("k8s.io/ctr", "cgroup.freeze", "1");   // runc pause
  host.control("k8s.io/ctr", "cgroup.events", "populated 1\nfrozen 0");
  {
    auto thaw = host.thaw(4200, 100);
    REQUIRE(thaw);
    CHECK(thaw->thawed_any());
    CHECK(thaw->describe() == (host.cgroup / "k8s.io/ctr").string() + " (cgroup v2)");
    CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "0");
    REQUIRE(thaw->refreeze());
    CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "1");
    host.control("k8s.io/ctr", "cgroup.freeze", "0");   // someone thaws it later: the thaw is over, it stays so
    REQUIRE(thaw->refreeze());
    CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "0");
  }
  CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "0");
  CHECK(host.read("k8s.io", "cgroup.freeze") == "0");   // never frozen, never written to frozen
}

TEST_CASE("a thaw that is not ended explicitly freezes again when it goes out of scope", "[unit]") {
  FakeHost host;
  host.process(4201, "0::/k8s.io/ctr\n");
  host.control("k8s.io/ctr", "cgroup.freeze", "1");
  host.control("k8s.io/ctr", "cgroup.events", "frozen 0");
  {
    auto thaw = host.thaw(4201, 100);
    REQUIRE(thaw);
    CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "0");
  }
  CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "1");
}

TEST_CASE("a running process is not touched", "[unit]") {
  FakeHost host;
  host.process(4202, "0::/k8s.io/ctr\n");
  host.control("k8s.io/ctr", "cgroup.freeze", "0");
  host.control("k8s.io/ctr", "cgroup.events", "frozen 0");
  auto thaw = host.thaw(4202, 100);
  REQUIRE(thaw);
  CHECK_FALSE(thaw->thawed_any());
  REQUIRE(thaw->refreeze());
  CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "0");
}

TEST_CASE("a process that stays frozen after the thaw is an error, and its cgroup is frozen again", "[unit]") {
  FakeHost host;
  host.process(4203, "0::/k8s.io/ctr\n");
  host.control("k8s.io/ctr", "cgroup.freeze", "1");
  host.control("k8s.io/ctr", "cgroup.events", "frozen 1");   // the kernel keeps it frozen
  auto thaw = host.thaw(4203, 20);
  REQUIRE_FALSE(thaw);
  CHECK(thaw.error().message.find("pid 4203 stays frozen 20 ms after " + (host.cgroup / "k8s.io/ctr").string()) !=
        std::string::npos);
  CHECK(host.read("k8s.io/ctr", "cgroup.freeze") == "1");
}

TEST_CASE("a control that cannot be written fails the thaw and freezes again what was thawed", "[unit]") {
  FakeHost host;
  host.process(4204, "0::/pod/ctr\n");
  host.control("pod/ctr", "cgroup.freeze", "1");
  host.control("pod/ctr", "cgroup.events", "frozen 0");
  host.control("elsewhere", "freeze-state", "1");
  fs::create_symlink(host.cgroup / "elsewhere/freeze-state", host.cgroup / "pod/cgroup.freeze");   // O_NOFOLLOW
  auto thaw = host.thaw(4204, 100);
  REQUIRE_FALSE(thaw);
  CHECK(thaw.error().message.find("cannot thaw " + (host.cgroup / "pod").string() + " (cgroup v2), which holds pid "
                                  "4204 frozen") != std::string::npos);
  CHECK(host.read("pod/ctr", "cgroup.freeze") == "1");
  CHECK(host.read("elsewhere", "freeze-state") == "1");
}

TEST_CASE("cgroup v1: the freezer cgroup is THAWED for the lock and FROZEN again", "[unit]") {
  FakeHost host;
  host.process(4205, "4:freezer:/kubepods/pod1/ctr\n2:cpu,cpuacct:/kubepods/pod1/ctr\n");
  host.control("freezer/kubepods/pod1/ctr", "freezer.state", "FROZEN");
  {
    auto thaw = host.thaw(4205, 100);
    REQUIRE(thaw);
    CHECK(thaw->describe() == (host.cgroup / "freezer/kubepods/pod1/ctr").string() + " (cgroup v1 freezer)");
    CHECK(host.read("freezer/kubepods/pod1/ctr", "freezer.state") == "THAWED");
  }
  CHECK(host.read("freezer/kubepods/pod1/ctr", "freezer.state") == "FROZEN");
}

TEST_CASE("a cgroup outside this cgroup namespace is an error for the thaw, never followed", "[unit]") {
  FakeHost host;
  host.process(4206, "0::/../../escape\n");
  host.control("escape", "cgroup.freeze", "1");
  auto thaw = host.thaw(4206, 20);
  REQUIRE_FALSE(thaw);
  CHECK(thaw.error().message.find("lies outside this cgroup namespace") != std::string::npos);
  CHECK(host.read("escape", "cgroup.freeze") == "1");
}
