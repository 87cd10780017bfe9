// Argument handling the inventory verbs share (gpus, match): host root and NVML source, exit codes, messages.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_image.h"
#include "gpu/inventory.h"
#include "base/log.h"

namespace gpuckpt::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitNoMatch = 3;

inline int usage_error(const char* verb, const std::string& problem, const char* usage) {
  std::fprintf(stderr, "gpuckpt %s: %s\nusage: %s\n", verb, problem.c_str(), usage);
  return kExitBadInput;
}

// A flag's old spelling still works, with a warning on stderr naming the one to use (docs/cli.md "Deprecated").
inline void warn_deprecated(const char* verb, const std::string& old_flag, const char* new_flag) {
  std::fprintf(stderr, "gpuckpt %s: warning: %s is deprecated, use %s (the same meaning)\n", verb, old_flag.c_str(),
               new_flag);
}

// CLI logging: warnings and errors by default (relaxations are warnings), GPUCKPT_LOG_LEVEL=info|debug for more.
inline void init_cli_logging(const char* verb) {
  log::set_component(std::string("gpuckpt ") + verb);
  const char* level = std::getenv("GPUCKPT_LOG_LEVEL");
  log::set_level(log::level_from_string(level ? level : "", log::Level::Warn));
}

// The chunk store the verbs that read or keep store-backed checkpoints use without --store: GPUCKPT_GPU_STORE as the
// plugin reads it when it names a directory, else the node's store.
inline std::string configured_store_dir() {
  const char* env = std::getenv("GPUCKPT_GPU_STORE");
  if (env != nullptr && *env != '\0') {
    auto parsed = gpu_image::parse_store(env, "GPUCKPT_GPU_STORE");
    if (parsed && !parsed->empty()) return *parsed;
  }
  return chunk_store::kNodeStoreDir;
}

struct InventoryArgs {
  std::string host_root = "/";
  std::string nvml_snapshot;

  std::string problem;   // a flag without its value

  // Takes --host-root/--nvml-snapshot (and the value that follows) at args[i]; false if args[i] is not ours.
  bool consume(std::span<char*> args, std::size_t& i) {
    const std::string arg = args[i];
    for (const char* flag : {"--host-root", "--nvml-snapshot"}) {
      const std::string prefix = std::string(flag) + "=";
      std::string value;
      if (arg == flag) {
        if (i + 1 >= args.size()) {
          problem = std::string(flag) + " needs a value";
          return true;
        }
        value = args[++i];
      } else if (arg.rfind(prefix, 0) == 0) {
        value = arg.substr(prefix.size());
      } else {
        continue;
      }
      (std::string(flag) == "--host-root" ? host_root : nvml_snapshot) = value;
      return true;
    }
    return false;
  }

  // The inventory, or nullopt after printing why. NVML describes the machine we run on, so with another host
  // root it is only consulted through a recorded snapshot.
  std::optional<NodeInventory> read(const char* verb) const {
    init_cli_logging(verb);
    InventoryOptions options;
    options.nvml_snapshot = nvml_snapshot;
    options.use_nvml = host_root == "/";
    auto inventory = read_inventory(HostRoot(host_root), options);
    if (!inventory) {
      std::fprintf(stderr, "gpuckpt %s: %s\n", verb, inventory.error().message.c_str());
      return std::nullopt;
    }
    return std::move(inventory.value());
  }
};

}  // namespace gpuckpt::cli
