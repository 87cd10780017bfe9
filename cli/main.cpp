// The `gpuckpt` entry: the verb table's dispatch, `--version`, and under `--json` a JSON error object on stdout
// when a verb fails having printed nothing there (its text still reaches stderr as it is written).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli/output_tee.h"
#include "cli/verbs.h"

namespace {

// The last non-empty line a failing verb wrote on stderr, without its "gpuckpt VERB: " prefix.
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
  const std::string prefix = "gpuckpt " + std::string(verb) + ": ";
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return last;
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
    std::printf("\nenvironment: GPUCKPT_AGENT (agent URL, for --agent), GPUCKPT_TOKEN_FILE (for --token-file),\n"
                "GPUCKPT_LOG_LEVEL (error|warn|info|debug).\n"
                "exit codes: 0 ok, 1 failure, 2 bad input or refused request, 3 no GPU match.\n");
    return argc < 2 ? 2 : 0;
  }
  std::string_view name = argv[1];
  if (name == "--version" || name == "-V") name = "version";
  const std::span<char*> args(argv + 2, static_cast<std::size_t>(argc - 2));
  for (const auto& v : verbs()) {
    if (v.name != name) continue;
    bool json = false;
    for (char* a : args) json = json || !std::strcmp(a, "--json");
    if (!json) return run_verb(v, args);
    gpuckpt::cli::OutputTee out(STDOUT_FILENO, stdout, 0);
    gpuckpt::cli::OutputTee err(STDERR_FILENO, stderr, 64 * 1024);
    const int rc = run_verb(v, args);
    out.finish();
    err.finish();
    if (rc != 0 && out.written() == 0) {
      const nlohmann::json error = {{"error", {{"verb", v.name}, {"exit_code", rc}, {"message", error_line(err.kept(), v.name)}}}};
      std::printf("%s\n", error.dump(2).c_str());
    }
    return rc;
  }
  std::fprintf(stderr, "gpuckpt: unknown verb '%s' (see 'gpuckpt --help')\n", argv[1]);
  return 2;
}
