// Store-backed checkpoints made for tests the way the plugin makes them: each process's GPU memory written into a
// chunk store by StoreWriter, the manifests in a podman-shaped archive (config.dump, spec.dump, checkpoint/). Free
// of Catch2 so that a fixture tool (test/support/store_fixture_tool.cpp) builds them for shell tests too;
// store_checkpoint.h wraps it for unit tests.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "archive/directory_archive.h"
#include "gpumem/gpu_manifest.h"
#include "base/result.h"
#include "test/support/temp_dir.h"

namespace gpuckpt::test {

inline constexpr std::size_t kStoreChunk = 64u << 10;

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

struct StoreCheckpoint {
  std::string id = gpu_image::new_checkpoint_id();
  std::map<int, std::vector<std::vector<std::byte>>> memory;   // by vpid: its chunks, in order
  std::filesystem::path archive;                              // <dir>/ck.tar
};

// `memory`'s processes written into `store` under one checkpoint id (`id`, else a new one), their manifests in
// <dir>/ck.tar.
inline Result<StoreCheckpoint> write_store_checkpoint(const std::shared_ptr<chunk_store::Store>& store,
                                                      const std::filesystem::path& dir,
                                                      std::map<int, std::vector<std::vector<std::byte>>> memory,
                                                      const std::string& id = {}) {
  namespace gi = gpu_image;
  StoreCheckpoint c;
  if (!id.empty()) c.id = id;
  c.memory = std::move(memory);
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
    if (!writer) return writer.error();
    gi::ChunkCodec codec(kStoreChunk);
    gi::CompressionHistory history;
    gi::Settings settings;
    for (std::size_t i = 0; i < chunks.size(); ++i)
      if (auto added = (*writer)->add(0, i, chunks[i], codec, settings, history); !added) return added.error();
    if (auto done = (*writer)->finish(manifests.fd); !done) return done.error();
    std::filesystem::copy_file(manifests.path / gi::manifest_name(vpid), images / gi::manifest_name(vpid));
  }
  c.archive = dir / "ck.tar";
  auto packed = pack_tar({{"config.dump", {}, R"({"name":"train","id":"0123abcd","rootfsImageName":"img"})"},
                          {"spec.dump", {}, R"({"annotations":{"io.container.manager":"libpod"}})"},
                          {"checkpoint", images, {}}},
                         c.archive);
  if (!packed) return packed.error();
  return c;
}

}  // namespace gpuckpt::test
