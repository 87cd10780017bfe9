#include "cli/node_client.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "node/service.h"
#include "runtime/container_runtime.h"
#include "gpu/inventory.h"

namespace gpuckpt::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Api {
  int status = 0;
  nlohmann::json body;
  std::string transport_error;
};

class Follower {
 public:
  explicit Follower(bool quiet) : quiet_(quiet), start_(Clock::now()) {}
  void show(const nlohmann::json& job) {
    const std::string phase = job.value("phase", "");
    if (quiet_ || phase == last_) return;
    last_ = phase;
    std::fprintf(stderr, "  [%7.2fs] %s\n", std::chrono::duration<double>(Clock::now() - start_).count(),
                 phase.c_str());
  }

 private:
  bool quiet_;
  Clock::time_point start_;
  std::string last_;
};

bool finished(const nlohmann::json& job) {
  const auto state = job.value("state", "");
  return state == "succeeded" || state == "failed" || state == "interrupted";
}

JobOutcome outcome_of(const nlohmann::json& job) {
  JobOutcome out;
  out.job = job;
  if (job.value("state", "") == "succeeded") return out;
  out.exit_code = 1;
  out.message = job.value("error", "the job failed without a message");
  return out;
}

int exit_for_status(int status, const std::string& message) {
  if (status == 422 && message.find("no GPU") != std::string::npos) return 3;
  return status >= 400 && status < 500 ? 2 : 1;
}

// The first line of the token file; empty when it cannot be read.
std::string read_token(const std::string& file) {
  std::string token;
  std::ifstream in(file);
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

std::string token_problem(const NodeTarget& target) {
  return "cannot read the agent token from '" + target.token_file + "' (pass --token-file FILE)";
}

void set_up(httplib::Client& client, const std::string& token) {
  client.set_bearer_token_auth(token.c_str());
  client.set_connection_timeout(5);
  client.set_read_timeout(60);
}

// Why a call got no answer, in full: httplib's error names alone ("Connection") say nothing a user can act on.
std::string unreachable(const std::string& url, httplib::Error error) {
  std::string why;
  switch (error) {
    case httplib::Error::Connection:
      why = "could not connect (nothing listens there, the connection was refused, or the host is unreachable)";
      break;
    case httplib::Error::ConnectionTimeout: why = "the connection timed out (5 s): a firewall, or the wrong address"; break;
    case httplib::Error::Read: why = "the connection broke while reading the answer (the agent stopped or restarted?)"; break;
    case httplib::Error::Write: why = "the connection broke while sending the request"; break;
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLServerVerification:
      why = "TLS failed (the agent serves plain HTTP: use http://)";
      break;
    default: why = httplib::to_string(error); break;
  }
  return "cannot reach the agent at " + url + ": " + why + "; check --agent (or GPUCKPT_AGENT) and that the agent runs";
}

JobOutcome run_remote(const NodeTarget& target, const std::string& kind, const nlohmann::json& body) {
  JobOutcome out;
  const std::string token = read_token(target.token_file);
  if (token.empty()) {
    out.exit_code = 2;
    out.message = token_problem(target);
    return out;
  }
  httplib::Client client(target.agent_url);
  set_up(client, token);
  auto call = [&](const std::string& method, const std::string& path, const std::string& payload) {
    Api api;
    auto result = method == "POST" ? client.Post(path.c_str(), payload, "application/json") : client.Get(path.c_str());
    if (!result) {
      api.transport_error = unreachable(target.agent_url, result.error());
      return api;
    }
    api.status = result->status;
    api.body = nlohmann::json::parse(result->body, nullptr, false);
    return api;
  };
  const std::string collection = job_collection(kind);
  Api started = call("POST", collection, body.dump());
  if (!started.transport_error.empty()) {
    out.exit_code = 1;
    out.message = started.transport_error;
    return out;
  }
  if (started.status != 202) {
    std::string message = "agent answered " + std::to_string(started.status);
    if (started.body.is_object() && started.body.contains("error"))
      message = started.body["error"].value("message", message);
    out.exit_code = exit_for_status(started.status, message);
    out.message = message;
    return out;
  }
  const std::string id = started.body.value("id", "");
  Follower follow(target.quiet);
  follow.show(started.body);
  // Without --timeout the CLI follows the job to its end: the agent ends every job within its own budget
  // (limits.job_timeout_seconds). It gives up only when the agent stays unreachable.
  const auto deadline = target.timeout ? Clock::now() + *target.timeout : Clock::time_point::max();
  constexpr auto kUnreachableLimit = std::chrono::seconds(60);
  auto last_answer = Clock::now();
  nlohmann::json job = started.body;
  while (!finished(job)) {
    if (Clock::now() > deadline || Clock::now() - last_answer > kUnreachableLimit) {
      out.exit_code = 1;
      out.message = "job " + id + (Clock::now() > deadline
                                       ? " did not finish within --timeout " + std::to_string(target.timeout->count()) + " s"
                                       : " could not be followed: the agent did not answer for 60 s") +
                    "; it may still be running (gpuckpt job " + id + " --follow)";
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Api polled = call("GET", collection + "/" + id, "");
    if (!polled.transport_error.empty() || polled.status != 200) continue;
    last_answer = Clock::now();
    job = polled.body;
    follow.show(job);
  }
  return outcome_of(job);
}

JobOutcome run_local(const NodeTarget& target, const std::string& kind, const nlohmann::json& body) {
  node::AgentConfig config;
  config.state_dir = target.state_dir;
  config.checkpoint_dir = target.checkpoint_dir;
  config.kubelet_checkpoint_dir.clear();
  config.hooks_dir = target.hooks_dir;
  config.host_root = target.host_root;
  PodmanOptions podman;
  podman.hooks_dir = target.hooks_dir;
  // The agent's own defaults (limits.job_timeout_seconds, checkpoints.runtime_timeout_seconds), --timeout bounding
  // both when given.
  if (target.timeout) {
    config.job_timeout = *target.timeout;
    config.runtime_timeout = std::min(config.runtime_timeout, *target.timeout);
  }
  podman.timeout = config.runtime_timeout;
  node::JobServiceDeps deps;
  deps.runtime = make_podman_runtime(podman);
  const HostRoot host(target.host_root);
  deps.inventory = [host] { return read_inventory(host); };
  deps.device_numbers = stat_device_numbers(target.host_root);
  node::JobService service(config, deps);
  Result<std::string> id = make_error("unknown job kind " + kind);
  if (kind == "checkpoint") {
    ContainerRef ref;
    ref.namespace_name = body.value("namespace", "");
    ref.pod = body.value("pod", "");
    ref.container = body.value("container", "");
    id = service.start_checkpoint(ref, body.value("image", ""));
  } else if (kind == "restore") {
    node::RestoreRequest request;
    request.archive = body.value("archive", "");
    request.name = body.value("name", "");
    if (body.contains("target_gpus")) request.target_gpus = body["target_gpus"].get<std::vector<std::string>>();
    id = service.start_restore(request);
  } else if (kind == "image") {
    node::ImageRequest request;
    request.archive = body.value("archive", "");
    request.tag = body.value("image", "");
    id = service.start_image(request);
  }
  JobOutcome out;
  if (!id) {
    out.message = id.error().message;
    out.exit_code = exit_for_status(node::http_status(id.error()), out.message);
    return out;
  }
  Follower follow(target.quiet);
  for (;;) {
    auto job = service.job(id.value());
    const auto json = node::to_json(*job);
    follow.show(json);
    if (finished(json)) return outcome_of(json);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string job_collection(const std::string& kind) {
  return kind == "checkpoint" ? "/v1/checkpoints"
         : kind == "image"    ? "/v1/images"
         : kind == "transfer" ? "/v1/transfers"
         : kind == "pull"     ? "/v1/chunk-pulls"
                              : "/v1/restores";
}

NodeTarget::NodeTarget() {
  if (const char* agent = std::getenv("GPUCKPT_AGENT")) agent_url = agent;
  if (const char* token = std::getenv("GPUCKPT_TOKEN_FILE")) token_file = token;
}

bool NodeTarget::consume(std::span<char*> args, std::size_t& i) {
  const std::string arg = args[i];
  if (agent_only && arg.rfind("--agent", 0) != 0 && arg.rfind("--token-file", 0) != 0 &&
      !(follows_job && arg.rfind("--timeout", 0) == 0))
    return false;
  if (arg == "--quiet" || arg == "-q") {
    quiet = true;
    return true;
  }
  struct Flag {
    const char* name;
    std::string* value;
  };
  std::string timeout_text;
  const Flag flags[] = {{"--agent", &agent_url},         {"--token-file", &token_file},
                        {"--state-dir", &state_dir},     {"--checkpoint-dir", &checkpoint_dir},
                        {"--hooks-dir", &hooks_dir},     {"--host-root", &host_root},
                        {"--timeout", &timeout_text}};
  for (const auto& flag : flags) {
    const std::string prefix = std::string(flag.name) + "=";
    if (arg == flag.name) {
      if (i + 1 >= args.size()) {
        problem = std::string(flag.name) + " needs a value";
        return true;
      }
      *flag.value = args[++i];
    } else if (arg.rfind(prefix, 0) == 0) {
      *flag.value = arg.substr(prefix.size());
    } else {
      continue;
    }
    if (!timeout_text.empty()) {
      const long seconds = std::atol(timeout_text.c_str());
      if (seconds <= 0) problem = "--timeout needs a positive number of seconds";
      else timeout = std::chrono::seconds(seconds);
    }
    return true;
  }
  return false;
}

namespace {

// One call that answers 200 with JSON; `payload` empty: GET, else POST of that JSON.
Result<nlohmann::json> agent_call(const NodeTarget& target, const std::string& path, const std::string& payload) {
  if (target.agent_url.empty()) return make_error("name the agent (--agent URL --token-file FILE, or GPUCKPT_AGENT)");
  const std::string token = read_token(target.token_file);
  if (token.empty()) return make_error(token_problem(target));
  httplib::Client client(target.agent_url);
  set_up(client, token);
  const std::string method = payload.empty() ? "GET" : "POST";
  auto result = payload.empty() ? client.Get(path.c_str()) : client.Post(path.c_str(), payload, "application/json");
  if (!result)
    return make_error(unreachable(target.agent_url, result.error()), EIO);
  auto body = nlohmann::json::parse(result->body, nullptr, false);
  if (result->status != 200) {
    std::string message = "agent answered " + std::to_string(result->status) + " to " + method + " " + path;
    if (body.is_object() && body.contains("error") && body["error"].is_object())
      message = body["error"].value("message", message);
    return make_error(message, EIO);
  }
  if (body.is_discarded()) return make_error("the agent's answer to " + method + " " + path + " is not JSON", EIO);
  return body;
}

}  // namespace

Result<nlohmann::json> agent_get(const NodeTarget& target, const std::string& path) {
  return agent_call(target, path, "");
}

Result<nlohmann::json> agent_post(const NodeTarget& target, const std::string& path, const nlohmann::json& body) {
  return agent_call(target, path, body.dump());
}

JobOutcome run_node_job(const NodeTarget& target, const std::string& kind, const std::string& subject,
                        const nlohmann::json& body) {
  // Always said when no agent is named (even with --quiet): a missing --agent must not pass for a remote call.
  if (target.agent_url.empty())
    std::fprintf(stderr, "gpuckpt %s: %s via the local runtime (podman on this host): no --agent given and "
                 "GPUCKPT_AGENT is not set\n", kind.c_str(), subject.c_str());
  else if (!target.quiet)
    std::fprintf(stderr, "gpuckpt %s: %s via %s\n", kind.c_str(), subject.c_str(), target.agent_url.c_str());
  JobOutcome outcome = target.agent_url.empty() ? run_local(target, kind, body) : run_remote(target, kind, body);
  if (outcome.exit_code != 0) std::fprintf(stderr, "gpuckpt %s: %s\n", kind.c_str(), outcome.message.c_str());
  return outcome;
}

}  // namespace gpuckpt::cli
