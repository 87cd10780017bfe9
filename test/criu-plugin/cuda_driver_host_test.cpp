// The driver host with the simulated driver: every driver call runs in the host process, never in the caller (CRIU),
// even when the driver leaves threads behind as libcuda does; calls run in parallel; a host that dies fails calls
// instead of hanging them; and as guardian, when CRIU's end of the socket closes without done() (CRIU was
// killed), it restores and unlocks every tracked process that still lives and logs it; after done() it does
// nothing. A call its caller stops waiting for (answer_by) comes back as kNoAnswer by the deadline, and a lock
// the driver grants after that is released by the host.
#include <catch2/catch_test_macros.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "criu-plugin/cuda/driver_host.h"
#include "criu-plugin/cuda/uuid.h"
#include "test/criu-plugin/sim/sim_cuda_driver.h"

using namespace gpuckpt;
using namespace gpuckpt::cuda;

namespace {

const std::string A = "GPU-3df50d36-548a-08c1-7cd5-41ff6e7b3cad";
const std::string B = "GPU-cd626b4e-8c05-6521-8a3e-41d9ae0beccd";

// The simulated driver (sim/sim_cuda_driver.h), made in the host: `pids` in `state`, each on GPUs A and B of a node
// with both. Like libcuda, it starts a thread of its own at the first call that stays for the life of the process.
// With `company` above 1 a checkpoint succeeds only if `company` checkpoints are in flight at the same moment (so a
// test can tell parallel calls from serialised ones without timing them); `lock_answer_delay`: the lock takes
// effect at once, its answer comes that much later (a driver that keeps its caller waiting).
DriverHost::DriverFactory fake(ProcessState state, std::vector<int> pids, int company = 1,
                               std::chrono::milliseconds lock_answer_delay = std::chrono::milliseconds(0)) {
  return [state, pids, company, lock_answer_delay]() -> Result<std::unique_ptr<Driver>> {
    auto driver = std::make_unique<sim::SimCudaDriver>(std::vector<std::string>{A, B});
    for (int pid : pids) driver->add_process(pid, pid, {A, B}, state);
    struct Meeting {
      std::mutex mutex;
      std::condition_variable cv;
      int arrived = 0;
      bool thread_started = false;
    };
    auto meeting = std::make_shared<Meeting>();
    driver->before_call = [meeting, company](sim::Call call, int) {
      std::unique_lock lock(meeting->mutex);
      if (!meeting->thread_started) std::thread([] { ::pause(); }).detach();
      meeting->thread_started = true;
      if (call != sim::Call::Checkpoint || company <= 1) return kCudaSuccess;
      ++meeting->arrived;
      meeting->cv.notify_all();
      const bool met =
          meeting->cv.wait_for(lock, std::chrono::seconds(10), [&] { return meeting->arrived >= company; });
      return met ? kCudaSuccess : sim::kOutOfMemory;   // any distinguishable failure
    };
    driver->after_call = [lock_answer_delay](sim::Call call, int) {
      if (call == sim::Call::Lock) std::this_thread::sleep_for(lock_answer_delay);
    };
    return std::unique_ptr<Driver>(std::move(driver));
  };
}

int thread_count() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/task");
  while (dirent* entry = ::readdir(dir))
    if (entry->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n;
}

struct Scratch {
  std::filesystem::path dir;
  int fd = -1;
  pid_t target = -1;
  Scratch() {
    dir = std::filesystem::temp_directory_path() / ("gpuckpt-driver-host-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    target = ::fork();
    if (target == 0) {
      ::pause();
      _exit(0);
    }
  }
  ~Scratch() {
    ::kill(target, SIGKILL);
    ::waitpid(target, nullptr, 0);
    ::close(fd);
    std::filesystem::remove_all(dir);
  }
  // The guardian's log once it has finished its work (it ends with "now <state>"), or what is there after 0.5 s.
  std::string log(bool expect_line) const {
    std::string text;
    for (int i = 0; i < 100; ++i) {
      std::ifstream in(dir / "gpuckpt-guardian.log");
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      if (expect_line ? text.find(" now ") != std::string::npos : i >= 10) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return text;
  }
};

}  // namespace

TEST_CASE("driver calls run in the driver host: the caller gains no thread, even from a driver that starts one",
          "[unit]") {
  const int threads_before = thread_count();
  const int pid = 4242;
  auto host = DriverHost::start(fake(ProcessState::Running, {pid}), DriverHost::Mode::Restore, -1);
  REQUIRE(host);
  Driver& driver = (*host)->driver();
  CHECK(driver.lock(pid, 1000) == kCudaSuccess);
  CHECK(driver.checkpoint(pid) == kCudaSuccess);
  ProcessState state = ProcessState::Running;
  CHECK(driver.get_state(pid, &state) == kCudaSuccess);
  CHECK(state == ProcessState::Checkpointed);
  const Uuid a = *parse_uuid(A, "test"), b = *parse_uuid(B, "test");
  CHECK(driver.restore(pid, {UuidPair{a, b}, UuidPair{b, a}}) == kCudaSuccess);
  CHECK(driver.unlock(pid) == kCudaSuccess);
  int tid = 0;
  CHECK(driver.get_restore_thread_id(pid, &tid) == kCudaSuccess);
  CHECK(tid == pid);
  // An out-of-order call comes back with the driver's answer and its name.
  const int rc = driver.unlock(pid);
  CHECK(rc == sim::kIllegalState);
  CHECK(driver.describe(rc) == "CUDA_ERROR_ILLEGAL_STATE (401)");
  CHECK(thread_count() == threads_before);
  CHECK((*host)->host_pid() != ::getpid());
  CHECK(::waitpid((*host)->host_pid(), nullptr, WNOHANG) < 0);   // not our child: CRIU never reaps it
}

TEST_CASE("calls from several threads run in parallel in the driver host", "[unit]") {
  auto host =
      DriverHost::start(fake(ProcessState::Locked, {100, 101, 102}, /*company=*/3), DriverHost::Mode::Restore, -1);
  REQUIRE(host);
  Driver& driver = (*host)->driver();
  int results[3] = {-1, -1, -1};
  std::thread callers[3];
  for (int i = 0; i < 3; ++i) callers[i] = std::thread([&, i] { results[i] = driver.checkpoint(100 + i); });
  for (auto& t : callers) t.join();
  for (int r : results) CHECK(r == kCudaSuccess);
}

TEST_CASE("a driver that cannot be loaded fails start() with the loader's message", "[unit]") {
  auto host = DriverHost::start([]() -> Result<std::unique_ptr<Driver>> {
    return make_error("the NVIDIA driver library libcuda.so.1 cannot be loaded (not here)", ENOENT);
  }, DriverHost::Mode::Dump, -1);
  REQUIRE_FALSE(host);
  CHECK(host.error().message.find("libcuda.so.1 cannot be loaded (not here)") != std::string::npos);
  CHECK(host.error().errno_value == ENOENT);
}

TEST_CASE("a driver host that dies fails the calls instead of hanging them", "[unit]") {
  auto host = DriverHost::start(fake(ProcessState::Running, {1}), DriverHost::Mode::Restore, -1);
  REQUIRE(host);
  REQUIRE(::kill((*host)->host_pid(), SIGKILL) == 0);
  Driver& driver = (*host)->driver();
  int rc = kCudaSuccess;
  for (int i = 0; i < 100 && rc != kHostLost; ++i) {   // until the kernel has closed the dead host's socket
    rc = driver.lock(1, 1000);
    if (rc != kHostLost) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(rc == kHostLost);
  CHECK(driver.describe(rc).find("driver host process is gone") != std::string::npos);
}

// One dump as the backend drives it: host started, `pid` tracked in `initial` state, then either done()
// or CRIU "dies" (the host object is destroyed, closing its socket, without done()).
static void dump_with_host(const Scratch& s, ProcessState initial, bool finish,
                           DriverHost::Mode mode = DriverHost::Mode::Dump) {
  auto host = DriverHost::start(fake(ProcessState::Checkpointed, {s.target}), mode, s.fd);
  REQUIRE(host);
  (*host)->track(s.target, initial);
  if (finish) (*host)->done();
}

TEST_CASE("a guardian whose CRIU dies puts a checkpointed process back to running", "[unit]") {
  Scratch s;
  dump_with_host(s, ProcessState::Running, /*finish=*/false);
  const std::string log = s.log(true);
  CHECK(log.find("CRIU ended without finishing the dump") != std::string::npos);
  CHECK(log.find("pid " + std::to_string(s.target) + ": restore: ok") != std::string::npos);
  CHECK(log.find("pid " + std::to_string(s.target) + ": unlock: ok") != std::string::npos);
  CHECK(log.find("now running") != std::string::npos);
}

TEST_CASE("a guardian leaves a process that was locked before the dump locked", "[unit]") {
  Scratch s;
  dump_with_host(s, ProcessState::Locked, /*finish=*/false);
  const std::string log = s.log(true);
  CHECK(log.find("restore: ok") != std::string::npos);
  CHECK(log.find("unlock") == std::string::npos);
  CHECK(log.find("now locked") != std::string::npos);
}

TEST_CASE("a guardian told done does nothing", "[unit]") {
  Scratch s;
  dump_with_host(s, ProcessState::Running, /*finish=*/true);
  CHECK(s.log(false).find("restore") == std::string::npos);
}

TEST_CASE("an unguarded dump host (GPUCKPT_CUDA_GUARDIAN=0) does nothing when CRIU dies", "[unit]") {
  Scratch s;
  dump_with_host(s, ProcessState::Running, /*finish=*/false, DriverHost::Mode::DumpUnguarded);
  CHECK(s.log(false).find("restore") == std::string::npos);
}

TEST_CASE("the node inventory is read in the driver host and comes back whole", "[unit]") {
  const int threads_before = thread_count();
  auto host = DriverHost::start(fake(ProcessState::Running, {}), DriverHost::Mode::Restore, -1, []() -> Result<NodeInventory> {
    NodeInventory node;
    node.hostname = "gpu-node-7";
    GpuDevice gpu;
    gpu.id = "GPU-6f1b2c3d-0000-1111-2222-333344445555";
    gpu.vendor = GpuVendor::Nvidia;
    gpu.name = "NVIDIA H100 80GB HBM3";
    gpu.uuid = gpu.id;
    gpu.vendor_id = 0x10de;
    gpu.device_id = 0x2330;
    gpu.memory_bytes = 85520809984ULL;
    gpu.device_minor = 0;
    node.gpus.push_back(gpu);
    // libnvidia-ml starts threads like this in whichever process queries it: here, the host.
    std::thread([] { ::pause(); }).detach();
    return node;
  });
  REQUIRE(host);
  auto node = (*host)->inventory();
  REQUIRE(node);
  CHECK(node->hostname == "gpu-node-7");
  REQUIRE(node->gpus.size() == 1);
  CHECK(node->gpus[0].name == "NVIDIA H100 80GB HBM3");
  CHECK(node->gpus[0].memory_bytes == 85520809984ULL);
  CHECK(node->gpus[0].device_id == 0x2330);
  CHECK(thread_count() == threads_before);
}

TEST_CASE("an inventory the host cannot read fails with its reason", "[unit]") {
  auto host = DriverHost::start(fake(ProcessState::Running, {}), DriverHost::Mode::Restore, -1, []() -> Result<NodeInventory> {
    return make_error("/proc/driver/nvidia/gpus/0000:00:06.0/information line 3 is truncated", EIO);
  });
  REQUIRE(host);
  auto node = (*host)->inventory();
  REQUIRE_FALSE(node);
  CHECK(node.error().message.find("information line 3 is truncated") != std::string::npos);
}

TEST_CASE("a lock answered after the caller's deadline comes back as no answer and the host releases it",
          "[unit]") {
  Scratch s;
  using std::chrono::milliseconds;
  const int pid = 4300;
  auto host =
      DriverHost::start(fake(ProcessState::Running, {pid}, 1, milliseconds(600)), DriverHost::Mode::Restore, s.fd);
  REQUIRE(host);
  Driver& driver = (*host)->driver();
  (*host)->answer_by(std::chrono::steady_clock::now() + milliseconds(50));
  const int rc = driver.lock(pid, 1000);
  CHECK(rc == kNoAnswer);
  CHECK(driver.describe(rc).find("no answer from the driver before the deadline") != std::string::npos);
  (*host)->answer_by(std::nullopt);
  ProcessState state = ProcessState::Failed;
  REQUIRE(driver.get_state(pid, &state) == kCudaSuccess);
  CHECK(state == ProcessState::Locked);   // the driver did lock it; only its answer is late
  for (int i = 0; i < 100 && state != ProcessState::Running; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    REQUIRE(driver.get_state(pid, &state) == kCudaSuccess);
  }
  CHECK(state == ProcessState::Running);
  std::ifstream in(s.dir / "gpuckpt-guardian.log");
  std::stringstream log;
  log << in.rdbuf();
  CHECK(log.str().find("pid 4300: the driver granted the lock after its caller had given up; unlock: ok") !=
        std::string::npos);
  // An answer inside the deadline is the driver's own.
  (*host)->answer_by(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  CHECK(driver.lock(pid, 1000) == kCudaSuccess);
  REQUIRE(driver.get_state(pid, &state) == kCudaSuccess);
  CHECK(state == ProcessState::Locked);
}
