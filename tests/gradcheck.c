/* Gradient check of every differentiable op: analytic gradients from
 * ag_backward against central finite differences in f64 on the CPU, with
 * broadcasting and views; the f64 gradients of the ops with the most
 * intricate backward kernels against independent f64 formulas (NMSE <=
 * 1e-24: f64 end to end); then the same ops in f32, f16 and bf16 against the
 * f64 analytic gradients (normalised error, per-dtype tolerance). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

enum { NORMAL = 0, POSITIVE, AWAY0 };
#define MAXIN 3

typedef struct gcase {
  const char *name;
  int n_in;
  int nd[MAXIN];
  int64_t shape[MAXIN][4];
  int domain[MAXIN];
  ag_tensor *(*fn)(ag_tensor **x, ag_dtype dt);
} gcase;

static ag_tensor *i32(int n, const int32_t *v) {
  int64_t s = n;
  return ag_from_host(AG_CPU, AG_I32, 1, &s, v);
}
static ag_tensor *mask23(ag_dtype dt) {
  double m[6] = {1, 0, 0, 1, 1, 0};
  int64_t s[2] = {2, 3};
  ag_tensor *f = ag_from_host(AG_CPU, AG_F64, 2, s, m);
  return ag_cast(f, dt);
}

#define OP1(nm, expr) static ag_tensor *nm(ag_tensor **x, ag_dtype dt) { (void)dt; return expr; }
OP1(f_add, ag_add(x[0], x[1]))
OP1(f_sub, ag_sub(x[0], x[1]))
OP1(f_mul, ag_mul(x[0], x[1]))
OP1(f_div, ag_div(x[0], x[1]))
OP1(f_maximum, ag_maximum(x[0], x[1]))
OP1(f_minimum, ag_minimum(x[0], x[1]))
OP1(f_add_s, ag_add_scalar(x[0], 1.5))
OP1(f_sub_s, ag_sub_scalar(x[0], 0.5))
OP1(f_rsub_s, ag_rsub_scalar(x[0], 2.0))
OP1(f_mul_s, ag_mul_scalar(x[0], -1.5))
OP1(f_div_s, ag_div_scalar(x[0], 4.0))
OP1(f_pow, ag_pow_scalar(x[0], 2.5))
OP1(f_neg, ag_neg(x[0]))
OP1(f_exp, ag_exp(x[0]))
OP1(f_log, ag_log(x[0]))
OP1(f_sqrt, ag_sqrt(x[0]))
OP1(f_rsqrt, ag_rsqrt(x[0]))
OP1(f_abs, ag_abs(x[0]))
OP1(f_relu, ag_relu(x[0]))
OP1(f_gelu, ag_gelu(x[0]))
OP1(f_silu, ag_silu(x[0]))
OP1(f_sigmoid, ag_sigmoid(x[0]))
OP1(f_tanh, ag_tanh(x[0]))
OP1(f_where, ag_where(mask23(dt), x[0], x[1]))
OP1(f_masked_fill, ag_masked_fill(x[0], mask23(dt), 0.25))
OP1(f_sum_all, ag_sum(x[0], 0, NULL, false))
static const int d1[1] = {1}, d0[1] = {0}, dm1[1] = {-1}, d02[2] = {0, 2};
OP1(f_sum_keep, ag_sum(x[0], 1, d1, true))
OP1(f_sum_02, ag_sum(x[0], 2, d02, false))
OP1(f_mean, ag_mean(x[0], 1, d0, false))
OP1(f_max, ag_max(x[0], 1, d1, false))
OP1(f_min_all, ag_min(x[0], 0, NULL, false))
OP1(f_matmul, ag_matmul(x[0], x[1]))
OP1(f_softmax, ag_softmax(x[0], -1))
OP1(f_softmax0, ag_softmax(x[0], 0))
OP1(f_log_softmax, ag_log_softmax(x[0], -1))
static const int32_t tg[3] = {0, 2, -1}, tg_all[3] = {3, 2, 1};
OP1(f_ce_mean, ag_cross_entropy(x[0], i32(3, tg), AG_REDUCTION_MEAN, -1))
OP1(f_ce_sum, ag_cross_entropy(x[0], i32(3, tg_all), AG_REDUCTION_SUM, -1))
OP1(f_ce_none, ag_cross_entropy(x[0], i32(3, tg_all), AG_REDUCTION_NONE, -1))
/* PyTorch's K-dimensional form: logits [N, C, d] against i64 targets [N, d] */
static ag_tensor *tg3(void) {
  static const int64_t v[4] = {2, -1, 0, 1};
  int64_t s[2] = {2, 2};
  return ag_from_host(AG_CPU, AG_I64, 2, s, v);
}
OP1(f_ce3_mean, ag_cross_entropy(x[0], tg3(), AG_REDUCTION_MEAN, -1))
OP1(f_ce3_sum, ag_cross_entropy(x[0], tg3(), AG_REDUCTION_SUM, -1))
OP1(f_ce3_none, ag_cross_entropy(x[0], tg3(), AG_REDUCTION_NONE, -1))
OP1(f_mse_sum, ag_mse_loss(x[0], x[1], AG_REDUCTION_SUM))
OP1(f_mse_mean, ag_mse_loss(x[0], x[1], AG_REDUCTION_MEAN))
OP1(f_mse_none, ag_mse_loss(x[0], x[1], AG_REDUCTION_NONE))
OP1(f_layer_norm, ag_layer_norm(x[0], x[1], x[2], 1e-5))
OP1(f_layer_norm_nowb, ag_layer_norm(x[0], NULL, NULL, 1e-5))
static const int32_t ix[4] = {1, 4, 1, 0};
static ag_tensor *f_embedding(ag_tensor **x, ag_dtype dt) {
  (void)dt;
  int64_t s[2] = {2, 2};
  return ag_embedding(x[0], ag_reshape(i32(4, ix), 2, s));
}
static ag_tensor *f_concat(ag_tensor **x, ag_dtype dt) {
  (void)dt;
  return ag_concat(2, x, 1);
}
static ag_tensor *f_dropout(ag_tensor **x, ag_dtype dt) {
  (void)dt;
  ag_generator *g = ag_generator_create(99); /* same mask on every evaluation */
  ag_tensor *r = ag_dropout(x[0], 0.3, true, g);
  ag_generator_free(g);
  return r;
}
static const int64_t s32[2] = {3, 2}, s234[3] = {2, 3, 4};
static const int perm120[3] = {1, 2, 0};
OP1(f_reshape, ag_reshape(x[0], 2, s32))
OP1(f_transpose, ag_mul(ag_transpose(x[0], 0, 1), x[1]))
OP1(f_permute, ag_permute(x[0], perm120))
OP1(f_slice, ag_slice(ag_slice(x[0], 0, 1, 5, 2), 1, -2, 3, 1))
OP1(f_expand, ag_expand(x[0], 3, s234))
OP1(f_unsqueeze, ag_squeeze(ag_unsqueeze(ag_exp(x[0]), 1), 0))
OP1(f_contiguous, ag_contiguous(ag_transpose(x[0], 0, 1)))
OP1(f_flatten, ag_flatten(ag_transpose(x[0], 0, 1)))
/* a view used twice, a broadcast against it, and a reduction */
OP1(f_graph, ag_sum(ag_mul(ag_slice(x[0], 1, 0, 2, 1), ag_tanh(ag_transpose(ag_slice(x[0], 0, 0, 2, 1), 0, 1))), 1, dm1, false))

static int64_t numel(const gcase *c, int k);

/* ---- independent f64 references ----
 * Plain double-precision C formulas for the gradients of loss = sum(fn(x) *
 * R). ag_backward in f64 must match them to rounding (normalised squared
 * error <= 1e-24; exact f64 pipelines land near 1e-32): any f32 step inside
 * an f64 backward (an upstream gradient, a count, a statistic or an
 * accumulator rounded to float) shows as ~1e-16 and fails. */
typedef void (*ref_fn)(const gcase *c, double *const *h, const double *r, double **g);

static void ce_ref(const gcase *c, double *const *h, const double *r, double **g, const int32_t *t,
                   ag_reduction red) {
  int64_t N = c->shape[0][0], C = c->shape[0][1];
  int64_t cnt = 0;
  for (int64_t i = 0; i < N; i++) cnt += t[i] != -1;
  for (int64_t i = 0; i < N; i++) {
    const double *l = h[0] + i * C;
    double *d = g[0] + i * C;
    double scale = red == AG_REDUCTION_NONE ? r[i] : red == AG_REDUCTION_SUM ? r[0] : r[0] / (double)cnt;
    if (t[i] == -1) {
      for (int64_t j = 0; j < C; j++) d[j] = 0;
      continue;
    }
    double mx = l[0], se = 0;
    for (int64_t j = 1; j < C; j++) mx = fmax(mx, l[j]);
    for (int64_t j = 0; j < C; j++) se += exp(l[j] - mx);
    for (int64_t j = 0; j < C; j++) d[j] = scale * (exp(l[j] - mx) / se - (j == t[i]));
  }
}
static void ref_ce_mean(const gcase *c, double *const *h, const double *r, double **g) {
  ce_ref(c, h, r, g, tg, AG_REDUCTION_MEAN);
}
static void ref_ce_sum(const gcase *c, double *const *h, const double *r, double **g) {
  ce_ref(c, h, r, g, tg_all, AG_REDUCTION_SUM);
}
static void ref_ce_none(const gcase *c, double *const *h, const double *r, double **g) {
  ce_ref(c, h, r, g, tg_all, AG_REDUCTION_NONE);
}

/* y = xhat * w + b over the last dim, eps 1e-5, biased variance. */
static void ref_layer_norm(const gcase *c, double *const *h, const double *r, double **g) {
  int nd = c->nd[0];
  int64_t D = c->shape[0][nd - 1], N = numel(c, 0) / D;
  bool affine = c->n_in == 3;
  if (affine)
    for (int64_t j = 0; j < D; j++) g[1][j] = g[2][j] = 0;
  for (int64_t i = 0; i < N; i++) {
    const double *x = h[0] + i * D, *dy = r + i * D;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < D; j++) mean += x[j];
    mean /= (double)D;
    for (int64_t j = 0; j < D; j++) var += (x[j] - mean) * (x[j] - mean);
    var /= (double)D;
    double rstd = 1.0 / sqrt(var + 1e-5), mg = 0, mgx = 0;
    for (int64_t j = 0; j < D; j++) {
      double xh = (x[j] - mean) * rstd, gj = affine ? dy[j] * h[1][j] : dy[j];
      mg += gj;
      mgx += gj * xh;
      if (affine) {
        g[1][j] += dy[j] * xh;
        g[2][j] += dy[j];
      }
    }
    mg /= (double)D;
    mgx /= (double)D;
    for (int64_t j = 0; j < D; j++) {
      double xh = (x[j] - mean) * rstd, gj = affine ? dy[j] * h[1][j] : dy[j];
      g[0][i * D + j] = rstd * (gj - mg - xh * mgx);
    }
  }
}

static void ref_embedding(const gcase *c, double *const *h, const double *r, double **g) {
  (void)h;
  int64_t V = c->shape[0][0], D = c->shape[0][1];
  for (int64_t j = 0; j < V * D; j++) g[0][j] = 0;
  for (int i = 0; i < 4; i++)
    for (int64_t j = 0; j < D; j++) g[0][ix[i] * D + j] += r[i * D + j];
}

/* Controls: ops that are f64 end to end already. */
static void ref_log_softmax(const gcase *c, double *const *h, const double *r, double **g) {
  int64_t N = c->shape[0][0], C = c->shape[0][1];
  for (int64_t i = 0; i < N; i++) {
    const double *l = h[0] + i * C;
    double mx = l[0], se = 0, sr = 0;
    for (int64_t j = 1; j < C; j++) mx = fmax(mx, l[j]);
    for (int64_t j = 0; j < C; j++) se += exp(l[j] - mx);
    for (int64_t j = 0; j < C; j++) sr += r[i * C + j];
    for (int64_t j = 0; j < C; j++) g[0][i * C + j] = r[i * C + j] - exp(l[j] - mx) / se * sr;
  }
}

static void ref_mse_mean(const gcase *c, double *const *h, const double *r, double **g) {
  int64_t n = numel(c, 0);
  for (int64_t j = 0; j < n; j++) {
    g[0][j] = r[0] * 2.0 * (h[0][j] - h[1][j]) / (double)n;
    g[1][j] = -g[0][j];
  }
}

static ref_fn ref_of(const char *name) {
  static const struct {
    const char *name;
    ref_fn fn;
  } refs[] = {
      {"cross_entropy mean ignore", ref_ce_mean}, {"cross_entropy sum", ref_ce_sum},
      {"cross_entropy none", ref_ce_none},        {"layer_norm", ref_layer_norm},
      {"layer_norm no affine", ref_layer_norm},   {"embedding", ref_embedding},
      {"log_softmax", ref_log_softmax},           {"mse_loss mean", ref_mse_mean},
  };
  for (size_t i = 0; i < sizeof refs / sizeof *refs; i++)
    if (!strcmp(refs[i].name, name)) return refs[i].fn;
  return NULL;
}

#define S(...) {__VA_ARGS__}
static const gcase cases[] = {
    {"add broadcast", 2, {2, 1}, {S(3, 1), S(4)}, {0, 0}, f_add},
    {"sub broadcast", 2, {2, 1}, {S(2, 3), S(3)}, {0, 0}, f_sub},
    {"mul broadcast", 2, {2, 2}, {S(2, 3), S(2, 1)}, {0, 0}, f_mul},
    {"div broadcast", 2, {2, 1}, {S(2, 3), S(3)}, {0, POSITIVE}, f_div},
    {"maximum", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0, 0}, f_maximum},
    {"minimum broadcast", 2, {2, 1}, {S(2, 3), S(3)}, {0, 0}, f_minimum},
    {"add_scalar", 1, {2}, {S(2, 3)}, {0}, f_add_s},
    {"sub_scalar", 1, {2}, {S(2, 3)}, {0}, f_sub_s},
    {"rsub_scalar", 1, {2}, {S(2, 3)}, {0}, f_rsub_s},
    {"mul_scalar", 1, {2}, {S(2, 3)}, {0}, f_mul_s},
    {"div_scalar", 1, {2}, {S(2, 3)}, {0}, f_div_s},
    {"pow_scalar", 1, {2}, {S(2, 3)}, {POSITIVE}, f_pow},
    {"neg", 1, {2}, {S(2, 3)}, {0}, f_neg},
    {"exp", 1, {2}, {S(2, 3)}, {0}, f_exp},
    {"log", 1, {2}, {S(2, 3)}, {POSITIVE}, f_log},
    {"sqrt", 1, {2}, {S(2, 3)}, {POSITIVE}, f_sqrt},
    {"rsqrt", 1, {2}, {S(2, 3)}, {POSITIVE}, f_rsqrt},
    {"abs", 1, {2}, {S(2, 3)}, {AWAY0}, f_abs},
    {"relu", 1, {2}, {S(2, 3)}, {AWAY0}, f_relu},
    {"gelu", 1, {2}, {S(2, 3)}, {0}, f_gelu},
    {"silu", 1, {2}, {S(2, 3)}, {0}, f_silu},
    {"sigmoid", 1, {2}, {S(2, 3)}, {0}, f_sigmoid},
    {"tanh", 1, {2}, {S(2, 3)}, {0}, f_tanh},
    {"where broadcast", 2, {2, 1}, {S(2, 3), S(3)}, {0, 0}, f_where},
    {"masked_fill", 1, {2}, {S(2, 3)}, {0}, f_masked_fill},
    {"sum all", 1, {2}, {S(2, 3)}, {0}, f_sum_all},
    {"sum dim keepdim", 1, {2}, {S(2, 3)}, {0}, f_sum_keep},
    {"sum dims 0,2", 1, {3}, {S(2, 3, 2)}, {0}, f_sum_02},
    {"mean dim", 1, {2}, {S(2, 3)}, {0}, f_mean},
    {"max dim", 1, {2}, {S(2, 3)}, {0}, f_max},
    {"min all", 1, {2}, {S(2, 3)}, {0}, f_min_all},
    {"matmul", 2, {2, 2}, {S(2, 3), S(3, 4)}, {0, 0}, f_matmul},
    {"matmul batch broadcast", 2, {3, 2}, {S(2, 2, 3), S(3, 4)}, {0, 0}, f_matmul},
    {"matmul batch both", 2, {3, 3}, {S(2, 2, 3), S(1, 3, 2)}, {0, 0}, f_matmul},
    {"matmul vec-mat", 2, {1, 2}, {S(3), S(3, 4)}, {0, 0}, f_matmul},
    {"matmul mat-vec", 2, {2, 1}, {S(2, 3), S(3)}, {0, 0}, f_matmul},
    {"softmax last", 1, {2}, {S(2, 4)}, {0}, f_softmax},
    {"softmax dim 0", 1, {2}, {S(3, 2)}, {0}, f_softmax0},
    {"log_softmax", 1, {2}, {S(2, 4)}, {0}, f_log_softmax},
    {"cross_entropy mean ignore", 1, {2}, {S(3, 4)}, {0}, f_ce_mean},
    {"cross_entropy sum", 1, {2}, {S(3, 4)}, {0}, f_ce_sum},
    {"cross_entropy none", 1, {2}, {S(3, 4)}, {0}, f_ce_none},
    {"mse_loss mean", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0, 0}, f_mse_mean},
    {"mse_loss none", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0, 0}, f_mse_none},
    {"mse_loss sum", 2, {2, 2}, {S(2, 3), S(2, 3)}, {0, 0}, f_mse_sum},
    {"mse_loss mean broadcast", 2, {2, 1}, {S(2, 1), S(3)}, {0, 0}, f_mse_mean},
    {"mse_loss sum broadcast", 2, {2, 1}, {S(2, 1), S(3)}, {0, 0}, f_mse_sum},
    {"mse_loss none broadcast", 2, {2, 1}, {S(2, 1), S(3)}, {0, 0}, f_mse_none},
    {"cross_entropy 3d mean ignore", 1, {3}, {S(2, 3, 2)}, {0}, f_ce3_mean},
    {"cross_entropy 3d sum", 1, {3}, {S(2, 3, 2)}, {0}, f_ce3_sum},
    {"cross_entropy 3d none", 1, {3}, {S(2, 3, 2)}, {0}, f_ce3_none},
    {"layer_norm", 3, {3, 1, 1}, {S(2, 2, 5), S(5), S(5)}, {0, 0, 0}, f_layer_norm},
    {"layer_norm no affine", 1, {2}, {S(3, 4)}, {0}, f_layer_norm_nowb},
    {"embedding", 1, {2}, {S(5, 3)}, {0}, f_embedding},
    {"concat", 2, {2, 2}, {S(2, 2), S(2, 3)}, {0, 0}, f_concat},
    {"dropout", 1, {2}, {S(4, 5)}, {0}, f_dropout},
    {"reshape", 1, {2}, {S(2, 3)}, {0}, f_reshape},
    {"transpose", 2, {2, 2}, {S(2, 3), S(3, 2)}, {0, 0}, f_transpose},
    {"permute", 1, {3}, {S(2, 3, 4)}, {0}, f_permute},
    {"slice step", 1, {2}, {S(5, 3)}, {0}, f_slice},
    {"expand", 1, {2}, {S(3, 1)}, {0}, f_expand},
    {"unsqueeze squeeze", 1, {2}, {S(1, 3)}, {0}, f_unsqueeze},
    {"contiguous", 1, {2}, {S(2, 3)}, {0}, f_contiguous},
    {"flatten", 1, {2}, {S(2, 3)}, {0}, f_flatten},
    {"views shared", 1, {2}, {S(3, 3)}, {0}, f_graph},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

static uint64_t rng_state;
static double rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static double gauss(void) {
  double u = rnd() + 1e-12, v = rnd();
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static int64_t numel(const gcase *c, int k) {
  int64_t n = 1;
  for (int d = 0; d < c->nd[k]; d++) n *= c->shape[k][d];
  return n;
}

/* loss = sum(fn(x) * R) for a fixed R: every output element matters. */
static ag_tensor *loss_of(const gcase *c, ag_tensor **x, ag_dtype dt, const double *r, int64_t *n_out) {
  ag_tensor *y = c->fn(x, dt);
  if (!y) return NULL;
  int64_t n = ag_tensor_numel(y);
  if (n_out) *n_out = n;
  ag_tensor *rf = ag_from_host(AG_CPU, AG_F64, ag_tensor_ndim(y), ag_tensor_shape(y), r);
  ag_tensor *rt = ag_cast(rf, dt);
  return ag_sum(ag_mul(y, rt), 0, NULL, false);
}

/* Analytic gradients of case c in dtype dt, as f64 host arrays (grads[k]).
 * Returns false (and sets *unsupported) when the CPU lacks the op in dt. */
static bool analytic(const gcase *c, double **h, ag_dtype dt, const double *r, double **grads, bool *unsupported) {
  ag_scope_begin();
  ag_tensor *x[MAXIN];
  for (int k = 0; k < c->n_in; k++) {
    ag_tensor *f = ag_from_host(AG_CPU, AG_F64, c->nd[k], c->shape[k], h[k]);
    x[k] = ag_tensor_keep(ag_cast(f, dt)); /* a leaf in dt */
    assert_non_null(x[k]);
    assert_int_equal(ag_tensor_set_requires_grad(x[k], true), AG_OK);
  }
  ag_error_clear();
  ag_tensor *loss = loss_of(c, x, dt, r, NULL);
  bool ok = loss != NULL;
  if (!ok) *unsupported = ag_last_status() == AG_ERR_UNSUPPORTED;
  if (ok) {
    ag_status st = ag_backward(loss, NULL, false);
    if (st != AG_OK) {
      *unsupported = st == AG_ERR_UNSUPPORTED;
      if (!*unsupported) fail_msg("%s (%s): backward: %s", c->name, ag_dtype_name(dt), ag_last_error());
      ok = false;
    }
  } else if (!*unsupported) {
    fail_msg("%s (%s): forward: %s", c->name, ag_dtype_name(dt), ag_last_error());
  }
  for (int k = 0; ok && k < c->n_in; k++) {
    ag_tensor *g = ag_tensor_grad(x[k]);
    if (!g) fail_msg("%s: input %d got no gradient", c->name, k);
    assert_int_equal(ag_tensor_dtype(g), dt);
    assert_int_equal(ag_tensor_ndim(g), c->nd[k]);
    ag_tensor *g64 = ag_cast(g, AG_F64);
    assert_int_equal(ag_to_host(g64, grads[k], (size_t)numel(c, k) * sizeof(double)), AG_OK);
  }
  ag_scope_end();
  for (int k = 0; k < c->n_in; k++) ag_tensor_release(x[k]);
  return ok;
}

static double eval_loss(const gcase *c, double **h, const double *r) {
  ag_scope_begin();
  ag_no_grad_begin();
  ag_tensor *x[MAXIN];
  for (int k = 0; k < c->n_in; k++) x[k] = ag_from_host(AG_CPU, AG_F64, c->nd[k], c->shape[k], h[k]);
  double l = ag_item(loss_of(c, x, AG_F64, r, NULL));
  ag_grad_mode_end();
  ag_scope_end();
  return l;
}

static void test_gradcheck(void **state) {
  (void)state;
  int checked = 0, skipped = 0, refs_checked = 0;
  for (int ci = 0; ci < NCASES; ci++) {
    const gcase *c = &cases[ci];
    rng_state = 0x1234567ull + (uint64_t)ci * 7919;
    double *h[MAXIN], *ga[MAXIN], *gd[MAXIN];
    for (int k = 0; k < c->n_in; k++) {
      int64_t n = numel(c, k);
      h[k] = malloc((size_t)n * sizeof(double));
      ga[k] = malloc((size_t)n * sizeof(double));
      gd[k] = malloc((size_t)n * sizeof(double));
      for (int64_t j = 0; j < n; j++) {
        double v = gauss();
        if (c->domain[k] == POSITIVE) v = 0.5 + 1.5 * rnd();
        if (c->domain[k] == AWAY0) v = (v < 0 ? -0.2 : 0.2) + v;
        h[k][j] = v;
      }
    }
    /* output size for R: one forward in f64 */
    int64_t n_out = 0;
    ag_scope_begin();
    ag_no_grad_begin();
    ag_tensor *x0[MAXIN];
    for (int k = 0; k < c->n_in; k++) x0[k] = ag_from_host(AG_CPU, AG_F64, c->nd[k], c->shape[k], h[k]);
    ag_tensor *y0 = c->fn(x0, AG_F64);
    if (!y0) fail_msg("%s: forward failed: %s", c->name, ag_last_error());
    n_out = ag_tensor_numel(y0);
    ag_grad_mode_end();
    ag_scope_end();
    double *r = malloc((size_t)(n_out ? n_out : 1) * sizeof(double));
    for (int64_t j = 0; j < n_out; j++) r[j] = 0.5 + rnd();

    bool unsup = false;
    assert_true(analytic(c, h, AG_F64, r, ga, &unsup));
    /* central differences, ggml-style asymmetric relative error */
    const double eps = 1e-6, atol = 1e-7, rtol = 1e-5;
    for (int k = 0; k < c->n_in; k++)
      for (int64_t j = 0; j < numel(c, k); j++) {
        double v = h[k][j];
        h[k][j] = v + eps;
        double lp = eval_loss(c, h, r);
        h[k][j] = v - eps;
        double lm = eval_loss(c, h, r);
        h[k][j] = v;
        double num = (lp - lm) / (2 * eps), a = ga[k][j];
        double err = fabs(a - num), rel = err / fmax(fabs(num), 1e-12);
        if (err > atol && rel > rtol)
          fail_msg("%s: input %d element %lld: analytic %.10g, numeric %.10g (rel %.3g)", c->name, k, (long long)j,
                   a, num, rel);
      }
    checked++;
    ref_fn ref = ref_of(c->name);
    if (ref) {
      double *gr[MAXIN];
      for (int k = 0; k < c->n_in; k++) gr[k] = malloc((size_t)numel(c, k) * sizeof(double));
      ref(c, h, r, gr);
      double se = 0, sr = 0;
      for (int k = 0; k < c->n_in; k++)
        for (int64_t j = 0; j < numel(c, k); j++) {
          se += (ga[k][j] - gr[k][j]) * (ga[k][j] - gr[k][j]);
          sr += gr[k][j] * gr[k][j];
        }
      double nmse = se / (sr > 0 ? sr : 1);
      if (!(nmse <= 1e-24))
        fail_msg("%s (f64): NMSE %.3g against the f64 reference > 1e-24 (an f32 step inside the f64 backward?)",
                 c->name, nmse);
      printf("gradcheck: %-26s f64 NMSE vs reference %.2g\n", c->name, nmse);
      for (int k = 0; k < c->n_in; k++) free(gr[k]);
      refs_checked++;
    }
    /* the other float dtypes against the f64 analytic gradient */
    const ag_dtype dts[3] = {AG_F32, AG_F16, AG_BF16};
    const double tol[3] = {1e-5, 2e-2, 1e-1};
    for (int di = 0; di < 3; di++) {
      bool un = false;
      if (!analytic(c, h, dts[di], r, gd, &un)) {
        assert_true(un);
        skipped++;
        continue;
      }
      double se = 0, sr = 0;
      for (int k = 0; k < c->n_in; k++)
        for (int64_t j = 0; j < numel(c, k); j++) {
          se += (gd[k][j] - ga[k][j]) * (gd[k][j] - ga[k][j]);
          sr += ga[k][j] * ga[k][j];
        }
      double nerr = sqrt(se / (sr > 0 ? sr : 1));
      if (!(nerr <= tol[di]))
        fail_msg("%s (%s): normalised gradient error %.3g > %.3g", c->name, ag_dtype_name(dts[di]), nerr, tol[di]);
      checked++;
    }
    for (int k = 0; k < c->n_in; k++) {
      free(h[k]);
      free(ga[k]);
      free(gd[k]);
    }
    free(r);
  }
  printf("gradcheck: %d op cases, %d (op, dtype) checks passed, %d skipped as unsupported\n", NCASES, checked, skipped);
  assert_int_equal(refs_checked, 8); /* every reference ran (a renamed case would skip it) */
  assert_int_equal(ag_live_nodes(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_gradcheck)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
