// Where the driver stages a CUDA process's GPU memory, and whether gpuckpt can move it itself.
// After cuCheckpointProcessCheckpoint the GPU memory lies in host memory of the process: one private anonymous
// read-write VMA that was not there before (measured: 8 GiB of GPU memory -> one 8719 MiB VMA). gpuckpt finds
// it by comparing /proc/PID/maps before and after the checkpoint. Everything here is pure or reads /proc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumem/gpu_image.h"
#include "gpumem/plugin_settings.h"
#include "base/result.h"

namespace gpuckpt::cuda {

struct Vma {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::string perms;   // "rw-p"
  std::uint64_t inode = 0;
  std::string path;    // "" for anonymous memory, "[heap]", a file, ...
  std::uint64_t size() const { return end - start; }
};

std::vector<Vma> parse_maps(std::string_view text);
Result<std::vector<Vma>> read_maps(int pid, const std::string& proc = "/proc");
bool is_private_anonymous_rw(const Vma& v);

// Staging memory smaller than this is left to CRIU: not worth a file.
inline constexpr std::uint64_t kMinStagingBytes = 16u << 20;

// The private anonymous rw VMAs of `after` that `before` did not have with the same range (a VMA the driver grew
// or that merged with a neighbour counts whole), of at least `min_bytes`. Content-agnostic: whatever is copied
// is put back bit for bit before the process runs again, so taking a little more than the driver's memory is
// harmless.
std::vector<gpu_image::Region> find_staging_regions(const std::vector<Vma>& before, const std::vector<Vma>& after,
                                                    std::uint64_t min_bytes = kMinStagingBytes);
// The staging memory of a stand-in for a checkpointed CUDA process (MemoryPathStandIns, gpu_memory_path.h): the
// private anonymous rw VMA starting at `start`.
std::vector<gpu_image::Region> find_named_region(const std::vector<Vma>& maps, std::uint64_t start);

// Every region lies inside private rw VMAs of `maps`, one or several back to back, sorted by address as
// /proc/PID/maps lists them (checked before writing or mapping a restored process's memory).
Result<void> regions_are_mapped(const std::vector<gpu_image::Region>& regions, const std::vector<Vma>& maps);

// Whether gpuckpt writes a process's staging memory itself, or leaves it to CRIU's page dump, and why.
struct PathFacts {
  bool enabled = true;              // GPUCKPT_CUDA_MEMORY_IMAGE
  bool image_dir_is_stream = false; // criu --stream: images go to the image streamer, not to files
  bool image_dir_known = true;      // CRIU told us its image directory
  bool can_drop_in_task = true;     // CRIU exports compel's syscall injection
  std::size_t staging_regions = 0;  // what find_staging_regions found
};
struct PathDecision {
  bool own = false;
  std::string why;   // for the log: why CRIU keeps the pages, or what gpuckpt does
};
PathDecision decide_memory_path(const PathFacts& facts);

// The pid of `pid` in its own (innermost) pid namespace, from NSpid in /proc/PID/status; `pid` when unknown.
// A restored process has the same one, while its host pid differs.
int namespace_pid(int pid, const std::string& proc = "/proc");

// "0x7f00..." for logs and errors.
std::string hex_address(std::uint64_t a);

// The image streamer's socket in the image directory (criu --stream).
bool image_dir_is_stream(int dir_fd);

// A switch of the plugin's, 1 or 0, on when unset (the environment, else the node's settings file); errors name
// the variable. The switches:
//   GPUCKPT_CUDA_MEMORY_IMAGE   gpuckpt moves the staging memory itself (else CRIU dumps it with the pages)
//   GPUCKPT_STAGING_HUGE_PAGES  before a restore fills a process's staging memory, ask for transparent huge pages
//                               on it (madvise inside the task), so the fill and the driver's restore touch 2 MiB pages
//   GPUCKPT_STAGING_MAP_CHUNKS  a restore from the node store maps its raw chunks into the staging memory instead
//                               of copying them (chunk_mapping.h). Off when unset: on driver 580 chunk files stay
//                               mapped in the restored process after the driver's restore, and CRIU then cannot
//                               dump that container again (the files lie outside its mounts)
//   GPUCKPT_STORE_RECOGNISE_UNCHANGED  a dump into a chunk store names a chunk unchanged since the process's previous
//                               checkpoint or restore by that manifest's digest, recognised by XXH3-64 instead of
//                               hashed with SHA-256 (gpumem/memory_lineage.h)
Result<bool> switch_from_env(const char* name, const PluginSettings& node = plugin_settings());
// The same for a switch that is off (or on) when unset.
Result<bool> switch_from_env_or(const char* name, bool when_unset, const PluginSettings& node = plugin_settings());

}  // namespace gpuckpt::cuda
