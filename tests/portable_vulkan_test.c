/* Portable numerics on vulkan:0 (docs/numerics.md): every result bit for
 * bit the CPU's, on awkward sizes (1, 255, 256, 257, 70000 elements; rows
 * of 1 and 5000; sums over two and three levels of blocks), for f32, f16
 * and bf16. Where the CPU refuses an op in portable mode the canonical sum
 * and the sequential matmul are checked against a reference written here.
 * Run under the validation layers (tests/portable_vulkan.cmake). Skips (77)
 * without vulkan:0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static ag_device VK;

static bool have_vulkan(void) {
  ag_backend_kind k;
  if (ag_backend_find("vulkan", &k) != AG_OK) return false;
  return ag_backend_available(k, NULL) && ag_device_parse("vulkan:0", &VK) == AG_OK;
}

/* deterministic inputs in [-3, 3), with a few zeros, tiny and huge values */
static float *inputs(int64_t n, uint32_t seed) {
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    float u = (float)(s >> 8) * 0x1p-24f;
    v[i] = 6.0f * u - 3.0f;
    if (i % 97 == 13) v[i] = 0.0f;
    if (i % 89 == 7) v[i] = ldexpf(v[i], -140); /* subnormal */
  }
  return v;
}

/* The bits of t (f32, f16, bf16 or integer) as bytes; *out_es the element size. */
static void *bits_of(ag_tensor *t, int64_t *out_n, size_t *out_es) {
  int64_t n = ag_tensor_numel(t);
  size_t es = ag_dtype_size(ag_tensor_dtype(t));
  void *h = malloc((size_t)(n ? n : 1) * es);
  assert_non_null(h);
  if (ag_to_host(t, h, (size_t)n * es) != AG_OK) fail_msg("ag_to_host: %s", ag_last_error());
  *out_n = n;
  *out_es = es;
  return h;
}

static bool is_nan_bits(const uint8_t *p, size_t es, ag_dtype dt) {
  if (dt == AG_F32) {
    uint32_t u;
    memcpy(&u, p, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
  }
  if (dt == AG_F16 || dt == AG_BF16) {
    uint16_t u;
    memcpy(&u, p, 2);
    return dt == AG_F16 ? (u & 0x7fffu) > 0x7c00u : (u & 0x7fffu) > 0x7f80u;
  }
  (void)es;
  return false;
}

/* Differing elements of a and b (NaN equals NaN, every other value by its bits). */
static int64_t differ(const char *what, ag_tensor *a, ag_tensor *b) {
  assert_non_null(a);
  assert_non_null(b);
  ag_dtype dt = ag_tensor_dtype(a);
  assert_int_equal(dt, ag_tensor_dtype(b));
  int64_t n, m;
  size_t es, es2;
  uint8_t *x = bits_of(a, &n, &es), *y = bits_of(b, &m, &es2);
  assert_int_equal(n, m);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *p = x + (size_t)i * es, *q = y + (size_t)i * es;
    if (memcmp(p, q, es) == 0 || (is_nan_bits(p, es, dt) && is_nan_bits(q, es, dt))) continue;
    if (bad++ < 4) {
      uint32_t u = 0, v = 0;
      memcpy(&u, p, es < 4 ? es : 4);
      memcpy(&v, q, es < 4 ? es : 4);
      fprintf(stderr, "%s %s: element %lld: vulkan 0x%x, reference 0x%x\n", what, ag_dtype_name(dt), (long long)i,
              (unsigned)u, (unsigned)v);
    }
  }
  free(x);
  free(y);
  return bad;
}

/* x of shape on d in dtype dt (from the f32 values v: one rounding) */
static ag_tensor *make(ag_device d, ag_dtype dt, int nd, const int64_t *shape, const float *v) {
  ag_tensor *f = ag_from_host(d, AG_F32, nd, shape, v);
  assert_non_null(f);
  if (dt == AG_F32) return f;
  ag_tensor *t = ag_cast(f, dt);
  ag_tensor_release(f);
  if (!t) fail_msg("cast: %s", ag_last_error());
  return t;
}

typedef ag_tensor *(*op_fn)(ag_tensor *const *x, int arg);

/* Runs op on vulkan:0 and the cpu (portable numerics) with the same inputs
 * and asserts the same bits; `ref` (may be NULL) gives the reference when
 * the cpu refuses. Returns whether a comparison ran. */
static bool same_as_cpu(const char *what, op_fn op, int arg, ag_dtype dt, int nin, const int *nd,
                        const int64_t (*shape)[4], ag_tensor *(*ref)(ag_tensor *const *x, int arg)) {
  ag_tensor *xv[4] = {0}, *xc[4] = {0};
  float *v[4] = {0};
  for (int k = 0; k < nin; k++) {
    int64_t n = 1;
    for (int i = 0; i < nd[k]; i++) n *= shape[k][i];
    v[k] = inputs(n, (uint32_t)(k + 1));
    xv[k] = make(VK, dt, nd[k], shape[k], v[k]);
    xc[k] = make(AG_CPU, dt, nd[k], shape[k], v[k]);
  }
  /* only the op runs in portable mode: the inputs' casts and the
   * references are made in the default one */
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  ag_tensor *yv = op(xv, arg);
  if (!yv) fail_msg("%s %s on vulkan:0: %s", what, ag_dtype_name(dt), ag_last_error());
  ag_tensor *yc = op(xc, arg);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
  bool ran = true;
  if (!yc && ref) {
    yc = ref(xc, arg);
    if (!yc) fail_msg("%s reference: %s", what, ag_last_error());
  }
  if (yc) {
    assert_int_equal(differ(what, yv, yc), 0);
    ag_tensor_release(yc);
  } else {
    fprintf(stderr, "note: %s %s: the cpu refuses (%s): not compared\n", what, ag_dtype_name(dt), ag_last_error());
    ran = false;
  }
  ag_tensor_release(yv);
  for (int k = 0; k < nin; k++) {
    ag_tensor_release(xv[k]);
    ag_tensor_release(xc[k]);
    free(v[k]);
  }
  return ran;
}

static const ag_dtype DTS[3] = {AG_F32, AG_F16, AG_BF16};
static const int64_t SIZES[5] = {1, 255, 256, 257, 70000};

/* ---- references (default numerics on the cpu, host arithmetic) ---- */

static float as_f32(ag_tensor *t, float **out) {
  ag_tensor *f = ag_tensor_dtype(t) == AG_F32 ? t : ag_cast(t, AG_F32);
  int64_t n = ag_tensor_numel(f);
  *out = malloc((size_t)(n ? n : 1) * sizeof(float));
  assert_non_null(*out);
  assert_int_equal(ag_to_host(f, *out, (size_t)n * sizeof(float)), AG_OK);
  if (f != t) ag_tensor_release(f);
  return 0;
}

/* S of docs/numerics.md */
static float canon_sum(const float *v, int64_t n, int64_t stride) {
  if (n <= 1) return n ? v[0] + 0.0f : 0.0f;
  int64_t nb = (n + 255) / 256;
  float *bs = malloc((size_t)nb * sizeof *bs);
  assert_non_null(bs);
  for (int64_t b = 0; b < nb; b++) {
    float t[256];
    for (int i = 0; i < 256; i++) t[i] = b * 256 + i < n ? v[(b * 256 + i) * stride] : 0.0f;
    for (int s = 128; s > 0; s >>= 1)
      for (int i = 0; i < s; i++) t[i] = t[i] + t[i + s];
    bs[b] = t[0];
  }
  float r = nb == 1 ? bs[0] : canon_sum(bs, nb, 1);
  free(bs);
  return r;
}

static ag_tensor *from_f32(ag_tensor *like, int nd, const int64_t *shape, const float *v) {
  return make(AG_CPU, ag_tensor_dtype(like), nd, shape, v);
}

/* arg: the dim (-1 all) */
static ag_tensor *ref_sum(ag_tensor *const *x, int dim) {
  float *v;
  as_f32(x[0], &v);
  int nd = ag_tensor_ndim(x[0]);
  int64_t shape[8], outer = 1, r = 1, inner = 1;
  for (int i = 0; i < nd; i++) {
    shape[i] = ag_tensor_shape(x[0])[i];
    if (dim < 0 || i == dim) r *= shape[i];
    else if (i < dim) outer *= shape[i];
    else inner *= shape[i];
  }
  float *o = malloc((size_t)(outer * inner) * sizeof *o);
  assert_non_null(o);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t i = 0; i < inner; i++) o[a * inner + i] = canon_sum(v + a * r * inner + i, r, inner);
  int64_t oshape[8];
  int ond = 0;
  for (int i = 0; i < nd && dim >= 0; i++)
    if (i != dim) oshape[ond++] = shape[i];
  ag_tensor *t = from_f32(x[0], ond, oshape, o);
  free(v);
  free(o);
  return t;
}

static ag_tensor *ref_matmul(ag_tensor *const *x, int arg) {
  (void)arg;
  float *a, *b;
  as_f32(x[0], &a);
  as_f32(x[1], &b);
  int64_t M = ag_tensor_shape(x[0])[0], K = ag_tensor_shape(x[0])[1], N = ag_tensor_shape(x[1])[1];
  float *c = malloc((size_t)(M * N) * sizeof *c);
  assert_non_null(c);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) {
        volatile float p = a[m * K + k] * b[k * N + n];
        acc = acc + p;
      }
      c[m * N + n] = acc;
    }
  const int64_t shape[2] = {M, N};
  ag_tensor *t = from_f32(x[0], 2, shape, c);
  free(a);
  free(b);
  free(c);
  return t;
}

/* arg: dim * 4 + (std ? 2 : 0) + correction (0 or 1); VAR and STD */
static ag_tensor *ref_var(ag_tensor *const *x, int arg) {
  int dim = arg / 4, std = (arg & 2) != 0, corr = arg & 1;
  float *v;
  as_f32(x[0], &v);
  int nd = ag_tensor_ndim(x[0]);
  int64_t shape[8], outer = 1, r = 1, inner = 1, oshape[8];
  int ond = 0;
  for (int i = 0; i < nd; i++) {
    shape[i] = ag_tensor_shape(x[0])[i];
    if (i == dim) r = shape[i];
    else {
      oshape[ond++] = shape[i];
      if (i < dim) outer *= shape[i];
      else inner *= shape[i];
    }
  }
  float *o = malloc((size_t)(outer * inner) * sizeof *o), *t = malloc((size_t)r * sizeof *t);
  assert_true(o && t);
  double den = (double)r - corr;
  for (int64_t a = 0; a < outer; a++)
    for (int64_t i = 0; i < inner; i++) {
      const float *line = v + a * r * inner + i;
      float mean = canon_sum(line, r, inner) / (float)r;
      for (int64_t j = 0; j < r; j++) t[j] = (line[j * inner] - mean) * (line[j * inner] - mean);
      float var = canon_sum(t, r, 1) / (den > 0 ? (float)den : 0.0f);
      o[a * inner + i] = std ? sqrtf(var) : var;
    }
  ag_tensor *res = from_f32(x[0], ond, oshape, o);
  free(v);
  free(o);
  free(t);
  return res;
}

static ag_tensor *ref_cumsum(ag_tensor *const *x, int dim) {
  float *v;
  as_f32(x[0], &v);
  int nd = ag_tensor_ndim(x[0]);
  int64_t shape[8], outer = 1, r = 1, inner = 1, n = 1;
  for (int i = 0; i < nd; i++) {
    shape[i] = ag_tensor_shape(x[0])[i];
    n *= shape[i];
    if (i == dim) r = shape[i];
    else if (i < dim) outer *= shape[i];
    else inner *= shape[i];
  }
  float *o = malloc((size_t)n * sizeof *o);
  assert_non_null(o);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t i = 0; i < inner; i++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < r; j++) {
        int64_t p = (a * r + j) * inner + i;
        acc = acc + v[p];
        o[p] = acc;
      }
    }
  ag_tensor *res = from_f32(x[0], nd, shape, o);
  free(v);
  free(o);
  return res;
}

/* ---- the ops ---- */

typedef ag_tensor *(*un_fn)(ag_tensor *);
static const struct {
  const char *name;
  un_fn f;
} UNARY[] = {{"exp", ag_exp},       {"log", ag_log},     {"sqrt", ag_sqrt},   {"rsqrt", ag_rsqrt},
             {"tanh", ag_tanh},     {"sigmoid", ag_sigmoid}, {"gelu", ag_gelu}, {"silu", ag_silu},
             {"sin", ag_sin},       {"cos", ag_cos},     {"erf", ag_erf},     {"log1p", ag_log1p},
             {"expm1", ag_expm1},   {"reciprocal", ag_reciprocal}, {"softsign", ag_softsign}, {"mish", ag_mish}};
static ag_tensor *op_unary(ag_tensor *const *x, int k) { return UNARY[k].f(x[0]); }

typedef ag_tensor *(*bin_fn)(ag_tensor *, ag_tensor *);
static const struct {
  const char *name;
  bin_fn f;
} BINARY[] = {{"add", ag_add}, {"mul", ag_mul}, {"div", ag_div}, {"atan2", ag_atan2}, {"hypot", ag_hypot},
              {"fmod", ag_fmod}, {"remainder", ag_remainder}};
static ag_tensor *op_binary(ag_tensor *const *x, int k) { return BINARY[k].f(x[0], x[1]); }

static ag_tensor *op_sum(ag_tensor *const *x, int dim) {
  return dim < 0 ? ag_sum(x[0], 0, NULL, false) : ag_sum(x[0], 1, &dim, false);
}
static ag_tensor *op_matmul(ag_tensor *const *x, int arg) {
  (void)arg;
  return ag_matmul(x[0], x[1]);
}
static ag_tensor *op_softmax(ag_tensor *const *x, int logv) { return logv ? ag_log_softmax(x[0], 1) : ag_softmax(x[0], 1); }

static ag_tensor *op_var(ag_tensor *const *x, int arg) {
  int dim = arg / 4;
  return (arg & 2) ? ag_std(x[0], 1, &dim, arg & 1, false) : ag_var(x[0], 1, &dim, arg & 1, false);
}
static ag_tensor *op_cumsum(ag_tensor *const *x, int dim) { return ag_cumsum(x[0], dim); }

static void test_var_cumsum(void **state) {
  (void)state;
  static const int64_t sh[][2] = {{7, 1}, {3, 5000}, {2, 257}, {1, 70000}};
  for (int d = 0; d < 3; d++)
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
      const int nd[1] = {2};
      const int64_t shape[1][4] = {{sh[k][0], sh[k][1]}};
      for (int dim = 0; dim < 2; dim++) {
        for (int v = 0; v < 4; v++) same_as_cpu("var/std", op_var, dim * 4 + v, DTS[d], 1, nd, shape, ref_var);
        same_as_cpu("cumsum", op_cumsum, dim, DTS[d], 1, nd, shape, ref_cumsum);
      }
    }
}

static void test_unary(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof UNARY / sizeof UNARY[0]; k++)
    for (int d = 0; d < 3; d++)
      for (int s = 0; s < 5; s++) {
        const int nd[1] = {1};
        const int64_t shape[1][4] = {{SIZES[s]}};
        same_as_cpu(UNARY[k].name, op_unary, (int)k, DTS[d], 1, nd, shape, NULL);
      }
}

static void test_binary(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof BINARY / sizeof BINARY[0]; k++)
    for (int d = 0; d < 3; d++)
      for (int s = 0; s < 5; s++) {
        const int nd[2] = {1, 1};
        const int64_t shape[2][4] = {{SIZES[s]}, {SIZES[s]}};
        same_as_cpu(BINARY[k].name, op_binary, (int)k, DTS[d], 2, nd, shape, NULL);
      }
}

static void test_sum(void **state) {
  (void)state;
  for (int d = 0; d < 3; d++) {
    for (int s = 0; s < 5; s++) {
      const int nd[1] = {1};
      const int64_t shape[1][4] = {{SIZES[s]}};
      same_as_cpu("sum", op_sum, -1, DTS[d], 1, nd, shape, ref_sum);
    }
    /* three levels of blocks (more than 65536 block sums' worth) */
    const int nd1[1] = {1};
    const int64_t big[1][4] = {{256 * 256 + 300}};
    same_as_cpu("sum", op_sum, -1, DTS[d], 1, nd1, big, ref_sum);
    /* rows of 1 and 5000, along the last dim and along a strided one */
    const int nd2[1] = {2};
    const int64_t rows1[1][4] = {{37, 1}}, rows5k[1][4] = {{3, 5000}};
    same_as_cpu("sum rows", op_sum, 1, DTS[d], 1, nd2, rows1, ref_sum);
    same_as_cpu("sum rows", op_sum, 1, DTS[d], 1, nd2, rows5k, ref_sum);
    same_as_cpu("sum cols", op_sum, 0, DTS[d], 1, nd2, rows5k, ref_sum);
  }
}

static void test_matmul(void **state) {
  (void)state;
  static const int64_t mkn[][3] = {{1, 1, 1}, {1, 5000, 1}, {257, 255, 70}, {64, 256, 65}, {3, 70000 / 64, 5}};
  for (int d = 0; d < 3; d++)
    for (size_t k = 0; k < sizeof mkn / sizeof mkn[0]; k++) {
      const int nd[2] = {2, 2};
      const int64_t shape[2][4] = {{mkn[k][0], mkn[k][1]}, {mkn[k][1], mkn[k][2]}};
      same_as_cpu("matmul", op_matmul, 0, DTS[d], 2, nd, shape, ref_matmul);
    }
}

static void test_softmax(void **state) {
  (void)state;
  static const int64_t rc[][2] = {{7, 1}, {3, 255}, {2, 256}, {2, 257}, {3, 5000}, {1, 70000}};
  for (int logv = 0; logv < 2; logv++)
    for (int d = 0; d < 3; d++)
      for (size_t k = 0; k < sizeof rc / sizeof rc[0]; k++) {
        const int nd[1] = {2};
        const int64_t shape[1][4] = {{rc[k][0], rc[k][1]}};
        same_as_cpu(logv ? "log_softmax" : "softmax", op_softmax, logv, DTS[d], 1, nd, shape, NULL);
      }
}

/* ---- convolution and pooling: the sequential orders of the contract,
 * forward and backward (through autograd), against references here (the
 * cpu has no portable kernel for them) ---- */

typedef struct cgeo {
  int64_t N, C, H, W, Co, kh, kw;
  int sh, sw, ph, pw, dh, dw, G;
} cgeo;

static int64_t c_out(int64_t in, int k, int st, int pad, int dil) { return (in + 2 * pad - dil * (k - 1) - 1) / st + 1; }

/* y, dx, dw of the contract for x, w, bias b, upstream g */
static void conv_ref(const cgeo *q, const float *x, const float *w, const float *b, const float *g, float *y,
                     float *dx, float *dw) {
  int64_t Ho = c_out(q->H, (int)q->kh, q->sh, q->ph, q->dh), Wo = c_out(q->W, (int)q->kw, q->sw, q->pw, q->dw);
  int64_t Cg = q->C / q->G, Cog = q->Co / q->G;
  for (int64_t n = 0; n < q->N; n++)
    for (int64_t co = 0; co < q->Co; co++)
      for (int64_t oh = 0; oh < Ho; oh++)
        for (int64_t ow = 0; ow < Wo; ow++) {
          float acc = 0.0f;
          for (int64_t ci = 0; ci < Cg; ci++)
            for (int64_t i = 0; i < q->kh; i++)
              for (int64_t j = 0; j < q->kw; j++) {
                int64_t h = oh * q->sh - q->ph + i * q->dh, ww = ow * q->sw - q->pw + j * q->dw;
                if (h < 0 || h >= q->H || ww < 0 || ww >= q->W) continue;
                volatile float p = x[((n * q->C + (co / Cog) * Cg + ci) * q->H + h) * q->W + ww] *
                                   w[((co * Cg + ci) * q->kh + i) * q->kw + j];
                acc = acc + p;
              }
          if (b) acc = acc + b[co];
          y[((n * q->Co + co) * Ho + oh) * Wo + ow] = acc;
        }
  for (int64_t n = 0; n < q->N; n++)
    for (int64_t c = 0; c < q->C; c++)
      for (int64_t h = 0; h < q->H; h++)
        for (int64_t ww = 0; ww < q->W; ww++) {
          float acc = 0.0f;
          int64_t gi = c / Cg, ci = c % Cg;
          for (int64_t k = 0; k < Cog; k++)
            for (int64_t i = 0; i < q->kh; i++)
              for (int64_t j = 0; j < q->kw; j++) {
                int64_t th = h + q->ph - i * q->dh, tw = ww + q->pw - j * q->dw;
                if (th < 0 || th % q->sh || tw < 0 || tw % q->sw || th / q->sh >= Ho || tw / q->sw >= Wo) continue;
                int64_t co = gi * Cog + k;
                volatile float p = g[((n * q->Co + co) * Ho + th / q->sh) * Wo + tw / q->sw] *
                                   w[((co * Cg + ci) * q->kh + i) * q->kw + j];
                acc = acc + p;
              }
          dx[((n * q->C + c) * q->H + h) * q->W + ww] = acc;
        }
  int64_t cnt = q->N * Ho * Wo;
  float *t = malloc((size_t)cnt * sizeof *t);
  assert_non_null(t);
  for (int64_t co = 0; co < q->Co; co++)
    for (int64_t ci = 0; ci < Cg; ci++)
      for (int64_t i = 0; i < q->kh; i++)
        for (int64_t j = 0; j < q->kw; j++) {
          for (int64_t k = 0; k < cnt; k++) {
            int64_t n = k / (Ho * Wo), r = k % (Ho * Wo), oh = r / Wo, ow = r % Wo;
            int64_t h = oh * q->sh - q->ph + i * q->dh, ww = ow * q->sw - q->pw + j * q->dw;
            t[k] = h < 0 || h >= q->H || ww < 0 || ww >= q->W
                       ? 0.0f
                       : g[((n * q->Co + co) * Ho + oh) * Wo + ow] *
                             x[((n * q->C + (co / Cog) * Cg + ci) * q->H + h) * q->W + ww];
          }
          dw[((co * Cg + ci) * q->kh + i) * q->kw + j] = canon_sum(t, cnt, 1);
        }
  free(t);
}

static void assert_same_f32(const char *what, ag_tensor *t, const float *want) {
  int64_t n = ag_tensor_numel(t);
  float *got = malloc((size_t)n * sizeof *got);
  assert_non_null(got);
  assert_int_equal(ag_to_host(t, got, (size_t)n * sizeof *got), AG_OK);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], 4) && !(isnan(got[i]) && isnan(want[i])) && bad++ < 4)
      fprintf(stderr, "%s: element %lld: vulkan %a, reference %a\n", what, (long long)i, got[i], want[i]);
  free(got);
  assert_int_equal(bad, 0);
}

static void test_conv2d(void **state) {
  (void)state;
  static const cgeo geos[] = {{2, 4, 9, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2}, {1, 3, 8, 8, 5, 3, 2, 1, 1, 2, 1, 2, 1, 1},
                              {3, 2, 5, 6, 2, 1, 1, 2, 1, 0, 0, 1, 1, 1}, {4, 2, 12, 12, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1}};
  for (size_t k = 0; k < sizeof geos / sizeof geos[0]; k++) {
    const cgeo *q = &geos[k];
    int64_t Ho = c_out(q->H, (int)q->kh, q->sh, q->ph, q->dh), Wo = c_out(q->W, (int)q->kw, q->sw, q->pw, q->dw);
    int64_t xs[4] = {q->N, q->C, q->H, q->W}, ws[4] = {q->Co, q->C / q->G, q->kh, q->kw}, bs[1] = {q->Co},
            ys[4] = {q->N, q->Co, Ho, Wo};
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3], ny = ys[0] * ys[1] * Ho * Wo;
    float *x = inputs(nx, 11), *w = inputs(nw, 12), *b = inputs(q->Co, 13), *g = inputs(ny, 14);
    float *y = malloc((size_t)ny * 4), *dx = malloc((size_t)nx * 4), *dw = malloc((size_t)nw * 4);
    assert_true(y && dx && dw);
    conv_ref(q, x, w, b, g, y, dx, dw);
    ag_tensor *tx = ag_from_host(VK, AG_F32, 4, xs, x), *tw = ag_from_host(VK, AG_F32, 4, ws, w),
              *tb = ag_from_host(VK, AG_F32, 1, bs, b), *tg = ag_from_host(VK, AG_F32, 4, ys, g);
    assert_true(tx && tw && tb && tg);
    assert_int_equal(ag_tensor_set_requires_grad(tx, true), AG_OK);
    assert_int_equal(ag_tensor_set_requires_grad(tw, true), AG_OK);
    const ag_conv2d_params pr = {{q->sh, q->sw}, {q->ph, q->pw}, {q->dh, q->dw}, q->G};
    assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
    ag_tensor *ty = ag_conv2d(tx, tw, tb, &pr);
    if (!ty) fail_msg("conv2d: %s", ag_last_error());
    ag_status st = ag_backward(ty, tg, false);
    assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
    if (st != AG_OK) fail_msg("conv2d backward: %s", ag_last_error());
    assert_same_f32("conv2d", ty, y);
    assert_same_f32("conv2d dx", ag_tensor_grad(tx), dx);
    assert_same_f32("conv2d dw", ag_tensor_grad(tw), dw);
    ag_tensor_release(ty);
    ag_tensor_release(tx);
    ag_tensor_release(tw);
    ag_tensor_release(tb);
    ag_tensor_release(tg);
    free(x), free(w), free(b), free(g), free(y), free(dx), free(dw);
  }
}

/* avg (count_pad or not), max and adaptive avg pooling, forward and backward */
static void test_pool2d(void **state) {
  (void)state;
  const int64_t N = 2, C = 3, H = 9, W = 8;
  const int64_t xs[4] = {N, C, H, W};
  float *x = inputs(N * C * H * W, 21);
  for (int kind = 0; kind < 4; kind++) {
    const ag_pool2d_params pp = {{3, 2}, {2, 2}, {1, 1}, kind == 0};
    int64_t Ho = kind == 3 ? 4 : (H + 2 - 3) / 2 + 1, Wo = kind == 3 ? 3 : (W + 2 - 2) / 2 + 1;
    int64_t ny = N * C * Ho * Wo, ys[4] = {N, C, Ho, Wo};
    float *g = inputs(ny, 22), *y = malloc((size_t)ny * 4), *dx = calloc((size_t)(N * C * H * W), 4);
    int64_t *am = malloc((size_t)ny * sizeof *am);
    assert_true(y && dx && am);
    for (int64_t pl = 0; pl < N * C; pl++)
      for (int64_t oh = 0; oh < Ho; oh++)
        for (int64_t ow = 0; ow < Wo; ow++) {
          int64_t h0, h1, w0, w1, cnt;
          if (kind == 3) {
            h0 = oh * H / Ho, h1 = ((oh + 1) * H + Ho - 1) / Ho, w0 = ow * W / Wo, w1 = ((ow + 1) * W + Wo - 1) / Wo;
            cnt = (h1 - h0) * (w1 - w0);
          } else {
            h0 = oh * 2 - 1, h1 = h0 + 3, w0 = ow * 2 - 1, w1 = w0 + 2;
            int64_t hp = h1 < H + 1 ? h1 : H + 1, wp = w1 < W + 1 ? w1 : W + 1;
            cnt = (hp - h0) * (wp - w0);
            h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0, h1 = h1 > H ? H : h1, w1 = w1 > W ? W : w1;
            if (kind != 0) cnt = (h1 - h0) * (w1 - w0);
          }
          float acc = 0.0f, best = -INFINITY;
          int64_t bi = h0 * W + w0;
          for (int64_t i = h0; i < h1; i++)
            for (int64_t j = w0; j < w1; j++) {
              float v = x[pl * H * W + i * W + j];
              acc = acc + v;
              if (v > best) best = v, bi = i * W + j;
            }
          int64_t o = (pl * Ho + oh) * Wo + ow;
          y[o] = kind == 2 ? best : acc / (float)cnt;
          am[o] = bi;
        }
    /* dx: sequential over the outputs (oh outer, ow inner) that hold it */
    for (int64_t pl = 0; pl < N * C; pl++)
      for (int64_t oh = 0; oh < Ho; oh++)
        for (int64_t ow = 0; ow < Wo; ow++) {
          int64_t o = (pl * Ho + oh) * Wo + ow;
          if (kind == 2) {
            dx[pl * H * W + am[o]] = dx[pl * H * W + am[o]] + g[o];
            continue;
          }
          int64_t h0, h1, w0, w1, cnt;
          if (kind == 3) {
            h0 = oh * H / Ho, h1 = ((oh + 1) * H + Ho - 1) / Ho, w0 = ow * W / Wo, w1 = ((ow + 1) * W + Wo - 1) / Wo;
            cnt = (h1 - h0) * (w1 - w0);
          } else {
            h0 = oh * 2 - 1, h1 = h0 + 3, w0 = ow * 2 - 1, w1 = w0 + 2;
            int64_t hp = h1 < H + 1 ? h1 : H + 1, wp = w1 < W + 1 ? w1 : W + 1;
            cnt = (hp - h0) * (wp - w0);
            h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0, h1 = h1 > H ? H : h1, w1 = w1 > W ? W : w1;
            if (kind != 0) cnt = (h1 - h0) * (w1 - w0);
          }
          for (int64_t i = h0; i < h1; i++)
            for (int64_t j = w0; j < w1; j++) dx[pl * H * W + i * W + j] = dx[pl * H * W + i * W + j] + g[o] / (float)cnt;
        }
    ag_tensor *tx = ag_from_host(VK, AG_F32, 4, xs, x), *tg = ag_from_host(VK, AG_F32, 4, ys, g);
    assert_true(tx && tg);
    assert_int_equal(ag_tensor_set_requires_grad(tx, true), AG_OK);
    assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
    ag_tensor *ty = kind == 3 ? ag_adaptive_avg_pool2d(tx, Ho, Wo) : kind == 2 ? ag_max_pool2d(tx, &pp)
                                                                              : ag_avg_pool2d(tx, &pp);
    if (!ty) fail_msg("pool2d %d: %s", kind, ag_last_error());
    ag_status st = ag_backward(ty, tg, false);
    assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
    if (st != AG_OK) fail_msg("pool2d %d backward: %s", kind, ag_last_error());
    assert_same_f32("pool2d", ty, y);
    assert_same_f32("pool2d dx", ag_tensor_grad(tx), dx);
    ag_tensor_release(ty);
    ag_tensor_release(tx);
    ag_tensor_release(tg);
    free(g), free(y), free(dx), free(am);
  }
  free(x);
}

/* MAX and MIN keep the first of equal values: a zero result has the sign
 * of the line's first zero, also where a work-group shares the line
 * (r > 64) and the first zero is not in the first invocation's share. */
static void test_max_zero_sign(void **state) {
  (void)state;
  const int64_t n = 1000;
  float *v = malloc((size_t)n * sizeof *v);
  assert_non_null(v);
  for (int sgn = 0; sgn < 2; sgn++)
    for (int op = 0; op < 2; op++) {
      for (int64_t i = 0; i < n; i++) v[i] = op ? 1.0f + (float)i : -1.0f - (float)i;
      v[5] = sgn ? -0.0f : 0.0f;
      v[256] = sgn ? 0.0f : -0.0f;
      ag_tensor *x = ag_from_host(VK, AG_F32, 1, &n, v);
      assert_non_null(x);
      assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
      ag_tensor *y = op ? ag_min(x, 0, NULL, false) : ag_max(x, 0, NULL, false);
      assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
      if (!y) fail_msg("max/min: %s", ag_last_error());
      float r = 1.0f;
      assert_int_equal(ag_to_host(y, &r, sizeof r), AG_OK);
      assert_true(r == 0.0f);
      assert_int_equal(signbit(r) != 0, sgn);
      ag_tensor_release(y);
      ag_tensor_release(x);
    }
  free(v);
}

/* AG_VULKAN_TEST=no_float_controls: without SignedZeroInfNanPreserve the
 * device refuses the mode, with its reason, and every launch repeats it. */
static void test_refused(void **state) {
  (void)state;
  assert_int_not_equal(ag_device_numerics_check(VK, AG_NUMERICS_PORTABLE), AG_OK);
  assert_non_null(strstr(ag_last_error(), "refuses portable numerics"));
  const int64_t n = 4;
  const float v[4] = {1, 2, 3, 4};
  ag_tensor *x = ag_from_host(VK, AG_F32, 1, &n, v);
  assert_non_null(x);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_PORTABLE), AG_OK);
  ag_tensor *y = ag_exp(x);
  assert_int_equal(ag_set_numerics(AG_NUMERICS_DEFAULT), AG_OK);
  assert_null(y);
  assert_non_null(strstr(ag_last_error(), "refuses portable numerics"));
  ag_tensor_release(x);
}

int main(int argc, char **argv) {
  if (!have_vulkan()) {
    fprintf(stderr, "portable_vulkan_test: no vulkan:0, skipped\n");
    return 77;
  }
  if (argc > 1 && !strcmp(argv[1], "refused")) {
    const struct CMUnitTest t[] = {cmocka_unit_test(test_refused)};
    return cmocka_run_group_tests_name("portable_vulkan_refused", t, NULL, NULL);
  }
  if (ag_device_numerics_check(VK, AG_NUMERICS_PORTABLE) != AG_OK) {
    fprintf(stderr, "vulkan:0 refuses portable numerics: %s\n", ag_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum),    cmocka_unit_test(test_matmul), cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_unary),  cmocka_unit_test(test_binary), cmocka_unit_test(test_conv2d),
      cmocka_unit_test(test_pool2d), cmocka_unit_test(test_var_cumsum), cmocka_unit_test(test_max_zero_sign),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
