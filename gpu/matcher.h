// Choosing target GPUs for a checkpoint on this node: pure algorithm over the model, no I/O.
#pragma once

#include <optional>
#include <variant>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_model.h"
#include "base/result.h"

namespace gpuckpt {

// Each check can be relaxed (config or GPUCKPT_*_CHECK=0 environment, like CRIU's KFD_*_CHECK); every
// relaxation used is logged and reported in the plan.
struct MatchPolicy {
  bool check_model = true;      // vendor/device id, or NVIDIA name + compute capability
  bool check_memory = true;     // target VRAM >= source VRAM
  bool check_firmware = true;   // firmware/driver at least as new
  bool check_links = true;      // linked GPUs (XGMI hive, NVLink) land on GPUs linked the same way
  bool check_numa = true;       // prefer keeping NUMA/CPU affinity (a preference, never a rejection)

  // GPUCKPT_MODEL_CHECK, _MEMORY_CHECK, _FIRMWARE_CHECK, _LINK_CHECK, _NUMA_CHECK: 0/false/no/off relaxes,
  // 1/true/yes/on enforces, unset keeps the default (on). Logs every value once (log_params).
  static MatchPolicy from_env();
  // The same over `base` (e.g. the agent's config file): an unset variable keeps base's value.
  static MatchPolicy from_env(MatchPolicy base);
  void log_params() const;   // "param: GPUCKPT_MODEL_CHECK:1" ... (call once after applying a config file)
};

// A GPU of another vendor is never a candidate, whatever the policy says: no driver can take over the state.

struct GpuAssignment {
  std::string source_id;   // GpuDevice::id in the checkpoint's record
  std::string target_id;   // GpuDevice::id in this node's inventory
};

struct MatchPlan {
  std::vector<GpuAssignment> assignments;    // one per used source GPU, in the record's used_gpu_ids order
  std::vector<std::string> relaxations;      // checks that were off and would have failed otherwise
};

struct Rejection {
  std::string source_id;
  std::string candidate_id;
  std::string property;    // "vendor", "model", "memory", "firmware", "links", "taken", "incomplete",
                           // "not-allowed", "search-limit" (docs/formats.md says what each means)
  std::string detail;      // "target has 80 GiB, source used a GPU with 141 GiB"
};

struct MatchFailure {
  std::string summary;
  std::vector<Rejection> rejections;   // for every source GPU: every candidate and why it was ruled out
};

struct MatchRequest {
  const GpuPropertiesRecord* source = nullptr;
  const NodeInventory* target = nullptr;
  std::optional<std::vector<std::string>> allowed_target_ids;   // GPUs the scheduler assigned, if known
  MatchPolicy policy;
};

// Deterministic: the same inputs give the same plan. Backtracks over candidates; among the assignments that pass
// every enforced check it picks the one keeping the most GPUs on their source NUMA node, then the most GPUs
// that are the same device (same id or UUID, else same PCI address: restore where it ran), then the earliest in
// inventory order.
std::variant<MatchPlan, MatchFailure> match_gpus(const MatchRequest& request);

// One line for logs and errors: the summary, then every rejection as "SOURCE -> CANDIDATE: PROPERTY (DETAIL)".
std::string describe(const MatchFailure& failure);

// Dotted version comparison used for firmware/driver checks ("580.159.04", "96.00.a5.00.1a"): <0, 0, >0.
int compare_versions(std::string_view a, std::string_view b);

}  // namespace gpuckpt
