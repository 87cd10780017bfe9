// Store-backed GPU memory images (docs/formats.md "GPU memory manifest"): the chunks of a process's GPU memory go
// into a content-addressed chunk store (chunk_store.h) and only a manifest stays in CRIU's image directory, so the
// runtime's archive (podman export, kubelet's CRI archive) carries the rest only. Per process one manifest,
// gpuckpt-gpumem-<vpid>.manifest.json:
//
//   {"format": "gpuckpt-gpu-memory-manifest", "version": 1, "checkpoint": "<32 hex>", "hash": "sha256",
//    "store": "/var/lib/gpuckpt/chunks", "vpid": 7, "dump_pid": 4242, "chunk_size": 2097152,
//    "regions": [[start, length], ...],
//    "chunks": [["zstd", raw_size, stored_size, "<sha256 hex>"], ["zero", raw_size], ["raw", ...], ...],
//    "xxh3_64": ["<16 hex>", "", "<16 hex>", ...]}
//
// "chunks" lists every chunk of every region in order (the position gives region and chunk). A chunk's digest is
// the SHA-256 of its raw bytes: its name in the store. "xxh3_64" is optional, since the format only grows: writers
// before it lack it and readers before it ignore it. It is parallel to "chunks": the XXH3-64 of each stored chunk's
// raw bytes as the dump read them from the process, "" for zero chunks. How a read checks a chunk (ChunkCheck):
// SHA-256 against its digest, or, from the node-local store only, XXH3-64 against this list (see
// ingest_verified_store). On restore the manifest comes from an archive, so it is untrusted: parse_manifest checks
// every field and bound (digests exactly 64 lowercase hex digits before they form a path, sizes matching the
// regions, counts bounded).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_image.h"
#include "base/result.h"

namespace gpuckpt::gpu_image {

inline constexpr const char* kManifestFormat = "gpuckpt-gpu-memory-manifest";
inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestSuffix = ".manifest.json";
inline constexpr std::uint64_t kMaxManifestChunks = 1u << 20;      // 2 TiB of memory in 2 MiB chunks
inline constexpr std::size_t kMaxManifestBytes = 128u << 20;
inline constexpr std::uint32_t kStoreStreams = 64;                 // restore work units (entry.shard)
inline constexpr const char* kPagesManifestPrefix = "gpuckpt-pages-";

// What a manifest's chunks hold: a process's GPU memory, or one of CRIU's page images (CPU memory).
enum class MemoryKind { Gpu, CpuPages };

struct Manifest {
  std::string checkpoint;                     // one id per dump, shared by its processes: 32 lowercase hex
  std::string store;                          // the store the dump wrote to (a restore reads its own setting)
  ImageHeader header;                         // vpid, dump_pid, chunk_size
  std::vector<Region> regions;
  std::vector<ChunkEntry> entries;            // every chunk in order; encoding, raw and stored sizes
  std::vector<chunk_store::Digest> digests;   // parallel to entries (all zero bytes for zero chunks)
  bool checksums = false;                     // entries[i].checksum holds each stored chunk's XXH3-64 ("xxh3_64")
  MemoryKind kind = MemoryKind::Gpu;          // CpuPages: header.vpid holds the pages id, regions are file ranges
};

std::string manifest_name(int vpid);                   // gpuckpt-gpumem-<vpid>.manifest.json
int vpid_from_manifest_name(std::string_view name);   // or -1
std::string pages_manifest_name(int pages_id);        // gpuckpt-pages-<id>.manifest.json
int pages_id_from_manifest_name(std::string_view name);   // or -1
// The one name the manifest may have in an image directory (by its kind and vpid or pages id), and whether `name`
// is any manifest's.
std::string manifest_name(const Manifest& m);
bool is_manifest_name(std::string_view name);
// The manifest's reference in the store (chunk_store::ref_name or pages_ref_name).
std::string reference_name(const Manifest& m);
std::string new_checkpoint_id();                       // 128 random bits, hex

std::string serialize_manifest(const Manifest& m);
// Every field checked; the error names `source` and the field.
Result<Manifest> parse_manifest(std::string_view text, std::string_view source);
// Atomic: a temporary file, fsync'ed, renamed, then the directory fsync'ed.
Result<void> write_manifest(int dir_fd, const Manifest& m);
// `text` as the file `name` in `dir_fd`, whole or not at all: written as .<name>.partial (a leftover of a writer that
// died is replaced) and renamed; with `durable`, the file and then the directory fsync'ed too. `where` names the
// directory in errors.
Result<void> write_file_atomically(int dir_fd, const std::string& name, const std::string& text, bool durable,
                                   const std::string& where);
Result<Manifest> read_manifest(int dir_fd, const std::string& name);

// Existence and size of every chunk the manifest names (no data is read): what the restore checks before CRIU
// touches any process. The error names the checkpoint, the first bad chunk (digest and the path where it was
// expected), how many are missing, and what to do.
Result<void> check_chunks(const Manifest& m, const chunk_store::Store& store, const std::string& manifest);

// --- writing ---------------------------------------------------------------------------------------------------------
// The stored chunks of a process's previous manifest (its last checkpoint or restore on this node, kept by
// memory_lineage.h), looked up by the XXH3-64 and size of their raw bytes: a dump that finds a chunk's XXH3-64 here
// names it by the digest found instead of hashing it with SHA-256 (~1/10 the CPU). Only a manifest whose XXH3-64
// values were computed from, or checked against, the bytes they name may feed it. An XXH3-64 that two different
// digests share in that manifest is left out.
class KnownChunks {
 public:
  struct Chunk {
    chunk_store::Digest digest;
    std::uint32_t raw_size = 0;
  };
  explicit KnownChunks(const Manifest& previous);
  const Chunk* find(std::uint64_t xxh3_64, std::uint32_t raw_size) const;
  std::size_t size() const { return by_checksum_.size(); }
  const std::string& checkpoint() const { return checkpoint_; }

 private:
  std::unordered_map<std::uint64_t, Chunk> by_checksum_;
  std::string checkpoint_;
};

struct StoredChunk {
  bool zero = false;     // all zero: nothing stored
  bool reused = false;   // the store had it: nothing written
  bool recognised = false;   // reused, named by KnownChunks: not hashed with SHA-256
  std::uint64_t stored_bytes = 0;    // payload bytes of its chunk file
  std::uint64_t written_bytes = 0;   // bytes this dump wrote for it (0 when reused)
};

// One process's chunks into the store; its manifest when finished. add() is thread-safe for different chunks.
class StoreWriter {
 public:
  // `known`, when given: chunks of the process's previous manifest, recognised by XXH3-64 (KnownChunks).
  static Result<std::unique_ptr<StoreWriter>> create(std::shared_ptr<chunk_store::Store> store,
                                                     const ImageHeader& header, std::vector<Region> regions,
                                                     std::string checkpoint,
                                                     std::shared_ptr<const KnownChunks> known = nullptr,
                                                     MemoryKind kind = MemoryKind::Gpu);
  std::uint64_t chunk_count(std::uint32_t region) const;
  // Chunk `chunk` of region `region` (its raw bytes), hashed with SHA-256: zero, already in the store, or compressed
  // and put there. A writer given KnownChunks offers each chunk to add_unchanged() first.
  Result<StoredChunk> add(std::uint32_t region, std::uint64_t chunk, std::span<const std::byte> raw, ChunkCodec& codec,
                          const Settings& settings, CompressionHistory& history);
  // Chunk `chunk` of region `region`, by the XXH3-64 and size of its raw bytes alone: stored as a chunk of the
  // process's previous manifest when KnownChunks recognises it and the store still holds it; nullopt when not (then
  // add() it), and always without KnownChunks. Lets a dump read a chunk in small pieces, checksumming each while it
  // is in the CPU's cache, and read it whole only when it changed.
  Result<std::optional<StoredChunk>> add_unchanged(std::uint32_t region, std::uint64_t chunk, std::uint64_t xxh3_64,
                                                   std::uint32_t raw_size);
  bool knows_chunks() const { return known_ != nullptr; }
  // Every chunk added: the store's new names made durable, then the manifest written into `dir_fd`.
  Result<void> finish(int dir_fd);
  const std::string& name() const { return name_; }
  const Manifest& manifest() const { return manifest_; }   // complete once finish() succeeded
  // Where add()'s and add_unchanged()'s time went, summed over the threads that called them, in seconds (for the
  // dump's timing line).
  struct Times {
    double digest = 0;     // SHA-256
    double lookup = 0;     // is it in the store already (stat, touch)
    double encode = 0;     // compression
    double put = 0;        // writing new chunk files (write, fsync, rename)
  };
  Times times() const;

 private:
  StoreWriter() = default;
  // Entry i as the stored chunk `digest` when the store holds it (touched for the collector); false when not.
  bool reuse_stored(std::size_t i, const chunk_store::Digest& digest, std::uint64_t xxh3_64, StoredChunk& out);
  std::shared_ptr<chunk_store::Store> store_;
  std::shared_ptr<const KnownChunks> known_;
  Manifest manifest_;
  std::string name_;
  std::vector<std::size_t> first_entry_;
  std::vector<std::uint8_t> present_;
  struct TimeSums {
    std::atomic<std::uint64_t> digest{0}, lookup{0}, encode{0}, put{0};   // nanoseconds
  };
  std::unique_ptr<TimeSums> times_ = std::make_unique<TimeSums>();
};

// --- reading ---------------------------------------------------------------------------------------------------------
// How a read checks that a chunk file holds the bytes the manifest names.
enum class ChunkCheck {
  Digest,     // SHA-256 of the decoded bytes against the chunk's digest (name): for any store, any file
  Checksum,   // XXH3-64 against the manifest's "xxh3_64": for a store whose chunks had their SHA-256 checked when
              // they entered it (ingest_verified_store); catches a file damaged or swapped since, at ~1/10 the cost
};

// Whether `store` is the node-local one (chunk_store::kNodeStoreDir) and only root can write it (its directories
// owned by root, not writable by group or others). Every chunk in it had its SHA-256 checked on the way in: a dump
// names a chunk by the hash of the memory it read, and a transfer, an import or a registry pull verifies a chunk
// before storing it (chunk_receive.h). A shared store (an RWX volume) is written by every node that mounts it, and
// by whoever else can reach the volume: its reads keep checking SHA-256, as containerd trusts its own content
// store once a blob's digest was verified on ingest and checks whatever comes from elsewhere.
// `node_store` is kNodeStoreDir but for tests.
bool ingest_verified_store(const chunk_store::Store& store,
                           const std::filesystem::path& node_store = chunk_store::kNodeStoreDir);

// A chunk file's bytes (header + payload: the store's file, or one an exported archive carries) checked against
// the manifest's entry and digest: a sound header of the entry's raw size (raw or zstd: how a store holds a chunk is
// its own, and need not be how the dump's store held it), a payload that decodes to raw_size bytes (into `out`)
// whose SHA-256 is `digest`. The error says what is wrong (errno EBADMSG: the content does not
// hash to the digest); the caller names the file and the chunk.
Result<void> decode_chunk_file(std::span<const std::byte> file, const ChunkEntry& e, const chunk_store::Digest& digest,
                               ChunkCodec& codec, std::span<std::byte> out);
// The same header and size checks, then the decoded bytes' XXH3-64 against e.checksum (errno EBADMSG on a mismatch).
Result<void> decode_chunk_file_checksum(std::span<const std::byte> file, const ChunkEntry& e, ChunkCodec& codec,
                                        std::span<std::byte> out);

class StoreReader final : public MemorySource {
 public:
  // ChunkCheck::Checksum needs a manifest with checksums; without them the reader checks digests.
  StoreReader(Manifest manifest, std::shared_ptr<const chunk_store::Store> store, std::string name,
              ChunkCheck check = ChunkCheck::Digest);
  const ImageHeader& header() const override { return manifest_.header; }
  const std::vector<Region>& regions() const override { return manifest_.regions; }
  const std::vector<ChunkEntry>& entries() const override { return manifest_.entries; }
  const std::string& name() const override { return name_; }
  const Manifest& manifest() const { return manifest_; }
  const chunk_store::Store& store() const { return *store_; }
  ChunkCheck check() const { return check_; }
  // Reads the chunk file, checks its header against the manifest, decodes it and checks it (check()).
  Result<void> read_chunk(std::size_t i, ChunkCodec& codec, std::vector<std::byte>& record_buffer,
                          std::span<std::byte> out) const override;
  // Each chunk is a file of its own, read whole by one call: nothing to gain from a hint.
  void prefetch(std::size_t, std::size_t) const override {}
  const char* chunk_check() const override { return check_ == ChunkCheck::Checksum ? "XXH3-64" : "SHA-256"; }

 private:
  Manifest manifest_;
  std::shared_ptr<const chunk_store::Store> store_;
  std::string name_;
  ChunkCheck check_;
};

// The store a restore reads from: the configured one, else the node-local store.
std::string restore_store_dir(const Settings& settings);
// A process's memory in `dir_fd`: its manifest (over the store at `store_dir`) when there is one, else its image
// file. An error with errno ENOENT when there is neither. A manifest's chunks are checked by XXH3-64 when the store
// is ingest_verified_store and the manifest has checksums, else by SHA-256.
// `node_store`: as Settings::node_store ("" is chunk_store::kNodeStoreDir).
Result<std::unique_ptr<MemorySource>> open_memory_source(int dir_fd, int vpid, const std::string& store_dir,
                                                         const std::string& node_store = "");

// What `gpuckpt inspect` prints for a manifest; with a store, every chunk is checked there (read and hashed).
struct ManifestSummary {
  Manifest manifest;
  std::uint64_t zero_chunks = 0, raw_chunks = 0, zstd_chunks = 0;
  std::uint64_t memory_bytes = 0, stored_bytes = 0;
};
ManifestSummary summarize_manifest(Manifest m);
std::string format_manifest_summary(const std::string& name, const ManifestSummary& s);

}  // namespace gpuckpt::gpu_image
