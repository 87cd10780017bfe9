// Issue 25, gap 3: what KFD's CHECKPOINT does not carry is refused at dump time, naming the process, the buffer
// and why, before any BO content moves and with the GPU unpaused at once — never a dump that succeeds and a
// restore that comes back without the buffer.
#include <catch2/catch_test_macros.hpp>
#include <cstdio>

#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A /proc/<pid>/maps line for a shared mapping of `path` at `start`, `size` bytes, file offset `offset`.
std::string maps_line(std::uint64_t start, std::uint64_t size, std::uint64_t offset, const std::string& path) {
  return hex(start) + "-" + hex(start + size) + " rw-s " + hex(offset) + " 00:05 1234  " + path;
}

bool has_content_file(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("gpuckpt-amd-bo-", 0) == 0) return true;
  }
  return false;
}

// One CRIU DUMP_EXT_FILE of the app's /dev/kfd fd; the backend finishes as CRIU's fini would.
int dump_kfd_fd(Node& node, const Images& images, const App& app) {
  node.kfd->seize(app.pid, kCriuPid);
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  const int result = backend->dump_ext_file(app.kfd_fd, kKfdImageId);
  backend->fini(criu::kStageDump, result);
  return result;
}

}  // namespace

TEST_CASE("A render-node mapping of a GEM BO that is not a KFD BO refuses the dump, naming it", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 1200, 65536, 8192);
  const sim::SimBo vram = node.kfd->process(1200).bos[0];
  // The CPU mapping of a KFD BO through the render node is fine; the second mapping is a BO libdrm allocated
  // through the render node itself (GEM), which KFD's CHECKPOINT never lists.
  sim::write_proc_maps(node.host_root, "1200",
                       {maps_line(0x7f1000000000ull, vram.size, vram.mmap_offset, "/dev/dri/renderD128"),
                        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0  [stack]"});
  SECTION("only KFD BOs mapped: the dump goes ahead") {
    CHECK(dump_kfd_fd(node, images, app) == 0);
    CHECK(has_content_file(images.dir()));
  }
  SECTION("a GEM BO mapped: refused before any content moved, the GPU unpaused at once") {
    sim::write_proc_maps(node.host_root, "1200",
                         {maps_line(0x7f1000000000ull, vram.size, vram.mmap_offset, "/dev/dri/renderD128"),
                          maps_line(0x7f2000000000ull, 0x200000, 0x7a0000000ull, "/dev/dri/renderD128")});
    CHECK(dump_kfd_fd(node, images, app) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Error,
                           "process 1200: its mapping of /dev/dri/renderD128 at 0x7f2000000000-0x7f2000200000 "
                           "(mmap offset 0x7a0000000) is a GEM buffer object that is not a KFD BO"));
    CHECK(node.kfd->bo_bytes_moved() == 0);
    CHECK_FALSE(has_content_file(images.dir()));
    CHECK_FALSE(fs::exists(images.dir() / "gpuckpt-amd-kfd-7.img"));
    CHECK_FALSE(node.kfd->process(1200).queues_paused);
  }
}

TEST_CASE("A dma-buf fd the process imported from elsewhere refuses the dump, naming the process", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App exporter = start_app(node, 1300, 8192, 4096);
  const App app = start_app(node, 1310, 8192, 4096);
  // 1310 holds an fd on a dma-buf of 1300's VRAM BO (received over a socket): not one of its own KFD BOs.
  node.kfd->app_share_dmabuf(1300, exporter.bos[0].va, 1310);
  CHECK(dump_kfd_fd(node, images, app) == -ECANCELED);
  CHECK(logs.contains("process 1310 holds a dma-buf fd (inode "));
  CHECK(logs.contains("that is not the dma-buf of any of its KFD buffer objects"));
  CHECK(node.kfd->bo_bytes_moved() == 0);
  CHECK_FALSE(node.kfd->process(1310).queues_paused);
}

TEST_CASE("A KFD BO whose dma-buf another process holds refuses the dump, naming the BO and the holder", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 1400, 8192, 4096);
  const AppBo& gtt = app.bos[1];
  REQUIRE(gtt.flags == kGtt);
  SECTION("the process's own fds on its BO's dma-buf are restorable") {
    node.kfd->app_export_dmabuf(1400, gtt.va);
    CHECK(dump_kfd_fd(node, images, app) == 0);
  }
  SECTION("another process holds it: refused") {
    node.kfd->app_export_dmabuf(1400, gtt.va);
    node.kfd->app_share_dmabuf(1400, gtt.va, 1410);
    CHECK(dump_kfd_fd(node, images, app) == -ECANCELED);
    CHECK(logs.contains("process 1400: its GTT BO at 0x" + hex(gtt.va) + " (4096 bytes, gpu_id 0x1000) is shared "
                        "as a dma-buf with process 1410"));
    CHECK(node.kfd->bo_bytes_moved() == 0);
    CHECK_FALSE(node.kfd->process(1400).queues_paused);
  }
}

}  // namespace gpuckpt::amd::test
