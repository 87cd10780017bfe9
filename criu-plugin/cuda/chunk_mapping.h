// Restore without copying GPU memory (docs/cuda.md "Mapped restore"): the raw chunks of a process's manifest are
// mapped from the node store's files straight into its staging memory, MAP_PRIVATE, so the driver's restore reads
// the page cache's pages and N restores of one checkpoint share them. Copy-on-write keeps the store's files as
// they are whatever the process does; the driver unmaps the staging memory after its restore.
//
// How a file gets into another process's address space: the restored task is stopped by CRIU (the plugin's
// caller is its tracer), so the plugin runs syscalls inside it (criu::TaskSyscalls). The task makes a datagram
// socket bound to an abstract name in its network namespace; the plugin sends it the chunk files' descriptors
// (SCM_RIGHTS) from a socket it made in that namespace, and the task receives them, maps each over its chunk's
// address (MAP_FIXED) and closes them. A scratch area for the socket's address and message headers lies in the
// staging memory itself: in the last chunk to be mapped, which covers it afterwards.
//
// Only from the node store with the manifest's checksums (ChunkCheck::Checksum): each chunk's bytes are checked by
// XXH3-64 through the very descriptor the task maps, before it is sent. A shared store's files can change under a
// mapping (another node, NFS), so they are copied and checked as before. Anything that fails leaves the rest to
// the copying fill, which puts every chunk not mapped (or all of them: copying over a mapped chunk writes the same
// bytes into a private copy) in place.
#pragma once

#include <cstdint>
#include <vector>

#include "criu-plugin/criu_host.h"
#include "criu-plugin/cuda/staging_memory.h"
#include "gpumem/gpu_manifest.h"
#include "base/result.h"

namespace gpuckpt::cuda {

struct MappedChunks {
  std::vector<bool> in_place;   // per manifest entry: mapped into the process
  std::uint64_t chunks = 0;
  std::uint64_t bytes = 0;
  std::uint64_t unmappable = 0;   // raw in the manifest, not mappable in the store (zstd there, or an old layout)
  double check_seconds = 0;       // waiting for chunks to be opened and checked (a pool checks ahead)
  double task_seconds = 0;        // sending, receiving, mapping and closing them inside the task
};

// Maps every mappable chunk of `reader` into task `pid` (stopped by CRIU; call from CRIU's main thread), checking
// each with `threads` threads. An error means the copying fill must put back every chunk: some may be mapped.
// An error with errno ENOSPC: too many mappings for the process's vm.max_map_count; nothing was mapped.
Result<MappedChunks> map_store_chunks(int pid, const gpu_image::StoreReader& reader, unsigned threads);

// The address ranges of `maps` that map a chunk file of the store at `store_dir` (under its sha256/ directory),
// VMAs back to back merged into one range (pure).
std::vector<criu::MemoryRange> store_chunk_mappings(const std::vector<Vma>& maps, const std::string& store_dir);

// After the driver's restore has copied the staging memory onto the GPUs, the mapped chunks are dead weight that
// harms: the process would keep the store's files mapped, and its next dump fails in CRIU, which cannot record a
// file outside the container's mounts (seen with driver 580, which leaves its staging memory mapped after a
// restore). So every range of task `pid` (stopped by CRIU; from CRIU's main thread) that maps a chunk file of
// `store_dir` is made private anonymous memory again (mmap MAP_FIXED over it), as after a copying fill, its bytes
// gone. Only what still maps a chunk file is touched, whatever the driver did with the rest. Returns the bytes.
Result<std::uint64_t> release_store_chunks(int pid, const std::string& store_dir);

}  // namespace gpuckpt::cuda
