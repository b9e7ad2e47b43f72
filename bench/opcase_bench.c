/* One op at one shape on one device, timed the way ggml's
 * `test-backend-ops perf` times it: the op launched n times back to back
 * and synchronized once, n chosen so the timed batch lasts about --time
 * seconds; time per run = batch time / n. The anygrad side of
 * bench/ggml_vulkan.py (bench/ggml_vulkan_ops.c is ggml's side; both read
 * the same case names and print the same JSON line per case).
 *   opcase_bench [--device vulkan:0] [--time 0.5] [--check] CASE...
 * CASE is OP:DTYPE:SIZES, the sizes in ggml's order (innermost first):
 *   add|mul:f32:N0xN1          a[N1][N0] op b[N1][N0]
 *   exp|gelu|silu:f32:N0xN1    elementwise on [N1][N0]
 *   softmax|rms_norm|layer_norm:f32:N0xN1   along the N0 rows of [N1][N0]
 *   matmul:f32|f16:MxNxK       x[N][K] @ w[K][M] (ggml's mul_mat m, n, k)
 *   attn:f32|f16:DxTxHxB       softmax(q k^T / sqrt(D)) v, q, k, v
 *                              [B][H][T][D], no mask (ggml's flash attention)
 * Throughput as test-backend-ops computes it: GFLOP/s (1e9) from
 * 2*M*N*K for matmul and 2*B*H*T*T*(D+D) for attention; the other ops in
 * GB/s of 2^30 bytes from the bytes of the result and the operands (the
 * same dtype on both sides except f16: anygrad's f16 matmul and attention
 * take every operand in f16, ggml's take the activations and q in f32).
 * --check compares the result with the CPU backend's (normalized mean
 * squared error within 1e-6 for f32, 1e-4 for f16; a mismatch prints
 * status "error") and lists the kernels one call launches (an op trace).
 * One JSON line per case on stdout:
 *   {"case":..,"side":"anygrad","status":"ok","us":..,"runs":..,
 *    "flops":..,"bytes":..,"gflops":..,"gbs":..,"check":"ok|skipped|none","kernels":"matmul"}
 * Exit status 1 when a case fails (the line says why; a case the device
 * refuses is "unsupported" and not a failure), 2 on bad usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "anygrad/optrace.h"

enum { OP_ADD, OP_MUL, OP_EXP, OP_GELU, OP_SILU, OP_SOFTMAX, OP_RMS_NORM, OP_LAYER_NORM, OP_MATMUL, OP_ATTN, OP_N };
static const char *const OPNAMES[OP_N] = {"add",     "mul",      "exp",        "gelu",   "silu",
                                          "softmax", "rms_norm", "layer_norm", "matmul", "attn"};
static const int OPDIMS[OP_N] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 4};

typedef struct opcase {
  int op;
  ag_dtype dt;
  int64_t d[4];
} opcase;

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

/* "op:dtype:AxBx.." into *c; false (with a message) when malformed. */
static bool parse_case(const char *s, opcase *c, char *why, size_t why_len) {
  char op[32], dt[8], sz[96];
  if (sscanf(s, "%31[^:]:%7[^:]:%95s", op, dt, sz) != 3) {
    snprintf(why, why_len, "not OP:DTYPE:SIZES");
    return false;
  }
  c->op = -1;
  for (int i = 0; i < OP_N; i++)
    if (!strcmp(op, OPNAMES[i])) c->op = i;
  if (c->op < 0) {
    snprintf(why, why_len, "unknown op %s", op);
    return false;
  }
  if (ag_dtype_parse(dt, &c->dt) != AG_OK || (c->dt != AG_F32 && c->dt != AG_F16) ||
      (c->dt == AG_F16 && c->op != OP_MATMUL && c->op != OP_ATTN)) {
    ag_error_clear();
    snprintf(why, why_len, "dtype %s (f32; f16 for matmul and attn)", dt);
    return false;
  }
  int n = 0;
  for (char *p = sz, *e; *p && n < 4; p = *e == 'x' ? e + 1 : e, n++) {
    c->d[n] = strtoll(p, &e, 10);
    if (e == p || c->d[n] < 1 || c->d[n] > (1 << 24) || (*e && *e != 'x')) {
      snprintf(why, why_len, "bad sizes %s", sz);
      return false;
    }
  }
  if (n != OPDIMS[c->op]) {
    snprintf(why, why_len, "%s takes %d sizes", op, OPDIMS[c->op]);
    return false;
  }
  return true;
}

/* ggml's op_flops and op_size for the case (bytes of the result and of
 * every operand, each in the dtype this side gives it). */
static double case_flops(const opcase *c) {
  if (c->op == OP_MATMUL) return 2.0 * (double)c->d[0] * (double)c->d[1] * (double)c->d[2];
  if (c->op == OP_ATTN) return 2.0 * (double)c->d[3] * (double)c->d[2] * (double)c->d[1] * (double)c->d[1] * 2.0 * (double)c->d[0];
  return 0;
}

static double case_bytes(const opcase *c) {
  double es = (double)ag_dtype_size(c->dt);
  if (c->op == OP_MATMUL) return es * (double)(c->d[0] * c->d[2] + c->d[1] * c->d[2] + c->d[0] * c->d[1]);
  if (c->op == OP_ATTN) return 4.0 * es * (double)(c->d[0] * c->d[1] * c->d[2] * c->d[3]);
  double n = (double)(c->d[0] * c->d[1]) * es;
  return c->op == OP_ADD || c->op == OP_MUL ? 3 * n : 2 * n;
}

/* Uniform values drawn on the CPU in f32 (the CPU reference sees the same
 * bits), cast to dt, copied to d. */
static ag_tensor *operand(ag_device d, ag_dtype dt, int nd, const int64_t *shape) {
  ag_tensor *h = ag_rand(AG_CPU, AG_F32, nd, shape, -1, 1, NULL);
  if (h && dt != AG_F32) {
    ag_tensor *x = ag_cast(h, dt);
    ag_tensor_release(h);
    h = x;
  }
  if (!h || d.backend == AG_BACKEND_CPU) return h;
  ag_tensor *t = ag_to_device(h, d);
  ag_tensor_release(h);
  return t;
}

static int make_operands(const opcase *c, ag_device d, ag_tensor **in) {
  if (c->op == OP_MATMUL) {
    int64_t sx[2] = {c->d[1], c->d[2]}, sw[2] = {c->d[2], c->d[0]};
    in[0] = operand(d, c->dt, 2, sx);
    in[1] = in[0] ? operand(d, c->dt, 2, sw) : NULL;
    return in[1] ? 2 : -1;
  }
  if (c->op == OP_ATTN) {
    int64_t s[4] = {c->d[3], c->d[2], c->d[1], c->d[0]};
    for (int i = 0; i < 3; i++)
      if (!(in[i] = operand(d, c->dt, 4, s))) return -1;
    return 3;
  }
  int64_t s[2] = {c->d[1], c->d[0]};
  int n = c->op == OP_ADD || c->op == OP_MUL ? 2 : 1;
  for (int i = 0; i < n; i++)
    if (!(in[i] = operand(d, c->dt, 2, s))) return -1;
  return n;
}

static ag_tensor *run_op(const opcase *c, ag_tensor **in) {
  switch (c->op) {
    case OP_ADD: return ag_add(in[0], in[1]);
    case OP_MUL: return ag_mul(in[0], in[1]);
    case OP_EXP: return ag_exp(in[0]);
    case OP_GELU: return ag_gelu(in[0]);
    case OP_SILU: return ag_silu(in[0]);
    case OP_SOFTMAX: return ag_softmax(in[0], -1);
    case OP_RMS_NORM: return ag_rms_norm(in[0], NULL, 1e-6);
    case OP_LAYER_NORM: return ag_layer_norm(in[0], NULL, NULL, 1e-5);
    case OP_MATMUL: return ag_matmul(in[0], in[1]);
    default: return ag_scaled_dot_product_attention(in[0], in[1], in[2], NULL, false, 0, 0, NULL);
  }
}

/* The result as host f32 values (n of them), or NULL. */
static float *host_f32(ag_tensor *t, int64_t *n) {
  ag_tensor *f = ag_tensor_dtype(t) == AG_F32 ? ag_tensor_retain(t) : ag_cast(t, AG_F32);
  *n = f ? ag_tensor_numel(f) : 0;
  float *p = f ? malloc((size_t)*n * sizeof *p) : NULL;
  if (p && ag_to_host(f, p, (size_t)*n * sizeof *p) != AG_OK) {
    free(p);
    p = NULL;
  }
  ag_tensor_release(f);
  return p;
}

/* The CPU backend's result on the same operands, compared. "ok", or
 * "skipped" when the CPU cannot run the case; NULL (why filled) on a
 * mismatch or failure. */
static const char *check(const opcase *c, ag_tensor **in, int nin, ag_tensor *got, char *why, size_t why_len) {
  ag_tensor *cin[3] = {NULL, NULL, NULL}, *want = NULL;
  const char *verdict = NULL;
  for (int i = 0; i < nin; i++)
    if (!(cin[i] = ag_to_device(in[i], AG_CPU))) goto done;
  if (!(want = run_op(c, cin))) {
    verdict = ag_last_status() == AG_ERR_UNSUPPORTED ? "skipped" : NULL;
    if (!verdict) snprintf(why, why_len, "cpu reference: %s", ag_last_error());
    ag_error_clear();
    goto done;
  }
  int64_t ng = 0, nw = 0;
  float *g = host_f32(got, &ng), *w = host_f32(want, &nw);
  if (g && w && ng == nw) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < ng; i++) {
      double e = (double)g[i] - (double)w[i];
      num += e * e;
      den += (double)w[i] * (double)w[i];
    }
    double nmse = den > 0 ? num / den : num, tol = c->dt == AG_F16 ? 1e-4 : 1e-6;
    if (nmse <= tol)
      verdict = "ok";
    else
      snprintf(why, why_len, "result differs from the cpu's: nmse %.3g > %.0e", nmse, tol);
  } else {
    snprintf(why, why_len, "reading the results back: %s", ag_last_error());
  }
  free(g);
  free(w);
done:
  if (!verdict && !why[0]) snprintf(why, why_len, "cpu reference operands: %s", ag_last_error());
  for (int i = 0; i < nin; i++) ag_tensor_release(cin[i]);
  ag_tensor_release(want);
  return verdict;
}

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
  printf("{\"case\":\"%s\",\"side\":\"anygrad\",\"status\":\"%s\",\"error\":\"", spec, status);
  for (const char *p = why; *p; p++) putchar(*p == '"' || *p == '\\' ? '\'' : *p == '\n' ? ' ' : *p);
  printf("\"}\n");
  fflush(stdout);
}

/* Time one case; false when it failed (its JSON line says why; a refused
 * case is not a failure). */
static bool time_case(const char *spec, ag_device d, double target_s, bool do_check) {
  opcase c;
  char why[512] = "";
  if (!parse_case(spec, &c, why, sizeof why)) {
    json_fail(spec, "error", why);
    return false;
  }
  ag_tensor *in[3] = {NULL, NULL, NULL};
  bool ok = false;
  const char *checked = "none";
  int nin = make_operands(&c, d, in);
  /* warm-up: pipelines built, memory cached; with --check also the list of
   * kernels the call launches (an op trace: synchronizes around each) */
  ag_optrace *tr = do_check && nin > 0 ? ag_optrace_begin() : NULL;
  ag_tensor *r = nin > 0 ? run_op(&c, in) : NULL;
  char kernels[256] = "";
  if (tr) {
    ag_optrace_end(tr);
    for (int64_t i = 0, k = 0; i < ag_optrace_count(tr); i++) {
      ag_optrace_op op;
      if (ag_optrace_get(tr, i, &op) == AG_OK && k < (int64_t)sizeof kernels)
        k += snprintf(kernels + k, sizeof kernels - (size_t)k, "%s%s", k ? "+" : "", op.kop);
    }
    ag_optrace_free(tr);
  }
  if (!r || ag_device_synchronize(d) != AG_OK) {
    bool unsup = ag_last_status() == AG_ERR_UNSUPPORTED;
    snprintf(why, sizeof why, "%s: %s", ag_status_name(ag_last_status()), ag_last_error());
    json_fail(spec, unsup ? "unsupported" : "error", why);
    ok = unsup;
    ag_tensor_release(r);
    goto done;
  }
  if (do_check && !(checked = check(&c, in, nin, r, why, sizeof why))) {
    json_fail(spec, "error", why);
    ag_tensor_release(r);
    goto done;
  }
  ag_tensor_release(r);
  /* one timed run sizes the batch */
  double t0 = now_s();
  ag_tensor_release(run_op(&c, in));
  if (ag_device_synchronize(d) != AG_OK) goto fail;
  double t1 = now_s() - t0;
  int n = t1 > 0 ? (int)(target_s / t1) : 1000;
  n = n < 1 ? 1 : n > 1000 ? 1000 : n;
  t0 = now_s();
  double c0 = cpu_s(), m0 = thread_s();
  for (int i = 0; i < n; i++) {
    ag_tensor *y = run_op(&c, in);
    if (!y) goto fail;
    ag_tensor_release(y);
  }
  if (ag_device_synchronize(d) != AG_OK) goto fail;
  double t = now_s() - t0, tc = cpu_s() - c0, tm = thread_s() - m0;
  print_ok(spec, "anygrad", n, t, tc, tm, case_flops(&c), case_bytes(&c), checked, kernels);
  fflush(stdout);
  ok = true;
  goto done;
fail:
  snprintf(why, sizeof why, "%s: %s", ag_status_name(ag_last_status()), ag_last_error());
  json_fail(spec, "error", why);
done:
  for (int i = 0; i < 3; i++) ag_tensor_release(in[i]);
  ag_error_clear();
  return ok;
}

int main(int argc, char **argv) {
  const char *dev = "vulkan:0";
  double target = 0.5;
  bool do_check = false;
  int first = argc;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      dev = argv[++i];
    } else if (!strcmp(argv[i], "--time") && i + 1 < argc) {
      target = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--check")) {
      do_check = true;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: opcase_bench [--device D] [--time S] [--check] OP:DTYPE:SIZES...\n");
      return 2;
    } else {
      first = i;
      break;
    }
  }
  if (first == argc || !(target > 0 && target < 600)) {
    fprintf(stderr, "usage: opcase_bench [--device D] [--time S] [--check] OP:DTYPE:SIZES...\n");
    return 2;
  }
  ag_device d;
  if (ag_device_parse(dev, &d) != AG_OK) {
    fprintf(stderr, "opcase_bench: %s\n", ag_last_error());
    return 2;
  }
  int failed = 0;
  for (int i = first; i < argc; i++) failed += !time_case(argv[i], d, target, do_check);
  return failed ? 1 : 0;
}
