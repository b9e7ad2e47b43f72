/* Conformance of the ops that move elements by index: sort and argsort
 * against references in double written from torch's definitions (not from
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
    default: return NULL;
  }
}
