// A store-backed checkpoint's GPU memory through a registry (docs/formats.md "Chunks in a registry"): its checkpoint
// image holds only the manifests, its chunks are files in the node's chunk store. Pushed beside the image, each chunk
// store file (header + payload, as stored: never recompressed) is one blob, digest the SHA-256 of the file, so the
// registry deduplicates: a chunk it holds already (HEAD) is not sent again. An OCI artifact manifest lists them as
// layers, each annotated with the chunk's own digest, its subject the checkpoint image's manifest, under the tag
// TAG.gpuckpt-chunks (the image's tag and a suffix: Debian's docker-registry 2.8 has no referrers API). A checkpoint
// of more than kMaxChunkLayers chunks takes several such manifests ("pages"): TAG.gpuckpt-chunks, then
// TAG.gpuckpt-chunks.1, ...; the first names how many there are.
//
// Pulled on another node (POST /v1/chunk-pulls, `gpuckpt chunks pull`): the manifests read (bounded), the chunks
// the store lacks downloaded in parallel, each blob checked against its digest and then as the store requires (a
// sound header, a payload decoding to bytes whose SHA-256 is the chunk's digest) before it enters the store; the
// chunks present are touched. Nothing in the registry's answers is trusted: digests are parsed as the store parses
// them, sizes and counts bounded, every request ends at its deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpumem/chunk_store.h"
#include "base/result.h"
#include "node/registry_client.h"

namespace gpuckpt::node {

inline constexpr const char* kChunksArtifactType = "application/vnd.gpuckpt.chunks.v1";
inline constexpr const char* kChunkBlobMediaType = "application/vnd.gpuckpt.chunk.v1";
inline constexpr const char* kChunkDigestAnnotation = "io.gpuckpt.chunk.digest";
inline constexpr const char* kChunkPagesAnnotation = "io.gpuckpt.chunks.pages";
inline constexpr const char* kChunksTagSuffix = ".gpuckpt-chunks";
// Layers in one artifact manifest: 8192 descriptors are about 3 MiB of JSON, under the 4 MiB distribution accepts
// for a manifest (16 GiB of GPU memory at the default 2 MiB chunks).
inline constexpr std::size_t kMaxChunkLayers = 8192;
inline constexpr std::size_t kMaxChunkPages = 64;
inline constexpr std::size_t kMaxChunksManifestBytes = 4 << 20;
inline constexpr std::size_t kMaxChunkStreams = 32;

// The tag of page `page` of the chunks of the image tagged `tag`; an error when the tag is too long for one (128).
Result<std::string> chunks_tag(const std::string& tag, std::size_t page);

// One chunk as a blob: the chunk's digest (of its raw bytes), the blob's (of the chunk file) and the file's size.
struct ChunkBlob {
  chunk_store::Digest chunk;
  std::string blob_digest;   // sha256:HEX
  std::uint64_t size = 0;
};

struct ChunksPage {
  std::vector<ChunkBlob> chunks;
  std::size_t pages = 1;      // how many pages the chunks take (read from the first page)
  std::string subject;        // the checkpoint image's manifest digest
};

// The artifact manifest of one page. `subject_size`: the bytes of the checkpoint image's manifest.
std::string chunks_manifest(const std::vector<ChunkBlob>& chunks, const std::string& subject_digest,
                            std::uint64_t subject_size, std::size_t pages);
// An artifact manifest read from a registry (untrusted; fed to fuzz/registry_fuzz): every field checked, every
// chunk's size at most a chunk file's largest, at most kMaxChunkLayers, no chunk twice. The error names `source`.
Result<ChunksPage> parse_chunks_manifest(std::string_view text, std::string_view source);

struct ChunkPushReport {
  std::string artifact;         // REPOSITORY:TAG.gpuckpt-chunks@sha256:... (the first page)
  std::size_t pages = 0;
  std::size_t chunks = 0;       // distinct chunks the checkpoint names
  std::size_t uploaded = 0;     // sent: the registry lacked them
  std::uint64_t uploaded_bytes = 0;
  std::size_t present = 0;      // the registry had them
  nlohmann::json to_json() const;
};

// Pushes `chunks` from `store` as blobs (options.chunk_streams at a time) and their artifact manifests naming the
// image `tag` (its manifest `subject_digest`, `subject_size` bytes) as subject. A chunk missing from the store
// fails the push, naming it.
Result<ChunkPushReport> push_chunks(const RegistryOptions& options, const chunk_store::Store& store,
                                    const std::set<chunk_store::Digest>& chunks, const std::string& tag,
                                    const std::string& subject_digest, std::uint64_t subject_size);

struct ChunkPullReport {
  std::string image;             // HOST/PATH:TAG as asked
  std::string subject;           // the checkpoint image's manifest digest the chunks belong to
  std::size_t pages = 0;
  std::size_t chunks = 0;        // the chunks the artifact lists
  std::size_t added = 0;         // downloaded, checked and put into the store
  std::uint64_t added_bytes = 0;
  std::size_t present = 0;       // the store had them: touched, not downloaded
  nlohmann::json to_json() const;
};

// The image reference a pull names: HOST[:PORT]/PATH:TAG (no digest: the chunks are found by the tag).
struct ImageName {
  std::string repository;   // HOST[:PORT]/PATH
  std::string tag;
};
Result<ImageName> parse_image_name(const std::string& image);

// Pulls the chunks of `image` into `store`. `configured` is the agent's image_registry: its timeouts, streams and
// plain_http apply; its credentials only when `image` is in the same registry host (never sent to another).
Result<ChunkPullReport> pull_chunks(const RegistryOptions& configured, const std::string& image,
                                    chunk_store::Store& store);

}  // namespace gpuckpt::node
