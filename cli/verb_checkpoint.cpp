// gpuckpt checkpoint [--namespace NS] [--pod POD] CONTAINER [target flags] [--json]
// Checkpoints a running container into a GPU-annotated archive, through the agent or the local runtime.
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "cli/node_client.h"

namespace gpuckpt::cli {

int run_checkpoint(std::span<char*> args) {
  const std::string usage = std::string("gpuckpt checkpoint [--namespace NS] [--pod POD] [--tag TAG] CONTAINER ") + kTargetFlags +
                            " [--json]";
  NodeTarget target;
  nlohmann::json body = nlohmann::json::object();
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("checkpoint");
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--namespace" || arg == "--pod" || arg == "--tag" || arg == "--image") {
      if (i + 1 >= args.size()) return usage_error("checkpoint", arg + " needs a value", usage.c_str());
      if (arg == "--image") warn_deprecated("checkpoint", arg, "--tag");
      // The API's field for the checkpoint image's tag is "image" (docs/api.md).
      body[arg == "--tag" || arg == "--image" ? "image" : arg.substr(2)] = args[++i];
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("checkpoint", target.problem, usage.c_str());
    } else if (arg.empty() || arg[0] == '-' || body.contains("container")) {
      return usage_error("checkpoint", "unexpected argument '" + arg + "'", usage.c_str());
    } else {
      body["container"] = arg;
    }
  }
  if (!body.contains("container")) return usage_error("checkpoint", "name the container to checkpoint", usage.c_str());
  init_cli_logging("checkpoint");
  target.checkpoint_dir = std::filesystem::absolute(target.checkpoint_dir).string();
  target.state_dir = std::filesystem::absolute(target.state_dir).string();
  const auto outcome = run_node_job(target, "checkpoint", body["container"].get<std::string>(), body);
  if (outcome.exit_code != 0) return outcome.exit_code;
  const auto& result = outcome.job["result"];
  if (json) {
    std::printf("%s\n", outcome.job.dump(2).c_str());
    return kExitOk;
  }
  std::printf("checkpoint %s\n", outcome.job.value("id", "").c_str());
  std::printf("  archive:  %s (%llu bytes)\n", result.value("archive", "").c_str(),
              static_cast<unsigned long long>(result.value("archive_bytes", 0ULL)));
  std::string gpus;
  for (const auto& id : result.value("used_gpu_ids", nlohmann::json::array())) gpus += (gpus.empty() ? "" : ", ") + id.get<std::string>();
  std::printf("  GPUs:     %s\n", gpus.empty() ? "none" : gpus.c_str());
  std::printf("  devices:  %zu GPU device node(s) recorded\n", result.value("gpu_devices", nlohmann::json::array()).size());
  if (result.contains("image"))
    std::printf("  image:    %s (%s)\n            %s\n", result["image"].value("layout", "").c_str(),
                result["image"].value("manifest_digest", "").c_str(), result["image"].value("pull", "").c_str());
  std::printf("  took:     %.2f s\n", outcome.job["phase_seconds"].value("total", 0.0));
  return kExitOk;
}

}  // namespace gpuckpt::cli
