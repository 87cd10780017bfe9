// ensure_gpu_nodes on a scratch root: the target GPU's /dev/nvidia<minor> is made where a restored container's
// /dev lacks it, an existing right node is kept, and nothing is replaced or made through a symlinked /dev.
// mknod needs CAP_MKNOD: the case is skipped without it.
#include <catch2/catch_test_macros.hpp>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "criu-plugin/cuda/device_nodes.h"

using namespace gpuckpt::cuda;
namespace fs = std::filesystem;

namespace {

struct Root {
  fs::path path = fs::temp_directory_path() / ("gpuckpt-devroot-" + std::to_string(::getpid()));
  Root() {
    fs::remove_all(path);
    fs::create_directories(path / "dev");
  }
  ~Root() { fs::remove_all(path); }
  std::string node(const std::string& name) const { return (path / "dev" / name).string(); }
};

bool is_device(const std::string& path, unsigned maj, unsigned min) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(maj, min) &&
         (st.st_mode & 0777) == 0666;
}

bool can_mknod() {
  const std::string probe = (fs::temp_directory_path() / ("gpuckpt-mknod-" + std::to_string(::getpid()))).string();
  const bool ok = ::mknod(probe.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0;
  ::unlink(probe.c_str());
  return ok;
}

}  // namespace

TEST_CASE("the target GPU's node is made in the restored root where its /dev lacks it", "[unit]") {
  if (!can_mknod()) SKIP("no CAP_MKNOD here");
  Root root;
  // The checkpoint's /dev: the source GPU's node (GPU 1), restored onto GPU 0.
  REQUIRE(::mknod(root.node("nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)) == 0);
  auto made = ensure_gpu_nodes(root.path.string(), {{0, 195}});
  REQUIRE(made.ok());
  CHECK(made.value() == 1);
  CHECK(is_device(root.node("nvidia0"), 195, 0));
  CHECK(fs::exists(root.node("nvidia1")));   // left alone: the container's cgroup decides what it may open

  SECTION("made once: a second call finds it and makes nothing") {
    auto again = ensure_gpu_nodes(root.path.string(), {{0, 195}, {1, 195}});
    REQUIRE(again.ok());
    CHECK(again.value() == 0);
  }
  SECTION("a node of that name that is another device is an error naming it, and stays") {
    REQUIRE(::mknod(root.node("nvidia2").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
    auto wrong = ensure_gpu_nodes(root.path.string(), {{2, 195}});
    REQUIRE_FALSE(wrong.ok());
    CHECK(wrong.error().message.find("/dev/nvidia2 is device 1:3") != std::string::npos);
    struct stat st {};
    REQUIRE(::lstat(root.node("nvidia2").c_str(), &st) == 0);
    CHECK(st.st_rdev == makedev(1, 3));
  }
  SECTION("a symlink at that name is not followed or replaced") {
    fs::create_symlink("/dev/null", root.node("nvidia3"));
    auto linked = ensure_gpu_nodes(root.path.string(), {{3, 195}});
    REQUIRE_FALSE(linked.ok());
    CHECK(linked.error().message.find("not a character device") != std::string::npos);
    CHECK(fs::is_symlink(root.node("nvidia3")));
  }
}

TEST_CASE("a /dev that is a symlink is refused: nothing is made where it points", "[unit]") {
  Root root;
  const fs::path elsewhere = root.path / "elsewhere";
  fs::create_directories(elsewhere);
  fs::remove_all(root.path / "dev");
  fs::create_directory_symlink(elsewhere, root.path / "dev");
  auto made = ensure_gpu_nodes(root.path.string(), {{0, 195}});
  REQUIRE_FALSE(made.ok());
  CHECK(made.error().message.find("/dev is not a directory the plugin may use") != std::string::npos);
  CHECK(fs::is_empty(elsewhere));
  // No nodes asked: nothing is touched, not even looked at.
  CHECK(ensure_gpu_nodes((root.path / "missing").string(), {}).value() == 0);
}
