// What a node remembers of each live process's last GPU memory image, so that the process's next checkpoint knows
// which chunks it did not change (docs/formats.md "Unchanged chunks"). A dump into a chunk store hashes every chunk
// with SHA-256 to name it; for a second checkpoint of a process whose weights did not change that hashing is most of
// the plugin's time. So after a dump into a store, and after a restore from one, the node keeps the process's
// manifest, keyed by the process (boot, pid, start time: a pid reused later is another process). Its next dump
// computes each chunk's XXH3-64 (which the manifest needs anyway) and, where that and the size match a chunk of the
// kept manifest, names the chunk by that manifest's digest without hashing it (gpu_manifest.h KnownChunks).
//
// Why XXH3-64 may decide this: the kept manifest is the same process's own, so a chunk recognised wrongly (an
// accidental 64-bit collision, or memory crafted to collide) puts back this process's own earlier memory, never
// another container's. Only manifests whose XXH3-64 values were computed from, or checked against, the bytes they
// name are kept: those a dump wrote, and those a restore checked chunk by chunk by XXH3-64. GPUCKPT_STORE_RECOGNISE_
// UNCHANGED=0 turns it off (every chunk hashed with SHA-256).
//
//   <node store>/processes/<boot id, 32 hex>-<pid>-<start time in clock ticks>.json     a manifest (gpu_manifest.h)
//
// Inside the node-local store (root-only). The records are a cache: lost or damaged, the next dump hashes every
// chunk. Each write removes the records of processes that are gone; at most kMaxProcessRecords are kept.
//
// Beside them, what the plugin's steps of a restore took (criu_stats.h PluginRestoreTimings), for the agent that
// ran the restore: the runtime removes CRIU's image directory after a restore, so the plugin leaves them here, named
// by the restored container's init as the host sees it (the pid the runtime reports), and the agent takes them:
//
//   <node store>/restore-timings/<pid>.json
//
// Each spooling removes the files of pids that are gone (a restore no agent ran: CRI's); at most
// kMaxSpooledRestores are kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpumem/gpu_manifest.h"
#include "base/host_root.h"
#include "base/result.h"

namespace gpuckpt::memory_lineage {

inline constexpr const char* kRecordsDir = "processes";
inline constexpr std::size_t kMaxProcessRecords = 4096;

// One process across its life on this node: a pid and its start time are unique within one boot.
struct ProcessIdentity {
  std::string boot_id;            // /proc/sys/kernel/random/boot_id without dashes: 32 lowercase hex
  int pid = 0;                    // as this process (CRIU) sees it
  std::uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22
  std::string record_name() const;
  bool operator==(const ProcessIdentity&) const = default;
};

// Read through `host` (proc/sys/kernel/random/boot_id, proc/<pid>/stat; tests give another root).
Result<ProcessIdentity> identify_process(int pid, const HostRoot& host = HostRoot());

// Keeps `manifest` as the process's last image in the node store at `node_store` ("" is chunk_store::kNodeStoreDir;
// created when missing), replacing what was kept for it, and removes the records of processes that are gone.
// Refused when the store is not root's alone (gpu_manifest.h ingest_verified_store).
Result<void> remember(const std::string& node_store, const ProcessIdentity& process, const gpu_image::Manifest& manifest,
                      const HostRoot& host = HostRoot());

// The process's kept manifest; an error with errno ENOENT when none is kept, another when it cannot be used.
Result<gpu_image::Manifest> recall(const std::string& node_store, const ProcessIdentity& process);

inline constexpr const char* kRestoreTimingsDir = "restore-timings";
inline constexpr std::size_t kMaxSpooledRestores = 4096;
inline constexpr std::size_t kMaxRestoreTimingsBytes = 4096;

// Leaves `text` (at most kMaxRestoreTimingsBytes) for the restore whose init the host knows as `pid`, replacing
// what an earlier restore of that pid left. Refused when the node store does not exist (it is not made for this),
// is not root's alone, or holds
// kMaxSpooledRestores files of live pids.
Result<void> spool_restore_timings(const std::string& node_store, int pid, const std::string& text,
                                   const HostRoot& host = HostRoot());

// What a restore of `pid` left, removed as it is read; none when nothing was left (no spool, no file, or the
// node store missing). An error for a file that is not a regular file of at most kMaxRestoreTimingsBytes (it is
// removed all the same).
Result<std::optional<std::string>> take_restore_timings(const std::string& node_store, int pid);

// What restores no agent job took (kubelet's, through CRI) left more than `min_age_seconds` ago: each file read and
// removed, its text returned (an unreadable one is removed and skipped). At most kMaxSpooledRestores a call; none
// when the spool or the node store does not exist.
std::vector<std::string> take_stale_restore_timings(const std::string& node_store, long min_age_seconds);

}  // namespace gpuckpt::memory_lineage
