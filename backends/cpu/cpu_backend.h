/* The built-in CPU backend: entry point for the registry and the interface
 * between the stream machinery (cpu_backend.c) and the kernel families
 * (cpu_kernels.c, cpu_rows.c, cpu_reduce.c, cpu_random.c, cpu_optim.c, cpu_matmul.c,
 * cpu_conv.c). */
#ifndef AG_CPU_BACKEND_H
#define AG_CPU_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

/* The CPU backend sees the public backend ABI and two core services: the
 * host thread pool and the half-precision conversions (tensor/half.h). */
#include "anygrad/backend.h"
#include "hidden.h"
#include "runtime/threadpool.h"

/* The CPU backend's vtable. Borrowed, static; never NULL. */
AG_HIDDEN const ag_backend *ag__cpu_backend(void);

/* The kernel ops the CPU runs, with their dtypes and variants, one op a line:
 * kargs.h generates the dispatch and supports() data from it (cpu_kernels.c)
 * and the declarations below; an op not listed is AG_ERR_UNSUPPORTED. VANY:
 * the sub-op codes of UNARY, BINARY, REDUCE and POOL2D* are checked by
 * cpu_kernels.c (cpu_supports_subop). Each op is one function
 *   ag_status cpu_k_<name>(ag_kernel_error *err, const ag_k_<name> *a)
 * reading its named arguments; index errors go to *err (the first wins).
 * Every line ends in a backslash (the list ends at the blank line), so an
 * op is added by adding its line. */

#define CPU_F32_F64 (AGK_DT(F32) | AGK_DT(F64))
#define CPU_VIDX (AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))
#define CPU_KOPS(X)                                                                                 \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                                            \
  X(ARANGE, arange, AGK_DTS_ALL, AGK_VNONE)                                                        \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT64, AGK_VNONE)                                        \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT64, AGK_VNONE)                                          \
  X(UNARY, unary, AGK_DTS_ALL, AGK_VANY)                                                           \
  X(BINARY, binary, AGK_DTS_ALL, AGK_VANY)                                                         \
  X(WHERE, where, AGK_DTS_ALL, AGK_VNONE)                                                          \
  X(REDUCE, reduce, AGK_DTS_ALL, AGK_VANY)                                                         \
  X(MATMUL, matmul, AGK_DTS_FLOAT64, AGK_VNONE)                                                    \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))      \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX)) \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT64, CPU_VIDX)                                       \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT64, CPU_VIDX)                               \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT64, AGK_VNONE)                                              \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                      \
  X(EMBEDDING, embedding, AGK_DTS_ALL, CPU_VIDX)                                                   \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT64, CPU_VIDX)                                       \
  X(DROPOUT, dropout, AGK_DTS_FLOAT64, AGK_VNONE)                                                  \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                          \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                              \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT64, AGK_VNONE)                                    \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT64, AGK_VNONE)                                                      \
  X(CONV2D, conv2d, CPU_F32_F64, AGK_VNONE)                                                        \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, CPU_F32_F64, AGK_VNONE)                                    \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, CPU_F32_F64, AGK_VNONE)                                  \
  X(POOL2D, pool2d, CPU_F32_F64, AGK_VANY)                                                         \
  X(POOL2D_BWD, pool2d_bwd, CPU_F32_F64, AGK_VANY)                                                 \
  X(BN_STATS, bn_stats, CPU_F32_F64, AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))         \
  X(BN_APPLY, bn_apply, CPU_F32_F64, AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))       \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT64, AGK_VNONE)                                                  \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                          \
  X(VAR, var, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                          \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX)) \
  X(GATHER, gather, AGK_DTS_FLOAT64, CPU_VIDX)                                                     \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT64, CPU_VIDX)                                             \
  X(TOPK, topk, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))     \
  X(SDPA, sdpa, AGK_DTS_FLOAT64, AGK_VNONE)                                                        \
  X(SDPA_BWD, sdpa_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                                \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT64, AGK_VNONE)                                              \
  X(NORM, norm, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                        \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT64, AGK_VNONE)                                            \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                    \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(SORT, sort, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING)) \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT64, CPU_VIDX)                                           \
  X(PAD, pad, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))         \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT)) \

/* The ops the CPU computes with portable numerics (docs/numerics.md), same
 * format, one op a line: a call with AG_KF_PORTABLE of anything else is
 * refused by the dispatch. The kernels exact by nature run their default
 * code, on every dtype (f64 included: fills, copies and casts, indexing,
 * sorting, max/min); the others branch to cpu_portable*.c on the flag and
 * refuse f64. VANY: cpu_kernels.c (cpu_supports_portable_subop) checks the
 * sub-op codes, and on f64 the kernels refuse a sub-op that rounds
 * (UNARY other than COPY, REDUCE SUM, POOL2D averages). */
#define CPU_P_DTS (AGK_DTS_FLOAT | AGK_DTS_INT)
#define CPU_KOPS_PORTABLE(X)                                                                        \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                                            \
  X(UNARY, unary, AGK_DTS_ALL, AGK_VANY)                                                           \
  X(BINARY, binary, CPU_P_DTS, AGK_VANY)                                                           \
  X(WHERE, where, AGK_DTS_ALL, AGK_VNONE)                                                          \
  X(REDUCE, reduce, AGK_DTS_ALL, AGK_VANY)                                                         \
  X(MATMUL, matmul, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))        \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX)) \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT, CPU_VIDX)                                         \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT, CPU_VIDX)                                 \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                        \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT, AGK_VNONE)                                                    \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                          \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                              \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                        \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT, CPU_VIDX)                                         \
  X(DROPOUT, dropout, AGK_DTS_FLOAT, AGK_VNONE)                                                    \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT, AGK_VNONE)                                          \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(ARANGE, arange, CPU_P_DTS, AGK_VNONE)                                                          \
  X(CONV2D, conv2d, AGK_DT(F32), AGK_VNONE)                                                        \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DT(F32), AGK_VNONE)                                    \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DT(F32), AGK_VNONE)                                  \
  X(POOL2D, pool2d, CPU_F32_F64, AGK_VANY)                                                         \
  X(POOL2D_BWD, pool2d_bwd, AGK_DT(F32), AGK_VANY)                                                 \
  X(VAR, var, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                            \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX))   \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT, CPU_VIDX)                                               \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT, CPU_VIDX)                                             \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))   \
  X(NORM, norm, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))        \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))      \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                      \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(EMBEDDING, embedding, AGK_DTS_ALL, CPU_VIDX)                                                   \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT64, AGK_VNONE)                                  \
  X(GATHER, gather, AGK_DTS_ALL, CPU_VIDX)                                                         \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                        \
  X(PAD, pad, AGK_DTS_ALL, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))             \
  X(TOPK, topk, AGK_DTS_ALL, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))         \
  X(SORT, sort, AGK_DTS_ALL, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING))     \

/* Whether ag__cpu_run computes op/sub for dtype with portable numerics
 * (ag_backend.supports_portable). */
AG_HIDDEN bool ag__cpu_supports_portable(ag_kop op, int sub, ag_dtype dt);

#define CPU_KOP_DECL(ID, name, dts, vs) AG_HIDDEN ag_status cpu_k_##name(ag_kernel_error *err, const ag_k_##name *a);
CPU_KOPS(CPU_KOP_DECL)
#undef CPU_KOP_DECL

/* Run one kernel call to completion on the calling thread. Index errors are
 * recorded into *err unless it already holds one (the first error wins).
 * Returns AG_OK, or AG_ERR_OOM (with ag_error_set) when scratch memory could
 * not be allocated. */
AG_HIDDEN ag_status ag__cpu_run(const ag_kernel_call *c, ag_kernel_error *err);

/* Whether ag__cpu_run implements op/sub for dtype (see ag_backend.supports). */
AG_HIDDEN bool ag__cpu_supports(ag_kop op, int sub, ag_dtype dt);

/* o[i] = op(a[i]) for the f32 unary op `sub` (scalars 1, 0), contiguous,
 * through the baseline x86-64 code (avx2 = false) or the AVX2+FMA build of
 * the same bodies (avx2 = true), so tests can check both. Returns false, and
 * writes nothing, when the AVX2 build is absent or the CPU lacks AVX2/FMA. */
AG_HIDDEN bool ag__cpu_unary_f32(int sub, bool avx2, float *o, const float *a, int64_t n);

/* Work above which kernels split across the pool's threads (the pool's
 * threshold; core/runtime/threadpool.h says why 2^19). */
#define AG_CPU_PAR_MIN AG_POOL_MIN_WORK

/* The host thread pool (core/runtime/threadpool.c) is the CPU backend's only
 * source of parallelism: fn(ctx, a, b) runs on disjoint ranges covering
 * [0, n) exactly once, split across threads when work >= AG_CPU_PAR_MIN. */
typedef ag_range_fn ag_cpu_range_fn;
static inline void ag__cpu_par_for(int64_t n, int64_t work, ag_cpu_range_fn fn, void *ctx) {
  ag__pool_for(n, work, fn, ctx);
}

/* Make BLAS run each call on one thread (once per process; cpu_gemm.c):
 * the pool splits the GEMM instead. */
AG_HIDDEN void ag__cpu_blas_init(void);

/* f32 GEMM on the calling thread, row-major: C = alpha op(A) op(B) + beta C
 * with op(A) M x K (stored K x M when ta), op(B) K x N (N x K when tb).
 * oneDNN's sgemm when libdnnl.so.2 loads, else CBLAS (cpu_gemm.c;
 * AG_CPU_GEMM=openblas|onednn chooses; ag_cpu_gemm_engine says which). Returns false, having done nothing,
 * when neither is available (or the sizes exceed CBLAS's int): the caller
 * runs its own loop. Thread-safe. */
AG_HIDDEN bool ag__cpu_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                             int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* ag__cpu_sgemm for the small tile products of the fused kernels (every
 * size <= 256): CBLAS first where the build has it, whatever the engine,
 * since oneDNN's per-call overhead showed at these sizes (the fused
 * attention's 64 x 64 x 64 tiles ran 10-15% slower through it than through
 * OpenBLAS at T = 128 and 256, bench/attention_bench --cpu-time); larger
 * sizes, and builds without CBLAS, go to ag__cpu_sgemm. Thread-safe. */
AG_HIDDEN bool ag__cpu_sgemm_small(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

static inline size_t ag__cpu_dtsize(ag_dtype dt) {
  return (dt == AG_F64 || dt == AG_I64)   ? 8
         : (dt == AG_F16 || dt == AG_BF16) ? 2
         : (dt == AG_U8 || dt == AG_BOOL)  ? 1
                                           : 4;
}

static inline char *ag__cpu_ptr(const ag_koperand *o) { return (char *)o->base + o->offset; }

#endif
