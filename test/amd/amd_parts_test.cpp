// The AMD backend's parts on their own: size settings, image framing, the parallel-restore channel.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <cstdlib>

#include "criu-plugin/amd/config.h"
#include "criu-plugin/amd/image_dir.h"
#include "criu-plugin/amd/parallel_restore.h"
#include "criu-plugin/amd/render_file_audit.h"
#include "test/amd/harness.h"

namespace gpuckpt::amd::test {

TEST_CASE("Buffer sizes take K/M/G suffixes and bad values are named", "[unit]") {
  CHECK(*parse_size("4096", "X") == 4096);
  CHECK(*parse_size("64K", "X") == 64ull << 10);
  CHECK(*parse_size("64k", "X") == 64ull << 10);
  CHECK(*parse_size("512M", "X") == 512ull << 20);
  CHECK(*parse_size("2G", "X") == 2ull << 30);
  for (const char* bad : {"", "M", "12X", "1.5G", "0", "99999999999999999999", "20000000000G", "4KB"}) {
    INFO(bad);
    auto r = parse_size(bad, "GPUCKPT_AMD_MAX_BUFFER_SIZE");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("GPUCKPT_AMD_MAX_BUFFER_SIZE=") == 0);
  }
}

TEST_CASE("The environment sets the tunables; each is logged once as param: NAME:VALUE", "[unit]") {
  LogCapture logs;
  ::setenv("GPUCKPT_AMD_MAX_BUFFER_SIZE", "8M", 1);
  ::setenv("GPUCKPT_AMD_PARALLEL_RESTORE", "0", 1);
  auto config = AmdConfig::from_env();
  REQUIRE(config.ok());
  CHECK(config->max_buffer_size == 8ull << 20);
  CHECK_FALSE(config->parallel_restore);
  ::setenv("GPUCKPT_AMD_MAX_BUFFER_SIZE", "lots", 1);
  auto bad = AmdConfig::from_env();
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("GPUCKPT_AMD_MAX_BUFFER_SIZE=lots") != std::string::npos);
  ::unsetenv("GPUCKPT_AMD_MAX_BUFFER_SIZE");
  ::unsetenv("GPUCKPT_AMD_PARALLEL_RESTORE");
  config->log_once();
  config->log_once();
  // Logged at most once per process (an earlier test may have been first).
  const std::string all = logs.all();
  const auto first = all.find("param: GPUCKPT_AMD_MAX_BUFFER_SIZE:");
  if (first != std::string::npos) {
    CHECK(all.find("param: GPUCKPT_AMD_MAX_BUFFER_SIZE:", first + 1) == std::string::npos);
  }
}

TEST_CASE("Framed images: the size header lets a reader detect truncation without seeking", "[unit]") {
  TempDir tmp;
  Images dir(tmp.path() / "img");
  ImageDir images(dir.fd());
  REQUIRE(images.write_framed("a.img", std::string(1000, 'x')).ok());
  auto back = images.read_framed("a.img");
  REQUIRE(back.ok());
  CHECK(*back == std::string(1000, 'x'));
  fs::resize_file(dir.dir() / "a.img", 500);
  auto cut = images.read_framed("a.img");
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().message.find("image a.img is truncated") != std::string::npos);
  auto missing = images.read_framed("none.img");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().errno_value == ENOENT);
}

TEST_CASE("The parallel-restore channel carries jobs with hundreds of BOs through SCM_RIGHTS", "[unit]") {
  // 450 BOs on 2 GPUs: more than one SCM_RIGHTS message per job.
  TempDir tmp;
  Node node(tmp.path() / "host", make_gpus(2));
  Images dir(tmp.path() / "img");
  ImageDir images(dir.fd());
  const int pid = 77;
  const int kfd = node.kfd->app_open_kfd(pid);
  RestoreJob job;
  job.image_id = 5;
  std::vector<std::uint64_t> vas;
  for (std::size_t g = 0; g < 2; ++g) {
    GpuTransfer t;
    t.gpu_id = node.gpus[g].gpu_id;
    t.file_name = bo_content_image_name(5, t.gpu_id);
    job.gpus.push_back(t);
    job.render_minors.push_back(node.gpus[g].render_minor);
  }
  // Content files as a checkpoint would have written them: BO i holds bytes equal to i % 251.
  std::vector<std::string> payload(2);
  for (int i = 0; i < 450; ++i) {
    const std::size_t g = static_cast<std::size_t>(i % 2);
    const std::uint64_t va = 0x10000000ull + static_cast<std::uint64_t>(i) * 0x10000;
    node.kfd->app_alloc_bo(pid, node.gpus[g].gpu_id, va, 100 + static_cast<std::uint64_t>(i), kVram);
    vas.push_back(va);
    payload[g].append(100 + static_cast<std::size_t>(i), static_cast<char>(i % 251));
  }
  for (std::size_t g = 0; g < 2; ++g) {
    auto file = images.create(job.gpus[g].file_name);
    REQUIRE(file.ok());
    REQUIRE(file->write_size_header(payload[g].size()).ok());
    REQUIRE(file->write_all(payload[g].data(), payload[g].size()).ok());
    REQUIRE(file->close().ok());
  }
  // dmabuf fds, as CHECKPOINT/RESTORE hand them out.
  node.kfd->set_calling_pid(kCriuPid);
  const sim::SimCheckpoint ckpt = node.kfd->checkpoint_for_test(kfd);
  REQUIRE(ckpt.result == 0);
  const auto& bos = ckpt.bos;
  for (const auto& b : bos) {
    const std::size_t g = b.gpu_id == node.gpus[0].gpu_id ? 0 : 1;
    job.gpus[g].bos.push_back(BoTransfer{static_cast<int>(b.dmabuf_fd), b.size});
  }

  auto server = ParallelRestoreServer::create();
  REQUIRE(server.ok());
  TransferOptions options;
  options.max_buffer_size = 64;
  (*server)->start(*node.kfd, images, options);
  REQUIRE((*server)->send_job(job).ok());
  for (auto& g : job.gpus) {
    for (auto& b : g.bos) ::close(b.dmabuf_fd);   // the sender closes its copies: the worker holds its own
  }
  REQUIRE((*server)->stop().ok());
  CHECK((*server)->jobs_done() == 1);
  for (int i = 0; i < 450; ++i) {
    const auto bytes = node.kfd->app_read_bo(pid, vas[static_cast<std::size_t>(i)]);
    REQUIRE(bytes.size() == 100 + static_cast<std::size_t>(i));
    CHECK(bytes == std::vector<std::uint8_t>(bytes.size(), static_cast<std::uint8_t>(i % 251)));
  }
  ::close(kfd);
}

TEST_CASE("DRM usage stats are read from fdinfo as amdgpu prints them, old and new keys", "[unit]") {
  // Linux 6.1 amdgpu_show_fdinfo: legacy keys in KiB, two of them with a space before the tab.
  const DrmFileMemory v61 = parse_drm_fdinfo(
      "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1234\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\n"
      "pasid:\t32770\ndrm-client-id:\t17\ndrm-memory-vram:\t1024 KiB\ndrm-memory-gtt: \t2048 KiB\n"
      "drm-memory-cpu: \t4 KiB\namd-memory-visible-vram:\t512 KiB\namd-evicted-vram:\t0 KiB\n"
      "drm-engine-gfx:\t123 ns\n");
  CHECK(v61.client_id == "17");
  CHECK(v61.has_memory);
  CHECK(v61.bytes == (3ull << 20) + 4096);   // vram + gtt + cpu; amd-* keys are not added again
  // Newer kernels: drm-total-<region> (requested, backed or not) next to the legacy alias of resident memory;
  // the total is read.
  const DrmFileMemory both = parse_drm_fdinfo(
      "drm-client-id:\t5\ndrm-total-vram:\t3 MiB\ndrm-resident-vram:\t2 MiB\ndrm-memory-vram:\t2048 KiB\n");
  CHECK(both.bytes == 3ull << 20);
  const DrmFileMemory total = parse_drm_fdinfo("drm-client-id:\t6\ndrm-total-vram:\t2 MiB\ndrm-total-gtt:\t4096\n");
  CHECK(total.has_memory);
  CHECK(total.bytes == (2ull << 20) + 4096);
  // Before Linux 5.19, or not a DRM file: no memory keys; a value in an unknown unit is not taken.
  CHECK_FALSE(parse_drm_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t24\n").has_memory);
  CHECK_FALSE(parse_drm_fdinfo("drm-memory-vram:\t12 XB\n").has_memory);
}

}  // namespace gpuckpt::amd::test
