// bench/node_flow_bench.sh's workload: holds SIZE_MIB of touched, incompressible memory (xorshift output) and
// then counts, once a second, so a restored copy shows it continues. Built static: it runs in a busybox image.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
  const size_t words = mib * (1u << 20) / sizeof(uint64_t);
  uint64_t* memory = malloc(words * sizeof(uint64_t));
  if (!memory) {
    fprintf(stderr, "cannot allocate %zu MiB\n", mib);
    return 1;
  }
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < words; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memory[i] = x;
  }
  printf("ready %zu MiB\n", mib);
  fflush(stdout);
  for (unsigned long tick = 0;; ++tick) {
    printf("tick %lu %llx\n", tick, (unsigned long long)memory[tick % words]);
    fflush(stdout);
    sleep(1);
  }
}
