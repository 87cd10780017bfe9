// CPU memory out of the runtime's archive (docs/formats.md "CPU pages in the chunk store"). A checkpoint of a GPU
// container holds a gigabyte or more of CPU pages (an inference server's heap, its Python objects, pinned staging
// buffers) in CRIU's page images, pages-<id>.img; the runtime tars them with one thread at every checkpoint and
// untars them at every restore, unchanged pages included. Where the node keeps GPU memory in a chunk store, the
// plugin moves the page images there too, at the end of the dump (CRIU has written and closed every image, the
// runtime has read none yet): cut along 2 MiB windows of virtual memory (page_chunks.h), hashed and written by a
// pool of threads, deduplicated against every chunk the store has, referenced, then a manifest
// (gpuckpt-pages-<id>.manifest.json, gpu_manifest.h) beside the image and the image emptied. At the start of a
// restore, before CRIU reads any page, each image is rebuilt from its manifest, every chunk checked.
//
// It happens only in a dump whose image inventory lists gpuckpt (a GPU checkpoint: the restore then runs the plugin,
// which brings the pages back) and into a store (GPUCKPT_GPU_STORE not inline); GPUCKPT_CPU_PAGES_STORE=0 keeps
// the page images in the archive. Write first, empty last: a page image is emptied only after its chunks, its
// reference and its manifest are durable, so a failure anywhere leaves it whole in the archive, as before.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpumem/gpu_image.h"
#include "base/result.h"

namespace gpuckpt::cpu_pages {

struct Report {
  std::size_t images = 0;           // page images moved (dump) or rebuilt (restore)
  std::uint64_t bytes = 0;          // their bytes
  std::uint64_t chunks = 0;
  std::uint64_t new_chunks = 0;     // dump: chunks the store did not have
  std::uint64_t new_bytes = 0;      // dump: payload bytes written for them
  unsigned threads = 0;
  double seconds = 0;
  std::vector<std::string> left;    // dump: page images left in the archive, each with why
};

// Dump: every page image a pagemap in `dir_fd` names, into the store at settings.store (non-empty). `checkpoint`:
// the dump's id (its GPU manifests'), shared by the references. A page image whose pagemap does not account for its
// size exactly, or whose pages lie partly in a parent image directory (a pre-dump chain), stays as it is (listed
// in Report::left). An error leaves every page image whose manifest was not written as it is.
Result<Report> move_into_store(int dir_fd, const gpu_image::Settings& settings, const std::string& checkpoint);

// Restore: every pages manifest in `dir_fd` read and its chunks checked in the store a restore reads
// (gpu_image::restore_store_dir) before any page image is written; then each page image rebuilt in parallel, every
// chunk verified (SHA-256, or XXH3-64 from the node-local store), written beside it and renamed over it. The error
// names the manifest, the chunk and what to do; a page image is never left half-written under its name.
Result<Report> bring_back(int dir_fd, const gpu_image::Settings& settings);

// Whether `dir_fd` holds any pages manifest.
bool has_pages_manifests(int dir_fd);

// The checkpoint id of a GPU memory manifest in `dir_fd` (the dump's), else a new one.
std::string checkpoint_id_of_dump(int dir_fd);

}  // namespace gpuckpt::cpu_pages
