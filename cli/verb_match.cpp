// gpuckpt match --source FILE [--host-root DIR] [--assigned ID,ID] [--nvml-snapshot FILE] [--json]
// Exit 0 + the mapping, 3 + every rejection when nothing fits, 2 on bad input.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <string>

#include "cli/cli_args.h"
#include "common/matcher.h"
#include "common/properties_record.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kUsage =
    "gpuckpt match --source FILE|- (JSON or protobuf record) [--host-root DIR] [--assigned ID,ID...] [--nvml-snapshot FILE] [--json]";

std::vector<std::string> split_ids(const std::string& list) {
  std::vector<std::string> ids;
  std::stringstream in(list);
  std::string id;
  while (std::getline(in, id, ','))
    if (!id.empty()) ids.push_back(id);
  return ids;
}

std::string render(int minor) { return minor >= 0 ? "renderD" + std::to_string(minor) : "-"; }

}  // namespace

int run_match(std::span<char*> args) {
  InventoryArgs opts;
  std::string source_path;
  std::optional<std::vector<std::string>> assigned;
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s\n", kUsage);
      return kExitOk;
    } else if (arg == "--source" || arg == "--assigned") {
      if (i + 1 >= args.size()) return usage_error("match", arg + " needs a value", kUsage);
      const std::string value = args[++i];
      if (arg == "--source") source_path = value;
      else assigned = split_ids(value);
    } else if (arg.rfind("--source=", 0) == 0) {
      source_path = arg.substr(9);
    } else if (arg.rfind("--assigned=", 0) == 0) {
      assigned = split_ids(arg.substr(11));
    } else if (!opts.consume(args, i)) {
      return usage_error("match", "unknown or incomplete argument '" + arg + "'", kUsage);
    }
  }
  if (!opts.problem.empty()) return usage_error("match", opts.problem, kUsage);
  if (source_path.empty()) return usage_error("match", "--source FILE is required", kUsage);
  if (assigned && assigned->empty()) return usage_error("match", "--assigned needs at least one GPU id", kUsage);

  std::string text;
  if (source_path == "-") {
    std::stringstream in;
    in << std::cin.rdbuf();
    text = in.str();
  } else {
    std::ifstream in(source_path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "gpuckpt match: cannot read %s (the record from 'gpuckpt gpus --json' or a checkpoint)\n",
                   source_path.c_str());
      return kExitBadInput;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  auto record = read_record(text, source_path == "-" ? "stdin" : source_path);
  if (!record) {
    std::fprintf(stderr, "gpuckpt match: %s\n", record.error().message.c_str());
    return kExitBadInput;
  }
  auto inventory = opts.read("match");
  if (!inventory) return kExitBadInput;
  if (assigned) {
    for (const auto& id : *assigned) {
      if (!find_gpu(*inventory, id)) {
        std::string known;
        for (const auto& gpu : inventory->gpus) known += " " + gpu.id;
        std::fprintf(stderr, "gpuckpt match: --assigned names GPU '%s', which %s does not have (GPUs:%s)\n", id.c_str(),
                     opts.host_root.c_str(), known.empty() ? " none" : known.c_str());
        return kExitBadInput;
      }
    }
  }

  MatchRequest request{&*record, &*inventory, assigned, MatchPolicy::from_env()};
  const auto result = match_gpus(request);
  if (const auto* plan = std::get_if<MatchPlan>(&result)) {
    if (json) {
      std::printf("%s\n", to_json(*plan, *record, *inventory).dump(2).c_str());
      return kExitOk;
    }
    std::printf("%-44s %-44s %-10s %-10s %s\n", "SOURCE", "TARGET", "SRC-RENDER", "DST-RENDER", "DEVICES");
    for (const auto& a : plan->assignments) {
      const GpuDevice* from = find_gpu(record->node, a.source_id);
      const GpuDevice* to = find_gpu(*inventory, a.target_id);
      std::string paths;
      for (const auto& p : to->device_paths) paths += (paths.empty() ? "" : ",") + p;
      std::printf("%-44s %-44s %-10s %-10s %s\n", a.source_id.c_str(), a.target_id.c_str(),
                  render(from->render_minor).c_str(), render(to->render_minor).c_str(), paths.c_str());
    }
    for (const auto& r : plan->relaxations) std::printf("relaxed: %s\n", r.c_str());
    return kExitOk;
  }
  const auto& failure = std::get<MatchFailure>(result);
  if (json) {
    std::printf("%s\n", to_json(failure).dump(2).c_str());
  } else {
    std::printf("no match: %s\n", failure.summary.c_str());
    std::string current;
    for (const auto& r : failure.rejections) {
      if (r.source_id != current) std::printf("source %s:\n", (current = r.source_id).c_str());
      std::printf("  %-44s %-11s %s\n", r.candidate_id.c_str(), r.property.c_str(), r.detail.c_str());
    }
  }
  return kExitNoMatch;
}

}  // namespace gpuckpt::cli
