// Benchmark (not a test) of the AMD backend's BO content pipeline (criu-plugin/amd/bo_io.h) on this machine:
// checkpoint (BO -> content files) and restore (content files -> BO) with one thread per GPU and with one
// thread for all GPUs, in GB/s, next to the disk's own sequential write and read speed measured in the same
// run with the same buffer size. BO memory is the simulated device's (memfd, in RAM): there is no AMD GPU here,
// so this measures the file side of the pipeline and its threading, not PCIe or SDMA.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <linux/kfd_ioctl.h>

#include "criu-plugin/amd/bo_io.h"
#include "criu-plugin/amd/config.h"
#include "test/amd/sim/sim_kfd.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using namespace gpuckpt::amd;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Evicts a file's pages so the next read comes from the disk, not the page cache.
void drop_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct DiskSpeed {
  double write_gbps;
  double read_gbps;
};

DiskSpeed measure_disk(const fs::path& dir, std::uint64_t total, std::size_t buffer) {
  const fs::path file = dir / "disk-baseline.bin";
  std::vector<char> buf(buffer, 'd');
  auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  for (std::uint64_t done = 0; done < total;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer, total - done));
    if (::write(fd, buf.data(), n) != static_cast<ssize_t>(n)) std::abort();
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
  const double w = static_cast<double>(total) / seconds_since(t0) / 1e9;
  drop_cache(file);
  t0 = std::chrono::steady_clock::now();
  fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  while (::read(fd, buf.data(), buffer) > 0) {
  }
  ::close(fd);
  const double r = static_cast<double>(total) / seconds_since(t0) / 1e9;
  fs::remove(file);
  return {w, r};
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/var/tmp/gpuckpt-amd-bench";
  std::size_t gpus = 4, bos_per_gpu = 2, rounds = 3;
  std::uint64_t bo_size = 128ull << 20, buffer = 64ull << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--dir") dir = value;
    else if (key == "--gpus") gpus = std::stoul(value);
    else if (key == "--bos-per-gpu") bos_per_gpu = std::stoul(value);
    else if (key == "--rounds") rounds = std::max<std::size_t>(1, std::stoul(value));
    else if (key == "--bo-size" || key == "--buffer") {
      auto size = parse_size(value, key);
      if (!size) {
        std::fprintf(stderr, "%s\n", size.error().message.c_str());
        return 2;
      }
      (key == "--bo-size" ? bo_size : buffer) = *size;
    } else {
      std::fprintf(stderr, "usage: %s [--dir D] [--gpus N] [--bos-per-gpu K] [--bo-size 128M] [--buffer 64M] [--rounds 3]\n",
                   argv[0]);
      return 2;
    }
  }
  fs::create_directories(dir);
  const std::uint64_t total = static_cast<std::uint64_t>(gpus) * bos_per_gpu * bo_size;

  std::vector<sim::SimGpu> sim_gpus;
  for (std::size_t g = 0; g < gpus; ++g) sim_gpus.push_back({0x1000u + static_cast<std::uint32_t>(g), 128 + static_cast<int>(g)});
  sim::SimKfd kfd(sim_gpus);
  const int pid = 4242;
  const int kfd_fd = kfd.app_open_kfd(pid);
  std::uint64_t va = 0x10000000000ull;
  for (const auto& g : sim_gpus) {
    for (std::size_t b = 0; b < bos_per_gpu; ++b, va += bo_size) {
      kfd.app_alloc_bo(pid, g.gpu_id, va, bo_size, KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC);
      kfd.app_fill_bo(pid, va, static_cast<std::uint32_t>(va >> 20));
    }
  }
  // CHECKPOINT hands out one dmabuf fd per BO, as the backend gets them.
  kfd.set_calling_pid(1);
  const sim::SimCheckpoint ckpt = kfd.checkpoint_for_test(kfd_fd);
  if (ckpt.result != 0) return 1;
  const auto& bos = ckpt.bos;
  std::vector<GpuTransfer> transfers;
  for (const auto& g : sim_gpus) {
    GpuTransfer t;
    t.gpu_id = g.gpu_id;
    t.file_name = bo_content_image_name(1, g.gpu_id);
    for (const auto& b : bos) {
      if (b.gpu_id == g.gpu_id) t.bos.push_back({static_cast<int>(b.dmabuf_fd), b.size});
    }
    transfers.push_back(t);
  }

  const int dirfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ImageDir images(dirfd);
  std::printf("AMD BO I/O pipeline: %zu GPUs x %zu BOs x %llu MiB = %.2f GB, buffer %llu MiB, dir %s\n", gpus,
              bos_per_gpu, static_cast<unsigned long long>(bo_size >> 20), static_cast<double>(total) / 1e9,
              static_cast<unsigned long long>(buffer >> 20), dir.c_str());
  // Rounds alternate the disk baseline and both modes, so drift of a virtual disk hits all of them; medians
  // are reported.
  std::vector<double> disk_w, disk_r, one_w, one_r, per_w, per_r;
  for (std::size_t round = 0; round < rounds; ++round) {
    const DiskSpeed disk = measure_disk(dir, total, static_cast<std::size_t>(buffer));
    disk_w.push_back(disk.write_gbps);
    disk_r.push_back(disk.read_gbps);
    for (const bool per_gpu : {round % 2 == 1, round % 2 == 0}) {
      TransferOptions options;
      options.max_buffer_size = buffer;
      options.use_sdma = false;
      options.thread_per_gpu = per_gpu;
      auto t0 = std::chrono::steady_clock::now();
      auto dumped = dump_contents(kfd, images, transfers, options);
      const double dump_s = seconds_since(t0);
      if (!dumped) {
        std::fprintf(stderr, "dump failed: %s\n", dumped.error().message.c_str());
        return 1;
      }
      for (const auto& t : transfers) drop_cache(fs::path(dir) / t.file_name);
      t0 = std::chrono::steady_clock::now();
      auto restored = restore_contents(kfd, images, transfers, options);
      const double restore_s = seconds_since(t0);
      if (!restored) {
        std::fprintf(stderr, "restore failed: %s\n", restored.error().message.c_str());
        return 1;
      }
      (per_gpu ? per_w : one_w).push_back(static_cast<double>(total) / dump_s / 1e9);
      (per_gpu ? per_r : one_r).push_back(static_cast<double>(total) / restore_s / 1e9);
      for (const auto& t : transfers) fs::remove(fs::path(dir) / t.file_name);
    }
  }
  const double dw = median(disk_w), dr = median(disk_r);
  std::printf("medians of %zu rounds\n", rounds);
  std::printf("%-28s %8.2f GB/s write   %8.2f GB/s read\n", "disk (sequential, 1 file)", dw, dr);
  for (const bool per_gpu : {false, true}) {
    const double w = median(per_gpu ? per_w : one_w), r = median(per_gpu ? per_r : one_r);
    std::printf("%-28s %8.2f GB/s dump    %8.2f GB/s restore   (%.2fx / %.2fx of disk write / read)\n",
                per_gpu ? "one thread per GPU" : "one thread for all GPUs", w, r, w / dw, r / dr);
  }
  ::close(dirfd);
  return 0;
}
