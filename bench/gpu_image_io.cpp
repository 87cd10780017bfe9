// The GPU memory image data path without a GPU: this process stands in for a checkpointed CUDA process. It maps
// MIB of memory shaped like staged GPU memory (random, or with a share of zero chunks), writes it as a GPU
// memory image with the plugin's own code (criu-plugin/cuda/memory_copy.h), drops the pages, optionally drops
// the page cache (root), fills the memory back from the image and checks it bit for bit. Prints the times.
// Not a test: bench/gpu_image_io.sh runs it; compare a node's figures with the disk floors (bench/io_floor.c).
//   gpuckpt_gpu_image_io_bench DIR MIB [ZERO_PERCENT] [THREADS] [COMPRESSION]
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "criu-plugin/cuda/memory_copy.h"

using namespace gpuckpt;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::uint64_t checksum(const std::uint64_t* words, std::size_t count) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < count; ++i) sum = (sum ^ words[i]) * 0x100000001b3ull;
  return sum;
}

void drop_page_cache() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    std::printf("page cache: not dropped (%s)\n", std::strerror(errno));
    return;
  }
  if (::write(fd, "3", 1) != 1) std::printf("page cache: not dropped (%s)\n", std::strerror(errno));
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR MIB [ZERO_PERCENT] [THREADS] [off|auto|zstd:N]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10) << 20;
  const unsigned zero_percent = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 0;
  gpu_image::Settings settings;
  settings.threads = argc > 4 ? static_cast<unsigned>(std::atoi(argv[4])) : gpu_image::default_threads(std::thread::hardware_concurrency());
  if (argc > 5) {
    auto c = gpu_image::parse_compression(argv[5], "COMPRESSION");
    if (!c) { std::fprintf(stderr, "%s\n", c.error().message.c_str()); return 2; }
    settings.compression = *c;
  }
  auto* memory = static_cast<std::uint64_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (memory == MAP_FAILED) { std::perror("mmap"); return 1; }
  ::madvise(memory, bytes, MADV_HUGEPAGE);   // as the driver's staging memory (AnonHugePages)
  // Memory in 2 MiB blocks: the first ZERO_PERCENT of every 100 blocks zero, the rest random.
  std::mt19937_64 random(42);
  const std::size_t words_per_block = (2u << 20) / sizeof(std::uint64_t), words = bytes / sizeof(std::uint64_t);
  for (std::size_t w = 0; w < words; ++w) {
    const bool zero = (w / words_per_block) % 100 < zero_percent;
    memory[w] = zero ? 0 : random();
  }
  const std::uint64_t expected = checksum(memory, words);

  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) { std::perror(dir.c_str()); return 1; }
  cuda::ProcessMemory self{::getpid(), ::getpid(), {{reinterpret_cast<std::uint64_t>(memory), bytes}}, nullptr};
  auto t = Clock::now();
  auto written = cuda::write_memory_images({self}, dir_fd, settings);
  const double write_s = since(t);
  if (!written[0]) { std::fprintf(stderr, "write: %s\n", written[0].error().message.c_str()); return 1; }
  ::madvise(memory, bytes, MADV_DONTNEED);   // as the plugin's drop: the pages read back as zero
  drop_page_cache();
  t = Clock::now();
  auto filled = cuda::fill_from_images({self}, dir_fd, settings);
  const double fill_s = since(t);
  if (!filled[0]) { std::fprintf(stderr, "fill: %s\n", filled[0].error().message.c_str()); return 1; }
  const bool same = checksum(memory, words) == expected;
  const std::string name = gpu_image::file_name(::getpid());   // the image and its data files: NAME, NAME.<k>
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(name, 0) == 0) std::filesystem::remove(entry.path());
  const double stored = static_cast<double>(written[0]->stored_bytes) / 1e9;
  std::printf("%zu MiB, %u%% zero, %u threads, compression %s: image %.2f GB; write+fsync %.2f s (%.2f GB/s of "
              "image), fill %.2f s (%.2f GB/s of image); memory %s\n",
              bytes >> 20, zero_percent, settings.threads, gpu_image::to_string(settings.compression).c_str(), stored,
              write_s, stored / write_s, fill_s, stored / fill_s, same ? "bit-identical" : "DIFFERENT");
  return same ? 0 : 1;
}
