// A content-addressed store of GPU memory chunks (docs/formats.md "Chunk store"): each chunk is one file named by
// the SHA-256 of its raw bytes, so a chunk already present (the same weights checkpointed again, two replicas'
// identical memory) is never written twice. The store is a directory: node-local under the agent's state dir
// (root-only), or a shared filesystem (an RWX volume: NFS, CephFS) mounted at the same path on every node, so
// another node restores without copying.
//
//   <root>/sha256/<first two hex digits>/<64 hex digits>      one chunk: header (32 bytes) | [zeros to 4096] | payload
//   <root>/refs/<checkpoint>-<vpid>.json                        a reference: the manifest of a kept checkpoint
//   <root>/refs/<checkpoint>-pages-<id>.json                    the same for one of its CPU page images
//   <root>/trash/<64 hex digits>                                a chunk garbage collection is deleting (chunk_gc.h)
//
// A chunk is kept while a reference names it (refs live in the store, so every node sharing it sees them) or while
// it is young: written or reused (its mtime touched) within the collector's grace period, which covers a dump
// whose manifest is not referenced yet. A chunk found in trash/ is still whole: any reader or writer that misses
// it at its name moves it back (rescue), so a collection killed mid-way loses nothing.
//
// A chunk file is written under a temporary name beside its final one, fsync'ed and renamed: a file with a
// digest's name is complete. Digests are the only thing that ever forms a path here, and only after
// parse_digest accepted them (exactly 64 lowercase hex digits): a hostile manifest cannot name another file.
//
// Two file layouts: version 1 (payload right after the header) holds zstd chunks, and raw chunks written before
// version 2; version 2 (raw chunks only) puts the payload at 4096, so a restore can map the file's payload into the
// restored process (mmap offsets are page multiples). Whatever the file's layout, read() returns a chunk in the
// version-1 form, the wire form every transfer, export archive and registry blob carries.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpuckpt::chunk_store {

inline constexpr std::size_t kDigestBytes = 32;
inline constexpr std::size_t kDigestHexChars = 2 * kDigestBytes;
inline constexpr const char* kHashName = "sha256";
// The node-local store: under the agent's state dir (node/config.h state_dir), root-only.
inline constexpr const char* kNodeStoreDir = "/var/lib/gpuckpt/chunks";

struct Digest {
  std::array<std::uint8_t, kDigestBytes> bytes{};
  std::string hex() const;
  bool operator==(const Digest&) const = default;
  auto operator<=>(const Digest&) const = default;
};

// Exactly `length` characters, each 0-9 or a-f: the one spelling of hex that digests, checkpoint ids and
// checksums from manifests and requests may have before they are used.
bool is_lower_hex(std::string_view text, std::size_t length);

// SHA-256 (OpenSSL's libcrypto, linked statically into the plugin: it needs no libcrypto on the node).
Digest sha256(std::span<const std::byte> data);
// Exactly 64 lowercase hex digits, else an error naming `what` (a manifest field, a file name).
Result<Digest> parse_digest(std::string_view hex, std::string_view what);

// renameat2(RENAME_NOREPLACE) of `from` to `to`, with its result and errno. Where the filesystem takes no rename
// flags (EINVAL: NFS, FUSE filesystems such as sshfs), link(2) then unlink(2) of `from`, which is as atomic about
// the new name (EEXIST when `to` exists) but leaves both names for a moment: harmless for a chunk, whose every
// name holds the same bytes.
int rename_noreplace(int from_dir_fd, const char* from, int to_dir_fd, const char* to);

// A reference's name: <checkpoint id (32 lowercase hex)>-<vpid>.json. Names read from the store are checked with
// is_ref_name before they are opened.
std::string ref_name(std::string_view checkpoint, int vpid);
// The reference of one of a checkpoint's CPU page images: <checkpoint id>-pages-<pages id>.json.
std::string pages_ref_name(std::string_view checkpoint, int pages_id);
bool is_ref_name(std::string_view name);   // either form
inline constexpr const char* kRefsDir = "refs";
inline constexpr const char* kTrashDir = "trash";

// --- a chunk file's header -----------------------------------------------------------------------------------------
inline constexpr std::size_t kChunkHeaderSize = 32;
inline constexpr std::uint32_t kChunkVersion = 2;              // the newest layout this gpuckpt reads
inline constexpr std::uint32_t kPackedChunkVersion = 1;        // payload at kChunkHeaderSize: zstd, old raw, wire form
inline constexpr std::uint32_t kAlignedChunkVersion = 2;       // raw only, payload at kAlignedPayloadOffset
inline constexpr std::uint64_t kAlignedPayloadOffset = 4096;
struct ChunkHeader {
  std::uint8_t encoding = 0;       // gpu_image::Encoding: Raw or Zstd
  std::uint32_t raw_size = 0;
  std::uint32_t stored_size = 0;   // payload bytes
  // The layout: decode_header sets it from the bytes. Store::put writes the layout the encoding calls for
  // (layout_version), whatever this says.
  std::uint32_t version = kPackedChunkVersion;
  std::uint64_t payload_offset() const {
    return version == kAlignedChunkVersion ? kAlignedPayloadOffset : kChunkHeaderSize;
  }
  std::uint64_t file_size() const { return payload_offset() + stored_size; }
};
// The layout Store::put writes a chunk of this encoding in: aligned for raw (mappable), packed otherwise.
std::uint32_t layout_version(std::uint8_t encoding);
// The header in `h.version`'s layout.
std::array<std::byte, kChunkHeaderSize> encode_header(const ChunkHeader& h);
// The error says what is wrong (magic, version, header checksum, an aligned layout for a chunk that is not raw).
Result<ChunkHeader> decode_header(std::span<const std::byte> bytes);

// A chunk whose payload the caller may map (MAP_PRIVATE of `fd` at header.payload_offset(), a multiple of 4096).
struct MappableChunk {
  int fd = -1;   // O_RDONLY | O_CLOEXEC; the caller closes it
  ChunkHeader header;
};

// --- the store -----------------------------------------------------------------------------------------------------
class Store {
 public:
  // Opens the store at `root` (an absolute path). With `create`, makes it (mode 0700, parents too) when absent.
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& root, bool create);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& root() const { return root_; }
  std::string relative_path(const Digest& d) const;           // sha256/ab/ab...
  std::filesystem::path path_of(const Digest& d) const { return root_ / relative_path(d); }

  // The header of the chunk `d` when a complete file is there (its size matches its header); nullopt-like error
  // with errno ENOENT when there is none, another errno when the file is there but unusable. A chunk a collection
  // had moved to trash/ is moved back first.
  Result<ChunkHeader> stat(const Digest& d) const;
  // Marks the chunk as used now (its mtime), so a collection running at the same time keeps it; ENOENT when it is
  // gone (then the caller writes it again).
  Result<void> touch(const Digest& d) const;
  // Writes the chunk (header + payload, in layout_version(header.encoding)'s layout) under a temporary name, fsyncs
  // it and renames it to its digest's name. Thread-safe; files are 0600. The caller decides whether it is present
  // first (stat).
  Result<void> put(const Digest& d, const ChunkHeader& header, std::span<const std::byte> payload);
  // fsync of every directory put() renamed into since the last call: after it the new names are durable.
  Result<void> sync();
  // The chunk in the version-1 form (header | payload, kChunkHeaderSize + stored_size bytes) into `out`, whatever
  // the file's layout, when that is at most `max_size` bytes (what the caller can accept: the size a header just
  // read says, or the largest chunk file).
  Result<void> read(const Digest& d, std::uint64_t max_size, std::vector<std::byte>& out) const;
  // The open chunk file when its payload can be mapped: a raw chunk in the aligned layout. Any other chunk (zstd, a
  // raw one written before the aligned layout) is an error with errno ENOTSUP: the caller copies it (read()). Other
  // failures are stat's.
  Result<MappableChunk> open_mappable(const Digest& d) const;

  // --- references: one file per kept checkpoint's process, the manifest naming its chunks -------------------------
  // `name` is a reference name (ref_name); the file is written atomically (temporary name, fsync, rename, fsync) and
  // never replaces one that is there: a reference with the same bytes is left as it is (false: writing the same
  // checkpoint again is idempotent), one with other bytes is refused with EEXIST naming the checkpoint and process
  // (replacing it would leave the kept checkpoint's chunks to the next garbage collection). True when it was made.
  Result<bool> put_ref(const std::string& name, std::string_view text);
  // put_ref's refusal without writing anything: EEXIST when `name` holds other bytes than `text`.
  Result<void> check_ref(const std::string& name, std::string_view text) const;
  // Removing a reference that is not there is not an error (false). With `only_if`, a reference whose bytes are
  // others is left as it is (false): what removes the references of an archive it deletes passes that archive's
  // manifest, so an archive that merely claims a kept checkpoint's id and process cannot take its reference along.
  Result<bool> remove_ref(const std::string& name, std::optional<std::string_view> only_if = std::nullopt);
  // The names of every reference, sorted; entries that are not reference names are left out.
  Result<std::vector<std::string>> list_refs() const;
  // A reference's text, at most `max_bytes`.
  Result<std::string> read_ref(const std::string& name, std::size_t max_bytes) const;

  int root_fd() const { return root_fd_; }
  int hash_fd() const { return hash_fd_; }
  // <root>/refs and <root>/trash, made when absent.
  Result<int> open_refs_dir() const;
  Result<int> open_trash_dir() const;

 private:
  Store() = default;
  Result<int> fanout_dir(const Digest& d);   // <root>/sha256/ab, created on first use
  // Moves trash/<hex> back to sha256/ab/<hex> unless a chunk is there already: true when it did.
  bool rescue(const Digest& d) const;
  // The chunk file open, a regular file whose size matches its header, with that header; stat's errors.
  struct OpenChunk;
  Result<OpenChunk> open_chunk(const Digest& d) const;
  std::filesystem::path root_;
  int root_fd_ = -1;
  int hash_fd_ = -1;   // <root>/sha256
  std::mutex mutex_;
  std::set<std::string> unsynced_dirs_;
};

}  // namespace gpuckpt::chunk_store
