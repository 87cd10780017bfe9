// Every verb's --help (cli/verb_help.cpp).
#pragma once

#include <string_view>

namespace gpuckpt::cli {

// Prints VERB's usage, flags with defaults, an example and the exit codes on stdout; 0.
int print_help(std::string_view verb);

// Whether VERB prints structured output (--json, so -o json|yaml), and a table -o wide widens.
bool offers_json(std::string_view verb);
bool offers_wide(std::string_view verb);
// Whether VERB's -o/--output names the file it writes (export, import) rather than an output format.
bool takes_output_file(std::string_view verb);

}  // namespace gpuckpt::cli
