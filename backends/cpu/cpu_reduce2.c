/* CPU kernels of the line reductions added with the typed kernel-op table
 * (logsumexp, vector norms) and one_hot. Each line of [outer, r, inner] is
 * loaded into double and reduced in order, so results repeat bit for bit;
 * the lines are split across the host pool. Dispatched from cpu_kernels.c. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_portable.h"
#include "cpu_tile.h"

/* ---- [outer, r, inner] -> [outer, inner], one line at a time ---- */

typedef double (*line_fn)(const double *v, int64_t r, int variant);

typedef struct line_ctx {
  const ag_koperand *out, *x;
  int64_t r, inner;
  int variant;
  line_fn fn;
  atomic_bool oom;
} line_ctx;

static void lines_range(void *p, int64_t a, int64_t b) {
  line_ctx *l = p;
  double *v = malloc((size_t)(l->r > 0 ? l->r : 1) * sizeof(double));
  if (!v) {
    atomic_store(&l->oom, true);
    return;
  }
  const ag_dtype dx = l->x->dtype, dy = l->out->dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  for (int64_t t = a; t < b; t++) {
    int64_t o = t / l->inner, i = t % l->inner;
    load_d(dx, ag__cpu_ptr(l->x) + (size_t)(o * l->r * l->inner + i) * ex, l->inner, l->r, v);
    double y = l->fn(v, l->r, l->variant);
    store_d(dy, ag__cpu_ptr(l->out) + (size_t)t * ey, 1, 1, &y);
  }
  free(v);
}

static ag_status run_lines(const ag_kernel_call *c, const ag_koperand *out, const ag_koperand *x, int64_t outer,
                           int64_t r, int64_t inner, int variant, line_fn fn) {
  line_ctx l = {.out = out, .x = x, .r = r, .inner = inner, .variant = variant, .fn = fn};
  atomic_init(&l.oom, false);
  ag__cpu_par_for(outer * inner, outer * inner * (r > 0 ? r : 1) * 4, lines_range, &l);
  if (atomic_load(&l.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for a line", c->name ? c->name : "cpu kernel");
  return AG_OK;
}

/* max + log(sum(exp(v - max))); -inf for an empty or all -inf line, +inf
 * when the max is +inf (exp(inf - inf) is never formed), NaN propagates. */
static double logsumexp_line(const double *v, int64_t r, int variant) {
  (void)variant;
  double m = -INFINITY;
  for (int64_t k = 0; k < r; k++) {
    if (isnan(v[k])) return v[k];
    if (v[k] > m) m = v[k];
  }
  if (isinf(m)) return m;
  double s = 0;
  for (int64_t k = 0; k < r; k++) s += exp(v[k] - m);
  return m + log(s);
}

ag_status cpu_k_logsumexp(ag_kernel_error *err, const ag_k_logsumexp *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_logsumexp(a);
  (void)err;
  return run_lines(a->call, a->out, a->x, a->outer, a->r, a->inner, a->variant, logsumexp_line);
}

/* sum |v|, max |v|, or sqrt(sum v^2) as m * sqrt(sum (v/m)^2) with m the
 * largest |v| (no overflow or underflow); NaN propagates. */
static double norm_line(const double *v, int64_t r, int variant) {
  double m = 0, s = 0;
  for (int64_t k = 0; k < r; k++) {
    double a = fabs(v[k]);
    if (isnan(a)) return a;
    s += a;
    if (a > m) m = a;
  }
  if (variant == AG_KV_NORM_L1) return s;
  if (variant == AG_KV_NORM_INF || m == 0 || isinf(m)) return m;
  s = 0;
  for (int64_t k = 0; k < r; k++) s += (v[k] / m) * (v[k] / m);
  return m * sqrt(s);
}

ag_status cpu_k_norm(ag_kernel_error *err, const ag_k_norm *a) {
  (void)err;
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_norm(a);
  return run_lines(a->call, a->out, a->x, a->outer, a->r, a->inner, a->variant, norm_line);
}

/* ---- one_hot: out [n, classes] (i64) = 1 at index[i], 0 elsewhere; an
 * index out of range zeroes its row and sets the error word ---- */
ag_status cpu_k_one_hot(ag_kernel_error *err, const ag_k_one_hot *a) {
  if (a->out->dtype != AG_I64)
    return ag_error_set(AG_ERR_UNSUPPORTED, "%s: one_hot writes i64, not %s", a->call->name ? a->call->name : "cpu",
                        ag_dtype_name(a->out->dtype));
  const int64_t n = a->n, classes = a->classes;
  int64_t *out = (int64_t *)(void *)ag__cpu_ptr(a->out);
  memset(out, 0, (size_t)(n * classes) * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++) {
    int64_t v = idx_at(a->index, i);
    if (v < 0 || v >= classes) kerr(err, AG_K_ONE_HOT, v, classes);
    else out[i * classes + v] = 1;
  }
  return AG_OK;
}
