// One chunk file as it arrives (a chunk store on a shared volume another node writes, a chunk an exported archive
// carries): gpu_image::decode_chunk_file, its header, its payload decoded and hashed. The input is
//   32 bytes: the digest the manifest names | the chunk file (header + payload)
// and the manifest's entry is what the header says when it decodes (so the payload's decoding runs), else a 4 KiB
// raw chunk (so the header's refusals run). An accepted chunk must hash to its digest and, stored raw, be its payload.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gpumem/gpu_manifest.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;
namespace cs = chunk_store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < cs::kDigestBytes) return 0;
  cs::Digest digest;
  std::memcpy(digest.bytes.data(), data, cs::kDigestBytes);
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data) + cs::kDigestBytes,
                                        size - cs::kDigestBytes);
  gpu_image::ChunkEntry entry;
  entry.raw_size = 4096;
  entry.stored_size = 4096;
  if (auto header = cs::decode_header(file)) {
    if (header->raw_size > (1u << 20)) return 0;   // larger chunks cost time, not paths
    entry.encoding = static_cast<gpu_image::Encoding>(header->encoding);
    entry.raw_size = header->raw_size;
    entry.stored_size = header->stored_size;
  }
  std::vector<std::byte> raw(entry.raw_size);
  gpu_image::ChunkCodec codec(gpu_image::kMaxChunkSize);
  if (!gpu_image::decode_chunk_file(file, entry, digest, codec, raw)) return 0;
  const bool hashes = cs::sha256(raw) == digest;
  const bool raw_is_payload = entry.encoding != gpu_image::Encoding::Raw ||
                              std::equal(raw.begin(), raw.end(), file.begin() + cs::kChunkHeaderSize, file.end());
  if (!hashes || !raw_is_payload) {
    std::fprintf(stderr, "chunk_file_fuzz: an accepted chunk %s\n",
                 hashes ? "stored raw is not its payload" : "does not hash to its digest");
    std::abort();
  }
  return 0;
}
