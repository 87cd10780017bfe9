// gpuckpt store gc|refs|unref: the chunk store behind store-backed checkpoints (gpumem/chunk_gc.h).
//   gc             what no kept checkpoint needs: listed (a dry run), or removed with --delete
//   refs           the references (one per process of a kept checkpoint) and what each holds alone
//   unref ID       drops the references of checkpoint ID (its archive is gone): the next gc frees its chunks
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "gpumem/chunk_gc.h"
#include "gpumem/chunk_store.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kUsage =
    "gpuckpt store gc|refs|unref CHECKPOINT [--store DIR] [--grace SECONDS] [--delete] [--json]";
// Below this, a dump still writing (its reference not yet there) could lose a chunk it reuses.
constexpr long kMinGraceSeconds = 60;

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

nlohmann::json report_json(const chunk_gc::Report& r, const std::string& root) {
  nlohmann::json garbage = nlohmann::json::array(), missing = nlohmann::json::array();
  for (const auto& c : r.garbage) garbage.push_back({{"digest", c.digest.hex()}, {"bytes", c.bytes}});
  for (const auto& m : r.missing) missing.push_back({{"digest", m.digest.hex()}, {"reference", m.ref}});
  return {{"store", root},
          {"dry_run", r.dry_run},
          {"references", r.refs},
          {"live_chunks", r.live_chunks},
          {"chunks", r.chunks},
          {"chunk_bytes", r.chunk_bytes},
          {"garbage_chunks", r.garbage_chunks},
          {"garbage_bytes", r.garbage_bytes},
          {"garbage", std::move(garbage)},
          {"young_chunks", r.young_chunks},
          {"returned_chunks", r.returned_chunks},
          {"partials_removed", r.partials_removed},
          {"missing_chunks", r.missing_chunks},
          {"missing", std::move(missing)},
          {"unknown", r.unknown}};
}

int run_gc(chunk_store::Store& store, long grace, bool remove, bool json) {
  chunk_gc::Options options;
  options.grace = std::chrono::seconds(grace);
  options.remove = remove;
  auto report = chunk_gc::collect(store, options);
  if (!report) {
    std::fprintf(stderr, "gpuckpt store gc: %s\n", report.error().message.c_str());
    return 1;
  }
  if (json) std::printf("%s\n", report_json(*report, store.root().string()).dump(2).c_str());
  else std::printf("%s", chunk_gc::format_report(*report, store.root().string()).c_str());
  // Chunks a kept checkpoint needs are gone: the collection did its job, but someone must hear of it.
  return report->missing_chunks > 0 ? 1 : kExitOk;
}

int run_refs(const chunk_store::Store& store, bool json) {
  auto refs = chunk_gc::summarize_references(store);
  if (!refs) {
    std::fprintf(stderr, "gpuckpt store refs: %s\n", refs.error().message.c_str());
    return 1;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *refs)
      out.push_back({{"reference", r.name}, {"checkpoint", r.checkpoint}, {"vpid", r.vpid}, {"chunks", r.chunks},
                     {"stored_bytes", r.stored_bytes}, {"exclusive_bytes", r.exclusive_bytes}});
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-32s %8s %8s %12s %12s\n", "CHECKPOINT", "PID", "CHUNKS", "STORED", "ONLY-IT");
  for (const auto& r : *refs)
    std::printf("%-32s %8d %8zu %12s %12s\n", r.checkpoint.c_str(), r.vpid, r.chunks, mib(r.stored_bytes).c_str(),
                mib(r.exclusive_bytes).c_str());
  return kExitOk;
}

int run_unref(chunk_store::Store& store, const std::string& checkpoint) {
  auto names = store.list_refs();
  if (!names) {
    std::fprintf(stderr, "gpuckpt store unref: %s\n", names.error().message.c_str());
    return 1;
  }
  std::size_t removed = 0;
  for (const auto& name : *names) {
    if (!name.starts_with(checkpoint + "-")) continue;
    auto gone = store.remove_ref(name);
    if (!gone) {
      std::fprintf(stderr, "gpuckpt store unref: %s\n", gone.error().message.c_str());
      return 1;
    }
    removed += *gone ? 1 : 0;
  }
  if (removed == 0) {
    std::fprintf(stderr, "gpuckpt store unref: the chunk store %s holds no reference of checkpoint %s (gpuckpt store "
                 "refs lists them)\n", store.root().c_str(), checkpoint.c_str());
    return kExitBadInput;
  }
  std::printf("removed %zu reference(s) of checkpoint %s; `gpuckpt store gc --delete` frees the chunks no other "
              "checkpoint needs once they are older than the grace period\n", removed, checkpoint.c_str());
  return kExitOk;
}

bool is_checkpoint_id(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

int run_store(std::span<char*> args) {
  std::string action, checkpoint, store_dir = configured_store_dir();
  long grace = chunk_gc::kDefaultGrace.count();
  bool remove = false, json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") return print_help("store");
    if (arg == "--json") {
      json = true;
    } else if (arg == "--delete") {
      remove = true;
    } else if (arg == "--store" || arg == "--grace") {
      if (i + 1 >= args.size()) return usage_error("store", arg + " needs a value", kUsage);
      const std::string value = args[++i];
      if (arg == "--store") {
        store_dir = value;
      } else {
        char* end = nullptr;
        grace = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || grace < kMinGraceSeconds)
          return usage_error("store", "--grace '" + value + "' is not a whole number of seconds of at least " +
                                          std::to_string(kMinGraceSeconds) + " (a shorter one may remove chunks of a "
                                          "dump still running)", kUsage);
      }
    } else if (arg.starts_with("-")) {
      return usage_error("store", "unknown flag '" + arg + "'", kUsage);
    } else if (action.empty()) {
      action = arg;
    } else if (action == "unref" && checkpoint.empty()) {
      checkpoint = arg;
    } else {
      return usage_error("store", "unexpected argument '" + arg + "'", kUsage);
    }
  }
  if (action != "gc" && action != "refs" && action != "unref")
    return usage_error("store", action.empty() ? "name what to do: gc, refs or unref" : "unknown action '" + action + "'",
                       kUsage);
  if (action == "unref" && !is_checkpoint_id(checkpoint))
    return usage_error("store", "unref needs a checkpoint id (32 lowercase hex digits, as `gpuckpt store refs` or "
                                "`gpuckpt inspect` show it), got '" + checkpoint.substr(0, 40) + "'", kUsage);
  init_cli_logging("store");
  auto store = chunk_store::Store::open(store_dir, false);
  if (!store) {
    std::fprintf(stderr, "gpuckpt store %s: %s\n", action.c_str(), store.error().message.c_str());
    return kExitBadInput;
  }
  if (action == "gc") return run_gc(**store, grace, remove, json);
  if (action == "refs") return run_refs(**store, json);
  return run_unref(**store, checkpoint);
}

}  // namespace gpuckpt::cli
