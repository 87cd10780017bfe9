// Chunk files that come from outside this node's chunk store: another agent's PUT /v1/chunks/<digest>
// (node/chunk_transfer.h), an exported archive's carried chunks (checkpoint_export.h), a registry's blob. Each is
// a chunk in the version-1 (wire) form Store::read returns (chunk_store.h: header + payload, already compressed,
// never recompressed), whatever layout the sender's store keeps it in, and untrusted:
// it enters a store only once its header is sound, its sizes agree, and its payload decodes (zstd never beyond the
// header's raw size) to bytes whose SHA-256 is the digest it is sent under. The same checks read a store's own
// chunk back (gpu_manifest.h decode_chunk_file): one implementation of "is this file the chunk it claims to be".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_image.h"
#include "base/result.h"

namespace gpuckpt::chunk_receive {

// The largest chunk file the format allows: the header and a payload of at most the largest chunk (a raw chunk is
// its bytes; a zstd chunk is kept only when compression paid, so it is smaller).
inline constexpr std::uint64_t kMaxChunkFileBytes = chunk_store::kChunkHeaderSize + gpu_image::kMaxChunkSize;

// The header of `file` when the file can be the chunk it says: the header decodes (magic, version, checksum) and
// names the version-1 (wire) form, the encoding is raw or zstd, the raw size is 1..kMaxChunkSize, the payload is exactly stored_size bytes and a raw
// payload is raw_size bytes. The error (errno EIO) says which; the caller names the file and the chunk.
Result<chunk_store::ChunkHeader> check_chunk_header(std::span<const std::byte> file);

// The payload of `file` (whose header check_chunk_header accepted) decoded into `out` (exactly header.raw_size
// bytes: zstd output is bounded by it) and its SHA-256 compared with `digest`. Errors: EIO when it does not decode,
// EBADMSG when the content hashes to another digest (the message names that one).
Result<void> decode_chunk_payload(std::span<const std::byte> file, const chunk_store::ChunkHeader& header,
                                  const chunk_store::Digest& digest, gpu_image::ChunkCodec& codec,
                                  std::span<std::byte> out);

// Both checks on a file whose header nothing else vouches for; `raw` is scratch (resized to the raw size).
Result<chunk_store::ChunkHeader> verify_chunk_file(std::span<const std::byte> file, const chunk_store::Digest& digest,
                                                   gpu_image::ChunkCodec& codec, std::vector<std::byte>& raw);

struct ReceivedChunk {
  bool present = false;   // the store had it already: touched, nothing written
  chunk_store::ChunkHeader header;   // as the store now holds it
};

// Verifies `file` as the chunk `digest` (verify_chunk_file) and puts it into `store` under its name (written under
// a temporary name, fsync'ed, renamed: chunk_store.h), unless the store has that chunk already: then it is touched
// and stays as it is (a chunk stored in another encoding stays too: the store's checkpoints name its file as it is).
// Either way the chunk's mtime is now, so a garbage collection keeps it for its grace period (chunk_gc.h): time for
// the reference that keeps it for good. The rename is not made durable here: call store.sync() before writing a
// reference that needs it. Errors: EBADMSG when the file is not that chunk (the message says why, nothing of it
// entered the store); others from the store (ENOSPC, EIO) as they came.
Result<ReceivedChunk> receive_chunk(chunk_store::Store& store, const chunk_store::Digest& digest,
                                    std::span<const std::byte> file, gpu_image::ChunkCodec& codec,
                                    std::vector<std::byte>& raw);

}  // namespace gpuckpt::chunk_receive
