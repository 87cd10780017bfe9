#include "archive/archive_retention.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "gpumem/gpu_manifest.h"

namespace gpuckpt::retention {
namespace fs = std::filesystem;

std::vector<fs::path> archives_to_delete(std::vector<Archive> archives, const Policy& policy, std::int64_t now) {
  std::vector<fs::path> out;
  if (!policy.enabled()) return out;
  std::map<std::string, std::vector<const Archive*>> by_container;
  for (const Archive& a : archives) by_container[a.container].push_back(&a);
  for (auto& [container, list] : by_container) {
    std::sort(list.begin(), list.end(), [](const Archive* a, const Archive* b) {
      return a->mtime != b->mtime ? a->mtime > b->mtime : a->path > b->path;   // newest first, a stable order
    });
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Archive& a = *list[i];
      bytes += a.bytes;
      const bool too_many = policy.keep_count && i >= static_cast<std::size_t>(std::max(*policy.keep_count, 0));
      const bool too_old = policy.max_age && now - a.mtime > policy.max_age->count();
      const bool too_big = policy.max_bytes && bytes > *policy.max_bytes;
      if ((too_many || too_old || too_big) && (i > 0 || policy.include_newest)) out.push_back(a.path);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

bool is_archive_name(const std::string& name) {
  return !name.starts_with(".") &&
         (name.ends_with(".tar") || name.ends_with(".tar.gz") || name.ends_with(".tar.zst"));
}

}  // namespace

Outcome apply(const fs::path& dir, const Policy& policy, chunk_store::Store* store, const ArchiveLimits& limits,
              std::int64_t now) {
  Outcome outcome;
  if (!policy.enabled()) return outcome;
  std::vector<Archive> archives;
  // Per archive: the references of the store-backed checkpoints it holds, with its manifest's text.
  std::map<fs::path, std::vector<std::pair<std::string, std::string>>> checkpoints;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st {};
    // Regular files only, never followed: a link in the directory does not make the agent delete elsewhere.
    if (!is_archive_name(name) || ::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    auto info = inspect_checkpoint_archive(entry.path(), limits);
    if (!info) {
      outcome.problems.push_back(entry.path().string() + ": kept, not readable: " + info.error().message);
      continue;
    }
    archives.push_back({entry.path(), info->container_name, static_cast<std::int64_t>(st.st_mtime),
                        static_cast<std::uint64_t>(st.st_size)});
    for (const auto& [manifest_name, text] : info->memory_manifests)
      if (auto manifest = gpu_image::parse_manifest(text, manifest_name); manifest)
        checkpoints[entry.path()].emplace_back(gpu_image::reference_name(*manifest), text);
  }
  if (ec) outcome.problems.push_back("cannot list " + dir.string() + ": " + ec.message());
  const auto doomed = archives_to_delete(archives, policy, now);
  // A checkpoint another kept archive also holds (a copy under another name) keeps its references.
  std::set<std::string> still_held;
  for (const auto& [path, refs] : checkpoints)
    if (!std::binary_search(doomed.begin(), doomed.end(), path))
      for (const auto& ref : refs) still_held.insert(ref.first);
  for (const fs::path& path : doomed) {
    const auto bytes = fs::file_size(path, ec);
    if (!fs::remove(path, ec)) {
      outcome.problems.push_back(path.string() + ": kept, cannot remove it: " + ec.message());
      continue;
    }
    outcome.deleted.push_back(path);
    outcome.deleted_bytes += ec ? 0 : bytes;
    if (store == nullptr) continue;
    for (const auto& [ref, text] : checkpoints[path]) {
      if (still_held.contains(ref)) continue;
      // Only the reference this archive's manifest is: one with other bytes is another checkpoint's under the same
      // id and process (an archive placed as bytes can claim any), and stays.
      auto removed = store->remove_ref(ref, text);
      if (!removed) outcome.problems.push_back(path.string() + ": " + removed.error().message);
      else if (*removed) ++outcome.references_removed;
    }
  }
  return outcome;
}

}  // namespace gpuckpt::retention
