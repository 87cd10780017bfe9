// Every verb's --help (cli/verb_help.cpp).
#pragma once

#include <string_view>

namespace gpuckpt::cli {

// Prints VERB's usage, flags with defaults, an example and the exit codes on stdout; 0.
int print_help(std::string_view verb);

}  // namespace gpuckpt::cli
