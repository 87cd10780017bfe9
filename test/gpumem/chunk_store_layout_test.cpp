// The chunk store's two file layouts: raw chunks with their payload at 4096 (chunk format version 2, so a restore
// can map it), zstd chunks and raw chunks of older stores packed after the header (version 1), and read() giving
// the version-1 wire form of either.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gpumem/chunk_receive.h"
#include "gpumem/chunk_store.h"
#include "test/support/random_bytes.h"
#include "test/support/temp_dir.h"

namespace cs = gpuckpt::chunk_store;
namespace fs = std::filesystem;
using gpuckpt::test::random_bytes;
using gpuckpt::test::TempDir;

namespace {

constexpr std::uint8_t kRaw = 0, kZstd = 1;

std::vector<std::byte> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

void write_file(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// The version-1 (wire) form of a chunk: its header in version 1, then the payload.
std::vector<std::byte> wire_form(std::uint8_t encoding, std::uint32_t raw_size, std::span<const std::byte> payload) {
  cs::ChunkHeader h;
  h.encoding = encoding;
  h.raw_size = raw_size;
  h.stored_size = static_cast<std::uint32_t>(payload.size());
  h.version = cs::kPackedChunkVersion;
  const auto header = cs::encode_header(h);
  std::vector<std::byte> out(header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TEST_CASE("chunk store: a raw chunk's payload starts at 4096 on disk, read() gives the version-1 form", "[unit]") {
  TempDir dir("gpuckpt-store-layout");
  auto store = cs::Store::open(dir.path, true);
  REQUIRE(store);
  const auto payload = random_bytes(5000, 3);
  const auto digest = cs::sha256(payload);
  REQUIRE((*store)->put(digest, cs::ChunkHeader{kRaw, 5000, 5000}, payload));

  const auto file = file_bytes((*store)->path_of(digest));
  REQUIRE(file.size() == cs::kAlignedPayloadOffset + payload.size());
  auto on_disk = cs::decode_header(file);
  REQUIRE(on_disk);
  CHECK(on_disk->version == cs::kAlignedChunkVersion);
  CHECK(on_disk->payload_offset() == 4096);
  CHECK(on_disk->file_size() == file.size());
  CHECK(std::all_of(file.begin() + cs::kChunkHeaderSize, file.begin() + 4096,
                    [](std::byte b) { return b == std::byte{0}; }));
  CHECK(std::equal(payload.begin(), payload.end(), file.begin() + 4096));

  auto stat = (*store)->stat(digest);
  REQUIRE(stat);
  CHECK(stat->version == cs::kAlignedChunkVersion);
  CHECK(stat->stored_size == 5000);

  std::vector<std::byte> back;
  REQUIRE((*store)->read(digest, cs::kChunkHeaderSize + payload.size(), back));
  CHECK(back == wire_form(kRaw, 5000, payload));
  // The wire form passes the receiving side's checks, as an older gpuckpt's would.
  REQUIRE(gpuckpt::chunk_receive::check_chunk_header(back));
  // max_size bounds the wire form, not the file.
  auto too_small = (*store)->read(digest, cs::kChunkHeaderSize + payload.size() - 1, back);
  REQUIRE_FALSE(too_small);
  CHECK(too_small.error().message.find((*store)->path_of(digest).string()) != std::string::npos);
}

TEST_CASE("chunk store: a zstd chunk stays packed after its 32-byte header", "[unit]") {
  TempDir dir("gpuckpt-store-layout");
  auto store = cs::Store::open(dir.path, true);
  REQUIRE(store);
  const auto stored = random_bytes(700, 4);   // the store does not decode payloads: any bytes stand for zstd's
  const auto digest = cs::sha256(random_bytes(9000, 5));
  REQUIRE((*store)->put(digest, cs::ChunkHeader{kZstd, 9000, 700}, stored));
  const auto file = file_bytes((*store)->path_of(digest));
  REQUIRE(file.size() == cs::kChunkHeaderSize + stored.size());
  CHECK(cs::decode_header(file)->version == cs::kPackedChunkVersion);
  std::vector<std::byte> back;
  REQUIRE((*store)->read(digest, cs::kChunkHeaderSize + stored.size(), back));
  CHECK(back == file);
  CHECK(back == wire_form(kZstd, 9000, stored));
}

TEST_CASE("chunk store: open_mappable gives the fd of an aligned raw chunk, ENOTSUP for any other", "[unit]") {
  TempDir dir("gpuckpt-store-layout");
  auto store = cs::Store::open(dir.path, true);
  REQUIRE(store);

  SECTION("raw: the fd maps the payload at 4096") {
    const auto payload = random_bytes(3 * 4096 + 100, 6);
    const auto digest = cs::sha256(payload);
    const auto size = static_cast<std::uint32_t>(payload.size());
    REQUIRE((*store)->put(digest, cs::ChunkHeader{kRaw, size, size}, payload));
    auto mappable = (*store)->open_mappable(digest);
    REQUIRE(mappable);
    Fd closer{mappable->fd};
    REQUIRE(mappable->fd >= 0);
    CHECK(mappable->header.payload_offset() == 4096);
    CHECK(mappable->header.raw_size == size);
    CHECK(mappable->header.stored_size == size);
    CHECK((::fcntl(mappable->fd, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK((::fcntl(mappable->fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
    void* map = ::mmap(nullptr, payload.size(), PROT_READ, MAP_PRIVATE, mappable->fd,
                       static_cast<off_t>(mappable->header.payload_offset()));
    REQUIRE(map != MAP_FAILED);
    CHECK(std::memcmp(map, payload.data(), payload.size()) == 0);
    ::munmap(map, payload.size());
  }
  SECTION("raw, moved to trash/ by a collection: rescued like stat does") {
    const auto payload = random_bytes(4096, 7);
    const auto digest = cs::sha256(payload);
    REQUIRE((*store)->put(digest, cs::ChunkHeader{kRaw, 4096, 4096}, payload));
    REQUIRE((*store)->open_trash_dir());
    fs::rename((*store)->path_of(digest), dir.path / cs::kTrashDir / digest.hex());
    auto mappable = (*store)->open_mappable(digest);
    REQUIRE(mappable);
    ::close(mappable->fd);
    CHECK(fs::exists((*store)->path_of(digest)));
  }
  SECTION("zstd: ENOTSUP, the caller copies it") {
    const auto digest = cs::sha256(random_bytes(9000, 8));
    REQUIRE((*store)->put(digest, cs::ChunkHeader{kZstd, 9000, 100}, random_bytes(100, 9)));
    auto refused = (*store)->open_mappable(digest);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == ENOTSUP);
    CHECK(refused.error().message.find((*store)->path_of(digest).string()) != std::string::npos);
  }
  SECTION("a raw chunk an older gpuckpt wrote (version 1, packed): ENOTSUP, yet stat and read still serve it") {
    const auto payload = random_bytes(6000, 10);
    const auto digest = cs::sha256(payload);
    const auto old_file = wire_form(kRaw, 6000, payload);
    fs::create_directories((*store)->path_of(digest).parent_path());
    write_file((*store)->path_of(digest), old_file);
    auto refused = (*store)->open_mappable(digest);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == ENOTSUP);
    auto stat = (*store)->stat(digest);
    REQUIRE(stat);
    CHECK(stat->version == cs::kPackedChunkVersion);
    CHECK(stat->payload_offset() == cs::kChunkHeaderSize);
    std::vector<std::byte> back;
    REQUIRE((*store)->read(digest, old_file.size(), back));
    CHECK(back == old_file);
  }
  SECTION("missing: ENOENT, as stat says") {
    auto missing = (*store)->open_mappable(cs::sha256(random_bytes(10, 11)));
    REQUIRE_FALSE(missing);
    CHECK(missing.error().errno_value == ENOENT);
  }
}

TEST_CASE("chunk store: version 2 is for raw chunks of the right size only", "[unit]") {
  SECTION("decode_header refuses a version-2 header naming zstd, and a newer version") {
    cs::ChunkHeader h{kZstd, 9000, 100};
    h.version = cs::kAlignedChunkVersion;
    auto refused = cs::decode_header(cs::encode_header(h));
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("version 2") != std::string::npos);
    CHECK(refused.error().message.find("encoding 1") != std::string::npos);
    h.encoding = kRaw;
    h.version = 3;
    auto newer = cs::decode_header(cs::encode_header(h));
    REQUIRE_FALSE(newer);
    CHECK(newer.error().message.find("version 3 is newer") != std::string::npos);
  }
  SECTION("the wire form is version 1: a version-2 header sent or carried is refused") {
    cs::ChunkHeader h{kRaw, 100, 100};
    h.version = cs::kAlignedChunkVersion;
    const auto header = cs::encode_header(h);
    std::vector<std::byte> sent(header.begin(), header.end());
    sent.resize(cs::kChunkHeaderSize + 100);
    auto refused = gpuckpt::chunk_receive::check_chunk_header(sent);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("version 2") != std::string::npos);
  }
  SECTION("stat and open_mappable refuse a version-2 file of the wrong size, naming it") {
    TempDir dir("gpuckpt-store-layout");
    auto store = cs::Store::open(dir.path, true);
    REQUIRE(store);
    const auto payload = random_bytes(5000, 12);
    const auto digest = cs::sha256(payload);
    REQUIRE((*store)->put(digest, cs::ChunkHeader{kRaw, 5000, 5000}, payload));
    // The size a version-1 file of this chunk would have: the header read as packed would pass.
    fs::resize_file((*store)->path_of(digest), cs::kChunkHeaderSize + payload.size());
    auto refused = (*store)->stat(digest);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find((*store)->path_of(digest).string()) != std::string::npos);
    CHECK(refused.error().message.find("says " + std::to_string(4096 + payload.size())) != std::string::npos);
    CHECK_FALSE((*store)->open_mappable(digest));
    std::vector<std::byte> back;
    CHECK_FALSE((*store)->read(digest, cs::kChunkHeaderSize + payload.size(), back));
  }
}
