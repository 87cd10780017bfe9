// The restore plan: which of this node's GPUs take over a checkpoint's GPUs, and how the container's spec must
// change so the restored processes find them (device nodes at the paths the checkpoint expects, environment).
// The agent computes it (make_restore_plan, pure), stores it in the state directory under an id it generates, and
// applies it to spec.dump; the OCI hook applies it in `precreate` for runtimes that run that stage on restore, and
// copies it into the CRIU images directory (createRuntime) where the CRIU plugin reads the GPU mapping.
//
// Where plans live (the only place anything reads them from): <state_dir>/restore-plans/<plan id>.json. The id
// comes from new_restore_plan_id() in the agent, never from an archive or a container; a container names its
// plan only through the annotation io.gpuckpt.restore-plan=<plan id>, which the hook checks with
// is_restore_plan_id before it looks in the state directory. Device paths in a plan are canonical GPU device
// nodes (is_gpu_device_path), whatever the record or the plan file says.
//
// A plan is a capability (docs/security.md): bound to one checkpoint and, where the writer knows it, one
// container (check_plan_binding); it expires; it is used once: the hook removes it from the state directory as it
// places it in CRIU's images directory (remove_restore_plan), the agent's job removes its plan whatever the
// outcome, and what is left over (expired, unreadable) is swept (sweep_restore_plans).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "state/checkpoint_record.h"
#include "gpu/device_nodes.h"
#include "gpu/gpu_model.h"
#include "gpu/matcher.h"
#include "base/result.h"

namespace gpuckpt {

inline constexpr const char* kAnnotationRestorePlan = "io.gpuckpt.restore-plan";   // the plan's id
inline constexpr const char* kPlanFileInImages = "gpuckpt-restore-plan.json";     // in the CRIU images dir

struct DeviceRewrite {
  std::string container_path;   // where the checkpoint's container had the node ("/dev/nvidia0")
  std::string host_path;        // this node's device node of the target GPU ("/dev/nvidia1")
  std::string source_gpu_id;
  std::string target_gpu_id;
  std::string restored_path;    // where the restored container gets it; empty: container_path (plans before it)
  // host_path's device numbers as the plan's writer found them (under its host root); absent in plans of writers
  // that did not record them. The CRIU plugin renumbers the restored container's /dev with these: it sees the
  // node's /dev, not the writer's host root.
  std::optional<std::pair<std::uint32_t, std::uint32_t>> target_numbers = std::nullopt;

  const std::string& path_after_restore() const { return restored_path.empty() ? container_path : restored_path; }
};

// Where a moved GPU's node appears in the restored container. NVIDIA's driver finds a GPU's node by its own
// name, /dev/nvidia<minor>, when it restores a process (after a CUDA checkpoint the process holds no open GPU
// node), so an NVIDIA GPU moved to another minor takes the target's name: GPU 0's node kept under the name
// /dev/nvidia1 fails the driver's restore. Other nodes (AMD render nodes) keep the name the checkpoint knows.
std::string restored_device_path(const std::string& container_path, const std::string& host_path);

struct RestorePlan {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string id;              // new_restore_plan_id(): names the file in the state directory
  std::string checkpoint_id;   // the checkpoint it restores
  // What the plan is bound to (docs/security.md): the one container that may use it (its runtime id; empty:
  // the container is not known when the plan is made, e.g. the agent's own podman restore, and the plan is
  // bound to checkpoint_id alone) and when it stops being usable (unix seconds, UTC; 0 in plans made before
  // binding existed, which binding-aware readers refuse).
  std::string container_id;
  std::int64_t expires_at = 0;
  std::vector<GpuAssignment> assignments;
  std::vector<DeviceRewrite> devices;
  std::map<std::string, std::string> env;   // variables set to these values in the restored container
  std::vector<std::string> relaxations;
};

nlohmann::json to_json(const RestorePlan& plan);
Result<RestorePlan> restore_plan_from_json(const nlohmann::json& json, std::string_view source);

// Pure: device nodes and environment for `match` (source GPU -> target GPU) given what the checkpoint recorded.
// A device of the checkpoint whose GPU moves gets the target GPU's node of the same kind (nvidiaN, renderDN,
// cardN); a target GPU without such a node is an error naming both.
Result<RestorePlan> make_restore_plan(const CheckpointGpuRecord& checkpoint, const NodeInventory& target,
                                      const MatchPlan& match);

// The plan for restoring `checkpoint` on `node` when the restored container was given the GPUs
// `allocated` (ids of `node`'s GPUs: the runtime's device allocation, or the GPUs a request names): only those
// are targets; none given (std::nullopt) lets the matcher choose among all of the node's GPUs. The plan gets a
// fresh id (new_restore_plan_id). No acceptable assignment is an error (EDOM) with every rejection.
Result<RestorePlan> plan_for_allocation(const CheckpointGpuRecord& checkpoint, const NodeInventory& node,
                                        const std::optional<std::vector<std::string>>& allocated,
                                        const MatchPolicy& policy);

// Rewrites an OCI runtime spec (config.json / spec.dump) in place: linux.devices entries at the plan's
// container paths move to their path after restore with the target's major/minor (every rewrite is matched
// against the spec as it came, so swapped GPUs swap), an entry left at a path a node moves to is dropped (it
// would shadow the moved node), the cgroup device allow-list follows, env is set, and the
// io.gpuckpt.restore-plan annotation names the plan's id. Returns how many device entries changed. A spec whose
// sections have the wrong types is an error naming the field.
Result<int> apply_restore_plan(nlohmann::json& spec, const RestorePlan& plan, const DeviceNumberLookup& lookup);

// Who asks to use a plan: the container's runtime id (std::nullopt where the caller cannot see it: the precreate
// stage gets only the config) and the checkpoint id its config carries (io.gpuckpt.checkpoint-id; empty: none).
struct PlanUser {
  std::optional<std::string> container_id;
  std::string checkpoint_id;
};

// Whether `user` may use `plan` at `now` (unix seconds). Refused, with the plan's id and the reason: a plan with
// no expiry (expires_at 0) or past it (ETIME); one bound to another container, or to a container `user` cannot
// name (EACCES); one bound to its checkpoint alone whose checkpoint_id is not the user's (EACCES).
Result<void> check_plan_binding(const RestorePlan& plan, const PlanUser& user, std::int64_t now);
bool plan_expired(const RestorePlan& plan, std::int64_t now);

// The current time as plans count it (unix seconds).
std::int64_t plan_clock_now();

// "rp-" and 32 random hex digits: unguessable, so a pod author cannot name another restore's plan.
std::string new_restore_plan_id();
bool is_restore_plan_id(std::string_view id);

// <state_dir>/restore-plans/<plan id>.json, written atomically (temp + rename, fsynced). Reading an id that
// is_restore_plan_id refuses is an error; an absent plan is std::nullopt.
std::filesystem::path restore_plan_path(const std::filesystem::path& state_dir, std::string_view plan_id);
Result<void> write_restore_plan(const std::filesystem::path& state_dir, const RestorePlan& plan);
Result<std::optional<RestorePlan>> read_restore_plan(const std::filesystem::path& state_dir, std::string_view plan_id);

// Removes plan `plan_id` from the state directory: true when this call removed it, false when it was not there.
// Consuming a plan is this removal: of two users racing for one plan, exactly one sees true.
Result<bool> remove_restore_plan(const std::filesystem::path& state_dir, std::string_view plan_id);

// Removes from <state_dir>/restore-plans the plans nobody may use any more (expired, no expiry, unreadable) and
// temporary files a crashed writer left (older than an hour), looking at no more than `max_entries` entries:
// readers sweep a few per call, the agent all of them at start and periodically.
struct PlanSweep {
  std::size_t examined = 0;
  std::size_t removed = 0;
};
PlanSweep sweep_restore_plans(const std::filesystem::path& state_dir, std::int64_t now, std::size_t max_entries);

}  // namespace gpuckpt
