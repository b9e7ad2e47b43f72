/* The vision benchmarks of issue 17, in one run (never run by CTest):
 * (a) the Fashion-MNIST CNN's training step (conv-bn-relu-pool x2 + linear,
 *     AdamW, batch 128) beside PyTorch eager on the same shapes (goal 0.8);
 * (b) conv2d forward and forward+backward GFLOP/s per device (and PyTorch's
 *     on the CPU); the emulated GPU only proves the kernels, its times are
 *     CPU times of an interpreter-like emulator;
 * (c) the CNN's memory per batch size by allocator category, after the
 *     forward (what the backward keeps) and at the step's peak;
 * (d) conv2d forward on one thread: im2col + GEMM (the CPU backend) against
 *     a register-blocked direct kernel written here.
 * Rounds interleave anygrad and PyTorch (A B A B); median [min-max].
 * Usage: cnn_bench [--threads N] [--rounds R] [--steps N] [--devices a,b]
 *                  [--torch bench/cnn_torch.py] [--json PATH] [--step-only]
 * --step-only: (a) alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "bench_util.h"

#define MAXR 32

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median, min, max of v[0..n) (sorted in place); -1s when n == 0 */
static void mmm(double *v, int n, double out[3]) {
  if (n <= 0) {
    out[0] = out[1] = out[2] = -1;
    return;
  }
  qsort(v, (size_t)n, sizeof *v, cmpd);
  out[0] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  out[1] = v[0];
  out[2] = v[n - 1];
}

/* ---- (a) the CNN of models/cnn.c ---- */

typedef struct cnn {
  ag_conv2d_layer c1, c2;
  ag_batch_norm2d b1, b2;
  ag_linear fc;
  ag_param_list params;
} cnn;

static ag_status cnn_init(cnn *m, ag_device d, ag_generator *g) {
  memset(m, 0, sizeof *m);
  ag_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  ag_status st = ag_conv2d_layer_init(&m->c1, d, AG_F32, 1, 16, 3, 3, &p, false, g);
  if (st == AG_OK) st = ag_batch_norm2d_init(&m->b1, d, AG_F32, 16, 0.1, 1e-5);
  if (st == AG_OK) st = ag_conv2d_layer_init(&m->c2, d, AG_F32, 16, 32, 3, 3, &p, false, g);
  if (st == AG_OK) st = ag_batch_norm2d_init(&m->b2, d, AG_F32, 32, 0.1, 1e-5);
  if (st == AG_OK) st = ag_linear_init(&m->fc, d, AG_F32, 32 * 7 * 7, 10, true, g);
  if (st == AG_OK) st = ag_conv2d_layer_params(&m->c1, "c1.", &m->params);
  if (st == AG_OK) st = ag_batch_norm2d_params(&m->b1, "b1.", &m->params);
  if (st == AG_OK) st = ag_conv2d_layer_params(&m->c2, "c2.", &m->params);
  if (st == AG_OK) st = ag_batch_norm2d_params(&m->b2, "b2.", &m->params);
  if (st == AG_OK) st = ag_linear_params(&m->fc, "fc.", &m->params);
  return st;
}

static void cnn_free(cnn *m) {
  ag_conv2d_layer_free(&m->c1);
  ag_conv2d_layer_free(&m->c2);
  ag_batch_norm2d_free(&m->b1);
  ag_batch_norm2d_free(&m->b2);
  ag_linear_free(&m->fc);
  ag_params_free(&m->params);
}

/* Inside a scope: every intermediate is released at its end. */
static ag_tensor *cnn_forward(cnn *m, ag_tensor *x) {
  static const ag_pool2d_params pool = {{2, 2}, {2, 2}, {0, 0}, false};
  ag_tensor *a = ag_max_pool2d(ag_relu(ag_batch_norm2d_forward(&m->b1, ag_conv2d_layer_forward(&m->c1, x), true)),
                               &pool);
  ag_tensor *b = ag_max_pool2d(ag_relu(ag_batch_norm2d_forward(&m->b2, ag_conv2d_layer_forward(&m->c2, a), true)),
                               &pool);
  int64_t s[2] = {ag_tensor_shape(x)[0], 32 * 7 * 7};
  return ag_linear_forward(&m->fc, ag_reshape(b, 2, s));
}

typedef struct batch {
  ag_tensor *x, *y;
} batch;

static batch make_batch(ag_device d, int64_t B, ag_generator *g) {
  int64_t xs[4] = {B, 1, 28, 28};
  int32_t *yh = malloc((size_t)B * sizeof *yh);
  for (int64_t i = 0; i < B; i++) yh[i] = (int32_t)((i * 7) % 10);
  batch b = {ag_randn(d, AG_F32, 4, xs, 0, 1, g), ag_from_host(d, AG_I32, 1, &B, yh)};
  free(yh);
  return b;
}

/* ms per training step (forward, backward, AdamW), synchronised at the end. */
static double bench_step(ag_device d, int64_t B, int steps) {
  ag_generator *g = ag_generator_create(1);
  cnn m;
  double ms = -1;
  if (cnn_init(&m, d, g) == AG_OK) {
    ag_adamw_options o = ag_adamw_defaults();
    o.lr = 3e-3;
    o.weight_decay = 1e-4;
    ag_optimizer *opt = ag_adamw_create(&m.params, &o);
    batch bt = make_batch(d, B, g);
    ag_status st = opt && bt.x && bt.y ? AG_OK : ag_last_status();
    double t0 = 0;
    const int warm = 3;
    for (int s = 0; s < warm + steps && st == AG_OK; s++) {
      if (s == warm) {
        st = ag_device_synchronize(d);
        t0 = now_ms();
      }
      ag_scope_begin();
      ag_tensor *loss = ag_cross_entropy(cnn_forward(&m, bt.x), bt.y, AG_REDUCTION_MEAN, -1);
      st = ag_backward(loss, NULL, false);
      if (st == AG_OK) st = ag_optimizer_step(opt);
      ag_optimizer_zero_grad(opt);
      ag_scope_end();
    }
    ag_status ss = ag_device_synchronize(d); /* what ran asynchronously reports here */
    if (st == AG_OK) st = ss;
    bench_check("cnn_bench", st, "training step"); /* no time for a step that failed */
    ms = (now_ms() - t0) / steps;
    ag_tensor_release(bt.x);
    ag_tensor_release(bt.y);
    ag_optimizer_free(opt);
  } else {
    bench_check("cnn_bench", ag_last_status(), "model");
  }
  cnn_free(&m);
  ag_generator_free(g);
  return ms;
}

/* ---- (b) conv2d throughput ---- */

typedef struct cshape {
  const char *name;
  int64_t x[4], w[4];
} cshape;

static const cshape k_shapes[] = {
    {"CNN conv1 x[128,1,28,28] w[16,1,3,3]", {128, 1, 28, 28}, {16, 1, 3, 3}},
    {"CNN conv2 x[128,16,14,14] w[32,16,3,3]", {128, 16, 14, 14}, {32, 16, 3, 3}},
    {"x[32,64,32,32] w[64,64,3,3]", {32, 64, 32, 32}, {64, 64, 3, 3}},
};
#define NSHAPES ((int)(sizeof k_shapes / sizeof *k_shapes))

/* forward FLOPs of a 3x3 pad-1 stride-1 conv (the output has the input's size) */
static double conv_flops(const cshape *s) {
  return 2.0 * (double)s->x[0] * s->w[0] * s->x[2] * s->x[3] * s->w[1] * s->w[2] * s->w[3];
}

/* ms per forward (bwd = false) or forward + backward of x and w (bwd). */
static double bench_conv(ag_device d, const cshape *s, bool bwd, int iters) {
  static const ag_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  ag_generator *g = ag_generator_create(2);
  ag_tensor *x = ag_randn(d, AG_F32, 4, s->x, 0, 1, g), *w = ag_randn(d, AG_F32, 4, s->w, 0, 0.1, g);
  int64_t ys[4] = {s->x[0], s->w[0], s->x[2], s->x[3]};
  ag_tensor *gy = ag_randn(d, AG_F32, 4, ys, 0, 1, g);
  double ms = -1;
  ag_status st = x && w && gy ? AG_OK : ag_last_status();
  if (bwd && st == AG_OK) {
    ag_tensor_set_requires_grad(x, true);
    ag_tensor_set_requires_grad(w, true);
  }
  double t0 = 0;
  for (int it = 0; it < iters + 1 && st == AG_OK; it++) {
    if (it == 1) {
      st = ag_device_synchronize(d);
      t0 = now_ms();
    }
    ag_scope_begin();
    if (!bwd) ag_no_grad_begin();
    ag_tensor *y = ag_conv2d(x, w, NULL, &p);
    if (!bwd) ag_grad_mode_end();
    if (!y) st = ag_last_status();
    else if (bwd) st = ag_backward(y, gy, false);
    ag_scope_end();
  }
  ag_status ss = ag_device_synchronize(d);
  if (st == AG_OK) st = ss;
  bench_check("cnn_bench", st, "conv2d"); /* no time for a convolution that failed */
  ms = (now_ms() - t0) / iters;
  ag_tensor_release(x);
  ag_tensor_release(w);
  ag_tensor_release(gy);
  ag_generator_free(g);
  return ms;
}

/* ---- (d) a direct kernel: forward, stride 1, groups 1, one thread ---- */

/* Four output channels at a time: each input row segment is loaded once per
 * tap for four accumulating rows; the inner loop over ow vectorises. */
static void direct_conv(const float *x, const float *w, float *y, int64_t N, int64_t C, int64_t H, int64_t W,
                        int64_t Co, int64_t kh, int64_t kw, int64_t ph, int64_t pw) {
  const int64_t Ho = H + 2 * ph - kh + 1, Wo = W + 2 * pw - kw + 1, P = Ho * Wo;
  memset(y, 0, sizeof(float) * (size_t)(N * Co * P));
  for (int64_t n = 0; n < N; n++)
    for (int64_t co = 0; co < Co; co += 4) {
      const int64_t cb = Co - co < 4 ? Co - co : 4;
      float *yb = y + (n * Co + co) * P;
      for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < kh; i++)
          for (int64_t j = 0; j < kw; j++) {
            float wv[4] = {0, 0, 0, 0};
            for (int64_t b = 0; b < cb; b++) wv[b] = w[(((co + b) * C + c) * kh + i) * kw + j];
            const int64_t ow0 = pw - j > 0 ? pw - j : 0, ow1 = W + pw - j < Wo ? W + pw - j : Wo;
            for (int64_t oh = 0; oh < Ho; oh++) {
              const int64_t ih = oh + i - ph;
              if (ih < 0 || ih >= H) continue;
              const float *xr = x + ((n * C + c) * H + ih) * W + j - pw;
              float *y0 = yb + oh * Wo, *y1 = y0 + P, *y2 = y1 + P, *y3 = y2 + P;
              if (cb == 4)
                for (int64_t ow = ow0; ow < ow1; ow++) {
                  const float v = xr[ow];
                  y0[ow] += wv[0] * v;
                  y1[ow] += wv[1] * v;
                  y2[ow] += wv[2] * v;
                  y3[ow] += wv[3] * v;
                }
              else
                for (int64_t b = 0; b < cb; b++)
                  for (int64_t ow = ow0; ow < ow1; ow++) yb[b * P + oh * Wo + ow] += wv[b] * xr[ow];
            }
          }
    }
}

static double bench_direct(const cshape *s, int iters, double *max_diff) {
  int64_t nx = s->x[0] * s->x[1] * s->x[2] * s->x[3], nw = s->w[0] * s->w[1] * s->w[2] * s->w[3];
  int64_t ny = s->x[0] * s->w[0] * s->x[2] * s->x[3];
  float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw),
        *y = malloc(sizeof(float) * (size_t)ny), *ref = malloc(sizeof(float) * (size_t)ny);
  unsigned seed = 5;
  for (int64_t i = 0; i < nx; i++) x[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
  for (int64_t i = 0; i < nw; i++) w[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
  direct_conv(x, w, y, s->x[0], s->x[1], s->x[2], s->x[3], s->w[0], s->w[2], s->w[3], 1, 1);
  double t0 = now_ms();
  for (int it = 0; it < iters; it++)
    direct_conv(x, w, y, s->x[0], s->x[1], s->x[2], s->x[3], s->w[0], s->w[2], s->w[3], 1, 1);
  double ms = (now_ms() - t0) / iters;
  /* the same result as the backend's conv2d (the direct kernel is checked) */
  ag_tensor *tx = ag_from_host(AG_CPU, AG_F32, 4, s->x, x), *tw = ag_from_host(AG_CPU, AG_F32, 4, s->w, w);
  static const ag_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
  ag_tensor *ty = ag_conv2d(tx, tw, NULL, &p);
  *max_diff = -1;
  if (ty && ag_to_host(ty, ref, sizeof(float) * (size_t)ny) == AG_OK) {
    *max_diff = 0;
    for (int64_t i = 0; i < ny; i++) *max_diff = fmax(*max_diff, fabs((double)ref[i] - y[i]));
  }
  ag_tensor_release(tx);
  ag_tensor_release(tw);
  ag_tensor_release(ty);
  free(x);
  free(w);
  free(y);
  free(ref);
  return ms;
}

/* ---- (c) memory by category ---- */

typedef struct memrow {
  int64_t batch;
  double after_fwd[AG_MEM_CATEGORY_COUNT]; /* MiB held after the forward */
  double peak_alloc;                       /* MiB allocated at the step's peak */
  double act_peak;                         /* MiB of activations at their peak */
} memrow;

static memrow bench_memory(ag_device d, int64_t B) {
  memrow r;
  memset(&r, 0, sizeof r);
  r.batch = B;
  ag_generator *g = ag_generator_create(3);
  cnn m;
  if (cnn_init(&m, d, g) != AG_OK) return r;
  ag_adamw_options o = ag_adamw_defaults();
  ag_optimizer *opt = ag_adamw_create(&m.params, &o);
  batch bt = make_batch(d, B, g);
  for (int step = 0; step < 2; step++) { /* the second step has optimizer state and cached blocks */
    ag_device_synchronize(d);
    ag_memory_reset_peak(d);
    ag_scope_begin();
    ag_tensor *loss = ag_cross_entropy(cnn_forward(&m, bt.x), bt.y, AG_REDUCTION_MEAN, -1);
    ag_memory_stats ms;
    if (step == 1 && ag_memory_stats_get(d, &ms) == AG_OK)
      for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++) r.after_fwd[c] = ms.category_bytes[c].current / 1048576.0;
    ag_backward(loss, NULL, false);
    ag_optimizer_step(opt);
    ag_optimizer_zero_grad(opt);
    ag_scope_end();
    ag_device_synchronize(d);
    if (step == 1 && ag_memory_stats_get(d, &ms) == AG_OK) {
      r.peak_alloc = ms.allocated_bytes[AG_POOL_ALL].peak / 1048576.0;
      r.act_peak = ms.category_bytes[AG_MEM_ACTIVATIONS].peak / 1048576.0;
    }
  }
  ag_tensor_release(bt.x);
  ag_tensor_release(bt.y);
  ag_optimizer_free(opt);
  cnn_free(&m);
  ag_generator_free(g);
  return r;
}

/* ---- PyTorch ---- */

/* Runs the script; returns the number of values read from its one line of
 * space-separated numbers. */
static int run_torch(const char *torch, const char *args, double *vals, int max) {
  if (!torch) return 0;
  const char *py = getenv("AG_PYTHON");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null", py && *py ? py : "/usr/bin/python3", torch, args);
  FILE *p = popen(cmd, "r");
  char line[1024] = "";
  int n = 0;
  if (p && fgets(line, sizeof line, p)) {
    char *s = line, *end;
    while (n < max) {
      double v = strtod(s, &end);
      if (end == s) break;
      vals[n++] = v;
      s = end;
    }
  }
  if (p) pclose(p);
  return n;
}

int main(int argc, char **argv) {
  int threads = 0, rounds = 5, steps = 20;
  const char *json = NULL, *torch = NULL, *devices = "cpu,opencl:0,gpuemu:0";
  bool step_only = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--step-only")) step_only = true;
    else if (i + 1 >= argc) {
      fprintf(stderr, "cnn_bench: option %s needs a value\n", argv[i]);
      return 2;
    } else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json")) json = argv[++i];
    else if (!strcmp(argv[i], "--torch")) torch = argv[++i];
    else if (!strcmp(argv[i], "--devices")) devices = argv[++i];
    else {
      fprintf(stderr, "cnn_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  if (rounds > MAXR) rounds = MAXR;
  if (steps < 1) steps = 1;
  if (threads > 0 && ag_set_num_threads(threads) != AG_OK) {
    fprintf(stderr, "cnn_bench: %s\n", ag_last_error());
    return 2;
  }
  threads = ag_get_num_threads(); /* PyTorch gets the same count */
  FILE *js = json ? fopen(json, "w") : NULL;
  if (js) fprintf(js, "{\"threads\": %d, \"rounds\": %d,\n", threads, rounds);

  /* (a) */
  double ra[MAXR], rt[MAXR], a[3], t[3];
  int nt = 0;
  char args[256];
  for (int r = 0; r < rounds; r++) {
    ra[r] = bench_step(AG_CPU, 128, steps);
    double v[2];
    snprintf(args, sizeof args, "step %d %d 128", threads, steps);
    if (run_torch(torch, args, v, 1) == 1 && v[0] > 0) rt[nt++] = v[0];
  }
  mmm(ra, rounds, a);
  mmm(rt, nt, t);
  printf("cnn_bench: threads: anygrad ag_set_num_threads(%d) (f32 GEMM: %s), torch.set_num_threads(%d) and its BLAS "
         "the same (bench/torch_setup.py); %d interleaved rounds (anygrad, torch, ...); median [min-max]\n\n",
         threads, ag_cpu_gemm_engine(), threads, rounds);
  printf("(a) training step, CNN conv16-bn-relu-pool, conv32-bn-relu-pool, linear; AdamW; batch 128; cpu\n");
  printf("    %-10s %8.2f ms [%.2f-%.2f]\n    %-10s %8.2f ms [%.2f-%.2f]\n    ratio %.3f (goal <= 0.8)\n\n",
         "anygrad", a[0], a[1], a[2], "torch", t[0], t[1], t[2], t[0] > 0 ? a[0] / t[0] : -1);
  if (js)
    fprintf(js,
            "\"step\": {\"batch\": 128, \"anygrad_ms\": [%.3f, %.3f, %.3f], \"torch_ms\": [%.3f, %.3f, %.3f], "
            "\"ratio\": %.4f, \"goal\": 0.8},\n",
            a[0], a[1], a[2], t[0], t[1], t[2], t[0] > 0 ? a[0] / t[0] : -1);
  if (step_only) { /* (a) alone: bench/torch2_bench.py times the step in a process of its own */
    if (js) {
      fprintf(js, "\"step_only\": true}\n");
      fclose(js);
    }
    return 0;
  }

  /* (b) */
  printf("(b) conv2d 3x3 pad 1 throughput, GFLOP/s (fwd+bwd counts 3x the forward FLOPs), median over rounds\n");
  printf("    %-40s %-10s %10s %12s\n", "shape", "device", "fwd", "fwd+bwd");
  if (js) fprintf(js, "\"conv\": [\n");
  bool first = true;
  for (int si = 0; si < NSHAPES; si++) {
    const cshape *s = &k_shapes[si];
    const double gf = conv_flops(s) / 1e9;
    char list[256];
    snprintf(list, sizeof list, "%s", devices);
    for (char *save = NULL, *dn = strtok_r(list, ",", &save); dn; dn = strtok_r(NULL, ",", &save)) {
      ag_device d;
      if (ag_device_parse(dn, &d) != AG_OK) {
        printf("    %-40s %-10s unavailable: %s\n", s->name, dn, ag_last_error());
        ag_error_clear();
        continue;
      }
      const bool emu = strncmp(dn, "gpuemu", 6) == 0;
      if (emu && si > 0) continue; /* the emulator: one shape, a note */
      int iters = d.backend == AG_BACKEND_CPU ? 5 : emu ? 1 : 3, nr = emu ? 1 : rounds;
      double f[MAXR], fb[MAXR], mf[3], mfb[3];
      for (int r = 0; r < nr; r++) {
        f[r] = bench_conv(d, s, false, iters);
        fb[r] = bench_conv(d, s, true, iters);
      }
      mmm(f, nr, mf);
      mmm(fb, nr, mfb);
      printf("    %-40s %-10s %10.2f %12.2f%s\n", s->name, dn, mf[0] > 0 ? gf / (mf[0] / 1e3) : -1,
             mfb[0] > 0 ? 3 * gf / (mfb[0] / 1e3) : -1,
             emu ? "  (emulator: CPU time of the emulated kernels, correctness only)" : "");
      if (js) {
        fprintf(js, "%s  {\"shape\": \"%s\", \"device\": \"%s\", \"fwd_ms\": %.3f, \"fwd_bwd_ms\": %.3f, \"gflops_fwd\": %.3f, "
                    "\"gflops_fwd_bwd\": %.3f%s}",
                first ? "" : ",\n", s->name, dn, mf[0], mfb[0], mf[0] > 0 ? gf / (mf[0] / 1e3) : -1,
                mfb[0] > 0 ? 3 * gf / (mfb[0] / 1e3) : -1, emu ? ", \"note\": \"emulator, correctness only\"" : "");
        first = false;
      }
    }
    double v[2];
    snprintf(args, sizeof args, "conv %d %lld %lld %lld %lld %lld %lld %d", threads, (long long)s->x[0],
             (long long)s->x[1], (long long)s->x[2], (long long)s->x[3], (long long)s->w[0], (long long)s->w[2], 5);
    if (run_torch(torch, args, v, 2) == 2) {
      printf("    %-40s %-10s %10.2f %12.2f\n", s->name, "torch cpu", gf / (v[0] / 1e3), 3 * gf / (v[1] / 1e3));
      if (js)
        fprintf(js, ",\n  {\"shape\": \"%s\", \"device\": \"torch cpu\", \"fwd_ms\": %.3f, \"fwd_bwd_ms\": %.3f, "
                    "\"gflops_fwd\": %.3f, \"gflops_fwd_bwd\": %.3f}",
                s->name, v[0], v[1], gf / (v[0] / 1e3), 3 * gf / (v[1] / 1e3));
    }
  }
  if (js) fprintf(js, "\n],\n");
  printf("\n");

  /* (c) */
  static const int64_t batches[] = {32, 64, 128, 256};
  printf("(c) CNN memory on the cpu by allocator category, MiB (second step; after the forward = kept for backward)\n");
  printf("    %6s %12s %12s %12s %12s %12s %14s\n", "batch", "activations", "parameters", "optimizer", "other",
         "act. peak", "step peak all");
  if (js) fprintf(js, "\"memory\": [\n");
  for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
    memrow m = bench_memory(AG_CPU, batches[bi]);
    printf("    %6lld %12.2f %12.2f %12.2f %12.2f %12.2f %14.2f\n", (long long)m.batch, m.after_fwd[AG_MEM_ACTIVATIONS],
           m.after_fwd[AG_MEM_PARAMETERS], m.after_fwd[AG_MEM_OPTIMIZER], m.after_fwd[AG_MEM_OTHER], m.act_peak,
           m.peak_alloc);
    if (js)
      fprintf(js, "%s  {\"batch\": %lld, \"activations_after_fwd_mib\": %.3f, \"parameters_mib\": %.3f, "
                  "\"optimizer_mib\": %.3f, \"other_mib\": %.3f, \"activations_peak_mib\": %.3f, \"step_peak_mib\": %.3f}",
              bi ? ",\n" : "", (long long)m.batch, m.after_fwd[AG_MEM_ACTIVATIONS], m.after_fwd[AG_MEM_PARAMETERS],
              m.after_fwd[AG_MEM_OPTIMIZER], m.after_fwd[AG_MEM_OTHER], m.act_peak, m.peak_alloc);
  }
  /* per sample, the first block dominates: conv, bn and relu outputs of
   * 16x28x28 f32 (49 KiB each) against 32x14x14 (24.5 KiB) in the second */
  printf("    per sample the first block's 16x28x28 maps (49 KiB each: conv, batch-norm and ReLU outputs, pool\n"
         "    indices) outweigh the second block's 32x14x14 (24.5 KiB each); activations grow linearly with batch\n\n");
  if (js) fprintf(js, "\n],\n");

  /* (d) */
  ag_set_num_threads(1);
  printf("(d) conv2d forward on ONE thread (ag_set_num_threads(1)): im2col + OpenBLAS vs a direct kernel\n");
  printf("    %-40s %14s %14s %10s\n", "shape", "im2col ms", "direct ms", "max diff");
  if (js) fprintf(js, "\"direct_vs_im2col\": [\n");
  for (int si = 0; si < NSHAPES; si++) {
    const cshape *s = &k_shapes[si];
    double im[MAXR], di[MAXR], mi[3], md[3], diff = -1;
    for (int r = 0; r < rounds; r++) {
      im[r] = bench_conv(AG_CPU, s, false, 3);
      di[r] = bench_direct(s, 3, &diff);
    }
    mmm(im, rounds, mi);
    mmm(di, rounds, md);
    printf("    %-40s %8.2f [%.1f-%.1f] %6.2f [%.1f-%.1f] %9.2g\n", s->name, mi[0], mi[1], mi[2], md[0], md[1], md[2],
           diff);
    if (js)
      fprintf(js, "%s  {\"shape\": \"%s\", \"im2col_ms\": [%.3f, %.3f, %.3f], \"direct_ms\": [%.3f, %.3f, %.3f], "
                  "\"max_abs_diff\": %.3g}",
              si ? ",\n" : "", s->name, mi[0], mi[1], mi[2], md[0], md[1], md[2], diff);
  }
  if (js) {
    fprintf(js, "\n]}\n");
    fclose(js);
  }
  return a[0] > 0 ? 0 : 1;
}
