// The AMD backend's hook functions, driven in CRIU's order against the simulated KFD/DRM device.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fstream>

#include "criu-plugin/amd/image_dir.h"
#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

std::uint64_t read_le64(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[8] = {};
  in.read(reinterpret_cast<char*>(b), 8);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(b[i]) << (8 * i);
  return v;
}

void check_contents_restored(Node& node, const App& original, int pid) {
  for (const auto& [va, bytes] : original.contents) {
    INFO("BO at VA " << va);
    const auto restored = node.kfd->app_read_bo(pid, va);
    REQUIRE(restored.size() == bytes.size());
    CHECK(restored == bytes);
  }
}

}  // namespace

TEST_CASE("BO contents round-trip byte for byte on 1, 2 and 8 GPUs, parallel restore on and off", "[unit]") {
  const std::size_t gpu_count = GENERATE(1u, 2u, 8u);
  const bool parallel = GENERATE(true, false);
  INFO(gpu_count << " GPUs, parallel restore " << (parallel ? "on" : "off"));
  Scenario s(make_gpus(gpu_count), 100, (1 << 20) + 4096 * 3, 64 * 1024 + 17, config_with(256 << 10, parallel), {},
             /*kill_after_dump=*/false);
  REQUIRE(s.dumped == 0);
  CHECK(s.inventory_calls == 1);
  // The checkpointed process was paused for the dump and runs again afterwards.
  CHECK_FALSE(s.node.kfd->process(100).queues_paused);
  s.node.kfd->kill(100);

  const RestoreOutcome out = s.restore(gpu_count);
  REQUIRE(out.kfd_fd >= 0);
  CHECK(out.resume == 0);
  const auto restored = s.node.kfd->process(100);
  CHECK(restored.restored);
  CHECK(restored.running);
  CHECK(restored.queues.size() == gpu_count);
  CHECK(restored.events == 3);
  check_contents_restored(s.node, s.app, 100);
  if (parallel) {
    CHECK(s.logs.contains("handed to the parallel restore worker"));
    CHECK(s.logs.contains("worker stopped after 1 job(s)"));
  } else {
    CHECK(s.logs.contains("bytes of BO contents restored in"));
  }
  close_all(out);
}

TEST_CASE("A BO larger than the buffer cap moves in several passes", "[unit]") {
  const std::uint64_t cap = 64 << 10;
  const std::uint64_t vram = (1 << 20) + 123;   // not a multiple of the cap: the last pass is short
  Scenario s(make_gpus(2), 200, vram, 5000, config_with(cap, false));
  REQUIRE(s.dumped == 0);
  CHECK(s.node.kfd->largest_bo_transfer() == cap);
  // Per GPU: ceil(vram / cap) passes for the VRAM BO and one for the small GTT BO.
  const std::uint64_t passes = 2 * ((vram + cap - 1) / cap + 1);
  CHECK(s.logs.contains("in " + std::to_string(passes) + " passes"));

  const RestoreOutcome out = s.restore(2);
  REQUIRE(out.kfd_fd >= 0);
  CHECK(s.node.kfd->largest_bo_transfer() == cap);
  check_contents_restored(s.node, s.app, 200);
  close_all(out);
}

TEST_CASE("Every image file starts with its 8-byte size; content files are one per GPU", "[unit]") {
  Scenario s(make_gpus(2, 0x4a21), 300, 300000, 7000, config_with(1 << 20, true));
  REQUIRE(s.dumped == 0);
  const Node& node = s.node;
  const Images& images = s.images;
  const App& app = s.app;

  for (const auto& g : node.gpus) {
    const fs::path file = images.dir() / bo_content_image_name(kKfdImageId, g.gpu_id);
    INFO(file);
    REQUIRE(fs::exists(file));
    CHECK(read_le64(file) == 300000 + 7000);
    CHECK(fs::file_size(file) == 8 + 300000 + 7000);
    // The bytes after the header are the VRAM BO's, then the GTT BO's, in KFD's order.
    std::ifstream in(file, std::ios::binary);
    in.seekg(8);
    std::vector<std::uint8_t> first(300000);
    in.read(reinterpret_cast<char*>(first.data()), 300000);
    const auto vram_bo = std::find_if(app.bos.begin(), app.bos.end(),
                                      [&](const AppBo& b) { return b.gpu_id == g.gpu_id && b.flags == kVram; });
    CHECK(first == app.contents.at(vram_bo->va));
  }
  const fs::path kfd = images.dir() / kfd_image_name(kKfdImageId);
  CHECK(fs::file_size(kfd) == 8 + read_le64(kfd));
  for (std::size_t i = 0; i < node.gpus.size(); ++i) {
    const fs::path render = images.dir() / render_image_name(static_cast<std::uint32_t>(render_image_id(i)));
    CHECK(fs::file_size(render) == 8 + read_le64(render));
  }
}

TEST_CASE("Restore onto renumbered GPUs remaps gpu_ids, render minors and mmap offsets", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}, SimGpu{0x2222, 129}});
  Images images(tmp.path() / "images");
  const App app = start_app(source, 400, 200000, 9000);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 130}, SimGpu{0x8888, 131}});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(400);
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  const auto p = target.kfd->process(400);
  REQUIRE(p.pdds.size() == 2);
  for (const auto& pdd : p.pdds) {
    // The application keeps the gpu_ids it knew; KFD runs them on this node's GPUs.
    CHECK((pdd.actual_gpu_id == 0x7777 || pdd.actual_gpu_id == 0x8888));
    CHECK((pdd.user_gpu_id == 0x1111 || pdd.user_gpu_id == 0x2222));
  }
  check_contents_restored(target, app, 400);

  // UPDATE_VMA_MAP: every BO mapping gets KFD's new offset; render-node mappings get an fd of the new node.
  for (const auto& bo : app.bos) {
    const std::uint64_t old_offset = [&] {
      for (const auto& b : source.kfd->process(400).bos) {
        if (b.va == bo.va) return b.mmap_offset;
      }
      return std::uint64_t{0};
    }();
    const bool doorbell = bo.flags == kDoorbell;
    std::uint64_t new_offset = 0;
    int plugin_fd = -2;
    const std::string path = doorbell ? "/dev/kfd" : "//dev/dri/renderD" + std::to_string(bo.gpu_id == 0x1111 ? 128 : 129);
    REQUIRE(backend->update_vma_map(path.c_str(), bo.va, old_offset, &new_offset, &plugin_fd) == 1);
    std::uint64_t expected = 0;
    for (const auto& b : target.kfd->process(400).bos) {
      if (b.va == bo.va) expected = b.mmap_offset;
    }
    CHECK(new_offset == expected);
    if (doorbell) {
      CHECK(plugin_fd == -1);
    } else {
      REQUIRE(plugin_fd >= 0);
      struct stat st {};
      target.kfd->fstat(plugin_fd, &st);
      CHECK(major(st.st_rdev) == 226);
      CHECK((minor(st.st_rdev) == 130 || minor(st.st_rdev) == 131));
      // The mapping must be made through the DRM file the BOs were restored in: another open of the same node
      // is refused the offset (DRM grants mmap offsets per open file).
      CHECK(target.kfd->app_mmap_allowed(400, plugin_fd, new_offset));
      const int other_open = target.kfd->app_open_render(400, static_cast<int>(minor(st.st_rdev)));
      REQUIRE(other_open >= 0);
      CHECK_FALSE(target.kfd->app_mmap_allowed(400, other_open, new_offset));
      target.kfd->close(other_open);
      ::close(plugin_fd);
    }
  }
  std::uint64_t unused = 0;
  int unused_fd = -1;
  CHECK(backend->update_vma_map("/dev/kfd", 0x1234000, 0, &unused, &unused_fd) == 0);
  CHECK(backend->update_vma_map("/usr/lib/libfoo.so", 0x1234000, 0, &unused, &unused_fd) == -ENOTSUP);

  target.kfd->set_calling_pid(kCriuPid);
  CHECK(backend->resume_devices_late(400) == 0);
  CHECK(target.kfd->process(400).running);
  backend->fini(criu::kStageRestore, 0);
  ::close(kfd_fd);
}

TEST_CASE("A render-node image restored before the KFD image waits for it and lands on the same GPU", "[unit]") {
  TempDir tmp;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}, SimGpu{0x2222, 129}});
  Images images(tmp.path() / "images");
  const App app = start_app(source, 410, 8192, 4096);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 140}, SimGpu{0x8888, 141}});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(410);
  bool retry = false;
  // The KFD image that chooses the GPUs is not restored yet: CRIU is asked to come back to this one.
  CHECK(backend->restore_ext_file(render_image_id(1), &retry) == 0);   // was renderD129
  CHECK(retry);
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  const int render0 = backend->restore_ext_file(render_image_id(0), &retry);
  REQUIRE(render0 >= 0);
  CHECK_FALSE(retry);
  const int render1 = backend->restore_ext_file(render_image_id(1), &retry);
  REQUIRE(render1 >= 0);
  struct stat st0 {}, st1 {};
  target.kfd->fstat(render0, &st0);
  target.kfd->fstat(render1, &st1);
  // Both GPUs are alike, so the matcher keeps their order: 128 -> 140, 129 -> 141.
  CHECK(minor(st0.st_rdev) == 140);
  CHECK(minor(st1.st_rdev) == 141);
  check_contents_restored(target, app, 410);
  for (int fd : {render0, render1, kfd_fd}) ::close(fd);
}

TEST_CASE("A render-node fd of a process without KFD is restored onto the matched node", "[unit]") {
  TempDir tmp;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}});
  Images images(tmp.path() / "images");
  const int render = source.kfd->app_open_render(420, 128);
  {
    auto backend = make_backend(source, images, config_with(1 << 20, false));
    REQUIRE(backend->init(criu::kStageDump) == 0);
    struct stat st {};
    source.kfd->fstat(render, &st);
    REQUIRE(backend->handle_device_vma(render, &st) == 0);
    REQUIRE(backend->dump_ext_file(render, 33) == 0);
  }
  Node target(tmp.path() / "target", {SimGpu{0x9999, 135}});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(420);
  bool retry = true;
  const int fd = backend->restore_ext_file(33, &retry);
  REQUIRE(fd >= 0);
  CHECK_FALSE(retry);
  struct stat st {};
  target.kfd->fstat(fd, &st);
  CHECK(minor(st.st_rdev) == 135);
  ::close(fd);
  ::close(render);
}

TEST_CASE("Fds the plugin opens in the restored process are numbered above its highest fd", "[unit]") {
  Scenario s(make_gpus(2), 500, 8192, 4096, config_with(1 << 20, false),
             [](Node& node) { sim::write_proc_fds(node.host_root, "500", {0, 1, 2, 7, 300}); });
  REQUIRE(s.dumped == 0);
  fs::remove_all(s.node.host_root / "proc/500");   // the process is gone; the image remembers its fds

  const RestoreOutcome out = s.restore(2);
  REQUIRE(out.kfd_fd > 300);
  for (int fd : out.render_fds) CHECK(fd > 300);
  CHECK(out.resume == 0);
  close_all(out);
}

TEST_CASE("In a PID namespace the fd rule uses the seized host pid, not KFD's namespaced pid", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  // KFD knows the process as pid 30 (its container's namespace); CRIU seized it as host pid 5030. A host
  // process that happens to be pid 30 has few fds and must not be taken for it.
  sim::write_proc_fds(node.host_root, "30", {0, 1, 2});
  sim::write_proc_fds(node.host_root, "5030", {0, 1, 2, 450});
  fs::remove(node.host_root / "proc/5030/fd/450");
  fs::create_symlink("/dev/kfd", node.host_root / "proc/5030/fd/450");
  std::ofstream(node.host_root / "proc/5030/status") << "Name:\tapp\nNSpid:\t5030\t30\nNSpgid:\t5030\t30\n";
  const App app = start_app(node, 30, 8192, 4096);
  REQUIRE(dump_app(node, images, app, config_with(1 << 20, false), nullptr, /*host_pid=*/5030) == 0);
  node.kfd->kill(30);
  const RestoreOutcome out = restore_app(node, images, 30, 1, config_with(1 << 20, false));
  CHECK(out.kfd_fd > 450);
  for (int fd : out.render_fds) CHECK(fd > 450);
  close_all(out);
}

TEST_CASE("A KFD older than 1.8 disables the backend cleanly", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1), /*kfd_minor=*/7);
  Images images(tmp.path() / "images");
  const App app = start_app(node, 600, 8192, 4096);
  auto backend = make_backend(node, images, config_with(1 << 20, true));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  CHECK(logs.contains("KFD ioctl version 1.7 is older than 1.8"));
  struct stat st {};
  node.kfd->fstat(app.kfd_fd, &st);
  CHECK(backend->handle_device_vma(app.kfd_fd, &st) == -ENOTSUP);
  CHECK(backend->dump_ext_file(app.kfd_fd, kKfdImageId) == -ENOTSUP);
  CHECK_FALSE(node.kfd->process(600).queues_paused);   // nothing was asked of KFD
  CHECK_FALSE(fs::exists(images.dir() / kfd_image_name(kKfdImageId)));
}

TEST_CASE("Without /dev/kfd the backend declines every hook", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", {});
  Images images(tmp.path() / "images");
  auto backend = make_backend(node, images, config_with(1 << 20, true));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  CHECK(logs.contains("no /dev/kfd"));
  bool retry = false;
  CHECK(backend->restore_ext_file(kKfdImageId, &retry) == -ENOTSUP);
  CHECK(backend->resume_devices_late(42) == -ENOTSUP);
  CHECK(backend->post_forking() == 0);
}

TEST_CASE("A truncated image fails the restore with a message naming it", "[unit]") {
  const bool parallel = GENERATE(false, true);
  Scenario s(make_gpus(2), 700, 100000, 5000, config_with(1 << 20, parallel));
  REQUIRE(s.dumped == 0);
  const std::string victim = bo_content_image_name(kKfdImageId, s.node.gpus[1].gpu_id);
  fs::resize_file(s.images.dir() / victim, 8 + 50000);

  const RestoreOutcome out = s.restore(0);
  if (parallel) {
    // The restored process handed the work over; the main process reports the failure and, since CRIU only logs
    // RESUME_DEVICES_LATE's errors, stops the task that would run with unrestored GPU memory.
    CHECK(out.resume < 0);
    REQUIRE_FALSE(kills_requested().empty());
    CHECK(kills_requested().back() == std::pair{700, SIGKILL});
  } else {
    CHECK(out.kfd_fd < 0);
  }
  CHECK(s.logs.contains("image " + victim + " is truncated"));
  close_all(out);
}

TEST_CASE("A truncated metadata image is a clear error too", "[unit]") {
  Scenario s(make_gpus(1), 710, 100000, 5000, config_with(1 << 20, false));
  REQUIRE(s.dumped == 0);
  const fs::path kfd = s.images.dir() / kfd_image_name(kKfdImageId);
  fs::resize_file(kfd, fs::file_size(kfd) / 2);
  bool retry = false;
  CHECK(s.restore_backend()->restore_ext_file(kKfdImageId, &retry) < 0);
  CHECK(s.logs.contains("image " + kfd_image_name(kKfdImageId) + " is truncated"));
}

TEST_CASE("RESTORE only into a fresh process: a second restore in the same process fails", "[unit]") {
  // The process is not killed: it still has its BOs, so KFD refuses to restore into it.
  Scenario s(make_gpus(1), 800, 8192, 4096, config_with(1 << 20, false), {}, /*kill_after_dump=*/false);
  REQUIRE(s.dumped == 0);
  bool retry = false;
  CHECK(s.restore_backend()->restore_ext_file(kKfdImageId, &retry) == -EINVAL);
  CHECK(s.logs.contains("KFD CRIU RESTORE failed"));
}

TEST_CASE("RESUME_DEVICES_LATE: a process without KFD state is not ours", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  auto backend = make_backend(node, images, config_with(1 << 20, true));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  REQUIRE(backend->post_forking() == 0);
  CHECK(backend->resume_devices_late(4242) == -ENOTSUP);   // ESRCH from KFD: not an error, not ours
  CHECK(backend->resume_devices_late(4243) == -ENOTSUP);   // the worker is stopped once, calls stay harmless
}

TEST_CASE("libhsakmt's shared memory and semaphore are recreated when missing", "[unit]") {
  const std::uint32_t magic = 0x4d535348;
  Scenario s(make_gpus(1), 900, 8192, 4096, config_with(1 << 20, false), [&](Node& node) {
    const fs::path shm = node.host_root / "dev/shm/hsakmt_shared_mem";
    fs::create_directories(shm.parent_path());
    std::ofstream(shm, std::ios::binary).write(reinterpret_cast<const char*>(&magic), sizeof magic);
    fs::resize_file(shm, 4096);
  });
  REQUIRE(s.dumped == 0);
  const fs::path shm = s.node.host_root / "dev/shm/hsakmt_shared_mem";
  fs::remove(shm);

  const RestoreOutcome out = s.restore(0);
  REQUIRE(out.kfd_fd >= 0);
  REQUIRE(fs::exists(shm));
  CHECK(fs::file_size(shm) == 4096);
  std::ifstream in(shm, std::ios::binary);
  std::uint32_t restored_magic = 0;
  in.read(reinterpret_cast<char*>(&restored_magic), sizeof restored_magic);
  CHECK(restored_magic == magic);
  CHECK(fs::exists(s.node.host_root / "dev/shm/sem.hsakmt_semaphore"));
  CHECK(s.logs.contains("was missing; recreating it"));
  close_all(out);
}

TEST_CASE("When CRIU reused the parallel-restore socket's fd number, contents restore in-process", "[unit]") {
  Scenario s(make_gpus(2), 1050, 70000, 9000, config_with(1 << 20, true));
  REQUIRE(s.dumped == 0);
  const auto sockets = [] {
    std::vector<int> fds;
    for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
      const int fd = std::stoi(e.path().filename().string());
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) fds.push_back(fd);
    }
    return fds;
  };
  const auto before = sockets();
  auto backend = s.restore_backend();
  std::vector<int> created;
  for (int fd : sockets()) {
    if (std::find(before.begin(), before.end(), fd) == before.end()) created.push_back(fd);
  }
  REQUIRE(created.size() == 2);
  // The sending end (created second) now holds one of the restored process's own files.
  const int other = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  REQUIRE(::dup2(other, *std::max_element(created.begin(), created.end())) >= 0);
  ::close(other);
  s.node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->post_forking() == 0);
  s.node.kfd->set_calling_pid(1050);
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  CHECK(s.logs.contains("did not survive into the restored process; restoring BO contents in-process"));
  check_contents_restored(s.node, s.app, 1050);
  s.node.kfd->set_calling_pid(kCriuPid);
  CHECK(backend->resume_devices_late(1050) == 0);
  backend->fini(criu::kStageRestore, 0);
  ::close(kfd_fd);
}

TEST_CASE("Without POST_FORKING (older CRIU) the queued contents are restored before RESUME", "[unit]") {
  Scenario s(make_gpus(2), 1070, 70000, 9000, config_with(1 << 20, true));
  REQUIRE(s.dumped == 0);
  auto backend = s.restore_backend();
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  CHECK(s.logs.contains("handed to the parallel restore worker"));
  s.node.kfd->set_calling_pid(kCriuPid);
  CHECK(backend->resume_devices_late(1070) == 0);
  CHECK(s.logs.contains("worker stopped after 1 job(s)"));
  check_contents_restored(s.node, s.app, 1070);
  backend->fini(criu::kStageRestore, 0);
  ::close(kfd_fd);
}

TEST_CASE("More than one GPU process in the tree: contents restore in-process", "[unit]") {
  Scenario s(make_gpus(1), 1000, 8192, 4096, config_with(1 << 20, true));
  REQUIRE(s.dumped == 0);
  // A second GPU process's image next to it.
  fs::copy_file(s.images.dir() / kfd_image_name(kKfdImageId), s.images.dir() / kfd_image_name(99));
  const RestoreOutcome out = s.restore(0);
  REQUIRE(out.kfd_fd >= 0);
  CHECK(s.logs.contains("2 GPU processes in this tree"));
  CHECK_FALSE(s.logs.contains("handed to the parallel restore worker"));
  check_contents_restored(s.node, s.app, 1000);
  close_all(out);
}

TEST_CASE("dmabuf fds the process held on its own BOs come back as dmabufs of the restored BOs", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(2));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 1100, 65536, 8192);
  // Two fds on the first GPU's VRAM BO (one dma-buf), one on the second GPU's GTT BO.
  const AppBo& vram = app.bos[0];
  const AppBo& gtt = app.bos[4];
  REQUIRE(vram.flags == kVram);
  REQUIRE(gtt.flags == kGtt);
  const int shared[3] = {node.kfd->app_export_dmabuf(1100, vram.va), node.kfd->app_export_dmabuf(1100, vram.va),
                         node.kfd->app_export_dmabuf(1100, gtt.va)};
  const AmdConfig config = config_with(1 << 20, false);
  node.kfd->seize(1100, kCriuPid);
  {
    auto backend = make_backend(node, images, config);
    REQUIRE(backend->init(criu::kStageDump) == 0);
    // CRIU dumps fds in fd order: here the dmabufs come after /dev/kfd; their images only hold the dma-buf.
    REQUIRE(backend->dump_ext_file(app.kfd_fd, kKfdImageId) == 0);
    for (int i = 0; i < 3; ++i) REQUIRE(backend->dump_ext_file(shared[i], 40 + i) == 0);
    backend->fini(criu::kStageDump, 0);
  }
  node.kfd->kill(1100);

  auto backend = make_backend(node, images, config);
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  node.kfd->set_calling_pid(1100);
  bool retry = false;
  // Restored before the KFD image: CRIU is asked to come back later.
  CHECK(backend->restore_ext_file(40, &retry) == 0);
  CHECK(retry);
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  int restored[3];
  for (int i = 0; i < 3; ++i) {
    restored[i] = backend->restore_ext_file(40 + i, &retry);
    REQUIRE(restored[i] >= 0);
    CHECK_FALSE(retry);
  }
  std::uint64_t inode[3];
  for (int i = 0; i < 3; ++i) REQUIRE(node.kfd->dmabuf_inode(restored[i], &inode[i]) == 0);
  CHECK(inode[0] == inode[1]);
  CHECK(inode[0] != inode[2]);
  // Reading through the restored dmabuf gives the checkpointed contents of the right BO.
  std::vector<std::uint8_t> bytes(gtt.size);
  REQUIRE(node.kfd->bo_read(restored[2], 0, bytes.data(), bytes.size()) == 0);
  CHECK(bytes == app.contents.at(gtt.va));
  // VRAM without CPU access: the kernel refuses the CPU's mmap, SDMA reads it.
  bytes.resize(vram.size);
  CHECK(node.kfd->bo_read(restored[1], 0, bytes.data(), bytes.size()) == -EPERM);
  const int render = node.kfd->open("/dev/dri/renderD128", O_RDWR);
  auto sdma = node.kfd->make_sdma_copier(render, 1 << 20);
  REQUIRE(sdma.ok());
  REQUIRE((*sdma)->read(restored[1], 0, bytes.data(), bytes.size()).ok());
  CHECK(bytes == app.contents.at(vram.va));
  ::close(render);
  node.kfd->set_calling_pid(kCriuPid);
  CHECK(backend->resume_devices_late(1100) == 0);
  for (int fd : restored) ::close(fd);
  ::close(kfd_fd);
}

TEST_CASE("Files that are not KFD or AMD render nodes are declined", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  auto backend = make_backend(node, images, config_with(1 << 20, true));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct stat st {};
  ::fstat(fd, &st);
  CHECK(backend->handle_device_vma(fd, &st) == -ENOTSUP);
  CHECK(backend->dump_ext_file(fd, 3) == -ENOTSUP);
  bool retry = false;
  CHECK(backend->restore_ext_file(3, &retry) == -ENOTSUP);
  ::close(fd);
}

// Userptr BOs and the AQL queues live in process memory, which CRIU dumps after DUMP_EXT_FILE: a GPU running again
// before that would make the image inconsistent with the VRAM saved before it.
TEST_CASE("The GPU stays paused until CRIU has dumped the process's memory, and never stays paused after", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(2));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 430, 8192, 4096);
  node.kfd->seize(430, kCriuPid);
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  struct stat st {};
  node.kfd->fstat(app.kfd_fd, &st);
  REQUIRE(backend->handle_device_vma(app.kfd_fd, &st) == 0);
  REQUIRE(backend->dump_ext_file(app.kfd_fd, kKfdImageId) == 0);
  // CRIU now dumps the memory (and closes the fd it handed the hook; the backend kept its own).
  CHECK(node.kfd->process(430).queues_paused);

  SECTION("a CRIU with DUMP_DEVICES_LATE: unpaused there") {
    CHECK(backend->dump_devices_late(kCriuPid) == 0);
    CHECK_FALSE(node.kfd->process(430).queues_paused);
    CHECK(logs.contains("GPU queues unpaused (DUMP_DEVICES_LATE"));
    backend->fini(criu::kStageDump, 0);   // nothing left to unpause: UNPAUSE twice would be EINVAL
    CHECK_FALSE(logs.contains("UNPAUSE failed"));
  }
  SECTION("an older CRIU: unpaused at the end of the dump, before the tasks run again") {
    backend->fini(criu::kStageDump, 0);
    CHECK_FALSE(node.kfd->process(430).queues_paused);
    CHECK(logs.contains("GPU queues unpaused (end of the dump"));
  }
  SECTION("a dump that fails after DUMP_EXT_FILE: unpaused all the same") {
    backend->fini(criu::kStageDump, -1);
    CHECK_FALSE(node.kfd->process(430).queues_paused);
    CHECK(logs.contains("GPU queues unpaused (the dump failed)"));
  }
}

TEST_CASE("DUMP_DEVICES_LATE with nothing paused is not the AMD backend's", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  CHECK(backend->dump_devices_late(kCriuPid) == -ENOTSUP);
}

TEST_CASE("A render-node image whose KFD image this process never restores stops retrying, with the reason",
          "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}});
  Images images(tmp.path() / "images");
  const App app = start_app(source, 440, 8192, 4096);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 140}});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(440);
  // CRIU retries for as long as the hook asks; the KFD image is in another process and never comes.
  bool retry = true;
  int result = 0;
  int tries = 0;
  for (; tries < 5000 && retry; ++tries) result = backend->restore_ext_file(render_image_id(0), &retry);
  CHECK_FALSE(retry);
  CHECK(result == -ENOTSUP);
  CHECK(tries > 1);
  CHECK(tries <= 1001);
  CHECK(logs.contains("still waiting after 1000 tries for the KFD image it depends on"));
}

TEST_CASE("A restore onto more GPUs than the checkpoint had stops before KFD RESTORE, naming both counts", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}});
  Images images(tmp.path() / "images");
  const App app = start_app(source, 450, 8192, 4096);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 140}, SimGpu{0x8888, 141}});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(450);
  bool retry = false;
  CHECK(backend->restore_ext_file(kKfdImageId, &retry) == -ENODEV);
  CHECK(logs.contains("this process sees 2 AMD GPU(s) (renderD140, renderD141) and the checkpoint had 1"));
  CHECK_FALSE(target.kfd->has_process(450));   // /dev/kfd was never opened: nothing of KFD was touched
}

TEST_CASE("A process given one GPU of two by its device cgroup is restored onto that GPU", "[unit]") {
  TempDir tmp;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}});
  Images images(tmp.path() / "images");
  const App app = start_app(source, 460, 8192, 4096);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);
  source.kfd->kill(460);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 140}, SimGpu{0x8888, 141}});
  target.kfd->set_visible_gpus(460, {0x8888});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(460);
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  const int render = backend->restore_ext_file(render_image_id(0), &retry);
  REQUIRE(render >= 0);
  struct stat st {};
  target.kfd->fstat(render, &st);
  CHECK(minor(st.st_rdev) == 141);
  CHECK(target.kfd->process(460).restored);
  for (int fd : {render, kfd_fd}) ::close(fd);
}

TEST_CASE("GPUCKPT_MODEL_CHECK=0 does not let an AMD restore land on another device_id", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}});
  Images images(tmp.path() / "images");
  const App app = start_app(source, 470, 8192, 4096);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 140}});
  fs::remove_all(target.host_root);
  sim::write_kfd_host_tree(target.host_root, target.gpus, sim::HostTreeOptions{.device_id = 0x74a1});   // MI300X
  ::setenv("GPUCKPT_MODEL_CHECK", "0", 1);
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(470);
  bool retry = false;
  const int result = backend->restore_ext_file(kKfdImageId, &retry);
  ::unsetenv("GPUCKPT_MODEL_CHECK");
  CHECK(result == -ENODEV);
  CHECK(logs.contains("GPUCKPT_MODEL_CHECK=0 is ignored for AMD GPUs"));
  CHECK(logs.contains("no GPU assignment for the checkpoint's AMD GPUs"));
}

TEST_CASE("A RESUME that fails stops the restored task instead of leaving it running without its GPU", "[unit]") {
  Scenario s(make_gpus(1), 480, 8192, 4096, config_with(1 << 20, false));
  REQUIRE(s.dumped == 0);
  kills_requested().clear();
  auto backend = make_backend(s.node, s.images, s.config);
  s.node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  s.node.kfd->set_calling_pid(480);
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  s.node.kfd->set_calling_pid(kCriuPid);
  s.node.kfd->fail_next(KFD_CRIU_OP_RESUME, ENOMEM);
  CHECK(backend->resume_devices_late(480) == -ENOMEM);
  REQUIRE(kills_requested().size() == 1);
  CHECK(kills_requested()[0] == std::pair{480, SIGKILL});
  CHECK(s.logs.contains("KFD RESUME of restored pid 480 failed"));
  CHECK(s.logs.contains("stopped (SIGKILL)"));
  backend->fini(criu::kStageRestore, 0);
  ::close(kfd_fd);
}

}  // namespace gpuckpt::amd::test
