// The `gpuckpt` command-line front: one thin file per verb (crun's shape). Each verb gets argv after its
// name and returns the process exit code: 0 ok, 2 bad input, 3 no GPU match, 1 any other failure.
#pragma once

#include <span>
#include <string_view>

namespace gpuckpt::cli {

using VerbFn = int (*)(std::span<char*> args);

struct Verb {
  std::string_view name;
  std::string_view summary;
  VerbFn run;
};

std::span<const Verb> verbs();

}  // namespace gpuckpt::cli
