/* The kernel ops of the backend ABI (anygrad/backend.h): what each op
 * reads and writes. Plain C enum, valid in C, C++ and OpenCL C, so kernels
 * name the op they report (AG_K_EMBEDDING in an index error) instead of a
 * number. Part of the backend ABI: ops are only appended. */
#ifndef ANYGRAD_KOPS_H
#define ANYGRAD_KOPS_H

/* ---- kernel calls ----
 * A kernel call names an op, operands and scalar parameters. Operands are
 * strided views of device memory given as (segment base handle, byte offset):
 * an OpenCL cl_mem cannot be offset like a pointer, so kernels take offsets.
 * Strides are in elements and may be 0 (broadcast). Unless an op says
 * otherwise, operand 0 is the output and the remaining operands are inputs,
 * all with the output's ndim and shape (the core has broadcast them). */

typedef enum ag_kop {
  AG_K_FILL = 0,      /* o0 = s[0] (strided o0) */
  AG_K_ARANGE,        /* o0 contiguous 1-D: o0[i] = s[0] + i*s[1] */
  AG_K_RAND_UNIFORM,  /* o0 contiguous: u*(s[1]-s[0])+s[0]; seed, offset (tensor.h) */
  AG_K_RAND_NORMAL,   /* o0 contiguous: n*s[1]+s[0] */
  AG_K_UNARY,         /* o0 = f(o1); sub = ag_unary_op; o0, o1 dtypes may differ (COPY casts) */
  AG_K_BINARY,        /* o0 = f(o1, o2); sub = ag_binary_op */
  AG_K_WHERE,         /* o0 = o1 != 0 ? o2 : o3; o1 any dtype (bool for masks);
                         supports() is asked for o0's and for o1's dtype */
  AG_K_REDUCE,        /* o1 contiguous viewed as [i[0]=outer, i[1]=r, i[2]=inner];
                         o0 contiguous [outer, inner]; sub = ag_reduce_op;
                         SUM result multiplied by s[0] (mean: 1/r) */
  AG_K_MATMUL,        /* o0[b] = s[0] * o1[b] @ o2[b] + s[1] * o0[b];
                         o1 [B, M, K], o2 [B, K, N], o0 [B, M, N] contiguous;
                         in o1/o2 one of the two matrix strides is 1 (row- or
                         column-major); batch stride may be 0. f16/bf16
                         accumulate in f32. s[1] == 0 means o0 is not read. */
  AG_K_SOFTMAX,       /* o1 contiguous [rows=i[0], cols=i[1]] -> o0 same;
                         sub 0 softmax, 1 log-softmax */
  AG_K_SOFTMAX_BWD,   /* o0 = dx, o1 = dy, o2 = y (softmax or log-softmax output),
                         all contiguous [rows, cols]; sub as AG_K_SOFTMAX.
                         softmax: dx = y*(dy - sum(dy*y)); log: dx = dy - exp(y)*sum(dy) */
  AG_K_CROSS_ENTROPY, /* o1 logits contiguous [N=i[0], C=i[1]], o2 targets i32 or
                         i64 [N] contiguous (i64 only where supports(op, 1,
                         logits dtype) says so; the same holds for the _BWD op); o0 f32 [N] (f64 for f64 logits) loss per row (0 where target ==
                         i[2] ignore_index). Out-of-range target: o0 row = NAN
                         and the error word is set (below). */
  AG_K_CROSS_ENTROPY_BWD, /* o0 dlogits [N, C] contiguous (logits dtype), o1 logits,
                         o2 targets, o3 f32 [N] (f64 for f64 logits) upstream
                         grad per row (stride may be 0); dl = (softmax(l) -
                         onehot(t)) * g; ignored rows 0 */
  AG_K_LAYERNORM,     /* o1 x contiguous [N=i[0], D=i[1]], o2 weight [D] or base NULL,
                         o3 bias [D] or base NULL; o0 y [N, D]; o4 mean f32 [N],
                         o5 rstd f32 [N] (both f64 for f64 x); eps s[0] */
  AG_K_LAYERNORM_BWD, /* o0 dx [N, D], o1 dy, o2 x, o3 mean, o4 rstd, o5 weight
                         (base NULL: ones); dw and db in f32 [D] (f64 for f64
                         x) are written to multi->t[0] and multi->t[1] when
                         multi is given (not accumulated: overwritten) */
  AG_K_EMBEDDING,     /* o0 [N=i[0], D=i[1]] contiguous, o1 table [V=i[2], D]
                         contiguous, o2 i32 or i64 indices [N] contiguous (i64
                         as AG_K_CROSS_ENTROPY: supports(op, 1, table dtype),
                         also for the _BWD op). Out of range:
                         row zeroed, error word set. */
  AG_K_EMBEDDING_BWD, /* o0 dtable f32 [V, D] (f64 for an f64 table) contiguous,
                         accumulated into (+=);
                         o1 dout [N, D] contiguous; o2 indices [N] */
  AG_K_DROPOUT,       /* o0 = o1 * m, o2 = m where m = keep/(1-p), keep when
                         uniform(seed, offset, i) >= p; p = s[0]; all contiguous */
  AG_K_ADAMW,         /* multi-tensor: multi->t[4k+0..3] = param, grad, exp_avg,
                         exp_avg_sq (all f32, contiguous, same numel per group).
                         s[0]=lr s[1]=beta1 s[2]=beta2 s[3]=eps s[4]=weight_decay
                         s[5]=bias_correction1 s[6]=bias_correction2 (1-beta^t);
                         o0 (optional, base NULL if absent) f32 scalar: grad
                         scale inverse multiplier; o1 (optional) f32 scalar
                         found_inf: when != 0 the update is skipped. */
  AG_K_SGD,           /* multi-tensor: multi->t[3k+0..2] = param, grad, momentum
                         buffer (base NULL: no momentum). s[0]=lr s[1]=momentum
                         s[2]=dampening s[3]=weight_decay s[4]=nesterov(0/1)
                         s[5]=first_step(0/1: buffer initialised to grad);
                         o0, o1 as AG_K_ADAMW. */
  AG_K_NONFINITE_CHECK, /* multi: each tensor t[k] (f32/f16/bf16) multiplied
                         in place by *o1 (f32 scalar, inverse scale, base NULL
                         = 1) and o0 (f32 scalar) set to 1 if any element is
                         inf or nan (never cleared by the kernel) */
  AG_K_SUMSQ,         /* multi: o0 f32 scalar = sum over tensors t[k] of sum(x^2)
                         (overwrites o0) */
  /* Vision ops (f32, f64 on the CPU). All operands contiguous NCHW. Window
   * parameters as integers in s[]: s[0], s[1] stride h, w; s[2], s[3]
   * padding h, w; s[4], s[5] dilation h, w (conv) or kernel h, w (pool);
   * s[6] groups (conv). */
  AG_K_CONV2D,        /* o0 y [N, Co, Ho, Wo], o1 x [N, C, H, W], o2 w [Co, C/g,
                         kh, kw], o3 bias [Co] or base NULL */
  AG_K_CONV2D_BWD_INPUT,  /* o0 dx [N, C, H, W] (overwritten), o1 dy, o2 w */
  AG_K_CONV2D_BWD_WEIGHT, /* o0 dw [Co, C/g, kh, kw] (overwritten), o1 dy, o2 x */
  AG_K_POOL2D,        /* o0 y [N, C, Ho, Wo], o1 x [N, C, H, W]; sub ag_pool_op;
                         MAX: o2 i32 [N, C, Ho, Wo] gets the argmax (h*W + w
                         within the plane; padding never wins); AVG: s[6] = 1
                         counts padding in the divisor; ADAPTIVE_AVG: window
                         i spans [floor(i*H/Ho), ceil((i+1)*H/Ho)), s[] unused */
  AG_K_POOL2D_BWD,    /* o0 dx [N, C, H, W] (overwritten), o1 dy [N, C, Ho, Wo];
                         sub and s[] as the forward; MAX: o2 the saved indices */
  /* Batch norm (f32, f64), in two passes over the data each way. Operands
   * [N, C, HW] (i[0] = N, i[1] = C, i[2] = HW) are contiguous; per-channel
   * vectors share their dtype. */
  AG_K_BN_STATS,      /* o0 [2, C] (overwritten) per-channel sums over N and HW
                         of o1 a [N, C, HW]. sub 0: o0[0][c] = mean of a,
                         o0[1][c] = mean of (a - mean)^2 (the biased variance,
                         computed from the centred values, not E[a^2] - mean^2).
                         sub 1: o2 b [N, C, HW], o3 mu [C]: o0[0][c] = sum of a,
                         o0[1][c] = sum of a * (b - mu[c]). Sums are
                         deterministic (a fixed order, no float atomics), in
                         f32 blocks or wider (f64 on the CPU). */
  AG_K_BN_APPLY,      /* o0 y [N, C, HW], o1 a [N, C, HW], o2 coef [k, C]
                         contiguous, rows p, q, r, mu. sub 0 (k >= 2): y =
                         a*p[c] + q[c]. sub 1 (k = 4): o3 b [N, C, HW]: y =
                         a*p[c] + q[c] + (b - mu[c])*r[c]. y may not alias a
                         or b. */
  AG_K_RMSNORM,       /* o1 x contiguous [N=i[0], D=i[1]], o2 weight [D] or base
                         NULL; o0 y [N, D] = x * rstd * w; o3 rstd f32 [N] (f64
                         for f64 x) = 1/sqrt(mean(x^2) + s[0]) */
  AG_K_RMSNORM_BWD,   /* o0 dx [N, D], o1 dy, o2 x, o3 rstd, o4 weight (base
                         NULL: ones); dx = rstd*(g - x*rstd^2*mean(g*x)), g =
                         dy*w; dw = sum over rows of dy*x*rstd in f32 [D] (f64
                         for f64 x) written to multi->t[0] when multi is given
                         (overwritten, in a fixed order of rows) */
  AG_K_VAR,           /* o1 contiguous [i[0]=outer, i[1]=r, i[2]=inner] -> o0
                         contiguous [outer, inner], both x's dtype: sum((x -
                         mean)^2) / max(0, r - s[0]) over r, from the centred
                         values (two passes), in f32 (f64 for f64); sub 0
                         variance, 1 its square root (std). r - s[0] <= 0
                         gives inf or nan, as torch. */
  AG_K_CUMSUM,        /* o1 contiguous [i[0]=outer, i[1]=r, i[2]=inner] -> o0
                         contiguous, same shape and dtype: inclusive prefix
                         sums along r (sub 0), or suffix sums (sub 1, the
                         gradient); in order along r, accumulated in f32
                         (f64 for f64), so results repeat bit for bit */
  AG_K_GATHER,        /* o0 [O=i[0], K=i[1], In=i[2]] contiguous, o1 x [O,
                         X=i[3], In] contiguous, o2 i32 or i64 index (i64
                         where supports(op, 1, x dtype)) of ndim 3 and shape
                         [O, K, In] with element strides (0 allowed: the
                         core broadcasts a 1-D index_select index):
                         o0[o,k,i] = o1[o, o2[o,k,i], i]. Out of range:
                         element 0 and the error word set. */
  AG_K_GATHER_BWD,    /* o0 dx f32 [O, X, In] (f64 for an f64 x) contiguous,
                         overwritten; o1 dout [O, K, In] contiguous; o2 the
                         forward's index; dx[o, idx, i] += dout[o, k, i] in
                         order of k for each (o, i): deterministic always.
                         Out-of-range entries are skipped. */
  AG_K_TOPK,          /* o1 x contiguous [O=i[0], R=i[1], In=i[2]]; o0 values
                         [O, k=i[3], In] (x's dtype) and o2 i64 indices [O,
                         k, In], contiguous: the k largest (sub 0) or
                         smallest (sub 1) along R, sorted, ties by lower
                         index first, NaN above every number (torch) */
  AG_KOP_COUNT
} ag_kop;

#endif
