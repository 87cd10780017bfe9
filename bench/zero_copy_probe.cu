// Probe for #21's last target (many restores from one checkpoint sharing the page cache): can the CUDA driver's
// restore read a process's staging memory when it is a private mapping of a file (the page cache's pages, shared,
// never copied) instead of anonymous memory, and does it then write to it (copy-on-write, which would copy it
// anyway)? The process holds MIB of device memory with a known checksum and takes commands on a FIFO, from a
// thread that makes no CUDA call (so it answers while the driver has the process locked or checkpointed):
//   remap START LENGTH FILE   mmap FILE (offset 0) MAP_PRIVATE|MAP_FIXED over [START, START+LENGTH), read-write
//   verify                    recompute the device memory's checksum and print whether it is the one before
//   quit
// bench/zero_copy_probe.sh drives it with bench/cuckpt.c. Build: nvcc -O2 -o zero_copy_probe zero_copy_probe.cu
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::printf("%s: %s\n", #call, cudaGetErrorString(e_));                                    \
      std::exit(3);                                                                              \
    }                                                                                            \
  } while (0)

__global__ void fill(unsigned* a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = (unsigned)((i * 0x9E3779B97F4A7C15ull) >> 32) ^ (unsigned)i;
}

__global__ void sum(const unsigned* a, size_t n, unsigned long long* out) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += (unsigned long long)a[i] * (i % 8191 + 1);
  atomicAdd(out, s);
}

static unsigned long long checksum(const unsigned* a, size_t n, unsigned long long* d_out) {
  CHECK(cudaMemset(d_out, 0, sizeof *d_out));
  sum<<<1024, 256>>>(a, n, d_out);
  unsigned long long h = 0;
  CHECK(cudaMemcpy(&h, d_out, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: zero_copy_probe MIB FIFO\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const size_t n = std::strtoull(argv[1], nullptr, 10) * 1024 * 1024 / 4;
  unsigned* a = nullptr;
  unsigned long long* d_out = nullptr;
  CHECK(cudaMalloc(&a, n * 4));
  CHECK(cudaMalloc(&d_out, sizeof *d_out));
  fill<<<1024, 256>>>(a, n);
  CHECK(cudaDeviceSynchronize());
  const unsigned long long before = checksum(a, n, d_out);
  std::printf("ready pid %d checksum %llx\n", (int)getpid(), before);
  FILE* fifo = std::fopen(argv[2], "r");
  if (!fifo) return 1;
  char line[4096];
  for (;;) {
    if (!std::fgets(line, sizeof line, fifo)) {   // writer closed: reopen, wait for the next one
      std::fclose(fifo);
      fifo = std::fopen(argv[2], "r");
      if (!fifo) return 1;
      continue;
    }
    unsigned long long start = 0, length = 0;
    char path[2048];
    if (std::sscanf(line, "remap %llx %llu %2047s", &start, &length, path) == 3) {
      int fd = open(path, O_RDONLY);
      void* m = fd < 0 ? MAP_FAILED
                       : mmap(reinterpret_cast<void*>(start), length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
                              fd, 0);
      std::printf("remap %llx %llu %s: %s\n", start, length, path, m == MAP_FAILED ? std::strerror(errno) : "ok");
      if (fd >= 0) close(fd);
    } else if (!std::strncmp(line, "verify", 6)) {
      const unsigned long long after = checksum(a, n, d_out);
      std::printf("verify checksum %llx: %s\n", after, after == before ? "same" : "DIFFERENT");
    } else if (!std::strncmp(line, "quit", 4)) {
      return 0;
    }
  }
}
