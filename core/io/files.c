/* The checks of include/anygrad/checks.h: strict numbers (options and
 * environment), regular-file-only bounded reads, and output files that are
 * checked up front and replace their target atomically. The safetensors
 * writer shares the temp-file machinery (ag__temp_create). */
#define _GNU_SOURCE
#include "anygrad/checks.h"
#include "io/files.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


/* ---------------- numbers ---------------- */

bool ag_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!s || !out) return false;
  const char *p = s;
  bool neg = *p == '-';
  if (neg) p++;
  if (!*p) return false;
  uint64_t x = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    unsigned d = (unsigned)(*p - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
  }
  int64_t v;
  if (neg) {
    if (x > (uint64_t)INT64_MAX + 1) return false;
    v = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
  } else {
    if (x > (uint64_t)INT64_MAX) return false;
    v = (int64_t)x;
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ag_parse_u64(const char *s, uint64_t *out) {
  if (!s || !out || !*s) return false;
  const char *p = s;
  unsigned base = 10;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p += 2;
    if (!*p) return false;
  }
  uint64_t x = 0;
  for (; *p; p++) {
    unsigned d;
    if (*p >= '0' && *p <= '9') d = (unsigned)(*p - '0');
    else if (base == 16 && *p >= 'a' && *p <= 'f') d = (unsigned)(*p - 'a' + 10);
    else if (base == 16 && *p >= 'A' && *p <= 'F') d = (unsigned)(*p - 'A' + 10);
    else return false;
    if (x > (UINT64_MAX - d) / base) return false;
    x = x * base + d;
  }
  *out = x;
  return true;
}

bool ag_parse_f64(const char *s, double lo, double hi, double *out) {
  if (!s || !out || !*s) return false;
  /* Only the characters of a decimal number: strtod alone would also take
   * hex floats, "inf", "nan" and leading blanks. */
  for (const char *p = s; *p; p++)
    if (!strchr("0123456789+-.eE", *p)) return false;
  char *end = NULL;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || !isfinite(x) || x < lo || x > hi) return false;
  *out = x;
  return true;
}

const char *ag_escape(const char *s, char *buf, size_t len) {
  static const char hex[] = "0123456789abcdef";
  if (!buf || !len) return buf;
  size_t o = 0;
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    if (o + 8 >= len) {
      if (len >= 4) {
        size_t at = o < len - 4 ? o : len - 4;
        memcpy(buf + at, "...", 4);
      } else {
        buf[0] = 0;
      }
      return buf;
    }
    if (*c >= 0x20 && *c < 0x7f) {
      buf[o++] = (char)*c;
    } else {
      buf[o++] = '\\';
      buf[o++] = 'x';
      buf[o++] = hex[*c >> 4];
      buf[o++] = hex[*c & 15];
    }
  }
  buf[o] = 0;
  return buf;
}

ag_status ag_env_i64(const char *name, int64_t lo, int64_t hi, int64_t dflt, int64_t *out) {
  if (!name || !out) return ag_error_set(AG_ERR_INVALID, "ag_env_i64: NULL argument");
  *out = dflt;
  const char *v = getenv(name);
  if (!v || !*v) return AG_OK;
  int64_t x;
  if (!ag_parse_i64(v, lo, hi, &x)) {
    char b[64];
    return ag_error_set(AG_ERR_INVALID, "%s='%s' is not an integer in %lld..%lld", name, ag_escape(v, b, sizeof b),
                        (long long)lo, (long long)hi);
  }
  *out = x;
  return AG_OK;
}

ag_status ag_env_f64(const char *name, double lo, double hi, double dflt, double *out) {
  if (!name || !out) return ag_error_set(AG_ERR_INVALID, "ag_env_f64: NULL argument");
  *out = dflt;
  const char *v = getenv(name);
  if (!v || !*v) return AG_OK;
  double x;
  if (!ag_parse_f64(v, lo, hi, &x)) {
    char b[64];
    return ag_error_set(AG_ERR_INVALID, "%s='%s' is not a decimal number in %g..%g", name, ag_escape(v, b, sizeof b),
                        lo, hi);
  }
  *out = x;
  return AG_OK;
}

/* ---------------- reading ---------------- */

ag_status ag_file_open_read(const char *path, const char *what, uint64_t max_bytes, int *out_fd,
                            uint64_t *out_size) {
  if (!path || !out_fd) return ag_error_set(AG_ERR_INVALID, "ag_file_open_read: NULL argument");
  if (!what) what = "input";
  *out_fd = -1;
  /* O_NONBLOCK: opening a FIFO without a writer must not block; fstat then
   * refuses it. O_NOCTTY: a terminal never becomes ours. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return ag_error_set(AG_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
  ag_status st = AG_OK;
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    st = ag_error_set(AG_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    st = ag_error_set(AG_ERR_IO, "%s %s is not a regular file (%s)", what, path,
                      S_ISFIFO(sb.st_mode)  ? "a FIFO"
                      : S_ISCHR(sb.st_mode) ? "a character device"
                      : S_ISBLK(sb.st_mode) ? "a block device"
                      : S_ISDIR(sb.st_mode) ? "a directory"
                      : S_ISSOCK(sb.st_mode) ? "a socket"
                                            : "not a file");
  else if (max_bytes && (uint64_t)sb.st_size > max_bytes)
    st = ag_error_set(AG_ERR_IO, "%s %s is %llu bytes, more than the %llu this reader takes", what, path,
                      (unsigned long long)sb.st_size, (unsigned long long)max_bytes);
  if (st == AG_OK) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
      st = ag_error_set(AG_ERR_IO, "%s %s: fcntl: %s", what, path, strerror(errno));
  }
  if (st != AG_OK) {
    close(fd);
    return st;
  }
  *out_fd = fd;
  if (out_size) *out_size = (uint64_t)sb.st_size;
  return AG_OK;
}

ag_status ag_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *out_len) {
  if (!out || !out_len) return ag_error_set(AG_ERR_INVALID, "ag_file_read_all: NULL argument");
  *out = NULL;
  *out_len = 0;
  if (!what) what = "input";
  int fd = -1;
  uint64_t size = 0;
  ag_status st = ag_file_open_read(path, what, max_bytes, &fd, &size);
  if (st != AG_OK) return st;
  char *buf = NULL;
  if (size >= SIZE_MAX || !(buf = malloc((size_t)size + 1))) {
    close(fd);
    return ag_error_set(AG_ERR_OOM, "out of host memory reading %s %s (%llu bytes)", what, path,
                        (unsigned long long)size);
  }
  size_t got = 0;
  while (st == AG_OK) {
    /* One byte past the size: a file that grew is seen, not cut. */
    size_t want = got < size ? (size_t)size - got : 1;
    char extra;
    ssize_t r = read(fd, got < size ? buf + got : &extra, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) st = ag_error_set(AG_ERR_IO, "read error on %s %s: %s", what, path, strerror(errno));
    else if (r == 0 && got < size)
      st = ag_error_set(AG_ERR_IO, "%s %s shrank while it was read (%zu of %llu bytes)", what, path, got,
                        (unsigned long long)size);
    else if (r == 0) break;
    else if (got >= size)
      st = ag_error_set(AG_ERR_IO, "%s %s grew while it was read", what, path);
    else got += (size_t)r;
  }
  close(fd);
  if (st != AG_OK) {
    free(buf);
    return st;
  }
  buf[got] = 0;
  *out = buf;
  *out_len = got;
  return AG_OK;
}

/* ---------------- writing ---------------- */

void ag__temp_remove_stale(const char *path) {
  char *dcopy = strdup(path), *bcopy = strdup(path);
  DIR *d = dcopy && bcopy ? opendir(dirname(dcopy)) : NULL;
  if (d) {
    const char *base = basename(bcopy);
    size_t bl = strlen(base);
    struct dirent *e;
    while ((e = readdir(d))) {
      const char *n = e->d_name;
      if (strncmp(n, base, bl) || strncmp(n + bl, ".tmp.", 5)) continue;
      char *end = NULL;
      errno = 0;
      long pid = strtol(n + bl + 5, &end, 10);
      if (errno || end == n + bl + 5 || (*end && *end != '.') || pid <= 0 || pid == (long)getpid()) continue;
      if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
      struct stat sb;
      if (fstatat(dirfd(d), n, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)) (void)unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
  }
  free(dcopy);
  free(bcopy);
}

int ag__temp_create(const char *path, char *tmp, size_t len) {
  for (int attempt = 0; attempt < 64; attempt++) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      r = (uint32_t)ts.tv_nsec ^ (uint32_t)attempt * 0x9e3779b9u;
    }
    const int n = snprintf(tmp, len, "%s.tmp.%ld.%08x", path, (long)getpid(), (unsigned)r);
    if (n < 0 || (size_t)n >= len) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

void ag__dir_fsync(const char *path) {
  char *dcopy = strdup(path);
  if (!dcopy) return;
  int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  free(dcopy);
}

ag_status ag__output_target_ok(const char *path, const char *what) {
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return ag_error_set(AG_ERR_IO, "%s %s exists and is not a regular file (%s); refusing to replace it", what, path,
                        S_ISFIFO(sb.st_mode)   ? "a FIFO"
                        : S_ISCHR(sb.st_mode)  ? "a character device"
                        : S_ISBLK(sb.st_mode)  ? "a block device"
                        : S_ISDIR(sb.st_mode)  ? "a directory"
                        : S_ISSOCK(sb.st_mode) ? "a socket"
                                               : "not a file");
  return AG_OK;
}

ag_status ag_output_check(const char *path, const char *what) {
  if (!what) what = "output";
  if (!path || !*path) return ag_error_set(AG_ERR_INVALID, "%s path is empty", what);
  ag_status st = ag__output_target_ok(path, what);
  if (st != AG_OK) return st;
  size_t n = strlen(path) + 48;
  char *probe = malloc(n);
  if (!probe) return ag_error_set(AG_ERR_OOM, "out of host memory");
  int fd = ag__temp_create(path, probe, n);
  if (fd < 0) {
    st = ag_error_set(AG_ERR_IO, "cannot write %s %s: %s", what, path, strerror(errno));
  } else {
    close(fd);
    unlink(probe);
  }
  free(probe);
  return st;
}

struct ag_output {
  FILE *f;
  char *path, *tmp, *what;
};

ag_status ag_output_open(const char *path, const char *what, ag_output **out) {
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_output_open: NULL argument");
  *out = NULL;
  if (!what) what = "output";
  if (!path || !*path) return ag_error_set(AG_ERR_INVALID, "%s path is empty", what);
  ag_status st = ag__output_target_ok(path, what);
  if (st != AG_OK) return st;
  ag_output *o = calloc(1, sizeof *o);
  size_t n = strlen(path) + 48;
  if (!o || !(o->path = strdup(path)) || !(o->what = strdup(what)) || !(o->tmp = malloc(n))) {
    if (o) {
      free(o->path);
      free(o->what);
    }
    free(o);
    return ag_error_set(AG_ERR_OOM, "out of host memory");
  }
  ag__temp_remove_stale(path);
  int fd = ag__temp_create(path, o->tmp, n);
  if (fd < 0) st = ag_error_set(AG_ERR_IO, "cannot write %s %s: %s", what, path, strerror(errno));
  if (st == AG_OK && !(o->f = fdopen(fd, "w"))) {
    st = ag_error_set(AG_ERR_IO, "cannot write %s %s: %s", what, path, strerror(errno));
    close(fd);
    unlink(o->tmp);
  }
  if (st != AG_OK) {
    free(o->tmp);
    free(o->path);
    free(o->what);
    free(o);
    return st;
  }
  *out = o;
  return AG_OK;
}

FILE *ag_output_file(ag_output *o) { return o ? o->f : NULL; }

static void output_free(ag_output *o) {
  free(o->tmp);
  free(o->path);
  free(o->what);
  free(o);
}

void ag_output_abort(ag_output *o) {
  if (!o) return;
  if (o->f) fclose(o->f);
  unlink(o->tmp);
  output_free(o);
}

/* The directory part and the last component of path (dirname/basename on
 * copies), stat'ed: false when the directory does not exist. */
static bool dir_and_name(const char *path, struct stat *dir, char **name) {
  char *dcopy = strdup(path), *bcopy = strdup(path);
  bool ok = dcopy && bcopy && stat(dirname(dcopy), dir) == 0;
  *name = ok ? strdup(basename(bcopy)) : NULL;
  free(dcopy);
  free(bcopy);
  return *name != NULL;
}

bool ag_file_same(const char *a, const char *b) {
  if (!a || !b || !*a || !*b) return false;
  struct stat sa, sb;
  bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea || eb) return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (!strcmp(a, b)) return true;
  char *na = NULL, *nb = NULL;
  bool same = dir_and_name(a, &sa, &na) && dir_and_name(b, &sb, &nb) && sa.st_dev == sb.st_dev &&
              sa.st_ino == sb.st_ino && !strcmp(na, nb);
  free(na);
  free(nb);
  return same;
}

ag_status ag_output_commit(ag_output *o) {
  if (!o) return ag_error_set(AG_ERR_INVALID, "ag_output_commit: NULL output");
  ag_status st = AG_OK;
  bool bad = fflush(o->f) != 0 || ferror(o->f) != 0;
  int err = errno;
  if (!bad && fsync(fileno(o->f)) != 0) {
    bad = true;
    err = errno;
  }
  if (fclose(o->f) != 0 && !bad) {
    bad = true;
    err = errno;
  }
  o->f = NULL;
  if (bad) st = ag_error_set(AG_ERR_IO, "write error on %s %s: %s", o->what, o->path, strerror(err));
  if (st == AG_OK && rename(o->tmp, o->path) != 0)
    st = ag_error_set(AG_ERR_IO, "cannot replace %s %s: %s", o->what, o->path, strerror(errno));
  if (st != AG_OK)
    unlink(o->tmp);
  else
    ag__dir_fsync(o->path);
  output_free(o);
  return st;
}

bool ag_address_space_short(size_t bytes, unsigned long long *out_limit_kib) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
  if (out_limit_kib) *out_limit_kib = (unsigned long long)(rl.rlim_cur / 1024);
  void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return true;
  munmap(p, bytes);
  return false;
}
