/* Matmul on one device (default vulkan:0): GFLOP/s of C = A @ B for square
 * N x N x N products, f32 and f16 inputs, A and B row-major ("nn") and B
 * transposed ("nt", B a transposed view, no copy). One process measures
 * one configuration of the backend (the AG_VULKAN_TEST switch it runs
 * under, e.g. gemm_generic); bench/vk_gemm.py runs the sides in
 * interleaved rounds and writes the median and range.
 *   vk_gemm_bench [--device vulkan:0] [--sizes 512,1024] [--dtypes f32,f16]
 *                 [--layouts nn,nt] [--reps 2]
 * Output: one JSON line per case: {"dtype", "n", "layout", "ms", "cpu_ms",
 * "gflops", "cpu_gflops"}: the median over reps of the wall time of one
 * synchronized product, and the process CPU time over the same span (the
 * device threads of a CPU implementation included: less sensitive to other
 * load on the machine than wall time). Each product is checked against
 * the CPU's before timing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"

#define PROG "vk_gemm_bench"

static double clk(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The largest |device - cpu| relative to the largest |cpu|: the product
 * must be the product before its time counts. */
static double check(ag_tensor *a, ag_tensor *b, ag_tensor *c, int64_t n) {
  ag_device cpu;
  bench_check(PROG, ag_device_parse("cpu", &cpu), "cpu device");
  ag_scope_begin();
  ag_tensor *ac = bench_result(PROG, ag_cast(bench_result(PROG, ag_to_device(a, cpu), "to cpu"), AG_F32), "cast");
  ag_tensor *bc = bench_result(PROG, ag_cast(bench_result(PROG, ag_to_device(b, cpu), "to cpu"), AG_F32), "cast");
  ag_tensor *ref = bench_result(PROG, ag_matmul(ac, bc), "cpu matmul");
  ag_tensor *got = bench_result(PROG, ag_cast(bench_result(PROG, ag_to_device(c, cpu), "to cpu"), AG_F32), "cast");
  size_t bytes = (size_t)(n * n) * sizeof(float);
  float *r = malloc(bytes), *g = malloc(bytes);
  if (!r || !g) {
    fprintf(stderr, "%s: out of memory\n", PROG);
    exit(1);
  }
  bench_check(PROG, ag_to_host(ref, r, bytes), "to host");
  bench_check(PROG, ag_to_host(got, g, bytes), "to host");
  double md = 0, mr = 0;
  for (int64_t i = 0; i < n * n; i++) {
    double d = fabs((double)g[i] - (double)r[i]);
    if (!(d <= md)) md = d; /* NaN stays */
    if (fabs((double)r[i]) > mr) mr = fabs((double)r[i]);
  }
  free(r);
  free(g);
  ag_scope_end();
  return md / (mr > 0 ? mr : 1);
}

int main(int argc, char **argv) {
  const char *dev_s = "vulkan:0", *sizes = "512,1024", *dtypes = "f32,f16", *layouts = "nn,nt";
  int reps = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) dev_s = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc) dtypes = argv[++i];
    else if (!strcmp(argv[i], "--layouts") && i + 1 < argc) layouts = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--device D] [--sizes 512,1024] [--dtypes f32,f16] [--layouts nn,nt] [--reps R]\n",
              PROG);
      return 2;
    }
  }
  if (reps < 1 || reps > 64) {
    fprintf(stderr, "%s: --reps must be 1 to 64\n", PROG);
    return 2;
  }
  ag_device dev;
  bench_check(PROG, ag_device_parse(dev_s, &dev), "device");
  char dbuf[64], sbuf[128], lbuf[32];
  snprintf(dbuf, sizeof dbuf, "%s", dtypes);
  for (char *ds = NULL, *dt_s = strtok_r(dbuf, ",", &ds); dt_s; dt_s = strtok_r(NULL, ",", &ds)) {
    ag_dtype dt = !strcmp(dt_s, "f16") ? AG_F16 : AG_F32;
    if (strcmp(dt_s, "f16") && strcmp(dt_s, "f32")) {
      fprintf(stderr, "%s: dtype %s is not f32 or f16\n", PROG, dt_s);
      return 2;
    }
    snprintf(sbuf, sizeof sbuf, "%s", sizes);
    for (char *ss = NULL, *n_s = strtok_r(sbuf, ",", &ss); n_s; n_s = strtok_r(NULL, ",", &ss)) {
      int64_t n = atoll(n_s);
      if (n < 1 || n > 16384) {
        fprintf(stderr, "%s: size %s is not 1 to 16384\n", PROG, n_s);
        return 2;
      }
      snprintf(lbuf, sizeof lbuf, "%s", layouts);
      for (char *ls = NULL, *lay = strtok_r(lbuf, ",", &ls); lay; lay = strtok_r(NULL, ",", &ls)) {
        bool nt = !strcmp(lay, "nt");
        if (!nt && strcmp(lay, "nn")) {
          fprintf(stderr, "%s: layout %s is not nn or nt\n", PROG, lay);
          return 2;
        }
        ag_scope_begin();
        int64_t shp[2] = {n, n};
        ag_tensor *a = bench_result(PROG, ag_randn(dev, dt, 2, shp, 0, 1, NULL), "randn");
        ag_tensor *b = bench_result(PROG, ag_randn(dev, dt, 2, shp, 0, 1, NULL), "randn");
        if (nt) b = bench_result(PROG, ag_transpose(b, 0, 1), "transpose");
        ag_tensor *c = bench_result(PROG, ag_matmul(a, b), "matmul");
        double err = check(a, b, c, n);
        if (!(err < (dt == AG_F16 ? 1e-2 : 1e-4))) {
          fprintf(stderr, "%s: %s %lld %s: relative error %g; no time reported\n", PROG, dt_s, (long long)n, lay,
                  err);
          return 1;
        }
        double ms[64], cpu[64];
        for (int r = 0; r < reps; r++) {
          bench_sync(PROG, dev, "synchronize");
          double w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
          ag_tensor *t = bench_result(PROG, ag_matmul(a, b), "matmul");
          bench_sync(PROG, dev, "synchronize");
          ms[r] = 1e3 * (clk(CLOCK_MONOTONIC) - w0);
          cpu[r] = 1e3 * (clk(CLOCK_PROCESS_CPUTIME_ID) - c0);
          ag_tensor_release(t);
        }
        qsort(ms, (size_t)reps, sizeof *ms, cmp_d);
        qsort(cpu, (size_t)reps, sizeof *cpu, cmp_d);
        double wm = ms[reps / 2], cm = cpu[reps / 2], fl = 2.0 * (double)n * (double)n * (double)n;
        printf("{\"dtype\": \"%s\", \"n\": %lld, \"layout\": \"%s\", \"ms\": %.3f, \"cpu_ms\": %.3f, "
               "\"gflops\": %.4f, \"cpu_gflops\": %.4f, \"rel_err\": %.3g}\n",
               dt_s, (long long)n, lay, wm, cm, fl / (wm * 1e6), fl / (cm * 1e6), err);
        fflush(stdout);
        ag_scope_end();
      }
    }
  }
  return 0;
}
