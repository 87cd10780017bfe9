// The driver host: the one process that calls the NVIDIA driver's libraries for the plugin. CRIU itself never
// loads or calls libcuda or libnvidia-ml: both start threads of their own in any process that uses them, and
// those outlive the call; a CRIU with a second thread cannot setns() into a container's mount namespace ("Can't
// setns ...: Invalid argument"), so a GPU container's dump would fail right after its CUDA checkpoint (seen on an
// H100 node: the node inventory's NVML query alone was enough).
//
// The host is forked from CRIU before the first driver call (double fork: it is not CRIU's child, so CRIU's
// SIGCHLD handling never sees it), keeps none of CRIU's files but its socket and log, loads the driver itself and
// answers calls, each on a thread of its own, so calls for several processes run in parallel. It is also the
// dump guardian: when CRIU's end of the socket closes during a dump without done() (CRIU was killed), it
// restores and unlocks every tracked process that still lives and writes what it did to gpuckpt-guardian.log in
// the image directory. A process whose GPU memory gpuckpt had written to an image (and dropped from the task) is
// filled back from that image first; if that fails, it is left checkpointed rather than restored with wrong data.
// A caller may set a deadline for the host's answers (answer_by): a call still unanswered then returns kNoAnswer
// and is abandoned, and a lock the driver grants after its caller gave up is released by the host at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "gpu/gpu_model.h"
#include "base/result.h"
#include "criu-plugin/cuda/cuda_driver.h"

namespace gpuckpt::cuda {

// The CUresult a call returns when the host is gone (CUDA_ERROR_UNKNOWN); describe() says so.
inline constexpr int kHostLost = 999;
// What a call returns when the host did not answer before the deadline set with answer_by() (no CUresult has
// this number); describe() says so.
inline constexpr int kNoAnswer = 1000;

// The process that makes the driver calls, as the CUDA backend uses it: the driver host below in production, the
// simulated driver in tests.
class DriverSession {
 public:
  virtual ~DriverSession() = default;
  // The driver: safe to call from several threads at once.
  virtual Driver& driver() = 0;
  // Calls made from now on wait for their answer until `deadline` at most (nullopt: as long as it takes).
  virtual void answer_by(std::optional<std::chrono::steady_clock::time_point> deadline) = 0;
  // This node's GPUs.
  virtual Result<NodeInventory> inventory() = 0;
  // The process was found in `initial` state and is now under gpuckpt's control.
  virtual void track(int pid, ProcessState initial) = 0;
  // The staging memory of `pid` is durable in the image gpuckpt-gpumem-<vpid>.img and may be dropped from it.
  virtual void staged(int pid, int vpid) = 0;
  // CRIU finished (whatever the outcome) and the backend put every process where it belongs.
  virtual void done() = 0;
  virtual int host_pid() const = 0;
};

class DriverHost final : public DriverSession {
 public:
  enum class Mode {
    Dump,            // guards the tracked processes if CRIU dies before done()
    DumpUnguarded,   // GPUCKPT_CUDA_GUARDIAN=0: does nothing when CRIU dies
    Restore,         // just serves calls; exits when CRIU's end closes
  };
  using DriverFactory = std::function<Result<std::unique_ptr<Driver>>()>;
  using InventoryReader = std::function<Result<NodeInventory>()>;

  // Forks the host, which calls `factory` (the real one dlopen()s libcuda) in its own process. Returns once the
  // host has loaded the driver, or with the factory's error. `image_dir_fd` (may be -1) is where the guardian's
  // log goes. `read_node` is how the host reads this node's GPUs for inventory() (default: the host root /,
  // NVML included).
  static Result<std::unique_ptr<DriverHost>> start(const DriverFactory& factory, Mode mode, int image_dir_fd,
                                                   const InventoryReader& read_node = {});

  DriverHost(const DriverHost&) = delete;
  DriverHost& operator=(const DriverHost&) = delete;
  ~DriverHost() override;   // closes the socket: without done() during a dump, the host acts as guardian

  // Every call is carried out by the host; calls from several threads at once run in parallel in the host.
  Driver& driver() override;
  void answer_by(std::optional<std::chrono::steady_clock::time_point> deadline) override;
  // Read in the host (NVML is one of the driver's libraries).
  Result<NodeInventory> inventory() override;
  void track(int pid, ProcessState initial) override;
  void staged(int pid, int vpid) override;
  void done() override;
  int host_pid() const override { return host_pid_; }

 private:
  explicit DriverHost(int control_fd, int host_pid);
  int control_fd_ = -1;
  int host_pid_ = -1;
  std::unique_ptr<Driver> remote_;
};

}  // namespace gpuckpt::cuda
