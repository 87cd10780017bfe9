// What the CUDA backend depends on, as a node has it (cuda_backend.h); the one place its settings are read from
// the environment.
#include <signal.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "gpu/inventory.h"
#include "base/log.h"
#include "criu-plugin/criu_host.h"
#include "criu-plugin/cuda/cuda_backend.h"
#include "criu-plugin/cuda/cuda_driver.h"
#include "criu-plugin/plugin.h"

namespace gpuckpt::cuda {
namespace {

long env_number(const char* name, long fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 0) {
    log::warn(std::string(name) + "='" + value + "' is not a non-negative number; using " + std::to_string(fallback));
    return fallback;
  }
  return parsed;
}

}  // namespace

CudaSettings CudaSettings::from_env() {
  CudaSettings settings;
  settings.parallel = env_number("GPUCKPT_CUDA_PARALLEL", 1) != 0;
  settings.guardian = env_number("GPUCKPT_CUDA_GUARDIAN", 1) != 0;
  settings.init_wait_ms = env_number("GPUCKPT_CUDA_INIT_WAIT_MS", settings.init_wait_ms);
  settings.lock_timeout_ms =
      static_cast<unsigned>(env_number("GPUCKPT_CUDA_LOCK_TIMEOUT_MS", settings.lock_timeout_ms));
  if (const char* library = std::getenv("GPUCKPT_CUDA_LIBRARY"); library != nullptr) settings.driver_library = library;
  return settings;
}

CudaClock CudaClock::steady() {
  return CudaClock{[] { return std::chrono::steady_clock::now(); },
                   [](std::chrono::milliseconds pause) { std::this_thread::sleep_for(pause); }};
}

CudaBackendDeps node_deps() {
  CudaBackendDeps deps;
  deps.host = HostRoot("/");
  deps.settings = CudaSettings::from_env();
  deps.start_driver = [library = deps.settings.driver_library, host = deps.host](
                          DriverHost::Mode mode, int image_dir_fd) -> Result<std::unique_ptr<DriverSession>> {
    GPUCKPT_TRY(auto started, DriverHost::start([library] { return load_node_driver(library); }, mode, image_dir_fd,
                                                [host] { return read_inventory(host); }));
    return std::unique_ptr<DriverSession>(std::move(started));
  };
  deps.criu.image_dir_fd = [] { return criu::image_dir_fd(); };
  deps.criu.add_to_inventory = [] { return criu::add_to_inventory(plugin::kPluginName); };
  deps.criu.remaining_alarm_ms = [] { return criu::remaining_alarm_ms(); };
  deps.criu.alarm_timed_out = [] { return criu::alarm_timed_out(); };
  deps.criu.final_state = [] { return criu::final_state(); };
  deps.criu.set_interrupt_only_mode = [] { return criu::set_interrupt_only_mode(); };
  deps.kill_task = [](int pid, int signal) { return ::kill(pid, signal); };
  return deps;
}

}  // namespace gpuckpt::cuda
