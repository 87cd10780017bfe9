// Garbage collection of the chunk store: reference counts from the store's references, nothing a kept checkpoint
// needs is removed, a collection killed between its phases loses nothing and leaves only what the next one
// removes, and a dump writing or reusing chunks while a collection runs keeps them.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/chunk_gc.h"
#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "test/support/random_bytes.h"
#include "test/support/temp_dir.h"

namespace cs = gpuckpt::chunk_store;
namespace gc = gpuckpt::chunk_gc;
namespace gi = gpuckpt::gpu_image;
namespace fs = std::filesystem;
using gpuckpt::test::random_bytes;
using gpuckpt::test::TempDir;

namespace {

constexpr std::size_t kChunk = 64u << 10;

// One process's GPU memory, one chunk per seed, checkpointed into the store the way the plugin does it.
struct Checkpointed {
  std::string id;
  gi::Manifest manifest;
};

// Without Catch2 assertions: also called from a second thread.
gpuckpt::Result<Checkpointed> try_checkpoint(const std::shared_ptr<cs::Store>& store, const std::vector<unsigned>& seeds,
                                             const std::string& id) {
  TempDir images("gpuckpt-gc-images");
  gi::ImageHeader header;
  header.vpid = 9;
  header.chunk_size = kChunk;
  auto writer = gi::StoreWriter::create(store, header, {{0x100000, seeds.size() * kChunk}}, id);
  if (!writer) return writer.error();
  gi::ChunkCodec codec(kChunk);
  gi::CompressionHistory history;
  gi::Settings settings;
  for (std::size_t c = 0; c < seeds.size(); ++c)
    if (auto ok = (*writer)->add(0, c, random_bytes(kChunk, seeds[c]), codec, settings, history); !ok) return ok.error();
  if (auto ok = (*writer)->finish(images.fd); !ok) return ok.error();
  auto manifest = gi::read_manifest(images.fd, gi::manifest_name(9));
  if (!manifest) return manifest.error();
  return Checkpointed{id, *manifest};
}

Checkpointed checkpoint(const std::shared_ptr<cs::Store>& store, const std::vector<unsigned>& seeds,
                        const std::string& id = gi::new_checkpoint_id()) {
  auto done = try_checkpoint(store, seeds, id);
  if (!done) FAIL(done.error().message);
  return *done;
}

std::shared_ptr<cs::Store> open_store(const TempDir& dir) {
  auto opened = cs::Store::open(dir.path, true);
  REQUIRE(opened);
  return std::shared_ptr<cs::Store>(std::move(*opened));
}

// Every chunk file (at its name and in trash/) made `seconds` older: written that long ago.
void age_chunks(const fs::path& root, int seconds = 7200) {
  for (const char* dir : {"sha256", "trash"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      if (!e.is_regular_file()) continue;
      struct stat st {};
      REQUIRE(::stat(e.path().c_str(), &st) == 0);
      struct timespec times[2] = {st.st_atim, st.st_mtim};
      times[1].tv_sec -= seconds;
      REQUIRE(::utimensat(AT_FDCWD, e.path().c_str(), times, 0) == 0);
    }
  }
}

std::size_t chunk_files(const fs::path& root) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root / "sha256"))
    if (e.is_regular_file() && e.path().filename().string().size() == 64) ++n;
  return n;
}

std::size_t trash_files(const fs::path& root) {
  if (!fs::exists(root / "trash")) return 0;
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(root / "trash"), fs::directory_iterator()));
}

bool complete(const Checkpointed& c, const cs::Store& store) {
  return static_cast<bool>(gi::check_chunks(c.manifest, store, "test"));
}

gc::Options removing() {
  gc::Options o;
  o.remove = true;
  return o;
}

}  // namespace

TEST_CASE("chunk gc: reference counts, and only chunks no reference names and older than the grace period go",
          "[unit]") {
  TempDir dir("gpuckpt-gc-store");
  auto store = open_store(dir);
  // Two checkpoints of one process: the weights (seeds 1, 2) unchanged, the KV cache (3, then 4) changed.
  const auto first = checkpoint(store, {1, 2, 3});
  const auto second = checkpoint(store, {1, 2, 4});
  REQUIRE(chunk_files(dir.path) == 4);
  REQUIRE(store->list_refs()->size() == 2);
  age_chunks(dir.path);

  auto collection = gc::Collection::begin(*store, gc::Options{});
  REQUIRE(collection);
  REQUIRE((*collection)->mark());
  const auto& counts = (*collection)->refcounts();
  CHECK(counts.at(first.manifest.digests[0]) == 2);
  CHECK(counts.at(first.manifest.digests[1]) == 2);
  CHECK(counts.at(first.manifest.digests[2]) == 1);
  CHECK(counts.at(second.manifest.digests[2]) == 1);
  collection->reset();
  // What each reference holds, in the bytes its chunk files take: what removing it would free.
  auto summaries = gc::summarize_references(*store);
  REQUIRE(summaries);
  REQUIRE(summaries->size() == 2);
  for (const auto& s : *summaries) {
    const auto& m = s.checkpoint == first.id ? first.manifest : second.manifest;
    std::uint64_t files = 0;
    for (const auto& d : m.digests) files += fs::file_size(store->path_of(d));
    CHECK(s.chunks == 3);
    CHECK(s.stored_bytes == files);
    CHECK(s.exclusive_bytes == fs::file_size(store->path_of(m.digests[2])));
  }

  // Everything referenced: nothing goes.
  auto report = gc::collect(*store, removing());
  REQUIRE(report);
  CHECK(report->garbage_chunks == 0);
  CHECK(report->live_chunks == 4);
  CHECK(chunk_files(dir.path) == 4);

  // The first checkpoint deleted (its reference removed): only its own KV-cache chunk is garbage.
  REQUIRE(*store->remove_ref(cs::ref_name(first.id, 9)) == true);
  CHECK(*store->remove_ref(cs::ref_name(first.id, 9)) == false);
  auto dry = gc::collect(*store, gc::Options{});
  REQUIRE(dry);
  CHECK(dry->dry_run);
  CHECK(dry->garbage_chunks == 1);
  REQUIRE(dry->garbage.size() == 1);
  CHECK(dry->garbage[0].digest == first.manifest.digests[2]);
  // The file's size: a raw chunk's payload is at 4096.
  REQUIRE(first.manifest.entries[2].encoding == gi::Encoding::Raw);
  CHECK(dry->garbage_bytes == cs::kAlignedPayloadOffset + first.manifest.entries[2].stored_size);
  CHECK(chunk_files(dir.path) == 4);   // a dry run removes nothing
  CHECK(gc::format_report(*dry, dir.path.string()).find("would remove 1 unreferenced chunks") != std::string::npos);

  auto removed = gc::collect(*store, removing());
  REQUIRE(removed);
  CHECK(removed->garbage_chunks == 1);
  CHECK(chunk_files(dir.path) == 3);
  CHECK(trash_files(dir.path) == 0);
  CHECK_FALSE(fs::exists(store->path_of(first.manifest.digests[2])));
  CHECK(complete(second, *store));
}

TEST_CASE("chunk gc: an unreferenced chunk younger than the grace period stays (a dump not yet referenced)",
          "[unit]") {
  TempDir dir("gpuckpt-gc-store");
  auto store = open_store(dir);
  const auto dumped = checkpoint(store, {5, 6});
  REQUIRE(store->remove_ref(cs::ref_name(dumped.id, 9)));   // as if its reference were not written yet
  auto report = gc::collect(*store, removing());
  REQUIRE(report);
  CHECK(report->garbage_chunks == 0);
  CHECK(report->young_chunks == 2);
  CHECK(chunk_files(dir.path) == 2);
  age_chunks(dir.path);
  report = gc::collect(*store, removing());
  REQUIRE(report);
  CHECK(report->garbage_chunks == 2);
  CHECK(chunk_files(dir.path) == 0);
}

TEST_CASE("chunk gc: killed between its phases, nothing kept is lost and the next collection finishes the job",
          "[unit]") {
  TempDir dir("gpuckpt-gc-store");
  auto store = open_store(dir);
  const auto kept = checkpoint(store, {1, 2});
  const auto dropped = checkpoint(store, {2, 3, 7});
  REQUIRE(store->remove_ref(cs::ref_name(dropped.id, 9)));
  age_chunks(dir.path);
  // A writer that died mid-chunk long ago, and one writing now.
  const fs::path fanout = store->path_of(dropped.manifest.digests[1]).parent_path();
  std::ofstream(fanout / ".dead.partial") << "half a chunk";
  std::ofstream(fanout / ".writing.partial") << "half a chunk";
  struct timespec old_times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 7200, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (fanout / ".dead.partial").c_str(), old_times, 0) == 0);

  {
    auto killed = gc::Collection::begin(*store, removing());
    REQUIRE(killed);
    REQUIRE((*killed)->mark());
    REQUIRE((*killed)->recover());
    REQUIRE((*killed)->sweep());
    CHECK((*killed)->report().garbage_chunks == 2);   // seeds 3 and 7; seed 2 is kept's too
    // Killed here: the garbage is in trash/, not yet removed; the lock goes with the process.
  }
  CHECK(trash_files(dir.path) == 2);
  CHECK(complete(kept, *store));
  CHECK_FALSE(fs::exists(fanout / ".dead.partial"));
  CHECK(fs::exists(fanout / ".writing.partial"));

  // A reader that needs a chunk in trash/ (an import naming it again) finds it: it moves back.
  const cs::Digest seven = dropped.manifest.digests[2];
  REQUIRE_FALSE(fs::exists(store->path_of(seven)));
  auto rescued = store->stat(seven);
  REQUIRE(rescued);
  CHECK(fs::exists(store->path_of(seven)));
  CHECK(trash_files(dir.path) == 1);

  // The next collection removes what the killed one left (seed 3 in trash/, seed 7 again garbage).
  auto next = gc::collect(*store, removing());
  REQUIRE(next);
  CHECK(next->garbage_chunks == 2);
  CHECK(trash_files(dir.path) == 0);
  CHECK(chunk_files(dir.path) == 2);
  CHECK(complete(kept, *store));

  SECTION("killed before emptying the trash, a kept checkpoint's chunk in trash/ goes back, not away") {
    const auto again = checkpoint(store, {8});
    REQUIRE(store->remove_ref(cs::ref_name(again.id, 9)));
    age_chunks(dir.path);
    {
      auto killed = gc::Collection::begin(*store, removing());
      REQUIRE(killed);
      REQUIRE((*killed)->mark());
      REQUIRE((*killed)->sweep());
    }
    REQUIRE(trash_files(dir.path) == 1);
    // The checkpoint is kept after all (its reference written again, as an import would): the next collection
    // returns its chunk from trash/ instead of removing it.
    REQUIRE(store->put_ref(cs::ref_name(again.id, 9), gi::serialize_manifest(again.manifest)));
    auto recovered = gc::collect(*store, removing());
    REQUIRE(recovered);
    CHECK(recovered->returned_chunks == 1);
    CHECK(recovered->garbage_chunks == 0);
    CHECK(trash_files(dir.path) == 0);
    CHECK(complete(again, *store));
  }
}

TEST_CASE("chunk gc: a dump reusing or writing chunks while a collection runs keeps them", "[unit]") {
  TempDir dir("gpuckpt-gc-store");
  auto store = open_store(dir);
  const auto old = checkpoint(store, {1, 2});
  REQUIRE(store->remove_ref(cs::ref_name(old.id, 9)));
  age_chunks(dir.path);

  SECTION("reused after the mark, before the sweep: the touch makes it young") {
    auto collection = gc::Collection::begin(*store, removing());
    REQUIRE(collection);
    REQUIRE((*collection)->mark());
    const auto dump = checkpoint(store, {1, 2, 3});   // 1 and 2 reused, 3 written after the collection began
    REQUIRE((*collection)->recover());
    REQUIRE((*collection)->sweep());
    REQUIRE((*collection)->empty_trash());
    CHECK((*collection)->report().garbage_chunks == 0);
    CHECK(complete(dump, *store));
  }
  SECTION("reused after the sweep moved it to trash/: the dump moves it back") {
    auto collection = gc::Collection::begin(*store, removing());
    REQUIRE(collection);
    REQUIRE((*collection)->mark());
    REQUIRE((*collection)->sweep());
    CHECK(trash_files(dir.path) == 2);
    const auto dump = checkpoint(store, {1, 2});
    CHECK(trash_files(dir.path) == 0);
    REQUIRE((*collection)->empty_trash());
    CHECK(complete(dump, *store));
  }
  SECTION("threads: dumps reusing aged chunks while collections run, many times") {
    for (int round = 0; round < 40; ++round) {
      auto refs = store->list_refs();
      REQUIRE(refs);
      for (const auto& ref : *refs) REQUIRE(store->remove_ref(ref));
      age_chunks(dir.path);
      std::vector<gpuckpt::Result<Checkpointed>> dumps;
      std::thread writer([&] {
        for (int i = 0; i < 3; ++i)
          dumps.push_back(try_checkpoint(store, {1, 2, static_cast<unsigned>(100 + i)}, gi::new_checkpoint_id()));
      });
      for (int i = 0; i < 3; ++i) {
        auto report = gc::collect(*store, removing());
        if (!report) CHECK(report.error().errno_value == EBUSY);
      }
      writer.join();
      auto report = gc::collect(*store, removing());
      REQUIRE(report);
      for (const auto& dump : dumps) {
        if (!dump) FAIL(dump.error().message);
        REQUIRE(complete(*dump, *store));
      }
      CHECK(report->missing_chunks == 0);
    }
  }
}

TEST_CASE("chunk gc: missing chunks reported with their reference; an unreadable reference stops it", "[unit]") {
  TempDir dir("gpuckpt-gc-store");
  auto store = open_store(dir);
  const auto dumped = checkpoint(store, {1, 2});
  const auto other = checkpoint(store, {3});
  REQUIRE(store->remove_ref(cs::ref_name(other.id, 9)));
  age_chunks(dir.path);
  REQUIRE(fs::remove(store->path_of(dumped.manifest.digests[1])));

  auto report = gc::collect(*store, gc::Options{});
  REQUIRE(report);
  REQUIRE(report->missing_chunks == 1);
  CHECK(report->missing[0].digest == dumped.manifest.digests[1]);
  CHECK(report->missing[0].ref == cs::ref_name(dumped.id, 9));
  CHECK(gc::format_report(*report, dir.path.string()).find("MISSING: 1 chunks") != std::string::npos);

  // A reference that does not parse (a hostile or damaged file in a shared store): nothing is removed.
  const std::string broken = cs::ref_name("fedcba9876543210fedcba9876543210", 4);
  std::ofstream(dir.path / "refs" / broken) << R"({"format":"gpuckpt-gpu-memory-manifest","version":1,"chunks":[)";
  auto stopped = gc::collect(*store, removing());
  REQUIRE_FALSE(stopped);
  CHECK(stopped.error().message.find((dir.path / "refs" / broken).string()) != std::string::npos);
  CHECK(stopped.error().message.find("nothing removed") != std::string::npos);
  CHECK(stopped.error().message.find("gpuckpt store unref fedcba9876543210fedcba9876543210") != std::string::npos);
  CHECK(fs::exists(store->path_of(other.manifest.digests[0])));
}

TEST_CASE("chunk gc: one collection at a time; what is not the store's is left alone", "[unit]") {
  TempDir dir("gpuckpt-gc-store");
  auto store = open_store(dir);
  const auto dumped = checkpoint(store, {1});
  auto first = gc::Collection::begin(*store, gc::Options{});
  REQUIRE(first);
  auto second = gc::Collection::begin(*store, gc::Options{});
  REQUIRE_FALSE(second);
  CHECK(second.error().errno_value == EBUSY);
  CHECK(second.error().message.find("another garbage collection") != std::string::npos);
  first->reset();

  // A symlink named like a chunk, a stray file, a link in trash/ pointing outside: none followed or removed.
  TempDir outside("gpuckpt-gc-outside");
  std::ofstream(outside.path / "precious") << "not the store's";
  const std::string fake(64, 'e');
  fs::create_directories(dir.path / "sha256" / "ee");
  fs::create_symlink(outside.path / "precious", dir.path / "sha256" / "ee" / fake);
  std::ofstream(dir.path / "sha256" / "ee" / "notes.txt") << "x";
  fs::create_directories(dir.path / "trash");
  fs::create_symlink(outside.path / "precious", dir.path / "trash" / std::string(64, 'd'));
  std::ofstream(dir.path / "refs" / "README") << "not a reference";
  age_chunks(dir.path);
  auto report = gc::collect(*store, removing());
  REQUIRE(report);
  CHECK(report->garbage_chunks == 0);
  CHECK(report->unknown.size() == 3);
  CHECK(fs::exists(outside.path / "precious"));
  CHECK(fs::is_symlink(dir.path / "sha256" / "ee" / fake));
  CHECK(complete(dumped, *store));
}
