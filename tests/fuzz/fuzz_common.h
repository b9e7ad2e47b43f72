/* Shared by the libFuzzer harnesses: the input as a file the readers can
 * open by path (a memfd, reached through /proc/self/fd), so the readers'
 * own open checks run on every input. */
#ifndef AG_FUZZ_COMMON_H
#define AG_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Path of a file holding data[0..n), valid until the next call. Aborts if
 * the file cannot be made (a harness problem, not a finding). */
static const char *fuzz_file(const unsigned char *data, size_t n) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("anygrad-fuzz", MFD_CLOEXEC);
    if (fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, n, 0) != (ssize_t)n) abort();
  return path;
}

#endif
