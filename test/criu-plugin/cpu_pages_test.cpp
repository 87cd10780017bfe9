// CPU pages in the chunk store (criu-plugin/cpu_pages): CRIU's pagemap images read, page images cut along 2 MiB
// windows of virtual memory, and a page image moved into a store and rebuilt from it, byte for byte, in an image
// directory made here the way CRIU writes one.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "criu-plugin/cpu_pages/cpu_pages.h"
#include "criu-plugin/cpu_pages/page_chunks.h"
#include "criu-plugin/cpu_pages/pagemap_image.h"
#include "criu_pagemap.pb.h"
#include "test/support/random_bytes.h"
#include "test/support/temp_dir.h"

namespace cp = gpuckpt::cpu_pages;
namespace gi = gpuckpt::gpu_image;
namespace fs = std::filesystem;
using gpuckpt::test::random_bytes;
using gpuckpt::test::TempDir;

namespace {

void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

void put_record(std::string& out, const google::protobuf::MessageLite& m) {
  const std::string bytes = m.SerializeAsString();
  put_u32(out, static_cast<std::uint32_t>(bytes.size()));
  out += bytes;
}

struct Run {
  std::uint64_t vaddr;
  std::uint32_t pages;
  std::uint32_t flags = cp::kPagePresent;
};

// As CRIU 4.2 and newer write it (the count in nr_pages, compat_nr_pages 0), or as older CRIU did.
enum class Form { Criu42, Criu41 };

std::string pagemap_image(std::uint32_t pages_id, const std::vector<Run>& runs, Form form = Form::Criu42) {
  std::string out;
  put_u32(out, cp::kCommonImageMagic);
  put_u32(out, cp::kPagemapMagic);
  cp::pb::PagemapHead head;
  head.set_pages_id(pages_id);
  put_record(out, head);
  for (const Run& r : runs) {
    cp::pb::PagemapEntry e;
    e.set_vaddr(r.vaddr);
    if (form == Form::Criu42) {
      e.set_compat_nr_pages(0);
      e.set_nr_pages(r.pages);
    } else {
      e.set_compat_nr_pages(r.pages);
    }
    e.set_flags(r.flags);
    put_record(out, e);
  }
  return out;
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

void write_file(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::byte> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::size_t chunk_files(const fs::path& store) {
  std::size_t n = 0;
  if (!fs::exists(store / "sha256")) return 0;
  for (const auto& e : fs::recursive_directory_iterator(store / "sha256"))
    if (e.is_regular_file()) ++n;
  return n;
}

constexpr std::uint64_t kMiB = 1u << 20;

}  // namespace

TEST_CASE("pagemap image: head and runs read; what is in the file; malformed images refused", "[unit]") {
  const std::string image = pagemap_image(5, {{0x400000, 2}, {0x7f0000000000, 3, cp::kPagePresent | cp::kPageLazy},
                                              {0x7f0000100000, 4, cp::kPageParent | cp::kPagePresent}});
  auto parsed = cp::parse_pagemap_image(bytes_of(image), "pagemap-1.img");
  REQUIRE(parsed);
  CHECK(parsed->pages_id == 5);
  REQUIRE(parsed->runs.size() == 3);
  CHECK(parsed->runs[1].in_file);
  CHECK_FALSE(parsed->runs[2].in_file);
  CHECK(parsed->any_in_parent());
  CHECK(parsed->file_bytes() == 5 * cp::kPageSize);
  // The form CRIU 4.1 and older write reads the same.
  auto old = cp::parse_pagemap_image(bytes_of(pagemap_image(5, {{0x400000, 2}, {0x7f0000000000, 3}}, Form::Criu41)),
                                     "pagemap-1.img");
  REQUIRE(old);
  REQUIRE(old->runs.size() == 2);
  CHECK(old->runs[1].nr_pages == 3);
  CHECK(old->file_bytes() == 5 * cp::kPageSize);
  CHECK(cp::is_pagemap_name("pagemap-1.img"));
  CHECK(cp::is_pagemap_name("pagemap-shmem-123456.img"));
  CHECK_FALSE(cp::is_pagemap_name("pagemap-.img"));
  CHECK_FALSE(cp::is_pagemap_name("pages-1.img"));

  const auto refused = [](const std::string& bytes, const std::string& says) {
    auto bad = cp::parse_pagemap_image(bytes_of(bytes), "pagemap-9.img");
    REQUIRE_FALSE(bad);
    INFO(bad.error().message);
    CHECK(bad.error().message.find("pagemap-9.img") != std::string::npos);
    CHECK(bad.error().message.find(says) != std::string::npos);
  };
  refused(std::string(8, '\0'), "magic");
  refused(image.substr(0, image.size() - 1), "past the end");
  refused(image.substr(0, 8), "no head");
  refused(pagemap_image(5, {{0x400001, 2}}), "whole pages");
  refused(pagemap_image(5, {{0x400000, 0}}), "whole pages");
  refused(pagemap_image(0, {}), "pages_id");
}

TEST_CASE("page image cut: one chunk per 2 MiB window of virtual memory; a new page shifts no other chunk", "[unit]") {
  cp::PagemapImage image;
  image.pages_id = 1;
  // A run across a window edge, then two runs sharing one window.
  image.runs = {{0x200000 - 0x2000, 4, true, false}, {0x600000, 1, true, false}, {0x601000 + 0x10000, 2, true, false}};
  const auto regions = cp::cut_by_window(image);
  REQUIRE(regions.size() == 3);
  CHECK(regions[0].start == 0);
  CHECK(regions[0].length == 0x2000);
  CHECK(regions[1].start == 0x2000);
  CHECK(regions[1].length == 0x2000);
  CHECK(regions[2].start == 0x4000);
  CHECK(regions[2].length == 0x3000);   // the two runs of window 3
  // One page more in the first window: the chunks of the others are the same bytes of memory as before.
  cp::PagemapImage grown = image;
  grown.runs.insert(grown.runs.begin(), {0x100000, 1, true, false});
  const auto after = cp::cut_by_window(grown);
  REQUIRE(after.size() == 3);
  CHECK(after[0].length == 0x3000);
  CHECK(after[1].length == regions[1].length);
  CHECK(after[2].length == regions[2].length);
  // A run larger than a window is cut at each edge; nothing is longer than a window.
  cp::PagemapImage big;
  big.runs = {{0x7f0000000000 + 0x1000, 1024, true, false}};
  for (const auto& r : cp::cut_by_window(big)) CHECK(r.length <= cp::kWindowBytes);
  std::uint64_t total = 0;
  for (const auto& r : cp::cut_by_window(big)) total += r.length;
  CHECK(total == 1024 * cp::kPageSize);
}

TEST_CASE("cpu pages: moved into the store, emptied, rebuilt byte for byte; unchanged pages write nothing", "[unit]") {
  TempDir images("gpuckpt-cpu-pages-images"), store("gpuckpt-cpu-pages-store");
  // 6 MiB + 12 KiB of pages over four windows, random (incompressible) and zero stretches.
  std::vector<std::byte> pages = random_bytes(6 * kMiB + 3 * cp::kPageSize, 11);
  std::memset(pages.data() + 2 * kMiB, 0, kMiB);
  const std::vector<Run> runs = {{0x7f0000000000, static_cast<std::uint32_t>(3 * kMiB / cp::kPageSize)},
                                 {0x7f0000400000, static_cast<std::uint32_t>(3 * kMiB / cp::kPageSize + 3)}};
  const std::string pagemap = pagemap_image(2, runs);
  write_file(images.path / "pagemap-1.img", bytes_of(pagemap));
  write_file(images.path / "pages-2.img", pages);
  // A page image no pagemap accounts for exactly stays where it is.
  const std::string odd = pagemap_image(3, {{0x500000, 2}});
  write_file(images.path / "pagemap-shmem-77.img", bytes_of(odd));
  write_file(images.path / "pages-3.img", random_bytes(3 * cp::kPageSize, 3));

  gi::Settings settings;
  settings.store = store.path.string();
  settings.threads = 3;
  auto moved = cp::move_into_store(images.fd, settings, "0123456789abcdef0123456789abcdef");
  REQUIRE(moved);
  CHECK(moved->images == 1);
  CHECK(moved->bytes == pages.size());
  REQUIRE(moved->left.size() == 1);
  CHECK(moved->left[0].find("pages-3.img") != std::string::npos);
  CHECK(fs::file_size(images.path / "pages-2.img") == 0);
  CHECK(fs::file_size(images.path / "pages-3.img") == 3 * cp::kPageSize);
  CHECK(fs::exists(images.path / "gpuckpt-pages-2.manifest.json"));
  CHECK(fs::exists(store.path / "refs" / "0123456789abcdef0123456789abcdef-pages-2.json"));
  const std::size_t stored = chunk_files(store.path);
  CHECK(stored >= 3);   // the zero window is not stored
  CHECK(cp::has_pages_manifests(images.fd));

  auto back = cp::bring_back(images.fd, settings);
  REQUIRE(back);
  CHECK(back->images == 1);
  CHECK(read_file(images.path / "pages-2.img") == pages);
  CHECK_FALSE(fs::exists(images.path / ".pages-2.img.partial"));

  // The same pages checkpointed again (another checkpoint id): nothing new in the store.
  TempDir second("gpuckpt-cpu-pages-images-2");
  write_file(second.path / "pagemap-1.img", bytes_of(pagemap));
  write_file(second.path / "pages-2.img", pages);
  auto again = cp::move_into_store(second.fd, settings, "fedcba9876543210fedcba9876543210");
  REQUIRE(again);
  CHECK(again->new_chunks == 0);
  CHECK(chunk_files(store.path) == stored);

  auto manifest = gi::read_manifest(images.fd, "gpuckpt-pages-2.manifest.json");
  REQUIRE(manifest);
  REQUIRE(manifest->entries.size() == 4);
  CHECK(manifest->entries[1].encoding == gi::Encoding::Zero);
  auto opened = gpuckpt::chunk_store::Store::open(store.path, false);
  REQUIRE(opened);
  // A damaged chunk (same size, other bytes): found while reading; no page image is replaced, nothing half-written.
  {
    const fs::path damaged = store.path / (*opened)->relative_path(manifest->digests[2]);
    auto bytes = read_file(damaged);
    bytes[bytes.size() / 2] ^= std::byte{1};
    fs::permissions(damaged, fs::perms::owner_write, fs::perm_options::add);
    write_file(damaged, bytes);
    auto bad = cp::bring_back(second.fd, settings);
    REQUIRE_FALSE(bad);
    INFO(bad.error().message);
    CHECK(bad.error().message.find(manifest->digests[2].hex()) != std::string::npos);
    CHECK(fs::file_size(second.path / "pages-2.img") == 0);
    CHECK_FALSE(fs::exists(second.path / ".pages-2.img.partial"));
  }
  // A chunk gone: the restore stops before writing any page image, naming the page image and the chunk's digest.
  const auto& victim = manifest->digests[0];
  fs::remove(store.path / (*opened)->relative_path(victim));
  fs::remove(images.path / "pages-2.img");
  write_file(images.path / "pages-2.img", {});
  auto missing = cp::bring_back(images.fd, settings);
  REQUIRE_FALSE(missing);
  INFO(missing.error().message);
  CHECK(missing.error().message.find("pages-2.img") != std::string::npos);
  CHECK(missing.error().message.find(victim.hex()) != std::string::npos);
  CHECK(missing.error().errno_value == ENOENT);
  CHECK(fs::file_size(images.path / "pages-2.img") == 0);
}

TEST_CASE("cpu pages: a hostile pages manifest is refused before anything is written", "[unit]") {
  TempDir images("gpuckpt-cpu-pages-hostile"), store("gpuckpt-cpu-pages-hostile-store");
  gi::Settings settings;
  settings.store = store.path.string();
  REQUIRE(gpuckpt::chunk_store::Store::open(store.path, true));
  const auto write_text = [&](const std::string& name, const std::string& text) {
    write_file(images.path / name, bytes_of(text));
  };
  const std::string head =
      R"({"format":"gpuckpt-gpu-memory-manifest","version":1,"kind":"cpu-pages","checkpoint":"0123456789abcdef0123456789abcdef",)"
      R"("hash":"sha256","store":"/x","pages_id":4,"dump_pid":0,)";
  // Chunks larger than the window the restore's buffers hold.
  write_text("gpuckpt-pages-4.manifest.json",
             head + R"("chunk_size":67108864,"regions":[[0,67108864]],"chunks":[["zero",67108864]]})");
  auto big = cp::bring_back(images.fd, settings);
  REQUIRE_FALSE(big);
  CHECK(big.error().message.find("chunk_size") != std::string::npos);
  // A manifest under another page image's name.
  fs::remove(images.path / "gpuckpt-pages-4.manifest.json");
  write_text("gpuckpt-pages-5.manifest.json",
             head + R"("chunk_size":2097152,"regions":[[0,4096]],"chunks":[["zero",4096]]})");
  auto renamed = cp::bring_back(images.fd, settings);
  REQUIRE_FALSE(renamed);
  CHECK(renamed.error().message.find("gpuckpt-pages-5.manifest.json") != std::string::npos);
  CHECK_FALSE(fs::exists(images.path / "pages-4.img"));
  CHECK_FALSE(fs::exists(images.path / "pages-5.img"));
}
