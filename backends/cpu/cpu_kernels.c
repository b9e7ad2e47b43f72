/* CPU kernels: a strided elementwise engine (tiles of up to 256 elements
 * converted to a compute type, so any dtype mix and any strides share one
 * loop), arange, and the dispatch of every ag_kop. Row kernels (softmax,
 * losses, norms, embedding, gather, top-k) are in cpu_rows.c, reductions in
 * cpu_reduce.c, random numbers and dropout in cpu_random.c, multi-tensor optimizer kernels in
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
#include "cpu_portable.h"
#include "cpu_tile.h"
#include "cpu_vmath.h"
#include "tensor/half.h"

/* ---- parallel loop: the host thread pool (core/runtime/threadpool.c) ---- */

typedef ag_cpu_range_fn range_fn;
#define par_for ag__cpu_par_for

/* ---- type-generic bodies: f32 (and AVX2+FMA on x86), f64 ---- */

#define CPU_BODY "cpu_ops.inc"
#include "cpu_variants.inc"

bool ag__cpu_unary_f32(int sub, bool avx2, float *o, const float *a, int64_t n) {
  static const double s[2] = {1, 0};
  if (!avx2) return unary_f(sub, o, a, n, s);
#if defined(AG_X86)
  if (have_avx2()) return unary_f_avx2(sub, o, a, n, s);
#endif
  return false;
}

/* ---- integer elementwise (i64 compute): wrap-around arithmetic as in two's
 * complement, computed in uint64 (no signed overflow); AFFINE from the
 * call's exact integer scalars i0, i1 (kops.h) ---- */

static inline int64_t wrap(uint64_t u) { return (int64_t)u; }

/* The table's INT entries (optable.h) are the ones written here: a new one
 * must get its integer rule in unary_i or binary_i. */
_Static_assert(AG_UNARY_INT_COUNT == 4, "unary_i implements COPY, NEG, ABS, AFFINE");
_Static_assert(AG_BINARY_INT_COUNT == 11, "binary_i implements ADD..MIN and the comparisons");

static void unary_i(int sub, int64_t *o, const int64_t *a, int64_t n, int64_t i0, int64_t i1) {
  switch (sub) {
    case AG_U_COPY:
      if (o != a) memcpy(o, a, (size_t)n * 8);
      break;
    case AG_U_NEG: for (int64_t i = 0; i < n; i++) o[i] = wrap(0u - (uint64_t)a[i]); break;
    case AG_U_ABS:
      for (int64_t i = 0; i < n; i++) o[i] = a[i] < 0 ? wrap(0u - (uint64_t)a[i]) : a[i];
      break;
    case AG_U_AFFINE: { /* the store keeps the low bits of the output's width */
      const uint64_t m = (uint64_t)i0, k = (uint64_t)i1;
      for (int64_t i = 0; i < n; i++) o[i] = wrap((uint64_t)a[i] * m + k);
      break;
    }
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

/* One elementwise call: its operands (output first), the sub-op code of
 * UNARY/BINARY, their scalars s0, s1 and UNARY's exact integer scalars i0,
 * i1, FILL's value. */
typedef struct ew {
  const ag_koperand *const *op;
  int sub;
  double scalars[2];
  int64_t i0, i1;
  double fill;
  int kind, dom, nops, nd;
  bool portable; /* f32 compute through the portable bodies (cpu_portable.c) */
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
  const double fill = e->fill;
  switch (e->dom) {
    case DOM_F:
      if (e->portable && e->kind == EW_UNARY) (void)ag__cpu_p_unary(e->sub, o, in[0], n, e->scalars);
      else if (e->portable && e->kind == EW_BINARY) (void)ag__cpu_p_binary(e->sub, o, in[0], in[1], n, e->scalars);
      else if (e->kind == EW_UNARY) (void)FV(unary_f)(e->sub, o, in[0], n, e->scalars);
      else if (e->kind == EW_BINARY) (void)FV(binary_f)(e->sub, o, in[0], in[1], n, e->scalars);
      else if (e->kind == EW_WHERE) FV(where_f)(o, in[0], in[1], in[2], n);
      else for (int64_t i = 0; i < n; i++) ((float *)o)[i] = (float)fill;
      break;
    case DOM_D:
      if (e->kind == EW_UNARY) (void)unary_d(e->sub, o, in[0], n, e->scalars);
      else if (e->kind == EW_BINARY) (void)binary_d(e->sub, o, in[0], in[1], n, e->scalars);
      else if (e->kind == EW_WHERE) where_d(o, in[0], in[1], in[2], n);
      else for (int64_t i = 0; i < n; i++) ((double *)o)[i] = fill;
      break;
    default:
      if (e->kind == EW_UNARY) unary_i(e->sub, o, in[0], n, e->i0, e->i1);
      else if (e->kind == EW_BINARY) binary_i(e->sub, o, in[0], in[1], n, e->scalars, e->dt[0]);
      else if (e->kind == EW_WHERE) {
        int64_t *r = o;
        const uint8_t *m = in[0];
        const int64_t *a = in[1], *b = in[2];
        for (int64_t i = 0; i < n; i++) r[i] = m[i] ? a[i] : b[i];
      } else {
        int64_t v = sat_int(fill, e->dt[0]);
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

/* One elementwise call of `kind` over its nops operands ops (output first):
 * sub, scalars, i0, i1 and fill as in ew. */
static void ew_run(int kind, int nops, const ag_koperand *const *ops, int sub, const double *scalars, int64_t i0,
                   int64_t i1, double fill, bool portable) {
  ew e_, *e = &e_; /* not zeroed (small ops launch often): each field is set before it is read */
  e->op = ops;
  e->kind = kind;
  e->nops = nops;
  e->sub = sub;
  e->scalars[0] = scalars ? scalars[0] : 0;
  e->scalars[1] = scalars ? scalars[1] : 0;
  e->i0 = i0;
  e->i1 = i1;
  e->fill = fill;
  e->portable = portable;
  const ag_koperand *o0 = ops[0];
  for (int k = 0; k < nops; k++) {
    e->p[k] = ag__cpu_ptr(ops[k]);
    e->dt[k] = ops[k]->dtype;
    e->sz[k] = ag__cpu_dtsize(e->dt[k]);
  }
  /* Compute type: the output's, except that casts involving f64 go through
   * f64 and same-dtype copies move raw bits (NaN payloads survive). */
  e->dom = dom_of(e->dt[0]);
  if (kind == EW_UNARY && nops == 2 && e->sub == AG_U_COPY) {
    if (e->dt[0] == e->dt[1]) e->dom = DOM_RAW;
    else if (is_int(e->dt[0]) && is_int(e->dt[1])) e->dom = DOM_I;
    else if (e->dt[0] == AG_F64 || e->dt[1] == AG_F64 || e->dt[0] == AG_I64 || e->dt[1] == AG_I64) e->dom = DOM_D;
    else e->dom = DOM_F;
    /* portable: i64 to f32 rounds once, (float)v, not through double */
    if (portable && e->dt[1] == AG_I64 && e->dt[0] != AG_F64 && !is_int(e->dt[0])) e->dom = DOM_F;
  }
  /* comparisons compute in the inputs' type and store 0/1 as bool */
  if (kind == EW_BINARY && is_compare(e->sub)) e->dom = dom_of(e->dt[1]);
  const ag_dtype nat = e->dom == DOM_F ? AG_F32 : e->dom == DOM_D ? AG_F64 : AG_I64;
  for (int k = 0; k < nops; k++) e->native[k] = e->dt[k] == nat;
  if (kind == EW_WHERE) e->native[1] = false;

  /* Fast path for small dense operands: one segment, no index arithmetic. */
  {
    int64_t s = 1;
    bool dense = true;
    for (int d = o0->ndim - 1; d >= 0 && dense; d--) {
      if (o0->shape[d] != 1)
        for (int k = 0; k < nops; k++) dense = dense && ops[k]->strides[d] == s;
      s *= o0->shape[d];
    }
    if (dense && s * ew_cost(kind, e->sub) < AG_CPU_PAR_MIN) {
      static const int64_t ones[4] = {1, 1, 1, 1};
      if (s > 0) ew_segment(e, e->p, ones, s);
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
    for (int k = 0; k < nops && merge; k++) merge = e->st[k][m - 1] == ops[k]->strides[d] * s;
    if (merge) {
      e->shape[m - 1] *= s;
      for (int k = 0; k < nops; k++) e->st[k][m - 1] = ops[k]->strides[d];
    } else {
      e->shape[m] = s;
      for (int k = 0; k < nops; k++) e->st[k][m] = ops[k]->strides[d];
      m++;
    }
  }
  if (numel <= 0) return;
  if (m == 0) {
    m = 1;
    e->shape[0] = 1;
    for (int k = 0; k < nops; k++) e->st[k][0] = 1;
  }
  e->nd = m;
  e->numel = numel;
  if (transpose_like(e)) {
    int64_t R = e->shape[m - 2], C = e->shape[m - 1];
    int64_t tiles = numel / (R * C) * ((R + TT - 1) / TT) * ((C + TT - 1) / TT);
    par_for(tiles, numel, transpose_range, e);
    return;
  }
  par_for(numel, numel * ew_cost(kind, e->sub), ew_range, e);
}

/* ---- the elementwise ops ---- */

ag_status cpu_k_fill(ag_kernel_error *err, const ag_k_fill *a) {
  (void)err;
  ew_run(EW_FILL, 1, (const ag_koperand *const[]){a->out}, 0, NULL, 0, 0, a->value, false);
  return AG_OK;
}

/* Portable numerics: the floating dtypes through the portable bodies, the
 * integer ones (exact) and casts as by default; f64 on either side only in
 * a COPY (a cast or a copy: exact, or one rounding), refused otherwise. */
static bool ew_portable(const ag_kernel_call *c, int nops, const ag_koperand *const *ops, ag_status *st) {
  *st = AG_OK;
  if (!(c->flags & AG_KF_PORTABLE)) return false;
  if (c->op == AG_K_UNARY && c->sub == AG_U_COPY) return true;
  for (int k = 0; k < nops; k++)
    if (ops[k]->dtype == AG_F64) {
      *st = ag_k__not_portable(c, "cpu", AG_F64);
      return true;
    }
  return true;
}

ag_status cpu_k_unary(ag_kernel_error *err, const ag_k_unary *a) {
  (void)err;
  const ag_koperand *const ops[] = {a->y, a->x};
  ag_status st;
  bool p = ew_portable(a->call, 2, ops, &st);
  if (st != AG_OK) return st;
  ew_run(EW_UNARY, 2, ops, a->variant, (const double[]){a->s0, a->s1}, a->i0, a->i1, 0, p);
  return AG_OK;
}

ag_status cpu_k_binary(ag_kernel_error *err, const ag_k_binary *a) {
  (void)err;
  const ag_koperand *const ops[] = {a->out, a->a, a->b};
  ag_status st;
  bool p = ew_portable(a->call, 3, ops, &st);
  if (st != AG_OK) return st;
  ew_run(EW_BINARY, 3, ops, a->variant, (const double[]){a->s0, a->s1}, 0, 0, 0, p);
  return AG_OK;
}

ag_status cpu_k_where(ag_kernel_error *err, const ag_k_where *a) {
  (void)err;
  ew_run(EW_WHERE, 4, (const ag_koperand *const[]){a->out, a->cond, a->a, a->b}, 0, NULL, 0, 0, 0, false);
  return AG_OK;
}

/* ---- creation kernels ---- */

ag_status cpu_k_arange(ag_kernel_error *err, const ag_k_arange *a) {
  (void)err;
  if ((a->call->flags & AG_KF_PORTABLE) && !is_int(a->out->dtype)) return ag__cpu_p_arange(a);
  const ag_koperand *out = a->out;
  int64_t n = out->ndim ? out->shape[0] : 1;
  char *p = ag__cpu_ptr(out);
  size_t sz = ag__cpu_dtsize(out->dtype);
  double buf[TILE];
  for (int64_t i = 0; i < n; i += TILE) {
    int64_t m = n - i < TILE ? n - i : TILE;
    for (int64_t j = 0; j < m; j++) buf[j] = a->start + (double)(i + j) * a->step;
    store_d(out->dtype, p + (size_t)i * sz, 1, m, buf);
  }
  return AG_OK;
}

/* ---- dispatch (the list CPU_KOPS: cpu_backend.h) ---- */

#define AGK_IMPL(name) cpu_k_##name
#define AGK_CTX ag_kernel_error *
AGK_DEFINE_DISPATCH_PORTABLE(cpu_dispatch, CPU_KOPS, CPU_KOPS_PORTABLE, "cpu")
AGK_DEFINE_SUPPORTS(cpu_supports_data, CPU_KOPS)

ag_status ag__cpu_run(const ag_kernel_call *c, ag_kernel_error *err) { return cpu_dispatch(err, c); }

/* What the masks cannot say: UNARY and BINARY run every entry of the op
 * table in the floating dtypes and its INT entries in the integer ones;
 * REDUCE and POOL2D* run their lists' codes, REDUCE SUM not for bool/u8
 * (the core sums those in i64). */
static bool cpu_supports_subop(ag_kop op, int sub, ag_dtype dt) {
  switch (op) {
    case AG_K_UNARY: {
      const ag_unary_info *u = ag_unary_info_of(sub);
      return u && (!is_int(dt) || u->ints == AG_OPT_INT);
    }
    case AG_K_BINARY: {
      const ag_binary_info *b = ag_binary_info_of(sub);
      return b && (!is_int(dt) || b->ints == AG_OPT_INT);
    }
    case AG_K_REDUCE:
      return sub >= 0 && sub < AG_REDUCE_COUNT && !(sub == AG_R_SUM && (dt == AG_BOOL || dt == AG_U8));
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return sub >= 0 && sub < AG_POOL_OP_COUNT;
    default: return true;
  }
}

bool ag__cpu_supports(ag_kop op, int sub, ag_dtype dt) {
  return cpu_supports_data(op, sub, dt) && cpu_supports_subop(op, sub, dt);
}

/* Portable numerics (CPU_KOPS_PORTABLE): UNARY and BINARY run every table
 * entry on f32/f16/bf16 through the portable bodies and the INT entries on
 * the integer dtypes (exact), f64 only COPY (casts); REDUCE every code
 * (SUM through S; on f64 only MAX, MIN, ARGMAX); POOL2D* every code on f32:
 * the default kernels are the contract's (MAX selects; the averages sum the
 * window in order, divide once, and the backward adds in output order), on
 * f64 only the MAX forward. */
static bool cpu_supports_portable_subop(ag_kop op, int sub, ag_dtype dt) {
  if (dt == AG_F64) {
    switch (op) {
      case AG_K_UNARY: return sub == AG_U_COPY;
      case AG_K_REDUCE: return sub != AG_R_SUM && cpu_supports_subop(op, sub, dt);
      case AG_K_POOL2D: return sub == AG_P_MAX;
      default: break;
    }
  }
  return cpu_supports_subop(op, sub, dt);
}

bool ag__cpu_supports_portable(ag_kop op, int sub, ag_dtype dt) {
  return cpu_dispatch_portable(op, sub, dt) && cpu_supports_portable_subop(op, sub, dt) &&
         ag__cpu_supports(op, sub, dt);
}
