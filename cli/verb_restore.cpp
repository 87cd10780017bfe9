// gpuckpt restore ARCHIVE [--name NAME] [--target-gpus ID,ID] [target flags] [--json]
// Matches the checkpoint's GPUs on this node, writes the restore plan and restores the container.
#include <cstdio>
#include <filesystem>
#include <span>
#include <sstream>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "cli/node_client.h"

namespace gpuckpt::cli {

int run_restore(std::span<char*> args) {
  const std::string usage =
      std::string("gpuckpt restore ARCHIVE [--name NAME] [--target-gpus ID,ID] ") + kTargetFlags + " [--json]";
  NodeTarget target;
  bool checkpoint_dir_given = false;
  nlohmann::json body = nlohmann::json::object();
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("restore");
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--name" || arg == "--target-gpus") {
      if (i + 1 >= args.size()) return usage_error("restore", arg + " needs a value", usage.c_str());
      const std::string value = args[++i];
      if (arg == "--name") {
        body["name"] = value;
      } else {
        nlohmann::json ids = nlohmann::json::array();
        std::stringstream in(value);
        std::string id;
        while (std::getline(in, id, ','))
          if (!id.empty()) ids.push_back(id);
        body["target_gpus"] = ids;
      }
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("restore", target.problem, usage.c_str());
      checkpoint_dir_given = checkpoint_dir_given || arg.rfind("--checkpoint-dir", 0) == 0;
    } else if (arg.empty() || arg[0] == '-' || body.contains("archive")) {
      return usage_error("restore", "unexpected argument '" + arg + "'", usage.c_str());
    } else {
      body["archive"] = arg;
    }
  }
  if (!body.contains("archive")) return usage_error("restore", "name the checkpoint archive to restore", usage.c_str());
  init_cli_logging("restore");
  if (target.agent_url.empty()) {
    // In-process: the person running the CLI chose the file; the agent's directory rule follows it.
    const auto archive = std::filesystem::absolute(body["archive"].get<std::string>());
    body["archive"] = archive.string();
    if (!checkpoint_dir_given) target.checkpoint_dir = archive.parent_path().string();
    target.checkpoint_dir = std::filesystem::absolute(target.checkpoint_dir).string();
    target.state_dir = std::filesystem::absolute(target.state_dir).string();
  }
  const auto outcome = run_node_job(target, "restore", body["archive"].get<std::string>(), body);
  if (outcome.exit_code != 0) return outcome.exit_code;
  if (json) {
    std::printf("%s\n", outcome.job.dump(2).c_str());
    return kExitOk;
  }
  const auto& result = outcome.job["result"];
  std::printf("restored %s as %s (%s)\n", result.value("archive", "").c_str(), result.value("container_name", "").c_str(),
              result.value("container_id", "").substr(0, 12).c_str());
  if (result.contains("plan")) {
    for (const auto& a : result["plan"]["assignments"])
      std::printf("  GPU %s -> %s\n", a.value("source_id", "").c_str(), a.value("target_id", "").c_str());
    for (const auto& d : result["plan"]["devices"]) {
      const std::string was = d.value("container_path", ""), now = d.value("restored_path", was);
      std::printf("  device %s%s now backed by %s\n", now.c_str(), now == was ? "" : (" (was " + was + ")").c_str(),
                  d.value("host_path", "").c_str());
    }
    for (const auto& r : result["plan"]["relaxations"]) std::printf("  relaxed: %s\n", r.get<std::string>().c_str());
  } else {
    std::printf("  no GPU state: restores on any node\n");
  }
  std::printf("  took: %.2f s\n", outcome.job["phase_seconds"].value("total", 0.0));
  return kExitOk;
}

}  // namespace gpuckpt::cli
