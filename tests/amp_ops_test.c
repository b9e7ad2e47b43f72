/* Every op under autocast, conformance style, on the CPU and on opencl:0,
 * cuda:0 and hip:0 (each skipped without one): each op runs in the dtype
 * include/anygrad/amp.h's policy names for f32, half and mixed inputs,
 * matches the same op computed in f32 on the inputs the policy hands it (to
 * the output's rounding), matches plain f32 within the half dtype's
 * tolerance, and backward delivers f32 gradients to f32 leaves. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

enum { R = 6, C = 10, V = 12, K = 5 };

typedef enum { P_LOW, P_F32, P_WIDE, P_SAME } policy;
static const char *const k_policy[] = {"low", "f32", "widest", "input"};

/* Non-float operands every op may use, on the device under test. */
typedef struct aux {
  ag_tensor *targets; /* i32 [R] in [0, C) */
  ag_tensor *idx;     /* i32 [R] in [0, V) */
  ag_tensor *cond;    /* f32 [R, C] of 0/1 */
} aux;

typedef ag_tensor *(*op_fn)(ag_tensor *const *in, const aux *a);

typedef enum { G_NORMAL, G_POS, G_NEAR0 } gen_kind; /* G_NEAR0: input 0 with every 3rd element changed */

typedef struct opcase {
  const char *name;
  policy pol;
  bool grad; /* differentiable in its float inputs */
  int n;     /* float inputs */
  int ndim[3];
  int64_t shape[3][2];
  gen_kind gen[3];
  op_fn fn;
} opcase;

#define RC {R, C}
#define E1(nm, pol, gr, g0, body)                                                        \
  static ag_tensor *op_##nm(ag_tensor *const *in, const aux *a) { (void)a; return body; } \
  static const opcase c_##nm = {#nm, pol, gr, 1, {2}, {RC}, {g0}, op_##nm};
#define E2(nm, pol, gr, g1, body)                                                        \
  static ag_tensor *op_##nm(ag_tensor *const *in, const aux *a) { (void)a; return body; } \
  static const opcase c_##nm = {#nm, pol, gr, 2, {2, 2}, {RC, RC}, {G_NORMAL, g1}, op_##nm};

E2(add, P_WIDE, true, G_NORMAL, ag_add(in[0], in[1]))
E2(sub, P_WIDE, true, G_NORMAL, ag_sub(in[0], in[1]))
E2(mul, P_WIDE, true, G_NORMAL, ag_mul(in[0], in[1]))
E2(div, P_WIDE, true, G_POS, ag_div(in[0], in[1]))
E2(maximum, P_WIDE, true, G_NORMAL, ag_maximum(in[0], in[1]))
E2(minimum, P_WIDE, true, G_NORMAL, ag_minimum(in[0], in[1]))
E2(eq, P_WIDE, false, G_NEAR0, ag_eq(in[0], in[1]))
E2(gt, P_WIDE, false, G_NEAR0, ag_gt(in[0], in[1]))
E2(lt, P_WIDE, false, G_NEAR0, ag_lt(in[0], in[1]))
E2(where, P_WIDE, true, G_NORMAL, ag_where(a->cond, in[0], in[1]))
E2(mse_loss, P_F32, true, G_NORMAL, ag_mse_loss(in[0], in[1], AG_REDUCTION_MEAN))
E1(add_scalar, P_SAME, true, G_NORMAL, ag_add_scalar(in[0], 0.75))
E1(sub_scalar, P_SAME, true, G_NORMAL, ag_sub_scalar(in[0], 0.75))
E1(rsub_scalar, P_SAME, true, G_NORMAL, ag_rsub_scalar(in[0], 0.75))
E1(mul_scalar, P_SAME, true, G_NORMAL, ag_mul_scalar(in[0], 3.0))
E1(div_scalar, P_SAME, true, G_NORMAL, ag_div_scalar(in[0], 3.0))
E1(pow_scalar, P_F32, true, G_POS, ag_pow_scalar(in[0], 1.7))
E1(neg, P_SAME, true, G_NORMAL, ag_neg(in[0]))
E1(exp, P_F32, true, G_NORMAL, ag_exp(in[0]))
E1(log, P_F32, true, G_POS, ag_log(in[0]))
E1(sqrt, P_SAME, true, G_POS, ag_sqrt(in[0]))
E1(rsqrt, P_F32, true, G_POS, ag_rsqrt(in[0]))
E1(abs, P_SAME, true, G_NORMAL, ag_abs(in[0]))
E1(relu, P_SAME, true, G_NORMAL, ag_relu(in[0]))
E1(gelu, P_SAME, true, G_NORMAL, ag_gelu(in[0]))
E1(silu, P_SAME, true, G_NORMAL, ag_silu(in[0]))
E1(sigmoid, P_SAME, true, G_NORMAL, ag_sigmoid(in[0]))
E1(tanh, P_SAME, true, G_NORMAL, ag_tanh(in[0]))
E1(masked_fill, P_SAME, true, G_NORMAL, ag_masked_fill(in[0], a->cond, -2.5))
E1(sum, P_F32, true, G_NORMAL, ag_sum(in[0], 1, (int[]){1}, false))
E1(sum_all, P_F32, true, G_NORMAL, ag_sum(in[0], 0, NULL, false))
E1(mean, P_F32, true, G_NORMAL, ag_mean(in[0], 1, (int[]){0}, true))
E1(max, P_SAME, true, G_NORMAL, ag_max(in[0], 1, (int[]){1}, false))
E1(min, P_SAME, true, G_NORMAL, ag_min(in[0], 1, (int[]){0}, false))
E1(argmax, P_SAME, false, G_NORMAL, ag_argmax(in[0], 1, false))
E1(softmax, P_F32, true, G_NORMAL, ag_softmax(in[0], -1))
E1(log_softmax, P_F32, true, G_NORMAL, ag_log_softmax(in[0], -1))
E1(cross_entropy, P_F32, true, G_NORMAL, ag_cross_entropy(in[0], a->targets, AG_REDUCTION_MEAN, -1))
E1(cross_entropy_none, P_F32, true, G_NORMAL, ag_cross_entropy(in[0], a->targets, AG_REDUCTION_NONE, -1))
E1(transpose_contiguous, P_SAME, true, G_NORMAL, ag_contiguous(ag_transpose(in[0], 0, 1)))
E1(reshape, P_SAME, true, G_NORMAL, ag_reshape(in[0], 2, (int64_t[]){C, R}))
E1(slice, P_SAME, true, G_NORMAL, ag_slice(in[0], 1, 1, 9, 2))

static ag_tensor *op_dropout(ag_tensor *const *in, const aux *a) {
  (void)a;
  ag_generator *g = ag_generator_create(5); /* one mask for every run */
  ag_tensor *r = ag_dropout(in[0], 0.3, true, g);
  ag_generator_free(g);
  return r;
}
static const opcase c_dropout = {"dropout", P_SAME, true, 1, {2}, {RC}, {G_NORMAL}, op_dropout};

static ag_tensor *op_concat(ag_tensor *const *in, const aux *a) {
  (void)a;
  return ag_concat(2, in, 1);
}
static const opcase c_concat = {"concat", P_WIDE, true, 2, {2, 2}, {RC, RC}, {G_NORMAL, G_NORMAL}, op_concat};

static ag_tensor *op_matmul(ag_tensor *const *in, const aux *a) {
  (void)a;
  return ag_matmul(in[0], in[1]);
}
static const opcase c_matmul = {"matmul", P_LOW, true, 2, {2, 2}, {RC, {C, K}}, {G_NORMAL, G_NORMAL}, op_matmul};

static ag_tensor *op_matmul_bt(ag_tensor *const *in, const aux *a) {
  (void)a; /* a linear layer's x @ W^T: column-major right operand */
  return ag_matmul(in[0], ag_transpose(in[1], 0, 1));
}
static const opcase c_matmul_bt = {"matmul_bt", P_LOW, true, 2, {2, 2}, {RC, {K, C}}, {G_NORMAL, G_NORMAL},
                                   op_matmul_bt};

static ag_tensor *op_layer_norm(ag_tensor *const *in, const aux *a) {
  (void)a;
  return ag_layer_norm(in[0], in[1], in[2], 1e-5);
}
static const opcase c_layer_norm = {"layer_norm", P_F32, true, 3, {2, 1, 1}, {RC, {C}, {C}},
                                    {G_NORMAL, G_POS, G_NORMAL}, op_layer_norm};

static ag_tensor *op_embedding(ag_tensor *const *in, const aux *a) { return ag_embedding(in[0], a->idx); }
static const opcase c_embedding = {"embedding", P_SAME, true, 1, {2}, {{V, C}}, {G_NORMAL}, op_embedding};

static const opcase *const k_cases[] = {
    &c_add, &c_sub, &c_mul, &c_div, &c_maximum, &c_minimum, &c_eq, &c_gt, &c_lt, &c_where, &c_mse_loss,
    &c_add_scalar, &c_sub_scalar, &c_rsub_scalar, &c_mul_scalar, &c_div_scalar, &c_pow_scalar, &c_neg, &c_exp,
    &c_log, &c_sqrt, &c_rsqrt, &c_abs, &c_relu, &c_gelu, &c_silu, &c_sigmoid, &c_tanh, &c_masked_fill, &c_sum,
    &c_sum_all, &c_mean, &c_max, &c_min, &c_argmax, &c_softmax, &c_log_softmax, &c_cross_entropy,
    &c_cross_entropy_none, &c_transpose_contiguous, &c_reshape, &c_slice, &c_dropout, &c_concat, &c_matmul,
    &c_matmul_bt, &c_layer_norm, &c_embedding,
};
#define N_CASES ((int)(sizeof k_cases / sizeof *k_cases))

/* ---------------- helpers ---------------- */

/* Unit roundoff times two: the spacing of the half dtype near 1. */
static double eps_of(ag_dtype dt) { return dt == AG_F16 ? 0x1p-10 : dt == AG_BF16 ? 0x1p-7 : 0x1p-23; }

static uint64_t g_rng = 88172645463325252ull;
static double urand(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

static int64_t numel_of(const opcase *oc, int i) {
  int64_t n = 1;
  for (int d = 0; d < oc->ndim[i]; d++) n *= oc->shape[i][d];
  return n;
}

/* Host values of input i (input 0 given for G_NEAR0). */
static void gen(const opcase *oc, int i, const float *in0, float *out) {
  for (int64_t k = 0; k < numel_of(oc, i); k++) {
    double u = urand(), v = urand();
    double nrm = sqrt(-2.0 * log(u + 1e-12)) * cos(6.283185307179586 * v);
    switch (oc->gen[i]) {
      case G_NORMAL: out[k] = (float)nrm; break;
      case G_POS: out[k] = (float)(0.5 + 1.5 * u); break;
      case G_NEAR0: out[k] = k % 3 ? in0[k] : (float)nrm; break;
    }
  }
}

/* Result as host f32 (cast outside any region); numel in *n. */
static float *fetch(ag_tensor *t, int64_t *n) {
  ag_tensor *f = ag_cast(t, AG_F32);
  assert_non_null(f);
  *n = ag_tensor_numel(f);
  float *h = test_malloc((size_t)(*n ? *n : 1) * sizeof *h);
  assert_int_equal(ag_to_host(f, h, (size_t)*n * sizeof *h), AG_OK);
  ag_tensor_release(f);
  return h;
}

/* max |a - b| / max |b| (NaN anywhere fails). */
static double nerr(const float *a, const float *b, int64_t n) {
  double mx = 0, e = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isnan(b[i])) return INFINITY;
    mx = fmax(mx, fabs(b[i]));
    e = fmax(e, fabs((double)a[i] - b[i]));
  }
  return e / (mx > 1e-6 ? mx : 1e-6);
}

/* Output dtype the policy names for these inputs (argmax: always i64). */
static ag_dtype expected(const opcase *oc, ag_tensor *const *in, ag_dtype region) {
  if (!strcmp(oc->name, "argmax")) return AG_I64;
  /* comparisons give bool whatever the region (the inputs follow the policy) */
  if (!strcmp(oc->name, "eq") || !strcmp(oc->name, "gt") || !strcmp(oc->name, "lt")) return AG_BOOL;
  switch (oc->pol) {
    case P_LOW: return region;
    case P_F32: return AG_F32;
    case P_WIDE: {
      ag_dtype w = ag_tensor_dtype(in[0]);
      for (int i = 1; i < oc->n; i++)
        if (ag_tensor_dtype(in[i]) != w) w = AG_F32;
      return w;
    }
    case P_SAME: break;
  }
  return ag_tensor_dtype(in[0]);
}

typedef struct stats {
  int checks;
  double worst_low, worst_exact;
} stats;

/* One op with inputs converted to dts[i]: the dtype must follow the policy;
 * the values must equal the f32 op on the same (rounded) inputs, to the
 * output dtype's rounding (f32 outputs: 1e-6, an f32 computation); a low-
 * precision op must also match plain f32 within 8 eps of its dtype. */
static void check_forward(const opcase *oc, ag_device dev, const aux *ax, float *const *host, const ag_dtype *dts,
                          ag_dtype region, stats *s) {
  ag_scope_begin();
  ag_tensor *f32[3], *in[3], *rounded[3];
  for (int i = 0; i < oc->n; i++) {
    f32[i] = ag_from_host(dev, AG_F32, oc->ndim[i], oc->shape[i], host[i]);
    in[i] = ag_cast(f32[i], dts[i]);
    rounded[i] = ag_cast(in[i], AG_F32);
    assert_non_null(rounded[i]);
  }
  ag_dtype want = expected(oc, in, region);
  assert_int_equal(ag_autocast_begin(region), AG_OK);
  ag_tensor *out = oc->fn(in, ax);
  assert_int_equal(ag_autocast_end(), AG_OK);
  if (!out) fail_msg("%s under %s autocast: %s", oc->name, ag_dtype_name(region), ag_last_error());
  if (ag_tensor_dtype(out) != want)
    fail_msg("%s (%s policy, inputs %s/%s) under %s: got %s, expected %s", oc->name, k_policy[oc->pol],
             ag_dtype_name(dts[0]), oc->n > 1 ? ag_dtype_name(dts[1]) : "-", ag_dtype_name(region),
             ag_dtype_name(ag_tensor_dtype(out)), ag_dtype_name(want));
  /* the policy's computation, emulated in f32: rounded inputs (low ops see
   * their inputs in the region dtype), f32 op, output rounded to its dtype */
  ag_tensor *emu_in[3];
  for (int i = 0; i < oc->n; i++)
    emu_in[i] = oc->pol == P_LOW ? ag_cast(ag_cast(rounded[i], region), AG_F32) : rounded[i];
  ag_tensor *ref = oc->fn(emu_in, ax);
  ag_tensor *plain = oc->fn(f32, ax);
  assert_non_null(ref);
  assert_non_null(plain);
  int64_t n1, n2, n3;
  float *o = fetch(out, &n1), *r = fetch(ref, &n2), *p = fetch(plain, &n3);
  assert_true(n1 == n2 && n2 == n3);
  ag_dtype od = ag_tensor_dtype(out);
  double tol = od == AG_F16 || od == AG_BF16 ? eps_of(od) : 1e-6;
  if (od == AG_I32 || od == AG_BOOL) tol = 0;
  double e = nerr(o, r, n1);
  if (!(e <= tol))
    fail_msg("%s (inputs %s/%s, region %s, out %s): %.3g from the policy's computation (tol %.3g)", oc->name,
             ag_dtype_name(dts[0]), oc->n > 1 ? ag_dtype_name(dts[1]) : "-", ag_dtype_name(region),
             ag_dtype_name(od), e, tol);
  if (od != AG_I32 && od != AG_BOOL) s->worst_exact = fmax(s->worst_exact, e / (tol > 0 ? tol : 1));
  if (oc->pol == P_LOW && dts[0] == AG_F32) {
    double el = nerr(o, p, n1);
    if (!(el <= 8 * eps_of(region)))
      fail_msg("%s under %s: %.3g from plain f32 (tol %.3g)", oc->name, ag_dtype_name(region), el,
               8 * eps_of(region));
    s->worst_low = fmax(s->worst_low, el / (8 * eps_of(region)));
  }
  test_free(o);
  test_free(r);
  test_free(p);
  s->checks++;
  ag_scope_end();
}

/* Backward through the op in a region from f32 leaves: f32 gradients that
 * match plain f32 backward (low ops within 16 eps of the region dtype, the
 * others to 1e-5: autocast leaves them in f32). */
static void check_backward(const opcase *oc, ag_device dev, const aux *ax, float *const *host, ag_dtype region,
                           stats *s) {
  float *g[2][3];
  int64_t ng[3];
  for (int pass = 0; pass < 2; pass++) {
    ag_scope_begin();
    ag_tensor *leaf[3];
    for (int i = 0; i < oc->n; i++) {
      leaf[i] = ag_from_host(dev, AG_F32, oc->ndim[i], oc->shape[i], host[i]);
      assert_int_equal(ag_tensor_set_requires_grad(leaf[i], true), AG_OK);
    }
    if (pass == 1) assert_int_equal(ag_autocast_begin(region), AG_OK);
    ag_tensor *out = oc->fn(leaf, ax);
    if (pass == 1) assert_int_equal(ag_autocast_end(), AG_OK);
    assert_non_null(out);
    /* a fixed random projection to a scalar, in f32 */
    ag_generator *gen_w = ag_generator_create(11);
    ag_tensor *w = ag_randn(dev, AG_F32, ag_tensor_ndim(out), ag_tensor_shape(out), 0, 1, gen_w);
    ag_generator_free(gen_w);
    ag_tensor *loss = ag_sum(ag_mul(ag_cast(out, AG_F32), w), 0, NULL, false);
    assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
    for (int i = 0; i < oc->n; i++) {
      ag_tensor *gr = ag_tensor_grad(leaf[i]);
      assert_non_null(gr);
      assert_int_equal(ag_tensor_dtype(gr), AG_F32);
      g[pass][i] = fetch(gr, &ng[i]);
    }
    ag_scope_end();
  }
  double tol = oc->pol == P_LOW ? 16 * eps_of(region) : 1e-5;
  for (int i = 0; i < oc->n; i++) {
    double e = nerr(g[1][i], g[0][i], ng[i]);
    if (!(e <= tol))
      fail_msg("%s backward under %s: input %d gradient %.3g from f32 (tol %.3g)", oc->name, ag_dtype_name(region),
               i, e, tol);
    test_free(g[0][i]);
    test_free(g[1][i]);
  }
  s->checks++;
}

static void run_device(ag_device dev) {
  aux ax;
  int32_t t[R], ix[R];
  float cond[R * C];
  for (int i = 0; i < R; i++) {
    t[i] = (i * 3) % C;
    ix[i] = (i * 5 + 1) % V;
  }
  for (int i = 0; i < R * C; i++) cond[i] = (float)((i * 7) % 3 == 0);
  ax.targets = ag_from_host(dev, AG_I32, 1, (int64_t[]){R}, t);
  ax.idx = ag_from_host(dev, AG_I32, 1, (int64_t[]){R}, ix);
  ax.cond = ag_from_host(dev, AG_F32, 2, (int64_t[]){R, C}, cond);
  assert_non_null(ax.cond);
  const ag_dtype halves[2] = {AG_F16, AG_BF16};
  stats s = {0};
  for (int k = 0; k < N_CASES; k++) {
    const opcase *oc = k_cases[k];
    float *host[3];
    for (int i = 0; i < oc->n; i++) {
      host[i] = test_malloc((size_t)numel_of(oc, i) * sizeof(float));
      gen(oc, i, host[0], host[i]);
    }
    for (int h = 0; h < 2; h++) {
      ag_dtype dt = halves[h], other = halves[1 - h];
      ag_dtype all32[3] = {AG_F32, AG_F32, AG_F32}, allh[3] = {dt, dt, dt};
      check_forward(oc, dev, &ax, host, all32, dt, &s);
      check_forward(oc, dev, &ax, host, allh, dt, &s);
      if (oc->n >= 2) {
        ag_dtype mixed[3] = {dt, AG_F32, dt}, halfs[3] = {dt, other, dt};
        check_forward(oc, dev, &ax, host, mixed, dt, &s);
        check_forward(oc, dev, &ax, host, halfs, dt, &s);
      }
      if (oc->grad) check_backward(oc, dev, &ax, host, dt, &s);
    }
    for (int i = 0; i < oc->n; i++) test_free(host[i]);
  }
  char name[32];
  ag_device_str(dev, name, sizeof name);
  print_message("%s: %d ops, %d checks; worst error %.2f of the rounding bound, low-precision ops %.2f of 8 eps\n",
                name, N_CASES, s.checks, s.worst_exact, s.worst_low);
  ag_tensor_release(ax.targets);
  ag_tensor_release(ax.idx);
  ag_tensor_release(ax.cond);
}

static void test_cpu(void **state) { run_device(AG_CPU); }

static void run_backend(ag_backend_kind k) {
  if (!ag_backend_available(k, NULL)) skip();
  run_device((ag_device){k, 0});
}
static void test_opencl(void **state) { run_backend(AG_BACKEND_OPENCL); }
static void test_cuda(void **state) { run_backend(AG_BACKEND_CUDA); }
static void test_hip(void **state) { run_backend(AG_BACKEND_HIP); }
static void test_gpuemu(void **state) { run_backend(AG_BACKEND_GPUEMU); }

/* Regions nest, f32 islands switch autocast off, the parameter cast is made
 * once per region and gradients reach the f32 parameter. */
static void test_regions(void **state) {
  assert_false(ag_autocast_enabled());
  assert_int_equal(ag_autocast_begin(AG_I32), AG_ERR_DTYPE);
  assert_int_equal(ag_autocast_end(), AG_ERR_STATE);
  ag_tensor *w = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){4, 4});
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){2, 4});
  assert_int_equal(ag_tensor_set_requires_grad(w, true), AG_OK);
  ag_scope_begin();
  assert_int_equal(ag_autocast_begin(AG_BF16), AG_OK);
  assert_true(ag_autocast_enabled() && ag_autocast_dtype() == AG_BF16);
  ag_tensor *a = ag_matmul(x, w);
  assert_int_equal(ag_autocast_begin(AG_F32), AG_OK);
  assert_false(ag_autocast_enabled());
  ag_tensor *b = ag_matmul(x, w);
  assert_int_equal(ag_autocast_end(), AG_OK);
  ag_tensor *c = ag_matmul(x, w);
  assert_int_equal(ag_autocast_end(), AG_OK);
  assert_int_equal(ag_tensor_dtype(a), AG_BF16);
  assert_int_equal(ag_tensor_dtype(b), AG_F32);
  assert_int_equal(ag_tensor_dtype(c), AG_BF16);
  ag_tensor *l = ag_add(ag_sum(a, 0, NULL, false), ag_sum(c, 0, NULL, false));
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  float g[16];
  assert_int_equal(ag_tensor_dtype(ag_tensor_grad(w)), AG_F32);
  assert_int_equal(ag_to_host(ag_tensor_grad(w), g, sizeof g), AG_OK);
  for (int i = 0; i < 16; i++) assert_true(g[i] == 4.0f); /* 2 rows x 2 products */
  ag_scope_end();
  ag_tensor_release(w);
  ag_tensor_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regions),
      cmocka_unit_test(test_cpu),
      cmocka_unit_test(test_opencl),
      cmocka_unit_test(test_cuda),
      cmocka_unit_test(test_hip),
      cmocka_unit_test(test_gpuemu),
  };
  return cmocka_run_group_tests_name("amp_ops", tests, NULL, NULL);
}
