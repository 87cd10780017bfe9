// CRIU's statistics of a dump, from the stats-dump image every dump writes (podman and CRI-O put it into their
// checkpoint archive, at its top): where the runtime's checkpoint call spent its time, as CRIU measured it, so a
// job record can say so without anyone reading CRIU's logs.
//
// The image: CRIU's service-image magic and the stats magic (two little-endian 32-bit words), a 32-bit entry size,
// then one protobuf entry (proto/criu_stats.proto). Anything else is an error naming the source.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gpuckpt {

inline constexpr const char* kCriuDumpStatsFile = "stats-dump";
inline constexpr std::size_t kMaxCriuStatsBytes = 4096;   // a real one is under 100 bytes

struct CriuDumpStats {
  double freezing_seconds = 0;   // collecting and freezing the process tree
  double frozen_seconds = 0;     // frozen: everything CRIU and its plugins do to the tree
  double memdump_seconds = 0;    // draining the CPU pages (inside the frozen time)
  double memwrite_seconds = 0;   // writing them into pages-*.img
  std::uint64_t pages_scanned = 0;
  std::uint64_t pages_written = 0;
};

Result<CriuDumpStats> parse_criu_dump_stats(std::string_view image, std::string_view source);

// gpuckpt's CRIU plugin's own steps of a dump, which CRIU's statistics count inside its freezing and frozen
// times. The plugin writes them into CRIU's image directory at the end of the dump (a JSON object of seconds),
// so they travel in the runtime's archive next to stats-dump whichever runtime wrote it.
inline constexpr const char* kPluginDumpTimingsFile = "gpuckpt-dump-timings.json";
inline constexpr std::size_t kMaxPluginDumpTimingsBytes = 4096;

struct PluginDumpTimings {
  double gpu_lock_seconds = 0;         // locking the CUDA processes (inside CRIU's freezing)
  double gpu_checkpoint_seconds = 0;   // the driver copying device memory into the processes (frozen)
  double gpu_memory_seconds = 0;       // writing the GPU memory images or chunks (frozen)
  double cpu_pages_seconds = 0;        // moving CRIU's page images into the node store (frozen)
};

std::string serialize_plugin_dump_timings(const PluginDumpTimings& timings);
// At most kMaxPluginDumpTimingsBytes of one JSON object; each known key a number of seconds from 0 to a day.
// Keys it does not know are ignored (a newer plugin may say more). An error names `source`.
Result<PluginDumpTimings> parse_plugin_dump_timings(std::string_view text, std::string_view source);

// The runtime's checkpoint call (`runtime_seconds`, timed by the caller) in parts that do not overlap, each
// at least 0 and together at most runtime_seconds (a part is cut where CRIU's clock and the caller's disagree):
//   criu-freezing             CRIU collecting and freezing the processes
//   criu-cpu-pages            CRIU dumping and writing the CPU pages
//   criu-frozen-other         the rest of the frozen time: CRIU's other images and the plugins' work
//   runtime-other             the runtime around CRIU: its setup and writing the checkpoint archive
// With the plugin's own timings, its steps are carved out of the CRIU part that holds them:
//   gpuckpt-gpu-lock          out of criu-freezing
//   gpuckpt-gpu-checkpoint, gpuckpt-gpu-memory-images, gpuckpt-cpu-pages-store   out of criu-frozen-other
std::map<std::string, double> checkpoint_runtime_phases(const CriuDumpStats& stats, double runtime_seconds,
                                                        const std::optional<PluginDumpTimings>& plugin = {});

// gpuckpt's CRIU plugin's own steps of a restore. The runtime removes CRIU's image directory after a restore (podman
// unless --keep), so the plugin leaves them in the node store, named by the restored container's init as the host
// sees it (gpumem/memory_lineage.h spool_restore_timings), where the agent that ran the restore takes them, and
// says them in CRIU's log ("timing: restore steps of pid N: {...}").

struct PluginRestoreTimings {
  double cpu_pages_seconds = 0;      // rebuilding CRIU's page images from the store (the plugin's init, before
                                     // CRIU's restore clock starts)
  double gpu_memory_seconds = 0;     // putting GPU memory back into the processes' staging memory (inside CRIU's
                                     // restore)
  double gpu_restore_seconds = 0;    // the driver copying it onto the GPUs and unlocking (inside CRIU's restore)
};

std::string serialize_plugin_restore_timings(const PluginRestoreTimings& timings);
// As parse_plugin_dump_timings, for the restore's keys.
Result<PluginRestoreTimings> parse_plugin_restore_timings(std::string_view text, std::string_view source);
// Each step by the name its file gives it ("cpu-pages", "gpu-memory", "gpu-restore"), in seconds.
std::map<std::string, double> restore_steps(const PluginRestoreTimings& timings);

// What podman's `container restore --print-stats` prints (one JSON document, times in microseconds): the restored
// container and the nested times of its restore.
struct PodmanRestoreStats {
  std::string container_id;
  double podman_seconds = 0;         // podman_restore_duration: the whole command
  double runtime_seconds = 0;        // runtime_restore_duration: the OCI runtime's restore (runc -> CRIU)
  double criu_restore_seconds = 0;   // criu_statistics.restore_time: CRIU restoring the processes
};
// At most `max_bytes` of text; an error (naming podman) when it is not that document with exactly one container.
Result<PodmanRestoreStats> parse_podman_restore_stats(std::string_view text, std::size_t max_bytes = 1 << 16);

// The restore call (`call_seconds`, timed by the caller) in parts that do not overlap, each at least 0, together at
// most call_seconds (cut where podman's clocks and the caller's disagree):
//   criu-restore   CRIU restoring the processes (the plugins' work in it: gpuckpt's GPU memory and driver restore)
//   runtime-other  the OCI runtime around CRIU
//   podman-other   podman around the runtime: reading and unpacking the archive, setting the container up
// With the plugin's own timings, its steps are carved out of the part that holds them:
//   gpuckpt-cpu-pages                                   out of runtime-other (the plugin's init)
//   gpuckpt-gpu-memory, gpuckpt-gpu-restore             out of criu-restore
std::map<std::string, double> restore_runtime_phases(const PodmanRestoreStats& stats, double call_seconds,
                                                     const std::optional<PluginRestoreTimings>& plugin = {});
// A runtime that reports no restore times (containerd's task restore): the plugin's steps out of the whole call,
// the rest of it runtime-other.
std::map<std::string, double> restore_runtime_phases(double call_seconds, const PluginRestoreTimings& plugin);

}  // namespace gpuckpt
