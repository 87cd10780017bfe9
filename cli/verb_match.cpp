// gpuckpt match --source FILE [--host-root DIR] [--target-gpus ID,ID] [--nvml-snapshot FILE] [--json]
// gpuckpt match --source FILE --agent URL --token-file FILE [--json]
// Exit 0 + the mapping, 3 + every rejection when nothing fits, 2 on bad input, 1 when the agent cannot be asked.
// With --agent the node's agent judges (POST /v1/match): its inventory, NVML included, and its match_policy, the
// same judgement its restore makes; without, this process reads the host root (NVML only where it is "/").
#include <cstdio>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "cli/node_client.h"
#include "gpu/matcher.h"
#include "gpu/properties_record.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kUsage =
    "gpuckpt match --source FILE|- (JSON or protobuf record) [--host-root DIR] [--target-gpus ID,ID...] [--nvml-snapshot FILE] [--json]\n"
    "       gpuckpt match --source FILE|- --agent URL --token-file FILE [--json]   (the agent's node judges)";

std::vector<std::string> split_ids(const std::string& list) {
  std::vector<std::string> ids;
  std::stringstream in(list);
  std::string id;
  while (std::getline(in, id, ','))
    if (!id.empty()) ids.push_back(id);
  return ids;
}

std::string render(const nlohmann::json& gpu) {
  const int minor = gpu.value("render_minor", -1);
  return minor >= 0 ? "renderD" + std::to_string(minor) : "-";
}

// The verdict (gpu/properties_record's match JSON, local or the agent's), as a table or JSON; the exit code.
int print_verdict(const nlohmann::json& verdict, bool json) {
  const bool matched = verdict.value("matched", false);
  if (json) {
    std::printf("%s\n", verdict.dump(2).c_str());
    return matched ? kExitOk : kExitNoMatch;
  }
  if (matched) {
    std::printf("%-44s %-44s %-10s %-10s %s\n", "SOURCE", "TARGET", "SRC-RENDER", "DST-RENDER", "DEVICES");
    for (const auto& m : verdict.value("mappings", nlohmann::json::array())) {
      std::string paths;
      for (const auto& p : m["target"].value("device_paths", nlohmann::json::array()))
        paths += (paths.empty() ? "" : ",") + p.get<std::string>();
      std::printf("%-44s %-44s %-10s %-10s %s\n", m["source"].value("id", "").c_str(), m["target"].value("id", "").c_str(),
                  render(m["source"]).c_str(), render(m["target"]).c_str(), paths.c_str());
    }
    for (const auto& r : verdict.value("relaxations", nlohmann::json::array()))
      std::printf("relaxed: %s\n", r.get<std::string>().c_str());
    return kExitOk;
  }
  std::printf("no match: %s\n", verdict.value("summary", "").c_str());
  std::string current;
  for (const auto& r : verdict.value("rejections", nlohmann::json::array())) {
    const std::string source = r.value("source_id", "");
    if (source != current) std::printf("source %s:\n", (current = source).c_str());
    std::printf("  %-44s %-11s %s\n", r.value("candidate_id", "").c_str(), r.value("property", "").c_str(),
                r.value("detail", "").c_str());
  }
  return kExitNoMatch;
}

struct MatchArgs {
  InventoryArgs inventory;
  NodeTarget agent;
  bool host_flags = false;   // --host-root or --nvml-snapshot given
  std::string source_path;
  std::optional<std::vector<std::string>> assigned;
  bool json = false;
};

// The arguments, or the exit code to stop with (--help, a usage error).
std::optional<int> parse_match_args(std::span<char*> args, MatchArgs& out) {
  out.agent.agent_url.clear();   // only --agent asks an agent: GPUCKPT_AGENT alone keeps match on this host
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--json") {
      out.json = true;
    } else if (arg == "--help" || arg == "-h") {
      return print_help("match");
    } else if (arg == "--source" || arg == "--target-gpus" || arg == "--assigned") {
      if (i + 1 >= args.size()) return usage_error("match", arg + " needs a value", kUsage);
      const std::string value = args[++i];
      if (arg == "--assigned") warn_deprecated("match", arg, "--target-gpus");
      if (arg == "--source") out.source_path = value;
      else out.assigned = split_ids(value);
    } else if (arg.rfind("--source=", 0) == 0) {
      out.source_path = arg.substr(9);
    } else if (arg.rfind("--target-gpus=", 0) == 0) {
      out.assigned = split_ids(arg.substr(14));
    } else if (arg.rfind("--assigned=", 0) == 0) {
      warn_deprecated("match", "--assigned", "--target-gpus");
      out.assigned = split_ids(arg.substr(11));
    } else if (arg.rfind("--agent", 0) == 0 || arg.rfind("--token-file", 0) == 0) {
      if (!out.agent.consume(args, i)) return usage_error("match", "unknown argument '" + arg + "'", kUsage);
      if (!out.agent.problem.empty()) return usage_error("match", out.agent.problem, kUsage);
    } else if (out.inventory.consume(args, i)) {
      out.host_flags = true;
    } else {
      return usage_error("match", "unknown or incomplete argument '" + arg + "'", kUsage);
    }
  }
  if (!out.inventory.problem.empty()) return usage_error("match", out.inventory.problem, kUsage);
  if (!out.agent.agent_url.empty() && (out.host_flags || out.assigned))
    return usage_error("match", "--agent judges on the agent's node: --host-root, --nvml-snapshot and --target-gpus do not apply",
                       kUsage);
  if (out.source_path.empty()) return usage_error("match", "--source FILE is required", kUsage);
  if (out.assigned && out.assigned->empty())
    return usage_error("match", "--target-gpus needs at least one GPU id", kUsage);
  return std::nullopt;
}

// The record's bytes from FILE or, for "-", stdin; std::nullopt (said on stderr) when FILE cannot be read.
std::optional<std::string> read_source(const std::string& path) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "gpuckpt match: cannot read %s (the record from 'gpuckpt gpus --json' or a checkpoint)\n",
                 path.c_str());
    return std::nullopt;
  }
  buffer << in.rdbuf();
  return buffer.str();
}

// Whether the node has every GPU --target-gpus names; the first it lacks is said on stderr.
bool has_target_gpus(const NodeInventory& inventory, const std::vector<std::string>& ids, const std::string& host_root) {
  for (const auto& id : ids) {
    if (find_gpu(inventory, id)) continue;
    std::string known;
    for (const auto& gpu : inventory.gpus) known += " " + gpu.id;
    std::fprintf(stderr, "gpuckpt match: --target-gpus names GPU '%s', which %s does not have (GPUs:%s)\n", id.c_str(),
                 host_root.c_str(), known.empty() ? " none" : known.c_str());
    return false;
  }
  return true;
}

int match_on_agent(const MatchArgs& opts, const GpuPropertiesRecord& record) {
  init_cli_logging("match");
  auto verdict = agent_post(opts.agent, "/v1/match", to_json(record));
  if (!verdict) {
    std::fprintf(stderr, "gpuckpt match: %s\n", verdict.error().message.c_str());
    return verdict.error().errno_value == EIO ? 1 : kExitBadInput;
  }
  return print_verdict(verdict.value(), opts.json);
}

}  // namespace

int run_match(std::span<char*> args) {
  MatchArgs opts;
  if (auto stop = parse_match_args(args, opts)) return *stop;
  const auto text = read_source(opts.source_path);
  if (!text) return kExitBadInput;
  auto record = read_record(*text, opts.source_path == "-" ? "stdin" : opts.source_path);
  if (!record) {
    std::fprintf(stderr, "gpuckpt match: %s\n", record.error().message.c_str());
    return kExitBadInput;
  }
  if (!opts.agent.agent_url.empty()) return match_on_agent(opts, *record);
  auto inventory = opts.inventory.read("match");
  if (!inventory) return kExitBadInput;
  if (opts.assigned && !has_target_gpus(*inventory, *opts.assigned, opts.inventory.host_root)) return kExitBadInput;
  MatchRequest request{&*record, &*inventory, opts.assigned, MatchPolicy::from_env()};
  const auto result = match_gpus(request);
  if (const auto* plan = std::get_if<MatchPlan>(&result))
    return print_verdict(to_json(*plan, *record, *inventory), opts.json);
  return print_verdict(to_json(std::get<MatchFailure>(result)), opts.json);
}

}  // namespace gpuckpt::cli
