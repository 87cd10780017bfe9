// Which copy path moves BO contents (no AMD hardware needed): SDMA where the GPU
// gives an engine; without one, the CPU path only for BOs the kernel lets the CPU map, logged as a warning with
// the reason; a VRAM BO without CPU access then fails the dump or restore up front, naming it.
#include <catch2/catch_test_macros.hpp>

#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

constexpr std::uint32_t kPublicVram = kVram | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;

// An app with one BO of each given kind on every GPU, filled with a pattern.
App start_app_with(Node& node, int pid, std::uint32_t vram_flags) {
  App app;
  app.pid = pid;
  app.kfd_fd = node.kfd->app_open_kfd(pid);
  std::uint64_t va = 0x7e0000000000ull;
  std::uint32_t seed = 11;
  for (const auto& g : node.gpus) {
    app.render_fds.push_back(node.kfd->app_open_render(pid, g.render_minor));
    for (auto [size, flags] : {std::pair<std::uint64_t, std::uint32_t>{65536, vram_flags}, {16384, kGtt}}) {
      node.kfd->app_alloc_bo(pid, g.gpu_id, va, size, flags);
      app.bos.push_back(AppBo{g.gpu_id, va, size, flags});
      node.kfd->app_fill_bo(pid, va, seed++);
      app.contents[va] = node.kfd->app_read_bo(pid, va);
      va += 0x200000;
    }
    node.kfd->app_create_queue(pid, g.gpu_id);
  }
  return app;
}

std::uint64_t total_bytes(const App& app) {
  std::uint64_t total = 0;
  for (const auto& [va, bytes] : app.contents) total += bytes.size();
  return total;
}

}  // namespace

TEST_CASE("With SDMA every BO moves through it, VRAM without CPU access included, per GPU in parallel", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(4));
  Images images(tmp.path() / "images");
  const App app = start_app_with(node, 1500, kVram);
  const AmdConfig config = config_with(1 << 20, true);
  REQUIRE(dump_app(node, images, app, config) == 0);
  CHECK(node.kfd->sdma_bytes_moved() == total_bytes(app));
  for (const auto& g : node.gpus) {
    char id[16];
    std::snprintf(id, sizeof id, "0x%x", g.gpu_id);
    CHECK(logs.contains(std::string("amd: GPU ") + id + ": BO contents move through SDMA"));
  }
  node.kfd->kill(1500);
  // The restore offloads to the main-process worker, which opens each GPU's render node for its own engine.
  const RestoreOutcome out = restore_app(node, images, 1500, 0, config);
  REQUIRE(out.kfd_fd >= 0);
  CHECK(out.resume == 0);
  CHECK(logs.contains("handed to the parallel restore worker"));
  CHECK(node.kfd->sdma_bytes_moved() == 2 * total_bytes(app));
  for (const auto& [va, bytes] : app.contents) CHECK(node.kfd->app_read_bo(1500, va) == bytes);
  close_all(out);
}

TEST_CASE("Without SDMA, CPU-accessible BOs take the CPU path with a warning naming the reason", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(2));
  Images images(tmp.path() / "images");
  node.kfd->set_sdma_available(false, "libdrm_amdgpu.so.1 not loadable");
  const App app = start_app_with(node, 1510, kPublicVram);
  const AmdConfig config = config_with(1 << 20, false);
  REQUIRE(dump_app(node, images, app, config) == 0);
  CHECK(node.kfd->sdma_bytes_moved() == 0);
  CHECK(node.kfd->bo_bytes_moved() == total_bytes(app));
  CHECK(logs.contains_at(log::Level::Warn,
                         "amd: GPU 0x1000: SDMA unavailable (SDMA: libdrm_amdgpu.so.1 not loadable); its 2 BO(s), "
                         "all CPU-accessible, move through the CPU path (dmabuf mmap)"));
  node.kfd->kill(1510);
  const RestoreOutcome out = restore_app(node, images, 1510, 0, config);
  REQUIRE(out.kfd_fd >= 0);
  for (const auto& [va, bytes] : app.contents) CHECK(node.kfd->app_read_bo(1510, va) == bytes);
  close_all(out);
}

TEST_CASE("Without SDMA, a VRAM BO without CPU access fails the dump up front, naming it; nothing moves",
          "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(2));
  Images images(tmp.path() / "images");
  node.kfd->set_sdma_available(false, "libdrm_amdgpu.so.1 not loadable");
  const App app = start_app_with(node, 1520, kVram);
  const int result = dump_app(node, images, app, config_with(1 << 20, false));
  CHECK(result == -EPERM);
  CHECK(logs.contains("GPU 0x1000: the VRAM BO at 0x7e0000000000 (65536 bytes) has no CPU access (allocated without "
                      "KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC), so the kernel refuses to map it (EPERM) and only SDMA can copy "
                      "it, but SDMA is unavailable: SDMA: libdrm_amdgpu.so.1 not loadable. Nothing was copied"));
  CHECK(node.kfd->bo_bytes_moved() == 0);   // not even the second GPU's, nor the GTT BOs
  CHECK_FALSE(node.kfd->process(1520).queues_paused);
}

TEST_CASE("GPUCKPT_AMD_SDMA=0 is named as the reason when a BO needs SDMA", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app_with(node, 1530, kVram);
  AmdConfig config = config_with(1 << 20, false);
  config.use_sdma = false;
  CHECK(dump_app(node, images, app, config) == -EPERM);
  CHECK(logs.contains("but SDMA is unavailable: GPUCKPT_AMD_SDMA=0"));
}

TEST_CASE("A restore whose target has no SDMA refuses VRAM without CPU access before filling any BO", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app_with(node, 1540, kVram);
  REQUIRE(dump_app(node, images, app, config_with(1 << 20, false)) == 0);
  node.kfd->kill(1540);
  node.kfd->set_sdma_available(false, "libdrm_amdgpu.so.1 not loadable");
  const std::uint64_t before = node.kfd->bo_bytes_moved();
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  node.kfd->set_calling_pid(1540);
  bool retry = false;
  CHECK(backend->restore_ext_file(kKfdImageId, &retry) == -EPERM);
  CHECK(logs.contains("only SDMA can copy it, but SDMA is unavailable"));
  CHECK(node.kfd->bo_bytes_moved() == before);
}

}  // namespace gpuckpt::amd::test
