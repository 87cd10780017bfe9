// Finding the driver's staging memory, the decision to move it ourselves or leave it to CRIU, and the parallel
// copy between a process and GPU memory images (run against this test process's own memory with the real
// process_vm_readv/process_vm_writev).
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <map>
#include <string>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "criu-plugin/cuda/chunk_mapping.h"
#include "criu-plugin/cuda/gpu_memory_path.h"
#include "criu-plugin/cuda/memory_copy.h"
#include "criu-plugin/cuda/staging_memory.h"
#include "test/criu-plugin/stand_in/stand_ins.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt::cuda;
namespace gi = gpuckpt::gpu_image;
namespace fs = std::filesystem;
using gpuckpt::test::TempDir;

namespace {

// Before and after cuCheckpointProcessCheckpoint, shaped like the maps measured on an H100 (one 8719 MiB
// private anonymous VMA appears; the driver's files and small heaps stay).
const char* kBefore =
    "55d0c0a00000-55d0c0a21000 r-xp 00000000 fd:01 1234   /usr/bin/python3\n"
    "55d0c1000000-55d0c1200000 rw-p 00000000 00:00 0      [heap]\n"
    "7f1000000000-7f1000400000 rw-p 00000000 00:00 0 \n"
    "7f2000000000-7f2000200000 rw-s 00000000 00:05 77     /dev/nvidia0\n"
    "7f3000000000-7f3000100000 r-xp 00000000 fd:01 99     /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n";
const char* kAfter =
    "55d0c0a00000-55d0c0a21000 r-xp 00000000 fd:01 1234   /usr/bin/python3\n"
    "55d0c1000000-55d0c1200000 rw-p 00000000 00:00 0      [heap]\n"
    "7f1000000000-7f1000400000 rw-p 00000000 00:00 0 \n"
    "7e0000000000-7e0220f00000 rw-p 00000000 00:00 0 \n"
    "7e0300000000-7e0300100000 rw-p 00000000 00:00 0 \n"
    "7f3000000000-7f3000100000 r-xp 00000000 fd:01 99     /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n";

struct Mapping {
  std::byte* data = nullptr;
  std::size_t size = 0;
  explicit Mapping(std::size_t bytes) : size(bytes) {
    data = static_cast<std::byte*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(data != MAP_FAILED);
  }
  ~Mapping() { ::munmap(data, size); }
  gi::Region region() const { return {reinterpret_cast<std::uint64_t>(data), size}; }
};

// Random, zero and repetitive stretches, not aligned to chunks.
void fill_pattern(Mapping& m, unsigned seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < m.size; i += 8) {
    const std::size_t stretch = (i / (3 << 20)) % 3;
    std::uint64_t v = stretch == 0 ? rng() : stretch == 1 ? 0 : 0x3f803f803f803f80ull + (i & 0xff);
    std::memcpy(m.data + i, &v, 8);
  }
}

}  // namespace

TEST_CASE("staging memory: maps parse, and the new private anonymous VMA is the staging memory", "[unit]") {
  auto before = parse_maps(kBefore);
  auto after = parse_maps(kAfter);
  REQUIRE(before.size() == 5);
  CHECK(before[1].path == "[heap]");
  CHECK(before[2].path.empty());
  CHECK(is_private_anonymous_rw(before[2]));
  CHECK_FALSE(is_private_anonymous_rw(before[1]));   // [heap] is not the driver's
  CHECK_FALSE(is_private_anonymous_rw(before[3]));   // shared device mapping

  auto regions = find_staging_regions(before, after);
  REQUIRE(regions.size() == 1);   // the 1 MiB newcomer is below the minimum
  CHECK(regions[0].start == 0x7e0000000000);
  CHECK(regions[0].length == 0x220f00000);   // 8719 MiB
  CHECK(find_staging_regions(before, before).empty());
  CHECK(find_staging_regions(before, after, 1).size() == 2);

  // A staging VMA that merged with an old neighbour counts whole.
  auto merged = parse_maps("7f1000000000-7f1100400000 rw-p 00000000 00:00 0 \n");
  auto grown = find_staging_regions(before, merged);
  REQUIRE(grown.size() == 1);
  CHECK(grown[0].start == 0x7f1000000000);

  auto named = find_named_region(after, 0x7e0300000000);
  REQUIRE(named.size() == 1);
  CHECK(named[0].length == 0x100000);
  CHECK(find_named_region(after, 0x55d0c1000000).empty());   // [heap] is not anonymous memory of its own
}

TEST_CASE("staging memory: regions must lie in writable private mappings", "[unit]") {
  auto after = parse_maps(kAfter);
  CHECK(regions_are_mapped({{0x7e0000000000, 0x220f00000}}, after));
  CHECK(regions_are_mapped({{0x7e0000001000, 0x1000}}, after));
  auto outside = regions_are_mapped({{0x7e0000000000, 0x220f00001}}, after);
  REQUIRE_FALSE(outside);
  CHECK(outside.error().message.find("0x7e0000000000") != std::string::npos);
  CHECK_FALSE(regions_are_mapped({{0x7f3000000000, 0x1000}}, after));   // r-xp
  CHECK_FALSE(regions_are_mapped({{0x1000, 0x1000}}, after));
}

TEST_CASE("staging memory: a region split by chunks mapped from the store is still mapped, a gap is not", "[unit]") {
  // Two chunks mapped from store files in the middle of the restored anonymous staging memory.
  constexpr const char* kSplit =
      "7e0000000000-7e0000200000 rw-p 00000000 00:00 0\n"
      "7e0000200000-7e0000400000 rw-p 00001000 fd:01 4242 /var/lib/gpuckpt/chunks/sha256/ab/ab01\n"
      "7e0000400000-7e0000600000 rw-p 00001000 fd:01 4243 /var/lib/gpuckpt/chunks/sha256/cd/cd02\n"
      "7e0000600000-7e0000800000 rw-p 00000000 00:00 0\n"
      "7e0000a00000-7e0000c00000 rw-p 00000000 00:00 0\n"
      "7e0000c00000-7e0000e00000 r--p 00000000 00:00 0\n";
  auto maps = parse_maps(kSplit);
  CHECK(regions_are_mapped({{0x7e0000000000, 0x800000}}, maps));
  CHECK(regions_are_mapped({{0x7e0000300000, 0x200000}}, maps));
  CHECK_FALSE(regions_are_mapped({{0x7e0000000000, 0xa00000}}, maps));   // a hole at 0x7e0000800000
  CHECK_FALSE(regions_are_mapped({{0x7e0000a00000, 0x400000}}, maps));   // runs into a read-only mapping
}

TEST_CASE("staging memory: when gpuckpt moves the memory itself and when CRIU keeps it", "[unit]") {
  struct Row {
    PathFacts facts;
    bool own;
    const char* why;
  };
  PathFacts ok;
  ok.staging_regions = 1;
  auto with = [&](auto change) {
    PathFacts f = ok;
    change(f);
    return f;
  };
  auto row = GENERATE_COPY(
      Row{ok, true, "gpuckpt writes"},
      Row{with([](PathFacts& f) { f.enabled = false; }), false, "GPUCKPT_CUDA_MEMORY_IMAGE=0"},
      Row{with([](PathFacts& f) { f.image_dir_is_stream = true; }), false, "image streamer"},
      Row{with([](PathFacts& f) { f.image_dir_known = false; }), false, "where its images go"},
      Row{with([](PathFacts& f) { f.can_drop_in_task = false; }), false, "compel"},
      Row{with([](PathFacts& f) { f.staging_regions = 0; }), false, "no new private anonymous memory"});
  auto d = decide_memory_path(row.facts);
  CHECK(d.own == row.own);
  CHECK(d.why.find(row.why) != std::string::npos);
}

TEST_CASE("staging memory: the image streamer's socket marks a stream", "[unit]") {
  TempDir dir("gpuckpt-staging-test");
  CHECK_FALSE(image_dir_is_stream(dir.fd));
  int sk = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = (dir.path / "streamer-capture.sock").string();
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(sk, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(image_dir_is_stream(dir.fd));
  ::close(sk);
}

TEST_CASE("staging memory: settings from the environment", "[unit]") {
  ::setenv("GPUCKPT_CUDA_MEMORY_IMAGE", "2", 1);
  auto bad = switch_from_env("GPUCKPT_CUDA_MEMORY_IMAGE");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("GPUCKPT_CUDA_MEMORY_IMAGE='2'") == 0);
  ::setenv("GPUCKPT_CUDA_MEMORY_IMAGE", "0", 1);
  CHECK_FALSE(*switch_from_env("GPUCKPT_CUDA_MEMORY_IMAGE"));
  ::unsetenv("GPUCKPT_CUDA_MEMORY_IMAGE");
  CHECK(*switch_from_env("GPUCKPT_CUDA_MEMORY_IMAGE"));
  // From the node's settings file when the environment does not say (containerd/CRI-O start CRIU).
  const gpuckpt::PluginSettings off(std::map<std::string, std::string>{{"GPUCKPT_CUDA_MEMORY_IMAGE", "0"}});
  CHECK_FALSE(*switch_from_env("GPUCKPT_CUDA_MEMORY_IMAGE", off));
  ::setenv("GPUCKPT_CUDA_MEMORY_IMAGE", "1", 1);
  CHECK(*switch_from_env("GPUCKPT_CUDA_MEMORY_IMAGE", off));   // the environment wins
  ::unsetenv("GPUCKPT_CUDA_MEMORY_IMAGE");
  CHECK_FALSE(switch_from_env("GPUCKPT_CUDA_MEMORY_IMAGE",
      gpuckpt::PluginSettings(std::map<std::string, std::string>{{"GPUCKPT_CUDA_MEMORY_IMAGE", "yes"}})));

  // A switch that is off when unset (GPUCKPT_STAGING_MAP_CHUNKS): unset -> off, 1 -> on, anything else an error.
  const gpuckpt::PluginSettings none(std::map<std::string, std::string>{});
  CHECK_FALSE(*switch_from_env_or("GPUCKPT_STAGING_MAP_CHUNKS", false, none));
  CHECK(*switch_from_env_or("GPUCKPT_STAGING_MAP_CHUNKS", false,
      gpuckpt::PluginSettings(std::map<std::string, std::string>{{"GPUCKPT_STAGING_MAP_CHUNKS", "1"}})));
  CHECK_FALSE(switch_from_env_or("GPUCKPT_STAGING_MAP_CHUNKS", false,
      gpuckpt::PluginSettings(std::map<std::string, std::string>{{"GPUCKPT_STAGING_MAP_CHUNKS", "on"}})));

  CHECK_FALSE(stand_in::staging_vma_from_env()->has_value());
  ::setenv("GPUCKPT_TEST_STAGING_VMA", "0x7f00aa000000", 1);
  CHECK(stand_in::staging_vma_from_env()->value() == 0x7f00aa000000);
  ::setenv("GPUCKPT_TEST_STAGING_VMA", "somewhere", 1);
  CHECK_FALSE(stand_in::staging_vma_from_env());
  ::unsetenv("GPUCKPT_TEST_STAGING_VMA");
  CHECK(namespace_pid(::getpid()) > 0);
}

TEST_CASE("memory copy: write images of process memory, drop it, fill it back bit-identical", "[unit]") {
  TempDir dir("gpuckpt-staging-test");
  Mapping a(37u << 20), b(9u << 20);   // two "processes" (both this one), sizes not multiples of the chunk
  fill_pattern(a, 1);
  fill_pattern(b, 2);
  std::vector<std::byte> a_copy(a.data, a.data + a.size), b_copy(b.data, b.data + b.size);
  const int pid = ::getpid();
  std::vector<ProcessMemory> processes{{pid, 101, {a.region()}, nullptr}, {pid, 102, {b.region()}, nullptr}};
  gi::Settings settings;
  settings.threads = GENERATE(1u, 4u);
  settings.compression = {GENERATE(gi::CompressionMode::Off, gi::CompressionMode::Auto), 1};

  auto written = write_memory_images(processes, dir.fd, settings);
  REQUIRE(written.size() == 2);
  REQUIRE(written[0]);
  REQUIRE(written[1]);
  CHECK(written[0]->memory_bytes == a.size);
  CHECK(written[0]->chunks == 19);
  CHECK(written[0]->zero_chunks >= 3);   // the zero stretches hold whole chunks
  if (settings.compression.mode == gi::CompressionMode::Auto) CHECK(written[0]->stored_bytes < a.size * 3 / 4);
  CHECK(image_vpids(dir.fd) == std::vector<int>{101, 102});
  auto regions = image_regions(dir.fd, 101, settings);
  REQUIRE(regions);
  CHECK(regions->at(0).start == a.region().start);

  // What the dump does after the files are durable: drop the pages (here: madvise in this process).
  REQUIRE(::madvise(a.data, a.size, MADV_DONTNEED) == 0);
  REQUIRE(::madvise(b.data, b.size, MADV_DONTNEED) == 0);
  CHECK(a.data[12345] == std::byte{0});
  auto filled = fill_from_images(processes, dir.fd, settings);
  REQUIRE(filled[0]);
  REQUIRE(filled[1]);
  // Zero chunks were not copied but their pages were touched: every page is resident, none left for the driver
  // (checked before anything here reads the memory, which would map the zero page).
  std::vector<unsigned char> resident(a.size / 4096);
  REQUIRE(::mincore(a.data, a.size, resident.data()) == 0);
  CHECK(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return (r & 1) == 0; }) == 0);
  CHECK(std::memcmp(a.data, a_copy.data(), a.size) == 0);
  CHECK(std::memcmp(b.data, b_copy.data(), b.size) == 0);
}

TEST_CASE("memory copy: a corrupt chunk or a missing image fails that process only, naming file and chunk", "[unit]") {
  TempDir dir("gpuckpt-staging-test");
  Mapping a(8u << 20), b(8u << 20);
  fill_pattern(a, 3);
  fill_pattern(b, 4);
  const int pid = ::getpid();
  std::vector<ProcessMemory> processes{{pid, 201, {a.region()}, nullptr}, {pid, 202, {b.region()}, nullptr}};
  gi::Settings settings;
  settings.threads = 3;
  settings.compression = {gi::CompressionMode::Off, 0};
  REQUIRE(write_memory_images(processes, dir.fd, settings)[0]);
  // Random data at the start of the first chunk of 201: flip a byte of its payload.
  auto reader = gi::ImageReader::open(dir.fd, gi::file_name(201));
  REQUIRE(reader);
  const std::uint64_t at = (*reader)->entries()[0].offset + gi::kRecordHeaderSize + 7;
  const std::string data_file = gi::shard_name(gi::file_name(201), (*reader)->entries()[0].shard);
  reader->reset();
  int fd = ::openat(dir.fd, data_file.c_str(), O_RDWR);
  unsigned char byte = 0;
  REQUIRE(::pread(fd, &byte, 1, static_cast<off_t>(at)) == 1);
  byte ^= 0xff;
  REQUIRE(::pwrite(fd, &byte, 1, static_cast<off_t>(at)) == 1);
  ::close(fd);
  processes.push_back({pid, 203, {a.region()}, nullptr});   // never written
  auto filled = fill_from_images(processes, dir.fd, settings);
  REQUIRE_FALSE(filled[0]);
  CHECK(filled[0].error().message.find("gpuckpt-gpumem-201.img") != std::string::npos);
  CHECK(filled[0].error().message.find("chunk 0 ") != std::string::npos);
  CHECK(filled[1]);
  REQUIRE_FALSE(filled[2]);
  CHECK(filled[2].error().errno_value == ENOENT);
  CHECK(filled[2].error().message.find("gpuckpt-gpumem-203.img") != std::string::npos);
}

TEST_CASE("memory copy: a region the process does not map fails before any write", "[unit]") {
  TempDir dir("gpuckpt-staging-test");
  Mapping a(4u << 20);
  fill_pattern(a, 5);
  const int pid = ::getpid();
  gi::Settings settings;
  settings.threads = 2;
  REQUIRE(write_memory_images({{pid, 301, {a.region()}, nullptr}}, dir.fd, settings)[0]);
  REQUIRE(::munmap(a.data + (2u << 20), 2u << 20) == 0);   // half of it is gone
  auto filled = fill_from_images({{pid, 301, {}, nullptr}}, dir.fd, settings);
  REQUIRE_FALSE(filled[0]);
  CHECK(filled[0].error().message.find("no private writable mapping") != std::string::npos);
}

TEST_CASE("memory copy: into a chunk store, the archive keeps a manifest; unchanged memory writes nothing", "[unit]") {
  TempDir images("gpuckpt-staging-test"), second("gpuckpt-staging-test"), store("gpuckpt-store-test");
  Mapping a(21u << 20), b(6u << 20);
  fill_pattern(a, 11);
  fill_pattern(b, 12);
  std::vector<std::byte> a_copy(a.data, a.data + a.size), b_copy(b.data, b.data + b.size);
  const int pid = ::getpid();
  std::vector<ProcessMemory> processes{{pid, 401, {a.region()}, nullptr}, {pid, 402, {b.region()}, nullptr}};
  gi::Settings settings;
  settings.threads = GENERATE(1u, 4u);
  settings.store = (store.path / "chunks").string();

  auto written = write_memory_images(processes, images.fd, settings);
  REQUIRE(written[0]);
  REQUIRE(written[1]);
  CHECK(written[0]->chunks == 11);
  CHECK(written[0]->written_bytes > 0);
  // Only manifests in the image directory: the GPU memory is in the store.
  std::vector<std::string> in_images;
  for (const auto& e : fs::directory_iterator(images.path)) in_images.push_back(e.path().filename());
  std::sort(in_images.begin(), in_images.end());
  CHECK(in_images == std::vector<std::string>{gi::manifest_name(401), gi::manifest_name(402)});
  CHECK(image_vpids(images.fd) == std::vector<int>{401, 402});
  auto manifest = gi::read_manifest(images.fd, gi::manifest_name(401));
  REQUIRE(manifest);
  CHECK(manifest->store == settings.store);

  // A second checkpoint of the same memory (weights unchanged): every chunk reused, nothing written, one checkpoint
  // id shared by both processes and different from the first's.
  auto again = write_memory_images(processes, second.fd, settings);
  REQUIRE(again[0]);
  REQUIRE(again[1]);
  CHECK(again[0]->written_bytes == 0);
  CHECK(again[1]->written_bytes == 0);
  CHECK(again[0]->reused_chunks == again[0]->chunks - again[0]->zero_chunks);
  auto manifest_again = gi::read_manifest(second.fd, gi::manifest_name(401));
  REQUIRE(manifest_again);
  CHECK(manifest_again->checkpoint != manifest->checkpoint);
  CHECK(manifest_again->checkpoint == gi::read_manifest(second.fd, gi::manifest_name(402))->checkpoint);

  REQUIRE(::madvise(a.data, a.size, MADV_DONTNEED) == 0);
  REQUIRE(::madvise(b.data, b.size, MADV_DONTNEED) == 0);
  auto filled = fill_from_images(processes, images.fd, settings);
  REQUIRE(filled[0]);
  REQUIRE(filled[1]);
  CHECK(std::memcmp(a.data, a_copy.data(), a.size) == 0);
  CHECK(std::memcmp(b.data, b_copy.data(), b.size) == 0);
  // A store at a path of its own stands for a shared volume: every chunk read is hashed (SHA-256); only the
  // node-local store is read by the manifest's checksums (gpu_manifest_test).
  CHECK(std::string(filled[0]->chunk_check) == "SHA-256");
  CHECK(describe(*filled[0]).find("each chunk checked by SHA-256") != std::string::npos);
}

TEST_CASE("memory copy: the restore's first check stops at a missing chunk, naming checkpoint, chunk and path", "[unit]") {
  TempDir images("gpuckpt-staging-test"), store("gpuckpt-store-test");
  Mapping a(8u << 20);
  fill_pattern(a, 13);
  const int pid = ::getpid();
  gi::Settings settings;
  settings.threads = 2;
  settings.store = store.path.string();
  REQUIRE(write_memory_images({{pid, 501, {a.region()}, nullptr}}, images.fd, settings)[0]);
  auto manifest = gi::read_manifest(images.fd, gi::manifest_name(501));
  REQUIRE(manifest);

  // What the plugin runs at its restore init (before CRIU restores any process), configured as on a node.
  ::setenv("GPUCKPT_GPU_STORE", settings.store.c_str(), 1);
  GpuMemoryPath path;
  path.configure(images.fd);
  REQUIRE(path.has_images());
  REQUIRE(path.check_store());

  const std::size_t first_stored = static_cast<std::size_t>(
      std::find_if(manifest->entries.begin(), manifest->entries.end(),
                   [](const gi::ChunkEntry& e) { return e.encoding != gi::Encoding::Zero; }) - manifest->entries.begin());
  const auto missing = store.path / "sha256" / manifest->digests[first_stored].hex().substr(0, 2) /
                       manifest->digests[first_stored].hex();
  REQUIRE(fs::remove(missing));
  auto checked = path.check_store();
  REQUIRE_FALSE(checked);
  CHECK(checked.error().message.find("checkpoint " + manifest->checkpoint) != std::string::npos);
  CHECK(checked.error().message.find(manifest->digests[first_stored].hex()) != std::string::npos);
  CHECK(checked.error().message.find(missing.string()) != std::string::npos);

  // Another node whose store is elsewhere: the check names the store it looked in.
  ::setenv("GPUCKPT_GPU_STORE", (store.path / "not-mounted").c_str(), 1);
  GpuMemoryPath elsewhere;
  elsewhere.configure(images.fd);
  auto unmounted = elsewhere.check_store();
  REQUIRE_FALSE(unmounted);
  CHECK(unmounted.error().message.find((store.path / "not-mounted").string()) != std::string::npos);
  ::unsetenv("GPUCKPT_GPU_STORE");

  // The fill fails that process too, naming the chunk (if the check were skipped).
  auto filled = fill_from_images({{pid, 501, {}, nullptr}}, images.fd, settings);
  REQUIRE_FALSE(filled[0]);
  CHECK(filled[0].error().message.find(manifest->digests[first_stored].hex()) != std::string::npos);
}

TEST_CASE("memory copy: an inline image restores on a node whose settings name the node's chunk store", "[unit]") {
  // An archive written inline (the plugin's default, and the chart's before it wrote store=node) restores after the
  // upgrade: the restore takes what the image directory holds, whatever the store setting says now.
  TempDir images("gpuckpt-staging-test");
  Mapping a(5u << 20);
  fill_pattern(a, 17);
  std::vector<std::byte> a_copy(a.data, a.data + a.size);
  const int pid = ::getpid();
  gi::Settings old_settings;
  old_settings.threads = 2;
  REQUIRE(old_settings.store.empty());
  REQUIRE(write_memory_images({{pid, 601, {a.region()}, nullptr}}, images.fd, old_settings)[0]);
  REQUIRE(fs::exists(images.path / gi::file_name(601)));
  REQUIRE_FALSE(fs::exists(images.path / gi::manifest_name(601)));

  ::setenv("GPUCKPT_GPU_STORE", "node", 1);
  auto now = gi::settings_from_env(gpuckpt::PluginSettings{});
  REQUIRE(now);
  CHECK(now->store == gpuckpt::chunk_store::kNodeStoreDir);
  GpuMemoryPath path;
  path.configure(images.fd);
  ::unsetenv("GPUCKPT_GPU_STORE");
  REQUIRE(path.has_images());
  CHECK(path.check_store());   // no manifest: no store is opened

  REQUIRE(::madvise(a.data, a.size, MADV_DONTNEED) == 0);
  auto filled = fill_from_images({{pid, 601, {}, nullptr}}, images.fd, *now);
  REQUIRE(filled[0]);
  CHECK(std::memcmp(a.data, a_copy.data(), a.size) == 0);
}

TEST_CASE("after the driver's restore, only what maps the store's chunk files is released, neighbours merged",
          "[unit]") {
  // A restored process: its staging VMA partly mapped from the node store's chunks (two back to back, one apart),
  // the rest anonymous; a file of another store, and one whose name only starts like the store's.
  const std::string maps =
      "7f0000000000-7f0000200000 rw-p 00001000 fd:01 11 /var/lib/gpuckpt/chunks/sha256/ab/abcd\n"
      "7f0000200000-7f0000400000 rw-p 00001000 fd:01 12 /var/lib/gpuckpt/chunks/sha256/cd/cdef\n"
      "7f0000400000-7f0000600000 rw-p 00000000 00:00 0 \n"
      "7f0000600000-7f0000800000 rw-p 00001000 fd:01 13 /var/lib/gpuckpt/chunks/sha256/ef/ef01\n"
      "7f0000800000-7f0000a00000 rw-p 00001000 fd:01 14 /srv/shared-store/sha256/ab/abcd\n"
      "7f0000a00000-7f0000c00000 rw-p 00001000 fd:01 15 /var/lib/gpuckpt/chunks-old/sha256/ab/abcd\n"
      "7f0000c00000-7f0000e00000 r--p 00000000 fd:01 16 /var/lib/gpuckpt/chunks/refs/x\n";
  const auto ranges = gpuckpt::cuda::store_chunk_mappings(gpuckpt::cuda::parse_maps(maps), "/var/lib/gpuckpt/chunks/");
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].start == 0x7f0000000000);
  CHECK(ranges[0].length == 0x400000);
  CHECK(ranges[1].start == 0x7f0000600000);
  CHECK(ranges[1].length == 0x200000);
  CHECK(gpuckpt::cuda::store_chunk_mappings(gpuckpt::cuda::parse_maps(maps), "/srv/shared-store").size() == 1);
  CHECK(gpuckpt::cuda::store_chunk_mappings(gpuckpt::cuda::parse_maps(maps), "/nowhere").empty());
}
