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
#include "cpu_portable.h"
#include "cpu_tile.h"

/* ---- multi-tensor kernels ---- */

/* An optional f32 scalar operand (inv_scale, found_inf), dflt when absent. */
static float opt_scalar(const ag_koperand *o, float dflt) {
  if (!o) return dflt;
  return (float)scalar_at(o, 0);
}

/* Tensor nm of group g of an optimizer call's multi list, as f32. */
#define MT_PTR(a, g, nm) ((float *)entry_ptr(&AGK_MULTI(a, g, nm)))

/* One group of an optimizer call: adamw or sgd set. */
typedef struct mctx {
  const ag_k_adamw *adamw;
  const ag_k_sgd *sgd;
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
  const ag_k_adamw *a = x->adamw;
  return (adamw_k){.b1 = (float)a->beta1, .b2 = (float)a->beta2, .eps = (float)a->eps,
                   .decay = (float)(1.0 - a->lr * a->weight_decay), .step = (float)(a->lr / a->bias_correction1),
                   .rbc2 = (float)(1.0 / sqrt(a->bias_correction2)), .inv = x->inv};
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
  float *p = MT_PTR(x->adamw, x->g, param), *g = MT_PTR(x->adamw, x->g, grad);
  float *ea = MT_PTR(x->adamw, x->g, exp_avg), *es = MT_PTR(x->adamw, x->g, exp_avg_sq);
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
    const ag_k_sgd *k = x->sgd;                                                                  \
    float *restrict p = MT_PTR(k, x->g, param);                                                  \
    const float *restrict g = MT_PTR(k, x->g, grad);                                             \
    float *restrict buf =                                                                        \
        AGK_MULTI(k, x->g, momentum_buffer).base ? MT_PTR(k, x->g, momentum_buffer) : NULL;      \
    const float lr = (float)k->lr, mom = (float)k->momentum, damp = (float)k->dampening;         \
    const float wd = (float)k->weight_decay;                                                     \
    const bool nesterov = k->nesterov != 0, first = k->first_step != 0;                          \
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

/* found_inf != 0 skips the step; each group's update split over its
 * elements. */
ag_status cpu_k_adamw(ag_kernel_error *err, const ag_k_adamw *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_adamw(a);
  (void)err;
  if (opt_scalar(a->found_inf, 0.0f) != 0) return AG_OK;
  mctx x = {.adamw = a, .inv = opt_scalar(a->inv_scale, 1.0f)};
  for (x.g = 0; x.g < AGK_MULTI_GROUPS(a); x.g++) {
    int64_t n = AGK_MULTI(a, x.g, param).numel;
    ag__cpu_par_for(n, n * 8, adamw_range, &x);
  }
  return AG_OK;
}

ag_status cpu_k_sgd(ag_kernel_error *err, const ag_k_sgd *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_sgd(a);
  (void)err;
  if (opt_scalar(a->found_inf, 0.0f) != 0) return AG_OK;
  mctx x = {.sgd = a, .inv = opt_scalar(a->inv_scale, 1.0f)};
  for (x.g = 0; x.g < AGK_MULTI_GROUPS(a); x.g++) {
    int64_t n = AGK_MULTI(a, x.g, param).numel;
    ag__cpu_par_for(n, n * 8, sgd_range, &x);
  }
  return AG_OK;
}

ag_status cpu_k_nonfinite_check(ag_kernel_error *err, const ag_k_nonfinite_check *a) {
  (void)err;
  const float inv = opt_scalar(a->inv_scale, 1.0f);
  bool found = false;
  float buf[TILE];
  for (int k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    const ag_kmulti_entry *e = &AGK_MULTI(a, k, x);
    const ag_dtype dt = e->dtype;
    const size_t sz = ag__cpu_dtsize(dt);
    char *base = entry_ptr(e);
    if (dt == AG_F32) { /* in place, in loops the compiler vectorises */
      float *p = (float *)base;
      const int64_t n = e->numel;
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
    if (dt == AG_F64) { /* in place in double: no rounding through f32 */
      double *p = (double *)base;
      for (int64_t j = 0; j < e->numel; j++) found |= !isfinite(p[j]);
      if (inv != 1.0f)
        for (int64_t j = 0; j < e->numel; j++) p[j] *= (double)inv;
      continue;
    }
    for (int64_t i = 0; i < e->numel; i += TILE) {
      int64_t n = e->numel - i < TILE ? e->numel - i : TILE;
      char *p = base + (size_t)i * sz;
      load_f(dt, p, 1, n, buf);
      for (int64_t j = 0; j < n; j++) found |= !isfinite(buf[j]);
      if (inv != 1.0f) {
        for (int64_t j = 0; j < n; j++) buf[j] *= inv;
        store_f(dt, p, 1, n, buf);
      }
    }
  }
  if (found && a->found_inf->base) {
    float one = 1.0f;
    store_f(a->found_inf->dtype, ag__cpu_ptr(a->found_inf), 1, 1, &one);
  }
  return AG_OK;
}

/* Sum of squares in double, in SUMSQ_LANES interleaved partial sums (lane
 * j takes elements j, j + LANES, ...; the lanes are added in order at the
 * end): a fixed order, so the same on every run, and no chain of dependent
 * adds, so it runs at memory speed. */
#define SUMSQ_LANES 8
ag_status cpu_k_sumsq(ag_kernel_error *err, const ag_k_sumsq *a) {
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_sumsq(a);
  (void)err;
  double lane[SUMSQ_LANES] = {0}, buf[TILE];
  for (int k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    const ag_kmulti_entry *e = &AGK_MULTI(a, k, x);
    const ag_dtype dt = e->dtype;
    const char *base = entry_ptr(e);
    for (int64_t i = 0; i < e->numel; i += TILE) {
      int64_t n = e->numel - i < TILE ? e->numel - i : TILE;
      load_d(dt, base + (size_t)i * ag__cpu_dtsize(dt), 1, n, buf);
      int64_t j = 0;
      for (; j + SUMSQ_LANES <= n; j += SUMSQ_LANES)
        for (int l = 0; l < SUMSQ_LANES; l++) lane[l] += buf[j + l] * buf[j + l];
      for (int l = 0; j < n; j++, l++) lane[l] += buf[j] * buf[j];
    }
  }
  double total = 0;
  for (int l = 0; l < SUMSQ_LANES; l++) total += lane[l];
  store_at(a->out, 0, total);
  return AG_OK;
}
