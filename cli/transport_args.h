// What `gpuckpt export` and `gpuckpt import` share: their arguments (ARCHIVE, -o OUT, --store, --timeout, --json),
// the limits they read an untrusted archive under, and how a failure becomes an exit code.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <span>
#include <string>

#include "cli/cli_args.h"
#include "archive/checkpoint_archive.h"
#include "base/result.h"

namespace gpuckpt::cli {

// Long enough for tens of GB through one core (each chunk decompressed and hashed); an archive from elsewhere can
// declare work for hours, so there is a bound, and the message says to raise it.
inline constexpr long kDefaultTransportSeconds = 3600;

struct TransportArgs {
  std::string archive;
  std::string out;
  std::string store_dir = configured_store_dir();
  long timeout_seconds = kDefaultTransportSeconds;
  bool json = false;
  std::string problem;   // a flag without its value, or a bad one

  // Takes args[i] (and the value that follows a flag); false if it is not one of ours.
  bool consume(std::span<char*> args, std::size_t& i) {
    const std::string arg = args[i];
    if (arg == "--json") {
      json = true;
      return true;
    }
    if (arg == "-o" || arg == "--output" || arg == "--store" || arg == "--timeout") {
      if (i + 1 >= args.size()) {
        problem = arg + " needs a value";
        return true;
      }
      const std::string value = args[++i];
      if (arg == "--store") {
        store_dir = value;
      } else if (arg == "--timeout") {
        char* end = nullptr;
        timeout_seconds = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || timeout_seconds <= 0) problem = "--timeout needs a positive number of seconds";
      } else {
        out = value;
      }
      return true;
    }
    if (arg.empty() || arg[0] == '-' || !archive.empty()) return false;
    archive = arg;
    return true;
  }

  ArchiveLimits limits() const {
    ArchiveLimits l;
    l.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    return l;
  }

  // Exit 2 when the archive, a chunk or the store's content is refused (the message names it; EEXIST: a reference
  // the store keeps with other content), 1 when reading or writing failed.
  int failed(const char* verb, const Error& error) const {
    if (error.errno_value == ETIMEDOUT)
      std::fprintf(stderr, "gpuckpt %s: %s took longer than %ld s and was stopped (%s); the archive was not written. If it is "
                   "a large archive you trust, raise --timeout\n", verb, archive.c_str(), timeout_seconds,
                   error.message.c_str());
    else
      std::fprintf(stderr, "gpuckpt %s: %s\n", verb, error.message.c_str());
    const int e = error.errno_value;
    return e == EINVAL || e == EBADMSG || e == ENOENT || e == EFBIG || e == ETIMEDOUT || e == EEXIST || e == 0
               ? kExitBadInput
               : 1;
  }
};

inline std::string mebibytes(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

inline std::string joined(const std::set<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace gpuckpt::cli
