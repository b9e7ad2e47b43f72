/* CPU kernels: a strided elementwise engine (tiles of up to 256 elements
 * converted to a compute type, so any dtype mix and any strides share one
 * loop), row kernels (softmax, losses, layer norm, embedding), arange, and
 * the dispatch of every ag_kop. Reductions are in cpu_reduce.c, random
 * numbers and dropout in cpu_random.c, multi-tensor optimizer kernels in
 * cpu_optim.c, the shared tile loads and stores in cpu_tile.h.
 * Compute types: f32 for f32/f16/bf16, f64 for f64, i64 for the integer
 * dtypes (i32, i64, u8, bool; stores wrap to the width, bool stores x != 0). */
#if defined(__GNUC__) && !defined(__clang__)
/* The loops here are written to be vectorised; -O2's "very cheap" cost model
 * refuses any loop that needs an alias check or a remainder loop, and with
 * trapping math a float compare (a clamp, a max) stays a branch. No kernel
 * reads the floating-point exception flags. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "cpu_backend.h"
#include "cpu_tile.h"
#include "tensor/half.h"

/* ---- parallel loop: the host thread pool (core/runtime/threadpool.c) ---- */

typedef ag_cpu_range_fn range_fn;
#define par_for ag__cpu_par_for

/* ---- row I/O for the row kernels: a direct pointer when the data is
 * already in the compute type, else a converted copy in buf ---- */

static const float *rowin_f(ag_dtype dt, const char *p, int64_t n, float *buf) {
  if (dt == AG_F32) return (const float *)p;
  load_f(dt, p, 1, n, buf);
  return buf;
}
static float *rowdst_f(ag_dtype dt, char *p, float *buf) { return dt == AG_F32 ? (float *)p : buf; }
static void rowout_f(ag_dtype dt, char *p, int64_t n, const float *v) {
  if ((const char *)v != p) store_f(dt, p, 1, n, v);
}
static const double *rowin_d(ag_dtype dt, const char *p, int64_t n, double *buf) {
  if (dt == AG_F64) return (const double *)p;
  load_d(dt, p, 1, n, buf);
  return buf;
}
static double *rowdst_d(ag_dtype dt, char *p, double *buf) { return dt == AG_F64 ? (double *)p : buf; }
static void rowout_d(ag_dtype dt, char *p, int64_t n, const double *v) {
  if ((const char *)v != p) store_d(dt, p, 1, n, v);
}

/* ---- f32 exp and tanh that vectorise (libm's expf and tanhf are calls the
 * vectoriser cannot widen, 4-8x slower than the memory they stream) ---- */

static inline float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* x = k ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 in two parts, the first
 * exact in a product with k). Returns e^r - 1 (Cephes' degree-5 polynomial,
 * under 1 ulp) and k. k is rounded with the 1.5*2^23 shifter, read from the
 * shifted value's low bits, so no float->int conversion sees a NaN. */
static inline float exp_reduce(float x, int32_t *k) {
  const float shifter = 0x1.8p23f;
  float t = x * 1.44269504088896341f + shifter;
  float n = t - shifter;
  *k = (int32_t)(f_bits(t) - f_bits(shifter));
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r;
}

/* 2^k for k in [-126, 127]. */
static inline float pow2i(int32_t k) { return bits_f((uint32_t)(k + 127) << 23); }

/* e^x, at most 1.02 ulp from the exact value (cpu_backend_test sweeps the
 * whole range in both builds; libm expf is 0.5). Clamping x to [-104, 89] keeps k in [-150, 129]
 * and lets the product overflow to inf or underflow to 0 on its own; 2^k is
 * applied as two factors so results near overflow or subnormal are rounded
 * once. NaN passes through every step. */
static inline float vexpf(float x) {
  x = x > 89.0f ? 89.0f : x;
  x = x < -104.0f ? -104.0f : x;
  int32_t k;
  float em1 = exp_reduce(x, &k);
  int32_t k1 = k >> 1;
  return (em1 + 1.0f) * pow2i(k1) * pow2i(k - k1);
}

/* tanh|x| = -m / (2 + m), m = expm1(-2|x|) = (2^k - 1) + 2^k (e^r - 1):
 * no cancellation for small |x| (k = 0 there), unlike (1 - e) / (1 + e).
 * tanh rounds to 1 in f32 from |x| = 9.01 on, so |x| is clamped at 10. */
static inline float vtanhf(float x) {
  float a = fabsf(x);
  a = a > 10.0f ? 10.0f : a;
  int32_t k;
  float em1 = exp_reduce(-2.0f * a, &k);
  float s = pow2i(k);
  float m = (s - 1.0f) + s * em1;
  return copysignf(-m / (2.0f + m), x);
}

/* ---- type-generic bodies ---- */

#define T float
#define SUF(x) x##_f
#define EXPT(x) vexpf(x)
#define TANHT(x) vtanhf(x)
#include "cpu_ops.inc"
#undef SUF
#if defined(AG_X86)
/* The same float bodies for AVX2+FMA (8 lanes, fused multiply-add), chosen
 * at run time: the build targets baseline x86-64. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define SUF(x) x##_f_avx2
#include "cpu_ops.inc"
#undef SUF
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
static inline bool have_avx2(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#define FV(fn) (have_avx2() ? fn##_avx2 : fn)
#else
#define FV(fn) fn
#endif
#undef T
#undef EXPT
#undef TANHT
#define T double
#define SUF(x) x##_d
#define EXPT(x) exp(x)
#define TANHT(x) tanh(x)
#include "cpu_ops.inc"
#undef T
#undef SUF
#undef EXPT
#undef TANHT

bool ag__cpu_unary_f32(int sub, bool avx2, float *o, const float *a, int64_t n) {
  static const double s[2] = {1, 0};
  if (!avx2) return unary_f(sub, o, a, n, s);
#if defined(AG_X86)
  if (have_avx2()) return unary_f_avx2(sub, o, a, n, s);
#endif
  return false;
}

/* ---- integer elementwise (i64 compute): wrap-around arithmetic as in two's
 * complement; AFFINE exact in f64 then saturated into the output dtype ---- */

static inline int64_t wrap(uint64_t u) { return (int64_t)u; }

/* The table's INT entries (optable.h) are the ones written here: a new one
 * must get its integer rule in unary_i or binary_i. */
_Static_assert(AG_UNARY_INT_COUNT == 4, "unary_i implements COPY, NEG, ABS, AFFINE");
_Static_assert(AG_BINARY_INT_COUNT == 11, "binary_i implements ADD..MIN and the comparisons");

static void unary_i(int sub, int64_t *o, const int64_t *a, int64_t n, const double *s, ag_dtype odt) {
  switch (sub) {
    case AG_U_COPY:
      if (o != a) memcpy(o, a, (size_t)n * 8);
      break;
    case AG_U_NEG: for (int64_t i = 0; i < n; i++) o[i] = wrap(0u - (uint64_t)a[i]); break;
    case AG_U_ABS:
      for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? wrap(0u - (uint64_t)a[i]) : a[i];
      break;
    case AG_U_AFFINE: /* exact in f64 for integral scalars; truncates otherwise */
      for (int64_t i = 0; i < n; i++) o[i] = sat_int((double)a[i] * s[0] + s[1], odt);
      break;
    default: memset(o, 0, (size_t)n * sizeof *o); break; /* not reached: supports() refuses it */
  }
}

static void binary_i(int sub, int64_t *o, const int64_t *a, const int64_t *b, int64_t n, const double *s,
                     ag_dtype odt) {
  switch (sub) {
    case AG_B_ADD:
      if (s[0] == 1.0)
        for (int64_t i = 0; i < n; i++) o[i] = wrap((uint64_t)a[i] + (uint64_t)b[i]);
      else if (s[0] == (double)(int32_t)s[0]) {
        uint64_t k = (uint64_t)(int64_t)(int32_t)s[0];
        for (int64_t i = 0; i < n; i++) o[i] = wrap((uint64_t)a[i] + k * (uint64_t)b[i]);
      } else
        for (int64_t i = 0; i < n; i++) o[i] = sat_int((double)a[i] + s[0] * (double)b[i], odt);
      break;
    case AG_B_SUB: for (int64_t i = 0; i < n; i++) o[i] = wrap((uint64_t)a[i] - (uint64_t)b[i]); break;
    case AG_B_MUL: for (int64_t i = 0; i < n; i++) o[i] = wrap((uint64_t)a[i] * (uint64_t)b[i]); break;
    case AG_B_MAX: for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i]; break;
    case AG_B_MIN: for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i] ? a[i] : b[i]; break;
    case AG_B_EQ: for (int64_t i = 0; i < n; i++) o[i] = a[i] == b[i]; break;
    case AG_B_NE: for (int64_t i = 0; i < n; i++) o[i] = a[i] != b[i]; break;
    case AG_B_GT: for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i]; break;
    case AG_B_GE: for (int64_t i = 0; i < n; i++) o[i] = a[i] >= b[i]; break;
    case AG_B_LT: for (int64_t i = 0; i < n; i++) o[i] = a[i] < b[i]; break;
    case AG_B_LE: for (int64_t i = 0; i < n; i++) o[i] = a[i] <= b[i]; break;
    default: memset(o, 0, (size_t)n * sizeof *o); break; /* not reached: supports() refuses it */
  }
}

/* ---- the elementwise engine ---- */

enum { DOM_F, DOM_D, DOM_I, DOM_RAW };
enum { EW_UNARY, EW_BINARY, EW_WHERE, EW_FILL };

typedef struct ew {
  const ag_kernel_call *c;
  int kind, dom, nops, nd;
  int64_t numel;
  int64_t shape[AG_MAX_DIMS];
  int64_t st[4][AG_MAX_DIMS];
  char *p[4];
  ag_dtype dt[4];
  size_t sz[4];
  bool native[4]; /* operand already in the compute type */
} ew;

static bool is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }
static int dom_of(ag_dtype dt) { return dt == AG_F64 ? DOM_D : is_int(dt) ? DOM_I : DOM_F; }
static bool is_compare(int sub) {
  const ag_binary_info *bi = ag_binary_info_of(sub);
  return bi && bi->compare;
}

static void ew_compute(const ew *e, void *o, void *const *in, int64_t n) {
  const ag_kernel_call *c = e->c;
  switch (e->dom) {
    case DOM_F:
      if (e->kind == EW_UNARY) (void)FV(unary_f)(c->sub, o, in[0], n, c->s);
      else if (e->kind == EW_BINARY) (void)FV(binary_f)(c->sub, o, in[0], in[1], n, c->s);
      else if (e->kind == EW_WHERE) FV(where_f)(o, in[0], in[1], in[2], n);
      else for (int64_t i = 0; i < n; i++) ((float *)o)[i] = (float)c->s[0];
      break;
    case DOM_D:
      if (e->kind == EW_UNARY) (void)unary_d(c->sub, o, in[0], n, c->s);
      else if (e->kind == EW_BINARY) (void)binary_d(c->sub, o, in[0], in[1], n, c->s);
      else if (e->kind == EW_WHERE) where_d(o, in[0], in[1], in[2], n);
      else for (int64_t i = 0; i < n; i++) ((double *)o)[i] = c->s[0];
      break;
    default:
      if (e->kind == EW_UNARY) unary_i(c->sub, o, in[0], n, c->s, e->dt[0]);
      else if (e->kind == EW_BINARY) binary_i(c->sub, o, in[0], in[1], n, c->s, e->dt[0]);
      else if (e->kind == EW_WHERE) {
        int64_t *r = o;
        const uint8_t *m = in[0];
        const int64_t *a = in[1], *b = in[2];
        for (int64_t i = 0; i < n; i++) r[i] = m[i] ? a[i] : b[i];
      } else {
        int64_t v = sat_int(c->s[0], e->dt[0]);
        for (int64_t i = 0; i < n; i++) ((int64_t *)o)[i] = v;
      }
      break;
  }
}

static void ew_load(int dom, ag_dtype dt, const char *p, int64_t st, int64_t n, void *buf) {
  if (dom == DOM_F) load_f(dt, p, st, n, buf);
  else if (dom == DOM_D) load_d(dt, p, st, n, buf);
  else load_i(dt, p, st, n, buf);
}

static void ew_store(int dom, ag_dtype dt, char *p, int64_t st, int64_t n, const void *buf) {
  if (dom == DOM_F) store_f(dt, p, st, n, buf);
  else if (dom == DOM_D) store_d(dt, p, st, n, buf);
  else store_i(dt, p, st, n, buf);
}

/* n elements along the innermost dim starting at ptr[k], stride st[k]. */
static void ew_segment(const ew *e, char *const *ptr, const int64_t *st, int64_t n) {
  if (e->dom == DOM_RAW) {
    size_t sz = e->sz[0];
    char *d = ptr[0];
    const char *s = ptr[1];
    if (st[0] == 1 && st[1] == 1) {
      memmove(d, s, (size_t)n * sz);
    } else if (sz == 4) {
      for (int64_t i = 0; i < n; i++) ((uint32_t *)d)[i * st[0]] = ((const uint32_t *)s)[i * st[1]];
    } else if (sz == 2) {
      for (int64_t i = 0; i < n; i++) ((uint16_t *)d)[i * st[0]] = ((const uint16_t *)s)[i * st[1]];
    } else if (sz == 1) {
      for (int64_t i = 0; i < n; i++) ((uint8_t *)d)[i * st[0]] = ((const uint8_t *)s)[i * st[1]];
    } else {
      for (int64_t i = 0; i < n; i++) ((uint64_t *)d)[i * st[0]] = ((const uint64_t *)s)[i * st[1]];
    }
    return;
  }
  _Alignas(64) double buf[4][TILE];
  _Alignas(64) uint8_t mask[TILE];
  for (int64_t off = 0; off < n; off += TILE) {
    int64_t m = n - off < TILE ? n - off : TILE;
    void *in[3];
    for (int k = 1; k < e->nops; k++) {
      char *q = ptr[k] + (size_t)(off * st[k]) * e->sz[k];
      if (e->kind == EW_WHERE && k == 1) {
        load_mask(e->dt[1], q, st[1], m, mask);
        in[0] = mask;
      } else if (e->native[k] && st[k] == 1) {
        in[k - 1] = q;
      } else {
        ew_load(e->dom, e->dt[k], q, st[k], m, buf[k]);
        in[k - 1] = buf[k];
      }
    }
    char *q0 = ptr[0] + (size_t)(off * st[0]) * e->sz[0];
    void *o = (e->native[0] && st[0] == 1) ? (void *)q0 : (void *)buf[0];
    ew_compute(e, o, in, m);
    if (o != (void *)q0) ew_store(e->dom, e->dt[0], q0, st[0], m, o);
  }
}

/* Linear output indices [a, b) in row-major order of the coalesced shape. */
static void ew_range(void *ctx, int64_t a, int64_t b) {
  const ew *e = ctx;
  const int nd = e->nd, last = nd - 1;
  int64_t idx[AG_MAX_DIMS];
  int64_t r = a;
  for (int d = last; d >= 0; d--) {
    idx[d] = r % e->shape[d];
    r /= e->shape[d];
  }
  int64_t inner_st[4];
  for (int k = 0; k < e->nops; k++) inner_st[k] = e->st[k][last];
  int64_t lin = a;
  while (lin < b) {
    char *ptr[4];
    for (int k = 0; k < e->nops; k++) {
      int64_t off = 0;
      for (int d = 0; d < nd; d++) off += idx[d] * e->st[k][d];
      ptr[k] = e->p[k] + off * (int64_t)e->sz[k];
    }
    int64_t n = e->shape[last] - idx[last];
    if (n > b - lin) n = b - lin;
    ew_segment(e, ptr, inner_st, n);
    lin += n;
    idx[last] += n;
    for (int d = last; d > 0 && idx[d] == e->shape[d]; d--) {
      idx[d] = 0;
      idx[d - 1]++;
    }
  }
}

/* Same-dtype copies whose output is unit-stride along the inner dim while
 * the input is not (a transposed view made contiguous) run in 16x16 tiles
 * of the last two dims; a row-by-row walk touches one element per input
 * cache line and one page per element. A tile is read along the input's
 * rows into a local buffer, then written along the output's rows. 16 beat
 * 32 (1.8x) and matched 8 on f32[4096,1024]: 32 rows 4 KiB apart share one
 * L1 set. Tiles advance along the output's rows first, so consecutive tiles
 * continue the same input lines. Work item w = (outer index, tile). */
#define TT 16
#define TILE_COPY(U)                                                 \
  do {                                                               \
    U tb[TT][TT];                                                    \
    for (int64_t c = 0; c < nc; c++)                                 \
      for (int64_t r = 0; r < nr; r++) tb[c][r] = ((const U *)s)[r * is_r + c * is_c]; \
    for (int64_t r = 0; r < nr; r++)                                 \
      for (int64_t c = 0; c < nc; c++) ((U *)d)[r * os + c] = tb[c][r]; \
  } while (0)

static void transpose_range(void *ctx, int64_t a, int64_t b) {
  const ew *e = ctx;
  const int nd = e->nd;
  const int64_t R = e->shape[nd - 2], C = e->shape[nd - 1];
  const int64_t tr = (R + TT - 1) / TT, tc = (C + TT - 1) / TT;
  const int64_t os = e->st[0][nd - 2], is_r = e->st[1][nd - 2], is_c = e->st[1][nd - 1];
  const size_t sz = e->sz[0];
  for (int64_t w = a; w < b; w++) {
    int64_t rest = w / (tr * tc), t = w % (tr * tc);
    int64_t r0 = t % tr * TT, c0 = t / tr * TT;
    int64_t off0 = r0 * os + c0, off1 = r0 * is_r + c0 * is_c;
    for (int d = nd - 3; d >= 0; d--) {
      int64_t i = rest % e->shape[d];
      rest /= e->shape[d];
      off0 += i * e->st[0][d];
      off1 += i * e->st[1][d];
    }
    const int64_t nr = R - r0 < TT ? R - r0 : TT, nc = C - c0 < TT ? C - c0 : TT;
    char *d = e->p[0] + off0 * (int64_t)sz;
    const char *s = e->p[1] + off1 * (int64_t)sz;
    if (sz == 4) TILE_COPY(uint32_t);
    else if (sz == 2) TILE_COPY(uint16_t);
    else if (sz == 1) TILE_COPY(uint8_t);
    else TILE_COPY(uint64_t);
  }
}

static bool transpose_like(const ew *e) {
  if (e->dom != DOM_RAW || e->nd < 2) return false;
  const int l = e->nd - 1;
  const int64_t is_c = e->st[1][l];
  return e->st[0][l] == 1 && is_c != 0 && is_c != 1 && is_c != -1 && e->shape[l] >= 8 &&
         e->shape[l - 1] >= 8;
}

/* Relative cost per element, from the op table (a transcendental ~8x an
 * add). */
static int64_t ew_cost(int kind, int sub) {
  if (kind == EW_UNARY) return ag_unary_info_of(sub)->cost;
  if (kind == EW_BINARY) return ag_binary_info_of(sub)->cost;
  return 1;
}

static void ew_run(const ag_kernel_call *c, int kind, int nops) {
  ew e;
  e.c = c;
  e.kind = kind;
  e.nops = nops;
  const ag_koperand *o0 = &c->o[0];
  for (int k = 0; k < nops; k++) {
    e.p[k] = ag__cpu_ptr(&c->o[k]);
    e.dt[k] = c->o[k].dtype;
    e.sz[k] = ag__cpu_dtsize(e.dt[k]);
  }
  /* Compute type: the output's, except that casts involving f64 go through
   * f64 and same-dtype copies move raw bits (NaN payloads survive). */
  e.dom = dom_of(e.dt[0]);
  if (kind == EW_UNARY && nops == 2 && c->sub == AG_U_COPY) {
    if (e.dt[0] == e.dt[1]) e.dom = DOM_RAW;
    else if (is_int(e.dt[0]) && is_int(e.dt[1])) e.dom = DOM_I;
    else if (e.dt[0] == AG_F64 || e.dt[1] == AG_F64 || e.dt[0] == AG_I64 || e.dt[1] == AG_I64) e.dom = DOM_D;
    else e.dom = DOM_F;
  }
  /* comparisons compute in the inputs' type and store 0/1 as bool */
  if (kind == EW_BINARY && is_compare(c->sub)) e.dom = dom_of(e.dt[1]);
  const ag_dtype nat = e.dom == DOM_F ? AG_F32 : e.dom == DOM_D ? AG_F64 : AG_I64;
  for (int k = 0; k < nops; k++) e.native[k] = e.dt[k] == nat;
  if (kind == EW_WHERE) e.native[1] = false;

  /* Fast path for small dense operands: one segment, no index arithmetic. */
  {
    int64_t s = 1;
    bool dense = true;
    for (int d = o0->ndim - 1; d >= 0 && dense; d--) {
      if (o0->shape[d] != 1)
        for (int k = 0; k < nops; k++) dense = dense && c->o[k].strides[d] == s;
      s *= o0->shape[d];
    }
    if (dense && s * ew_cost(kind, c->sub) < AG_CPU_PAR_MIN) {
      static const int64_t ones[4] = {1, 1, 1, 1};
      if (s > 0) ew_segment(&e, e.p, ones, s);
      return;
    }
  }
  /* Drop size-1 dims, then merge dims that are contiguous in every operand,
   * so contiguous tensors become one flat loop. */
  int64_t numel = 1;
  int m = 0;
  for (int d = 0; d < o0->ndim; d++) {
    int64_t s = o0->shape[d];
    numel *= s;
    if (s == 1) continue;
    bool merge = m > 0;
    for (int k = 0; k < nops && merge; k++) merge = e.st[k][m - 1] == c->o[k].strides[d] * s;
    if (merge) {
      e.shape[m - 1] *= s;
      for (int k = 0; k < nops; k++) e.st[k][m - 1] = c->o[k].strides[d];
    } else {
      e.shape[m] = s;
      for (int k = 0; k < nops; k++) e.st[k][m] = c->o[k].strides[d];
      m++;
    }
  }
  if (numel <= 0) return;
  if (m == 0) {
    m = 1;
    e.shape[0] = 1;
    for (int k = 0; k < nops; k++) e.st[k][0] = 1;
  }
  e.nd = m;
  e.numel = numel;
  if (transpose_like(&e)) {
    int64_t R = e.shape[m - 2], C = e.shape[m - 1];
    int64_t tiles = numel / (R * C) * ((R + TT - 1) / TT) * ((C + TT - 1) / TT);
    par_for(tiles, numel, transpose_range, &e);
    return;
  }
  par_for(numel, numel * ew_cost(kind, c->sub), ew_range, &e);
}

/* ---- creation kernels ---- */

static void k_arange(const ag_kernel_call *c) {
  int64_t n = c->o[0].ndim ? c->o[0].shape[0] : 1;
  char *p = ag__cpu_ptr(&c->o[0]);
  size_t sz = ag__cpu_dtsize(c->o[0].dtype);
  double buf[TILE];
  for (int64_t i = 0; i < n; i += TILE) {
    int64_t m = n - i < TILE ? n - i : TILE;
    for (int64_t j = 0; j < m; j++) buf[j] = c->s[0] + (double)(i + j) * c->s[1];
    store_d(c->o[0].dtype, p + (size_t)i * sz, 1, m, buf);
  }
}

/* ---- row kernels ---- */

typedef struct rowctx {
  const ag_kernel_call *c;
  int64_t rows, cols;
  atomic_bool oom;
  ag_kernel_error err; /* index errors found by the serial pre-scan */
} rowctx;

/* Scratch for `nbuf` converted rows of `cols` elements of `esz` bytes. */
static void *row_scratch(rowctx *r, int nbuf, size_t esz) {
  void *p = malloc((size_t)nbuf * (size_t)(r->cols > 0 ? r->cols : 1) * esz);
  if (!p) atomic_store(&r->oom, true);
  return p;
}

static void softmax_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dy = c->o[0].dtype, dx = c->o[1].dtype;
  char *yp = ag__cpu_ptr(&c->o[0]);
  const char *xp = ag__cpu_ptr(&c->o[1]);
  size_t sy = ag__cpu_dtsize(dy) * (size_t)n, sx = ag__cpu_dtsize(dx) * (size_t)n;
  if (dy == AG_F64) {
    double *buf = row_scratch(r, 2, 8);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const double *x = rowin_d(dx, xp + i * sx, n, buf);
      double *y = rowdst_d(dy, yp + i * sy, buf + n);
      softmax_row_d(c->sub, y, x, n);
      rowout_d(dy, yp + i * sy, n, y);
    }
    free(buf);
  } else {
    float *buf = row_scratch(r, 2, 4);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      if (i + 1 < b)
        for (size_t k = 0; k < sx; k += 64) __builtin_prefetch(xp + (i + 1) * sx + k);
      const float *x = rowin_f(dx, xp + i * sx, n, buf);
      float *y = rowdst_f(dy, yp + i * sy, buf + n);
      FV(softmax_row_f)(c->sub, y, x, n);
      rowout_f(dy, yp + i * sy, n, y);
    }
    free(buf);
  }
}

static void softmax_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  char *p0 = ag__cpu_ptr(&c->o[0]);
  const char *p1 = ag__cpu_ptr(&c->o[1]), *p2 = ag__cpu_ptr(&c->o[2]);
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, s1 = ag__cpu_dtsize(d1) * (size_t)n,
         s2 = ag__cpu_dtsize(d2) * (size_t)n;
  if (d0 == AG_F64) {
    double *buf = row_scratch(r, 3, 8);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const double *dy = rowin_d(d1, p1 + i * s1, n, buf);
      const double *y = rowin_d(d2, p2 + i * s2, n, buf + n);
      double *dx = rowdst_d(d0, p0 + i * s0, buf + 2 * n);
      softmax_bwd_row_d(c->sub, dx, dy, y, n);
      rowout_d(d0, p0 + i * s0, n, dx);
    }
    free(buf);
  } else {
    float *buf = row_scratch(r, 3, 4);
    if (!buf) return;
    for (int64_t i = a; i < b; i++) {
      const float *dy = rowin_f(d1, p1 + i * s1, n, buf);
      const float *y = rowin_f(d2, p2 + i * s2, n, buf + n);
      float *dx = rowdst_f(d0, p0 + i * s0, buf + 2 * n);
      FV(softmax_bwd_row_f)(c->sub, dx, dy, y, n);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
    free(buf);
  }
}

/* Target of row i, or -1 when ignored or out of range (the pre-scan has
 * recorded the error; such rows get the safe value). */
static int64_t ce_target(const ag_kernel_call *c, int64_t i, int64_t C, bool *bad) {
  int64_t t = idx_at(&c->o[2], i);
  *bad = false;
  if (t == c->i[2]) return -1;
  if (t < 0 || t >= C) {
    *bad = true;
    return -1;
  }
  return t;
}

static void ce_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dl = c->o[1].dtype, dloss = c->o[0].dtype;
  const char *lp = ag__cpu_ptr(&c->o[1]);
  char *op = ag__cpu_ptr(&c->o[0]);
  size_t sl = ag__cpu_dtsize(dl) * (size_t)n, so = ag__cpu_dtsize(dloss);
  void *buf = row_scratch(r, 1, dl == AG_F64 ? 8 : 4);
  if (!buf) return;
  for (int64_t i = a; i < b; i++) {
    bool bad;
    int64_t t = ce_target(c, i, n, &bad);
    double loss = 0;
    if (bad) loss = NAN;
    else if (t >= 0) {
      if (dl == AG_F64) {
        const double *x = rowin_d(dl, lp + i * sl, n, buf);
        loss = logsumexp_d(x, n) - x[t];
      } else {
        const float *x = rowin_f(dl, lp + i * sl, n, buf);
        loss = (double)(FV(logsumexp_f)(x, n) - x[t]);
      }
    }
    store_d(dloss, op + (size_t)i * so, 1, 1, &loss);
  }
  free(buf);
}

static void ce_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, dl = c->o[1].dtype, dg = c->o[3].dtype;
  char *p0 = ag__cpu_ptr(&c->o[0]);
  const char *lp = ag__cpu_ptr(&c->o[1]), *gp = ag__cpu_ptr(&c->o[3]);
  const int64_t gst = c->o[3].ndim ? c->o[3].strides[0] : 0;
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, sl = ag__cpu_dtsize(dl) * (size_t)n;
  size_t sg = ag__cpu_dtsize(dg);
  const bool dbl = d0 == AG_F64;
  char *buf = row_scratch(r, 2, dbl ? 8 : 4);
  if (!buf) return;
  for (int64_t i = a; i < b; i++) {
    bool bad;
    int64_t t = ce_target(c, i, n, &bad);
    double g;
    load_d(dg, gp + (size_t)(i * gst) * sg, 1, 1, &g);
    bool zero = bad || t < 0;
    if (dbl) {
      double *dx = rowdst_d(d0, p0 + i * s0, (double *)buf + n);
      if (zero) memset(dx, 0, (size_t)n * 8);
      else ce_bwd_row_d(dx, rowin_d(dl, lp + i * sl, n, (double *)buf), n, t, g);
      rowout_d(d0, p0 + i * s0, n, dx);
    } else {
      float *dx = rowdst_f(d0, p0 + i * s0, (float *)buf + n);
      if (zero) memset(dx, 0, (size_t)n * 4);
      else FV(ce_bwd_row_f)(dx, rowin_f(dl, lp + i * sl, n, (float *)buf), n, t, (float)g);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
  }
  free(buf);
}

static void ce_prescan(rowctx *r, ag_kop op) {
  for (int64_t i = 0; i < r->rows; i++) {
    int64_t t = idx_at(&r->c->o[2], i);
    if (t != r->c->i[2] && (t < 0 || t >= r->cols)) {
      kerr(&r->err, op, t, r->cols);
      break;
    }
  }
}

static void layernorm_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dy = c->o[0].dtype, dx = c->o[1].dtype;
  char *yp = ag__cpu_ptr(&c->o[0]);
  const char *xp = ag__cpu_ptr(&c->o[1]);
  size_t sy = ag__cpu_dtsize(dy) * (size_t)n, sx = ag__cpu_dtsize(dx) * (size_t)n;
  const bool dbl = dy == AG_F64, hw = present(c, 2), hb = present(c, 3);
  char *buf = row_scratch(r, 4, dbl ? 8 : 4);
  if (!buf) return;
  const size_t esz = dbl ? 8 : 4;
  const void *w = NULL, *bias = NULL;
  if (dbl) {
    if (hw) w = rowin_d(c->o[2].dtype, ag__cpu_ptr(&c->o[2]), n, (double *)(buf + 2 * n * esz));
    if (hb) bias = rowin_d(c->o[3].dtype, ag__cpu_ptr(&c->o[3]), n, (double *)(buf + 3 * n * esz));
  } else {
    if (hw) w = rowin_f(c->o[2].dtype, ag__cpu_ptr(&c->o[2]), n, (float *)(buf + 2 * n * esz));
    if (hb) bias = rowin_f(c->o[3].dtype, ag__cpu_ptr(&c->o[3]), n, (float *)(buf + 3 * n * esz));
  }
  for (int64_t i = a; i < b; i++) {
    /* Statistics leave the row in double; stored in the dtype of o4/o5 (f64
     * for f64 x, so the f64 backward reads them unrounded). */
    double mean, rstd;
    if (dbl) {
      const double *x = rowin_d(dx, xp + i * sx, n, (double *)buf);
      double *y = rowdst_d(dy, yp + i * sy, (double *)buf + n);
      layernorm_row_d(y, x, w, bias, n, c->s[0], &mean, &rstd);
      rowout_d(dy, yp + i * sy, n, y);
    } else {
      const float *x = rowin_f(dx, xp + i * sx, n, (float *)buf);
      float *y = rowdst_f(dy, yp + i * sy, (float *)buf + n);
      FV(layernorm_row_f)(y, x, w, bias, n, c->s[0], &mean, &rstd);
      rowout_f(dy, yp + i * sy, n, y);
    }
    if (present(c, 4)) store_d(c->o[4].dtype, ag__cpu_ptr(&c->o[4]) + (size_t)i * ag__cpu_dtsize(c->o[4].dtype), 1, 1, &mean);
    if (present(c, 5)) store_d(c->o[5].dtype, ag__cpu_ptr(&c->o[5]) + (size_t)i * ag__cpu_dtsize(c->o[5].dtype), 1, 1, &rstd);
  }
  free(buf);
}

static void layernorm_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  char *p0 = ag__cpu_ptr(&c->o[0]);
  const char *p1 = ag__cpu_ptr(&c->o[1]), *p2 = ag__cpu_ptr(&c->o[2]);
  size_t s0 = ag__cpu_dtsize(d0) * (size_t)n, s1 = ag__cpu_dtsize(d1) * (size_t)n,
         s2 = ag__cpu_dtsize(d2) * (size_t)n;
  const bool dbl = d0 == AG_F64, hw = present(c, 5);
  const size_t esz = dbl ? 8 : 4;
  char *buf = row_scratch(r, 4, esz);
  if (!buf) return;
  const void *w = NULL;
  if (hw)
    w = dbl ? (const void *)rowin_d(c->o[5].dtype, ag__cpu_ptr(&c->o[5]), n, (double *)(buf + 3 * n * esz))
            : (const void *)rowin_f(c->o[5].dtype, ag__cpu_ptr(&c->o[5]), n, (float *)(buf + 3 * n * esz));
  for (int64_t i = a; i < b; i++) {
    double mean = scalar_at(&c->o[3], i), rstd = scalar_at(&c->o[4], i);
    if (dbl) {
      const double *dy = rowin_d(d1, p1 + i * s1, n, (double *)buf);
      const double *x = rowin_d(d2, p2 + i * s2, n, (double *)buf + n);
      double *dx = rowdst_d(d0, p0 + i * s0, (double *)buf + 2 * n);
      layernorm_bwd_row_d(dx, dy, x, w, n, mean, rstd);
      rowout_d(d0, p0 + i * s0, n, dx);
    } else {
      const float *dy = rowin_f(d1, p1 + i * s1, n, (float *)buf);
      const float *x = rowin_f(d2, p2 + i * s2, n, (float *)buf + n);
      float *dx = rowdst_f(d0, p0 + i * s0, (float *)buf + 2 * n);
      FV(layernorm_bwd_row_f)(dx, dy, x, w, n, (float)mean, (float)rstd);
      rowout_f(d0, p0 + i * s0, n, dx);
    }
  }
  free(buf);
}

/* dw = sum_rows dy * xhat, db = sum_rows dy, in f64, overwriting t[0], t[1]. */
static ag_status layernorm_bwd_params(const ag_kernel_call *c, int64_t N, int64_t D) {
  double *acc = calloc((size_t)(4 * (D > 0 ? D : 1)), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for weight gradients", c->name ? c->name : "layer_norm");
  double *dw = acc, *db = acc + D, *dy = acc + 2 * D, *x = acc + 3 * D;
  const ag_dtype d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  for (int64_t i = 0; i < N; i++) {
    double mean = scalar_at(&c->o[3], i), rstd = scalar_at(&c->o[4], i);
    load_d(d1, ag__cpu_ptr(&c->o[1]) + (size_t)(i * D) * ag__cpu_dtsize(d1), 1, D, dy);
    load_d(d2, ag__cpu_ptr(&c->o[2]) + (size_t)(i * D) * ag__cpu_dtsize(d2), 1, D, x);
    for (int64_t j = 0; j < D; j++) {
      dw[j] += dy[j] * ((x[j] - mean) * rstd);
      db[j] += dy[j];
    }
  }
  const ag_kmulti *m = c->multi;
  for (int k = 0; k < 2 && k < m->count; k++)
    if (m->t[k].base)
      store_d(m->t[k].dtype, (char *)m->t[k].base + m->t[k].offset, 1, D, k == 0 ? dw : db);
  free(acc);
  return AG_OK;
}

/* RMS norm rows in double for every dtype (the CPU is the reference):
 * rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd * w. */
static void rmsnorm_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype dy = c->o[0].dtype, dx = c->o[1].dtype;
  char *yp = ag__cpu_ptr(&c->o[0]);
  const char *xp = ag__cpu_ptr(&c->o[1]);
  double *buf = row_scratch(r, 2, 8);
  if (!buf) return;
  double *x = buf, *w = buf + n;
  if (present(c, 2)) load_d(c->o[2].dtype, ag__cpu_ptr(&c->o[2]), 1, n, w);
  else
    for (int64_t j = 0; j < n; j++) w[j] = 1;
  for (int64_t i = a; i < b; i++) {
    load_d(dx, xp + (size_t)(i * n) * ag__cpu_dtsize(dx), 1, n, x);
    double ss = 0;
    for (int64_t j = 0; j < n; j++) ss += x[j] * x[j];
    double rstd = 1 / sqrt(ss / (double)n + c->s[0]);
    for (int64_t j = 0; j < n; j++) x[j] = x[j] * rstd * w[j];
    store_d(dy, yp + (size_t)(i * n) * ag__cpu_dtsize(dy), 1, n, x);
    if (present(c, 3)) store_d(c->o[3].dtype, ag__cpu_ptr(&c->o[3]) + (size_t)i * ag__cpu_dtsize(c->o[3].dtype), 1, 1, &rstd);
  }
  free(buf);
}

/* dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * w, in double. */
static void rmsnorm_bwd_rows(void *ctx, int64_t a, int64_t b) {
  rowctx *r = ctx;
  const ag_kernel_call *c = r->c;
  const int64_t n = r->cols;
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  double *buf = row_scratch(r, 3, 8);
  if (!buf) return;
  double *g = buf, *x = buf + n, *w = buf + 2 * n;
  if (present(c, 4)) load_d(c->o[4].dtype, ag__cpu_ptr(&c->o[4]), 1, n, w);
  else
    for (int64_t j = 0; j < n; j++) w[j] = 1;
  for (int64_t i = a; i < b; i++) {
    double rstd = scalar_at(&c->o[3], i), s = 0;
    load_d(d1, ag__cpu_ptr(&c->o[1]) + (size_t)(i * n) * ag__cpu_dtsize(d1), 1, n, g);
    load_d(d2, ag__cpu_ptr(&c->o[2]) + (size_t)(i * n) * ag__cpu_dtsize(d2), 1, n, x);
    for (int64_t j = 0; j < n; j++) {
      g[j] *= w[j];
      s += g[j] * x[j];
    }
    s = s / (double)n * rstd * rstd;
    for (int64_t j = 0; j < n; j++) g[j] = rstd * (g[j] - x[j] * s);
    store_d(d0, ag__cpu_ptr(&c->o[0]) + (size_t)(i * n) * ag__cpu_dtsize(d0), 1, n, g);
  }
  free(buf);
}

/* dw = sum over rows of dy * x * rstd, in f64 and row order, into t[0]. */
static ag_status rmsnorm_bwd_weight(const ag_kernel_call *c, int64_t N, int64_t D) {
  double *acc = calloc((size_t)(3 * (D > 0 ? D : 1)), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for weight gradients", c->name ? c->name : "rms_norm");
  double *dw = acc, *dy = acc + D, *x = acc + 2 * D;
  const ag_dtype d1 = c->o[1].dtype, d2 = c->o[2].dtype;
  for (int64_t i = 0; i < N; i++) {
    double rstd = scalar_at(&c->o[3], i);
    load_d(d1, ag__cpu_ptr(&c->o[1]) + (size_t)(i * D) * ag__cpu_dtsize(d1), 1, D, dy);
    load_d(d2, ag__cpu_ptr(&c->o[2]) + (size_t)(i * D) * ag__cpu_dtsize(d2), 1, D, x);
    for (int64_t j = 0; j < D; j++) dw[j] += dy[j] * x[j] * rstd;
  }
  const ag_kmulti *m = c->multi;
  if (m->t[0].base) store_d(m->t[0].dtype, (char *)m->t[0].base + m->t[0].offset, 1, D, dw);
  free(acc);
  return AG_OK;
}

/* var/std over the middle dim of [outer, r, inner], two passes in double. */
static ag_status k_var(const ag_kernel_call *c) {
  const int64_t O = c->i[0], R = c->i[1], In = c->i[2];
  const ag_dtype dx = c->o[1].dtype, dy = c->o[0].dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  double *v = malloc((size_t)(R > 0 ? R : 1) * sizeof(double));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", c->name ? c->name : "var");
  double den = (double)R - c->s[0];
  if (den < 0) den = 0;
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)(o * R * In + i) * ex, In, R, v);
      double m = 0, ss = 0;
      for (int64_t k = 0; k < R; k++) m += v[k];
      m /= (double)R;
      for (int64_t k = 0; k < R; k++) ss += (v[k] - m) * (v[k] - m);
      double r = ss / den;
      if (c->sub == 1) r = sqrt(r);
      store_d(dy, ag__cpu_ptr(&c->o[0]) + (size_t)(o * In + i) * ey, 1, 1, &r);
    }
  free(v);
  return AG_OK;
}

/* Prefix (sub 0) or suffix (sub 1) sums along the middle dim, in double. */
static ag_status k_cumsum(const ag_kernel_call *c) {
  const int64_t O = c->i[0], R = c->i[1], In = c->i[2];
  const ag_dtype dx = c->o[1].dtype, dy = c->o[0].dtype;
  const size_t ex = ag__cpu_dtsize(dx), ey = ag__cpu_dtsize(dy);
  double *v = malloc((size_t)(R > 0 ? R : 1) * sizeof(double));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", c->name ? c->name : "cumsum");
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)(o * R * In + i) * ex, In, R, v);
      double s = 0;
      if (c->sub == 1)
        for (int64_t k = R - 1; k >= 0; k--) v[k] = s += v[k];
      else
        for (int64_t k = 0; k < R; k++) v[k] = s += v[k];
      store_d(dy, ag__cpu_ptr(&c->o[0]) + (size_t)(o * R * In + i) * ey, In, R, v);
    }
  free(v);
  return AG_OK;
}

/* Index (o, k, i) of a gather's 3-d index operand, strides in elements. */
static int64_t gidx(const ag_koperand *ix, int64_t o, int64_t k, int64_t i) {
  return idx_at(ix, o * ix->strides[0] + k * ix->strides[1] + i * ix->strides[2]);
}

static void k_gather(const ag_kernel_call *c, ag_kernel_error *err) {
  const int64_t O = c->i[0], K = c->i[1], In = c->i[2], X = c->i[3];
  const size_t es = ag__cpu_dtsize(c->o[0].dtype);
  char *out = ag__cpu_ptr(&c->o[0]);
  const char *x = ag__cpu_ptr(&c->o[1]);
  for (int64_t o = 0; o < O; o++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        int64_t j = gidx(&c->o[2], o, k, i);
        char *dst = out + (size_t)((o * K + k) * In + i) * es;
        if (j < 0 || j >= X) {
          kerr(err, AG_K_GATHER, j, X);
          memset(dst, 0, es);
        } else {
          memcpy(dst, x + (size_t)((o * X + j) * In + i) * es, es);
        }
      }
}

/* Scatter-add in double, in order of k, into a zeroed dx. */
static ag_status k_gather_bwd(const ag_kernel_call *c) {
  const int64_t O = c->i[0], K = c->i[1], In = c->i[2], X = c->i[3];
  const ag_dtype d0 = c->o[0].dtype, d1 = c->o[1].dtype;
  double *acc = calloc((size_t)(X * In > 0 ? X * In : 1), sizeof(double));
  if (!acc) return ag_error_set(AG_ERR_OOM, "%s: no memory for the gradient", c->name ? c->name : "gather");
  const char *g = ag__cpu_ptr(&c->o[1]);
  for (int64_t o = 0; o < O; o++) {
    memset(acc, 0, (size_t)(X * In) * sizeof(double));
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < In; i++) {
        int64_t j = gidx(&c->o[2], o, k, i);
        if (j < 0 || j >= X) continue;
        double v;
        load_d(d1, g + (size_t)((o * K + k) * In + i) * ag__cpu_dtsize(d1), 1, 1, &v);
        acc[j * In + i] += v;
      }
    store_d(d0, ag__cpu_ptr(&c->o[0]) + (size_t)(o * X * In) * ag__cpu_dtsize(d0), 1, X * In, acc);
  }
  free(acc);
  return AG_OK;
}

/* topk: (value, index) pairs sorted by torch's order, NaN above numbers. */
typedef struct topk_item {
  double v;
  int64_t i;
} topk_item;
static int topk_before(const topk_item *a, const topk_item *b, bool largest) {
  bool an = isnan(a->v), bn = isnan(b->v);
  if (an != bn) return largest ? an : bn;
  if (!an && a->v != b->v) return largest ? a->v > b->v : a->v < b->v;
  return a->i < b->i;
}
static int topk_cmp_large(const void *x, const void *y) {
  return topk_before(x, y, true) ? -1 : topk_before(y, x, true) ? 1 : 0;
}
static int topk_cmp_small(const void *x, const void *y) {
  return topk_before(x, y, false) ? -1 : topk_before(y, x, false) ? 1 : 0;
}
static ag_status k_topk(const ag_kernel_call *c) {
  const int64_t O = c->i[0], R = c->i[1], In = c->i[2], K = c->i[3];
  const ag_dtype dx = c->o[1].dtype, dv = c->o[0].dtype;
  double *v = malloc((size_t)(R > 0 ? R : 1) * (sizeof(double) + sizeof(topk_item)));
  if (!v) return ag_error_set(AG_ERR_OOM, "%s: no memory for a line", c->name ? c->name : "topk");
  topk_item *it = (topk_item *)(v + (R > 0 ? R : 1));
  int64_t *ip = (int64_t *)ag__cpu_ptr(&c->o[2]);
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      load_d(dx, ag__cpu_ptr(&c->o[1]) + (size_t)(o * R * In + i) * ag__cpu_dtsize(dx), In, R, v);
      for (int64_t j = 0; j < R; j++) it[j] = (topk_item){v[j], j};
      qsort(it, (size_t)R, sizeof *it, c->sub == 1 ? topk_cmp_small : topk_cmp_large);
      for (int64_t k = 0; k < K; k++) {
        int64_t p = (o * K + k) * In + i;
        store_d(dv, ag__cpu_ptr(&c->o[0]) + (size_t)p * ag__cpu_dtsize(dv), 1, 1, &it[k].v);
        ip[p] = it[k].i;
      }
    }
  free(v);
  return AG_OK;
}

static int64_t pick(int64_t given, int64_t fallback) { return given > 0 ? given : fallback; }

static ag_status run_rows(const ag_kernel_call *c, int64_t rows, int64_t cols, range_fn fn,
                          ag_kernel_error *err, bool ce) {
  rowctx r = {.c = c, .rows = rows, .cols = cols};
  atomic_init(&r.oom, false);
  if (ce) ce_prescan(&r, c->op);
  par_for(rows, rows * cols * 4, fn, &r);
  if (r.err.code) kerr(err, (ag_kop)r.err.kop, r.err.index, r.err.limit);
  if (atomic_load(&r.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for row scratch", c->name ? c->name : "cpu kernel");
  return AG_OK;
}

/* ---- embedding ---- */

static void k_embedding(const ag_kernel_call *c, ag_kernel_error *err) {
  int64_t N = pick(c->i[0], c->o[2].ndim ? c->o[2].shape[0] : 1);
  int64_t D = pick(c->i[1], c->o[1].ndim > 1 ? c->o[1].shape[1] : 1);
  int64_t V = pick(c->i[2], c->o[1].ndim ? c->o[1].shape[0] : 0);
  size_t row = (size_t)D * ag__cpu_dtsize(c->o[0].dtype);
  char *out = ag__cpu_ptr(&c->o[0]);
  const char *tab = ag__cpu_ptr(&c->o[1]);
  for (int64_t i = 0; i < N; i++) {
    int64_t v = idx_at(&c->o[2], i);
    if (v < 0 || v >= V) {
      kerr(err, AG_K_EMBEDDING, v, V);
      memset(out + (size_t)i * row, 0, row);
    } else {
      memcpy(out + (size_t)i * row, tab + (size_t)v * row, row);
    }
  }
}

static void k_embedding_bwd(const ag_kernel_call *c, ag_kernel_error *err) {
  int64_t N = pick(c->i[0], c->o[2].ndim ? c->o[2].shape[0] : 1);
  int64_t D = pick(c->i[1], c->o[0].ndim > 1 ? c->o[0].shape[1] : 1);
  int64_t V = pick(c->i[2], c->o[0].ndim ? c->o[0].shape[0] : 0);
  const ag_dtype dt = c->o[0].dtype, dd = c->o[1].dtype;
  char *tab = ag__cpu_ptr(&c->o[0]);
  const char *dout = ag__cpu_ptr(&c->o[1]);
  double g[TILE];
  for (int64_t i = 0; i < N; i++) {
    int64_t v = idx_at(&c->o[2], i);
    if (v < 0 || v >= V) {
      kerr(err, AG_K_EMBEDDING_BWD, v, V);
      continue;
    }
    for (int64_t j = 0; j < D; j += TILE) {
      int64_t m = D - j < TILE ? D - j : TILE;
      load_d(dd, dout + (size_t)(i * D + j) * ag__cpu_dtsize(dd), 1, m, g);
      if (dt == AG_F64) {
        double *t = (double *)tab + v * D + j;
        for (int64_t k = 0; k < m; k++) t[k] += g[k];
      } else if (dt == AG_F32) {
        float *t = (float *)tab + v * D + j;
        for (int64_t k = 0; k < m; k++) t[k] += (float)g[k];
      } else {
        double cur[TILE];
        char *t = tab + (size_t)(v * D + j) * ag__cpu_dtsize(dt);
        load_d(dt, t, 1, m, cur);
        for (int64_t k = 0; k < m; k++) cur[k] += g[k];
        store_d(dt, t, 1, m, cur);
      }
    }
  }
}

/* ---- dispatch ---- */

ag_status ag__cpu_run(const ag_kernel_call *c, ag_kernel_error *err) {
  switch (c->op) {
    case AG_K_FILL: ew_run(c, EW_FILL, 1); return AG_OK;
    case AG_K_ARANGE: k_arange(c); return AG_OK;
    case AG_K_RAND_UNIFORM:
    case AG_K_RAND_NORMAL: return ag__cpu_random(c);
    case AG_K_UNARY: ew_run(c, EW_UNARY, 2); return AG_OK;
    case AG_K_BINARY: ew_run(c, EW_BINARY, 3); return AG_OK;
    case AG_K_WHERE: ew_run(c, EW_WHERE, 4); return AG_OK;
    case AG_K_REDUCE: return ag__cpu_reduce(c);
    case AG_K_MATMUL: return ag__cpu_matmul(c);
    case AG_K_SOFTMAX: return run_rows(c, c->i[0], c->i[1], softmax_rows, err, false);
    case AG_K_SOFTMAX_BWD:
      return run_rows(c, pick(c->i[0], c->o[0].shape[0]), pick(c->i[1], c->o[0].shape[1]),
                      softmax_bwd_rows, err, false);
    case AG_K_CROSS_ENTROPY: return run_rows(c, c->i[0], c->i[1], ce_rows, err, true);
    case AG_K_CROSS_ENTROPY_BWD:
      return run_rows(c, pick(c->i[0], c->o[1].shape[0]), pick(c->i[1], c->o[1].shape[1]),
                      ce_bwd_rows, err, true);
    case AG_K_LAYERNORM: return run_rows(c, c->i[0], c->i[1], layernorm_rows, err, false);
    case AG_K_LAYERNORM_BWD: {
      int64_t N = pick(c->i[0], c->o[2].shape[0]), D = pick(c->i[1], c->o[2].shape[1]);
      ag_status st = run_rows(c, N, D, layernorm_bwd_rows, err, false);
      if (st == AG_OK && c->multi && c->multi->count > 0) st = layernorm_bwd_params(c, N, D);
      return st;
    }
    case AG_K_RMSNORM: return run_rows(c, c->i[0], c->i[1], rmsnorm_rows, err, false);
    case AG_K_RMSNORM_BWD: {
      int64_t N = c->i[0], D = c->i[1];
      ag_status st = run_rows(c, N, D, rmsnorm_bwd_rows, err, false);
      if (st == AG_OK && c->multi && c->multi->count > 0) st = rmsnorm_bwd_weight(c, N, D);
      return st;
    }
    case AG_K_VAR: return k_var(c);
    case AG_K_CUMSUM: return k_cumsum(c);
    case AG_K_GATHER: k_gather(c, err); return AG_OK;
    case AG_K_GATHER_BWD: return k_gather_bwd(c);
    case AG_K_TOPK: return k_topk(c);
    case AG_K_EMBEDDING: k_embedding(c, err); return AG_OK;
    case AG_K_EMBEDDING_BWD: k_embedding_bwd(c, err); return AG_OK;
    case AG_K_DROPOUT: return ag__cpu_random(c);
    case AG_K_ADAMW:
    case AG_K_SGD:
    case AG_K_NONFINITE_CHECK:
    case AG_K_SUMSQ: return ag__cpu_multi(c);
    case AG_K_CONV2D:
    case AG_K_CONV2D_BWD_INPUT:
    case AG_K_CONV2D_BWD_WEIGHT:
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD:
    case AG_K_BN_STATS:
    case AG_K_BN_APPLY: return ag__cpu_vision(c);
    default: break;
  }
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s: cpu backend has no kernel for op %d",
                      c->name ? c->name : "launch", (int)c->op);
}

bool ag__cpu_supports(ag_kop op, int sub, ag_dtype dt) {
  if ((unsigned)dt >= AG_DTYPE_COUNT) return false;
  const bool fl = !is_int(dt);
  switch (op) {
    case AG_K_FILL:
    case AG_K_ARANGE:
    case AG_K_WHERE: return true;
    case AG_K_EMBEDDING: return sub == 0 || sub == 1; /* 1: i64 indices */
    case AG_K_RAND_UNIFORM:
    case AG_K_RAND_NORMAL:
    case AG_K_MATMUL:
    case AG_K_CROSS_ENTROPY:
    case AG_K_CROSS_ENTROPY_BWD: return fl && (sub == 0 || sub == 1);
    case AG_K_LAYERNORM:
    case AG_K_LAYERNORM_BWD:
    case AG_K_EMBEDDING_BWD: return fl && (sub == 0 || sub == 1);
    case AG_K_RMSNORM:
    case AG_K_RMSNORM_BWD: return fl && sub == 0;
    case AG_K_VAR:
    case AG_K_CUMSUM: return fl && (sub == 0 || sub == 1);
    case AG_K_GATHER: /* sub 1: i64 index */
    case AG_K_GATHER_BWD: return fl && (sub == 0 || sub == 1);
    case AG_K_TOPK: return fl && (sub == 0 || sub == 1); /* sub 1: smallest */
    case AG_K_DROPOUT:
    case AG_K_SUMSQ: return fl;
    /* every table entry in every floating dtype; INT entries in every
     * integer dtype too */
    case AG_K_UNARY: {
      const ag_unary_info *u = ag_unary_info_of(sub);
      return u && (fl || u->ints == AG_OPT_INT);
    }
    case AG_K_BINARY: {
      const ag_binary_info *b = ag_binary_info_of(sub);
      return b && (fl || b->ints == AG_OPT_INT);
    }
    /* sums of bool/u8 are done in i64 by the core */
    case AG_K_REDUCE: return sub >= 0 && sub < AG_REDUCE_COUNT && !(sub == AG_R_SUM && (dt == AG_BOOL || dt == AG_U8));
    case AG_K_SOFTMAX:
    case AG_K_SOFTMAX_BWD: return fl && (sub == 0 || sub == 1);
    case AG_K_ADAMW:
    case AG_K_SGD: return dt == AG_F32;
    case AG_K_NONFINITE_CHECK: return dt == AG_F32 || dt == AG_F16 || dt == AG_BF16;
    case AG_K_CONV2D:
    case AG_K_CONV2D_BWD_INPUT:
    case AG_K_CONV2D_BWD_WEIGHT: return dt == AG_F32 || dt == AG_F64;
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return (dt == AG_F32 || dt == AG_F64) && sub >= 0 && sub < AG_POOL_OP_COUNT;
    case AG_K_BN_STATS:
    case AG_K_BN_APPLY: return (dt == AG_F32 || dt == AG_F64) && (sub == 0 || sub == 1);
    default: return false;
  }
}
