// The verb table. Adding a verb: a verb_NAME.cpp with `int run_NAME(std::span<char*>)`, one line here.
#include "cli/verbs.h"

namespace gpuckpt::cli {

int run_version(std::span<char*> args);

std::span<const Verb> verbs() {
  static const Verb table[] = {
      {"version", "print gpuckpt's version", run_version},
  };
  return table;
}

}  // namespace gpuckpt::cli
