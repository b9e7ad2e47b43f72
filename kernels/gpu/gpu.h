/* Interface between the shared GPU runtime glue (runtime.cu), the kernel
 * launchers (the .cu files here) and the vendor files (backends/cuda, backends/hip).
 * Everything here is hidden inside one backend module; the CUDA and HIP
 * modules each compile their own copy. */
#ifndef AG_GPU_GPU_H
#define AG_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "vendor.h"

#include "anygrad/backend.h"

#define AGK_HIDDEN __attribute__((visibility("hidden")))

/* Per-stream resources a launcher may use. All are owned by the stream. */
typedef struct agk_env {
  gpuStream_t stream;
  ag_bstream *bs;         /* the stream launched on: vendor handles (agv_*) */
  ag_kernel_error *err;   /* device view of the stream's mapped error word */
  void *scratch;          /* device scratch for reduction partials */
  size_t scratch_bytes;
  void *table_host;       /* pinned staging for a multi-tensor table */
  void *table_dev;        /* device copy of that table */
  size_t table_bytes;
  int sm_count;
} agk_env;

/* One entry of the device-side multi-tensor table. */
typedef struct agk_mt_entry {
  void *p[4];             /* up to four tensors of a group (NULL: absent) */
  long long numel;
  long long chunk_start;  /* prefix sum of chunks over the groups */
  int dtype;              /* of p[0] (NONFINITE_CHECK, SUMSQ) */
  int pad;
} agk_mt_entry;

#define AGK_MT_CHUNK 16384
#define AGK_SCRATCH_BYTES ((size_t)4 << 20)
#define AGK_TABLE_BYTES (AG_KMAX_MULTI * sizeof(agk_mt_entry))

static inline char *agk_ptr(const ag_koperand *o) {
  return o->base ? (char *)o->base + o->offset : (char *)0;
}
/* The device address of an operand that may be absent (NULL: absent). */
static inline char *agk_optr(const ag_koperand *o) { return o ? agk_ptr(o) : (char *)0; }
/* The device address of tensor `nm` of group k of a's multi list (kargs.h
 * AGK_MULTI); NULL when the call has no such entry or its base is NULL. */
#define AGK_MULTI_PTR(a, k, nm)                                                                     \
  ((a)->multi && (int64_t)(k) * (a)->mgroup + (a)->m_##nm < (a)->multi->count && AGK_MULTI(a, k, nm).base \
       ? (char *)AGK_MULTI(a, k, nm).base + AGK_MULTI(a, k, nm).offset                              \
       : (char *)0)

/* ---- the kernel ops of the CUDA, HIP and gpuemu modules ----
 * One op per line: X(ID, name, dtypes, variants) (kargs.h). runtime.cu
 * expands the list into the launch dispatch (every call decoded into its
 * ag_k_<name>) and the data of supports(); the sub-op codes of UNARY,
 * BINARY, REDUCE and POOL2D(_BWD) are checked by agg_supports' rules. The
 * f32-based kernels (optimizers, conv2d, pooling, batch norm) take no f64. */
#define GPU_KOPS(X)                                                                                \
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
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))  \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64)) \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT64, AGK_VNONE)                                              \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                      \
  X(EMBEDDING, embedding, AGK_DTS_ALL, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))              \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))  \
  X(DROPOUT, dropout, AGK_DTS_FLOAT64, AGK_VNONE)                                                  \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                          \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                              \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT, AGK_VNONE)                                    \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                        \
  X(CONV2D, conv2d, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DTS_FLOAT, AGK_VNONE)                                  \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DTS_FLOAT, AGK_VNONE)                                \
  X(POOL2D, pool2d, AGK_DTS_FLOAT, AGK_VANY)                                                       \
  X(POOL2D_BWD, pool2d_bwd, AGK_DTS_FLOAT, AGK_VANY)                                               \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))        \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))      \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT64, AGK_VNONE)                                                  \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                          \
  X(VAR, var, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                          \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX)) \
  X(GATHER, gather, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))        \
  X(TOPK, topk, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))     \
  X(SDPA, sdpa, AGK_DTS_FLOAT, AGK_VNONE)                                                          \
  X(SDPA_BWD, sdpa_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT64, AGK_VNONE)                                              \
  X(NORM, norm, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                         \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT64, AGK_VNONE)                                            \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                    \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(SORT, sort, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING)) \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))      \
  X(PAD, pad, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))         \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))

/* ---- portable numerics (docs/numerics.md) ----
 * GPU_KOPS_PORTABLE: the ops (dtypes, variants) computed as docs/numerics.md
 * fixes them; runtime.cu expands it into supports_portable and the
 * dispatch's refusal (AGK_DEFINE_DISPATCH_PORTABLE). It is two lists, one
 * op per line: GPU_KOPS_EXACT, the ops exact by nature (data movement,
 * comparisons, one rounding) whose default kernels were checked against the
 * spec and run as they are (pooling, scatter-add, pad's backward: their
 * kernels already add in the spec's order, in f32, and divide once); GPU_KOPS_PORTABLE_OWN, the ops whose portable
 * call runs agkp_<name> (portable.cu, compiled without contraction, with
 * correctly rounded division and square root, subnormals kept). The integer
 * dtypes are exact by nature in every op that takes them (agkp_* hand them
 * to the default kernels); f64 only in the ops exact by nature (copies and
 * casts, indexing, sorting, REDUCE MAX/MIN/ARGMAX). Sub-op rules (which
 * UNARY, BINARY, REDUCE codes): agg_portable_rule in runtime.cu. */
#define AGK_DTS_PORTABLE (AGK_DTS_FLOAT | AGK_DTS_INT)
#define GPU_KOPS_EXACT(X)                                                                          \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                                            \
  X(WHERE, where, AGK_DTS_ALL, AGK_VNONE)                                                          \
  X(EMBEDDING, embedding, AGK_DTS_ALL, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))              \
  X(GATHER, gather, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))                \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                         \
  X(TOPK, topk, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))     \
  X(SORT, sort, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING)) \
  X(PAD, pad, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))         \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT, AGK_VNONE)                                    \
  X(POOL2D, pool2d, AGK_DT(F32), AGK_VANY)                                                         \
  X(POOL2D_BWD, pool2d_bwd, AGK_DT(F32), AGK_VANY)                                                 \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))        \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))

#define GPU_KOPS_PORTABLE_OWN(X)                                                                   \
  X(UNARY, unary, AGK_DTS_ALL, AGK_VANY)                                                           \
  X(BINARY, binary, AGK_DTS_PORTABLE, AGK_VANY)                                                    \
  X(REDUCE, reduce, AGK_DTS_ALL, AGK_VANY)                                                         \
  X(MATMUL, matmul, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))        \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX)) \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))    \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64)) \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                        \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT, AGK_VNONE)                                                    \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                          \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                              \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                        \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))    \
  X(DROPOUT, dropout, AGK_DTS_FLOAT, AGK_VNONE)                                                    \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT, AGK_VNONE)                                          \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(ARANGE, arange, AGK_DTS_PORTABLE, AGK_VNONE)                                                   \
  X(CONV2D, conv2d, AGK_DT(F32), AGK_VNONE)                                                        \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DT(F32), AGK_VNONE)                                    \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DT(F32), AGK_VNONE)                                  \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))        \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))      \
  X(VAR, var, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                            \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX))   \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                      \
  X(NORM, norm, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))          \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR))

#define GPU_KOPS_PORTABLE(X) GPU_KOPS_EXACT(X) GPU_KOPS_PORTABLE_OWN(X)

/* The portable launchers (portable.cu), as agk_<name>; the multi-tensor
 * ops launch per tensor and need no staged table. */
#define AGKP_LAUNCHER(ID, nm, dts, vs) AGK_HIDDEN gpuError_t agkp_##nm(const agk_env *env, const ag_k_##nm *a);
GPU_KOPS_PORTABLE_OWN(AGKP_LAUNCHER)
/* The portable_check probe (portable.cu), on the calling thread's current
 * device: gpuSuccess with *ok false and why in reason when the device
 * flushes subnormals, contracts a*b + c or rounds / and sqrt otherwise than
 * IEEE's nearest even. */
AGK_HIDDEN gpuError_t agkp_probe(bool *ok, char *reason, size_t reason_len);

/* Launchers (the .cu files here): agk_<name> enqueues the op on
 * env->stream and returns the vendor error of the launch;
 * gpuErrorNotSupported for a combination supports() rejects or a shape the
 * kernels lack (attention: heads over 128, which the core answers with the
 * unfused composition). runtime.cu translates the error, or routes the op
 * through a vendor library first (MATMUL, CONV2D*: agv_*). */
#define AGK_LAUNCHER(ID, nm, dts, vs) AGK_HIDDEN gpuError_t agk_##nm(const agk_env *env, const ag_k_##nm *a);
GPU_KOPS(AGK_LAUNCHER)

/* A conv2d op by the forward's roles, for the three ops (conv.cu) and a
 * vendor library (agv_conv): x [N, C, H, W], y [N, Co, Ho, Wo], w [Co,
 * C/groups, kh, kw]; the op writes y (CONV2D), x (BWD_INPUT) or w
 * (BWD_WEIGHT); bias (CONV2D only) may be NULL. */
typedef struct agk_conv {
  const ag_kernel_call *call; /* name, flags, workspace */
  ag_kop op;
  ag_dtype dtype;
  const ag_koperand *x, *y, *w, *bias;
  long long stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
} agk_conv;
/* The op's description from its decoded arguments (conv.cu). */
AGK_HIDDEN agk_conv agk_conv_of(const ag_k_conv2d *a);
AGK_HIDDEN agk_conv agk_conv_of(const ag_k_conv2d_bwd_input *a);
AGK_HIDDEN agk_conv agk_conv_of(const ag_k_conv2d_bwd_weight *a);
/* Our implicit-GEMM kernels for any of the three (the weight gradient may
 * use env->scratch). */
AGK_HIDDEN gpuError_t agk_conv_run(const agk_env *env, const agk_conv *cv);

/* ---- the shared runtime glue (runtime.cu): vtable entries ---- */

#define AGG_TABLE_SLOTS 4

/* A backend stream and everything a launch on it needs. */
struct ag_bstream {
  int dev;
  gpuStream_t s;
  ag_kernel_error *err_host; /* mapped pinned: read by the host without a call */
  ag_kernel_error *err_dev;
  void *scratch;
  struct {
    void *host, *dev;
    gpuEvent_t done;         /* recorded after the launch that read the slot */
  } slot[AGG_TABLE_SLOTS];
  int next_slot;
  void *blas;                /* vendor BLAS handle, created on first GEMM */
  void *dnn;                 /* vendor DNN handle (cuDNN), created on first conv2d */
};

struct ag_bevent {
  int dev;
  gpuEvent_t e;
};

AGK_HIDDEN ag_status agg_init(int *out_count, char *reason, size_t reason_len);
AGK_HIDDEN ag_status agg_device_props(int dev, ag_device_props *out);
AGK_HIDDEN ag_status agg_mem_info(int dev, size_t *out_free, size_t *out_total);
AGK_HIDDEN ag_status agg_segment_alloc(int dev, size_t bytes, void **out_base);
AGK_HIDDEN void agg_segment_free(int dev, void *base);
AGK_HIDDEN ag_status agg_pinned_alloc(int dev, size_t bytes, void **out_ptr);
AGK_HIDDEN void agg_pinned_free(int dev, void *ptr);
AGK_HIDDEN ag_status agg_stream_create(int dev, ag_bstream **out);
AGK_HIDDEN void agg_stream_destroy(ag_bstream *s);
AGK_HIDDEN ag_status agg_stream_synchronize(ag_bstream *s);
AGK_HIDDEN ag_status agg_stream_query(ag_bstream *s, bool *out_done);
AGK_HIDDEN ag_status agg_event_create(int dev, bool timing, ag_bevent **out);
AGK_HIDDEN void agg_event_destroy(ag_bevent *e);
AGK_HIDDEN ag_status agg_event_record(ag_bevent *e, ag_bstream *s);
AGK_HIDDEN ag_status agg_stream_wait_event(ag_bstream *s, ag_bevent *e);
AGK_HIDDEN ag_status agg_event_query(ag_bevent *e, bool *out_done);
AGK_HIDDEN ag_status agg_event_synchronize(ag_bevent *e);
AGK_HIDDEN ag_status agg_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms);
AGK_HIDDEN ag_status agg_copy_h2d(ag_bstream *s, void *dst_base, size_t dst_off, const void *src, size_t bytes,
                                  bool src_pinned);
AGK_HIDDEN ag_status agg_copy_d2h(ag_bstream *s, void *dst, const void *src_base, size_t src_off, size_t bytes);
AGK_HIDDEN ag_status agg_copy_d2d(ag_bstream *s, void *dst_base, size_t dst_off, const void *src_base,
                                  size_t src_off, size_t bytes);
AGK_HIDDEN ag_status agg_launch(ag_bstream *s, const ag_kernel_call *c);
AGK_HIDDEN bool agg_supports(int dev, ag_kop op, int sub, ag_dtype dt);
AGK_HIDDEN ag_status agg_take_kernel_error(ag_bstream *s, ag_kernel_error *out);
AGK_HIDDEN int agg_sm_count(int dev);
/* A device workspace of `bytes` for the work c's launch enqueues on its
 * stream (a vendor library's), from the core's caching allocator through
 * ag_kernel_call.workspace: freed by the core when the launch returns, in the
 * stream's order. AG_ERR_OOM (set) when the device is full; AG_ERR_UNSUPPORTED
 * (not set) from a core older than ABI 4.2. Either way the caller may take a
 * path that needs none. */
AGK_HIDDEN ag_status agg_workspace(const ag_kernel_call *c, size_t bytes, void **out_ptr);
/* Expandable segments: [offset, offset + bytes) of a reservation is mapped
 * as one physical allocation per granule and unmapped granule by granule,
 * because an unmap cannot release part of one allocation's mapping (the
 * core trims segments at granule boundaries). */
AGK_HIDDEN ag_status agg_vm_map(int dev, void *base, size_t offset, size_t bytes);
AGK_HIDDEN ag_status agg_vm_unmap(int dev, void *base, size_t offset, size_t bytes);
/* The vtable's vm_reserve and vm_release: agv_* with dev current. */
AGK_HIDDEN ag_status agg_vm_reserve(int dev, size_t bytes, void **out_base);
AGK_HIDDEN void agg_vm_release(int dev, void *base, size_t bytes);

/* ABI 4.4 thread_device: gpuSetDevice on the calling thread, the previous
 * device from gpuGetDevice (runtime.cu). */
AGK_HIDDEN ag_status agg_thread_device(int dev, int *out_prev);

/* ---- vendor hooks, one set per backend (backends/<name>/) ---- */

/* Which vendor API a code comes from. */
enum { AGV_RUNTIME = 0, AGV_DRIVER = 1, AGV_BLAS = 2 };
/* The one place a backend turns a vendor error code into an ag_status and a
 * message: `code` comes from `api` (AGV_*); `what` names the failing call.
 * Clears the runtime's non-sticky last error. */
AGK_HIDDEN ag_status agv_status(int code, int api, const char *what);
/* The backend's environment variables, checked before anything else (so a
 * typo is reported even where the driver is missing): false with *reason
 * naming the variable and its accepted values. */
AGK_HIDDEN bool agv_env_check(char *reason, size_t reason_len);
/* For agv_env_check: true when `name` is unset, empty or one of the n
 * values in ok; else a message in reason. */
AGK_HIDDEN bool agg_env_choice(const char *name, const char *const *ok, int n, char *reason, size_t reason_len);
/* Vendor set-up after devices were counted (BLAS, driver entry points,
 * environment knobs). Failure makes the backend unavailable with reason. */
AGK_HIDDEN ag_status agv_init(char *reason, size_t reason_len);
/* Whether the glue may make dev current again to give a caller's thread its
 * current device back (runtime.cu's dev_guard): false where that would
 * create a context the process does not have yet (CUDA: dev's primary
 * context is not active). */
AGK_HIDDEN bool agv_device_restorable(int dev);
/* Vendor-specific device properties (vendor, arch, half support, VM). */
AGK_HIDDEN void agv_props(int dev, const gpuDeviceProp *p, ag_device_props *out);
/* AG_K_MATMUL on env->bs (vendor BLAS or agk_matmul). */
AGK_HIDDEN ag_status agv_gemm(const agk_env *env, const ag_k_matmul *a);
/* AG_K_CONV2D, AG_K_CONV2D_BWD_INPUT, AG_K_CONV2D_BWD_WEIGHT on env->bs: a
 * vendor library (cuDNN, loaded at run time) where present, else
 * agk_conv_run. */
AGK_HIDDEN ag_status agv_conv(const agk_env *env, const agk_conv *cv);
/* Release what the vendor attached to s (BLAS and DNN handles, workspace). */
AGK_HIDDEN void agv_stream_release(ag_bstream *s);
/* Virtual memory: granule size (0: unsupported); create one physical
 * allocation of exactly bytes and map it read-write at at; unmap one such
 * mapping. */
AGK_HIDDEN size_t agv_vm_granularity(int dev);
AGK_HIDDEN ag_status agv_vm_map_one(int dev, void *at, size_t bytes);
AGK_HIDDEN ag_status agv_vm_unmap_one(int dev, void *at, size_t bytes);
/* Reserve and release an address range for expandable segments (the
 * vtable's vm_reserve, vm_release). */
AGK_HIDDEN ag_status agv_vm_reserve(int dev, size_t bytes, void **out_base);
AGK_HIDDEN void agv_vm_release(int dev, void *base, size_t bytes);

/* Matrix layout of a [.., R, C] operand for BLAS: ld and whether it is
 * stored row-major (strides[-1] == 1). */
typedef struct agk_mat {
  const char *p;
  long long ld, batch_stride;
  int row_major;
} agk_mat;
AGK_HIDDEN agk_mat agk_mat_of(const ag_koperand *o);

#endif
