/* Builds the embedded kernel program once per device, with an on-disk binary
 * cache keyed by source, options, device and driver. Cache failures are
 * silent (the program is then built from source); build failures return
 * AG_ERR_BACKEND with the compiler's log. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cl_internal.h"

#define CLB_BUILD_OPTIONS "-cl-std=CL1.2 -DAG_WG=256"
/* The portable program (docs/numerics.md): the same sources behind the
 * portable prelude; never a fast-math option. AG_OPENCL_OPTIONS is not
 * appended to it, so no option can relax its arithmetic. */
#define CLB_PORTABLE_OPTIONS "-cl-std=CL1.2 -DAG_WG=256 -DAG_PORTABLE=1"

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return (h ^ 0xff) * 0x100000001b3ull; /* field separator */
}

/* $AG_CACHE_DIR, else $XDG_CACHE_HOME/anygrad, else ~/.cache/anygrad;
 * created if missing. False if no directory is usable. */
static bool cache_dir(char *buf, size_t len) {
  const char *env = getenv("AG_CACHE_DIR");
  if (env && *env) {
    snprintf(buf, len, "%s", env);
  } else if ((env = getenv("XDG_CACHE_HOME")) && *env) {
    snprintf(buf, len, "%s/anygrad", env);
  } else if ((env = getenv("HOME")) && *env) {
    snprintf(buf, len, "%s/.cache", env);
    mkdir(buf, 0755);
    snprintf(buf, len, "%s/.cache/anygrad", env);
  } else {
    return false;
  }
  return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

/* A cached binary: a regular file only (opened without blocking, so a FIFO
 * planted in the cache is skipped, not waited on) of at most 256 MiB. A
 * miss sets no error: the program is then built. */
static unsigned char *read_file(const char *path, size_t *out_n) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0) return NULL;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > ((off_t)256 << 20) ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return NULL;
  }
  unsigned char *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *out_n = (size_t)n;
  return buf;
}

/* Written to a temporary name and renamed, so concurrent processes never
 * read a partial file. */
static void write_cache(const char *path, cl_program prog) {
  size_t n = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
    return;
  unsigned char *bin = malloc(n);
  if (!bin) return;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f) {
      bool ok = fwrite(bin, 1, n, f) == n;
      ok = fclose(f) == 0 && ok;
      if (!ok || rename(tmp, path) != 0) remove(tmp);
    }
  }
  free(bin);
}

static ag_status build_log_error(clb_device *d, cl_program prog, cl_int err) {
  size_t n = 0;
  clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
  char *log = malloc(n + 1);
  if (log) {
    log[0] = 0;
    clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    log[n] = 0;
  }
  ag_status st = ag_error_set(AG_ERR_BACKEND,
                              "opencl: building the anygrad kernels for %s failed (%d): %.800s",
                              d->name, (int)err, log ? log : "(no build log)");
  free(log);
  return st;
}

static ag_status build(clb_device *d, bool portable, cl_program *out) {
  /* AG_OPENCL_OPTIONS appends compiler options (e.g. -cl-mad-enable). */
  char opts[512];
  const char *extra = getenv("AG_OPENCL_OPTIONS");
  /* -DAG_FP64: f64.cl's kernels, for devices with cl_khr_fp64 */
  if (portable)
    snprintf(opts, sizeof opts, "%s%s", CLB_PORTABLE_OPTIONS,
             d->native_divsqrt ? " -cl-fp32-correctly-rounded-divide-sqrt -DAGP_NATIVE_DIVSQRT=1" : "");
  else
    snprintf(opts, sizeof opts, "%s%s %s", CLB_BUILD_OPTIONS, d->fp64 ? " -DAG_FP64=1" : "", extra ? extra : "");
  uint64_t h = 0xcbf29ce484222325ull;
  if (portable) h = fnv1a(h, clb_portable_source, clb_portable_source_len);
  h = fnv1a(h, clb_kernel_source, clb_kernel_source_len);
  h = fnv1a(h, opts, strlen(opts));
  h = fnv1a(h, d->name, strlen(d->name));
  h = fnv1a(h, d->vendor, strlen(d->vendor));
  h = fnv1a(h, d->version, strlen(d->version));
  h = fnv1a(h, d->driver, strlen(d->driver));
  h = fnv1a(h, d->platform_version, strlen(d->platform_version));
  char dir[4096], path[4160];
  bool cache = cache_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/opencl-%016llx.bin", dir, (unsigned long long)h);

  cl_int err;
  if (cache) {
    size_t n = 0;
    unsigned char *bin = read_file(path, &n);
    if (bin) {
      const unsigned char *bp = bin;
      cl_int bst;
      cl_program prog = clCreateProgramWithBinary(d->ctx, 1, &d->id, &n, &bp, &bst, &err);
      free(bin);
      if (prog && err == CL_SUCCESS && bst == CL_SUCCESS &&
          clBuildProgram(prog, 1, &d->id, opts, NULL, NULL) == CL_SUCCESS) {
        *out = prog;
        return AG_OK;
      }
      /* A stale or foreign binary: rebuild from source and overwrite it. */
      if (prog) clReleaseProgram(prog);
    }
  }
  const char *src[2] = {clb_portable_source, clb_kernel_source};
  size_t len[2] = {clb_portable_source_len, clb_kernel_source_len};
  cl_program prog = portable ? clCreateProgramWithSource(d->ctx, 2, src, len, &err)
                             : clCreateProgramWithSource(d->ctx, 1, src + 1, len + 1, &err);
  if (!prog) return clb_error(err, "clCreateProgramWithSource");
  err = clBuildProgram(prog, 1, &d->id, opts, NULL, NULL);
  if (err != CL_SUCCESS) {
    ag_status st = err == CL_BUILD_PROGRAM_FAILURE ? build_log_error(d, prog, err)
                                                   : clb_error(err, "clBuildProgram");
    clReleaseProgram(prog);
    return st;
  }
  if (cache) write_cache(path, prog);
  *out = prog;
  return AG_OK;
}

ag_status clb_program(clb_device *d, bool portable, cl_program *out) {
  bool *tried = portable ? &d->pprog_tried : &d->prog_tried;
  cl_program *prog = portable ? &d->pprog : &d->prog;
  ag_status *status = portable ? &d->pprog_status : &d->prog_status;
  char *error = portable ? d->pprog_error : d->prog_error;
  pthread_mutex_lock(&d->lock);
  if (!*tried) {
    *tried = true;
    *status = build(d, portable, prog);
    if (*status != AG_OK) snprintf(error, sizeof d->prog_error, "%s", ag_last_error());
  }
  ag_status st = *status;
  *out = *prog;
  pthread_mutex_unlock(&d->lock);
  /* Later launches report the same failure without rebuilding. */
  if (st != AG_OK) ag_error_set(st, "%s", error);
  return st;
}
