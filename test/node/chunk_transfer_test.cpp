// Chunks of a store-backed checkpoint between agents (node/chunk_transfer.h): POST /v1/chunks/missing answers what
// the agent's store lacks and refuses hostile bodies (bad hex, duplicates, too many, no store configured); PUT
// /v1/chunks/<digest> takes a verified chunk file into the store (again: "present") and refuses, keeping nothing, a
// wrong digest, a bad header, inconsistent sizes, a body over the bound or cut short, a zstd payload that decodes
// beyond its raw size, a name that is no digest, and an agent without a store; a received
// archive is admitted only when every chunk is in the store afterwards (carried ones imported, the rest present),
// with references written; a corrupt carried chunk or a missing one discards the received file and references
// nothing.
#include <catch2/catch_test_macros.hpp>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <future>
#include <thread>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "archive/checkpoint_archive.h"
#include "archive/checkpoint_export.h"
#include "gpumem/chunk_gc.h"
#include "gpumem/chunk_receive.h"
#include "gpumem/chunk_store.h"
#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "node/service.h"
#include "test/support/store_checkpoint.h"
#include "test/support/temp_dir.h"

namespace cs = gpuckpt::chunk_store;
namespace ce = gpuckpt::checkpoint_export;
namespace fs = std::filesystem;
using gpuckpt::ArchiveLimits;
using gpuckpt::node::GpuMemoryConfig;
using gpuckpt::test::TempDir;
using gpuckpt::test::compressible_chunk;
using gpuckpt::test::open_store;
using gpuckpt::test::random_chunk;

namespace {

GpuMemoryConfig with_store(const fs::path& dir) {
  GpuMemoryConfig c;
  c.store = dir.string();
  return c;
}

GpuMemoryConfig inline_store() {
  GpuMemoryConfig c;
  c.store = "inline";
  return c;
}

void copy_chunk(const cs::Store& from, cs::Store& to, const cs::Digest& d) {
  auto header = from.stat(d);
  REQUIRE(header);
  std::vector<std::byte> file;
  REQUIRE(from.read(d, cs::kChunkHeaderSize + header->stored_size, file));
  REQUIRE(to.put(d, *header, std::span<const std::byte>(file).subspan(cs::kChunkHeaderSize)));
}

bool no_refs(const fs::path& store) { return !fs::exists(store / "refs") || fs::is_empty(store / "refs"); }

std::string sha256_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cs::sha256(std::as_bytes(std::span(bytes.data(), bytes.size()))).hex();
}

std::vector<std::byte> chunk_file(const cs::Store& store, const cs::Digest& d) {
  auto header = store.stat(d);
  REQUIRE(header);
  std::vector<std::byte> file;
  REQUIRE(store.read(d, cs::kChunkHeaderSize + header->stored_size, file));
  return file;
}

// Regular files under the store's sha256/ (chunks, and temporary files a refused upload would have left).
std::size_t files_in(const fs::path& store) {
  std::size_t n = 0;
  if (!fs::exists(store / "sha256")) return 0;
  for (const auto& entry : fs::recursive_directory_iterator(store / "sha256"))
    if (entry.is_regular_file()) ++n;
  return n;
}

// PUT /v1/chunks/<hex> with `body`, announced as `length` bytes (its size when unset); `cut` bytes are held back
// and the connection "breaks" (the reader returns false).
gpuckpt::Result<nlohmann::json> put_chunk(gpuckpt::node::ChunkUploads& uploads, const std::string& name,
                                          std::span<const std::byte> body, std::string length = {},
                                          std::size_t cut = 0, bool* body_read = nullptr) {
  if (length.empty()) length = std::to_string(body.size());
  return uploads.receive(name, length, [&](const std::function<bool(const char*, std::size_t)>& sink) {
    if (body_read) *body_read = true;
    // In two pieces, as a connection delivers it.
    const std::size_t end = body.size() - cut, half = end / 2;
    const auto* data = reinterpret_cast<const char*>(body.data());
    return sink(data, half) && (half == end || sink(data + half, end - half)) && cut == 0;
  });
}

// The distinct chunks a store_checkpoint() names, in digest order.
std::vector<cs::Digest> chunks_of(const gpuckpt::test::StoreCheckpoint& c) {
  auto named = gpuckpt::node::manifest_chunks(c.archive, ArchiveLimits{});
  REQUIRE(named);
  return {named->begin(), named->end()};
}

}  // namespace

TEST_CASE("missing chunks: what the store lacks, in the order asked; present ones counted", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto store = open_store(dir.path / "store");
  const auto c = gpuckpt::test::store_checkpoint(store, dir.path);
  const auto absent = cs::sha256(random_chunk(50));
  const auto present = cs::sha256(random_chunk(1));
  auto answer = gpuckpt::node::missing_chunks(with_store(dir.path / "store"),
                                              {{"digests", {absent.hex(), present.hex()}}});
  REQUIRE(answer);
  CHECK((*answer)["missing"] == nlohmann::json::array({absent.hex()}));
  CHECK((*answer)["present"] == 1);
  // A chunk file cut short is no chunk: missing.
  fs::resize_file(store->path_of(present), 10);
  answer = gpuckpt::node::missing_chunks(with_store(dir.path / "store"), {{"digests", {present.hex()}}});
  REQUIRE(answer);
  CHECK((*answer)["missing"] == nlohmann::json::array({present.hex()}));
  // A store not made yet lacks everything (the import makes it).
  answer = gpuckpt::node::missing_chunks(with_store(dir.path / "later"), {{"digests", {present.hex()}}});
  REQUIRE(answer);
  CHECK((*answer)["missing"].size() == 1);
  CHECK(!fs::exists(dir.path / "later"));
  answer = gpuckpt::node::missing_chunks(with_store(dir.path / "store"), {{"digests", nlohmann::json::array()}});
  REQUIRE(answer);
  CHECK((*answer)["missing"].empty());
}

TEST_CASE("missing chunks refuses hostile bodies and an agent without a store, naming what is wrong", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  const auto config = with_store(dir.path / "store");
  const std::string good = cs::sha256(random_chunk(1)).hex();
  const auto refused = [&](const nlohmann::json& body, int errno_value, const std::string& says) {
    auto answer = gpuckpt::node::missing_chunks(config, body);
    INFO(body.dump().substr(0, 200));
    REQUIRE(!answer);
    CHECK(answer.error().errno_value == errno_value);
    CHECK(answer.error().message.find(says) != std::string::npos);
  };
  refused(nlohmann::json::parse("not json", nullptr, false), EINVAL, "\"digests\"");
  refused(nlohmann::json::array(), EINVAL, "\"digests\"");
  refused({{"digest", {good}}}, EINVAL, "\"digests\"");
  refused({{"digests", good}}, EINVAL, "\"digests\"");
  refused({{"digests", {good}}, {"more", 1}}, EINVAL, "\"digests\"");
  refused({{"digests", {7}}}, EINVAL, "digests[0] is not a string");
  std::string upper = good;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  for (const std::string& bad : {upper, good.substr(0, 63), good + "0", std::string("../../etc/passwd"),
                                 std::string(64, 'g'), std::string()})
    refused({{"digests", {good, bad}}}, EINVAL, "digests[1]");
  refused({{"digests", {good, good}}}, EINVAL, "asked twice");
  nlohmann::json many = nlohmann::json::array();
  for (unsigned i = 0; i <= gpuckpt::node::kMaxMissingQuery; ++i) many.push_back(cs::sha256(random_chunk(i)).hex());
  refused({{"digests", many}}, EFBIG, "513 digests");
  many.erase(many.begin());
  CHECK(gpuckpt::node::missing_chunks(config, {{"digests", many}}));

  // No store (inline): the answer names the setting.
  auto answer = gpuckpt::node::missing_chunks(inline_store(), {{"digests", {good}}});
  REQUIRE(!answer);
  CHECK(answer.error().errno_value == EBUSY);
  CHECK(answer.error().message.find("gpu_memory.store is inline") != std::string::npos);
}

TEST_CASE("a received archive carrying the chunks the target lacks is imported, referenced and restorable",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  auto target = open_store(dir.path / "node-b");
  copy_chunk(*source, *target, cs::sha256(random_chunk(3)));
  copy_chunk(*source, *target, cs::sha256(compressible_chunk(2)));

  // What a sender does: ask, export only what is missing.
  auto named = gpuckpt::node::manifest_chunks(c.archive, ArchiveLimits{});
  REQUIRE(named);
  CHECK(named->size() == gpuckpt::test::kStoreCheckpointChunks);
  std::set<cs::Digest> lacking;
  for (const auto& d : *named)
    if (!target->stat(d)) lacking.insert(d);
  CHECK(lacking.size() == 2);
  const fs::path received = dir.path / "received.tar";
  REQUIRE(ce::export_checkpoint(c.archive, source, received, ArchiveLimits{}, &lacking));

  auto admitted = gpuckpt::node::admit_received_archive(received, with_store(dir.path / "node-b"), ArchiveLimits{});
  REQUIRE(admitted);
  CHECK((*admitted)["carried_chunks"] == 2);
  CHECK((*admitted)["added_chunks"] == 2);
  CHECK((*admitted)["references"] == 2);
  auto info = gpuckpt::inspect_checkpoint_archive(received, ArchiveLimits{});
  REQUIRE(info);
  CHECK(info->carried_chunks == 0);
  CHECK(fs::exists(dir.path / "node-b" / "refs" / cs::ref_name(c.id, 7)));
  gpuckpt::test::check_restorable(c, received, target);

  // The same archive without carried chunks on a node that has them all: referenced, the file left as it is.
  auto node_c = open_store(dir.path / "node-c");
  for (const auto& d : *named) copy_chunk(*source, *node_c, d);
  fs::copy_file(c.archive, dir.path / "plain.tar");
  const auto before = sha256_of(dir.path / "plain.tar");
  admitted = gpuckpt::node::admit_received_archive(dir.path / "plain.tar", with_store(dir.path / "node-c"),
                                                   ArchiveLimits{});
  REQUIRE(admitted);
  CHECK((*admitted)["carried_chunks"] == 0);
  CHECK((*admitted)["references"] == 2);
  CHECK(sha256_of(dir.path / "plain.tar") == before);

  // An archive without manifests: nothing to do.
  const fs::path cpu_only = dir.path / "cpu.tar";
  REQUIRE(gpuckpt::pack_tar({{"config.dump", {}, R"({"name":"x","id":"1"})"},
                             {"spec.dump", {}, R"({"annotations":{"io.container.manager":"libpod"}})"},
                             {"checkpoint/inventory.img", {}, "x"}},
                            cpu_only));
  admitted = gpuckpt::node::admit_received_archive(cpu_only, with_store(dir.path / "node-b"), ArchiveLimits{});
  INFO((admitted ? std::string() : admitted.error().message));
  REQUIRE(admitted);
  CHECK(admitted->is_null());
}

TEST_CASE("a received archive whose chunk the target stores in another encoding is admitted, its manifests rewritten",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  auto target = open_store(dir.path / "node-b");
  auto named = gpuckpt::node::manifest_chunks(c.archive, ArchiveLimits{});
  REQUIRE(named);
  // The compressible chunk is zstd in the source's store; the target holds it raw (its node did not compress).
  const auto chunk = compressible_chunk(2);
  const auto zstd_d = cs::sha256(chunk);
  REQUIRE(source->stat(zstd_d)->encoding == static_cast<std::uint8_t>(gpuckpt::gpu_image::Encoding::Zstd));
  for (const auto& d : *named)
    if (d != zstd_d) copy_chunk(*source, *target, d);
  cs::ChunkHeader raw_header;
  raw_header.encoding = static_cast<std::uint8_t>(gpuckpt::gpu_image::Encoding::Raw);
  raw_header.raw_size = static_cast<std::uint32_t>(chunk.size());
  raw_header.stored_size = raw_header.raw_size;
  REQUIRE(target->put(zstd_d, raw_header, chunk));

  fs::copy_file(c.archive, dir.path / "plain.tar");
  auto admitted = gpuckpt::node::admit_received_archive(dir.path / "plain.tar", with_store(dir.path / "node-b"),
                                                        ArchiveLimits{});
  INFO((admitted ? admitted->dump() : admitted.error().message));
  REQUIRE(admitted);
  CHECK((*admitted)["references"] == 2);
  // The target's file stayed as it was; the archive now says how it is stored there, and reads back whole.
  CHECK(target->stat(zstd_d)->encoding == raw_header.encoding);
  gpuckpt::test::check_restorable(c, dir.path / "plain.tar", target);
}

TEST_CASE("a received archive is refused when a chunk stays missing, a carried one is corrupt, or no store is kept",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  const auto kept = cs::sha256(random_chunk(4));

  // Without carried chunks, into a store that lacks one: named, nothing referenced.
  auto target = open_store(dir.path / "node-b");
  auto named = gpuckpt::node::manifest_chunks(c.archive, ArchiveLimits{});
  REQUIRE(named);
  for (const auto& d : *named)
    if (d != kept) copy_chunk(*source, *target, d);
  fs::copy_file(c.archive, dir.path / "plain.tar");
  auto admitted = gpuckpt::node::admit_received_archive(dir.path / "plain.tar", with_store(dir.path / "node-b"),
                                                        ArchiveLimits{});
  REQUIRE(!admitted);
  CHECK(admitted.error().errno_value == EBADMSG);
  CHECK(admitted.error().message.find(kept.hex()) != std::string::npos);
  CHECK(no_refs(dir.path / "node-b"));

  // Carrying the missing one, corrupted on the way: refused naming it, nothing referenced, not in the store.
  const std::set<cs::Digest> lacking{kept};
  const fs::path exported = dir.path / "carried.tar";
  REQUIRE(ce::export_checkpoint(c.archive, source, exported, ArchiveLimits{}, &lacking));
  {
    std::fstream f(exported, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // The carried chunk is the last file entry; its payload (random, stored raw) ends before the tar's trailer.
    const auto at = bytes.rfind(kept.hex());
    REQUIRE(at != std::string::npos);
    const std::size_t payload = (at / 512 + 1) * 512 + cs::kChunkHeaderSize + 100;
    f.seekp(static_cast<std::streamoff>(payload));
    f.put(static_cast<char>(bytes[payload] ^ 0x5a));
  }
  admitted = gpuckpt::node::admit_received_archive(exported, with_store(dir.path / "node-b"), ArchiveLimits{});
  REQUIRE(!admitted);
  CHECK(admitted.error().errno_value == EBADMSG);
  CHECK(admitted.error().message.find(kept.hex()) != std::string::npos);
  CHECK(!target->stat(kept));
  CHECK(no_refs(dir.path / "node-b"));

  // An agent keeping no store refuses a store-backed archive, naming the setting.
  admitted = gpuckpt::node::admit_received_archive(dir.path / "plain.tar", inline_store(), ArchiveLimits{});
  REQUIRE(!admitted);
  CHECK(admitted.error().message.find("gpu_memory.store") != std::string::npos);
}

TEST_CASE("a commit declared store-backed whose admission fails discards the received file", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  fs::create_directories(dir.path / "incoming");
  // The target's store is empty: an archive without carried chunks cannot be admitted.
  gpuckpt::node::IncomingArchives incoming(dir.path / "incoming", 1 << 30, [&](const fs::path& received) {
    return gpuckpt::node::admit_received_archive(received, with_store(dir.path / "node-b"), ArchiveLimits{});
  });
  std::ifstream in(c.archive, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto send = [&](const std::string& name) {
    auto received = incoming.receive(name, "0", std::to_string(bytes.size()), [&](const auto& sink) {
      return sink(bytes.data(), bytes.size());
    });
    REQUIRE(received);
  };
  send("ck-a.tar");
  auto committed = incoming.commit("ck-a.tar", {{"size", bytes.size()}, {"sha256", sha256_of(c.archive)},
                                                {"store_backed", true}});
  REQUIRE(!committed);
  CHECK(committed.error().errno_value == EBADMSG);
  CHECK(committed.error().message.find("discarded") != std::string::npos);
  CHECK(committed.error().message.find(cs::sha256(random_chunk(1)).hex().substr(0, 8)) != std::string::npos);
  CHECK(fs::is_empty(dir.path / "incoming"));
  CHECK(no_refs(dir.path / "node-b"));

  // Not declared store-backed: put in place as bytes (its restore would stop at the missing chunks).
  send("ck-b.tar");
  committed = incoming.commit("ck-b.tar", {{"size", bytes.size()}, {"sha256", sha256_of(c.archive)}});
  REQUIRE(committed);
  CHECK(!committed->contains("chunks"));
  CHECK(fs::exists(dir.path / "incoming" / "ck-b.tar"));
  // "store_backed" must be a boolean.
  send("ck-c.tar");
  committed = incoming.commit("ck-c.tar", {{"size", bytes.size()}, {"sha256", sha256_of(c.archive)},
                                           {"store_backed", "yes"}});
  REQUIRE(!committed);
  CHECK(committed.error().errno_value == EINVAL);
}

TEST_CASE("PUT /v1/chunks/<digest>: a verified chunk file lands under its name, again it is present and touched",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  gpuckpt::test::store_checkpoint(source, dir.path);
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"));
  // A raw chunk and a zstd one, each the source store's own file.
  for (const auto& chunk : {random_chunk(1), compressible_chunk(2)}) {
    const auto d = cs::sha256(chunk);
    const auto file = chunk_file(*source, d);
    auto answer = put_chunk(uploads, d.hex(), file);
    INFO((answer ? answer->dump() : answer.error().message));
    REQUIRE(answer);
    CHECK((*answer)["present"] == false);
    CHECK((*answer)["stored_bytes"] == file.size() - cs::kChunkHeaderSize);
    CHECK((*answer)["raw_bytes"] == chunk.size());
    auto target = cs::Store::open(dir.path / "node-b", false);
    REQUIRE(target);
    CHECK(chunk_file(**target, d) == file);   // byte for byte: never recompressed

    // Again, after it aged: present, nothing written, its mtime now (a collection keeps it its grace period).
    const auto old = fs::file_time_type::clock::now() - std::chrono::hours(5);
    fs::last_write_time((*target)->path_of(d), old);
    answer = put_chunk(uploads, d.hex(), file);
    REQUIRE(answer);
    CHECK((*answer)["present"] == true);
    CHECK(fs::last_write_time((*target)->path_of(d)) > old + std::chrono::hours(4));
  }
  CHECK(files_in(dir.path / "node-b") == 2);
  CHECK(no_refs(dir.path / "node-b"));
}

TEST_CASE("PUT /v1/chunks/<digest> refuses what is not that chunk, keeping nothing of it", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  gpuckpt::test::store_checkpoint(source, dir.path);
  const auto raw_d = cs::sha256(random_chunk(1)), zstd_d = cs::sha256(compressible_chunk(2));
  const auto raw_file = chunk_file(*source, raw_d), zstd_file = chunk_file(*source, zstd_d);
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"));
  const auto refused = [&](const gpuckpt::Result<nlohmann::json>& answer, int errno_value, const std::string& says) {
    INFO((answer ? answer->dump() : answer.error().message));
    REQUIRE(!answer);
    CHECK(answer.error().errno_value == errno_value);
    CHECK(answer.error().message.find(says) != std::string::npos);
    CHECK(files_in(dir.path / "node-b") == 0);
  };
  const auto rewritten = [](std::vector<std::byte> file, const cs::ChunkHeader& h) {
    const auto header = cs::encode_header(h);
    std::copy(header.begin(), header.end(), file.begin());
    return file;
  };
  // The headers as sent: the version-1 wire form, whatever layout the source store keeps them in.
  auto raw_header = cs::decode_header(raw_file), zstd_header = cs::decode_header(zstd_file);
  REQUIRE(raw_header);
  REQUIRE(zstd_header);

  SECTION("a good file under another chunk's digest") {
    refused(put_chunk(uploads, zstd_d.hex(), raw_file), EBADMSG, "SHA-256 mismatch");
  }
  SECTION("a payload byte flipped") {
    auto file = raw_file;
    file[cs::kChunkHeaderSize + 77] ^= std::byte{0x5a};
    refused(put_chunk(uploads, raw_d.hex(), file), EBADMSG, "SHA-256 mismatch");
  }
  SECTION("a header byte flipped") {
    auto file = raw_file;
    file[17] ^= std::byte{0x01};
    refused(put_chunk(uploads, raw_d.hex(), file), EBADMSG, "header is corrupt");
  }
  SECTION("not a chunk file at all") {
    std::vector<std::byte> file(4096, std::byte{'x'});
    refused(put_chunk(uploads, raw_d.hex(), file), EBADMSG, "not a gpuckpt chunk");
  }
  SECTION("a raw chunk whose header's sizes disagree") {
    auto h = *raw_header;
    h.raw_size -= 1;
    refused(put_chunk(uploads, raw_d.hex(), rewritten(raw_file, h)), EBADMSG, "stored bytes for a raw chunk");
  }
  SECTION("a header saying more bytes than came") {
    auto h = *raw_header;
    h.stored_size += 10;
    refused(put_chunk(uploads, raw_d.hex(), rewritten(raw_file, h)), EBADMSG, "its header says");
  }
  SECTION("an unknown encoding") {
    auto h = *raw_header;
    h.encoding = 7;
    refused(put_chunk(uploads, raw_d.hex(), rewritten(raw_file, h)), EBADMSG, "not raw (0) or zstd (1)");
  }
  SECTION("a zstd payload that decodes to more than the header's raw size (a bomb)") {
    auto h = *zstd_header;
    h.raw_size = 4096;
    refused(put_chunk(uploads, zstd_d.hex(), rewritten(zstd_file, h)), EBADMSG, "zstd cannot decompress it");
  }
  SECTION("a raw size over the largest chunk") {
    auto h = *zstd_header;
    h.raw_size = gpuckpt::gpu_image::kMaxChunkSize + 1;
    refused(put_chunk(uploads, zstd_d.hex(), rewritten(zstd_file, h)), EBADMSG, "a chunk holds 1 to");
  }
  SECTION("a body cut short") {
    refused(put_chunk(uploads, raw_d.hex(), raw_file, std::to_string(raw_file.size()), 1000), EBADMSG,
            "ended after");
  }
  SECTION("a body longer than its Content-Length") {
    refused(put_chunk(uploads, raw_d.hex(), raw_file, std::to_string(raw_file.size() - 1)), EFBIG,
            "longer than its Content-Length");
  }
  SECTION("a Content-Length over the largest chunk file, refused before the body is read") {
    bool read = false;
    refused(put_chunk(uploads, raw_d.hex(), raw_file, std::to_string(gpuckpt::chunk_receive::kMaxChunkFileBytes + 1),
                      0, &read),
            EFBIG, "larger than a chunk file can be");
    CHECK(!read);
    refused(put_chunk(uploads, raw_d.hex(), raw_file, "99999999999999999999999"), EFBIG, "larger than");
    refused(put_chunk(uploads, raw_d.hex(), raw_file, "12ab"), EFBIG, "larger than");
  }
  SECTION("no Content-Length") {
    auto answer = uploads.receive(raw_d.hex(), "", [](const auto&) { return true; });
    refused(answer, EINVAL, "Content-Length");
  }
  SECTION("names that are no digest") {
    for (const std::string& name : {std::string("../../etc/passwd"), std::string(".."), raw_d.hex().substr(1),
                                   raw_d.hex() + "0", [&] {
                                     auto upper = raw_d.hex();
                                     for (auto& c : upper) c = static_cast<char>(std::toupper(c));
                                     return upper;
                                   }()}) {
      bool read = false;
      INFO(name);
      refused(put_chunk(uploads, name, raw_file, {}, 0, &read), EINVAL, "is not a SHA-256 digest");
      CHECK(!read);
    }
  }
  SECTION("an agent keeping no chunk store") {
    gpuckpt::node::ChunkUploads storeless{inline_store()};
    bool read = false;
    refused(put_chunk(storeless, raw_d.hex(), raw_file, {}, 0, &read), EBUSY, "gpu_memory.store");
    CHECK(!read);
    CHECK(!fs::exists(dir.path / "node-b"));
  }
  CHECK(no_refs(dir.path / "node-b"));
}

TEST_CASE("PUT /v1/chunks/<digest>: at most kMaxChunkUploads at once, more answered 429; an uploaded chunk is young",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  gpuckpt::test::store_checkpoint(source, dir.path);
  const auto d = cs::sha256(random_chunk(1));
  const auto file = chunk_file(*source, d);
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"));
  // kMaxChunkUploads uploads whose bodies have not come yet: each holds its place until released.
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  std::vector<std::promise<void>> reading(gpuckpt::node::kMaxChunkUploads);
  std::vector<std::future<gpuckpt::Result<nlohmann::json>>> held;
  // Released however the checks below end: a failed REQUIRE must not leave the uploads
  // waiting forever (destroyed before `held`, whose futures wait for them).
  struct ReleaseAtExit {
    std::promise<void>& release;
    bool done = false;
    void now() {
      if (!done) release.set_value();
      done = true;
    }
    ~ReleaseAtExit() { now(); }
  } release_at_exit{release};
  for (auto& started : reading)
    held.push_back(std::async(std::launch::async, [&, started = &started] {
      return uploads.receive(d.hex(), std::to_string(file.size()), [&](const auto& sink) {
        started->set_value();
        released.wait();
        return sink(reinterpret_cast<const char*>(file.data()), file.size());
      });
    }));
  for (auto& started : reading) started.get_future().wait();
  bool read = false;
  auto busy = put_chunk(uploads, d.hex(), file, {}, 0, &read);
  REQUIRE(!busy);
  CHECK(busy.error().errno_value == EAGAIN);
  CHECK(busy.error().message.find("retry") != std::string::npos);
  CHECK(!read);
  release_at_exit.now();
  for (auto& upload : held) {
    auto answer = upload.get();
    INFO((answer ? answer->dump() : answer.error().message));
    CHECK(answer);
  }
  // Room again.
  CHECK(put_chunk(uploads, d.hex(), file));

  // Unreferenced but young: a collection within the grace period keeps it; one with its mtime past it removes it.
  auto target = open_store(dir.path / "node-b");
  gpuckpt::chunk_gc::Options keep;
  keep.remove = true;
  auto report = gpuckpt::chunk_gc::collect(*target, keep);
  REQUIRE(report);
  CHECK(report->young_chunks == 1);
  CHECK(target->stat(d));
  fs::last_write_time(target->path_of(d), fs::file_time_type::clock::now() - std::chrono::hours(2));
  report = gpuckpt::chunk_gc::collect(*target, keep);
  REQUIRE(report);
  CHECK(report->garbage_chunks == 1);
  CHECK(!target->stat(d));
}

TEST_CASE("a transfer commit claiming a kept checkpoint's id and process is refused, the file discarded",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto node = open_store(dir.path / "node-b");
  const auto victim = gpuckpt::test::store_checkpoint(node, dir.path);
  // The attacker's archive: the victim's id, process 7, one zero chunk (nothing to upload, ~20 KB).
  TempDir elsewhere("gpuckpt-chunk-transfer-attacker");
  auto attacker_store = open_store(elsewhere.path / "store");
  auto attacker = gpuckpt::test::write_store_checkpoint(
      attacker_store, elsewhere.path, {{7, {std::vector<std::byte>(gpuckpt::test::kStoreChunk)}}}, victim.id);
  REQUIRE(attacker);
  fs::create_directories(dir.path / "incoming");
  gpuckpt::node::IncomingArchives incoming(dir.path / "incoming", 1 << 30, [&](const fs::path& received) {
    return gpuckpt::node::admit_received_archive(received, with_store(dir.path / "node-b"), ArchiveLimits{});
  });
  std::ifstream in(attacker->archive, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(incoming.receive("attack.tar", "0", std::to_string(bytes.size()),
                           [&](const auto& sink) { return sink(bytes.data(), bytes.size()); }));
  auto committed = incoming.commit("attack.tar", {{"size", bytes.size()}, {"sha256", sha256_of(attacker->archive)},
                                                  {"store_backed", true}});
  REQUIRE(!committed);
  CHECK(committed.error().errno_value == EBADMSG);   // 422: a refusal the sender does not commit again
  CHECK(committed.error().message.find("discarded") != std::string::npos);
  CHECK(committed.error().message.find("checkpoint " + victim.id + " (process 7)") != std::string::npos);
  CHECK(fs::is_empty(dir.path / "incoming"));
  // The victim's chunks survive a collection that only references keep chunks through.
  for (const auto& file : fs::recursive_directory_iterator(dir.path / "node-b" / "sha256"))
    if (file.is_regular_file())
      fs::last_write_time(file.path(), fs::file_time_type::clock::now() - std::chrono::hours(2));
  gpuckpt::chunk_gc::Options options;
  options.grace = std::chrono::seconds(0);
  options.remove = true;
  auto gc = gpuckpt::chunk_gc::collect(*node, options);
  REQUIRE(gc);
  CHECK(gc->garbage_chunks == 0);
  gpuckpt::test::check_restorable(victim, victim.archive, node);
}

TEST_CASE("PUT /v1/chunks/<digest>: past the quota of unreferenced chunks it is refused (507), naming the quota and "
          "what to do, nothing kept; a commit referencing the chunks makes room", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  auto named = gpuckpt::node::manifest_chunks(c.archive, ArchiveLimits{});
  REQUIRE(named);
  REQUIRE(named->size() == gpuckpt::test::kStoreCheckpointChunks);
  const std::vector<cs::Digest> chunks(named->begin(), named->end());
  // Room for three of the checkpoint's four chunks by count; bytes enough for all.
  gpuckpt::node::UnreferencedChunkQuota quota;
  quota.chunks = 3;
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"), quota);
  for (std::size_t i = 0; i < 3; ++i) {
    auto answer = put_chunk(uploads, chunks[i].hex(), chunk_file(*source, chunks[i]));
    INFO((answer ? answer->dump() : answer.error().message));
    REQUIRE(answer);
  }
  bool read = false;
  auto refused = put_chunk(uploads, chunks[3].hex(), chunk_file(*source, chunks[3]), {}, 0, &read);
  REQUIRE(!refused);
  INFO(refused.error().message);
  CHECK(refused.error().errno_value == EDQUOT);
  CHECK(gpuckpt::node::http_status(refused.error()) == 507);
  for (const std::string says : {"limits.unreferenced_chunks", "limits.unreferenced_chunk_bytes", "holds 3 chunk(s)",
                                 "quota is 3 chunk(s)", "commit", "gpuckpt store gc", "raise"})
    CHECK(refused.error().message.find(says) != std::string::npos);
  CHECK(!read);   // refused before its body was taken
  CHECK(files_in(dir.path / "node-b") == 3);
  // One the store has already costs nothing: still taken.
  CHECK(put_chunk(uploads, chunks[0].hex(), chunk_file(*source, chunks[0])));

  // By bytes: a quota one byte short of the next chunk file refuses it too.
  const auto usage = gpuckpt::node::unreferenced_chunks_of(dir.path / "node-b").usage();
  CHECK(usage.chunks == 3);
  gpuckpt::node::UnreferencedChunkQuota by_bytes;
  by_bytes.bytes = usage.bytes + chunk_file(*source, chunks[3]).size() - 1;
  gpuckpt::node::ChunkUploads tight(with_store(dir.path / "node-b"), by_bytes);
  refused = put_chunk(tight, chunks[3].hex(), chunk_file(*source, chunks[3]));
  REQUIRE(!refused);
  CHECK(refused.error().errno_value == EDQUOT);
  CHECK(files_in(dir.path / "node-b") == 3);

  // The last chunk in by hand, then the commit: its references name all four, the quota is free again.
  auto target = open_store(dir.path / "node-b");
  copy_chunk(*source, *target, chunks[3]);
  fs::copy_file(c.archive, dir.path / "plain.tar");
  auto admitted = gpuckpt::node::admit_received_archive(dir.path / "plain.tar", with_store(dir.path / "node-b"),
                                                        ArchiveLimits{});
  INFO((admitted ? admitted->dump() : admitted.error().message));
  REQUIRE(admitted);
  CHECK(gpuckpt::node::unreferenced_chunks_of(dir.path / "node-b").usage().chunks == 0);
  // A chunk uploaded now (this one's file lost, to upload it again) finds room.
  fs::remove(target->path_of(chunks[3]));
  auto again = put_chunk(uploads, chunks[3].hex(), chunk_file(*source, chunks[3]));
  INFO((again ? again->dump() : again.error().message));
  CHECK(again);
}

TEST_CASE("missing chunks: asking again does not keep an unreferenced chunk alive past the collection's grace",
          "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  gpuckpt::test::store_checkpoint(source, dir.path);
  const auto d = cs::sha256(random_chunk(1));
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"));
  REQUIRE(put_chunk(uploads, d.hex(), chunk_file(*source, d)));
  auto target = open_store(dir.path / "node-b");
  const nlohmann::json ask = {{"digests", {d.hex()}}};
  // Young: answered present (a commit can still reference it), and not touched.
  const auto young = fs::file_time_type::clock::now() - std::chrono::minutes(10);
  fs::last_write_time(target->path_of(d), young);
  auto answer = gpuckpt::node::missing_chunks(with_store(dir.path / "node-b"), ask, std::chrono::hours(1));
  REQUIRE(answer);
  CHECK((*answer)["present"] == 1);
  CHECK(fs::last_write_time(target->path_of(d)) == young);
  // Past half the grace and asked over and over: missing (the sender would upload it again), its age unchanged,
  // and the collection removes it.
  const auto old = fs::file_time_type::clock::now() - std::chrono::minutes(61);
  fs::last_write_time(target->path_of(d), old);
  for (int i = 0; i < 3; ++i) {
    answer = gpuckpt::node::missing_chunks(with_store(dir.path / "node-b"), ask, std::chrono::hours(1));
    REQUIRE(answer);
    CHECK((*answer)["missing"] == nlohmann::json::array({d.hex()}));
  }
  gpuckpt::chunk_gc::Options options;
  options.remove = true;
  options.grace = std::chrono::hours(1);
  auto report = gpuckpt::chunk_gc::collect(*target, options);
  REQUIRE(report);
  CHECK(report->garbage_chunks == 1);
  CHECK(!target->stat(d));
}

TEST_CASE("PUT /v1/chunks/<digest>: an upload that breaks off does not uncount the same chunk another upload stored "
          "meanwhile", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  const auto chunks = chunks_of(c);
  gpuckpt::node::UnreferencedChunkQuota quota;
  quota.chunks = 1;
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"), quota);
  const auto& counted = gpuckpt::node::unreferenced_chunks_of(dir.path / "node-b");
  const auto file = chunk_file(*source, chunks[0]);
  // The first upload announces the whole chunk and hangs inside its body; a second one of the same chunk comes whole
  // and lands; then the first one's connection breaks.
  std::promise<void> reading, release;
  auto broken = std::async(std::launch::async, [&] {
    return uploads.receive(chunks[0].hex(), std::to_string(file.size()), [&](const auto& sink) {
      sink(reinterpret_cast<const char*>(file.data()), file.size() / 2);
      reading.set_value();
      release.get_future().wait();
      return false;
    });
  });
  reading.get_future().wait();
  auto whole = put_chunk(uploads, chunks[0].hex(), file);
  release.set_value();
  INFO((whole ? whole->dump() : whole.error().message));
  REQUIRE(whole);
  CHECK((*whole)["present"] == false);
  CHECK(!broken.get());
  // The chunk is in the store and unreferenced: it counts, so the quota of one chunk is full.
  CHECK(files_in(dir.path / "node-b") == 1);
  CHECK(counted.usage().chunks == 1);
  CHECK(counted.usage().bytes == file.size());
  auto refused = put_chunk(uploads, chunks[1].hex(), chunk_file(*source, chunks[1]));
  REQUIRE(!refused);
  CHECK(refused.error().errno_value == EDQUOT);
  CHECK(files_in(dir.path / "node-b") == 1);
}

TEST_CASE("PUT /v1/chunks/<digest>: once a collection (gpuckpt store gc --delete) removed counted chunks, the quota "
          "they filled has room again", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  auto source = open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  const auto chunks = chunks_of(c);
  gpuckpt::node::UnreferencedChunkQuota quota;
  quota.chunks = 2;
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"), quota);
  REQUIRE(put_chunk(uploads, chunks[0].hex(), chunk_file(*source, chunks[0])));
  REQUIRE(put_chunk(uploads, chunks[1].hex(), chunk_file(*source, chunks[1])));
  auto refused = put_chunk(uploads, chunks[2].hex(), chunk_file(*source, chunks[2]));
  REQUIRE(!refused);
  CHECK(refused.error().errno_value == EDQUOT);
  // What the 507 tells the operator to do: the garbage, older than the grace period, collected by another process
  // than the agent (its own upkeep, which counts again, may be an hour away).
  auto target = open_store(dir.path / "node-b");
  for (const auto& d : {chunks[0], chunks[1]})
    fs::last_write_time(target->path_of(d), fs::file_time_type::clock::now() - std::chrono::hours(2));
  gpuckpt::chunk_gc::Options options;
  options.remove = true;
  auto report = gpuckpt::chunk_gc::collect(*target, options);
  REQUIRE(report);
  REQUIRE(report->garbage_chunks == 2);
  auto taken = put_chunk(uploads, chunks[2].hex(), chunk_file(*source, chunks[2]));
  INFO((taken ? taken->dump() : taken.error().message));
  CHECK(taken);
  CHECK(gpuckpt::node::unreferenced_chunks_of(dir.path / "node-b").usage().chunks == 1);
  // No collection since: a full quota stays full.
  REQUIRE(put_chunk(uploads, chunks[3].hex(), chunk_file(*source, chunks[3])));
  auto full = put_chunk(uploads, chunks[0].hex(), chunk_file(*source, chunks[0]));
  REQUIRE(!full);
  CHECK(full.error().errno_value == EDQUOT);
}

TEST_CASE("PUT /v1/chunks/<digest>: uploads refused at once after a collection all find the room it made", "[unit]") {
  TempDir dir("gpuckpt-chunk-transfer");
  // Raw chunks in the wire form (version-1 header, then the bytes), made here.
  const auto wire = [](unsigned seed) {
    const auto raw = random_chunk(seed);
    cs::ChunkHeader h;
    h.raw_size = h.stored_size = static_cast<std::uint32_t>(raw.size());
    const auto header = cs::encode_header(h);
    std::vector<std::byte> file(header.begin(), header.end());
    file.insert(file.end(), raw.begin(), raw.end());
    return std::pair{cs::sha256(raw), file};
  };
  constexpr unsigned kUploads = gpuckpt::node::kMaxChunkUploads;
  std::vector<std::pair<cs::Digest, std::vector<std::byte>>> chunks;
  for (unsigned i = 0; i < kUploads; ++i) chunks.push_back(wire(100 + i));
  gpuckpt::node::UnreferencedChunkQuota quota;
  quota.chunks = kUploads;
  gpuckpt::node::ChunkUploads uploads(with_store(dir.path / "node-b"), quota);
  // The count full of chunks a collection has removed since: many, so that looking them up in the store takes long
  // enough for every upload below to be refused while one of them looks.
  auto target = open_store(dir.path / "node-b");
  gpuckpt::chunk_gc::Options options;
  options.remove = true;
  REQUIRE(gpuckpt::chunk_gc::collect(*target, options));
  auto& counted = gpuckpt::node::unreferenced_chunks_of(dir.path / "node-b");
  std::map<cs::Digest, std::uint64_t> collected;
  for (std::uint32_t i = 0; i < 200'000; ++i) collected.emplace(cs::sha256(std::as_bytes(std::span(&i, 1))), 1);
  counted.recount(collected, counted.epoch());
  REQUIRE(counted.usage().chunks == collected.size());
  // All at once, as a sender's streams come: the one that looks at the store first must not leave the others refused.
  std::promise<void> go;
  const std::shared_future<void> start = go.get_future().share();
  std::vector<std::future<gpuckpt::Result<nlohmann::json>>> racing;
  for (const auto& [digest, file] : chunks)
    racing.push_back(std::async(std::launch::async, [&, digest = digest, file = &file] {
      start.wait();
      return put_chunk(uploads, digest.hex(), *file);
    }));
  go.set_value();
  for (auto& upload : racing) {
    auto answer = upload.get();
    INFO((answer ? answer->dump() : answer.error().message));
    CHECK(answer);
  }
  CHECK(counted.usage().chunks == kUploads);
}
