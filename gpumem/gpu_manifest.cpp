#include "gpumem/gpu_manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <unordered_set>

#include "base/errno_text.h"
#include "gpumem/chunk_receive.h"
#include "base/json_reader.h"

namespace gpuckpt::gpu_image {
namespace {

namespace cs = chunk_store;

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

const char* encoding_name(Encoding e) { return to_string(e); }

std::string checksum_hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Exactly 16 lowercase hex digits.
std::optional<std::uint64_t> parse_checksum_hex(std::string_view hex) {
  if (!cs::is_lower_hex(hex, 16)) return std::nullopt;
  std::uint64_t v = 0;
  std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  return v;
}

// The header of a chunk file checked against the manifest's entry: sound, and of the entry's raw size. How the file
// stores the bytes (raw or zstd, its stored size) is the store's: the same chunk may be stored another way in the
// store a restore reads than in the one its dump wrote (one node compressed it, the other did not), and the content
// check after decoding says whether the bytes are the entry's.
Result<cs::ChunkHeader> check_entry_header(std::span<const std::byte> file, const ChunkEntry& e) {
  GPUCKPT_TRY(const auto header, chunk_receive::check_chunk_header(file));
  if (header.raw_size != e.raw_size)
    return make_error("holds a chunk of " + std::to_string(header.raw_size) + " bytes, the manifest's is " +
                      std::to_string(e.raw_size), EIO);
  return header;
}

bool is_hex_id(std::string_view id) { return cs::is_lower_hex(id, 32); }

constexpr const char* kCpuPagesKind = "cpu-pages";
// A page image's manifest may have one region per chunk: a process's pages in 2 MiB windows.
constexpr std::uint64_t kMaxPagesRegions = kMaxManifestChunks;

}  // namespace

Result<void> write_file_atomically(int dir_fd, const std::string& name, const std::string& text, bool durable,
                                  const std::string& where) {
  const std::string temp = "." + name + ".partial";
  (void)::unlinkat(dir_fd, temp.c_str(), 0);   // a leftover of a writer that died
  const int fd = ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return make_error("creating " + temp + " in " + where + ": " + errno_text(errno), errno);
  const auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    (void)::unlinkat(dir_fd, temp.c_str(), 0);
    return make_error(what + " " + temp + " in " + where + ": " + errno_text(err), err);
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("writing", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) return fail("fsync of", errno);
  ::close(fd);
  if (::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) {
    const int err = errno;
    (void)::unlinkat(dir_fd, temp.c_str(), 0);
    return make_error("renaming " + temp + " to " + name + " in " + where + ": " + errno_text(err), err);
  }
  if (durable && ::fsync(dir_fd) != 0 && errno != EINVAL)
    return make_error("fsync of " + where + " after writing " + name + ": " + errno_text(errno), errno);
  return {};
}

namespace {
// <prefix><positive decimal, no leading zero><kManifestSuffix>: the number, or -1.
int number_in_manifest_name(std::string_view name, std::string_view prefix) {
  const std::string_view suffix(kManifestSuffix);
  if (!name.starts_with(prefix) || !name.ends_with(suffix) || name.size() <= prefix.size() + suffix.size()) return -1;
  auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits[0] == '0') return -1;
  int number = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (ec != std::errc() || end != digits.data() + digits.size() || number <= 0) return -1;
  return number;
}
}  // namespace

std::string manifest_name(int vpid) { return kFilePrefix + std::to_string(vpid) + kManifestSuffix; }
int vpid_from_manifest_name(std::string_view name) { return number_in_manifest_name(name, kFilePrefix); }
std::string pages_manifest_name(int pages_id) {
  return kPagesManifestPrefix + std::to_string(pages_id) + kManifestSuffix;
}
int pages_id_from_manifest_name(std::string_view name) {
  return number_in_manifest_name(name, kPagesManifestPrefix);
}
std::string manifest_name(const Manifest& m) {
  return m.kind == MemoryKind::CpuPages ? pages_manifest_name(m.header.vpid) : manifest_name(m.header.vpid);
}
bool is_manifest_name(std::string_view name) {
  return vpid_from_manifest_name(name) > 0 || pages_id_from_manifest_name(name) > 0;
}
std::string reference_name(const Manifest& m) {
  return m.kind == MemoryKind::CpuPages ? cs::pages_ref_name(m.checkpoint, m.header.vpid)
                                        : cs::ref_name(m.checkpoint, m.header.vpid);
}

std::string new_checkpoint_id() {
  std::random_device random;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", random(), random(), random(), random());
  return buf;
}

// --- the document ----------------------------------------------------------------------------------------------------
std::string serialize_manifest(const Manifest& m) {
  nlohmann::json regions = nlohmann::json::array();
  for (const Region& r : m.regions) regions.push_back({r.start, r.length});
  nlohmann::json chunks = nlohmann::json::array();
  nlohmann::json checksums = nlohmann::json::array();
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    const ChunkEntry& e = m.entries[i];
    if (e.encoding == Encoding::Zero) chunks.push_back({"zero", e.raw_size});
    else chunks.push_back({encoding_name(e.encoding), e.raw_size, e.stored_size, m.digests[i].hex()});
    checksums.push_back(e.encoding == Encoding::Zero ? std::string() : checksum_hex(e.checksum));
  }
  const bool pages = m.kind == MemoryKind::CpuPages;
  nlohmann::json doc = {{"format", kManifestFormat},
                        {"version", kManifestVersion},
                        {"checkpoint", m.checkpoint},
                        {"hash", cs::kHashName},
                        {"store", m.store},
                        {pages ? "pages_id" : "vpid", m.header.vpid},
                        {"dump_pid", m.header.dump_pid},
                        {"chunk_size", m.header.chunk_size},
                        {"regions", std::move(regions)},
                        {"chunks", std::move(chunks)}};
  if (pages) doc["kind"] = kCpuPagesKind;
  if (m.checksums) doc["xxh3_64"] = std::move(checksums);
  return doc.dump() + "\n";
}

namespace {

// The arrays of a manifest document; checksums is null where the manifest has none.
struct ManifestArrays {
  const nlohmann::json* regions = nullptr;
  const nlohmann::json* chunks = nullptr;
  const nlohmann::json* checksums = nullptr;
};

// The document's scalar fields into m (format, version, kind, hash, checkpoint, store, the header) and where its
// arrays are, each of the required ones present.
Result<ManifestArrays> parse_manifest_fields(const nlohmann::json& doc, std::string_view source, Manifest& m) {
  JsonFields f{std::string(source)};
  if (!doc.is_object()) return make_error(std::string(source) + ": not a JSON object", EINVAL);
  std::string format;
  f.get(doc, "", "format", format, true);
  if (!f.failed() && format != kManifestFormat) f.fail("format", "is not " + std::string(kManifestFormat));
  if (f.failed()) return f.error();
  f.version(doc, kManifestVersion, "GPU memory manifest");
  std::string kind = "gpu-memory";
  f.get(doc, "", "kind", kind, false);
  if (!f.failed() && kind != "gpu-memory" && kind != kCpuPagesKind) f.fail("kind", "is not gpu-memory or cpu-pages");
  if (f.failed()) return f.error();
  if (kind == kCpuPagesKind) m.kind = MemoryKind::CpuPages;
  const bool pages = m.kind == MemoryKind::CpuPages;
  std::string hash;
  f.get(doc, "", "hash", hash, true);
  if (!f.failed() && hash != cs::kHashName) f.fail("hash", "is not sha256 (the only digest this gpuckpt knows)");
  f.get(doc, "", "checkpoint", m.checkpoint, true);
  if (!f.failed() && !is_hex_id(m.checkpoint)) f.fail("checkpoint", "is not 32 lowercase hex digits");
  f.get(doc, "", "store", m.store, true);
  if (!f.failed() && m.store.size() > 4096) f.fail("store", "is longer than 4096 characters");
  std::int64_t vpid = 0, dump_pid = 0, chunk_size = 0;
  f.get_integer(doc, "", pages ? "pages_id" : "vpid", vpid, 1, 4194304, true);
  f.get_integer(doc, "", "dump_pid", dump_pid, 0, 4194304, true);
  f.get_integer(doc, "", "chunk_size", chunk_size, 4096, kMaxChunkSize, true);
  if (!f.failed() && chunk_size % 4096 != 0) f.fail("chunk_size", "is not a multiple of 4096");
  ManifestArrays arrays;
  arrays.regions = f.array(doc, "", "regions", true);
  arrays.chunks = f.array(doc, "", "chunks", true);
  arrays.checksums = f.array(doc, "", "xxh3_64", false);
  if (f.failed()) return f.error();
  m.header.vpid = static_cast<std::int32_t>(vpid);
  m.header.dump_pid = static_cast<std::int32_t>(dump_pid);
  m.header.chunk_size = static_cast<std::uint32_t>(chunk_size);
  m.header.shards = kStoreStreams;
  return arrays;
}

// The regions into m.regions (whose header is parsed); returns how many chunks they need. A page image's regions
// tile its file from offset 0, each at most one chunk.
Result<std::uint64_t> parse_regions(const nlohmann::json& regions, std::string_view source, Manifest& m) {
  const bool pages = m.kind == MemoryKind::CpuPages;
  const auto size = m.header.chunk_size;
  const std::uint64_t max_regions = pages ? kMaxPagesRegions : kMaxRegions;
  if (regions.empty() || regions.size() > max_regions)
    return make_error(std::string(source) + ": regions: needs 1 to " + std::to_string(max_regions) + " regions");
  std::uint64_t expected_chunks = 0;
  std::uint64_t file_offset = 0;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const auto& r = regions[i];
    const std::string path = "regions[" + std::to_string(i) + "]";
    std::optional<std::uint64_t> start, length;
    if (r.is_array() && r.size() == 2) {
      start = json_unsigned(r[0], UINT64_MAX);
      length = json_unsigned(r[1], kMaxRegionLength);
    }
    if (!start || !length || *length == 0 || *start + *length < *start)
      return make_error(std::string(source) + ": " + path + ": not [start, length] with a length of 1 to 2^47 "
                        "bytes inside the address space");
    if (pages && (*start != file_offset || *length > size || *length % 4096 != 0))
      return make_error(std::string(source) + ": " + path + ": a page image's regions are whole pages of its file, "
                        "back to back from offset 0, each at most chunk_size bytes (expected start " +
                        std::to_string(file_offset) + ")");
    file_offset += *length;
    m.regions.push_back({*start, *length});
    expected_chunks += chunks_in(m.regions.back(), size);
  }
  return expected_chunks;
}

// One element of chunks (`path` names it) into e, which holds its region, chunk and raw size: ["zero", raw_size],
// or [raw|zstd, raw_size, stored_size, digest]. A stored chunk takes the next `ordinal`; returns its digest (none
// for a zero chunk).
Result<cs::Digest> parse_chunk(const nlohmann::json& c, const std::string& path, std::uint64_t max_stored,
                               std::uint64_t& ordinal, ChunkEntry& e) {
  if (!c.is_array() || c.size() < 2 || !c[0].is_string())
    return make_error(path + ": not [encoding, raw_size, ...]");
  const std::string encoding = c[0].get<std::string>();
  if (json_unsigned(c[1], UINT32_MAX) != std::optional<std::uint64_t>(e.raw_size))
    return make_error(path + ": raw_size is not " + std::to_string(e.raw_size) + ", the size of chunk " +
                      std::to_string(e.chunk) + " of region " + std::to_string(e.region));
  if (encoding == "zero") {
    if (c.size() != 2) return make_error(path + ": a zero chunk is [\"zero\", raw_size]");
    e.encoding = Encoding::Zero;
    return cs::Digest{};
  }
  if (encoding != "raw" && encoding != "zstd") return make_error(path + ": encoding is not zero, raw or zstd");
  e.encoding = encoding == "raw" ? Encoding::Raw : Encoding::Zstd;
  if (c.size() != 4 || !c[3].is_string()) return make_error(path + ": a stored chunk is [encoding, raw_size, "
                                                            "stored_size, digest]");
  const auto stored = json_unsigned(c[2], max_stored);
  if (!stored || *stored == 0 || (e.encoding == Encoding::Raw && *stored != e.raw_size))
    return make_error(path + ": stored_size is not 1 to " + std::to_string(max_stored) + " bytes (" +
                      std::to_string(e.raw_size) + " for raw)");
  e.stored_size = static_cast<std::uint32_t>(*stored);
  GPUCKPT_TRY(const cs::Digest digest, cs::parse_digest(c[3].get<std::string>(), path + ": digest"));
  e.shard = static_cast<std::uint16_t>(ordinal % kStoreStreams);
  e.offset = ordinal++;
  return digest;
}

// An element of xxh3_64 (`at` names it) into e.checksum: "" for a zero chunk, else 16 lowercase hex digits.
Result<void> parse_checksum(const nlohmann::json& sum, const std::string& at, ChunkEntry& e) {
  if (!sum.is_string()) return make_error(at + ": not a string");
  const auto& hex = sum.get_ref<const std::string&>();
  if (e.encoding == Encoding::Zero) {
    if (!hex.empty()) return make_error(at + ": a zero chunk's checksum is \"\"");
  } else if (auto value = parse_checksum_hex(hex)) {
    e.checksum = *value;
  } else {
    return make_error(at + ": not 16 lowercase hex digits");
  }
  return {};
}

// The chunks, with their checksums where the manifest has them, into m.entries and m.digests: one per chunk of
// m.regions (expected_chunks of them), in order.
Result<void> parse_chunks(const ManifestArrays& arrays, std::uint64_t expected_chunks, std::string_view source,
                          Manifest& m) {
  const nlohmann::json& chunks = *arrays.chunks;
  const nlohmann::json* checksums = arrays.checksums;
  if (expected_chunks > kMaxManifestChunks || chunks.size() != expected_chunks)
    return make_error(std::string(source) + ": chunks: lists " + std::to_string(chunks.size()) + " chunks, the "
                      "regions need " + std::to_string(expected_chunks) + " (at most " +
                      std::to_string(kMaxManifestChunks) + ")");
  if (checksums && checksums->size() != chunks.size())
    return make_error(std::string(source) + ": xxh3_64: lists " + std::to_string(checksums->size()) +
                      " checksums for " + std::to_string(chunks.size()) + " chunks");
  m.checksums = checksums != nullptr;
  m.entries.reserve(expected_chunks);
  m.digests.reserve(expected_chunks);
  const auto size = m.header.chunk_size;
  const std::uint64_t max_stored = ZSTD_compressBound(size);
  std::uint32_t region = 0;
  std::uint64_t chunk = 0, ordinal = 0;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    while (chunk == chunks_in(m.regions[region], size)) {
      ++region;
      chunk = 0;
    }
    ChunkEntry e;
    e.region = region;
    e.chunk = chunk;
    e.raw_size = raw_size_of(m.regions[region], chunk, size);
    GPUCKPT_TRY(const cs::Digest digest,
                parse_chunk(chunks[i], std::string(source) + ": chunks[" + std::to_string(i) + "]", max_stored,
                            ordinal, e));
    if (checksums) {
      const std::string at = std::string(source) + ": xxh3_64[" + std::to_string(i) + "]";
      GPUCKPT_TRY_VOID(parse_checksum((*checksums)[i], at, e));
    }
    m.entries.push_back(e);
    m.digests.push_back(digest);
    ++chunk;
  }
  return {};
}

}  // namespace

Result<Manifest> parse_manifest(std::string_view text, std::string_view source) {
  JsonLimits limits;
  limits.max_bytes = kMaxManifestBytes;
  limits.max_depth = 4;
  limits.max_values = 8 * (kMaxManifestChunks + kMaxPagesRegions) + 64;
  GPUCKPT_TRY(const nlohmann::json doc, parse_json(text, source, limits));
  Manifest m;
  GPUCKPT_TRY(const ManifestArrays arrays, parse_manifest_fields(doc, source, m));
  GPUCKPT_TRY(const std::uint64_t expected_chunks, parse_regions(*arrays.regions, source, m));
  GPUCKPT_TRY_VOID(parse_chunks(arrays, expected_chunks, source, m));
  return m;
}

Result<void> write_manifest(int dir_fd, const Manifest& m) {
  return write_file_atomically(dir_fd, manifest_name(m), serialize_manifest(m), true, "the image directory");
}

Result<Manifest> read_manifest(int dir_fd, const std::string& name) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open the GPU memory manifest " + name + ": " + errno_text(errno), errno);
  struct stat st {};
  std::string text;
  Result<void> ok;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ok = make_error("the GPU memory manifest " + name + " is not a regular file", EIO);
  } else if (static_cast<std::uint64_t>(st.st_size) > kMaxManifestBytes) {
    ok = make_error("the GPU memory manifest " + name + " is larger than " + std::to_string(kMaxManifestBytes) +
                    " bytes", EIO);
  } else {
    text.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = make_error("reading the GPU memory manifest " + name + ": " + (n < 0 ? errno_text(errno) : "truncated"),
                        EIO);
        break;
      }
      done += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  GPUCKPT_TRY_VOID(ok);
  auto m = parse_manifest(text, name);
  if (!m) return make_error(m.error().message, EIO);
  return m;
}

Result<void> check_chunks(const Manifest& m, const cs::Store& store, const std::string& manifest) {
  std::size_t bad = 0;
  std::string first;
  std::set<cs::Digest> seen;
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    const ChunkEntry& e = m.entries[i];
    if (e.encoding == Encoding::Zero || !seen.insert(m.digests[i]).second) continue;
    auto header = store.stat(m.digests[i]);
    std::string problem;
    if (!header) {
      problem = header.error().errno_value == ENOENT ? "missing" : header.error().message;
    } else if (header->raw_size != e.raw_size) {
      problem = "holds a chunk of " + std::to_string(header->raw_size) + " bytes, the manifest's is " +
                std::to_string(e.raw_size);
    }
    if (problem.empty()) continue;
    if (bad++ == 0)
      first = "chunk " + m.digests[i].hex() + " (" + describe_chunk(e, m.regions[e.region].start, m.header.chunk_size) +
              ") is expected at " + store.path_of(m.digests[i]).string() + ": " + problem;
  }
  if (bad == 0) return {};
  const std::string what = m.kind == MemoryKind::CpuPages
                               ? "the CPU memory in CRIU's page image pages-" + std::to_string(m.header.vpid) + ".img"
                               : "the GPU memory of pid " + std::to_string(m.header.vpid);
  return make_error("checkpoint " + m.checkpoint + ": " + what + " (" +
                    manifest + ") is not complete in the chunk store " + store.root().string() + ": " + first +
                    (bad > 1 ? "; " + std::to_string(bad - 1) + " more chunk(s) missing or damaged" : "") +
                    ". The dump wrote them to " + (m.store.empty() ? std::string("(unknown)") : m.store) +
                    ". Restore on the node that made the checkpoint, mount the store holding them (a shared volume) "
                    "at GPUCKPT_GPU_STORE's path, `gpuckpt import` the archive `gpuckpt export` made of it, `gpuckpt "
                    "pull-chunks REGISTRY/REPOSITORY:TAG` when it came as a checkpoint image from a registry, or checkpoint "
                    "again with GPUCKPT_GPU_STORE=inline so the archive carries the memory", ENOENT);
}

// --- writing ---------------------------------------------------------------------------------------------------------
KnownChunks::KnownChunks(const Manifest& previous) : checkpoint_(previous.checkpoint) {
  if (!previous.checksums || previous.digests.size() != previous.entries.size()) return;
  std::unordered_set<std::uint64_t> ambiguous;
  for (std::size_t i = 0; i < previous.entries.size(); ++i) {
    const ChunkEntry& e = previous.entries[i];
    if (e.encoding == Encoding::Zero) continue;
    const Chunk chunk{previous.digests[i], e.raw_size};
    auto [at, added] = by_checksum_.try_emplace(e.checksum, chunk);
    if (!added && (at->second.digest != chunk.digest || at->second.raw_size != chunk.raw_size))
      ambiguous.insert(e.checksum);
  }
  for (const std::uint64_t checksum : ambiguous) by_checksum_.erase(checksum);
}

const KnownChunks::Chunk* KnownChunks::find(std::uint64_t xxh3_64, std::uint32_t raw_size) const {
  const auto at = by_checksum_.find(xxh3_64);
  return at != by_checksum_.end() && at->second.raw_size == raw_size ? &at->second : nullptr;
}

Result<std::unique_ptr<StoreWriter>> StoreWriter::create(std::shared_ptr<cs::Store> store, const ImageHeader& header,
                                                         std::vector<Region> regions, std::string checkpoint,
                                                         std::shared_ptr<const KnownChunks> known, MemoryKind kind) {
  if (header.chunk_size == 0 || header.chunk_size > kMaxChunkSize || header.chunk_size % 4096 != 0)
    return make_error("GPU image chunk size " + std::to_string(header.chunk_size) + " is not a multiple of 4 KiB up to " +
                      std::to_string(kMaxChunkSize));
  const std::uint64_t max_regions = kind == MemoryKind::CpuPages ? kMaxPagesRegions : kMaxRegions;
  if (regions.empty() || regions.size() > max_regions)
    return make_error("a memory image needs 1 to " + std::to_string(max_regions) + " regions");
  std::unique_ptr<StoreWriter> w(new StoreWriter());
  w->store_ = std::move(store);
  w->known_ = std::move(known);
  w->manifest_.checkpoint = std::move(checkpoint);
  w->manifest_.store = w->store_->root().string();
  w->manifest_.checksums = true;
  w->manifest_.header = header;
  w->manifest_.regions = std::move(regions);
  w->manifest_.kind = kind;
  w->name_ = manifest_name(w->manifest_);
  for (std::uint32_t r = 0; r < w->manifest_.regions.size(); ++r) {
    const Region& region = w->manifest_.regions[r];
    if (region.length == 0) return make_error("a GPU image region is empty");
    w->first_entry_.push_back(w->manifest_.entries.size());
    for (std::uint64_t c = 0; c < chunks_in(region, header.chunk_size); ++c) {
      ChunkEntry e;
      e.region = r;
      e.chunk = c;
      e.raw_size = raw_size_of(region, c, header.chunk_size);
      w->manifest_.entries.push_back(e);
    }
  }
  if (w->manifest_.entries.size() > kMaxManifestChunks)
    return make_error("GPU memory of " + std::to_string(w->manifest_.entries.size()) + " chunks is more than a manifest "
                      "holds (" + std::to_string(kMaxManifestChunks) + ")");
  w->manifest_.digests.resize(w->manifest_.entries.size());
  w->present_.assign(w->manifest_.entries.size(), 0);
  return w;
}

std::uint64_t StoreWriter::chunk_count(std::uint32_t region) const {
  return chunks_in(manifest_.regions.at(region), manifest_.header.chunk_size);
}

namespace {
using Clock = std::chrono::steady_clock;
Clock::time_point add_time(std::atomic<std::uint64_t>& sum, Clock::time_point since) {
  const auto now = Clock::now();
  sum += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - since).count());
  return now;
}
}  // namespace

// The same bytes in the store already (an earlier checkpoint, another process): nothing to write. Touched, so a
// garbage collection running now keeps it (chunk_gc.h). Its checksum is of this dump's bytes, so a file damaged
// since it was stored fails the restore's check.
bool StoreWriter::reuse_stored(std::size_t i, const cs::Digest& digest, std::uint64_t xxh3_64, StoredChunk& out) {
  ChunkEntry& e = manifest_.entries[i];
  const auto since = Clock::now();
  auto present = store_->stat(digest);
  const bool held = present && present->raw_size == e.raw_size && store_->touch(digest);
  add_time(times_->lookup, since);
  if (!held) return false;
  manifest_.digests[i] = digest;
  e.checksum = xxh3_64;
  e.encoding = static_cast<Encoding>(present->encoding);
  e.stored_size = present->stored_size;
  present_[i] = 1;
  out.reused = true;
  out.stored_bytes = present->stored_size;
  return true;
}

Result<std::optional<StoredChunk>> StoreWriter::add_unchanged(std::uint32_t region, std::uint64_t chunk,
                                                              std::uint64_t xxh3_64, std::uint32_t raw_size) {
  if (region >= manifest_.regions.size() || chunk >= chunk_count(region))
    return make_error("internal: chunk outside the image's regions", EINVAL);
  const std::size_t i = first_entry_[region] + chunk;
  if (raw_size != manifest_.entries[i].raw_size) return make_error("internal: chunk of the wrong size", EINVAL);
  StoredChunk out;
  out.recognised = true;
  // Unchanged since the process's previous checkpoint or restore: the digest that manifest gives these bytes.
  const auto* same = known_ ? known_->find(xxh3_64, raw_size) : nullptr;
  if (same == nullptr || !reuse_stored(i, same->digest, xxh3_64, out)) return std::optional<StoredChunk>();
  return std::optional<StoredChunk>(out);
}

Result<StoredChunk> StoreWriter::add(std::uint32_t region, std::uint64_t chunk, std::span<const std::byte> raw,
                                     ChunkCodec& codec, const Settings& settings, CompressionHistory& history) {
  if (region >= manifest_.regions.size() || chunk >= chunk_count(region))
    return make_error("internal: chunk outside the image's regions", EINVAL);
  const std::size_t i = first_entry_[region] + chunk;
  ChunkEntry& e = manifest_.entries[i];
  if (raw.size() != e.raw_size) return make_error("internal: chunk of the wrong size", EINVAL);
  StoredChunk out;
  if (settings.sparse && all_zero(raw)) {
    e.encoding = Encoding::Zero;
    present_[i] = 1;
    out.zero = true;
    return out;
  }
  auto since = Clock::now();
  const cs::Digest digest = cs::sha256(raw);
  add_time(times_->digest, since);
  manifest_.digests[i] = digest;
  if (reuse_stored(i, digest, checksum(raw), out)) return out;
  since = Clock::now();
  codec.encode(raw, settings, history, e);   // sets encoding, raw and stored size, and the XXH3-64 of `raw`
  since = add_time(times_->encode, since);
  e.region = region;
  e.chunk = chunk;
  cs::ChunkHeader header;
  header.encoding = static_cast<std::uint8_t>(e.encoding);
  header.raw_size = e.raw_size;
  header.stored_size = e.stored_size;
  header.version = cs::layout_version(header.encoding);   // as put() lays it out, for written_bytes
  auto put = store_->put(digest, header, codec.payload());
  add_time(times_->put, since);
  GPUCKPT_TRY_VOID(put);
  present_[i] = 1;
  out.stored_bytes = e.stored_size;
  out.written_bytes = header.file_size();
  return out;
}

StoreWriter::Times StoreWriter::times() const {
  const auto seconds = [](const std::atomic<std::uint64_t>& ns) { return static_cast<double>(ns.load()) / 1e9; };
  return {seconds(times_->digest), seconds(times_->lookup), seconds(times_->encode), seconds(times_->put)};
}

Result<void> StoreWriter::finish(int dir_fd) {
  std::uint64_t ordinal = 0;
  for (std::size_t i = 0; i < manifest_.entries.size(); ++i) {
    ChunkEntry& e = manifest_.entries[i];
    if (!present_[i])
      return make_error("internal: " + describe_chunk(e, manifest_.regions[e.region].start, manifest_.header.chunk_size) +
                        " was never stored for " + name_);
    if (e.encoding != Encoding::Zero) {
      e.shard = static_cast<std::uint16_t>(ordinal % kStoreStreams);
      e.offset = ordinal++;
    }
  }
  // Every chunk touched once more: one a collection removed while this dump ran (it was older than the collector's
  // grace period) fails the dump here rather than leaving a manifest that names a missing chunk.
  std::set<cs::Digest> touched;
  for (std::size_t i = 0; i < manifest_.entries.size(); ++i) {
    if (manifest_.entries[i].encoding == Encoding::Zero || !touched.insert(manifest_.digests[i]).second) continue;
    if (auto ok = store_->touch(manifest_.digests[i]); !ok)
      return make_error("checkpoint " + manifest_.checkpoint + " (" + name_ + "): chunk " + manifest_.digests[i].hex() +
                        " left the chunk store " + store_->root().string() + " while the dump ran (a garbage "
                        "collection with a grace period shorter than the dump?): " + ok.error().message +
                        ". Checkpoint again", ok.error().errno_value);
  }
  // The chunks' names durable before the reference and the manifest that need them exist; the reference (in the
  // store, seen by every node sharing it) before the manifest, so no manifest names chunks nothing holds.
  GPUCKPT_TRY_VOID(store_->sync());
  const std::string text = serialize_manifest(manifest_);
  GPUCKPT_TRY_VOID(store_->put_ref(reference_name(manifest_), text));
  return write_manifest(dir_fd, manifest_);
}

// --- reading ---------------------------------------------------------------------------------------------------------
StoreReader::StoreReader(Manifest manifest, std::shared_ptr<const cs::Store> store, std::string name, ChunkCheck check)
    : manifest_(std::move(manifest)),
      store_(std::move(store)),
      name_(std::move(name)),
      check_(manifest_.checksums ? check : ChunkCheck::Digest) {}

Result<void> StoreReader::read_chunk(std::size_t i, ChunkCodec& codec, std::vector<std::byte>& record_buffer,
                                     std::span<std::byte> out) const {
  const ChunkEntry& e = manifest_.entries.at(i);
  if (out.size() != e.raw_size) return make_error("internal: output size does not match the chunk", EINVAL);
  if (e.encoding == Encoding::Zero) {
    std::memset(out.data(), 0, out.size());
    return {};
  }
  const cs::Digest& digest = manifest_.digests[i];
  auto fail = [&](const std::string& what) {
    return make_error("checkpoint " + manifest_.checkpoint + " (" + name_ + "): " +
                      describe_chunk(e, manifest_.regions[e.region].start, manifest_.header.chunk_size) + ": chunk " +
                      digest.hex() + ": " + what, EIO);
  };
  if (auto ok = store_->read(digest, chunk_receive::kMaxChunkFileBytes, record_buffer); !ok)
    return fail(ok.error().message);
  auto decoded = check_ == ChunkCheck::Checksum ? decode_chunk_file_checksum(record_buffer, e, codec, out)
                                                 : decode_chunk_file(record_buffer, e, digest, codec, out);
  if (auto& ok = decoded; !ok) {
    const bool corrupt = ok.error().errno_value == EBADMSG;
    return fail(store_->path_of(digest).string() + ": " + ok.error().message +
                (corrupt ? ". Remove the file and restore from another copy of the store, or from an inline checkpoint"
                         : ""));
  }
  return {};
}

Result<void> decode_chunk_file(std::span<const std::byte> file, const ChunkEntry& e, const cs::Digest& digest,
                               ChunkCodec& codec, std::span<std::byte> out) {
  if (out.size() != e.raw_size) return make_error("internal: output size does not match the chunk", EINVAL);
  GPUCKPT_TRY(const auto header, check_entry_header(file, e));
  return chunk_receive::decode_chunk_payload(file, header, digest, codec, out);
}

Result<void> decode_chunk_file_checksum(std::span<const std::byte> file, const ChunkEntry& e, ChunkCodec& codec,
                                        std::span<std::byte> out) {
  if (out.size() != e.raw_size) return make_error("internal: output size does not match the chunk", EINVAL);
  GPUCKPT_TRY(const auto header, check_entry_header(file, e));
  if (auto ok = codec.decode_payload(file.subspan(cs::kChunkHeaderSize), static_cast<Encoding>(header.encoding), out);
      !ok)
    return make_error(ok.error().message, EIO);
  if (const auto got = checksum(out); got != e.checksum)
    return make_error("XXH3-64 mismatch: the chunk is corrupt (its content's checksum is " + checksum_hex(got) +
                      ", the manifest says " + checksum_hex(e.checksum) + ")", EBADMSG);
  return {};
}

bool ingest_verified_store(const cs::Store& store, const std::filesystem::path& node_store) {
  const auto normal = [](const std::filesystem::path& p) {   // "a/b/." and "a/b/" are "a/b"
    auto n = p.lexically_normal();
    return n.has_filename() ? n : n.parent_path();
  };
  if (normal(store.root()) != normal(node_store)) return false;
  for (int fd : {store.root_fd(), store.hash_fd()}) {
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return false;
  }
  return true;
}

std::string restore_store_dir(const Settings& settings) {
  return settings.store.empty() ? std::string(cs::kNodeStoreDir) : settings.store;
}

Result<std::unique_ptr<MemorySource>> open_memory_source(int dir_fd, int vpid, const std::string& store_dir,
                                                         const std::string& node_store) {
  const std::string name = manifest_name(vpid);
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    GPUCKPT_TRY(auto reader, ImageReader::open(dir_fd, file_name(vpid)));
    return std::unique_ptr<MemorySource>(std::move(reader));
  }
  GPUCKPT_TRY(auto manifest, read_manifest(dir_fd, name));
  auto store = cs::Store::open(store_dir, false);
  if (!store) return make_error("checkpoint " + manifest.checkpoint + " (" + name + "): " + store.error().message,
                                store.error().errno_value);
  const bool verified = ingest_verified_store(**store, node_store.empty() ? cs::kNodeStoreDir : node_store);
  const ChunkCheck check = verified ? ChunkCheck::Checksum : ChunkCheck::Digest;
  return std::unique_ptr<MemorySource>(std::make_unique<StoreReader>(
      std::move(manifest), std::shared_ptr<const cs::Store>(std::move(*store)), name, check));
}

// --- inspect -----------------------------------------------------------------------------------------------------------
ManifestSummary summarize_manifest(Manifest m) {
  ManifestSummary s;
  for (const ChunkEntry& e : m.entries) {
    s.memory_bytes += e.raw_size;
    s.stored_bytes += e.stored_size;
    if (e.encoding == Encoding::Zero) ++s.zero_chunks;
    if (e.encoding == Encoding::Raw) ++s.raw_chunks;
    if (e.encoding == Encoding::Zstd) ++s.zstd_chunks;
  }
  s.manifest = std::move(m);
  return s;
}

std::string format_manifest_summary(const std::string& name, const ManifestSummary& s) {
  const Manifest& m = s.manifest;
  if (m.kind == MemoryKind::CpuPages) {
    // Thousands of small file ranges: their count says enough.
    std::string out = name + ": CPU pages manifest v" + std::to_string(kManifestVersion) + " of checkpoint " +
                      m.checkpoint + ", CRIU page image pages-" + std::to_string(m.header.vpid) + ".img, " +
                      std::to_string(m.regions.size()) + " ranges of 2 MiB-aligned virtual memory\n";
    out += "  chunks: " + std::to_string(m.entries.size()) + " (" + std::to_string(s.zero_chunks) + " zero, " +
           std::to_string(s.zstd_chunks) + " zstd, " + std::to_string(s.raw_chunks) + " raw), in the chunk store " +
           m.store + "\n";
    out += "  memory " + mib(s.memory_bytes) + ", stored " + mib(s.stored_bytes) + " (outside this archive)\n";
    return out;
  }
  std::string out = name + ": GPU memory manifest v" + std::to_string(kManifestVersion) + " of checkpoint " +
                    m.checkpoint + ", pid " + std::to_string(m.header.vpid) + " (dumped as " +
                    std::to_string(m.header.dump_pid) + "), chunk " + mib(m.header.chunk_size) + "\n";
  for (const Region& r : m.regions) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  region 0x%llx-0x%llx (%s)\n", static_cast<unsigned long long>(r.start),
                  static_cast<unsigned long long>(r.start + r.length), mib(r.length).c_str());
    out += buf;
  }
  out += "  chunks: " + std::to_string(m.entries.size()) + " (" + std::to_string(s.zero_chunks) + " zero, " +
         std::to_string(s.zstd_chunks) + " zstd, " + std::to_string(s.raw_chunks) + " raw), in the chunk store " +
         m.store + "\n";
  out += "  memory " + mib(s.memory_bytes) + ", stored " + mib(s.stored_bytes) + " (outside this archive)\n";
  return out;
}

}  // namespace gpuckpt::gpu_image
