/* A Linear forward with bias, folded (ag_linear_forward: the bias is
 * broadcast into the output and the GEMM runs with beta = 1) against the
 * unfolded form (ag_matmul with beta = 0, which OpenBLAS starts with a
 * zeroing pass over C, then ag_add), on the GPT step's Linear shapes,
 * in interleaved rounds (folded, unfolded, folded, ...): median and range.
 * Usage: linear_bench [--rounds R] [--reps N] [--threads T] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double one(const ag_linear *l, ag_tensor *x, bool folded, int reps) {
  double t0 = now_us();
  for (int r = 0; r < reps; r++) {
    ag_scope_begin();
    if (folded) {
      bench_result("linear_bench", ag_linear_forward(l, x), "ag_linear_forward");
    } else {
      ag_tensor *wt = ag_transpose(l->weight, 0, 1);
      bench_result("linear_bench", ag_add(ag_matmul(x, wt), l->bias), "ag_matmul + ag_add");
    }
    ag_scope_end();
  }
  double t = (now_us() - t0) / reps;
  bench_sync("linear_bench", AG_CPU, "synchronize"); /* after the clock: a failure, not a cost */
  return t;
}

int main(int argc, char **argv) {
  int rounds = 15, reps = 20, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
  }
  if (rounds < 1 || rounds > 99) rounds = 15;
  if (reps < 1) reps = 20;
  if (ag_set_num_threads(threads) != AG_OK) {
    fprintf(stderr, "linear_bench: %s\n", ag_last_error());
    return 2;
  }
  /* rows (batch 4 x T 64), in, out: GPT qkv, fc, proj, and a wide head */
  static const int64_t shapes[][3] = {{256, 256, 768}, {256, 256, 1024}, {256, 1024, 256}, {256, 256, 8192},
                                      {512, 512, 1536}};
  const int ns = (int)(sizeof shapes / sizeof *shapes);
  ag_generator *g = ag_generator_create(1);
  printf("linear_bench: %d threads (ag_get_num_threads), %d interleaved rounds x %d forwards, us per forward, "
         "median [min-max], no grad\n",
         ag_get_num_threads(), rounds, reps);
  printf("%-18s %24s %24s %7s\n", "rows x in -> out", "folded (beta=1)", "matmul + add", "ratio");
  ag_no_grad_begin();
  for (int s = 0; s < ns; s++) {
    ag_linear l;
    if (ag_linear_init(&l, AG_CPU, AG_F32, shapes[s][1], shapes[s][2], true, g) != AG_OK) {
      fprintf(stderr, "linear_bench: %s\n", ag_last_error());
      return 1;
    }
    const int64_t xs[2] = {shapes[s][0], shapes[s][1]};
    ag_tensor *x = ag_randn(AG_CPU, AG_F32, 2, xs, 0, 1, g);
    double t[2][99];
    one(&l, x, true, 2);
    one(&l, x, false, 2);
    for (int r = 0; r < rounds; r++)
      for (int k = 0; k < 2; k++) t[k][r] = one(&l, x, k == 0, reps);
    for (int k = 0; k < 2; k++) qsort(t[k], (size_t)rounds, sizeof(double), cmpd);
    char name[40];
    snprintf(name, sizeof name, "%lldx%lld->%lld", (long long)shapes[s][0], (long long)shapes[s][1],
             (long long)shapes[s][2]);
    printf("%-18s %8.1f [%6.1f-%6.1f] %8.1f [%6.1f-%6.1f] %7.3f\n", name, t[0][rounds / 2], t[0][0],
           t[0][rounds - 1], t[1][rounds / 2], t[1][0], t[1][rounds - 1], t[0][rounds / 2] / t[1][rounds / 2]);
    ag_tensor_release(x);
    ag_linear_free(&l);
  }
  ag_grad_mode_end();
  ag_generator_free(g);
  return 0;
}
