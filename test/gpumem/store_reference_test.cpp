// A kept checkpoint's references in a chunk store (gpumem/chunk_store.h put_ref, archive/checkpoint_export.h) are
// never replaced: the same bytes again are no change, other bytes are refused (EEXIST) naming the checkpoint and
// process, before anything of the refusing archive enters the store. Checkpoint ids are not secret (they travel in
// every archive), so an import or a transfer commit claiming a kept checkpoint's id and process is refused, and the
// kept checkpoint's chunks survive the next collection. A manifest whose file name and vpid disagree, and a manifest
// entry carried twice, are refused too. A property test runs random sequences of imports, transfer commits,
// restores, unrefs and collections (seeded) and checks after each step that every kept reference is the one first
// written and names only chunks the store holds.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
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
using gpuckpt::test::open_store;
using gpuckpt::test::random_chunk;
using Checkpoint = gpuckpt::test::StoreCheckpoint;
using Memory = std::map<int, std::vector<std::vector<std::byte>>>;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every chunk file older than any grace period, then a collection with none: only references keep chunks.
gpuckpt::chunk_gc::Report collect_unreferenced(cs::Store& store) {
  for (const auto& file : fs::recursive_directory_iterator(store.root() / "sha256"))
    if (file.is_regular_file())
      fs::last_write_time(file.path(), fs::file_time_type::clock::now() - std::chrono::hours(2));
  gpuckpt::chunk_gc::Options options;
  options.grace = std::chrono::seconds(0);
  options.remove = true;
  auto report = gpuckpt::chunk_gc::collect(store, options);
  REQUIRE(report);
  return *report;
}

// A checkpoint of `memory` under `id`, written into a store of its own (as another node, or an attacker, would have
// it) and exported: the archive carries its chunks.
struct Foreign {
  TempDir dir{"gpuckpt-foreign"};
  std::shared_ptr<cs::Store> store = open_store(dir.path / "store");
  Checkpoint c;
  fs::path exported = dir.path / "exported.tar";
  Foreign(const Memory& memory, const std::string& id) {
    auto written = gpuckpt::test::write_store_checkpoint(store, dir.path, memory, id);
    REQUIRE(written);
    c = std::move(*written);
    REQUIRE(ce::export_checkpoint(c.archive, store, exported, ArchiveLimits{}));
  }
};

// `archive` unpacked and packed again after `change` (given the unpacked tree); `extra` entries are added last.
fs::path repacked(const fs::path& archive, const fs::path& dir, const std::function<void(const fs::path&)>& change,
                  const std::vector<gpuckpt::PackEntry>& extra = {}) {
  const fs::path tree = dir / "unpacked";
  fs::create_directories(tree);
  REQUIRE(gpuckpt::extract_archive(archive, tree, ArchiveLimits{}));
  change(tree);
  std::vector<gpuckpt::PackEntry> entries = {{"config.dump", tree / "config.dump", {}},
                                             {"spec.dump", tree / "spec.dump", {}},
                                             {"checkpoint", tree / "checkpoint", {}}};
  if (fs::exists(tree / gpuckpt::kCarriedChunksDir))
    entries.push_back({gpuckpt::kCarriedChunksDir, tree / gpuckpt::kCarriedChunksDir, {}});
  entries.insert(entries.end(), extra.begin(), extra.end());
  const fs::path out = dir / "changed.tar";
  REQUIRE(gpuckpt::pack_tar(entries, out));
  return out;
}

}  // namespace

TEST_CASE("a store reference is never replaced by other bytes; the same bytes again change nothing", "[unit]") {
  TempDir dir("gpuckpt-refs");
  auto store = open_store(dir.path / "store");
  const std::string name = cs::ref_name(gi::new_checkpoint_id(), 7);
  const fs::path file = dir.path / "store" / "refs" / name;
  auto made = store->put_ref(name, "first");
  REQUIRE(made);
  CHECK(*made);
  auto again = store->put_ref(name, "first");
  REQUIRE(again);
  CHECK_FALSE(*again);
  CHECK(store->check_ref(name, "first"));
  for (const std::string other : {"second", "firs", "first and more"}) {
    INFO(other);
    auto refused = store->put_ref(name, other);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EEXIST);
    CHECK(refused.error().message.find(name.substr(0, 32)) != std::string::npos);
    CHECK(refused.error().message.find("process 7") != std::string::npos);
    CHECK(refused.error().message.find("gpuckpt store unref") != std::string::npos);
    CHECK_FALSE(store->check_ref(name, other));
    CHECK(read_file(file) == "first");
  }
  // Nothing but the reference in refs/: no temporary file stays behind a refusal.
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "store" / "refs")) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
}

TEST_CASE("an import or a transfer commit claiming a kept checkpoint's id and process is refused; its chunks stay",
          "[unit]") {
  TempDir dir("gpuckpt-refs");
  auto node = open_store(dir.path / "node");
  const Checkpoint victim = gpuckpt::test::store_checkpoint(node, dir.path);
  const std::string kept7 = read_file(dir.path / "node" / "refs" / cs::ref_name(victim.id, 7));

  const auto still_kept = [&] {
    CHECK(read_file(dir.path / "node" / "refs" / cs::ref_name(victim.id, 7)) == kept7);
    const auto gc = collect_unreferenced(*node);
    CHECK(gc.missing_chunks == 0);
    gpuckpt::test::check_restorable(victim, victim.archive, node);
  };

  SECTION("an import of an archive carrying other chunks under the victim's id") {
    Foreign attacker({{7, {random_chunk(50)}}}, victim.id);
    const fs::path out = dir.path / "attack.tar";
    auto refused = ce::import_checkpoint(attacker.exported, node, out, ArchiveLimits{});
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EEXIST);
    const std::string& why = refused.error().message;
    CHECK(why.find(attacker.exported.string()) != std::string::npos);
    CHECK(why.find("checkpoint/" + gi::manifest_name(7)) != std::string::npos);
    CHECK(why.find("checkpoint " + victim.id + " (process 7)") != std::string::npos);
    // Refused before anything was written: the attacker's chunk never entered the store, no archive came out.
    CHECK_FALSE(node->stat(cs::sha256(random_chunk(50))));
    CHECK_FALSE(fs::exists(out));
    still_kept();
  }
  SECTION("a transfer commit (no chunks carried) of an archive of zero chunks under the victim's id") {
    Foreign attacker({{7, {std::vector<std::byte>(gpuckpt::test::kStoreChunk)}}}, victim.id);
    auto refused = ce::reference_checkpoint(attacker.c.archive, node, ArchiveLimits{});
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EEXIST);
    CHECK(refused.error().message.find("checkpoint " + victim.id + " (process 7)") != std::string::npos);
    still_kept();
  }
  SECTION("an archive whose first manifest is new and whose second claims the victim's process references neither") {
    Foreign attacker({{3, {random_chunk(51)}}, {7, {random_chunk(52)}}}, victim.id);
    auto refused = ce::import_checkpoint(attacker.exported, node, dir.path / "attack.tar", ArchiveLimits{});
    REQUIRE_FALSE(refused);
    CHECK_FALSE(fs::exists(dir.path / "node" / "refs" / cs::ref_name(victim.id, 3)));
    still_kept();
  }
  SECTION("the victim's own archive again is no conflict") {
    auto again = ce::reference_checkpoint(victim.archive, node, ArchiveLimits{});
    REQUIRE(again);
    CHECK(again->references == 2);
    still_kept();
  }
}

TEST_CASE("a manifest whose file name and vpid disagree, or a manifest entry carried twice, is refused", "[unit]") {
  TempDir dir("gpuckpt-refs");
  Foreign source({{7, {random_chunk(60)}}, {8, {random_chunk(61)}}}, gi::new_checkpoint_id());
  auto node = open_store(dir.path / "node");
  const std::string manifest7 = read_file(source.dir.path / "tree" / "checkpoint" / gi::manifest_name(7));

  SECTION("two manifests with one vpid (the second, named for process 9, says 7)") {
    const fs::path hostile = repacked(source.exported, dir.path, [&](const fs::path& tree) {
      std::ofstream(tree / "checkpoint" / gi::manifest_name(9)) << manifest7;
    });
    auto refused = ce::import_checkpoint(hostile, node, dir.path / "out.tar", ArchiveLimits{});
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EINVAL);
    CHECK(refused.error().message.find("checkpoint/" + gi::manifest_name(9) + " is the manifest of process 7") !=
          std::string::npos);
    CHECK(refused.error().message.find("Refusing the archive") != std::string::npos);
  }
  SECTION("a manifest entry twice, the second with other content") {
    const std::string other = read_file(source.dir.path / "tree" / "checkpoint" / gi::manifest_name(8));
    const fs::path hostile = repacked(source.exported, dir.path, [](const fs::path&) {},
                                      {{"checkpoint/" + gi::manifest_name(7), {}, other}});
    auto refused = ce::import_checkpoint(hostile, node, dir.path / "out.tar", ArchiveLimits{});
    REQUIRE_FALSE(refused);
    // A refusal of the input (the CLI's exit 2), not "changed while it was read; try again".
    CHECK(refused.error().errno_value == EINVAL);
    CHECK(refused.error().message.find("checkpoint/" + gi::manifest_name(7) + " is in the archive twice") !=
          std::string::npos);
    CHECK(refused.error().message.find("changed while") == std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir.path / "out.tar"));
  CHECK((!fs::exists(dir.path / "node" / "refs") || fs::is_empty(dir.path / "node" / "refs")));
  CHECK_FALSE(node->stat(cs::sha256(random_chunk(60))));
}

// The model: which references the store must keep, with the text first written. Operations drawn from a seeded RNG
// over a few checkpoint ids, so that archives claiming a kept id and process come up often.
TEST_CASE("property: no sequence of imports, transfer commits, restores, unrefs and collections loses a kept chunk",
          "[unit]") {
  TempDir dir("gpuckpt-refs-property");
  auto node = open_store(dir.path / "node");
  const std::vector<std::string> ids = {gi::new_checkpoint_id(), gi::new_checkpoint_id(), gi::new_checkpoint_id()};
  std::map<std::string, std::string> kept;   // reference name -> its text
  std::vector<std::unique_ptr<Foreign>> archives;
  std::size_t imports = 0, commits = 0, refused = 0, collections = 0, restores = 0;

  const auto check_invariant = [&] {
    auto names = node->list_refs();
    REQUIRE(names);
    std::map<std::string, std::string> now;
    for (const auto& name : *names) {
      auto text = node->read_ref(name, gi::kMaxManifestBytes);
      REQUIRE(text);
      now[name] = *text;
      auto manifest = gi::parse_manifest(*text, name);
      REQUIRE(manifest);
      INFO(name);
      CHECK(gi::check_chunks(*manifest, *node, name));
    }
    CHECK(now == kept);
  };
  const auto note_kept = [&](const Foreign& a, const fs::path& archive) {
    auto info = gpuckpt::inspect_checkpoint_archive(archive, ArchiveLimits{});
    REQUIRE(info);
    for (const auto& [name, text] : info->memory_manifests)
      kept.try_emplace(cs::ref_name(a.c.id, gi::vpid_from_manifest_name(name)), text);
  };
  const auto claims_kept = [&](const Foreign& a) {
    for (const auto& [vpid, chunks] : a.c.memory)
      if (kept.contains(cs::ref_name(a.c.id, vpid))) return true;
    return false;
  };

  std::mt19937 engine(0x39);
  const auto rng = [&engine] { return static_cast<unsigned>(engine()); };
  for (int step = 0; step < 120; ++step) {
    const unsigned op = rng() % 6;
    INFO("step " << step << " op " << op);
    if (op == 0 || archives.empty()) {
      // A new archive: 1 or 2 processes of vpids 1-3, chunks from a small pool so that stores share some.
      Memory memory;
      for (int n = 1 + static_cast<int>(rng() % 2); n > 0; --n) {
        std::vector<std::vector<std::byte>> chunks;
        for (unsigned k = 1 + rng() % 2; k > 0; --k) chunks.push_back(random_chunk(100 + rng() % 8));
        memory[1 + static_cast<int>(rng() % 3)] = std::move(chunks);
      }
      archives.push_back(std::make_unique<Foreign>(memory, ids[rng() % ids.size()]));
    } else if (op == 1 || op == 2) {
      // An import (carried chunks), or a transfer commit of the store-backed archive (its chunks uploaded first).
      const Foreign& a = *archives[rng() % archives.size()];
      const bool conflict = claims_kept(a) && [&] {
        for (const auto& [vpid, chunks] : a.c.memory) {
          const auto it = kept.find(cs::ref_name(a.c.id, vpid));
          if (it != kept.end() &&
              it->second != read_file(a.dir.path / "tree" / "checkpoint" / gi::manifest_name(vpid)))
            return true;
        }
        return false;
      }();
      const fs::path out = dir.path / ("out-" + std::to_string(step) + ".tar");
      gpuckpt::Result<ce::ImportReport> done = gpuckpt::make_error("not run");
      if (op == 1) {
        done = ce::import_checkpoint(a.exported, node, out, ArchiveLimits{});
        ++imports;
      } else {
        for (const auto& [vpid, chunks] : a.c.memory)
          for (const auto& chunk : chunks) {
            const auto d = cs::sha256(chunk);
            auto header = a.store->stat(d);
            REQUIRE(header);
            std::vector<std::byte> file;
            REQUIRE(a.store->read(d, cs::kChunkHeaderSize + header->stored_size, file));
            if (!node->stat(d))
              REQUIRE(node->put(d, *header, std::span<const std::byte>(file).subspan(cs::kChunkHeaderSize)));
          }
        REQUIRE(node->sync());
        done = ce::reference_checkpoint(a.c.archive, node, ArchiveLimits{});
        ++commits;
      }
      CHECK(done.ok() == !conflict);
      if (done) note_kept(a, op == 1 ? out : a.c.archive);
      else {
        ++refused;
        CHECK(done.error().errno_value == EEXIST);
      }
    } else if (op == 3) {
      // A restore of every kept checkpoint: each reference's chunks read back and checked against their digests.
      for (const auto& [name, text] : kept) {
        auto manifest = gi::parse_manifest(text, name);
        REQUIRE(manifest);
        gi::StoreReader reader(*manifest, node, name);
        gi::ChunkCodec codec(gpuckpt::test::kStoreChunk);
        std::vector<std::byte> record, out(gpuckpt::test::kStoreChunk);
        for (std::size_t i = 0; i < reader.entries().size(); ++i) REQUIRE(reader.read_chunk(i, codec, record, out));
      }
      ++restores;
    } else if (op == 4) {
      collect_unreferenced(*node);
      ++collections;
    } else if (!kept.empty()) {
      // A checkpoint deleted: its references go (gpuckpt store unref), after which its id is free again.
      auto it = kept.begin();
      std::advance(it, static_cast<long>(rng() % kept.size()));
      const std::string checkpoint = it->first.substr(0, 32);
      for (auto ref = kept.begin(); ref != kept.end();)
        if (ref->first.starts_with(checkpoint)) {
          REQUIRE(node->remove_ref(ref->first));
          ref = kept.erase(ref);
        } else {
          ++ref;
        }
    }
    check_invariant();
  }
  collect_unreferenced(*node);
  check_invariant();
  INFO(imports << " imports, " << commits << " commits, " << refused << " refused, " << collections
               << " collections, " << restores << " restores");
  CHECK(refused > 0);
  CHECK(imports + commits - refused > 0);
}
