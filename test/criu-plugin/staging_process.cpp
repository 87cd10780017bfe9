// A stand-in for a checkpointed CUDA process in the staging-memory e2e test: one private anonymous mapping of
// SIZE MiB (what the driver's staging memory is after cuCheckpointProcessCheckpoint), filled with random, zero
// and bf16-like stretches. Writes "ADDRESS CHECKSUM" to OUT when ready, and on every SIGUSR1 writes the
// checksum of the mapping as it is now to OUT.check, so the test can prove the memory came back bit-identical.
// On SIGUSR2 it writes into every page of the mapping, then OUT.written (a restore that mapped files there must
// leave the files as they were: the process's writes go to its private copies).
// With HOLD, it keeps that file open (the test unlinks it: a ghost file, which CRIU refuses to dump beyond
// --ghost-limit, so a dump can be made to fail after the plugin's CHECKPOINT_DEVICES work).
// With --at, the mapping is made at that address (and fails if anything is there): a test that must name it
// before the process exists (GPUCKPT_TEST_STAGING_VMA in a container runtime's environment, which its shims and
// CRIU inherit from the runtime's start) picks it.
//
// With --heap, it also holds HEAP_MIB of random CPU memory of its own (what CRIU, not gpuckpt's staging path, dumps
// into its page images) and writes that memory's checksum to OUT.heap at start and on every SIGUSR1.
//
//   staging_process [--at HEX_ADDRESS] [--heap HEAP_MIB] SIZE_MIB OUT [HOLD]
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>

#include "gpumem/gpu_image.h"

namespace {

volatile std::sig_atomic_t g_check = 0;

void on_usr1(int) { g_check = 1; }
volatile std::sig_atomic_t g_write = 0;
void on_usr2(int) { g_write = 1; }

bool write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  void* at = nullptr;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  const bool fixed = argc > 2 && std::strcmp(argv[1], "--at") == 0;
  if (fixed) {
    at = reinterpret_cast<void*>(std::strtoull(argv[2], nullptr, 16));
    flags |= MAP_FIXED_NOREPLACE;
    argv += 2;
    argc -= 2;
  }
  std::size_t heap_size = 0;
  if (argc > 2 && std::strcmp(argv[1], "--heap") == 0) {
    heap_size = std::strtoull(argv[2], nullptr, 10) << 20;
    argv += 2;
    argc -= 2;
  }
  if ((argc != 3 && argc != 4) || (fixed && at == nullptr)) {
    std::fprintf(stderr, "usage: staging_process [--at HEX_ADDRESS] [--heap HEAP_MIB] SIZE_MIB OUT [HOLD]\n");
    return 2;
  }
  const std::size_t size = std::strtoull(argv[1], nullptr, 10) << 20;
  const std::string out = argv[2];
  for (int fd = 3; fd < 1024; ++fd) ::close(fd);   // a harness fd on a foreign mount would fail CRIU's dump
  if (argc == 4 && ::open(argv[3], O_RDONLY) < 0) return 1;
  auto* mem = static_cast<std::uint16_t*>(::mmap(at, size, PROT_READ | PROT_WRITE, flags, -1, 0));
  if (mem == MAP_FAILED) {
    std::perror("staging_process: mmap");
    return 1;
  }
  // Stretches of 5 MiB (not chunk-aligned): random, zero, bf16 of normally distributed values.
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const std::size_t words = size / 2, stretch = (5u << 20) / 2;
  for (std::size_t i = 0; i < words; ++i) {
    switch ((i / stretch) % 3) {
      case 0: mem[i] = static_cast<std::uint16_t>(rng()); break;
      case 1: break;   // fresh anonymous memory is zero
      case 2: {
        float f = normal(rng);
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        mem[i] = static_cast<std::uint16_t>(bits >> 16);
        break;
      }
    }
  }
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(mem), size);
  std::span<const std::byte> heap;
  if (heap_size > 0) {
    // Between two inaccessible pages: the kernel would merge an adjacent anonymous mapping into the staging
    // mapping's VMA, which then no longer starts at the staging address the test names.
    auto* area = static_cast<std::byte*>(::mmap(nullptr, heap_size + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (area == MAP_FAILED || ::mprotect(area + 4096, heap_size, PROT_READ | PROT_WRITE) != 0) return 1;
    auto* h = reinterpret_cast<std::uint64_t*>(area + 4096);
    std::mt19937_64 heap_rng(11);
    for (std::size_t i = 0; i < heap_size / 8; ++i) h[i] = heap_rng();
    heap = {reinterpret_cast<const std::byte*>(h), heap_size};
    if (!write_file(out + ".heap", hex(gpuckpt::gpu_image::checksum(heap)) + "\n")) return 1;
  }
  std::signal(SIGUSR1, on_usr1);
  std::signal(SIGUSR2, on_usr2);
  if (!write_file(out, hex(reinterpret_cast<std::uintptr_t>(mem)) + " " + hex(gpuckpt::gpu_image::checksum(bytes)) +
                           "\n"))
    return 1;
  for (;;) {
    if (g_check) {
      g_check = 0;
      if (!heap.empty()) write_file(out + ".heap", hex(gpuckpt::gpu_image::checksum(heap)) + "\n");
      write_file(out + ".check", hex(gpuckpt::gpu_image::checksum(bytes)) + "\n");
    }
    if (g_write) {
      g_write = 0;
      for (std::size_t i = 0; i < words; i += 4096 / 2) mem[i] = static_cast<std::uint16_t>(~mem[i]);
      write_file(out + ".written", "written\n");
    }
    ::usleep(20000);
  }
}
