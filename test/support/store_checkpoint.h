// A store-backed checkpoint made for tests the way the plugin makes one: two processes' GPU memory written into a
// chunk store by StoreWriter, their manifests in a podman-shaped archive (config.dump, spec.dump, checkpoint/).
// Pid 7 has a random chunk (stored raw), a compressible one (zstd), a zero one and one it shares with pid 8; pid 8 has
// that one and another random one: 4 distinct stored chunks.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "test/support/store_checkpoint_writer.h"

namespace gpuckpt::test {

inline constexpr std::size_t kStoreCheckpointChunks = 4;   // distinct stored chunks of store_checkpoint()

inline std::shared_ptr<chunk_store::Store> open_store(const std::filesystem::path& root) {
  auto opened = chunk_store::Store::open(root, true);
  REQUIRE(opened);
  return std::shared_ptr<chunk_store::Store>(std::move(*opened));
}

inline StoreCheckpoint store_checkpoint(const std::shared_ptr<chunk_store::Store>& store,
                                        const std::filesystem::path& dir) {
  auto c = write_store_checkpoint(
      store, dir,
      {{7, {random_chunk(1), compressible_chunk(2), std::vector<std::byte>(kStoreChunk), random_chunk(3)}},
       {8, {random_chunk(3), random_chunk(4)}}});
  REQUIRE(c);
  return std::move(*c);
}

// What a restore does: every chunk of every manifest in `archive` read from `store` (decoded and hashed) and
// compared with the memory the checkpoint was made of.
inline void check_restorable(const StoreCheckpoint& c, const std::filesystem::path& archive,
                             const std::shared_ptr<chunk_store::Store>& store) {
  namespace gi = gpu_image;
  auto info = inspect_checkpoint_archive(archive, ArchiveLimits{});
  REQUIRE(info);
  REQUIRE(info->memory_manifests.size() == c.memory.size());
  for (const auto& [vpid, chunks] : c.memory) {
    auto manifest = gi::parse_manifest(info->memory_manifests.at(gi::manifest_name(vpid)), "test");
    REQUIRE(manifest);
    CHECK(manifest->checkpoint == c.id);
    REQUIRE(gi::check_chunks(*manifest, *store, "test"));
    gi::StoreReader reader(*manifest, store, gi::manifest_name(vpid));
    gi::ChunkCodec codec(kStoreChunk);
    std::vector<std::byte> record, out(kStoreChunk);
    REQUIRE(reader.entries().size() == chunks.size());
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      auto read = reader.read_chunk(i, codec, record, out);
      INFO("pid " << vpid << " chunk " << i);
      REQUIRE(read);
      CHECK(out == chunks[i]);
    }
  }
}

}  // namespace gpuckpt::test
