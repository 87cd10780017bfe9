// gpuckpt import ARCHIVE [-o OUT] [--store DIR]: the chunks an exported archive carries put into this node's chunk
// store (each checked against its digest first; those it has already skipped), references written so garbage
// collection keeps them, and the store-backed archive left for the runtime to restore (archive/checkpoint_export.h).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "cli/transport_args.h"
#include "cli/verb_help.h"
#include "archive/checkpoint_export.h"

namespace gpuckpt::cli {

namespace {

constexpr const char* kUsage = "gpuckpt import ARCHIVE [-o OUT] [--store DIR] [--timeout SECONDS] [--json]";

}  // namespace

int run_import(std::span<char*> args) {
  TransportArgs opts;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") return print_help("import");
    if (!opts.consume(args, i)) return usage_error("import", "unexpected argument '" + arg + "'", kUsage);
    if (!opts.problem.empty()) return usage_error("import", opts.problem, kUsage);
  }
  if (opts.archive.empty()) return usage_error("import", "name the exported archive to import", kUsage);
  const std::string out = opts.out.empty() ? opts.archive : opts.out;
  init_cli_logging("import");
  auto store = chunk_store::Store::open(opts.store_dir, true);
  if (!store) {
    std::fprintf(stderr, "gpuckpt import: %s\n", store.error().message.c_str());
    return kExitBadInput;
  }
  auto report = checkpoint_export::import_checkpoint(opts.archive, std::shared_ptr<chunk_store::Store>(std::move(*store)),
                                                     out, opts.limits());
  if (!report) return opts.failed("import", report.error());
  if (opts.json) {
    std::printf("%s\n", nlohmann::json{{"archive", opts.archive}, {"out", out}, {"store", opts.store_dir},
                                       {"checkpoints", report->checkpoints}, {"manifests", report->manifests},
                                       {"carried_chunks", report->carried_chunks}, {"added_chunks", report->added_chunks},
                                       {"added_bytes", report->added_bytes}, {"present_chunks", report->present_chunks},
                                       {"references", report->references}, {"archive_bytes", report->archive_bytes}}
                            .dump(2)
                            .c_str());
    return kExitOk;
  }
  std::printf("imported checkpoint(s) %s into the chunk store %s: %zu chunks carried and checked, %zu added (%s), %zu "
              "already there; %zu reference(s) written. %s (%s) is store-backed: restore it on a node using this "
              "store\n",
              joined(report->checkpoints).c_str(), opts.store_dir.c_str(), report->carried_chunks,
              report->added_chunks, mebibytes(report->added_bytes).c_str(), report->present_chunks, report->references,
              out.c_str(), mebibytes(report->archive_bytes).c_str());
  return kExitOk;
}

}  // namespace gpuckpt::cli
