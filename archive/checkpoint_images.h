// The checkpoint-image index: which checkpoints this node's agent made available for a runtime to restore, and
// under which names. gpuckpt-nri adjusts a container only when the restore it recognised (restore_recognition.h)
// matches an entry here (docs/security.md, "Which restores gpuckpt-nri acts on").
//   <state_dir>/checkpoint-images/<sha256 of the entry's key>.json
//     {"version": 2, "kind": "image"|"kubelet-archive", "name", "checkpoint_id", "manifest_digest",
//      "archive": {"size", "mtime_ns", "inode"}, "gpus": <gpuckpt-gpus.json>}
// Only the agent writes entries, and only from its own flows:
//   images            after it loaded a checkpoint image into the runtime's store, pushed it to the configured
//                     registry, or (CRI-O, whose store it cannot load into) wrote the layout it tells the operator to
//                     copy in under that name; always under a name the agent chose (checkpoint_image_name(tag), the
//                     registry repository's tag or digest), never under a name a client passed;
//   kubelet archives  after it annotated an archive in the kubelet's checkpoint directory with its checkpoint id,
//                     bound to the archive's path and file identity (size, mtime, inode) at that moment.
// The directory is root-only on the node: a pod author can name an image or a path, never add or change an entry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "archive/checkpoint_archive.h"
#include "base/result.h"

namespace gpuckpt {

enum class CheckpointSourceKind { Image, KubeletArchive };

// What identifies an archive file at the moment it was registered: a file replaced or rewritten since then is
// not the archive the agent annotated.
struct ArchiveFileIdentity {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t inode = 0;
  bool operator==(const ArchiveFileIdentity&) const = default;
};
Result<ArchiveFileIdentity> archive_file_identity(const std::filesystem::path& archive);

struct CheckpointImageEntry {
  CheckpointSourceKind kind = CheckpointSourceKind::Image;
  std::string name;              // images: the normalised reference; kubelet archives: the absolute path
  std::string manifest_digest;   // images: "sha256:…" of the manifest the agent wrote (empty where unknown)
  ArchiveFileIdentity archive;   // kubelet archives only
  CheckpointGpuRecord record;    // record.checkpoint_id is the entry's checkpoint
};

// An image the agent loaded, pushed or handed over under `reference` (a name the agent chose).
Result<void> register_checkpoint_image(const std::filesystem::path& state_dir, const std::string& reference,
                                       const std::string& manifest_digest, const CheckpointGpuRecord& record);
// A kubelet archive the agent annotated with `record` (its checkpoint id); `archive` is an absolute path.
Result<void> register_kubelet_archive(const std::filesystem::path& state_dir, const std::filesystem::path& archive,
                                      const CheckpointGpuRecord& record);

// The entry registered under an image reference (normalised) or an absolute archive path; std::nullopt: none.
Result<std::optional<CheckpointImageEntry>> find_checkpoint_source(const std::filesystem::path& state_dir,
                                                                   const std::string& name_or_path);
// Every entry of one checkpoint id (the names it was loaded and pushed under, its kubelet archive); unreadable
// entries are errors, not skipped (an entry the agent wrote that cannot be read is not ignored silently).
Result<std::vector<CheckpointImageEntry>> find_checkpoint_by_id(const std::filesystem::path& state_dir,
                                                                const std::string& checkpoint_id);

// Docker's normalisation, which containerd applies before it names a container's image: "ck" ->
// "docker.io/library/ck:latest", "ml/ck:1" -> "docker.io/ml/ck:1"; names with a domain keep it. Image entries
// are keyed by the normalised reference.
std::string normalise_image_reference(const std::string& reference);

}  // namespace gpuckpt
