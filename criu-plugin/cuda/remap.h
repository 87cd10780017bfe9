// GPU remap on restore: which GPU of this node takes the place of each GPU the checkpointed process saw, and
// the UUID pairs cuCheckpointProcessRestore needs. Pure functions over text and the GPU model; no I/O.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_model.h"
#include "base/result.h"
#include "criu-plugin/cuda/uuid.h"

namespace gpuckpt::cuda {

// The mapping file the agent/CLI writes next to the CRIU images (format in docs/cuda.md):
//   {"version": 1, "pairs": [{"source_uuid": "GPU-...", "target_uuid": "GPU-..."}, ...]}
inline constexpr const char* kMappingFileName = "gpuckpt-gpu-map.json";
inline constexpr int kMappingVersion = 1;

// Source GPU UUID -> target GPU UUID, both in format_uuid() form.
using GpuMapping = std::map<std::string, std::string>;

// `source` names the file in errors. Refuses unknown versions, bad UUIDs, a source listed twice and two sources
// sent to one target.
Result<GpuMapping> parse_mapping(std::string_view text, std::string_view source);
std::string mapping_to_json(const GpuMapping& mapping);

// The restore plan gpuckpt's OCI hook copies next to the images (docs/node-flow.md):
//   {"version": 1, "assignments": [{"source_id": "GPU-...", "target_id": "GPU-..."}], ...}
// Assignments whose ids are not NVIDIA UUIDs (other vendors' GPUs) are not ours and are skipped.
inline constexpr const char* kRestorePlanFileName = "gpuckpt-restore-plan.json";
Result<GpuMapping> parse_restore_plan(std::string_view text, std::string_view source);

struct UuidPair {
  Uuid source{};
  Uuid target{};
};

// The pair list for one process. It must name every GPU the process could see at checkpoint time (`seen`),
// not only the moved ones: the driver refuses a partial list (verified: GPU0->GPU1 alone fails, GPU0->GPU1
// plus GPU1->GPU0 works). `mapping` places some of the seen GPUs; each other one keeps its own GPU when this
// node has it and nobody else took it, else takes the first free GPU of `node_gpus`. Empty when every GPU
// stays where it was (the driver's default, no pairs needed).
Result<std::vector<UuidPair>> build_restore_pairs(const std::vector<std::string>& seen, const GpuMapping& mapping,
                                                  const std::vector<std::string>& node_gpus);

// The NVIDIA GPUs of `inventory`, as UUIDs in format_uuid() form, in inventory order.
std::vector<std::string> nvidia_uuids(const NodeInventory& inventory);

// The device minor (/dev/nvidia<minor>) of the NVIDIA GPU `uuid` of `inventory`; -1 when it has none or no such GPU.
int nvidia_minor(const NodeInventory& inventory, const Uuid& uuid);

// Without a mapping file: the identity when this node has every GPU the checkpoint used (same node), else the
// shared matcher's choice over the recorded properties and this node's inventory.
Result<GpuMapping> choose_mapping(const GpuPropertiesRecord& source, const NodeInventory& node);

// The last check before the driver's restore when neither a mapping file nor a restore plan reached CRIU's images
// directory: GPUs may only stay where they are. An error (ENODEV) names every GPU of the checkpoint that
// `unplanned` (choose_mapping's answer) would move, says that no gpuckpt restore plan reached the images directory,
// and what to check; nothing is moved by guesswork onto GPUs the container may not have been given.
Result<void> require_plan_for_moves(const GpuMapping& unplanned);

}  // namespace gpuckpt::cuda
