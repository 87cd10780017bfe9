#include "cli/output_format.h"

#include <yaml-cpp/yaml.h>

namespace gpuckpt::cli {

namespace {

OutputFormat chosen = OutputFormat::text;

void emit(YAML::Emitter& out, const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      if (value.empty()) out << YAML::Flow;   // {} on the key's line
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case nlohmann::json::value_t::array:
      if (value.empty()) out << YAML::Flow;   // []
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      break;
    case nlohmann::json::value_t::string:
      // Quoted always: "1.0", "yes", "null" or "0x10" stay strings for every YAML reader.
      out << YAML::DoubleQuoted << value.get<std::string>();
      break;
    case nlohmann::json::value_t::null: out << YAML::Null; break;
    default: out << value.dump(); break;   // numbers and booleans read the same in both
  }
}

}  // namespace

std::optional<OutputFormat> parse_output_format(std::string_view name) {
  if (name == "json") return OutputFormat::json;
  if (name == "yaml") return OutputFormat::yaml;
  if (name == "wide") return OutputFormat::wide;
  return std::nullopt;
}

OutputFormat output_format() { return chosen; }
void set_output_format(OutputFormat format) { chosen = format; }

std::string to_yaml(const nlohmann::json& document) {
  YAML::Emitter out;
  emit(out, document);
  return std::string(out.c_str()) + "\n";
}

}  // namespace gpuckpt::cli
