// gpuckpt runtime --agent URL --token-file FILE [--json]
// The container runtime behind an agent (GET /v1/runtime): "KIND NAME VERSION RESTORES" on one line, where RESTORES
// is "container" (the agent restores by itself) or "pod" (kubelet creates the restored container from a checkpoint
// image).
#include <cstdio>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "cli/node_client.h"

namespace gpuckpt::cli {

int run_runtime(std::span<char*> args) {
  const std::string usage = "gpuckpt runtime --agent URL --token-file FILE [--json]";
  NodeTarget target;
  target.agent_only = true;
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("runtime");
    } else if (arg == "--json") {
      json = true;
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("runtime", target.problem, usage.c_str());
    } else {
      return usage_error("runtime", "unexpected argument '" + arg + "'", usage.c_str());
    }
  }
  init_cli_logging("runtime");
  auto report = agent_get(target, "/v1/runtime");
  if (!report) {
    std::fprintf(stderr, "gpuckpt runtime: %s\n", report.error().message.c_str());
    return report.error().errno_value == EIO ? 1 : kExitBadInput;
  }
  if (json) {
    std::printf("%s\n", report->dump(2).c_str());
    return kExitOk;
  }
  auto field = [&](const char* key) {
    const std::string v = report->contains(key) && (*report)[key].is_string() ? (*report)[key].get<std::string>() : "";
    return v.empty() ? std::string("-") : v;
  };
  std::printf("%s %s %s %s\n", field("kind").c_str(), field("name").c_str(), field("version").c_str(),
              field("restores").c_str());
  return kExitOk;
}

}  // namespace gpuckpt::cli
