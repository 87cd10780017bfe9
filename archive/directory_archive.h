// Directories to tars and back, for runtimes whose checkpoint gpuckpt assembles itself (containerd 1.7: CRIU
// images and the rootfs diff come as directories; the archive gets the layout podman and CRI-O write).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "archive/checkpoint_archive.h"
#include "base/result.h"

namespace gpuckpt {

// One entry of a tar being assembled: a file of the host (`source`) stored as `name`, or inline `content`.
struct PackEntry {
  std::string name;
  std::filesystem::path source;   // a regular file or a directory (its tree, names prefixed with `name`/)
  std::string content;            // used when source is empty
};

// Writes an uncompressed tar of `entries` (the format kubelet/CRI-O write) to `out`. Directory trees keep
// modes, owners, symlinks and hardlinks; overlayfs whiteouts (0:0 character devices) are left out and their
// paths returned in `whiteouts` (relative to that tree) when it is not null. Returns the bytes written.
Result<std::uint64_t> pack_tar(const std::vector<PackEntry>& entries, const std::filesystem::path& out,
                               std::vector<std::string>* whiteouts = nullptr);

// Extracts a validated archive (list_archive's rules: no absolute names, no "..", links inside) into `dir`,
// which must exist. Entries other than files, directories and links are refused, as everywhere else.
Result<void> extract_archive(const std::filesystem::path& archive, const std::filesystem::path& dir,
                             const ArchiveLimits& limits);

// Extracts a container's rootfs diff (a tar inside a checkpoint) onto a mounted root filesystem. Refuses names
// that leave `root` and never follows symlinks already in it.
Result<void> apply_rootfs_diff(const std::filesystem::path& diff_tar, const std::filesystem::path& root,
                               const ArchiveLimits& limits);

}  // namespace gpuckpt
