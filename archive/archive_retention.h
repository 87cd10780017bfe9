// Archive retention: which checkpoint archives of a directory go, per container, by count, age
// and bytes; never a container's newest unless asked. Deleting an archive also drops its store-backed checkpoints'
// references in the chunk store (chunk_store.h), so the next garbage collection frees the chunks only it needed.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "archive/checkpoint_archive.h"
#include "gpumem/chunk_store.h"
#include "base/result.h"

namespace gpuckpt::retention {

struct Policy {
  std::optional<int> keep_count;                 // per container, newest first
  std::optional<std::chrono::seconds> max_age;   // older archives go
  std::optional<std::uint64_t> max_bytes;        // per container: the newest archives that fit stay
  bool include_newest = false;                   // the newest of a container may go too
  bool enabled() const { return keep_count || max_age || max_bytes; }
};

struct Archive {
  std::filesystem::path path;
  std::string container;      // archives of one container are judged together
  std::int64_t mtime = 0;     // seconds since the epoch
  std::uint64_t bytes = 0;
};

// The archives `policy` removes (pure; the order of `archives` does not matter).
std::vector<std::filesystem::path> archives_to_delete(std::vector<Archive> archives, const Policy& policy,
                                                      std::int64_t now);

struct Outcome {
  std::vector<std::filesystem::path> deleted;
  std::uint64_t deleted_bytes = 0;
  std::size_t references_removed = 0;
  std::vector<std::string> problems;   // archives that could not be read or removed (kept)
};

// Applies `policy` to the checkpoint archives (*.tar, *.tar.gz, *.tar.zst) directly in `dir`. An archive that
// cannot be read is kept and named in `problems`. With `store`, the references of every store-backed checkpoint a
// deleted archive held are removed from it.
Outcome apply(const std::filesystem::path& dir, const Policy& policy, chunk_store::Store* store,
              const ArchiveLimits& limits, std::int64_t now);

}  // namespace gpuckpt::retention
