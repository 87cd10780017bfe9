// gpuckpt pull-chunks IMAGE [--store DIR] [--plain-http] [--credentials-file FILE] [--streams N]
//                           [--timeout SECONDS] [--agent URL --token-file FILE] [--json]
// Pulls the GPU memory chunks of a store-backed checkpoint image from the registry it was pushed to
// (node/registry_chunks.h: the artifact under TAG.gpuckpt-chunks) into a chunk store, so that a restore from that
// image on this node finds them: only the chunks the store lacks are downloaded, each checked before it lands.
// With --agent, the agent pulls them into its own store with its image_registry settings (POST /v1/chunk-pulls);
// without, this process does, into --store.
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/node_client.h"
#include "cli/verb_help.h"
#include "gpumem/chunk_store.h"
#include "node/registry_chunks.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kUsage =
    "gpuckpt pull-chunks IMAGE [--store DIR] [--plain-http] [--credentials-file FILE] [--streams N] "
    "[--timeout SECONDS] [--agent URL --token-file FILE] [--json]";

void print_report(const nlohmann::json& r, const std::string& id) {
  std::printf("chunks of %s%s\n", r.value("image", "").c_str(), id.empty() ? "" : (" (job " + id + ")").c_str());
  std::printf("  store:    %s\n", r.value("store", "").c_str());
  std::printf("  subject:  %s\n", r.value("subject", "").c_str());
  std::printf("  chunks:   %llu (%llu pulled, %llu bytes; %llu the store had)\n",
              static_cast<unsigned long long>(r.value("chunks", 0ULL)),
              static_cast<unsigned long long>(r.value("added", 0ULL)),
              static_cast<unsigned long long>(r.value("added_bytes", 0ULL)),
              static_cast<unsigned long long>(r.value("present", 0ULL)));
}

}  // namespace

int run_pull_chunks(std::span<char*> args) {
  NodeTarget target;
  target.agent_only = true;   // --agent, --token-file, --timeout; the rest is this verb's
  target.follows_job = true;
  node::RegistryOptions options;
  std::string image, store_dir = configured_store_dir();
  bool json = false, local_flags = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") return print_help("pull-chunks");
    if (arg == "--json") {
      json = true;
    } else if (arg == "--plain-http") {
      options.plain_http = local_flags = true;
    } else if (arg == "--store" || arg == "--credentials-file" || arg == "--streams") {
      if (i + 1 >= args.size()) return usage_error("pull-chunks", arg + " needs a value", kUsage);
      const std::string value = args[++i];
      local_flags = true;
      if (arg == "--store") {
        store_dir = value;
      } else if (arg == "--credentials-file") {
        options.credentials_file = value;
      } else {
        const bool digits = !value.empty() && value.size() <= 2 && value.find_first_not_of("0123456789") == std::string::npos;
        const auto n = digits ? std::stoul(value) : 0;
        if (n < 1 || n > node::kMaxChunkStreams)
          return usage_error("pull-chunks", "--streams '" + value + "' is not a number from 1 to " +
                                                std::to_string(node::kMaxChunkStreams), kUsage);
        options.chunk_streams = n;
      }
    } else if (target.consume(args, i)) {
      if (!target.problem.empty()) return usage_error("pull-chunks", target.problem, kUsage);
    } else if (arg.empty() || arg[0] == '-' || !image.empty()) {
      return usage_error("pull-chunks", "unexpected argument '" + arg + "'", kUsage);
    } else {
      image = arg;
    }
  }
  if (image.empty()) return usage_error("pull-chunks", "name the checkpoint image (HOST[:PORT]/PATH:TAG)", kUsage);
  auto name = node::parse_image_name(image);
  if (!name) return usage_error("pull-chunks", name.error().message, kUsage);
  options.repository = name->repository;   // --credentials-file is for the image's registry
  init_cli_logging("pull-chunks");
  if (!target.agent_url.empty()) {
    if (local_flags)
      return usage_error("pull-chunks", "--store, --plain-http, --credentials-file and --streams are for a pull by "
                                        "this process; an agent uses its own store and image_registry settings",
                         kUsage);
    const auto outcome = run_node_job(target, "pull", image, {{"image", image}});
    if (outcome.exit_code != 0) return outcome.exit_code;
    if (json) std::printf("%s\n", outcome.job.dump(2).c_str());
    else print_report(outcome.job["result"], outcome.job.value("id", ""));
    return kExitOk;
  }
  if (target.timeout) options.push_timeout = *target.timeout;
  options.timeout = std::min(options.timeout, options.push_timeout);
  auto store = chunk_store::Store::open(store_dir, true);
  if (!store) {
    std::fprintf(stderr, "gpuckpt pull-chunks: %s\n", store.error().message.c_str());
    return kExitBadInput;
  }
  auto pulled = node::pull_chunks(options, image, **store);
  if (!pulled) {
    std::fprintf(stderr, "gpuckpt pull-chunks: %s\n", pulled.error().message.c_str());
    const int e = pulled.error().errno_value;
    return e == EINVAL || e == ENOENT || e == EBADMSG || e == EACCES ? kExitBadInput : 1;
  }
  nlohmann::json report = pulled->to_json();
  report["store"] = (*store)->root().string();
  if (json) std::printf("%s\n", report.dump(2).c_str());
  else print_report(report, "");
  return kExitOk;
}

}  // namespace gpuckpt::cli
