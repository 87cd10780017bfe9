// The backend against a KFD that behaves as the kernel's does where the first simulator did not —
// the CRIU_OP permission checks, a failure at every CRIU_OP stage, a process without BOs, and userptr and
// MMIO-remap BOs.
#include <catch2/catch_test_macros.hpp>

#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

int dump_kfd_fd(Node& node, const Images& images, const App& app, bool seize = true) {
  if (seize) node.kfd->seize(app.pid, kCriuPid);
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageDump) == 0);
  const int result = backend->dump_ext_file(app.kfd_fd, kKfdImageId);
  backend->fini(criu::kStageDump, result);
  return result;
}

int restore_kfd_image(Node& node, const Images& images, int pid) {
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  node.kfd->set_calling_pid(pid);
  bool retry = false;
  const int fd = backend->restore_ext_file(kKfdImageId, &retry);
  node.kfd->set_calling_pid(kCriuPid);
  return fd;
}

}  // namespace

TEST_CASE("KFD's CRIU_OP permission checks are reported with what they require", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 1600, 8192, 4096);
  SECTION("CRIU without CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN") {
    node.kfd->set_capable(kCriuPid, false);
    CHECK(dump_kfd_fd(node, images, app) == -EACCES);
    CHECK(logs.contains("KFD CRIU PROCESS_INFO failed: Permission denied (KFD allows CRIU operations only to a "
                        "caller with CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN"));
  }
  SECTION("a caller that is not the process's ptrace parent") {
    CHECK(dump_kfd_fd(node, images, app, /*seize=*/false) == -EBADF);
    CHECK(logs.contains("only from that process's ptrace parent"));
  }
  CHECK_FALSE(node.kfd->process(1600).queues_paused);
  CHECK_FALSE(fs::exists(images.dir() / "gpuckpt-amd-kfd-7.img"));
}

TEST_CASE("A failure at each CRIU_OP stage fails that stage cleanly and never leaves the GPU paused", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(2));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 1700, 65536, 4096);
  SECTION("PROCESS_INFO: EBUSY evicting the queues") {
    node.kfd->fail_next(KFD_CRIU_OP_PROCESS_INFO, EBUSY);
    CHECK(dump_kfd_fd(node, images, app) == -EBUSY);
    CHECK(logs.contains("KFD CRIU PROCESS_INFO failed: Device or resource busy"));
    CHECK_FALSE(node.kfd->process(1700).queues_paused);
  }
  SECTION("CHECKPOINT: ENOMEM after the queues were paused: unpaused, no image") {
    node.kfd->fail_next(KFD_CRIU_OP_CHECKPOINT, ENOMEM);
    CHECK(dump_kfd_fd(node, images, app) == -ENOMEM);
    CHECK(logs.contains("KFD CRIU CHECKPOINT failed: Cannot allocate memory"));
    CHECK_FALSE(node.kfd->process(1700).queues_paused);
    CHECK_FALSE(fs::exists(images.dir() / "gpuckpt-amd-kfd-7.img"));
  }
  SECTION("UNPAUSE: EIO at DUMP_DEVICES_LATE fails that hook, naming the process") {
    node.kfd->seize(1700, kCriuPid);
    auto backend = make_backend(node, images, config_with(1 << 20, false));
    REQUIRE(backend->init(criu::kStageDump) == 0);
    REQUIRE(backend->dump_ext_file(app.kfd_fd, kKfdImageId) == 0);
    node.kfd->fail_next(KFD_CRIU_OP_UNPAUSE, EIO);
    CHECK(backend->dump_devices_late(kCriuPid) == -EIO);
    CHECK(logs.contains("amd: process 1700: UNPAUSE failed (DUMP_DEVICES_LATE: CRIU has dumped the memory): KFD CRIU "
                        "UNPAUSE failed: Input/output error; its GPU queues stay evicted until it is restarted"));
  }
  SECTION("RESTORE: VRAM exhausted on the target") {
    REQUIRE(dump_kfd_fd(node, images, app) == 0);
    node.kfd->kill(1700);
    node.kfd->fail_next(KFD_CRIU_OP_RESTORE, ENOMEM);
    CHECK(restore_kfd_image(node, images, 1700) == -ENOMEM);
    CHECK(logs.contains("amd: restore of gpuckpt-amd-kfd-7.img: KFD CRIU RESTORE failed: Cannot allocate memory"));
    CHECK_FALSE(node.kfd->process(1700).restored);
  }
}

TEST_CASE("A KFD process without BOs: dumped; its RESTORE refused by older kernels with the reason", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  App app;
  app.pid = 1800;
  app.kfd_fd = node.kfd->app_open_kfd(1800);   // opened /dev/kfd, allocated nothing yet
  REQUIRE(dump_kfd_fd(node, images, app) == 0);
  node.kfd->kill(1800);
  SECTION("a kernel that rejects num_bos == 0") {
    CHECK(restore_kfd_image(node, images, 1800) == -EINVAL);
    CHECK(logs.contains("the checkpointed process had no GPU buffer objects, and this node's KFD refuses RESTORE "
                        "without any"));
  }
  SECTION("a kernel that accepts it") {
    node.kfd->set_restore_accepts_no_bos(true);
    const int fd = restore_kfd_image(node, images, 1800);
    REQUIRE(fd >= 0);
    CHECK(node.kfd->process(1800).restored);
    ::close(fd);
  }
}

TEST_CASE("Userptr and MMIO-remap BOs: no contents copied, userptr keeps its CPU address, MMIO is remapped",
          "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node source(tmp.path() / "source", {SimGpu{0x1111, 128}});
  Images images(tmp.path() / "images");
  App app = start_app(source, 1900, 8192, 4096);
  constexpr std::uint64_t kUserptrVa = 0x7d0000000000ull, kUserAddr = 0x55550000ull, kMmioVa = 0x7d0000100000ull;
  source.kfd->app_alloc_bo(1900, 0x1111, kUserptrVa, 1 << 20,
                           KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE, kUserAddr);
  source.kfd->app_alloc_bo(1900, 0x1111, kMmioVa, 4096,
                           KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE);
  REQUIRE(dump_app(source, images, app, config_with(1 << 20, false)) == 0);
  // Only VRAM and GTT contents are in the content file: the userptr BO's pages are process memory (CRIU's).
  CHECK(source.kfd->bo_bytes_moved() == 8192 + 4096);

  Node target(tmp.path() / "target", {SimGpu{0x7777, 140}});
  auto backend = make_backend(target, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  target.kfd->set_calling_pid(1900);
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  const auto restored = target.kfd->process(1900);
  const sim::SimBo* userptr = nullptr;
  const sim::SimBo* mmio = nullptr;
  for (const auto& bo : restored.bos) {
    if (bo.va == kUserptrVa) userptr = &bo;
    if (bo.va == kMmioVa) mmio = &bo;
  }
  REQUIRE(userptr);
  REQUIRE(mmio);
  CHECK(userptr->user_addr == kUserAddr);
  // The MMIO page is mapped through /dev/kfd at an offset naming the new GPU; CRIU learns it at UPDATE_VMA_MAP.
  const std::uint64_t old_offset = static_cast<std::uint64_t>(0x1111) << 46;
  std::uint64_t new_offset = 0;
  int plugin_fd = -2;
  CHECK(backend->update_vma_map("/dev/kfd", kMmioVa, old_offset, &new_offset, &plugin_fd) == 1);
  CHECK(new_offset == (static_cast<std::uint64_t>(0x7777) << 46));
  CHECK(new_offset == mmio->mmap_offset);
  ::close(kfd_fd);
}

TEST_CASE("SVM ranges travel in KFD's private data and take effect at RESUME", "[unit]") {
  TempDir tmp;
  LogCapture logs;
  Node node(tmp.path() / "host", make_gpus(1));
  Images images(tmp.path() / "images");
  const App app = start_app(node, 2200, 8192, 4096);
  // Preferred location GPU 0x1000 (type 1), prefetch (type 2): attribute type << 32 | value.
  const sim::SimSvmRange range{0x7c0000000000ull, 64ull << 20, {1ull << 32 | 0x1000, 2ull << 32 | 0x1000}};
  node.kfd->app_set_svm_range(2200, range);
  REQUIRE(dump_app(node, images, app, config_with(1 << 20, false)) == 0);
  node.kfd->kill(2200);
  auto backend = make_backend(node, images, config_with(1 << 20, false));
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  node.kfd->set_calling_pid(2200);
  bool retry = false;
  const int kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  REQUIRE(kfd_fd >= 0);
  CHECK(node.kfd->process(2200).svm_ranges.empty());   // kept aside until RESUME, as KFD does
  node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->resume_devices_late(2200) == 0);
  const auto restored = node.kfd->process(2200).svm_ranges;
  REQUIRE(restored.size() == 1);
  CHECK(restored[0] == range);
  ::close(kfd_fd);
}

}  // namespace gpuckpt::amd::test
