// The GPU memory image format (gpumem/gpu_image.h): round trips, sparse zero chunks, compression decisions, and
// that a truncated or corrupt file fails with its name and the chunk.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "gpumem/gpu_image.h"
#include "test/support/temp_dir.h"

namespace gi = gpuckpt::gpu_image;
namespace fs = std::filesystem;
using gpuckpt::test::TempDir;

namespace {

constexpr std::uint32_t kChunk = 64 * 1024;

// Chunk by chunk: random, zero, text-like (compressible), and a short tail chunk.
std::vector<std::byte> mixed_memory(std::size_t chunks, std::size_t tail) {
  std::vector<std::byte> m(chunks * kChunk + tail);
  std::mt19937_64 rng(42);
  for (std::size_t c = 0; c * kChunk < m.size(); ++c) {
    const std::size_t begin = c * kChunk, end = std::min(m.size(), begin + kChunk);
    for (std::size_t i = begin; i < end; ++i) {
      switch (c % 3) {
        case 0: m[i] = static_cast<std::byte>(rng()); break;
        case 1: m[i] = std::byte{0}; break;
        case 2: m[i] = static_cast<std::byte>("gpu memory "[i % 11]); break;
      }
    }
  }
  return m;
}

// Writes `memory` as one region at `start` with the given settings; returns the entries in index order.
std::vector<gi::ChunkEntry> write_image(int dir_fd, const std::vector<std::byte>& memory, const gi::Settings& settings,
                                        int vpid = 7) {
  gi::ImageHeader header;
  header.chunk_size = kChunk;
  header.vpid = vpid;
  header.dump_pid = 1234;
  auto writer = gi::ImageWriter::create(dir_fd, header, {{0x7f0000000000, memory.size()}});
  REQUIRE(writer);
  gi::ChunkCodec codec(kChunk);
  gi::CompressionHistory history;
  std::vector<gi::ChunkEntry> entries;
  for (std::uint64_t c = 0; c < (*writer)->chunk_count(0); ++c) {
    gi::ChunkEntry e;
    e.region = 0;
    e.chunk = c;
    const std::size_t begin = c * kChunk, size = std::min<std::size_t>(kChunk, memory.size() - begin);
    codec.encode({memory.data() + begin, size}, settings, history, e);
    REQUIRE((*writer)->append(codec, e));
    entries.push_back(e);
  }
  REQUIRE((*writer)->finish());
  return entries;
}

std::vector<std::byte> read_back(int dir_fd, const std::string& name) {
  auto reader = gi::ImageReader::open(dir_fd, name);
  REQUIRE(reader);
  REQUIRE((*reader)->regions().size() == 1);
  std::vector<std::byte> out((*reader)->regions()[0].length);
  gi::ChunkCodec codec(kChunk);
  std::vector<std::byte> record;
  const auto& entries = (*reader)->entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto ok = (*reader)->read_chunk(i, codec, record, {out.data() + entries[i].chunk * kChunk, entries[i].raw_size});
    REQUIRE(ok);
  }
  return out;
}

std::string last_error;
bool read_fails(int dir_fd, const std::string& name) {
  auto reader = gi::ImageReader::open(dir_fd, name);
  if (!reader) {
    last_error = reader.error().message;
    return true;
  }
  gi::ChunkCodec codec(kChunk);
  std::vector<std::byte> record, out(kChunk);
  for (std::size_t i = 0; i < (*reader)->entries().size(); ++i) {
    auto ok = (*reader)->read_chunk(i, codec, record, {out.data(), (*reader)->entries()[i].raw_size});
    if (!ok) {
      last_error = ok.error().message;
      return true;
    }
  }
  return false;
}

gi::Settings settings_with(gi::CompressionMode mode, bool sparse) {
  gi::Settings s;
  s.compression = {mode, 1};
  s.sparse = sparse;
  s.threads = 1;
  return s;
}

}  // namespace

TEST_CASE("gpu image: round trip is bit-identical for every setting", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  const auto memory = mixed_memory(9, 1000);
  auto mode = GENERATE(gi::CompressionMode::Off, gi::CompressionMode::Zstd, gi::CompressionMode::Auto);
  auto sparse = GENERATE(true, false);
  const auto entries = write_image(dir.fd, memory, settings_with(mode, sparse));
  REQUIRE(entries.size() == 10);
  CHECK(entries.back().raw_size == 1000);
  CHECK(read_back(dir.fd, gi::file_name(7)) == memory);
  CHECK_FALSE(fs::exists(dir.path / ("." + gi::file_name(7) + ".partial")));

  for (const auto& e : entries) {
    const int kind = static_cast<int>(e.chunk % 3);   // 0 random, 1 zero, 2 text
    if (kind == 1 && sparse) {
      CHECK(e.encoding == gi::Encoding::Zero);
      CHECK(e.stored_size == 0);
    } else if (mode == gi::CompressionMode::Off || kind == 0) {
      CHECK(e.encoding == gi::Encoding::Raw);   // off, or random data that does not compress
    } else if (mode == gi::CompressionMode::Zstd || e.chunk < 4) {
      CHECK(e.encoding == gi::Encoding::Zstd);
    }
  }
}

TEST_CASE("gpu image: zero chunks take no space when sparse", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  std::vector<std::byte> memory(64 * kChunk, std::byte{0});
  memory[5 * kChunk + 17] = std::byte{1};   // one chunk with one set byte
  write_image(dir.fd, memory, settings_with(gi::CompressionMode::Off, true));
  auto summary = gi::summarize(dir.fd, gi::file_name(7), true);
  REQUIRE(summary);
  CHECK(summary->chunks == 64);
  CHECK(summary->zero_chunks == 63);
  CHECK(summary->raw_chunks == 1);
  CHECK(summary->stored_bytes == kChunk);
  CHECK(fs::file_size(dir.path / gi::file_name(7)) < 2 * kChunk);
  CHECK(read_back(dir.fd, gi::file_name(7)) == memory);
  CHECK(gi::format_summary("x", *summary).find("63 zero") != std::string::npos);
  CHECK(gi::looks_like_image(dir.path / gi::file_name(7)));
}

TEST_CASE("gpu image: looking for the magic never opens a FIFO an archive streams through", "[unit]") {
  // Opening it would block until a writer comes, or take the writer's reader away (gpuckpt inspect on a stream).
  // Here no writer ever comes: an open would never return, and the check has 5 s.
  TempDir dir("gpuckpt-gpu-image-test");
  const fs::path fifo = dir.path / "stream.tar.zst";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto looked = std::async(std::launch::async, [&] { return gi::looks_like_image(fifo); });
  REQUIRE(looked.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK_FALSE(looked.get());
}

TEST_CASE("gpu image: a truncated file fails naming the file", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  write_image(dir.fd, mixed_memory(6, 0), settings_with(gi::CompressionMode::Auto, true));
  const fs::path file = dir.path / gi::file_name(7);
  auto cut = GENERATE(1, 100, 5000);
  fs::resize_file(file, fs::file_size(file) - static_cast<std::uintmax_t>(cut));
  REQUIRE(read_fails(dir.fd, gi::file_name(7)));
  CHECK(last_error.find(gi::file_name(7)) != std::string::npos);
  CHECK(last_error.find("truncated") != std::string::npos);
}

TEST_CASE("gpu image: a corrupt chunk fails naming the file and the chunk", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  const auto memory = mixed_memory(6, 0);
  write_image(dir.fd, memory, settings_with(gi::CompressionMode::Zstd, true));
  auto reader = gi::ImageReader::open(dir.fd, gi::file_name(7));
  REQUIRE(reader);
  const auto entries = (*reader)->entries();
  // Chunk 3 is random (raw), chunk 5 is text (zstd): flip a payload byte of each in turn, then a header byte.
  struct Case {
    std::uint64_t chunk;
    std::uint64_t at;   // offset inside the record
    const char* expect;
  };
  auto c = GENERATE(Case{3, gi::kRecordHeaderSize + 100, "checksum mismatch"},
                    Case{5, gi::kRecordHeaderSize + 10, "chunk 5"},
                    Case{3, 9, "header is corrupt"});
  const fs::path file = dir.path / gi::file_name(7);
  const std::uint64_t offset = entries[c.chunk].offset + c.at;
  int fd = ::open(file.c_str(), O_RDWR);
  unsigned char byte = 0;
  REQUIRE(::pread(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  byte ^= 0x5a;
  REQUIRE(::pwrite(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  ::close(fd);
  REQUIRE(read_fails(dir.fd, gi::file_name(7)));
  CHECK(last_error.find(gi::file_name(7)) != std::string::npos);
  INFO(last_error);
  CHECK(last_error.find("chunk " + std::to_string(c.chunk) + " ") != std::string::npos);
  CHECK(last_error.find(c.expect) != std::string::npos);
}

TEST_CASE("gpu image: a corrupt index or a missing file fails", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  write_image(dir.fd, mixed_memory(4, 0), settings_with(gi::CompressionMode::Off, true));
  CHECK(read_fails(dir.fd, gi::file_name(8)));
  CHECK(last_error.find(gi::file_name(8)) != std::string::npos);
  const fs::path file = dir.path / gi::file_name(7);
  int fd = ::open(file.c_str(), O_RDWR);
  const auto size = static_cast<off_t>(fs::file_size(file));
  unsigned char byte = 0;
  const off_t in_index = size - static_cast<off_t>(gi::kFooterSize) - 3;
  REQUIRE(::pread(fd, &byte, 1, in_index) == 1);
  byte ^= 1;
  REQUIRE(::pwrite(fd, &byte, 1, in_index) == 1);
  ::close(fd);
  REQUIRE(read_fails(dir.fd, gi::file_name(7)));
  CHECK(last_error.find("index is corrupt") != std::string::npos);
}

TEST_CASE("gpu image: an unfinished writer leaves no file behind", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  {
    gi::ImageHeader header;
    header.chunk_size = kChunk;
    header.vpid = 9;
    auto writer = gi::ImageWriter::create(dir.fd, header, {{0x1000, 3 * kChunk}});
    REQUIRE(writer);
    gi::ChunkCodec codec(kChunk);
    gi::CompressionHistory history;
    std::vector<std::byte> data(kChunk, std::byte{3});
    gi::ChunkEntry e;
    codec.encode(data, settings_with(gi::CompressionMode::Off, true), history, e);
    REQUIRE((*writer)->append(codec, e));
    auto finished = (*writer)->finish();   // chunks 1 and 2 are missing
    REQUIRE_FALSE(finished);
    CHECK(finished.error().message.find("chunk 1 ") != std::string::npos);
  }
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("gpu image: auto compression backs off on incompressible memory and retries", "[unit]") {
  const gi::Compression autoc{gi::CompressionMode::Auto, 1};
  gi::CompressionHistory h;
  std::vector<bool> tried;
  for (int i = 0; i < 40; ++i) {   // nothing ever pays
    bool t = gi::should_try_compression(autoc, h);
    tried.push_back(t);
    gi::remember_compression(h, t, false);
  }
  // The first misses are tried, then one try in every kAutoRetryEvery chunks.
  for (unsigned i = 0; i < gi::kAutoMissesBeforeBackoff; ++i) CHECK(tried[i]);
  int later = 0;
  for (std::size_t i = gi::kAutoMissesBeforeBackoff; i < tried.size(); ++i) later += tried[i] ? 1 : 0;
  CHECK(later == 2);
  // One chunk that pays resets the history.
  gi::remember_compression(h, true, true);
  CHECK(gi::should_try_compression(autoc, h));
  CHECK(h.misses_in_a_row == 0);

  struct Row {
    gi::CompressionMode mode;
    unsigned misses;
    bool expect;
  };
  auto row = GENERATE(Row{gi::CompressionMode::Off, 0, false}, Row{gi::CompressionMode::Zstd, 100, true},
                      Row{gi::CompressionMode::Auto, 0, true}, Row{gi::CompressionMode::Auto, 100, false});
  gi::CompressionHistory fresh;
  fresh.misses_in_a_row = row.misses;
  CHECK(gi::should_try_compression({row.mode, 1}, fresh) == row.expect);
}

TEST_CASE("gpu image: compression pays only when it saves an eighth", "[unit]") {
  CHECK(gi::compression_pays(8000, 7000));
  CHECK_FALSE(gi::compression_pays(8000, 7001));
  CHECK_FALSE(gi::compression_pays(8000, 8100));
  CHECK(gi::compression_pays(8000, 10));
}

TEST_CASE("gpu image: settings parse and reject with the variable's name", "[unit]") {
  struct Row {
    const char* text;
    bool ok;
    gi::CompressionMode mode;
    int level;
  };
  auto row = GENERATE(Row{"off", true, gi::CompressionMode::Off, 0}, Row{"auto", true, gi::CompressionMode::Auto, 1},
                      Row{"zstd", true, gi::CompressionMode::Zstd, 1}, Row{"zstd:3", true, gi::CompressionMode::Zstd, 3},
                      Row{"zstd:-5", true, gi::CompressionMode::Zstd, -5}, Row{"zstd:99", false, {}, 0},
                      Row{"gzip", false, {}, 0}, Row{"zstd:", false, {}, 0});
  auto c = gi::parse_compression(row.text, "GPUCKPT_IMAGE_COMPRESSION");
  REQUIRE(c.ok() == row.ok);
  if (row.ok) {
    CHECK(c->mode == row.mode);
    CHECK(c->level == row.level);
  } else {
    CHECK(c.error().message.find("GPUCKPT_IMAGE_COMPRESSION='") == 0);
  }

  ::setenv("GPUCKPT_IMAGE_THREADS", "lots", 1);
  auto bad = gi::settings_from_env();
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("GPUCKPT_IMAGE_THREADS='lots'") == 0);
  ::setenv("GPUCKPT_IMAGE_THREADS", "3", 1);
  ::setenv("GPUCKPT_IMAGE_SPARSE", "0", 1);
  ::setenv("GPUCKPT_IMAGE_COMPRESSION", "off", 1);
  auto good = gi::settings_from_env();
  REQUIRE(good);
  CHECK(good->threads == 3);
  CHECK_FALSE(good->sparse);
  CHECK(good->compression.mode == gi::CompressionMode::Off);
  ::unsetenv("GPUCKPT_IMAGE_THREADS");
  ::unsetenv("GPUCKPT_IMAGE_SPARSE");
  ::unsetenv("GPUCKPT_IMAGE_COMPRESSION");
  auto defaults = gi::settings_from_env();
  REQUIRE(defaults);
  CHECK(defaults->threads >= 1);
  CHECK(defaults->sparse);
  CHECK(defaults->compression.mode == gi::CompressionMode::Auto);
  CHECK(gi::default_threads(64) == 16);
  CHECK(gi::default_threads(2) == 2);
}

TEST_CASE("gpu image: file names carry the pid", "[unit]") {
  CHECK(gi::file_name(42) == "gpuckpt-gpumem-42.img");
  CHECK(gi::vpid_from_file_name("gpuckpt-gpumem-42.img") == 42);
  CHECK(gi::vpid_from_file_name("gpuckpt-gpumem-.img") == -1);
  CHECK(gi::vpid_from_file_name("gpuckpt-gpumem-4x.img") == -1);
  CHECK(gi::vpid_from_file_name(".gpuckpt-gpumem-42.img.partial") == -1);
  CHECK(gi::vpid_from_file_name("pages-1.img") == -1);
}

TEST_CASE("gpu image: records spread over data shards read back; a missing or cut shard fails", "[unit]") {
  TempDir dir("gpuckpt-gpu-image-test");
  const auto memory = mixed_memory(12, 0);
  gi::ImageHeader header;
  header.chunk_size = kChunk;
  header.vpid = 5;
  header.shards = 3;
  {
    auto writer = gi::ImageWriter::create(dir.fd, header, {{0x10000, memory.size()}});
    REQUIRE(writer);
    gi::ChunkCodec codec(kChunk);
    gi::CompressionHistory history;
    for (std::uint64_t c = 0; c < (*writer)->chunk_count(0); ++c) {
      gi::ChunkEntry e;
      e.chunk = c;
      codec.encode({memory.data() + c * kChunk, kChunk}, settings_with(gi::CompressionMode::Auto, true), history, e);
      REQUIRE((*writer)->append(codec, e, static_cast<unsigned>(c)));   // worker c: shard c % 3
    }
    REQUIRE((*writer)->finish());
  }
  CHECK(fs::exists(dir.path / "gpuckpt-gpumem-5.img.1"));
  CHECK(fs::exists(dir.path / "gpuckpt-gpumem-5.img.2"));
  CHECK(read_back(dir.fd, gi::file_name(5)) == memory);
  auto summary = gi::summarize(dir.fd, gi::file_name(5), true);
  REQUIRE(summary);
  CHECK(summary->file_bytes == fs::file_size(dir.path / "gpuckpt-gpumem-5.img") +
                                   fs::file_size(dir.path / "gpuckpt-gpumem-5.img.1") +
                                   fs::file_size(dir.path / "gpuckpt-gpumem-5.img.2"));

  fs::resize_file(dir.path / "gpuckpt-gpumem-5.img.2", 100);
  REQUIRE(read_fails(dir.fd, gi::file_name(5)));
  CHECK(last_error.find("outside the file's data") != std::string::npos);
  fs::remove(dir.path / "gpuckpt-gpumem-5.img.2");
  REQUIRE(read_fails(dir.fd, gi::file_name(5)));
  CHECK(last_error.find("gpuckpt-gpumem-5.img.2") != std::string::npos);
  CHECK(last_error.find("incomplete") != std::string::npos);
}
