// The CUDA backend's real hook functions (PAUSE_DEVICES, CHECKPOINT_DEVICES, fini, RESUME_DEVICES_LATE) against
// the simulated driver (sim/sim_cuda_driver.h), a fixture host tree (/proc with the processes' NVIDIA files,
// tasks, children and roots; /dev with the GPU nodes) and a temporary image directory: the dump and restore
// sequences, a driver failure at each step (the process left where the real driver leaves it, the plugin's
// error naming the process and the driver's answer), and the restore onto other GPUs (UUID pairs, device nodes).
// The fixture's GPU device nodes need mknod: the cases are skipped without CAP_MKNOD.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "criu-plugin/criu_abi.h"
#include "criu-plugin/cuda/cuda_backend.h"
#include "criu-plugin/cuda/record_files.h"
#include "criu-plugin/cuda/remap.h"
#include "test/criu-plugin/h200_gpus.h"
#include "test/criu-plugin/sim/sim_cuda_driver.h"

using namespace gpuckpt;
using namespace gpuckpt::cuda;
namespace fs = std::filesystem;

namespace {

using test::h200;
const std::string& A = test::kGpuA;
const std::string& B = test::kGpuB;
const std::string& C = test::kGpuC;
const std::string& D = test::kGpuD;

// The process tree of every case: a CUDA process on GPU minor 0 with a child on GPU minor 1. The pids are the
// fixture's: no real process is ever touched (kill_task is recorded, ptrace finds no tracee).
constexpr int kParent = 741001;
constexpr int kChild = 741002;
constexpr int kParentThread = 741007;   // the driver's restore threads
constexpr int kChildThread = 741009;

bool can_mknod() {
  const fs::path probe = fs::temp_directory_path() / ("gpuckpt-mknod-probe-" + std::to_string(::getpid()));
  const bool ok = ::mknod(probe.c_str(), S_IFCHR | 0600, makedev(195, 0)) == 0;
  fs::remove(probe);
  return ok;
}


NodeInventory node_of(const std::vector<std::string>& uuids) {
  NodeInventory node;
  node.hostname = "sim-node";
  for (std::size_t i = 0; i < uuids.size(); ++i) node.gpus.push_back(h200(uuids[i], static_cast<int>(i)));
  return node;
}

// A node's host tree and a CRIU image directory, both temporary.
class HostTree {
 public:
  HostTree() {
    static int serial = 0;
    root_ = fs::temp_directory_path() / ("gpuckpt-cuda-backend-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(++serial));
    fs::remove_all(root_);
    fs::create_directories(root_ / "proc/driver/nvidia/gpus/0000:00:06.0");
    fs::create_directories(root_ / "proc/driver/nvidia/gpus/0000:00:07.0");
    fs::create_directories(root_ / "dev");
    fs::create_directories(root_ / "images");
    device("dev/nvidiactl", 255);
    device("dev/nvidia0", 0);
    device("dev/nvidia1", 1);
    images_fd_ = ::open((root_ / "images").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  ~HostTree() {
    ::close(images_fd_);
    fs::remove_all(root_);
  }
  HostTree(const HostTree&) = delete;
  HostTree& operator=(const HostTree&) = delete;

  // A process holding /dev/nvidiactl and /dev/nvidia<minor> open, its driver restore thread, its children and root.
  void process(int pid, int gpu_minor, int restore_tid, const std::vector<int>& children = {}) {
    const fs::path dir = root_ / "proc" / std::to_string(pid);
    fs::create_directories(dir / "fd");
    fs::create_symlink(root_ / "dev/nvidiactl", dir / "fd/3");
    fs::create_symlink(root_ / ("dev/nvidia" + std::to_string(gpu_minor)), dir / "fd/4");
    for (int tid : {pid, restore_tid}) {
      fs::create_directories(dir / "task" / std::to_string(tid));
      std::ofstream(dir / "task" / std::to_string(tid) / "status")
          << "Name:\tcuda_app\nTgid:\t" << pid << "\nNSpid:\t" << tid << "\n";
    }
    std::ofstream children_file(dir / "task" / std::to_string(pid) / "children");
    for (int child : children) children_file << child << ' ';
    fs::create_directories(dir / "root/dev");
  }

  const fs::path& root() const { return root_; }
  int images_fd() const { return images_fd_; }
  fs::path images() const { return root_ / "images"; }

 private:
  void device(const char* relative, unsigned minor) {
    REQUIRE(::mknod((root_ / relative).c_str(), S_IFCHR | 0666, makedev(195, minor)) == 0);
  }
  fs::path root_;
  int images_fd_ = -1;
};

// Every line the backend logs during a case.
class LogCapture {
 public:
  LogCapture() {
    log::set_level(log::Level::Debug);
    log::set_sink([this](log::Level level, std::string_view line) {
      lines_.emplace_back(std::string(level == log::Level::Error ? "E " : "  ") + std::string(line));
    });
  }
  ~LogCapture() {
    log::set_sink(nullptr);
    log::set_level(log::Level::Info);
  }
  bool has(const std::string& text) const {
    return std::any_of(lines_.begin(), lines_.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
  // Whether one error line holds every one of `parts`.
  bool error_with(std::initializer_list<std::string> parts) const {
    return std::any_of(lines_.begin(), lines_.end(), [&](const std::string& l) {
      return l.rfind("E ", 0) == 0 &&
             std::all_of(parts.begin(), parts.end(),
                         [&](const std::string& p) { return l.find(p) != std::string::npos; });
    });
  }
  std::string text() const {
    std::string out;
    for (const auto& l : lines_) out += l + "\n";
    return out;
  }

 private:
  std::vector<std::string> lines_;
};

// One CRIU run of the backend: a dump or a restore on the node `tree` describes, with the simulated driver.
struct Run {
  HostTree& tree;
  sim::SimSessions sessions;
  sim::SimClock clock;
  int final_state = criu::kTaskDead;
  int inventory_adds = 0;
  std::vector<std::pair<int, int>> killed;   // (pid, signal)
  std::unique_ptr<plugin::Backend> backend;

  Run(HostTree& host_tree, std::shared_ptr<sim::SimCudaDriver> driver, NodeInventory inventory)
      : tree(host_tree) {
    sessions.driver = std::move(driver);
    sessions.inventory = std::move(inventory);
    CudaBackendDeps deps;
    deps.host = HostRoot(tree.root());
    deps.start_driver = sessions.starter();
    deps.clock = clock.clock();
    deps.criu.image_dir_fd = [this] { return tree.images_fd(); };
    deps.criu.add_to_inventory = [this]() -> Result<void> {
      ++inventory_adds;
      return {};
    };
    deps.criu.remaining_alarm_ms = [] { return 10000u; };
    deps.criu.alarm_timed_out = [] { return false; };
    deps.criu.final_state = [this] { return final_state; };
    deps.criu.set_interrupt_only_mode = [] { return true; };
    deps.kill_task = [this](int pid, int signal) {
      killed.emplace_back(pid, signal);
      return 0;
    };
    backend = make_cuda_backend(std::move(deps));
  }
  bool was_killed(int pid) const {
    return std::find(killed.begin(), killed.end(), std::make_pair(pid, static_cast<int>(SIGKILL))) != killed.end();
  }
};

// The simulated driver of the node the checkpoint is taken on: both processes running on GPUs A and B.
std::shared_ptr<sim::SimCudaDriver> dump_driver() {
  auto driver = std::make_shared<sim::SimCudaDriver>(std::vector<std::string>{A, B});
  driver->add_process(kParent, kParentThread, {A});
  driver->add_process(kChild, kChildThread, {B});
  return driver;
}

void make_tree(HostTree& tree) {
  tree.process(kParent, 0, kParentThread, {kChild});
  tree.process(kChild, 1, kChildThread);
}

// A complete dump with CRIU's hook order; returns CHECKPOINT_DEVICES' answer for the parent.
int dump(Run& run, int fini_ret = 0) {
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  REQUIRE(run.backend->pause_devices(kParent) == 0);
  REQUIRE(run.backend->pause_devices(kChild) == 0);
  const int parent = run.backend->checkpoint_devices(kParent);
  const int child = run.backend->checkpoint_devices(kChild);
  run.backend->fini(criu::kStageDump, fini_ret != 0 ? fini_ret : (parent != 0 ? parent : child));
  return parent != 0 ? parent : child;
}

// The images of a successful dump of the tree on GPUs A and B, in `tree`'s image directory.
void dump_on_a_and_b(HostTree& tree) {
  auto driver = dump_driver();
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(dump(run) == 0);
  REQUIRE(driver->state(kParent) == ProcessState::Checkpointed);
}

// The restore node's driver: the processes CRIU restored hold their checkpointed CUDA state for GPUs A and B.
std::shared_ptr<sim::SimCudaDriver> restore_driver(const std::vector<std::string>& node_gpus) {
  auto driver = std::make_shared<sim::SimCudaDriver>(node_gpus);
  driver->add_process(kParent, kParentThread, {A}, ProcessState::Checkpointed);
  driver->add_process(kChild, kChildThread, {B}, ProcessState::Checkpointed);
  return driver;
}

void write_image_file(const HostTree& tree, const std::string& name, const std::string& text) {
  std::ofstream(tree.images() / name) << text;
}

// A driver failure injected into one step: where the real driver leaves the process, and what the plugin says.
struct FailedStep {
  sim::Call call;
  int result;
  ProcessState left;
  std::string reported;
};

#define NEEDS_MKNOD() \
  if (!can_mknod()) SKIP("no CAP_MKNOD here: the fixture's GPU device nodes cannot be made")

}  // namespace

TEST_CASE("dump: every CUDA process of the tree is locked together, then checkpointed", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(dump(run) == 0);

  CHECK(driver->state(kParent) == ProcessState::Checkpointed);
  CHECK(driver->state(kChild) == ProcessState::Checkpointed);
  // The first PAUSE_DEVICES locked both, before any checkpoint; CRIU kills the tasks, so nothing is undone.
  const auto calls = driver->calls();
  auto first_checkpoint =
      std::find_if(calls.begin(), calls.end(), [](const auto& c) { return c.call == sim::Call::Checkpoint; });
  CHECK(std::count_if(calls.begin(), first_checkpoint, [](const auto& c) { return c.call == sim::Call::Lock; }) == 2);
  CHECK(driver->calls(sim::Call::Checkpoint).size() == 2);
  CHECK(driver->calls(sim::Call::Restore).empty());
  CHECK(driver->calls(sim::Call::Unlock).empty());
  // The lock's timeout is what is left of CRIU's alarm (10 s) less a margin of a tenth (lock_budget.h).
  CHECK(driver->calls(sim::Call::Lock).front().timeout_ms == 9000);
  // The driver host was started once, guarded, learned both processes, and was told the dump is done.
  CHECK(run.sessions.log->starts == 1);
  CHECK(run.sessions.log->modes.front() == DriverHost::Mode::Dump);
  CHECK(run.sessions.log->tracked.size() == 2);
  CHECK(run.sessions.log->done);
  CHECK(run.inventory_adds >= 1);
  // Each process's GPU record: the GPU it had open.
  auto records = read_process_records(tree.images_fd());
  REQUIRE(records);
  REQUIRE(records->by_pid.count(kParent) == 1);
  CHECK(record_uuids(records->by_pid.at(kParent)) == std::vector<std::string>{A});
  CHECK(record_uuids(records->by_pid.at(kChild)) == std::vector<std::string>{B});
  CHECK(run.killed.empty());
}

TEST_CASE("dump with --leave-running: every process is restored and unlocked after the dump", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  Run run(tree, driver, node_of({A, B}));
  run.final_state = criu::kTaskAlive;
  REQUIRE(dump(run) == 0);
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == ProcessState::Running);
  for (const auto& restore : driver->calls(sim::Call::Restore)) {
    CHECK(restore.result == kCudaSuccess);
    CHECK(restore.pairs.empty());   // back onto its own GPUs
  }
  CHECK(driver->calls(sim::Call::Unlock).size() == 2);
  CHECK(driver->gpus(kParent) == std::vector<std::string>{A});
}

TEST_CASE("dump: a lock that times out unlocks the process already locked and fails PAUSE_DEVICES", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  driver->fail(sim::Call::Lock, kChild, sim::kNotReady);
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  CHECK(run.backend->pause_devices(kParent) == -EIO);
  run.backend->fini(criu::kStageDump, -EIO);
  // All or nothing: neither process stays locked, neither was checkpointed.
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == ProcessState::Running);
  CHECK(driver->calls(sim::Call::Checkpoint).empty());
  CHECK(logs.error_with({"locking pid " + std::to_string(kChild) + " failed", "CUDA_ERROR_NOT_READY (600)",
                         "criu --timeout"}));
  INFO(logs.text());
}

TEST_CASE("dump: a failed checkpoint fails the dump and fini puts every process back running", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  driver->fail(sim::Call::Checkpoint, kChild, sim::kOutOfMemory);
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  REQUIRE(run.backend->pause_devices(kParent) == 0);
  CHECK(run.backend->checkpoint_devices(kParent) == 0);
  CHECK(run.backend->checkpoint_devices(kChild) == -EIO);
  CHECK(driver->state(kChild) == ProcessState::Locked);   // the driver's checkpoint failed: still locked
  run.backend->fini(criu::kStageDump, -EIO);
  // The parent was checkpointed: restored and unlocked; the child only unlocked.
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == ProcessState::Running);
  CHECK(logs.error_with({"checkpointing pid " + std::to_string(kChild) + " failed", "CUDA_ERROR_OUT_OF_MEMORY (2)"}));
  INFO(logs.text());
}

TEST_CASE("dump: a checkpoint that leaves the process FAILED is reported, not passed off as put back", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  driver->fail(sim::Call::Checkpoint, kChild, sim::kOperatingSystem, 1, ProcessState::Failed);
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  REQUIRE(run.backend->pause_devices(kParent) == 0);
  CHECK(run.backend->checkpoint_devices(kChild) == -EIO);
  run.backend->fini(criu::kStageDump, -EIO);
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == ProcessState::Failed);
  CHECK(logs.error_with({"pid " + std::to_string(kChild), "FAILED"}));
  CHECK_FALSE(logs.has("restored pid " + std::to_string(kChild)));
  INFO(logs.text());
}

TEST_CASE("dump with --leave-running: a driver failure putting a process back is reported, the process left as the "
          "driver left it", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  const FailedStep step = GENERATE(FailedStep{sim::Call::Restore, sim::kOutOfMemory, ProcessState::Checkpointed,
                                              "restore: CUDA_ERROR_OUT_OF_MEMORY (2)"},
                                   FailedStep{sim::Call::Unlock, sim::kIllegalState, ProcessState::Locked,
                                              "unlock: CUDA_ERROR_ILLEGAL_STATE (401)"});
  auto driver = dump_driver();
  driver->fail(step.call, kChild, step.result);
  Run run(tree, driver, node_of({A, B}));
  run.final_state = criu::kTaskAlive;
  REQUIRE(dump(run) == 0);
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == step.left);
  CHECK(logs.error_with({"pid " + std::to_string(kChild) + " " + step.reported}));
  INFO(logs.text());
}

TEST_CASE("dump: a state the driver cannot read stops PAUSE_DEVICES before any lock", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  driver->fail(sim::Call::GetState, kChild, sim::kOperatingSystem);
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  CHECK(run.backend->pause_devices(kParent) == -EIO);
  CHECK(driver->calls(sim::Call::Lock).empty());
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(logs.error_with({"cannot read the CUDA state of pid " + std::to_string(kChild),
                         "CUDA_ERROR_OPERATING_SYSTEM (304)"}));
}

TEST_CASE("dump: a process the driver holds FAILED is refused before any lock", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  auto driver = dump_driver();
  driver->add_process(kChild, kChildThread, {B}, ProcessState::Failed);
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  CHECK(run.backend->pause_devices(kParent) == -EIO);
  CHECK(driver->calls(sim::Call::Lock).empty());
  CHECK(logs.error_with({"pid " + std::to_string(kChild) + " is in the driver's FAILED checkpoint state"}));
}

TEST_CASE("dump: a process still inside cuInit() is waited for on the backend's clock", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  SECTION("the driver knows it after three tries: the dump goes on") {
    auto driver = dump_driver();
    driver->fail(sim::Call::GetRestoreThreadId, kChild, sim::kNotInitialized, 3);
    Run run(tree, driver, node_of({A, B}));
    REQUIRE(dump(run) == 0);
    CHECK(driver->state(kChild) == ProcessState::Checkpointed);
    CHECK(run.clock.slept() == std::chrono::milliseconds(150));
  }
  SECTION("never: EAGAIN after the configured wait, with the setting that sets it named") {
    auto driver = dump_driver();
    driver->fail(sim::Call::GetRestoreThreadId, kChild, sim::kNotInitialized, 1000);
    Run run(tree, driver, node_of({A, B}));
    REQUIRE(run.backend->init(criu::kStageDump) == 0);
    CHECK(run.backend->pause_devices(kParent) == -EAGAIN);
    CHECK(run.clock.slept() >= std::chrono::milliseconds(2000));
    CHECK(driver->calls(sim::Call::Lock).empty());
    CHECK(logs.error_with({"pid " + std::to_string(kChild), "inside cuInit()", "GPUCKPT_CUDA_INIT_WAIT_MS",
                           "CUDA_ERROR_NOT_INITIALIZED (3)"}));
  }
}

TEST_CASE("dump: a node without NVIDIA GPUs leaves the backend inactive, no driver started", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  fs::remove_all(tree.root() / "proc/driver/nvidia");
  auto driver = dump_driver();
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageDump) == 0);
  CHECK(run.backend->pause_devices(kParent) == -ENOTSUP);
  CHECK(run.sessions.log->starts == 0);
  CHECK(driver->calls().empty());
}

TEST_CASE("restore on the same GPUs: the driver restores without pairs and unlocks every process", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  dump_on_a_and_b(tree);
  auto driver = restore_driver({A, B});
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageRestore) == 0);
  CHECK(run.backend->resume_devices_late(kParent) == 0);
  CHECK(run.backend->resume_devices_late(kChild) == 0);
  run.backend->fini(criu::kStageRestore, 0);
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == ProcessState::Running);
  for (const auto& restore : driver->calls(sim::Call::Restore)) CHECK(restore.pairs.empty());
  CHECK(run.sessions.log->modes == std::vector<DriverHost::Mode>{DriverHost::Mode::Restore});
  CHECK(run.killed.empty());
}

TEST_CASE("restore onto other GPUs: the mapping's UUID pairs reach the driver and the target nodes are made",
          "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  dump_on_a_and_b(tree);
  // The restore node has GPUs C (minor 0) and D (minor 1); the agent's mapping sends A to D and B to C.
  write_image_file(tree, kMappingFileName,
                   R"({"version": 1, "pairs": [{"source_uuid": ")" + A + R"(", "target_uuid": ")" + D +
                       R"("}, {"source_uuid": ")" + B + R"(", "target_uuid": ")" + C + R"("}]})");
  auto driver = restore_driver({C, D});
  Run run(tree, driver, node_of({C, D}));
  REQUIRE(run.backend->init(criu::kStageRestore) == 0);
  CHECK(run.backend->resume_devices_late(kParent) == 0);
  CHECK(run.backend->resume_devices_late(kChild) == 0);
  INFO(logs.text());

  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == ProcessState::Running);
  CHECK(driver->gpus(kParent) == std::vector<std::string>{D});
  CHECK(driver->gpus(kChild) == std::vector<std::string>{C});
  for (const auto& restore : driver->calls(sim::Call::Restore)) {
    CHECK(restore.result == kCudaSuccess);
    if (restore.pid == kParent) CHECK(restore.pairs == std::vector<std::pair<std::string, std::string>>{{A, D}});
    if (restore.pid == kChild) CHECK(restore.pairs == std::vector<std::pair<std::string, std::string>>{{B, C}});
  }
  // The driver opens /dev/nvidia<target minor> in each process's root: the parent's target D is minor 1.
  struct stat st {};
  REQUIRE(::stat((tree.root() / "proc" / std::to_string(kParent) / "root/dev/nvidia1").c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(::major(st.st_rdev) == 195);
  CHECK(::minor(st.st_rdev) == 1);
}

TEST_CASE("restore onto other GPUs with no mapping placed: refused, the restored processes ended", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  dump_on_a_and_b(tree);
  auto driver = restore_driver({C, D});
  Run run(tree, driver, node_of({C, D}));
  REQUIRE(run.backend->init(criu::kStageRestore) == 0);
  CHECK(run.backend->resume_devices_late(kParent) == -EIO);
  CHECK(driver->calls(sim::Call::Restore).empty());   // nothing moved by guesswork
  CHECK(run.was_killed(kParent));
  CHECK(run.was_killed(kChild));
  CHECK(logs.error_with({"killing restored pid " + std::to_string(kParent), "restore plan"}));
  INFO(logs.text());
}

TEST_CASE("restore: a driver failure at each step ends that process and fails its RESUME_DEVICES_LATE", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  dump_on_a_and_b(tree);
  auto driver = restore_driver({A, B});
  const FailedStep step = GENERATE(FailedStep{sim::Call::Restore, sim::kOutOfMemory, ProcessState::Checkpointed,
                                              "restore: CUDA_ERROR_OUT_OF_MEMORY (2)"},
                                   FailedStep{sim::Call::Unlock, sim::kIllegalState, ProcessState::Locked,
                                              "unlock: CUDA_ERROR_ILLEGAL_STATE (401)"},
                                   FailedStep{sim::Call::GetState, sim::kOperatingSystem, ProcessState::Checkpointed,
                                              "state: CUDA_ERROR_OPERATING_SYSTEM (304)"});
  driver->fail(step.call, kChild, step.result);
  Run run(tree, driver, node_of({A, B}));
  REQUIRE(run.backend->init(criu::kStageRestore) == 0);
  CHECK(run.backend->resume_devices_late(kParent) == 0);
  CHECK(run.backend->resume_devices_late(kChild) == -EIO);
  CHECK(driver->state(kParent) == ProcessState::Running);
  CHECK(driver->state(kChild) == step.left);
  CHECK(run.was_killed(kChild));
  CHECK_FALSE(run.was_killed(kParent));
  CHECK(logs.error_with({"pid " + std::to_string(kChild) + " " + step.reported}));
  INFO(logs.text());
}

TEST_CASE("restore on a node without the driver: init fails naming the GPUs the checkpoint needs", "[unit]") {
  NEEDS_MKNOD();
  LogCapture logs;
  HostTree tree;
  make_tree(tree);
  dump_on_a_and_b(tree);
  Run run(tree, restore_driver({A, B}), node_of({A, B}));
  run.sessions.start_error = make_error("the NVIDIA driver library libcuda.so.1 cannot be loaded", ENOENT);
  CHECK(run.backend->init(criu::kStageRestore) == -1);
  CHECK(logs.error_with({"the checkpoint needs CUDA", A, "libcuda.so.1 cannot be loaded", "r570 or newer"}));
}
