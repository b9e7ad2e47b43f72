/* `anygrad bench`: per-op launch overhead (small tensors, host time per
 * launch) and throughput (large tensors: GB/s, GFLOP/s for matmul) on every
 * available backend, as one table, CSV or JSON. The measuring functions are
 * shared with bench/ops_bench.c through conformance.h. */
#include <stdarg.h>
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

/* The row ops (sum_rows .. softmax_grad) take
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
  K_MIN,
  K_SUM_ROWS,
  K_SUM_COLS,
  K_SOFTMAX,
  K_LOG_SOFTMAX,
  K_LAYER_NORM,
  K_RMS_NORM,
  K_LAYER_NORM_GRAD,
  K_RMS_NORM_GRAD,
  K_SOFTMAX_GRAD,
  K_GROUP_NORM,
  K_GROUP_NORM_GRAD,
  K_CAST,
  K_CONTIG,
  K_MATMUL,
  K_COUNT
};
static const char *const BNAMES[K_COUNT] = {
    "add",      "mul",     "exp",         "gelu",       "relu",     "sum",      "mean",           "max",    "argmax",
    "min",      "sum_rows", "sum_cols", "softmax", "log_softmax", "layer_norm", "rms_norm",
    "layer_norm_grad", "rms_norm_grad", "softmax_grad", "group_norm", "group_norm_grad",
    "cast_f16", "transpose_copy", "matmul"};
/* bytes moved per element of the large case, f32 operands */
static const double BYTES_PER_ELEM[K_COUNT] = {12, 12, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 8, 8, 8, 8, 20, 20, 20, 8, 20, 6, 8, 0};
/* compared exactly with the CPU's result, as their conformance rows compare
 * with the reference (cast, contiguous: EXACT); the others within the
 * dtype's NMSE threshold (DEF) */
static const bool EXACT_RESULT[K_COUNT] = {[K_CAST] = true, [K_CONTIG] = true};

static bool row_op(int k) { return k >= K_SUM_ROWS && k <= K_SOFTMAX_GRAD; }

/* forward and x's gradient, given the upstream gradient */
static bool grad_op(int k) {
  return k == K_LAYER_NORM_GRAD || k == K_RMS_NORM_GRAD || k == K_SOFTMAX_GRAD || k == K_GROUP_NORM_GRAD;
}

/* A norm's forward and backward (x's gradient for the upstream gradient g;
 * bytes: x read and y written, then dy and x read and dx written), on a
 * fresh leaf sharing x's storage, so nothing accumulates and any x will
 * do. Returns the gradient, retained. */
static ag_tensor *norm_grad(int k, ag_tensor *x, ag_tensor *g) {
  ag_tensor *xl = ag_detach(x), *dx = NULL;
  if (xl && ag_tensor_set_requires_grad(xl, true) == AG_OK) {
    ag_tensor *y = k == K_RMS_NORM_GRAD     ? ag_rms_norm(xl, NULL, 1e-6)
                   : k == K_SOFTMAX_GRAD    ? ag_softmax(xl, -1)
                   : k == K_GROUP_NORM_GRAD ? ag_group_norm(xl, 2, NULL, NULL, 1e-5)
                                            : ag_layer_norm(xl, NULL, NULL, 1e-5);
    if (y && ag_backward(y, g, false) == AG_OK) dx = ag_tensor_retain(ag_tensor_grad(xl));
    ag_tensor_release(y);
  }
  ag_tensor_release(xl);
  return dx;
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
    case K_MIN: return ag_min(a, 0, NULL, false);
    case K_LAYER_NORM_GRAD:
    case K_RMS_NORM_GRAD:
    case K_SOFTMAX_GRAD:
    case K_GROUP_NORM_GRAD: return norm_grad(k, a, b);
    case K_GROUP_NORM: return ag_group_norm(a, 2, NULL, NULL, 1e-5);
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

/* A tensor of uniform values drawn on the CPU and copied to d: the device
 * under test only has to copy (a device without a random generator still
 * runs the ops it has), and the CPU reference sees the same bits. */
static ag_tensor *operand(ag_device d, int ndim, const int64_t *shape, double lo, double hi) {
  ag_tensor *h = ag_rand(AG_CPU, AG_F32, ndim, shape, lo, hi, NULL);
  if (!h || d.backend == AG_BACKEND_CPU) return h;
  ag_tensor *t = ag_to_device(h, d);
  ag_tensor_release(h);
  return t;
}

/* Operands for op k: [n] (softmax and the row ops: [n/1024, 1024]; transpose copy: a
 * transposed [rows, 1024] view; matmul: [m, m]). */
static ag_status operands(ag_device d, int k, int64_t n, int m, ag_tensor **a, ag_tensor **b) {
  int64_t s1[1] = {n}, s2[2] = {n >= 1024 ? n / 1024 : 1, n >= 1024 ? 1024 : n}, sm[2] = {m, m};
  if (k == K_MATMUL) {
    *a = operand(d, 2, sm, -1, 1);
    *b = *a ? operand(d, 2, sm, -1, 1) : NULL;
  } else if (row_op(k) || k == K_SOFTMAX) {
    *a = operand(d, 2, s2, -1, 1);
    *b = NULL;
    if (*a && grad_op(k)) *b = operand(d, 2, s2, -1, 1);
  } else if (k == K_GROUP_NORM || k == K_GROUP_NORM_GRAD) {
    /* [N, 4, 1024] (16 elements: [1, 4, 4]) in 2 groups */
    int64_t sg[3] = {n >= 4096 ? n / 4096 : 1, 4, n >= 4096 ? 1024 : (n + 3) / 4};
    *a = operand(d, 3, sg, -1, 1);
    *b = *a && grad_op(k) ? operand(d, 3, sg, -1, 1) : NULL;
  } else if (k == K_CONTIG) {
    /* a square-ish small case, so the view really is non-contiguous */
    int64_t st[2] = {n >= 1024 ? 1024 : 4, n >= 1024 ? n / 1024 : (n + 3) / 4};
    ag_tensor *base = operand(d, 2, st, -1, 1);
    *a = base ? ag_transpose(base, 0, 1) : NULL;
    ag_tensor_release(base);
    *b = NULL;
  } else {
    *a = operand(d, 1, s1, 0.5, 1.5);
    *b = *a && k < K_EXP ? operand(d, 1, s1, 0.5, 1.5) : NULL;
  }
  bool need_b = k < K_EXP || k == K_MATMUL || grad_op(k);
  return *a && (*b || !need_b) ? AG_OK : ag_last_status();
}

const char *ag_bench_status_name(ag_bench_status s) {
  return s == AG_BENCH_OK ? "ok" : s == AG_BENCH_UNSUPPORTED ? "unsupported" : "error";
}

/* The row is not timed: unsupported when the library said AG_ERR_UNSUPPORTED
 * (and the error is not the reference's), else an error; the message is
 * the case, what failed, the status and the library's message. */
static void row_fail(ag_bench_row *r, bool may_refuse, ag_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void row_fail(ag_bench_row *r, bool may_refuse, ag_status st, const char *fmt, ...) {
  if (st == AG_OK) st = AG_ERR_INTERNAL; /* a NULL result with no status set is still a failure */
  r->status = may_refuse && st == AG_ERR_UNSUPPORTED ? AG_BENCH_UNSUPPORTED : AG_BENCH_ERROR;
  va_list ap;
  va_start(ap, fmt);
  int p = vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  if (p >= 0 && (size_t)p < sizeof r->error)
    snprintf(r->error + p, sizeof r->error - (size_t)p, ": %s (%s)", ag_status_name(st), ag_last_error());
  ag_error_clear();
}

ag_bench_status ag_bench_compare(ag_dtype dt, const void *got, const void *want, int64_t n, bool exact, char *why,
                                 size_t why_len) {
  enum { MAX_SAMPLE = 65536 };
  int64_t m = n < MAX_SAMPLE ? n : MAX_SAMPLE;
  if (m <= 0) return AG_BENCH_OK;
  double *g = malloc((size_t)m * sizeof *g), *w = malloc((size_t)m * sizeof *w);
  int64_t *ix = malloc((size_t)m * sizeof *ix);
  bool same = false;
  if (g && w && ix) {
    for (int64_t j = 0; j < m; j++) {
      int64_t i = m > 1 ? j * (n - 1) / (m - 1) : 0; /* first and last included */
      ix[j] = i;
      g[j] = ag_conf_value(dt, got, i);
      w[j] = ag_conf_value(dt, want, i);
    }
    same = ag_conf_compare(dt, g, w, ix, m, exact ? 0.0 : ag_conf_threshold(dt), why, why_len);
  } else {
    snprintf(why, why_len, "no host memory to compare %lld elements", (long long)m);
  }
  free(g);
  free(w);
  free(ix);
  return same ? AG_BENCH_OK : AG_BENCH_ERROR;
}

/* Copy t (n elements of dt) into a new host buffer; NULL with the status
 * in *st on failure. */
static void *host_copy(const ag_tensor *t, ag_status *st) {
  size_t bytes = (size_t)ag_tensor_numel(t) * ag_dtype_size(ag_tensor_dtype(t));
  void *p = malloc(bytes ? bytes : 1);
  *st = p ? ag_to_host(t, p, bytes) : AG_ERR_OOM;
  if (*st != AG_OK) {
    free(p);
    return NULL;
  }
  return p;
}

/* Run op k once on d and once on the CPU from the same inputs and compare
 * the results (the conformance tolerance of the op: exact for copies and
 * casts, else the dtype's NMSE threshold). On the cpu backend the CPU is
 * the reference itself: only the statuses are checked. False with the row
 * marked when the op was refused, failed or gave a wrong result. */
static bool verify(ag_device d, int k, ag_tensor *a, ag_tensor *b, ag_bench_row *r, const char *what) {
  ag_tensor *y = bench_call(k, a, b), *ac = NULL, *bc = NULL, *yc = NULL;
  void *gy = NULL, *gc = NULL;
  ag_status st;
  bool ok = false;
  if (!y) {
    row_fail(r, true, ag_last_status(), "%s", what);
    goto done;
  }
  if ((st = ag_device_synchronize(d)) != AG_OK) {
    row_fail(r, false, st, "%s: synchronize", what);
    goto done;
  }
  if (d.backend == AG_BACKEND_CPU) {
    ok = true;
    goto done;
  }
  ac = ag_to_device(a, AG_CPU);
  bc = b ? ag_to_device(b, AG_CPU) : NULL;
  yc = ac && (bc || !b) ? bench_call(k, ac, bc) : NULL;
  if (!yc) {
    row_fail(r, false, ag_last_status(), "%s: the CPU reference", what);
    goto done;
  }
  if (ag_tensor_dtype(y) != ag_tensor_dtype(yc) || ag_tensor_numel(y) != ag_tensor_numel(yc)) {
    r->status = AG_BENCH_ERROR;
    snprintf(r->error, sizeof r->error, "%s: result of %lld %s elements, the CPU's %lld %s", what,
             (long long)ag_tensor_numel(y), ag_dtype_name(ag_tensor_dtype(y)), (long long)ag_tensor_numel(yc),
             ag_dtype_name(ag_tensor_dtype(yc)));
    goto done;
  }
  if (!(gy = host_copy(y, &st))) {
    row_fail(r, false, st, "%s: reading the result", what);
    goto done;
  }
  if (!(gc = host_copy(yc, &st))) {
    row_fail(r, false, st, "%s: reading the CPU reference", what);
    goto done;
  }
  char why[256];
  if (ag_bench_compare(ag_tensor_dtype(y), gy, gc, ag_tensor_numel(y), EXACT_RESULT[k], why, sizeof why) !=
      AG_BENCH_OK) {
    r->status = AG_BENCH_ERROR;
    snprintf(r->error, sizeof r->error, "%s: wrong result against the CPU: %s", what, why);
    goto done;
  }
  ok = true;
done:
  free(gy);
  free(gc);
  ag_tensor_release(y);
  ag_tensor_release(yc);
  ag_tensor_release(ac);
  ag_tensor_release(bc);
  ag_error_clear();
  return ok;
}

/* Operands of op k for a case; false with the row marked when they cannot
 * be made. */
static bool case_operands(ag_device d, int k, int64_t n, int m, ag_tensor **a, ag_tensor **b, ag_bench_row *r,
                          const char *what) {
  *a = *b = NULL;
  if (operands(d, k, n, m, a, b) == AG_OK) return true;
  row_fail(r, true, ag_last_status(), "%s: operands", what);
  ag_tensor_release(*a);
  ag_tensor_release(*b);
  *a = *b = NULL;
  return false;
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
    r->numel = k == K_MATMUL ? (int64_t)o->matmul_n * o->matmul_n : o->large_numel;
    char what[64];
    ag_tensor *a, *b;
    /* small: host time per launch, including the release of the result */
    snprintf(what, sizeof what, "%lld-element case", (long long)o->small_numel);
    if (!case_operands(d, k, o->small_numel, 4, &a, &b, r, what)) continue;
    const int batch = 2000;
    bool ok = verify(d, k, a, b, r, what);
    /* The loop is as before: each launch's result is checked (a NULL is a
     * failure), and the synchronization that starts the next batch (and
     * the last one) reports what ran asynchronously. */
    for (int rep = -1; rep < o->reps && ok; rep++) {
      ag_status st = ag_device_synchronize(d);
      if (st != AG_OK) {
        row_fail(r, false, st, "%s: synchronize", what);
        ok = false;
        break;
      }
      double t0 = ag_bench_now_ns();
      for (int i = 0; i < batch; i++) {
        ag_tensor *y = bench_call(k, a, b);
        if (!y) {
          row_fail(r, true, ag_last_status(), "%s: launch %d", what, i + 1);
          ok = false;
          break;
        }
        ag_tensor_release(y);
      }
      double t1 = ag_bench_now_ns();
      if (rep >= 0) t[rep] = (t1 - t0) / batch;
    }
    ag_status st = ag_device_synchronize(d);
    if (ok && st != AG_OK) {
      row_fail(r, false, st, "%s: synchronize", what);
      ok = false;
    }
    ag_tensor_release(a);
    ag_tensor_release(b);
    if (!ok) continue;
    r->overhead_ns = median(t, o->reps);
    /* large: synchronized time per op */
    if (k == K_MATMUL) snprintf(what, sizeof what, "%d x %d case", o->matmul_n, o->matmul_n);
    else snprintf(what, sizeof what, "%lld-element case", (long long)o->large_numel);
    if (!case_operands(d, k, o->large_numel, o->matmul_n, &a, &b, r, what)) continue;
    ok = verify(d, k, a, b, r, what);
    for (int rep = -1; rep < o->reps && ok; rep++) {
      st = ag_device_synchronize(d);
      double t0 = ag_bench_now_ns();
      ag_tensor *y = bench_call(k, a, b);
      ag_status sy = ag_device_synchronize(d);
      double t1 = ag_bench_now_ns();
      if (st != AG_OK || !y || sy != AG_OK) {
        if (!y) row_fail(r, true, ag_last_status(), "%s: launch", what);
        else row_fail(r, false, st != AG_OK ? st : sy, "%s: synchronize", what);
        ok = false;
      }
      ag_tensor_release(y);
      if (rep >= 0) t[rep] = (t1 - t0) / 1e6;
    }
    ag_tensor_release(a);
    ag_tensor_release(b);
    if (!ok) {
      r->overhead_ns = 0;
      continue;
    }
    r->large_ms = median(t, o->reps);
    if (k == K_MATMUL) r->gflops = 2.0 * o->matmul_n * o->matmul_n * o->matmul_n / (r->large_ms * 1e6);
    else r->gbps = BYTES_PER_ELEM[k] * (double)o->large_numel / (r->large_ms * 1e6);
  }
  free(t);
  ag_error_clear();
  return nr;
}

/* s as a JSON string body: quotes, backslashes and control bytes escaped. */
static void json_escape(const char *s, char *out, size_t len) {
  size_t o = 0;
  for (; *s && o + 7 < len; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') o += (size_t)snprintf(out + o, len - o, "\\%c", c);
    else if (c < 0x20) o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
    else out[o++] = (char)c;
  }
  out[o] = 0;
}

/* s as one CSV field: quoted, inner quotes doubled, line breaks as spaces. */
static void csv_quote(const char *s, char *out, size_t len) {
  size_t o = 0;
  if (!*s || len < 3) {
    if (len) out[0] = 0;
    return;
  }
  out[o++] = '"';
  for (; *s && o + 3 < len; s++) {
    if (*s == '"') out[o++] = '"';
    out[o++] = *s == '\n' || *s == '\r' ? ' ' : *s;
  }
  out[o++] = '"';
  out[o] = 0;
}

static void bench_usage(void) {
  printf(
      "usage: anygrad bench [--backend B[,B...]] [--ops a,b] [--numel N] [--matmul N] [--reps R]\n"
      "                     [--json | --csv]\n\n"
      "Per op and backend: host time per launch of a %d-element op (median of R batches of\n"
      "2000 launches, result released each time) and the synchronized time of one op on N\n"
      "elements (default 4M f32) as GB/s (bytes read + written), or GFLOP/s for an N x N\n"
      "matmul (default 512). Ops: add,mul,exp,gelu,relu,sum,mean,max,argmax,min,sum_rows,\n"
      "sum_cols,softmax,log_softmax,layer_norm,rms_norm,layer_norm_grad,rms_norm_grad,\n"
      "softmax_grad,group_norm,group_norm_grad,cast_f16,transpose_copy,matmul (the row ops on\n"
      "[N/1024, 1024], group norm on [N/4096, 4, 1024] in 2 groups; sum_rows sums the last\n"
      "dim, sum_cols the first; *_grad: forward and x's gradient).\n"
      "Before timing, each case runs once on the device and once on the CPU from the same\n"
      "inputs; a result outside the op's conformance tolerance, a failed launch or\n"
      "synchronization is an error row and an op the device refuses an unsupported row, each\n"
      "with the library's message and no times (JSON: \"status\": \"ok\" | \"unsupported\" |\n"
      "\"error\", \"error\": the message).\n"
      "  --backend B[,B...]  BACKEND[:N] (default: every available backend); a named backend that is\n"
      "                      unavailable is an error\n"
      "  --json | --csv      machine-readable output\n" AG_CLI_THREADS_HELP AG_CLI_NUMERICS_HELP
      "Exit status: 0 success (unsupported rows included), 1 an error row or a runtime error,\n"
      "2 usage error.\n",
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
  /* An error row fails the run; an unsupported one is a fact about the device. */
  for (int i = 0; i < n; i++)
    if (rows[i].status == AG_BENCH_ERROR) rc = 1;
  if (fmt == 1) {
    printf("op,device,dtype,numel,overhead_ns,large_ms,gbps,gflops,status,error\n");
    for (int i = 0; i < n; i++) {
      const ag_bench_row *r = &rows[i];
      char esc[2 * sizeof r->error];
      csv_quote(r->error, esc, sizeof esc);
      if (r->status != AG_BENCH_OK)
        printf("%s,%s,%s,%lld,,,,,%s,%s\n", r->op, r->device, r->dtype, (long long)r->numel,
               ag_bench_status_name(r->status), esc);
      else
        printf("%s,%s,%s,%lld,%.1f,%.4f,%.2f,%.2f,ok,\n", r->op, r->device, r->dtype, (long long)r->numel,
               r->overhead_ns, r->large_ms, r->gbps, r->gflops);
    }
  } else if (fmt == 2) {
    printf("[\n");
    for (int i = 0; i < n; i++) {
      const ag_bench_row *r = &rows[i];
      printf("  {\"op\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", \"numel\": %lld, ", r->op, r->device,
             r->dtype, (long long)r->numel);
      if (r->status == AG_BENCH_OK)
        printf("\"overhead_ns\": %.1f, \"large_ms\": %.4f, \"gbps\": %.2f, \"gflops\": %.2f, \"status\": \"ok\", "
               "\"error\": null",
               r->overhead_ns, r->large_ms, r->gbps, r->gflops);
      else {
        char esc[2 * sizeof r->error];
        json_escape(r->error, esc, sizeof esc);
        printf("\"overhead_ns\": null, \"large_ms\": null, \"gbps\": null, \"gflops\": null, \"status\": \"%s\", "
               "\"error\": \"%s\"",
               ag_bench_status_name(r->status), esc);
      }
      printf("}%s\n", i + 1 < n ? "," : "");
    }
    printf("]\n");
  } else {
    printf("%-15s %-10s %12s %12s %10s %10s\n", "op", "device", "launch ns", "large ms", "GB/s", "GFLOP/s");
    for (int i = 0; i < n; i++) {
      const ag_bench_row *r = &rows[i];
      if (r->status != AG_BENCH_OK) {
        printf("%-15s %-10s %12s  %s\n", r->op, r->device, ag_bench_status_name(r->status), r->error);
        continue;
      }
      printf("%-15s %-10s %12.0f %12.3f %10.2f %10.2f\n", r->op, r->device, r->overhead_ns, r->large_ms, r->gbps,
             r->gflops);
    }
  }
  for (int i = 0; i < n; i++)
    if (rows[i].status == AG_BENCH_ERROR)
      fprintf(stderr, "anygrad bench: %s on %s: %s\n", rows[i].op, rows[i].device, rows[i].error);
  return rc;
}
