/* CPU multi-tensor kernels: the fused optimizer updates (AdamW, SGD with
 * momentum) over every tensor of a group in one launch, and the two passes
 * over all gradients that the grad scaler and gradient clipping use
 * (non-finite check with unscaling, sum of squares). */
#if defined(__GNUC__) && !defined(__clang__)
/* Compiled as cpu_kernels.c is (see there): -O3's vectoriser, no trapping math. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "cpu_backend.h"
#include "cpu_tile.h"

/* ---- multi-tensor kernels ---- */

static float opt_scalar(const ag_kernel_call *c, int k, float dflt) {
  if (!present(c, k)) return dflt;
  return (float)scalar_at(&c->o[k], 0);
}

#define MT_PTR(m, k) ((float *)((char *)(m)->t[k].base + (m)->t[k].offset))

typedef struct mctx {
  const ag_kernel_call *c;
  int g; /* group */
  float inv;
} mctx;

/* AdamW: p = p*decay - step*m / (sqrt(v)*rbc2 + eps). The update streams
 * 5 floats in and 3 out per element, so it is bound by memory bandwidth once
 * vectorised; the AVX2 build uses the vector sqrt (no errno path) and FMA. */
typedef struct adamw_k {
  float b1, b2, eps, decay, step, rbc2, inv;
} adamw_k;

static adamw_k adamw_consts(const mctx *x) {
  const ag_kernel_call *c = x->c;
  return (adamw_k){.b1 = (float)c->s[1], .b2 = (float)c->s[2], .eps = (float)c->s[3],
                   .decay = (float)(1.0 - c->s[0] * c->s[4]), .step = (float)(c->s[0] / c->s[5]),
                   .rbc2 = (float)(1.0 / sqrt(c->s[6])), .inv = x->inv};
}

static void adamw_scalar(const adamw_k *k, float *p, const float *g, float *ea, float *es, int64_t a, int64_t b) {
  for (int64_t i = a; i < b; i++) {
    float gi = g[i] * k->inv;
    float mi = k->b1 * ea[i] + (1.0f - k->b1) * gi;
    float vi = k->b2 * es[i] + (1.0f - k->b2) * gi * gi;
    ea[i] = mi;
    es[i] = vi;
    p[i] = p[i] * k->decay - k->step * mi / (__builtin_sqrtf(vi) * k->rbc2 + k->eps);
  }
}

#if defined(AG_X86)
#include <immintrin.h>
/* The AVX2+FMA update runs where the CPU has both (the build targets
 * baseline x86-64), as cpu_kernels.c chooses its AVX2 bodies. */
static inline bool have_avx2(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
__attribute__((target("avx2,fma"))) static void adamw_avx2(const adamw_k *k, float *p, const float *g, float *ea,
                                                           float *es, int64_t a, int64_t b) {
  const __m256 b1 = _mm256_set1_ps(k->b1), c1 = _mm256_set1_ps(1.0f - k->b1);
  const __m256 b2 = _mm256_set1_ps(k->b2), c2 = _mm256_set1_ps(1.0f - k->b2);
  const __m256 eps = _mm256_set1_ps(k->eps), decay = _mm256_set1_ps(k->decay);
  const __m256 step = _mm256_set1_ps(k->step), rbc2 = _mm256_set1_ps(k->rbc2), inv = _mm256_set1_ps(k->inv);
  int64_t i = a;
  for (; i + 8 <= b; i += 8) {
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), inv);
    __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(ea + i), _mm256_mul_ps(c1, gi));
    __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(es + i), _mm256_mul_ps(_mm256_mul_ps(c2, gi), gi));
    _mm256_storeu_ps(ea + i, mi);
    _mm256_storeu_ps(es + i, vi);
    __m256 den = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), rbc2, eps);
    __m256 upd = _mm256_div_ps(_mm256_mul_ps(step, mi), den);
    _mm256_storeu_ps(p + i, _mm256_fmsub_ps(_mm256_loadu_ps(p + i), decay, upd));
  }
  adamw_scalar(k, p, g, ea, es, i, b);
}
#endif

static void adamw_range(void *ctx, int64_t a, int64_t b) {
  const mctx *x = ctx;
  const ag_kmulti *m = x->c->multi;
  float *p = MT_PTR(m, 4 * x->g), *g = MT_PTR(m, 4 * x->g + 1);
  float *ea = MT_PTR(m, 4 * x->g + 2), *es = MT_PTR(m, 4 * x->g + 3);
  const adamw_k k = adamw_consts(x);
#if defined(AG_X86)
  if (have_avx2()) {
    adamw_avx2(&k, p, g, ea, es, a, b);
    return;
  }
#endif
  adamw_scalar(&k, p, g, ea, es, a, b);
}

/* The SGD body is plain arithmetic the compiler vectorises; it is built
 * twice (baseline and AVX2+FMA) like the elementwise bodies. */
#define SGD_BODY(name, attr)                                                                     \
  attr static void name(const mctx *x, int64_t a, int64_t b) {                                   \
    const ag_kernel_call *c = x->c;                                                              \
    const ag_kmulti *m = c->multi;                                                               \
    float *restrict p = MT_PTR(m, 3 * x->g);                                                     \
    const float *restrict g = MT_PTR(m, 3 * x->g + 1);                                           \
    float *restrict buf = m->t[3 * x->g + 2].base ? MT_PTR(m, 3 * x->g + 2) : NULL;              \
    const float lr = (float)c->s[0], mom = (float)c->s[1], damp = (float)c->s[2];                \
    const float wd = (float)c->s[3];                                                             \
    const bool nesterov = c->s[4] != 0, first = c->s[5] != 0;                                    \
    const float inv = x->inv;                                                                    \
    if (!buf || mom == 0) {                                                                      \
      if (wd == 0)                                                                               \
        for (int64_t i = a; i < b; i++) p[i] -= lr * (g[i] * inv);                               \
      else                                                                                       \
        for (int64_t i = a; i < b; i++) p[i] -= lr * (g[i] * inv + wd * p[i]);                   \
      return;                                                                                    \
    }                                                                                            \
    for (int64_t i = a; i < b; i++) {                                                            \
      float d = wd == 0 ? g[i] * inv : g[i] * inv + wd * p[i];                                   \
      float bi = first ? d : mom * buf[i] + (1.0f - damp) * d;                                   \
      buf[i] = bi;                                                                               \
      p[i] -= lr * (nesterov ? d + mom * bi : bi);                                               \
    }                                                                                            \
  }
SGD_BODY(sgd_base, )
#if defined(AG_X86)
SGD_BODY(sgd_avx2, __attribute__((target("avx2,fma"))))
#endif

static void sgd_range(void *ctx, int64_t a, int64_t b) {
#if defined(AG_X86)
  if (have_avx2()) {
    sgd_avx2(ctx, a, b);
    return;
  }
#endif
  sgd_base(ctx, a, b);
}

static void k_optimizer(const ag_kernel_call *c) {
  if (opt_scalar(c, 1, 0.0f) != 0) return; /* found_inf: skip the step */
  const ag_kmulti *m = c->multi;
  if (!m) return;
  const int per = c->op == AG_K_ADAMW ? 4 : 3;
  mctx x = {.c = c, .inv = opt_scalar(c, 0, 1.0f)};
  for (x.g = 0; x.g * per + per - 1 < m->count; x.g++) {
    int64_t n = m->t[x.g * per].numel;
    ag__cpu_par_for(n, n * 8, c->op == AG_K_ADAMW ? adamw_range : sgd_range, &x);
  }
}

static void k_nonfinite(const ag_kernel_call *c) {
  const ag_kmulti *m = c->multi;
  if (!m) return;
  const float inv = opt_scalar(c, 1, 1.0f);
  bool found = false;
  float buf[TILE];
  for (int k = 0; k < m->count; k++) {
    const ag_dtype dt = m->t[k].dtype;
    const size_t sz = ag__cpu_dtsize(dt);
    char *base = (char *)m->t[k].base + m->t[k].offset;
    if (dt == AG_F32) { /* in place, in loops the compiler vectorises */
      float *p = (float *)base;
      const int64_t n = m->t[k].numel;
      uint32_t bad = 0;
      for (int64_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &p[j], sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u; /* inf or NaN */
      }
      found |= bad != 0;
      if (inv != 1.0f)
        for (int64_t j = 0; j < n; j++) p[j] *= inv;
      continue;
    }
    for (int64_t i = 0; i < m->t[k].numel; i += TILE) {
      int64_t n = m->t[k].numel - i < TILE ? m->t[k].numel - i : TILE;
      char *p = base + (size_t)i * sz;
      load_f(dt, p, 1, n, buf);
      for (int64_t j = 0; j < n; j++) found |= !isfinite(buf[j]);
      if (inv != 1.0f) {
        for (int64_t j = 0; j < n; j++) buf[j] *= inv;
        store_f(dt, p, 1, n, buf);
      }
    }
  }
  if (found && present(c, 0)) {
    float one = 1.0f;
    store_f(c->o[0].dtype, ag__cpu_ptr(&c->o[0]), 1, 1, &one);
  }
}

/* Sum of squares in double, in SUMSQ_LANES interleaved partial sums (lane
 * j takes elements j, j + LANES, ...; the lanes are added in order at the
 * end): a fixed order, so the same on every run, and no chain of dependent
 * adds, so it runs at memory speed. */
#define SUMSQ_LANES 8
static void k_sumsq(const ag_kernel_call *c) {
  const ag_kmulti *m = c->multi;
  double lane[SUMSQ_LANES] = {0}, buf[TILE];
  for (int k = 0; m && k < m->count; k++) {
    const ag_dtype dt = m->t[k].dtype;
    const char *base = (const char *)m->t[k].base + m->t[k].offset;
    for (int64_t i = 0; i < m->t[k].numel; i += TILE) {
      int64_t n = m->t[k].numel - i < TILE ? m->t[k].numel - i : TILE;
      load_d(dt, base + (size_t)i * ag__cpu_dtsize(dt), 1, n, buf);
      int64_t j = 0;
      for (; j + SUMSQ_LANES <= n; j += SUMSQ_LANES)
        for (int l = 0; l < SUMSQ_LANES; l++) lane[l] += buf[j + l] * buf[j + l];
      for (int l = 0; j < n; j++, l++) lane[l] += buf[j] * buf[j];
    }
  }
  double total = 0;
  for (int l = 0; l < SUMSQ_LANES; l++) total += lane[l];
  store_d(c->o[0].dtype, ag__cpu_ptr(&c->o[0]), 1, 1, &total);
}

ag_status ag__cpu_multi(const ag_kernel_call *c) {
  switch (c->op) {
    case AG_K_ADAMW:
    case AG_K_SGD: k_optimizer(c); return AG_OK;
    case AG_K_NONFINITE_CHECK: k_nonfinite(c); return AG_OK;
    case AG_K_SUMSQ: k_sumsq(c); return AG_OK;
    default:
      return ag_error_set(AG_ERR_INTERNAL, "%s: op %d is not a multi-tensor kernel", c->name ? c->name : "launch",
                          (int)c->op);
  }
}
