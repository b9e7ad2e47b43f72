/* Fused scaled-dot-product attention against the unfused composition
 * (matmul, mask, softmax, matmul) on one device: forward + backward time at
 * each T, the two paths and the T values interleaved round by round
 * (median and range), and memory per step: what the forward keeps for
 * backward and the peak of the step, from the caching allocator's stats.
 *   attention_bench [--device cpu] [--T 256,1024] [--B 1] [--H 8] [--D 64]
 *                   [--rounds 5] [--causal 1] [--dtype f32] [--threads N]
 *                   [--mem-only | --no-mem] [--json] [--cpu-time]
 * Output: one line per (T, path), then the fused/unfused ratios; --json
 * adds one JSON line with every (T, path)'s times in ms (each round) and
 * memory in bytes (bench/attention_torch.py reads it). --cpu-time times
 * the process's CPU time (all threads) instead of the wall clock: on a
 * shared machine it leaves out the time the process waits for a core. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"

static bool g_cpu_time; /* --cpu-time: set once by main before any timing */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(g_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct setup {
  ag_device dev;
  ag_dtype dt;
  int64_t B, H, D;
  bool causal;
} setup;

/* One training step of attention alone: out = sdpa(q, k, v), loss =
 * sum(out * w), backward. Returns seconds; kept/peak in bytes when asked. */
static double step(const setup *s, int64_t T, bool fused, int64_t *kept, int64_t *peak) {
  int64_t shp[4] = {s->B, s->H, T, s->D};
  ag_scope_begin();
  ag_tensor *q = ag_randn(s->dev, s->dt, 4, shp, 0, 1, NULL), *k = ag_randn(s->dev, s->dt, 4, shp, 0, 1, NULL);
  ag_tensor *v = ag_randn(s->dev, s->dt, 4, shp, 0, 1, NULL), *w = ag_randn(s->dev, s->dt, 4, shp, 0, 1, NULL);
  ag_tensor_set_requires_grad(q, true);
  ag_tensor_set_requires_grad(k, true);
  ag_tensor_set_requires_grad(v, true);
  bench_sync("attention_bench", s->dev, "synchronize");
  ag_memory_stats st;
  ag_memory_reset_peak(s->dev);
  ag_memory_stats_get(s->dev, &st);
  const int64_t base = st.allocated_bytes[AG_POOL_ALL].current;
  double t0 = now_s();
  ag_tensor *o = fused ? ag_scaled_dot_product_attention(q, k, v, NULL, s->causal, 0, 0, NULL)
                       : ag_scaled_dot_product_attention_unfused(q, k, v, NULL, s->causal, 0, 0, NULL);
  ag_tensor *ow = ag_mul(o, w), *l = ag_sum(ow, 0, NULL, false);
  ag_tensor_release(ow);
  if (!l) {
    fprintf(stderr, "attention_bench: %s\n", ag_last_error());
    exit(1);
  }
  bench_sync("attention_bench", s->dev, "synchronize");
  ag_memory_stats_get(s->dev, &st);
  /* what the graph holds for backward, beyond the inputs (the loss and
   * the output count: both paths keep them) */
  if (kept) *kept = st.allocated_bytes[AG_POOL_ALL].current - base;
  if (ag_backward(l, NULL, false) != AG_OK) {
    fprintf(stderr, "attention_bench: %s\n", ag_last_error());
    exit(1);
  }
  bench_sync("attention_bench", s->dev, "synchronize");
  double t = now_s() - t0;
  ag_memory_stats_get(s->dev, &st);
  if (peak) *peak = st.allocated_bytes[AG_POOL_ALL].peak - base;
  ag_scope_end();
  return t;
}

int main(int argc, char **argv) {
  setup s = {AG_CPU, AG_F32, 1, 8, 64, true};
  const char *Ts = "256,1024", *devs = "cpu";
  int rounds = 5;
  bool mem_only = false, no_mem = false, json = false;
  int threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool *flag = !strcmp(a, "--mem-only") ? &mem_only : !strcmp(a, "--no-mem") ? &no_mem
                                                       : !strcmp(a, "--json")   ? &json
                                                       : !strcmp(a, "--cpu-time") ? &g_cpu_time
                                                                                : NULL;
    if (flag) {
      *flag = true;
      continue;
    }
    if (!v) {
      fprintf(stderr, "attention_bench: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--T")) Ts = v;
    else if (!strcmp(a, "--B")) s.B = atoll(v);
    else if (!strcmp(a, "--H")) s.H = atoll(v);
    else if (!strcmp(a, "--D")) s.D = atoll(v);
    else if (!strcmp(a, "--rounds")) rounds = atoi(v);
    else if (!strcmp(a, "--threads")) threads = atoi(v);
    else if (!strcmp(a, "--causal")) s.causal = atoi(v) != 0;
    else if (!strcmp(a, "--device")) devs = v;
    else if (!strcmp(a, "--dtype")) {
      if (ag_dtype_parse(v, &s.dt) != AG_OK) {
        fprintf(stderr, "attention_bench: %s\n", ag_last_error());
        return 2;
      }
    } else {
      fprintf(stderr, "attention_bench: unknown option %s\n", a);
      return 2;
    }
  }
  if (ag_device_parse(devs, &s.dev) != AG_OK) {
    fprintf(stderr, "attention_bench: %s\n", ag_last_error());
    return 2;
  }
  int64_t T[16];
  int nT = 0;
  for (const char *p = Ts; *p && nT < 16;) {
    T[nT++] = atoll(p);
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  if (rounds < 1) rounds = 1;
  if (threads > 0 && ag_set_num_threads(threads) != AG_OK) {
    fprintf(stderr, "attention_bench: %s\n", ag_last_error());
    return 2;
  }
  printf("attention_bench: %s %s B=%lld H=%lld D=%lld causal=%d, %d threads, %d rounds%s\n", devs,
         ag_dtype_name(s.dt), (long long)s.B, (long long)s.H, (long long)s.D, s.causal, ag_get_num_threads(),
         rounds, g_cpu_time ? ", process CPU time" : "");
  /* memory first: one step per (T, path), after a warm-up */
  int64_t kept[16][2] = {{0}}, peak[16][2] = {{0}};
  for (int i = 0; i < nT && !no_mem; i++)
    for (int f = 0; f < 2; f++) {
      step(&s, T[i], f == 1, NULL, NULL);
      step(&s, T[i], f == 1, &kept[i][f], &peak[i][f]);
    }
  for (int i = 0; i < nT && !no_mem; i++)
    printf("T=%-5lld memory kept for backward: fused %9.2f MiB  unfused %9.2f MiB  (fused/unfused %.3f);"
           " step peak: fused %9.2f MiB  unfused %9.2f MiB\n",
           (long long)T[i], kept[i][1] / 1048576.0, kept[i][0] / 1048576.0, (double)kept[i][1] / (double)kept[i][0],
           peak[i][1] / 1048576.0, peak[i][0] / 1048576.0);
  if (mem_only) {
    if (json) {
      printf("{\"bench\": \"attention\", \"threads\": %d, \"H\": %lld, \"D\": %lld, \"memory\": [", ag_get_num_threads(),
             (long long)s.H, (long long)s.D);
      for (int i = 0; i < nT; i++)
        printf("%s{\"T\": %lld, \"kept_fused\": %lld, \"kept_unfused\": %lld, \"peak_fused\": %lld, "
               "\"peak_unfused\": %lld}",
               i ? ", " : "", (long long)T[i], (long long)kept[i][1], (long long)kept[i][0], (long long)peak[i][1],
               (long long)peak[i][0]);
      printf("]}\n");
    }
    return 0;
  }
  double *t = calloc((size_t)(nT * 2 * rounds), sizeof(double));
  for (int i = 0; i < nT && no_mem; i++) /* the warm-up the memory pass gives otherwise */
    for (int f = 0; f < 2; f++) step(&s, T[i], f == 1, NULL, NULL);
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < nT; i++)
      for (int f = 0; f < 2; f++) {
        int ff = (r & 1) ? 1 - f : f; /* alternate which path goes first */
        t[(i * 2 + ff) * rounds + r] = step(&s, T[i], ff == 1, NULL, NULL);
      }
  for (int i = 0; i < nT; i++) {
    double med[2];
    for (int f = 0; f < 2; f++) {
      double *x = t + (i * 2 + f) * rounds;
      qsort(x, (size_t)rounds, sizeof(double), cmp_d);
      med[f] = x[rounds / 2];
      printf("T=%-5lld %-7s fwd+bwd median %9.2f ms  range [%.2f, %.2f]\n", (long long)T[i],
             f ? "fused" : "unfused", med[f] * 1e3, x[0] * 1e3, x[rounds - 1] * 1e3);
    }
    printf("T=%-5lld fused/unfused time %.3f\n", (long long)T[i], med[1] / med[0]);
  }
  if (json) { /* the times are sorted by now: each path's rounds in rising order */
    printf("{\"bench\": \"attention\", \"threads\": %d, \"H\": %lld, \"D\": %lld, \"rounds\": %d, "
           "\"clock\": \"%s\", \"runs\": [",
           ag_get_num_threads(), (long long)s.H, (long long)s.D, rounds, g_cpu_time ? "cpu" : "wall");
    for (int i = 0; i < nT; i++)
      for (int f = 0; f < 2; f++) {
        printf("%s{\"T\": %lld, \"path\": \"%s\", \"ms\": [", i || f ? ", " : "", (long long)T[i],
               f ? "fused" : "unfused");
        for (int r = 0; r < rounds; r++) printf("%s%.4f", r ? ", " : "", t[(i * 2 + f) * rounds + r] * 1e3);
        printf("]}");
      }
    printf("]}\n");
  }
  free(t);
  return 0;
}
