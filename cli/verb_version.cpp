#include <cstdio>
#include <span>

#include "gpuckpt_version.h"

namespace gpuckpt::cli {

int run_version(std::span<char*> /*args*/) {
  std::printf("gpuckpt %s\n", GPUCKPT_VERSION);
  return 0;
}

}  // namespace gpuckpt::cli
