/* safetensors loading: peak resident memory and time of opening a file and
 * loading its tensors one by one (each released before the next, as a
 * model loader copying into its parameters does), measured in a fresh child
 * process per mode so one mode's pages do not count for the next. Modes:
 *   open      ag_safetensors_open + close (the header only)
 *   load      open, then get/release every tensor (pread in 4 MiB chunks)
 *   load_keep open, then get every tensor and keep them all
 *   fread     the whole file read into malloc'ed memory first (how the
 *             reader worked before it read tensor by tensor), then every tensor
 * Usage: safetensors_bench [out.json] [file_mb (256)] [tensors (8)] [dir (/tmp)]
 * Prints a table and writes JSON.
 *
 * Header mode: the time to open a header of many tensor names (zero-size
 * F32 tensors "t0000000".., as a file of a million names is written by
 * tests/harden_test.c), each round in a fresh child process: wall, user and
 * system time and minor page faults of ag_safetensors_open alone (rusage
 * deltas in the child), then median and range over the rounds.
 *   safetensors_bench --names N [--rounds R (5)] [--file PATH] [--json OUT]
 * --file reuses PATH when it exists (else writes it and keeps it), so two
 * builds can be compared on one file with bench/ab.py. The reader is
 * single-threaded; no thread count applies. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "anygrad/anygrad.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Peak and current resident set of this process, in KiB. */
static void rss_kb(long *peak, long *cur) {
  *peak = *cur = -1;
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "VmHWM:", 6)) *peak = atol(line + 6);
    if (!strncmp(line, "VmRSS:", 6)) *cur = atol(line + 6);
  }
  if (f) fclose(f);
}

static double tv_ms(struct timeval tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }

/* One open of a names header: prints wall, user and system ms and minor
 * faults of the open (without the close). */
static int child_names(const char *path, long want) {
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  double t0 = now_ms();
  ag_safetensors *st = NULL;
  if (ag_safetensors_open(path, &st) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  double ms = now_ms() - t0;
  getrusage(RUSAGE_SELF, &r1);
  if (ag_safetensors_count(st) != want) {
    fprintf(stderr, "%s: %d names, expected %ld\n", path, ag_safetensors_count(st), want);
    return 1;
  }
  printf("%.2f %.2f %.2f %ld\n", ms, tv_ms(r1.ru_utime) - tv_ms(r0.ru_utime), tv_ms(r1.ru_stime) - tv_ms(r0.ru_stime),
         r1.ru_minflt - r0.ru_minflt);
  ag_safetensors_close(st);
  return 0;
}

/* A header of n zero-size F32 tensors "t%07d" (the layout of the million-name
 * test). */
static int write_names(const char *path, long n) {
  size_t cap = (size_t)n * 80 + 64, k = 0;
  char *h = malloc(cap);
  if (!h) return 1;
  h[k++] = '{';
  for (long i = 0; i < n; i++)
    k += (size_t)snprintf(h + k, cap - k, "%s\"t%07ld\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                          i ? "," : "", i);
  h[k++] = '}';
  while (k % 8) h[k++] = ' ';
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)k >> (8 * i));
  FILE *f = fopen(path, "wb");
  int bad = !f || fwrite(len8, 1, 8, f) != 8 || fwrite(h, 1, k, f) != k;
  if (f && fclose(f) != 0) bad = 1;
  free(h);
  return bad;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int names_main(int argc, char **argv) {
  long n = 0;
  int rounds = 5;
  const char *file = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--names") && i + 1 < argc) n = atol(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) out = argv[++i];
    else {
      fprintf(stderr, "safetensors_bench: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (n <= 0 || n > 100000000 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "safetensors_bench: --names 1..1e8, --rounds 1..1000\n");
    return 2;
  }
  char path[512], self[512];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 1;
  self[sl] = 0;
  struct stat sb;
  if (file) snprintf(path, sizeof path, "%s", file);
  else snprintf(path, sizeof path, "/tmp/ag_safetensors_names_%ld.safetensors", (long)getpid());
  if ((!file || stat(path, &sb) != 0) && write_names(path, n)) {
    fprintf(stderr, "safetensors_bench: cannot write %s\n", path);
    return 1;
  }
  if (stat(path, &sb) != 0) return 1;
  double *v = calloc((size_t)rounds * 4, sizeof *v);
  if (!v) return 1;
  printf("safetensors open: header of %ld names (%.1f MiB file), %d rounds, one child process each, single-threaded\n",
         n, sb.st_size / 1048576.0, rounds);
  printf("%-6s %10s %10s %10s %12s\n", "round", "wall ms", "user ms", "sys ms", "minor faults");
  int rc = 0;
  for (int r = 0; r < rounds; r++) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' --child-names %ld '%s'", self, n, path);
    FILE *p = popen(cmd, "r");
    double *x = v + 4 * r;
    if (!p || fscanf(p, "%lf %lf %lf %lf", &x[0], &x[1], &x[2], &x[3]) != 4) rc = 1;
    if (p && pclose(p) != 0) rc = 1;
    if (rc) break;
    printf("%-6d %10.1f %10.1f %10.1f %12.0f\n", r, x[0], x[1], x[2], x[3]);
  }
  if (!file) unlink(path);
  if (rc) {
    free(v);
    return rc;
  }
  static const char *const key[] = {"wall_ms", "user_ms", "sys_ms", "minor_faults"};
  double med[4], lo[4], hi[4], *col = malloc((size_t)rounds * sizeof *col);
  if (!col) return 1;
  for (int k = 0; k < 4; k++) {
    for (int r = 0; r < rounds; r++) col[r] = v[4 * r + k];
    med[k] = median(col, rounds);
    lo[k] = col[0];
    hi[k] = col[rounds - 1];
  }
  printf("%-6s %10.1f %10.1f %10.1f %12.0f\n", "median", med[0], med[1], med[2], med[3]);
  printf("%-6s %4.0f-%-5.0f %4.0f-%-5.0f %4.0f-%-5.0f %6.0f-%-6.0f\n", "range", lo[0], hi[0], lo[1], hi[1], lo[2], hi[2],
         lo[3], hi[3]);
  char js[1024];
  int k0 = snprintf(js, sizeof js, "{\"bench\": \"safetensors_names\", \"names\": %ld, \"file_bytes\": %lld, \"rounds\": %d, \"threads\": 1",
                    n, (long long)sb.st_size, rounds);
  for (int k = 0; k < 4; k++)
    k0 += snprintf(js + k0, sizeof js - (size_t)k0, ", \"%s\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}", key[k],
                   med[k], lo[k], hi[k]);
  snprintf(js + k0, sizeof js - (size_t)k0, "}");
  printf("%s\n", js);
  FILE *jf = out ? fopen(out, "w") : NULL;
  if (jf) {
    fprintf(jf, "%s\n", js);
    fclose(jf);
  }
  free(col);
  free(v);
  return 0;
}

static int child(const char *mode, const char *path) {
  long base_peak, base_cur, peak, cur;
  ag_tensor *warm = ag_zeros(AG_CPU, AG_F32, 0, NULL); /* start the CPU backend first */
  ag_tensor_release(warm);
  rss_kb(&base_peak, &base_cur);
  double t0 = now_ms();
  void *whole = NULL;
  if (!strcmp(mode, "fread")) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    whole = malloc((size_t)n);
    if (!whole || fread(whole, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
  }
  ag_safetensors *st = NULL;
  if (ag_safetensors_open(path, &st) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  int n = ag_safetensors_count(st);
  ag_tensor **kept = calloc((size_t)n, sizeof *kept);
  if (strcmp(mode, "open") != 0)
    for (int i = 0; i < n; i++) {
      ag_tensor *t = ag_safetensors_get(st, ag_safetensors_name(st, i), AG_CPU);
      if (!t) {
        fprintf(stderr, "%s\n", ag_last_error());
        return 1;
      }
      if (!strcmp(mode, "load_keep")) kept[i] = t;
      else ag_tensor_release(t);
    }
  ag_status ss = ag_device_synchronize(AG_CPU);
  double ms = now_ms() - t0;
  if (ss != AG_OK) { /* a copy that failed: no time */
    fprintf(stderr, "synchronize: %s (%s)\n", ag_status_name(ss), ag_last_error());
    return 1;
  }
  rss_kb(&peak, &cur);
  for (int i = 0; i < n; i++) ag_tensor_release(kept[i]);
  free(kept);
  ag_safetensors_close(st);
  free(whole);
  printf("%ld %ld %.1f\n", base_cur, peak, ms);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--child")) return child(argv[2], argv[3]);
  if (argc == 4 && !strcmp(argv[1], "--child-names")) return child_names(argv[3], atol(argv[2]));
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--names")) return names_main(argc, argv);
  const char *out = argc > 1 ? argv[1] : "safetensors_bench.json";
  int64_t file_mb = argc > 2 ? atoll(argv[2]) : 256;
  int n = argc > 3 ? atoi(argv[3]) : 8;
  const char *dir = argc > 4 ? argv[4] : "/tmp";
  if (file_mb <= 0 || n <= 0) return 2;
  char path[512], self[512];
  snprintf(path, sizeof path, "%s/ag_safetensors_bench_%ld.safetensors", dir, (long)getpid());
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 1;
  self[sl] = 0;

  /* the file: n f32 tensors of file_mb/n MiB each */
  int64_t per = file_mb * 1024 * 1024 / 4 / n;
  ag_param_list l = {0};
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d.weight", i);
    ag_tensor *t = ag_full(AG_CPU, AG_F32, 1, &per, (double)i);
    if (!t || ag_params_add(&l, name, t) != AG_OK) {
      fprintf(stderr, "%s\n", ag_last_error());
      return 1;
    }
    ag_tensor_release(t);
  }
  if (ag_safetensors_save(path, &l, 0, NULL, NULL) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  ag_params_free(&l);

  const char *modes[] = {"open", "load", "load_keep", "fread"};
  double mib = 1024.0;
  FILE *js = fopen(out, "w");
  if (js) fprintf(js, "{\"file_mb\": %lld, \"tensors\": %d, \"largest_tensor_mb\": %.1f, \"modes\": [",
                  (long long)file_mb, n, per * 4 / 1048576.0);
  printf("safetensors load: file %lld MiB, %d tensors of %.1f MiB (f32), CPU device\n", (long long)file_mb, n,
         per * 4 / 1048576.0);
  printf("%-10s %12s %12s %14s %10s\n", "mode", "base MiB", "peak MiB", "peak-base MiB", "ms");
  int rc = 0;
  for (int m = 0; m < 4; m++) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' --child %s '%s'", self, modes[m], path);
    FILE *p = popen(cmd, "r");
    long base = -1, peak = -1;
    double ms = -1;
    if (!p || fscanf(p, "%ld %ld %lf", &base, &peak, &ms) != 3) rc = 1;
    if (p) pclose(p);
    printf("%-10s %12.1f %12.1f %14.1f %10.1f\n", modes[m], base / mib, peak / mib, (peak - base) / mib, ms);
    if (js)
      fprintf(js, "%s{\"mode\": \"%s\", \"base_mb\": %.1f, \"peak_mb\": %.1f, \"peak_over_base_mb\": %.1f, \"ms\": %.1f}",
              m ? ", " : "", modes[m], base / mib, peak / mib, (peak - base) / mib, ms);
  }
  if (js) {
    fprintf(js, "]}\n");
    fclose(js);
  }
  unlink(path);
  return rc;
}
