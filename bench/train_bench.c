/* Training-step time on a device against PyTorch CPU in the same run:
 * (a) MLP 784-1024-1024-10, batch 128, AdamW (compute bound) and
 * (b) MLP 64-64-10, batch 32, SGD with momentum (host-overhead bound).
 * Prints a table and writes JSON (--json PATH). The goal: (a) at most 0.8
 * and (b) at most 0.2 of PyTorch's time.
 * Rounds interleave anygrad and PyTorch; median and range are reported.
 * Usage: train_bench [--device D] [--steps-a N] [--steps-b N] [--json PATH]
 *                    [--torch PATH/train_torch.py] [--threads N] [--rounds R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Milliseconds per step (forward, backward, optimizer), synchronising only
 * at the end so queued work is counted once. */
static double bench(ag_device d, int n, const int64_t *sizes, int64_t batch, bool adamw, int steps) {
  ag_generator *g = ag_generator_create(1);
  ag_mlp m;
  if (ag_mlp_init(&m, d, AG_F32, n, sizes, AG_ACT_RELU, g) != AG_OK) return -1;
  ag_optimizer *opt;
  if (adamw) {
    ag_adamw_options o = ag_adamw_defaults();
    opt = ag_adamw_create(&m.params, &o);
  } else {
    ag_sgd_options o = {.lr = 0.01, .momentum = 0.9};
    opt = ag_sgd_create(&m.params, &o);
  }
  int64_t xs[2] = {batch, sizes[0]};
  ag_tensor *x = ag_randn(d, AG_F32, 2, xs, 0, 1, g);
  int32_t *yh = malloc((size_t)batch * sizeof *yh);
  for (int64_t i = 0; i < batch; i++) yh[i] = (int32_t)(i % sizes[n - 1]);
  ag_tensor *y = ag_from_host(d, AG_I32, 1, &batch, yh);
  double t0 = 0;
  int warm = steps / 10 > 3 ? steps / 10 : 3;
  ag_status st = AG_OK;
  for (int s = 0; s < warm + steps && st == AG_OK; s++) {
    if (s == warm) {
      st = ag_device_synchronize(d);
      t0 = now_ms();
    }
    ag_scope_begin();
    ag_tensor *loss = ag_cross_entropy(ag_mlp_forward(&m, x), y, AG_REDUCTION_MEAN, -1);
    st = ag_backward(loss, NULL, false);
    if (st == AG_OK) st = ag_optimizer_step(opt);
    ag_optimizer_zero_grad(opt);
    ag_scope_end();
  }
  ag_status ss = ag_device_synchronize(d); /* what ran asynchronously reports here */
  double ms = (now_ms() - t0) / steps;
  if (st == AG_OK) st = ss;
  if (st != AG_OK) {
    fprintf(stderr, "train_bench: %s\n", ag_last_error());
    ms = -1;
  }
  free(yh);
  ag_tensor_release(x);
  ag_tensor_release(y);
  ag_optimizer_free(opt);
  ag_mlp_free(&m);
  ag_generator_free(g);
  return ms;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median, min, max of v[0..n) (sorted in place) */
static void mmm(double *v, int n, double out[3]) {
  qsort(v, (size_t)n, sizeof *v, cmpd);
  out[0] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  out[1] = v[0];
  out[2] = v[n - 1];
}

#define MAXR 32

int main(int argc, char **argv) {
  ag_device d = AG_CPU;
  int steps_a = 30, steps_b = 2000, threads = 0, rounds = 5;
  const char *json = NULL, *torch = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--device") && ag_device_parse(argv[i + 1], &d) != AG_OK) {
      fprintf(stderr, "%s\n", ag_last_error());
      return 2;
    } else if (!strcmp(argv[i], "--steps-a")) steps_a = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps-b")) steps_b = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
    else if (!strcmp(argv[i], "--torch")) torch = argv[i + 1];
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
  }
  if (rounds < 1) rounds = 1;
  if (rounds > MAXR) rounds = MAXR;
  if (threads > 0 && ag_set_num_threads(threads) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 2;
  }
  threads = ag_get_num_threads(); /* PyTorch gets the same count */
  const int64_t a_sizes[4] = {784, 1024, 1024, 10}, b_sizes[3] = {64, 64, 10};
  /* Interleaved rounds (anygrad, PyTorch, anygrad, ...): on a shared machine
   * the load changes between runs, and back-to-back blocks measure it. */
  double ra[MAXR], rb[MAXR], rta[MAXR], rtb[MAXR];
  int nt = 0;
  bool failed = false;
  for (int r = 0; r < rounds; r++) {
    ra[r] = bench(d, 4, a_sizes, 128, true, steps_a);
    rb[r] = bench(d, 3, b_sizes, 32, false, steps_b);
    failed |= ra[r] < 0 || rb[r] < 0;
    if (!torch) continue;
    char cmd[1024];
    /* PyTorch runs on the same kind of device (CUDA for cuda and hip);
     * AG_PYTHON names the interpreter that has torch. */
    const char *py = getenv("AG_PYTHON");
    const char *tdev = (d.backend == AG_BACKEND_CUDA || d.backend == AG_BACKEND_HIP) ? "cuda" : "cpu";
    snprintf(cmd, sizeof cmd, "%s %s %d %d %d %s 2>/dev/null", py && *py ? py : "/usr/bin/python3", torch, steps_a,
             steps_b, threads, tdev);
    FILE *p = popen(cmd, "r");
    char line[512] = "";
    double ta = -1, tb = -1;
    if (p && fgets(line, sizeof line, p)) {
      char *s = strstr(line, "\"a_ms\": ");
      if (s) ta = atof(s + 8);
      s = strstr(line, "\"b_ms\": ");
      if (s) tb = atof(s + 8);
    }
    if (p) pclose(p);
    if (ta > 0 && tb > 0) {
      rta[nt] = ta;
      rtb[nt++] = tb;
    }
  }
  if (failed) { /* bench() printed why; a round that failed has no time, so none is printed */
    fprintf(stderr, "train_bench: a training step failed: no time reported\n");
    return 1;
  }
  double a[3], b[3], ta[3] = {-1, -1, -1}, tb[3] = {-1, -1, -1};
  mmm(ra, rounds, a);
  mmm(rb, rounds, b);
  if (nt) {
    mmm(rta, nt, ta);
    mmm(rtb, nt, tb);
  }
  char dn[32];
  ag_device_str(d, dn, sizeof dn);
  printf("%d interleaved rounds; ms per step, median [min-max]\n", rounds);
  printf("%-38s %22s %22s %7s %5s\n", "training step", "anygrad ms", "torch ms", "ratio", "goal");
  printf("%-38s %8.3f [%5.2f-%5.2f] %8.3f [%5.2f-%5.2f] %7.3f %5s\n", "(a) MLP 784-1024-1024-10 b128 AdamW", a[0], a[1],
         a[2], ta[0], ta[1], ta[2], ta[0] > 0 ? a[0] / ta[0] : -1, "0.8");
  printf("%-38s %8.4f [%5.3f-%5.3f] %8.4f [%5.3f-%5.3f] %7.3f %5s\n", "(b) MLP 64-64-10 b32 SGD", b[0], b[1], b[2],
         tb[0], tb[1], tb[2], tb[0] > 0 ? b[0] / tb[0] : -1, "0.2");
  printf("device %s; threads: anygrad ag_get_num_threads() = %d (f32 GEMM: %s), torch.set_num_threads(%d) and its "
         "BLAS the same (bench/torch_setup.py)\n",
         dn, threads, ag_cpu_gemm_engine(), threads);
  if (json) {
    FILE *f = fopen(json, "w");
    if (f) {
      fprintf(f,
              "{\"device\": \"%s\", \"threads\": %d, \"rounds\": %d, \"a\": {\"anygrad_ms\": [%.4f, %.4f, %.4f], "
              "\"torch_ms\": [%.4f, %.4f, %.4f], \"ratio\": %.4f, \"goal\": 0.8}, \"b\": {\"anygrad_ms\": [%.5f, %.5f, "
              "%.5f], \"torch_ms\": [%.5f, %.5f, %.5f], \"ratio\": %.4f, \"goal\": 0.2}}\n",
              dn, threads, rounds, a[0], a[1], a[2], ta[0], ta[1], ta[2], ta[0] > 0 ? a[0] / ta[0] : -1, b[0], b[1],
              b[2], tb[0], tb[1], tb[2], tb[0] > 0 ? b[0] / tb[0] : -1);
      fclose(f);
    }
  }
  return failed;
}
