/* `anygrad bench`: per-op launch overhead (small tensors, host time per
 * launch) and throughput (large tensors: GB/s, GFLOP/s for matmul) on every
 * available backend, as one table, CSV or JSON. The measuring functions are
 * shared with bench/ops_bench.c through conformance.h. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "cli.h"
#include "conformance.h"

double ag_bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

ag_bench_opts ag_bench_default_opts(void) {
  return (ag_bench_opts){.large_numel = 4 << 20, .small_numel = 16, .matmul_n = 512, .reps = 7, .ops = NULL};
}

/* The row ops (sum_rows .. rms_norm_grad) take
 * [n/1024, 1024] like softmax; sum_rows sums the last dim, sum_cols the first. */
enum {
  K_ADD,
  K_MUL,
  K_EXP,
  K_GELU,
  K_RELU,
  K_SUM,
  K_MEAN,
  K_MAX,
  K_ARGMAX,
  K_SUM_ROWS,
  K_SUM_COLS,
  K_SOFTMAX,
  K_LOG_SOFTMAX,
  K_LAYER_NORM,
  K_RMS_NORM,
  K_LAYER_NORM_GRAD,
  K_RMS_NORM_GRAD,
  K_CAST,
  K_CONTIG,
  K_MATMUL,
  K_COUNT
};
static const char *const BNAMES[K_COUNT] = {
    "add",      "mul",     "exp",         "gelu",       "relu",     "sum",      "mean",           "max",    "argmax",
    "sum_rows", "sum_cols", "softmax", "log_softmax", "layer_norm", "rms_norm",
    "layer_norm_grad", "rms_norm_grad", "cast_f16", "transpose_copy", "matmul"};
/* bytes moved per element of the large case, f32 operands */
static const double BYTES_PER_ELEM[K_COUNT] = {12, 12, 8, 8, 8, 4, 4, 4, 4, 4, 4, 8, 8, 8, 8, 20, 20, 6, 8, 0};

static bool row_op(int k) { return k >= K_SUM_ROWS && k <= K_RMS_NORM_GRAD; }

/* A norm's forward and backward (x's gradient for the upstream gradient g;
 * bytes: x read and y written, then dy and x read and dx written). Returns
 * x's gradient, retained; x's gradient is dropped first so nothing
 * accumulates. */
static ag_tensor *norm_grad(bool rms, ag_tensor *x, ag_tensor *g) {
  ag_tensor_zero_grad(x);
  ag_tensor *y = rms ? ag_rms_norm(x, NULL, 1e-6) : ag_layer_norm(x, NULL, NULL, 1e-5);
  if (!y) return NULL;
  ag_status st = ag_backward(y, g, false);
  ag_tensor_release(y);
  return st == AG_OK ? ag_tensor_retain(ag_tensor_grad(x)) : NULL;
}

static ag_tensor *bench_call(int k, ag_tensor *a, ag_tensor *b) {
  switch (k) {
    case K_ADD: return ag_add(a, b);
    case K_MUL: return ag_mul(a, b);
    case K_EXP: return ag_exp(a);
    case K_GELU: return ag_gelu(a);
    case K_RELU: return ag_relu(a);
    case K_SUM: return ag_sum(a, 0, NULL, false);
    case K_MEAN: return ag_mean(a, 0, NULL, false);
    case K_MAX: return ag_max(a, 0, NULL, false);
    case K_ARGMAX: return ag_argmax(a, 0, false);
    case K_SUM_ROWS: return ag_sum(a, 1, (const int[]){1}, false);
    case K_SUM_COLS: return ag_sum(a, 1, (const int[]){0}, false);
    case K_SOFTMAX: return ag_softmax(a, -1);
    case K_LOG_SOFTMAX: return ag_log_softmax(a, -1);
    case K_LAYER_NORM: return ag_layer_norm(a, NULL, NULL, 1e-5);
    case K_RMS_NORM: return ag_rms_norm(a, NULL, 1e-6);
    case K_LAYER_NORM_GRAD: return norm_grad(false, a, b);
    case K_RMS_NORM_GRAD: return norm_grad(true, a, b);
    case K_CAST: return ag_cast(a, AG_F16);
    case K_CONTIG: return ag_contiguous(a);
    default: return ag_matmul(a, b);
  }
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n ? v[n / 2] : 0;
}

static bool selected(const char *list, const char *name) {
  if (!list) return true;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
  return false;
}

/* Operands for op k: [n] (softmax and the row ops: [n/1024, 1024]; transpose copy: a
 * transposed [rows, 1024] view; matmul: [m, m]). */
static ag_status operands(ag_device d, int k, int64_t n, int m, ag_tensor **a, ag_tensor **b) {
  int64_t s1[1] = {n}, s2[2] = {n >= 1024 ? n / 1024 : 1, n >= 1024 ? 1024 : n}, sm[2] = {m, m};
  if (k == K_MATMUL) {
    *a = ag_rand(d, AG_F32, 2, sm, -1, 1, NULL);
    *b = ag_rand(d, AG_F32, 2, sm, -1, 1, NULL);
  } else if (row_op(k) || k == K_SOFTMAX) {
    *a = ag_rand(d, AG_F32, 2, s2, -1, 1, NULL);
    *b = NULL;
    if (k == K_LAYER_NORM_GRAD || k == K_RMS_NORM_GRAD) {
      *b = ag_rand(d, AG_F32, 2, s2, -1, 1, NULL);
      if (!*b || ag_tensor_set_requires_grad(*a, true) != AG_OK) return ag_last_status();
    }
  } else if (k == K_CONTIG) {
    /* a square-ish small case, so the view really is non-contiguous */
    int64_t st[2] = {n >= 1024 ? 1024 : 4, n >= 1024 ? n / 1024 : (n + 3) / 4};
    ag_tensor *base = ag_rand(d, AG_F32, 2, st, -1, 1, NULL);
    *a = base ? ag_transpose(base, 0, 1) : NULL;
    ag_tensor_release(base);
    *b = NULL;
  } else {
    *a = ag_rand(d, AG_F32, 1, s1, 0.5, 1.5, NULL);
    *b = ag_rand(d, AG_F32, 1, s1, 0.5, 1.5, NULL);
  }
  return *a && (*b || k >= K_EXP) && (k != K_MATMUL || *b) ? AG_OK : ag_last_status();
}

int ag_bench_device(ag_device d, const ag_bench_opts *o, ag_bench_row *rows, int max_rows) {
  if (ag_device_synchronize(d) != AG_OK) return -1;
  char label[24];
  ag_device_str(d, label, sizeof label);
  int nr = 0;
  double *t = malloc(sizeof(double) * (size_t)(o->reps > 0 ? o->reps : 1));
  if (!t) return -1;
  for (int k = 0; k < K_COUNT && nr < max_rows; k++) {
    if (!selected(o->ops, BNAMES[k])) continue;
    ag_bench_row *r = &rows[nr++];
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", BNAMES[k]);
    snprintf(r->device, sizeof r->device, "%s", label);
    snprintf(r->dtype, sizeof r->dtype, "f32");
    ag_tensor *a, *b;
    /* small: host time per launch, including the release of the result */
    if (operands(d, k, o->small_numel, 4, &a, &b) != AG_OK) {
      r->unsupported = true;
      ag_error_clear();
      continue;
    }
    const int batch = 2000;
    bool ok = true;
    for (int rep = -1; rep < o->reps && ok; rep++) {
      ag_device_synchronize(d);
      double t0 = ag_bench_now_ns();
      for (int i = 0; i < batch; i++) {
        ag_tensor *y = bench_call(k, a, b);
        if (!y) {
          ok = false;
          break;
        }
        ag_tensor_release(y);
      }
      double t1 = ag_bench_now_ns();
      if (rep >= 0) t[rep] = (t1 - t0) / batch;
    }
    ag_device_synchronize(d);
    ag_tensor_release(a);
    ag_tensor_release(b);
    if (!ok) {
      r->unsupported = true;
      ag_error_clear();
      continue;
    }
    r->overhead_ns = median(t, o->reps);
    /* large: synchronized time per op */
    r->numel = k == K_MATMUL ? (int64_t)o->matmul_n * o->matmul_n : o->large_numel;
    if (operands(d, k, o->large_numel, o->matmul_n, &a, &b) != AG_OK) {
      ag_error_clear();
      ag_tensor_release(a);
      ag_tensor_release(b);
      continue;
    }
    for (int rep = -1; rep < o->reps; rep++) {
      ag_device_synchronize(d);
      double t0 = ag_bench_now_ns();
      ag_tensor *y = bench_call(k, a, b);
      ag_device_synchronize(d);
      double t1 = ag_bench_now_ns();
      ag_tensor_release(y);
      if (rep >= 0) t[rep] = (t1 - t0) / 1e6;
    }
    ag_tensor_release(a);
    ag_tensor_release(b);
    r->large_ms = median(t, o->reps);
    if (k == K_MATMUL) r->gflops = 2.0 * o->matmul_n * o->matmul_n * o->matmul_n / (r->large_ms * 1e6);
    else r->gbps = BYTES_PER_ELEM[k] * (double)o->large_numel / (r->large_ms * 1e6);
  }
  free(t);
  ag_error_clear();
  return nr;
}

static void bench_usage(void) {
  printf(
      "usage: anygrad bench [--backend B[,B...]] [--ops a,b] [--numel N] [--matmul N] [--reps R]\n"
      "                     [--json | --csv]\n\n"
      "Per op and backend: host time per launch of a %d-element op (median of R batches of\n"
      "2000 launches, result released each time) and the synchronized time of one op on N\n"
      "elements (default 4M f32) as GB/s (bytes read + written), or GFLOP/s for an N x N\n"
      "matmul (default 512). Ops: add,mul,exp,gelu,relu,sum,mean,max,argmax,sum_rows,sum_cols,\n"
      "softmax,log_softmax,layer_norm,rms_norm,layer_norm_grad,rms_norm_grad,cast_f16,\n"
      "transpose_copy,matmul (the row ops on [N/1024, 1024]; sum_rows sums the last dim,\n"
      "sum_cols the first; *_grad: forward and x's gradient).\n"
      "  --backend B[,B...]  BACKEND[:N] (default: every available backend); a named backend that is\n"
      "                      unavailable is an error\n"
      "  --json | --csv      machine-readable output\n" AG_CLI_THREADS_HELP AG_CLI_NUMERICS_HELP AG_CLI_EXIT_HELP,
      16);
}

int ag_cmd_bench(int argc, char **argv) {
  ag_bench_opts o = ag_bench_default_opts();
  const char *backends = NULL;
  int fmt = 0; /* 0 table, 1 csv, 2 json */
  enum { O_BACKEND = 256, O_OPS, O_NUMEL, O_MATMUL, O_REPS, O_CSV, O_JSON, O_HELP };
  static const struct option opts[] = {
      {"backend", required_argument, NULL, O_BACKEND}, {"ops", required_argument, NULL, O_OPS},
      {"numel", required_argument, NULL, O_NUMEL},     {"matmul", required_argument, NULL, O_MATMUL},
      {"reps", required_argument, NULL, O_REPS},       {"csv", no_argument, NULL, O_CSV},
      {"json", no_argument, NULL, O_JSON},             {"help", no_argument, NULL, O_HELP}, AG_CLI_THREADS_OPT,
      AG_CLI_NUMERICS_OPT, {NULL, 0, NULL, 0}};
  bool ok = true;
  for (int c = ag_cli_next("bench", argc, argv, opts, true); ok && c != -1;
       c = ag_cli_next("bench", argc, argv, opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_HELP: bench_usage(); return AG_EXIT_OK;
      case AG_CLI_THREADS: ok = ag_cli_threads("bench", ag_cli_arg()); break;
      case AG_CLI_NUMERICS: ok = ag_cli_numerics("bench", v); break;
      case O_BACKEND: backends = v; break;
      case O_OPS: o.ops = v; break;
      case O_NUMEL: ok = ag_cli_i64("bench", "numel", v, 1, INT64_C(1) << 34, &o.large_numel); break;
      case O_MATMUL: ok = ag_cli_int("bench", "matmul", v, 1, 1 << 16, &o.matmul_n); break;
      case O_REPS: ok = ag_cli_int("bench", "reps", v, 1, 1 << 20, &o.reps); break;
      case O_CSV: fmt = 1; break;
      case O_JSON: fmt = 2; break;
      default: ok = false; break;
    }
  }
  if (!ok) return AG_EXIT_USAGE;
  ag_device devs[16];
  int nd = 0;
  if (backends) {
    char buf[256], *items[16];
    int n = ag_cli_list("bench", "backend", backends, buf, sizeof buf, items, 16);
    if (n < 0) return AG_EXIT_USAGE;
    /* A backend asked for by name must run: absent is an error. */
    for (int i = 0; i < n; i++) {
      int rc = ag_cli_device("bench", items[i], &devs[nd]);
      if (rc != AG_EXIT_OK) return rc;
      nd++;
    }
  } else {
    int nk = ag_backend_count();
    for (int k = 0; k < nk && nd < 16; k++) {
      const char *why = NULL;
      if (ag_backend_available((ag_backend_kind)k, &why)) devs[nd++] = (ag_device){(int16_t)k, 0};
      else fprintf(stderr, "anygrad bench: %s: skipped (%s)\n", ag_backend_name((ag_backend_kind)k), why ? why : "unavailable");
    }
  }
  ag_bench_row rows[16 * K_COUNT];
  int n = 0, rc = 0;
  for (int i = 0; i < nd; i++) {
    int got = ag_bench_device(devs[i], &o, rows + n, K_COUNT);
    if (got < 0) {
      fprintf(stderr, "anygrad bench: %s\n", ag_last_error());
      rc = 1;
      continue;
    }
    n += got;
  }
  if (fmt == 1) {
    printf("op,device,dtype,numel,overhead_ns,large_ms,gbps,gflops,unsupported\n");
    for (int i = 0; i < n; i++)
      printf("%s,%s,%s,%lld,%.1f,%.4f,%.2f,%.2f,%d\n", rows[i].op, rows[i].device, rows[i].dtype,
             (long long)rows[i].numel, rows[i].overhead_ns, rows[i].large_ms, rows[i].gbps, rows[i].gflops,
             rows[i].unsupported);
  } else if (fmt == 2) {
    printf("[\n");
    for (int i = 0; i < n; i++)
      printf("  {\"op\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", \"numel\": %lld, \"overhead_ns\": %.1f, "
             "\"large_ms\": %.4f, \"gbps\": %.2f, \"gflops\": %.2f, \"unsupported\": %s}%s\n",
             rows[i].op, rows[i].device, rows[i].dtype, (long long)rows[i].numel, rows[i].overhead_ns,
             rows[i].large_ms, rows[i].gbps, rows[i].gflops, rows[i].unsupported ? "true" : "false",
             i + 1 < n ? "," : "");
    printf("]\n");
  } else {
    printf("%-15s %-10s %12s %12s %10s %10s\n", "op", "device", "launch ns", "large ms", "GB/s", "GFLOP/s");
    for (int i = 0; i < n; i++) {
      if (rows[i].unsupported) {
        printf("%-15s %-10s %12s\n", rows[i].op, rows[i].device, "unsupported");
        continue;
      }
      printf("%-15s %-10s %12.0f %12.3f %10.2f %10.2f\n", rows[i].op, rows[i].device, rows[i].overhead_ns,
             rows[i].large_ms, rows[i].gbps, rows[i].gflops);
    }
  }
  return rc;
}
