/* Conformance cases of the reductions (sum, mean, max, min, argmax, var,
 * std, cumsum) and of indexing (gather, index_select, topk) against host
 * references. */
#include "conformance_internal.h"

/* ---- reductions ---- */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX };

static void run_reduce(ctx *c, int op) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int nd;
    int dims[3];
    bool keep;
  } R[] = {
      {"[5,7,9] dim 1", 3, {5, 7, 9}, L_C, 1, {1}, false},
      {"[5,7,9] dims 0,2 keepdim", 3, {5, 7, 9}, L_C, 2, {0, 2}, true},
      {"transposed [9,7] dim -1", 2, {9, 7}, L_T, 1, {-1}, false},
      {"stepped [6,33] dim 0 keepdim", 2, {6, 33}, L_S, 1, {0}, true},
      {"all of [5,7,9]", 3, {5, 7, 9}, L_C, 0, {0}, false},
      {"long [4099] all", 1, {4099}, L_C, 0, {0}, false},
      {"expanded [8,5] dim 0", 2, {8, 5}, L_E, 1, {0}, false},
  };
  static const char *names[] = {"ag_sum", "ag_mean", "ag_max", "ag_min", "ag_argmax"};
  for (size_t k = 0; k < sizeof R / sizeof R[0]; k++) {
    if (op == R_ARGMAX && R[k].nd != 1) continue;
    ag__conf_case_begin(c, R[k].name);
    hbuf *h;
    double lo = c->dt == AG_I32 ? -50 : -2, hi = -lo;
    if (c->dt == AG_U8) lo = 0, hi = 100;
    else ag__conf_int_range(c->dt, &lo, &hi);
    /* sums of bool and u8 are i64 (PyTorch); argmax is i64 (PyTorch) */
    const ag_dtype odt = op == R_ARGMAX ? AG_I64
                         : op == R_SUM && (c->dt == AG_BOOL || c->dt == AG_U8) ? AG_I64 : c->dt;
    ag_tensor *a = ag__conf_mk(c, &h, R[k].l, R[k].n, R[k].s, G_UNI, lo, hi);
    if (a) {
      bool red[AG_MAX_DIMS] = {0};
      for (int i = 0; i < R[k].nd; i++) red[(R[k].dims[i] + h->ndim) % h->ndim] = true;
      if (R[k].nd == 0)
        for (int i = 0; i < h->ndim; i++) red[i] = true;
      int64_t os[AG_MAX_DIMS], fs[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int on = 0;
      for (int d = 0; d < h->ndim; d++) {
        fs[d] = red[d] ? 1 : h->shape[d];
        if (!red[d] || R[k].keep) os[on++] = fs[d];
      }
      int64_t n = ag__conf_prod(h->ndim, fs), rcount = h->n / (n ? n : 1);
      ag_tensor *o;
      guard g;
      ag__conf_guard_begin(c, &g, odt, n);
      if (op == R_SUM) o = ag_sum(a, R[k].nd, R[k].dims, R[k].keep);
      else if (op == R_MEAN) o = ag_mean(a, R[k].nd, R[k].dims, R[k].keep);
      else if (op == R_MAX) o = ag_max(a, R[k].nd, R[k].dims, R[k].keep);
      else if (op == R_MIN) o = ag_min(a, R[k].nd, R[k].dims, R[k].keep);
      else o = ag_argmax(a, R[k].dims[0], R[k].keep);
      if (!o) ag__conf_on_null(c, names[op]);
      else {
        double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
        double *best = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
        bool *seen = ag__conf_cx_alloc(c, (size_t)n);
        int64_t fst[AG_MAX_DIMS];
        ag__conf_cstrides(h->ndim, fs, fst);
        int rd_dim = (R[k].dims[0] + h->ndim) % h->ndim;
        for (int64_t i = 0; ref && best && seen && i < h->n; i++) {
          ag__conf_unravel(i, h->ndim, h->shape, idx);
          int64_t p = 0;
          for (int d = 0; d < h->ndim; d++) p += (red[d] ? 0 : idx[d]) * fst[d];
          double x = h->v[i];
          if (op == R_SUM || op == R_MEAN) ref[p] += x;
          else if (!seen[p] || (op == R_MIN ? x < best[p] : x > best[p])) {
            best[p] = x;
            ref[p] = op == R_ARGMAX ? (double)idx[rd_dim] : x;
          }
          seen[p] = true;
        }
        if (op == R_MEAN)
          for (int64_t i = 0; i < n; i++) ref[i] /= (double)rcount;
        c->din = h;
        int dp = snprintf(c->dinfo, sizeof c->dinfo, "\"dims\": [");
        for (int i = 0; i < R[k].nd; i++) dp += snprintf(c->dinfo + dp, sizeof c->dinfo - (size_t)dp, "%s%d", i ? ", " : "", R[k].dims[i]);
        snprintf(c->dinfo + dp, sizeof c->dinfo - (size_t)dp, "], \"keep\": %s", R[k].keep ? "true" : "false");
        if (ref && best && seen)
          ag__conf_check(c, o, on, os, odt, ref,
                op == R_SUM || op == R_MEAN ? DEF : EXACT);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
  if (c->acc && ag_dtype_is_float(c->dt) && (op == R_SUM || op == R_MEAN)) {
    /* rows of 256 along the last dim: cancellation of large terms of both
     * signs around small ones, magnitudes over 12 (f16: 5) decades, an
     * infinity, a NaN, and only signed zeros */
    ag__conf_case_begin(c, "adversarial [5,256] dim -1");
    c->adv = true;
    enum { R = 5, L = 256 };
    double v[R * L];
    const double big = c->dt == AG_F16 ? 1e2 : 1e4, decades = c->dt == AG_F16 ? 5 : 12;
    for (int j = 0; j < L; j++) {
      v[j] = j % 2 ? (j % 4 == 1 ? big : -big) : 1e-3 * (ag__conf_urand(c) - 0.5);
      v[L + j] = (ag__conf_urand(c) < 0.5 ? -1 : 1) * pow(10, decades * ag__conf_urand(c) - decades / 2);
      v[2 * L + j] = j == 17 ? INFINITY : ag__conf_urand(c) - 0.5;
      v[3 * L + j] = j == 200 ? NAN : ag__conf_urand(c) - 0.5;
      v[4 * L + j] = j % 3 ? -0.0 : 0.0;
    }
    int64_t sh[2] = {R, L}, os[1] = {R};
    int dim[1] = {-1};
    hbuf *h;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &h, 2, sh, v);
    if (a) {
      ag_tensor *o = op == R_SUM ? ag_sum(a, 1, dim, false) : ag_mean(a, 1, dim, false);
      double ref[R] = {0};
      for (int r = 0; r < R; r++) {
        for (int j = 0; j < L; j++) ref[r] += h->v[r * L + j];
        if (op == R_MEAN) ref[r] /= L;
      }
      c->din = h;
      snprintf(c->dinfo, sizeof c->dinfo, "\"dims\": [-1], \"keep\": false");
      if (!o) ag__conf_on_null(c, names[op]);
      else ag__conf_check(c, o, 1, os, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
}

/* var (sq 0) and std (sq 1): reference in double from the centred values. */
static void run_var(ctx *c, int sq) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int nd;
    int dims[3];
    double corr;
    bool keep;
  } V[] = {
      {"[6,32] dim -1 correction 1", 2, {6, 32}, L_C, 1, {-1}, 1, false},
      {"[5,7,9] dims 0,2 correction 0 keepdim", 3, {5, 7, 9}, L_C, 2, {0, 2}, 0, true},
      {"transposed [9,7] dim 0 correction 1", 2, {9, 7}, L_T, 1, {0}, 1, false},
      {"stepped [6,33] dim 1 correction 2 keepdim", 2, {6, 33}, L_S, 1, {1}, 2, true},
      {"all of [5,7,9] correction 1", 3, {5, 7, 9}, L_C, 0, {0}, 1, false},
      {"long rows [3,1500] dim 1", 2, {3, 1500}, L_C, 1, {1}, 1, false},
      {"[4,1] dim 1 correction 1 (N - correction = 0: nan)", 2, {4, 1}, L_C, 1, {1}, 1, false},
      {"[4,3] dim 1 correction 5 (N - correction < 0: inf)", 2, {4, 3}, L_C, 1, {1}, 5, false},
  };
  for (size_t k = 0; k < sizeof V / sizeof V[0]; k++) {
    ag__conf_case_begin(c, V[k].name);
    hbuf *h;
    ag_tensor *a = ag__conf_mk(c, &h, V[k].l, V[k].n, V[k].s, G_UNI, -3, 5);
    if (a) {
      bool red[AG_MAX_DIMS] = {0};
      for (int i = 0; i < V[k].nd; i++) red[(V[k].dims[i] + h->ndim) % h->ndim] = true;
      if (V[k].nd == 0)
        for (int i = 0; i < h->ndim; i++) red[i] = true;
      int64_t os[AG_MAX_DIMS], fs[AG_MAX_DIMS], idx[AG_MAX_DIMS], fst[AG_MAX_DIMS];
      int on = 0;
      for (int d = 0; d < h->ndim; d++) {
        fs[d] = red[d] ? 1 : h->shape[d];
        if (!red[d] || V[k].keep) os[on++] = fs[d];
      }
      int64_t n = ag__conf_prod(h->ndim, fs), rcount = h->n / (n ? n : 1);
      ag__conf_cstrides(h->ndim, fs, fst);
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = sq ? ag_std(a, V[k].nd, V[k].dims, V[k].corr, V[k].keep)
                        : ag_var(a, V[k].nd, V[k].dims, V[k].corr, V[k].keep);
      if (!o) ag__conf_on_null(c, sq ? "ag_std" : "ag_var");
      else {
        double *mean = ag__conf_cx_alloc(c, (size_t)n * sizeof(double)), *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
        for (int pass = 0; mean && ref && pass < 2; pass++)
          for (int64_t i = 0; i < h->n; i++) {
            ag__conf_unravel(i, h->ndim, h->shape, idx);
            int64_t p = 0;
            for (int d = 0; d < h->ndim; d++) p += (red[d] ? 0 : idx[d]) * fst[d];
            if (pass == 0) mean[p] += h->v[i] / (double)rcount;
            else ref[p] += (h->v[i] - mean[p]) * (h->v[i] - mean[p]);
          }
        double den = (double)rcount - V[k].corr;
        for (int64_t i = 0; ref && i < n; i++) {
          ref[i] /= den > 0 ? den : 0;
          if (sq) ref[i] = sqrt(ref[i]);
        }
        if (ref) ag__conf_check(c, o, on, os, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}
void ag__conf_op_var(ctx *c) { run_var(c, 0); }
void ag__conf_op_std(ctx *c) { run_var(c, 1); }

void ag__conf_op_cumsum(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int dim;
  } S[] = {
      {"[6,32] dim -1", 2, {6, 32}, L_C, -1},
      {"[5,7,9] dim 1", 3, {5, 7, 9}, L_C, 1},
      {"transposed [9,7] dim 0", 2, {9, 7}, L_T, 0},
      {"stepped [6,33] dim 1", 2, {6, 33}, L_S, 1},
      {"long [3000]", 1, {3000}, L_C, 0},
      {"scalar", 0, {0}, L_C, 0},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    ag__conf_case_begin(c, S[k].name);
    hbuf *h;
    ag_tensor *a = ag__conf_mk(c, &h, S[k].l, S[k].n, S[k].s, G_UNI, -2, 2);
    if (a) {
      int nd = h->ndim ? h->ndim : 1, d = (S[k].dim + nd) % nd;
      int64_t r = h->ndim ? h->shape[d] : 1, inner = 1;
      for (int i = d + 1; i < h->ndim; i++) inner *= h->shape[i];
      double *ref = ag__conf_cx_alloc(c, (size_t)(h->n ? h->n : 1) * sizeof(double));
      for (int64_t i = 0; ref && i < h->n; i++) {
        int64_t pos = (i / inner) % r;
        ref[i] = h->v[i] + (pos ? ref[i - inner] : 0);
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_cumsum(a, S[k].dim);
      if (!o) ag__conf_on_null(c, "ag_cumsum");
      else if (ref) {
        c->din = h;
        snprintf(c->dinfo, sizeof c->dinfo, "\"dim\": %d", S[k].dim);
        ag__conf_check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

/* gather (sel 0) and index_select (sel 1) against a reference in double. */
static void run_gather(ctx *c, int sel) {
  static const struct {
    const char *name;
    int n;
    int64_t xs[3];
    int lx;
    int ni;
    int64_t is[3];
    int li;
    int dim;
    bool i64;
  } G[2][4] = {
      {{"x [5,7] dim 1, i64 index [5,4]", 2, {5, 7}, L_C, 2, {5, 4}, L_C, 1, true},
       {"x [4,6,5] dim 0, index [3,6,2] (narrower)", 3, {4, 6, 5}, L_C, 3, {3, 6, 2}, L_C, 0, false},
       {"transposed x [6,8] dim -1, stepped index [2,3]", 2, {6, 8}, L_T, 2, {2, 3}, L_S, -1, false},
       {"scalar x and index", 0, {0}, L_C, 0, {0}, L_C, 0, true}},
      {{"x [5,7] dim 0, i64 index [4]", 2, {5, 7}, L_C, 1, {4}, L_C, 0, true},
       {"x [3,6,4] dim 1, index [8] with repeats", 3, {3, 6, 4}, L_C, 1, {8}, L_C, 1, false},
       {"transposed x [6,5] dim -1, stepped index [3]", 2, {6, 5}, L_T, 1, {3}, L_S, -1, false},
       {"x [4,3] dim 0, empty index", 2, {4, 3}, L_C, 1, {0}, L_C, 0, false}},
  };
  for (int k = 0; k < 4; k++) {
    const __typeof__(G[0][0]) *q = &G[sel][k];
    ag__conf_case_begin(c, q->name);
    hbuf *hx, *hi;
    ag_tensor *x = ag__conf_mk(c, &hx, q->lx, q->n, q->xs, G_UNI, -3, 3);
    int nd = q->n ? q->n : 1, d = (q->dim + nd) % nd;
    double hi_v = q->n ? (double)(q->xs[d] - 1) : 0;
    ag_tensor *ix = ag__conf_mk_dt(c, q->i64 ? AG_I64 : AG_I32, &hi, q->li, q->ni, q->is, G_INT, 0, hi_v);
    if (x && ix) {
      int64_t os[AG_MAX_DIMS], idx[AG_MAX_DIMS], xst[AG_MAX_DIMS];
      int on = q->n;
      for (int i = 0; i < q->n; i++) os[i] = sel ? (i == d ? q->is[0] : q->xs[i]) : q->is[i];
      int64_t n = ag__conf_prod(on, os);
      ag__conf_cstrides(q->n, q->xs, xst);
      double *ref = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      for (int64_t t = 0; ref && t < n; t++) {
        ag__conf_unravel(t, on, os, idx);
        int64_t p = 0;
        for (int i = 0; i < q->n; i++) {
          int64_t j = i == d ? (int64_t)hi->v[sel ? idx[d] : t] : idx[i];
          p += j * xst[i];
        }
        ref[t] = hx->v[p];
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = sel ? ag_index_select(x, q->dim, ix) : ag_gather(x, q->dim, ix);
      if (!o) ag__conf_on_null(c, sel ? "ag_index_select" : "ag_gather");
      else if (ref) {
        ag__conf_check(c, o, on, os, c->dt, ref, EXACT);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}
void ag__conf_op_gather(ctx *c) { run_gather(c, 0); }
void ag__conf_op_index_select(ctx *c) { run_gather(c, 1); }

/* torch's topk order on (value, index): NaN above numbers, lower index first */
static bool topk_ref_before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  if (isnan(a) != isnan(b)) return largest ? isnan(a) : isnan(b);
  if (!isnan(a) && a != b) return largest ? a > b : a < b;
  return ia < ib;
}

void ag__conf_op_topk(ctx *c) {
  static const double nanrow[12] = {1, NAN, -2, 3, NAN, 3, 0, -1, 5, NAN, 2, 2};
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    int dim;
    int64_t k;
    bool largest;
    int kind; /* 0 uniform, 1 small integers (ties), 2 the NaN rows */
  } T[] = {
      {"[6,32] k 5 dim -1 largest", 2, {6, 32}, L_C, -1, 5, true, 0},
      {"[5,7,9] k 3 dim 1 smallest", 3, {5, 7, 9}, L_C, 1, 3, false, 0},
      {"ties [4,20] k 7 largest", 2, {4, 20}, L_C, 1, 7, true, 1},
      {"ties, transposed [9,7] k 9 dim 0 smallest", 2, {9, 7}, L_T, 0, 9, false, 1},
      {"NaN [2,6] k 4 largest", 2, {2, 6}, L_C, 1, 4, true, 2},
      {"NaN [2,6] k 6 smallest", 2, {2, 6}, L_C, 1, 6, false, 2},
      {"[3,5] k 0", 2, {3, 5}, L_C, 1, 0, true, 0},
      {"long rows [2,3000] k 10", 2, {2, 3000}, L_C, 1, 10, true, 0},
  };
  for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
    ag__conf_case_begin(c, T[t].name);
    hbuf *h;
    ag_tensor *x = T[t].kind == 2 ? ag__conf_mk_vals(c, c->dt, &h, T[t].n, T[t].s, nanrow)
                                  : ag__conf_mk(c, &h, T[t].l, T[t].n, T[t].s, T[t].kind ? G_INT : G_UNI,
                                       T[t].kind ? 0 : -3, T[t].kind ? 3 : 3);
    if (x) {
      int d = (T[t].dim + h->ndim) % h->ndim;
      int64_t R = h->shape[d], K = T[t].k, inner = 1, os[AG_MAX_DIMS];
      for (int i = d + 1; i < h->ndim; i++) inner *= h->shape[i];
      for (int i = 0; i < h->ndim; i++) os[i] = i == d ? K : h->shape[i];
      int64_t lines = h->n / (R ? R : 1), n = lines * K;
      double *rv = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      double *ri = ag__conf_cx_alloc(c, (size_t)(n ? n : 1) * sizeof(double));
      for (int64_t ln = 0; rv && ri && ln < lines; ln++) {
        int64_t o = ln / inner, i = ln % inner;
        for (int64_t j = 0; j < R; j++) {
          double v = h->v[(o * R + j) * inner + i];
          int64_t rank = 0;
          for (int64_t q = 0; q < R; q++)
            if (topk_ref_before(h->v[(o * R + q) * inner + i], q, v, j, T[t].largest)) rank++;
          if (rank < K) {
            rv[(o * K + rank) * inner + i] = v;
            ri[(o * K + rank) * inner + i] = (double)j;
          }
        }
      }
      ag_tensor *vals = NULL, *idx = NULL;
      ag_status st = ag_topk(x, K, T[t].dim, T[t].largest, &vals, &idx);
      if (st != AG_OK) ag__conf_on_null(c, "ag_topk");
      else if (rv && ri) {
        ag__conf_check(c, vals, h->ndim, os, c->dt, rv, EXACT);
        ag__conf_check(c, idx, h->ndim, os, AG_I64, ri, EXACT);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_sum(ctx *c) { run_reduce(c, R_SUM); }
void ag__conf_op_mean(ctx *c) { run_reduce(c, R_MEAN); }
void ag__conf_op_max(ctx *c) { run_reduce(c, R_MAX); }
void ag__conf_op_min(ctx *c) { run_reduce(c, R_MIN); }
void ag__conf_op_argmax(ctx *c) { run_reduce(c, R_ARGMAX); }
