// Serialising the GPU properties record: JSON (annotations, CLI, API; schema in docs/schema/) and protobuf
// (CRIU images). Both carry `version`; readers refuse versions newer than they know.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gpu/gpu_model.h"
#include "gpu/matcher.h"
#include "base/result.h"

namespace gpuckpt {

nlohmann::json to_json(const GpuPropertiesRecord& record);
nlohmann::json to_json(const NodeInventory& inventory);
Result<GpuPropertiesRecord> record_from_json(const nlohmann::json& json);
// `source` names the input (a file path, "annotation io.gpuckpt.gpus") in error messages.
Result<GpuPropertiesRecord> parse_record(std::string_view text, std::string_view source);

std::string to_protobuf(const GpuPropertiesRecord& record);
// Either form, told apart by the first byte ('{' or '[' = JSON): what `gpuckpt match --source` accepts.
Result<GpuPropertiesRecord> read_record(std::string_view bytes, std::string_view source);
Result<GpuPropertiesRecord> record_from_protobuf(std::string_view bytes, std::string_view source);

}  // namespace gpuckpt

namespace gpuckpt {

// The outcome of matching, as `gpuckpt match --json` prints it and the agent returns it: for each source GPU the
// target's id, UUID, KFD gpu_id, render minor and device paths (what restore rewrites), or every rejection.
nlohmann::json to_json(const MatchPlan& plan, const GpuPropertiesRecord& source, const NodeInventory& target);
nlohmann::json to_json(const MatchFailure& failure);

}  // namespace gpuckpt
