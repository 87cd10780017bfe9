#include <cstdio>
#include <cstring>
#include <exception>
#include <span>

#include "cli/verbs.h"

int main(int argc, char** argv) {
  using gpuckpt::cli::verbs;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("usage: gpuckpt VERB [ARGS...]\n\nverbs:\n");
    for (const auto& v : verbs())
      std::printf("  %-12.*s %.*s\n", static_cast<int>(v.name.size()), v.name.data(),
                  static_cast<int>(v.summary.size()), v.summary.data());
    return argc < 2 ? 2 : 0;
  }
  for (const auto& v : verbs()) {
    if (v.name == argv[1]) {
      try {
        return v.run(std::span<char*>(argv + 2, static_cast<std::size_t>(argc - 2)));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gpuckpt %s: %s\n", argv[1], e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "gpuckpt: unknown verb '%s' (see 'gpuckpt --help')\n", argv[1]);
  return 2;
}
