// The `gpuckpt` entry: the verb table's dispatch, `--version`, `-o json|yaml|wide` for every verb, and under
// `--json` / `-o json|yaml` an error object on stdout when a verb fails having printed nothing there (its text still
// reaches stderr as it is written).
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_args.h"
#include "cli/output_format.h"
#include "cli/output_tee.h"
#include "cli/verb_help.h"
#include "cli/verbs.h"

namespace {

// The last non-empty line a failing verb wrote on stderr, without its "gpuckpt VERB: " (or "gpuckpt VERB ACTION: ",
// store's) prefix.
std::string error_line(const std::string& text, std::string_view verb) {
  std::string last;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (!line.empty() && line.rfind("usage:", 0) != 0 && line.rfind("       ", 0) != 0) last = line;
    start = end + 1;
  }
  const std::string prefix = "gpuckpt " + std::string(verb);
  if (last.rfind(prefix, 0) != 0) return last;
  std::size_t rest = prefix.size();
  if (last.compare(rest, 1, " ") == 0) {   // an action word: lower-case letters and dashes up to the colon
    std::size_t end = rest + 1;
    while (end < last.size() && (std::islower(static_cast<unsigned char>(last[end])) || last[end] == '-')) ++end;
    if (end > rest + 1) rest = end;
  }
  return last.compare(rest, 2, ": ") == 0 ? last.substr(rest + 2) : last;
}

// The form main's own usage errors take: the -o format, or json where the line has --json.
gpuckpt::cli::OutputFormat error_form(gpuckpt::cli::OutputFormat format, const std::vector<char*>& args) {
  using gpuckpt::cli::OutputFormat;
  if (format == OutputFormat::json || format == OutputFormat::yaml) return format;
  for (const char* a : args)
    if (!std::strcmp(a, "--json")) return OutputFormat::json;
  return format;
}

// Takes -o/--output FORMAT (also -oFORMAT, --output=FORMAT) out of `args`: the format, text when absent; "" in
// `problem` when it is fine.
gpuckpt::cli::OutputFormat take_output_flag(std::vector<char*>& args, std::string& problem) {
  using gpuckpt::cli::OutputFormat;
  OutputFormat format = OutputFormat::text;
  for (std::size_t i = 0; i < args.size();) {
    const std::string_view arg = args[i];
    std::string value;
    std::size_t taken = 1;
    if (arg == "-o" || arg == "--output") {
      if (i + 1 >= args.size()) {
        problem = std::string(arg) + " needs a format: json, yaml or wide";
        return format;
      }
      value = args[i + 1];
      taken = 2;
    } else if (arg.rfind("--output=", 0) == 0) {
      value = arg.substr(9);
    } else if (arg.rfind("-o", 0) == 0 && arg.size() > 2 && arg[2] != '-') {
      value = arg.substr(arg[2] == '=' ? 3 : 2);
    } else {
      ++i;
      continue;
    }
    const auto parsed = gpuckpt::cli::parse_output_format(value);
    if (!parsed) {
      problem = "-o must be json, yaml or wide, got '" + value + "'";
      return format;
    }
    format = *parsed;
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i + taken));
  }
  return format;
}

// The error object a failure prints on stdout under --json / -o json|yaml: {"error": {"verb", "exit_code",
// "message"}}, in the form asked for.
void print_error_object(std::string_view verb, int exit_code, const std::string& message, bool yaml) {
  const nlohmann::json error = {{"error", {{"verb", verb}, {"exit_code", exit_code}, {"message", message}}}};
  std::printf("%s", yaml ? gpuckpt::cli::to_yaml(error).c_str() : (error.dump(2) + "\n").c_str());
}

// A usage error main finds before any verb runs: the text on stderr and, where -o json|yaml was asked for, the
// error object in that form on stdout, as a verb's failure would print it.
int main_usage_error(std::string_view verb, const std::string& problem, gpuckpt::cli::OutputFormat format) {
  using gpuckpt::cli::OutputFormat;
  const std::string hint = verb.empty() ? "gpuckpt --help" : "gpuckpt " + std::string(verb) + " --help";
  const std::string prefix = verb.empty() ? "gpuckpt" : "gpuckpt " + std::string(verb);
  std::fprintf(stderr, "%s: %s (see '%s')\n", prefix.c_str(), problem.c_str(), hint.c_str());
  if (format == OutputFormat::json || format == OutputFormat::yaml)
    print_error_object(verb, gpuckpt::cli::kExitBadInput, problem, format == OutputFormat::yaml);
  return gpuckpt::cli::kExitBadInput;
}

int run_verb(const gpuckpt::cli::Verb& verb, std::span<char*> args) {
  try {
    return verb.run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpuckpt %.*s: %s\n", static_cast<int>(verb.name.size()), verb.name.data(), e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using gpuckpt::cli::verbs;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("usage: gpuckpt VERB [ARGS...]   (gpuckpt VERB --help: its flags, defaults and an example)\n\nverbs:\n");
    for (const auto& v : verbs())
      std::printf("  %-12.*s %.*s\n", static_cast<int>(v.name.size()), v.name.data(),
                  static_cast<int>(v.summary.size()), v.summary.data());
    std::printf("\noutput: -o json|yaml (verbs with structured output; failures too, as an error object), -o wide\n"
                "(more columns: gpus, jobs); --json is -o json.\n"
                "environment: GPUCKPT_AGENT (agent URL, for --agent), GPUCKPT_TOKEN_FILE (for --token-file),\n"
                "GPUCKPT_LOG_LEVEL (error|warn|info|debug), GPUCKPT_GPU_STORE (the chunk store of store and inspect),\n"
                "GPUCKPT_MODEL_CHECK, GPUCKPT_MEMORY_CHECK, GPUCKPT_FIRMWARE_CHECK, GPUCKPT_LINK_CHECK,\n"
                "GPUCKPT_NUMA_CHECK (0: relax that GPU check where match and inspect judge here).\n"
                "exit codes: 0 ok, 1 failure, 2 bad input or refused request, 3 no GPU match.\n"
                "reference: docs/cli.md\n");
    return argc < 2 ? 2 : 0;
  }
  std::string_view name = argv[1];
  if (name == "--version" || name == "-V") name = "version";
  std::vector<char*> args(argv + 2, argv + argc);
  for (const auto& v : verbs()) {
    if (v.name != name) continue;
    using gpuckpt::cli::OutputFormat;
    const std::string verb(v.name);
    std::string problem;
    const OutputFormat format =
        gpuckpt::cli::takes_output_file(verb) ? OutputFormat::text : take_output_flag(args, problem);
    if (problem.empty() && (format == OutputFormat::json || format == OutputFormat::yaml) &&
        !gpuckpt::cli::offers_json(verb))
      problem = "-o json and -o yaml are for verbs with structured output; " + verb + " has none";
    if (problem.empty() && format == OutputFormat::wide && !gpuckpt::cli::offers_wide(verb))
      problem = "-o wide is for verbs that print a table with more columns to show (gpus, jobs); " + verb + " has none";
    if (!problem.empty()) return main_usage_error(verb, problem, error_form(format, args));
    gpuckpt::cli::set_output_format(format);
    static char json_flag[] = "--json";
    bool json = false;
    for (char* a : args) json = json || !std::strcmp(a, "--json");
    if (!json && (format == OutputFormat::json || format == OutputFormat::yaml)) {
      // First, not last: a flag left without its value ("--source -o json") then says so instead of taking
      // "--json" as its value. Every verb reads its flags in any order.
      args.insert(args.begin(), json_flag);
      json = true;
    }
    if (!json) return run_verb(v, args);
    const bool yaml = format == OutputFormat::yaml;
    gpuckpt::cli::OutputTee out(STDOUT_FILENO, stdout, yaml ? 64u << 20 : 0, !yaml);
    gpuckpt::cli::OutputTee err(STDERR_FILENO, stderr, 64 * 1024);
    const int rc = run_verb(v, args);
    out.finish();
    err.finish();
    if (rc != 0 && out.written() == 0) {
      print_error_object(v.name, rc, error_line(err.kept(), v.name), yaml);
    } else if (yaml) {
      const auto document = nlohmann::json::parse(out.kept(), nullptr, false);
      std::printf("%s", document.is_discarded() ? out.kept().c_str() : gpuckpt::cli::to_yaml(document).c_str());
    }
    return rc;
  }
  // An unknown verb: its error in the form -o asks for, wherever in the line -o stands.
  std::vector<char*> all(argv + 1, argv + argc);
  std::string ignored;
  const auto format = take_output_flag(all, ignored);
  std::string problem = "unknown verb '" + std::string(argv[1]) + "'";
  if (name == "-o" || name.rfind("--output", 0) == 0 || (name.rfind("-o", 0) == 0 && name.size() > 2))
    problem += ": -o goes after the verb (gpuckpt VERB -o FORMAT)";
  return main_usage_error("", problem, error_form(format, all));
}
