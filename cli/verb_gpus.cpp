// gpuckpt gpus [--host-root DIR] [--nvml-snapshot FILE] [--json]: this node's GPUs (JSON = the properties record;
// -o wide: the properties a match compares besides, driver, compute capability, MIG mode, device nodes).
#include <algorithm>
#include <cstdio>
#include <map>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/output_format.h"
#include "cli/verb_help.h"
#include "gpu/inventory.h"
#include "gpu/properties_record.h"

namespace gpuckpt::cli {

int run_gpus(std::span<char*> args) {
  static const char* kUsage = "gpuckpt gpus [--host-root DIR] [--nvml-snapshot FILE] [--json]";
  InventoryArgs opts;
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--json") json = true;
    else if (arg == "--help" || arg == "-h") return print_help("gpus");
    else if (!opts.consume(args, i)) return usage_error("gpus", "unknown argument '" + arg + "'", kUsage);
  }
  if (!opts.problem.empty()) return usage_error("gpus", opts.problem, kUsage);
  auto inventory = opts.read("gpus");
  if (!inventory) return kExitBadInput;
  if (json) {
    std::printf("%s\n", to_json(*inventory).dump(2).c_str());
    return kExitOk;
  }
  const bool wide = output_format() == OutputFormat::wide;
  std::printf("%-44s %-26s %-10s %-12s %-5s %-7s %-14s", "ID", "NAME", "MEMORY", "PCI", "NUMA", "RENDER", "LINKS");
  if (wide) std::printf(" %-16s %-8s %-9s %s", "DRIVER", "COMPUTE", "MIG", "DEVICES");
  std::printf("\n");
  for (const auto& gpu : inventory->gpus) {
    // "xgmi:3" = XGMI links to 3 other GPUs here; "nvlink:7x18" = 7 peers over 18 links each
    std::map<std::string, std::pair<int, std::uint32_t>> peers;
    for (const auto& link : gpu.links) {
      if (link.peer_id.empty() || link.type == "pcie") continue;
      auto& [count, width] = peers[link.type];
      ++count;
      width = std::max(width, link.count);
    }
    std::string links;
    for (const auto& [type, p] : peers)
      links += (links.empty() ? "" : ",") + type + ":" + std::to_string(p.first) +
               (p.second > 1 ? "x" + std::to_string(p.second) : "");
    const std::string numa = gpu.numa_node >= 0 ? std::to_string(gpu.numa_node) : "-";
    std::printf("%-44s %-26s %-10s %-12s %-5s %-7s %-14s", gpu.id.c_str(), gpu.name.c_str(),
                gpu.memory_bytes ? format_bytes(gpu.memory_bytes).c_str() : "?", gpu.pci_address.c_str(), numa.c_str(),
                gpu.render_minor >= 0 ? ("D" + std::to_string(gpu.render_minor)).c_str() : "-",
                links.empty() ? "-" : links.c_str());
    if (wide) {
      std::string devices;
      for (const auto& path : gpu.device_paths) devices += (devices.empty() ? "" : ",") + path;
      auto or_dash = [](const std::string& text) { return text.empty() ? std::string("-") : text; };
      std::printf(" %-16s %-8s %-9s %s", or_dash(gpu.driver_version).c_str(), or_dash(gpu.compute_capability).c_str(),
                  or_dash(gpu.mig_mode).c_str(), or_dash(devices).c_str());
    }
    std::printf("\n");
  }
  if (inventory->gpus.empty()) std::printf("(no GPUs)\n");
  return kExitOk;
}

}  // namespace gpuckpt::cli
