// A store-backed checkpoint made for tests the way the plugin makes one: two processes' GPU memory written into a
// chunk store by StoreWriter, their manifests in a podman-shaped archive (config.dump, spec.dump, checkpoint/).
// Pid 7 has a random chunk (stored raw), a compressible one (zstd), a zero one and one it shares with pid 8; pid 8 has
// that one and another random one: 4 distinct stored chunks.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/chunk_store.h"
#include "common/directory_archive.h"
#include "common/gpu_manifest.h"
#include "test/temp_dir.h"

namespace gpuckpt::test {

inline constexpr std::size_t kStoreChunk = 64u << 10;
inline constexpr std::size_t kStoreCheckpointChunks = 4;   // distinct stored chunks of store_checkpoint()

inline std::vector<std::byte> random_chunk(unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(kStoreChunk);
  for (std::size_t i = 0; i < kStoreChunk; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

inline std::vector<std::byte> compressible_chunk(unsigned seed) {
  std::vector<std::byte> out(kStoreChunk);
  for (std::size_t i = 0; i < kStoreChunk; ++i) out[i] = static_cast<std::byte>((i / 64 + seed) % 5);
  return out;
}

inline std::shared_ptr<chunk_store::Store> open_store(const std::filesystem::path& root) {
  auto opened = chunk_store::Store::open(root, true);
  REQUIRE(opened);
  return std::shared_ptr<chunk_store::Store>(std::move(*opened));
}

struct StoreCheckpoint {
  std::string id = gpu_image::new_checkpoint_id();
  std::map<int, std::vector<std::vector<std::byte>>> memory;   // by vpid: its chunks, in order
  std::filesystem::path archive;                              // <dir>/ck.tar
};

inline StoreCheckpoint store_checkpoint(const std::shared_ptr<chunk_store::Store>& store,
                                        const std::filesystem::path& dir) {
  namespace gi = gpu_image;
  StoreCheckpoint c;
  c.memory[7] = {random_chunk(1), compressible_chunk(2), std::vector<std::byte>(kStoreChunk), random_chunk(3)};
  c.memory[8] = {random_chunk(3), random_chunk(4)};
  const std::filesystem::path images = dir / "tree" / "checkpoint";
  std::filesystem::create_directories(images);
  std::ofstream(images / "inventory.img") << "criu inventory";
  std::ofstream(images / "pages-1.img") << std::string(8192, 'p');
  TempDir manifests("gpuckpt-store-checkpoint");
  for (const auto& [vpid, chunks] : c.memory) {
    gi::ImageHeader header;
    header.vpid = vpid;
    header.dump_pid = 1000 + vpid;
    header.chunk_size = kStoreChunk;
    auto writer = gi::StoreWriter::create(store, header, {{0x7f0000000000, chunks.size() * kStoreChunk}}, c.id);
    REQUIRE(writer);
    gi::ChunkCodec codec(kStoreChunk);
    gi::CompressionHistory history;
    gi::Settings settings;
    for (std::size_t i = 0; i < chunks.size(); ++i) REQUIRE((*writer)->add(0, i, chunks[i], codec, settings, history));
    REQUIRE((*writer)->finish(manifests.fd));
    std::filesystem::copy_file(manifests.path / gi::manifest_name(vpid), images / gi::manifest_name(vpid));
  }
  c.archive = dir / "ck.tar";
  REQUIRE(pack_tar({{"config.dump", {}, R"({"name":"train","id":"0123abcd","rootfsImageName":"img"})"},
                    {"spec.dump", {}, R"({"annotations":{"io.container.manager":"libpod"}})"},
                    {"checkpoint", images, {}}},
                   c.archive));
  return c;
}

// What a restore does: every chunk of every manifest in `archive` read from `store` (decoded and hashed) and
// compared with the memory the checkpoint was made of.
inline void check_restorable(const StoreCheckpoint& c, const std::filesystem::path& archive,
                             const std::shared_ptr<chunk_store::Store>& store) {
  namespace gi = gpu_image;
  auto info = inspect_checkpoint_archive(archive, ArchiveLimits{});
  REQUIRE(info);
  REQUIRE(info->gpu_manifests.size() == c.memory.size());
  for (const auto& [vpid, chunks] : c.memory) {
    auto manifest = gi::parse_manifest(info->gpu_manifests.at(gi::manifest_name(vpid)), "test");
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
