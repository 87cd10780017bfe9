// What KFD's CHECKPOINT does not carry is refused at dump time, naming the process, the buffer
// and why, before any BO content moves and with the GPU unpaused at once — never a dump that succeeds and a
// restore that comes back without the buffer. That includes render-node GEM BOs nobody mapped or exported, and
// processes that use the render node without KFD (Mesa): their GEM handles are probed, their VM's memory is read
// from fdinfo.
#include <amdgpu_drm.h>
#include <catch2/catch_test_macros.hpp>
#include <cstdio>

#include "criu-plugin/amd/render_file_audit.h"
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

namespace {

// CRIU's dump of one render-node fd of `pid` (seized first, as CRIU does, so the backend can name it).
int dump_render_fd(Node& node, const Images& images, int pid, int render_fd) {
  node.kfd->seize(pid, kCriuPid);
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  REQUIRE(backend->pause_devices(pid) == -ENOTSUP);
  struct stat st {};
  node.kfd->fstat(render_fd, &st);
  REQUIRE(backend->handle_device_vma(render_fd, &st) == 0);
  const int result = backend->dump_ext_file(render_fd, 33);
  backend->fini(criu::kStageDump, result);
  return result;
}

// Leaves `render_fd` holding one GEM BO of `size` bytes at handle kGemProbeHandles + 1, as a process that once
// held more than kGemProbeHandles BOs at a time can: the kernel hands out the lowest free handle.
void gem_bo_above_probe(SimKfd& kfd, int pid, int render_fd, std::uint64_t size) {
  for (std::uint32_t i = 0; i < kGemProbeHandles; ++i) kfd.app_gem_create(pid, render_fd, 4096, AMDGPU_GEM_DOMAIN_GTT);
  REQUIRE(kfd.app_gem_create(pid, render_fd, size, AMDGPU_GEM_DOMAIN_VRAM) == kGemProbeHandles + 1);
  for (std::uint32_t h = 1; h <= kGemProbeHandles; ++h) kfd.app_gem_close(pid, render_fd, h);
}

}  // namespace

TEST_CASE("A GEM BO on a KFD process's render node, neither mapped nor exported, refuses the dump", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 1500, 65536, 8192);
  const std::uint32_t handle = node.kfd->app_gem_create(1500, app.render_fds[0], 1 << 20, AMDGPU_GEM_DOMAIN_VRAM);
  const std::string refusal = "process 1500 (its fd " + std::to_string(app.render_fds[0]) +
                              " on /dev/dri/renderD128) holds 1 GEM buffer object(s) (handle 1: 1048576 bytes, VRAM)";
  SECTION("refused at the first AMD file CRIU hands over (/dev/kfd here), before PROCESS_INFO paused anything") {
    CHECK(dump_app(node, images, app, config_with(1 << 20, false)) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Error, refusal));
    CHECK_FALSE(logs.contains("process 1500: 1 GPUs"));   // PROCESS_INFO never ran
    CHECK(node.kfd->bo_bytes_moved() == 0);
    CHECK_FALSE(node.kfd->process(1500).queues_paused);
  }
  SECTION("without pidfd_getfd: refused at the render fd's own hook; the GPU paused for /dev/kfd is unpaused") {
    node.kfd->set_pidfd_getfd(false);
    CHECK(dump_app(node, images, app, config_with(1 << 20, false)) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Warn, "(pidfd_getfd: Function not implemented)"));
    CHECK(logs.contains_at(log::Level::Error, refusal));
    CHECK(logs.contains("process 1500: GPU queues unpaused (the dump failed)"));
    CHECK_FALSE(node.kfd->process(1500).queues_paused);
  }
  SECTION("the BO closed again: the dump goes ahead") {
    node.kfd->app_gem_close(1500, app.render_fds[0], handle);
    CHECK(dump_app(node, images, app, config_with(1 << 20, false)) == 0);
  }
}

TEST_CASE("A process using the render node without KFD is refused when it holds a GEM BO, dumped when not", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const int render = node.kfd->app_open_render(1600, 128);
  SECTION("no handles, no memory: dumped") {
    CHECK(dump_render_fd(node, images, 1600, render) == 0);
    CHECK(fs::exists(images.dir() / "gpuckpt-amd-render-33.img"));
  }
  SECTION("a GEM BO (Mesa's): refused, nothing written") {
    node.kfd->app_gem_create(1600, render, 65536, AMDGPU_GEM_DOMAIN_GTT);
    CHECK(dump_render_fd(node, images, 1600, render) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Error, "process 1600 (its fd " + std::to_string(render) +
                                                  " on /dev/dri/renderD128) holds 1 GEM buffer object(s) (handle 1: "
                                                  "65536 bytes, GTT)"));
    CHECK_FALSE(fs::exists(images.dir() / "gpuckpt-amd-render-33.img"));
  }
  SECTION("a kernel that prints no DRM memory stats: refused, since handles beyond the probe cannot be ruled out") {
    node.kfd->set_fdinfo_keys(SimKfd::FdinfoKeys::None);
    CHECK(dump_render_fd(node, images, 1600, render) == -ECANCELED);
    CHECK(logs.contains("shows no DRM memory usage (no drm-memory-* or drm-total-* in its fdinfo"));
  }
  ::close(render);
}

TEST_CASE("A GEM BO above the probed handles is caught by the render file's memory in fdinfo", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  SECTION("without KFD, legacy drm-memory-* keys (Linux 5.19+)") {
    const int render = node.kfd->app_open_render(1700, 128);
    gem_bo_above_probe(*node.kfd, 1700, render, 8 << 20);
    CHECK(dump_render_fd(node, images, 1700, render) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Error, "its GPU VM holds 8392704 bytes"));
    CHECK(logs.contains("the process has no /dev/kfd"));
    ::close(render);
  }
  SECTION("without KFD, newer kernels' drm-total-* keys") {
    node.kfd->set_fdinfo_keys(SimKfd::FdinfoKeys::Total);
    const int render = node.kfd->app_open_render(1700, 128);
    gem_bo_above_probe(*node.kfd, 1700, render, 8 << 20);
    CHECK(dump_render_fd(node, images, 1700, render) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Error, "its GPU VM holds 8392704 bytes"));
    ::close(render);
  }
  SECTION("in a KFD process: refused at its /dev/kfd, before any content moves, unpaused at once") {
    const App app = start_app(node, 1710, 1 << 20, 8192);
    gem_bo_above_probe(*node.kfd, 1710, app.render_fds[0], 8 << 20);
    CHECK(dump_app(node, images, app, config_with(1 << 20, false)) == -ECANCELED);
    CHECK(logs.contains_at(log::Level::Error, "process 1710: the GPU VMs of its render-node files hold "));
    CHECK(logs.contains("more than its KFD buffer objects (1064960 bytes)"));
    CHECK(node.kfd->bo_bytes_moved() == 0);
    CHECK_FALSE(node.kfd->process(1710).queues_paused);
  }
  SECTION("a KFD process whose render file holds only its KFD BOs, large ones: dumped") {
    const App app = start_app(node, 1720, 64 << 20, 16 << 20);
    CHECK(dump_app(node, images, app, config_with(1 << 20, false)) == 0);
  }
}

}  // namespace gpuckpt::amd::test
