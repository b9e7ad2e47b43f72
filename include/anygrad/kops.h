/* The kernel-op table of the backend ABI (anygrad/backend.h): every kernel
 * op is one entry of AG_KOPS and one argument list AGK_ARGS_<ID>. From them
 * come the op codes (ag_kop), the named variants (AG_KV_*), the names the
 * module tables carry (AG_BACKEND_TABLES), the typed argument structs and
 * their decoders (anygrad/kargs.h: a backend reads `a->x`, `a->eps`, never
 * o[1] or s[0]), each backend's dispatch and supports() data (kargs.h's
 * generators), the names optrace, compare --bisect and the profiler print,
 * and the conformance tool's list of ops to cover.
 *
 * This file holds only macros, comments and one enum: it is valid C, C++
 * and OpenCL C (kernels name the op they report, AG_K_EMBEDDING, and the
 * variant they run, AG_KV_LOG_SOFTMAX). How to add an op: docs/design/ops.md.
 *
 * ---- kernel calls ----
 * A kernel call (ag_kernel_call) names an op, operands and scalar
 * parameters. Operands are strided views of device memory given as (segment
 * base handle, byte offset): an OpenCL cl_mem cannot be offset like a
 * pointer, so kernels take offsets. Strides are in elements and may be 0
 * (broadcast). Unless an op says otherwise, operands are contiguous.
 *
 * ---- the table ----
 * AGK(ID, name, sub, det, cost), in the order of the op codes (AG_K_<ID>):
 *   name  lower case: the op's name in messages and traces ("layernorm"),
 *         its argument struct ag_k_<name> and decoder (kargs.h)
 *   sub   what ag_kernel_call.sub holds (and supports() is asked for): VAR a
 *         variant of the op's own (AG_KV_*, 0 where it has none); UNARY,
 *         BINARY, REDUCE, POOL a code of that list of the op table
 *         (ag_unary_op, ag_binary_op, ag_reduce_op, ag_pool_op)
 *   det   DET: every backend computes it in a fixed order (no float atomics),
 *         so results repeat bit for bit on one device
 *   cost  what bounds it: ELEM (memory, per element), ROW (a reduction per
 *         row), GEMM (a matrix product), CONV (a convolution), ATTN
 *         (attention), MULTI (a multi-tensor sweep), RAND (a generator)
 * Part of the backend ABI (backend.h, AG_BACKEND_TABLES): ops are only
 * appended, and an entry's operands, scalars and variants only gain entries
 * at unused slots.
 *
 * ---- argument lists ----
 * AGK_ARGS_<ID>(O, F, I, N, V, M) lists what the op reads and writes:
 *   O(slot, name, role, dtype)  operand o[slot]. role: IN (read), OPT (read;
 *         base NULL: absent), OUT (written), INOUT (read and written), SAVED
 *         (written by a forward op for its backward). dtype: T the op's
 *         dtype (the one supports() is asked for: the first T operand's),
 *         ACC f32, f64 when T is f64 (statistics, per-row losses), IDX i32
 *         or i64 (indices; i64 where supports(op, AG_KV_IDX64, T) says so),
 *         I32, I64, F32 fixed, ANY unchecked (casts, comparisons, masks)
 *   F(slot, name)  a double, s[slot]
 *   N(slot, name)  an integer carried as a double in s[slot] (window sizes)
 *   I(slot, name)  an int64_t, i[slot]
 *   V(NAME)        a variant the op runs: sub == AG_KV_<NAME> (AG_KVARIANTS);
 *                  an op without V entries runs sub 0 only
 *   M(slot, name)  a multi-tensor list (ag_kmulti) in groups: tensor `name`
 *         of group k is multi->t[k * (number of M entries) + slot]
 * Shapes are given in the comments; i[] hold the dimensions the kernels
 * loop over. */
#ifndef ANYGRAD_KOPS_H
#define ANYGRAD_KOPS_H

#define AG_KOPS(AGK)                                                                               \
  AGK(FILL, fill, VAR, DET, ELEM)                                                                  \
  AGK(ARANGE, arange, VAR, DET, ELEM)                                                              \
  AGK(RAND_UNIFORM, rand_uniform, VAR, DET, RAND)                                                  \
  AGK(RAND_NORMAL, rand_normal, VAR, DET, RAND)                                                    \
  AGK(UNARY, unary, UNARY, DET, ELEM)                                                              \
  AGK(BINARY, binary, BINARY, DET, ELEM)                                                           \
  AGK(WHERE, where, VAR, DET, ELEM)                                                                \
  AGK(REDUCE, reduce, REDUCE, DET, ROW)                                                            \
  AGK(MATMUL, matmul, VAR, DET, GEMM)                                                              \
  AGK(SOFTMAX, softmax, VAR, DET, ROW)                                                             \
  AGK(SOFTMAX_BWD, softmax_bwd, VAR, DET, ROW)                                                     \
  AGK(CROSS_ENTROPY, cross_entropy, VAR, DET, ROW)                                                 \
  AGK(CROSS_ENTROPY_BWD, cross_entropy_bwd, VAR, DET, ROW)                                         \
  AGK(LAYERNORM, layernorm, VAR, DET, ROW)                                                         \
  AGK(LAYERNORM_BWD, layernorm_bwd, VAR, DET, ROW)                                                 \
  AGK(EMBEDDING, embedding, VAR, DET, ELEM)                                                        \
  AGK(EMBEDDING_BWD, embedding_bwd, VAR, DET, ROW)                                                 \
  AGK(DROPOUT, dropout, VAR, DET, RAND)                                                            \
  AGK(ADAMW, adamw, VAR, DET, MULTI)                                                               \
  AGK(SGD, sgd, VAR, DET, MULTI)                                                                   \
  AGK(NONFINITE_CHECK, nonfinite_check, VAR, DET, MULTI)                                           \
  AGK(SUMSQ, sumsq, VAR, DET, MULTI)                                                               \
  AGK(CONV2D, conv2d, VAR, DET, CONV)                                                              \
  AGK(CONV2D_BWD_INPUT, conv2d_bwd_input, VAR, DET, CONV)                                          \
  AGK(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, VAR, DET, CONV)                                        \
  AGK(POOL2D, pool2d, POOL, DET, ROW)                                                              \
  AGK(POOL2D_BWD, pool2d_bwd, POOL, DET, ROW)                                                      \
  AGK(BN_STATS, bn_stats, VAR, DET, ROW)                                                           \
  AGK(BN_APPLY, bn_apply, VAR, DET, ELEM)                                                          \
  AGK(RMSNORM, rmsnorm, VAR, DET, ROW)                                                             \
  AGK(RMSNORM_BWD, rmsnorm_bwd, VAR, DET, ROW)                                                     \
  AGK(VAR, var, VAR, DET, ROW)                                                                     \
  AGK(CUMSUM, cumsum, VAR, DET, ROW)                                                               \
  AGK(GATHER, gather, VAR, DET, ELEM)                                                              \
  AGK(GATHER_BWD, gather_bwd, VAR, DET, ROW)                                                       \
  AGK(TOPK, topk, VAR, DET, ROW)                                                                   \
  AGK(SDPA, sdpa, VAR, DET, ATTN)                                                                  \
  AGK(SDPA_BWD, sdpa_bwd, VAR, DET, ATTN)                                                          \
  AGK(LOGSUMEXP, logsumexp, VAR, DET, ROW)                                                         \
  AGK(NORM, norm, VAR, DET, ROW)                                                                   \
  AGK(SORT, sort, VAR, DET, ROW)                                                                   \
  AGK(SCATTER_ADD, scatter_add, VAR, DET, ROW)                                                     \
  AGK(GROUP_NORM, group_norm, VAR, DET, ROW)                                                       \
  AGK(GROUP_NORM_BWD, group_norm_bwd, VAR, DET, ROW)                                               \
  AGK(PAD, pad, VAR, DET, ELEM)                                                                    \
  AGK(PAD_BWD, pad_bwd, VAR, DET, ELEM)                                                            \
  AGK(INTERPOLATE, interpolate, VAR, DET, ELEM)                                                    \
  AGK(INTERPOLATE_BWD, interpolate_bwd, VAR, DET, ROW)                                             \
  AGK(ONE_HOT, one_hot, VAR, DET, ELEM)

/* o0 = value (o0 strided) */
#define AGK_ARGS_FILL(O, F, I, N, V, M) O(0, out, OUT, T) F(0, value)
/* out 1-D: out[i] = start + i*step */
#define AGK_ARGS_ARANGE(O, F, I, N, V, M) O(0, out, OUT, T) F(0, start) F(1, step)
/* out: u*(hi-lo)+lo, u uniform in [0, 1) from the call's Philox seed and
 * offset (tensor.h) */
#define AGK_ARGS_RAND_UNIFORM(O, F, I, N, V, M) O(0, out, OUT, T) F(0, lo) F(1, hi)
/* out: n*std+mean, n standard normal */
#define AGK_ARGS_RAND_NORMAL(O, F, I, N, V, M) O(0, out, OUT, T) F(0, mean) F(1, std)
/* y = f(x), strided, x and y of one shape; sub = ag_unary_op; dtypes may
 * differ (COPY casts). s0, s1 the op table's scalars; AFFINE on an integer
 * dtype: y = x * i0 + i1 in two's complement, wrapping in y's width (bool:
 * != 0); i0, i1 are the exact scalars (s0, s1 hold them as doubles,
 * inexact past 2^53) */
#define AGK_ARGS_UNARY(O, F, I, N, V, M) \
  O(0, y, OUT, ANY) O(1, x, IN, T) F(0, s0) F(1, s1) I(0, i0) I(1, i1)
/* out = f(a, b), strided, broadcast by the core to out's shape; sub =
 * ag_binary_op; comparisons write bool */
#define AGK_ARGS_BINARY(O, F, I, N, V, M) O(0, out, OUT, ANY) O(1, a, IN, T) O(2, b, IN, T) F(0, s0) F(1, s1)
/* out = cond != 0 ? a : b, strided; cond any dtype (bool for masks);
 * supports() is asked for out's and for cond's dtype */
#define AGK_ARGS_WHERE(O, F, I, N, V, M) O(0, out, OUT, T) O(1, cond, IN, ANY) O(2, a, IN, T) O(3, b, IN, T)
/* x viewed as [outer, r, inner] -> out [outer, inner]; sub = ag_reduce_op;
 * SUM multiplied by scale (mean: 1/r); ARGMAX writes i32 */
#define AGK_ARGS_REDUCE(O, F, I, N, V, M) \
  O(0, out, OUT, ANY) O(1, x, IN, T) I(0, outer) I(1, r) I(2, inner) F(0, scale)
/* c[b] = alpha * a[b] @ b[b] + beta * c[b]; a [B, M, K], b [B, K, N], c
 * [B, M, N] contiguous; in a and b one of the two matrix strides is 1 (row-
 * or column-major); batch stride may be 0. f16/bf16 accumulate in f32.
 * beta == 0 means c is not read. */
#define AGK_ARGS_MATMUL(O, F, I, N, V, M) O(0, c, INOUT, T) O(1, a, IN, T) O(2, b, IN, T) F(0, alpha) F(1, beta)
/* x [rows, cols] -> y same */
#define AGK_ARGS_SOFTMAX(O, F, I, N, V, M) \
  O(0, y, OUT, T) O(1, x, IN, T) I(0, rows) I(1, cols) V(SOFTMAX) V(LOG_SOFTMAX)
/* all [rows, cols]; y the forward's output. softmax: dx = y*(dy -
 * sum(dy*y)); log-softmax: dx = dy - exp(y)*sum(dy) */
#define AGK_ARGS_SOFTMAX_BWD(O, F, I, N, V, M) \
  O(0, dx, OUT, T) O(1, dy, IN, T) O(2, y, IN, T) I(0, rows) I(1, cols) V(SOFTMAX) V(LOG_SOFTMAX)
/* logits [n, c], targets [n]; loss per row (0 where target ==
 * ignore_index). Out-of-range target: loss NAN and the error word set */
#define AGK_ARGS_CROSS_ENTROPY(O, F, I, N, V, M)                                                   \
  O(0, loss, OUT, ACC) O(1, logits, IN, T) O(2, targets, IN, IDX) I(0, n) I(1, c) I(2, ignore_index) \
  V(IDX32) V(IDX64)
/* dlogits = (softmax(logits) - onehot(target)) * grad[row] (grad's stride
 * may be 0); ignored rows 0 */
#define AGK_ARGS_CROSS_ENTROPY_BWD(O, F, I, N, V, M)                                                  \
  O(0, dlogits, OUT, T) O(1, logits, IN, T) O(2, targets, IN, IDX) O(3, grad, IN, ACC) I(0, n) I(1, c) \
  I(2, ignore_index) V(IDX32) V(IDX64)
/* x [n, d]; weight, bias [d] or absent; y [n, d]; mean, rstd [n] */
#define AGK_ARGS_LAYERNORM(O, F, I, N, V, M)                                                          \
  O(0, y, OUT, T) O(1, x, IN, T) O(2, weight, OPT, T) O(3, bias, OPT, T) O(4, mean, SAVED, ACC)       \
  O(5, rstd, SAVED, ACC) I(0, n) I(1, d) F(0, eps)
/* weight absent: ones. dw, db (ACC, [d]) written (not accumulated) when
 * the call has a multi list */
#define AGK_ARGS_LAYERNORM_BWD(O, F, I, N, V, M)                                                      \
  O(0, dx, OUT, T) O(1, dy, IN, T) O(2, x, IN, T) O(3, mean, IN, ACC) O(4, rstd, IN, ACC)             \
  O(5, weight, OPT, T) I(0, n) I(1, d) M(0, dw) M(1, db)
/* out [n, d] = table [v, d] rows at indices [n]. Out of range: row zeroed,
 * error word set */
#define AGK_ARGS_EMBEDDING(O, F, I, N, V, M) \
  O(0, out, OUT, T) O(1, table, IN, T) O(2, indices, IN, IDX) I(0, n) I(1, d) I(2, v) V(IDX32) V(IDX64)
/* dtable [v, d] += dout [n, d] rows at indices, in a fixed order */
#define AGK_ARGS_EMBEDDING_BWD(O, F, I, N, V, M) \
  O(0, dtable, INOUT, ACC) O(1, dout, IN, T) O(2, indices, IN, IDX) I(0, n) I(1, d) I(2, v) V(IDX32) V(IDX64)
/* y = x * m, mask = m where m = keep/(1-p), keep when uniform(seed,
 * offset, i) >= p */
#define AGK_ARGS_DROPOUT(O, F, I, N, V, M) O(0, y, OUT, T) O(1, x, IN, T) O(2, mask, OUT, T) F(0, p)
/* multi-tensor, f32, same numel within a group. inv_scale (f32 scalar)
 * multiplies the gradient; found_inf (f32 scalar) != 0 skips the update.
 * bias_correction1, 2 = 1 - beta^t */
#define AGK_ARGS_ADAMW(O, F, I, N, V, M)                                                              \
  O(0, inv_scale, OPT, F32) O(1, found_inf, OPT, F32) F(0, lr) F(1, beta1) F(2, beta2) F(3, eps)      \
  F(4, weight_decay) F(5, bias_correction1) F(6, bias_correction2) M(0, param) M(1, grad)             \
  M(2, exp_avg) M(3, exp_avg_sq)
/* momentum buffer base NULL: no momentum; first_step 1: the buffer starts
 * as the gradient */
#define AGK_ARGS_SGD(O, F, I, N, V, M)                                                                \
  O(0, inv_scale, OPT, F32) O(1, found_inf, OPT, F32) F(0, lr) F(1, momentum) F(2, dampening)         \
  F(3, weight_decay) N(4, nesterov) N(5, first_step) M(0, param) M(1, grad) M(2, momentum_buffer)
/* each x (f32/f16/bf16) multiplied in place by inv_scale (absent: 1);
 * found_inf set to 1 if any element is inf or nan (never cleared) */
#define AGK_ARGS_NONFINITE_CHECK(O, F, I, N, V, M) O(0, found_inf, INOUT, F32) O(1, inv_scale, OPT, F32) M(0, x)
/* out (f32 scalar, overwritten) = sum over the tensors of sum(x^2) */
#define AGK_ARGS_SUMSQ(O, F, I, N, V, M) O(0, out, OUT, F32) M(0, x)
/* The vision ops: NCHW, contiguous; the window as integers. */
#define AGK_WINDOW(N, third)                                                                     \
  N(0, stride_h) N(1, stride_w) N(2, pad_h) N(3, pad_w) N(4, third##_h) N(5, third##_w)
/* y [n, co, ho, wo], x [n, c, h, w], w [co, c/groups, kh, kw], bias [co] */
#define AGK_ARGS_CONV2D(O, F, I, N, V, M) \
  O(0, y, OUT, T) O(1, x, IN, T) O(2, w, IN, T) O(3, bias, OPT, T) AGK_WINDOW(N, dilation) N(6, groups)
/* dx (overwritten) */
#define AGK_ARGS_CONV2D_BWD_INPUT(O, F, I, N, V, M) \
  O(0, dx, OUT, T) O(1, dy, IN, T) O(2, w, IN, T) AGK_WINDOW(N, dilation) N(6, groups)
/* dw (overwritten) */
#define AGK_ARGS_CONV2D_BWD_WEIGHT(O, F, I, N, V, M) \
  O(0, dw, OUT, T) O(1, dy, IN, T) O(2, x, IN, T) AGK_WINDOW(N, dilation) N(6, groups)
/* y [n, c, ho, wo], x [n, c, h, w]; sub ag_pool_op. MAX: argmax [n, c, ho,
 * wo] gets h*W + w within the plane (padding never wins); AVG: count_pad 1
 * counts padding in the divisor; ADAPTIVE_AVG: window i spans
 * [floor(i*h/ho), ceil((i+1)*h/ho)), the window scalars unused */
#define AGK_ARGS_POOL2D(O, F, I, N, V, M) \
  O(0, y, OUT, T) O(1, x, IN, T) O(2, argmax, SAVED, I32) AGK_WINDOW(N, kernel) N(6, count_pad)
/* dx (overwritten); MAX: argmax the forward's */
#define AGK_ARGS_POOL2D_BWD(O, F, I, N, V, M) \
  O(0, dx, OUT, T) O(1, dy, IN, T) O(2, argmax, OPT, I32) AGK_WINDOW(N, kernel) N(6, count_pad)
/* Batch norm (f32, f64), two passes each way: a, b [n, c, hw]; per-channel
 * vectors of the data's dtype. BN_MEAN_VAR: stats[0][c] = mean of a,
 * stats[1][c] = mean of (a - mean)^2 (biased, from the centred values).
 * BN_SUMS: stats[0][c] = sum of a, stats[1][c] = sum of a * (b - mu[c]).
 * Sums in a fixed order, in f32 blocks or wider (f64 on the CPU). */
#define AGK_ARGS_BN_STATS(O, F, I, N, V, M)                                                            \
  O(0, stats, OUT, T) O(1, a, IN, T) O(2, b, OPT, T) O(3, mu, OPT, T) I(0, n) I(1, c) I(2, hw)         \
  V(BN_MEAN_VAR) V(BN_SUMS)
/* coef [k, c]: rows p, q, r, mu. BN_AFFINE (k >= 2): y = a*p[c] + q[c].
 * BN_AFFINE_B (k = 4): y = a*p[c] + q[c] + (b - mu[c])*r[c]. y may not
 * alias a or b. */
#define AGK_ARGS_BN_APPLY(O, F, I, N, V, M)                                                            \
  O(0, y, OUT, T) O(1, a, IN, T) O(2, coef, IN, T) O(3, b, OPT, T) I(0, n) I(1, c) I(2, hw)            \
  V(BN_AFFINE) V(BN_AFFINE_B)
/* x [n, d], weight [d] or absent; y = x * rstd * w; rstd [n] =
 * 1/sqrt(mean(x^2) + eps) */
#define AGK_ARGS_RMSNORM(O, F, I, N, V, M) \
  O(0, y, OUT, T) O(1, x, IN, T) O(2, weight, OPT, T) O(3, rstd, SAVED, ACC) I(0, n) I(1, d) F(0, eps)
/* dx = rstd*(g - x*rstd^2*mean(g*x)), g = dy*w (weight absent: ones); dw
 * (ACC [d]) = sum over rows of dy*x*rstd, written when the call has a
 * multi list (overwritten, in a fixed order of rows) */
#define AGK_ARGS_RMSNORM_BWD(O, F, I, N, V, M) \
  O(0, dx, OUT, T) O(1, dy, IN, T) O(2, x, IN, T) O(3, rstd, IN, ACC) O(4, weight, OPT, T) I(0, n) I(1, d) M(0, dw)
/* x [outer, r, inner] -> out [outer, inner]: sum((x - mean)^2) / max(0, r -
 * correction) from the centred values (two passes), in f32 (f64 for f64);
 * STD its square root. r - correction <= 0 gives inf or nan, as torch. */
#define AGK_ARGS_VAR(O, F, I, N, V, M) \
  O(0, out, OUT, T) O(1, x, IN, T) I(0, outer) I(1, r) I(2, inner) F(0, correction) V(VAR) V(STD)
/* x [outer, r, inner] -> out same: inclusive prefix sums along r, or
 * suffix sums (the gradient), in order, accumulated in f32 (f64 for f64) */
#define AGK_ARGS_CUMSUM(O, F, I, N, V, M) \
  O(0, out, OUT, T) O(1, x, IN, T) I(0, outer) I(1, r) I(2, inner) V(CUMSUM_PREFIX) V(CUMSUM_SUFFIX)
/* out [o, k, in], x [o, xlen, in], index of ndim 3 and shape [o, k, in]
 * with element strides (0 allowed: a broadcast 1-D index_select index):
 * out[o,k,i] = x[o, index[o,k,i], i]. Out of range: element 0, error word
 * set. IDX64: the index is i64 */
#define AGK_ARGS_GATHER(O, F, I, N, V, M) \
  O(0, out, OUT, T) O(1, x, IN, T) O(2, index, IN, IDX) I(0, o) I(1, k) I(2, in) I(3, xlen) \
  V(IDX32) V(IDX64)
/* dx [o, xlen, in] (ACC, overwritten); dx[o, idx, i] += dout[o, k, i] in
 * order of k: deterministic. Out-of-range entries are skipped. */
#define AGK_ARGS_GATHER_BWD(O, F, I, N, V, M) \
  O(0, dx, OUT, ACC) O(1, dout, IN, T) O(2, index, IN, IDX) I(0, o) I(1, k) I(2, in) I(3, xlen) \
  V(IDX32) V(IDX64)
/* x [o, r, in]; values [o, k, in] and indices (i64) [o, k, in]: the k
 * largest or smallest along r, sorted, ties by lower index first, NaN above
 * every number (torch) */
#define AGK_ARGS_TOPK(O, F, I, N, V, M)                                                                \
  O(0, values, OUT, T) O(1, x, IN, T) O(2, indices, OUT, I64) I(0, o) I(1, r) I(2, in) I(3, k)         \
  V(TOPK_LARGEST) V(TOPK_SMALLEST)
/* Scaled dot-product attention, flash style (the scores are never stored):
 * q [B, H, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], one dtype; q head h
 * reads k/v head h / (H / Hkv). dropout_p: keep when uniform(seed, offset,
 * ((b*H + h)*T + i)*S + j) >= p (AG_K_DROPOUT's numbering of [B, H, T, S]),
 * kept ones scaled by 1/(1-p); causal: key j visible to query i when j <=
 * i. mask: absent, or additive, of the inputs' dtype, ndim 4, shape [B, H,
 * T, S] with element strides (0: broadcast). lse [B, H, T]: the log-sum-exp
 * of each row's scaled, masked scores (-inf for a row with every key
 * blocked: out 0) */
#define AGK_ARGS_SDPA(O, F, I, N, V, M)                                                                \
  O(0, out, OUT, T) O(1, q, IN, T) O(2, k, IN, T) O(3, v, IN, T) O(4, mask, OPT, T) O(5, lse, SAVED, ACC) \
  F(0, scale) F(1, dropout_p) I(0, causal)
/* dq, dk, dv overwritten (dk/dv summed over the q heads of their group);
 * out the forward's (read); the forward's scalars, seed and offset */
#define AGK_ARGS_SDPA_BWD(O, F, I, N, V, M)                                                            \
  O(0, dout, IN, T) O(1, q, IN, T) O(2, k, IN, T) O(3, v, IN, T) O(4, mask, OPT, T) O(5, lse, IN, ACC)   \
  F(0, scale) F(1, dropout_p) I(0, causal) M(0, dq) M(1, dk) M(2, dv) M(3, out)

/* x [outer, r, inner] -> out [outer, inner] = log(sum(exp(x))) along r,
 * from the row's maximum (max + log(sum(exp(x - max)))); a row of -inf
 * gives -inf, one holding +inf gives +inf, NaN propagates */
#define AGK_ARGS_LOGSUMEXP(O, F, I, N, V, M) O(0, out, OUT, T) O(1, x, IN, T) I(0, outer) I(1, r) I(2, inner)
/* x [outer, r, inner] -> out [outer, inner]: sum(|x|), sqrt(sum(x^2))
 * (scaled by the row's max |x|: no overflow), or max(|x|) along r; NaN
 * propagates */
#define AGK_ARGS_NORM(O, F, I, N, V, M) \
  O(0, out, OUT, T) O(1, x, IN, T) I(0, outer) I(1, r) I(2, inner) V(NORM_L1) V(NORM_L2) V(NORM_INF)
/* x [o, r, in] -> values (x's dtype) and indices (i64) [o, r, in], sorted
 * along r, stable (equal keys keep their order), NaN above every number
 * (torch) */
#define AGK_ARGS_SORT(O, F, I, N, V, M)                                                                \
  O(0, values, OUT, T) O(1, x, IN, T) O(2, indices, OUT, I64) I(0, o) I(1, r) I(2, in)                 \
  V(SORT_ASCENDING) V(SORT_DESCENDING)
/* out [o, xlen, in] += src [o, k, in] at out[o, index[o,k,i], i], index as
 * AG_K_GATHER's (strides, 0 for index_add's 1-D index); added in order of k
 * for each (o, i): deterministic, no float atomics. Out-of-range entries
 * are skipped and set the error word. */
#define AGK_ARGS_SCATTER_ADD(O, F, I, N, V, M)                                                        \
  O(0, out, INOUT, T) O(1, src, IN, T) O(2, index, IN, IDX) I(0, o) I(1, k) I(2, in) I(3, xlen)       \
  V(IDX32) V(IDX64)
/* x [n, c, hw]; weight, bias [c] or absent; y same as x; mean, rstd [n,
 * groups] (statistics over the c/groups channels and hw of each group) */
#define AGK_ARGS_GROUP_NORM(O, F, I, N, V, M)                                                         \
  O(0, y, OUT, T) O(1, x, IN, T) O(2, weight, OPT, T) O(3, bias, OPT, T) O(4, mean, SAVED, ACC)       \
  O(5, rstd, SAVED, ACC) I(0, n) I(1, c) I(2, hw) I(3, groups) F(0, eps)
/* dx; dw, db (ACC, [c], overwritten, in a fixed order) when the call has a
 * multi list */
#define AGK_ARGS_GROUP_NORM_BWD(O, F, I, N, V, M)                                                     \
  O(0, dx, OUT, T) O(1, dy, IN, T) O(2, x, IN, T) O(3, mean, IN, ACC) O(4, rstd, IN, ACC)             \
  O(5, weight, OPT, T) I(0, n) I(1, c) I(2, hw) I(3, groups) M(0, dw) M(1, db)
/* x [b, h, w] -> out [b, h + top + bottom, w + left + right] (the
 * bottom and right amounts from the shapes): PAD_CONSTANT fills value,
 * PAD_REFLECT mirrors without repeating the edge (pad < size) */
#define AGK_ARGS_PAD(O, F, I, N, V, M) \
  O(0, out, OUT, T) O(1, x, IN, T) I(0, left) I(1, top) F(0, value) V(PAD_CONSTANT) V(PAD_REFLECT)
/* dx [b, h, w] (overwritten) from dy [b, ho, wo]: each dx element sums the
 * dy elements that read it, in a fixed order */
#define AGK_ARGS_PAD_BWD(O, F, I, N, V, M) \
  O(0, dx, OUT, T) O(1, dy, IN, T) I(0, left) I(1, top) V(PAD_CONSTANT) V(PAD_REFLECT)
/* x [n, c, h, w] -> y [n, c, ho, wo]. scale_h, scale_w: the source step
 * per output pixel as torch computes it (h/ho, or 1/scale_factor when one
 * was given; with align_corners (h-1)/(ho-1), 0 for ho 1). NEAREST (torch's
 * CPU "nearest"): src = dst where ho == h, dst/2 where ho == 2h, else
 * min(floor(dst * (float)scale), h - 1) in f32. BILINEAR, in f32 (f64 for
 * f64): s = scale*dst (align_corners 1) or max(scale*(dst + 0.5) - 0.5, 0);
 * i0 = (int)s, i1 = i0 + (i0 < h - 1), l1 = s - i0, l0 = 1 - l1 */
#define AGK_ARGS_INTERPOLATE(O, F, I, N, V, M)                                                         \
  O(0, y, OUT, T) O(1, x, IN, T) F(0, scale_h) F(1, scale_w) I(0, align_corners)                       \
  V(INTERP_NEAREST) V(INTERP_BILINEAR)
/* dx [n, c, h, w] (overwritten): each dx element sums the dy elements
 * that read it, weighted, in a fixed order (no float atomics) */
#define AGK_ARGS_INTERPOLATE_BWD(O, F, I, N, V, M)                                                     \
  O(0, dx, OUT, T) O(1, dy, IN, T) F(0, scale_h) F(1, scale_w) I(0, align_corners)                     \
  V(INTERP_NEAREST) V(INTERP_BILINEAR)
/* index [n] -> out [n, classes] (out's dtype, i64 as torch): 1 at the
 * index, 0 elsewhere. Out of range: row zeroed, error word set. T is the
 * index's dtype */
#define AGK_ARGS_ONE_HOT(O, F, I, N, V, M) O(0, out, OUT, ANY) O(1, index, IN, T) I(0, n) I(1, classes)

#define AG_KOP_ENUM(ID, ...) AG_K_##ID,
typedef enum ag_kop { AG_KOPS(AG_KOP_ENUM) AG_KOP_COUNT } ag_kop;

/* The variants, AG_KV_<NAME> = value: what ag_kernel_call.sub holds for an
 * op of kind VAR (and the sub supports() is asked for). Values are ABI and
 * repeat across families. IDX64: the index operand is i64 (asked by the
 * core before it passes one; without it the core converts to i32). */
#define AG_KVARIANTS(V)                                                                            \
  V(SOFTMAX, 0) V(LOG_SOFTMAX, 1)                                                                  \
  V(IDX32, 0) V(IDX64, 1)                                                                          \
  V(BN_MEAN_VAR, 0) V(BN_SUMS, 1)                                                                  \
  V(BN_AFFINE, 0) V(BN_AFFINE_B, 1)                                                                \
  V(VAR, 0) V(STD, 1)                                                                              \
  V(CUMSUM_PREFIX, 0) V(CUMSUM_SUFFIX, 1)                                                          \
  V(TOPK_LARGEST, 0) V(TOPK_SMALLEST, 1)                                                           \
  V(NORM_L1, 0) V(NORM_L2, 1) V(NORM_INF, 2)                                                       \
  V(SORT_ASCENDING, 0) V(SORT_DESCENDING, 1)                                                       \
  V(PAD_CONSTANT, 0) V(PAD_REFLECT, 1)                                                             \
  V(INTERP_NEAREST, 0) V(INTERP_BILINEAR, 1)
#define AGK__NO(...)
#define AGK__VENUM(NAME, value) AG_KV_##NAME = value,
enum ag_kvariant { AG_KVARIANTS(AGK__VENUM) AG_KV_NONE = 0 };

#endif
