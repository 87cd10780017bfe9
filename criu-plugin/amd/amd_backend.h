// The AMD backend: CRIU hooks for processes that use AMD GPUs through KFD (/dev/kfd) and DRM render nodes.
// Everything it touches comes in through AmdBackendDeps, so the tests run the real hook functions against the
// simulated KFD/DRM device, a fixture host tree and a temporary image directory.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/host_root.h"
#include "base/result.h"
#include "criu-plugin/amd/amd_device.h"
#include "criu-plugin/amd/config.h"
#include "criu-plugin/amd/parallel_restore.h"
#include "criu-plugin/backend.h"

namespace gpuckpt::amd {

struct AmdBackendDeps {
  std::shared_ptr<AmdDevice> device;
  HostRoot host{"/"};                              // sysfs (KFD topology), /proc, /dev/shm
  std::function<int()> image_dir_fd;               // CRIU's criu_get_image_dir(); -1 = unknown
  std::function<Result<void>()> add_to_inventory;  // names the plugin in CRIU's inventory image
  std::optional<AmdConfig> config;                 // unset: read from the environment in init()
  // Stops a restored task whose GPU work cannot resume (kill(2) by default).
  std::function<int(int pid, int signal)> kill_task;
  // CRIU's fdstore where the host has one at init(RESTORE) (4.2 on): carries the parallel restore socket into
  // the restored processes. Unset: they use the inherited fd (criu-plugin/amd/parallel_restore.h).
  std::optional<FdStore> fd_store;
};

std::unique_ptr<plugin::Backend> make_amd_backend(AmdBackendDeps deps);

}  // namespace gpuckpt::amd
