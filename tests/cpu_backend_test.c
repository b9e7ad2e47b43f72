/* White-box tests of the CPU backend: f16/bf16 conversion, Philox known
 * answers, host and virtual memory, streams and events (the mode comes from
 * AG_CPU_STREAMS, so CTest runs this binary once per mode), and kernels
 * driven directly through the vtable against plain C references. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "op_ref.h"
#include "anygrad/cpu.h"
#include "cpu_backend.h"
#include "tensor/half.h"

static const ag_backend *be;
static ag_bstream *st;

static int setup(void **state) {
  be = ag__cpu_backend();
  int n = 0;
  char reason[128];
  if (be->init(&n, reason, sizeof reason) != AG_OK || n != 1) return -1;
  return be->stream_create(0, &st) == AG_OK ? 0 : -1;
}

static int teardown(void **state) {
  be->stream_destroy(st);
  return 0;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- conversions ---- */

/* Independent decoding of an f16 bit pattern. */
static double f16_ref(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

static void test_f16_exhaustive(void **state) {
  static float bulk[65536];
  static uint16_t hs[65536], back[65536];
  for (uint32_t h = 0; h < 65536; h++) hs[h] = (uint16_t)h;
  ag__f16_to_f32_n(hs, bulk, 65536); /* F16C where present */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = ag_f16_to_f32((uint16_t)h);
    double r = f16_ref((uint16_t)h);
    assert_int_equal(f2u(f), f2u(bulk[h]));
    if (isnan(r)) {
      assert_true(isnan(f));
      assert_int_equal(f2u(f) >> 31, h >> 15);
      /* quiet NaNs round-trip exactly; signalling ones come back quiet */
      uint16_t rt = ag_f32_to_f16(f);
      assert_int_equal(rt, h | 0x200);
    } else {
      assert_true((double)f == r);
      assert_int_equal(signbit(f) != 0, h >> 15);
      assert_int_equal(ag_f32_to_f16(f), h);
    }
  }
  ag__f32_to_f16_n(bulk, back, 65536);
  for (uint32_t h = 0; h < 65536; h++) assert_int_equal(back[h], ag_f32_to_f16(bulk[h]));
}

/* Round-to-nearest-even at every tie between adjacent f16 values, and just
 * either side of each tie. */
static void test_f16_rne(void **state) {
  for (uint32_t h = 0; h < 0x7bff; h++) {
    double lo = f16_ref((uint16_t)h), hi = f16_ref((uint16_t)(h + 1));
    float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    assert_int_equal(ag_f32_to_f16(mid), even);
    assert_int_equal(ag_f32_to_f16(-mid), even | 0x8000);
    assert_int_equal(ag_f32_to_f16(nextafterf(mid, 0)), h);
    assert_int_equal(ag_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
  }
  assert_int_equal(ag_f32_to_f16(65519.99f), 0x7bff);
  assert_int_equal(ag_f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(ag_f32_to_f16(1e-8f), 0);       /* below half the smallest subnormal */
  assert_int_equal(ag_f32_to_f16(0x1p-25f), 0);     /* tie to even (zero) */
  assert_int_equal(ag_f32_to_f16(0x1.8p-25f), 1);   /* above the tie */
  assert_int_equal(ag_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(ag_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(ag_f32_to_f16(u2f(0x7fc00000u)), 0x7e00);
  /* bulk (F16C) and scalar agree on a spread of all f32 bit patterns */
  enum { N = 1 << 16 };
  static float src[N];
  static uint16_t a[N];
  uint32_t x = 12345;
  for (int i = 0; i < N; i++) {
    x = x * 1664525u + 1013904223u;
    src[i] = u2f(x);
  }
  ag__f32_to_f16_n(src, a, N);
  for (int i = 0; i < N; i++) assert_int_equal(a[i], ag_f32_to_f16(src[i]));
}

static void test_bf16(void **state) {
  static const uint32_t in[] = {0x3f800000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff,
                                0x7f7fffff, 0x00008000, 0x00018000, 0x80018000, 0x7f800000};
  static const uint16_t out[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f81,
                                 0x7f80, 0x0000, 0x0002, 0x8002, 0x7f80};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
    assert_int_equal(ag_f32_to_bf16(u2f(in[i])), out[i]);
  uint16_t n1 = ag_f32_to_bf16(u2f(0x7f800001u)); /* payload only in the low bits */
  assert_true(isnan(ag_bf16_to_f32(n1)));
  assert_int_equal(ag_f32_to_bf16(u2f(0xffc00000u)), 0xffc0);
  float f[65536];
  uint16_t hs[65536], back[65536];
  for (uint32_t b = 0; b < 65536; b++) {
    hs[b] = (uint16_t)b;
    assert_int_equal(f2u(ag_bf16_to_f32((uint16_t)b)), b << 16);
  }
  ag__bf16_to_f32_n(hs, f, 65536);
  ag__f32_to_bf16_n(f, back, 65536);
  for (uint32_t b = 0; b < 65536; b++) {
    assert_int_equal(f2u(f[b]), b << 16);
    if (!isnan(f[b])) assert_int_equal(back[b], b);
  }
}

static void test_philox_kat(void **state) {
  static const uint32_t v[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int t = 0; t < 3; t++) {
    uint32_t out[4];
    ag__philox4x32_10(v[t], v[t] + 4, out);
    for (int k = 0; k < 4; k++) assert_int_equal(out[k], v[t][6 + k]);
  }
  uint32_t out[4];
  ag_philox4x32(0, 0, out);
  for (int k = 0; k < 4; k++) assert_int_equal(out[k], v[0][6 + k]);
  /* counter (lo, hi) and key (lo, hi) word order of the public wrapper */
  const uint32_t ctr[4] = {0x03707344u, 0x13198a2eu, 0, 0}, key[2] = {0x299f31d0u, 0xa4093822u};
  uint32_t ref[4];
  ag__philox4x32_10(ctr, key, ref);
  ag_philox4x32(0x13198a2e03707344ull, 0xa4093822299f31d0ull, out);
  assert_memory_equal(out, ref, sizeof out);
}

/* ---- memory ---- */

static void test_memory(void **state) {
  void *p = NULL;
  assert_int_equal(be->segment_alloc(0, 1000, &p), AG_OK);
  assert_int_equal((uintptr_t)p % 64, 0);
  memset(p, 1, 1000);
  be->segment_free(0, p);

  size_t g = be->vm_granularity(0);
  assert_true(g >= 4096 && (g & (g - 1)) == 0);
  void *base = NULL;
  assert_int_equal(be->vm_reserve(0, 4 * g, &base), AG_OK);
  assert_int_equal(be->vm_map(0, base, g, 2 * g), AG_OK);
  unsigned char *q = (unsigned char *)base + g;
  memset(q, 0xab, 2 * g);
  assert_int_equal(q[2 * g - 1], 0xab);
  assert_int_equal(be->vm_unmap(0, base, 2 * g, g), AG_OK);
  assert_int_equal(q[0], 0xab); /* the first mapped granule is untouched */
  assert_int_equal(be->vm_map(0, base, 2 * g, g), AG_OK);
  assert_int_equal(q[g], 0); /* decommitted pages come back zeroed */
  assert_int_equal(be->vm_unmap(0, base, g, g), AG_OK);
  assert_int_equal(be->vm_unmap(0, base, 2 * g, g), AG_OK);
  be->vm_release(0, base, 4 * g);

  void *pin = NULL;
  assert_int_equal(be->pinned_alloc(0, 10000, &pin), AG_OK);
  assert_int_equal((uintptr_t)pin % 4096, 0);
  memset(pin, 7, 10000);
  be->pinned_free(0, pin);

  size_t fr = 0, tot = 0;
  assert_int_equal(be->mem_info(0, &fr, &tot), AG_OK);
  assert_true(tot > 0 && fr > 0 && fr <= tot);
  ag_device_props pr;
  assert_int_equal(be->device_props(0, &pr), AG_OK);
  assert_true(pr.compute_units >= 1 && pr.unified_memory && pr.virtual_memory);
  assert_int_equal(pr.total_memory, tot);
}

/* ---- helpers for kernel calls ---- */

static ag_koperand opnd(void *base, ag_dtype dt, int ndim, const int64_t *shape,
                        const int64_t *strides) {
  ag_koperand o;
  memset(&o, 0, sizeof o);
  o.base = base;
  o.dtype = dt;
  o.ndim = ndim;
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    o.shape[d] = shape[d];
    o.strides[d] = strides ? strides[d] : s;
    s *= shape[d];
  }
  return o;
}

static ag_kernel_call kcall(ag_kop op, int sub) {
  ag_kernel_call c;
  memset(&c, 0, sizeof c);
  c.struct_size = (uint32_t)sizeof c;
  c.op = op;
  c.sub = sub;
  c.name = "test";
  c.s[0] = 1;
  return c;
}

static void run(ag_kernel_call *c) {
  assert_true(be->supports(0, c->op, c->sub, c->o[0].dtype) ||
              (c->op == AG_K_UNARY && c->sub == AG_U_COPY));
  assert_int_equal(be->launch(st, c), AG_OK);
  assert_int_equal(be->stream_synchronize(st), AG_OK);
}

static double getv(const void *p, ag_dtype dt, int64_t i) {
  switch (dt) {
    case AG_F32: return ((const float *)p)[i];
    case AG_F16: return ag_f16_to_f32(((const uint16_t *)p)[i]);
    case AG_BF16: return ag_bf16_to_f32(((const uint16_t *)p)[i]);
    case AG_I32: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
  }
}

static void setv(void *p, ag_dtype dt, int64_t i, double v) {
  switch (dt) {
    case AG_F32: ((float *)p)[i] = (float)v; break;
    case AG_F16: ((uint16_t *)p)[i] = ag_f32_to_f16((float)v); break;
    case AG_BF16: ((uint16_t *)p)[i] = ag_f32_to_bf16((float)v); break;
    case AG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((double *)p)[i] = v; break;
  }
}

static double tol(ag_dtype dt) {
  return dt == AG_F64 ? 1e-12 : dt == AG_F32 ? 2e-6 : dt == AG_F16 ? 2e-3 : dt == AG_I32 ? 0 : 1.6e-2;
}

static void near(double got, double want, double rel) {
  if (isnan(want)) {
    assert_true(isnan(got));
    return;
  }
  double err = fabs(got - want), lim = rel * (1 + fabs(want));
  if (!(err <= lim)) fail_msg("got %.9g want %.9g (tolerance %.3g)", got, want, lim);
}

/* ---- elementwise ---- */

/* out[2,3,4] = a[2,3,4] (transposed storage) op b[3,1] broadcast (stride 0). */
static void test_binary_strided(void **state) {
  const ag_dtype dts[] = {AG_F32, AG_F16, AG_BF16, AG_F64, AG_I32};
  const int subs[] = {AG_B_ADD, AG_B_SUB, AG_B_MUL, AG_B_MAX, AG_B_MIN, AG_B_EQ, AG_B_GT, AG_B_LT, AG_B_DIV};
  for (size_t d = 0; d < 5; d++) {
    ag_dtype dt = dts[d];
    for (size_t s = 0; s < sizeof subs / sizeof subs[0]; s++) {
      int sub = subs[s];
      if (!be->supports(0, AG_K_BINARY, sub, dt)) {
        assert_true(dt == AG_I32 && sub == AG_B_DIV);
        continue;
      }
      double abuf[24], bbuf[3], obuf[24];
      const int64_t shape[3] = {2, 3, 4}, ast[3] = {1, 2, 6}, bst[3] = {0, 1, 0};
      for (int i = 0; i < 24; i++) setv(abuf, dt, i, (i * 7 % 11) - 5);
      for (int i = 0; i < 3; i++) setv(bbuf, dt, i, i - 1 + (dt == AG_I32 ? 0 : 0.5));
      ag_kernel_call c = kcall(AG_K_BINARY, sub);
      c.n_operands = 3;
      c.s[0] = sub == AG_B_ADD ? 2 : 1;
      c.o[0] = opnd(obuf, dt, 3, shape, NULL);
      c.o[1] = opnd(abuf, dt, 3, shape, ast);
      c.o[2] = opnd(bbuf, dt, 3, shape, bst);
      run(&c);
      for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 3; i1++)
          for (int i2 = 0; i2 < 4; i2++) {
            double a = getv(abuf, dt, i0 + 2 * i1 + 6 * i2), b = getv(bbuf, dt, i1), w;
            switch (sub) {
              case AG_B_ADD: w = a + 2 * b; break;
              case AG_B_SUB: w = a - b; break;
              case AG_B_MUL: w = a * b; break;
              case AG_B_DIV: w = a / b; break;
              case AG_B_MAX: w = a > b ? a : b; break;
              case AG_B_MIN: w = a < b ? a : b; break;
              case AG_B_EQ: w = a == b; break;
              case AG_B_GT: w = a > b; break;
              default: w = a < b; break;
            }
            near(getv(obuf, dt, (i0 * 3 + i1) * 4 + i2), w, tol(dt));
          }
    }
  }
}

static void test_unary(void **state) {
  const ag_dtype dts[] = {AG_F32, AG_F16, AG_BF16, AG_F64, AG_I32};
  enum { N = 1000 }; /* several tiles, strided input */
  static double in[2 * N], out[N];
  for (size_t d = 0; d < 5; d++) {
    ag_dtype dt = dts[d];
    for (int sub = 0; sub < AG_UNARY_COUNT; sub++) {
      bool ok = be->supports(0, AG_K_UNARY, sub, dt);
      if (dt == AG_I32) {
        assert_int_equal(ok, ag_unary_info_of(sub)->ints == AG_OPT_INT);
        if (!ok) continue;
      } else {
        assert_true(ok);
      }
      for (int i = 0; i < N; i++) {
        double x = dt == AG_I32 ? (i % 41) - 20 : 0.01 + (i % 97) * 0.05;
        if (sub == AG_U_NEG || sub == AG_U_ABS || sub == AG_U_GELU || sub == AG_U_RELU) x -= 2;
        setv(in, dt, 2 * i, x);
        setv(in, dt, 2 * i + 1, 1e30); /* never read */
      }
      const int64_t shape[1] = {N}, sst[1] = {2};
      ag_kernel_call c = kcall(AG_K_UNARY, sub);
      c.n_operands = 2;
      c.s[0] = sub == AG_U_POW ? 1.5 : 3;
      c.s[1] = -2;
      c.i[0] = 3; /* integer AFFINE reads its scalars from i[] (kops.h) */
      c.i[1] = -2;
      c.o[0] = opnd(out, dt, 1, shape, NULL);
      c.o[1] = opnd(in, dt, 1, shape, sst);
      run(&c);
      for (int i = 0; i < N; i++) {
        double x = getv(in, dt, 2 * i);
        near(getv(out, dt, i), ag_ref_unary(sub, x, c.s[0], c.s[1]), tol(dt) * 2);
      }
    }
  }
}

/* Error of a float result in units in the last place of the exact value
 * (subnormal results: units of 2^-149); a wrong NaN or infinity is +inf. */
static double ulp_err(float got, double want) {
  if (isnan(want)) return isnan(got) ? 0 : INFINITY;
  float wf = (float)want;
  if (isinf(wf) || isinf(got) || isnan(got)) return got == wf ? 0 : INFINITY;
  int e;
  frexp(want, &e);
  double ulp = fmax(ldexp(1, e - 24), 0x1p-149);
  return fabs((double)got - want) / ulp;
}

static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_silu(double x) { return x / (1 + exp(-x)); }

/* The vectorised f32 exp, tanh, sigmoid and silu against libm in f64, over a dense
 * sweep of float bit patterns and a uniform grid across the whole finite
 * range (subnormal results included), in both the baseline and the AVX2+FMA
 * builds, and the kernel launched through the vtable. */
static void test_vector_math(void **state) {
  enum { NB = 1 << 21 };
  const int64_t n = 2 * NB + 2 * NB;
  float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *yk = malloc((size_t)n * 4);
  assert_non_null(x);
  assert_non_null(y);
  assert_non_null(yk);
  /* every 149th bit pattern from 2^-30 to 110 in magnitude, both signs */
  const uint32_t lo = f2u(0x1p-30f), hi = f2u(110.0f), step = (hi - lo) / NB + 1;
  int64_t m = 0;
  for (uint32_t u = lo; u < hi && m < 2 * NB; u += step) {
    x[m++] = u2f(u);
    x[m++] = -u2f(u);
  }
  for (int64_t i = 0; m < n; i++) x[m++] = -110.0f + 220.0f * (float)i / (float)(2 * NB);
  struct {
    int sub;
    double (*ref)(double);
    double bound;
  } ops[] = {{AG_U_EXP, exp, 2}, {AG_U_TANH, tanh, 3}, {AG_U_SIGMOID, ref_sigmoid, 3},
               {AG_U_SILU, ref_silu, 4}};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    for (int avx2 = 0; avx2 < 2; avx2++) {
      if (!ag__cpu_unary_f32(ops[k].sub, avx2, y, x, m)) continue;
      double worst = 0;
      float worst_x = 0;
      for (int64_t i = 0; i < m; i++) {
        double want = ops[k].ref((double)x[i]), e = ulp_err(y[i], want);
        /* silu = x * sigmoid(x): below -87 the sigmoid is subnormal, so the
         * product can be off by |x| units of 2^-149 */
        if (ops[k].sub == AG_U_SILU && x[i] < -87 && fabs((double)y[i] - want) <= -x[i] * 0x1p-149)
          e = 0;
        if (e > worst) {
          worst = e;
          worst_x = x[i];
        }
      }
      print_message("unary %d %s: max error %.3f ulp at x = %.9g\n", ops[k].sub,
                    avx2 ? "avx2+fma" : "baseline", worst, (double)worst_x);
      if (!(worst <= ops[k].bound))
        fail_msg("unary %d: %.3f ulp at x = %.9g", ops[k].sub, worst, (double)worst_x);
    }
  /* special values, through the kernel launch */
  const float sx[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72283f, 88.7229f, -103.97f,
                      -104.0f, -87.3f, 1e-30f, -1e-30f, 9.5f, -9.5f, 20.0f};
  enum { NS = sizeof sx / sizeof sx[0] };
  const int64_t shape[1] = {NS};
  float sy[NS];
  ag_kernel_call c = kcall(AG_K_UNARY, AG_U_EXP);
  c.n_operands = 2;
  c.o[0] = opnd(sy, AG_F32, 1, shape, NULL);
  c.o[1] = opnd((void *)sx, AG_F32, 1, shape, NULL);
  run(&c);
  for (int i = 0; i < NS; i++) {
    float w = expf(sx[i]);
    if (isnan(w)) assert_true(isnan(sy[i]));
    else if (isinf(w) || w == 0) assert_true(sy[i] == w);
    else assert_true(ulp_err(sy[i], exp((double)sx[i])) <= 2);
  }
  c.sub = AG_U_TANH;
  run(&c);
  for (int i = 0; i < NS; i++) {
    float w = tanhf(sx[i]);
    if (isnan(w)) assert_true(isnan(sy[i]));
    else assert_true(sy[i] == w || ulp_err(sy[i], tanh((double)sx[i])) <= 3);
    assert_true(signbit(sy[i]) == signbit(w)); /* tanh(-0) = -0 */
  }
  /* the launched kernel is one of the two builds, bit for bit */
  const int64_t big[1] = {m};
  c = kcall(AG_K_UNARY, AG_U_EXP);
  c.n_operands = 2;
  c.o[0] = opnd(yk, AG_F32, 1, big, NULL);
  c.o[1] = opnd(x, AG_F32, 1, big, NULL);
  run(&c);
  if (!ag__cpu_unary_f32(AG_U_EXP, true, y, x, m)) ag__cpu_unary_f32(AG_U_EXP, false, y, x, m);
  assert_memory_equal(y, yk, (size_t)m * 4);
  free(x);
  free(y);
  free(yk);
}

/* Same-dtype copies of transposed views (the tiled path): every element
 * size, tile remainders, an outer dim, a flipped input, and a sentinel after
 * the output. */
static void test_transpose_copy(void **state) {
  enum { B = 3, R = 37, C = 45, N = B * R * C };
  const ag_dtype dts[] = {AG_F32, AG_F16, AG_F64};
  for (size_t d = 0; d < 3; d++)
    for (int flip = 0; flip < 2; flip++) {
      const ag_dtype dt = dts[d];
      const size_t sz = dt == AG_F64 ? 8 : dt == AG_F16 ? 2 : 4;
      /* src is stored [B][C][R]; out[b][r][c] = src[b][c][r] (c reversed when flip) */
      char *src = malloc(N * sz), *out = malloc((N + 4) * sz);
      assert_non_null(src);
      assert_non_null(out);
      for (int i = 0; i < N; i++) setv(src, dt, i, (double)(i % 2039) - 1000);
      memset(out, 0x5a, (N + 4) * sz);
      const int64_t shape[3] = {B, R, C};
      int64_t ist[3] = {R * C, 1, R};
      int64_t off = 0;
      if (flip) {
        ist[2] = -R;
        off = (int64_t)(C - 1) * R;
      }
      ag_kernel_call c = kcall(AG_K_UNARY, AG_U_COPY);
      c.n_operands = 2;
      c.o[0] = opnd(out, dt, 3, shape, NULL);
      c.o[1] = opnd(src, dt, 3, shape, ist);
      c.o[1].offset = (size_t)off * sz;
      run(&c);
      for (int b = 0; b < B; b++)
        for (int r = 0; r < R; r++)
          for (int k = 0; k < C; k++) {
            int kc = flip ? C - 1 - k : k;
            double want = getv(src, dt, b * R * C + kc * R + r);
            if (getv(out, dt, (b * R + r) * C + k) != want)
              fail_msg("dtype %d flip %d: out[%d][%d][%d]", (int)dt, flip, b, r, k);
          }
      for (size_t i = N * sz; i < (N + 4) * sz; i++) assert_int_equal((unsigned char)out[i], 0x5a);
      free(src);
      free(out);
    }
}

static void test_cast_fill_where(void **state) {
  const ag_dtype dts[] = {AG_F32, AG_F16, AG_BF16, AG_F64, AG_I32};
  const double vals[] = {0, 1.5, -2.5, 3e9, -3e9, 65504, 1e-3, NAN};
  enum { N = 8 };
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++) {
      double src[N], dst[N];
      for (int i = 0; i < N; i++) setv(src, dts[a], i, dts[a] == AG_I32 && (isnan(vals[i]) || fabs(vals[i]) > 2e9) ? 7 : vals[i]);
      const int64_t shape[1] = {N};
      ag_kernel_call c = kcall(AG_K_UNARY, AG_U_COPY);
      c.n_operands = 2;
      c.o[0] = opnd(dst, dts[b], 1, shape, NULL);
      c.o[1] = opnd(src, dts[a], 1, shape, NULL);
      run(&c);
      for (int i = 0; i < N; i++) {
        double x = getv(src, dts[a], i), w;
        if (dts[b] == AG_I32) w = isnan(x) ? 0 : x >= 2147483647.0 ? 2147483647.0 : x <= -2147483648.0 ? -2147483648.0 : trunc(x);
        else if (dts[b] == AG_F16) w = ag_f16_to_f32(ag_f32_to_f16((float)x));
        else if (dts[b] == AG_BF16) w = ag_bf16_to_f32(ag_f32_to_bf16((float)x));
        else if (dts[b] == AG_F32) w = (float)x;
        else w = x;
        double got = getv(dst, dts[b], i);
        if (isnan(w)) assert_true(isnan(got));
        else assert_true(got == w);
      }
    }
  /* fill a strided view: only every other element changes */
  float buf[12];
  for (int i = 0; i < 12; i++) buf[i] = -1;
  const int64_t shape[2] = {3, 2}, sst[2] = {4, 2};
  ag_kernel_call c = kcall(AG_K_FILL, 0);
  c.n_operands = 1;
  c.s[0] = 2.5;
  c.o[0] = opnd(buf, AG_F32, 2, shape, sst);
  run(&c);
  for (int i = 0; i < 12; i++) assert_true(buf[i] == ((i % 4 == 0 || i % 4 == 2) ? 2.5f : -1.0f));
  /* where with an f64 condition too small for f32, and an f16 condition */
  double cond[4] = {1e-300, 0, -0.0, 2};
  uint16_t condh[4] = {0x8000, 0x0001, 0, 0x3c00};
  int32_t xa[4] = {1, 2, 3, 4}, xb[4] = {-1, -2, -3, -4}, r[4];
  const int64_t s4[1] = {4};
  c = kcall(AG_K_WHERE, 0);
  c.n_operands = 4;
  c.o[0] = opnd(r, AG_I32, 1, s4, NULL);
  c.o[1] = opnd(cond, AG_F64, 1, s4, NULL);
  c.o[2] = opnd(xa, AG_I32, 1, s4, NULL);
  c.o[3] = opnd(xb, AG_I32, 1, s4, NULL);
  run(&c);
  assert_int_equal(r[0], 1);
  assert_int_equal(r[1], -2);
  assert_int_equal(r[2], -3);
  assert_int_equal(r[3], 4);
  c.o[1] = opnd(condh, AG_F16, 1, s4, NULL);
  run(&c);
  assert_int_equal(r[0], -1);
  assert_int_equal(r[1], 2);
  assert_int_equal(r[2], -3);
  assert_int_equal(r[3], 4);
  /* arange in i32 and f16 */
  int32_t ar[5];
  const int64_t s5[1] = {5};
  c = kcall(AG_K_ARANGE, 0);
  c.n_operands = 1;
  c.s[0] = 3;
  c.s[1] = -2;
  c.o[0] = opnd(ar, AG_I32, 1, s5, NULL);
  run(&c);
  for (int i = 0; i < 5; i++) assert_int_equal(ar[i], 3 - 2 * i);
}

/* A large contiguous op takes the threaded path; compare with a small one. */
static void test_large_elementwise(void **state) {
  enum { N = 600001 }; /* above AG_CPU_PAR_MIN (524288) for a mul */
  float *a = malloc(N * 4), *b = malloc(N * 4), *o = malloc(N * 4);
  for (int i = 0; i < N; i++) {
    a[i] = (float)(i % 1000) * 0.001f;
    b[i] = (float)(i % 7);
  }
  const int64_t shape[1] = {N};
  ag_kernel_call c = kcall(AG_K_BINARY, AG_B_MUL);
  c.n_operands = 3;
  c.o[0] = opnd(o, AG_F32, 1, shape, NULL);
  c.o[1] = opnd(a, AG_F32, 1, shape, NULL);
  c.o[2] = opnd(b, AG_F32, 1, shape, NULL);
  run(&c);
  for (int i = 0; i < N; i++) assert_true(o[i] == a[i] * b[i]);
  free(a);
  free(b);
  free(o);
}


/* ---- thread control ---- */

/* One control: bad counts are refused and change nothing; a set count is
 * what get reports; 0 restores the default, which never exceeds the CPUs
 * this process may run on. */
static void test_num_threads(void **state) {
  const int def = ag_get_num_threads();
  if (!getenv("AG_NUM_THREADS")) assert_true(def >= 1 && def <= ag__pool_default_threads());
  assert_int_equal(ag_set_num_threads(-1), AG_ERR_INVALID);
  assert_int_equal(ag_set_num_threads(257), AG_ERR_INVALID);
  assert_int_equal(ag_get_num_threads(), def);
  assert_int_equal(ag_set_num_threads(3), AG_OK);
  assert_int_equal(ag_get_num_threads(), 3);
  assert_int_equal(ag_set_num_threads(0), AG_OK);
  assert_int_equal(ag_get_num_threads(), def);
}

/* The pool runs elementwise kernels and split GEMMs with 1..4 threads to
 * the same results (GEMM panels within rounding of the 1-thread product). */
static void test_threads_same_results(void **state) {
  enum { N = 300001, M = 96, K = 200, P = 700 };
  float *a = malloc(N * 4), *b = malloc(N * 4), *o = malloc(N * 4), *o1 = malloc(N * 4);
  float *ga = malloc(M * K * 4), *gb = malloc(K * P * 4), *gc = malloc(M * P * 4), *gc1 = malloc(M * P * 4);
  for (int i = 0; i < N; i++) {
    a[i] = (float)(i % 1000) * 0.001f;
    b[i] = (float)(i % 7) - 3;
  }
  for (int i = 0; i < M * K; i++) ga[i] = (float)((i * 37) % 101) / 50 - 1;
  for (int i = 0; i < K * P; i++) gb[i] = (float)((i * 53) % 103) / 50 - 1;
  const int64_t shape[1] = {N}, as[2] = {M, K}, bs[2] = {K, P}, os[2] = {M, P};
  for (int nt = 1; nt <= 4; nt++) {
    assert_int_equal(ag_set_num_threads(nt), AG_OK);
    ag_kernel_call c = kcall(AG_K_UNARY, AG_U_EXP);
    c.n_operands = 2;
    c.o[0] = opnd(o, AG_F32, 1, shape, NULL);
    c.o[1] = opnd(b, AG_F32, 1, shape, NULL);
    run(&c);
    ag_kernel_call g = kcall(AG_K_MATMUL, 0);
    g.n_operands = 3;
    g.s[0] = 1;
    g.s[1] = 0;
    g.o[0] = opnd(gc, AG_F32, 2, os, NULL);
    g.o[1] = opnd(ga, AG_F32, 2, as, NULL);
    g.o[2] = opnd(gb, AG_F32, 2, bs, NULL);
    for (int i = 0; i < M * P; i++) gc[i] = NAN; /* beta = 0 overwrites */
    run(&g);
    if (nt == 1) {
      memcpy(o1, o, N * 4);
      memcpy(gc1, gc, M * P * 4);
    }
    for (int i = 0; i < N; i++) assert_true(o[i] == o1[i]);
    for (int i = 0; i < M * P; i++) near(gc[i], gc1[i], 1e-4);
  }
  (void)a;
  assert_int_equal(ag_set_num_threads(0), AG_OK);
  free(a), free(b), free(o), free(o1), free(ga), free(gb), free(gc), free(gc1);
}

/* Idle threads sleep: after a threaded GEMM and a threaded elementwise op,
 * a 200 ms pause costs the process almost no CPU time (spinning OpenMP or
 * BLAS threads would burn up to 2 x 200 ms). */
static void test_threads_idle_sleep(void **state) {
  enum { M = 256, N = 300001 };
  float *a = calloc(M * M, 4), *b = calloc(M * M, 4), *c = malloc(M * M * 4);
  float *x = calloc(N, 4), *y = malloc(N * 4);
  assert_int_equal(ag_set_num_threads(2), AG_OK);
  const int64_t ms[2] = {M, M}, ns[1] = {N};
  ag_kernel_call g = kcall(AG_K_MATMUL, 0);
  g.n_operands = 3;
  g.s[0] = 1;
  g.o[0] = opnd(c, AG_F32, 2, ms, NULL);
  g.o[1] = opnd(a, AG_F32, 2, ms, NULL);
  g.o[2] = opnd(b, AG_F32, 2, ms, NULL);
  ag_kernel_call e = kcall(AG_K_UNARY, AG_U_EXP);
  e.n_operands = 2;
  e.o[0] = opnd(y, AG_F32, 1, ns, NULL);
  e.o[1] = opnd(x, AG_F32, 1, ns, NULL);
  /* Kernels, then a 200 ms pause: the process's CPU time in the pause.
   * Twice, and the smaller counts: a pool that spins does it after every
   * burst of kernels; a worker the scheduler delayed on a loaded machine
   * (it finishes its last chunk in the pause) rarely twice in a row. */
  double cpu_ms = 1e9;
  for (int attempt = 0; attempt < 2 && cpu_ms > 40; attempt++) {
    for (int i = 0; i < 3; i++) {
      run(&g);
      run(&e);
    }
    struct timespec t0, t1, pause = {0, 200 * 1000 * 1000};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    nanosleep(&pause, NULL);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    double used = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    if (used < cpu_ms) cpu_ms = used;
  }
  if (cpu_ms > 40) fail_msg("a 200 ms pause after threaded kernels used %.1f ms of CPU (twice)", cpu_ms);
  assert_int_equal(ag_set_num_threads(0), AG_OK);
  free(a), free(b), free(c), free(x), free(y);
}

/* ---- reductions ---- */

static void test_reduce(void **state) {
  const ag_dtype dts[] = {AG_F32, AG_F16, AG_BF16, AG_F64, AG_I32};
  const int64_t shapes[][3] = {{3, 5, 1}, {2, 7, 300}, {2, 150001, 1}, {4, 1, 3}};
  for (size_t d = 0; d < 5; d++)
    for (size_t sh = 0; sh < 4; sh++)
      for (int sub = 0; sub < AG_REDUCE_COUNT; sub++) {
        ag_dtype dt = dts[d];
        int64_t O = shapes[sh][0], R = shapes[sh][1], I = shapes[sh][2];
        double *x = malloc((size_t)(O * R * I) * 8), *y = malloc((size_t)(O * I) * 8);
        for (int64_t i = 0; i < O * R * I; i++) setv(x, dt, i, (double)((i * 37) % 101) - 50);
        if (R > 3) setv(x, dt, 3 * I, 51); /* a unique max in row 0 */
        ag_kernel_call c = kcall(AG_K_REDUCE, sub);
        ag_dtype odt = sub == AG_R_ARGMAX ? AG_I32 : dt;
        const int64_t xs[3] = {O, R, I}, ys[2] = {O, I};
        c.n_operands = 2;
        c.s[0] = sub == AG_R_SUM && dt != AG_I32 ? 0.5 : 1;
        c.i[0] = O;
        c.i[1] = R;
        c.i[2] = I;
        c.o[0] = opnd(y, odt, 2, ys, NULL);
        c.o[1] = opnd(x, dt, 3, xs, NULL);
        run(&c);
        for (int64_t o = 0; o < O; o++)
          for (int64_t j = 0; j < I; j++) {
            double acc = sub == AG_R_SUM ? 0 : getv(x, dt, o * R * I + j);
            int64_t arg = 0;
            for (int64_t k = 0; k < R; k++) {
              double v = getv(x, dt, (o * R + k) * I + j);
              if (sub == AG_R_SUM) acc += v;
              else if (sub == AG_R_MIN) acc = v < acc ? v : acc;
              else if (v > acc) {
                acc = v;
                arg = k;
              }
            }
            double got = getv(y, odt, o * I + j);
            if (sub == AG_R_ARGMAX) assert_int_equal((int64_t)got, arg);
            else if (sub == AG_R_SUM) near(got, acc * c.s[0], tol(dt) * 4);
            else assert_true(got == acc);
          }
        free(x);
        free(y);
      }
}

/* ---- matmul ---- */

/* The f32 GEMM engine is the one asked for: AG_CPU_GEMM=openblas keeps
 * CBLAS; by default oneDNN whenever its library loads here. */
static void test_gemm_engine(void **state) {
  const char *want = getenv("AG_CPU_GEMM"), *e = ag_cpu_gemm_engine();
  assert_non_null(e);
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  bool dnnl = h && dlsym(h, "dnnl_sgemm");
  if (h) dlclose(h);
  printf("cpu f32 gemm: %s (AG_CPU_GEMM=%s, libdnnl.so.2 %s)\n", e, want ? want : "", dnnl ? "loads" : "absent");
  bool sanitized = false; /* sanitizer builds default to CBLAS (cpu_gemm.c) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  sanitized = true;
#endif
  if (want && !strcmp(want, "openblas")) assert_null(strstr(e, "oneDNN"));
  else if (dnnl && (!sanitized || (want && !strcmp(want, "onednn")))) assert_non_null(strstr(e, "oneDNN"));
  else assert_null(strstr(e, "oneDNN"));
}

static void test_matmul(void **state) {
  const ag_dtype dts[] = {AG_F32, AG_F64, AG_F16, AG_BF16};
  enum { B = 3, M = 5, K = 7, N = 4 };
  for (int d = 0; d < 4; d++)
    for (int layout = 0; layout < 4; layout++) {
      ag_dtype dt = dts[d];
      double a[B * M * K], b[K * N], o[B * M * N], o0[B * M * N];
      for (int i = 0; i < B * M * K; i++) setv(a, dt, i, ((i * 13) % 17 - 8) * 0.125);
      for (int i = 0; i < K * N; i++) setv(b, dt, i, ((i * 5) % 11 - 5) * 0.25);
      for (int i = 0; i < B * M * N; i++) setv(o, dt, i, i % 3);
      memcpy(o0, o, sizeof o);
      /* A: row-major or column-major per batch; B: shared across the batch
       * (batch stride 0), row- or column-major; layout 3 uses a row stride
       * larger than the row (a sliced view) */
      const int64_t as[3] = {B, M, K}, bs[3] = {B, K, N}, os[3] = {B, M, N};
      int64_t ast[3], bst[3];
      bool acol = layout & 1, bcol = layout == 2;
      ast[0] = M * K;
      ast[1] = acol ? 1 : K;
      ast[2] = acol ? M : 1;
      bst[0] = 0;
      bst[1] = bcol ? 1 : N;
      bst[2] = bcol ? K : 1;
      int64_t Kd = K;
      if (layout == 3) { /* A rows of stride K, using only the first K-2 columns: K' = K-2 */
        ast[1] = K;
        ast[2] = 1;
        Kd = K - 2;
      }
      const int64_t as2[3] = {B, M, Kd}, bs2[3] = {B, Kd, N};
      ag_kernel_call c = kcall(AG_K_MATMUL, 0);
      c.n_operands = 3;
      c.s[0] = 0.5;
      c.s[1] = layout == 1 ? 0 : 2;
      c.o[0] = opnd(o, dt, 3, os, NULL);
      c.o[1] = opnd(a, dt, 3, layout == 3 ? as2 : as, ast);
      c.o[2] = opnd(b, dt, 3, layout == 3 ? bs2 : bs, bst);
      run(&c);
      for (int bb = 0; bb < B; bb++)
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < Kd; k++)
              acc += getv(a, dt, bb * ast[0] + i * ast[1] + k * ast[2]) * getv(b, dt, k * bst[1] + j * bst[2]);
            double w = 0.5 * acc + c.s[1] * getv(o0, dt, (bb * M + i) * N + j);
            near(getv(o, dt, (bb * M + i) * N + j), w, tol(dt));
          }
    }
}

/* ---- row kernels ---- */

static void test_softmax_ce_layernorm(void **state) {
  enum { R = 3, C = 50 };
  float x[R * C], y[R * C], ly[R * C], dy[R * C], dx[R * C];
  for (int i = 0; i < R * C; i++) {
    x[i] = (float)((i * 29) % 23) * 0.3f - 3;
    dy[i] = (float)((i * 7) % 5) - 2;
  }
  const int64_t sh[2] = {R, C};
  ag_kernel_call c = kcall(AG_K_SOFTMAX, 0);
  c.n_operands = 2;
  c.i[0] = R;
  c.i[1] = C;
  c.o[0] = opnd(y, AG_F32, 2, sh, NULL);
  c.o[1] = opnd(x, AG_F32, 2, sh, NULL);
  run(&c);
  c.sub = 1;
  c.o[0] = opnd(ly, AG_F32, 2, sh, NULL);
  run(&c);
  for (int r = 0; r < R; r++) {
    double mx = -INFINITY, s = 0, t = 0;
    for (int j = 0; j < C; j++) mx = fmax(mx, x[r * C + j]);
    for (int j = 0; j < C; j++) s += exp(x[r * C + j] - mx);
    for (int j = 0; j < C; j++) {
      near(y[r * C + j], exp(x[r * C + j] - mx) / s, 1e-6);
      near(ly[r * C + j], x[r * C + j] - mx - log(s), 1e-6);
      t += y[r * C + j];
    }
    near(t, 1, 1e-6);
  }
  /* softmax backward */
  c = kcall(AG_K_SOFTMAX_BWD, 0);
  c.n_operands = 3;
  c.i[0] = R;
  c.i[1] = C;
  c.o[0] = opnd(dx, AG_F32, 2, sh, NULL);
  c.o[1] = opnd(dy, AG_F32, 2, sh, NULL);
  c.o[2] = opnd(y, AG_F32, 2, sh, NULL);
  run(&c);
  for (int r = 0; r < R; r++) {
    double s = 0;
    for (int j = 0; j < C; j++) s += dy[r * C + j] * y[r * C + j];
    for (int j = 0; j < C; j++) near(dx[r * C + j], y[r * C + j] * (dy[r * C + j] - s), 1e-5);
  }
  /* cross entropy: target 4, ignored row, out-of-range target */
  int32_t t[R] = {4, -100, 77};
  float loss[R];
  const int64_t shN[1] = {R};
  c = kcall(AG_K_CROSS_ENTROPY, 0);
  c.n_operands = 3;
  c.i[0] = R;
  c.i[1] = C;
  c.i[2] = -100;
  c.o[0] = opnd(loss, AG_F32, 1, shN, NULL);
  c.o[1] = opnd(x, AG_F32, 2, sh, NULL);
  c.o[2] = opnd(t, AG_I32, 1, shN, NULL);
  run(&c);
  near(loss[0], -ly[4], 1e-5);
  assert_true(loss[1] == 0);
  assert_true(isnan(loss[2]));
  ag_kernel_error ke;
  assert_int_equal(be->take_kernel_error(st, &ke), AG_OK);
  assert_int_equal(ke.code, AG_ERR_INDEX);
  assert_int_equal(ke.kop, AG_K_CROSS_ENTROPY);
  assert_int_equal(ke.index, 77);
  assert_int_equal(ke.limit, C);
  assert_int_equal(be->take_kernel_error(st, &ke), AG_OK);
  assert_int_equal(ke.code, 0);
  /* cross entropy backward with a broadcast upstream grad (stride 0) */
  float g = 2, dl[R * C];
  const int64_t st0[1] = {0};
  t[2] = 1;
  c = kcall(AG_K_CROSS_ENTROPY_BWD, 0);
  c.n_operands = 4;
  c.i[0] = R;
  c.i[1] = C;
  c.i[2] = -100;
  c.o[0] = opnd(dl, AG_F32, 2, sh, NULL);
  c.o[1] = opnd(x, AG_F32, 2, sh, NULL);
  c.o[2] = opnd(t, AG_I32, 1, shN, NULL);
  c.o[3] = opnd(&g, AG_F32, 1, shN, st0);
  run(&c);
  for (int j = 0; j < C; j++) {
    near(dl[j], 2 * (y[j] - (j == 4)), 1e-5);
    assert_true(dl[C + j] == 0);
    near(dl[2 * C + j], 2 * (y[2 * C + j] - (j == 1)), 1e-5);
  }
  /* layer norm with weight and bias, then backward against finite differences */
  float w[C], b[C], ln[R * C], mean[R], rstd[R];
  for (int j = 0; j < C; j++) {
    w[j] = 1 + 0.01f * j;
    b[j] = 0.1f * (j % 3);
  }
  const int64_t shD[1] = {C};
  c = kcall(AG_K_LAYERNORM, 0);
  c.n_operands = 6;
  c.s[0] = 1e-5;
  c.i[0] = R;
  c.i[1] = C;
  c.o[0] = opnd(ln, AG_F32, 2, sh, NULL);
  c.o[1] = opnd(x, AG_F32, 2, sh, NULL);
  c.o[2] = opnd(w, AG_F32, 1, shD, NULL);
  c.o[3] = opnd(b, AG_F32, 1, shD, NULL);
  c.o[4] = opnd(mean, AG_F32, 1, shN, NULL);
  c.o[5] = opnd(rstd, AG_F32, 1, shN, NULL);
  run(&c);
  for (int r = 0; r < R; r++) {
    double m = 0, v = 0;
    for (int j = 0; j < C; j++) m += x[r * C + j];
    m /= C;
    for (int j = 0; j < C; j++) v += (x[r * C + j] - m) * (x[r * C + j] - m);
    v /= C;
    near(mean[r], m, 1e-6);
    near(rstd[r], 1 / sqrt(v + 1e-5), 1e-5);
    for (int j = 0; j < C; j++) near(ln[r * C + j], (x[r * C + j] - m) / sqrt(v + 1e-5) * w[j] + b[j], 1e-5);
  }
  static ag_kmulti mt;
  float dw[C], db[C], lx[R * C];
  mt.count = 2;
  mt.t[0].base = dw;
  mt.t[0].dtype = AG_F32;
  mt.t[0].numel = C;
  mt.t[1].base = db;
  mt.t[1].dtype = AG_F32;
  mt.t[1].numel = C;
  c = kcall(AG_K_LAYERNORM_BWD, 0);
  c.n_operands = 6;
  c.i[0] = R;
  c.i[1] = C;
  c.multi = &mt;
  c.o[0] = opnd(lx, AG_F32, 2, sh, NULL);
  c.o[1] = opnd(dy, AG_F32, 2, sh, NULL);
  c.o[2] = opnd(x, AG_F32, 2, sh, NULL);
  c.o[3] = opnd(mean, AG_F32, 1, shN, NULL);
  c.o[4] = opnd(rstd, AG_F32, 1, shN, NULL);
  c.o[5] = opnd(w, AG_F32, 1, shD, NULL);
  run(&c);
  /* loss = sum(dy * layernorm(x)); check dx by central differences in f64 */
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j += 7) {
      double lp[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        double xr[C], m = 0, v = 0, L = 0, h = sgn ? -1e-4 : 1e-4;
        for (int k = 0; k < C; k++) xr[k] = x[r * C + k] + (k == j ? h : 0);
        for (int k = 0; k < C; k++) m += xr[k];
        m /= C;
        for (int k = 0; k < C; k++) v += (xr[k] - m) * (xr[k] - m);
        v /= C;
        for (int k = 0; k < C; k++) L += dy[r * C + k] * ((xr[k] - m) / sqrt(v + 1e-5) * w[k] + b[k]);
        lp[sgn] = L;
      }
      near(lx[r * C + j], (lp[0] - lp[1]) / 2e-4, 1e-3);
    }
  for (int j = 0; j < C; j++) {
    double sw = 0, sb = 0;
    for (int r = 0; r < R; r++) {
      sw += dy[r * C + j] * (x[r * C + j] - mean[r]) * rstd[r];
      sb += dy[r * C + j];
    }
    near(dw[j], sw, 1e-5);
    near(db[j], sb, 1e-6);
  }
}

/* ---- random, dropout ---- */

static void test_random(void **state) {
  enum { N = 1031 };
  static float u[N], z[N], x[N], y[N], m[N];
  static uint16_t uh[N];
  const int64_t sh[1] = {N};
  ag_kernel_call c = kcall(AG_K_RAND_UNIFORM, 0);
  c.n_operands = 1;
  c.s[0] = -1;
  c.s[1] = 3;
  c.seed = 0x123456789abcdefull;
  c.offset = 77;
  c.o[0] = opnd(u, AG_F32, 1, sh, NULL);
  run(&c);
  c.o[0] = opnd(uh, AG_F16, 1, sh, NULL);
  run(&c);
  double mean = 0;
  for (int i = 0; i < N; i++) {
    uint32_t r[4];
    ag_philox4x32(77 + i / 4, c.seed, r);
    float w = (float)(r[i % 4] >> 8) * 0x1p-24f * 4.0f - 1.0f;
    assert_true(u[i] == w);
    assert_int_equal(uh[i], ag_f32_to_f16(w));
    mean += u[i];
  }
  near(mean / N, 1, 0.1);
  c = kcall(AG_K_RAND_NORMAL, 0);
  c.n_operands = 1;
  c.s[0] = 0.5;
  c.s[1] = 2;
  c.seed = 42;
  c.offset = 5;
  c.o[0] = opnd(z, AG_F32, 1, sh, NULL);
  run(&c);
  for (int i = 0; i < N; i++) {
    uint32_t r[4];
    ag_philox4x32(5 + i / 2, 42, r);
    double u1 = ((r[2 * (i % 2)] >> 8) + 1) * 0x1p-24, u2 = (r[2 * (i % 2) + 1] >> 8) * 0x1p-24;
    near(z[i], sqrt(-2 * log(u1)) * cos(2 * M_PI * u2) * 2 + 0.5, 1e-5);
  }
  for (int i = 0; i < N; i++) x[i] = 1 + i % 5;
  c = kcall(AG_K_DROPOUT, 0);
  c.n_operands = 3;
  c.s[0] = 0.25;
  c.seed = 9;
  c.offset = 1000;
  c.o[0] = opnd(y, AG_F32, 1, sh, NULL);
  c.o[1] = opnd(x, AG_F32, 1, sh, NULL);
  c.o[2] = opnd(m, AG_F32, 1, sh, NULL);
  run(&c);
  int kept = 0;
  for (int i = 0; i < N; i++) {
    uint32_t r[4];
    ag_philox4x32(1000 + i / 4, 9, r);
    bool keep = (float)(r[i % 4] >> 8) * 0x1p-24f >= 0.25f;
    kept += keep;
    near(m[i], keep ? 1 / 0.75 : 0, 1e-7);
    near(y[i], x[i] * m[i], 1e-7);
  }
  assert_true(kept > N / 2 && kept < N);
}

/* ---- embedding, optimizers ---- */

static void test_embedding_optim(void **state) {
  enum { V = 5, D = 3, N = 4 };
  float tab[V * D], out[N * D], dtab[V * D];
  for (int i = 0; i < V * D; i++) tab[i] = (float)i;
  int32_t idx[N] = {4, 0, 7, 4};
  const int64_t so[2] = {N, D}, stb[2] = {V, D}, si[1] = {N};
  ag_kernel_call c = kcall(AG_K_EMBEDDING, 0);
  c.n_operands = 3;
  c.i[0] = N;
  c.i[1] = D;
  c.i[2] = V;
  c.o[0] = opnd(out, AG_F32, 2, so, NULL);
  c.o[1] = opnd(tab, AG_F32, 2, stb, NULL);
  c.o[2] = opnd(idx, AG_I32, 1, si, NULL);
  run(&c);
  for (int j = 0; j < D; j++) {
    assert_true(out[j] == tab[4 * D + j]);
    assert_true(out[D + j] == tab[j]);
    assert_true(out[2 * D + j] == 0);
  }
  ag_kernel_error ke;
  be->take_kernel_error(st, &ke);
  assert_int_equal(ke.code, AG_ERR_INDEX);
  assert_int_equal(ke.index, 7);
  assert_int_equal(ke.limit, V);
  for (int i = 0; i < V * D; i++) dtab[i] = 1;
  c.op = AG_K_EMBEDDING_BWD;
  c.o[0] = opnd(dtab, AG_F32, 2, stb, NULL);
  c.o[1] = opnd(out, AG_F32, 2, so, NULL);
  run(&c);
  for (int j = 0; j < D; j++) {
    assert_true(dtab[4 * D + j] == 1 + 2 * tab[4 * D + j]);
    assert_true(dtab[j] == 1 + tab[j]);
    assert_true(dtab[D + j] == 1);
  }
  be->take_kernel_error(st, &ke);
  assert_int_equal(ke.code, AG_ERR_INDEX);

  /* AdamW step against the PyTorch formula; then a skipped step */
  float p[3] = {1, -2, 3}, g[3] = {0.5f, -1, 2}, ea[3] = {0.1f, 0, -0.1f}, es[3] = {0.01f, 0, 0.02f};
  float p0[3], ea0[3], es0[3], inv = 0.5f, found = 0;
  memcpy(p0, p, sizeof p);
  memcpy(ea0, ea, sizeof ea);
  memcpy(es0, es, sizeof es);
  static ag_kmulti mt;
  void *ptrs[4] = {p, g, ea, es};
  mt.count = 4;
  for (int k = 0; k < 4; k++) {
    mt.t[k].base = ptrs[k];
    mt.t[k].offset = 0;
    mt.t[k].dtype = AG_F32;
    mt.t[k].numel = 3;
  }
  const int64_t s1[1] = {1};
  c = kcall(AG_K_ADAMW, 0);
  c.n_operands = 2;
  c.multi = &mt;
  double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, bc1 = 1 - pow(b1, 3), bc2 = 1 - pow(b2, 3);
  c.s[0] = lr; c.s[1] = b1; c.s[2] = b2; c.s[3] = eps; c.s[4] = wd; c.s[5] = bc1; c.s[6] = bc2;
  c.o[0] = opnd(&inv, AG_F32, 1, s1, NULL);
  c.o[1] = opnd(&found, AG_F32, 1, s1, NULL);
  run(&c);
  for (int i = 0; i < 3; i++) {
    double gi = g[i] * 0.5, m = b1 * ea0[i] + (1 - b1) * gi, v = b2 * es0[i] + (1 - b2) * gi * gi;
    double w = p0[i] * (1 - lr * wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
    near(ea[i], m, 1e-6);
    near(es[i], v, 1e-6);
    near(p[i], w, 1e-6);
  }
  memcpy(p0, p, sizeof p);
  found = 1;
  run(&c);
  assert_memory_equal(p, p0, sizeof p);

  /* non-finite check with unscale, then sum of squares */
  float t1[3] = {1, 2, 4};
  uint16_t t2[2] = {ag_f32_to_f16(2), 0x7c00};
  mt.count = 2;
  mt.t[0].base = t1; mt.t[0].dtype = AG_F32; mt.t[0].numel = 3;
  mt.t[1].base = t2; mt.t[1].dtype = AG_F16; mt.t[1].numel = 2;
  found = 0;
  c = kcall(AG_K_NONFINITE_CHECK, 0);
  c.n_operands = 2;
  c.multi = &mt;
  c.o[0] = opnd(&found, AG_F32, 1, s1, NULL);
  c.o[1] = opnd(&inv, AG_F32, 1, s1, NULL);
  run(&c);
  assert_true(found == 1);
  assert_true(t1[2] == 2);
  assert_true(ag_f16_to_f32(t2[0]) == 1);
  float ss = -1;
  mt.count = 1;
  c = kcall(AG_K_SUMSQ, 0);
  c.n_operands = 1;
  c.multi = &mt;
  c.o[0] = opnd(&ss, AG_F32, 1, s1, NULL);
  run(&c);
  assert_true(ss == 0.25f + 1 + 4);
}

static void test_supports(void **state) {
  assert_true(be->supports(0, AG_K_UNARY, AG_U_EXP, AG_BF16));
  assert_false(be->supports(0, AG_K_UNARY, AG_U_EXP, AG_I32));
  assert_false(be->supports(0, AG_K_UNARY, AG_UNARY_COUNT, AG_F32));
  assert_true(be->supports(0, AG_K_BINARY, AG_B_GELU_BWD, AG_F64));
  assert_false(be->supports(0, AG_K_BINARY, AG_B_DIV, AG_I32));
  assert_true(be->supports(0, AG_K_REDUCE, AG_R_SUM, AG_I32));
  assert_false(be->supports(0, AG_K_MATMUL, 0, AG_I32));
  assert_false(be->supports(0, AG_K_ADAMW, 0, AG_F16));
  assert_false(be->supports(0, AG_K_SOFTMAX, 2, AG_F32));
  assert_false(be->supports(0, AG_KOP_COUNT, 0, AG_F32));
  assert_false(be->supports(0, AG_K_FILL, 0, AG_DTYPE_COUNT));
}

/* ---- streams and events ---- */

static void add_one(ag_bstream *s, float *x, int64_t n) {
  const int64_t sh[1] = {n};
  ag_kernel_call c = kcall(AG_K_UNARY, AG_U_AFFINE);
  c.n_operands = 2;
  c.s[0] = 1;
  c.s[1] = 1;
  c.o[0] = opnd(x, AG_F32, 1, sh, NULL);
  c.o[1] = opnd(x, AG_F32, 1, sh, NULL);
  assert_int_equal(be->launch(s, &c), AG_OK);
}

/* Stream A increments x many times and records an event; stream B waits on
 * it, copies x to y and doubles y. Without the wait, B would read a
 * partially updated x. Also checks the staging of pageable h2d sources and
 * that a destroyed event with queued records stays valid. */
static void test_streams_events(void **state) {
  enum { N = 1 << 18, REPS = 100 };
  bool threaded = ag_cpu_stream_mode_get() == AG_CPU_STREAMS_THREADED;
  ag_bstream *a, *b;
  ag_bevent *ea, *t0, *t1, *tmp;
  assert_int_equal(be->stream_create(0, &a), AG_OK);
  assert_int_equal(be->stream_create(0, &b), AG_OK);
  assert_int_equal(be->event_create(0, true, &ea), AG_OK);
  assert_int_equal(be->event_create(0, true, &t0), AG_OK);
  assert_int_equal(be->event_create(0, true, &t1), AG_OK);
  assert_int_equal(be->event_create(0, false, &tmp), AG_OK);
  bool done;
  assert_int_equal(be->event_query(ea, &done), AG_OK);
  assert_true(done); /* never recorded */
  float ms;
  assert_int_equal(be->event_elapsed_ms(t0, t1, &ms), AG_ERR_STATE);
  assert_int_equal(be->event_elapsed_ms(tmp, t1, &ms), AG_ERR_INVALID);

  float *x, *y, *src = malloc(N * 4);
  assert_int_equal(be->segment_alloc(0, N * 4, (void **)&x), AG_OK);
  assert_int_equal(be->segment_alloc(0, N * 4, (void **)&y), AG_OK);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) src[i] = (float)(i % 10);
    assert_int_equal(be->copy_h2d(a, x, 0, src, N * 4, false), AG_OK);
    memset(src, 0xff, N * 4); /* pageable source reused at once */
    assert_int_equal(be->event_record(t0, a), AG_OK);
    for (int r = 0; r < REPS; r++) add_one(a, x, N);
    assert_int_equal(be->event_record(ea, a), AG_OK);
    assert_int_equal(be->event_record(tmp, a), AG_OK);
    assert_int_equal(be->event_record(t1, a), AG_OK);
    assert_int_equal(be->stream_wait_event(b, ea), AG_OK);
    assert_int_equal(be->copy_d2d(b, y, 0, x, 0, N * 4), AG_OK);
    const int64_t sh[1] = {N};
    ag_kernel_call c = kcall(AG_K_BINARY, AG_B_ADD);
    c.n_operands = 3;
    c.o[0] = opnd(y, AG_F32, 1, sh, NULL);
    c.o[1] = opnd(y, AG_F32, 1, sh, NULL);
    c.o[2] = opnd(y, AG_F32, 1, sh, NULL);
    assert_int_equal(be->launch(b, &c), AG_OK);
    float back[4] = {0};
    assert_int_equal(be->copy_d2h(b, back, y, 4 * 3, sizeof back), AG_OK);
    /* ordering invariant that holds at any instant: B is never done before ea */
    bool bdone, edone;
    be->stream_query(b, &bdone);
    be->event_query(ea, &edone);
    assert_true(!bdone || edone);
    assert_int_equal(be->stream_synchronize(b), AG_OK);
    assert_int_equal(be->event_query(ea, &edone), AG_OK);
    assert_true(edone);
    for (int i = 0; i < N; i += 997) assert_true(y[i] == 2.0f * (float)(i % 10 + REPS));
    for (int i = 0; i < 4; i++) assert_true(back[i] == 2.0f * (float)((3 + i) % 10 + REPS));
    assert_int_equal(be->event_synchronize(t1), AG_OK);
    assert_int_equal(be->event_elapsed_ms(t0, t1, &ms), AG_OK);
    assert_true(ms >= 0);
    assert_int_equal(be->stream_synchronize(a), AG_OK);
    assert_int_equal(be->stream_query(a, &done), AG_OK);
    assert_true(done);
  }
  /* an event destroyed while its record is still queued */
  for (int r = 0; r < 10; r++) add_one(a, x, N);
  assert_int_equal(be->event_record(tmp, a), AG_OK);
  be->event_destroy(tmp);
  assert_int_equal(be->event_record(ea, a), AG_OK);
  assert_int_equal(be->stream_wait_event(b, ea), AG_OK);
  /* then the two streams write disjoint halves concurrently */
  for (int r = 0; r < 20; r++) {
    add_one(a, x, N / 2);
    add_one(b, x + N / 2, N / 2);
  }
  be->stream_destroy(a); /* waits for its queue */
  assert_int_equal(be->stream_synchronize(b), AG_OK);
  for (int i = 0; i < N; i++) {
    float want = (float)(i % 10 + REPS + 30);
    if (x[i] != want) fail_msg("x[%d] = %g, want %g (threaded=%d)", i, x[i], want, threaded);
  }
  be->stream_destroy(b);
  be->event_destroy(ea);
  be->event_destroy(t0);
  be->event_destroy(t1);
  be->segment_free(0, x);
  be->segment_free(0, y);
  free(src);
}

static void test_mode_frozen(void **state) {
  ag_cpu_stream_mode m = ag_cpu_stream_mode_get();
  ag_cpu_stream_mode other = m == AG_CPU_STREAMS_INLINE ? AG_CPU_STREAMS_THREADED : AG_CPU_STREAMS_INLINE;
  assert_int_equal(ag_cpu_set_stream_mode(other), AG_ERR_STATE);
  assert_int_equal(ag_cpu_set_stream_mode(m), AG_OK);
  assert_int_equal(ag_cpu_set_stream_mode((ag_cpu_stream_mode)7), AG_ERR_INVALID);
  assert_int_equal(ag_cpu_stream_mode_get(), m);
}

int main(int argc, char **argv) {
  /* "idle_sleep" alone, first thing in a fresh process: BLAS threads that
   * spin after library start-up show only there (ctest cpu_backend_idle). */
  const struct CMUnitTest idle[] = {cmocka_unit_test(test_threads_idle_sleep)};
  if (argc > 1 && !strcmp(argv[1], "idle_sleep")) return cmocka_run_group_tests(idle, setup, teardown);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_exhaustive),  cmocka_unit_test(test_f16_rne),
      cmocka_unit_test(test_bf16),            cmocka_unit_test(test_philox_kat),
      cmocka_unit_test(test_memory),          cmocka_unit_test(test_supports),
      cmocka_unit_test(test_binary_strided),  cmocka_unit_test(test_unary),
      cmocka_unit_test(test_vector_math),     cmocka_unit_test(test_transpose_copy),
      cmocka_unit_test(test_cast_fill_where), cmocka_unit_test(test_large_elementwise),
      cmocka_unit_test(test_num_threads), cmocka_unit_test(test_threads_same_results),
      cmocka_unit_test(test_threads_idle_sleep),
      cmocka_unit_test(test_reduce),          cmocka_unit_test(test_gemm_engine),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_softmax_ce_layernorm), cmocka_unit_test(test_random),
      cmocka_unit_test(test_embedding_optim), cmocka_unit_test(test_streams_events),
      cmocka_unit_test(test_mode_frozen),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
