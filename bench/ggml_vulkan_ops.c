/* ggml's side of bench/ggml_vulkan.py: the cases of bench/opcase_bench.c
 * (same names, same JSON line) run through ggml's public API on its Vulkan
 * backend, timed as ggml's `test-backend-ops perf` times an op: the op's
 * node repeated n times in one graph, one ggml_backend_graph_compute, time
 * per run = compute time / n. bench/ggml_vulkan_build.sh compiles it
 * against the ggml it builds; anygrad's build never sees it.
 *   ggml_vulkan_ops [--device N] [--time 0.5] CASE...
 * The ggml graph of each case (ggml sizes innermost first):
 *   add, mul       ggml_add / ggml_mul of two f32 [N0, N1]
 *   exp, gelu, silu  ggml_exp / ggml_gelu (tanh form) / ggml_silu
 *   softmax        ggml_soft_max_ext(a, no mask, scale 1, no ALiBi)
 *   rms_norm       ggml_rms_norm(a, 1e-6); layer_norm ggml_norm(a, 1e-5)
 *   matmul M,N,K   ggml_mul_mat(w [K, M] in DTYPE, x [K, N] f32): f32 [M, N]
 *   attn D,T,H,B   ggml_flash_attn_ext(q f32 [D, T, H, B], k, v [D, T, H, B]
 *                  in DTYPE, no mask, scale 1/sqrt(D)), f32 precision
 * flops and bytes are test-backend-ops' (op_flops, op_size: the result's
 * and every source's bytes), bandwidth in 2^30 bytes per second.
 * Needs GGML_VK_VISIBLE_DEVICES to list a CPU-type device such as lavapipe
 * (ggml skips those otherwise). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-vulkan.h"
#include "ggml.h"

enum { MAX_NODES = 2048 };

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of every thread of the process (lavapipe's workers included) */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
/* CPU time of the calling thread: the process's less this one is the
 * driver's worker threads', on lavapipe the shaders' execution */
static double thread_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

/* The case's JSON line: time per run by the wall clock (us), by the
 * process's CPU time (cpu_us: every thread, lavapipe's workers included,
 * which a loaded machine does not inflate) and by the CPU time of the
 * threads other than the caller's (dev_us: on lavapipe, the shaders), and
 * the throughput of each (gflops/gbs, *_cpu, *_dev). */
static void print_ok(const char *spec, const char *side, int n, double t, double tc, double tm, double fl,
                     double by, const char *check, const char *kernels) {
  const double gib = 1024.0 * 1024 * 1024, td = tc - tm;
  printf("{\"case\":\"%s\",\"side\":\"%s\",\"status\":\"ok\",\"runs\":%d,\"us\":%.3f,\"cpu_us\":%.3f,"
         "\"flops\":%.0f,\"bytes\":%.0f,\"gflops\":%.4f,\"gflops_cpu\":%.4f,\"gbs\":%.4f,\"gbs_cpu\":%.4f,"
         "\"dev_us\":%.3f,\"gflops_dev\":%.4f,\"gbs_dev\":%.4f,\"check\":\"%s\",\"kernels\":\"%s\"}\n",
         spec, side, n, 1e6 * t / n, 1e6 * tc / n, fl, by, fl > 0 ? fl * n / t / 1e9 : 0.0,
         fl > 0 && tc > 0 ? fl * n / tc / 1e9 : 0.0, fl > 0 ? 0.0 : by * n / t / gib,
         fl > 0 || tc <= 0 ? 0.0 : by * n / tc / gib, 1e6 * td / n, fl > 0 && td > 0 ? fl * n / td / 1e9 : 0.0,
         fl > 0 || td <= 0 ? 0.0 : by * n / td / gib, check, kernels);
  fflush(stdout);
}

static void json_fail(const char *spec, const char *status, const char *why) {
  printf("{\"case\":\"%s\",\"side\":\"ggml\",\"status\":\"%s\",\"error\":\"%s\"}\n", spec, status, why);
  fflush(stdout);
}

/* The case's node in ctx, or NULL (why filled). */
static struct ggml_tensor *build(struct ggml_context *ctx, const char *spec, double *flops, char *why, size_t wl) {
  char op[32], dt[8], sz[96];
  int64_t d[4] = {1, 1, 1, 1};
  int n = 0;
  if (sscanf(spec, "%31[^:]:%7[^:]:%95s", op, dt, sz) != 3) {
    snprintf(why, wl, "not OP:DTYPE:SIZES");
    return NULL;
  }
  for (char *p = sz, *e; *p && n < 4; p = *e == 'x' ? e + 1 : e, n++) {
    d[n] = strtoll(p, &e, 10);
    if (e == p || d[n] < 1 || (*e && *e != 'x')) {
      snprintf(why, wl, "bad sizes %s", sz);
      return NULL;
    }
  }
  enum ggml_type t = !strcmp(dt, "f16") ? GGML_TYPE_F16 : GGML_TYPE_F32;
  if (strcmp(dt, "f16") && strcmp(dt, "f32")) {
    snprintf(why, wl, "dtype %s", dt);
    return NULL;
  }
  *flops = 0;
  if (!strcmp(op, "matmul") && n == 3) {
    struct ggml_tensor *w = ggml_new_tensor_2d(ctx, t, d[2], d[0]);
    struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d[2], d[1]);
    *flops = 2.0 * (double)d[0] * (double)d[1] * (double)d[2];
    return ggml_mul_mat(ctx, w, x);
  }
  if (!strcmp(op, "attn") && n == 4) {
    struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, d[0], d[1], d[2], d[3]);
    struct ggml_tensor *k = ggml_new_tensor_4d(ctx, t, d[0], d[1], d[2], d[3]);
    struct ggml_tensor *v = ggml_new_tensor_4d(ctx, t, d[0], d[1], d[2], d[3]);
    struct ggml_tensor *o = ggml_flash_attn_ext(ctx, q, k, v, NULL, 1.0f / sqrtf((float)d[0]), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(o, GGML_PREC_F32);
    *flops = 2.0 * (double)d[2] * (double)d[1] * (double)(d[0] + d[0]) * (double)d[1] * (double)d[3];
    return o;
  }
  if (n != 2 || t != GGML_TYPE_F32) {
    snprintf(why, wl, "%s: sizes or dtype", op);
    return NULL;
  }
  struct ggml_tensor *a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d[0], d[1]);
  if (!strcmp(op, "add")) return ggml_add(ctx, a, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d[0], d[1]));
  if (!strcmp(op, "mul")) return ggml_mul(ctx, a, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d[0], d[1]));
  if (!strcmp(op, "exp")) return ggml_exp(ctx, a);
  if (!strcmp(op, "gelu")) return ggml_gelu(ctx, a);
  if (!strcmp(op, "silu")) return ggml_silu(ctx, a);
  if (!strcmp(op, "softmax")) return ggml_soft_max_ext(ctx, a, NULL, 1.0f, 0.0f);
  if (!strcmp(op, "rms_norm")) return ggml_rms_norm(ctx, a, 1e-6f);
  if (!strcmp(op, "layer_norm")) return ggml_norm(ctx, a, 1e-5f);
  snprintf(why, wl, "unknown op %s", op);
  return NULL;
}

/* Uniform values in [-1, 1] (a fixed LCG) into every tensor of ctx. */
static void fill(struct ggml_context *ctx) {
  uint64_t s = 1234567;
  for (struct ggml_tensor *t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) {
    if (t->op != GGML_OP_NONE) continue;
    int64_t n = ggml_nelements(t);
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      f[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    if (t->type == GGML_TYPE_F16) {
      ggml_fp16_t *h = malloc((size_t)n * sizeof *h);
      ggml_fp32_to_fp16_row(f, h, n);
      ggml_backend_tensor_set(t, h, 0, ggml_nbytes(t));
      free(h);
    } else {
      ggml_backend_tensor_set(t, f, 0, ggml_nbytes(t));
    }
    free(f);
  }
}

static bool time_case(ggml_backend_t be, const char *spec, double target_s) {
  char why[256] = "";
  struct ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead_custom(MAX_NODES, false), NULL, true};
  struct ggml_context *ctx = ggml_init(ip);
  double flops = 0;
  struct ggml_tensor *out = build(ctx, spec, &flops, why, sizeof why);
  bool ok = false;
  if (!out) {
    json_fail(spec, "error", why);
    ggml_free(ctx);
    return false;
  }
  if (!ggml_backend_supports_op(be, out)) {
    json_fail(spec, "unsupported", "ggml_backend_supports_op: false");
    ggml_free(ctx);
    return false;
  }
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
  if (!buf) {
    json_fail(spec, "error", "allocating the tensors failed");
    ggml_free(ctx);
    return false;
  }
  fill(ctx);
  double bytes = (double)ggml_nbytes(out);
  for (int i = 0; i < GGML_MAX_SRC; i++)
    if (out->src[i]) bytes += (double)ggml_nbytes(out->src[i]);
  struct ggml_cgraph *g1 = ggml_new_graph_custom(ctx, MAX_NODES, false);
  ggml_build_forward_expand(g1, out);
  /* warm-up (pipelines built), then one timed run sizes the batch */
  if (ggml_backend_graph_compute(be, g1) != GGML_STATUS_SUCCESS) goto fail;
  double t0 = now_s();
  if (ggml_backend_graph_compute(be, g1) != GGML_STATUS_SUCCESS) goto fail;
  double t1 = now_s() - t0;
  int n = t1 > 0 ? (int)(target_s / t1) : 1000;
  int room = MAX_NODES - ggml_graph_n_nodes(g1);
  n = n < 1 ? 1 : n > 1000 ? 1000 : n > room + 1 ? room + 1 : n;
  for (int i = 1; i < n; i++) ggml_graph_add_node(g1, out);
  t0 = now_s();
  double c0 = cpu_s(), m0 = thread_s();
  if (ggml_backend_graph_compute(be, g1) != GGML_STATUS_SUCCESS) goto fail;
  double t = now_s() - t0, tc = cpu_s() - c0, tm = thread_s() - m0;
  print_ok(spec, "ggml", n, t, tc, tm, flops, bytes, "none", "");
  ok = true;
  goto done;
fail:
  json_fail(spec, "error", "ggml_backend_graph_compute failed");
done:
  ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  return ok;
}

int main(int argc, char **argv) {
  int dev = 0, first = argc;
  double target = 0.5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      dev = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--time") && i + 1 < argc) {
      target = atof(argv[++i]);
    } else if (argv[i][0] == '-') {
      first = argc;
      break;
    } else {
      first = i;
      break;
    }
  }
  if (first == argc || !(target > 0)) {
    fprintf(stderr, "usage: ggml_vulkan_ops [--device N] [--time S] OP:DTYPE:SIZES...\n");
    return 2;
  }
  if (ggml_backend_vk_get_device_count() <= dev) {
    fprintf(stderr, "ggml_vulkan_ops: no Vulkan device %d (GGML_VK_VISIBLE_DEVICES=0 for lavapipe)\n", dev);
    return 1;
  }
  ggml_backend_t be = ggml_backend_vk_init((size_t)dev);
  if (!be) {
    fprintf(stderr, "ggml_vulkan_ops: ggml_backend_vk_init(%d) failed\n", dev);
    return 1;
  }
  int failed = 0;
  for (int i = first; i < argc; i++) failed += !time_case(be, argv[i], target);
  ggml_backend_free(be);
  return failed ? 1 : 0;
}
