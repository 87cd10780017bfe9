// The floor of a copy-based restore fill (#21, 4 restores at once from one checkpoint): P restores, each with T
// threads, copy one shared file (in the page cache, like the node store's chunks) 2 MiB at a time into fresh
// anonymous memory of a process of their own, the way criu-plugin/cuda/memory_copy.cpp fills staging memory
// (pread into a buffer, XXH3-64 of it, process_vm_writev into the target, whose pages fault in). Also the copy into
// memory already faulted in, the fill into memory madvised MADV_HUGEPAGE (transparent huge pages: one fault per
// 2 MiB), the pread + hash alone, and the fill from the file's pages mapped (mmap MAP_POPULATE: no copy into a
// buffer) instead of read, to split the cost. Prints wall seconds per variant.
//   fill_floor FILE GIB [THREADS]     (FILE is made, GIB of random bytes, when absent)
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {
constexpr std::size_t kChunk = 2u << 20;

// A child that maps `bytes` of anonymous memory, reports its address through the pipe and waits to be killed.
pid_t spawn_target(std::size_t bytes, std::uintptr_t& at, bool huge) {
  int p[2];
  if (::pipe(p) != 0) std::exit(1);
  pid_t pid = ::fork();
  if (pid == 0) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (huge) (void)::madvise(m, bytes, MADV_HUGEPAGE);
    auto a = reinterpret_cast<std::uintptr_t>(m);
    if (::write(p[1], &a, sizeof a) != sizeof a) _exit(1);
    ::pause();
    _exit(0);
  }
  if (::read(p[0], &at, sizeof at) != sizeof at) std::exit(1);
  ::close(p[0]);
  ::close(p[1]);
  return pid;
}

enum class Variant { Fill, FillHuge, Refill, ReadHash, MappedFill };

double run(int fd, std::size_t bytes, int restores, unsigned threads, Variant v) {
  std::vector<pid_t> pids(restores);
  std::vector<std::uintptr_t> at(restores);
  for (int r = 0; r < restores; ++r) pids[r] = spawn_target(bytes, at[r], v == Variant::FillHuge);
  const std::size_t chunks = bytes / kChunk;
  auto pass = [&](bool timed) {
    std::vector<std::atomic<std::size_t>> next(restores);
    std::vector<std::thread> pool;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < restores; ++r)
      for (unsigned t = 0; t < threads; ++t)
        pool.emplace_back([&, r] {
          std::vector<char> buf(kChunk);
          volatile std::uint64_t sink = 0;
          std::vector<void*> maps;
          for (std::size_t c = next[r]++; c < chunks && v == Variant::MappedFill; c = next[r]++) {
            // The chunk's page-cache pages mapped (no copy), hashed and copied from there; unmapped at the end.
            void* m = ::mmap(nullptr, kChunk, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(c * kChunk));
            if (m == MAP_FAILED) std::abort();
            maps.push_back(m);
            sink = sink + XXH3_64bits(m, kChunk);
            iovec l{m, kChunk}, rr{reinterpret_cast<void*>(at[r] + c * kChunk), kChunk};
            if (::process_vm_writev(pids[r], &l, 1, &rr, 1, 0) != static_cast<ssize_t>(kChunk)) std::abort();
          }
          for (void* m : maps) ::munmap(m, kChunk);
          for (std::size_t c = next[r]++; c < chunks; c = next[r]++) {
            if (::pread(fd, buf.data(), kChunk, static_cast<off_t>(c * kChunk)) != static_cast<ssize_t>(kChunk)) std::abort();
            sink = sink + XXH3_64bits(buf.data(), kChunk);
            if (v == Variant::ReadHash) continue;
            iovec l{buf.data(), kChunk}, rr{reinterpret_cast<void*>(at[r] + c * kChunk), kChunk};
            if (::process_vm_writev(pids[r], &l, 1, &rr, 1, 0) != static_cast<ssize_t>(kChunk)) std::abort();
          }
        });
    for (auto& th : pool) th.join();
    return timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() : 0.0;
  };
  if (v == Variant::Refill) pass(false);   // fault everything in first
  const double s = pass(true);
  for (pid_t p : pids) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fill_floor FILE GIB [THREADS]\n");
    return 2;
  }
  const std::size_t bytes = static_cast<std::size_t>(std::atof(argv[2]) * (1ull << 30)) / kChunk * kChunk;
  const unsigned threads = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : std::thread::hardware_concurrency();
  int fd = ::open(argv[1], O_RDONLY);
  if (fd < 0) {
    fd = ::open(argv[1], O_RDWR | O_CREAT, 0600);
    std::vector<char> buf(kChunk);
    std::mt19937_64 rng(1);
    for (std::size_t c = 0; c < bytes / kChunk; ++c) {
      for (std::size_t i = 0; i < kChunk; i += 8) {
        const std::uint64_t x = rng();
        std::memcpy(buf.data() + i, &x, 8);
      }
      if (::write(fd, buf.data(), kChunk) != static_cast<ssize_t>(kChunk)) return 1;
    }
  }
  std::vector<char> warm(kChunk);   // the file into the page cache
  for (std::size_t c = 0; c < bytes / kChunk; ++c) (void)::pread(fd, warm.data(), kChunk, static_cast<off_t>(c * kChunk));
  std::printf("restores\tthreads_each\tgib_each\tfill_s\tfill_thp_s\trefill_s\tread_hash_s\tmapped_fill_s\n");
  for (int restores : {1, 4}) {
    const double fill = run(fd, bytes, restores, threads, Variant::Fill);
    const double fill_huge = run(fd, bytes, restores, threads, Variant::FillHuge);
    const double refill = run(fd, bytes, restores, threads, Variant::Refill);
    const double read_hash = run(fd, bytes, restores, threads, Variant::ReadHash);
    const double mapped = run(fd, bytes, restores, threads, Variant::MappedFill);
    std::printf("%d\t%u\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", restores, threads,
                static_cast<double>(bytes) / (1ull << 30), fill, fill_huge, refill, read_hash, mapped);
  }
  return 0;
}
