// spec.dump / config.json with a restore plan applied, restore plans as files, and restore planning from a
// checkpoint record. The first byte picks which; the rest is the document.
#include "base/json_reader.h"
#include "gpu/matcher.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto json = parse_json(text, "fuzz");
  if (!json) return 0;
  switch (data[0] % 3) {
    case 0: {   // a runtime spec
      (void)apply_restore_plan(json.value(), fuzz::fixed_plan(), fuzz::fixed_numbers());
      (void)json->dump();
      break;
    }
    case 1: {   // a restore plan file
      auto plan = restore_plan_from_json(json.value(), "plan");
      if (!plan) break;
      nlohmann::json spec = {{"linux", {{"devices", nlohmann::json::array({{{"path", "/dev/nvidia0"}}})}}}};
      (void)apply_restore_plan(spec, plan.value(), fuzz::fixed_numbers());
      break;
    }
    default: {   // gpuckpt-gpus.json, matched and planned onto a two-GPU node
      auto record = checkpoint_record_from_json(json.value(), "record");
      if (!record) break;
      const NodeInventory node = fuzz::two_gpus();
      MatchRequest request;
      request.source = &record->record;
      request.target = &node;
      auto outcome = match_gpus(request);
      if (auto* plan = std::get_if<MatchPlan>(&outcome)) (void)make_restore_plan(record.value(), node, *plan);
      break;
    }
  }
  return 0;
}
