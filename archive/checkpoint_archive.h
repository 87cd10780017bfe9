// Container checkpoint archives as podman and CRI-O write them (`podman container checkpoint --export`,
// kubelet's ContainerCheckpoint API): a tar, usually zstd-compressed, holding config.dump, spec.dump,
// checkpoint/ (CRIU images), rootfs-diff.tar and friends. gpuckpt adds, without disturbing those readers:
//   - the entry gpuckpt-gpus.json (the GPU properties record plus the container's GPU device paths), and
//   - annotations in spec.dump (io.gpuckpt.*), which podman carries into the restored container's spec.
// Every archive is validated before anything else uses it: entry names stay inside the archive (no absolute
// paths, no ".."), links never point outside, only files/dirs/links, and sizes are bounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "state/checkpoint_record.h"
#include "base/result.h"

struct archive;   // libarchive's handle (archive.h)

namespace gpuckpt {

// Where `gpuckpt export` puts the chunks a store-backed checkpoint's manifests name (docs/formats.md "Exported
// checkpoints"): <kCarriedChunksDir>/sha256/<2 hex>/<64 hex>, each the chunk store's file as it is.
inline constexpr const char* kCarriedChunksDir = "gpuckpt-chunks";

// libarchive's last message for `a`, or "unknown libarchive error": libarchive may have none, and its NULL must
// never reach a std::string (found by fuzz/archive_fuzz).
std::string archive_message(struct archive* a);

// A libarchive writer of a tar stream (archive_write_new) that never pads. libarchive's close fills an unfinished
// entry with zeros up to its declared size (a 1.2 KB input declaring a 4 GiB entry cost 13 s of gzip when a
// rewrite stopped early). close() finishes a complete archive; a writer destroyed without close() is abandoned:
// marked failed first, so that closing it skips the unfinished entry yet still ends the filters and the output
// (freeing it alone would leak zlib's state and the output buffer: found by fuzz/archive_walk_fuzz).
class ArchiveWriter {
 public:
  ArchiveWriter();
  ~ArchiveWriter();
  ArchiveWriter(const ArchiveWriter&) = delete;
  ArchiveWriter& operator=(const ArchiveWriter&) = delete;
  struct archive* get() const { return archive_; }
  int close();   // archive_write_close, once

 private:
  struct archive* archive_;
  bool closed_ = false;
};

struct ArchiveLimits {
  std::uint64_t max_archive_bytes = 64ULL << 30;   // the archive file itself
  std::uint64_t max_entry_bytes = 64ULL << 30;     // one entry, uncompressed
  std::uint64_t max_total_bytes = 128ULL << 30;    // all entries, uncompressed
  std::size_t max_entries = 1 << 20;
  std::size_t max_metadata_bytes = 16 << 20;       // config.dump, spec.dump, gpuckpt-gpus.json read into memory
  // An archive inside the archive that gpuckpt unpacks (CRIU's /dev tmpfs image): its content, uncompressed.
  // Bytes bound the time too: a 4 MiB image of 4 GiB of zeros stops after this many bytes, not 53 s of CPU.
  std::uint64_t max_nested_bytes = 64ULL << 20;
  // The time budget of whoever reads the archive (an API request's deadline, one kubelet-watcher file): a walk
  // past it stops with ETIMEDOUT. Sizes bound the work an archive declares; this bounds what it costs to find
  // out (decompressing a small zstd stream that expands a thousandfold, a sparse entry's holes).
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

// ETIMEDOUT naming `what` once limits.deadline has passed.
Result<void> check_archive_deadline(const ArchiveLimits& limits, const std::string& what);

struct ArchiveEntry {
  enum class Kind { File, Directory, Symlink, Hardlink };
  std::string name;          // normalised: no leading "./"
  Kind kind = Kind::File;
  std::uint64_t size = 0;
  std::string link_target;   // symlinks and hardlinks
};

// Refuses names a safe extractor must not write: absolute, "..", empty, NUL, over 4096 bytes.
Result<std::string> normalise_entry_name(std::string_view name);

// Reads the whole archive once, validating every entry (see above). A truncated or corrupt archive is an error.
Result<std::vector<ArchiveEntry>> list_archive(const std::filesystem::path& archive, const ArchiveLimits& limits);

// The content of one regular entry (at most limits.max_metadata_bytes); std::nullopt when absent.
Result<std::optional<std::string>> read_archive_entry(const std::filesystem::path& archive, std::string_view name,
                                                      const ArchiveLimits& limits);

// Changes to an archive, applied while it is copied entry by entry (one pass, whatever the edit):
//   replace    entries that must be there, given new content;
//   transform  entries that must be there, their new content made from the old (read up to max_metadata_bytes);
//   add        entries written at the end; an entry of the same name in the input is left out.
//   take       entries it accepts (returns true) are left out of the output; it may read their data (at most
//              their declared size, through the reader it is given) while it decides.
//   peek       entries whose content (a regular file of at most max_metadata_bytes) is handed to the function as
//              they pass and written unchanged; absent ones are no error, nor is an oversized one (not handed on).
//   append     called after every other entry is written: streams entries too large to hold together in memory
//              (one at a time, through the appender it is given).
//   before_commit  called once the output is complete, before it takes its final name: an error leaves no output.
// Reads the current entry's data: up to `size` bytes into `buffer`, 0 at its end.
using EntryDataReader = std::function<Result<std::size_t>(char* buffer, std::size_t size)>;
// Writes one regular file entry (mode 0600) holding `data`.
using EntryAppender = std::function<Result<void>(const std::string& name, std::span<const std::byte> data)>;
struct ArchiveEdit {
  std::map<std::string, std::string> replace;
  std::map<std::string, std::function<Result<std::string>(const std::string&)>> transform;
  std::map<std::string, std::string> add;
  std::function<Result<bool>(const ArchiveEntry&, const EntryDataReader&)> take;
  std::map<std::string, std::function<void(const std::string&)>> peek;
  std::function<Result<void>(const EntryAppender&)> append;
  std::function<Result<void>()> before_commit;
};

// Copies `in` to `out` with `edit` applied, in the input's compression. Writes `out` under a temporary name and
// renames it only when complete and synced, so a reader never sees a partial archive under the final name.
// Returns the bytes written. in == out is allowed.
Result<std::uint64_t> rewrite_archive(const std::filesystem::path& in, const std::filesystem::path& out,
                                      const ArchiveEdit& edit, const ArchiveLimits& limits);

// An archive's bytes as they come (a pipe the runtime writes into): up to `size` bytes into `buffer`, 0 at the end.
using ArchiveByteSource = std::function<Result<std::size_t>(char* buffer, std::size_t size)>;
// Where an archive's bytes go (a pipe the runtime reads): all of `size` bytes, or an error.
using ArchiveByteSink = std::function<Result<void>(const char* data, std::size_t size)>;

// rewrite_archive for an archive that arrives as a stream (named `source` in messages), in any compression or
// none: validated as it arrives (at most max_archive_bytes of it), written to `out` zstd-compressed.
Result<std::uint64_t> receive_archive(const ArchiveByteSource& read, std::string_view source,
                                      const std::filesystem::path& out, const ArchiveEdit& edit,
                                      const ArchiveLimits& limits);

// Streams `in` with `edit` applied into `write`, uncompressed (its reader does not decompress it again).
Result<void> send_archive(const std::filesystem::path& in, const ArchiveByteSink& write, const ArchiveEdit& edit,
                          const ArchiveLimits& limits);

// What a checkpoint archive holds, from its metadata (for inspect, restore and the API).
struct CheckpointInfo {
  std::string container_name;
  std::string container_id;
  std::string image;            // rootfsImageName
  std::string image_id;         // rootfsImageID
  std::string raw_image;        // the image as the user named it (podman RawImageName, CRI-O rootfsImageRef)
  std::string runtime;          // "runc", "crun"
  std::string engine;           // "podman", "cri-o", "containerd" or "unknown"
  std::string created;
  std::uint64_t archive_bytes = 0;
  std::uint64_t content_bytes = 0;
  std::size_t entry_count = 0;
  bool has_criu_images = false;            // checkpoint/inventory.img present
  std::vector<std::string> spec_devices;   // linux.devices paths in spec.dump
  nlohmann::json spec;                     // spec.dump
  std::optional<CheckpointGpuRecord> gpus; // gpuckpt-gpus.json, when gpuckpt annotated the archive
  // CRIU's images of the container's /dev tmpfs (checkpoint/tmpfs-dev-*.tar.gz.img) by entry name: a restore
  // plan renumbers the device nodes in them (restore_edits), so inspect keeps them (max_metadata_bytes in all).
  std::map<std::string, std::string> dev_tmpfs_images;
  // gpuckpt's GPU memory in CRIU's images: inline image files (their count and bytes in the archive), or the
  // manifests of a store-backed checkpoint (gpu_manifest.h) by file name, their content (max_metadata_bytes in all).
  std::size_t gpu_image_files = 0;
  std::uint64_t gpu_image_bytes = 0;
  std::map<std::string, std::string> memory_manifests;
  // Chunks a `gpuckpt export` carries for them (kCarriedChunksDir): how many, and their bytes.
  std::size_t carried_chunks = 0;
  std::uint64_t carried_chunk_bytes = 0;
};

Result<CheckpointInfo> inspect_checkpoint_archive(const std::filesystem::path& archive, const ArchiveLimits& limits);

// The edit that adds gpuckpt-gpus.json and the io.gpuckpt.* annotations to spec.dump.
ArchiveEdit checkpoint_annotation(const CheckpointGpuRecord& record);

// rewrite_archive with checkpoint_annotation(record).
Result<std::uint64_t> annotate_checkpoint_archive(const std::filesystem::path& in, const std::filesystem::path& out,
                                                  const CheckpointGpuRecord& record, const ArchiveLimits& limits);

}  // namespace gpuckpt
