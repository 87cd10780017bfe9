// Moving a store-backed checkpoint by hand (docs/formats.md "Exported checkpoints"): `gpuckpt export` turns its
// archive (podman's export, kubelet's CRI archive, the agent's), whose manifests name chunks in a node's chunk store,
// into a self-contained archive that carries those chunks; `gpuckpt import` puts them into another node's store and
// leaves the store-backed archive that node's runtime restores.
//
// An exported archive is the input archive with every entry as it was (the manifests untouched, so the checkpoint
// keeps its id) and, after them, each distinct chunk its manifests name, once, as the chunk store's file itself
// (header + payload, already compressed): <kCarriedChunksDir>/sha256/<2 hex>/<64 hex>. Outside CRIU's image
// directory (checkpoint/), so neither CRIU nor a runtime reads them as images.
//
// The imported archive is untrusted: every carried chunk must be a regular file under its digest's name, named by
// one of the archive's manifests, of the size that manifest says, carried once, and must decode to bytes whose
// SHA-256 is its name before it enters the store. Memory holds one chunk at a time; the caller's limits bound the
// archive's size, entries and time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "archive/checkpoint_archive.h"
#include "gpumem/chunk_store.h"
#include "base/result.h"

namespace gpuckpt::checkpoint_export {

struct ExportReport {
  std::set<std::string> checkpoints;   // the ids of the manifests' checkpoints
  std::size_t manifests = 0;
  std::size_t chunks = 0;              // distinct chunks carried
  std::uint64_t chunk_bytes = 0;       // their files' bytes
  std::size_t left_out = 0;            // distinct chunks the manifests name that `carry` left out
  std::uint64_t archive_bytes = 0;     // the exported archive
};

// `archive` with every chunk its manifests name (read from `store`, each checked against its digest) added, written
// to `out` in the input's compression. Before anything is written every chunk must be in the store: otherwise the
// error names the checkpoint, the chunk and the path where it was expected. `out` appears only when complete
// (written beside it, renamed into place). An archive without manifests, or one carrying chunks already, is refused.
// With `carry`, only those of the manifests' chunks are carried (a transfer to a node that has the others: the
// importing store must hold them already); every digest in it must be one the manifests name, and every chunk is
// still checked to be in `store` first, so a partial export is never written from an incomplete store.
Result<ExportReport> export_checkpoint(const std::filesystem::path& archive,
                                       std::shared_ptr<const chunk_store::Store> store,
                                       const std::filesystem::path& out, const ArchiveLimits& limits,
                                       const std::set<chunk_store::Digest>* carry = nullptr);

struct ImportReport {
  std::set<std::string> checkpoints;
  std::size_t manifests = 0;
  std::size_t carried_chunks = 0;      // chunks the archive carried (each checked)
  std::size_t added_chunks = 0;        // written into the store
  std::uint64_t added_bytes = 0;
  std::size_t present_chunks = 0;      // the store had them already: skipped
  std::size_t references = 0;          // written into the store's refs/
  std::uint64_t archive_bytes = 0;     // the store-backed archive
};

// The chunks `archive` carries into `store` (each checked before it lands; one the store has already is skipped and
// counted), then, once every chunk of every manifest is in the store, a reference per manifest (refs/, so garbage
// collection keeps them), then `out` (may be `archive` itself): the archive without the carried chunks. A refused
// chunk names the archive and the chunk. When it fails after some chunks landed, those are unreferenced and
// garbage collection removes them after its grace period.
Result<ImportReport> import_checkpoint(const std::filesystem::path& archive, std::shared_ptr<chunk_store::Store> store,
                                       const std::filesystem::path& out, const ArchiveLimits& limits);

// A store-backed archive that carries no chunks (its node's store must hold them all): every chunk of every manifest
// checked in `store` (a missing one names the checkpoint, the chunk and its path), touched, and a reference per
// manifest written, as import does; the archive is left as it is. What a node does with such an archive it received
// from another (node/chunk_transfer.h), so its garbage collection keeps the chunks.
Result<ImportReport> reference_checkpoint(const std::filesystem::path& archive, std::shared_ptr<chunk_store::Store> store,
                                          const ArchiveLimits& limits);

}  // namespace gpuckpt::checkpoint_export
