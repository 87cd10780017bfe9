// gpuckpt export / import (archive/checkpoint_export.h): a store-backed checkpoint's archive carried to an empty
// store comes back chunk for chunk, chunks the store has are skipped and counted, a carried chunk that is corrupt,
// unnamed, a link or misnamed is refused naming the archive and the chunk, an export missing a chunk names the
// checkpoint, the chunk and its path and leaves no output, and a collection right after an import keeps its chunks.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "archive/checkpoint_archive.h"
#include "archive/checkpoint_export.h"
#include "gpumem/chunk_gc.h"
#include "gpumem/chunk_store.h"
#include "archive/directory_archive.h"
#include "gpumem/gpu_manifest.h"
#include "test/support/store_checkpoint.h"
#include "test/support/temp_dir.h"

namespace cs = gpuckpt::chunk_store;
namespace ce = gpuckpt::checkpoint_export;
namespace gi = gpuckpt::gpu_image;
namespace fs = std::filesystem;
using gpuckpt::ArchiveLimits;
using gpuckpt::test::TempDir;
using gpuckpt::test::check_restorable;
using gpuckpt::test::compressible_chunk;
using gpuckpt::test::open_store;
using gpuckpt::test::random_chunk;
using Checkpoint = gpuckpt::test::StoreCheckpoint;

namespace {

// A store-backed checkpoint in node-a's store, and its export: moved.tar.
struct Exported {
  TempDir dir{"gpuckpt-export"};
  std::shared_ptr<cs::Store> source = open_store(dir.path / "node-a");
  Checkpoint c = gpuckpt::test::store_checkpoint(source, dir.path);
  fs::path exported = dir.path / "moved.tar";
  Exported() { REQUIRE(ce::export_checkpoint(c.archive, source, exported, ArchiveLimits{})); }
};

std::vector<std::string> entries_under(const fs::path& archive, const std::string& prefix) {
  auto entries = gpuckpt::list_archive(archive, ArchiveLimits{});
  REQUIRE(entries);
  std::vector<std::string> out;
  for (const auto& e : *entries)
    if (e.name.starts_with(prefix) && e.kind == gpuckpt::ArchiveEntry::Kind::File) out.push_back(e.name);
  return out;
}

// An exported archive unpacked, changed by `change` (given the unpacked tree), and packed again.
fs::path repacked(const fs::path& exported, const fs::path& dir, const std::function<void(const fs::path&)>& change) {
  const fs::path tree = dir / "unpacked";
  fs::create_directories(tree);
  REQUIRE(gpuckpt::extract_archive(exported, tree, ArchiveLimits{}));
  change(tree);
  const fs::path out = dir / "changed.tar";
  REQUIRE(gpuckpt::pack_tar({{"config.dump", tree / "config.dump", {}},
                             {"spec.dump", tree / "spec.dump", {}},
                             {"checkpoint", tree / "checkpoint", {}},
                             {gpuckpt::kCarriedChunksDir, tree / gpuckpt::kCarriedChunksDir, {}}},
                            out));
  return out;
}

fs::path chunk_in(const fs::path& tree, const cs::Digest& d) {
  const std::string hex = d.hex();
  return tree / gpuckpt::kCarriedChunksDir / "sha256" / hex.substr(0, 2) / hex;
}

bool leaves_nothing_beside(const fs::path& out) {
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    if (e.path().filename().string().find(out.filename().string()) != std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("export then import into an empty store: every chunk comes back byte for byte", "[unit]") {
  TempDir dir("gpuckpt-export");
  auto source = open_store(dir.path / "node-a");
  const Checkpoint c = gpuckpt::test::store_checkpoint(source, dir.path);
  const fs::path exported = dir.path / "moved.tar";
  auto report = ce::export_checkpoint(c.archive, source, exported, ArchiveLimits{});
  REQUIRE(report);
  // 4 distinct stored chunks: the shared one once, the zero one not at all.
  CHECK(report->chunks == 4);
  CHECK(report->manifests == 2);
  CHECK(report->checkpoints == std::set<std::string>{c.id});
  CHECK(entries_under(exported, std::string(gpuckpt::kCarriedChunksDir) + "/sha256/").size() == 4);
  auto info = gpuckpt::inspect_checkpoint_archive(exported, ArchiveLimits{});
  REQUIRE(info);
  CHECK(info->carried_chunks == 4);
  CHECK(info->carried_chunk_bytes == report->chunk_bytes);
  CHECK(info->has_criu_images);
  // Every entry of the original is there, as it was.
  for (const std::string& name : {std::string("checkpoint/pages-1.img"), "checkpoint/" + gi::manifest_name(7)}) {
    auto before = gpuckpt::read_archive_entry(c.archive, name, ArchiveLimits{});
    auto after = gpuckpt::read_archive_entry(exported, name, ArchiveLimits{});
    REQUIRE((before && after && *before && *after));
    CHECK(**before == **after);
  }

  auto target = open_store(dir.path / "node-b");
  const fs::path restorable = dir.path / "restorable.tar";
  auto imported = ce::import_checkpoint(exported, target, restorable, ArchiveLimits{});
  REQUIRE(imported);
  CHECK(imported->carried_chunks == 4);
  CHECK(imported->added_chunks == 4);
  CHECK(imported->present_chunks == 0);
  CHECK(imported->references == 2);
  CHECK(entries_under(restorable, gpuckpt::kCarriedChunksDir).empty());
  CHECK(fs::exists(dir.path / "node-b" / "refs" / cs::ref_name(c.id, 7)));
  CHECK(fs::exists(dir.path / "node-b" / "refs" / cs::ref_name(c.id, 8)));
  check_restorable(c, restorable, target);
  // The imported archive is the original again, entry for entry.
  auto original = gpuckpt::list_archive(c.archive, ArchiveLimits{});
  auto back = gpuckpt::list_archive(restorable, ArchiveLimits{});
  REQUIRE((original && back));
  CHECK(original->size() == back->size());
}

TEST_CASE("import skips and counts the chunks the store has already", "[unit]") {
  Exported e;
  auto& [dir, source, c, exported] = e;
  // Into the store it came from: everything is there.
  auto same = ce::import_checkpoint(exported, source, dir.path / "a.tar", ArchiveLimits{});
  REQUIRE(same);
  CHECK(same->present_chunks == 4);
  CHECK(same->added_chunks == 0);
  CHECK(same->added_bytes == 0);
  // Into a store holding one of them (another checkpoint of the same weights made it).
  auto target = open_store(dir.path / "node-b");
  const auto shared = cs::sha256(random_chunk(3));
  auto header = source->stat(shared);
  REQUIRE(header);
  std::vector<std::byte> file;
  REQUIRE(source->read(shared, cs::kChunkHeaderSize + header->stored_size, file));
  REQUIRE(target->put(shared, *header, std::span<const std::byte>(file).subspan(cs::kChunkHeaderSize)));
  auto partly = ce::import_checkpoint(exported, target, dir.path / "b.tar", ArchiveLimits{});
  REQUIRE(partly);
  CHECK(partly->present_chunks == 1);
  CHECK(partly->added_chunks == 3);
  check_restorable(c, dir.path / "b.tar", target);
  // In place (no -o): the exported archive becomes the store-backed one.
  auto again = ce::import_checkpoint(exported, target, exported, ArchiveLimits{});
  REQUIRE(again);
  CHECK(again->present_chunks == 4);
  CHECK(entries_under(exported, gpuckpt::kCarriedChunksDir).empty());
  check_restorable(c, exported, target);
}

TEST_CASE("export with a carry set carries only those chunks; the import needs the rest in its store", "[unit]") {
  TempDir dir("gpuckpt-export");
  auto source = open_store(dir.path / "node-a");
  const Checkpoint c = gpuckpt::test::store_checkpoint(source, dir.path);
  // The target has the chunk both processes share and the compressible one; it lacks the two others.
  auto target = open_store(dir.path / "node-b");
  const auto copy_chunk = [&](const cs::Digest& d) {
    auto header = source->stat(d);
    REQUIRE(header);
    std::vector<std::byte> file;
    REQUIRE(source->read(d, cs::kChunkHeaderSize + header->stored_size, file));
    REQUIRE(target->put(d, *header, std::span<const std::byte>(file).subspan(cs::kChunkHeaderSize)));
  };
  copy_chunk(cs::sha256(random_chunk(3)));
  copy_chunk(cs::sha256(compressible_chunk(2)));
  const std::set<cs::Digest> lacking{cs::sha256(random_chunk(1)), cs::sha256(random_chunk(4))};
  const fs::path partial = dir.path / "partial.tar";
  auto report = ce::export_checkpoint(c.archive, source, partial, ArchiveLimits{}, &lacking);
  REQUIRE(report);
  CHECK(report->chunks == 2);
  CHECK(report->left_out == 2);
  const std::string prefix = std::string(gpuckpt::kCarriedChunksDir) + "/sha256/";
  auto carried = entries_under(partial, prefix);
  std::sort(carried.begin(), carried.end());
  std::vector<std::string> want;
  for (const auto& d : lacking) want.push_back(prefix + d.hex().substr(0, 2) + "/" + d.hex());
  std::sort(want.begin(), want.end());
  CHECK(carried == want);

  // Into the store that has the others: complete.
  auto imported = ce::import_checkpoint(partial, target, dir.path / "restorable.tar", ArchiveLimits{});
  REQUIRE(imported);
  CHECK(imported->added_chunks == 2);
  CHECK(imported->references == 2);
  check_restorable(c, dir.path / "restorable.tar", target);
  // Into an empty store: the chunks left out are missing, named, and no reference is written.
  auto empty = open_store(dir.path / "node-c");
  auto refused = ce::import_checkpoint(partial, empty, dir.path / "c.tar", ArchiveLimits{});
  REQUIRE(!refused);
  CHECK(refused.error().message.find(cs::sha256(compressible_chunk(2)).hex()) != std::string::npos);
  CHECK((!fs::exists(dir.path / "node-c" / "refs") || fs::is_empty(dir.path / "node-c" / "refs")));
  CHECK(!fs::exists(dir.path / "c.tar"));

  // A digest no manifest names is refused before anything is written; so is a chunk missing from the source.
  const std::set<cs::Digest> stranger{cs::sha256(random_chunk(99))};
  auto unnamed = ce::export_checkpoint(c.archive, source, dir.path / "x.tar", ArchiveLimits{}, &stranger);
  REQUIRE(!unnamed);
  CHECK(unnamed.error().message.find(cs::sha256(random_chunk(99)).hex()) != std::string::npos);
  CHECK(!fs::exists(dir.path / "x.tar"));
  fs::remove(source->path_of(cs::sha256(compressible_chunk(2))));
  auto incomplete = ce::export_checkpoint(c.archive, source, dir.path / "y.tar", ArchiveLimits{}, &lacking);
  REQUIRE(!incomplete);
  CHECK(incomplete.error().message.find(cs::sha256(compressible_chunk(2)).hex()) != std::string::npos);
  CHECK(!fs::exists(dir.path / "y.tar"));
}

TEST_CASE("import keeps a chunk the store holds stored another way, so the node's checkpoints naming it stay whole",
          "[unit]") {
  Exported e;
  auto& [dir, source, c, exported] = e;
  // Node b checkpointed the same bytes with compression off: stored raw there, carried zstd-compressed from node a.
  auto target = open_store(dir.path / "node-b");
  const auto same = compressible_chunk(2);
  const auto digest = cs::sha256(same);
  TempDir manifests("gpuckpt-node-b");
  gi::ImageHeader header;
  header.vpid = 3;
  header.chunk_size = gpuckpt::test::kStoreChunk;
  auto writer = gi::StoreWriter::create(target, header, {{0x7f0000000000, same.size()}}, gi::new_checkpoint_id());
  REQUIRE(writer);
  gi::ChunkCodec codec(gpuckpt::test::kStoreChunk);
  gi::CompressionHistory history;
  gi::Settings uncompressed;
  uncompressed.compression.mode = gi::CompressionMode::Off;
  REQUIRE((*writer)->add(0, 0, same, codec, uncompressed, history));
  REQUIRE((*writer)->finish(manifests.fd));
  auto local = gi::read_manifest(manifests.fd, gi::manifest_name(3));
  REQUIRE(local);
  REQUIRE(local->entries[0].encoding == gi::Encoding::Raw);
  auto carried = source->stat(digest);
  REQUIRE(carried);
  REQUIRE(carried->encoding == static_cast<std::uint8_t>(gi::Encoding::Zstd));

  const fs::path restorable = dir.path / "restorable.tar";
  auto imported = ce::import_checkpoint(exported, target, restorable, ArchiveLimits{});
  REQUIRE(imported);
  CHECK(imported->present_chunks == 1);
  CHECK(imported->added_chunks == 3);
  // Node b's checkpoint still finds its chunk as its manifest says, and reads it back.
  auto kept = target->stat(digest);
  REQUIRE(kept);
  CHECK(kept->encoding == static_cast<std::uint8_t>(gi::Encoding::Raw));
  CHECK(gi::check_chunks(*local, *target, "node b's checkpoint"));
  gi::StoreReader reader(*local, target, "node b's checkpoint");
  std::vector<std::byte> record, out(same.size());
  REQUIRE(reader.read_chunk(0, codec, record, out));
  CHECK(out == same);
  // The imported checkpoint restores from the same file: its manifest and reference say it is stored raw.
  check_restorable(c, restorable, target);
  auto ref = target->read_ref(cs::ref_name(c.id, 7), 1 << 20);
  REQUIRE(ref);
  auto referenced = gi::parse_manifest(*ref, "the reference");
  REQUIRE(referenced);
  CHECK(gi::check_chunks(*referenced, *target, "the reference"));
}

TEST_CASE("import refuses a carried chunk whose content does not match its digest, naming the archive and chunk",
          "[unit]") {
  Exported e;
  auto& [dir, source, c, exported] = e;
  const auto victim = cs::sha256(random_chunk(4));
  const fs::path corrupt = repacked(exported, dir.path, [&](const fs::path& tree) {
    std::fstream f(chunk_in(tree, victim), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(cs::kChunkHeaderSize + 100));
    f.put('\x5a');
  });
  auto target = open_store(dir.path / "node-b");
  const fs::path out = dir.path / "out" / "restorable.tar";
  fs::create_directories(out.parent_path());
  auto refused = ce::import_checkpoint(corrupt, target, out, ArchiveLimits{});
  REQUIRE_FALSE(refused);
  const std::string& why = refused.error().message;
  CHECK(why.find(corrupt.string()) != std::string::npos);
  CHECK(why.find("carried chunk " + victim.hex()) != std::string::npos);
  CHECK(why.find("SHA-256 mismatch") != std::string::npos);
  CHECK(refused.error().errno_value == EBADMSG);
  CHECK_FALSE(fs::exists(target->path_of(victim)));
  CHECK(leaves_nothing_beside(out));
  CHECK((!fs::exists(dir.path / "node-b" / "refs") || fs::is_empty(dir.path / "node-b" / "refs")));
}

TEST_CASE("import refuses carried entries that are not chunks its manifests name", "[unit]") {
  Exported e;
  auto& [dir, source, c, exported] = e;
  const auto kept = cs::sha256(random_chunk(1));
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> change;
    std::string says;
  };
  const auto stranger = cs::sha256(random_chunk(99));
  const std::vector<Case> cases = {
      {"a chunk no manifest names",
       [&](const fs::path& tree) {
         fs::create_directories(chunk_in(tree, stranger).parent_path());
         fs::copy_file(chunk_in(tree, kept), chunk_in(tree, stranger));
       },
       "carried chunk " + stranger.hex() + " (" + std::string(gpuckpt::kCarriedChunksDir) + "/sha256/" +
           stranger.hex().substr(0, 2) + "/" + stranger.hex() + ") is named by none of its manifests"},
      {"a symlink",
       [&](const fs::path& tree) {
         fs::remove(chunk_in(tree, kept));
         fs::create_symlink("../../../checkpoint/pages-1.img", chunk_in(tree, kept));
       },
       "is a link"},
      {"a chunk in the wrong fan-out directory",
       [&](const fs::path& tree) {
         fs::create_directories(tree / gpuckpt::kCarriedChunksDir / "sha256" / "zz");
         fs::rename(chunk_in(tree, kept), tree / gpuckpt::kCarriedChunksDir / "sha256" / "zz" / kept.hex());
       },
       "is not a carried chunk"},
      {"a chunk of another size than its manifest says",
       [&](const fs::path& tree) { std::ofstream(chunk_in(tree, kept), std::ios::app) << "x"; },
       "its manifest says"},
  };
  for (const auto& test : cases) {
    INFO(test.what);
    TempDir work("gpuckpt-export-case");
    const fs::path hostile = repacked(exported, work.path, test.change);
    auto target = open_store(work.path / "store");
    auto refused = ce::import_checkpoint(hostile, target, work.path / "out.tar", ArchiveLimits{});
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find(hostile.string()) != std::string::npos);
    CHECK(refused.error().message.find(test.says) != std::string::npos);
    CHECK_FALSE(fs::exists(work.path / "out.tar"));
  }
}

TEST_CASE("export with a chunk missing from the store names checkpoint, chunk and path, and writes nothing",
          "[unit]") {
  TempDir dir("gpuckpt-export");
  auto source = open_store(dir.path / "node-a");
  const Checkpoint c = gpuckpt::test::store_checkpoint(source, dir.path);
  const auto lost = cs::sha256(compressible_chunk(2));
  REQUIRE(fs::remove(source->path_of(lost)));
  const fs::path out = dir.path / "out" / "moved.tar";
  fs::create_directories(out.parent_path());
  auto refused = ce::export_checkpoint(c.archive, source, out, ArchiveLimits{});
  REQUIRE_FALSE(refused);
  const std::string& why = refused.error().message;
  CHECK(why.find("checkpoint " + c.id) != std::string::npos);
  CHECK(why.find("chunk " + lost.hex()) != std::string::npos);
  CHECK(why.find(source->path_of(lost).string()) != std::string::npos);
  CHECK(refused.error().errno_value == ENOENT);
  CHECK(fs::is_empty(out.parent_path()));

  // And a chunk that is there but corrupt is not carried to another node either.
  const auto damaged = cs::sha256(random_chunk(1));
  {
    std::fstream f(source->path_of(damaged), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(source->stat(damaged)->payload_offset() + 7));
    f.put('\x01');
  }
  gpuckpt::test::store_checkpoint(source, dir.path / "second");   // the same memory again: writes the lost chunk back
  auto corrupt = ce::export_checkpoint(c.archive, source, out, ArchiveLimits{});
  REQUIRE_FALSE(corrupt);
  CHECK(corrupt.error().message.find("chunk " + damaged.hex()) != std::string::npos);
  CHECK(corrupt.error().message.find("SHA-256 mismatch") != std::string::npos);
  CHECK(fs::is_empty(out.parent_path()));
}

TEST_CASE("export refuses an archive without manifests and one that carries chunks already", "[unit]") {
  TempDir dir("gpuckpt-export");
  auto source = open_store(dir.path / "node-a");
  const fs::path plain = dir.path / "inline.tar";
  REQUIRE(gpuckpt::pack_tar({{"config.dump", {}, R"({"name":"x"})"}, {"spec.dump", {}, "{}"},
                             {"checkpoint/inventory.img", {}, "criu"}},
                            plain));
  auto none = ce::export_checkpoint(plain, source, dir.path / "out.tar", ArchiveLimits{});
  REQUIRE_FALSE(none);
  CHECK(none.error().message.find("holds no manifest of store-backed memory") != std::string::npos);
  auto nothing = ce::import_checkpoint(plain, source, dir.path / "out.tar", ArchiveLimits{});
  REQUIRE_FALSE(nothing);
  const Checkpoint c = gpuckpt::test::store_checkpoint(source, dir.path);
  REQUIRE(ce::export_checkpoint(c.archive, source, dir.path / "moved.tar", ArchiveLimits{}));
  auto twice = ce::export_checkpoint(dir.path / "moved.tar", source, dir.path / "again.tar", ArchiveLimits{});
  REQUIRE_FALSE(twice);
  CHECK(twice.error().message.find("carries 4 chunks already") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path / "out.tar"));
  CHECK_FALSE(fs::exists(dir.path / "again.tar"));
}

TEST_CASE("a garbage collection right after an import keeps the imported chunks", "[unit]") {
  Exported e;
  auto& [dir, source, c, exported] = e;
  auto target = open_store(dir.path / "node-b");
  REQUIRE(ce::import_checkpoint(exported, target, dir.path / "restorable.tar", ArchiveLimits{}));
  // No grace at all: only the references keep them (the chunks are seconds old).
  gpuckpt::chunk_gc::Options options;
  options.grace = std::chrono::seconds(0);
  options.remove = true;
  // The collection's start is the store's clock now; make the chunks older than it so only references count.
  for (const auto& file : fs::recursive_directory_iterator(dir.path / "node-b" / "sha256"))
    if (file.is_regular_file()) fs::last_write_time(file.path(), fs::file_time_type::clock::now() - std::chrono::hours(2));
  auto report = gpuckpt::chunk_gc::collect(*target, options);
  REQUIRE(report);
  CHECK(report->refs == 2);
  CHECK(report->garbage_chunks == 0);
  CHECK(report->missing_chunks == 0);
  check_restorable(c, dir.path / "restorable.tar", target);
  // Without the references the same collection would have taken them: what the import's references are for.
  for (int vpid : {7, 8}) REQUIRE(target->remove_ref(cs::ref_name(c.id, vpid)));
  auto unreferenced = gpuckpt::chunk_gc::collect(*target, options);
  REQUIRE(unreferenced);
  CHECK(unreferenced->garbage_chunks == 4);
}
