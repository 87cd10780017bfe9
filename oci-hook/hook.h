// The OCI hook's stages, as functions over strings (main.cpp does the stdin/stdout/timeout plumbing):
//   createRuntime  state JSON in; records container -> GPUs in the state dir; in a restore, moves the restore
//                  plan the config names from the state dir into CRIU's images directory (find_criu_images_dir),
//                  where the plugin reads the GPU mapping: the plan is used up.
//   precreate      runtime config in, config out; applies the restore plan the annotation io.gpuckpt.restore-plan
//                  names (<state_dir>/restore-plans/<plan id>.json), else returns it unchanged. It leaves the
//                  plan in place: podman runs createRuntime after it, which uses it up.
// Both refuse a plan its binding does not allow (check_plan_binding: expired, another container or checkpoint).
//   poststop       state JSON in; forgets the container's record.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "state/gpu_container_record.h"
#include "gpu/gpu_model.h"
#include "restore/restore_plan.h"
#include "base/result.h"

namespace gpuckpt::hook {

enum class Stage { Precreate, CreateRuntime, Poststop };
Result<Stage> parse_stage(std::string_view name);

struct HookOptions {
  std::filesystem::path state_dir = "/var/lib/gpuckpt";
  std::filesystem::path host_root = "/";
  std::chrono::milliseconds timeout{5000};
  // The process that runs the hook (its parent): in a restore, runc or crun, whose command line names CRIU's
  // images directory. 0: unknown (podman's <bundle>/checkpoint is assumed).
  int runtime_pid = 0;
  // Where the runtime's /proc and its --image-path are seen: the hook's own root, whatever host_root says (the
  // runtime pid is one of the hook's PID namespace, and the runtime runs in the hook's mount namespace; host_root
  // is where the GPU inventory is read, a fixture tree in tests). Tests point it at a fake tree.
  std::filesystem::path process_root = "/";
};

// createRuntime. `record`: the bookkeeping, whose failure is logged while the container starts. `restore`: what
// happened to the restore plan (empty: not a restore, nothing to say); an error refuses the container (the hook
// exits non-zero and the runtime stops the restore) rather than restore it without its plan.
struct CreateRuntimeOutcome {
  Result<RecordOutcome> record;
  Result<std::string> restore;
};
CreateRuntimeOutcome create_runtime(std::string_view state_json, const HookOptions& options,
                                    const InventoryReader& inventory, const DeviceNumberLookup& lookup);

struct PrecreateOutcome {
  std::string config;     // what goes to stdout
  bool modified = false;
  std::string message;
};
// An error means: refuse (the config names a restore plan that is malformed, unreadable or cannot be applied).
// Anything else passes the config through.
Result<PrecreateOutcome> precreate(std::string_view config_json, const HookOptions& options,
                                   const DeviceNumberLookup& lookup);

Result<std::string> forget_container(std::string_view state_json, const HookOptions& options);

}  // namespace gpuckpt::hook
