// gpuckpt jobs [--kind checkpoint|restore|image|transfer|pull|all] [--state STATE] [--limit N] [--json] --agent URL --token-file FILE
// gpuckpt job ID [--follow] [--json] --agent URL --token-file FILE
// An agent's jobs (GET /v1/checkpoints|restores|images, newest first) and one job, followed to its end with --follow.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>

#include "cli/cli_args.h"
#include "cli/output_format.h"
#include "cli/verb_help.h"
#include "cli/node_client.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kJobsUsage =
    "gpuckpt jobs [--kind checkpoint|restore|image|transfer|pull|all] [--state queued|running|succeeded|failed|interrupted] [--limit N] [--json] "
    "--agent URL --token-file FILE";
constexpr const char* kJobUsage = "gpuckpt job ID [--follow] [--json] --agent URL --token-file FILE";

// Job ids start with their kind's prefix (the agent's new_job_id): ck-, rs-, im-, tr-, pl-.
std::string kind_of_id(const std::string& id) {
  if (id.rfind("ck-", 0) == 0) return "checkpoint";
  if (id.rfind("rs-", 0) == 0) return "restore";
  if (id.rfind("im-", 0) == 0) return "image";
  if (id.rfind("tr-", 0) == 0) return "transfer";
  if (id.rfind("pl-", 0) == 0) return "pull";
  return "";
}

bool safe_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (const char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

// What the job was about: the container of a checkpoint, the archive of a restore or image.
std::string subject_of(const nlohmann::json& job) {
  const auto request = job.value("request", nlohmann::json::object());
  if (request.contains("container")) {
    std::string pod = request.value("pod", "");
    const std::string ns = request.value("namespace", "");
    if (!pod.empty() && !ns.empty()) pod = ns + "/" + pod;
    return (pod.empty() ? "" : pod + " ") + request.value("container", "");
  }
  return request.value("archive", "");
}

int fail_with(const char* verb, const Error& error) {
  std::fprintf(stderr, "gpuckpt %s: %s\n", verb, error.message.c_str());
  return error.errno_value == EIO ? 1 : kExitBadInput;
}

}  // namespace

int run_jobs(std::span<char*> args) {
  NodeTarget target;
  target.agent_only = true;
  std::string kind = "all", state, limit;
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= args.size()) return false;
      into = args[++i];
      return true;
    };
    if (arg == "--help" || arg == "-h") {
      return print_help("jobs");
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--kind" || arg == "--state" || arg == "--limit") {
      if (!value(arg == "--kind" ? kind : arg == "--state" ? state : limit))
        return usage_error("jobs", arg + " needs a value", kJobsUsage);
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("jobs", target.problem, kJobsUsage);
    } else {
      return usage_error("jobs", "unexpected argument '" + arg + "'", kJobsUsage);
    }
  }
  if (kind != "all" && kind != "checkpoint" && kind != "restore" && kind != "image" && kind != "transfer" &&
      kind != "pull")
    return usage_error("jobs", "--kind must be checkpoint, restore, image, transfer, pull or all, got '" + kind + "'", kJobsUsage);
  init_cli_logging("jobs");
  std::string query;
  if (!state.empty()) query += "state=" + state;
  if (!limit.empty()) query += std::string(query.empty() ? "" : "&") + "limit=" + limit;
  nlohmann::json all = nlohmann::json::array();
  bool truncated = false;
  for (const std::string k : {"checkpoint", "restore", "image", "transfer", "pull"}) {
    if (kind != "all" && kind != k) continue;
    auto page = agent_get(target, job_collection(k) + (query.empty() ? "" : "?" + query));
    if (!page) return fail_with("jobs", page.error());
    for (const auto& job : page->value("jobs", nlohmann::json::array())) all.push_back(job);
    truncated = truncated || page->value("truncated", false);
  }
  std::stable_sort(all.begin(), all.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("created_at", "") > b.value("created_at", "");
  });
  if (json) {
    std::printf("%s\n", nlohmann::json{{"jobs", all}, {"truncated", truncated}}.dump(2).c_str());
    return kExitOk;
  }
  // -o wide: the phase it is in (or ended in) and the seconds it took, from GET .../ID's phase_seconds.
  const bool wide = output_format() == OutputFormat::wide;
  std::printf("%-32s %-10s %-9s %-20s %-20s ", "ID", "KIND", "STATE", "CREATED", "FINISHED");
  if (wide) std::printf("%-20s %-9s ", "PHASE", "SECONDS");
  std::printf("%s\n", "SUBJECT / ERROR");
  for (const auto& job : all) {
    std::string finished = job.value("finished_at", "");
    std::string about = subject_of(job);
    if (job.contains("error")) about += (about.empty() ? "" : ": ") + job.value("error", "");
    std::printf("%-32s %-10s %-9s %-20s %-20s ", job.value("id", "").c_str(), job.value("kind", "").c_str(),
                job.value("state", "").c_str(), job.value("created_at", "").c_str(),
                finished.empty() ? "-" : finished.c_str());
    if (wide) {
      const auto seconds = job.value("phase_seconds", nlohmann::json::object());
      char took[32] = "-";
      if (seconds.is_object() && seconds.contains("total") && seconds["total"].is_number())
        std::snprintf(took, sizeof took, "%.2f", seconds["total"].get<double>());
      std::printf("%-20s %-9s ", job.value("phase", "-").c_str(), took);
    }
    std::printf("%s\n", about.c_str());
  }
  if (truncated) std::fprintf(stderr, "gpuckpt jobs: more jobs than --limit; raise it or filter with --state\n");
  return kExitOk;
}

int run_job(std::span<char*> args) {
  NodeTarget target;
  target.agent_only = true;
  std::string id;
  bool follow = false, json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      return print_help("job");
    } else if (arg == "--follow" || arg == "-f") {
      follow = true;
    } else if (arg == "--json") {
      json = true;
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("job", target.problem, kJobUsage);
    } else if (arg.empty() || arg[0] == '-' || !id.empty()) {
      return usage_error("job", "unexpected argument '" + arg + "'", kJobUsage);
    } else {
      id = arg;
    }
  }
  if (id.empty()) return usage_error("job", "name the job (an id from 'gpuckpt jobs')", kJobUsage);
  const std::string kind = kind_of_id(id);
  if (!safe_id(id) || kind.empty())
    return usage_error("job", "'" + id + "' is not a job id (ck-..., rs-..., im-... or tr-..., as 'gpuckpt jobs' lists them)",
                       kJobUsage);
  init_cli_logging("job");
  const std::string path = job_collection(kind) + "/" + id;
  std::string last_phase;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto job = agent_get(target, path);
    if (!job) return fail_with("job", job.error());
    const std::string state = job->value("state", "");
    const bool done = state == "succeeded" || state == "failed" || state == "interrupted";
    if (!follow || done) {
      if (json) {
        std::printf("%s\n", job->dump(2).c_str());
      } else {
        std::printf("%s %s %s (phase %s)\n", id.c_str(), kind.c_str(), state.c_str(), job->value("phase", "").c_str());
        if (job->contains("error")) std::printf("  error: %s\n", job->value("error", "").c_str());
        if (job->contains("result") && (*job)["result"].contains("archive"))
          std::printf("  archive: %s\n", (*job)["result"].value("archive", "").c_str());
      }
      return state == "failed" || state == "interrupted" ? 1 : kExitOk;
    }
    const std::string phase = job->value("phase", "");
    if (phase != last_phase) {
      std::fprintf(stderr, "  [%7.2fs] %s\n",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), phase.c_str());
      last_phase = phase;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace gpuckpt::cli
