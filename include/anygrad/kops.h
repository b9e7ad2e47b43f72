/* The kernel ops of the backend ABI (anygrad/backend.h): what each op
 * reads and writes. One list (AG_KOPS) expanded into a plain C enum, valid
 * in C, C++ and OpenCL C, so kernels name the op they report (AG_K_EMBEDDING
 * in an index error) instead of a number, and into the names a module's
 * table carries (AG_BACKEND_TABLES). */
#ifndef ANYGRAD_KOPS_H
#define ANYGRAD_KOPS_H

/* ---- kernel calls ----
 * A kernel call names an op, operands and scalar parameters. Operands are
 * strided views of device memory given as (segment base handle, byte offset):
 * an OpenCL cl_mem cannot be offset like a pointer, so kernels take offsets.
 * Strides are in elements and may be 0 (broadcast). Unless an op says
 * otherwise, operand 0 is the output and the remaining operands are inputs,
 * all with the output's ndim and shape (the core has broadcast them). */

/* The list: AGK(ID, sub) for each kernel op, in the order of its code
 * (AG_K_<ID>). sub says what ag_kernel_call.sub holds (and supports()
 * is asked for): VAR a variant number the op documents (0 where it has
 * none); UNARY, BINARY, REDUCE, POOL a code of that list of the op table
 * (ag_unary_op, ag_binary_op, ag_reduce_op, ag_pool_op). Part of the
 * backend ABI (backend.h, AG_BACKEND_TABLES): ops are only appended. */
#define AG_KOPS(AGK)                                                                               \
  AGK(FILL, VAR)      /* o0 = s[0] (strided o0) */                                                 \
  AGK(ARANGE, VAR)    /* o0 contiguous 1-D: o0[i] = s[0] + i*s[1] */                               \
  AGK(RAND_UNIFORM, VAR) /* o0 contiguous: u*(s[1]-s[0])+s[0]; seed, offset (tensor.h) */          \
  AGK(RAND_NORMAL, VAR) /* o0 contiguous: n*s[1]+s[0] */                                           \
  AGK(UNARY, UNARY)   /* o0 = f(o1); sub = ag_unary_op; o0, o1 dtypes may differ (COPY casts).    \
                         AFFINE on an integer dtype: o0 = o1 * i[0] + i[1]                         \
                         in two's complement, wrapping in o0's width (bool:                        \
                         != 0); i[] are the exact scalars (s[] hold them as                        \
                         doubles, inexact past 2^53) */                                            \
  AGK(BINARY, BINARY) /* o0 = f(o1, o2); sub = ag_binary_op */                                     \
  AGK(WHERE, VAR)     /* o0 = o1 != 0 ? o2 : o3; o1 any dtype (bool for masks);                    \
                         supports() is asked for o0's and for o1's dtype */                        \
  AGK(REDUCE, REDUCE) /* o1 contiguous viewed as [i[0]=outer, i[1]=r, i[2]=inner];                 \
                         o0 contiguous [outer, inner]; sub = ag_reduce_op;                         \
                         SUM result multiplied by s[0] (mean: 1/r) */                              \
  AGK(MATMUL, VAR)    /* o0[b] = s[0] * o1[b] @ o2[b] + s[1] * o0[b];                              \
                         o1 [B, M, K], o2 [B, K, N], o0 [B, M, N] contiguous;                      \
                         in o1/o2 one of the two matrix strides is 1 (row- or                      \
                         column-major); batch stride may be 0. f16/bf16                            \
                         accumulate in f32. s[1] == 0 means o0 is not read. */                     \
  AGK(SOFTMAX, VAR)   /* o1 contiguous [rows=i[0], cols=i[1]] -> o0 same;                          \
                         sub 0 softmax, 1 log-softmax */                                           \
  AGK(SOFTMAX_BWD, VAR) /* o0 = dx, o1 = dy, o2 = y (softmax or log-softmax output),               \
                           all contiguous [rows, cols]; sub as AG_K_SOFTMAX.                       \
                           softmax: dx = y*(dy - sum(dy*y)); log: dx = dy - exp(y)*sum(dy) */      \
  AGK(CROSS_ENTROPY, VAR) /* o1 logits contiguous [N=i[0], C=i[1]], o2 targets i32 or              \
                             i64 [N] contiguous (i64 only where supports(op, 1,                    \
                             logits dtype) says so; the same holds for the _BWD                    \
                             op); o0 f32 [N] (f64 for f64 logits) loss per row                     \
                             (0 where target == i[2] ignore_index). Out-of-range                   \
                             target: o0 row = NAN and the error word is set                        \
                             (below). */                                                           \
  AGK(CROSS_ENTROPY_BWD, VAR) /* o0 dlogits [N, C] contiguous (logits dtype), o1 logits,           \
                             o2 targets, o3 f32 [N] (f64 for f64 logits) upstream                  \
                             grad per row (stride may be 0); dl = (softmax(l) -                    \
                             onehot(t)) * g; ignored rows 0 */                                     \
  AGK(LAYERNORM, VAR) /* o1 x contiguous [N=i[0], D=i[1]], o2 weight [D] or base NULL,             \
                         o3 bias [D] or base NULL; o0 y [N, D]; o4 mean f32 [N],                   \
                         o5 rstd f32 [N] (both f64 for f64 x); eps s[0] */                         \
  AGK(LAYERNORM_BWD, VAR) /* o0 dx [N, D], o1 dy, o2 x, o3 mean, o4 rstd, o5 weight                \
                             (base NULL: ones); dw and db in f32 [D] (f64 for f64                  \
                             x) are written to multi->t[0] and multi->t[1] when                    \
                             multi is given (not accumulated: overwritten) */                      \
  AGK(EMBEDDING, VAR) /* o0 [N=i[0], D=i[1]] contiguous, o1 table [V=i[2], D]                      \
                         contiguous, o2 i32 or i64 indices [N] contiguous (i64                     \
                         as AG_K_CROSS_ENTROPY: supports(op, 1, table dtype),                      \
                         also for the _BWD op). Out of range:                                      \
                         row zeroed, error word set. */                                            \
  AGK(EMBEDDING_BWD, VAR) /* o0 dtable f32 [V, D] (f64 for an f64 table) contiguous,               \
                             accumulated into (+=);                                                \
                             o1 dout [N, D] contiguous; o2 indices [N] */                          \
  AGK(DROPOUT, VAR)   /* o0 = o1 * m, o2 = m where m = keep/(1-p), keep when                       \
                         uniform(seed, offset, i) >= p; p = s[0]; all contiguous */                \
  AGK(ADAMW, VAR)     /* multi-tensor: multi->t[4k+0..3] = param, grad, exp_avg,                   \
                         exp_avg_sq (all f32, contiguous, same numel per group).                   \
                         s[0]=lr s[1]=beta1 s[2]=beta2 s[3]=eps s[4]=weight_decay                  \
                         s[5]=bias_correction1 s[6]=bias_correction2 (1-beta^t);                   \
                         o0 (optional, base NULL if absent) f32 scalar: grad                       \
                         scale inverse multiplier; o1 (optional) f32 scalar                        \
                         found_inf: when != 0 the update is skipped. */                            \
  AGK(SGD, VAR)       /* multi-tensor: multi->t[3k+0..2] = param, grad, momentum                   \
                         buffer (base NULL: no momentum). s[0]=lr s[1]=momentum                    \
                         s[2]=dampening s[3]=weight_decay s[4]=nesterov(0/1)                       \
                         s[5]=first_step(0/1: buffer initialised to grad);                         \
                         o0, o1 as AG_K_ADAMW. */                                                  \
  AGK(NONFINITE_CHECK, VAR) /* multi: each tensor t[k] (f32/f16/bf16) multiplied                   \
                             in place by *o1 (f32 scalar, inverse scale, base NULL                 \
                             = 1) and o0 (f32 scalar) set to 1 if any element is                   \
                             inf or nan (never cleared by the kernel) */                           \
  AGK(SUMSQ, VAR)     /* multi: o0 f32 scalar = sum over tensors t[k] of sum(x^2)                  \
                         (overwrites o0) */                                                        \
  /* Vision ops (f32, f64 on the CPU). All operands contiguous NCHW. Window                        \
   * parameters as integers in s[]: s[0], s[1] stride h, w; s[2], s[3]                             \
   * padding h, w; s[4], s[5] dilation h, w (conv) or kernel h, w (pool);                          \
   * s[6] groups (conv). */                                                                        \
  AGK(CONV2D, VAR)    /* o0 y [N, Co, Ho, Wo], o1 x [N, C, H, W], o2 w [Co, C/g,                   \
                         kh, kw], o3 bias [Co] or base NULL */                                     \
  AGK(CONV2D_BWD_INPUT, VAR) /* o0 dx [N, C, H, W] (overwritten), o1 dy, o2 w */                   \
  AGK(CONV2D_BWD_WEIGHT, VAR) /* o0 dw [Co, C/g, kh, kw] (overwritten), o1 dy, o2 x */             \
  AGK(POOL2D, POOL)   /* o0 y [N, C, Ho, Wo], o1 x [N, C, H, W]; sub ag_pool_op;                   \
                         MAX: o2 i32 [N, C, Ho, Wo] gets the argmax (h*W + w                       \
                         within the plane; padding never wins); AVG: s[6] = 1                      \
                         counts padding in the divisor; ADAPTIVE_AVG: window                       \
                         i spans [floor(i*H/Ho), ceil((i+1)*H/Ho)), s[] unused */                  \
  AGK(POOL2D_BWD, POOL) /* o0 dx [N, C, H, W] (overwritten), o1 dy [N, C, Ho, Wo];                 \
                           sub and s[] as the forward; MAX: o2 the saved indices */                \
  /* Batch norm (f32, f64), in two passes over the data each way. Operands                         \
   * [N, C, HW] (i[0] = N, i[1] = C, i[2] = HW) are contiguous; per-channel                        \
   * vectors share their dtype. */                                                                 \
  AGK(BN_STATS, VAR)  /* o0 [2, C] (overwritten) per-channel sums over N and HW                    \
                         of o1 a [N, C, HW]. sub 0: o0[0][c] = mean of a,                          \
                         o0[1][c] = mean of (a - mean)^2 (the biased variance,                     \
                         computed from the centred values, not E[a^2] - mean^2).                   \
                         sub 1: o2 b [N, C, HW], o3 mu [C]: o0[0][c] = sum of a,                   \
                         o0[1][c] = sum of a * (b - mu[c]). Sums are                               \
                         deterministic (a fixed order, no float atomics), in                       \
                         f32 blocks or wider (f64 on the CPU). */                                  \
  AGK(BN_APPLY, VAR)  /* o0 y [N, C, HW], o1 a [N, C, HW], o2 coef [k, C]                          \
                         contiguous, rows p, q, r, mu. sub 0 (k >= 2): y =                         \
                         a*p[c] + q[c]. sub 1 (k = 4): o3 b [N, C, HW]: y =                        \
                         a*p[c] + q[c] + (b - mu[c])*r[c]. y may not alias a                       \
                         or b. */                                                                  \
  AGK(RMSNORM, VAR)   /* o1 x contiguous [N=i[0], D=i[1]], o2 weight [D] or base                   \
                         NULL; o0 y [N, D] = x * rstd * w; o3 rstd f32 [N] (f64                    \
                         for f64 x) = 1/sqrt(mean(x^2) + s[0]) */                                  \
  AGK(RMSNORM_BWD, VAR) /* o0 dx [N, D], o1 dy, o2 x, o3 rstd, o4 weight (base                     \
                           NULL: ones); dx = rstd*(g - x*rstd^2*mean(g*x)), g =                    \
                           dy*w; dw = sum over rows of dy*x*rstd in f32 [D] (f64                   \
                           for f64 x) written to multi->t[0] when multi is given                   \
                           (overwritten, in a fixed order of rows) */                              \
  AGK(VAR, VAR)       /* o1 contiguous [i[0]=outer, i[1]=r, i[2]=inner] -> o0                      \
                         contiguous [outer, inner], both x's dtype: sum((x -                       \
                         mean)^2) / max(0, r - s[0]) over r, from the centred                      \
                         values (two passes), in f32 (f64 for f64); sub 0                          \
                         variance, 1 its square root (std). r - s[0] <= 0                          \
                         gives inf or nan, as torch. */                                            \
  AGK(CUMSUM, VAR)    /* o1 contiguous [i[0]=outer, i[1]=r, i[2]=inner] -> o0                      \
                         contiguous, same shape and dtype: inclusive prefix                        \
                         sums along r (sub 0), or suffix sums (sub 1, the                          \
                         gradient); in order along r, accumulated in f32                           \
                         (f64 for f64), so results repeat bit for bit */                           \
  AGK(GATHER, VAR)    /* o0 [O=i[0], K=i[1], In=i[2]] contiguous, o1 x [O,                         \
                         X=i[3], In] contiguous, o2 i32 or i64 index (i64                          \
                         where supports(op, 1, x dtype)) of ndim 3 and shape                       \
                         [O, K, In] with element strides (0 allowed: the                           \
                         core broadcasts a 1-D index_select index):                                \
                         o0[o,k,i] = o1[o, o2[o,k,i], i]. Out of range:                            \
                         element 0 and the error word set. */                                      \
  AGK(GATHER_BWD, VAR) /* o0 dx f32 [O, X, In] (f64 for an f64 x) contiguous,                      \
                          overwritten; o1 dout [O, K, In] contiguous; o2 the                       \
                          forward's index; dx[o, idx, i] += dout[o, k, i] in                       \
                          order of k for each (o, i): deterministic always.                        \
                          Out-of-range entries are skipped. */                                     \
  AGK(TOPK, VAR)      /* o1 x contiguous [O=i[0], R=i[1], In=i[2]]; o0 values                      \
                         [O, k=i[3], In] (x's dtype) and o2 i64 indices [O,                        \
                         k, In], contiguous: the k largest (sub 0) or                              \
                         smallest (sub 1) along R, sorted, ties by lower                           \
                         index first, NaN above every number (torch) */                            \
  /* Scaled dot-product attention (ag_scaled_dot_product_attention), flash                         \
   * style: the scores are never stored. Shapes: q [B, H, T, D], k [B, Hkv,                        \
   * S, D], v [B, Hkv, S, Dv], all contiguous, one dtype; q head h reads                           \
   * k/v head h / (H / Hkv). s[0] scale, s[1] dropout p (dropped                                   \
   * probability: keep when uniform(seed, offset, ((b*H + h)*T + i)*S + j)                         \
   * >= p, as AG_K_DROPOUT numbers the [B, H, T, S] tensor; kept ones                              \
   * scaled by 1/(1-p)); i[0] causal (key j visible to query i when j <=                           \
   * i). o4 mask: base NULL, or an additive mask of the inputs' dtype, ndim                        \
   * 4 with shape [B, H, T, S] and element strides (0: broadcast). */                              \
  AGK(SDPA, VAR)      /* o0 out [B, H, T, Dv] contiguous, o1 q, o2 k, o3 v,                        \
                         o4 mask; o5 lse f32 [B, H, T] (f64 for f64): the                          \
                         log-sum-exp of each row's scaled, masked scores                           \
                         (-inf for a row with every key blocked: out 0) */                         \
  AGK(SDPA_BWD, VAR)  /* o0 dout [B, H, T, Dv] contiguous, o1 q, o2 k, o3 v,                       \
                         o4 mask, o5 lse (the forward's); multi->t[0] dq,                          \
                         t[1] dk, t[2] dv (outputs, inputs' dtype,                                 \
                         contiguous, overwritten: dk/dv summed over the q                          \
                         heads of their group), t[3] the forward's out                             \
                         (input). Same s[], i[], seed and offset as the                            \
                         forward. */

#define AG_KOP_ENUM(ID, sub) AG_K_##ID,
typedef enum ag_kop { AG_KOPS(AG_KOP_ENUM) AG_KOP_COUNT } ag_kop;

#endif
