// gpuckpt target-pod --node NODE --container NAME --image REF [--name NAME] [--pull Never|IfNotPresent]
//                    [--owner-selector JSON | --no-labels] < SOURCE_POD_JSON
// Prints the pod that restores the source pod's container from its checkpoint image on NODE (cli/target_pod.h);
// `kubectl gpuckpt migrate` pipes `kubectl get pod -o json` through it into `kubectl create -f -`.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "cli/target_pod.h"
#include "base/json_reader.h"

namespace gpuckpt::cli {

int run_target_pod(std::span<char*> args) {
  static const char* kUsage =
      "gpuckpt target-pod --node NODE --container NAME --image REF [--name NAME] [--pull Never|IfNotPresent] "
      "[--owner-selector JSON | --no-labels] < POD_JSON";
  TargetPodOptions options;
  std::string owner_selector;   // JSON, parsed once every argument is read
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (arg == "--help" || arg == "-h") return print_help("target-pod");
    if (arg == "--no-labels") {
      options.no_labels = true;
      continue;
    }
    std::string* value = arg == "--node" ? &options.node : arg == "--container" ? &options.container
                       : arg == "--image" ? &options.image : arg == "--name" ? &options.name
                       : arg == "--pull" ? &options.pull : arg == "--owner-selector" ? &owner_selector : nullptr;
    if (!value) return usage_error("target-pod", "unexpected argument '" + arg + "'", kUsage);
    if (i + 1 >= args.size()) return usage_error("target-pod", arg + " needs a value", kUsage);
    *value = args[++i];
  }
  if (!owner_selector.empty()) {
    JsonLimits selector_limits;
    selector_limits.max_bytes = 64 << 10;
    auto parsed = parse_json(owner_selector, "--owner-selector", selector_limits);
    if (!parsed) return usage_error("target-pod", parsed.error().message, kUsage);
    options.owner_selector = std::move(parsed.value());
  }
  if (options.node.empty() || options.container.empty() || options.image.empty())
    return usage_error("target-pod", "--node, --container and --image are required", kUsage);
  init_cli_logging("target-pod");
  // A pod's JSON is a few KiB; anything past the limit is not one.
  constexpr std::size_t kMaxPodBytes = 4 << 20;
  std::string text;
  char buffer[65536];
  while (std::cin.read(buffer, sizeof buffer) || std::cin.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(std::cin.gcount()));
    if (text.size() > kMaxPodBytes) {
      std::fprintf(stderr, "gpuckpt target-pod: the source pod on stdin is larger than %zu bytes\n", kMaxPodBytes);
      return kExitBadInput;
    }
  }
  JsonLimits limits;
  limits.max_bytes = kMaxPodBytes;
  auto source = parse_json(text, "the source pod on stdin", limits);
  if (!source) {
    std::fprintf(stderr, "gpuckpt target-pod: %s\n", source.error().message.c_str());
    return kExitBadInput;
  }
  auto pod = target_pod(source.value(), options);
  if (!pod) {
    std::fprintf(stderr, "gpuckpt target-pod: %s\n", pod.error().message.c_str());
    return kExitBadInput;
  }
  std::printf("%s\n", pod->dump(2).c_str());
  return kExitOk;
}

}  // namespace gpuckpt::cli
