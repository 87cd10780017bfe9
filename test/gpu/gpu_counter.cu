// A CUDA workload whose state can be checked bit for bit: MIB of device memory evolve by a fixed integer
// recurrence, and every iteration appends "ITERATION CHECKSUM" (a device-side reduction over all of it) to OUT.
// Two runs, interrupted or not, must print identical lines for the same iteration.
//   gpu_counter MIB OUT [--iterations N] [--sleep-ms MS] [--gpus G] [--child] [--child-gpu D] [--content C]
// --gpus G spreads the memory over G devices (a multi-GPU process); --child forks first and the child runs the
// same loop into OUT.child (a process with a child, both using CUDA); --child-gpu D puts the child's memory on
// device D instead of device 0 (two processes on two GPUs). --content shapes the memory as the benchmark's
// content types: random (default: all of it evolves, incompressible), zeros (a quarter evolves, three quarters stay
// zero: an empty pre-allocated pool), bf16 (1/16 evolves, the rest holds fixed normally distributed values stored
// as bf16, like model weights). The checksum always covers all of it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
      std::exit(3);                                                                                   \
    }                                                                                                 \
  } while (0)

// Each word's own term is the high half of a 64-bit Weyl step of its index: with a term linear in the index modulo
// 2^32 (i * odd), two words 2^(32-k) apart differ by a multiple of 2^(32-k) times the sum of the recurrence's powers,
// which is 0 modulo 2^32 when that sum (after t iterations) has k factors of 2, as t has: whole 2 MiB chunks came out
// identical (the halves of 4 GiB at every 8th iteration, of 16 GiB at every 2nd), and a chunk store wrote half or a
// quarter of the "random" memory.
__global__ void step(unsigned* a, size_t n, unsigned it, unsigned salt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = a[i] * 1664525u + 1013904223u + (unsigned)((i * 0x9E3779B97F4A7C15ull) >> 32) + it * 97u + salt;
}

// Fixed bf16 values ~ N(0, 0.02) from a hash of the index (Box-Muller), two per 32-bit word.
__device__ unsigned bf16_of(unsigned long long i) {
  unsigned long long h = (i + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  float u1 = ((h & 0xFFFFFF) + 1) / 16777217.0f, u2 = ((h >> 24) & 0xFFFFFF) / 16777216.0f;
  float v = 0.02f * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
  return __float_as_uint(v) >> 16;
}

__global__ void fill_bf16(unsigned* a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = bf16_of(2 * i) | (bf16_of(2 * i + 1) << 16);
}

__global__ void checksum(const unsigned* a, size_t n, unsigned long long* out) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    local += (unsigned long long)a[i] * (unsigned long long)((i & 1023) + 1);
  atomicAdd(out, local);
}

static int run(size_t mib, const std::string& out, long iterations, int sleep_ms, int gpus, int first_gpu,
               const std::string& content) {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (first_gpu + gpus > count) {
    std::fprintf(stderr, "asked for GPUs %d..%d, %d visible\n", first_gpu, first_gpu + gpus - 1, count);
    return 2;
  }
  size_t n = mib * 1024 * 1024 / 4 / gpus;
  const size_t active = content == "zeros" ? n / 4 : content == "bf16" ? n / 16 : n;
  std::vector<unsigned*> buf(gpus);
  std::vector<unsigned long long*> sum(gpus);
  for (int g = 0; g < gpus; ++g) {
    CHECK(cudaSetDevice(first_gpu + g));
    CHECK(cudaMalloc(&buf[g], n * 4));
    CHECK(cudaMalloc(&sum[g], sizeof(unsigned long long)));
    CHECK(cudaMemset(buf[g], 0, n * 4));
    if (content == "bf16") fill_bf16<<<1024, 256>>>(buf[g] + active, n - active);
    CHECK(cudaDeviceSynchronize());
  }
  for (long it = 1; iterations <= 0 || it <= iterations; ++it) {
    unsigned long long total = 0;
    for (int g = 0; g < gpus; ++g) {
      CHECK(cudaSetDevice(first_gpu + g));
      step<<<1024, 256>>>(buf[g], active, (unsigned)it, (unsigned)g);
      CHECK(cudaMemset(sum[g], 0, sizeof(unsigned long long)));
      checksum<<<1024, 256>>>(buf[g], n, sum[g]);
      CHECK(cudaGetLastError());
      unsigned long long part = 0;
      CHECK(cudaMemcpy(&part, sum[g], sizeof part, cudaMemcpyDeviceToHost));
      total += part * (unsigned long long)(g + 1);
    }
    FILE* f = std::fopen(out.c_str(), "a");
    if (!f) return 4;
    std::fprintf(f, "%ld %016llx\n", it, total);
    std::fclose(f);
    if (sleep_ms > 0) usleep(sleep_ms * 1000);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gpu_counter MIB OUT [--iterations N] [--sleep-ms MS] [--gpus G] [--child]\n");
    return 2;
  }
  size_t mib = std::strtoull(argv[1], nullptr, 10);
  std::string out = argv[2];
  long iterations = 0;
  int sleep_ms = 20, gpus = 1, child_gpu = 0;
  bool child = false;
  std::string content = "random";
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--sleep-ms") && i + 1 < argc) sleep_ms = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--gpus") && i + 1 < argc) gpus = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--child")) child = true;
    else if (!std::strcmp(argv[i], "--child-gpu") && i + 1 < argc) child_gpu = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--content") && i + 1 < argc) content = argv[++i];
  }
  if (content != "random" && content != "zeros" && content != "bf16") {
    std::fprintf(stderr, "--content %s: use random, zeros or bf16\n", content.c_str());
    return 2;
  }
  if (child) {
    pid_t pid = fork();   // before any CUDA call: CUDA state does not survive fork()
    if (pid == 0) return run(mib, out + ".child", iterations, sleep_ms, gpus, child_gpu, content);
  }
  return run(mib, out, iterations, sleep_ms, gpus, 0, content);
}
