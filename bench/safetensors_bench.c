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
 * Prints a table and writes JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  ag_device_synchronize(AG_CPU);
  double ms = now_ms() - t0;
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
