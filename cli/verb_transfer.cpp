// gpuckpt transfer ARCHIVE --to URL --agent URL --token-file FILE [--json]
// Has the agent push a checkpoint archive of its node straight to another node's agent (POST /v1/transfers:
// streamed in chunks, resumed after a broken connection, checked with the whole archive's SHA-256 at the end).
// Prints "  archive:  PATH" (where the target agent put it) and what was sent.
#include <cstdio>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/node_client.h"
#include "cli/verb_help.h"

namespace gpuckpt::cli {

int run_transfer(std::span<char*> args) {
  const std::string usage = "gpuckpt transfer ARCHIVE --to URL --agent URL --token-file FILE [--timeout SECONDS] [--json]";
  NodeTarget target;
  target.agent_only = true;   // agent to agent: the local runtime's flags mean nothing here
  target.follows_job = true;
  nlohmann::json body = nlohmann::json::object();
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("transfer");
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--to") {
      if (i + 1 >= args.size()) return usage_error("transfer", "--to needs the target agent's URL", usage.c_str());
      body["to"] = args[++i];
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("transfer", target.problem, usage.c_str());
    } else if (arg.empty() || arg[0] == '-' || body.contains("archive")) {
      return usage_error("transfer", "unexpected argument '" + arg + "'", usage.c_str());
    } else {
      body["archive"] = arg;
    }
  }
  if (!body.contains("archive")) return usage_error("transfer", "name the checkpoint archive", usage.c_str());
  if (!body.contains("to")) return usage_error("transfer", "--to names the target agent (http://A.B.C.D:PORT)", usage.c_str());
  if (target.agent_url.empty())
    return usage_error("transfer", "a transfer is agent to agent: --agent (or GPUCKPT_AGENT) names the sending agent",
                       usage.c_str());
  init_cli_logging("transfer");
  const auto outcome = run_node_job(target, "transfer", body["archive"].get<std::string>(), body);
  if (outcome.exit_code != 0) return outcome.exit_code;
  if (json) {
    std::printf("%s\n", outcome.job.dump(2).c_str());
    return kExitOk;
  }
  const auto& result = outcome.job["result"];
  std::printf("transfer %s\n", outcome.job.value("id", "").c_str());
  std::printf("  archive:  %s (%llu bytes)\n", result.value("archive", "").c_str(),
              static_cast<unsigned long long>(result.value("size", 0ULL)));
  std::printf("  sha256:   %s\n", result.value("sha256", "").c_str());
  std::printf("  sent:     %llu bytes%s\n", static_cast<unsigned long long>(result.value("sent_bytes", 0ULL)),
              result.value("already_present", false) ? " (the target already had it)" : "");
  // A store-backed checkpoint: its chunks went first, only those the target lacked.
  if (const auto chunks = result.value("chunks", nlohmann::json(nullptr)); chunks.is_object())
    std::printf("  chunks:   %llu of %llu uploaded (%llu bytes) over %u streams, %llu the target had\n",
                chunks.value("sent", 0ULL), chunks.value("named", 0ULL), chunks.value("sent_bytes", 0ULL),
                chunks.value("streams", 0U), chunks.value("target_had", 0ULL));
  const auto resumed = result.value("resumed", nlohmann::json::array());
  if (!resumed.empty()) std::printf("  resumed:  %s\n", resumed.dump().c_str());
  std::printf("  took:     %.2f s\n", outcome.job["phase_seconds"].value("total", 0.0));
  return kExitOk;
}

}  // namespace gpuckpt::cli
