/* Portable numerics on the CPU (docs/numerics.md), part 1: the elementwise
 * table through pmath, the canonical sum S, REDUCE SUM and MATMUL, and the
 * device probe. Built with -ffp-contract=off and on the baseline ISA
 * (CMakeLists.txt): every a*b+c below is two roundings, vectorised or not,
 * so the vector loops give the bits of the scalar text. */
#if defined(__GNUC__) && !defined(__clang__)
/* O3 for the vectoriser; fp-contract repeated here because an optimize
 * pragma may reset it to the GNU default (fast). */
#pragma GCC optimize("O3", "no-trapping-math", "fp-contract=off")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_pmath.h"
#include "cpu_portable.h"
#include "cpu_tile.h"

/* ---- elementwise: the op table with the E_ vocabulary on pmath ---- */

#define E_K(c) ((float)(c))
#define E_EXP(v) agp_exp(v)
#define E_LOG(v) agp_log(v)
#define E_SQRT(v) agp_sqrt(v)
#define E_RSQRT(v) agp_rsqrt(v)
#define E_TANH(v) agp_tanh(v)
#define E_SIGMOID(v) agp_sigmoid(v)
#define E_ERF(v) agp_erf(v)
#define E_SIN(v) agp_sin(v)
#define E_COS(v) agp_cos(v)
#define E_LOG1P(v) agp_log1p(v)
#define E_EXPM1(v) agp_expm1(v)
#define E_FLOOR(v) agp_floor(v)
#define E_CEIL(v) agp_ceil(v)
#define E_RINT(v) agp_rint(v)
#define E_ABS(v) agp_abs(v)
#define E_POW(u, v) agp_pow(u, v)
#define E_ATAN2(u, v) agp_atan2(u, v)
#define E_FMOD(u, v) agp_fmod(u, v)
#define E_DIV(u, v) agp_div(u, v)

#define P_SAVE_NG(v)
#define P_SAVE_N(v)
#define P_SAVE_X(v) const float x = v;
#define P_SAVE_Y(v) const float y = v;
#define P_UNARY_CASE(ID, name, api, fwd, ...) \
  case AG_U_##ID:                              \
    for (int64_t i = 0; i < n; i++) {         \
      const float x = px[i];                   \
      o[i] = (fwd);                            \
    }                                          \
    break;
#define P_BINARY_CASE(ID, name, api, fwd, ...) \
  case AG_B_##ID:                               \
    for (int64_t i = 0; i < n; i++) {          \
      const float a = pa[i], b = pb[i];         \
      o[i] = (fwd);                             \
    }                                           \
    break;
#define P_BWD_CASE(ID, name, api, fwd, save, bwd, ...) \
  AG_OPT_IF(AG_OPT_HAS_BWD_##save)(case AG_B_##ID##_BWD: \
    for (int64_t i = 0; i < n; i++) {                  \
      const float g = pa[i];                            \
      P_SAVE_##save(pb[i])(void) g;                     \
      o[i] = (bwd);                                     \
    }                                                   \
    break;)
#define P_PART_CASE(ID, name, api, fwd, kind, grad, da, db, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)(case AG_B_##ID##_DA:              \
    for (int64_t i = 0; i < n; i++) {                            \
      const float a = pa[i], b = pb[i];                           \
      (void)a, (void)b;                                           \
      o[i] = (da);                                                \
    }                                                             \
    break;                                                        \
    case AG_B_##ID##_DB:                                          \
    for (int64_t i = 0; i < n; i++) {                            \
      const float a = pa[i], b = pb[i];                           \
      (void)a, (void)b;                                           \
      o[i] = (db);                                                \
    }                                                             \
    break;)

typedef float pv8 __attribute__((vector_size(32)));
#define PMR 4
#define PNR 16

#define PSUF(x) x##_base
#include "cpu_portable_ew.inc"
#undef PSUF
#if defined(AG_X86)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#define PSUF(x) x##_avx2
#include "cpu_portable_ew.inc"
#undef PSUF
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
/* AVX2 alone: the build never asks for FMA here, and the portable code is
 * not contracted in any case. ag__cpu_p_isa caps the choice (tests run
 * every width and compare bits). */
static bool p_avx2(void) { return ag__cpu_p_isa >= 1 && __builtin_cpu_supports("avx2"); }
static bool p_avx512(void) { return ag__cpu_p_isa >= 2 && __builtin_cpu_supports("avx512f"); }
#define PV(fn) (p_avx2() ? fn##_avx2 : fn##_base)

/* The GEMM micro-kernel for AVX-512F (no FMA): 8 x 32, sixteen zmm
 * accumulators. */
typedef float pv16 __attribute__((vector_size(64)));
__attribute__((target("avx512f"))) static void p_gemm_kernel_avx512(int64_t K, const float *ap, const float *bp,
                                                                    float *c) {
  pv16 acc[8][2];
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 2; j++) acc[i][j] = (pv16){0};
  for (int64_t k = 0; k < K; k++) {
    pv16 b0, b1;
    memcpy(&b0, bp + k * 32, 64);
    memcpy(&b1, bp + k * 32 + 16, 64);
    for (int i = 0; i < 8; i++) {
      const float av = ap[k * 8 + i];
      const pv16 a16 = {av, av, av, av, av, av, av, av, av, av, av, av, av, av, av, av};
      acc[i][0] = acc[i][0] + a16 * b0;
      acc[i][1] = acc[i][1] + a16 * b1;
    }
  }
  for (int i = 0; i < 8; i++) memcpy(c + i * 32, acc[i], sizeof acc[i]);
}
#else
#define PV(fn) fn##_base
static bool p_avx512(void) { return false; }
#endif

int ag__cpu_p_isa = 2;

bool ag__cpu_p_unary(int sub, float *o, const float *x, int64_t n, const double *s) {
  return PV(p_unary)(sub, o, x, n, s);
}

bool ag__cpu_p_binary(int sub, float *o, const float *a, const float *b, int64_t n, const double *s) {
  return PV(p_binary)(sub, o, a, b, n, s);
}

void ag__cpu_p_exp_shift(float *e, const float *x, float mx, int64_t n) { PV(p_exp_shift)(e, x, mx, n); }

void ag__cpu_p_div_by(float *e, float s, int64_t n) { PV(p_div_by)(e, s, n); }

float ag__cpu_p_row_max(const float *x, int64_t n) {
  const float m = PV(p_max_value)(x, n);
  if (m != 0.0f) return m;
  /* a zero maximum: the first zero of the row, as the sequential
   * m = x > m ? x : m from -inf keeps it */
  for (int64_t j = 0; j < n; j++)
    if (x[j] == 0.0f) return x[j];
  return m;
}

/* ---- the canonical sum S ---- */

#define PB 256

/* The fixed tree of one block: t[len..256) = +0, then stride halving. */
static inline float p_tree(float *t, int64_t len) {
  for (int64_t i = len; i < PB; i++) t[i] = 0.0f;
  for (int s = PB / 2; s >= 1; s >>= 1)
    for (int i = 0; i < s; i++) t[i] = t[i] + t[i + s];
  return t[0];
}

/* The levels above the first: level k holds the block sums of level k - 1
 * (len[k] values, ceil(len[k-1] / 256)); a level of one value is S. */
#define P_LEVELS 8
typedef struct psum {
  int64_t len[P_LEVELS + 1], seen[P_LEVELS + 1];
  int cnt[P_LEVELS + 1];
  float buf[P_LEVELS + 1][PB];
} psum;

static void psum_init(psum *s, int64_t n) {
  s->len[0] = n;
  for (int k = 1; k <= P_LEVELS; k++) {
    s->len[k] = (s->len[k - 1] + PB - 1) / PB;
    s->seen[k] = 0;
    s->cnt[k] = 0;
  }
}

/* Push v onto level k; true (with *out = S) once the top is reached. */
static bool psum_push(psum *s, int k, float v, float *out) {
  for (;;) {
    if (s->len[k] <= 1 || k == P_LEVELS) {
      *out = v;
      return true;
    }
    s->buf[k][s->cnt[k]++] = v;
    s->seen[k]++;
    if (s->cnt[k] < PB && s->seen[k] < s->len[k]) return false;
    v = p_tree(s->buf[k], s->cnt[k]);
    s->cnt[k] = 0;
    k++;
  }
}

float ag__cpu_psum(ag_dtype dt, const void *p, int64_t st, int64_t n) {
  if (n <= 0) return 0.0f;
  const size_t sz = ag__cpu_dtsize(dt);
  float t[PB];
  if (n <= PB) {
    load_f(dt, p, st, n, t);
    return p_tree(t, n);
  }
  psum s;
  psum_init(&s, n);
  float out = 0.0f;
  for (int64_t i = 0; i < n; i += PB) {
    int64_t m = n - i < PB ? n - i : PB;
    load_f(dt, (const char *)p + (size_t)(i * st) * sz, st, m, t);
    if (psum_push(&s, 1, p_tree(t, m), &out)) break;
  }
  return out;
}

float ag__cpu_psum_gen(int64_t n, ag_cpu_pfill_fn fill, const void *ctx) {
  if (n <= 0) return 0.0f;
  float t[PB];
  if (n <= PB) {
    fill(ctx, 0, n, t);
    return p_tree(t, n);
  }
  psum s;
  psum_init(&s, n);
  float out = 0.0f;
  for (int64_t i = 0; i < n; i += PB) {
    int64_t m = n - i < PB ? n - i : PB;
    fill(ctx, i, m, t);
    if (psum_push(&s, 1, p_tree(t, m), &out)) break;
  }
  return out;
}

/* S along r for W adjacent columns at once (lanes): values x[k*rs + j] for
 * k < r, j < w <= PW, rows of w contiguous values of dtype dt. */
#define PW AG_CPU_PLANES
#define PL_LEVELS 5 /* r < 256^5 */
typedef struct plsum {
  int64_t len[PL_LEVELS + 1], seen[PL_LEVELS + 1];
  int cnt[PL_LEVELS + 1];
  float buf[PL_LEVELS + 1][PB][PW];
} plsum;

static void pl_tree(float (*t)[PW], int64_t len, float *out) {
  for (int64_t i = len; i < PB; i++)
    for (int l = 0; l < PW; l++) t[i][l] = 0.0f;
  for (int s = PB / 2; s >= 1; s >>= 1)
    for (int i = 0; i < s; i++)
      for (int l = 0; l < PW; l++) t[i][l] = t[i][l] + t[i + s][l];
  for (int l = 0; l < PW; l++) out[l] = t[0][l];
}

static bool pl_push(plsum *s, int k, const float *v, float *out) {
  float tmp[PW];
  for (;;) {
    if (s->len[k] <= 1 || k == PL_LEVELS) {
      memcpy(out, v, sizeof tmp);
      return true;
    }
    memcpy(s->buf[k][s->cnt[k]++], v, sizeof tmp);
    s->seen[k]++;
    if (s->cnt[k] < PB && s->seen[k] < s->len[k]) return false;
    pl_tree(s->buf[k], s->cnt[k], tmp);
    v = tmp;
    s->cnt[k] = 0;
    k++;
  }
}

void ag__cpu_psum_lanes(int64_t r, int w, ag_cpu_prow_fn row, const void *ctx, float *out) {
  plsum *s = malloc(sizeof *s);
  float res[PW] = {0};
  if (!s) { /* one column at a time through the scalar S: the same bits */
    float *col = malloc(sizeof(float) * (size_t)(r > 0 ? r : 1));
    float v[PW];
    for (int j = 0; j < w; j++) {
      if (col) {
        for (int64_t k = 0; k < r; k++) {
          row(ctx, k, v);
          col[k] = v[j];
        }
        out[j] = ag__cpu_psum_f32(col, r);
      } else {
        out[j] = NAN;
      }
    }
    free(col);
    return;
  }
  s->len[0] = r;
  for (int k = 1; k <= PL_LEVELS; k++) {
    s->len[k] = (s->len[k - 1] + PB - 1) / PB;
    s->seen[k] = 0;
    s->cnt[k] = 0;
  }
  if (r > 0) {
    float(*t)[PW] = s->buf[0];
    for (int64_t i = 0; i < r; i += PB) {
      int64_t m = r - i < PB ? r - i : PB;
      for (int64_t k = 0; k < m; k++) {
        row(ctx, i + k, t[k]);
        for (int l = w; l < PW; l++) t[k][l] = 0.0f;
      }
      float b[PW];
      pl_tree(t, m, b);
      if (pl_push(s, 1, b, res)) break;
    }
  }
  memcpy(out, res, sizeof(float) * (size_t)w);
  free(s);
}

/* ---- REDUCE SUM: out[o, i] = S(x[o, 0..r, i]) * scale_f ---- */

typedef struct prctx {
  const ag_k_reduce *a;
  float *part; /* long rows: block sums */
  int64_t nb;
} prctx;

static void pr_store(const ag_k_reduce *a, int64_t pos, int64_t n, float *v) {
  if (a->scale != 1.0) {
    const float sc = (float)a->scale;
    for (int64_t j = 0; j < n; j++) v[j] = v[j] * sc;
  }
  store_f(a->out->dtype, ag__cpu_ptr(a->out) + (size_t)pos * ag__cpu_dtsize(a->out->dtype), 1, n, v);
}

static void pr_rows(void *ctx, int64_t lo, int64_t hi) {
  const ag_k_reduce *a = ((const prctx *)ctx)->a;
  const size_t sz = ag__cpu_dtsize(a->x->dtype);
  for (int64_t o = lo; o < hi; o++) {
    float v = ag__cpu_psum(a->x->dtype, ag__cpu_ptr(a->x) + (size_t)(o * a->r) * sz, 1, a->r);
    pr_store(a, o, 1, &v);
  }
}

typedef struct prow {
  const char *p;
  ag_dtype dt;
  int64_t rs; /* elements between rows */
  int w;
} prow;

static void prow_load(const void *ctx, int64_t k, float *dst) {
  const prow *q = ctx;
  load_f(q->dt, q->p + (size_t)(k * q->rs) * ag__cpu_dtsize(q->dt), 1, q->w, dst);
}

static void pr_cols(void *ctx, int64_t lo, int64_t hi) {
  const ag_k_reduce *a = ((const prctx *)ctx)->a;
  const int64_t tiles = (a->inner + PW - 1) / PW;
  const size_t sz = ag__cpu_dtsize(a->x->dtype);
  for (int64_t w = lo; w < hi; w++) {
    int64_t o = w / tiles, j0 = (w % tiles) * PW;
    prow q = {.p = ag__cpu_ptr(a->x) + (size_t)(o * a->r * a->inner + j0) * sz,
              .dt = a->x->dtype,
              .rs = a->inner,
              .w = (int)(a->inner - j0 < PW ? a->inner - j0 : PW)};
    float v[PW];
    ag__cpu_psum_lanes(a->r, q.w, prow_load, &q, v);
    pr_store(a, o * a->inner + j0, q.w, v);
  }
}

/* Few long rows: the first level's block sums in parallel (each block on
 * one thread), then S of them: S(v) is S of its block sums. */
static void pr_blocks(void *ctx, int64_t lo, int64_t hi) {
  const prctx *c = ctx;
  const ag_k_reduce *a = c->a;
  const size_t sz = ag__cpu_dtsize(a->x->dtype);
  for (int64_t w = lo; w < hi; w++) {
    int64_t o = w / c->nb, b = w % c->nb;
    int64_t k0 = b * PB, m = a->r - k0 < PB ? a->r - k0 : PB;
    float t[PB];
    load_f(a->x->dtype, ag__cpu_ptr(a->x) + (size_t)(o * a->r + k0) * sz, 1, m, t);
    c->part[w] = p_tree(t, m);
  }
}

ag_status ag__cpu_p_reduce_sum(const ag_k_reduce *a) {
  prctx c = {.a = a};
  const int64_t total = a->outer * a->r * a->inner;
  if (a->outer * a->inner == 0) return AG_OK;
  if (a->inner == 1 && a->outer < 8 && a->r > PB && total >= AG_CPU_PAR_MIN) {
    c.nb = (a->r + PB - 1) / PB;
    c.part = malloc(sizeof(float) * (size_t)(c.nb * a->outer));
    if (c.part) {
      ag__cpu_par_for(c.nb * a->outer, total, pr_blocks, &c);
      for (int64_t o = 0; o < a->outer; o++) {
        float v = ag__cpu_psum_f32(c.part + o * c.nb, c.nb);
        pr_store(a, o, 1, &v);
      }
      free(c.part);
      return AG_OK;
    }
  }
  if (a->inner == 1) ag__cpu_par_for(a->outer, total, pr_rows, &c);
  else ag__cpu_par_for(a->outer * ((a->inner + PW - 1) / PW), total, pr_cols, &c);
  return AG_OK;
}

/* ---- MATMUL: acc sequential over k of a[m,k]*b[k,n], then alpha, beta ----
 * Panels of C: A packed MR rows at a time (k-major), B packed NR columns at
 * a time; the micro-kernel keeps an MR x NR block of accumulators in
 * registers and walks k in order, so every c[m,n] is the sequential sum.
 * Partial strips are zero-padded; the padding never reaches a stored
 * element. GCC vector extensions, plain mul and add (cpu_portable_ew.inc). */

/* the largest micro-tile of any kernel */
#define MR_MAX 8
#define NR_MAX 32
typedef void (*pgemm_kernel)(int64_t K, const float *ap, const float *bp, float *c);

typedef struct pmm {
  const ag_k_matmul *a;
  int64_t M, N, K, Bn;
  int64_t abs_, bbs, ars, acs, brs, bcs;
  int64_t mb, nb, MB, NC; /* row blocks, column panels and their sizes */
  ag_dtype dt;
  int mr, nr; /* the micro-tile of kern */
  pgemm_kernel kern;
  _Atomic int oom;
} pmm;

static inline float ld1(ag_dtype dt, const char *p, int64_t i) {
  switch (dt) {
    case AG_F16: return ag_f16_to_f32(((const uint16_t *)p)[i]);
    case AG_BF16: return ag_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

static void pmm_range(void *ctx, int64_t lo, int64_t hi) {
  const pmm *g = ctx;
  const ag_k_matmul *mm = g->a;
  const ag_dtype dt = g->dt;
  const size_t sz = ag__cpu_dtsize(dt);
  const int64_t K = g->K;
  const float alpha_f = (float)mm->alpha, beta_f = (float)mm->beta;
  const int MR = g->mr, NR = g->nr;
  float *bp = malloc(sizeof(float) * (size_t)((K > 0 ? K : 1) * (g->NC + NR) + (K > 0 ? K : 1) * MR));
  if (!bp) {
    atomic_store(&((pmm *)ctx)->oom, 1);
    return;
  }
  float *ap = bp + (K > 0 ? K : 1) * (g->NC + NR);
  const pgemm_kernel kern = g->kern;
  for (int64_t w = lo; w < hi; w++) {
    int64_t b = w / (g->mb * g->nb), rem = w % (g->mb * g->nb);
    int64_t i0 = rem / g->nb * g->MB, j0 = rem % g->nb * g->NC;
    int64_t mc = g->M - i0 < g->MB ? g->M - i0 : g->MB, nc = g->N - j0 < g->NC ? g->N - j0 : g->NC;
    const char *A = (const char *)ag__cpu_ptr(mm->a) + (size_t)(b * g->abs_) * sz;
    const char *B = (const char *)ag__cpu_ptr(mm->b) + (size_t)(b * g->bbs) * sz;
    char *C = ag__cpu_ptr(mm->c) + (size_t)(b * g->M * g->N) * sz;
    /* pack B[k, j0..j0+nc) as strips of NR columns, k-major within a strip */
    const int64_t strips = (nc + NR - 1) / NR;
    for (int64_t s = 0; s < strips; s++) {
      float *d = bp + s * K * NR;
      const int64_t js = j0 + s * NR;
      const int nr = (int)(nc - s * NR < NR ? nc - s * NR : NR);
      if (dt == AG_F32 && g->bcs == 1 && nr == NR) {
        for (int64_t k = 0; k < K; k++)
          memcpy(d + k * NR, (const float *)B + k * g->brs + js, sizeof(float) * (size_t)NR);
      } else if (dt == AG_F32) {
        const float *b = (const float *)B;
        for (int j = 0; j < NR; j++) {
          if (j < nr)
            for (int64_t k = 0; k < K; k++) d[k * NR + j] = b[k * g->brs + (js + j) * g->bcs];
          else
            for (int64_t k = 0; k < K; k++) d[k * NR + j] = 0.0f;
        }
      } else {
        for (int64_t k = 0; k < K; k++)
          for (int j = 0; j < NR; j++) d[k * NR + j] = j < nr ? ld1(dt, B, k * g->brs + (js + j) * g->bcs) : 0.0f;
      }
    }
    for (int64_t ii = 0; ii < mc; ii += MR) {
      const int mr = (int)(mc - ii < MR ? mc - ii : MR);
      if (dt == AG_F32) {
        const float *a = (const float *)A;
        for (int i = 0; i < MR; i++) {
          if (i < mr) {
            const float *row = a + (i0 + ii + i) * g->ars;
            for (int64_t k = 0; k < K; k++) ap[k * MR + i] = row[k * g->acs];
          } else {
            for (int64_t k = 0; k < K; k++) ap[k * MR + i] = 0.0f;
          }
        }
      } else {
        for (int64_t k = 0; k < K; k++)
          for (int i = 0; i < MR; i++)
            ap[k * MR + i] = i < mr ? ld1(dt, A, (i0 + ii + i) * g->ars + k * g->acs) : 0.0f;
      }
      for (int64_t s = 0; s < strips; s++) {
        float cb[MR_MAX * NR_MAX];
        kern(K, ap, bp + s * K * NR, cb);
        const int nr = (int)(nc - s * NR < NR ? nc - s * NR : NR);
        for (int i = 0; i < mr; i++) {
          const int64_t off = (i0 + ii + i) * g->N + j0 + s * NR;
          float r[NR_MAX];
          for (int j = 0; j < nr; j++) {
            float v = cb[i * NR + j];
            if (mm->alpha != 1.0) v = alpha_f * v;
            if (mm->beta != 0.0) v = v + beta_f * ld1(dt, C, off + j);
            r[j] = v;
          }
          store_f(dt, C + (size_t)off * sz, 1, nr, r);
        }
      }
    }
  }
  free(bp);
}

ag_status ag__cpu_p_matmul(const ag_k_matmul *mm) {
  const ag_koperand *O = mm->c, *A = mm->a, *B = mm->b;
  const int na = A->ndim, nb = B->ndim, no = O->ndim;
  pmm g = {.a = mm, .dt = O->dtype};
  g.M = A->shape[na - 2];
  g.K = A->shape[na - 1];
  g.N = B->shape[nb - 1];
  g.Bn = no >= 3 ? O->shape[0] : 1;
  g.abs_ = na >= 3 ? A->strides[0] : 0;
  g.bbs = nb >= 3 ? B->strides[0] : 0;
  g.ars = A->strides[na - 2];
  g.acs = A->strides[na - 1];
  g.brs = B->strides[nb - 2];
  g.bcs = B->strides[nb - 1];
  if (g.M == 0 || g.N == 0 || g.Bn == 0) return AG_OK;
  if (p_avx512()) {
    g.kern = p_gemm_kernel_avx512, g.mr = 8, g.nr = 32;
  } else {
    g.kern = PV(p_gemm_kernel), g.mr = PMR, g.nr = PNR;
  }
  /* a B panel of K x NC floats stays within ~256 KiB */
  int64_t nc = (65536 / (g.K > 0 ? g.K : 1)) / g.nr * g.nr;
  g.NC = nc < 4 * g.nr ? 4 * g.nr : nc > 512 ? 512 : nc;
  g.MB = 256; /* B is packed once per row block */
  g.mb = (g.M + g.MB - 1) / g.MB;
  g.nb = (g.N + g.NC - 1) / g.NC;
  ag__cpu_par_for(g.Bn * g.mb * g.nb, g.Bn * g.M * g.N * (g.K > 0 ? g.K : 1) / 16, pmm_range, &g);
  if (atomic_load(&g.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for the portable GEMM's packs",
                        mm->call->name ? mm->call->name : "ag_matmul");
  return AG_OK;
}

/* ---- the device probe ---- */

ag_status ag__cpu_portable_check(void) {
#if defined(__FAST_MATH__)
  return ag_error_set(AG_ERR_UNSUPPORTED, "cpu: the portable kernels were built with -ffast-math (reassociation, "
                                          "flushed subnormals); portable numerics needs IEEE arithmetic");
#endif
  /* through volatiles, so the compiler cannot fold them: a product into
   * the subnormal range, a sum of subnormals and a product out of it, and
   * a multiply-add that must round twice */
  volatile float tiny = 0x1p-100f, small = 0x1p-30f, sub1 = 0x1p-130f, sub2 = 0x1p-131f, big = 0x1p30f;
  float p = tiny * small;
  float s = sub1 + sub2;
  float q = sub1 * big;
  if (p != 0x1p-130f || s != 0x1.8p-130f || q != 0x1p-100f)
    return ag_error_set(AG_ERR_UNSUPPORTED,
                        "cpu: subnormal floats are flushed to zero (FTZ/DAZ: a build with -ffast-math or a "
                        "process that set MXCSR); portable numerics needs IEEE gradual underflow");
  volatile float fa = 1.0f + 0x1p-12f, fc = -(1.0f + 0x1p-11f);
  float m = fa * fa + fc; /* the product 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11: 0, fused 2^-24 */
  if (m != 0.0f)
    return ag_error_set(AG_ERR_UNSUPPORTED, "cpu: a*b+c is fused in the portable kernels' build (-ffp-contract)");
  return AG_OK;
}
