// gpuckpt doctor [--host-root DIR] [--criu PATH | --no-criu] [--runc PATH] [--plugin-dir DIR] [--hooks-dir DIR]
//                [--archive-dir DIR] [--json]
// Whether GPU checkpoints work on this node, one pass/warn/fail line per check with the fix (runtime/node_report.h).
// --host-root: where the node's /proc, /sys, /boot and /etc are (the agent's pod: /host); the directories are read
// at their paths as given. --no-criu: CRIU is not reachable from here (the agent's pod). --runc: the runc whose
// version decides where a restore lands on cgroup v2 (default: runc in PATH). Exit 0: no failure
// (warnings allowed), 1: at least one check failed, 2: bad arguments.
#include <cstdio>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "gpu/inventory.h"
#include "runtime/node_report.h"

namespace gpuckpt::cli {

int run_doctor(std::span<char*> args) {
  static const char* kUsage =
      "gpuckpt doctor [--host-root DIR] [--criu PATH | --no-criu] [--runc PATH] [--plugin-dir DIR] [--hooks-dir DIR] [--archive-dir DIR] "
      "[--json]";
  init_cli_logging("doctor");
  std::string host_root = "/", criu = "criu", runc = "runc";
  NodeReportOptions options;
  bool json = false, no_criu = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= args.size()) return false;
      into = args[++i];
      return true;
    };
    bool ok = true;
    if (arg == "--json") json = true;
    else if (arg == "--help" || arg == "-h") return print_help("doctor");
    else if (arg == "--host-root") ok = value(host_root);
    else if (arg == "--criu") ok = value(criu);
    else if (arg == "--no-criu") no_criu = true;
    else if (arg == "--runc") ok = value(runc);
    else if (arg == "--plugin-dir") ok = value(options.criu_plugin_dir);
    else if (arg == "--hooks-dir") ok = value(options.hooks_dir);
    else if (arg == "--archive-dir") ok = value(options.archive_dir);
    else return usage_error("doctor", "unknown argument '" + arg + "'", kUsage);
    if (!ok) return usage_error("doctor", arg + " needs a value", kUsage);
  }
  options.system = HostRoot(host_root);
  const auto probe = make_criu_probe(criu);
  options.criu = no_criu ? nullptr : probe.get();
  options.runc_version = runc_version_of(runc);
  InventoryOptions inventory_options;
  if (auto inventory = read_inventory(options.system, inventory_options))
    for (const auto& gpu : inventory->gpus) options.gpu_memory_bytes += gpu.memory_bytes;
  const auto checks = check_node(options);
  if (json) {
    std::printf("%s\n", to_json(checks).dump(2).c_str());
  } else {
    for (const auto& c : checks) {
      std::printf("%-4s  %-26s %s\n", c.status == CheckStatus::Pass ? "PASS" : c.status == CheckStatus::Warn ? "WARN" : "FAIL",
                  c.name.c_str(), c.detail.c_str());
      if (!c.fix.empty()) std::printf("      %-26s fix: %s\n", "", c.fix.c_str());
    }
  }
  return worst(checks) == CheckStatus::Fail ? 1 : kExitOk;
}

}  // namespace gpuckpt::cli
