/* The CPU backend's portable-numerics kernels (docs/numerics.md): the
 * reference every other backend equals bit for bit. The code lives in
 * cpu_portable*.c, compiled with -ffp-contract=off and without fast-math
 * (CMakeLists.txt), on the baseline ISA only: no FMA is ever used. Each
 * kernel family calls into these when its call has AG_KF_PORTABLE. */
#ifndef AG_CPU_PORTABLE_H
#define AG_CPU_PORTABLE_H

#include "cpu_backend.h"

/* Elementwise f32 bodies: the op table's expressions (optable.h) with the
 * E_ vocabulary mapped to pmath.h, scalars rounded once to f32. False for
 * a sub-op outside the table. */
AG_HIDDEN bool ag__cpu_p_unary(int sub, float *o, const float *x, int64_t n, const double *s);
AG_HIDDEN bool ag__cpu_p_binary(int sub, float *o, const float *a, const float *b, int64_t n, const double *s);
/* e[j] = agp_exp(x[j] - mx), j < n. */
AG_HIDDEN void ag__cpu_p_exp_shift(float *e, const float *x, float mx, int64_t n);
/* e[j] = agp_div(e[j], s), j < n. */
AG_HIDDEN void ag__cpu_p_div_by(float *e, float s, int64_t n);
/* The maximum of the non-NaN values of x (-inf when none), as the
 * sequential m = x[j] > m ? x[j] : m from m = -inf gives it (a zero
 * maximum is the row's first zero, with its sign). */
AG_HIDDEN float ag__cpu_p_row_max(const float *x, int64_t n);

/* The widest vector build the portable kernels may choose at run time:
 * 0 baseline, 1 AVX2, 2 AVX-512F (none with FMA); the bits are the same
 * for every value (tests set it). Default 2. Not thread-safe to change
 * while kernels run. */
AG_HIDDEN extern int ag__cpu_p_isa;

/* The canonical sum S (docs/numerics.md) of n values of dtype dt (f32,
 * f16, bf16) at p with element stride st, on the calling thread. */
AG_HIDDEN float ag__cpu_psum(ag_dtype dt, const void *p, int64_t st, int64_t n);
static inline float ag__cpu_psum_f32(const float *v, int64_t n) { return ag__cpu_psum(AG_F32, v, 1, n); }

/* S of n terms that fill(ctx, k0, m, t) writes into t[0..m) (terms k0 ..
 * k0 + m - 1, m <= 256), in order. */
typedef void (*ag_cpu_pfill_fn)(const void *ctx, int64_t k0, int64_t m, float *t);
AG_HIDDEN float ag__cpu_psum_gen(int64_t n, ag_cpu_pfill_fn fill, const void *ctx);

/* S along rows for up to AG_CPU_PLANES adjacent columns at once:
 * out[j] = S over k < r of row(ctx, k)[j], j < w, where row(ctx, k, dst)
 * writes the w values of row k into dst. Same bits as ag__cpu_psum of each
 * column. */
#define AG_CPU_PLANES 16
typedef void (*ag_cpu_prow_fn)(const void *ctx, int64_t k, float *dst);
AG_HIDDEN void ag__cpu_psum_lanes(int64_t r, int w, ag_cpu_prow_fn row, const void *ctx, float *out);

/* The portable kernels of the other families. */
AG_HIDDEN ag_status ag__cpu_p_reduce_sum(const ag_k_reduce *a);
AG_HIDDEN ag_status ag__cpu_p_matmul(const ag_k_matmul *a);
AG_HIDDEN ag_status ag__cpu_p_softmax(const ag_k_softmax *a);
AG_HIDDEN ag_status ag__cpu_p_softmax_bwd(const ag_k_softmax_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_cross_entropy(ag_kernel_error *err, const ag_k_cross_entropy *a);
AG_HIDDEN ag_status ag__cpu_p_cross_entropy_bwd(const ag_k_cross_entropy_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_layernorm(const ag_k_layernorm *a);
AG_HIDDEN ag_status ag__cpu_p_layernorm_bwd(const ag_k_layernorm_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_rmsnorm(const ag_k_rmsnorm *a);
AG_HIDDEN ag_status ag__cpu_p_rmsnorm_bwd(const ag_k_rmsnorm_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_logsumexp(const ag_k_logsumexp *a);
AG_HIDDEN ag_status ag__cpu_p_adamw(const ag_k_adamw *a);
AG_HIDDEN ag_status ag__cpu_p_sgd(const ag_k_sgd *a);
AG_HIDDEN ag_status ag__cpu_p_sumsq(const ag_k_sumsq *a);
AG_HIDDEN ag_status ag__cpu_p_rand_uniform(const ag_k_rand_uniform *a);
AG_HIDDEN ag_status ag__cpu_p_rand_normal(const ag_k_rand_normal *a);
AG_HIDDEN ag_status ag__cpu_p_dropout(const ag_k_dropout *a);
AG_HIDDEN ag_status ag__cpu_p_arange(const ag_k_arange *a);
AG_HIDDEN ag_status ag__cpu_p_var(const ag_k_var *a);
AG_HIDDEN ag_status ag__cpu_p_cumsum(const ag_k_cumsum *a);
AG_HIDDEN ag_status ag__cpu_p_gather_bwd(const ag_k_gather_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_norm(const ag_k_norm *a);
AG_HIDDEN ag_status ag__cpu_p_bn_stats(const ag_k_bn_stats *a);
AG_HIDDEN ag_status ag__cpu_p_bn_apply(const ag_k_bn_apply *a);
AG_HIDDEN ag_status ag__cpu_p_group_norm(const ag_k_group_norm *a);
AG_HIDDEN ag_status ag__cpu_p_group_norm_bwd(const ag_k_group_norm_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_interpolate(const ag_k_interpolate *a);
AG_HIDDEN ag_status ag__cpu_p_interpolate_bwd(const ag_k_interpolate_bwd *a);
AG_HIDDEN ag_status ag__cpu_p_conv2d(const ag_k_conv2d *a);
AG_HIDDEN ag_status ag__cpu_p_conv2d_bwd_input(const ag_k_conv2d_bwd_input *a);
AG_HIDDEN ag_status ag__cpu_p_conv2d_bwd_weight(const ag_k_conv2d_bwd_weight *a);

/* Whether this CPU (and build) honours the contract: AG_OK, or
 * AG_ERR_UNSUPPORTED with the reason when subnormals are flushed or a
 * product is fused (the probe runs through volatiles). */
AG_HIDDEN ag_status ag__cpu_portable_check(void);

#endif
