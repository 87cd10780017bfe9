// gpuckpt's own data path for GPU memory (docs/cuda.md "GPU memory images"). After the driver's checkpoint the
// GPU memory of each process lies in a new private anonymous VMA; instead of leaving it to CRIU's
// single-threaded page dump, gpuckpt writes it with a pool of threads into its own image files, makes them
// durable, and only then drops the pages inside the task, so CRIU records an empty VMA. Restore fills the VMAs
// back before the driver's restore. Write first, drop last: a failed write leaves the process its memory and
// the pages to CRIU. Where a step is not possible, CRIU keeps the pages, as before, and the log says why.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpumem/gpu_image.h"
#include "criu-plugin/cuda/memory_copy.h"
#include "criu-plugin/cuda/staging_memory.h"

namespace gpuckpt::cuda {

// Stand-ins for what only a GPU node has, for tests that run real CRIU with a plugin on a machine without one
// (test/criu-plugin/stand_in/stand_in_plugin.cpp builds such a plugin); the node's plugin never sets them.
struct MemoryPathStandIns {
  // A process mapping private anonymous memory at this address is handled as a CUDA process whose driver
  // checkpoint is done: that mapping is its staging memory, and no driver call is made for it.
  std::optional<std::uint64_t> staging_vma;
  // The directory treated as the node-local chunk store (chunk_store::kNodeStoreDir on a node).
  std::optional<std::string> node_store;
};

class GpuMemoryPath {
 public:
  // Reads GPUCKPT_CUDA_MEMORY_IMAGE, GPUCKPT_IMAGE_{THREADS,COMPRESSION,SPARSE}, GPUCKPT_GPU_STORE,
  // GPUCKPT_STAGING_{HUGE_PAGES,MAP_CHUNKS} and GPUCKPT_STORE_RECOGNISE_UNCHANGED; logs each once. A bad value is
  // logged and its default used: a typo must not break every dump on the node.
  void configure(int dir_fd, const MemoryPathStandIns& stand_ins = {});

  // Whether a stand-in for a checkpointed CUDA process is set, and whether `pid` is one (MemoryPathStandIns).
  bool stand_in_on() const { return stand_in_vma_.has_value(); }
  bool is_stand_in(int pid) const;

  // --- dump ---
  void before_checkpoint(int pid);   // the maps before the driver's checkpoint
  // After the driver checkpointed `pids`: writes their staging memory (one pool for all), makes it durable,
  // calls `on_durable(pid, vpid)` (the guardian learns where the memory is) and drops the pages in each task.
  void stage(const std::vector<int>& pids, const std::function<void(int pid, int vpid)>& on_durable);
  bool staged(int pid) const { return staged_.count(pid) != 0; }
  bool any_staged() const { return !staged_.empty(); }
  // The node-local store ("" is chunk_store::kNodeStoreDir) this plugin reads and keeps records in.
  const std::string& node_store() const { return settings_.node_store; }
  // The dump failed or runs with --leave-running: puts back the memory of every staged process. Returns the
  // pids whose memory could not be put back (the caller must not let them run on as if nothing happened).
  std::set<int> refill(const std::string& why);

  // --- restore ---
  bool has_images() const { return !image_vpids_.empty(); }
  // Every manifest's chunks are in the store (existence and size): checked at the plugin's init, before CRIU
  // touches any process, so a missing chunk fails the restore while the checkpoint and the node are untouched.
  Result<void> check_store() const;
  // Fills every process among `candidates` that has an image, before the driver's restore. Per pid: 0 or -errno.
  std::map<int, int> fill(const std::vector<int>& candidates);
  // After the driver's restore of `pid`: the chunks the fill mapped into it made anonymous memory again
  // (chunk_mapping.h release_store_chunks). Only logs: the process runs on either way.
  void release_mapped(int pid);

 private:
  static constexpr std::uint64_t kHugePageBytes = 2u << 20;
  // Before a fill: MADV_HUGEPAGE on each process's staging regions, inside the task (GPUCKPT_STAGING_HUGE_PAGES).
  void ask_for_huge_pages(const std::vector<ProcessMemory>& jobs) const;
  // Before a fill from the node store: maps each process's raw chunks (GPUCKPT_STAGING_MAP_CHUNKS). Per process
  // and chunk, whether it is in place; where mapping fails, nothing is, and the fill copies every chunk.
  std::vector<std::vector<bool>> map_chunks(const std::vector<ProcessMemory>& jobs) const;
  // GPUCKPT_STORE_RECOGNISE_UNCHANGED: the chunks of the process's last manifest the node kept
  // (gpumem/memory_lineage.h), or none.
  std::shared_ptr<const gpu_image::KnownChunks> known_chunks(int pid) const;
  // Keeps `manifest` as the process's last one, for its next dump.
  void remember(int pid, const gpu_image::Manifest& manifest) const;

  int dir_fd_ = -1;
  bool enabled_ = true;
  bool huge_pages_ = true;
  bool map_chunks_ = false;
  bool recognise_unchanged_ = true;
  gpu_image::Settings settings_;
  std::optional<std::uint64_t> stand_in_vma_;
  std::map<int, std::vector<Vma>> maps_before_;
  std::map<int, int> staged_;   // pid -> vpid, for the memory that was written (and dropped)
  std::vector<int> image_vpids_;
  std::set<int> mapped_pids_;   // processes the fill mapped chunks into
};

}  // namespace gpuckpt::cuda
