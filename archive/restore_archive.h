// Restore plans applied to checkpoint archives: spec.dump and CRIU's images of the container's /dev tmpfs, as the
// agent rewrites an archive for a restore (restore_plan.h has the plans themselves, which need no libarchive).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "archive/checkpoint_archive.h"
#include "restore/restore_plan.h"

namespace gpuckpt {

// A device node as it must be after restore: its name under /dev ("nvidia1", "dri/renderD129") and numbers.
struct DeviceNodeTarget {
  std::string name;
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
  bool operator==(const DeviceNodeTarget&) const = default;
};

// CRIU saves the container's /dev tmpfs, device nodes included, as checkpoint/tmpfs-dev-<id>.tar.gz.img and
// restores it over the nodes the runtime created, so the plan must reach those nodes too. Given one such
// gzip'd tar, returns it with the character devices named in `nodes` (by their name under /dev in the image,
// e.g. "nvidia0") renamed and renumbered as the map says (each entry is matched by its name in the image as it
// came, so a swap swaps); an entry at a new name that no node moves away from is dropped (two nodes of one name
// would leave the restored one to chance). std::nullopt when the image holds none of them. The image is held
// to `limits` (entries, max_nested_bytes uncompressed, names as in the outer archive).
Result<std::optional<std::string>> renumber_device_nodes(std::string_view tmpfs_image,
                                                         const std::map<std::string, DeviceNodeTarget>& nodes,
                                                         const ArchiveLimits& limits);

// The archive edits (spec.dump and the /dev tmpfs images) that make the archive `info` describes restore with
// `plan`, from what inspect_checkpoint_archive read (no second pass over the archive); std::nullopt when the
// archive already restores that way (same device numbers, no environment change).
Result<std::optional<ArchiveEdit>> restore_edits(const CheckpointInfo& info, const RestorePlan& plan,
                                                 const DeviceNumberLookup& lookup, const ArchiveLimits& limits);

}  // namespace gpuckpt
