/* What this compiler's static libstdc++/libgcc expect from a glibc newer than GPUCKPT_GLIBC_FLOOR (2.31).
 *
 * The OCI hook and the CRIU plugin link libstdc++ and libgcc statically and bind glibc symbols against the oldest
 * supported glibc (cmake/HostBinary.cmake). GCC 12's runtime was built against glibc 2.36 and refers to three
 * symbols 2.31 lacks; each is supplied here with the meaning glibc gives it, private to the file it is linked into
 * (hidden; the plugin's version script exports only CR_PLUGIN_DESC). On a newer glibc these are used instead of
 * glibc's own, which is correct, only a little slower.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#define GPUCKPT_HIDDEN __attribute__((visibility("hidden")))

/* glibc 2.32: non-zero while the process is known to have one thread. Always 0 ("maybe several threads"): the
 * runtime then always takes its thread-safe paths (atomic reference counts), which is correct in every process. */
GPUCKPT_HIDDEN char __libc_single_threaded = 0;

/* glibc 2.36: std::random_device's default source. Same contract: never fails, never blocks after boot. */
GPUCKPT_HIDDEN uint32_t arc4random(void);
uint32_t arc4random(void) {
  uint32_t value = 0;
  unsigned char* out = (unsigned char*)&value;
  size_t got = 0;
  while (got < sizeof value) {
    const ssize_t n = getrandom(out + got, sizeof value - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      break;
    }
  }
  if (got == sizeof value) return value;
  /* No getrandom(2) (kernel < 3.17): the device the kernel has offered since forever. */
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  while (fd >= 0 && got < sizeof value) {
    const ssize_t n = read(fd, out + got, sizeof value - got);
    if (n > 0) got += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  if (fd >= 0) close(fd);
  if (got != sizeof value) abort(); /* as glibc's: there is no value to return */
  return value;
}

/* glibc 2.35: libgcc's unwinder asks which loaded object holds a code address and where its .eh_frame_hdr is.
 * The answer comes from dl_iterate_phdr, exactly as libgcc found it before this function existed. */
struct find_request {
  uintptr_t pc;
  struct dl_find_object* result;
  int found;
};

static int find_object_containing(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct find_request* request = data;
  uintptr_t start = UINTPTR_MAX, end = 0;
  int holds_pc = 0;
  const void* eh_frame = NULL;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    const uintptr_t begin = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD) {
      if (begin < start) start = begin;
      if (begin + ph->p_memsz > end) end = begin + ph->p_memsz;
      if (request->pc >= begin && request->pc < begin + ph->p_memsz) holds_pc = 1;
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      eh_frame = (const void*)begin;
    }
  }
  if (!holds_pc) return 0;
  request->result->dlfo_flags = 0;
  request->result->dlfo_map_start = (void*)start;
  request->result->dlfo_map_end = (void*)end;
  request->result->dlfo_link_map = NULL;
  request->result->dlfo_eh_frame = (void*)eh_frame;
  request->found = 1;
  return 1;
}

GPUCKPT_HIDDEN int _dl_find_object(void* pc, struct dl_find_object* result);
int _dl_find_object(void* pc, struct dl_find_object* result) {
  struct find_request request = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(find_object_containing, &request);
  if (!request.found) return -1;
  /* The link map, for callers that want it (libgcc does not). */
  Dl_info info;
  struct link_map* map = NULL;
  if (dladdr1(pc, &info, (void**)&map, RTLD_DL_LINKMAP) != 0) result->dlfo_link_map = map;
  return 0;
}
