// Moving staged GPU memory between processes and GPU memory images (gpumem/gpu_image.h), with one pool of
// threads shared by every process of the tree. Reads and writes other processes' memory with
// process_vm_readv/process_vm_writev, so it works from any process with ptrace rights over them (CRIU, the
// driver host). Every thread is joined before a function returns: nothing keeps running inside CRIU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpumem/gpu_image.h"
#include "gpumem/gpu_manifest.h"
#include "base/result.h"

namespace gpuckpt::cuda {

struct ProcessMemory {
  int pid = 0;    // as this process sees it (host pid)
  int vpid = 0;   // in its own pid namespace: names the image file
  std::vector<gpu_image::Region> regions;
  // Dump into a chunk store: the chunks of the process's previous manifest, recognised by XXH3-64 instead of hashed
  // (gpu_manifest.h KnownChunks); none: every chunk hashed.
  std::shared_ptr<const gpu_image::KnownChunks> known;
};

struct CopyStats {
  std::uint64_t memory_bytes = 0;   // of the regions
  std::uint64_t stored_bytes = 0;   // payload bytes in the file (dump) or read from it (fill)
  std::uint64_t zero_chunks = 0;
  std::uint64_t chunks = 0;
  std::uint64_t reused_chunks = 0;   // dump into a chunk store: chunks it held already (nothing written)
  std::uint64_t recognised_chunks = 0;   // of those, named by ProcessMemory::known without SHA-256
  std::uint64_t mapped_chunks = 0;   // fill: chunks mapped from the store before it (ProcessMemory::in_place)
  std::uint64_t written_bytes = 0;   // dump: bytes written (image files, or new chunk files in the store)
  double seconds = 0;               // wall time of the whole batch
  double reading_seconds = 0;       // dump: the whole batch's reading of process memory, summed over its threads
  double storing_seconds = 0;       // dump: the rest (hashing, compressing, writing), summed over its threads
  gpu_image::StoreWriter::Times store_times;   // dump into a chunk store: this process's part of that, by step
  double checksum_seconds = 0;      // dump: the batch's XXH3-64 of chunks read in pieces, summed over its threads
  double finishing_seconds = 0;     // dump: the batch's wall time from the last chunk to every file durable
  std::shared_ptr<const gpu_image::Manifest> manifest;   // the manifest a dump into a store wrote, a fill read
  const char* chunk_check = "";     // fill: how each chunk read was checked (MemorySource::chunk_check)
};

// process_vm_readv (write false) or process_vm_writev (write true) of one contiguous range of `pid`'s memory, whole
// (short transfers and EINTR continued) or an error naming pid and address.
Result<void> copy_remote(bool write, int pid, std::uint64_t remote, std::byte* local, std::size_t size);

// Writes one image per process into `dir_fd` and makes every file durable (fsync of each file and of the
// directory) before returning. With a chunk store (settings.store), the chunks go into the store (only those it
// does not hold yet) and a manifest per process into `dir_fd`. One result per process, in order.
std::vector<Result<CopyStats>> write_memory_images(const std::vector<ProcessMemory>& processes, int dir_fd,
                                                   const gpu_image::Settings& settings);

// Puts each process's memory back from its image (file by its vpid), or from the chunk store its manifest names
// chunks in (the store: settings.store, else the node-local one). When `memory_is_zero_or_intact` (memory
// freshly mapped by the restore, or dropped/untouched since the dump), zero chunks are not copied, only their
// pages touched (allocated by the pool rather than later by the driver's single thread).
// Every region must lie in a writable private mapping of the process. `in_place`, when not empty, says per process
// and chunk of its image which chunks are in its memory already (mapped from the store: chunk_mapping.h), which are
// left as they are. One result per process, in order; a process without an image gets an error with errno ENOENT.
std::vector<Result<CopyStats>> fill_from_images(const std::vector<ProcessMemory>& processes, int dir_fd,
                                                const gpu_image::Settings& settings,
                                                bool memory_is_zero_or_intact = true,
                                                const std::vector<std::vector<bool>>& in_place = {});

// Which processes the image directory holds images or manifests for (the vpids), sorted, each once.
std::vector<int> image_vpids(int dir_fd);

// The regions of a process's image or manifest, for the restore side.
Result<std::vector<gpu_image::Region>> image_regions(int dir_fd, int vpid, const gpu_image::Settings& settings);

std::string describe(const CopyStats& s);

}  // namespace gpuckpt::cuda
