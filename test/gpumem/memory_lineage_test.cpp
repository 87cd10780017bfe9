// Unchanged chunks of a second checkpoint: recognised by XXH3-64 against the same process's previous manifest
// (gpu_manifest.h KnownChunks) instead of hashed with SHA-256, and the node's records of each live process's last
// manifest (memory_lineage.h): kept, recalled, removed once their process is gone, refused where not root's alone.
#include <catch2/catch_test_macros.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "gpumem/memory_lineage.h"
#include "test/support/random_bytes.h"
#include "test/support/temp_dir.h"

namespace gi = gpuckpt::gpu_image;
namespace cs = gpuckpt::chunk_store;
namespace ml = gpuckpt::memory_lineage;
namespace fs = std::filesystem;
using gpuckpt::Result;
using gpuckpt::test::random_bytes;
using gpuckpt::test::TempDir;

namespace {

constexpr std::size_t kChunk = 1u << 20;

struct Dump {
  gi::Manifest manifest;
  std::size_t recognised = 0, reused = 0;
  std::uint64_t written = 0;
};

// One process's memory (chunks of kChunk) dumped into `store`, with `known` as the dump is given it.
Dump dump(std::shared_ptr<cs::Store> store, const std::vector<std::vector<std::byte>>& chunks,
          std::shared_ptr<const gi::KnownChunks> known = nullptr) {
  gi::ImageHeader header;
  header.vpid = 9;
  header.chunk_size = kChunk;
  auto writer = gi::StoreWriter::create(store, header, {{0x7f0000000000, chunks.size() * kChunk}}, gi::new_checkpoint_id(),
                                        std::move(known));
  REQUIRE(writer);
  gi::Settings settings;
  settings.compression = {gi::CompressionMode::Off, 1};
  gi::ChunkCodec codec(kChunk);
  gi::CompressionHistory history;
  Dump out;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    // As the dump does: a chunk KnownChunks may recognise by its XXH3-64 first, else hashed and stored.
    auto unchanged = (*writer)->add_unchanged(0, c, gi::checksum(chunks[c]), static_cast<std::uint32_t>(kChunk));
    REQUIRE(unchanged);
    auto stored = *unchanged ? Result<gi::StoredChunk>(**unchanged)
                             : (*writer)->add(0, c, chunks[c], codec, settings, history);
    REQUIRE(stored);
    out.recognised += stored->recognised ? 1 : 0;
    out.reused += stored->reused ? 1 : 0;
    out.written += stored->written_bytes;
  }
  TempDir images("gpuckpt-images-test");
  REQUIRE((*writer)->finish(images.fd));
  out.manifest = (*writer)->manifest();
  return out;
}

std::size_t chunk_files(const fs::path& store) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(store / "sha256"))
    if (e.is_regular_file()) ++n;
  return n;
}

// A host root whose procfs holds a boot id and, per pid, a stat line with its start time (field 22).
struct FakeProc {
  TempDir dir{"gpuckpt-proc-test"};
  explicit FakeProc(const std::string& boot_id) {
    fs::create_directories(dir.path / "proc/sys/kernel/random");
    std::ofstream(dir.path / "proc/sys/kernel/random/boot_id") << boot_id << "\n";
  }
  void process(int pid, std::uint64_t start_ticks) {
    fs::create_directories(dir.path / "proc" / std::to_string(pid));
    std::ostringstream line;
    line << pid << " (a (tricky) name) S";
    for (int field = 4; field <= 21; ++field) line << " " << field;
    line << " " << start_ticks << " 23 24\n";
    std::ofstream(dir.path / "proc" / std::to_string(pid) / "stat") << line.str();
  }
  void gone(int pid) { fs::remove_all(dir.path / "proc" / std::to_string(pid)); }
  gpuckpt::HostRoot host() const { return gpuckpt::HostRoot(dir.path); }
};

std::shared_ptr<cs::Store> open_store(const fs::path& root) {
  auto opened = cs::Store::open(root, true);
  REQUIRE(opened);
  return std::shared_ptr<cs::Store>(std::move(*opened));
}

std::set<std::string> records_in(const fs::path& node_store) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(node_store / ml::kRecordsDir)) names.insert(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("unchanged chunks: a second dump names them by the previous manifest's digests, not hashing them", "[unit]") {
  TempDir dir("gpuckpt-store-test");
  std::shared_ptr<cs::Store> store = open_store(dir.path);
  std::vector<std::vector<std::byte>> memory = {random_bytes(kChunk, 1), std::vector<std::byte>(kChunk),
                                                random_bytes(kChunk, 3), random_bytes(kChunk, 4)};
  const Dump first = dump(store, memory);
  CHECK(first.recognised == 0);
  REQUIRE(chunk_files(dir.path) == 3);

  // Chunk 2 changed (a KV cache); 0 and 3 did not (weights); 1 stays zero.
  memory[2] = random_bytes(kChunk, 30);
  auto known = std::make_shared<const gi::KnownChunks>(first.manifest);
  CHECK(known->size() == 3);
  CHECK(known->checkpoint() == first.manifest.checkpoint);
  const Dump second = dump(store, memory, known);
  CHECK(second.recognised == 2);
  CHECK(second.reused == 2);
  CHECK(second.written >= kChunk);   // the changed chunk, hashed and stored
  CHECK(chunk_files(dir.path) == 4);
  // The same manifest a dump hashing every chunk writes: the digests are the SHA-256 of these bytes.
  const Dump hashed = dump(store, memory);
  CHECK(hashed.recognised == 0);
  CHECK(second.manifest.digests == hashed.manifest.digests);
  for (std::size_t c : {0u, 2u, 3u}) CHECK(second.manifest.digests[c] == cs::sha256(memory[c]));
  CHECK(second.manifest.entries[2].checksum == gi::checksum(memory[2]));
}

TEST_CASE("unchanged chunks: recognised by a checksum computed in pieces, without the bytes", "[unit]") {
  TempDir dir("gpuckpt-store-test");
  std::shared_ptr<cs::Store> store = open_store(dir.path);
  const std::vector<std::vector<std::byte>> memory = {random_bytes(kChunk, 1), random_bytes(kChunk, 2)};
  const Dump first = dump(store, memory);
  // The checksum of the pieces is the checksum of the whole.
  gi::ChecksumStream stream;
  for (std::size_t at = 0; at < kChunk; at += 256 << 10) stream.update(std::span(memory[0]).subspan(at, 256 << 10));
  REQUIRE(stream.value() == gi::checksum(memory[0]));
  stream.reset();
  stream.update(memory[1]);
  CHECK(stream.value() == gi::checksum(memory[1]));

  gi::ImageHeader header;
  header.vpid = 9;
  header.chunk_size = kChunk;
  auto writer = gi::StoreWriter::create(store, header, {{0x7f0000000000, 2 * kChunk}}, gi::new_checkpoint_id(),
                                        std::make_shared<const gi::KnownChunks>(first.manifest));
  REQUIRE(writer);
  REQUIRE((*writer)->knows_chunks());
  auto same = (*writer)->add_unchanged(0, 0, gi::checksum(memory[0]), kChunk);
  REQUIRE(same);
  REQUIRE(*same);
  CHECK((*same)->recognised);
  CHECK((*same)->written_bytes == 0);
  // Changed bytes: not recognised, so the caller reads the chunk whole and adds it.
  const auto changed = random_bytes(kChunk, 20);
  auto other = (*writer)->add_unchanged(0, 1, gi::checksum(changed), kChunk);
  REQUIRE(other);
  CHECK_FALSE(*other);
  gi::Settings settings;
  gi::ChunkCodec codec(kChunk);
  gi::CompressionHistory history;
  auto added = (*writer)->add(0, 1, changed, codec, settings, history);
  REQUIRE(added);
  CHECK_FALSE(added->recognised);
  CHECK(added->written_bytes >= kChunk);
  CHECK_FALSE((*writer)->add_unchanged(0, 2, 0, kChunk));   // outside the regions: refused
  TempDir images("gpuckpt-images-test");
  REQUIRE((*writer)->finish(images.fd));
  CHECK((*writer)->manifest().digests[0] == cs::sha256(memory[0]));
  CHECK((*writer)->manifest().digests[1] == cs::sha256(changed));
}

TEST_CASE("unchanged chunks: the previous manifest's word decides, so only a trusted one may feed it", "[unit]") {
  // A manifest whose XXH3-64 for chunk 0 is that of other bytes: the dump names chunk 0 by its digest without
  // hashing. This is why only manifests the dump computed, or a restore checked by XXH3-64, are kept.
  TempDir dir("gpuckpt-store-test");
  std::shared_ptr<cs::Store> store = open_store(dir.path);
  const std::vector<std::vector<std::byte>> before = {random_bytes(kChunk, 1), random_bytes(kChunk, 2)};
  gi::Manifest previous = dump(store, before).manifest;
  const auto other = random_bytes(kChunk, 99);
  previous.entries[0].checksum = gi::checksum(other);
  const Dump next = dump(store, {other, before[1]}, std::make_shared<const gi::KnownChunks>(previous));
  CHECK(next.recognised == 2);
  CHECK(next.manifest.digests[0] == cs::sha256(before[0]));   // not the SHA-256 of `other`: taken on the manifest's word
}

TEST_CASE("unchanged chunks: a known chunk no longer in the store, an ambiguous checksum, no checksums", "[unit]") {
  TempDir dir("gpuckpt-store-test");
  std::shared_ptr<cs::Store> store = open_store(dir.path);
  const std::vector<std::vector<std::byte>> memory = {random_bytes(kChunk, 1), random_bytes(kChunk, 2)};
  const gi::Manifest previous = dump(store, memory).manifest;
  // Chunk 0 collected since: hashed and written again, under its true digest.
  fs::remove(store->path_of(previous.digests[0]));
  const Dump again = dump(store, memory, std::make_shared<const gi::KnownChunks>(previous));
  CHECK(again.recognised == 1);
  CHECK(again.written >= kChunk);
  CHECK(fs::is_regular_file(store->path_of(cs::sha256(memory[0]))));
  CHECK(again.manifest.digests[0] == cs::sha256(memory[0]));

  // Two chunks of one XXH3-64 but different digests: neither is recognised by it.
  gi::Manifest ambiguous = previous;
  ambiguous.entries[1].checksum = ambiguous.entries[0].checksum;
  const gi::KnownChunks from_ambiguous(ambiguous);
  CHECK(from_ambiguous.size() == 0);
  CHECK(from_ambiguous.find(previous.entries[0].checksum, kChunk) == nullptr);
  // The right checksum but another size: not the same chunk.
  const gi::KnownChunks from_previous(previous);
  REQUIRE(from_previous.find(previous.entries[1].checksum, kChunk) != nullptr);
  CHECK(from_previous.find(previous.entries[1].checksum, kChunk / 2) == nullptr);
  // A manifest from before the xxh3_64 list (older gpuckpt versions wrote none): no chunk can be recognised by its
  // checksum, so the next dump hashes every chunk.
  gi::Manifest old = previous;
  old.checksums = false;
  CHECK(gi::KnownChunks(old).size() == 0);
}

TEST_CASE("process identity: boot, pid and start time from procfs", "[unit]") {
  auto self = ml::identify_process(::getpid());
  REQUIRE(self);
  CHECK(self->pid == ::getpid());
  CHECK(self->boot_id.size() == 32);
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int n = 3; n <= 22; ++n) fields >> field;
  CHECK(std::to_string(self->start_ticks) == field);

  FakeProc proc("0123abcd-0123-4567-89ab-0123456789ab");
  proc.process(42, 777);
  auto fake = ml::identify_process(42, proc.host());
  REQUIRE(fake);
  CHECK(fake->boot_id == "0123abcd0123456789ab0123456789ab");
  CHECK(fake->start_ticks == 777);   // the command's own parentheses do not shift the fields
  CHECK(fake->record_name() == "0123abcd0123456789ab0123456789ab-42-777.json");
  auto none = ml::identify_process(43, proc.host());
  REQUIRE_FALSE(none);
  CHECK(none.error().message.find("pid 43") != std::string::npos);
}

TEST_CASE("process records: kept, recalled, replaced, removed once their process is gone", "[unit]") {
  if (::geteuid() != 0) SKIP("the node store must be root's");
  TempDir root("gpuckpt-node-test");
  const std::string node_store = (root.path / "chunks").string();
  std::shared_ptr<cs::Store> store = open_store(node_store);
  const Dump first = dump(store, {random_bytes(kChunk, 1)});
  const Dump second = dump(store, {random_bytes(kChunk, 2)});
  FakeProc proc("0123abcd-0123-4567-89ab-0123456789ab");
  proc.process(100, 5);
  proc.process(200, 6);
  const ml::ProcessIdentity a = *ml::identify_process(100, proc.host());
  const ml::ProcessIdentity b = *ml::identify_process(200, proc.host());

  auto none = ml::recall(node_store, a);
  REQUIRE_FALSE(none);
  CHECK(none.error().errno_value == ENOENT);
  REQUIRE(ml::remember(node_store, a, first.manifest, proc.host()));
  REQUIRE(ml::remember(node_store, b, first.manifest, proc.host()));
  CHECK((fs::status(fs::path(node_store) / ml::kRecordsDir).permissions() & fs::perms::all) == fs::perms::owner_all);
  auto back = ml::recall(node_store, a);
  REQUIRE(back);
  CHECK(gi::serialize_manifest(*back) == gi::serialize_manifest(first.manifest));
  // A later dump of a replaces its record.
  REQUIRE(ml::remember(node_store, a, second.manifest, proc.host()));
  CHECK(ml::recall(node_store, a)->checkpoint == second.manifest.checkpoint);

  // Process b exits and its pid is reused by another process; a record of another boot; a write that died.
  proc.process(200, 60);
  std::ofstream(fs::path(node_store) / ml::kRecordsDir / "ffffffffffffffffffffffffffffffff-100-5.json") << "{}";
  // A write that died an hour ago is removed; one that may still be in flight (another CRIU) is left alone.
  const fs::path records = fs::path(node_store) / ml::kRecordsDir;
  std::ofstream(records / ".dead.json.partial") << "{";
  fs::last_write_time(records / ".dead.json.partial", fs::file_time_type::clock::now() - std::chrono::hours(1));
  std::ofstream(records / ".writing.json.partial") << "{";
  proc.process(300, 9);
  const ml::ProcessIdentity c = *ml::identify_process(300, proc.host());
  REQUIRE(ml::remember(node_store, c, first.manifest, proc.host()));
  CHECK(records_in(node_store) == std::set<std::string>{a.record_name(), c.record_name(), ".writing.json.partial"});
  fs::remove(records / ".writing.json.partial");
  auto reused_pid = ml::recall(node_store, *ml::identify_process(200, proc.host()));
  REQUIRE_FALSE(reused_pid);
  CHECK(reused_pid.error().errno_value == ENOENT);
  proc.gone(100);
  REQUIRE(ml::remember(node_store, c, second.manifest, proc.host()));
  CHECK(records_in(node_store) == std::set<std::string>{c.record_name()});
}

TEST_CASE("process records: refused where others could write them, a symlink not followed", "[unit]") {
  if (::geteuid() != 0) SKIP("the node store must be root's");
  TempDir root("gpuckpt-node-test");
  const std::string node_store = (root.path / "chunks").string();
  std::shared_ptr<cs::Store> store = open_store(node_store);
  const Dump first = dump(store, {random_bytes(kChunk, 1)});
  const ml::ProcessIdentity self = *ml::identify_process(::getpid());
  REQUIRE(ml::remember(node_store, self, first.manifest));
  // A record replaced by a symlink to a file elsewhere: not read.
  const fs::path record = fs::path(node_store) / ml::kRecordsDir / self.record_name();
  std::ofstream(root.path / "planted.json") << gi::serialize_manifest(first.manifest);
  fs::remove(record);
  fs::create_symlink(root.path / "planted.json", record);
  auto followed = ml::recall(node_store, self);
  REQUIRE_FALSE(followed);
  CHECK(followed.error().errno_value == ELOOP);
  fs::remove(record);
  // A records directory others can write: neither kept nor recalled.
  fs::permissions(fs::path(node_store) / ml::kRecordsDir, fs::perms::others_write, fs::perm_options::add);
  auto kept = ml::remember(node_store, self, first.manifest);
  REQUIRE_FALSE(kept);
  CHECK(kept.error().errno_value == EPERM);
  CHECK(kept.error().message.find(ml::kRecordsDir) != std::string::npos);
  // The same for the store itself.
  fs::permissions(fs::path(node_store) / ml::kRecordsDir, fs::perms::others_write, fs::perm_options::remove);
  fs::permissions(node_store, fs::perms::group_write, fs::perm_options::add);
  auto recalled = ml::recall(node_store, self);
  REQUIRE_FALSE(recalled);
  CHECK(recalled.error().errno_value == EPERM);
}

TEST_CASE("restore timings: left for a pid, replaced, taken once, never into a store that does not exist", "[unit]") {
  if (::geteuid() != 0) SKIP("the node store must be root's");
  TempDir root("gpuckpt-node-test");
  const std::string node_store = (root.path / "chunks").string();
  FakeProc proc("0123abcd-0123-4567-89ab-0123456789ab");
  proc.process(100, 5);
  proc.process(200, 6);

  // No node store: nothing is made for this (a node that restores inline archives only), nothing to take.
  auto refused = ml::spool_restore_timings(node_store, 100, "{}", proc.host());
  REQUIRE_FALSE(refused);
  CHECK_FALSE(fs::exists(node_store));
  auto nothing = ml::take_restore_timings(node_store, 100);
  REQUIRE(nothing);
  CHECK_FALSE(nothing->has_value());

  open_store(node_store);
  REQUIRE(ml::spool_restore_timings(node_store, 100, R"({"gpu-restore":1})", proc.host()));
  REQUIRE(ml::spool_restore_timings(node_store, 100, R"({"gpu-restore":2})", proc.host()));   // a later restore
  REQUIRE(ml::spool_restore_timings(node_store, 200, R"({"gpu-restore":3})", proc.host()));
  const fs::path spool = fs::path(node_store) / ml::kRestoreTimingsDir;
  CHECK((fs::status(spool).permissions() & fs::perms::all) == fs::perms::owner_all);
  auto taken = ml::take_restore_timings(node_store, 100);
  REQUIRE(taken);
  REQUIRE(taken->has_value());
  CHECK(**taken == R"({"gpu-restore":2})");
  auto again = ml::take_restore_timings(node_store, 100);
  REQUIRE(again);
  CHECK_FALSE(again->has_value());

  // A pid that is gone leaves its file only until the next restore is spooled (a CRI restore no agent took).
  proc.gone(200);
  proc.process(300, 7);
  REQUIRE(ml::spool_restore_timings(node_store, 300, "{}", proc.host()));
  CHECK_FALSE(fs::exists(spool / "200.json"));
  CHECK(fs::exists(spool / "300.json"));

  // Too much text is refused before anything is written.
  CHECK_FALSE(ml::spool_restore_timings(node_store, 300, std::string(ml::kMaxRestoreTimingsBytes + 1, ' '), proc.host()));
  CHECK(fs::file_size(spool / "300.json") == 2);
}

TEST_CASE("restore timings: a planted symlink or an oversized file is refused and removed", "[unit]") {
  if (::geteuid() != 0) SKIP("the node store must be root's");
  TempDir root("gpuckpt-node-test");
  const std::string node_store = (root.path / "chunks").string();
  open_store(node_store);
  REQUIRE(ml::spool_restore_timings(node_store, ::getpid(), "{}"));
  const fs::path spool = fs::path(node_store) / ml::kRestoreTimingsDir;
  std::ofstream(root.path / "secret") << "not for the agent";
  fs::create_symlink(root.path / "secret", spool / "41.json");
  auto followed = ml::take_restore_timings(node_store, 41);
  REQUIRE_FALSE(followed);
  CHECK(followed.error().errno_value == ELOOP);
  CHECK(followed.error().message.find("41.json") != std::string::npos);
  CHECK_FALSE(fs::is_symlink(spool / "41.json"));
  CHECK(fs::exists(root.path / "secret"));
  std::ofstream(spool / "42.json") << std::string(ml::kMaxRestoreTimingsBytes + 1, ' ');
  auto oversized = ml::take_restore_timings(node_store, 42);
  REQUIRE_FALSE(oversized);
  CHECK(oversized.error().message.find("at most") != std::string::npos);
  CHECK_FALSE(fs::exists(spool / "42.json"));
  // A spool others can write: nothing is left there.
  fs::permissions(spool, fs::perms::others_write, fs::perm_options::add);
  auto open_spool = ml::spool_restore_timings(node_store, ::getpid(), "{}");
  REQUIRE_FALSE(open_spool);
  CHECK(open_spool.error().errno_value == EPERM);
}
