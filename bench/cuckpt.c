/* The serial baseline's driver calls, one per invocation, from outside the target process (what CRIU's upstream
 * cuda plugin does through the cuda-checkpoint binary):
 *   cuckpt lock|checkpoint|unlock|state|restore PID [OLD_UUID=NEW_UUID ...]
 * Build: gcc -O2 -o cuckpt cuckpt.c -ldl */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned timeout_ms, reserved0; unsigned long long reserved1[7]; } lock_args;
typedef struct { unsigned long long reserved[8]; } plain_args;
typedef struct { unsigned char from[16], to[16]; } gpu_pair;
typedef struct { gpu_pair *pairs; unsigned count; char reserved[44]; unsigned long long reserved1; } restore_args;

static int parse_uuid(const char *s, unsigned char out[16]) {
  int n = 0;
  if (!strncmp(s, "GPU-", 4)) s += 4;
  for (; *s && n < 32; ++s) {
    if (*s == '-') continue;
    char c[2] = {*s, 0};
    char *end;
    long v = strtol(c, &end, 16);
    if (*end) return -1;
    out[n / 2] = (unsigned char)(n % 2 ? out[n / 2] | v : v << 4);
    ++n;
  }
  return n == 32 ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: cuckpt lock|checkpoint|unlock|state|restore PID [OLD=NEW ...]\n"); return 2; }
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  int pid = atoi(argv[2]), rc = -1;
  const char *what = argv[1];
  if (!strcmp(what, "lock")) {
    lock_args a; memset(&a, 0, sizeof a); a.timeout_ms = 10000;
    rc = ((int (*)(int, lock_args *))dlsym(cuda, "cuCheckpointProcessLock"))(pid, &a);
  } else if (!strcmp(what, "checkpoint") || !strcmp(what, "unlock")) {
    plain_args a; memset(&a, 0, sizeof a);
    rc = ((int (*)(int, plain_args *))dlsym(cuda, !strcmp(what, "unlock") ? "cuCheckpointProcessUnlock"
                                                                        : "cuCheckpointProcessCheckpoint"))(pid, &a);
  } else if (!strcmp(what, "restore")) {
    gpu_pair pairs[16]; restore_args a; memset(&a, 0, sizeof a);
    unsigned n = 0;
    for (int i = 3; i < argc && n < 16; ++i) {
      char *eq = strchr(argv[i], '=');
      if (!eq) continue;
      *eq = 0;
      if (parse_uuid(argv[i], pairs[n].from) || parse_uuid(eq + 1, pairs[n].to)) { fprintf(stderr, "bad pair\n"); return 2; }
      ++n;
    }
    if (n) { a.pairs = pairs; a.count = n; }
    rc = ((int (*)(int, restore_args *))dlsym(cuda, "cuCheckpointProcessRestore"))(pid, &a);
  } else if (!strcmp(what, "state")) {
    int s = -1;
    rc = ((int (*)(int, int *))dlsym(cuda, "cuCheckpointProcessGetState"))(pid, &s);
    printf("%d\n", s);
  }
  if (rc) fprintf(stderr, "cuckpt %s %d: CUresult %d\n", what, pid, rc);
  return rc ? 1 : 0;
}
