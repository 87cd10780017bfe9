// libhsakmt keeps a small shared-memory file and a named semaphore in /dev/shm (hsakmt_shared_mem and
// sem.hsakmt_semaphore). A restored container starts with an empty /dev/shm unless the runtime carried it over,
// so the restore recreates them when they are missing. Paths go through the host root (the process's own
// root on a node, a fixture tree in tests).
#pragma once

#include <cstdint>

#include "base/host_root.h"
#include "base/result.h"

namespace gpuckpt::amd {

struct HsakmtSharedMem {
  std::uint64_t size = 0;     // 0: libhsakmt had none
  std::uint32_t magic = 0;    // its first four bytes
};

inline constexpr const char* kHsakmtShmPath = "dev/shm/hsakmt_shared_mem";
inline constexpr const char* kHsakmtSemPath = "dev/shm/sem.hsakmt_semaphore";

HsakmtSharedMem probe_hsakmt_shared_mem(const HostRoot& root);
// Creates what is missing; leaves existing files alone. `recreated` tells what was done (for logs and tests).
Result<void> restore_hsakmt_shared_mem(const HostRoot& root, const HsakmtSharedMem& saved, bool* recreated = nullptr);

}  // namespace gpuckpt::amd
