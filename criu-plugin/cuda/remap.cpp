#include "criu-plugin/cuda/remap.h"

#include <algorithm>
#include <set>
#include <variant>

#include <nlohmann/json.hpp>

#include "base/json_reader.h"
#include "gpu/matcher.h"

namespace gpuckpt::cuda {
namespace {

using nlohmann::json;

Result<std::string> canonical(std::string_view text, const std::string& where) {
  GPUCKPT_TRY(const Uuid uuid, parse_uuid(text, where));
  return format_uuid(uuid);
}

// The UUID of a GPU in the model: NVIDIA's uuid field, else the "GPU-..." id.
std::string gpu_uuid_text(const GpuDevice& gpu) { return gpu.uuid.empty() ? gpu.id : gpu.uuid; }

}  // namespace

Result<GpuMapping> parse_mapping(std::string_view text, std::string_view source) {
  const std::string where(source);
  auto fail = [&](const std::string& why) {
    return make_error("GPU mapping file " + where + ": " + why +
                      " (expected {\"version\": 1, \"pairs\": [{\"source_uuid\": \"GPU-...\", \"target_uuid\": "
                      "\"GPU-...\"}]}; see docs/cuda.md)");
  };
  auto parsed = parse_json(text, where);
  if (!parsed) return fail("not valid JSON");
  const json& doc = parsed.value();
  if (!doc.is_object()) return fail("the top level is not an object");
  if (!doc.contains("version") || !doc["version"].is_number_integer()) return fail("no integer \"version\"");
  auto version = doc["version"].get<long long>();
  if (version != kMappingVersion)
    return fail("version " + std::to_string(version) + " is not supported (this gpuckpt reads version " +
                std::to_string(kMappingVersion) + "; upgrade gpuckpt on this node)");
  if (!doc.contains("pairs") || !doc["pairs"].is_array()) return fail("no \"pairs\" array");
  GpuMapping mapping;
  std::set<std::string> targets;
  std::size_t index = 0;
  for (const json& pair : doc["pairs"]) {
    const std::string at = where + " pair " + std::to_string(index++);
    if (!pair.is_object()) return fail("pair " + std::to_string(index - 1) + " is not an object");
    for (const char* key : {"source_uuid", "target_uuid"})
      if (!pair.contains(key) || !pair[key].is_string())
        return fail("pair " + std::to_string(index - 1) + " has no string \"" + key + "\"");
    GPUCKPT_TRY(const std::string from, canonical(pair["source_uuid"].get<std::string>(), at + " source_uuid"));
    GPUCKPT_TRY(const std::string to, canonical(pair["target_uuid"].get<std::string>(), at + " target_uuid"));
    if (mapping.count(from) != 0) return fail("source GPU " + from + " is listed twice");
    if (!targets.insert(to).second) return fail("two source GPUs are sent to target GPU " + to);
    mapping.emplace(from, to);
  }
  return mapping;
}

Result<GpuMapping> parse_restore_plan(std::string_view text, std::string_view source) {
  const std::string where(source);
  auto fail = [&](const std::string& why) {
    return make_error("restore plan " + where + ": " + why + " (written by gpuckpt's OCI hook; see docs/node-flow.md)");
  };
  auto parsed = parse_json(text, where);
  if (!parsed || !parsed->is_object()) return fail("not a JSON object");
  const json& doc = parsed.value();
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<long long>() != 1)
    return fail("no \"version\": 1 (a newer gpuckpt wrote it? upgrade gpuckpt on this node)");
  if (!doc.contains("assignments") || !doc["assignments"].is_array()) return fail("no \"assignments\" array");
  GpuMapping mapping;
  std::set<std::string> targets;
  for (const json& a : doc["assignments"]) {
    if (!a.is_object() || !a.contains("source_id") || !a["source_id"].is_string() || !a.contains("target_id") ||
        !a["target_id"].is_string())
      return fail("an assignment without string source_id and target_id");
    auto from = parse_uuid(a["source_id"].get<std::string>(), where);
    auto to = parse_uuid(a["target_id"].get<std::string>(), where);
    if (!from || !to) continue;   // not an NVIDIA GPU
    if (!targets.insert(format_uuid(*to)).second) return fail("two GPUs assigned to " + format_uuid(*to));
    mapping[format_uuid(*from)] = format_uuid(*to);
  }
  return mapping;
}

std::string mapping_to_json(const GpuMapping& mapping) {
  json pairs = json::array();
  for (const auto& [from, to] : mapping) pairs.push_back({{"source_uuid", from}, {"target_uuid", to}});
  return json{{"version", kMappingVersion}, {"pairs", pairs}}.dump(2);
}

Result<std::vector<UuidPair>> build_restore_pairs(const std::vector<std::string>& seen, const GpuMapping& mapping,
                                                  const std::vector<std::string>& node_gpus) {
  std::vector<std::string> sources;
  for (const auto& s : seen) {
    GPUCKPT_TRY(std::string c, canonical(s, "GPU the process saw at checkpoint time"));
    if (std::find(sources.begin(), sources.end(), c) == sources.end()) sources.push_back(std::move(c));
  }
  std::vector<std::string> node;
  for (const auto& n : node_gpus) {
    GPUCKPT_TRY(std::string c, canonical(n, "GPU of this node"));
    node.push_back(std::move(c));
  }
  auto on_node = [&](const std::string& uuid) { return std::find(node.begin(), node.end(), uuid) != node.end(); };

  std::map<std::string, std::string> target_of;
  std::set<std::string> taken;
  for (const auto& source : sources) {
    auto it = mapping.find(source);
    if (it == mapping.end()) continue;
    if (!on_node(it->second))
      return make_error("GPU mapping sends " + source + " to " + it->second +
                        ", which is not a GPU of this node; fix the mapping file or let gpuckpt choose");
    if (!taken.insert(it->second).second)
      return make_error("GPU mapping sends two GPUs to " + it->second + "; each target GPU can take one");
    target_of[source] = it->second;
  }
  // Unplaced GPUs keep their own GPU where possible, so a same-node restore stays the identity.
  for (const auto& source : sources) {
    if (target_of.count(source) == 0 && on_node(source) && taken.count(source) == 0) {
      target_of[source] = source;
      taken.insert(source);
    }
  }
  for (const auto& source : sources) {
    if (target_of.count(source) != 0) continue;
    auto free_gpu = std::find_if(node.begin(), node.end(), [&](const auto& n) { return taken.count(n) == 0; });
    if (free_gpu == node.end())
      return make_error("the process saw " + std::to_string(sources.size()) + " GPU(s) when it was checkpointed "
                        "and the CUDA driver needs a GPU of this node for each, but this node has only " +
                        std::to_string(node.size()) + "; restore it on a node with at least as many GPUs");
    target_of[source] = *free_gpu;
    taken.insert(*free_gpu);
  }

  bool identity = std::all_of(sources.begin(), sources.end(), [&](const auto& s) { return target_of[s] == s; });
  std::vector<UuidPair> pairs;
  if (identity) return pairs;
  for (const auto& source : sources) {
    UuidPair pair;
    pair.source = *parse_uuid(source, "source");
    pair.target = *parse_uuid(target_of[source], "target");
    pairs.push_back(pair);
  }
  return pairs;
}

std::vector<std::string> nvidia_uuids(const NodeInventory& inventory) {
  std::vector<std::string> out;
  for (const auto& gpu : inventory.gpus) {
    if (gpu.vendor != GpuVendor::Nvidia) continue;
    auto uuid = parse_uuid(gpu_uuid_text(gpu), "inventory");
    if (uuid) out.push_back(format_uuid(*uuid));
  }
  return out;
}

int nvidia_minor(const NodeInventory& inventory, const Uuid& uuid) {
  for (const auto& gpu : inventory.gpus) {
    if (gpu.vendor != GpuVendor::Nvidia) continue;
    auto parsed = parse_uuid(gpu_uuid_text(gpu), "inventory");
    if (parsed && *parsed == uuid) return gpu.device_minor;
  }
  return -1;
}

Result<GpuMapping> choose_mapping(const GpuPropertiesRecord& source, const NodeInventory& node) {
  std::vector<std::string> used;
  for (const auto& id : source.used_gpu_ids) {
    const GpuDevice* gpu = find_gpu(source.node, id);
    GPUCKPT_TRY(std::string uuid,
                canonical(gpu ? gpu_uuid_text(*gpu) : id, "GPU " + id + " of the checkpoint's record"));
    used.push_back(std::move(uuid));
  }
  const auto here = nvidia_uuids(node);
  GpuMapping mapping;
  bool all_here = std::all_of(used.begin(), used.end(),
                              [&](const auto& u) { return std::find(here.begin(), here.end(), u) != here.end(); });
  if (all_here) {
    for (const auto& u : used) mapping[u] = u;
    return mapping;
  }
  MatchRequest request;
  request.source = &source;
  request.target = &node;
  request.policy = MatchPolicy::from_env();
  auto outcome = match_gpus(request);
  if (auto* failure = std::get_if<MatchFailure>(&outcome)) {
    return make_error("no GPU of this node can take the checkpoint's GPUs: " + describe(*failure) + ". Restore on a node with matching GPUs, or relax a check (docs/cuda.md)",
                      ENODEV);
  }
  for (const auto& a : std::get<MatchPlan>(outcome).assignments) {
    const GpuDevice* from = find_gpu(source.node, a.source_id);
    const GpuDevice* to = find_gpu(node, a.target_id);
    if (from == nullptr || to == nullptr)
      return make_error("the matcher named GPU " + a.source_id + " -> " + a.target_id + ", which the record or "
                        "this node's inventory does not have (a gpuckpt bug; please report it)");
    GPUCKPT_TRY(const std::string f, canonical(gpu_uuid_text(*from), "record GPU " + a.source_id));
    GPUCKPT_TRY(std::string t, canonical(gpu_uuid_text(*to), "node GPU " + a.target_id));
    mapping[f] = std::move(t);
  }
  return mapping;
}

Result<void> require_plan_for_moves(const GpuMapping& unplanned) {
  std::string moved;
  for (const auto& [from, to] : unplanned)
    if (from != to) moved += (moved.empty() ? "" : ", ") + from + " (this node's nearest match: " + to + ")";
  if (moved.empty()) return {};
  return make_error("the checkpoint's GPU " + moved + " is not on this node, and no gpuckpt restore plan reached "
                    "CRIU's images directory (" + std::string(kRestorePlanFileName) + "), so nothing says which of "
                    "the container's GPUs takes its place; the driver's restore was not attempted. Check that the "
                    "restore went through gpuckpt: on Kubernetes gpuckpt-nri running and registered with the "
                    "runtime, and gpuckpt's OCI hook installed for createRuntime (hooks.d, or gpuckpt-nri --hook); "
                    "with the agent, its restore job's log. Without gpuckpt, give a mapping file " +
                    std::string(kMappingFileName) + " (docs/cuda.md)", ENODEV);
}

}  // namespace gpuckpt::cuda
