#include "gpumem/chunk_receive.h"

#include <cerrno>
#include <string>

namespace gpuckpt::chunk_receive {

namespace cs = chunk_store;
using gpu_image::Encoding;

Result<cs::ChunkHeader> check_chunk_header(std::span<const std::byte> file) {
  auto header = cs::decode_header(file);
  if (!header) return make_error(header.error().message, EIO);
  // The aligned layout is a store's on-disk form only: what is sent, carried or pushed is read() in the packed form.
  if (header->version != cs::kPackedChunkVersion)
    return make_error("its header names chunk format version " + std::to_string(header->version) + ", a store's "
                      "on-disk layout; a chunk sent, carried or pushed is in version 1's form", EIO);
  const auto encoding = static_cast<Encoding>(header->encoding);
  if (encoding != Encoding::Raw && encoding != Encoding::Zstd)
    return make_error("its header names encoding " + std::to_string(header->encoding) + ", not raw (0) or zstd (1)",
                      EIO);
  if (header->raw_size == 0 || header->raw_size > gpu_image::kMaxChunkSize)
    return make_error("its header says " + std::to_string(header->raw_size) + " raw bytes, a chunk holds 1 to " +
                      std::to_string(gpu_image::kMaxChunkSize), EIO);
  if (file.size() != cs::kChunkHeaderSize + std::uint64_t{header->stored_size})
    return make_error("it has " + std::to_string(file.size()) + " bytes, its header says " +
                      std::to_string(cs::kChunkHeaderSize + std::uint64_t{header->stored_size}), EIO);
  if (encoding == Encoding::Raw && header->stored_size != header->raw_size)
    return make_error("its header says " + std::to_string(header->stored_size) + " stored bytes for a raw chunk of " +
                      std::to_string(header->raw_size), EIO);
  return *header;
}

Result<void> decode_chunk_payload(std::span<const std::byte> file, const cs::ChunkHeader& header,
                                  const cs::Digest& digest, gpu_image::ChunkCodec& codec, std::span<std::byte> out) {
  if (out.size() != header.raw_size) return make_error("internal: output size does not match the chunk", EINVAL);
  if (auto ok = codec.decode_payload(file.subspan(cs::kChunkHeaderSize), static_cast<Encoding>(header.encoding), out);
      !ok)
    return make_error(ok.error().message, EIO);
  if (const auto got = cs::sha256(out); got != digest)
    return make_error("SHA-256 mismatch: the chunk is corrupt (its content hashes to " + got.hex() + ")", EBADMSG);
  return {};
}

Result<cs::ChunkHeader> verify_chunk_file(std::span<const std::byte> file, const cs::Digest& digest,
                                          gpu_image::ChunkCodec& codec, std::vector<std::byte>& raw) {
  GPUCKPT_TRY(const auto header, check_chunk_header(file));
  raw.resize(header.raw_size);
  GPUCKPT_TRY_VOID(decode_chunk_payload(file, header, digest, codec, raw));
  return header;
}

Result<ReceivedChunk> receive_chunk(cs::Store& store, const cs::Digest& digest, std::span<const std::byte> file,
                                    gpu_image::ChunkCodec& codec, std::vector<std::byte>& raw) {
  auto header = verify_chunk_file(file, digest, codec, raw);
  if (!header)
    return make_error("chunk " + digest.hex() + " is refused: " + header.error().message + "; nothing of it entered "
                      "the chunk store " + store.root().string(), EBADMSG);
  // stat reads the present file's header: one cut short or foreign is replaced by this verified one.
  if (auto present = store.stat(digest); present && present->raw_size == header->raw_size && store.touch(digest))
    return ReceivedChunk{true, *present};
  GPUCKPT_TRY_VOID(store.put(digest, *header, file.subspan(cs::kChunkHeaderSize)));
  return ReceivedChunk{false, *header};
}

}  // namespace gpuckpt::chunk_receive
