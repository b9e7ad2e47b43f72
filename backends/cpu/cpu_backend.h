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

/* Matmul (cpu_matmul.c): AG_K_MATMUL for f32, f64, f16, bf16. */
AG_HIDDEN ag_status ag__cpu_matmul(const ag_kernel_call *c);

/* Vision ops (cpu_conv.c): AG_K_CONV2D*, AG_K_POOL2D* for f32 and f64. */
AG_HIDDEN ag_status ag__cpu_vision(const ag_kernel_call *c);

/* Random numbers (cpu_random.c): AG_K_RAND_UNIFORM, AG_K_RAND_NORMAL,
 * AG_K_DROPOUT. */
AG_HIDDEN ag_status ag__cpu_random(const ag_kernel_call *c);

/* Row kernels (cpu_rows.c): AG_K_SOFTMAX*, AG_K_CROSS_ENTROPY*,
 * AG_K_LAYERNORM*, AG_K_RMSNORM*, AG_K_VAR, AG_K_CUMSUM, AG_K_GATHER*,
 * AG_K_TOPK, AG_K_EMBEDDING*. Index errors go to err. */
AG_HIDDEN ag_status ag__cpu_rows(const ag_kernel_call *c, ag_kernel_error *err);

/* Fused attention (cpu_attention.c): AG_K_SDPA, AG_K_SDPA_BWD for f32,
 * f16, bf16 (f32 compute) and f64. */
AG_HIDDEN ag_status ag__cpu_attention(const ag_kernel_call *c);

/* Typed kernel ops (cpu_reduce2.c), each reading its decoded arguments
 * (kargs.h): AG_K_LOGSUMEXP, AG_K_NORM, AG_K_ONE_HOT (index errors go to err). */
AG_HIDDEN ag_status cpu_k_logsumexp(ag_kernel_error *err, const ag_k_logsumexp *a);
AG_HIDDEN ag_status cpu_k_norm(ag_kernel_error *err, const ag_k_norm *a);
AG_HIDDEN ag_status cpu_k_one_hot(ag_kernel_error *err, const ag_k_one_hot *a);

/* Reductions (cpu_reduce.c): AG_K_REDUCE. */
AG_HIDDEN ag_status ag__cpu_reduce(const ag_kernel_call *c);

/* Multi-tensor kernels (cpu_optim.c): AG_K_ADAMW, AG_K_SGD,
 * AG_K_NONFINITE_CHECK, AG_K_SUMSQ. */
AG_HIDDEN ag_status ag__cpu_multi(const ag_kernel_call *c);

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

static inline size_t ag__cpu_dtsize(ag_dtype dt) {
  return (dt == AG_F64 || dt == AG_I64)   ? 8
         : (dt == AG_F16 || dt == AG_BF16) ? 2
         : (dt == AG_U8 || dt == AG_BOOL)  ? 1
                                           : 4;
}

static inline char *ag__cpu_ptr(const ag_koperand *o) { return (char *)o->base + o->offset; }

#endif
