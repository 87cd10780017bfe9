// A GPU backend handles CRIU's hooks for one vendor. The plugin entry (plugin.cpp) offers each hook to every
// backend in turn; a backend returns -ENOTSUP for what is not its own so the next one (or another CRIU
// plugin) can take it. No backend function throws.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "criu/criu_stats.h"

namespace gpuckpt::plugin {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // stage: CRIU's CR_PLUGIN_STAGE__* value. init returning non-zero fails CRIU; a backend with nothing to
  // do (no GPU, no driver) logs why and returns 0, and then declines every hook.
  virtual int init(int stage) = 0;
  virtual void fini(int stage, int ret) = 0;

  virtual int pause_devices(int /*pid*/) { return -ENOTSUP; }
  virtual int checkpoint_devices(int /*pid*/) { return -ENOTSUP; }
  virtual int resume_devices_late(int /*pid*/) { return -ENOTSUP; }
  // criu-dev's DUMP_DEVICES_LATE: every task's memory is dumped (older CRIU: fini(kStageDump, ...) is the last
  // call before the tasks run again).
  virtual int dump_devices_late(int /*pid*/) { return -ENOTSUP; }
  virtual int dump_ext_file(int /*fd*/, int /*id*/) { return -ENOTSUP; }
  virtual int restore_ext_file(int /*id*/, bool* /*retry_needed*/) { return -ENOTSUP; }
  virtual int handle_device_vma(int /*fd*/, const struct stat* /*st*/) { return -ENOTSUP; }
  virtual int update_vma_map(const char* /*path*/, std::uint64_t /*addr*/, std::uint64_t /*old_pgoff*/,
                             std::uint64_t* /*new_pgoff*/, int* /*plugin_fd*/) {
    return -ENOTSUP;
  }
  virtual int post_forking() { return 0; }
  // Its own steps of the dump that just ended, added to what the plugin reports (criu_stats.h).
  virtual void add_dump_timings(PluginDumpTimings& /*timings*/) const {}
  // Its own steps of the restore that just ended.
  virtual void add_restore_timings(PluginRestoreTimings& /*timings*/) const {}
  // The node-local store the restore's timings are left in for the agent (memory_lineage.h; "" is the default
  // one); none: this backend took no part in the restore.
  virtual std::optional<std::string> restore_node_store() const { return std::nullopt; }
};

std::unique_ptr<Backend> make_cuda_backend();   // criu-plugin/cuda/
std::unique_ptr<Backend> make_amd_backend();    // criu-plugin/amd/

}  // namespace gpuckpt::plugin
