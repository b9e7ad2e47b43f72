/* Conformance of the ops that move elements by index: sort, argsort,
 * scatter_add, index_add and pad against references in double written from torch's definitions (not from
 * the kernels). */
#include "conformance_internal.h"

/* ---- sort ---- */

/* torch.sort(stable=True): ascending puts NaN last, descending first; equal
 * keys (and NaNs) keep their order. */
static bool sort_ref_before(double a, int64_t ia, double b, int64_t ib, bool desc) {
  if (isnan(a) != isnan(b)) return desc ? isnan(a) : isnan(b);
  if (!isnan(a) && a != b) return desc ? a > b : a < b;
  return ia < ib;
}

static void run_sort(ctx *c, bool arg) {
  static const double nanrow[12] = {1, NAN, -2, 3, NAN, 0, -0.0, -1, 5, NAN, 2, 2};
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int dim;
    bool desc;
    int kind; /* 0 uniform, 1 small integers (ties: stability), 2 the NaN rows */
  } T[] = {
      {"[6,32] dim -1 ascending", 2, {6, 32}, L_C, -1, false, 0},
      {"[5,7,9] dim 1 descending", 3, {5, 7, 9}, L_C, 1, true, 0},
      {"ties [4,20] ascending", 2, {4, 20}, L_C, 1, false, 1},
      {"ties [4,20] descending", 2, {4, 20}, L_C, 1, true, 1},
      {"ties, transposed [9,7] dim 0 descending", 2, {9, 7}, L_T, 0, true, 1},
      {"ties, stepped [3,5,6] dim 2 ascending", 3, {3, 5, 6}, L_S, 2, false, 1},
      {"NaN and -0 [2,6] ascending", 2, {2, 6}, L_C, 1, false, 2},
      {"NaN and -0 [2,6] descending", 2, {2, 6}, L_C, 1, true, 2},
      {"[1] dim 0", 1, {1}, L_C, 0, false, 0},
      {"empty [3,0] dim 1", 2, {3, 0}, L_C, 1, true, 0},
      {"scalar", 0, {0}, L_C, 0, false, 0},
      {"long rows [2,1000] descending", 2, {2, 1000}, L_C, 1, true, 0},
  };
  for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
    ag__conf_case_begin(c, T[t].name);
    hbuf *h;
    ag_tensor *x = T[t].kind == 2 ? ag__conf_mk_vals(c, c->dt, &h, T[t].n, T[t].s, nanrow)
                                  : ag__conf_mk(c, &h, T[t].l, T[t].n, T[t].s, T[t].kind ? G_INT : G_UNI,
                                                T[t].kind ? 0 : -3, 3);
    if (x) {
      int nd = h->ndim ? h->ndim : 1, d = (T[t].dim + nd) % nd;
      int64_t R = h->ndim ? h->shape[d] : 1, inner = 1;
      for (int i = d + 1; i < h->ndim; i++) inner *= h->shape[i];
      int64_t lines = R ? h->n / R : 0, n = h->n;
      double *rv = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      double *ri = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      for (int64_t ln = 0; rv && ri && ln < lines; ln++) {
        int64_t o = ln / inner, i = ln % inner;
        for (int64_t j = 0; j < R; j++) {
          double v = h->v[(o * R + j) * inner + i];
          int64_t rank = 0;
          for (int64_t q = 0; q < R; q++)
            if (sort_ref_before(h->v[(o * R + q) * inner + i], q, v, j, T[t].desc)) rank++;
          rv[(o * R + rank) * inner + i] = v;
          ri[(o * R + rank) * inner + i] = (double)j;
        }
      }
      guard g;
      ag__conf_guard_begin(c, &g, AG_I64, n);
      if (arg) {
        ag_tensor *idx = ag_argsort(x, T[t].dim, T[t].desc);
        if (!idx) ag__conf_on_null(c, "ag_argsort");
        else if (rv && ri) {
          ag__conf_check(c, idx, h->ndim, h->shape, AG_I64, ri, EXACT);
          ag__conf_guard_end(c, &g);
        }
      } else {
        ag_tensor *vals = NULL, *idx = NULL;
        ag_status st = ag_sort(x, T[t].dim, T[t].desc, &vals, &idx);
        if (st != AG_OK) ag__conf_on_null(c, "ag_sort");
        else if (rv && ri) {
          ag__conf_check(c, vals, h->ndim, h->shape, c->dt, rv, EXACT);
          ag__conf_check(c, idx, h->ndim, h->shape, AG_I64, ri, EXACT);
          ag__conf_guard_end(c, &g);
        }
      }
    }
    ag__conf_case_end(c);
  }
}
void ag__conf_op_sort(ctx *c) { run_sort(c, false); }
void ag__conf_op_argsort(ctx *c) { run_sort(c, true); }

/* ---- scatter_add, index_add ---- */

/* out = self, then for every position p of the index (or k of index_add's
 * 1-d index): out[p with dim replaced by index[p]] += alpha * src[p]. */
static void run_scatter(ctx *c, int sel) {
  static const struct {
    const char *name;
    int n;
    int64_t xs[3];
    int lx;
    int ni;
    int64_t is[3];
    int li;
    int64_t ss[3];
    int dim;
    bool i64;
    double alpha;
  } S[2][5] = {
      {{"self [5,7] dim 1, i64 index [5,4]", 2, {5, 7}, L_C, 2, {5, 4}, L_C, {5, 4}, 1, true, 1},
       {"self [4,6,5] dim 0, index [3,6,2] (narrower), src [3,7,3]", 3, {4, 6, 5}, L_C, 3, {3, 6, 2}, L_C,
        {3, 7, 3}, 0, false, 1},
       {"transposed self [6,8] dim -1, stepped index [2,3]", 2, {6, 8}, L_T, 2, {2, 3}, L_S, {2, 5}, -1, false, 1},
       {"repeats: self [3,4] dim 0, index [12,4] of 0..2", 2, {3, 4}, L_C, 2, {12, 4}, L_C, {12, 4}, 0, true, 1},
       {"scalar self, index and src", 0, {0}, L_C, 0, {0}, L_C, {0}, 0, true, 1}},
      {{"self [5,7] dim 0, i64 index [4], alpha 1", 2, {5, 7}, L_C, 1, {4}, L_C, {4, 7}, 0, true, 1},
       {"self [3,6,4] dim 1, index [8] with repeats, alpha -2.5", 3, {3, 6, 4}, L_C, 1, {8}, L_C, {3, 8, 4}, 1,
        false, -2.5},
       {"transposed self [6,5] dim -1, stepped index [3], alpha 0.5", 2, {6, 5}, L_T, 1, {3}, L_S, {6, 3}, -1, false,
        0.5},
       {"self [4,3] dim 0, index [20] of 0..3", 2, {4, 3}, L_C, 1, {20}, L_C, {20, 3}, 0, false, 1},
       {"self [4,3] dim 0, empty index", 2, {4, 3}, L_C, 1, {0}, L_C, {0, 3}, 0, false, 1}},
  };
  for (int t = 0; t < 5; t++) {
    const __typeof__(S[0][0]) *q = &S[sel][t];
    ag__conf_case_begin(c, q->name);
    hbuf *hx, *hi, *hs;
    int nd = q->n ? q->n : 1, d = (q->dim + nd) % nd;
    double top = q->n ? (double)(q->xs[d] - 1) : 0;
    if (t == 3) top = sel ? 3 : 2;
    ag_tensor *x = ag__conf_mk(c, &hx, q->lx, q->n, q->xs, G_UNI, -3, 3);
    ag_tensor *ix = ag__conf_mk_dt(c, q->i64 ? AG_I64 : AG_I32, &hi, q->li, q->ni, q->is, G_INT, 0, top);
    ag_tensor *src = ag__conf_mk(c, &hs, L_C, q->n, q->ss, G_UNI, -3, 3);
    if (x && ix && src) {
      int64_t xst[AG_MAX_DIMS], sst[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      ag__conf_cstrides(q->n, q->xs, xst);
      ag__conf_cstrides(q->n, q->ss, sst);
      double *ref = ag__conf_cx_alloc(c, (size_t)(hx->n ? hx->n : 1) * sizeof(double));
      /* the positions the op walks: the index's (scatter_add) or the
       * source's (index_add, whose index is 1-d) */
      const int64_t *ws = sel ? q->ss : q->is;
      int64_t wn = ag__conf_prod(q->n, ws);
      if (sel && q->n == 0) wn = 1;
      for (int64_t k = 0; ref && k < hx->n; k++) ref[k] = hx->v[k];
      for (int64_t w = 0; ref && w < wn; w++) {
        ag__conf_unravel(w, q->n, ws, idx);
        int64_t j = (int64_t)hi->v[sel ? (q->n ? idx[d] : 0) : w], po = 0, ps = 0;
        for (int i = 0; i < q->n; i++) {
          po += (i == d ? j : idx[i]) * xst[i];
          ps += idx[i] * sst[i];
        }
        ref[po] += q->alpha * hs->v[ps];
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, hx->n);
      ag_tensor *o = sel ? ag_index_add(x, q->dim, ix, src, q->alpha) : ag_scatter_add(x, q->dim, ix, src);
      if (!o) ag__conf_on_null(c, sel ? "ag_index_add" : "ag_scatter_add");
      else if (ref) {
        ag__conf_check(c, o, q->n, q->xs, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}
void ag__conf_op_scatter_add(ctx *c) { run_scatter(c, 0); }
void ag__conf_op_index_add(ctx *c) { run_scatter(c, 1); }

/* ---- pad ---- */

/* The source of padded position p along a dim of size n with `before`
 * padded in front: -1 for the constant, the mirror (no edge repeat) for
 * reflect. */
static int64_t pad_ref_src(int64_t p, int64_t before, int64_t n, bool reflect) {
  int64_t r = p - before;
  if (r >= 0 && r < n) return r;
  if (!reflect) return -1;
  return r < 0 ? -r : 2 * (n - 1) - r;
}

void ag__conf_op_pad(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[4];
    int l;
    int np;
    int64_t pads[6];
    ag_pad_mode mode;
    double value;
  } P[] = {
      {"constant [2,3,4,5] last dim (1,2) value -1.25", 4, {2, 3, 4, 5}, L_C, 2, {1, 2}, AG_PAD_CONSTANT, -1.25},
      {"constant [2,3,4,5] last two dims (1,0,2,1)", 4, {2, 3, 4, 5}, L_C, 4, {1, 0, 2, 1}, AG_PAD_CONSTANT, 0},
      {"constant, transposed [2,3,4] three dims (1,1,0,2,3,1) value 2.5", 3, {2, 3, 4}, L_T, 6, {1, 1, 0, 2, 3, 1},
       AG_PAD_CONSTANT, 2.5},
      {"constant [3,4] value NaN (1,1)", 2, {3, 4}, L_C, 2, {1, 1}, AG_PAD_CONSTANT, NAN},
      {"constant [3,4] zero pads", 2, {3, 4}, L_C, 4, {0, 0, 0, 0}, AG_PAD_CONSTANT, 7},
      {"reflect [2,3,6] last dim (2,3)", 3, {2, 3, 6}, L_C, 2, {2, 3}, AG_PAD_REFLECT, 0},
      {"reflect [2,3,5,6] last two dims (1,2,3,4)", 4, {2, 3, 5, 6}, L_C, 4, {1, 2, 3, 4}, AG_PAD_REFLECT, 0},
      {"reflect, stepped [1,2,4,3] (2,2,3,1)", 4, {1, 2, 4, 3}, L_S, 4, {2, 2, 3, 1}, AG_PAD_REFLECT, 0},
      {"reflect [7] (6,6)", 1, {7}, L_C, 2, {6, 6}, AG_PAD_REFLECT, 0},
  };
  for (size_t t = 0; t < sizeof P / sizeof P[0]; t++) {
    ag__conf_case_begin(c, P[t].name);
    hbuf *h;
    ag_tensor *x = ag__conf_mk(c, &h, P[t].l, P[t].n, P[t].s, G_UNI, -3, 3);
    if (x) {
      int nd = P[t].n;
      int64_t os[4], before[4] = {0}, xst[4], idx[4];
      for (int i = 0; i < nd; i++) os[i] = P[t].s[i];
      for (int k = 0; k < P[t].np / 2; k++) {
        before[nd - 1 - k] = P[t].pads[2 * k];
        os[nd - 1 - k] += P[t].pads[2 * k] + P[t].pads[2 * k + 1];
      }
      ag__conf_cstrides(nd, P[t].s, xst);
      int64_t n = ag__conf_prod(nd, os);
      double *ref = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      for (int64_t o = 0; ref && o < n; o++) {
        ag__conf_unravel(o, nd, os, idx);
        int64_t p = 0;
        bool in = true;
        for (int i = 0; i < nd && in; i++) {
          int64_t r = pad_ref_src(idx[i], before[i], P[t].s[i], P[t].mode == AG_PAD_REFLECT);
          if (r < 0) in = false;
          else p += r * xst[i];
        }
        ref[o] = in ? h->v[p] : P[t].value;
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *y = ag_pad(x, P[t].pads, P[t].np, P[t].mode, P[t].value);
      if (!y) ag__conf_on_null(c, "ag_pad");
      else if (ref) {
        ag__conf_check(c, y, nd, os, c->dt, ref, EXACT);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

/* ---- the functions of the gradient rows (conformance_grad.c, GA_INDEX) ---- */

/* Each row's f(x): temporaries belong to the caller's scope. */
ag_tensor *ag__conf_grad_index(int fn, ag_tensor **x) {
  switch (fn) {
    case CONF_GI_SORT: {
      /* x [4, 3] in [-2, 2] plus 10 per row, sorted descending along dim 0:
       * the keys are 10 apart, so a step of the differences never reorders
       * them, and the order reverses the rows (a true permutation) */
      ag_tensor *x0 = x[0];
      ag_tensor *off = ag_reshape(ag_arange(ag_tensor_device(x0), ag_tensor_dtype(x0), 0, 40, 10), 2,
                                  (const int64_t[]){4, 1});
      ag_tensor *v = NULL, *ix = NULL;
      return ag_sort(ag_add(x0, off), 0, true, &v, &ix) == AG_OK ? v : NULL;
    }
    case CONF_GI_SCATTER_ADD: return ag_scatter_add(x[0], 0, x[1], x[2]);
    case CONF_GI_INDEX_ADD: return ag_index_add(x[0], 0, x[1], x[2], 1.5);
    case CONF_GI_PAD_CONSTANT: {
      static const int64_t pads[6] = {1, 2, 0, 1, 1, 0};
      return ag_pad(x[0], pads, 6, AG_PAD_CONSTANT, 0.5);
    }
    case CONF_GI_PAD_REFLECT: {
      static const int64_t pads[4] = {2, 3, 1, 2};
      return ag_pad(x[0], pads, 4, AG_PAD_REFLECT, 0);
    }
    default: return NULL;
  }
}
