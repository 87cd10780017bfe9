/* Probe (bench only, never installed): an LD_PRELOAD shim that logs every anonymous private mmap of at least
 * THP_SHIM_MIN_MIB (default 64) a process makes, to find out how the CUDA driver allocates the host memory that
 * a checkpoint copies device memory into. THP_SHIM_ADVISE=1 also asks for transparent huge pages on each such
 * mapping (madvise MADV_HUGEPAGE), to measure what huge pages would change without touching the node's global
 * THP setting. Log: one line "mmap BYTES ADDR" per mapping to THP_SHIM_LOG (stderr if unset).
 * Build: gcc -O2 -shared -fPIC -o thp_mmap_shim.so thp_mmap_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);

static void note(size_t length, void *addr) {
  char line[96];
  const int n = snprintf(line, sizeof line, "mmap %zu %p\n", length, addr);
  const char *path = getenv("THP_SHIM_LOG");
  const int fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : 2;
  if (fd < 0) return;
  if (write(fd, line, (size_t)n) < 0) {}
  if (path) close(fd);
}

void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  if (!real_mmap) real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
  void *p = real_mmap(addr, length, prot, flags, fd, offset);
  const char *min = getenv("THP_SHIM_MIN_MIB");
  const size_t threshold = (size_t)(min ? atol(min) : 64) << 20;
  if (p != MAP_FAILED && (flags & MAP_ANONYMOUS) && (flags & MAP_PRIVATE) && length >= threshold) {
    const char *advise = getenv("THP_SHIM_ADVISE");
    if (advise && advise[0] == '1') madvise(p, length, MADV_HUGEPAGE);
    note(length, p);
  }
  return p;
}
void *mmap64(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  return mmap(addr, length, prot, flags, fd, offset);
}
