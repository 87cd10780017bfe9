// gpuckpt image ARCHIVE [--tag TAG] [target flags] [--json]
// Turns a checkpoint archive on this node into a checkpoint image in the node's image store (the agent's runtime)
// and, where the agent has an image_registry, in the registry: the image a pod restores from on CRI nodes. Prints
// "  image:    NAME" (the name a pod uses: the node's store's when it has it, else the registry's) and
// "  pull:     Never|IfNotPresent" (the pull policy that name needs).
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "cli/node_client.h"

namespace gpuckpt::cli {

int run_image(std::span<char*> args) {
  const std::string usage = std::string("gpuckpt image ARCHIVE [--tag TAG] ") + kTargetFlags + " [--json]";
  NodeTarget target;
  nlohmann::json body = nlohmann::json::object();
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("image");
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--tag") {
      if (i + 1 >= args.size()) return usage_error("image", "--tag needs a value", usage.c_str());
      body["image"] = args[++i];
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("image", target.problem, usage.c_str());
    } else if (arg.empty() || arg[0] == '-' || body.contains("archive")) {
      return usage_error("image", "unexpected argument '" + arg + "'", usage.c_str());
    } else {
      body["archive"] = arg;
    }
  }
  if (!body.contains("archive")) return usage_error("image", "name the checkpoint archive", usage.c_str());
  init_cli_logging("image");
  if (target.agent_url.empty()) {   // in-process, as restore: the archive's directory is the checkpoint directory
    const auto archive = std::filesystem::absolute(body["archive"].get<std::string>());
    body["archive"] = archive.string();
    target.checkpoint_dir = archive.parent_path().string();
    target.state_dir = std::filesystem::absolute(target.state_dir).string();
  }
  const auto outcome = run_node_job(target, "image", body["archive"].get<std::string>(), body);
  if (outcome.exit_code != 0) return outcome.exit_code;
  if (json) {
    std::printf("%s\n", outcome.job.dump(2).c_str());
    return kExitOk;
  }
  const auto& image = outcome.job["result"]["image"];
  const bool in_store = image.contains("loaded_as");
  std::printf("checkpoint image %s\n", outcome.job.value("id", "").c_str());
  std::printf("  image:    %s\n", image.value(in_store ? "loaded_as" : "pushed_as", "").c_str());
  std::printf("  pull:     %s\n", in_store ? "Never" : "IfNotPresent");
  if (in_store && image.contains("pushed_as"))
    std::printf("  pushed:   %s\n", image.value("pushed_as", "").c_str());
  for (const char* problem : {"load_error", "push_error"})
    if (image.contains(problem)) std::printf("  note:     %s\n", image.value(problem, "").c_str());
  std::printf("  digest:   %s\n", image.value("manifest_digest", "").c_str());
  std::printf("  took:     %.2f s\n", outcome.job["phase_seconds"].value("total", 0.0));
  return kExitOk;
}

}  // namespace gpuckpt::cli
