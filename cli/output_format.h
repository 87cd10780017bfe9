// `-o json|yaml|wide` (kubectl's convention): which form a verb's output takes. main.cpp reads the flag once for
// every verb; json and yaml ride on the verb's own --json, wide asks a table verb for more columns.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpuckpt::cli {

enum class OutputFormat { text, json, yaml, wide };

// "json", "yaml", "wide"; nullopt for anything else.
std::optional<OutputFormat> parse_output_format(std::string_view name);

// What main.cpp chose for this run (text unless -o was given).
OutputFormat output_format();
void set_output_format(OutputFormat format);

// The JSON document as YAML (block style; strings quoted where YAML would read them as something else).
std::string to_yaml(const nlohmann::json& document);

}  // namespace gpuckpt::cli
