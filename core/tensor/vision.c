/* The vision ops front end (ops.h, "vision"): conv2d and pooling validate,
 * make operands contiguous NCHW, launch one kernel and record a node whose
 * backward (core/autograd/grad_vision.c) launches the matching backward
 * kernel. batch_norm is
 * two kernel passes each way (BN_STATS, BN_APPLY) with one node, or, where a
 * backend lacks those kernels for the dtype, composed of generic ops
 * (docs/vision.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "runtime/devstate.h"
#include "tensor/ops_internal.h"

/* The status of the op that just failed (never AG_OK). */
static ag_status failed(void) {
  ag_status st = ag_last_status();
  return st != AG_OK ? st : ag_error_set(AG_ERR_INTERNAL, "vision op: a step failed without a message");
}

static bool null_arg(const char *op, ag_tensor *t, int i) {
  if (t) return false;
  if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "%s: argument %d is NULL", op, i);
  return true;
}

static ag_tensor *contig(ag_tensor *t) {
  ag_no_grad_begin();
  ag_tensor *r = ag_contiguous(t);
  ag_grad_mode_end();
  return r;
}

static bool float_4d(const char *op, const ag_tensor *x, const char *what) {
  char b[96];
  if (x->ndim != 4) {
    ag_error_set(AG_ERR_SHAPE, "%s: %s must be 4-D NCHW, got %s", op, what, ag_tensor_describe(x, b, sizeof b));
    return false;
  }
  if (x->dtype != AG_F32 && x->dtype != AG_F64 && x->dtype != AG_F16 && x->dtype != AG_BF16) {
    ag_error_set(AG_ERR_DTYPE, "%s: %s must be floating, got %s", op, what, ag_dtype_name(x->dtype));
    return false;
  }
  return true;
}

static void put_window(double *s, const int *stride, const int *pad, const int *kd) {
  s[0] = stride[0];
  s[1] = stride[1];
  s[2] = pad[0];
  s[3] = pad[1];
  s[4] = kd[0];
  s[5] = kd[1];
}

/* The output size along one dim of a window op, (in + 2*pad - (dil*(k-1) + 1)) / stride + 1,
 * in int64 with every step checked (pad, dil and stride are ints of the
 * caller, k and in sizes of tensors). false with AG_ERR_INVALID naming the
 * parameter when a step overflows, AG_ERR_SHAPE when the window is larger
 * than the padded input. */
static bool window_out(const char *name, const char *dim, int64_t in, int64_t pad, int64_t dil, int64_t k,
                       int64_t stride, int64_t *out) {
  int64_t padded, reach;
  if (__builtin_mul_overflow(pad, (int64_t)2, &padded) || __builtin_add_overflow(padded, in, &padded)) {
    ag_error_set(AG_ERR_INVALID, "%s: padding %lld on an input %s of %lld overflows int64", name, (long long)pad, dim,
                 (long long)in);
    return false;
  }
  if (__builtin_mul_overflow(dil, k - 1, &reach) || __builtin_add_overflow(reach, (int64_t)1, &reach)) {
    ag_error_set(AG_ERR_INVALID, "%s: dilation %lld with a kernel %s of %lld overflows int64", name, (long long)dil,
                 dim, (long long)k);
    return false;
  }
  if (padded < reach) {
    ag_error_set(AG_ERR_SHAPE, "%s: the kernel %s %lld (dilation %lld) is larger than the padded input %s %lld", name,
                 dim, (long long)k, (long long)dil, dim, (long long)padded);
    return false;
  }
  *out = (padded - reach) / stride + 1;
  return true;
}

/* An output shape that passes the tensor size check, or AG_ERR_INVALID
 * naming the window parameters that made it too large. */
static bool window_shape_ok(const char *name, const int64_t *ys, ag_dtype dt, const int *stride, const int *pad) {
  if (ag__shape_check(name, 4, ys, dt, NULL)) return true;
  ag_error_set(AG_ERR_INVALID,
               "%s: padding %d,%d with stride %d,%d gives an output [%lld,%lld,%lld,%lld] whose size in bytes "
               "overflows int64", name, pad[0], pad[1], stride[0], stride[1], (long long)ys[0], (long long)ys[1],
               (long long)ys[2], (long long)ys[3]);
  return false;
}

/* ---------------- conv2d ---------------- */

ag_tensor *ag_conv2d(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const ag_conv2d_params *params) {
  static const char name[] = "ag_conv2d";
  if (null_arg(name, x, 1) || null_arg(name, w, 2)) return NULL;
  ag_conv2d_params p = params ? *params : (ag_conv2d_params)AG_CONV2D_DEFAULT;
  ag_tensor *in[3] = {x, w, bias};
  ag_devstate *ds = ag__same_device(name, 3, in);
  if (!ds || !float_4d(name, x, "input") || !float_4d(name, w, "weight")) return NULL;
  if (w->dtype != x->dtype || (bias && bias->dtype != x->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: input, weight and bias dtypes differ (%s, %s%s%s)", name,
                 ag_dtype_name(x->dtype), ag_dtype_name(w->dtype), bias ? ", " : "",
                 bias ? ag_dtype_name(bias->dtype) : "");
    return NULL;
  }
  for (int k = 0; k < 2; k++)
    if (p.stride[k] < 1 || p.dilation[k] < 1 || p.padding[k] < 0) {
      ag_error_set(AG_ERR_INVALID, "%s: stride and dilation must be >= 1 and padding >= 0 (got %d,%d / %d,%d / %d,%d)",
                   name, p.stride[0], p.stride[1], p.dilation[0], p.dilation[1], p.padding[0], p.padding[1]);
      return NULL;
    }
  const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  const int64_t Co = w->shape[0], kh = w->shape[2], kw = w->shape[3];
  char b1[96], b2[96];
  if (p.groups < 1 || C % p.groups || Co % p.groups || w->shape[1] * p.groups != C) {
    ag_error_set(AG_ERR_SHAPE, "%s: weight %s does not fit input %s with groups=%d (need [Co, C/groups, kh, kw], "
                 "C and Co divisible by groups)", name, ag_tensor_describe(w, b1, sizeof b1),
                 ag_tensor_describe(x, b2, sizeof b2), p.groups);
    return NULL;
  }
  if (bias && (bias->ndim != 1 || bias->shape[0] != Co)) {
    ag_error_set(AG_ERR_SHAPE, "%s: bias %s must be [%lld]", name, ag_tensor_describe(bias, b1, sizeof b1),
                 (long long)Co);
    return NULL;
  }
  if (kh < 1 || kw < 1) {
    ag_error_set(AG_ERR_SHAPE, "%s: weight %s has an empty kernel", name, ag_tensor_describe(w, b1, sizeof b1));
    return NULL;
  }
  /* Sizes in int64, every step checked: 2 * padding in int wrapped (padding
   * INT_MAX passed as -2 and gave a 4x4 output for an 8x8 input). */
  int64_t Ho, Wo;
  if (!window_out(name, "height", H, p.padding[0], p.dilation[0], kh, p.stride[0], &Ho) ||
      !window_out(name, "width", W, p.padding[1], p.dilation[1], kw, p.stride[1], &Wo))
    return NULL;
  int64_t ys[4] = {N, Co, Ho, Wo};
  if (!window_shape_ok(name, ys, x->dtype, p.stride, p.padding)) return NULL;
  if (!ag__supported(ds, AG_K_CONV2D, 0, x->dtype, name)) return NULL;
  ag_tensor *xc = contig(x), *wc = contig(w), *bc = bias ? contig(bias) : NULL;
  ag_tensor *y = (xc && wc && (!bias || bc)) ? ag__tensor_new(ds, x->dtype, 4, ys) : NULL;
  ag_status st = y ? AG_OK : ag_last_status();
  if (st == AG_OK && y->numel && C == 0) {
    /* No input channels: each output is an empty sum, the bias alone or 0
     * (as matmul with an inner dimension of 0); GEMM libraries leave their
     * output unwritten or refuse K = 0. */
    if (bc) {
      int64_t bs[3] = {Co, 1, 1};
      ag_no_grad_begin();
      ag_tensor *bv = ag_reshape(bc, 3, bs);
      st = bv ? ag_copy_(y, bv) : failed();
      ag_tensor_release(bv);
      ag_grad_mode_end();
    } else {
      st = ag_fill_(y, 0.0);
    }
  } else if (st == AG_OK && y->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_CONV2D, 0, name, 4, (ag_tensor *[]){y, xc, wc, bc});
    put_window(c.s, p.stride, p.padding, p.dilation);
    c.s[6] = p.groups;
    st = ag__launch(ds, &c);
  }
  if (st == AG_OK && ag__grad_needed(3, in)) {
    ag_gparams gp;
    memset(&gp, 0, sizeof gp);
    int v[7] = {p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups};
    memcpy(gp.dims, v, sizeof v);
    st = ag__grad_record(y, AG_G_CONV2D, 3, in, 0, NULL, &gp);
  }
  ag_tensor_release(xc);
  ag_tensor_release(wc);
  ag_tensor_release(bc);
  if (st != AG_OK) {
    ag_tensor_release(y);
    return NULL;
  }
  return y;
}

/* ---------------- pooling ---------------- */

static ag_tensor *pool_impl(const char *name, ag_pool_op op, ag_tensor *x, const int *kernel, const int *stride,
                            const int *pad, bool count_pad, int64_t Ho, int64_t Wo) {
  ag_devstate *ds = ag__same_device(name, 1, &x);
  if (!ds) return NULL;
  if (!ag__supported(ds, AG_K_POOL2D, op, x->dtype, name)) return NULL;
  if (op == AG_P_MAX && x->shape[2] * x->shape[3] > INT32_MAX) {
    /* the saved argmax is h*W + w in i32 (kops.h); kernels index in i64 */
    ag_error_set(AG_ERR_SHAPE, "%s: a %lld x %lld plane has more elements than its i32 argmax index can name", name,
                 (long long)x->shape[2], (long long)x->shape[3]);
    return NULL;
  }
  ag_tensor *xc = contig(x);
  int64_t ys[4] = {x->shape[0], x->shape[1], Ho, Wo};
  ag_tensor *y = xc ? ag__tensor_new(ds, x->dtype, 4, ys) : NULL;
  ag_tensor *idx = (y && op == AG_P_MAX) ? ag__tensor_new(ds, AG_I32, 4, ys) : NULL;
  ag_status st = (y && (op != AG_P_MAX || idx)) ? AG_OK : ag_last_status();
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_POOL2D, op, name, op == AG_P_MAX ? 3 : 2, NULL);
  put_window(c.s, stride, pad, kernel);
  c.s[6] = count_pad;
  if (st == AG_OK && y->numel) {
    ag__operand(&c.o[0], y);
    ag__operand(&c.o[1], xc);
    if (idx) ag__operand(&c.o[2], idx);
    st = ag__launch(ds, &c);
  }
  if (st == AG_OK && ag__grad_needed(1, &x)) {
    ag_gparams gp;
    memset(&gp, 0, sizeof gp);
    for (int k = 0; k < 7; k++) gp.dims[k] = (int)c.s[k];
    gp.i[0] = op;
    ag_tensor *saved[1] = {idx};
    st = ag__grad_record(y, AG_G_POOL2D, 1, &x, idx ? 1 : 0, saved, &gp);
  }
  ag_tensor_release(xc);
  ag_tensor_release(idx);
  if (st != AG_OK) {
    ag_tensor_release(y);
    return NULL;
  }
  return y;
}

/* The window's checks and output size (Ho, Wo), in int64: 2 * padding in
 * int wrapped (padding INT_MAX read as -2 passed "padding <= kernel/2"). */
static bool pool_args(const char *name, ag_tensor *x, const ag_pool2d_params *p, int *stride, int64_t *out) {
  if (null_arg(name, x, 1)) return false;
  if (!p) {
    ag_error_set(AG_ERR_INVALID, "%s: params must not be NULL", name);
    return false;
  }
  if (!float_4d(name, x, "input")) return false;
  for (int k = 0; k < 2; k++) {
    stride[k] = p->stride[k] ? p->stride[k] : p->kernel[k];
    if (p->kernel[k] < 1 || stride[k] < 1 || p->padding[k] < 0 || 2 * (int64_t)p->padding[k] > p->kernel[k]) {
      ag_error_set(AG_ERR_INVALID, "%s: need kernel >= 1, stride >= 0 (0: the kernel), 0 <= padding <= kernel/2 "
                   "(got kernel %d,%d stride %d,%d padding %d,%d)", name, p->kernel[0], p->kernel[1],
                   p->stride[0], p->stride[1], p->padding[0], p->padding[1]);
      return false;
    }
    if (!window_out(name, k ? "width" : "height", x->shape[2 + k], p->padding[k], 1, p->kernel[k], stride[k],
                    &out[k]))
      return false;
  }
  return true;
}

static ag_tensor *window_pool(const char *name, ag_pool_op op, ag_tensor *x, const ag_pool2d_params *p) {
  int stride[2];
  int64_t o[2];
  if (!pool_args(name, x, p, stride, o)) return NULL;
  return pool_impl(name, op, x, p->kernel, stride, p->padding, p->count_include_pad, o[0], o[1]);
}

ag_tensor *ag_max_pool2d(ag_tensor *x, const ag_pool2d_params *p) {
  return window_pool("ag_max_pool2d", AG_P_MAX, x, p);
}

ag_tensor *ag_avg_pool2d(ag_tensor *x, const ag_pool2d_params *p) {
  return window_pool("ag_avg_pool2d", AG_P_AVG, x, p);
}

ag_tensor *ag_adaptive_avg_pool2d(ag_tensor *x, int64_t out_h, int64_t out_w) {
  static const char name[] = "ag_adaptive_avg_pool2d";
  if (null_arg(name, x, 1) || !float_4d(name, x, "input")) return NULL;
  if (out_h < 1 || out_w < 1) {
    ag_error_set(AG_ERR_INVALID, "%s: output size must be >= 1 (got %lldx%lld)", name, (long long)out_h,
                 (long long)out_w);
    return NULL;
  }
  int zero[2] = {0, 0}, one[2] = {1, 1};
  return pool_impl(name, AG_P_ADAPTIVE_AVG, x, one, one, zero, false, out_h, out_w);
}

/* ---------------- batch norm ---------------- */

/* [C] -> [1, C, 1, 1] view for broadcasting against NCHW. */
static ag_tensor *chan(ag_tensor *t, int64_t C) {
  int64_t s[4] = {1, C, 1, 1};
  return ag_reshape(t, 4, s);
}

/* Batch norm composed of generic ops (and differentiated through them): for
 * dtypes or backends without the BN_STATS/BN_APPLY kernels (f16, bf16). */
static ag_tensor *bn_composed(ag_tensor *x, ag_tensor *running_mean, ag_tensor *running_var, ag_tensor *weight,
                              ag_tensor *bias, bool training, double momentum, double eps) {
  const int64_t C = x->shape[1], cnt = x->shape[0] * x->shape[2] * x->shape[3];
  int dims[3] = {0, 2, 3};
  ag_tensor *mean = NULL, *var = NULL, *xm = NULL, *sq = NULL, *inv = NULL, *y = NULL, *t = NULL;
  ag_tensor *rm = NULL, *rv = NULL, *wv = NULL, *bv = NULL;
  if (training) {
    mean = ag_mean(x, 3, dims, true);
    xm = ag_sub(x, mean);
    sq = ag_mul(xm, xm);
    var = ag_mean(sq, 3, dims, true); /* biased, as the normalisation uses */
  } else {
    rm = chan(running_mean, C);
    rv = chan(running_var, C);
    xm = ag_sub(x, rm);
    var = ag__alias(rv);
  }
  t = ag_add_scalar(var, eps);
  inv = ag_rsqrt(t);
  y = ag_mul(xm, inv);
  if (weight) {
    wv = chan(weight, C);
    ag_tensor *yw = ag_mul(y, wv);
    ag_tensor_release(y);
    y = yw;
  }
  if (bias) {
    bv = chan(bias, C);
    ag_tensor *yb = ag_add(y, bv);
    ag_tensor_release(y);
    y = yb;
  }
  ag_status st = y ? AG_OK : ag_last_status();
  if (st == AG_OK && training && running_mean) {
    /* running = (1 - m) * running + m * batch; the variance unbiased, as PyTorch keeps it */
    ag_no_grad_begin();
    ag_tensor *m1 = ag_reshape(mean, 1, &C), *v1 = ag_reshape(var, 1, &C);
    ag_tensor *a = ag_mul_scalar(running_mean, 1.0 - momentum), *b = ag_mul_scalar(m1, momentum);
    ag_tensor *nm = ag_add(a, b);
    ag_tensor *c2 = ag_mul_scalar(running_var, 1.0 - momentum);
    ag_tensor *d = ag_mul_scalar(v1, momentum * (double)cnt / (double)(cnt - 1));
    ag_tensor *nv = ag_add(c2, d);
    st = (nm && nv) ? ag_copy_(running_mean, nm) : ag_last_status();
    if (st == AG_OK) st = ag_copy_(running_var, nv);
    ag_tensor *rel[] = {m1, v1, a, b, nm, c2, d, nv};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
    ag_grad_mode_end();
  }
  ag_tensor *rel[] = {mean, var, xm, sq, inv, t, rm, rv, wv, bv};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  if (st != AG_OK) {
    ag_tensor_release(y);
    return NULL;
  }
  return y;
}

/* Whether ds runs batch norm of dtype dt as kernels (BN_STATS, BN_APPLY). */
static bool bn_fused(ag_devstate *ds, ag_dtype dt) {
  for (int sub = 0; sub < 2; sub++)
    if (!ag__supports(ds, AG_K_BN_STATS, sub, dt) || !ag__supports(ds, AG_K_BN_APPLY, sub, dt))
      return false;
  return true;
}

/* [N, C, HW] view of a contiguous NCHW operand */
static void bn_operand(ag_koperand *o, ag_tensor *t) {
  ag__operand(o, t);
  o->ndim = 3;
  o->shape[2] = t->shape[2] * t->shape[3];
  o->strides[0] = t->shape[1] * o->shape[2];
  o->strides[1] = o->shape[2];
  o->strides[2] = 1;
}

/* A BN_STATS/BN_APPLY call over a [N, C, HW] (sub 1 when b is given). */
static void bn_call_init(ag_kernel_call *c, ag_kop op, const ag_tensor *a, bool sub1, int n_operands) {
  ag__kcall_init(c, op, sub1 ? 1 : 0, "ag_batch_norm", n_operands, NULL);
  c->i[0] = a->shape[0];
  c->i[1] = a->shape[1];
  c->i[2] = a->shape[2] * a->shape[3];
}

/* Launch c writing out: out (owned by the caller until now), or NULL after
 * releasing it. */
static ag_tensor *bn_launch(ag_kernel_call *c, ag_tensor *out) {
  if (ag__launch(ag__ds(out), c) == AG_OK) return out;
  ag_tensor_release(out);
  return NULL;
}

/* out [2, C] = BN_STATS(a) (sub 0) or BN_STATS(a, b, mu) (sub 1); new reference or NULL. */
ag_tensor *ag__bn_stats(ag_tensor *a, ag_tensor *b, ag_tensor *mu) {
  const int64_t s2[2] = {2, a->shape[1]};
  ag_tensor *out = ag__tensor_new(ag__ds(a), a->dtype, 2, s2);
  if (!out) return NULL;
  ag_kernel_call c;
  bn_call_init(&c, AG_K_BN_STATS, a, b != NULL, b ? 4 : 2);
  ag__operand(&c.o[0], out);
  bn_operand(&c.o[1], a);
  if (b) {
    bn_operand(&c.o[2], b);
    ag__operand(&c.o[3], mu);
  }
  return bn_launch(&c, out);
}

/* y = a*p + q (+ (b - mu)*r) per channel, coef rows [p, q(, r, mu)]; new reference or NULL. */
ag_tensor *ag__bn_apply(ag_tensor *a, ag_tensor *coef, ag_tensor *b) {
  ag_tensor *y = ag__tensor_new(ag__ds(a), a->dtype, 4, a->shape);
  if (!y) return NULL;
  ag_kernel_call c;
  bn_call_init(&c, AG_K_BN_APPLY, a, b != NULL, b ? 4 : 3);
  bn_operand(&c.o[0], y);
  bn_operand(&c.o[1], a);
  ag__operand(&c.o[2], coef);
  if (b) bn_operand(&c.o[3], b);
  return bn_launch(&c, y);
}

/* Row r of a [k, C] tensor as [C] (a view). */
ag_tensor *ag__bn_row(ag_tensor *t, int64_t r) {
  ag_tensor *s = ag_slice(t, 0, r, r + 1, 1);
  ag_tensor *v = s ? ag_reshape(s, 1, &t->shape[1]) : NULL;
  ag_tensor_release(s);
  return v;
}

/* [k, C] from k vectors [C]; new reference or NULL. */
ag_tensor *ag__bn_coef(int k, ag_tensor *const *rows) {
  ag_tensor *r2[4] = {NULL, NULL, NULL, NULL};
  int64_t s[2] = {1, 0};
  bool ok = true;
  for (int i = 0; i < k; i++) {
    s[1] = rows[i] ? rows[i]->shape[0] : 0;
    r2[i] = rows[i] ? ag_reshape(rows[i], 2, s) : NULL;
    ok = ok && r2[i];
  }
  ag_tensor *coef = ok ? ag_concat(k, r2, 0) : NULL;
  for (int i = 0; i < k; i++) ag_tensor_release(r2[i]);
  return coef;
}

/* Batch norm as two kernel passes each way: the per-channel statistics,
 * then y = x*scale + shift with scale = weight*rstd and shift = bias -
 * mean*scale (the [C] coefficients are small generic ops). One autograd
 * node; its backward (autograd/grad_vision.c) is again two passes. */
static ag_tensor *bn_fused_forward(ag_devstate *ds, ag_tensor *x, ag_tensor *running_mean, ag_tensor *running_var,
                                   ag_tensor *weight, ag_tensor *bias, bool training, double momentum, double eps) {
  const int64_t C = x->shape[1], cnt = x->shape[0] * x->shape[2] * x->shape[3];
  ag_no_grad_begin();
  ag_tensor *xc = ag_contiguous(x), *stats = NULL, *mean = NULL, *var = NULL;
  if (xc && training) {
    stats = ag__bn_stats(xc, NULL, NULL);
    mean = stats ? ag__bn_row(stats, 0) : NULL;
    var = stats ? ag__bn_row(stats, 1) : NULL;
  } else if (xc) { /* a copy: the running mean changes in place while the graph lives */
    mean = ag_empty(ag_tensor_device(x), x->dtype, 1, &C);
    if (mean && ag_copy_(mean, running_mean) != AG_OK) {
      ag_tensor_release(mean);
      mean = NULL;
    }
    var = ag__alias(running_var);
  }
  ag_tensor *ve = var ? ag_add_scalar(var, eps) : NULL;
  ag_tensor *rstd = ve ? ag_rsqrt(ve) : NULL;
  ag_tensor *scale = rstd && weight ? ag_mul(weight, rstd) : ag__alias(rstd);
  ag_tensor *ms = scale && mean ? ag_mul(mean, scale) : NULL;
  ag_tensor *shift = ms ? (bias ? ag_sub(bias, ms) : ag_neg(ms)) : NULL;
  ag_tensor *rows[2] = {scale, shift};
  ag_tensor *coef = shift ? ag__bn_coef(2, rows) : NULL;
  ag_tensor *y = coef ? ag__bn_apply(xc, coef, NULL) : NULL;
  ag_status st = y ? AG_OK : failed();
  if (st == AG_OK && training && running_mean) {
    /* running = (1 - m) * running + m * batch; the variance unbiased, as PyTorch keeps it */
    ag_tensor *a = ag_mul_scalar(running_mean, 1.0 - momentum), *b = ag_mul_scalar(mean, momentum);
    ag_tensor *nm = a && b ? ag_add(a, b) : NULL;
    ag_tensor *c2 = ag_mul_scalar(running_var, 1.0 - momentum);
    ag_tensor *d = ag_mul_scalar(var, momentum * (double)cnt / (double)(cnt - 1));
    ag_tensor *nv = c2 && d ? ag_add(c2, d) : NULL;
    st = (nm && nv) ? ag_copy_(running_mean, nm) : failed();
    if (st == AG_OK) st = ag_copy_(running_var, nv);
    ag_tensor *rel[] = {a, b, nm, c2, d, nv};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  }
  ag_grad_mode_end();
  ag_tensor *in[3] = {x, weight, bias};
  if (st == AG_OK && ag__grad_needed(3, in)) {
    ag_gparams gp;
    memset(&gp, 0, sizeof gp);
    gp.i[0] = training;
    gp.s[0] = eps;
    ag_tensor *saved[2] = {mean, rstd};
    st = ag__grad_record(y, AG_G_BATCH_NORM, 3, in, 2, saved, &gp);
  }
  ag_tensor *rel[] = {xc, stats, mean, var, ve, rstd, scale, ms, shift, coef};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  if (st != AG_OK) {
    ag_tensor_release(y);
    return NULL;
  }
  return y;
}

ag_tensor *ag_batch_norm(ag_tensor *x, ag_tensor *running_mean, ag_tensor *running_var, ag_tensor *weight,
                         ag_tensor *bias, bool training, double momentum, double eps) {
  static const char name[] = "ag_batch_norm";
  if (null_arg(name, x, 1)) return NULL;
  if (!float_4d(name, x, "input")) return NULL;
  const int64_t C = x->shape[1];
  ag_tensor *vec[4] = {running_mean, running_var, weight, bias};
  ag_tensor *all[5] = {x, running_mean, running_var, weight, bias};
  ag_devstate *ds = ag__same_device(name, 5, all);
  if (!ds) return NULL;
  static const char *const what[4] = {"running_mean", "running_var", "weight", "bias"};
  for (int i = 0; i < 4; i++) {
    if (!vec[i]) continue;
    if (vec[i]->ndim != 1 || vec[i]->shape[0] != C || vec[i]->dtype != x->dtype) {
      char b[96];
      ag_error_set(AG_ERR_SHAPE, "%s: %s %s must be %s[%lld]", name, what[i], ag_tensor_describe(vec[i], b, sizeof b),
                   ag_dtype_name(x->dtype), (long long)C);
      return NULL;
    }
  }
  if ((running_mean == NULL) != (running_var == NULL)) {
    ag_error_set(AG_ERR_INVALID, "%s: give both running_mean and running_var, or neither", name);
    return NULL;
  }
  if (!training && !running_mean) {
    ag_error_set(AG_ERR_INVALID, "%s: eval mode needs running_mean and running_var", name);
    return NULL;
  }
  if (!(eps >= 0) || isinf(eps) || !(momentum >= 0 && momentum <= 1)) {
    ag_error_set(AG_ERR_INVALID, "%s: need eps finite and >= 0 and 0 <= momentum <= 1 (eps %g, momentum %g)", name, eps,
                 momentum);
    return NULL;
  }
  const int64_t cnt = x->shape[0] * x->shape[2] * x->shape[3];
  if (training && cnt < 2) {
    ag_error_set(AG_ERR_INVALID, "%s: training needs more than one value per channel (got %lld)", name,
                 (long long)cnt);
    return NULL;
  }
  if (bn_fused(ds, x->dtype) && x->numel > 0)
    return bn_fused_forward(ds, x, running_mean, running_var, weight, bias, training, momentum, eps);
  return bn_composed(x, running_mean, running_var, weight, bias, training, momentum, eps);
}

/* conv1d as conv2d over a height of 1: views in, a view out, so autograd
 * records the views and conv2d (docs/design/ops.md). */
ag_tensor *ag_conv1d(ag_tensor *x, ag_tensor *w, ag_tensor *bias, int stride, int padding, int dilation, int groups) {
  static const char name[] = "ag_conv1d";
  if (null_arg(name, x, 1) || null_arg(name, w, 2)) return NULL;
  char b1[96], b2[96];
  if (x->ndim != 3 || w->ndim != 3) {
    ag_error_set(AG_ERR_SHAPE, "%s: input %s and weight %s must be 3-D ([N, C, L] and [Co, C/groups, k])", name,
                 ag_tensor_describe(x, b1, sizeof b1), ag_tensor_describe(w, b2, sizeof b2));
    return NULL;
  }
  if (stride < 1 || dilation < 1 || padding < 0 || groups < 1) {
    ag_error_set(AG_ERR_INVALID, "%s: stride, dilation and groups must be >= 1 and padding >= 0 (got %d, %d, %d, %d)",
                 name, stride, dilation, groups, padding);
    return NULL;
  }
  const ag_conv2d_params p = {{1, stride}, {0, padding}, {1, dilation}, groups};
  ag_tensor *x4 = ag_unsqueeze(x, 2), *w4 = x4 ? ag_unsqueeze(w, 2) : NULL;
  ag_tensor *y4 = w4 ? ag_conv2d(x4, w4, bias, &p) : NULL;
  ag_tensor *y = y4 ? ag_squeeze(y4, 2) : NULL;
  if (!y) {
    /* conv2d's checks name conv2d: say which op the caller called */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    if (strncmp(msg, "ag_conv2d: ", 11) == 0)
      ag_error_set(ag_last_status(), "%s (as conv2d over [N, C, 1, L]): %s", name, msg + 11);
  }
  ag_tensor_release(x4);
  ag_tensor_release(w4);
  ag_tensor_release(y4);
  return y;
}
