#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "cli/cli_args.h"
#include "cli/verb_help.h"
#include "gpuckpt_version.h"

namespace gpuckpt::cli {

int run_version(std::span<char*> args) {
  if (!args.empty()) {
    const std::string_view arg = args[0];
    if (arg == "--help" || arg == "-h") return print_help("version");
    return usage_error("version", "unexpected argument '" + std::string(arg) + "'", "gpuckpt version");
  }
  std::printf("gpuckpt %s\n", GPUCKPT_VERSION);
  return 0;
}

}  // namespace gpuckpt::cli
