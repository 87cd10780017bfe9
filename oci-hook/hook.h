// The OCI hook's stages, as functions over strings (main.cpp does the stdin/stdout/timeout plumbing):
//   createRuntime  state JSON in; records container -> GPUs in the state dir; copies an applied restore plan
//                  into the CRIU images directory (bundle/checkpoint) where the plugin reads the GPU mapping.
//   precreate      runtime config in, config out; applies the restore plan the annotation io.gpuckpt.restore-plan
//                  names (<state_dir>/restore-plans/<plan id>.json), else returns it unchanged.
//   poststop       state JSON in; forgets the container's record.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "common/gpu_container_record.h"
#include "common/gpu_model.h"
#include "common/restore_plan.h"
#include "common/result.h"

namespace gpuckpt::hook {

enum class Stage { Precreate, CreateRuntime, Poststop };
Result<Stage> parse_stage(std::string_view name);

struct HookOptions {
  std::filesystem::path state_dir = "/var/lib/gpuckpt";
  std::filesystem::path host_root = "/";
  std::chrono::milliseconds timeout{5000};
};

// createRuntime: records the container (common/gpu_container_record.h) and places an applied restore plan.
Result<RecordOutcome> record_container(std::string_view state_json, const HookOptions& options,
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
