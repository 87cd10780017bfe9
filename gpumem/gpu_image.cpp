#include "gpumem/gpu_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zstd.h>

#define XXH_INLINE_ALL   // header-only: no libxxhash at run time (the plugin loads into CRIU on any distribution)
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/byte_io.h"
#include "base/errno_text.h"
#include "gpumem/chunk_store.h"
#include "base/log.h"

namespace gpuckpt::gpu_image {
namespace {

constexpr char kFileMagic[8] = {'G', 'P', 'U', 'C', 'K', 'M', 'E', 'M'};
constexpr char kFooterMagic[8] = {'G', 'P', 'U', 'C', 'K', 'E', 'N', 'D'};
constexpr char kRecordMagic[4] = {'G', 'C', 'H', 'K'};

using byte_io::get_le;
using byte_io::put_le;
using byte_io::read_all;

Result<void> write_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset, const std::string& name) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      return make_error("writing " + name + ": " + errno_text(err), err);
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

void encode_entry(std::byte* p, const ChunkEntry& e) {
  put_le<std::uint32_t>(p, 0, e.region);
  put_le<std::uint8_t>(p, 4, static_cast<std::uint8_t>(e.encoding));
  put_le<std::uint16_t>(p, 6, e.shard);
  put_le<std::uint64_t>(p, 8, e.chunk);
  put_le<std::uint32_t>(p, 16, e.raw_size);
  put_le<std::uint32_t>(p, 20, e.stored_size);
  put_le<std::uint64_t>(p, 24, e.offset);
  put_le<std::uint64_t>(p, 32, e.checksum);
}

ChunkEntry decode_entry(const std::byte* p) {
  ChunkEntry e;
  e.region = get_le<std::uint32_t>(p, 0);
  e.encoding = static_cast<Encoding>(get_le<std::uint8_t>(p, 4));
  e.shard = get_le<std::uint16_t>(p, 6);
  e.chunk = get_le<std::uint64_t>(p, 8);
  e.raw_size = get_le<std::uint32_t>(p, 16);
  e.stored_size = get_le<std::uint32_t>(p, 20);
  e.offset = get_le<std::uint64_t>(p, 24);
  e.checksum = get_le<std::uint64_t>(p, 32);
  return e;
}

Result<long> parse_long(std::string_view text, std::string_view name, long low, long high) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high)
    return make_error(std::string(name) + "='" + std::string(text) + "' is not a number from " + std::to_string(low) +
                      " to " + std::to_string(high));
  return value;
}

}  // namespace

std::uint64_t chunks_in(const Region& r, std::uint32_t chunk_size) {
  return (r.length + chunk_size - 1) / chunk_size;
}

std::uint32_t raw_size_of(const Region& r, std::uint64_t chunk, std::uint32_t chunk_size) {
  const std::uint64_t at = chunk * chunk_size;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(chunk_size, r.length - at));
}

const char* to_string(Encoding e) {
  switch (e) {
    case Encoding::Raw: return "raw";
    case Encoding::Zstd: return "zstd";
    case Encoding::Zero: return "zero";
  }
  return "?";
}

// --- settings --------------------------------------------------------------------------------------------------------
unsigned default_threads(unsigned cpus) { return std::clamp(cpus, 1u, 16u); }

Result<Compression> parse_compression(std::string_view text, std::string_view name) {
  if (text == "off" || text == "0" || text == "none") return Compression{CompressionMode::Off, 0};
  if (text == "auto") return Compression{CompressionMode::Auto, 1};
  if (text == "zstd") return Compression{CompressionMode::Zstd, 1};
  if (text.starts_with("zstd:")) {
    auto level = parse_long(text.substr(5), name, -7, 19);
    if (!level) return make_error(level.error().message + " (zstd:LEVEL, -7..19; small levels are fast)");
    return Compression{CompressionMode::Zstd, static_cast<int>(*level)};
  }
  return make_error(std::string(name) + "='" + std::string(text) + "' is not off, auto, zstd or zstd:LEVEL");
}

std::string to_string(const Compression& c) {
  switch (c.mode) {
    case CompressionMode::Off: return "off";
    case CompressionMode::Auto: return "auto";
    case CompressionMode::Zstd: return "zstd:" + std::to_string(c.level);
  }
  return "?";
}

Result<std::string> parse_store(std::string_view text, std::string_view name) {
  if (text == "inline") return std::string();
  if (text == "node") return std::string(chunk_store::kNodeStoreDir);
  const std::filesystem::path path(text);
  if (text.empty() || !path.is_absolute() || path.lexically_normal() != path || text.size() > 4096)
    return make_error(std::string(name) + "='" + std::string(text.substr(0, 64)) + "' is not inline, node or an "
                      "absolute directory path without . or .. parts (a shared volume mounted on every node)");
  std::string normal = path.string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

Result<Settings> settings_from_env(const PluginSettings& node) {
  Settings s;
  auto value = [&node](const char* name) { return node.get(name); };
  if (auto v = value("GPUCKPT_IMAGE_THREADS"); !v.empty()) {
    GPUCKPT_TRY(const long n, parse_long(v, "GPUCKPT_IMAGE_THREADS", 0, 256));
    s.threads = static_cast<unsigned>(n);
  }
  if (s.threads == 0) s.threads = default_threads(std::max(1u, static_cast<unsigned>(::sysconf(_SC_NPROCESSORS_ONLN))));
  if (auto v = value("GPUCKPT_IMAGE_COMPRESSION"); !v.empty()) {
    GPUCKPT_TRY(s.compression, parse_compression(v, "GPUCKPT_IMAGE_COMPRESSION"));
  }
  if (auto v = value("GPUCKPT_IMAGE_SPARSE"); !v.empty()) {
    GPUCKPT_TRY(const long on, parse_long(v, "GPUCKPT_IMAGE_SPARSE", 0, 1));
    s.sparse = on == 1;
  }
  if (auto v = value("GPUCKPT_GPU_STORE"); !v.empty()) {
    GPUCKPT_TRY(s.store, parse_store(v, "GPUCKPT_GPU_STORE"));
  }
  return s;
}

void log_settings(const Settings& s) {
  log::param("GPUCKPT_IMAGE_THREADS", std::to_string(s.threads));
  log::param("GPUCKPT_IMAGE_COMPRESSION", to_string(s.compression));
  log::param("GPUCKPT_IMAGE_SPARSE", s.sparse ? "1" : "0");
  log::param("GPUCKPT_GPU_STORE", s.store.empty() ? "inline" : s.store);
}

// --- decisions ------------------------------------------------------------------------------------------------------
bool should_try_compression(const Compression& c, const CompressionHistory& h) {
  switch (c.mode) {
    case CompressionMode::Off: return false;
    case CompressionMode::Zstd: return true;
    case CompressionMode::Auto:
      // After a run of chunks that did not shrink, try only now and then: memory changes character rarely.
      return h.misses_in_a_row < kAutoMissesBeforeBackoff || h.since_last_try + 1 >= kAutoRetryEvery;
  }
  return false;
}

bool compression_pays(std::size_t raw_size, std::size_t compressed_size) {
  return compressed_size + raw_size * kPaysWhenSavedEighths / 8 <= raw_size;
}

void remember_compression(CompressionHistory& h, bool tried, bool paid) {
  if (!tried) {
    ++h.since_last_try;
    return;
  }
  h.since_last_try = 0;
  h.misses_in_a_row = paid ? 0 : h.misses_in_a_row + 1;
}

bool all_zero(std::span<const std::byte> data) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  // Word at a time; memory is page-aligned in practice, but do not rely on it.
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) % sizeof(std::uint64_t)) != 0) {
    if (*p != std::byte{0}) return false;
    ++p;
    --n;
  }
  std::uint64_t acc = 0;
  while (n >= 64) {
    std::uint64_t w[8];
    std::memcpy(w, p, sizeof w);
    acc |= w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7];
    if (acc != 0) return false;
    p += 64;
    n -= 64;
  }
  while (n > 0) {
    if (*p != std::byte{0}) return false;
    ++p;
    --n;
  }
  return true;
}

std::uint64_t checksum(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

struct ChecksumStream::State {
  XXH3_state_t xxh3;
};
ChecksumStream::ChecksumStream() : state_(std::make_unique<State>()) { reset(); }
ChecksumStream::~ChecksumStream() = default;
void ChecksumStream::reset() { XXH3_64bits_reset(&state_->xxh3); }
void ChecksumStream::update(std::span<const std::byte> piece) {
  XXH3_64bits_update(&state_->xxh3, piece.data(), piece.size());
}
std::uint64_t ChecksumStream::value() const { return XXH3_64bits_digest(&state_->xxh3); }

std::string file_name(int vpid) { return kFilePrefix + std::to_string(vpid) + kFileSuffix; }

std::string shard_name(const std::string& main_name, std::uint32_t shard) {
  return shard == 0 ? main_name : main_name + "." + std::to_string(shard);
}

int vpid_from_file_name(std::string_view name) {
  const std::string_view prefix(kFilePrefix), suffix(kFileSuffix);
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return -1;
  auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  int vpid = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), vpid);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || vpid <= 0) return -1;
  return vpid;
}

std::string describe_chunk(const ChunkEntry& e, std::uint64_t region_start, std::uint32_t chunk_size) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "chunk %llu of region %u (address 0x%llx, %u bytes)",
                static_cast<unsigned long long>(e.chunk), e.region,
                static_cast<unsigned long long>(region_start + e.chunk * chunk_size), e.raw_size);
  return buf;
}

// --- one chunk -------------------------------------------------------------------------------------------------------
struct ChunkCodec::Contexts {
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
  std::vector<std::byte> header = std::vector<std::byte>(kRecordHeaderSize);
  const std::byte* payload = nullptr;
  std::size_t payload_size = 0;
  ~Contexts() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};

ChunkCodec::ChunkCodec(std::uint32_t chunk_size) : contexts_(std::make_unique<Contexts>()), chunk_size_(chunk_size) {}

ChunkCodec::~ChunkCodec() = default;

void ChunkCodec::encode(std::span<const std::byte> raw, const Settings& settings, CompressionHistory& history,
                        ChunkEntry& entry) {
  entry.raw_size = static_cast<std::uint32_t>(raw.size());
  contexts_->payload = nullptr;
  contexts_->payload_size = 0;
  record_size_ = 0;
  if (settings.sparse && all_zero(raw)) {
    entry.encoding = Encoding::Zero;
    entry.stored_size = 0;
    entry.checksum = 0;
    return;
  }
  entry.checksum = checksum(raw);
  entry.encoding = Encoding::Raw;
  const bool tried = should_try_compression(settings.compression, history);
  bool paid = false;
  if (tried) {
    if (contexts_->cctx == nullptr) contexts_->cctx = ZSTD_createCCtx();
    if (compressed_.empty()) compressed_.resize(ZSTD_compressBound(std::max<std::size_t>(chunk_size_, raw.size())));
    std::size_t n = contexts_->cctx == nullptr
                        ? 0
                        : ZSTD_compressCCtx(contexts_->cctx, compressed_.data(), compressed_.size(), raw.data(), raw.size(),
                                            settings.compression.level);
    if (contexts_->cctx != nullptr && !ZSTD_isError(n) && compression_pays(raw.size(), n)) {
      paid = true;
      entry.encoding = Encoding::Zstd;
      contexts_->payload = compressed_.data();
      contexts_->payload_size = n;
    }
  }
  remember_compression(history, tried, paid);
  if (!paid) {
    contexts_->payload = raw.data();
    contexts_->payload_size = raw.size();
  }
  entry.stored_size = static_cast<std::uint32_t>(contexts_->payload_size);
  std::byte* h = contexts_->header.data();
  std::memset(h, 0, kRecordHeaderSize);
  std::memcpy(h, kRecordMagic, 4);
  put_le<std::uint32_t>(h, 4, entry.region);
  put_le<std::uint64_t>(h, 8, entry.chunk);
  put_le<std::uint32_t>(h, 16, entry.raw_size);
  put_le<std::uint32_t>(h, 20, entry.stored_size);
  put_le<std::uint8_t>(h, 24, static_cast<std::uint8_t>(entry.encoding));
  put_le<std::uint64_t>(h, 32, entry.checksum);
  put_le<std::uint64_t>(h, 40, XXH3_64bits(h, 40));
  record_size_ = kRecordHeaderSize + contexts_->payload_size;
}

Result<void> ChunkCodec::write_record(int fd, std::uint64_t offset, const std::string& file) const {
  iovec iov[2] = {{contexts_->header.data(), kRecordHeaderSize},
                  {const_cast<std::byte*>(contexts_->payload), contexts_->payload_size}};
  std::size_t left = record_size_;
  int first = 0;
  while (left > 0) {
    ssize_t n = ::pwritev(fd, iov + first, 2 - first, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      return make_error("writing " + file + ": " + errno_text(err), err);
    }
    left -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
    for (auto done = static_cast<std::size_t>(n); done > 0;) {   // a short write: skip what went out
      const std::size_t step = std::min(done, iov[first].iov_len);
      iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + step;
      iov[first].iov_len -= step;
      done -= step;
      if (iov[first].iov_len == 0 && first < 1) ++first;
    }
  }
  return {};
}

Result<void> ChunkCodec::decode(std::span<const std::byte> record, const ChunkEntry& entry, std::span<std::byte> out) {
  if (out.size() != entry.raw_size) return make_error("internal: output size does not match the chunk", EINVAL);
  if (record.size() != kRecordHeaderSize + entry.stored_size)
    return make_error("record size does not match the index", EIO);
  const std::byte* h = record.data();
  if (std::memcmp(h, kRecordMagic, 4) != 0) return make_error("no chunk record at the offset the index gives", EIO);
  if (get_le<std::uint64_t>(h, 40) != XXH3_64bits(h, 40)) return make_error("the chunk's header is corrupt", EIO);
  if (get_le<std::uint32_t>(h, 4) != entry.region || get_le<std::uint64_t>(h, 8) != entry.chunk ||
      get_le<std::uint32_t>(h, 16) != entry.raw_size || get_le<std::uint32_t>(h, 20) != entry.stored_size ||
      get_le<std::uint8_t>(h, 24) != static_cast<std::uint8_t>(entry.encoding) ||
      get_le<std::uint64_t>(h, 32) != entry.checksum)
    return make_error("the chunk's header does not match the index", EIO);
  GPUCKPT_TRY_VOID(decode_payload(record.subspan(kRecordHeaderSize), entry.encoding, out));
  if (checksum(out) != entry.checksum) return make_error("checksum mismatch: the stored data is corrupt", EIO);
  return {};
}

std::span<const std::byte> ChunkCodec::payload() const { return {contexts_->payload, contexts_->payload_size}; }

Result<void> ChunkCodec::decode_payload(std::span<const std::byte> payload, Encoding encoding, std::span<std::byte> out) {
  if (encoding == Encoding::Raw) {
    if (payload.size() != out.size()) return make_error("raw chunk has the wrong size", EIO);
    std::memcpy(out.data(), payload.data(), payload.size());
  } else if (encoding == Encoding::Zstd) {
    if (contexts_->dctx == nullptr) contexts_->dctx = ZSTD_createDCtx();
    if (contexts_->dctx == nullptr) return make_error("out of memory for a zstd context", ENOMEM);
    std::size_t n = ZSTD_decompressDCtx(contexts_->dctx, out.data(), out.size(), payload.data(), payload.size());
    if (ZSTD_isError(n)) return make_error(std::string("zstd cannot decompress it: ") + ZSTD_getErrorName(n), EIO);
    if (n != out.size()) return make_error("it decompresses to the wrong size", EIO);
  } else {
    return make_error("unknown encoding " + std::to_string(static_cast<int>(encoding)), EIO);
  }
  return {};
}

// --- writer ------------------------------------------------------------------------------------------------------------
Result<std::unique_ptr<ImageWriter>> ImageWriter::create(int dir_fd, const ImageHeader& header,
                                                         std::vector<Region> regions) {
  if (header.chunk_size == 0 || header.chunk_size > kMaxChunkSize || header.chunk_size % 4096 != 0)
    return make_error("GPU image chunk size " + std::to_string(header.chunk_size) + " is not a multiple of 4 KiB up to " +
                      std::to_string(kMaxChunkSize));
  if (regions.empty() || regions.size() > kMaxRegions) return make_error("a GPU image needs 1 to 4096 regions");
  if (header.shards == 0 || header.shards > kMaxShards) return make_error("a GPU image needs 1 to 256 data files");
  std::unique_ptr<ImageWriter> w(new ImageWriter());
  w->dir_fd_ = dir_fd;
  w->header_ = header;
  w->regions_ = std::move(regions);
  w->name_ = file_name(header.vpid);
  std::size_t total = 0;
  for (const Region& r : w->regions_) {
    if (r.length == 0) return make_error("a GPU image region is empty");
    w->first_entry_.push_back(total);
    for (std::uint64_t c = 0; c < chunks_in(r, header.chunk_size); ++c) {
      ChunkEntry e;
      e.region = static_cast<std::uint32_t>(w->first_entry_.size() - 1);
      e.chunk = c;
      e.raw_size = raw_size_of(r, c, header.chunk_size);
      w->entries_.push_back(e);
    }
    total = w->entries_.size();
  }
  w->present_.assign(w->entries_.size(), 0);
  for (std::uint32_t k = 0; k < header.shards; ++k) {
    auto shard = std::make_unique<Shard>();
    shard->name = shard_name(w->name_, k);
    shard->temp_name = "." + shard->name + ".partial";
    shard->next_offset = k == 0 ? kFileHeaderSize : 0;
    (void)::unlinkat(dir_fd, shard->temp_name.c_str(), 0);   // a leftover of a dump that died
    shard->fd = ::openat(dir_fd, shard->temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const int err = errno;
    w->shards_.push_back(std::move(shard));
    if (w->shards_.back()->fd < 0)
      return make_error("creating " + w->shards_.back()->temp_name + " in the image directory: " + errno_text(err), err);
  }
  std::byte h[kFileHeaderSize] = {};
  std::memcpy(h, kFileMagic, 8);
  put_le<std::uint32_t>(h, 8, header.version);
  put_le<std::uint32_t>(h, 12, static_cast<std::uint32_t>(kFileHeaderSize));
  put_le<std::uint32_t>(h, 16, header.chunk_size);
  put_le<std::int32_t>(h, 20, header.vpid);
  put_le<std::int32_t>(h, 24, header.dump_pid);
  put_le<std::uint32_t>(h, 28, header.shards);
  put_le<std::uint64_t>(h, 56, XXH3_64bits(h, 56));
  GPUCKPT_TRY_VOID(write_all(w->shards_[0]->fd, h, sizeof h, 0, w->shards_[0]->temp_name));
  return w;
}

ImageWriter::~ImageWriter() {
  for (const auto& shard : shards_) {
    if (shard->fd >= 0) ::close(shard->fd);
    if (!finished_ && dir_fd_ >= 0) (void)::unlinkat(dir_fd_, shard->temp_name.c_str(), 0);
  }
}

std::uint64_t ImageWriter::chunk_count(std::uint32_t region) const {
  return chunks_in(regions_.at(region), header_.chunk_size);
}

Result<void> ImageWriter::append(const ChunkCodec& codec, ChunkEntry entry, unsigned worker) {
  if (entry.region >= regions_.size() || entry.chunk >= chunk_count(entry.region))
    return make_error("internal: chunk outside the image's regions", EINVAL);
  const std::size_t i = first_entry_[entry.region] + entry.chunk;
  if (entry.raw_size != entries_[i].raw_size) return make_error("internal: chunk of the wrong size", EINVAL);
  if (entry.encoding != Encoding::Zero) {
    entry.shard = static_cast<std::uint16_t>(worker % shards_.size());
    Shard& shard = *shards_[entry.shard];
    entry.offset = shard.next_offset.fetch_add(codec.record_size());
    GPUCKPT_TRY_VOID(codec.write_record(shard.fd, entry.offset, shard.temp_name));
    // Start the disk writing now rather than all at the final fsync: on a disk the copy and the write overlap.
    const std::uint64_t unflushed = shard.unflushed.fetch_add(codec.record_size()) + codec.record_size();
    if (unflushed >= kWritebackEvery && shard.unflushed.exchange(0) >= kWritebackEvery)
      (void)::sync_file_range(shard.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  } else {
    entry.offset = 0;
    entry.shard = 0;
  }
  entries_[i] = entry;
  present_[i] = 1;
  return {};
}

Result<void> ImageWriter::finish() {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (!present_[i])
      return make_error("internal: " + describe_chunk(entries_[i], regions_[entries_[i].region].start,
                                                      header_.chunk_size) + " was never written to " + name_);
  std::vector<std::byte> index(regions_.size() * kRegionEntrySize + entries_.size() * kIndexEntrySize);
  std::byte* p = index.data();
  for (const Region& r : regions_) {
    put_le<std::uint64_t>(p, 0, r.start);
    put_le<std::uint64_t>(p, 8, r.length);
    p += kRegionEntrySize;
  }
  for (const ChunkEntry& e : entries_) {
    encode_entry(p, e);
    p += kIndexEntrySize;
  }
  Shard& main = *shards_[0];
  const std::uint64_t index_offset = main.next_offset.fetch_add(index.size() + kFooterSize);
  std::byte f[kFooterSize] = {};
  std::memcpy(f, kFooterMagic, 8);
  put_le<std::uint64_t>(f, 8, index_offset);
  put_le<std::uint32_t>(f, 16, static_cast<std::uint32_t>(regions_.size()));
  put_le<std::uint64_t>(f, 24, entries_.size());
  put_le<std::uint64_t>(f, 32, XXH3_64bits(index.data(), index.size()));
  put_le<std::uint64_t>(f, 40, XXH3_64bits(f, 40));
  GPUCKPT_TRY_VOID(write_all(main.fd, index.data(), index.size(), index_offset, main.temp_name));
  GPUCKPT_TRY_VOID(write_all(main.fd, f, sizeof f, index_offset + index.size(), main.temp_name));
  for (const auto& shard : shards_)
    if (::fsync(shard->fd) != 0) return make_error("fsync of " + shard->temp_name + ": " + errno_text(errno), errno);
  // The shards first: a main file with its final name means every file it names is complete.
  for (std::size_t k = shards_.size(); k-- > 0;) {
    const Shard& shard = *shards_[k];
    if (::renameat(dir_fd_, shard.temp_name.c_str(), dir_fd_, shard.name.c_str()) != 0)
      return make_error("renaming " + shard.temp_name + " to " + shard.name + ": " + errno_text(errno), errno);
  }
  finished_ = true;
  if (::fsync(dir_fd_) != 0 && errno != EINVAL)
    return make_error("fsync of the image directory after writing " + name_ + ": " + errno_text(errno), errno);
  return {};
}

// --- reader ------------------------------------------------------------------------------------------------------------
namespace {

// The main file's header, checked: magic, checksum, a version this gpuckpt reads, sane chunk size and shard count.
Result<ImageHeader> read_file_header(int main_fd, const std::string& name) {
  std::byte h[kFileHeaderSize];
  GPUCKPT_TRY_VOID(read_all(main_fd, h, sizeof h, 0, name));
  if (std::memcmp(h, kFileMagic, 8) != 0) return make_error(name + " is not a gpuckpt GPU memory image", EIO);
  if (get_le<std::uint64_t>(h, 56) != XXH3_64bits(h, 56)) return make_error(name + ": the file header is corrupt", EIO);
  ImageHeader header;
  header.version = get_le<std::uint32_t>(h, 8);
  if (header.version > kVersion)
    return make_error(name + " is GPU image version " + std::to_string(header.version) + "; this gpuckpt reads up "
                      "to " + std::to_string(kVersion) + ". Restore with the gpuckpt that made the checkpoint, or newer",
                      EIO);
  header.chunk_size = get_le<std::uint32_t>(h, 16);
  header.vpid = get_le<std::int32_t>(h, 20);
  header.dump_pid = get_le<std::int32_t>(h, 24);
  header.shards = std::max<std::uint32_t>(1, get_le<std::uint32_t>(h, 28));   // 0 in the first images: one file
  if (header.chunk_size == 0 || header.chunk_size > kMaxChunkSize)
    return make_error(name + ": bad chunk size in the header", EIO);
  if (header.shards > kMaxShards) return make_error(name + ": bad shard count in the header", EIO);
  return header;
}

// Opens the data files 1 .. shards-1 of image `name` into `fds` (which owns them, on failure too) and appends
// their sizes to `shard_sizes`.
Result<void> open_data_files(int dir_fd, const std::string& name, std::uint32_t shards, std::vector<int>& fds,
                             std::vector<std::uint64_t>& shard_sizes) {
  for (std::uint32_t k = 1; k < shards; ++k) {
    const std::string shard = shard_name(name, k);
    const int fd = ::openat(dir_fd, shard.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      return make_error("the GPU memory image " + name + " is incomplete: its data file " + shard + " cannot be "
                        "opened (" + errno_text(errno) + ")", errno == ENOENT ? ENOENT : EIO);
    fds.push_back(fd);
    struct stat shard_st {};
    if (::fstat(fd, &shard_st) != 0 || !S_ISREG(shard_st.st_mode))
      return make_error("the GPU memory image's data file " + shard + " is not a regular file", EIO);
    shard_sizes.push_back(static_cast<std::uint64_t>(shard_st.st_size));
  }
  return {};
}

// Where the footer says the chunk index lies in the main file, and its checksum.
struct IndexLocation {
  std::uint64_t offset = 0;
  std::uint32_t region_count = 0;
  std::uint64_t entry_count = 0;
  std::uint64_t checksum = 0;
  std::uint64_t size() const { return region_count * kRegionEntrySize + entry_count * kIndexEntrySize; }
};

// The footer at the end of the main file, checked, and the index it describes, which must fill the space between
// the header and the footer exactly.
Result<IndexLocation> read_footer(int main_fd, std::uint64_t main_size, const std::string& name) {
  std::byte f[kFooterSize];
  GPUCKPT_TRY_VOID(read_all(main_fd, f, sizeof f, main_size - kFooterSize, name));
  if (std::memcmp(f, kFooterMagic, 8) != 0 || get_le<std::uint64_t>(f, 40) != XXH3_64bits(f, 40))
    return make_error("the GPU memory image " + name + " is truncated or incomplete (no valid footer): the dump that "
                      "wrote it did not finish", EIO);
  IndexLocation at;
  at.offset = get_le<std::uint64_t>(f, 8);
  at.region_count = get_le<std::uint32_t>(f, 16);
  at.entry_count = get_le<std::uint64_t>(f, 24);
  at.checksum = get_le<std::uint64_t>(f, 32);
  const std::uint64_t index_end = main_size - kFooterSize;
  if (at.region_count == 0 || at.region_count > kMaxRegions || at.offset < kFileHeaderSize || at.offset > index_end ||
      at.entry_count > (index_end - at.offset) / kIndexEntrySize || index_end - at.offset != at.size())
    return make_error(name + ": the footer does not describe an index inside the file", EIO);
  return at;
}

// The region table at the start of the index, each region valid, together needing exactly the index's entries.
Result<std::vector<Region>> decode_regions(const std::byte* p, const IndexLocation& at, std::uint32_t chunk_size,
                                           const std::string& name) {
  std::vector<Region> regions;
  std::uint64_t expected_entries = 0;
  for (std::uint32_t i = 0; i < at.region_count; ++i, p += kRegionEntrySize) {
    Region region{get_le<std::uint64_t>(p, 0), get_le<std::uint64_t>(p, 8)};
    // Beyond 128 TiB no process maps anything (x86-64 user space), and the chunk count below must not wrap.
    if (region.length == 0 || region.length > kMaxRegionLength || region.start + region.length < region.start)
      return make_error(name + ": region " + std::to_string(i) + " is invalid", EIO);
    expected_entries += chunks_in(region, chunk_size);
    regions.push_back(region);
  }
  if (expected_entries != at.entry_count)
    return make_error(name + ": the index lists " + std::to_string(at.entry_count) + " chunks, the regions need " +
                      std::to_string(expected_entries) + " (chunks are missing)", EIO);
  return regions;
}

// The chunk entries that follow the region table: one per chunk of every region, in order, each of the right size
// and, unless zero, with its record inside its data file (shard_sizes[k]: data file k's size; shard 0's records
// lie between the header and the index).
Result<std::vector<ChunkEntry>> decode_entries(const std::byte* p, const IndexLocation& at,
                                               const std::vector<Region>& regions, const ImageHeader& header,
                                               const std::vector<std::uint64_t>& shard_sizes, const std::string& name) {
  const std::uint32_t chunk_size = header.chunk_size;
  std::vector<ChunkEntry> entries;
  entries.reserve(at.entry_count);
  std::uint32_t region = 0;
  std::uint64_t chunk = 0;
  for (std::uint64_t i = 0; i < at.entry_count; ++i, p += kIndexEntrySize) {
    while (chunk == chunks_in(regions[region], chunk_size)) {
      ++region;
      chunk = 0;
    }
    ChunkEntry e = decode_entry(p);
    const std::string where = describe_chunk(e, regions[std::min<std::size_t>(e.region, at.region_count - 1)].start,
                                             chunk_size);
    if (e.region != region || e.chunk != chunk)
      return make_error(name + ": index entry " + std::to_string(i) + " is " + where + ", expected chunk " +
                        std::to_string(chunk) + " of region " + std::to_string(region) + " (chunks missing or out of order)",
                        EIO);
    if (e.raw_size != raw_size_of(regions[region], chunk, chunk_size))
      return make_error(name + ": " + where + " has the wrong size", EIO);
    if (e.encoding == Encoding::Zero) {
      if (e.stored_size != 0) return make_error(name + ": " + where + " is zero but has stored bytes", EIO);
    } else if (e.encoding == Encoding::Raw || e.encoding == Encoding::Zstd) {
      const std::uint64_t begin = e.shard == 0 ? kFileHeaderSize : 0;
      const std::uint64_t end = e.shard == 0 ? at.offset : (e.shard < shard_sizes.size() ? shard_sizes[e.shard] : 0);
      if ((e.encoding == Encoding::Raw && e.stored_size != e.raw_size) || e.stored_size > ZSTD_compressBound(chunk_size) ||
          e.shard >= header.shards || e.offset < begin || e.offset > end ||
          end - e.offset < kRecordHeaderSize + e.stored_size)
        return make_error(name + ": " + where + " lies outside the file's data (the file is truncated or corrupt)", EIO);
    } else {
      return make_error(name + ": " + where + " has an unknown encoding", EIO);
    }
    entries.push_back(e);
    ++chunk;
  }
  return entries;
}

}  // namespace

Result<std::unique_ptr<ImageReader>> ImageReader::open(int dir_fd, const std::string& name) {
  std::unique_ptr<ImageReader> r(new ImageReader());
  r->name_ = name;
  const int main_fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (main_fd < 0) return make_error("cannot open the GPU memory image " + name + ": " + errno_text(errno), errno);
  r->fds_.push_back(main_fd);
  struct stat st {};
  if (::fstat(main_fd, &st) != 0 || !S_ISREG(st.st_mode))
    return make_error("the GPU memory image " + name + " is not a regular file", EIO);
  const std::uint64_t main_size = static_cast<std::uint64_t>(st.st_size);
  if (main_size < kFileHeaderSize + kFooterSize)
    return make_error("the GPU memory image " + name + " is truncated (" + std::to_string(main_size) +
                      " bytes): the dump that wrote it did not finish", EIO);
  GPUCKPT_TRY(r->header_, read_file_header(main_fd, name));
  std::vector<std::uint64_t> shard_sizes{0};   // [0]: the main file, whose data ends at the index
  GPUCKPT_TRY_VOID(open_data_files(dir_fd, name, r->header_.shards, r->fds_, shard_sizes));
  r->file_size_ = main_size;
  for (const std::uint64_t size : shard_sizes) r->file_size_ += size;

  GPUCKPT_TRY(const IndexLocation at, read_footer(main_fd, main_size, name));
  std::vector<std::byte> index(at.size());
  GPUCKPT_TRY_VOID(read_all(main_fd, index.data(), index.size(), at.offset, name));
  if (XXH3_64bits(index.data(), index.size()) != at.checksum)
    return make_error(name + ": the chunk index is corrupt (checksum mismatch)", EIO);
  GPUCKPT_TRY(r->regions_, decode_regions(index.data(), at, r->header_.chunk_size, name));
  GPUCKPT_TRY(r->entries_, decode_entries(index.data() + at.region_count * kRegionEntrySize, at, r->regions_,
                                          r->header_, shard_sizes, name));
  // Each data file is read front to back (the fill reads one file per thread): a larger readahead window.
  for (int fd : r->fds_) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return r;
}

ImageReader::~ImageReader() {
  for (int fd : fds_) ::close(fd);
}

void ImageReader::prefetch(std::size_t first, std::size_t last) const {
  if (first >= entries_.size() || last >= entries_.size()) return;
  const ChunkEntry& a = entries_[first];
  const ChunkEntry& b = entries_[last];
  if (a.encoding == Encoding::Zero || b.encoding == Encoding::Zero || a.shard != b.shard || b.offset < a.offset ||
      a.shard >= fds_.size())
    return;
  const std::uint64_t length = b.offset + kRecordHeaderSize + b.stored_size - a.offset;
  (void)::posix_fadvise(fds_[a.shard], static_cast<off_t>(a.offset), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
}

Result<void> ImageReader::read_chunk(std::size_t i, ChunkCodec& codec, std::vector<std::byte>& record_buffer,
                                     std::span<std::byte> out) const {
  const ChunkEntry& e = entries_.at(i);
  if (e.encoding == Encoding::Zero) {
    std::memset(out.data(), 0, out.size());
    return {};
  }
  const std::size_t size = kRecordHeaderSize + e.stored_size;
  if (record_buffer.size() < size) record_buffer.resize(size);
  auto fail = [&](const std::string& what) {
    return make_error("GPU memory image " + name_ + ": " + describe_chunk(e, regions_[e.region].start,
                                                                          header_.chunk_size) + ": " + what, EIO);
  };
  if (auto ok = read_all(fds_[e.shard], record_buffer.data(), size, e.offset, shard_name(name_, e.shard)); !ok)
    return fail(ok.error().message);
  if (auto ok = codec.decode({record_buffer.data(), size}, e, out); !ok) return fail(ok.error().message);
  return {};
}

// --- inspect -------------------------------------------------------------------------------------------------------------
Result<ImageSummary> summarize(int dir_fd, const std::string& name, bool verify) {
  GPUCKPT_TRY(const auto reader, ImageReader::open(dir_fd, name));
  ImageSummary s;
  s.header = reader->header();
  s.regions = reader->regions();
  s.file_bytes = reader->file_size();
  ChunkCodec codec(s.header.chunk_size);
  std::vector<std::byte> record, out(s.header.chunk_size);
  const auto& entries = reader->entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const ChunkEntry& e = entries[i];
    ++s.chunks;
    s.memory_bytes += e.raw_size;
    s.stored_bytes += e.stored_size;
    if (e.encoding == Encoding::Zero) ++s.zero_chunks;
    if (e.encoding == Encoding::Raw) ++s.raw_chunks;
    if (e.encoding == Encoding::Zstd) ++s.zstd_chunks;
    if (verify) {
      GPUCKPT_TRY_VOID(reader->read_chunk(i, codec, record, {out.data(), e.raw_size}));
    }
  }
  return s;
}

std::string format_summary(const std::string& name, const ImageSummary& s) {
  auto mib = [](std::uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
    return std::string(buf);
  };
  std::string out = name + ": GPU memory image v" + std::to_string(s.header.version) + ", pid " +
                    std::to_string(s.header.vpid) + " (dumped as " + std::to_string(s.header.dump_pid) + "), chunk " +
                    mib(s.header.chunk_size) + "\n";
  for (const Region& r : s.regions) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  region 0x%llx-0x%llx (%s)\n", static_cast<unsigned long long>(r.start),
                  static_cast<unsigned long long>(r.start + r.length), mib(r.length).c_str());
    out += buf;
  }
  out += "  chunks: " + std::to_string(s.chunks) + " (" + std::to_string(s.zero_chunks) + " zero, " +
         std::to_string(s.zstd_chunks) + " zstd, " + std::to_string(s.raw_chunks) + " raw)\n";
  out += "  memory " + mib(s.memory_bytes) + ", stored " + mib(s.stored_bytes) + ", file " + mib(s.file_bytes) + "\n";
  return out;
}

bool looks_like_image(const std::string& path) {
  // A GPU memory image is a regular file. Anything else is not opened to look: opening a FIFO an archive streams
  // through connects its writer to a reader that leaves at once, and the writer then sees a broken pipe before the
  // archive reader opens it (gpuckpt inspect on a stream hung in that race).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[8] = {};
  const bool yes = ::pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
                   std::memcmp(magic, kFileMagic, sizeof magic) == 0;
  ::close(fd);
  return yes;
}

}  // namespace gpuckpt::gpu_image
