/* Optimizer updates against memory bandwidth: AdamW and SGD with momentum on
 * one f32 parameter of N elements, in GB/s of parameter + state traffic
 * (AdamW reads p, g, m, v and writes p, m, v: 28 B per element; SGD reads p,
 * g, buf and writes p, buf: 20 B), beside memcpy (read + write: 8 B per
 * float) in interleaved rounds. Goal: AdamW >= 70% of memcpy's GB/s.
 * Usage: optim_bench [--numel N] [--rounds R] [--threads T] [--json PATH] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int64_t n = 16 << 20;
  int rounds = 9, threads = 1;
  const char *json = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--numel")) n = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
  }
  if (rounds < 1 || rounds > 99) rounds = 9;
  if (ag_set_num_threads(threads) != AG_OK) {
    fprintf(stderr, "optim_bench: %s\n", ag_last_error());
    return 2;
  }
  ag_generator *gen = ag_generator_create(1);
  ag_tensor *p[2];
  ag_param_list pl[2] = {{0}};
  ag_optimizer *opt[2];
  for (int k = 0; k < 2; k++) {
    p[k] = ag_randn(AG_CPU, AG_F32, 1, &n, 0, 1, gen);
    ag_tensor_set_requires_grad(p[k], true);
    ag_params_add(&pl[k], "w", p[k]);
    ag_scope_begin();
    ag_backward(ag_sum(ag_mul(p[k], p[k]), 0, NULL, false), NULL, false); /* grad = 2p */
    ag_scope_end();
  }
  ag_adamw_options ao = ag_adamw_defaults();
  ao.lr = 1e-6;
  opt[0] = ag_adamw_create(&pl[0], &ao);
  ag_sgd_options so = {.lr = 1e-6, .momentum = 0.9};
  opt[1] = ag_sgd_create(&pl[1], &so);
  float *src = malloc((size_t)n * 4), *dst = malloc((size_t)n * 4);
  if (!opt[0] || !opt[1] || !src || !dst) {
    fprintf(stderr, "optim_bench: setup failed: %s\n", ag_last_error());
    return 1;
  }
  memset(src, 1, (size_t)n * 4);
  memset(dst, 0, (size_t)n * 4);
  for (int k = 0; k < 2; k++) /* state allocated and touched */
    bench_check("optim_bench", ag_optimizer_step(opt[k]), "ag_optimizer_step");
  bench_sync("optim_bench", AG_CPU, "synchronize");
  double t[3][100];
  for (int r = 0; r < rounds; r++) {
    double t0 = now_s();
    memcpy(dst, src, (size_t)n * 4);
    t[0][r] = now_s() - t0;
    for (int k = 0; k < 2; k++) {
      t0 = now_s();
      ag_status st = ag_optimizer_step(opt[k]);
      ag_status ss = ag_device_synchronize(AG_CPU);
      t[1 + k][r] = now_s() - t0;
      bench_check("optim_bench", st != AG_OK ? st : ss, "ag_optimizer_step"); /* no time for a failed step */
    }
    src[r] += dst[r]; /* keep the copy observable */
  }
  const char *name[3] = {"memcpy", "adamw", "sgd_momentum"};
  const double bytes[3] = {8.0 * n, 28.0 * n, 20.0 * n};
  double gbs[3], lo[3], hi[3];
  for (int k = 0; k < 3; k++) {
    qsort(t[k], (size_t)rounds, sizeof(double), cmpd);
    gbs[k] = bytes[k] / t[k][rounds / 2] / 1e9;
    lo[k] = bytes[k] / t[k][rounds - 1] / 1e9;
    hi[k] = bytes[k] / t[k][0] / 1e9;
  }
  printf("optim_bench: f32, %lld elements, %d interleaved rounds, ag_set_num_threads(%d); GB/s median [min-max]\n",
         (long long)n, rounds, threads);
  for (int k = 0; k < 3; k++)
    printf("%-13s %7.2f [%6.2f-%6.2f] GB/s  %5.0f%% of memcpy\n", name[k], gbs[k], lo[k], hi[k], 100 * gbs[k] / gbs[0]);
  printf("goal: adamw >= 70%% of memcpy\n");
  if (json) {
    FILE *f = fopen(json, "w");
    if (f) {
      fprintf(f, "{\"numel\": %lld, \"threads\": %d, \"rounds\": %d", (long long)n, threads, rounds);
      for (int k = 0; k < 3; k++) fprintf(f, ", \"%s_gbs\": [%.3f, %.3f, %.3f]", name[k], gbs[k], lo[k], hi[k]);
      fprintf(f, ", \"adamw_vs_memcpy\": %.3f}\n", gbs[1] / gbs[0]);
      fclose(f);
    }
  }
  printf("(checksum %g)\n", (double)src[0]);
  for (int k = 0; k < 2; k++) {
    ag_optimizer_free(opt[k]);
    ag_params_free(&pl[k]);
    ag_tensor_release(p[k]);
  }
  ag_generator_free(gen);
  free(src);
  free(dst);
  return 0;
}
