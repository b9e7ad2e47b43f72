/* Kernel launches: maps each ag_kop to an embedded shader (the elementwise
 * sub-op or the reduction op is the pipeline's specialization constant,
 * dtypes are arguments), collapses elementwise layouts to the fewest dims,
 * and fills the argument block (vkb_args, Args in common.glsl) from the
 * op's named arguments (kargs.h); dispatch and supports() come from VK_KOPS. */
#include <math.h>
#include <string.h>

#include "vk_internal.h"
#include "vk_kops.h"

/* ew.comp writes the integer rules of the table's INT entries by hand (the
 * integer paths of K_UNARY and K_BINARY). */
_Static_assert(AG_UNARY_INT_COUNT == 4, "ew.comp implements COPY, NEG, ABS, AFFINE for integers");
_Static_assert(AG_BINARY_INT_COUNT == 11, "ew.comp implements ADD..MIN and the comparisons for integers");

static int64_t numel(const ag_koperand *o) {
  int64_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  return n;
}

static size_t dsize(ag_dtype dt) {
  return dt == AG_F16 || dt == AG_BF16 ? 2 : dt == AG_I64 || dt == AG_F64 ? 8 : dt == AG_U8 || dt == AG_BOOL ? 1 : 4;
}
static bool is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }

/* The device address of an operand, 0 when absent. */
static uint64_t addr(const void *base, size_t off) { return base ? ((const vkb_mem *)base)->addr + off : 0; }
static uint64_t oaddr(const ag_koperand *o) { return addr(o->base, o->offset); }
/* An OPT or SAVED operand: the decoder gives NULL when it is absent. */
static uint64_t opt_addr(const ag_koperand *o) { return o ? oaddr(o) : 0; }

/* v in dt's integer range (NaN 0); floating dtypes take the i64 range, so
 * an infinite or huge scalar never reaches an undefined conversion */
static int64_t sat_int(double v, ag_dtype dt) {
  if (dt == AG_BOOL) return v != 0;
  if (!(v == v)) return 0;
  double lo = dt == AG_I32 ? -2147483648.0 : dt == AG_U8 ? 0 : -9223372036854775808.0;
  double hi = dt == AG_I32 ? 2147483647.0 : dt == AG_U8 ? 255 : 9223372036854775807.0;
  if (v <= lo) return dt == AG_I32 ? INT32_MIN : dt == AG_U8 ? 0 : INT64_MIN;
  if (v >= hi) return dt == AG_I32 ? INT32_MAX : dt == AG_U8 ? 255 : INT64_MAX;
  return (int64_t)v;
}

/* Drops size-1 dims and merges dims contiguous in every operand into
 * a->n[0..7] (shape) and a->n[8 + 8k + d] (strides); n[40] numel, n[41]
 * dims left (0: every operand plainly contiguous). */
static void collapse(const ag_koperand *o0, int nop, const ag_koperand *const *ops, vkb_args *a) {
  int64_t *shape = a->n, *st = a->n + 8;
  int r = 0;
  for (int d = 0; d < o0->ndim; d++) {
    if (o0->shape[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < nop && merge; k++) merge = st[8 * k + r - 1] == ops[k]->strides[d] * o0->shape[d];
    if (merge) {
      shape[r - 1] *= o0->shape[d];
      for (int k = 0; k < nop; k++) st[8 * k + r - 1] = ops[k]->strides[d];
    } else {
      shape[r] = o0->shape[d];
      for (int k = 0; k < nop; k++) st[8 * k + r] = ops[k]->strides[d];
      r++;
    }
  }
  bool contig = r <= 1;
  for (int k = 0; k < nop && r == 1; k++) contig = contig && st[8 * k] == 1;
  a->n[40] = numel(o0);
  a->n[41] = contig ? 0 : r;
}

/* A kernel whose invocations loop `trips` times in sequence: refused where
 * the driver cuts loops short (lavapipe), rather than return a wrong
 * result. */
static ag_status loop_ok(ag_bstream *s, const ag_kernel_call *c, int64_t trips) {
  if (trips <= s->d->loop_limit) return AG_OK;
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "%s: a line of %lld sequential steps exceeds the loop limit of the Vulkan driver %s on "
                      "vulkan:%d (%lld iterations per invocation)",
                      c->name ? c->name : "vulkan", (long long)trips, s->d->driver, s->dev,
                      (long long)s->d->loop_limit);
}

/* Steps per dispatch of a kernel whose invocations walk `trips` rows in
 * order: all of them, or chunks of 32768 where the driver limits loops
 * (the chunks run in order, so the sums are the same). */
static int64_t chunk_of(ag_bstream *s, int64_t trips) { return trips <= s->d->loop_limit ? trips : 32768; }

/* The call asks for portable numerics (docs/numerics.md): the op runs
 * its portable module (VKS_P_*) or, exact by nature, its default one. */
static bool pmode(const ag_kernel_call *c) { return (c->flags & AG_KF_PORTABLE) != 0; }

/* A double scalar as f64.comp reads it (the bits, in an integer slot). */
static int64_t dbits(double v) {
  int64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

/* ---- the ops Vulkan runs ----
 * One op a line: X(ID, name, dtypes, variants), implemented by
 * vk_k_<name>(ag_bstream *, const ag_k_<name> *). The dtypes are what the
 * shaders take; vkb_supports then drops f64 where the device lacks
 * shaderFloat64 and applies the sub-op rules of UNARY, BINARY, REDUCE and
 * POOL (AGK_VANY here). Fills, where and embedding move f64 and the
 * integer dtypes as words, so they take every dtype. */
#define VK_DTS_ARANGE (AGK_DTS_FLOAT64 | AGK_DT(I32) | AGK_DT(I64) | AGK_DT(U8))
#define VK_KOPS(X)                                                                                       \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                                                  \
  X(ARANGE, arange, VK_DTS_ARANGE, AGK_VNONE)                                                            \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(UNARY, unary, AGK_DTS_ALL, AGK_VANY)                                                                 \
  X(BINARY, binary, AGK_DTS_ALL, AGK_VANY)                                                               \
  X(WHERE, where, AGK_DTS_ALL, AGK_VNONE)                                                                \
  X(REDUCE, reduce, AGK_DTS_ALL, AGK_VANY)                                                               \
  X(MATMUL, matmul, AGK_DTS_FLOAT64, AGK_VNONE)                                                          \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))            \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))    \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))          \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))  \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT64, AGK_VNONE)                                                    \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                            \
  X(EMBEDDING, embedding, AGK_DTS_ALL, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                    \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))        \
  X(DROPOUT, dropout, AGK_DTS_FLOAT, AGK_VNONE)                                                          \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                                \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                                    \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT, AGK_VNONE)                                          \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                              \
  X(CONV2D, conv2d, AGK_DT(F32), AGK_VNONE)                                                              \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DT(F32), AGK_VNONE)                                          \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DT(F32), AGK_VNONE)                                        \
  X(POOL2D, pool2d, AGK_DT(F32), AGK_VANY)                                                               \
  X(POOL2D_BWD, pool2d_bwd, AGK_DT(F32), AGK_VANY)                                                       \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))              \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))            \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT64, AGK_VNONE)                                                        \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                                \
  X(VAR, var, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                                \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX))      \
  X(GATHER, gather, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                      \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))              \
  X(TOPK, topk, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))             \
  X(SDPA, sdpa, AGK_DTS_FLOAT, AGK_VNONE)                                                                \
  X(SDPA_BWD, sdpa_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                                        \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT64, AGK_VNONE)                                                    \
  X(NORM, norm, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                         \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT64, AGK_VNONE)                                                  \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                          \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(SORT, sort, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING))       \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))            \
  X(PAD, pad, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))               \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))

/* ---- the ops Vulkan runs with portable numerics ----
 * One op a line, as VK_KOPS: what each op's function computes as
 * docs/numerics.md fixes it when the call has AG_KF_PORTABLE (a portable
 * module, VKS_P_*, or the default one for the ops exact by nature). f64 is
 * refused; vkb_supports applies the sub-op rules (REDUCE, POOL2D: every
 * reduction and pooling op). */
#define VK_DTS_PORTABLE (AGK_DTS_FLOAT | AGK_DTS_INT)
/* exact by nature: every dtype, f64 included (where the device has
 * shaderFloat64); vkb_launch_locked refuses f64 in the other ops and in
 * the sums of REDUCE and the arithmetic of UNARY */
#define VK_KOPS_PORTABLE(X)                                                                              \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                                                  \
  X(ARANGE, arange, AGK_DTS_FLOAT | AGK_DT(I32) | AGK_DT(I64) | AGK_DT(U8), AGK_VNONE)                   \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(UNARY, unary, AGK_DTS_ALL, AGK_VANY)                                                                 \
  X(BINARY, binary, VK_DTS_PORTABLE, AGK_VANY)                                                           \
  X(WHERE, where, AGK_DTS_ALL, AGK_VNONE)                                                                \
  X(REDUCE, reduce, AGK_DTS_ALL, AGK_VANY)                                                               \
  X(MATMUL, matmul, AGK_DTS_FLOAT, AGK_VNONE)                                                            \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))               \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))       \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))          \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))  \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT, AGK_VNONE)                                                          \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                                \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                                    \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                              \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(NORM, norm, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(EMBEDDING, embedding, AGK_DTS_ALL, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                    \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))          \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT, AGK_VNONE)                                          \
  X(CONV2D, conv2d, AGK_DT(F32), AGK_VNONE)                                                              \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DT(F32), AGK_VNONE)                                          \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DT(F32), AGK_VNONE)                                        \
  X(POOL2D, pool2d, AGK_DT(F32), AGK_VANY)                                                               \
  X(POOL2D_BWD, pool2d_bwd, AGK_DT(F32), AGK_VANY)                                                       \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))              \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))            \
  X(VAR, var, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                                  \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT, AGK_VNONE)                                                    \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX))        \
  X(GATHER, gather, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                      \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                              \
  X(TOPK, topk, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))             \
  X(SORT, sort, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING))       \
  X(PAD, pad, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))               \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))              \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))         \
  X(DROPOUT, dropout, AGK_DTS_FLOAT, AGK_VNONE)

/* ---- elementwise ---- */

/* is: the exact integer scalars of AFFINE on an integer dtype, or NULL. */
static ag_status run_unary_is(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                              double s1, const int64_t *is, bool portable) {
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args args = {0};
  const ag_koperand *ops[2] = {o, x};
  collapse(o, 2, ops, &args);
  size_t bytes = (size_t)n * dsize(o->dtype);
  bool same_buf = o->base == x->base;
  bool overlap = same_buf && o->offset < x->offset + bytes && x->offset < o->offset + bytes;
  if (args.n[41] == 0 && sub == AG_U_COPY && o->dtype == x->dtype && overlap && o->offset == x->offset) return AG_OK;
  args.p[0] = oaddr(o);
  args.p[1] = oaddr(x);
  args.k[0] = o->dtype;
  args.k[1] = x->dtype;
  args.k[4] = is != NULL;
  args.f[0] = (float)s0;
  args.f[1] = (float)s1;
  args.n[42] = is ? is[0] : 0;
  args.n[43] = is ? is[1] : 0;
  args.n[46] = dbits(s0);
  args.n[47] = dbits(s1);
  /* f64 in or out (a cast, or an op on f64): f64.comp */
  bool d = o->dtype == AG_F64 || x->dtype == AG_F64;
  return vkb_dispatch1(s, d ? VKS_UNARY_D : portable ? VKS_P_UNARY : VKS_UNARY, sub, &args, n);
}

static ag_status run_unary(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                           double s1) {
  return run_unary_is(s, o, x, sub, s0, s1, NULL, false);
}

static ag_status vk_k_unary(ag_bstream *s, const ag_k_unary *a) {
  const int64_t is[2] = {a->i0, a->i1};
  return run_unary_is(s, a->y, a->x, a->variant, a->s0, a->s1,
                      a->variant == AG_U_AFFINE && is_int(a->y->dtype) ? is : NULL, pmode(a->call));
}

static ag_status vk_k_binary(ag_bstream *s, const ag_k_binary *a) {
  const ag_koperand *o = a->out;
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args args = {0};
  const ag_koperand *ops[3] = {o, a->a, a->b};
  collapse(o, 3, ops, &args);
  args.p[0] = oaddr(o);
  args.p[1] = oaddr(a->a);
  args.p[2] = oaddr(a->b);
  args.k[0] = a->a->dtype;
  args.k[4] = a->s0 >= INT32_MIN && a->s0 <= INT32_MAX && a->s0 == floor(a->s0);
  args.f[0] = (float)a->s0;
  args.f[1] = (float)a->s1;
  args.n[42] = sat_int(a->s0, AG_I64);
  args.n[46] = dbits(a->s0);
  args.n[47] = dbits(a->s1);
  vkb_shader sh = a->a->dtype == AG_F64 ? VKS_BINARY_D : pmode(a->call) ? VKS_P_BINARY : VKS_BINARY;
  return vkb_dispatch1(s, sh, a->variant, &args, n);
}

static ag_status vk_k_where(ag_bstream *s, const ag_k_where *a) {
  const ag_koperand *o = a->out;
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args args = {0};
  const ag_koperand *ops[4] = {o, a->cond, a->a, a->b};
  collapse(o, 4, ops, &args);
  for (int k = 0; k < 4; k++) args.p[k] = oaddr(ops[k]);
  args.k[1] = a->cond->dtype;
  args.k[5] = (int)dsize(o->dtype);
  return vkb_dispatch1(s, VKS_WHERE, 0, &args, n);
}

static ag_status run_fill(ag_bstream *s, const ag_koperand *o, double v) {
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args args = {0};
  const ag_koperand *ops[1] = {o};
  collapse(o, 1, ops, &args);
  args.p[0] = oaddr(o);
  args.k[0] = o->dtype;
  args.f[0] = (float)v;
  args.n[42] = o->dtype == AG_I32 ? (int64_t)(int32_t)v : sat_int(v, o->dtype);
  args.n[46] = dbits(v);
  return vkb_dispatch1(s, o->dtype == AG_F64 ? VKS_FILL_D : VKS_FILL, 0, &args, n);
}

static ag_status vk_k_fill(ag_bstream *s, const ag_k_fill *a) { return run_fill(s, a->out, a->value); }

static ag_status vk_k_arange(ag_bstream *s, const ag_k_arange *a) {
  const ag_koperand *o = a->out;
  vkb_args args = {0};
  args.p[0] = oaddr(o);
  args.k[0] = o->dtype;
  args.f[0] = (float)a->start;
  args.f[1] = (float)a->step;
  args.n[40] = numel(o);
  args.n[42] = (int64_t)a->start;
  args.n[43] = (int64_t)a->step;
  args.n[46] = dbits(a->start);
  args.n[47] = dbits(a->step);
  return vkb_dispatch1(s, o->dtype == AG_F64 ? VKS_ARANGE_D : VKS_ARANGE, 0, &args, args.n[40]);
}

/* p0, p1: lo and hi (uniform), or mean and std (normal) */
static ag_status run_rand(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *o, bool normal, double p0,
                          double p1) {
  vkb_args args = {0};
  int64_t n = numel(o), per = normal ? 2 : 4;
  args.p[0] = oaddr(o);
  args.k[0] = o->dtype;
  args.k[1] = normal;
  args.f[0] = (float)p0;
  args.f[1] = (float)p1;
  args.n[40] = n;
  args.n[44] = (int64_t)c->seed;
  args.n[45] = (int64_t)c->offset;
  if (pmode(c)) {
    /* uniform: u * range_f + lo_f with range_f = (float)(hi - lo) */
    if (!normal) args.f[1] = (float)(p1 - p0);
    return vkb_dispatch1(s, VKS_P_RAND, 0, &args, (n + per - 1) / per);
  }
  return vkb_dispatch1(s, s->d->fast_f64 && per == 2 ? VKS_RAND64 : VKS_RAND, 0, &args, (n + per - 1) / per);
}

static ag_status vk_k_rand_uniform(ag_bstream *s, const ag_k_rand_uniform *a) {
  return run_rand(s, a->call, a->out, false, a->lo, a->hi);
}

static ag_status vk_k_rand_normal(ag_bstream *s, const ag_k_rand_normal *a) {
  return run_rand(s, a->call, a->out, true, a->mean, a->std);
}

static ag_status vk_k_dropout(ag_bstream *s, const ag_k_dropout *a) {
  int64_t n = numel(a->y);
  vkb_args args = {0};
  bool has_mask = a->mask && a->mask->base;
  args.p[0] = oaddr(a->y);
  args.p[1] = oaddr(a->x);
  args.p[2] = has_mask ? oaddr(a->mask) : 0;
  args.k[0] = a->y->dtype;
  args.k[1] = a->x->dtype;
  args.k[2] = has_mask ? (int)a->mask->dtype : AG_F32;
  /* 1 / (1 - p) in double as hi + lo floats: x * hi + x * lo in one fma
   * rounds like the CPU's double product */
  double scale = a->p < 1 ? 1.0 / (1.0 - a->p) : 0.0;
  float hi = (float)scale, lo = (float)(scale - (double)hi);
  args.f[0] = (float)a->p;
  args.f[1] = hi;
  args.f[2] = lo;
  args.n[40] = n;
  args.n[44] = (int64_t)a->call->seed;
  args.n[45] = (int64_t)a->call->offset;
  /* with f64 the product is the CPU's (x * scale in double, rounded);
   * only where f64 is fast (vkb_device.fast_f64) */
  memcpy(&args.n[46], &scale, sizeof scale);
  if (pmode(a->call)) { /* y = x * scale_f, scale_f = (float)(1 / (1 - p)) */
    args.f[1] = (float)scale;
    return vkb_dispatch1(s, VKS_P_DROPOUT, 0, &args, (n + 3) / 4);
  }
  return vkb_dispatch1(s, s->d->fast_f64 ? VKS_DROPOUT64 : VKS_DROPOUT, 0, &args, (n + 3) / 4);
}

/* ---- reductions and rows ---- */

/* `groups` work-groups (one per row), split over x and y. */
static ag_status dispatch_rows(ag_bstream *s, const ag_kernel_call *c, vkb_shader sh, int spec, const vkb_args *a,
                               int64_t groups, int64_t cols) {
  if (groups <= 0) return AG_OK;
  /* up to four passes over the row in steps of VKB_WG, and the trees */
  ag_status st = loop_ok(s, c, 4 * ((cols + VKB_WG - 1) / VKB_WG) + 64);
  if (st != AG_OK) return st;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = (uint64_t)groups < maxx ? (uint64_t)groups : maxx, gy = ((uint64_t)groups + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld rows exceed the device's dispatch limits", (long long)groups);
  return vkb_dispatch(s, sh, spec, a, (uint32_t)gx, (uint32_t)gy, 1);
}

/* A portable row kernel (portable.comp): a work-group per row whose sums
 * are S (psum.glsl: rows up to 2^24, a tree of 8 steps per block of 256),
 * or an invocation per row for rows of one block (k5: psum1, no
 * barriers). */
static ag_status prows(ag_bstream *s, const ag_kernel_call *c, vkb_shader sh, const vkb_args *a, int64_t rows,
                       int64_t cols) {
  if (cols > ((int64_t)1 << 24))
    return ag_error_set(AG_ERR_UNSUPPORTED, "%s: rows of %lld elements exceed the portable row sums' 2^24 on vulkan",
                        c->name ? c->name : "vulkan", (long long)cols);
  if (cols <= VKB_WG) {
    vkb_args one = *a;
    one.k[5] = 1;
    return vkb_dispatch1(s, sh, 0, &one, rows);
  }
  ag_status st = loop_ok(s, c, 16 * ((cols + VKB_WG - 1) / VKB_WG) + 64);
  return st != AG_OK ? st : dispatch_rows(s, c, sh, 0, a, rows, cols);
}

/* An f64 row kernel (f64.comp): an invocation per row, three passes. */
static ag_status rows_d(ag_bstream *s, const ag_kernel_call *c, vkb_shader sh, const vkb_args *a, int64_t rows,
                        int64_t cols) {
  ag_status st = loop_ok(s, c, 3 * cols);
  return st != AG_OK ? st : vkb_dispatch1(s, sh, 0, a, rows);
}

static ag_status vk_k_reduce(ag_bstream *s, const ag_k_reduce *a) {
  const ag_kernel_call *c = a->call;
  int64_t outer = a->outer, r = a->r, inner = a->inner;
  if (outer * inner == 0) return AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(a->out);
  args.p[1] = oaddr(a->x);
  args.k[0] = a->out->dtype;
  args.k[1] = a->x->dtype;
  args.f[0] = a->variant == AG_R_SUM ? (float)a->scale : 1.0f;
  args.n[0] = outer;
  args.n[1] = r;
  args.n[2] = inner;
  /* portable: the float sums are S; the other reductions (and integer
   * sums) are exact by nature */
  if (pmode(c) && a->variant == AG_R_SUM && !is_int(a->x->dtype))
    return vkb_portable_sum(s, oaddr(a->out), a->out->dtype, oaddr(a->x), a->x->dtype, outer, r, inner, a->scale);
  /* long lines: passes of work-group trees (vk_tree.c); the portable mode
   * keeps its own kernels and their order for floats (integer results are
   * exact in any order) */
  bool tint = is_int(a->x->dtype);
  if ((!pmode(c) || tint) && r > (a->x->dtype == AG_F64 ? 4096 : 2 * VKB_TREE_CHUNK)) {
    uint64_t scratch = 0;
    size_t need = vkb_tree_scratch(outer * inner, r);
    ag_status st = need ? vkb_scratch(s, need, &scratch) : AG_OK;
    if (st != AG_OK) return st;
    vkb_tree_red t = {.out = oaddr(a->out), .x = oaddr(a->x), .odt = a->out->dtype, .xdt = a->x->dtype,
                      .op = a->variant, .outer = outer, .r = r, .inner = inner,
                      .scale = a->variant == AG_R_SUM ? a->scale : 1.0, .f64 = a->x->dtype == AG_F64,
                      .i64 = tint};
    return vkb_tree_reduce(s, scratch, &t);
  }
  if (a->x->dtype == AG_F64) { /* f64.comp: an invocation per output, in order */
    ag_status st = loop_ok(s, c, r);
    if (st != AG_OK) return st;
    args.n[46] = dbits(a->variant == AG_R_SUM ? a->scale : 1.0);
    return vkb_dispatch1(s, VKS_REDUCE_D, a->variant, &args, outer * inner);
  }
  /* a work-group per output pays off for long rows and is needed for long
   * strided ones (loop limits); short ones take an invocation each */
  if ((inner == 1 && r > 64) || r > 4096)
    return dispatch_rows(s, c, pmode(c) ? VKS_P_REDUCE_ROWS : VKS_REDUCE_ROWS, a->variant, &args, outer * inner, r);
  return vkb_dispatch1(s, VKS_REDUCE_COLS, a->variant, &args, outer * inner);
}

#define SUMSQ_GROUPS 64

static ag_status vk_k_sumsq(ag_bstream *s, const ag_k_sumsq *a) {
  if (pmode(a->call)) return vkb_portable_sumsq(s, a);
  int count = AGK_MULTI_GROUPS(a);
  uint64_t part;
  ag_status st = vkb_scratch(s, sizeof(float) * SUMSQ_GROUPS * (size_t)(count ? count : 1), &part);
  if (st != AG_OK) return st;
  int64_t np = 0;
  for (int k = 0; k < count; k++) {
    const ag_kmulti_entry *x = &AGK_MULTI(a, k, x);
    int64_t n = x->numel;
    if (!n) continue;
    int64_t groups = (n + VKB_WG - 1) / VKB_WG;
    if (groups > SUMSQ_GROUPS) groups = SUMSQ_GROUPS;
    vkb_args args = {0};
    args.p[0] = part;
    args.p[1] = addr(x->base, x->offset);
    args.k[1] = x->dtype;
    args.n[0] = np;
    args.n[1] = n;
    args.n[2] = groups;
    if ((st = vkb_dispatch(s, VKS_SUMSQ_PART, 0, &args, (uint32_t)groups, 1, 1)) != AG_OK) return st;
    np += groups;
  }
  vkb_args args = {0};
  args.p[0] = oaddr(a->out);
  args.p[1] = part;
  args.n[0] = np;
  return vkb_dispatch(s, VKS_SUMSQ_FINAL, 0, &args, 1, 1, 1);
}

/* y: y (forward) or dx; x: x or dy; yf: the forward's y (backward), or NULL */
static ag_status run_softmax(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *y, const ag_koperand *x,
                             const ag_koperand *yf, int variant, int64_t rows, int64_t cols) {
  if (!rows) return AG_OK;
  const bool bwd = yf != NULL;
  vkb_args args = {0};
  args.p[0] = oaddr(y);
  args.p[1] = oaddr(x);
  if (bwd) args.p[2] = oaddr(yf);
  args.k[0] = y->dtype;
  args.k[6] = variant;
  args.n[0] = rows;
  args.n[1] = cols;
  /* long rows: split over work-groups, a (max, sum) merge per row
   * (vk_tree.c) */
  if (bwd && !pmode(c) && cols > (y->dtype == AG_F64 ? 4096 : 4 * VKB_TREE_CHUNK)) {
    uint64_t scratch;
    ag_status st = vkb_scratch(s, vkb_tree_softmax_bwd_scratch(rows, cols), &scratch);
    return st != AG_OK ? st
                       : vkb_tree_softmax_bwd(s, scratch, oaddr(y), oaddr(x), oaddr(yf), y->dtype, variant, rows, cols);
  }
  if (!bwd && !pmode(c) && cols > (y->dtype == AG_F64 ? 4096 : 4 * VKB_TREE_CHUNK)) {
    uint64_t scratch;
    ag_status st = vkb_scratch(s, vkb_tree_softmax_scratch(rows, cols), &scratch);
    return st != AG_OK ? st : vkb_tree_softmax(s, scratch, oaddr(y), oaddr(x), y->dtype, variant, rows, cols);
  }
  if (y->dtype == AG_F64) { /* f64.comp: an invocation per row */
    ag_status st = loop_ok(s, c, 3 * cols);
    if (st != AG_OK) return st;
    return vkb_dispatch1(s, bwd ? VKS_SOFTMAX_BWD_D : VKS_SOFTMAX_D, 0, &args, rows);
  }
  if (pmode(c)) return prows(s, c, bwd ? VKS_P_SOFTMAX_BWD : VKS_P_SOFTMAX, &args, rows, cols);
  return dispatch_rows(s, c, bwd ? VKS_SOFTMAX_BWD : VKS_SOFTMAX, 0, &args, rows, cols);
}

static ag_status vk_k_softmax(ag_bstream *s, const ag_k_softmax *a) {
  return run_softmax(s, a->call, a->y, a->x, NULL, a->variant, a->rows, a->cols);
}

static ag_status vk_k_softmax_bwd(ag_bstream *s, const ag_k_softmax_bwd *a) {
  return run_softmax(s, a->call, a->dx, a->dy, a->y, a->variant, a->rows, a->cols);
}

/* out: loss or dlogits; grad: the backward's upstream gradient, or NULL */
static ag_status run_ce(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *out, const ag_koperand *logits,
                        const ag_koperand *targets, const ag_koperand *grad, int64_t rows, int64_t cols,
                        int64_t ignore_index) {
  if (!rows) return AG_OK;
  const bool bwd = grad != NULL;
  vkb_args args = {0};
  args.p[0] = oaddr(out);
  args.p[1] = oaddr(logits);
  args.p[2] = oaddr(targets);
  args.k[1] = logits->dtype;
  args.k[3] = targets->dtype;
  if (bwd) {
    args.p[3] = oaddr(grad);
    args.n[3] = grad->ndim ? grad->strides[0] : 0;
  }
  args.n[0] = rows;
  args.n[1] = cols;
  args.n[2] = ignore_index;
  args.p[7] = s->err.addr;
  s->err_armed = true;
  if (pmode(c)) return prows(s, c, bwd ? VKS_P_CE_BWD : VKS_P_CE, &args, rows, cols);
  return dispatch_rows(s, c, bwd ? VKS_CE_BWD : VKS_CE, 0, &args, rows, cols);
}

static ag_status vk_k_cross_entropy(ag_bstream *s, const ag_k_cross_entropy *a) {
  return run_ce(s, a->call, a->loss, a->logits, a->targets, NULL, a->n, a->c, a->ignore_index);
}

static ag_status vk_k_cross_entropy_bwd(ag_bstream *s, const ag_k_cross_entropy_bwd *a) {
  return run_ce(s, a->call, a->dlogits, a->logits, a->targets, a->grad, a->n, a->c, a->ignore_index);
}

static ag_status vk_k_layernorm(ag_bstream *s, const ag_k_layernorm *a) {
  const ag_kernel_call *c = a->call;
  int64_t rows = a->n, cols = a->d;
  if (!rows) return AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(a->y);
  args.p[1] = oaddr(a->x);
  args.p[2] = opt_addr(a->weight);
  args.p[3] = opt_addr(a->bias);
  args.p[4] = opt_addr(a->mean);
  args.p[5] = opt_addr(a->rstd);
  args.k[0] = a->x->dtype;
  args.n[0] = rows;
  args.n[1] = cols;
  args.f[0] = (float)a->eps;
  args.n[46] = dbits(a->eps);
  if (a->x->dtype == AG_F64) return rows_d(s, c, VKS_LN_D, &args, rows, cols);
  if (pmode(c)) return prows(s, c, VKS_P_LN, &args, rows, cols);
  return dispatch_rows(s, c, VKS_LN, 0, &args, rows, cols);
}

static ag_status vk_k_layernorm_bwd(ag_bstream *s, const ag_k_layernorm_bwd *a) {
  const ag_kernel_call *c = a->call;
  const ag_koperand *dx = a->dx;
  int64_t cols = dx->ndim ? dx->shape[dx->ndim - 1] : 1;
  int64_t rows = cols ? numel(dx) / cols : 0;
  if (!rows || !cols) return AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(dx);
  args.p[1] = oaddr(a->dy);
  args.p[2] = oaddr(a->x);
  args.p[3] = oaddr(a->mean);
  args.p[4] = oaddr(a->rstd);
  args.p[5] = opt_addr(a->weight);
  args.k[0] = dx->dtype;
  args.n[0] = rows;
  args.n[1] = cols;
  bool d = dx->dtype == AG_F64;
  if (pmode(c)) {
    /* dx by rows; dw_j, db_j: S over the rows, a work-group per column */
    ag_status st = prows(s, c, VKS_P_LN_BWD, &args, rows, cols);
    if (st != AG_OK || AGK_MULTI_GROUPS(a) < 1) return st;
    const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw), *db = &AGK_MULTI(a, 0, db);
    vkb_args w = {0};
    w.p[0] = addr(dw->base, dw->offset);
    w.p[1] = addr(db->base, db->offset);
    w.p[2] = oaddr(a->dy);
    w.p[3] = oaddr(a->x);
    w.p[4] = oaddr(a->mean);
    w.p[5] = oaddr(a->rstd);
    w.k[0] = dx->dtype;
    w.k[1] = dw->dtype;
    w.k[2] = db->dtype;
    w.n[0] = rows;
    w.n[1] = cols;
    return prows(s, c, VKS_P_LN_BWD_WB, &w, cols, rows);
  }
  ag_status st =
      d ? rows_d(s, c, VKS_LN_BWD_D, &args, rows, cols) : dispatch_rows(s, c, VKS_LN_BWD, 0, &args, rows, cols);
  if (st != AG_OK || AGK_MULTI_GROUPS(a) < 1) return st;
  const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw), *db = &AGK_MULTI(a, 0, db);
  vkb_args w = {0};
  w.p[0] = addr(dw->base, dw->offset);
  w.p[1] = addr(db->base, db->offset);
  w.p[2] = oaddr(a->dy);
  w.p[3] = oaddr(a->x);
  w.p[4] = oaddr(a->mean);
  w.p[5] = oaddr(a->rstd);
  w.k[0] = dx->dtype;
  w.n[0] = rows;
  w.n[1] = cols;
  int64_t ch = chunk_of(s, rows);
  for (int64_t r0 = 0; r0 < rows && st == AG_OK; r0 += ch) {
    w.n[2] = r0;
    w.n[3] = rows - r0 < ch ? rows - r0 : ch;
    st = vkb_dispatch1(s, d ? VKS_LN_BWD_WB_D : VKS_LN_BWD_WB, 0, &w, cols);
  }
  return st;
}

static ag_status vk_k_rmsnorm(ag_bstream *s, const ag_k_rmsnorm *a) {
  const ag_kernel_call *c = a->call;
  int64_t rows = a->n, cols = a->d;
  if (!rows || !cols) return AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(a->y);
  args.p[1] = oaddr(a->x);
  args.p[2] = opt_addr(a->weight);
  args.p[3] = opt_addr(a->rstd);
  args.k[0] = a->x->dtype;
  args.n[0] = rows;
  args.n[1] = cols;
  args.f[0] = (float)a->eps;
  args.n[46] = dbits(a->eps);
  if (a->x->dtype == AG_F64) return rows_d(s, c, VKS_RMS_D, &args, rows, cols);
  if (pmode(c)) return prows(s, c, VKS_P_RMS, &args, rows, cols);
  return dispatch_rows(s, c, VKS_RMS, 0, &args, rows, cols);
}

static ag_status vk_k_rmsnorm_bwd(ag_bstream *s, const ag_k_rmsnorm_bwd *a) {
  const ag_kernel_call *c = a->call;
  int64_t rows = a->n, cols = a->d;
  if (!cols) return AG_OK;
  ag_status st = AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(a->dx);
  args.p[1] = oaddr(a->dy);
  args.p[2] = oaddr(a->x);
  args.p[3] = oaddr(a->rstd);
  args.p[4] = opt_addr(a->weight);
  args.k[0] = a->dx->dtype;
  args.n[0] = rows;
  args.n[1] = cols;
  bool d = a->dx->dtype == AG_F64;
  if (pmode(c)) {
    if (rows && (st = prows(s, c, VKS_P_RMS_BWD, &args, rows, cols)) != AG_OK) return st;
    if (AGK_MULTI_GROUPS(a) < 1 || !AGK_MULTI(a, 0, dw).base) return AG_OK;
    const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw);
    vkb_args w = {0};
    w.p[0] = addr(dw->base, dw->offset);
    w.p[2] = oaddr(a->dy);
    w.p[3] = oaddr(a->x);
    w.p[5] = oaddr(a->rstd);
    w.k[0] = a->dx->dtype;
    w.k[1] = dw->dtype;
    w.n[0] = rows;
    w.n[1] = cols;
    return prows(s, c, VKS_P_RMS_BWD_W, &w, cols, rows);
  }
  vkb_shader wsh = d ? VKS_RMS_BWD_W_D : VKS_RMS_BWD_W;
  if (rows)
    st = d ? rows_d(s, c, VKS_RMS_BWD_D, &args, rows, cols) : dispatch_rows(s, c, VKS_RMS_BWD, 0, &args, rows, cols);
  if (st != AG_OK || AGK_MULTI_GROUPS(a) < 1 || !AGK_MULTI(a, 0, dw).base) return st;
  const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw);
  vkb_args w = {0};
  w.p[0] = addr(dw->base, dw->offset);
  w.p[1] = oaddr(a->dy);
  w.p[2] = oaddr(a->x);
  w.p[3] = oaddr(a->rstd);
  w.k[0] = a->dx->dtype;
  w.n[0] = rows;
  w.n[1] = cols;
  if (!rows) {
    w.n[3] = 0; /* no rows: dw = 0 */
    return vkb_dispatch1(s, wsh, 0, &w, cols);
  }
  int64_t ch = chunk_of(s, rows);
  for (int64_t r0 = 0; r0 < rows && st == AG_OK; r0 += ch) {
    w.n[2] = r0;
    w.n[3] = rows - r0 < ch ? rows - r0 : ch;
    st = vkb_dispatch1(s, wsh, 0, &w, cols);
  }
  return st;
}

static ag_status vk_k_var(ag_bstream *s, const ag_k_var *a) {
  const ag_kernel_call *c = a->call;
  int64_t outer = a->outer, r = a->r, inner = a->inner;
  if (!outer || !inner) return AG_OK;
  double d = (double)r - a->correction;
  vkb_args args = {0};
  args.p[0] = oaddr(a->out);
  args.p[1] = oaddr(a->x);
  args.k[0] = a->x->dtype;
  args.k[6] = a->variant;
  args.f[0] = d > 0 ? (float)d : 0.0f;
  args.n[0] = outer;
  args.n[1] = r;
  args.n[2] = inner;
  if (!pmode(c) && r > (a->x->dtype == AG_F64 ? 4096 : 2 * VKB_TREE_CHUNK)) {
    /* long lines: the mean, then the squares about it, each by tree passes */
    bool f64 = a->x->dtype == AG_F64;
    int64_t rows = outer * inner;
    size_t mbytes = ((size_t)rows * 8u + 255u) / 256u * 256u;
    uint64_t scratch;
    ag_status st = vkb_scratch(s, mbytes + vkb_tree_scratch(rows, r), &scratch);
    if (st != AG_OK) return st;
    vkb_tree_red t = {.out = scratch, .x = oaddr(a->x), .odt = f64 ? AG_F64 : AG_F32, .xdt = a->x->dtype,
                      .op = AG_R_SUM, .outer = outer, .r = r, .inner = inner, .scale = 1.0 / (double)r, .f64 = f64};
    if ((st = vkb_tree_reduce(s, scratch + mbytes, &t)) != AG_OK) return st;
    t.mean = scratch;
    t.out = oaddr(a->out);
    t.odt = a->out->dtype;
    t.scale = d > 0 ? 1.0 / d : INFINITY;
    t.sqrt = a->variant == AG_KV_STD;
    return vkb_tree_reduce(s, scratch + mbytes, &t);
  }
  if (a->x->dtype == AG_F64) { /* f64.comp: an invocation per output */
    ag_status st = loop_ok(s, c, 2 * r);
    if (st != AG_OK) return st;
    args.n[46] = dbits(d > 0 ? d : 0.0);
    return vkb_dispatch1(s, VKS_VAR_D, 0, &args, outer * inner);
  }
  if (pmode(c)) return prows(s, c, VKS_P_VAR, &args, outer * inner, r);
  if (r > 0 && (inner == 1 || r > 4096)) return dispatch_rows(s, c, VKS_VAR_ROWS, 0, &args, outer * inner, r);
  return vkb_dispatch1(s, VKS_VAR_COLS, 0, &args, outer * inner);
}

/* Lines longer than the driver's loop limit go in several dispatches of
 * 32768 steps, carrying each line's f32 sum in scratch: the order of the
 * additions is the CPU's either way. */
static ag_status vk_k_cumsum(ag_bstream *s, const ag_k_cumsum *a) {
  int64_t outer = a->outer, r = a->r, inner = a->inner;
  if (!outer || !r || !inner) return AG_OK;
  if (!pmode(a->call) && r > (a->x->dtype == AG_F64 ? 4096 : 2 * VKB_TREE_CHUNK)) { /* a multi-pass scan */
    uint64_t scratch;
    ag_status st = vkb_scratch(s, vkb_tree_cumsum_scratch(outer * inner, r), &scratch);
    return st != AG_OK ? st
                       : vkb_tree_cumsum(s, scratch, oaddr(a->out), oaddr(a->x), a->x->dtype, a->variant, outer, r,
                                         inner);
  }
  if (a->x->dtype == AG_F64) { /* f64.comp: an invocation per line */
    ag_status st = loop_ok(s, a->call, r);
    if (st != AG_OK) return st;
    vkb_args args = {0};
    args.p[0] = oaddr(a->out);
    args.p[1] = oaddr(a->x);
    args.k[6] = a->variant;
    args.n[0] = outer;
    args.n[1] = r;
    args.n[2] = inner;
    return vkb_dispatch1(s, VKS_CUMSUM_D, 0, &args, outer * inner);
  }
  uint64_t carry;
  ag_status st = vkb_scratch(s, (size_t)(outer * inner) * sizeof(float), &carry);
  if (st != AG_OK) return st;
  int64_t chunk = r <= s->d->loop_limit ? r : 32768;
  vkb_args args = {0};
  args.p[0] = oaddr(a->out);
  args.p[1] = oaddr(a->x);
  args.p[2] = carry;
  args.k[0] = a->x->dtype;
  args.k[6] = a->variant;
  args.n[0] = outer;
  args.n[1] = r;
  args.n[2] = inner;
  for (int64_t k0 = 0; k0 < r && st == AG_OK; k0 += chunk) {
    args.n[3] = k0;
    args.n[4] = r - k0 < chunk ? r - k0 : chunk;
    st = vkb_dispatch1(s, VKS_CUMSUM, 0, &args, outer * inner);
  }
  return st;
}

/* out: out or dx; x: x or dout; bwd: the scatter-add */
static ag_status run_gather(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *out, const ag_koperand *x,
                            const ag_koperand *ix, int64_t O, int64_t K, int64_t I, int64_t X, bool bwd) {
  int64_t items = bwd ? O * I : O * K * I;
  if (!items || (bwd && !X)) return AG_OK;
  ag_status st = bwd ? loop_ok(s, c, X + K) : AG_OK;
  if (st != AG_OK) return st;
  vkb_args args = {0};
  args.p[0] = oaddr(out);
  args.p[1] = oaddr(x);
  args.p[2] = oaddr(ix);
  args.k[0] = x->dtype;
  args.k[3] = ix->dtype;
  args.n[0] = O;
  args.n[1] = K;
  args.n[2] = I;
  args.n[3] = X;
  /* the index's strides along o, k and in (kops.h: ndim 3) */
  for (int d = 0; d < 3; d++) args.n[4 + d] = ix->strides[d];
  if (!bwd) {
    args.p[7] = s->err.addr;
    s->err_armed = true;
  }
  vkb_shader sh = x->dtype == AG_F64 ? (bwd ? VKS_GATHER_BWD_D : VKS_GATHER_D) : bwd ? VKS_GATHER_BWD : VKS_GATHER;
  return vkb_dispatch1(s, sh, 0, &args, items);
}

static ag_status vk_k_gather(ag_bstream *s, const ag_k_gather *a) {
  return run_gather(s, a->call, a->out, a->x, a->index, a->o, a->k, a->in, a->xlen, false);
}

static ag_status vk_k_gather_bwd(ag_bstream *s, const ag_k_gather_bwd *a) {
  return run_gather(s, a->call, a->dx, a->dout, a->index, a->o, a->k, a->in, a->xlen, true);
}

static ag_status vk_k_topk(ag_bstream *s, const ag_k_topk *a) {
  int64_t O = a->o, R = a->r, I = a->in, K = a->k;
  if (O * R * I == 0 || K == 0) return AG_OK;
  ag_status st = loop_ok(s, a->call, R);
  if (st != AG_OK) return st;
  vkb_args args = {0};
  args.p[0] = oaddr(a->values);
  args.p[1] = oaddr(a->x);
  args.p[2] = oaddr(a->indices);
  args.k[0] = a->x->dtype;
  args.k[6] = a->variant;
  args.n[0] = O;
  args.n[1] = R;
  args.n[2] = I;
  args.n[3] = K;
  return vkb_dispatch1(s, VKS_TOPK, 0, &args, O * R * I);
}
/* Attention (AG_K_SDPA*, attention.comp): a work-group of VKB_SDPA_ROWS
 * invocations, one query row each (forward, dq) or one key row (dk, dv),
 * walking key tiles of VKB_SDPA_Q rows (query tiles of VKB_SDPA_KV for
 * dk, dv) through shared memory. Heads above
 * VKB_SDPA_MAXD (MAXD there: rows live in per-invocation arrays) are
 * declined, and so are shapes whose sequential steps per invocation exceed
 * the driver's loop limit; the core then runs the unfused composition.
 * The forward declines whatever the backward would, so a recorded node
 * always finds its backward. */
#define VKB_SDPA_ROWS 64 /* NR there */
#define VKB_SDPA_Q 16    /* key rows per tile of the forward and dq kernels */
#define VKB_SDPA_KV 15 /* query rows per step of the dk/dv kernel */
#define VKB_SDPA_MAXD 128

static ag_status sdpa_groups(ag_bstream *s, vkb_shader sh, const vkb_args *a, int64_t groups) {
  if (groups <= 0) return AG_OK;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = (uint64_t)groups < maxx ? (uint64_t)groups : maxx, gy = ((uint64_t)groups + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld attention tiles exceed the device's dispatch limits",
                        (long long)groups);
  return vkb_dispatch(s, sh, 0, a, (uint32_t)gx, (uint32_t)gy, 1);
}


/* The shapes of an attention call, checked, and its argument block without
 * the outputs (p0, and for the backward p6, p7, n13, n14). */
typedef struct sdpa_plan {
  int64_t B, H, Hkv, tq, tk;
} sdpa_plan;

static ag_status sdpa_prepare(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *q, const ag_koperand *k,
                              const ag_koperand *v, const ag_koperand *m, const ag_koperand *lse, double scale,
                              double dropout_p, int64_t causal, vkb_args *args, sdpa_plan *pl) {
  int64_t B = q->shape[0], H = q->shape[1], Hkv = k->shape[1], T = q->shape[2], S = k->shape[2], D = q->shape[3],
          Dv = v->shape[3];
  if (D > VKB_SDPA_MAXD || Dv > VKB_SDPA_MAXD)
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %s: head size %lld/%lld above %d", c->name ? c->name : "sdpa",
                        (long long)D, (long long)Dv, VKB_SDPA_MAXD);
  if (Hkv <= 0 || H % Hkv != 0)
    return ag_error_set(AG_ERR_INTERNAL, "vulkan: %s: %lld heads over %lld key/value heads",
                        c->name ? c->name : "sdpa", (long long)H, (long long)Hkv);
  /* loop back-edges of one invocation, counted as if every loop ran in
   * full: the forward and dq walk every key once (a tile load, then D + Dv
   * steps per key); dk/dv walk the queries of every head of the group */
  int64_t tq = (T + VKB_SDPA_ROWS - 1) / VKB_SDPA_ROWS, tk = (S + VKB_SDPA_ROWS - 1) / VKB_SDPA_ROWS;
  int64_t ts = (S + VKB_SDPA_Q - 1) / VKB_SDPA_Q;
  int64_t per_row = 2 * (D + Dv) + 4;
  int64_t fwd =
      2 * (D + Dv) + ts * (2 * ((VKB_SDPA_Q * (D + Dv)) / VKB_SDPA_ROWS + 1) + VKB_SDPA_Q * per_row) + Dv;
  int64_t kvq = (T + VKB_SDPA_KV - 1) / VKB_SDPA_KV;
  int64_t bwd = 2 * (D + Dv) +
                (H / Hkv) * (kvq * (2 * ((VKB_SDPA_KV * (D + Dv)) / VKB_SDPA_ROWS + 1) + Dv + 2) + T * per_row) +
                D + Dv;
  ag_status st = loop_ok(s, c, fwd > bwd ? fwd : bwd);
  if (st != AG_OK) return st;
  int64_t dims[7] = {B, H, Hkv, T, S, D, Dv};
  memcpy(args->n, dims, sizeof dims);
  for (int d = 0; d < 4 && m; d++) args->n[7 + d] = m->strides[d];
  args->n[11] = (int64_t)c->seed;
  args->n[12] = (int64_t)c->offset;
  args->f[0] = (float)scale;
  args->f[1] = (float)dropout_p;
  args->f[2] = (float)(dropout_p < 1 ? 1.0 / (1.0 - dropout_p) : 0.0);
  args->k[0] = q->dtype;
  args->k[1] = causal != 0;
  args->p[1] = oaddr(q);
  args->p[2] = oaddr(k);
  args->p[3] = oaddr(v);
  args->p[4] = opt_addr(m);
  args->p[5] = oaddr(lse);
  pl->B = B;
  pl->H = H;
  pl->Hkv = Hkv;
  pl->tq = tq;
  pl->tk = tk;
  return AG_OK;
}

static ag_status vk_k_sdpa(ag_bstream *s, const ag_k_sdpa *a) {
  vkb_args args = {0};
  sdpa_plan pl = {0};
  ag_status st = sdpa_prepare(s, a->call, a->q, a->k, a->v, a->mask, a->lse, a->scale, a->dropout_p, a->causal,
                              &args, &pl);
  if (st != AG_OK) return st;
  args.p[0] = oaddr(a->out);
  return sdpa_groups(s, VKS_SDPA, &args, pl.B * pl.H * pl.tq);
}

static ag_status vk_k_sdpa_bwd(ag_bstream *s, const ag_k_sdpa_bwd *a) {
  vkb_args args = {0};
  sdpa_plan pl = {0};
  ag_status st = sdpa_prepare(s, a->call, a->q, a->k, a->v, a->mask, a->lse, a->scale, a->dropout_p, a->causal,
                              &args, &pl);
  if (st != AG_OK) return st;
  if (AGK_MULTI_GROUPS(a) < 1)
    return ag_error_set(AG_ERR_INTERNAL, "vulkan: %s: dq, dk, dv and out not given",
                        a->call->name ? a->call->name : "sdpa");
  const ag_kmulti_entry *dq = &AGK_MULTI(a, 0, dq), *dk = &AGK_MULTI(a, 0, dk), *dv = &AGK_MULTI(a, 0, dv),
                        *out = &AGK_MULTI(a, 0, out);
  args.p[0] = addr(dq->base, dq->offset);
  args.p[6] = oaddr(a->dout);
  args.p[7] = addr(out->base, out->offset);
  args.n[13] = (int64_t)addr(dk->base, dk->offset);
  args.n[14] = (int64_t)addr(dv->base, dv->offset);
  if ((st = sdpa_groups(s, VKS_SDPA_BWD_DQ, &args, pl.B * pl.H * pl.tq)) != AG_OK) return st;
  return sdpa_groups(s, VKS_SDPA_BWD_DKV, &args, pl.B * pl.Hkv * pl.tk);
}

static int64_t pick(int64_t v, int64_t dflt) { return v > 0 ? v : dflt; }

/* t: the table (forward) or dtable; out: out or dtable; src: table or dout */
static ag_status run_embedding(ag_bstream *s, const ag_koperand *out, const ag_koperand *src,
                               const ag_koperand *indices, const ag_koperand *t, int64_t n0, int64_t d0, int64_t v0,
                               bool bwd) {
  int64_t n = pick(n0, numel(indices));
  int64_t d = pick(d0, t->ndim > 1 ? t->shape[1] : 1);
  int64_t v = pick(v0, t->ndim ? t->shape[0] : 0);
  if (!n || !d) return AG_OK;
  ag_status st = AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(out);
  args.p[1] = oaddr(src);
  args.p[2] = oaddr(indices);
  args.p[7] = s->err.addr;
  s->err_armed = true;
  args.k[0] = src->dtype;
  args.k[3] = indices->dtype;
  args.k[5] = (int)dsize(t->dtype);
  args.n[0] = n;
  args.n[1] = d;
  args.n[2] = v;
  if (!bwd) return vkb_dispatch1(s, VKS_EMB, 0, &args, n * d);
  int64_t ch = chunk_of(s, n);
  for (int64_t r0 = 0; r0 < n && st == AG_OK; r0 += ch) {
    args.n[3] = r0;
    args.n[4] = n - r0 < ch ? n - r0 : ch;
    st = vkb_dispatch1(s, t->dtype == AG_F64 ? VKS_EMB_BWD_D : VKS_EMB_BWD, 0, &args, d);
  }
  return st;
}

static ag_status vk_k_embedding(ag_bstream *s, const ag_k_embedding *a) {
  return run_embedding(s, a->out, a->table, a->indices, a->table, a->n, a->d, a->v, false);
}

static ag_status vk_k_embedding_bwd(ag_bstream *s, const ag_k_embedding_bwd *a) {
  return run_embedding(s, a->dtable, a->dout, a->indices, a->dtable, a->n, a->d, a->v, true);
}

/* ---- optimizers ---- */

static ag_status vk_k_adamw(ag_bstream *s, const ag_k_adamw *a) {
  const bool p = pmode(a->call);
  for (int g = 0; g < AGK_MULTI_GROUPS(a); g++) {
    const ag_kmulti_entry *param = &AGK_MULTI(a, g, param), *grad = &AGK_MULTI(a, g, grad),
                          *m = &AGK_MULTI(a, g, exp_avg), *v = &AGK_MULTI(a, g, exp_avg_sq);
    int64_t n = param->numel;
    if (!n) continue;
    vkb_args args = {0};
    args.p[0] = addr(param->base, param->offset);
    args.p[1] = addr(grad->base, grad->offset);
    args.p[2] = addr(m->base, m->offset);
    args.p[3] = addr(v->base, v->offset);
    args.p[4] = opt_addr(a->inv_scale);
    args.p[5] = opt_addr(a->found_inf);
    args.n[0] = n;
    /* folded in f64 on the host exactly as the CPU backend folds them */
    args.f[0] = (float)a->beta1;
    args.f[1] = (float)a->beta2;
    args.f[2] = (float)a->eps;
    args.f[3] = (float)(1.0 - a->lr * a->weight_decay);
    args.f[4] = (float)(a->lr / a->bias_correction1);
    args.f[5] = (float)(1.0 / sqrt(a->bias_correction2));
    if (p) { /* docs/numerics.md: each scalar rounded once, the rest in f32 */
      const double f[7] = {a->beta1, a->beta2, a->lr, a->weight_decay, a->eps, a->bias_correction1,
                           a->bias_correction2};
      for (int k = 0; k < 7; k++) args.f[k] = (float)f[k];
    }
    ag_status st = vkb_dispatch1(s, p ? VKS_P_ADAMW : VKS_ADAMW, 0, &args, n);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status vk_k_sgd(ag_bstream *s, const ag_k_sgd *a) {
  const bool p = pmode(a->call);
  for (int g = 0; g < AGK_MULTI_GROUPS(a); g++) {
    const ag_kmulti_entry *param = &AGK_MULTI(a, g, param), *grad = &AGK_MULTI(a, g, grad),
                          *buf = &AGK_MULTI(a, g, momentum_buffer);
    int64_t n = param->numel;
    if (!n) continue;
    vkb_args args = {0};
    args.p[0] = addr(param->base, param->offset);
    args.p[1] = addr(grad->base, grad->offset);
    args.p[2] = addr(buf->base, buf->offset);
    args.p[4] = opt_addr(a->inv_scale);
    args.p[5] = opt_addr(a->found_inf);
    args.n[0] = n;
    args.f[0] = (float)a->lr;
    args.f[1] = (float)a->momentum;
    args.f[2] = (float)a->dampening;
    args.f[3] = (float)a->weight_decay;
    args.k[6] = a->nesterov != 0;
    args.k[7] = a->first_step != 0;
    /* portable: the tests of the contract on the call's doubles */
    args.k[4] = a->weight_decay != 0;
    args.k[5] = a->momentum != 0 && args.p[2] != 0;
    ag_status st = vkb_dispatch1(s, p ? VKS_P_SGD : VKS_SGD, 0, &args, n);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status vk_k_nonfinite_check(ag_bstream *s, const ag_k_nonfinite_check *a) {
  for (int k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    const ag_kmulti_entry *x = &AGK_MULTI(a, k, x);
    if (!x->numel) continue;
    vkb_args args = {0};
    args.p[0] = addr(x->base, x->offset);
    args.p[1] = opt_addr(a->inv_scale);
    args.p[2] = oaddr(a->found_inf);
    args.k[0] = x->dtype;
    args.n[0] = x->numel;
    ag_status st = vkb_dispatch1(s, VKS_NONFINITE, 0, &args, x->numel);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

/* ---- GEMM ---- */

static void mat_dims(const ag_koperand *o, int64_t *b, int64_t *r, int64_t *cc, int64_t *sb, int64_t *sr,
                     int64_t *sc) {
  int nd = o->ndim;
  *b = nd >= 3 ? o->shape[nd - 3] : 1;
  *sb = nd >= 3 ? o->strides[nd - 3] : 0;
  *r = o->shape[nd - 2];
  *cc = o->shape[nd - 1];
  *sr = o->strides[nd - 2];
  *sc = o->strides[nd - 1];
}

/* The register-blocked GEMM (gemm_tiled.comp) takes f32 or f16 inputs
 * (both the same) outside the portable mode; other dtypes, the portable
 * mode and a device without its shared memory keep gemm.comp. */
static vkb_shader gemm_tiled(const ag_bstream *s, const ag_koperand *x, const ag_koperand *y,
                             const ag_kernel_call *c) {
  if (pmode(c) || x->dtype != y->dtype || !s->d->gemm_cfg) return VKS_GEMM;
  return x->dtype == AG_F32 ? VKS_GEMM_T32 : x->dtype == AG_F16 ? VKS_GEMM_T16 : VKS_GEMM;
}

/* The vec4 load mode of one operand (gemm_tiled.comp's k5, k6): 1 when the
 * second stride is 1, 2 when the first is; the address and the batch and
 * other stride multiples of 4 elements. */
static int gemm_vec_mode(uint64_t addr, size_t es, int64_t sb, int64_t s0, int64_t s1) {
  if (addr % (4 * es) != 0 || sb % 4 != 0) return 0;
  if (s1 == 1 && s0 % 4 == 0) return 1;
  if (s0 == 1 && s1 % 4 == 0) return 2;
  return 0;
}

/* One GEMM dispatch (or several, past the device's grid limits) of
 * `nb` batches from args->n[9]. */
static ag_status gemm_run(ag_bstream *s, vkb_shader sh, vkb_args *args, int64_t M, int64_t N, int64_t nb) {
  int spec = 0, bm = 64, bn = 64;
  if (sh == VKS_GEMM_T32 || sh == VKS_GEMM_T16) {
    size_t es = sh == VKS_GEMM_T32 ? 4 : 2;
    spec = s->d->gemm_cfg;
    bm = 8 * (spec & 15);
    bn = 8 * ((spec >> 4) & 15);
    args->k[5] = gemm_vec_mode(args->p[1], es, args->n[3], args->n[4], args->n[5]);
    args->k[6] = gemm_vec_mode(args->p[2], es, args->n[6], args->n[7], args->n[8]);
  }
  int64_t tx = (N + bn - 1) / bn, ty = (M + bm - 1) / bm;
  const VkPhysicalDeviceLimits *lim = &s->d->props.limits;
  if (tx > (int64_t)lim->maxComputeWorkGroupCount[0])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: matmul with %lld columns exceeds the dispatch limits", (long long)N);
  int64_t ymax = lim->maxComputeWorkGroupCount[1], zmax = lim->maxComputeWorkGroupCount[2];
  int64_t bfirst = args->n[9];
  for (int64_t b0 = 0; b0 < nb; b0 += zmax)
    for (int64_t y0 = 0; y0 < ty; y0 += ymax) {
      args->n[9] = bfirst + b0;
      args->n[10] = y0;
      int64_t nz = nb - b0 < zmax ? nb - b0 : zmax, ny = ty - y0 < ymax ? ty - y0 : ymax;
      ag_status st = vkb_dispatch(s, sh, spec, args, (uint32_t)tx, (uint32_t)ny, (uint32_t)nz);
      if (st != AG_OK) return st;
    }
  return AG_OK;
}

/* Inner dimensions past VKB_SPLIT_K are split: the K chunks of each
 * batch's product go to the scratch buffer as the batches of one GEMM
 * dispatch ([S, M, N] partials in f32, f64 for f64), then a tree pass sums
 * them in a fixed order into C with alpha and beta. No invocation walks
 * more than `kc` steps of K. */
#define VKB_SPLIT_K ((int64_t)1 << 17)
static ag_status matmul_split_k(ag_bstream *s, const ag_k_matmul *a, int64_t B, int64_t M, int64_t K, int64_t N,
                                int64_t xb, int64_t xr, int64_t xc, int64_t yb, int64_t yr, int64_t yc) {
  const ag_koperand *o = a->c, *x = a->a, *y = a->b;
  bool d = o->dtype == AG_F64;
  size_t es = d ? 8 : 4;
  /* chunks of 64K, longer where the partials would pass 256 MiB */
  int64_t kc = (int64_t)1 << 16, mn = M * N;
  int64_t smax = (int64_t)((((size_t)256 << 20) / es) / (size_t)mn);
  if (smax < 2) smax = 2;
  if ((K + kc - 1) / kc > smax) kc = ((K + smax - 1) / smax + 15) / 16 * 16;
  int64_t S = (K + kc - 1) / kc, last = K - (S - 1) * kc;
  size_t part_bytes = (size_t)(S * mn) * es;
  size_t need = part_bytes + vkb_tree_scratch(1, S);
  uint64_t scratch;
  ag_status st = vkb_scratch(s, need, &scratch);
  for (int64_t b = 0; b < B && st == AG_OK; b++) {
    /* chunk q of K is batch q: A advanced by kc columns, B by kc rows */
    vkb_args g = {0};
    g.p[0] = scratch;
    g.p[1] = oaddr(x) + (uint64_t)(b * xb) * dsize(x->dtype);
    g.p[2] = oaddr(y) + (uint64_t)(b * yb) * dsize(y->dtype);
    g.k[0] = d ? AG_F64 : AG_F32;
    g.k[1] = x->dtype;
    g.k[2] = y->dtype;
    g.n[0] = M;
    g.n[1] = N;
    g.n[3] = kc * xc;
    g.n[4] = xr;
    g.n[5] = xc;
    g.n[6] = kc * yr;
    g.n[7] = yr;
    g.n[8] = yc;
    g.f[0] = 1.0f;
    g.k[3] = 0;
    g.k[4] = 0;
    memcpy(&g.n[46], &(double){1.0}, 8);
    for (int pass = 0; pass < 2 && st == AG_OK; pass++) {
      /* the S - 1 full chunks, then the last (shorter) one */
      int64_t nb = pass == 0 ? S - 1 : 1, q0 = pass == 0 ? 0 : S - 1;
      if (!nb) continue;
      vkb_args h = g;
      h.n[2] = pass == 0 ? kc : last;
      h.p[0] += (uint64_t)(q0 * mn) * es;
      h.p[1] += (uint64_t)(q0 * kc * xc) * dsize(x->dtype);
      h.p[2] += (uint64_t)(q0 * kc * yr) * dsize(y->dtype);
      if (d) {
        h.n[9] = nb;
        st = vkb_dispatch1(s, VKS_GEMM_D, 0, &h, nb * mn);
        continue;
      }
      h.n[9] = 0;
      st = gemm_run(s, gemm_tiled(s, x, y, a->call), &h, M, N, nb);
    }
    if (st != AG_OK) break;
    vkb_tree_red t = {.out = oaddr(o) + (uint64_t)(b * mn) * dsize(o->dtype), .x = scratch, .odt = o->dtype,
                      .xdt = d ? AG_F64 : AG_F32, .op = AG_R_SUM, .outer = 1, .r = S, .inner = mn,
                      .scale = a->alpha, .beta = a->beta, .f64 = d};
    st = vkb_tree_reduce(s, scratch + part_bytes, &t);
  }
  return st;
}

static ag_status vk_k_matmul(ag_bstream *s, const ag_k_matmul *a) {
  const ag_koperand *o = a->c, *x = a->a, *y = a->b;
  int64_t B, M, K, N, xb, xr, xc, yb, yr, yc, t0, t1, t2;
  mat_dims(x, &B, &M, &K, &xb, &xr, &xc);
  mat_dims(y, &t0, &t1, &N, &yb, &yr, &yc);
  mat_dims(o, &B, &M, &N, &t0, &t1, &t2);
  if (!B || !M || !N) return AG_OK;
  if (!K && !pmode(a->call)) {
    /* alpha * (empty product) = 0: C = beta * C (portable: the module's
     * own alpha * +0 + beta * C) */
    if (a->beta == 0) return run_fill(s, o, 0.0);
    return run_unary(s, o, o, AG_U_AFFINE, a->beta, 0.0);
  }
  if (!pmode(a->call) && K > VKB_SPLIT_K && M * N <= 64) { /* a dot product per output, tree passes */
    uint64_t scratch = 0;
    size_t need = vkb_tree_scratch(B * M * N, K);
    ag_status st = need ? vkb_scratch(s, need, &scratch) : AG_OK;
    if (st != AG_OK) return st;
    vkb_tree_red t = {.out = oaddr(o), .x = oaddr(x), .odt = o->dtype, .xdt = x->dtype, .op = AG_R_SUM,
                      .outer = B * M * N, .r = K, .inner = 1, .scale = a->alpha, .beta = a->beta,
                      .f64 = o->dtype == AG_F64, .dot = true, .y = oaddr(y), .ydt = y->dtype, .M = M, .N = N,
                      .xs = {B > 1 ? xb : 0, xr, xc}, .ys = {B > 1 ? yb : 0, yr, yc}};
    return vkb_tree_reduce(s, scratch, &t);
  }
  if (!pmode(a->call) && K > VKB_SPLIT_K) return matmul_split_k(s, a, B, M, K, N, xb, xr, xc, yb, yr, yc);
  /* the back-edges an invocation takes: one per K slice (gemm_tiled.comp
   * unrolls every other loop; gemm.comp's slices are 16 deep) */
  vkb_shader tsh = gemm_tiled(s, x, y, a->call);
  int64_t bk = tsh == VKS_GEMM ? 16 : (s->d->gemm_cfg >> 8) & 63;
  ag_status lst = loop_ok(s, a->call, o->dtype == AG_F64 ? K : (K + bk - 1) / bk);
  if (lst != AG_OK) return lst;
  vkb_args args = {0};
  args.p[0] = oaddr(o);
  args.p[1] = oaddr(x);
  args.p[2] = oaddr(y);
  args.k[0] = o->dtype;
  args.k[1] = x->dtype;
  args.k[2] = y->dtype;
  args.n[0] = M;
  args.n[1] = N;
  args.n[2] = K;
  args.n[3] = B > 1 ? xb : 0;
  args.n[4] = xr;
  args.n[5] = xc;
  args.n[6] = B > 1 ? yb : 0;
  args.n[7] = yr;
  args.n[8] = yc;
  args.f[0] = (float)a->alpha;
  args.f[1] = (float)a->beta;
  args.k[3] = a->alpha != 1.0;
  args.k[4] = a->beta != 0.0;
  vkb_shader gsh = pmode(a->call) ? VKS_P_GEMM : tsh;
  if (o->dtype == AG_F64) { /* f64.comp: an invocation per output */
    args.n[9] = B;
    args.n[46] = dbits(a->alpha);
    args.n[47] = dbits(a->beta);
    return vkb_dispatch1(s, VKS_GEMM_D, 0, &args, B * M * N);
  }
  /* grids beyond the device's limits in y (rows) and z (batches) are
   * split into several dispatches */
  args.n[9] = 0;
  return gemm_run(s, gsh, &args, M, N, B);
}

/* ---- vision (f32) ---- */

/* A window of the vision ops (kops.h's AGK_WINDOW): strides, padding, and
 * the dilation (convolutions) or the kernel size (pooling). */
typedef struct vk_window {
  int64_t stride_h, stride_w, pad_h, pad_w, h, w;
} vk_window;
#define VK_WINDOW(a, third) \
  ((vk_window){(a)->stride_h, (a)->stride_w, (a)->pad_h, (a)->pad_w, (a)->third##_h, (a)->third##_w})


static void conv_args(vkb_args *args, const ag_conv_geom *g, const ag_koperand *o0, const ag_koperand *o1,
                      const ag_koperand *o2) {
  const int64_t geo[16] = {g->N,  g->C,  g->H,  g->W,  g->Co, g->Ho, g->Wo, g->kh,
                           g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, g->G};
  memcpy(args->n, geo, sizeof geo);
  args->p[0] = oaddr(o0);
  args->p[1] = oaddr(o1);
  args->p[2] = oaddr(o2);
}

static ag_status vk_k_conv2d(ag_bstream *s, const ag_k_conv2d *a) {
  ag_conv_geom g = AG_CONV_GEOM(a, a->x, a->y, a->w);
  vkb_args args = {0};
  conv_args(&args, &g, a->y, a->x, a->w);
  args.p[3] = opt_addr(a->bias);
  const int64_t Cg = g.C / g.G;
  ag_status st = loop_ok(s, a->call, Cg * g.kh * g.kw + Cg * g.kh + Cg);
  if (st != AG_OK) return st;
  return vkb_dispatch1(s, pmode(a->call) ? VKS_P_CONV : VKS_CONV, 0, &args, g.N * g.Co * g.Ho * g.Wo);
}

static ag_status vk_k_conv2d_bwd_input(ag_bstream *s, const ag_k_conv2d_bwd_input *a) {
  ag_conv_geom g = AG_CONV_GEOM(a, a->dx, a->dy, a->w);
  vkb_args args = {0};
  conv_args(&args, &g, a->dx, a->dy, a->w);
  const int64_t Cog = g.Co / g.G;
  ag_status st = loop_ok(s, a->call, Cog * g.kh * g.kw + Cog * g.kh + Cog);
  if (st != AG_OK) return st;
  return vkb_dispatch1(s, pmode(a->call) ? VKS_P_CONV_BWD_IN : VKS_CONV_BWD_IN, 0, &args, g.N * g.C * g.H * g.W);
}

static ag_status vk_k_conv2d_bwd_weight(ag_bstream *s, const ag_k_conv2d_bwd_weight *a) {
  ag_conv_geom g = AG_CONV_GEOM(a, a->x, a->dy, a->dw);
  vkb_args args = {0};
  conv_args(&args, &g, a->dw, a->dy, a->x);
  const int64_t Cg = g.C / g.G;
  if (pmode(a->call)) return prows(s, a->call, VKS_P_CONV_BWD_W, &args, g.Co * Cg * g.kh * g.kw, g.N * g.Ho * g.Wo);
  return dispatch_rows(s, a->call, VKS_CONV_BWD_W, 0, &args, g.Co * Cg * g.kh * g.kw, g.N * g.Ho * g.Wo);
}

/* X, Y: the forward's input and output (dx and dy for the backward); o0,
 * o1 the operands in the shader's order (y, x or dx, dy) */
static ag_status run_pool(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *X, const ag_koperand *Y,
                          const ag_koperand *o0, const ag_koperand *o1, const ag_koperand *argmax, int variant,
                          vk_window win, int64_t count_pad, bool bwd) {
  vkb_args args = {0};
  const int64_t m[11] = {X->shape[0] * X->shape[1], X->shape[2], X->shape[3], Y->shape[2], Y->shape[3],
                         win.stride_h, win.stride_w, win.pad_h, win.pad_w, win.h, win.w};
  memcpy(args.n, m, sizeof m);
  args.k[6] = variant;
  args.k[7] = count_pad != 0;
  args.p[0] = oaddr(o0);
  args.p[1] = oaddr(o1);
  args.p[2] = variant == AG_P_MAX ? opt_addr(argmax) : 0;
  /* window loops: at most the input plane for adaptive pooling */
  ag_status st = loop_ok(s, c, variant == AG_P_ADAPTIVE_AVG ? m[1] * m[2] + m[1] : win.h * win.w + win.h);
  if (st != AG_OK) return st;
  vkb_shader sh = pmode(c) ? (bwd ? VKS_P_POOL_BWD : VKS_P_POOL) : bwd ? VKS_POOL_BWD : VKS_POOL;
  return vkb_dispatch1(s, sh, 0, &args, m[0] * (bwd ? m[1] * m[2] : m[3] * m[4]));
}

static ag_status vk_k_pool2d(ag_bstream *s, const ag_k_pool2d *a) {
  return run_pool(s, a->call, a->x, a->y, a->y, a->x, a->argmax, a->variant, VK_WINDOW(a, kernel), a->count_pad,
                  false);
}

static ag_status vk_k_pool2d_bwd(ag_bstream *s, const ag_k_pool2d_bwd *a) {
  return run_pool(s, a->call, a->dx, a->dy, a->dx, a->dy, a->argmax, a->variant, VK_WINDOW(a, kernel), a->count_pad,
                  true);
}

static ag_status vk_k_bn_stats(ag_bstream *s, const ag_k_bn_stats *a) {
  if (a->c <= 0) return AG_OK;
  vkb_args args = {0};
  args.p[0] = oaddr(a->stats);
  args.p[1] = oaddr(a->a);
  args.p[2] = opt_addr(a->b);
  args.p[3] = a->variant == AG_KV_BN_SUMS ? opt_addr(a->mu) : 0;
  args.k[6] = a->variant;
  args.n[0] = a->n;
  args.n[1] = a->c;
  args.n[2] = a->hw;
  if (pmode(a->call)) return prows(s, a->call, VKS_P_BN_STATS, &args, a->c, a->n * a->hw);
  return dispatch_rows(s, a->call, VKS_BN_STATS, 0, &args, a->c, a->n * a->hw);
}

static ag_status vk_k_bn_apply(ag_bstream *s, const ag_k_bn_apply *a) {
  vkb_args args = {0};
  args.p[0] = oaddr(a->y);
  args.p[1] = oaddr(a->a);
  args.p[2] = oaddr(a->coef);
  args.p[3] = a->variant == AG_KV_BN_AFFINE_B ? opt_addr(a->b) : 0;
  args.k[6] = a->variant;
  args.n[0] = a->n * a->c * a->hw;
  args.n[1] = a->c;
  args.n[2] = a->hw > 0 ? a->hw : 1;
  return vkb_dispatch1(s, VKS_BN_APPLY, 0, &args, args.n[0]);
}

#include "vk_resample.inc"

#define AGK_IMPL(name) vk_k_##name
#define AGK_CTX ag_bstream *
AGK_DEFINE_DISPATCH_PORTABLE(vk_dispatch, VK_KOPS, VK_KOPS_PORTABLE, "vulkan")
AGK_DEFINE_SUPPORTS(vk_supports_data, VK_KOPS)

/* The ops exact by nature run f64 in portable mode (docs/numerics.md):
 * data movement, comparisons, copies and casts (one rounding). */
static bool exact_f64(const ag_kernel_call *c) {
  switch (c->op) {
    case AG_K_FILL:
    case AG_K_WHERE:
    case AG_K_EMBEDDING:
    case AG_K_GATHER:
    case AG_K_SORT:
    case AG_K_PAD: return true;
    case AG_K_REDUCE: return c->sub != AG_R_SUM;
    case AG_K_UNARY: return c->sub == AG_U_COPY;
    default: return false;
  }
}

ag_status vkb_launch_locked(ag_bstream *s, const ag_kernel_call *c) {
  /* f64 runs only where the device has shaderFloat64; a cast into f64 is
   * asked of supports() by its input's dtype, so it is refused here */
  for (int k = 0; k < c->n_operands && k < AG_KMAX_OPERANDS && !s->d->f64; k++)
    if (c->o[k].base && c->o[k].dtype == AG_F64)
      return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %s: f64 needs shaderFloat64, which vulkan:%d lacks",
                          c->name ? c->name : "launch", s->dev);
  if (pmode(c) && !exact_f64(c)) {
    /* f64 anywhere (a cast into it too) is refused before the dispatch,
     * but in the ops exact by nature */
    for (int k = 0; k < c->n_operands && k < AG_KMAX_OPERANDS; k++)
      if (c->o[k].base && c->o[k].dtype == AG_F64) return ag_k__not_portable(c, "vulkan", AG_F64);
  }
  return vk_dispatch(s, c);
}

/* What vkb_launch runs with AG_KF_PORTABLE: VK_KOPS_PORTABLE, within
 * what it runs at all. */
bool vkb_supports_portable(int dev, ag_kop op, int sub, ag_dtype dt) {
  if (!vk_dispatch_portable(op, sub, dt) || !vkb_supports(dev, op, sub, dt)) return false;
  if (dt != AG_F64) return true;
  ag_kernel_call c = {.op = op, .sub = sub};
  return exact_f64(&c);
}

/* Exactly what vkb_launch runs: VK_KOPS, then what depends on the device
 * (f64 where it has shaderFloat64) and the sub-op rules. */
bool vkb_supports(int dev, ag_kop op, int sub, ag_dtype dt) {
  if (!vk_supports_data(op, sub, dt)) return false;
  if (dt == AG_F64 && !vkb_dev(dev)->f64) return false;
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
      return sub >= 0 && sub < AG_REDUCE_COUNT && !(sub == AG_R_SUM && (dt == AG_U8 || dt == AG_BOOL));
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return sub >= 0 && sub < AG_POOL_OP_COUNT;
    default: return true;
  }
}
