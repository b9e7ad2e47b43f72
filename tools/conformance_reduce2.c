/* Conformance of logsumexp, the vector norms, one_hot and conv1d: each op
 * on the device against a reference computed here in double from the
 * definition (torch.logsumexp, torch.linalg.vector_norm,
 * torch.nn.functional.one_hot, torch.nn.functional.conv1d). */
#include "conformance_internal.h"

/* The lines of h reduced over dims (nd == 0: all), in the order of the
 * reduced elements: lines[p * rcount + j] is the j-th element of output p.
 * Fills the output shape (keepdim or not) and returns the number of
 * outputs, or -1 after failing the case (no memory). */
static int64_t gather_lines(ctx *c, const hbuf *h, int nd, const int *dims, bool keep, int *out_ndim,
                            int64_t *out_shape, int64_t *out_rcount, double **out_lines) {
  bool red[AG_MAX_DIMS] = {0};
  for (int i = 0; i < nd; i++) red[(dims[i] + h->ndim) % h->ndim] = true;
  if (nd == 0)
    for (int i = 0; i < h->ndim; i++) red[i] = true;
  int64_t fs[AG_MAX_DIMS], fst[AG_MAX_DIMS], idx[AG_MAX_DIMS];
  int on = 0;
  for (int d = 0; d < h->ndim; d++) {
    fs[d] = red[d] ? 1 : h->shape[d];
    if (!red[d] || keep) out_shape[on++] = fs[d];
  }
  *out_ndim = on;
  int64_t n = ag__conf_prod(h->ndim, fs), rcount = n ? h->n / n : 0;
  ag__conf_cstrides(h->ndim, fs, fst);
  double *lines = ag__conf_cx_alloc(c, (size_t)(h->n ? h->n : 1) * sizeof(double));
  int64_t *fill = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(int64_t));
  if (!lines || !fill) {
    ag__conf_case_fail(c, "no host memory");
    return -1;
  }
  memset(fill, 0, (size_t)(n ? n : 1) * sizeof(int64_t));
  for (int64_t i = 0; i < h->n; i++) {
    ag__conf_unravel(i, h->ndim, h->shape, idx);
    int64_t p = 0;
    for (int d = 0; d < h->ndim; d++) p += (red[d] ? 0 : idx[d]) * fst[d];
    lines[p * rcount + fill[p]++] = h->v[i];
  }
  *out_rcount = rcount;
  *out_lines = lines;
  return n;
}

/* ---- logsumexp ---- */

static double ref_logsumexp(const double *v, int64_t r) {
  double m = -INFINITY;
  for (int64_t k = 0; k < r; k++) {
    if (isnan(v[k])) return NAN;
    if (v[k] > m) m = v[k];
  }
  if (isinf(m)) return m;
  double s = 0;
  for (int64_t k = 0; k < r; k++) s += exp(v[k] - m);
  return m + log(s);
}

void ag__conf_op_logsumexp(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int dim;
    bool keep;
    double lo, hi;
  } S[] = {
      {"[6,32] dim -1", 2, {6, 32}, L_C, -1, false, -3, 5},
      {"[5,7,9] dim 1 keepdim", 3, {5, 7, 9}, L_C, 1, true, -3, 5},
      {"transposed [9,7] dim 0", 2, {9, 7}, L_T, 0, false, -3, 5},
      {"stepped [6,33] dim 1", 2, {6, 33}, L_S, 1, false, -3, 5},
      {"long rows [3,3000] dim 1", 2, {3, 3000}, L_C, 1, false, -3, 5},
      {"long columns [2000,3] dim 0", 2, {2000, 3}, L_C, 0, false, -3, 5},
      {"very long rows [2,70000] dim 1", 2, {2, 70000}, L_C, 1, false, -3, 5},
      {"large entries [4,16] dim 1 (exp overflows)", 2, {4, 16}, L_C, 1, false, 60, 100},
      {"scalar", 0, {0}, L_C, 0, false, -3, 5},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    ag__conf_case_begin(c, S[k].name);
    hbuf *h;
    ag_tensor *a = ag__conf_mk(c, &h, S[k].l, S[k].n, S[k].s, G_UNI, S[k].lo, S[k].hi);
    if (a) {
      int on, dims[1] = {S[k].dim};
      int64_t os[AG_MAX_DIMS], rc;
      double *lines;
      int64_t n = gather_lines(c, h, h->ndim ? 1 : 0, dims, S[k].keep, &on, os, &rc, &lines);
      double *ref = n >= 0 ? ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double)) : NULL;
      for (int64_t i = 0; ref && i < n; i++) ref[i] = ref_logsumexp(lines + i * rc, rc);
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_logsumexp(a, S[k].dim, S[k].keep);
      if (!o) ag__conf_on_null(c, "ag_logsumexp");
      else if (ref) ag__conf_check(c, o, on, os, c->dt, ref, DEF);
      ag__conf_guard_end(c, &g);
    }
    ag__conf_case_end(c);
  }
  /* rows of -inf, with +inf, with NaN, mixed */
  ag__conf_case_begin(c, "special rows [4,3] dim 1");
  {
    const double v[12] = {-INFINITY, -INFINITY, -INFINITY, 1, INFINITY, -2, 0.5, NAN, 1, -INFINITY, 2, 0.25};
    const int64_t s[2] = {4, 3}, os[1] = {4};
    hbuf *h;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &h, 2, s, v);
    if (a) {
      double ref[4];
      for (int i = 0; i < 4; i++) ref[i] = ref_logsumexp(h->v + 3 * i, 3);
      ag_tensor *o = ag_logsumexp(a, 1, false);
      if (!o) ag__conf_on_null(c, "ag_logsumexp");
      else ag__conf_check(c, o, 1, os, c->dt, ref, DEF);
    }
  }
  ag__conf_case_end(c);
}

/* ---- vector norms ---- */

static double ref_norm(const double *v, int64_t r, double p) {
  double s = 0, m = 0;
  for (int64_t k = 0; k < r; k++) {
    double a = fabs(v[k]);
    if (isnan(a)) return NAN;
    if (a > m) m = a;
    s += p == 1 ? a : a * a; /* double has the range for these inputs */
  }
  return p == 1 ? s : p == 2 ? sqrt(s) : m;
}

void ag__conf_op_norm(ctx *c) {
  /* f16 holds neither 1e20 nor 1e-20: its large and tiny lines stay in range */
  const bool h = c->dt == AG_F16;
  const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int nd;
    int dims[3];
    bool keep;
    double p, lo, hi;
  } S[] = {
      {"p 2 [6,32] dim -1", 2, {6, 32}, L_C, 1, {-1}, false, 2, -3, 5},
      {"p 1 [5,7,9] dims 0,2 keepdim", 3, {5, 7, 9}, L_C, 2, {0, 2}, true, 1, -3, 5},
      {"p inf transposed [9,7] dim 0", 2, {9, 7}, L_T, 1, {0}, false, INFINITY, -3, 5},
      {"p 2 all of [5,7,9]", 3, {5, 7, 9}, L_C, 0, {0}, false, 2, -3, 5},
      {"p 1 stepped [6,33] dim 1", 2, {6, 33}, L_S, 1, {1}, false, 1, -3, 5},
      {"p inf [5,7,9] dims 2,0", 3, {5, 7, 9}, L_C, 2, {2, 0}, false, INFINITY, -3, 5},
      {"p 2 long rows [3,3000] dim 1", 2, {3, 3000}, L_C, 1, {1}, false, 2, -3, 5},
      {"p 2 long columns [2000,3] dim 0 keepdim", 2, {2000, 3}, L_C, 1, {0}, true, 2, -3, 5},
      {"p 1 very long rows [2,70000] dim 1", 2, {2, 70000}, L_C, 1, {1}, false, 1, -1, 1},
      {"p inf very long rows [2,70000] dim 1", 2, {2, 70000}, L_C, 1, {1}, false, INFINITY, -1, 1},
      {"p 2 large entries [4,16] dim 1 (squares overflow f32)", 2, {4, 16}, L_C, 1, {1}, false, 2, h ? 1e3 : 1e20,
       h ? 6e3 : 3e20},
      {"p 2 tiny entries [4,16] dim 1 (squares underflow f32)", 2, {4, 16}, L_C, 1, {1}, false, 2, h ? 1e-3 : 1e-25,
       h ? 3e-3 : 3e-25},
      {"p 1 scalar", 0, {0}, L_C, 0, {0}, false, 1, -3, 5},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    ag__conf_case_begin(c, S[k].name);
    hbuf *hb;
    ag_tensor *a = ag__conf_mk(c, &hb, S[k].l, S[k].n, S[k].s, G_UNI, S[k].lo, S[k].hi);
    if (a) {
      int on;
      int64_t os[AG_MAX_DIMS], rc;
      double *lines;
      int64_t n = gather_lines(c, hb, S[k].nd, S[k].dims, S[k].keep, &on, os, &rc, &lines);
      double *ref = n >= 0 ? ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double)) : NULL;
      for (int64_t i = 0; ref && i < n; i++) ref[i] = ref_norm(lines + i * rc, rc, S[k].p);
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_norm(a, S[k].p, S[k].nd, S[k].nd ? S[k].dims : NULL, S[k].keep);
      if (!o) ag__conf_on_null(c, "ag_norm");
      else if (ref) ag__conf_check(c, o, on, os, c->dt, ref, DEF);
      ag__conf_guard_end(c, &g);
    }
    ag__conf_case_end(c);
  }
  /* a zero line, one with inf, one with NaN, a mixed one: each p */
  static const double ps[3] = {1, 2, INFINITY};
  static const char *const pn[3] = {"special rows [4,3] dim 1 p 1", "special rows [4,3] dim 1 p 2",
                                    "special rows [4,3] dim 1 p inf"};
  for (int q = 0; q < 3; q++) {
    ag__conf_case_begin(c, pn[q]);
    const double v[12] = {0, 0, 0, 1, -INFINITY, -2, 0.5, NAN, 1, -3, 2, 0.25};
    const int64_t s[2] = {4, 3}, os[1] = {4};
    hbuf *hb;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &hb, 2, s, v);
    if (a) {
      double ref[4];
      for (int i = 0; i < 4; i++) ref[i] = ref_norm(hb->v + 3 * i, 3, ps[q]);
      ag_tensor *o = ag_norm(a, ps[q], 1, (const int[]){1}, false);
      if (!o) ag__conf_on_null(c, "ag_norm");
      else ag__conf_check(c, o, 1, os, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
}

/* ---- one_hot (rows in the index's dtype: i64 and i32) ---- */

void ag__conf_op_one_hot(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int64_t classes; /* < 0: from the maximum */
    int64_t hi;      /* indices drawn from [0, hi] */
  } S[] = {
      {"[7] 5 classes", 1, {7}, L_C, 5, 4},
      {"[3,4] 6 classes", 2, {3, 4}, L_C, 6, 5},
      {"transposed [5,3] 9 classes", 2, {5, 3}, L_T, 9, 8},
      {"[2,3,4] classes from the maximum", 3, {2, 3, 4}, L_C, -1, 6},
      {"[300] 1000 classes", 1, {300}, L_C, 1000, 999},
      {"scalar 3 classes", 0, {0}, L_C, 3, 2},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    ag__conf_case_begin(c, S[k].name);
    hbuf *h;
    ag_tensor *ix = ag__conf_mk_dt(c, c->dt, &h, S[k].l, S[k].n, S[k].s, G_INT, 0, (double)S[k].hi);
    if (ix) {
      int64_t classes = S[k].classes, os[AG_MAX_DIMS];
      if (classes < 0) {
        classes = 0;
        for (int64_t i = 0; i < h->n; i++)
          if (h->v[i] + 1 > classes) classes = (int64_t)h->v[i] + 1;
      }
      memcpy(os, h->shape, sizeof(int64_t) * (size_t)h->ndim);
      os[h->ndim] = classes;
      double *ref = ag__conf_cx_alloc(c, (size_t)(h->n * classes) * sizeof(double));
      for (int64_t i = 0; ref && i < h->n; i++)
        for (int64_t j = 0; j < classes; j++) ref[i * classes + j] = h->v[i] == (double)j ? 1 : 0;
      guard g;
      ag__conf_guard_begin(c, &g, AG_I64, h->n * classes);
      ag_tensor *o = ag_one_hot(ix, S[k].classes);
      if (!o) ag__conf_on_null(c, "ag_one_hot");
      else if (ref) ag__conf_check(c, o, h->ndim + 1, os, AG_I64, ref, EXACT);
      ag__conf_guard_end(c, &g);
    }
    ag__conf_case_end(c);
  }
  /* an index out of range: AG_ERR_INDEX by the next host sync */
  static const double bad[2][4] = {{0, 5, 1, 2}, {0, -1, 1, 2}};
  static const char *const bn[2] = {"index 5 of 5 classes: AG_ERR_INDEX", "index -1: AG_ERR_INDEX"};
  for (int q = 0; q < 2; q++) {
    ag__conf_case_begin(c, bn[q]);
    hbuf *h;
    ag_tensor *ix = ag__conf_mk_vals(c, c->dt, &h, 1, (const int64_t[]){4}, bad[q]);
    if (ix) {
      ag_tensor *o = ag_one_hot(ix, 5);
      ag_status st = o ? AG_OK : ag_last_status();
      if (o) {
        int64_t tmp[20];
        st = ag_to_host(o, tmp, sizeof tmp);
      }
      if (st == AG_ERR_UNSUPPORTED) ag__conf_case_unsup(c, "ag_one_hot");
      else if (st != AG_ERR_INDEX)
        ag__conf_case_fail(c, "got %s, want AG_ERR_INDEX (%s)", ag_status_name(st), ag_last_error());
      ag_error_clear();
    }
    ag__conf_case_end(c);
  }
}

/* ---- conv1d (composed over conv2d: its dtypes) ---- */

void ag__conf_op_conv1d(ctx *c) {
  static const struct {
    const char *name;
    int64_t n, ci, l, co, k;
    int stride, pad, dil, groups;
    bool bias;
  } S[] = {
      {"[2,3,10] * [4,3,3]", 2, 3, 10, 4, 3, 1, 0, 1, 1, true},
      {"stride 2 padding 2 dilation 2", 2, 4, 11, 6, 3, 2, 2, 2, 1, true},
      {"groups 2 no bias", 3, 4, 9, 6, 2, 1, 1, 1, 2, false},
      {"depthwise [1,5,16] groups 5", 1, 5, 16, 5, 4, 3, 1, 1, 5, true},
      {"long [1,2,700] kernel 9", 1, 2, 700, 3, 9, 1, 4, 1, 1, true},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    ag__conf_case_begin(c, S[k].name);
    hbuf *hx, *hw, *hb = NULL;
    const int64_t xs[3] = {S[k].n, S[k].ci, S[k].l}, ws[3] = {S[k].co, S[k].ci / S[k].groups, S[k].k};
    ag_tensor *x = ag__conf_mk(c, &hx, L_C, 3, xs, G_UNI, -1, 1);
    ag_tensor *w = x ? ag__conf_mk(c, &hw, L_C, 3, ws, G_UNI, -1, 1) : NULL;
    ag_tensor *b = w && S[k].bias ? ag__conf_mk(c, &hb, L_C, 1, &S[k].co, G_UNI, -1, 1) : NULL;
    if (w && (b || !S[k].bias)) {
      const int64_t lo = (S[k].l + 2 * S[k].pad - S[k].dil * (S[k].k - 1) - 1) / S[k].stride + 1;
      const int64_t os[3] = {S[k].n, S[k].co, lo}, cpg = S[k].ci / S[k].groups, opg = S[k].co / S[k].groups;
      double *ref = ag__conf_cx_alloc(c, (size_t)(S[k].n * S[k].co * lo) * sizeof(double));
      for (int64_t n = 0; ref && n < S[k].n; n++)
        for (int64_t o = 0; o < S[k].co; o++)
          for (int64_t j = 0; j < lo; j++) {
            double s = b ? hb->v[o] : 0;
            int64_t g = o / opg;
            for (int64_t ci = 0; ci < cpg; ci++)
              for (int64_t q = 0; q < S[k].k; q++) {
                int64_t pos = j * S[k].stride - S[k].pad + q * S[k].dil;
                if (pos < 0 || pos >= S[k].l) continue;
                s += hx->v[(n * S[k].ci + g * cpg + ci) * S[k].l + pos] * hw->v[(o * cpg + ci) * S[k].k + q];
              }
            ref[(n * S[k].co + o) * lo + j] = s;
          }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, S[k].n * S[k].co * lo);
      ag_tensor *y = ag_conv1d(x, w, b, S[k].stride, S[k].pad, S[k].dil, S[k].groups);
      if (!y) ag__conf_on_null(c, "ag_conv1d");
      else if (ref) ag__conf_check(c, y, 3, os, c->dt, ref, DEF);
      ag__conf_guard_end(c, &g);
    }
    ag__conf_case_end(c);
  }
}
