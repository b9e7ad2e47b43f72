/* Conformance of the gradients: each op's analytic backward (ag_backward)
 * against central finite differences on the same device, from one table of
 * inputs per op. */
#include "conformance_internal.h"

/* ---- gradients: analytic (ag_backward) against central finite differences
 * on the same device. y = f(inputs); the loss is sum(y * W) for random W,
 * evaluated in double on the host so only f's own rounding enters the
 * differences. ---- */

enum {
  GA_ADD, GA_SUB, GA_MUL, GA_DIV, GA_AFFINE, GA_UNARY, GA_BINARY, GA_WHERE, GA_SUM, GA_MEAN, GA_MATMUL,
  GA_SOFTMAX, GA_LOG_SOFTMAX, GA_CE, GA_MSE, GA_LN, GA_RMS, GA_RMS_NOW, GA_VAR, GA_STD, GA_CUMSUM, GA_GATHER, GA_INDEX_SELECT, GA_EMB, GA_CONCAT, GA_VIEWS, GA_RESHAPE,
  GA_CONV2D, GA_AVG_POOL2D, GA_ADAPTIVE_AVG_POOL2D, GA_BATCH_NORM, GA_SDPA,
  GA_LOGSUMEXP, GA_NORM_L1, GA_NORM_L2, GA_NORM_INF, GA_CONV1D,
  GA_INDEX, /* conformance_index.c's ag__conf_grad_index(arg) */
};


/* One finite-difference row per table op with a gradient and a wrapper:
 * inputs [3, 4] from the table's gradient domains. */
#define CONF_GIN(d) {2, {3, 4}, CONF_GIN_ d, 0}
#define CONF_GIN_(k, lo, hi) CONF_GK_##k, lo, hi
#define CONF_GK_UNI G_UNI
#define CONF_GK_AWAY G_AWAY
#define CONF_GK_FRAC G_FRAC
#define CONF_GK_NZINT G_NZINT
#define CONF_GRAD_U(ID, name, api, f, save, b, amp, ints, cost, dom, gdom, ts0, ts1) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_HAS_BWD_##save)(                  \
      {"grad_" #name, GA_UNARY, 1, {CONF_GIN(gdom)}, AG_U_##ID}, ))
#define CONF_GRAD_B(ID, name, api, f, kind, grad, da, db, ints, cost, doma, domb) \
  AG_OPT_IF(CONF_HAS_API_##api)(AG_OPT_IF(AG_OPT_PART_##grad)(                    \
      {"grad_" #name, GA_BINARY, 2, {CONF_GIN(doma), CONF_GIN(domb)}, AG_B_##ID}, ))

#define GF(lo, hi) G_UNI, lo, hi, 0
static const gdef GRADS[] = {
    AG_UNARY_OPS(CONF_GRAD_U) AG_BINARY_OPS(CONF_GRAD_B)
    {"grad_add", GA_ADD, 2, {{2, {3, 4}, GF(-2, 2)}, {1, {4}, GF(-2, 2)}}, 0},
    {"grad_sub", GA_SUB, 2, {{3, {2, 3, 4}, GF(-2, 2)}, {2, {3, 1}, GF(-2, 2)}}, 0},
    {"grad_mul", GA_MUL, 2, {{2, {3, 4}, GF(-2, 2)}, {2, {1, 4}, GF(-2, 2)}}, 0},
    {"grad_div", GA_DIV, 2, {{2, {3, 4}, GF(-2, 2)}, {2, {3, 4}, G_AWAY, 0.5, 2, 0}}, 0},
    {"grad_scalar_ops", GA_AFFINE, 1, {{2, {3, 4}, GF(-2, 2)}}, 0},
    {"grad_where", GA_WHERE, 3, {{2, {3, 1}, G_BOOL, 0, 1, 1}, {2, {3, 4}, GF(-2, 2)}, {1, {4}, GF(-2, 2)}}, 0},
    {"grad_sum", GA_SUM, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_mean", GA_MEAN, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_matmul", GA_MATMUL, 2, {{3, {2, 3, 4}, GF(-1, 1)}, {2, {4, 5}, GF(-1, 1)}}, 0},
    {"grad_softmax", GA_SOFTMAX, 1, {{2, {3, 6}, GF(-2, 2)}}, 0},
    {"grad_log_softmax", GA_LOG_SOFTMAX, 1, {{2, {5, 4}, GF(-2, 2)}}, 0},
    {"grad_cross_entropy", GA_CE, 2, {{2, {4, 6}, GF(-2, 2)}, {1, {4}, G_INT, 0, 5, 2}}, 0},
    {"grad_mse_loss", GA_MSE, 2, {{2, {3, 4}, GF(-2, 2)}, {2, {3, 4}, GF(-2, 2)}}, 0},
    {"grad_layer_norm", GA_LN, 3, {{2, {3, 8}, GF(-2, 2)}, {1, {8}, GF(0.5, 1.5)}, {1, {8}, GF(-1, 1)}}, 0},
    {"grad_rms_norm", GA_RMS, 2, {{3, {2, 3, 8}, GF(-2, 2)}, {1, {8}, GF(0.5, 1.5)}}, 0},
    {"grad_rms_norm_no_weight", GA_RMS_NOW, 1, {{2, {4, 6}, GF(-2, 2)}}, 0},
    {"grad_var", GA_VAR, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_std", GA_STD, 1, {{2, {4, 6}, GF(-2, 2)}}, 0},
    {"grad_cumsum", GA_CUMSUM, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_logsumexp", GA_LOGSUMEXP, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_norm_l1", GA_NORM_L1, 1, {{3, {3, 4, 5}, G_AWAY, 0.5, 2, 0}}, 0},
    {"grad_norm_l2", GA_NORM_L2, 1, {{3, {3, 4, 5}, GF(-2, 2)}}, 0},
    {"grad_norm_inf", GA_NORM_INF, 1, {{2, {4, 6}, GF(-2, 2)}}, 0},
    {"grad_gather", GA_GATHER, 2, {{2, {4, 5}, GF(-2, 2)}, {2, {4, 3}, G_INT, 0, 4, 2}}, 0},
    {"grad_index_select", GA_INDEX_SELECT, 2, {{2, {5, 3}, GF(-2, 2)}, {1, {6}, G_INT, 0, 4, 2}}, 0},
    {"grad_embedding", GA_EMB, 2, {{2, {6, 3}, GF(-2, 2)}, {1, {5}, G_INT, 0, 5, 2}}, 0},
    {"grad_concat", GA_CONCAT, 2, {{2, {2, 3}, GF(-2, 2)}, {2, {4, 3}, GF(-2, 2)}}, 0},
    {"grad_views", GA_VIEWS, 2, {{2, {4, 6}, GF(-2, 2)}, {2, {1, 4}, GF(-2, 2)}}, 0},
    {"grad_reshape", GA_RESHAPE, 1, {{3, {2, 3, 4}, GF(-2, 2)}}, 0},
    /* vision ops (max pooling is left out: a step of h can move its argmax) */
    {"grad_conv2d", GA_CONV2D, 3,
     {{4, {2, 4, 5, 4}, GF(-1, 1)}, {4, {6, 2, 3, 2}, GF(-1, 1)}, {1, {6}, GF(-1, 1)}}, 0},
    {"grad_conv1d", GA_CONV1D, 3, {{3, {2, 4, 9}, GF(-1, 1)}, {3, {6, 2, 3}, GF(-1, 1)}, {1, {6}, GF(-1, 1)}}, 0},
    {"grad_avg_pool2d", GA_AVG_POOL2D, 1, {{4, {2, 3, 5, 6}, GF(-2, 2)}}, 0},
    {"grad_adaptive_pool", GA_ADAPTIVE_AVG_POOL2D, 1, {{4, {2, 2, 7, 5}, GF(-2, 2)}}, 0},
    {"grad_batch_norm", GA_BATCH_NORM, 3,
     {{4, {4, 3, 3, 2}, GF(-2, 2)}, {1, {3}, GF(0.5, 1.5)}, {1, {3}, GF(-1, 1)}}, 0},
    {"grad_sort", GA_INDEX, 1, {{2, {4, 3}, GF(-2, 2)}}, CONF_GI_SORT},
    {"grad_scatter_add", GA_INDEX, 3, {{2, {3, 4}, GF(-2, 2)}, {2, {2, 4}, G_INT, 0, 2, 2}, {2, {2, 4}, GF(-2, 2)}},
     CONF_GI_SCATTER_ADD},
    {"grad_index_add", GA_INDEX, 3, {{2, {4, 3}, GF(-2, 2)}, {1, {5}, G_INT, 0, 3, 2}, {2, {5, 3}, GF(-2, 2)}},
     CONF_GI_INDEX_ADD},
    {"grad_pad_constant", GA_INDEX, 1, {{3, {2, 3, 4}, GF(-2, 2)}}, CONF_GI_PAD_CONSTANT},
    {"grad_pad_reflect", GA_INDEX, 1, {{3, {2, 4, 5}, GF(-2, 2)}}, CONF_GI_PAD_REFLECT},
    /* fused attention (AG_K_SDPA_BWD where the backend has it): causal,
     * two query heads per kv head */
    {"grad_sdpa", GA_SDPA, 3,
     {{4, {1, 2, 4, 3}, GF(-1, 1)}, {4, {1, 1, 5, 3}, GF(-1, 1)}, {4, {1, 1, 5, 2}, GF(-1, 1)}}, 0},
};
#undef GF

static ag_tensor *gfn(const gdef *g, ag_tensor **x) {
  static const int d1[1] = {1}, d02[2] = {0, 2}, perm[3] = {1, 2, 0};
  double s0, s1;
  switch (g->fn) {
    case GA_UNARY:
      ag_ref_unary_scalars(g->arg, &s0, &s1);
      return ag__conf_call_table_unary(g->arg, x[0], s0, s1);
    case GA_BINARY: return ag__conf_call_binary(g->arg, x[0], x[1]);
    case GA_ADD: return ag_add(x[0], x[1]);
    case GA_SUB: return ag_sub(x[0], x[1]);
    case GA_MUL: return ag_mul(x[0], x[1]);
    case GA_DIV: return ag_div(x[0], x[1]);
    case GA_AFFINE:
      return ag_div_scalar(ag_rsub_scalar(ag_sub_scalar(ag_add_scalar(ag_mul_scalar(x[0], 1.5), 0.25), 1), 2), 3);
    case GA_WHERE: return ag_where(x[0], x[1], x[2]);
    case GA_SUM: return ag_sum(x[0], 1, d1, false);
    case GA_MEAN: return ag_mean(x[0], 2, d02, true);
    case GA_MATMUL: return ag_matmul(x[0], x[1]);
    case GA_SOFTMAX: return ag_softmax(x[0], -1);
    case GA_LOG_SOFTMAX: return ag_log_softmax(x[0], 0);
    case GA_CE: return ag_cross_entropy(x[0], x[1], AG_REDUCTION_MEAN, -100);
    case GA_MSE: return ag_mse_loss(x[0], x[1], AG_REDUCTION_MEAN);
    case GA_LN: return ag_layer_norm(x[0], x[1], x[2], 1e-5);
    case GA_RMS: return ag_rms_norm(x[0], x[1], 1e-5);
    case GA_RMS_NOW: return ag_rms_norm(x[0], NULL, 1e-5);
    case GA_VAR: return ag_var(x[0], 2, d02, 1, true);
    case GA_STD: return ag_std(x[0], 1, d1, 0, false);
    case GA_CUMSUM: return ag_cumsum(x[0], 1);
    case GA_LOGSUMEXP: return ag_logsumexp(x[0], 1, false);
    case GA_NORM_L1: return ag_norm(x[0], 1, 2, d02, true);
    case GA_NORM_L2: return ag_norm(x[0], 2, 2, d02, false);
    case GA_NORM_INF: return ag_norm(x[0], INFINITY, 1, d1, false);
    case GA_GATHER: return ag_gather(x[0], 1, x[1]);
    case GA_INDEX: return ag__conf_grad_index(g->arg, x);
    case GA_INDEX_SELECT: return ag_index_select(x[0], 0, x[1]);
    case GA_EMB: return ag_embedding(x[0], x[1]);
    case GA_CONCAT: return ag_concat(2, x, 0);
    case GA_CONV2D: {
      /* stride 2x1, padding 1x1, dilation 1x2, groups 2, bias */
      static const ag_conv2d_params p = {{2, 1}, {1, 1}, {1, 2}, 2};
      return ag_conv2d(x[0], x[1], x[2], &p);
    }
    case GA_CONV1D: return ag_conv1d(x[0], x[1], x[2], 2, 1, 2, 2); /* stride, padding, dilation, groups */
    case GA_AVG_POOL2D: {
      static const ag_pool2d_params p = {{3, 2}, {2, 2}, {1, 1}, false};
      return ag_avg_pool2d(x[0], &p);
    }
    case GA_ADAPTIVE_AVG_POOL2D: return ag_adaptive_avg_pool2d(x[0], 3, 2);
    case GA_BATCH_NORM: return ag_batch_norm(x[0], NULL, NULL, x[1], x[2], true, 0.1, 1e-5);
    case GA_SDPA: return ag_scaled_dot_product_attention(x[0], x[1], x[2], NULL, true, 0.0, 0.0, NULL);
    case GA_VIEWS: {
      ag_tensor *s = ag_slice(ag_transpose(x[0], 0, 1), 0, 1, 6, 2); /* [3,4] */
      return ag_mul(s, ag_expand(x[1], 2, (const int64_t[]){3, 4}));
    }
    default: return ag_reshape(ag_permute(x[0], perm), 2, (const int64_t[]){12, 2});
  }
}

/* Upload the inputs (values vals[k]); differentiable ones as leaves that
 * require grad when `leaf`. */
static bool gupload(ctx *c, const gdef *g, double **vals, bool leaf, ag_tensor **x) {
  for (int k = 0; k < g->nin; k++) {
    ag_dtype dt = g->in[k].constant == 2 ? AG_I32 : c->dt;
    hbuf *h;
    x[k] = ag__conf_mk_vals(c, dt, &h, g->in[k].ndim, g->in[k].shape, vals[k]);
    if (!x[k]) return false;
    if (leaf && !g->in[k].constant && ag_tensor_set_requires_grad(x[k], true) != AG_OK) {
      ag__conf_case_fail(c, "ag_tensor_set_requires_grad: %s", ag_last_error());
      return false;
    }
  }
  return true;
}

/* sum(f(x) * W) in double, with grad mode off; NAN after failing the case. */
static double gloss(ctx *c, const gdef *g, ag__conf_gfn f, double **vals, const double *w) {
  ag_tensor *x[3];
  double L = NAN;
  ag_scope_begin();
  ag_no_grad_begin();
  if (gupload(c, g, vals, false, x)) {
    ag_tensor *y = f(g, x);
    double *v = y ? ag__conf_rd(c, y) : NULL;
    if (!y) ag__conf_on_null(c, g->name);
    if (v) {
      L = 0;
      for (int64_t i = 0; i < ag_tensor_numel(y); i++) L += v[i] * w[i];
    }
  }
  ag_grad_mode_end();
  ag_scope_end();
  return L;
}

void ag__conf_op_grad(ctx *c) {
  for (size_t i = 0; i < sizeof GRADS / sizeof GRADS[0]; i++)
    if (!strcmp(GRADS[i].name, c->opname)) ag__conf_grad_check(c, &GRADS[i], gfn);
}

void ag__conf_grad_check(ctx *c, const gdef *g, ag__conf_gfn f) {
  ag__conf_case_begin(c, "backward vs central differences");
  int64_t nodes = ag_live_nodes();
  double *vals[3];
  for (int k = 0; k < g->nin; k++) {
    const gin *in = &g->in[k];
    int64_t n = ag__conf_prod(in->ndim, in->shape);
    vals[k] = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
    ag_dtype dt = in->constant == 2 ? AG_I32 : c->dt;
    for (int64_t i = 0; vals[k] && i < n; i++) vals[k][i] = ag_conf_round(dt, ag__conf_gen(c, dt, in->kind, in->lo, in->hi));
  }
  ag_tensor *x[3];
  ag_tensor *y = gupload(c, g, vals, true, x) ? f(g, x) : NULL;
  if (!y && c->cres == AG_CONF_PASS) ag__conf_on_null(c, g->name);
  if (y && c->cap) ag__conf_rd(c, y); /* bitwise: the forward output too */
  if (y) {
    int64_t ny = ag_tensor_numel(y);
    ag_dtype ydt = ag_tensor_dtype(y);
    double *w = ag__conf_cx_alloc(c, (size_t)ny * sizeof(double));
    for (int64_t i = 0; i < ny; i++) w[i] = ag_conf_round(ydt, ag__conf_gen(c, ydt, G_UNI, -1, 1));
    hbuf *hw;
    ag_tensor *wt = ag__conf_mk_vals(c, ydt, &hw, ag_tensor_ndim(y), ag_tensor_shape(y), w);
    ag_status st = wt ? ag_backward(y, wt, false) : AG_ERR_INTERNAL;
    if (st == AG_ERR_UNSUPPORTED) ag__conf_case_unsup(c, "ag_backward");
    else if (st != AG_OK) ag__conf_case_fail(c, "ag_backward: %s (%s)", ag_status_name(st), ag_last_error());
    /* the tolerance of a central difference with step h: truncation h^2 and
     * rounding eps/h; f64 resolves far more than f32 */
    bool wide = c->dt == AG_F64 && g->fn != GA_CE; /* cross-entropy's loss is f32 by contract */
    double h = wide ? 1e-6 : 1e-2, tol = wide ? 1e-10 : 1e-4;
    for (int k = 0; st == AG_OK && c->cres == AG_CONF_PASS && k < g->nin; k++) {
      if (g->in[k].constant) continue;
      ag_tensor *gr = ag_tensor_grad(x[k]);
      if (!gr) {
        ag__conf_case_fail(c, "input %d has no gradient after backward", k);
        break;
      }
      int64_t n = ag__conf_prod(g->in[k].ndim, g->in[k].shape);
      if (ag_tensor_numel(gr) != n) {
        ag__conf_case_fail(c, "gradient of input %d has %lld elements, want %lld", k, (long long)ag_tensor_numel(gr), (long long)n);
        break;
      }
      double *an = ag__conf_rd(c, gr);
      if (c->cap) continue; /* bitwise: the gradient's bits are the result */
      double err = 0, den = 0, worst = -1, wa = 0, wf = 0;
      int64_t wi = 0;
      for (int64_t i = 0; an && i < n && c->cres == AG_CONF_PASS; i++) {
        double x0 = vals[k][i], xp = ag_conf_round(c->dt, x0 + h), xm = ag_conf_round(c->dt, x0 - h);
        vals[k][i] = xp;
        double lp = gloss(c, g, f, vals, w);
        vals[k][i] = xm;
        double lm = gloss(c, g, f, vals, w);
        vals[k][i] = x0;
        double fd = (lp - lm) / (xp - xm), e = (an[i] - fd) * (an[i] - fd);
        err += e;
        den += fd * fd;
        if (e > worst) worst = e, wi = i, wa = an[i], wf = fd;
      }
      double nmse = err / (den > 1e-30 ? den : 1e-30);
      if (an && c->cres == AG_CONF_PASS && nmse > tol)
        ag__conf_case_fail(c, "input %d: gradient nmse %.3g > %.3g; worst element %lld: backward %.7g, finite difference %.7g",
                  k, nmse, tol, (long long)wi, wa, wf);
    }
  }
  ag__conf_case_end(c);
  if (g->fn == GA_UNARY && c->acc && ag_dtype_is_float(c->dt)) {
    /* the elementwise adversarial inputs through ag_backward (upstream 1)
     * against the analytic derivative of op_ref.h: measured, not judged
     * (gelu's backward was 7.38 for 1 at x = 1000 where tanh stops below 1) */
    ag__conf_case_begin(c, "adversarial");
    c->adv = true;
    double v[ADV_MAX], ref[ADV_MAX], s0, s1;
    int64_t sh[1] = {ag__conf_adv_values(c->dt, v)};
    ag_ref_unary_scalars(g->arg, &s0, &s1);
    hbuf *h;
    ag_tensor *xa = ag__conf_mk_vals(c, c->dt, &h, 1, sh, v);
    if (xa && ag_tensor_set_requires_grad(xa, true) != AG_OK) {
      ag__conf_case_fail(c, "ag_tensor_set_requires_grad: %s", ag_last_error());
      xa = NULL;
    }
    ag_tensor *ya = xa ? ag__conf_call_table_unary(g->arg, xa, s0, s1) : NULL;
    ag_tensor *ones = ya ? ag_full(c->dev, c->dt, 1, sh, 1.0) : NULL;
    if (xa && !ya) ag__conf_on_null(c, g->name);
    else if (ones) {
      ag_status st = ag_backward(ya, ones, false);
      if (st == AG_ERR_UNSUPPORTED) ag__conf_case_unsup(c, "ag_backward");
      else if (st != AG_OK) ag__conf_case_fail(c, "ag_backward: %s (%s)", ag_status_name(st), ag_last_error());
      else if (!ag_tensor_grad(xa)) ag__conf_case_fail(c, "the input has no gradient after backward");
      else {
        for (int64_t i = 0; i < sh[0]; i++) ref[i] = ag_ref_unary_grad(g->arg, h->v[i], s0, s1);
        ag__conf_check(c, ag_tensor_grad(xa), 1, sh, c->dt, ref, DEF);
      }
    }
    ag__conf_case_end(c);
  }
  if (ag_live_nodes() != nodes && c->res != AG_CONF_FAIL) {
    c->res = AG_CONF_FAIL;
    snprintf(c->msg, sizeof c->msg, "%s %s: %lld autograd nodes still live after backward and the scope's end",
             c->opname, ag_dtype_name(c->dt), (long long)(ag_live_nodes() - nodes));
  }
}
