// What `gpuckpt checkpoint` and `gpuckpt restore` share: talk to an agent (--agent URL --token-file FILE, or
// GPUCKPT_AGENT / GPUCKPT_TOKEN_FILE), or do the same work in-process against the local runtime (the agent's
// library, no server), and follow the job with progress lines.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace gpuckpt::cli {

struct NodeTarget {
  std::string agent_url;     // empty: local mode
  std::string token_file;
  // local mode
  std::string state_dir = "/var/lib/gpuckpt";
  std::string checkpoint_dir = "/var/lib/gpuckpt/checkpoints";
  std::string hooks_dir;
  std::string host_root = "/";
  // --timeout: how long the CLI follows the job (and, local, the job's budget); none: until the job ends, which
  // the agent bounds by limits.job_timeout_seconds (docs/cli.md "Timeouts").
  std::optional<std::chrono::seconds> timeout;
  bool quiet = false;        // no progress lines
  std::string problem;
  // Verbs that only ask an agent (jobs, job, runtime, transfer): consume() takes --agent and --token-file alone, so
  // that nothing is accepted that would do nothing; with follows_job (transfer) also --timeout.
  bool agent_only = false;
  bool follows_job = false;

  NodeTarget();   // reads GPUCKPT_AGENT, GPUCKPT_TOKEN_FILE
  // Takes one of our flags (and its value) at args[i]; false when args[i] is not ours.
  bool consume(std::span<char*> args, std::size_t& i);
};

inline constexpr const char* kTargetFlags =
    "[--agent URL --token-file FILE | --state-dir DIR --checkpoint-dir DIR --hooks-dir DIR --host-root DIR] "
    "[--timeout SECONDS] [--quiet]";

struct JobOutcome {
  nlohmann::json job;     // the final job (docs/api.md)
  int exit_code = 0;      // 0 ok, 2 refused as bad input, 3 no GPU match, 1 failed
  std::string message;
};

// The agent's collection of a job kind: /v1/checkpoints, /v1/restores, /v1/images, /v1/transfers, /v1/chunk-pulls.
std::string job_collection(const std::string& kind);

// kind: "checkpoint" (body {namespace,pod,container}), "restore" (body {archive,name,target_gpus}) or "image"
// (body {archive,image}) or "transfer" (body {archive,to}; an agent only) or "pull" (body {image}; an agent only).
// Says on stderr what runs where (unless --quiet) and, on failure, why; `subject` names the container or archive.
JobOutcome run_node_job(const NodeTarget& target, const std::string& kind, const std::string& subject,
                        const nlohmann::json& body);

// GET `path` from the agent, or POST `body` to it (remote only): its JSON answer (HTTP 200), or why not
// (errno EIO: the agent could not be reached or refused the call).
Result<nlohmann::json> agent_get(const NodeTarget& target, const std::string& path);
Result<nlohmann::json> agent_post(const NodeTarget& target, const std::string& path, const nlohmann::json& body);

}  // namespace gpuckpt::cli
