// The chunk store (content-addressed files, atomic writes, dedup) and the manifest of a store-backed GPU memory
// image: round trip, and every kind of hostile manifest refused with the field named.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "test/support/random_bytes.h"
#include "test/support/temp_dir.h"

namespace gi = gpuckpt::gpu_image;
namespace cs = gpuckpt::chunk_store;
namespace fs = std::filesystem;
using gpuckpt::test::random_bytes;
using gpuckpt::test::TempDir;

namespace {

std::vector<std::byte> repetitive_bytes(std::size_t n) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i / 64) % 7);
  return out;
}

std::size_t files_under(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) ++n;
  return n;
}

// A manifest of two regions (3 and 1 chunks of 8 KiB), built by hand as a restore would find it.
std::string sample_manifest(const std::string& chunk0_digest = std::string(64, 'a')) {
  return R"({"format":"gpuckpt-gpu-memory-manifest","version":1,"checkpoint":"0123456789abcdef0123456789abcdef",)"
         R"("hash":"sha256","store":"/var/lib/gpuckpt/chunks","vpid":7,"dump_pid":4242,"chunk_size":8192,)"
         R"("regions":[[140000000000,20480],[140000100000,4096]],)"
         R"("chunks":[["zstd",8192,100,")" + chunk0_digest + R"("],["zero",8192],["raw",4096,4096,")" +
         std::string(64, 'b') + R"("],["zero",4096]]})";
}

}  // namespace

TEST_CASE("chunk store: SHA-256 digests and their hex form", "[unit]") {
  const std::string abc = "abc";
  const auto d = cs::sha256(std::as_bytes(std::span(abc.data(), abc.size())));
  CHECK(d.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");   // FIPS 180-2 example
  auto parsed = cs::parse_digest(d.hex(), "digest");
  REQUIRE(parsed);
  CHECK(*parsed == d);
  for (const std::string& bad : {std::string(63, 'a'), std::string(65, 'a'), std::string(64, 'A'),
                                "../../../../etc/passwd" + std::string(42, 'a'), std::string(62, 'a') + "/a",
                                std::string(63, 'a') + '\0', std::string(64, 'g')}) {
    auto refused = cs::parse_digest(bad, "chunks[3]: digest");
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("chunks[3]: digest is not a SHA-256 digest") != std::string::npos);
  }
}

TEST_CASE("chunk store: a chunk is written once, atomically, root-only, and read back whole", "[unit]") {
  TempDir dir("gpuckpt-store-test");
  const fs::path root = dir.path / "node" / "chunks";   // parents made too
  auto store = cs::Store::open(root, true);
  REQUIRE(store);
  struct stat st {};
  REQUIRE(::stat(root.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  const auto payload = random_bytes(5000, 1);
  const auto digest = cs::sha256(payload);
  CHECK((*store)->stat(digest).error().errno_value == ENOENT);
  cs::ChunkHeader header{0, 5000, 5000};
  REQUIRE((*store)->put(digest, header, payload));
  REQUIRE((*store)->sync());
  const fs::path path = (*store)->path_of(digest);
  CHECK(path == root / "sha256" / digest.hex().substr(0, 2) / digest.hex());
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(static_cast<std::size_t>(st.st_size) == cs::kAlignedPayloadOffset + payload.size());   // raw: page-aligned
  auto present = (*store)->stat(digest);
  REQUIRE(present);
  CHECK(present->stored_size == 5000);
  // No temporary file is left beside it.
  CHECK(files_under(root) == 1);

  std::vector<std::byte> back;
  REQUIRE((*store)->read(digest, cs::kChunkHeaderSize + payload.size(), back));
  CHECK(std::memcmp(back.data() + cs::kChunkHeaderSize, payload.data(), payload.size()) == 0);
  // The manifest's size is checked against the file's.
  auto wrong = (*store)->read(digest, 17, back);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message.find(path.string()) != std::string::npos);

  // A truncated chunk (a crash before its data reached the disk) is not "present": it would be written again.
  REQUIRE(::truncate(path.c_str(), 100) == 0);
  auto truncated = (*store)->stat(digest);
  REQUIRE_FALSE(truncated);
  CHECK(truncated.error().message.find("its header says") != std::string::npos);
  // Opening without create refuses a store that is not there, naming it.
  auto absent = cs::Store::open(dir.path / "elsewhere", false);
  REQUIRE_FALSE(absent);
  CHECK(absent.error().message.find((dir.path / "elsewhere").string()) != std::string::npos);
  CHECK_FALSE(cs::Store::open("relative/store", true));
  CHECK_FALSE(cs::Store::open(dir.path / "a" / ".." / "b", true));
}

TEST_CASE("GPU memory manifest: written by the store writer, read back, chunks deduplicated", "[unit]") {
  TempDir images("gpuckpt-images-test"), store_dir("gpuckpt-store-test");
  auto opened = cs::Store::open(store_dir.path, true);
  REQUIRE(opened);
  std::shared_ptr<cs::Store> store(std::move(*opened));
  gi::ImageHeader header;
  header.vpid = 31;
  header.dump_pid = 1031;
  header.chunk_size = 1u << 20;
  // 3.5 chunks: random, zero, repetitive (compresses), random again (same as the first: stored once).
  const auto random = random_bytes(1u << 20, 7);
  const auto repetitive = repetitive_bytes(1u << 20);
  std::vector<std::byte> memory;
  memory.insert(memory.end(), random.begin(), random.end());
  memory.resize(2u << 20);
  memory.insert(memory.end(), repetitive.begin(), repetitive.end());
  memory.insert(memory.end(), random.begin(), random.begin() + (512 << 10));
  const gi::Region region{0x7f0000000000, memory.size()};
  gi::Settings settings;
  settings.compression = {gi::CompressionMode::Auto, 1};
  auto writer = gi::StoreWriter::create(store, header, {region}, "0123456789abcdef0123456789abcdef");
  REQUIRE(writer);
  REQUIRE((*writer)->chunk_count(0) == 4);
  gi::ChunkCodec codec(header.chunk_size);
  gi::CompressionHistory history;
  std::uint64_t written = 0;
  for (std::uint64_t c = 0; c < 4; ++c) {
    const std::size_t at = c << 20;
    auto stored = (*writer)->add(0, c, std::span(memory).subspan(at, std::min<std::size_t>(1u << 20, memory.size() - at)),
                                 codec, settings, history);
    REQUIRE(stored);
    written += stored->written_bytes;
    CHECK(stored->zero == (c == 1));
  }
  REQUIRE((*writer)->finish(images.fd));
  CHECK(files_under(store_dir.path / "sha256") == 3);   // random, repetitive, the half chunk; no zero chunk
  // The store holds a reference for the kept checkpoint: the manifest itself, so collection keeps its chunks.
  const std::string ref = cs::ref_name("0123456789abcdef0123456789abcdef", 31);
  CHECK(fs::is_regular_file(store_dir.path / "refs" / ref));
  CHECK(*store->list_refs() == std::vector<std::string>{ref});
  CHECK(written < (3u << 20));               // the repetitive chunk is compressed

  auto manifest = gi::read_manifest(images.fd, gi::manifest_name(31));
  REQUIRE(manifest);
  CHECK(manifest->checkpoint == "0123456789abcdef0123456789abcdef");
  CHECK(manifest->store == store_dir.path.string());
  CHECK(manifest->header.vpid == 31);
  REQUIRE(manifest->entries.size() == 4);
  CHECK(manifest->entries[1].encoding == gi::Encoding::Zero);
  CHECK(manifest->entries[2].encoding == gi::Encoding::Zstd);
  CHECK(manifest->digests[0] == cs::sha256(random));
  // Each stored chunk's XXH3-64 of the bytes the dump read: what a read from an ingest-verified store checks.
  REQUIRE(manifest->checksums);
  CHECK(manifest->entries[0].checksum == gi::checksum(random));
  CHECK(manifest->entries[2].checksum == gi::checksum(repetitive));
  CHECK(manifest->entries[3].checksum == gi::checksum(std::span(random).first(512 << 10)));
  CHECK(gi::serialize_manifest(*manifest) == gi::serialize_manifest(*gi::parse_manifest(gi::serialize_manifest(*manifest), "again")));
  REQUIRE(gi::check_chunks(*manifest, *store, gi::manifest_name(31)));

  gi::StoreReader reader(*manifest, store, gi::manifest_name(31));
  std::vector<std::byte> record, out;
  std::vector<std::byte> back;
  for (std::size_t i = 0; i < reader.entries().size(); ++i) {
    out.resize(reader.entries()[i].raw_size);
    REQUIRE(reader.read_chunk(i, codec, record, out));
    back.insert(back.end(), out.begin(), out.end());
  }
  CHECK(back == memory);

  // The same memory again (a second checkpoint, weights unchanged): every chunk is in the store, nothing written.
  auto again = gi::StoreWriter::create(store, header, {region}, gi::new_checkpoint_id());
  REQUIRE(again);
  std::uint64_t written_again = 0, reused = 0;
  for (std::uint64_t c = 0; c < 4; ++c) {
    const std::size_t at = c << 20;
    auto stored = (*again)->add(0, c, std::span(memory).subspan(at, std::min<std::size_t>(1u << 20, memory.size() - at)),
                                codec, settings, history);
    REQUIRE(stored);
    written_again += stored->written_bytes;
    reused += stored->reused ? 1 : 0;
  }
  CHECK(written_again == 0);
  CHECK(reused == 3);
  CHECK(files_under(store_dir.path / "sha256") == 3);
  // A reused chunk's checksum is of this dump's bytes too.
  TempDir again_images("gpuckpt-images-test");
  REQUIRE((*again)->finish(again_images.fd));
  auto again_manifest = gi::read_manifest(again_images.fd, gi::manifest_name(31));
  REQUIRE(again_manifest);
  CHECK(again_manifest->checksums);
  for (std::size_t i = 0; i < 4; ++i) CHECK(again_manifest->entries[i].checksum == manifest->entries[i].checksum);
}

TEST_CASE("GPU memory manifest: a missing or corrupt chunk is named with its checkpoint and path", "[unit]") {
  TempDir images("gpuckpt-images-test"), store_dir("gpuckpt-store-test");
  auto opened = cs::Store::open(store_dir.path, true);
  REQUIRE(opened);
  std::shared_ptr<cs::Store> store(std::move(*opened));
  gi::ImageHeader header;
  header.vpid = 12;
  header.chunk_size = 64u << 10;
  const auto memory = random_bytes(3 * (64u << 10), 9);
  auto writer = gi::StoreWriter::create(store, header, {{0x10000, memory.size()}}, "00000000000000000000000000000abc");
  REQUIRE(writer);
  gi::ChunkCodec codec(header.chunk_size);
  gi::CompressionHistory history;
  gi::Settings settings;
  for (std::uint64_t c = 0; c < 3; ++c)
    REQUIRE((*writer)->add(0, c, std::span(memory).subspan(c * (64u << 10), 64u << 10), codec, settings, history));
  REQUIRE((*writer)->finish(images.fd));
  auto manifest = gi::read_manifest(images.fd, gi::manifest_name(12));
  REQUIRE(manifest);

  SECTION("missing: the check before the restore names checkpoint, chunk digest and path, and what to do") {
    const fs::path gone = store->path_of(manifest->digests[1]);
    REQUIRE(fs::remove(gone));
    auto checked = gi::check_chunks(*manifest, *store, gi::manifest_name(12));
    REQUIRE_FALSE(checked);
    const std::string& m = checked.error().message;
    CHECK(checked.error().errno_value == ENOENT);
    CHECK(m.find("checkpoint 00000000000000000000000000000abc") != std::string::npos);
    CHECK(m.find("chunk " + manifest->digests[1].hex()) != std::string::npos);
    CHECK(m.find("expected at " + gone.string() + ": missing") != std::string::npos);
    CHECK(m.find("GPUCKPT_GPU_STORE=inline") != std::string::npos);
  }
  SECTION("corrupt: same size, other bytes: found while reading (SHA-256), named") {
    const fs::path bad = store->path_of(manifest->digests[2]);
    REQUIRE(gi::check_chunks(*manifest, *store, gi::manifest_name(12)));   // existence and size are fine
    const int fd = ::open(bad.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    const char flip = 0x55;
    const auto payload_at = store->stat(manifest->digests[2])->payload_offset();
    REQUIRE(::pwrite(fd, &flip, 1, static_cast<off_t>(payload_at + 1000)) == 1);
    ::close(fd);
    gi::StoreReader reader(*manifest, store, gi::manifest_name(12));
    std::vector<std::byte> record, out(64u << 10);
    REQUIRE(reader.read_chunk(0, codec, record, out));
    auto read = reader.read_chunk(2, codec, record, out);
    REQUIRE_FALSE(read);
    CHECK(read.error().message.find(manifest->digests[2].hex()) != std::string::npos);
    CHECK(read.error().message.find("SHA-256 mismatch") != std::string::npos);
    CHECK(read.error().message.find("checkpoint 00000000000000000000000000000abc") != std::string::npos);
  }
  SECTION("corrupt or swapped, read from an ingest-verified store: found by the manifest's XXH3-64, named") {
    // The chunk store the reader trusts for having checked SHA-256 on ingest; any damage since is caught by XXH3.
    gi::StoreReader reader(*manifest, store, gi::manifest_name(12), gi::ChunkCheck::Checksum);
    CHECK(std::string(reader.chunk_check()) == "XXH3-64");
    std::vector<std::byte> record, out(64u << 10);
    for (std::size_t i = 0; i < 3; ++i) {
      REQUIRE(reader.read_chunk(i, codec, record, out));
      CHECK(std::equal(out.begin(), out.end(), memory.begin() + static_cast<std::ptrdiff_t>(i * (64u << 10))));
    }
    const fs::path bad = store->path_of(manifest->digests[2]);
    const int fd = ::open(bad.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    const char flip = 0x55;
    const auto payload_at = store->stat(manifest->digests[2])->payload_offset();
    REQUIRE(::pwrite(fd, &flip, 1, static_cast<off_t>(payload_at + 1000)) == 1);
    ::close(fd);
    auto read = reader.read_chunk(2, codec, record, out);
    REQUIRE_FALSE(read);
    CHECK(read.error().message.find("XXH3-64 mismatch") != std::string::npos);
    CHECK(read.error().message.find(manifest->digests[2].hex()) != std::string::npos);
    CHECK(read.error().message.find(bad.string()) != std::string::npos);
    // Another chunk's whole, sound file under this chunk's name: header and sizes agree, the checksum does not.
    fs::copy_file(store->path_of(manifest->digests[0]), store->path_of(manifest->digests[1]),
                  fs::copy_options::overwrite_existing);
    auto swapped = reader.read_chunk(1, codec, record, out);
    REQUIRE_FALSE(swapped);
    CHECK(swapped.error().message.find("XXH3-64 mismatch") != std::string::npos);
    // A manifest of an older gpuckpt (no "xxh3_64"): the reader checks SHA-256 whatever it was asked.
    gi::Manifest old = *manifest;
    old.checksums = false;
    auto reparsed = gi::parse_manifest(gi::serialize_manifest(old), "old.json");
    REQUIRE(reparsed);
    CHECK_FALSE(reparsed->checksums);
    CHECK(gi::serialize_manifest(old).find("xxh3_64") == std::string::npos);
    gi::StoreReader old_reader(*reparsed, store, "old.json", gi::ChunkCheck::Checksum);
    CHECK(std::string(old_reader.chunk_check()) == "SHA-256");
    auto old_read = old_reader.read_chunk(1, codec, record, out);
    REQUIRE_FALSE(old_read);
    CHECK(old_read.error().message.find("SHA-256 mismatch") != std::string::npos);
  }
  SECTION("a chunk file of another size fails the check before the restore") {
    REQUIRE(::truncate(store->path_of(manifest->digests[0]).c_str(), 1000) == 0);
    auto checked = gi::check_chunks(*manifest, *store, gi::manifest_name(12));
    REQUIRE_FALSE(checked);
    CHECK(checked.error().message.find(manifest->digests[0].hex()) != std::string::npos);
  }
}

TEST_CASE("GPU memory manifest: the sample parses; hostile manifests are refused naming the field", "[unit]") {
  auto good = gi::parse_manifest(sample_manifest(), "m.json");
  REQUIRE(good);
  CHECK(good->regions.size() == 2);
  CHECK(good->entries.size() == 4);
  CHECK(good->entries[3].region == 1);
  CHECK(good->entries[2].encoding == gi::Encoding::Raw);

  struct Case {
    std::string text;
    std::string says;
  };
  auto replace = [](std::string text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  const std::string s = sample_manifest();
  const std::vector<Case> cases = {
      {"[]", "not a JSON object"},
      {replace(s, "gpuckpt-gpu-memory-manifest", "something-else"), "format"},
      {replace(s, "\"version\":1", "\"version\":99"), "version"},
      {replace(s, "\"hash\":\"sha256\"", "\"hash\":\"md5\""), "hash"},
      {replace(s, "0123456789abcdef0123456789abcdef", "../../etc"), "checkpoint"},
      {replace(s, "\"vpid\":7", "\"vpid\":-1"), "vpid"},
      {replace(s, "\"chunk_size\":8192", "\"chunk_size\":8193"), "chunk_size"},
      {replace(s, "\"chunk_size\":8192", "\"chunk_size\":1073741824"), "chunk_size"},
      {replace(s, "[140000000000,20480]", "[140000000000,0]"), "regions[0]"},
      {replace(s, "[140000000000,20480]", "[18446744073709551615,20480]"), "regions[0]"},
      {replace(s, "[140000000000,20480]", "[140000000000,281474976710657]"), "regions[0]"},
      {replace(s, ",[\"zero\",4096]]", "]"), "lists 3 chunks, the regions need 4"},
      {replace(s, "[\"zero\",8192]", "[\"zero\",8192],[\"zero\",8192]"), "lists 5 chunks"},
      {replace(s, "[\"zero\",8192]", "[\"zero\",4096]"), "chunks[1]: raw_size is not 8192"},
      {replace(s, "[\"zero\",8192]", "[\"lz4\",8192]"), "chunks[1]: encoding"},
      {replace(s, "[\"zero\",8192]", "[\"zero\",8192,1]"), "chunks[1]"},
      {replace(s, "\"raw\",4096,4096", "\"raw\",4096,4000"), "chunks[2]: stored_size"},
      {replace(s, "\"zstd\",8192,100", "\"zstd\",8192,0"), "chunks[0]: stored_size"},
      {replace(s, "\"zstd\",8192,100", "\"zstd\",8192,99999999"), "chunks[0]: stored_size"},
      {sample_manifest("../../../../../etc/shadow"), "chunks[0]: digest is not a SHA-256 digest"},
      {sample_manifest(std::string(63, 'a') + "/"), "chunks[0]: digest"},
      {sample_manifest(std::string(64, 'F')), "chunks[0]: digest"},
      {"{\"format\":" + std::string(100, '['), "m.json"},
  };
  for (const auto& c : cases) {
    INFO(c.text.substr(0, 200));
    auto parsed = gi::parse_manifest(c.text, "m.json");
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().message.find(c.says) != std::string::npos);
    CHECK(parsed.error().message.find("m.json") != std::string::npos);
  }
  // The names: only gpuckpt-gpumem-<pid>.manifest.json.
  CHECK(gi::vpid_from_manifest_name(gi::manifest_name(77)) == 77);
  CHECK(gi::vpid_from_manifest_name("gpuckpt-gpumem-.manifest.json") == -1);
  CHECK(gi::vpid_from_manifest_name("gpuckpt-gpumem-0.manifest.json") == -1);
  CHECK(gi::vpid_from_manifest_name("gpuckpt-gpumem-7.img") == -1);
  CHECK(gi::vpid_from_file_name(gi::manifest_name(7)) == -1);
}

TEST_CASE("GPU memory manifest: a store holding the same chunk another way serves the restore", "[unit]") {
  // Node A's dump compressed the chunk; node B's store holds the same bytes raw (its dump did not compress, or a
  // registry pull found it present): B restores A's checkpoint from its own file.
  TempDir images("gpuckpt-images-test"), dir("gpuckpt-store-test");
  auto opened_a = cs::Store::open(dir.path / "a", true), opened_b = cs::Store::open(dir.path / "b", true);
  REQUIRE(opened_a);
  REQUIRE(opened_b);
  std::shared_ptr<cs::Store> a(std::move(*opened_a)), b(std::move(*opened_b));
  gi::ImageHeader header;
  header.vpid = 5;
  header.chunk_size = 1u << 20;
  const auto memory = repetitive_bytes(1u << 20);
  gi::Settings settings;
  settings.compression = {gi::CompressionMode::Zstd, 1};
  auto writer = gi::StoreWriter::create(a, header, {{0x20000, memory.size()}}, "00000000000000000000000000000def");
  REQUIRE(writer);
  gi::ChunkCodec codec(header.chunk_size);
  gi::CompressionHistory history;
  REQUIRE((*writer)->add(0, 0, memory, codec, settings, history));
  REQUIRE((*writer)->finish(images.fd));
  auto manifest = gi::read_manifest(images.fd, gi::manifest_name(5));
  REQUIRE(manifest);
  REQUIRE(manifest->entries[0].encoding == gi::Encoding::Zstd);
  cs::ChunkHeader raw;
  raw.encoding = static_cast<std::uint8_t>(gi::Encoding::Raw);
  raw.raw_size = raw.stored_size = static_cast<std::uint32_t>(memory.size());
  REQUIRE(b->put(manifest->digests[0], raw, memory));
  REQUIRE(b->sync());

  REQUIRE(gi::check_chunks(*manifest, *b, gi::manifest_name(5)));
  for (auto check : {gi::ChunkCheck::Digest, gi::ChunkCheck::Checksum}) {
    gi::StoreReader reader(*manifest, b, gi::manifest_name(5), check);
    std::vector<std::byte> record, out(memory.size());
    REQUIRE(reader.read_chunk(0, codec, record, out));
    CHECK(out == memory);
  }
  // Of another raw size it is another chunk: refused before the restore, naming it.
  cs::ChunkHeader shorter = raw;
  shorter.raw_size = shorter.stored_size = 4096;
  REQUIRE(b->put(manifest->digests[0], shorter, std::span(memory).first(4096)));
  auto checked = gi::check_chunks(*manifest, *b, gi::manifest_name(5));
  REQUIRE_FALSE(checked);
  CHECK(checked.error().message.find("holds a chunk of 4096 bytes, the manifest's is 1048576") != std::string::npos);
}

TEST_CASE("GPU memory manifest: hostile xxh3_64 lists are refused naming the field", "[unit]") {
  const std::string s = sample_manifest();
  const std::string with = s.substr(0, s.size() - 1) + R"(,"xxh3_64":["0123456789abcdef","","fedcba9876543210",""]})";
  auto good = gi::parse_manifest(with, "m.json");
  REQUIRE(good);
  CHECK(good->checksums);
  CHECK(good->entries[0].checksum == 0x0123456789abcdefull);
  CHECK(good->entries[2].checksum == 0xfedcba9876543210ull);
  CHECK(gi::serialize_manifest(*good).find(R"("xxh3_64":["0123456789abcdef","","fedcba9876543210",""])") !=
        std::string::npos);
  auto with_sums = [&](const std::string& list) { return s.substr(0, s.size() - 1) + R"(,"xxh3_64":)" + list + "}"; };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with_sums(R"(["0123456789abcdef","","fedcba9876543210"])"), "xxh3_64: lists 3 checksums for 4 chunks"},
      {with_sums(R"("0123456789abcdef")"), "xxh3_64"},
      {with_sums(R"(["0123456789ABCDEF","","fedcba9876543210",""])"), "xxh3_64[0]: not 16 lowercase hex digits"},
      {with_sums(R"(["0123456789abcde","","fedcba9876543210",""])"), "xxh3_64[0]: not 16 lowercase hex digits"},
      {with_sums(R"(["0123456789abcdef","1","fedcba9876543210",""])"), "xxh3_64[1]: a zero chunk's checksum"},
      {with_sums(R"(["0123456789abcdef","",7,""])"), "xxh3_64[2]: not a string"},
  };
  for (const auto& [text, says] : cases) {
    INFO(text);
    auto parsed = gi::parse_manifest(text, "m.json");
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().message.find(says) != std::string::npos);
  }
}

TEST_CASE("GPU memory store: only the node-local store, root's alone, is read by checksum", "[unit]") {
  TempDir dir("gpuckpt-store-test");
  auto store = cs::Store::open(dir.path / "chunks", true);
  REQUIRE(store);
  // Any other store (a shared volume, written by every node mounting it): SHA-256 on every read.
  CHECK_FALSE(gi::ingest_verified_store(**store));
  CHECK_FALSE(gi::ingest_verified_store(**store, dir.path / "elsewhere"));
  // At the node store's path: only when root owns it and nobody else can write it.
  CHECK(gi::ingest_verified_store(**store, dir.path / "chunks" / ".") == (::geteuid() == 0));
  fs::permissions(dir.path / "chunks" / "sha256", fs::perms::group_write, fs::perm_options::add);
  CHECK_FALSE(gi::ingest_verified_store(**store, dir.path / "chunks"));
}

TEST_CASE("GPU memory store setting: inline, node or an absolute path", "[unit]") {
  CHECK(*gi::parse_store("inline", "X") == "");
  CHECK(*gi::parse_store("node", "X") == cs::kNodeStoreDir);
  CHECK(*gi::parse_store("/mnt/shared/chunks/", "X") == "/mnt/shared/chunks");
  for (const char* bad : {"", "relative", "/a/../b", "/a/./b", "nfs://server/x"}) {
    auto refused = gi::parse_store(bad, "GPUCKPT_GPU_STORE");
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("GPUCKPT_GPU_STORE") != std::string::npos);
  }
  gi::Settings restore;
  CHECK(gi::restore_store_dir(restore) == cs::kNodeStoreDir);
  restore.store = "/mnt/x";
  CHECK(gi::restore_store_dir(restore) == "/mnt/x");
}

TEST_CASE("CPU pages manifest: kind, pages_id, its own name and reference; file ranges checked", "[unit]") {
  // Two 4 KiB windows and one 8 KiB window of a page image, back to back from offset 0.
  const std::string pages =
      R"({"format":"gpuckpt-gpu-memory-manifest","version":1,"kind":"cpu-pages","checkpoint":"0123456789abcdef0123456789abcdef",)"
      R"("hash":"sha256","store":"/var/lib/gpuckpt/chunks","pages_id":3,"dump_pid":0,"chunk_size":8192,)"
      R"("regions":[[0,4096],[4096,4096],[8192,8192]],)"
      R"("chunks":[["raw",4096,4096,")" + std::string(64, 'a') + R"("],["zero",4096],["raw",8192,8192,")" +
      std::string(64, 'b') + R"("]]})";
  auto parsed = gi::parse_manifest(pages, "p.json");
  REQUIRE(parsed);
  CHECK(parsed->kind == gi::MemoryKind::CpuPages);
  CHECK(parsed->header.vpid == 3);
  CHECK(gi::manifest_name(*parsed) == "gpuckpt-pages-3.manifest.json");
  CHECK(gi::reference_name(*parsed) == "0123456789abcdef0123456789abcdef-pages-3.json");
  CHECK(cs::is_ref_name(gi::reference_name(*parsed)));
  CHECK(gi::serialize_manifest(*parsed).find("\"kind\":\"cpu-pages\"") != std::string::npos);
  auto again = gi::parse_manifest(gi::serialize_manifest(*parsed), "again");
  REQUIRE(again);
  CHECK(gi::serialize_manifest(*again) == gi::serialize_manifest(*parsed));
  // A GPU manifest keeps its exact form: no kind key, "vpid".
  auto gpu = gi::parse_manifest(sample_manifest(), "m.json");
  REQUIRE(gpu);
  CHECK(gpu->kind == gi::MemoryKind::Gpu);
  CHECK(gi::serialize_manifest(*gpu).find("\"kind\"") == std::string::npos);
  CHECK(gi::reference_name(*gpu) == cs::ref_name(gpu->checkpoint, 7));

  auto refused = [&](const std::string& from, const std::string& to, const std::string& says) {
    std::string text = pages;
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    auto bad = gi::parse_manifest(text.replace(at, from.size(), to), "p.json");
    REQUIRE_FALSE(bad);
    INFO(bad.error().message);
    CHECK(bad.error().message.find(says) != std::string::npos);
  };
  refused("\"kind\":\"cpu-pages\"", "\"kind\":\"disk\"", "kind");
  refused("\"pages_id\":3", "\"vpid\":3", "pages_id");
  refused("[4096,4096]", "[8192,4096]", "regions[1]");        // a gap in the file
  refused("[0,4096],[4096,4096]", "[0,4096],[0,4096]", "regions[1]");   // overlapping
  refused("[8192,8192]", "[8192,8193]", "regions[2]");        // not whole pages
  refused("\"chunk_size\":8192", "\"chunk_size\":4096", "regions[2]");   // a region over one chunk

  CHECK(gi::pages_id_from_manifest_name("gpuckpt-pages-12.manifest.json") == 12);
  CHECK(gi::pages_id_from_manifest_name("gpuckpt-pages-012.manifest.json") == -1);
  CHECK(gi::vpid_from_manifest_name("gpuckpt-pages-12.manifest.json") == -1);
  CHECK(gi::is_manifest_name("gpuckpt-pages-12.manifest.json"));
  CHECK(gi::is_manifest_name(gi::manifest_name(9)));
  CHECK_FALSE(gi::is_manifest_name("pages-12.img"));
  CHECK_FALSE(cs::is_ref_name("0123456789abcdef0123456789abcdef-pages-.json"));
  CHECK_FALSE(cs::is_ref_name("0123456789abcdef0123456789abcdef-pages-0.json"));
  CHECK_FALSE(cs::is_ref_name("0123456789abcdef0123456789abcdef-pages-12345678.json"));
}
