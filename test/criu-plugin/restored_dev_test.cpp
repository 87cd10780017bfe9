// The restored container's GPU nodes (criu-plugin/restored_dev.h): what the plan makes of a restored /dev (pure,
// a scenario table), then the same on a scratch /dev (mknod needs CAP_MKNOD: those cases are skipped without it),
// the plan file CRIU's images directory holds, and what is refused.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/magic.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "criu-plugin/restored_dev.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt;
using namespace gpuckpt::plugin;
namespace fs = std::filesystem;

namespace {

FoundNode chr(std::uint32_t maj, std::uint32_t min, std::uint32_t mode = 0666, std::uint32_t gid = 0) {
  return FoundNode{true, maj, min, mode, 0, gid};
}

std::vector<std::string> made_names(const DevChanges& c) {
  std::vector<std::string> names;
  for (const auto& m : c.make) names.push_back(m.name + " " + std::to_string(m.major) + ":" + std::to_string(m.minor));
  return names;
}

bool can_mknod() {
  const std::string probe = (fs::temp_directory_path() / ("gpuckpt-mknod-" + std::to_string(::getpid()))).string();
  const bool ok = ::mknod(probe.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0;
  ::unlink(probe.c_str());
  return ok;
}

struct Node {
  bool exists = false;
  bool char_device = false;
  unsigned maj = 0, min = 0, mode = 0, gid = 0;
  struct timespec mtime {};
  ino_t ino = 0;
};

Node node_at(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  return {true, S_ISCHR(st.st_mode), major(st.st_rdev), minor(st.st_rdev), st.st_mode & 07777u, st.st_gid, st.st_mtim,
          st.st_ino};
}

void make_node(const fs::path& path, unsigned maj, unsigned min, unsigned mode = 0666, unsigned gid = 0) {
  REQUIRE(::mknod(path.c_str(), S_IFCHR | 0600, makedev(maj, min)) == 0);
  REQUIRE(::chown(path.c_str(), 0, gid) == 0);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

}  // namespace

TEST_CASE("per-GPU NVIDIA nodes are nvidia<N>; the shared ones are not", "[unit]") {
  for (const char* name : {"nvidia0", "nvidia7", "nvidia255"}) CHECK(is_nvidia_gpu_node(name));
  for (const char* name : {"nvidia", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia0x",
                           "nvidia1234", "nvidia-caps", "dri/renderD128", "xnvidia0"})
    CHECK_FALSE(is_nvidia_gpu_node(name));
}

TEST_CASE("what the plan makes of a restored /dev", "[unit]") {
  struct Case {
    const char* what;
    std::map<std::string, FoundNode> found;
    std::vector<PlannedNode> planned;
    std::vector<std::string> made;     // "name major:minor"
    std::vector<std::string> removed;
  };
  const FoundNode ctl = chr(195, 255), uvm = chr(511, 0), null = chr(1, 3);
  const std::vector<Case> cases{
      {"GPU 0 -> GPU 1: the source's node goes, the target's comes under its own name",
       {{"nvidia0", chr(195, 0)}, {"nvidiactl", ctl}, {"nvidia-uvm", uvm}, {"null", null}},
       {{"nvidia0", "nvidia1", 195, 1}},
       {"nvidia1 195:1"},
       {"nvidia0"}},
      {"the CPU tests' simulated GPUs: GPU 0 is /dev/null's numbers, GPU 1 /dev/zero's",
       {{"nvidia0", chr(1, 3)}},
       {{"nvidia0", "nvidia1", 1, 5}},
       {"nvidia1 1:5"},
       {"nvidia0"}},
      {"two NVIDIA GPUs swapped: a node's name is its GPU's minor, so /dev is right as it is",
       {{"nvidia0", chr(195, 0)}, {"nvidia1", chr(195, 1)}},
       {{"nvidia0", "nvidia1", 195, 1}, {"nvidia1", "nvidia0", 195, 0}},
       {},
       {}},
      {"two GPUs onto two others of another node",
       {{"nvidia0", chr(195, 0)}, {"nvidia1", chr(195, 1)}, {"nvidiactl", ctl}},
       {{"nvidia0", "nvidia3", 195, 3}, {"nvidia1", "nvidia2", 195, 2}},
       {"nvidia2 195:2", "nvidia3 195:3"},
       {"nvidia0", "nvidia1"}},
      {"a GPU the restored container was not given is dropped",
       {{"nvidia0", chr(195, 0)}, {"nvidia5", chr(195, 5)}},
       {{"nvidia0", "nvidia1", 195, 1}},
       {"nvidia1 195:1"},
       {"nvidia0", "nvidia5"}},
      {"restored where it ran (same numbers): nothing changes",
       {{"nvidia0", chr(195, 0)}, {"nvidiactl", ctl}},
       {{"nvidia0", "nvidia0", 195, 0}},
       {},
       {}},
      {"no plan: nothing changes, not even a stray nvidia<N>",
       {{"nvidia0", chr(195, 0)}, {"nvidia3", chr(195, 3)}},
       {},
       {},
       {}},
      {"AMD render nodes keep the checkpoint's names and take the targets' numbers; NVIDIA nodes stay",
       {{"dri/renderD128", chr(226, 128)}, {"dri/renderD129", chr(226, 129)}, {"nvidia0", chr(195, 0)}},
       {{"dri/renderD128", "dri/renderD128", 226, 129}, {"dri/renderD129", "dri/renderD129", 226, 128}},
       {"dri/renderD128 226:129", "dri/renderD129 226:128"},
       {}},
      {"a node the restored /dev lacks altogether is made",
       {{"nvidiactl", ctl}},
       {{"nvidia1", "nvidia0", 195, 0}},
       {"nvidia0 195:0"},
       {}},
      {"an image the agent already rewrote: right as it is",
       {{"nvidia1", chr(1, 5)}, {"nvidiactl", ctl}},
       {{"nvidia0", "nvidia1", 1, 5}},
       {},
       {}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto changes = plan_dev_changes(c.found, c.planned);
    REQUIRE(changes.ok());
    CHECK(made_names(*changes) == c.made);
    CHECK(changes->remove == c.removed);
  }
}

TEST_CASE("a new node keeps the mode and owner of the node the checkpoint had", "[unit]") {
  auto changes = plan_dev_changes({{"nvidia0", chr(195, 0, 0660, 44)}, {"nvidia1", chr(195, 1, 0600, 0)}},
                                  {{"nvidia0", "nvidia2", 195, 2}, {"nvidia1", "nvidia1", 195, 7}});
  REQUIRE(changes.ok());
  REQUIRE(changes->make.size() == 2);
  CHECK(changes->make[0].name == "nvidia1");   // renumbered in place: its own mode
  CHECK(changes->make[0].mode == 0600);
  CHECK(changes->make[1].name == "nvidia2");
  CHECK(changes->make[1].mode == 0660);
  CHECK(changes->make[1].gid == 44);
  auto fresh = plan_dev_changes({}, {{"nvidia0", "nvidia1", 195, 1}});
  REQUIRE(fresh.ok());
  REQUIRE(fresh->make.size() == 1);
  CHECK(fresh->make[0].mode == 0666);
  CHECK(fresh->make[0].uid == 0);
}

TEST_CASE("a restored /dev with something other than a device at a GPU node's name is left alone", "[unit]") {
  const FoundNode link{false, 0, 0, 0777, 0, 0};
  for (const char* name : {"nvidia1", "nvidia0", "nvidia4"}) {
    INFO(name);
    std::map<std::string, FoundNode> found{{name, link}};
    found.emplace("nvidia0", chr(195, 0));   // where the name is nvidia0 itself, the link stays
    auto refused = plan_dev_changes(found, {{"nvidia0", "nvidia1", 195, 1}});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find(std::string("/dev/") + name + " in the restored /dev is not a character device") !=
          std::string::npos);
  }
  // Not a GPU node's name: none of the plan's business.
  CHECK(plan_dev_changes({{"nvidia0", chr(195, 0)}, {"fd", link}}, {{"nvidia0", "nvidia1", 195, 1}}).ok());
  auto twice = plan_dev_changes({}, {{"nvidia0", "nvidia1", 195, 1}, {"nvidia2", "nvidia1", 195, 1}});
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error().message.find("two nodes of the restore plan go to /dev/nvidia1") != std::string::npos);
}

TEST_CASE("a plan's nodes: numbers from the plan, else from the host's node", "[unit]") {
  RestorePlan plan;
  plan.id = "rp-1";
  plan.devices.push_back({"/dev/nvidia0", "/dev/nvidia1", "GPU-a", "GPU-b", "/dev/nvidia1", std::make_pair(1u, 5u)});
  plan.devices.push_back({"/dev/dri/renderD128", "/dev/dri/renderD129", "a", "b", "", std::nullopt});
  std::vector<std::string> asked;
  auto nodes = planned_nodes(plan, [&](const std::string& path) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    asked.push_back(path);
    return std::make_pair(226u, 129u);
  });
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == 2);
  CHECK((*nodes)[0].source == "nvidia0");
  CHECK((*nodes)[0].target == "nvidia1");
  CHECK((*nodes)[0].major == 1);
  CHECK((*nodes)[0].minor == 5);
  CHECK((*nodes)[1].target == "dri/renderD128");
  CHECK((*nodes)[1].minor == 129);
  CHECK(asked == std::vector<std::string>{"/dev/dri/renderD129"});
  auto missing = planned_nodes(plan, [](const std::string&) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    return make_error("cannot stat device node /dev/dri/renderD129: No such file or directory", ENOENT);
  });
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("restore plan rp-1 gives no numbers for /dev/dri/renderD129") == 0);
}

TEST_CASE("a scratch /dev is given the plan's GPU nodes, and every other entry is left as it was", "[unit]") {
  if (!can_mknod()) SKIP("no CAP_MKNOD here");
  test::TempDir dev("gpuckpt-restored-dev");
  make_node(dev.path / "nvidia0", 1, 3, 0620, 5);   // the simulated GPU 0 of the CPU tests
  make_node(dev.path / "nvidia7", 1, 7);            // a GPU the restored container was not given
  make_node(dev.path / "nvidiactl", 195, 255);
  make_node(dev.path / "null", 1, 3);
  std::ofstream(dev.path / "keep.txt") << "kept";
  fs::create_symlink("/proc/self/fd", dev.path / "fd");
  const Node ctl = node_at(dev.path / "nvidiactl"), null = node_at(dev.path / "null"),
             keep = node_at(dev.path / "keep.txt"), fd = node_at(dev.path / "fd");

  const Node gpu0 = node_at(dev.path / "nvidia0");
  auto no_plan = reconcile_dev(dev.fd, {}, 1000);
  REQUIRE(no_plan.ok());
  CHECK(no_plan->empty());
  CHECK(node_at(dev.path / "nvidia0").ino == gpu0.ino);
  CHECK(node_at(dev.path / "nvidia7").exists);

  auto changed = reconcile_dev(dev.fd, {{"nvidia0", "nvidia1", 1, 5}}, 1000);
  REQUIRE(changed.ok());
  CHECK(made_names(*changed) == std::vector<std::string>{"nvidia1 1:5"});
  const Node gpu1 = node_at(dev.path / "nvidia1");
  CHECK(gpu1.char_device);
  CHECK(gpu1.maj == 1);
  CHECK(gpu1.min == 5);
  CHECK(gpu1.mode == 0620);
  CHECK(gpu1.gid == 5);
  CHECK_FALSE(node_at(dev.path / "nvidia0").exists);
  CHECK_FALSE(node_at(dev.path / "nvidia7").exists);
  const std::vector<std::pair<std::string, Node>> untouched{{"nvidiactl", ctl}, {"null", null}, {"keep.txt", keep},
                                                            {"fd", fd}};
  for (const auto& [name, before] : untouched) {
    INFO(name);
    const Node now = node_at(dev.path / name);
    CHECK(now.ino == before.ino);
    CHECK(now.mtime.tv_sec == before.mtime.tv_sec);
    CHECK(now.mtime.tv_nsec == before.mtime.tv_nsec);
  }
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dev.path)) {
    CHECK(e.path().filename().string().rfind(".gpuckpt-", 0) != 0);
    ++entries;
  }
  CHECK(entries == 5);   // nvidia1, nvidiactl, null, keep.txt, fd

  SECTION("a second pass finds it right and changes nothing") {
    auto again = reconcile_dev(dev.fd, {{"nvidia0", "nvidia1", 1, 5}}, 1000);
    REQUIRE(again.ok());
    CHECK(again->empty());
    CHECK(node_at(dev.path / "nvidia1").ino == gpu1.ino);
  }
}

TEST_CASE("render nodes are renumbered in /dev/dri; a /dev/dri that is a symlink is refused", "[unit]") {
  if (!can_mknod()) SKIP("no CAP_MKNOD here");
  test::TempDir dev("gpuckpt-restored-dev");
  fs::create_directory(dev.path / "dri");
  make_node(dev.path / "dri/renderD128", 226, 128, 0660, 44);
  auto changed = reconcile_dev(dev.fd, {{"dri/renderD128", "dri/renderD128", 226, 129}}, 1000);
  REQUIRE(changed.ok());
  const Node render = node_at(dev.path / "dri/renderD128");
  CHECK(render.min == 129);
  CHECK(render.mode == 0660);
  CHECK(render.gid == 44);

  test::TempDir elsewhere("gpuckpt-elsewhere");
  make_node(elsewhere.path / "renderD128", 226, 128);
  fs::remove_all(dev.path / "dri");
  fs::create_directory_symlink(elsewhere.path, dev.path / "dri");
  auto refused = reconcile_dev(dev.fd, {{"dri/renderD128", "dri/renderD128", 226, 129}}, 1000);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("/dev/dri in the restored /dev is not a directory gpuckpt may use") == 0);
  CHECK(node_at(elsewhere.path / "renderD128").min == 128);
}

TEST_CASE("a hostile restored /dev changes nothing: a symlink at a GPU name, too many entries", "[unit]") {
  if (!can_mknod()) SKIP("no CAP_MKNOD here");
  test::TempDir dev("gpuckpt-restored-dev");
  test::TempDir outside("gpuckpt-outside");
  std::ofstream(outside.path / "secret") << "host file";
  make_node(dev.path / "nvidia0", 195, 0);
  fs::create_symlink(outside.path / "secret", dev.path / "nvidia1");
  auto refused = reconcile_dev(dev.fd, {{"nvidia0", "nvidia1", 195, 1}}, 1000);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("/dev/nvidia1 in the restored /dev is not a character device") == 0);
  CHECK(node_at(dev.path / "nvidia0").exists);
  CHECK(fs::is_symlink(dev.path / "nvidia1"));
  std::string text;
  std::getline(std::ifstream(outside.path / "secret"), text);
  CHECK(text == "host file");

  fs::remove(dev.path / "nvidia1");
  for (int i = 0; i < 20; ++i) std::ofstream(dev.path / ("f" + std::to_string(i)));
  auto crowded = reconcile_dev(dev.fd, {{"nvidia0", "nvidia1", 195, 1}}, 10);
  REQUIRE_FALSE(crowded.ok());
  CHECK(crowded.error().message.find("holds more than 10 entries") != std::string::npos);
  CHECK(node_at(dev.path / "nvidia0").exists);
  CHECK_FALSE(node_at(dev.path / "nvidia1").exists);
}

TEST_CASE("only the restored container's own tmpfs /dev is changed", "[unit]") {
  const int host_dev = ::open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(host_dev >= 0);
  auto host = check_own_dev_tmpfs(host_dev, host_dev);
  CHECK_FALSE(host.ok());
  test::TempDir root("gpuckpt-restored-root");
  fs::create_directory_symlink("/dev", root.path / "dev");
  auto linked = reconcile_restored_dev(root.path.string(), "/dev", {{"nvidia0", "nvidia1", 195, 1}});
  REQUIRE_FALSE(linked.ok());
  CHECK(linked.error().message.find(root.path.string() + "/dev is not a directory gpuckpt may use") == 0);
  struct statfs fs_info {};
  const int shm = ::open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (shm >= 0 && ::fstatfs(shm, &fs_info) == 0 && static_cast<unsigned long>(fs_info.f_type) == TMPFS_MAGIC) {
    CHECK(check_own_dev_tmpfs(shm, host_dev).ok());   // a tmpfs of its own, as CRIU mounts a container's /dev
  }
  if (shm >= 0) ::close(shm);
  struct statfs tmp_info {};
  if (::fstatfs(root.fd, &tmp_info) == 0 && static_cast<unsigned long>(tmp_info.f_type) != TMPFS_MAGIC) {
    auto plain = check_own_dev_tmpfs(root.fd, host_dev);
    REQUIRE_FALSE(plain.ok());
    CHECK(plain.error().message.find("is not a tmpfs") != std::string::npos);
  }
  ::close(host_dev);
}

TEST_CASE("the plan in CRIU's images directory: absent, placed, hostile", "[unit]") {
  test::TempDir images("gpuckpt-images");
  auto none = read_placed_plan(images.fd);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  CHECK_FALSE(read_placed_plan(-1).value().has_value());

  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = "ck";
  plan.devices.push_back({"/dev/nvidia0", "/dev/nvidia1", "GPU-a", "GPU-b", "/dev/nvidia1", std::make_pair(1u, 5u)});
  const fs::path placed = images.path / kPlanFileInImages;
  std::ofstream(placed) << to_json(plan).dump();
  auto read = read_placed_plan(images.fd);
  REQUIRE(read.ok());
  REQUIRE(read->has_value());
  CHECK(read->value().id == plan.id);
  CHECK(read->value().devices.at(0).target_numbers == std::make_pair(1u, 5u));

  std::ofstream(placed) << "{\"version\": 1, \"devices\": [{\"container_path\": \"/etc/shadow\"";
  auto broken = read_placed_plan(images.fd);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message.find(kPlanFileInImages) != std::string::npos);

  fs::remove(placed);
  test::TempDir outside("gpuckpt-outside");
  std::ofstream(outside.path / "plan.json") << to_json(plan).dump();
  fs::create_symlink(outside.path / "plan.json", placed);
  CHECK_FALSE(read_placed_plan(images.fd).ok());

  fs::remove(placed);
  std::ofstream(placed) << std::string((1 << 20) + 1, ' ');
  auto huge = read_placed_plan(images.fd);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().message.find("not a regular file of at most") != std::string::npos);
}
