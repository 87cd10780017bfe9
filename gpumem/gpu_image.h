// The GPU memory image: what gpuckpt writes for a process's GPU memory (the host copy the driver staged) instead
// of leaving it to CRIU's single-threaded page dump. Per process one main file, named by the process's pid in its
// own pid namespace (the pid it has again after restore), and data shards beside it. Layout (docs/formats.md, all
// integers little-endian):
//
//   main file:  file header (64 bytes) | chunk records | index | footer (48 bytes)
//   shard k>0:  chunk records                                   (<main file name>.<k>)
//
// Memory is cut into fixed-size chunks. Each stored chunk is a record: a 48-byte header (its place, sizes,
// encoding, checksum of the raw bytes) and its payload, raw or zstd-compressed. All-zero chunks are not stored
// (the index says "zero"). The index lists every chunk of every region once; the footer points at the index and
// is written last, after which the file is fsync'ed and renamed to its final name: a file with its final name is
// complete. Records are appended by many threads at once (each reserves its place in its shard with an atomic
// offset); writes to one file are serialised by the kernel (the inode lock), so each thread of the pool writes to
// a shard of its own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumem/plugin_settings.h"
#include "base/result.h"

namespace gpuckpt::gpu_image {

inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint32_t kDefaultChunkSize = 2u << 20;   // one THP page
inline constexpr std::uint32_t kMaxChunkSize = 64u << 20;
inline constexpr std::size_t kFileHeaderSize = 64;
inline constexpr std::size_t kRecordHeaderSize = 48;
inline constexpr std::size_t kIndexEntrySize = 40;
inline constexpr std::size_t kRegionEntrySize = 16;
inline constexpr std::size_t kFooterSize = 48;
inline constexpr const char* kFilePrefix = "gpuckpt-gpumem-";
inline constexpr const char* kFileSuffix = ".img";

enum class Encoding : std::uint8_t { Raw = 0, Zstd = 1, Zero = 2 };
const char* to_string(Encoding e);

// One address range of the process, copied as it is.
struct Region {
  std::uint64_t start = 0;
  std::uint64_t length = 0;
};

// Regions are cut into chunks of the image's chunk size; the last one of a region may be shorter.
std::uint64_t chunks_in(const Region& r, std::uint32_t chunk_size);
std::uint32_t raw_size_of(const Region& r, std::uint64_t chunk, std::uint32_t chunk_size);
inline constexpr std::uint32_t kMaxRegions = 4096;
inline constexpr std::uint64_t kMaxRegionLength = 1ull << 47;   // x86-64 user space: nothing maps beyond 128 TiB

struct ChunkEntry {
  std::uint32_t region = 0;
  std::uint64_t chunk = 0;          // index within the region
  Encoding encoding = Encoding::Raw;
  std::uint16_t shard = 0;          // the data file holding the record (0: the main file)
  std::uint32_t raw_size = 0;
  std::uint32_t stored_size = 0;    // payload bytes in the file (0 for Zero)
  std::uint64_t offset = 0;         // of the record header in the file (0 for Zero)
  std::uint64_t checksum = 0;       // XXH3-64 of the raw bytes (0 for Zero)
};

struct ImageHeader {
  std::uint32_t version = kVersion;
  std::uint32_t chunk_size = kDefaultChunkSize;
  std::int32_t vpid = 0;        // the pid in its own namespace (the file's name)
  std::int32_t dump_pid = 0;    // the pid CRIU saw at dump (host namespace), for the log
  std::uint32_t shards = 1;     // data files: the main file and shards 1 .. shards-1
};
inline constexpr std::uint32_t kMaxShards = 256;

// --- settings --------------------------------------------------------------------------------------------------
enum class CompressionMode { Off, Zstd, Auto };
struct Compression {
  CompressionMode mode = CompressionMode::Auto;
  int level = 1;   // zstd level; negative levels are zstd's --fast
};

struct Settings {
  unsigned threads = 0;          // 0: chosen from the CPU count (default_threads)
  Compression compression;
  bool sparse = true;            // all-zero chunks are not stored
  // GPUCKPT_GPU_STORE: where GPU memory goes. Empty: inline, an image file in CRIU's image directory (the archive
  // is self-contained). Else the chunk store's directory (chunk_store.h): chunks there, a manifest in the image
  // directory, so the runtime's archive holds CPU state only.
  std::string store;
  // The node-local store, whose reads may check chunks by XXH3-64 and be mapped (gpu_manifest.h
  // ingest_verified_store): "" is chunk_store::kNodeStoreDir; tests name another (GPUCKPT_TEST_NODE_STORE).
  std::string node_store;
};

unsigned default_threads(unsigned cpus);
Result<Compression> parse_compression(std::string_view text, std::string_view name);   // off | auto | zstd[:N]
std::string to_string(const Compression& c);
// inline -> ""; node -> the node-local store (chunk_store::kNodeStoreDir); an absolute path (a shared volume's
// mount, the same on every node) -> that path. Anything else is an error naming `name`.
Result<std::string> parse_store(std::string_view text, std::string_view name);
// Reads GPUCKPT_IMAGE_THREADS, GPUCKPT_IMAGE_COMPRESSION, GPUCKPT_IMAGE_SPARSE, GPUCKPT_GPU_STORE from the
// environment, else the node's settings file (gpumem/plugin_settings.h); a bad value is an error naming it.
Result<Settings> settings_from_env(const PluginSettings& node = plugin_settings());
void log_settings(const Settings& s);   // once each as param: NAME:VALUE

// --- the decisions of one chunk (pure) -----------------------------------------------------------------------------
// What a worker remembers between chunks, so `auto` stops paying for compression on incompressible memory.
struct CompressionHistory {
  unsigned misses_in_a_row = 0;   // chunks in a row where compression did not pay
  std::uint64_t since_last_try = 0;
};
inline constexpr unsigned kAutoMissesBeforeBackoff = 4;
inline constexpr unsigned kAutoRetryEvery = 16;
inline constexpr unsigned kPaysWhenSavedEighths = 1;   // compressed must save at least 1/8 of the chunk

bool should_try_compression(const Compression& c, const CompressionHistory& h);
bool compression_pays(std::size_t raw_size, std::size_t compressed_size);
void remember_compression(CompressionHistory& h, bool tried, bool paid);
bool all_zero(std::span<const std::byte> data);

// --- one chunk -----------------------------------------------------------------------------------------------------
// Per-thread scratch for encoding and decoding (zstd contexts, the compression buffer).
class ChunkCodec {
 public:
  explicit ChunkCodec(std::uint32_t chunk_size);
  ~ChunkCodec();
  ChunkCodec(const ChunkCodec&) = delete;
  ChunkCodec& operator=(const ChunkCodec&) = delete;

  // Encodes `raw` as one record (header + payload); fills `entry` (without offset). Zero chunks (when sparse)
  // produce no record. A raw payload is `raw` itself (no copy): keep it alive until the record is written.
  void encode(std::span<const std::byte> raw, const Settings& settings, CompressionHistory& history,
              ChunkEntry& entry);
  std::size_t record_size() const { return record_size_; }
  // Writes the record at `offset` of `fd` (header and payload in one call).
  Result<void> write_record(int fd, std::uint64_t offset, const std::string& file) const;

  // The payload of the last encode() (the compressed bytes, or `raw` itself), for writers with their own framing.
  std::span<const std::byte> payload() const;

  // Checks `record` (header + payload, as read from the file) against `entry` and decodes it into `out`
  // (entry.raw_size bytes). The error says what is wrong; the caller adds the file and chunk.
  Result<void> decode(std::span<const std::byte> record, const ChunkEntry& entry, std::span<std::byte> out);
  // Decodes a bare payload of `encoding` (Raw or Zstd) into `out` (exactly out.size() bytes); no checksum.
  Result<void> decode_payload(std::span<const std::byte> payload, Encoding encoding, std::span<std::byte> out);

 private:
  struct Contexts;
  std::unique_ptr<Contexts> contexts_;
  std::uint32_t chunk_size_;
  std::vector<std::byte> compressed_;   // allocated on the first compression
  std::size_t record_size_ = 0;
};

std::uint64_t checksum(std::span<const std::byte> data);
// checksum() of bytes that come in pieces: the same value as checksum() of the pieces together.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void reset();
  void update(std::span<const std::byte> piece);
  std::uint64_t value() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};
std::string file_name(int vpid);   // gpuckpt-gpumem-<vpid>.img
std::string shard_name(const std::string& main_name, std::uint32_t shard);   // <main>.<k>; the main file for 0
// The vpid in a file name made by file_name(), or -1.
int vpid_from_file_name(std::string_view name);
std::string describe_chunk(const ChunkEntry& e, std::uint64_t region_start, std::uint32_t chunk_size);

// --- a file being written ---------------------------------------------------------------------------------------
// Created under a temporary name in `dir_fd`; records are appended from any thread; finish() writes the index
// and footer, fsyncs and renames it. Destroying an unfinished writer removes the temporary file.
class ImageWriter {
 public:
  static Result<std::unique_ptr<ImageWriter>> create(int dir_fd, const ImageHeader& header,
                                                     std::vector<Region> regions);
  ~ImageWriter();

  std::uint64_t chunk_count(std::uint32_t region) const;
  // Appends the codec's record (if any) for chunk `entry.chunk` of `entry.region` into shard
  // `worker % shards` and records the entry. Threads that pass different `worker`s never share a file.
  Result<void> append(const ChunkCodec& codec, ChunkEntry entry, unsigned worker = 0);
  // Index + footer, fsync of every file, shards renamed, the main file renamed last. Call once, after every chunk
  // was appended.
  Result<void> finish();

  const std::string& name() const { return name_; }
  const std::vector<Region>& regions() const { return regions_; }
  const ImageHeader& header() const { return header_; }

 private:
  struct Shard {
    int fd = -1;
    std::string name, temp_name;
    std::atomic<std::uint64_t> next_offset{0};
    std::atomic<std::uint64_t> unflushed{0};   // bytes appended since writeback was last started
  };
  ImageWriter() = default;
  int dir_fd_ = -1;
  std::string name_;
  std::vector<std::unique_ptr<Shard>> shards_;   // [0] is the main file
  ImageHeader header_;
  std::vector<Region> regions_;
  std::vector<std::size_t> first_entry_;   // per region: index of its chunk 0 in entries_
  std::vector<ChunkEntry> entries_;
  std::vector<std::uint8_t> present_;      // per entry: appended
  static constexpr std::uint64_t kWritebackEvery = 256u << 20;
  bool finished_ = false;
};

// --- what a process's memory is read back from ------------------------------------------------------------------
// An image file (ImageReader: inline, in CRIU's image directory) or a manifest over a chunk store
// (gpu_manifest.h: StoreReader). entries() lists every chunk of every region in order; entry.shard names the data
// stream a chunk belongs to (a file read front to back by one thread), entry.offset orders chunks within it.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  virtual const ImageHeader& header() const = 0;
  virtual const std::vector<Region>& regions() const = 0;
  virtual const std::vector<ChunkEntry>& entries() const = 0;
  virtual const std::string& name() const = 0;
  // Reads, checks and decodes entry `i` into `out` (entries()[i].raw_size bytes). Zero chunks are zero-filled.
  // Errors name the file and the chunk. Thread-safe.
  virtual Result<void> read_chunk(std::size_t i, ChunkCodec& codec, std::vector<std::byte>& record_buffer,
                                  std::span<std::byte> out) const = 0;
  // Starts reading entries first..last (one stream, in its order) into the page cache (asynchronous; a hint).
  virtual void prefetch(std::size_t first, std::size_t last) const = 0;
  // How read_chunk checks what it read, for the log: "XXH3-64" or "SHA-256".
  virtual const char* chunk_check() const = 0;
};

// --- a file being read ----------------------------------------------------------------------------------------------
// Opens and validates header, footer and index (every chunk of every region listed exactly once, every record
// inside the file); read_chunk() is thread-safe.
class ImageReader final : public MemorySource {
 public:
  static Result<std::unique_ptr<ImageReader>> open(int dir_fd, const std::string& name);
  ~ImageReader() override;

  const ImageHeader& header() const override { return header_; }
  const std::vector<Region>& regions() const override { return regions_; }
  const std::vector<ChunkEntry>& entries() const override { return entries_; }
  const std::string& name() const override { return name_; }
  std::uint64_t file_size() const { return file_size_; }   // of all its files

  Result<void> read_chunk(std::size_t i, ChunkCodec& codec, std::vector<std::byte>& record_buffer,
                          std::span<std::byte> out) const override;
  void prefetch(std::size_t first, std::size_t last) const override;
  const char* chunk_check() const override { return "XXH3-64"; }

 private:
  ImageReader() = default;
  std::vector<int> fds_;   // [0] the main file, then the shards
  std::string name_;
  std::uint64_t file_size_ = 0;
  ImageHeader header_;
  std::vector<Region> regions_;
  std::vector<ChunkEntry> entries_;
};

// What `gpuckpt inspect` prints for one file; with `verify`, every chunk is read and checked.
struct ImageSummary {
  ImageHeader header;
  std::vector<Region> regions;
  std::uint64_t chunks = 0, zero_chunks = 0, raw_chunks = 0, zstd_chunks = 0;
  std::uint64_t memory_bytes = 0, stored_bytes = 0, file_bytes = 0;
};
Result<ImageSummary> summarize(int dir_fd, const std::string& name, bool verify);
std::string format_summary(const std::string& name, const ImageSummary& s);
// True when `path` is a regular file that starts with the image magic; nothing else is opened (a FIFO is not).
bool looks_like_image(const std::string& path);

}  // namespace gpuckpt::gpu_image
