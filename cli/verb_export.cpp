// gpuckpt export ARCHIVE -o OUT [--store DIR]: a store-backed checkpoint's archive made self-contained, carrying the
// chunks its manifests name (archive/checkpoint_export.h), for a move by hand to a node without that store.
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

constexpr const char* kUsage = "gpuckpt export ARCHIVE -o OUT [--store DIR] [--timeout SECONDS] [--json]";

}  // namespace

int run_export(std::span<char*> args) {
  TransportArgs opts;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") return print_help("export");
    if (!opts.consume(args, i)) return usage_error("export", "unexpected argument '" + arg + "'", kUsage);
    if (!opts.problem.empty()) return usage_error("export", opts.problem, kUsage);
  }
  if (opts.archive.empty()) return usage_error("export", "name the checkpoint archive to export", kUsage);
  if (opts.out.empty()) return usage_error("export", "name the exported archive: -o OUT", kUsage);
  init_cli_logging("export");
  auto store = chunk_store::Store::open(opts.store_dir, false);
  if (!store) {
    std::fprintf(stderr, "gpuckpt export: %s\n", store.error().message.c_str());
    return kExitBadInput;
  }
  auto report = checkpoint_export::export_checkpoint(opts.archive, std::shared_ptr<const chunk_store::Store>(std::move(*store)),
                                                     opts.out, opts.limits());
  if (!report) return opts.failed("export", report.error());
  if (opts.json) {
    std::printf("%s\n", nlohmann::json{{"archive", opts.archive}, {"out", opts.out}, {"checkpoints", report->checkpoints},
                                       {"manifests", report->manifests}, {"chunks", report->chunks},
                                       {"chunk_bytes", report->chunk_bytes}, {"archive_bytes", report->archive_bytes}}
                            .dump(2)
                            .c_str());
    return kExitOk;
  }
  std::printf("exported %s to %s: %zu manifest(s) of checkpoint(s) %s, %zu chunks (%s) carried, %s in all; "
              "`gpuckpt import %s` puts them into a node's chunk store\n",
              opts.archive.c_str(), opts.out.c_str(), report->manifests, joined(report->checkpoints).c_str(),
              report->chunks, mebibytes(report->chunk_bytes).c_str(), mebibytes(report->archive_bytes).c_str(), opts.out.c_str());
  return kExitOk;
}

}  // namespace gpuckpt::cli
