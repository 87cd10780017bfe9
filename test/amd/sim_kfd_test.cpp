// The simulated KFD keeps the kernel's CRIU protocol: wrong order and wrong sizes are refused as KFD does.
#include <amdgpu_drm.h>
#include <catch2/catch_test_macros.hpp>

#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

int criu(SimKfd& kfd, int fd, kfd_ioctl_criu_args& args, std::uint32_t op) {
  args.op = op;
  return kfd.ioctl(fd, AMDKFD_IOC_CRIU_OP, &args);
}

}  // namespace

TEST_CASE("Simulated KFD: CHECKPOINT needs PROCESS_INFO first and matching counts", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(2));
  const App app = start_app(node, 50, 8192, 4096);
  SimKfd& kfd = *node.kfd;
  kfd.seize(50, kCriuPid);
  std::vector<kfd_criu_device_bucket> devs(2);
  std::vector<kfd_criu_bo_bucket> bos(6);
  std::string priv(4096, '\0');
  kfd_ioctl_criu_args args{};
  args.devices = reinterpret_cast<std::uintptr_t>(devs.data());
  args.bos = reinterpret_cast<std::uintptr_t>(bos.data());
  args.priv_data = reinterpret_cast<std::uintptr_t>(priv.data());
  CHECK(criu(kfd, app.kfd_fd, args, KFD_CRIU_OP_CHECKPOINT) == -EINVAL);   // not paused
  CHECK(criu(kfd, app.kfd_fd, args, KFD_CRIU_OP_UNPAUSE) == -EINVAL);      // nothing to unpause

  kfd_ioctl_criu_args info{};
  REQUIRE(criu(kfd, app.kfd_fd, info, KFD_CRIU_OP_PROCESS_INFO) == 0);
  CHECK(info.pid == 50);
  CHECK(info.num_devices == 2);
  CHECK(info.num_bos == 6);
  CHECK(info.num_objects == 2 + 3);   // a queue per GPU and three events
  CHECK(kfd.process(50).queues_paused);
  args.num_devices = info.num_devices;
  args.num_bos = info.num_bos;
  args.num_objects = info.num_objects;
  args.priv_data_size = info.priv_data_size - 1;
  CHECK(criu(kfd, app.kfd_fd, args, KFD_CRIU_OP_CHECKPOINT) == -EINVAL);   // wrong private-data size
  args.priv_data_size = info.priv_data_size;
  REQUIRE(criu(kfd, app.kfd_fd, args, KFD_CRIU_OP_CHECKPOINT) == 0);
  int dmabufs = 0;
  for (const auto& b : bos) {
    if (b.dmabuf_fd != 0xffffffffu) {
      ++dmabufs;
      ::close(static_cast<int>(b.dmabuf_fd));
    }
  }
  CHECK(dmabufs == 4);   // VRAM and GTT; the doorbells have none
  REQUIRE(criu(kfd, app.kfd_fd, args, KFD_CRIU_OP_UNPAUSE) == 0);
  CHECK_FALSE(kfd.process(50).queues_paused);
}

TEST_CASE("Simulated KFD: GET_VERSION only on one's own fd, RESUME needs a KFD process", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(1));
  const App app = start_app(node, 60, 8192, 4096);
  kfd_ioctl_get_version_args version{};
  node.kfd->set_calling_pid(kCriuPid);
  CHECK(node.kfd->ioctl(app.kfd_fd, AMDKFD_IOC_GET_VERSION, &version) == -EBADF);
  node.kfd->set_calling_pid(60);
  CHECK(node.kfd->ioctl(app.kfd_fd, AMDKFD_IOC_GET_VERSION, &version) == 0);
  CHECK(version.minor_version == 11);
  kfd_ioctl_criu_args args{};
  args.pid = 12345;
  CHECK(criu(*node.kfd, app.kfd_fd, args, KFD_CRIU_OP_RESUME) == -ESRCH);
}

TEST_CASE("Simulated KFD: RESTORE checks devices, render nodes and private data", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(2));
  const App app = start_app(node, 70, 8192, 4096);
  SimKfd& kfd = *node.kfd;
  const sim::SimCheckpoint ckpt = kfd.checkpoint_for_test(app.kfd_fd);
  REQUIRE(ckpt.result == 0);
  const kfd_ioctl_criu_args info = ckpt.args;
  const std::vector<kfd_criu_bo_bucket> bos = ckpt.bos;
  std::string priv = ckpt.priv;
  for (const auto& b : bos) {
    if (b.dmabuf_fd != 0xffffffffu) ::close(static_cast<int>(b.dmabuf_fd));
  }
  kfd.kill(70);

  kfd.set_calling_pid(70);
  const int fresh = kfd.open("/dev/kfd", O_RDWR);
  const int r0 = kfd.open("/dev/dri/renderD128", O_RDWR);
  const int r1 = kfd.open("/dev/dri/renderD129", O_RDWR);
  auto attempt = [&](std::vector<kfd_criu_device_bucket> d, std::uint64_t priv_size) {
    std::vector<kfd_criu_bo_bucket> b = bos;
    kfd_ioctl_criu_args a = info;
    a.devices = reinterpret_cast<std::uintptr_t>(d.data());
    a.num_devices = static_cast<std::uint32_t>(d.size());
    a.bos = reinterpret_cast<std::uintptr_t>(b.data());
    a.priv_data = reinterpret_cast<std::uintptr_t>(priv.data());
    a.priv_data_size = priv_size;
    return criu(kfd, fresh, a, KFD_CRIU_OP_RESTORE);
  };
  const auto id0 = node.gpus[0].gpu_id, id1 = node.gpus[1].gpu_id;
  CHECK(attempt({{id0, id0, static_cast<std::uint32_t>(r0), 0}}, priv.size()) == -EINVAL);   // one GPU of two
  CHECK(attempt({{id0, id0, static_cast<std::uint32_t>(r1), 0}, {id1, id1, static_cast<std::uint32_t>(r0), 0}},
                priv.size()) == -EINVAL);   // render nodes swapped
  CHECK(attempt({{id0, 0xdead, static_cast<std::uint32_t>(r0), 0}, {id1, id1, static_cast<std::uint32_t>(r1), 0}},
                priv.size()) == -EINVAL);   // no such GPU
  CHECK(attempt({{id0, id0, static_cast<std::uint32_t>(r0), 0}, {id1, id1, static_cast<std::uint32_t>(r1), 0}},
                priv.size() - 8) == -EINVAL);   // private data not consumed exactly
  REQUIRE(attempt({{id0, id0, static_cast<std::uint32_t>(r0), 0}, {id1, id1, static_cast<std::uint32_t>(r1), 0}},
                  priv.size()) == 0);
  CHECK_FALSE(kfd.process(70).running);   // queues stay evicted until RESUME
  CHECK(attempt({{id0, id0, static_cast<std::uint32_t>(r0), 0}, {id1, id1, static_cast<std::uint32_t>(r1), 0}},
                priv.size()) == -EINVAL);   // only once, into a fresh process
  kfd_ioctl_criu_args resume{};
  resume.pid = 70;
  kfd.set_calling_pid(kCriuPid);
  CHECK(criu(kfd, fresh, resume, KFD_CRIU_OP_RESUME) == -EBADF);   // CRIU is not the restored process's tracer
  const int own = kfd.open("/dev/kfd", O_RDWR);                     // CRIU resumes through a KFD fd of its own
  REQUIRE(criu(kfd, own, resume, KFD_CRIU_OP_RESUME) == 0);
  CHECK(kfd.process(70).running);
  for (int fd : {fresh, r0, r1, own}) ::close(fd);
}

}  // namespace gpuckpt::amd::test

namespace gpuckpt::amd::test {

TEST_CASE("Simulated DRM: GEM handles per open file, lowest free first; GEM_OP answers ENOENT for none", "[unit]") {
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(1));
  SimKfd& kfd = *node.kfd;
  const int a = kfd.app_open_render(60, 128);
  const int b = kfd.app_open_render(60, 128);
  CHECK(kfd.app_gem_create(60, a, 4096, AMDGPU_GEM_DOMAIN_GTT) == 1);
  CHECK(kfd.app_gem_create(60, a, 8192, AMDGPU_GEM_DOMAIN_VRAM) == 2);
  CHECK(kfd.app_gem_create(60, a, 4096, AMDGPU_GEM_DOMAIN_GTT) == 3);
  CHECK(kfd.app_gem_create(60, b, 4096, AMDGPU_GEM_DOMAIN_GTT) == 1);   // another open file: its own table
  kfd.app_gem_close(60, a, 2);
  CHECK(kfd.app_gem_create(60, a, 4096, AMDGPU_GEM_DOMAIN_GTT) == 2);   // the hole is taken first
  CHECK(kfd.app_gem_create(60, a, 4096, AMDGPU_GEM_DOMAIN_GTT) == 4);

  drm_amdgpu_gem_create_in info{};
  drm_amdgpu_gem_op op{};
  op.op = AMDGPU_GEM_OP_GET_GEM_CREATE_INFO;
  op.value = reinterpret_cast<std::uintptr_t>(&info);
  op.handle = 3;
  kfd.set_calling_pid(kCriuPid);   // any holder of the file may ask (CRIU, on the fd it received)
  REQUIRE(kfd.ioctl(a, DRM_IOCTL_AMDGPU_GEM_OP, &op) == 0);
  CHECK(info.bo_size == 4096);
  CHECK(info.domains == AMDGPU_GEM_DOMAIN_GTT);
  op.handle = 5;
  CHECK(kfd.ioctl(a, DRM_IOCTL_AMDGPU_GEM_OP, &op) == -ENOENT);
  drm_gem_close close_args{};
  close_args.handle = 5;
  CHECK(kfd.ioctl(a, DRM_IOCTL_GEM_CLOSE, &close_args) == -EINVAL);

  // fdinfo: the file's VM memory, per file, with its client id.
  std::string text;
  REQUIRE(kfd.drm_fdinfo(b, &text) == 0);
  CHECK(text.find("drm-memory-gtt: \t4 KiB\n") != std::string::npos);
  CHECK(text.find("drm-memory-vram:\t4 KiB\n") != std::string::npos);   // the root page directory
  AmdDevice::ProcessGpuFiles files;
  REQUIRE(kfd.process_gpu_files("60", &files) == 0);
  CHECK_FALSE(files.has_kfd);
  REQUIRE(files.render.size() == 2);
  CHECK(files.render[1].fdinfo == text);
  ::close(a);
  ::close(b);
}

}  // namespace gpuckpt::amd::test
