/* Conformance of group norm: the forward against a double-precision
 * reference written from the definition (torch.nn.functional.group_norm),
 * and its gradients (x, weight, bias) against central differences. */
#include "conformance_internal.h"

/* y[n, c, k] = (x - mean) / sqrt(var + eps) * w[c] + b[c], mean and the
 * biased var over the group's channels and positions; two passes. */
static void gn_ref(const hbuf *h, int64_t groups, const hbuf *hw, const hbuf *hb, double eps, double *ref) {
  const int64_t N = h->shape[0], C = h->shape[1], HW = h->n / (N * C), cpg = C / groups, M = cpg * HW;
  for (int64_t blk = 0; blk < N * groups; blk++) {
    const double *x = h->v + blk * M;
    double m = 0, v = 0;
    for (int64_t k = 0; k < M; k++) m += x[k];
    m /= (double)M;
    for (int64_t k = 0; k < M; k++) v += (x[k] - m) * (x[k] - m);
    const double rs = 1 / sqrt(v / (double)M + eps);
    for (int64_t k = 0; k < M; k++) {
      const int64_t ch = blk % groups * cpg + k / HW;
      ref[blk * M + k] = (x[k] - m) * rs * (hw ? hw->v[ch] : 1) + (hb ? hb->v[ch] : 0);
    }
  }
}

void ag__conf_op_group_norm(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[4];
    int l;
    int64_t groups;
    bool weight, bias;
  } GN[] = {
      {"[2,6,5] groups 3 weight+bias", 3, {2, 6, 5}, L_C, 3, true, true},
      {"[3,4,2,3] groups 2 no affine", 4, {3, 4, 2, 3}, L_C, 2, false, false},
      {"[2,4,3,3] groups 4 (per channel) weight", 4, {2, 4, 3, 3}, L_C, 4, true, false},
      {"[2,8] groups 1 bias", 2, {2, 8}, L_C, 1, false, true},
      {"transposed [5,6] groups 2 weight+bias", 2, {5, 6}, L_T, 2, true, true},
      {"[1,32,17,9] groups 8 weight+bias", 4, {1, 32, 17, 9}, L_C, 8, true, true},
  };
  for (size_t k = 0; k < sizeof GN / sizeof GN[0]; k++) {
    ag__conf_case_begin(c, GN[k].name);
    hbuf *h, *hw = NULL, *hb = NULL;
    ag_tensor *x = ag__conf_mk(c, &h, GN[k].l, GN[k].n, GN[k].s, G_UNI, -3, 5);
    int64_t C = GN[k].s[1];
    ag_tensor *w = GN[k].weight ? ag__conf_mk(c, &hw, L_C, 1, &C, G_UNI, 0.5, 1.5) : NULL;
    ag_tensor *b = GN[k].bias ? ag__conf_mk(c, &hb, L_S, 1, &C, G_UNI, -1, 1) : NULL;
    if (x && (!GN[k].weight || w) && (!GN[k].bias || b)) {
      double *ref = ag__conf_cx_alloc(c, (size_t)h->n * sizeof(double));
      if (ref) gn_ref(h, GN[k].groups, hw, hb, 1e-5, ref);
      guard g;
      ag__conf_guard_begin(c, &g, c->dt, h->n);
      ag_tensor *o = ag_group_norm(x, GN[k].groups, w, b, 1e-5);
      if (!o) ag__conf_on_null(c, "ag_group_norm");
      else if (ref) {
        ag__conf_check(c, o, h->ndim, h->shape, c->dt, ref, DEF);
        ag__conf_guard_end(c, &g);
      }
    }
    ag__conf_case_end(c);
  }
}

static ag_tensor *gn_call(const gdef *g, ag_tensor **x) {
  return ag_group_norm(x[0], g->arg, g->nin > 1 ? x[1] : NULL, g->nin > 2 ? x[2] : NULL, 1e-5);
}

#define GF(lo, hi) G_UNI, lo, hi, 0
static const gdef GN_GRADS[] = {
    {"grad_group_norm", -1, 3, {{4, {2, 4, 3, 2}, GF(-2, 2)}, {1, {4}, GF(0.5, 1.5)}, {1, {4}, GF(-1, 1)}}, 2},
    {"grad_group_norm_no_affine", -1, 1, {{3, {3, 6, 4}, GF(-2, 2)}}, 3},
};
#undef GF

void ag__conf_op_grad_group_norm(ctx *c) {
  for (size_t i = 0; i < sizeof GN_GRADS / sizeof GN_GRADS[0]; i++)
    if (!strcmp(GN_GRADS[i].name, c->opname)) ag__conf_grad_check(c, &GN_GRADS[i], gn_call);
}
