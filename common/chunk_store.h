// A content-addressed store of GPU memory chunks (docs/formats.md "Chunk store"): each chunk is one file named by
// the SHA-256 of its raw bytes, so a chunk already present (the same weights checkpointed again, two replicas'
// identical memory) is never written twice. The store is a directory: node-local under the agent's state dir
// (root-only), or a shared filesystem (an RWX volume: NFS, CephFS) mounted at the same path on every node, so
// another node restores without copying.
//
//   <root>/sha256/<first two hex digits>/<64 hex digits>      one chunk: header (32 bytes) | payload
//
// A chunk file is written under a temporary name beside its final one, fsync'ed and renamed: a file with a
// digest's name is complete. Digests are the only thing that ever forms a path here, and only after
// parse_digest accepted them (exactly 64 lowercase hex digits): a hostile manifest cannot name another file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

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

// SHA-256 (OpenSSL's libcrypto, linked statically into the plugin: it needs no libcrypto on the node).
Digest sha256(std::span<const std::byte> data);
// Exactly 64 lowercase hex digits, else an error naming `what` (a manifest field, a file name).
Result<Digest> parse_digest(std::string_view hex, std::string_view what);

// --- a chunk file's header -----------------------------------------------------------------------------------------
inline constexpr std::size_t kChunkHeaderSize = 32;
inline constexpr std::uint32_t kChunkVersion = 1;
struct ChunkHeader {
  std::uint8_t encoding = 0;       // gpu_image::Encoding: Raw or Zstd
  std::uint32_t raw_size = 0;
  std::uint32_t stored_size = 0;   // payload bytes after the header
};
std::array<std::byte, kChunkHeaderSize> encode_header(const ChunkHeader& h);
// The error says what is wrong (magic, version, header checksum).
Result<ChunkHeader> decode_header(std::span<const std::byte> bytes);

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
  // with errno ENOENT when there is none, another errno when the file is there but unusable.
  Result<ChunkHeader> stat(const Digest& d) const;
  // Writes the chunk (header + payload) under a temporary name, fsyncs it and renames it to its digest's name.
  // Thread-safe; files are 0600. The caller decides whether it is present first (stat).
  Result<void> put(const Digest& d, const ChunkHeader& header, std::span<const std::byte> payload);
  // fsync of every directory put() renamed into since the last call: after it the new names are durable.
  Result<void> sync();
  // The whole chunk file (header + payload) into `out`; `expected_size` is what the manifest says it holds.
  Result<void> read(const Digest& d, std::uint64_t expected_size, std::vector<std::byte>& out) const;

 private:
  Store() = default;
  Result<int> fanout_dir(const Digest& d);   // <root>/sha256/ab, created on first use
  std::filesystem::path root_;
  int root_fd_ = -1;
  int hash_fd_ = -1;   // <root>/sha256
  std::mutex mutex_;
  std::set<std::string> unsynced_dirs_;
};

}  // namespace gpuckpt::chunk_store
