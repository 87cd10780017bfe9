// The floors the GPU memory benchmark compares against, measured in the same run on the same machine:
//   io_floor write DIR GIB THREADS   parallel O_DIRECT write of GIB into THREADS files in DIR, then fsync
//   io_floor read DIR THREADS        parallel O_DIRECT read of those files (then removes them)
//   io_floor memcpy GIB THREADS      parallel memory copy of GIB (source and destination touched beforehand)
// Prints one line: "MODE DIR GIB THREADS SECONDS GB/s [buffered]". Where O_DIRECT is refused (tmpfs), it falls
// back to buffered I/O and says so.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (4u << 20)

struct job {
  const char* dir;
  int index;
  size_t bytes;
  int write;
  char* src;
  char* dst;
  int buffered;
  int failed;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int open_file(struct job* j) {
  char path[4096];
  snprintf(path, sizeof path, "%s/io-floor-%d.bin", j->dir, j->index);
  int flags = j->write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY;
  int fd = open(path, flags | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {
    j->buffered = 1;
    fd = open(path, flags, 0600);
  }
  return fd;
}

static void* run_io(void* arg) {
  struct job* j = arg;
  void* buf = NULL;
  if (posix_memalign(&buf, 4096, BLOCK) != 0) {
    j->failed = 1;
    return NULL;
  }
  for (size_t i = 0; i < BLOCK; i += 8) *(unsigned long long*)((char*)buf + i) = i * 0x9E3779B97F4A7C15ull + j->index;
  int fd = open_file(j);
  if (fd < 0) {
    j->failed = 1;
    free(buf);
    return NULL;
  }
  for (size_t done = 0; done < j->bytes; done += BLOCK) {
    ssize_t n = j->write ? write(fd, buf, BLOCK) : read(fd, buf, BLOCK);
    if (n != (ssize_t)BLOCK) {
      j->failed = 1;
      break;
    }
  }
  if (j->write && fsync(fd) != 0) j->failed = 1;
  close(fd);
  if (!j->write) {
    char path[4096];
    snprintf(path, sizeof path, "%s/io-floor-%d.bin", j->dir, j->index);
    unlink(path);
  }
  free(buf);
  return NULL;
}

static void* run_copy(void* arg) {
  struct job* j = arg;
  memcpy(j->dst, j->src, j->bytes);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: io_floor write DIR GIB THREADS | read DIR THREADS | memcpy GIB THREADS\n");
    return 2;
  }
  const char* mode = argv[1];
  const int is_write = !strcmp(mode, "write"), is_read = !strcmp(mode, "read"), is_copy = !strcmp(mode, "memcpy");
  if (!is_write && !is_read && !is_copy) return 2;
  const char* dir = is_copy ? "-" : argv[2];
  int threads = atoi(argv[argc - 1]);
  if (threads < 1) threads = 1;
  double gib = 0;
  size_t per = 0;
  if (is_read) {
    char path[4096];
    snprintf(path, sizeof path, "%s/io-floor-0.bin", dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 1;
    per = (size_t)lseek(fd, 0, SEEK_END);
    close(fd);
    gib = (double)per * threads / (1u << 30);
  } else {
    gib = atof(argv[is_copy ? 2 : 3]);
    per = (size_t)(gib * (1u << 30) / threads) / BLOCK * BLOCK;
  }
  struct job* jobs = calloc(threads, sizeof *jobs);
  pthread_t* tids = calloc(threads, sizeof *tids);
  char *src = NULL, *dst = NULL;
  if (is_copy) {
    src = malloc(per * threads);
    dst = malloc(per * threads);
    if (!src || !dst) return 1;
    memset(src, 1, per * threads);   // touch both: page faults are not part of the copy
    memset(dst, 2, per * threads);
  }
  for (int t = 0; t < threads; ++t) {
    jobs[t] = (struct job){dir, t, per, is_write, src ? src + t * per : NULL, dst ? dst + t * per : NULL, 0, 0};
  }
  double start = now();
  for (int t = 0; t < threads; ++t) pthread_create(&tids[t], NULL, is_copy ? run_copy : run_io, &jobs[t]);
  int failed = 0, buffered = 0;
  for (int t = 0; t < threads; ++t) {
    pthread_join(tids[t], NULL);
    failed |= jobs[t].failed;
    buffered |= jobs[t].buffered;
  }
  double seconds = now() - start;
  if (failed) {
    fprintf(stderr, "io_floor %s %s: an I/O call failed: %s\n", mode, dir, strerror(errno));
    return 1;
  }
  double bytes = (double)per * threads;
  printf("%s %s %.2f %d %.3f %.2f%s\n", mode, dir, bytes / (1u << 30), threads, seconds, bytes / 1e9 / seconds,
         buffered ? " buffered" : "");
  return 0;
}
