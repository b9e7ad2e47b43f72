/* Conformance cases of matmul, softmax, the losses, layer/RMS norm,
 * embedding, concat and dropout against host references. */
#include "conformance_internal.h"
#include "anygrad/optim.h"

/* ---- matmul ---- */

void ag__conf_op_matmul(ctx *c) {
  static const bcase MM[] = {
      {"[7,13]@[13,5]", 2, {7, 13}, L_C, 2, {13, 5}, L_C},
      {"[13]@[13,5]", 1, {13}, L_C, 2, {13, 5}, L_C},
      {"[7,13]@[13]", 2, {7, 13}, L_C, 1, {13}, L_C},
      {"[13]@[13]", 1, {13}, L_C, 1, {13}, L_C},
      {"batched [3,4,5]@[5,6]", 3, {3, 4, 5}, L_C, 2, {5, 6}, L_C},
      {"broadcast [2,1,4,5]@[3,5,6]", 4, {2, 1, 4, 5}, L_C, 3, {3, 5, 6}, L_C},
      {"transposed [6,8]@[8,7]", 2, {6, 8}, L_T, 2, {8, 7}, L_T},
      {"stepped [5,9]@[9,4]", 2, {5, 9}, L_S, 2, {9, 4}, L_S},
      {"expanded batch [3,4,5]@[3,5,2]", 3, {3, 4, 5}, L_E, 3, {3, 5, 2}, L_C},
      {"large [64,128]@[128,96]", 2, {64, 128}, L_C, 2, {128, 96}, L_C},
  };
  for (size_t k = 0; k < sizeof MM / sizeof MM[0]; k++) {
    ag__conf_case_begin(c, MM[k].name);
    hbuf *ha, *hb;
    ag_tensor *a = ag__conf_mk(c, &ha, MM[k].la, MM[k].na, MM[k].sa, G_UNI, -1, 1);
    ag_tensor *b = ag__conf_mk(c, &hb, MM[k].lb, MM[k].nb, MM[k].sb, G_UNI, -1, 1);
    if (a && b) {
      /* promote 1-D operands as torch.matmul does */
      int64_t as[AG_MAX_DIMS + 1], bs[AG_MAX_DIMS + 1];
      int an = ha->ndim, bn = hb->ndim;
      memcpy(as, ha->shape, sizeof ha->shape);
      memcpy(bs, hb->shape, sizeof hb->shape);
      if (an == 1) {
        as[1] = as[0];
        as[0] = 1;
        an = 2;
      }
      if (bn == 1) {
        bs[1] = 1;
        bn = 2;
      }
      int64_t M = as[an - 2], K = as[an - 1], N = bs[bn - 1];
      int64_t bt[AG_MAX_DIMS], full[AG_MAX_DIMS], idx[AG_MAX_DIMS];
      int btn = ag__conf_bshape(an - 2, as, bn - 2, bs, bt);
      hbuf pa = {an - 2, {0}, 0, NULL}, pb = {bn - 2, {0}, 0, NULL};
      memcpy(pa.shape, as, sizeof(int64_t) * (size_t)(an - 2));
      memcpy(pb.shape, bs, sizeof(int64_t) * (size_t)(bn - 2));
      int64_t nb = ag__conf_prod(btn, bt);
      int64_t n = nb * M * N;
      double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
      for (int64_t bi = 0; ref && bi < nb; bi++) {
        ag__conf_unravel(bi, btn, bt, idx);
        int64_t ia = ag__conf_bidx(&pa, btn, idx), ib = ag__conf_bidx(&pb, btn, idx);
        for (int64_t m = 0; m < M; m++)
          for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t q = 0; q < K; q++)
              acc += ha->v[(ia * M + m) * K + q] * hb->v[(ib * K + q) * N + j];
            ref[(bi * M + m) * N + j] = acc;
          }
      }
      int on = 0;
      for (int i = 0; i < btn; i++) full[on++] = bt[i];
      if (ha->ndim > 1) full[on++] = M;
      if (hb->ndim > 1) full[on++] = N;
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_matmul(a, b);
      if (!o) ag__conf_on_null(c, "ag_matmul");
      else if (ref) {
        ag__conf_check(c, o, on, full, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

/* ---- softmax, losses, normalisation ---- */

/* Visit every line along `dim` of a contiguous logical shape. */
void ag__conf_lines(const hbuf *h, int dim, void (*fn)(const double *, double *, int64_t, int64_t, void *),
                  double *out, void *arg) {
  int64_t st[AG_MAX_DIMS];
  ag__conf_cstrides(h->ndim, h->shape, st);
  int64_t L = h->shape[dim], S = st[dim], idx[AG_MAX_DIMS];
  for (int64_t i = 0; i < h->n; i++) {
    ag__conf_unravel(i, h->ndim, h->shape, idx);
    if (idx[dim] == 0) fn(h->v + i, out + i, L, S, arg);
  }
}

static void softmax_line(const double *x, double *y, int64_t L, int64_t S, void *arg) {
  bool logsm = *(bool *)arg;
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < L; j++) m = fmax(m, x[j * S]);
  for (int64_t j = 0; j < L; j++) s += exp(x[j * S] - m);
  for (int64_t j = 0; j < L; j++) y[j * S] = logsm ? x[j * S] - m - log(s) : exp(x[j * S] - m) / s;
}

static void run_softmax(ctx *c, bool logsm) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l, dim;
    double scale, shift;
  } S[] = {
      {"[6,17] dim -1", 2, {6, 17}, L_C, -1, 3, 0},
      {"[6,17] dim 0", 2, {6, 17}, L_C, 0, 3, 0},
      {"[3,4,5] dim 1", 3, {3, 4, 5}, L_C, 1, 3, 0},
      {"transposed [17,6] dim -1", 2, {17, 6}, L_T, -1, 3, 0},
      {"large logits [4,33] dim -1", 2, {4, 33}, L_S, -1, 50, 100},
  };
  for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
    ag__conf_case_begin(c, S[k].name);
    hbuf *h;
    double lo = S[k].shift - S[k].scale, hi = S[k].shift + S[k].scale;
    ag_tensor *a = ag__conf_mk(c, &h, S[k].l, S[k].n, S[k].s, G_UNI, lo, hi);
    if (a) {
      int dim = (S[k].dim + h->ndim) % h->ndim;
      double *ref = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
      if (ref) ag__conf_lines(h, dim, softmax_line, ref, &logsm);
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = logsm ? ag_log_softmax(a, S[k].dim) : ag_softmax(a, S[k].dim);
      if (!o) ag__conf_on_null(c, logsm ? "ag_log_softmax" : "ag_softmax");
      else if (ref) {
        c->din = h;
        snprintf(c->dinfo, sizeof c->dinfo, "\"dim\": %d", S[k].dim);
        ag__conf_check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
  if (c->acc && ag_dtype_is_float(c->dt)) {
    /* rows of 64: logits spread over +-1e4 (f16: +-1e3), half masked with
     * -inf, one far above the rest, tiny differences around a large
     * offset, and a NaN */
    ag__conf_case_begin(c, "adversarial [5,64] dim -1");
    c->adv = true;
    enum { R = 5, L = 64 };
    double v[R * L];
    const double big = c->dt == AG_F16 ? 1e3 : 1e4;
    for (int j = 0; j < L; j++) {
      v[j] = big * (2 * ag__conf_urand(c) - 1);
      v[L + j] = j % 2 ? -INFINITY : 3 * ag__conf_urand(c);
      v[2 * L + j] = j == 5 ? 60 : ag__conf_urand(c);
      v[3 * L + j] = 1000 + 1e-2 * ag__conf_urand(c);
      v[4 * L + j] = j == 9 ? NAN : ag__conf_urand(c);
    }
    int64_t sh[2] = {R, L};
    hbuf *h;
    ag_tensor *a = ag__conf_mk_vals(c, c->dt, &h, 2, sh, v);
    if (a) {
      double *ref = ag__conf_cx_alloc(c, sizeof(double) * R * L);
      if (ref) ag__conf_lines(h, 1, softmax_line, ref, &logsm);
      ag_tensor *o = logsm ? ag_log_softmax(a, -1) : ag_softmax(a, -1);
      c->din = h;
      snprintf(c->dinfo, sizeof c->dinfo, "\"dim\": -1");
      if (!o) ag__conf_on_null(c, logsm ? "ag_log_softmax" : "ag_softmax");
      else if (ref) ag__conf_check(c, o, 2, sh, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_softmax(ctx *c) { run_softmax(c, false); }
void ag__conf_op_log_softmax(ctx *c) { run_softmax(c, true); }

/* Cross-entropy and mse return the logits' dtype or f32 (ops.h leaves it to
 * the implementation), so the check accepts either. The cross-entropy kernel
 * contract computes per-row losses in f32 (backend.h), so f64 gets the f32
 * threshold. */
static void check_loss(ctx *c, ag_tensor *o, int ndim, const int64_t *shape, const double *ref) {
  ag_dtype want = o && ag_tensor_dtype(o) == AG_F32 ? AG_F32 : c->dt;
  double tol = ag_conf_threshold(c->dt == AG_F64 ? AG_F32 : c->dt);
  ag__conf_check(c, o, ndim, shape, want, ref, tol);
}

void ag__conf_op_cross_entropy(ctx *c) {
  static const ag_reduction reds[3] = {AG_REDUCTION_MEAN, AG_REDUCTION_SUM, AG_REDUCTION_NONE};
  static const char *names[] = {"[8,11] mean, ignore -100", "[8,11] sum, ignore -100",
                                "[8,11] none, ignore -100", "[11] with scalar target",
                                "transposed [8,11] mean", "[8,11] mean, i64 targets"};
  for (int k = 0; k < 6; k++) {
    ag__conf_case_begin(c, names[k]);
    bool one = k == 3;
    const ag_dtype tdt = k == 5 ? AG_I64 : AG_I32;
    int64_t ls[2] = {8, 11}, ts[1] = {8};
    hbuf *hl, *ht;
    ag_tensor *l = one ? ag__conf_mk(c, &hl, L_C, 1, ls + 1, G_UNI, -4, 4)
                       : ag__conf_mk(c, &hl, k == 4 ? L_T : L_C, 2, ls, G_UNI, -4, 4);
    ag_tensor *t = ag__conf_mk_dt(c, tdt, &ht, L_C, one ? 0 : 1, ts, G_INT, 0, 10);
    if (l && t) {
      if (!one) { /* one ignored row, re-uploaded */
        ht->v[3] = -100;
        t = ag__conf_mk_vals(c, tdt, &ht, 1, ts, ht->v);
      }
      int64_t N = one ? 1 : 8, C = 11, cnt = 0;
      double *row = ag__conf_cx_alloc(c, (size_t)N * sizeof(double)), tot = 0;
      for (int64_t r = 0; t && row && r < N; r++) {
        int64_t tg = (int64_t)ht->v[r];
        if (tg == -100) continue;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < C; j++) m = fmax(m, hl->v[r * C + j]);
        for (int64_t j = 0; j < C; j++) s += exp(hl->v[r * C + j] - m);
        row[r] = m + log(s) - hl->v[r * C + tg];
        tot += row[r];
        cnt++;
      }
      ag_reduction red = reds[k < 3 ? k : 0];
      ag_tensor *o = t ? ag_cross_entropy(l, t, red, -100) : NULL;
      if (!o) ag__conf_on_null(c, "ag_cross_entropy");
      else if (red == AG_REDUCTION_NONE) check_loss(c, o, 1, &N, row);
      else {
        double v = red == AG_REDUCTION_SUM ? tot : tot / (double)cnt;
        check_loss(c, o, 0, NULL, &v);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_mse_loss(ctx *c) {
  static const ag_reduction reds[3] = {AG_REDUCTION_MEAN, AG_REDUCTION_SUM, AG_REDUCTION_NONE};
  static const char *names[3] = {"[6,7] mean, transposed", "[6,7] sum", "[6,7] none, stepped"};
  for (int k = 0; k < 3; k++) {
    ag__conf_case_begin(c, names[k]);
    int64_t s[2] = {6, 7};
    hbuf *ha, *hb;
    ag_tensor *a = ag__conf_mk(c, &ha, k == 0 ? L_T : L_C, 2, s, G_UNI, -2, 2);
    ag_tensor *b = ag__conf_mk(c, &hb, k == 2 ? L_S : L_C, 2, s, G_UNI, -2, 2);
    if (a && b) {
      double ref[42], tot = 0;
      for (int i = 0; i < 42; i++) {
        ref[i] = (ha->v[i] - hb->v[i]) * (ha->v[i] - hb->v[i]);
        tot += ref[i];
      }
      ag_tensor *o = ag_mse_loss(a, b, reds[k]);
      if (!o) ag__conf_on_null(c, "ag_mse_loss");
      else if (reds[k] == AG_REDUCTION_NONE) check_loss(c, o, 2, s, ref);
      else {
        double v = reds[k] == AG_REDUCTION_SUM ? tot : tot / 42;
        check_loss(c, o, 0, NULL, &v);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_layer_norm(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    bool affine;
  } LN[] = {
      {"[6,32] weight+bias", 2, {6, 32}, L_C, true},
      {"[2,3,16] no affine", 3, {2, 3, 16}, L_C, false},
      {"transposed [6,32] weight+bias", 2, {6, 32}, L_T, true},
  };
  for (size_t k = 0; k < sizeof LN / sizeof LN[0]; k++) {
    ag__conf_case_begin(c, LN[k].name);
    hbuf *h, *hw = NULL, *hbias = NULL;
    ag_tensor *x = ag__conf_mk(c, &h, LN[k].l, LN[k].n, LN[k].s, G_UNI, -3, 5);
    int64_t D = LN[k].s[LN[k].n - 1];
    ag_tensor *w = LN[k].affine ? ag__conf_mk(c, &hw, L_C, 1, &D, G_UNI, 0.5, 1.5) : NULL;
    ag_tensor *b = LN[k].affine ? ag__conf_mk(c, &hbias, L_S, 1, &D, G_UNI, -1, 1) : NULL;
    if (x && (!LN[k].affine || (w && b))) {
      double *ref = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
      for (int64_t r = 0; ref && r < h->n / D; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < D; j++) m += h->v[r * D + j];
        m /= (double)D;
        for (int64_t j = 0; j < D; j++) v += (h->v[r * D + j] - m) * (h->v[r * D + j] - m);
        double rs = 1 / sqrt(v / (double)D + 1e-5);
        for (int64_t j = 0; j < D; j++)
          ref[r * D + j] = (h->v[r * D + j] - m) * rs * (hw ? hw->v[j] : 1) + (hbias ? hbias->v[j] : 0);
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_layer_norm(x, w, b, 1e-5);
      if (!o) ag__conf_on_null(c, "ag_layer_norm");
      else if (ref) {
        ag__conf_check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_rms_norm(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[3];
    int l;
    bool weight;
  } RN[] = {
      {"[6,32] weight", 2, {6, 32}, L_C, true},
      {"[2,3,16] no weight", 3, {2, 3, 16}, L_C, false},
      {"transposed [6,32] weight", 2, {6, 32}, L_T, true},
      {"[3,1500] long rows, weight", 2, {3, 1500}, L_C, true},
  };
  for (size_t k = 0; k < sizeof RN / sizeof RN[0]; k++) {
    ag__conf_case_begin(c, RN[k].name);
    hbuf *h, *hw = NULL;
    ag_tensor *x = ag__conf_mk(c, &h, RN[k].l, RN[k].n, RN[k].s, G_UNI, -3, 5);
    int64_t D = RN[k].s[RN[k].n - 1];
    ag_tensor *w = RN[k].weight ? ag__conf_mk(c, &hw, L_S, 1, &D, G_UNI, 0.5, 1.5) : NULL;
    if (x && (!RN[k].weight || w)) {
      double *ref = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
      for (int64_t r = 0; ref && r < h->n / D; r++) {
        double ss = 0;
        for (int64_t j = 0; j < D; j++) ss += h->v[r * D + j] * h->v[r * D + j];
        double rs = 1 / sqrt(ss / (double)D + 1e-5);
        for (int64_t j = 0; j < D; j++) ref[r * D + j] = h->v[r * D + j] * rs * (hw ? hw->v[j] : 1);
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_rms_norm(x, w, 1e-5);
      if (!o) ag__conf_on_null(c, "ag_rms_norm");
      else if (ref) {
        ag__conf_check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_embedding(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[2];
    int l;
  } E[] = {
      {"indices [3,4]", 2, {3, 4}, L_C},
      {"stepped indices [5]", 1, {5}, L_S},
      {"scalar index", 0, {0}, L_C},
      {"i64 indices [2,3]", 2, {2, 3}, L_T},
  };
  for (size_t k = 0; k < sizeof E / sizeof E[0]; k++) {
    ag__conf_case_begin(c, E[k].name);
    int64_t ts[2] = {10, 7};
    hbuf *ht, *hi;
    ag_tensor *tab = ag__conf_mk(c, &ht, L_C, 2, ts, G_UNI, -3, 3);
    ag_tensor *ix = ag__conf_mk_dt(c, k == 3 ? AG_I64 : AG_I32, &hi, E[k].l, E[k].n, E[k].s, G_INT, 0, 9);
    if (tab && ix) {
      int64_t os[3];
      int on = 0;
      for (int i = 0; i < E[k].n; i++) os[on++] = E[k].s[i];
      os[on++] = 7;
      double *ref = ag__conf_cx_alloc(c, (size_t)hi->n * 7 * sizeof(double));
      for (int64_t i = 0; ref && i < hi->n; i++)
        for (int j = 0; j < 7; j++) ref[i * 7 + j] = ht->v[(int64_t)hi->v[i] * 7 + j];
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, hi->n * 7);
      ag_tensor *o = ag_embedding(tab, ix);
      if (!o) ag__conf_on_null(c, "ag_embedding");
      else if (ref) {
        ag__conf_check(c, o, on, os, c->dt, ref, EXACT);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_concat(ctx *c) {
  static const struct {
    const char *name;
    int n, ndim, dim;
    int64_t s[3][3];
    int l[3];
  } CC[] = {
      {"dim 0 [2,3]+[4,3]+[1,3]", 3, 2, 0, {{2, 3}, {4, 3}, {1, 3}}, {L_C, L_C, L_C}},
      {"dim 1 transposed+stepped", 2, 2, 1, {{3, 2}, {3, 5}}, {L_T, L_S}},
      {"dim -1 3-D expanded", 2, 3, -1, {{2, 3, 4}, {2, 3, 1}}, {L_E, L_C}},
      {"single tensor", 1, 2, 0, {{3, 3}}, {L_S}},
  };
  for (size_t k = 0; k < sizeof CC / sizeof CC[0]; k++) {
    ag__conf_case_begin(c, CC[k].name);
    hbuf *h[3];
    ag_tensor *t[3];
    bool ok = true;
    for (int i = 0; i < CC[k].n; i++) {
      t[i] = ag__conf_mk(c, &h[i], CC[k].l[i], CC[k].ndim, CC[k].s[i], G_UNI, -100, 100);
      ok = ok && t[i];
    }
    if (ok) {
      int nd = CC[k].ndim, dim = (CC[k].dim + nd) % nd;
      int64_t os[3], idx[3];
      memcpy(os, CC[k].s[0], sizeof os);
      for (int i = 1; i < CC[k].n; i++) os[dim] += CC[k].s[i][dim];
      int64_t n = ag__conf_prod(nd, os);
      double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
      for (int64_t e = 0; ref && e < n; e++) {
        ag__conf_unravel(e, nd, os, idx);
        int i = 0;
        while (idx[dim] >= h[i]->shape[dim]) idx[dim] -= h[i++]->shape[dim];
        int64_t st[3];
        ag__conf_cstrides(nd, h[i]->shape, st);
        int64_t p = 0;
        for (int d = 0; d < nd; d++) p += idx[d] * st[d];
        ref[e] = h[i]->v[p];
      }
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, n);
      ag_tensor *o = ag_concat(CC[k].n, t, CC[k].dim);
      if (!o) ag__conf_on_null(c, "ag_concat");
      else if (ref) {
        ag__conf_check(c, o, nd, os, c->dt, ref, EXACT);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_dropout(ctx *c) {
  const double p = 0.3;
  int64_t s[2] = {100, 100};
  ag__conf_case_begin(c, "p=0.3 [100,100] mask and scale");
  hbuf *h;
  ag_tensor *x = ag__conf_mk(c, &h, L_C, 2, s, G_AWAY, 0.5, 2);
  ag_generator *g = ag_generator_create(c->seed ^ 0xD50Full);
  if (x && g) {
    uint64_t gs, go, gs2, go2;
    ag_generator_get_state(g, &gs, &go);
    ag_tensor *o = ag_dropout(x, p, true, g);
    ag_generator_get_state(g, &gs2, &go2);
    if (!o) ag__conf_on_null(c, "ag_dropout");
    else {
      double *ref = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
      for (int64_t i = 0; ref && i < h->n; i++)
        ref[i] = ag__conf_philox_uniform(gs, go, i) >= p ? h->v[i] / (1 - p) : 0;
      double *v = ag__conf_rd(c, o);
      if (v) {
        int64_t zeros = 0;
        for (int64_t i = 0; i < h->n; i++) zeros += v[i] == 0;
        double frac = (double)zeros / (double)h->n, sd = sqrt(p * (1 - p) / (double)h->n);
        if (fabs(frac - p) > 5 * sd)
          ag__conf_case_fail(c, "dropped fraction %.4f, want %.2f +- %.4f", frac, p, 5 * sd);
      }
      if (ref) ag__conf_check(c, o, 2, s, c->dt, ref, DEF);
      if (go2 == go) ag__conf_case_fail(c, "the generator offset did not advance");
      /* same state, same mask */
      ag_generator_set_state(g, gs, go);
      ag_tensor *o2 = ag_dropout(x, p, true, g);
      if (!o2) ag__conf_on_null(c, "ag_dropout");
      else if (v) ag__conf_check(c, o2, 2, s, c->dt, v, EXACT);
    }
  }
  ag_generator_free(g);
  ag__conf_case_end(c);

  ag__conf_case_begin(c, "train=false is identity");
  x = ag__conf_mk(c, &h, L_T, 2, s, G_UNI, -1, 1);
  if (x) {
    ag_tensor *o = ag_dropout(x, p, false, NULL);
    if (!o) ag__conf_on_null(c, "ag_dropout");
    else ag__conf_check(c, o, 2, s, c->dt, h->v, EXACT);
  }
  ag__conf_case_end(c);
}

/* ---- attention: the fused kernel (AG_K_SDPA) where the backend has it ---- */

/* out[b,h,t,:] = softmax_j(scale * q[b,h,t,:] . k[b,h/g,j,:] (+ causal)) v[b,h/g,j,:] */
static void sdpa_ref(const hbuf *q, const hbuf *k, const hbuf *v, bool causal, double *out) {
  const int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
  const int64_t Hkv = k->shape[1], S = k->shape[2], Dv = v->shape[3], grp = H / Hkv;
  const double scale = 1.0 / sqrt((double)D);
  double p[64];
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++) {
        const double *qr = q->v + ((b * H + h) * T + t) * D;
        const int64_t kh = b * Hkv + h / grp;
        double mx = -INFINITY, den = 0;
        for (int64_t j = 0; j < S; j++) {
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += qr[d] * k->v[(kh * S + j) * D + d];
          p[j] = causal && j > t ? -INFINITY : s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int64_t j = 0; j < S; j++) den += p[j] = exp(p[j] - mx);
        double *o = out + ((b * H + h) * T + t) * Dv;
        for (int64_t e = 0; e < Dv; e++) {
          double acc = 0;
          for (int64_t j = 0; j < S; j++) acc += p[j] / den * v->v[(kh * S + j) * Dv + e];
          o[e] = acc;
        }
      }
}

void ag__conf_op_sdpa(ctx *c) {
  static const struct {
    const char *name;
    int64_t q[4], k[4], v[4];
    bool causal;
    int lq;
  } SD[] = {
      {"[2,2,5,8] x [2,2,7,8]", {2, 2, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 4}, false, L_C},
      {"[1,4,6,4] causal, 2 kv heads", {1, 4, 6, 4}, {1, 2, 6, 4}, {1, 2, 6, 4}, true, L_C},
  };
  for (size_t n = 0; n < sizeof SD / sizeof SD[0]; n++) {
    ag__conf_case_begin(c, SD[n].name);
    hbuf *hq, *hk, *hv;
    ag_tensor *q = ag__conf_mk(c, &hq, SD[n].lq, 4, SD[n].q, G_UNI, -1, 1);
    ag_tensor *k = ag__conf_mk(c, &hk, L_C, 4, SD[n].k, G_UNI, -1, 1);
    ag_tensor *v = ag__conf_mk(c, &hv, L_C, 4, SD[n].v, G_UNI, -1, 1);
    const int64_t os[4] = {SD[n].q[0], SD[n].q[1], SD[n].q[2], SD[n].v[3]};
    double *ref = q && k && v ? ag__conf_cx_alloc(c, (size_t)ag__conf_prod(4, os) * sizeof(double)) : NULL;
    if (ref) {
      sdpa_ref(hq, hk, hv, SD[n].causal, ref);
      ag_tensor *o = ag_scaled_dot_product_attention(q, k, v, NULL, SD[n].causal, 0.0, 0.0, NULL);
      if (!o) ag__conf_on_null(c, "ag_scaled_dot_product_attention");
      else ag__conf_check(c, o, 4, os, c->dt, ref, DEF);
    }
    ag__conf_case_end(c);
  }
}

/* ---- optimizers and clipping: the multi-tensor kernels ---- */

/* Two parameters (a [5,7] matrix and a [13] vector) whose gradients are
 * set by a backward pass; values and gradients in pv/gv. */
typedef struct optcase {
  ag_param_list params;
  ag_tensor *p[2];
  hbuf *hp[2], *hg[2];
} optcase;

static bool opt_setup(ctx *c, optcase *o) {
  static const int64_t shapes[2][2] = {{5, 7}, {13, 0}};
  memset(o, 0, sizeof *o);
  for (int i = 0; i < 2; i++) {
    const int nd = i == 0 ? 2 : 1;
    o->p[i] = ag__conf_mk(c, &o->hp[i], L_C, nd, shapes[i], G_UNI, -1, 1);
    ag_tensor *g = ag__conf_mk(c, &o->hg[i], L_C, nd, shapes[i], G_UNI, -1, 1);
    if (!o->p[i] || !g) return false;
    /* p.grad = g exactly: the backward of 1 * p with upstream g */
    ag_tensor *y = NULL;
    ag_status st = ag_tensor_set_requires_grad(o->p[i], true);
    if (st == AG_OK) st = (y = ag_mul_scalar(o->p[i], 1.0)) ? ag_backward(y, g, false) : ag_last_status();
    if (st == AG_OK) st = ag_params_add(&o->params, i ? "b" : "w", o->p[i]);
    if (st != AG_OK) {
      ag__conf_on_null(c, "setting the gradients");
      return false;
    }
  }
  return true;
}

static void opt_check_params(ctx *c, optcase *o, double *const ref[2]) {
  for (int i = 0; i < 2 && c->cres == AG_CONF_PASS; i++)
    ag__conf_check(c, o->p[i], o->hp[i]->ndim, o->hp[i]->shape, c->dt, ref[i], DEF);
}

static void run_optimizer(ctx *c, bool adamw) {
  ag__conf_case_begin(c, adamw ? "[5,7] and [13], two steps, weight decay" : "[5,7] and [13], two steps, momentum");
  optcase o;
  if (opt_setup(c, &o)) {
    const double lr = 0.1, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, mom = 0.9;
    ag_optimizer *opt = NULL;
    if (adamw) {
      ag_adamw_options ao = {lr, b1, b2, eps, wd};
      opt = ag_adamw_create(&o.params, &ao);
    } else {
      ag_sgd_options so = {lr, mom, 0.0, wd, false};
      opt = ag_sgd_create(&o.params, &so);
    }
    if (!opt) ag__conf_on_null(c, adamw ? "ag_adamw_create" : "ag_sgd_create");
    ag_status st = AG_OK;
    for (int s = 0; opt && st == AG_OK && s < 2; s++) st = ag_optimizer_step(opt);
    if (opt && st != AG_OK) ag__conf_on_null(c, "ag_optimizer_step");
    double *ref[2] = {NULL, NULL};
    for (int i = 0; opt && st == AG_OK && i < 2; i++) {
      const int64_t n = o.hp[i]->n;
      ref[i] = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
      for (int64_t e = 0; ref[i] && e < n; e++) {
        double p = o.hp[i]->v[e], g = o.hg[i]->v[e], m = 0, v = 0;
        for (int t = 1; t <= 2; t++) {
          if (adamw) { /* torch.optim.AdamW */
            p *= 1.0 - lr * wd;
            m = b1 * m + (1 - b1) * g;
            v = b2 * v + (1 - b2) * g * g;
            p -= lr / (1 - pow(b1, t)) * m / (sqrt(v) / sqrt(1 - pow(b2, t)) + eps);
          } else { /* torch.optim.SGD: the buffer starts as the gradient */
            double d = g + wd * p;
            m = t == 1 ? d : mom * m + d;
            p -= lr * m;
          }
        }
        ref[i][e] = p;
      }
    }
    if (ref[0] && ref[1]) opt_check_params(c, &o, ref);
    ag_optimizer_free(opt);
  }
  ag_params_free(&o.params);
  ag__conf_case_end(c);
}

void ag__conf_op_sgd(ctx *c) { run_optimizer(c, false); }
void ag__conf_op_adamw(ctx *c) { run_optimizer(c, true); }

/* ag_clip_grad_norm: the global norm (AG_K_SUMSQ) and the gradients scaled
 * in place by min(max_norm / (norm + 1e-6), 1) (AG_K_NONFINITE_CHECK). */
void ag__conf_op_clip_grad_norm(ctx *c) {
  ag__conf_case_begin(c, "[5,7] and [13], max_norm 0.5");
  optcase o;
  if (opt_setup(c, &o)) {
    const double max_norm = 0.5;
    ag_tensor *norm = ag_clip_grad_norm(&o.params, max_norm);
    if (!norm) ag__conf_on_null(c, "ag_clip_grad_norm");
    double ss = 0;
    for (int i = 0; i < 2; i++)
      for (int64_t e = 0; e < o.hg[i]->n; e++) ss += o.hg[i]->v[e] * o.hg[i]->v[e];
    const double nr = sqrt(ss), coef = fmin(max_norm / (nr + 1e-6), 1.0);
    if (norm) ag__conf_check(c, norm, 0, NULL, AG_F32, &nr, ag_conf_threshold(c->dt == AG_F64 ? AG_F32 : c->dt));
    for (int i = 0; norm && c->cres == AG_CONF_PASS && i < 2; i++) {
      double *ref = ag__conf_cx_alloc(c, (size_t)o.hg[i]->n * sizeof(double));
      for (int64_t e = 0; ref && e < o.hg[i]->n; e++) ref[e] = o.hg[i]->v[e] * coef;
      if (ref) ag__conf_check(c, ag_tensor_grad(o.p[i]), o.hg[i]->ndim, o.hg[i]->shape, c->dt, ref, DEF);
    }
  }
  ag_params_free(&o.params);
  ag__conf_case_end(c);
}
