/* Sort of x [rows, cols] along the last dim on one device: the
 * synchronized time of ag_sort (values and indices) per shape, median and
 * range of --reps runs after one warm-up, as a table and as JSON (--json
 * FILE). Usage: sort_bench --device vulkan:0 [--shape ROWSxCOLS ...]
 * [--reps N] [--descending] [--json FILE]. Default shapes: 1x1048576 and
 * 1000x1000 (1M elements each, f32, values from a small set: many ties). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"

#define PROG "sort_bench"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *dev_s = NULL, *json = NULL;
  int reps = 5;
  bool desc = false;
  int64_t shapes[16][2];
  int nshape = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) dev_s = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--descending")) desc = true;
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc && nshape < 16) {
      long long r, c;
      if (sscanf(argv[++i], "%lldx%lld", &r, &c) != 2 || r < 1 || c < 1) {
        fprintf(stderr, "%s: bad --shape '%s' (ROWSxCOLS)\n", PROG, argv[i]);
        return 2;
      }
      shapes[nshape][0] = r;
      shapes[nshape++][1] = c;
    } else {
      fprintf(stderr, "usage: %s --device D [--shape ROWSxCOLS ...] [--reps N] [--descending] [--json FILE]\n", PROG);
      return 2;
    }
  }
  if (!dev_s || reps < 1 || reps > 1000) {
    fprintf(stderr, "%s: --device is required, --reps 1..1000\n", PROG);
    return 2;
  }
  if (!nshape) {
    shapes[0][0] = 1, shapes[0][1] = 1048576;
    shapes[1][0] = 1000, shapes[1][1] = 1000;
    nshape = 2;
  }
  ag_device d;
  bench_check(PROG, ag_device_parse(dev_s, &d), dev_s);
  FILE *jf = NULL;
  if (json && !(jf = fopen(json, "w"))) {
    fprintf(stderr, "%s: cannot write %s\n", PROG, json);
    return 1;
  }
  if (jf)
    fprintf(jf, "{\"device\": \"%s\", \"descending\": %s, \"reps\": %d, \"cases\": [", dev_s,
            desc ? "true" : "false", reps);
  printf("%-10s %-16s %12s %12s %12s\n", "device", "shape", "median_ms", "min_ms", "max_ms");
  double *t = malloc((size_t)reps * sizeof *t);
  if (!t) return 1;
  for (int c = 0; c < nshape; c++) {
    int64_t n = shapes[c][0] * shapes[c][1];
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return 1;
    uint32_t s = 7u;
    for (int64_t i = 0; i < n; i++) {
      s = s * 1664525u + 1013904223u;
      v[i] = (float)((s >> 8) % 100000) * 0.01f;
    }
    ag_tensor *x = bench_result(PROG, ag_from_host(d, AG_F32, 2, shapes[c], v), "ag_from_host");
    free(v);
    for (int r = -1; r < reps; r++) {
      ag_tensor *vals = NULL, *idx = NULL;
      double t0 = now_s();
      bench_check(PROG, ag_sort(x, 1, desc, &vals, &idx), "ag_sort");
      bench_sync(PROG, d, "ag_sort");
      if (r >= 0) t[r] = (now_s() - t0) * 1e3;
      ag_tensor_release(vals);
      ag_tensor_release(idx);
    }
    ag_tensor_release(x);
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    char sh[40];
    snprintf(sh, sizeof sh, "%lldx%lld", (long long)shapes[c][0], (long long)shapes[c][1]);
    printf("%-10s %-16s %12.3f %12.3f %12.3f\n", dev_s, sh, med, t[0], t[reps - 1]);
    if (jf)
      fprintf(jf, "%s{\"shape\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f}", c ? ", " : "", sh,
              med, t[0], t[reps - 1]);
  }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  free(t);
  return 0;
}
