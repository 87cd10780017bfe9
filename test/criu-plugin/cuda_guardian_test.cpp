// The dump guardian with a fake driver: when CRIU's end of the pipe closes without "done" (CRIU was killed), it
// restores and unlocks every tracked process that still lives and logs it; after "done" it does nothing.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "criu-plugin/cuda/guardian.h"

using namespace gpuckpt::cuda;

namespace {

// The one faithful fake of the driver seam: a process state machine per the driver's documented transitions.
class FakeDriver final : public Driver {
 public:
  explicit FakeDriver(ProcessState state) : state_(state) {}
  int lock(int, unsigned) override { return step(ProcessState::Running, ProcessState::Locked); }
  int checkpoint(int) override { return step(ProcessState::Locked, ProcessState::Checkpointed); }
  int restore(int, const std::vector<UuidPair>&) override { return step(ProcessState::Checkpointed, ProcessState::Locked); }
  int unlock(int) override { return step(ProcessState::Locked, ProcessState::Running); }
  int get_state(int, ProcessState* state) override {
    *state = state_;
    return kCudaSuccess;
  }
  int get_restore_thread_id(int pid, int* tid) override {
    *tid = pid;
    return kCudaSuccess;
  }
  std::string describe(int result) override { return "CUresult " + std::to_string(result); }

 private:
  int step(ProcessState from, ProcessState to) {
    if (state_ != from) return 1;   // CUDA_ERROR_INVALID_VALUE, as the driver answers out-of-order calls
    state_ = to;
    return kCudaSuccess;
  }
  ProcessState state_;
};

struct Scratch {
  std::filesystem::path dir;
  int fd = -1;
  pid_t target = -1;
  Scratch() {
    dir = std::filesystem::temp_directory_path() / ("gpuckpt-guardian-" + std::to_string(::getpid()));
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
  // The guardian's log once it has finished its work (it ends with "now <state>"), or what is there after 5 s.
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

// One dump as the backend drives it: guardian started, `pid` tracked in `initial` state, then either done()
// or CRIU "dies" (the guardian is destroyed with the pipe still open).
static void dump_with_guardian(const Scratch& s, ProcessState initial, bool finish) {
  FakeDriver driver(ProcessState::Checkpointed);
  DumpGuardian guardian;
  REQUIRE(guardian.start(&driver, s.fd));
  guardian.track(s.target, initial);
  if (finish) {
    guardian.done();
    CHECK_FALSE(guardian.running());
  }
}

TEST_CASE("a guardian whose CRIU dies puts a checkpointed process back to running", "[unit]") {
  Scratch s;
  dump_with_guardian(s, ProcessState::Running, /*finish=*/false);
  const std::string log = s.log(true);
  CHECK(log.find("CRIU ended without finishing the dump") != std::string::npos);
  CHECK(log.find("pid " + std::to_string(s.target) + ": restore: ok") != std::string::npos);
  CHECK(log.find("pid " + std::to_string(s.target) + ": unlock: ok") != std::string::npos);
  CHECK(log.find("now running") != std::string::npos);
}

TEST_CASE("a guardian leaves a process that was locked before the dump locked", "[unit]") {
  Scratch s;
  dump_with_guardian(s, ProcessState::Locked, /*finish=*/false);
  const std::string log = s.log(true);
  CHECK(log.find("restore: ok") != std::string::npos);
  CHECK(log.find("unlock") == std::string::npos);
  CHECK(log.find("now locked") != std::string::npos);
}

TEST_CASE("a guardian told done does nothing", "[unit]") {
  Scratch s;
  dump_with_guardian(s, ProcessState::Running, /*finish=*/true);
  CHECK(s.log(false).find("restore") == std::string::npos);
}
