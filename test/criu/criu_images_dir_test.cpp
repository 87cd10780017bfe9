// Where CRIU's images are at createRuntime: the command lines runc and crun are run with (as containerd's shim,
// podman's and CRI-O's conmon run them), and a fake /proc under a temporary host root standing for the runtime
// process that runs the hook.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "criu/criu_images_dir.h"
#include "test/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

namespace {

constexpr const char* kContainerdImages =
    "/var/lib/containerd/io.containerd.grpc.v1.cri/containers/c0ffee/ctrd-restore/checkpoint";

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// /proc/<pid>/cmdline under `root`: the arguments NUL-separated, as the kernel shows them.
void fake_process(const fs::path& root, int pid, const std::vector<std::string>& argv) {
  std::string cmdline;
  for (const auto& arg : argv) cmdline += arg + '\0';
  write(root / "proc" / std::to_string(pid) / "cmdline", cmdline);
}

// A directory as CRIU leaves its images: inventory.img and the rest.
void criu_images(const fs::path& dir) {
  write(dir / "inventory.img", "criu");
  write(dir / "pages-1.img", "");
}

std::vector<std::string> containerd_restore(const std::string& images) {
  // containerd's runc shim (go-runc): global options, then `restore` with --image-path as its own argument.
  return {"runc", "--root", "/run/containerd/runc/k8s.io", "--log", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/c0ffee/log.json",
          "--log-format", "json", "restore", "--image-path", images, "--work-path", "/var/lib/containerd/work",
          "--bundle", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/c0ffee", "--detach", "c0ffee"};
}

}  // namespace

TEST_CASE("runtime command lines: the verb after the global options, and a restore's --image-path", "[unit]") {
  struct Case {
    std::vector<std::string> argv;
    const char* verb;
    const char* image_path;
  };
  const Case cases[] = {
      {containerd_restore("/x/checkpoint"), "restore", "/x/checkpoint"},
      {{"/usr/bin/crun", "--root=/run/crun", "restore", "--image-path=/y/checkpoint", "--bundle", "/b", "id"},
       "restore", "/y/checkpoint"},
      {{"runc", "--systemd-cgroup", "restore", "-image-path", "/z", "id"}, "restore", "/z"},
      {{"runc", "--root", "restore", "create", "--bundle", "/b", "id"}, "create", ""},   // "restore" is --root's value
      {{"runc", "restore", "--bundle", "/b", "id"}, "restore", ""},
      {{"runc", "--log", "/l", "create", "--image-path", "/not-a-restore", "id"}, "create", ""},
      {{"runc", "--debug"}, "", ""},
      {{}, "", ""},
  };
  for (const auto& c : cases) {
    const auto command = parse_runtime_command(c.argv);
    INFO((c.argv.empty() ? std::string("(empty)") : c.argv[0]) + " ... " + c.verb);
    CHECK(command.verb == c.verb);
    CHECK(command.image_path == c.image_path);
  }
  CHECK(parse_runtime_command({"/usr/local/sbin/runc", "create"}).program == "runc");
}

TEST_CASE("containerd's layout is found through the runtime's --image-path, not guessed from the bundle", "[unit]") {
  test::TempDir root;
  const HostRoot host(root.path);
  const fs::path bundle = root.path / "run/containerd/io.containerd.runtime.v2.task/k8s.io/c0ffee";
  fs::create_directories(bundle);
  criu_images(host.resolve(kContainerdImages));
  fake_process(root.path, 4242, containerd_restore(kContainerdImages));
  auto found = find_criu_images_dir(host, 4242, bundle);
  REQUIRE(found.ok());
  REQUIRE(found.value().has_value());
  CHECK(found.value()->path == host.resolve(kContainerdImages));
  CHECK(found.value()->found_by == "runc restore --image-path");

  SECTION("the same with crun's --image-path=DIR (CRI-O's layout: the container's dir, not its bundle)") {
    const std::string crio = "/var/lib/containers/storage/overlay-containers/c0ffee/userdata/checkpoint";
    criu_images(host.resolve(crio));
    fake_process(root.path, 4343, {"/usr/bin/crun", "--root=/run/crun", "restore", "--image-path=" + crio, "c0ffee"});
    auto crun = find_criu_images_dir(host, 4343, bundle);
    REQUIRE(crun.ok());
    REQUIRE(crun.value().has_value());
    CHECK(crun.value()->path == host.resolve(crio));
  }
}

TEST_CASE("a runtime creating (not restoring) a container has no images directory, whatever the bundle holds",
          "[unit]") {
  test::TempDir root;
  const HostRoot host(root.path);
  const fs::path bundle = root.path / "bundle";
  criu_images(bundle / "checkpoint");   // podman --keep left it: still not a restore
  fake_process(root.path, 77, {"runc", "--root", "/run/runc", "create", "--bundle", bundle.string(), "c1"});
  auto found = find_criu_images_dir(host, 77, bundle);
  REQUIRE(found.ok());
  CHECK_FALSE(found.value().has_value());
}

TEST_CASE("podman's <bundle>/checkpoint is the fallback where the runtime's command line says nothing", "[unit]") {
  test::TempDir root;
  const HostRoot host(root.path);
  const fs::path bundle = root.path / "bundle";
  fs::create_directories(bundle);
  SECTION("no such directory: not a restore") {
    auto found = find_criu_images_dir(host, 0, bundle);
    REQUIRE(found.ok());
    CHECK_FALSE(found.value().has_value());
  }
  SECTION("no runtime pid, or one whose /proc is gone") {
    criu_images(bundle / "checkpoint");
    for (int pid : {0, 999999}) {
      auto found = find_criu_images_dir(host, pid, bundle);
      REQUIRE(found.ok());
      REQUIRE(found.value().has_value());
      CHECK(found.value()->path == bundle / "checkpoint");
    }
  }
  SECTION("a parent that is no runtime (a shell, a wrapper)") {
    criu_images(bundle / "checkpoint");
    fake_process(root.path, 66, {"/bin/sh", "-c", "/usr/local/bin/gpuckpt-oci-hook createRuntime"});
    auto found = find_criu_images_dir(host, 66, bundle);
    REQUIRE(found.ok());
    REQUIRE(found.value().has_value());
    CHECK(found.value()->path == bundle / "checkpoint");
  }
  SECTION("a restore that names no --image-path") {
    criu_images(bundle / "checkpoint");
    fake_process(root.path, 88, {"runc", "restore", "--bundle", bundle.string(), "c1"});
    auto found = find_criu_images_dir(host, 88, bundle);
    REQUIRE(found.ok());
    REQUIRE(found.value().has_value());
    CHECK(found.value()->path == bundle / "checkpoint");
  }
}

TEST_CASE("an images directory that is not CRIU's own is refused with the reason", "[unit]") {
  test::TempDir root;
  const HostRoot host(root.path);
  const fs::path bundle = root.path / "bundle";
  fs::create_directories(bundle);
  auto refused = [&](const std::string& image_path, const std::string& says) {
    fake_process(root.path, 99, containerd_restore(image_path));
    auto found = find_criu_images_dir(host, 99, bundle);
    REQUIRE_FALSE(found.ok());
    INFO(found.error().message);
    CHECK(found.error().message.find(says) != std::string::npos);
  };
  SECTION("a symlink (to a directory someone else chose)") {
    criu_images(root.path / "elsewhere");
    fs::create_directories(host.resolve("/images").parent_path());
    fs::create_directory_symlink(root.path / "elsewhere", host.resolve("/images"));
    refused("/images", "symlink");
  }
  SECTION("no inventory.img: not CRIU's images") {
    fs::create_directories(host.resolve("/images"));
    refused("/images", "inventory.img");
  }
  SECTION("owned by another user") {
    if (::geteuid() != 0) SKIP("chown needs root");
    criu_images(host.resolve("/images"));
    REQUIRE(::chown(host.resolve("/images").c_str(), 4321, 4321) == 0);
    refused("/images", "uid 4321");
  }
  SECTION("relative or absent") {
    refused("relative/checkpoint", "relative");
    refused("/absent", "No such file");
  }
}
