/* Kernel launches: maps each ag_kop to one of the embedded kernels (sub-op and
 * dtypes are kernel arguments), collapses elementwise layouts to the fewest
 * dims, and runs GEMM through CLBlast (half types through f32 scratch). */
#include "cl_internal.h"

#include <clblast_c.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const k_names[CLK_COUNT] = {
    [CLK_UNARY] = "ag_unary", [CLK_BINARY] = "ag_binary", [CLK_WHERE] = "ag_where",
    [CLK_FILL] = "ag_fill", [CLK_ARANGE] = "ag_arange", [CLK_RAND] = "ag_rand",
    [CLK_DROPOUT] = "ag_dropout", [CLK_REDUCE_ROWS] = "ag_reduce_rows",
    [CLK_REDUCE_COLS] = "ag_reduce_cols", [CLK_SUMSQ_PART] = "ag_sumsq_part",
    [CLK_SUMSQ_FINAL] = "ag_sumsq_final", [CLK_SOFTMAX] = "ag_softmax",
    [CLK_SOFTMAX_BWD] = "ag_softmax_bwd", [CLK_CE] = "ag_cross_entropy",
    [CLK_CE_BWD] = "ag_cross_entropy_bwd", [CLK_LN] = "ag_layernorm",
    [CLK_LN_BWD] = "ag_layernorm_bwd", [CLK_LN_BWD_WB] = "ag_layernorm_bwd_wb",
    [CLK_EMB] = "ag_embedding", [CLK_EMB_BWD] = "ag_embedding_bwd", [CLK_ADAMW] = "ag_adamw",
    [CLK_SGD] = "ag_sgd", [CLK_NONFINITE] = "ag_nonfinite", [CLK_IM2COL] = "ag_im2col",
    [CLK_COL2IM] = "ag_col2im", [CLK_CONV_BIAS] = "ag_conv_bias", [CLK_POOL] = "ag_pool",
    [CLK_POOL_BWD] = "ag_pool_bwd", [CLK_BN_STATS] = "ag_bn_stats", [CLK_BN_APPLY] = "ag_bn_apply",
    [CLK_RMS] = "ag_rmsnorm", [CLK_RMS_BWD] = "ag_rmsnorm_bwd", [CLK_RMS_BWD_W] = "ag_rmsnorm_bwd_w",
    [CLK_VAR_ROWS] = "ag_var_rows", [CLK_VAR_COLS] = "ag_var_cols",
    [CLK_CUMSUM] = "ag_cumsum", [CLK_GATHER] = "ag_gather", [CLK_GATHER_BWD] = "ag_gather_bwd",
    [CLK_TOPK] = "ag_topk", [CLK_SDPA] = "ag_sdpa", [CLK_SDPA_BWD_DQ] = "ag_sdpa_bwd_dq",
    [CLK_SDPA_BWD_DKV] = "ag_sdpa_bwd_dkv", [CLK_UNARY_D] = "ag_unary_d", [CLK_BINARY_D] = "ag_binary_d",
    [CLK_FILL_D] = "ag_fill_d", [CLK_REDUCE_D] = "ag_reduce_d", [CLK_VAR_D] = "ag_var_d",
    [CLK_CUMSUM_D] = "ag_cumsum_d", [CLK_ARANGE_D] = "ag_arange_d", [CLK_SOFTMAX_D] = "ag_softmax_d",
    [CLK_SOFTMAX_BWD_D] = "ag_softmax_bwd_d", [CLK_GATHER_D] = "ag_gather_d",
    [CLK_GATHER_BWD_D] = "ag_gather_bwd_d", [CLK_EMB_BWD_D] = "ag_embedding_bwd_d",
    [CLK_GN] = "ag_group_norm", [CLK_GN_BWD] = "ag_group_norm_bwd", [CLK_GN_BWD_WB] = "ag_group_norm_bwd_wb",
    [CLK_INTERP] = "ag_interpolate", [CLK_INTERP_BWD] = "ag_interpolate_bwd",
    [CLK_GN_D] = "ag_group_norm_d", [CLK_GN_BWD_D] = "ag_group_norm_bwd_d", [CLK_GN_BWD_WB_D] = "ag_group_norm_bwd_wb_d",
    [CLK_INTERP_D] = "ag_interpolate_d", [CLK_INTERP_BWD_D] = "ag_interpolate_bwd_d",
};

/* elementwise.cl writes the integer rules of the table's INT entries by
 * hand (binary_i, binary_l, cmp_l, the integer paths of ag_unary). */
_Static_assert(AG_UNARY_INT_COUNT == 4, "elementwise.cl implements COPY, NEG, ABS, AFFINE for integers");
_Static_assert(AG_BINARY_INT_COUNT == 11, "elementwise.cl implements ADD..MIN and the comparisons for integers");

/* The fast-path kernels' names, in sub-op order (elementwise.cl defines
 * them from the same table); NULL for comparisons. */
#define CL_NAME_U(ID, ...) "ag_u_" #ID,
#define CL_NAME_CMP_ARITH(ID) "ag_b_" #ID,
#define CL_NAME_CMP_CMP(ID) NULL,
#define CL_NAME_B(ID, name, api, fwd, kind, ...) CL_NAME_CMP_##kind(ID)
#define CL_NAME_BWD(ID, name, api, fwd, save, ...) AG_OPT_IF(AG_OPT_HAS_BWD_##save)("ag_b_" #ID "_BWD", )
#define CL_NAME_PART(ID, name, api, fwd, kind, grad, ...) \
  AG_OPT_IF(AG_OPT_PART_##grad)("ag_b_" #ID "_DA", "ag_b_" #ID "_DB", )
static const char *const k_fast_names[AG_UNARY_COUNT + AG_BINARY_COUNT] = {
    AG_UNARY_OPS(CL_NAME_U) AG_BINARY_OPS(CL_NAME_B) AG_UNARY_OPS(CL_NAME_BWD) AG_BINARY_OPS(CL_NAME_PART)};

#define CLB_WG 256 /* AG_WG in the program */
#define SUMSQ_GROUPS 64

/* cl_kernel objects are not safe for concurrent clSetKernelArg, so each
 * stream (serialised by the core) has its own set. */
ag_status clb_stream_kernels(ag_bstream *s) {
  if (s->have_kernels) return AG_OK;
  cl_program prog;
  ag_status st = clb_program(s->d, &prog);
  if (st != AG_OK) return st;
  for (int i = 0; i < CLK_COUNT; i++) {
    cl_int err;
    const char *name = i >= CLK_UNARY_C0 ? k_fast_names[i - CLK_UNARY_C0] : k_names[i];
    bool f64_kernel = (i >= CLK_UNARY_D && i <= CLK_ARANGE_D) || (i >= CLK_GN_D && i <= CLK_INTERP_BWD_D);
    if (!name || (f64_kernel && !s->d->fp64)) {
      s->k[i] = NULL;
      continue;
    }
    s->k[i] = clCreateKernel(prog, name, &err);
    if (!s->k[i]) {
      for (int j = 0; j < i; j++) {
        if (s->k[j]) clReleaseKernel(s->k[j]);
        s->k[j] = NULL;
      }
      return clb_error(err, name);
    }
    size_t wg = CLB_WG;
    clGetKernelWorkGroupInfo(s->k[i], s->d->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    size_t p = 1;
    while (p * 2 <= wg && p * 2 <= CLB_WG && p * 2 <= s->d->max_wg) p *= 2;
    s->kwg[i] = p;
  }
  s->have_kernels = true;
  return AG_OK;
}

/* ---- argument helper ---- */

typedef struct kargs {
  ag_bstream *s;
  clb_kernel which;
  cl_uint n;
  cl_int err;
} kargs;

#define KA(a, T, v)                                                             \
  do {                                                                          \
    T ka_v_ = (T)(v);                                                           \
    if ((a)->err == CL_SUCCESS)                                                 \
      (a)->err = clSetKernelArg((a)->s->k[(a)->which], (a)->n, sizeof ka_v_, &ka_v_); \
    (a)->n++;                                                                   \
  } while (0)
/* Structs are passed by address: C has no cast to a struct type. */
#define KMETA(a, m)                                                                \
  do {                                                                             \
    if ((a)->err == CL_SUCCESS)                                                    \
      (a)->err = clSetKernelArg((a)->s->k[(a)->which], (a)->n, sizeof(m), &(m));   \
    (a)->n++;                                                                      \
  } while (0)
#define KBUF(a, op)      \
  do {                   \
    KA(a, cl_mem, (op)->base); \
    KA(a, cl_ulong, (op)->offset); \
  } while (0)

static kargs ka_begin(ag_bstream *s, clb_kernel which) { return (kargs){s, which, 0, CL_SUCCESS}; }

/* 1-D launch of `items` work-items in groups of `local` (0: the kernel's
 * preferred size); the kernels bound-check the padding. */
static ag_status ka_run(kargs *a, size_t items, size_t local) {
  if (a->err != CL_SUCCESS) return clb_error(a->err, k_names[a->which] ? k_names[a->which] : "ag_u/ag_b fast path");
  if (!local || local > a->s->kwg[a->which]) local = a->s->kwg[a->which];
  size_t global = (items + local - 1) / local * local;
  if (!global) return AG_OK;
  cl_int err = clEnqueueNDRangeKernel(a->s->q, a->s->k[a->which], 1, NULL, &global, &local, 0,
                                      NULL, NULL);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, k_names[a->which] ? k_names[a->which] : "ag_u/ag_b fast path");
}

/* Work-group size for a row kernel: a power of two covering cols, at most
 * the kernel's limit. */
static size_t row_local(ag_bstream *s, clb_kernel k, int64_t cols) {
  size_t l = 1;
  while (l < (size_t)cols && l < s->kwg[k]) l *= 2;
  return l < 32 && s->kwg[k] >= 32 ? 32 : l;
}

static int64_t numel(const ag_koperand *o) {
  int64_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  return n;
}

/* Drops size-1 dims and merges dims that are contiguous in every operand.
 * Returns the dims left, 0 when every operand is plainly contiguous. */
static int collapse(const ag_koperand *o0, int nop, const ag_koperand *const *ops,
                    clb_ew_meta *m) {
  memset(m, 0, sizeof *m);
  int r = 0;
  for (int d = 0; d < o0->ndim; d++) {
    if (o0->shape[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < nop && merge; k++)
      merge = m->st[k][r - 1] == ops[k]->strides[d] * o0->shape[d];
    if (merge) {
      m->shape[r - 1] *= o0->shape[d];
      for (int k = 0; k < nop; k++) m->st[k][r - 1] = ops[k]->strides[d];
    } else {
      m->shape[r] = o0->shape[d];
      for (int k = 0; k < nop; k++) m->st[k][r] = ops[k]->strides[d];
      r++;
    }
  }
  bool contig = r <= 1;
  for (int k = 0; k < nop && r == 1; k++) contig = contig && m->st[k][0] == 1;
  return contig ? 0 : r;
}

/* Local copy: the module must not need core symbols beyond errors. */
static size_t dsize(ag_dtype dt) {
  return dt == AG_F16 || dt == AG_BF16 ? 2 : dt == AG_I64 || dt == AG_F64 ? 8 : dt == AG_U8 || dt == AG_BOOL ? 1 : 4;
}

static bool is_float(ag_dtype dt) { return dt == AG_F32 || dt == AG_F16 || dt == AG_BF16; }
static bool is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }
static bool is_compare(int sub) {
  const ag_binary_info *b = ag_binary_info_of(sub);
  return b && b->compare;
}

/* A floating value as integer dtype dt stores it: truncated and saturated
 * (NaN 0), bool v != 0 (tensor.h). */
static int64_t sat_int(double v, ag_dtype dt) {
  if (dt == AG_BOOL) return v != 0;
  if (!(v == v)) return 0;
  double lo = dt == AG_I32 ? -2147483648.0 : dt == AG_U8 ? 0 : -9223372036854775808.0;
  double hi = dt == AG_I32 ? 2147483647.0 : dt == AG_U8 ? 255 : 9223372036854775807.0;
  if (v <= lo) return dt == AG_I64 ? INT64_MIN : (int64_t)lo;
  if (v >= hi) return dt == AG_I64 ? INT64_MAX : (int64_t)hi;
  return (int64_t)v;
}

/* ---- elementwise ---- */

/* is: the exact integer scalars of AFFINE on an integer dtype (the call's
 * i[]), or NULL. */
static ag_status run_unary_is(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                              double s1, const int64_t *is) {
  int64_t n = numel(o);
  if (!n) return AG_OK;
  const ag_koperand *ops[2] = {o, x};
  clb_ew_meta m;
  int nd = collapse(o, 2, ops, &m);
  size_t bytes = (size_t)n * dsize(o->dtype);
  bool overlap = o->base == x->base && o->offset < x->offset + bytes && x->offset < o->offset + bytes;
  if (nd == 0 && sub == AG_U_COPY && o->dtype == x->dtype && overlap && o->offset == x->offset)
    return AG_OK;
  if (nd == 0 && sub == AG_U_COPY && o->dtype == x->dtype && !overlap) {
    cl_int err = clEnqueueCopyBuffer(s->q, x->base, o->base, x->offset, o->offset,
                                     bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? AG_OK : clb_error(err, "clEnqueueCopyBuffer");
  }
  if (o->dtype == AG_F64 || x->dtype == AG_F64) { /* f64.cl; supports() needs cl_khr_fp64 */
    kargs a = ka_begin(s, CLK_UNARY_D);
    KBUF(&a, o);
    KA(&a, cl_int, o->dtype);
    KBUF(&a, x);
    KA(&a, cl_int, x->dtype);
    KA(&a, cl_int, sub);
    KA(&a, cl_double, s0);
    KA(&a, cl_double, s1);
    KA(&a, cl_long, n);
    KA(&a, cl_int, nd);
    KMETA(&a, m);
    return ka_run(&a, (size_t)n, 0);
  }
  if (nd == 0 && o->dtype == x->dtype && is_float(o->dtype)) {
    kargs a = ka_begin(s, (clb_kernel)(CLK_UNARY_C0 + sub));
    KBUF(&a, o);
    KBUF(&a, x);
    KA(&a, cl_int, o->dtype);
    KA(&a, cl_float, s0);
    KA(&a, cl_float, s1);
    KA(&a, cl_long, n);
    return ka_run(&a, (size_t)n, 0);
  }
  kargs a = ka_begin(s, CLK_UNARY);
  KBUF(&a, o);
  KA(&a, cl_int, o->dtype);
  KBUF(&a, x);
  KA(&a, cl_int, x->dtype);
  KA(&a, cl_int, sub);
  KA(&a, cl_float, s0);
  KA(&a, cl_float, s1);
  KA(&a, cl_long, is ? is[0] : 0);
  KA(&a, cl_long, is ? is[1] : 0);
  KA(&a, cl_int, is != NULL);
  KA(&a, cl_long, n);
  KA(&a, cl_int, nd);
  KMETA(&a, m);
  return ka_run(&a, (size_t)n, 0);
}

static ag_status run_unary(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                           double s1) {
  return run_unary_is(s, o, x, sub, s0, s1, NULL);
}

static ag_status run_binary(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = numel(o);
  if (!n) return AG_OK;
  const ag_koperand *ops[3] = {o, &c->o[1], &c->o[2]};
  clb_ew_meta m;
  int nd = collapse(o, 3, ops, &m);
  if (c->o[1].dtype == AG_F64) { /* f64.cl */
    kargs a = ka_begin(s, CLK_BINARY_D);
    KBUF(&a, o);
    KBUF(&a, &c->o[1]);
    KBUF(&a, &c->o[2]);
    KA(&a, cl_int, c->sub);
    KA(&a, cl_double, c->s[0]);
    KA(&a, cl_double, c->s[1]);
    KA(&a, cl_long, n);
    KA(&a, cl_int, nd);
    KMETA(&a, m);
    return ka_run(&a, (size_t)n, 0);
  }
  /* fast path: floating ops with their own dtype (comparisons write bool) */
  if (nd == 0 && is_float(o->dtype) && !is_compare(c->sub)) {
    kargs a = ka_begin(s, (clb_kernel)(CLK_BINARY_C0 + c->sub));
    KBUF(&a, o);
    KBUF(&a, &c->o[1]);
    KBUF(&a, &c->o[2]);
    KA(&a, cl_int, o->dtype);
    KA(&a, cl_float, c->s[0]);
    KA(&a, cl_float, c->s[1]);
    KA(&a, cl_long, n);
    return ka_run(&a, (size_t)n, 0);
  }
  kargs a = ka_begin(s, CLK_BINARY);
  KBUF(&a, o);
  KBUF(&a, &c->o[1]);
  KBUF(&a, &c->o[2]);
  KA(&a, cl_int, c->o[1].dtype);
  KA(&a, cl_int, c->sub);
  KA(&a, cl_float, c->s[0]);
  KA(&a, cl_float, c->s[1]);
  KA(&a, cl_long, (int64_t)c->s[0]);
  KA(&a, cl_int, c->s[0] == (double)(int32_t)c->s[0]);
  KA(&a, cl_long, n);
  KA(&a, cl_int, nd);
  KMETA(&a, m);
  return ka_run(&a, (size_t)n, 0);
}

static ag_status run_where(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = numel(o);
  if (!n) return AG_OK;
  const ag_koperand *ops[4] = {o, &c->o[1], &c->o[2], &c->o[3]};
  clb_ew_meta m;
  int nd = collapse(o, 4, ops, &m);
  kargs a = ka_begin(s, CLK_WHERE);
  KBUF(&a, o);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KBUF(&a, &c->o[2]);
  KBUF(&a, &c->o[3]);
  KA(&a, cl_int, (int)dsize(o->dtype));
  KA(&a, cl_long, n);
  KA(&a, cl_int, nd);
  KMETA(&a, m);
  return ka_run(&a, (size_t)n, 0);
}

static ag_status run_fill(ag_bstream *s, const ag_koperand *o, double v) {
  int64_t n = numel(o);
  if (!n) return AG_OK;
  const ag_koperand *ops[1] = {o};
  clb_ew_meta m;
  int nd = collapse(o, 1, ops, &m);
  if (nd == 0) {
    /* The runtime's fill with the value encoded as the dtype stores it. */
    union {
      float f;
      int32_t i;
      int64_t l;
      uint16_t h;
      uint8_t b;
      double d;
    } pat;
    if (o->dtype == AG_F64) pat.d = v;
    else if (o->dtype == AG_F32) pat.f = (float)v;
    else if (o->dtype == AG_I32) pat.i = (int32_t)v;
    else if (o->dtype == AG_I64) pat.l = sat_int(v, AG_I64);
    else if (o->dtype == AG_U8 || o->dtype == AG_BOOL) pat.b = (uint8_t)sat_int(v, o->dtype);
    else pat.h = o->dtype == AG_F16 ? ag_f32_to_f16((float)v) : ag_f32_to_bf16((float)v);
    size_t esz = dsize(o->dtype);
    cl_int err = clEnqueueFillBuffer(s->q, o->base, &pat, esz, o->offset, (size_t)n * esz, 0,
                                     NULL, NULL);
    return err == CL_SUCCESS ? AG_OK : clb_error(err, "clEnqueueFillBuffer");
  }
  if (o->dtype == AG_F64) {
    kargs a = ka_begin(s, CLK_FILL_D);
    KBUF(&a, o);
    KA(&a, cl_double, v);
    KA(&a, cl_long, n);
    KA(&a, cl_int, nd);
    KMETA(&a, m);
    return ka_run(&a, (size_t)n, 0);
  }
  kargs a = ka_begin(s, CLK_FILL);
  KBUF(&a, o);
  KA(&a, cl_int, o->dtype);
  KA(&a, cl_float, v);
  KA(&a, cl_long, o->dtype == AG_I32 ? (int64_t)(int32_t)v : sat_int(v, o->dtype));
  KA(&a, cl_long, n);
  KA(&a, cl_int, nd);
  KMETA(&a, m);
  return ka_run(&a, (size_t)n, 0);
}

static ag_status run_arange(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = numel(o);
  if (o->dtype == AG_F64) { /* f64.cl */
    kargs a = ka_begin(s, CLK_ARANGE_D);
    KBUF(&a, o);
    KA(&a, cl_double, c->s[0]);
    KA(&a, cl_double, c->s[1]);
    KA(&a, cl_long, n);
    return ka_run(&a, (size_t)n, 0);
  }
  kargs a = ka_begin(s, CLK_ARANGE);
  KBUF(&a, o);
  KA(&a, cl_int, o->dtype);
  KA(&a, cl_float, c->s[0]);
  KA(&a, cl_float, c->s[1]);
  KA(&a, cl_long, (int64_t)c->s[0]);
  KA(&a, cl_long, (int64_t)c->s[1]);
  KA(&a, cl_long, n);
  return ka_run(&a, (size_t)n, 0);
}

static ag_status run_rand(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = numel(o);
  kargs a = ka_begin(s, CLK_RAND);
  KBUF(&a, o);
  KA(&a, cl_int, o->dtype);
  KA(&a, cl_int, c->op == AG_K_RAND_NORMAL);
  KA(&a, cl_float, c->s[0]);
  KA(&a, cl_float, c->s[1]);
  KA(&a, cl_ulong, c->seed);
  KA(&a, cl_ulong, c->offset);
  KA(&a, cl_long, n);
  int64_t per = c->op == AG_K_RAND_NORMAL ? 2 : 4; /* elements per Philox block */
  return ka_run(&a, (size_t)((n + per - 1) / per), 0);
}

static ag_status run_dropout(ag_bstream *s, const ag_kernel_call *c) {
  int64_t n = numel(&c->o[0]);
  kargs a = ka_begin(s, CLK_DROPOUT);
  KBUF(&a, &c->o[0]);
  KA(&a, cl_int, c->o[0].dtype);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  bool has_mask = c->n_operands > 2 && c->o[2].base;
  KA(&a, cl_mem, has_mask ? c->o[2].base : NULL);
  KA(&a, cl_ulong, has_mask ? c->o[2].offset : 0);
  KA(&a, cl_int, has_mask ? c->o[2].dtype : AG_F32);
  KA(&a, cl_float, c->s[0]);
  /* 1 / (1 - p) in double as hi + lo floats: the kernel's x * scale then
   * rounds like the CPU's double product (devices need not have fp64) */
  double scale = c->s[0] < 1 ? 1.0 / (1.0 - c->s[0]) : 0.0;
  float hi = (float)scale, lo = (float)(scale - (double)hi);
  KA(&a, cl_float, hi);
  KA(&a, cl_float, lo);
  KA(&a, cl_ulong, c->seed);
  KA(&a, cl_ulong, c->offset);
  KA(&a, cl_long, n);
  return ka_run(&a, (size_t)((n + 3) / 4), 0);
}

/* ---- reductions ---- */

static ag_status run_reduce(ag_bstream *s, const ag_kernel_call *c) {
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  if (outer * inner == 0) return AG_OK;
  if (c->o[1].dtype == AG_F64) { /* f64.cl */
    kargs a = ka_begin(s, CLK_REDUCE_D);
    KBUF(&a, &c->o[0]);
    KBUF(&a, &c->o[1]);
    KA(&a, cl_int, c->sub);
    KA(&a, cl_double, c->sub == AG_R_SUM ? c->s[0] : 1.0);
    KA(&a, cl_long, outer);
    KA(&a, cl_long, r);
    KA(&a, cl_long, inner);
    return ka_run(&a, (size_t)(outer * inner), 0);
  }
  float scale = c->sub == AG_R_SUM ? (float)c->s[0] : 1.0f;
  if (inner == 1) {
    kargs a = ka_begin(s, CLK_REDUCE_ROWS);
    KBUF(&a, &c->o[0]);
    KA(&a, cl_int, c->o[0].dtype);
    KBUF(&a, &c->o[1]);
    KA(&a, cl_int, c->o[1].dtype);
    KA(&a, cl_int, c->sub);
    KA(&a, cl_float, scale);
    KA(&a, cl_long, r);
    size_t l = row_local(s, CLK_REDUCE_ROWS, r);
    return ka_run(&a, (size_t)outer * l, l);
  }
  kargs a = ka_begin(s, CLK_REDUCE_COLS);
  KBUF(&a, &c->o[0]);
  KA(&a, cl_int, c->o[0].dtype);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KA(&a, cl_int, c->sub);
  KA(&a, cl_float, scale);
  KA(&a, cl_long, outer);
  KA(&a, cl_long, r);
  KA(&a, cl_long, inner);
  return ka_run(&a, (size_t)(outer * inner), 0);
}

static ag_status run_sumsq(ag_bstream *s, const ag_kernel_call *c) {
  const ag_kmulti *mt = c->multi;
  int count = mt ? mt->count : 0;
  cl_mem part;
  ag_status st = clb_scratch(s, sizeof(float) * SUMSQ_GROUPS * (size_t)(count ? count : 1), &part);
  if (st != AG_OK) return st;
  int64_t np = 0;
  size_t l = s->kwg[CLK_SUMSQ_PART];
  for (int k = 0; k < count; k++) {
    int64_t n = mt->t[k].numel;
    if (!n) continue;
    int64_t groups = (n + (int64_t)l - 1) / (int64_t)l;
    if (groups > SUMSQ_GROUPS) groups = SUMSQ_GROUPS;
    kargs a = ka_begin(s, CLK_SUMSQ_PART);
    KA(&a, cl_mem, part);
    KA(&a, cl_long, np);
    KA(&a, cl_mem, mt->t[k].base);
    KA(&a, cl_ulong, mt->t[k].offset);
    KA(&a, cl_int, mt->t[k].dtype);
    KA(&a, cl_long, n);
    if ((st = ka_run(&a, (size_t)groups * l, l)) != AG_OK) return st;
    np += groups;
  }
  kargs a = ka_begin(s, CLK_SUMSQ_FINAL);
  KBUF(&a, &c->o[0]);
  KA(&a, cl_mem, part);
  KA(&a, cl_long, np);
  size_t lf = s->kwg[CLK_SUMSQ_FINAL];
  return ka_run(&a, lf, lf);
}

/* ---- row kernels ---- */

static ag_status run_softmax(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows) return AG_OK;
  if (c->o[0].dtype == AG_F64) { /* f64.cl: a work-item per row */
    kargs a = ka_begin(s, bwd ? CLK_SOFTMAX_BWD_D : CLK_SOFTMAX_D);
    KBUF(&a, &c->o[0]);
    KBUF(&a, &c->o[1]);
    if (bwd) KBUF(&a, &c->o[2]);
    KA(&a, cl_long, rows);
    KA(&a, cl_long, cols);
    KA(&a, cl_int, c->sub);
    return ka_run(&a, (size_t)rows, 0);
  }
  clb_kernel k = bwd ? CLK_SOFTMAX_BWD : CLK_SOFTMAX;
  kargs a = ka_begin(s, k);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  if (bwd) KBUF(&a, &c->o[2]);
  KA(&a, cl_int, c->o[0].dtype);
  KA(&a, cl_long, cols);
  KA(&a, cl_int, c->sub);
  size_t l = row_local(s, k, cols);
  return ka_run(&a, (size_t)rows * l, l);
}

static ag_status run_ce(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows) return AG_OK;
  clb_kernel k = bwd ? CLK_CE_BWD : CLK_CE;
  kargs a = ka_begin(s, k);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KBUF(&a, &c->o[2]);
  if (bwd) {
    KBUF(&a, &c->o[3]);
    KA(&a, cl_long, c->o[3].ndim ? c->o[3].strides[0] : 0);
  }
  KA(&a, cl_long, cols);
  KA(&a, cl_int, (int32_t)c->i[2]);
  KA(&a, cl_mem, s->err);
  s->err_armed = true;
  size_t l = row_local(s, k, cols);
  return ka_run(&a, (size_t)rows * l, l);
}

static const ag_koperand *opt_op(const ag_kernel_call *c, int i) {
  static const ag_koperand absent = {0};
  return i < c->n_operands && c->o[i].base ? &c->o[i] : &absent;
}

/* Attention (AG_K_SDPA*): the geometry as the kernels' sdpa_geom
 * (kernels/opencl/nn.cl), passed by value. */
typedef struct clb_sdpa_geom {
  cl_long B, H, Hkv, T, S, D, Dv;
  cl_long ms0, ms1, ms2, ms3;
  cl_float scale, p, keep;
  cl_int causal, dt;
  cl_ulong seed, offset;
} clb_sdpa_geom;
#define CLB_SDPA_MAXD 128 /* SDPA_MAXD in nn.cl */

static ag_status run_sdpa(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *q = &c->o[1], *k = &c->o[2], *v = &c->o[3], *m = opt_op(c, 4);
  clb_sdpa_geom g = {q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2], q->shape[3], v->shape[3],
                     m->base ? m->strides[0] : 0, m->base ? m->strides[1] : 0, m->base ? m->strides[2] : 0,
                     m->base ? m->strides[3] : 0, (cl_float)c->s[0], (cl_float)c->s[1],
                     (cl_float)(c->s[1] < 1 ? 1.0 / (1.0 - c->s[1]) : 0.0), (cl_int)(c->i[0] != 0), (cl_int)q->dtype,
                     c->seed, c->offset};
  /* per-work-item rows live in private arrays: larger heads are declined
   * (the core then runs the unfused composition) */
  if (g.D > CLB_SDPA_MAXD || g.Dv > CLB_SDPA_MAXD)
    return ag_error_set(AG_ERR_UNSUPPORTED, "opencl: %s: head size %lld/%lld above %d", c->name ? c->name : "sdpa",
                        (long long)g.D, (long long)g.Dv, CLB_SDPA_MAXD);
  if (c->op == AG_K_SDPA) {
    kargs a = ka_begin(s, CLK_SDPA);
    KBUF(&a, &c->o[0]);
    KBUF(&a, q);
    KBUF(&a, k);
    KBUF(&a, v);
    KBUF(&a, m);
    KBUF(&a, &c->o[5]);
    KA(&a, clb_sdpa_geom, g);
    return ka_run(&a, (size_t)(g.B * g.H * g.T), 0);
  }
  if (!c->multi || c->multi->count < 4)
    return ag_error_set(AG_ERR_INTERNAL, "opencl: %s: dq, dk, dv and out not given", c->name ? c->name : "sdpa");
  const ag_kmulti *mt = c->multi;
  kargs a = ka_begin(s, CLK_SDPA_BWD_DQ);
  KA(&a, cl_mem, mt->t[0].base);
  KA(&a, cl_ulong, mt->t[0].offset);
  KBUF(&a, &c->o[0]);
  KBUF(&a, q);
  KBUF(&a, k);
  KBUF(&a, v);
  KBUF(&a, m);
  KBUF(&a, &c->o[5]);
  KA(&a, cl_mem, mt->t[3].base);
  KA(&a, cl_ulong, mt->t[3].offset);
  KA(&a, clb_sdpa_geom, g);
  ag_status st = ka_run(&a, (size_t)(g.B * g.H * g.T), 0);
  if (st != AG_OK) return st;
  a = ka_begin(s, CLK_SDPA_BWD_DKV);
  KA(&a, cl_mem, mt->t[1].base);
  KA(&a, cl_ulong, mt->t[1].offset);
  KA(&a, cl_mem, mt->t[2].base);
  KA(&a, cl_ulong, mt->t[2].offset);
  KBUF(&a, &c->o[0]);
  KBUF(&a, q);
  KBUF(&a, k);
  KBUF(&a, v);
  KBUF(&a, m);
  KBUF(&a, &c->o[5]);
  KA(&a, cl_mem, mt->t[3].base);
  KA(&a, cl_ulong, mt->t[3].offset);
  KA(&a, clb_sdpa_geom, g);
  return ka_run(&a, (size_t)(g.B * g.Hkv * g.S), 0);
}

static ag_status run_layernorm(ag_bstream *s, const ag_kernel_call *c) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows) return AG_OK;
  kargs a = ka_begin(s, CLK_LN);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KBUF(&a, opt_op(c, 2));
  KBUF(&a, opt_op(c, 3));
  KBUF(&a, opt_op(c, 4));
  KBUF(&a, opt_op(c, 5));
  KA(&a, cl_long, cols);
  KA(&a, cl_float, c->s[0]);
  size_t l = row_local(s, CLK_LN, cols);
  return ka_run(&a, (size_t)rows * l, l);
}

static ag_status run_layernorm_bwd(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *dx = &c->o[0];
  int64_t cols = dx->ndim ? dx->shape[dx->ndim - 1] : 1;
  int64_t rows = cols ? numel(dx) / cols : 0;
  if (!rows || !cols) return AG_OK;
  kargs a = ka_begin(s, CLK_LN_BWD);
  KBUF(&a, dx);
  KBUF(&a, &c->o[1]);
  KBUF(&a, &c->o[2]);
  KA(&a, cl_int, dx->dtype);
  KBUF(&a, &c->o[3]);
  KBUF(&a, &c->o[4]);
  KBUF(&a, opt_op(c, 5));
  KA(&a, cl_long, cols);
  size_t l = row_local(s, CLK_LN_BWD, cols);
  ag_status st = ka_run(&a, (size_t)rows * l, l);
  if (st != AG_OK || !c->multi || c->multi->count < 1) return st;
  const ag_kmulti *mt = c->multi;
  a = ka_begin(s, CLK_LN_BWD_WB);
  KA(&a, cl_mem, mt->t[0].base);
  KA(&a, cl_ulong, mt->t[0].offset);
  KA(&a, cl_mem, mt->count > 1 ? mt->t[1].base : NULL);
  KA(&a, cl_ulong, mt->count > 1 ? mt->t[1].offset : 0);
  KBUF(&a, &c->o[1]);
  KBUF(&a, &c->o[2]);
  KA(&a, cl_int, dx->dtype);
  KBUF(&a, &c->o[3]);
  KBUF(&a, &c->o[4]);
  KA(&a, cl_long, rows);
  KA(&a, cl_long, cols);
  return ka_run(&a, (size_t)cols, 0);
}

static ag_status run_rmsnorm(ag_bstream *s, const ag_kernel_call *c) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows || !cols) return AG_OK;
  kargs a = ka_begin(s, CLK_RMS);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KBUF(&a, opt_op(c, 2));
  KBUF(&a, opt_op(c, 3));
  KA(&a, cl_long, cols);
  KA(&a, cl_float, c->s[0]);
  size_t l = row_local(s, CLK_RMS, cols);
  return ka_run(&a, (size_t)rows * l, l);
}

static ag_status run_rmsnorm_bwd(ag_bstream *s, const ag_kernel_call *c) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!cols) return AG_OK;
  const ag_koperand *dx = &c->o[0];
  ag_status st = AG_OK;
  if (rows) {
    kargs a = ka_begin(s, CLK_RMS_BWD);
    KBUF(&a, dx);
    KBUF(&a, &c->o[1]);
    KBUF(&a, &c->o[2]);
    KA(&a, cl_int, dx->dtype);
    KBUF(&a, &c->o[3]);
    KBUF(&a, opt_op(c, 4));
    KA(&a, cl_long, cols);
    size_t l = row_local(s, CLK_RMS_BWD, cols);
    st = ka_run(&a, (size_t)rows * l, l);
  }
  if (st != AG_OK || !c->multi || c->multi->count < 1 || !c->multi->t[0].base) return st;
  kargs a = ka_begin(s, CLK_RMS_BWD_W);
  KA(&a, cl_mem, c->multi->t[0].base);
  KA(&a, cl_ulong, c->multi->t[0].offset);
  KBUF(&a, &c->o[1]);
  KBUF(&a, &c->o[2]);
  KA(&a, cl_int, dx->dtype);
  KBUF(&a, &c->o[3]);
  KA(&a, cl_long, rows);
  KA(&a, cl_long, cols);
  return ka_run(&a, (size_t)cols, 0);
}

static ag_status run_var(ag_bstream *s, const ag_kernel_call *c) {
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  if (!outer || !inner) return AG_OK;
  double d = (double)r - c->s[0];
  if (c->o[1].dtype == AG_F64) { /* f64.cl */
    kargs a = ka_begin(s, CLK_VAR_D);
    KBUF(&a, &c->o[0]);
    KBUF(&a, &c->o[1]);
    KA(&a, cl_long, outer);
    KA(&a, cl_long, r);
    KA(&a, cl_long, inner);
    KA(&a, cl_double, d > 0 ? d : 0.0);
    KA(&a, cl_int, c->sub);
    return ka_run(&a, (size_t)(outer * inner), 0);
  }
  float den = d > 0 ? (float)d : 0.0f;
  bool rows = inner == 1 && r > 0;
  kargs a = ka_begin(s, rows ? CLK_VAR_ROWS : CLK_VAR_COLS);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  if (rows) {
    KA(&a, cl_long, r);
  } else {
    KA(&a, cl_long, outer);
    KA(&a, cl_long, r);
    KA(&a, cl_long, inner);
  }
  KA(&a, cl_float, den);
  KA(&a, cl_int, c->sub);
  if (!rows) return ka_run(&a, (size_t)(outer * inner), 0);
  size_t l = row_local(s, CLK_VAR_ROWS, r);
  return ka_run(&a, (size_t)outer * l, l);
}

static ag_status run_cumsum(ag_bstream *s, const ag_kernel_call *c) {
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  if (!outer || !r || !inner) return AG_OK;
  if (c->o[1].dtype == AG_F64) { /* f64.cl */
    kargs a = ka_begin(s, CLK_CUMSUM_D);
    KBUF(&a, &c->o[0]);
    KBUF(&a, &c->o[1]);
    KA(&a, cl_long, outer);
    KA(&a, cl_long, r);
    KA(&a, cl_long, inner);
    KA(&a, cl_int, c->sub);
    return ka_run(&a, (size_t)(outer * inner), 0);
  }
  kargs a = ka_begin(s, CLK_CUMSUM);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KA(&a, cl_long, outer);
  KA(&a, cl_long, r);
  KA(&a, cl_long, inner);
  KA(&a, cl_int, c->sub);
  return ka_run(&a, (size_t)(outer * inner), 0);
}

_Static_assert(AG_ERR_INDEX == 8, "ERR_INDEX in kernels/opencl/common.cl");

static ag_status run_gather(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  int64_t O = c->i[0], K = c->i[1], I = c->i[2], X = c->i[3];
  int64_t items = bwd ? O * I : O * K * I;
  if (!items || (bwd && !X)) return AG_OK;
  const ag_koperand *ix = &c->o[2];
  bool f64 = c->o[1].dtype == AG_F64; /* f64.cl */
  kargs a = ka_begin(s, f64 ? (bwd ? CLK_GATHER_BWD_D : CLK_GATHER_D) : bwd ? CLK_GATHER_BWD : CLK_GATHER);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[1]);
  if (!f64) KA(&a, cl_int, c->o[1].dtype);
  KBUF(&a, ix);
  KA(&a, cl_long, ix->strides[0]);
  KA(&a, cl_long, ix->strides[1]);
  KA(&a, cl_long, ix->strides[2]);
  KA(&a, cl_long, O);
  KA(&a, cl_long, K);
  KA(&a, cl_long, I);
  KA(&a, cl_long, X);
  if (!bwd) {
    KA(&a, cl_mem, s->err);
    s->err_armed = true;
  }
  return ka_run(&a, (size_t)items, 0);
}

static ag_status run_topk(ag_bstream *s, const ag_kernel_call *c) {
  int64_t O = c->i[0], R = c->i[1], I = c->i[2], K = c->i[3];
  if (O * R * I == 0 || K == 0) return AG_OK;
  kargs a = ka_begin(s, CLK_TOPK);
  KBUF(&a, &c->o[0]);
  KBUF(&a, &c->o[2]);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KA(&a, cl_long, O);
  KA(&a, cl_long, R);
  KA(&a, cl_long, I);
  KA(&a, cl_long, K);
  KA(&a, cl_int, c->sub);
  return ka_run(&a, (size_t)(O * R * I), 0);
}

static int64_t pick(int64_t v, int64_t dflt) { return v > 0 ? v : dflt; }

static ag_status run_embedding(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *tab = &c->o[1];
  int64_t n = pick(c->i[0], numel(&c->o[2]));
  int64_t d = pick(c->i[1], tab->ndim > 1 ? tab->shape[1] : 1);
  int64_t v = pick(c->i[2], tab->ndim ? tab->shape[0] : 0);
  if (!n || !d) return AG_OK;
  kargs a = ka_begin(s, CLK_EMB);
  KBUF(&a, &c->o[0]);
  KBUF(&a, tab);
  KA(&a, cl_int, (int)dsize(tab->dtype));
  KBUF(&a, &c->o[2]);
  KA(&a, cl_long, n);
  KA(&a, cl_long, d);
  KA(&a, cl_long, v);
  KA(&a, cl_mem, s->err);
  s->err_armed = true;
  return ka_run(&a, (size_t)(n * d), 0);
}

static ag_status run_embedding_bwd(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *t = &c->o[0];
  int64_t n = pick(c->i[0], numel(&c->o[2]));
  int64_t d = pick(c->i[1], t->ndim > 1 ? t->shape[1] : 1);
  int64_t v = pick(c->i[2], t->ndim ? t->shape[0] : 0);
  if (!n || !d) return AG_OK;
  if (t->dtype == AG_F64) { /* f64.cl */
    kargs a = ka_begin(s, CLK_EMB_BWD_D);
    KBUF(&a, t);
    KBUF(&a, &c->o[1]);
    KBUF(&a, &c->o[2]);
    KA(&a, cl_long, n);
    KA(&a, cl_long, d);
    KA(&a, cl_long, v);
    KA(&a, cl_mem, s->err);
    s->err_armed = true;
    return ka_run(&a, (size_t)d, 0);
  }
  kargs a = ka_begin(s, CLK_EMB_BWD);
  KBUF(&a, t);
  KA(&a, cl_int, t->dtype);
  KBUF(&a, &c->o[1]);
  KA(&a, cl_int, c->o[1].dtype);
  KBUF(&a, &c->o[2]);
  KA(&a, cl_long, n);
  KA(&a, cl_long, d);
  KA(&a, cl_long, v);
  KA(&a, cl_mem, s->err);
  s->err_armed = true;
  return ka_run(&a, (size_t)d, 0);
}

/* ---- optimizers ---- */

static ag_status run_optim(ag_bstream *s, const ag_kernel_call *c) {
  const ag_kmulti *mt = c->multi;
  if (!mt) return AG_OK;
  bool adam = c->op == AG_K_ADAMW;
  int per = adam ? 4 : 3;
  const ag_koperand *sc = opt_op(c, 0), *fi = opt_op(c, 1);
  for (int g = 0; g + per <= mt->count; g += per) {
    int64_t n = mt->t[g].numel;
    if (!n) continue;
    kargs a = ka_begin(s, adam ? CLK_ADAMW : CLK_SGD);
    for (int j = 0; j < per; j++) {
      KA(&a, cl_mem, mt->t[g + j].base);
      KA(&a, cl_ulong, mt->t[g + j].offset);
    }
    KA(&a, cl_long, n);
    if (adam) {
      /* Folded in f64 on the host exactly as the CPU backend folds them. */
      KA(&a, cl_float, c->s[1]);
      KA(&a, cl_float, c->s[2]);
      KA(&a, cl_float, c->s[3]);
      KA(&a, cl_float, 1.0 - c->s[0] * c->s[4]);
      KA(&a, cl_float, c->s[0] / c->s[5]);
      KA(&a, cl_float, 1.0 / sqrt(c->s[6]));
    } else {
      for (int j = 0; j < 4; j++) KA(&a, cl_float, c->s[j]);
      KA(&a, cl_int, c->s[4] != 0);
      KA(&a, cl_int, c->s[5] != 0);
    }
    KBUF(&a, sc);
    KBUF(&a, fi);
    ag_status st = ka_run(&a, (size_t)n, 0);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status run_nonfinite(ag_bstream *s, const ag_kernel_call *c) {
  const ag_kmulti *mt = c->multi;
  for (int k = 0; mt && k < mt->count; k++) {
    if (!mt->t[k].numel) continue;
    kargs a = ka_begin(s, CLK_NONFINITE);
    KA(&a, cl_mem, mt->t[k].base);
    KA(&a, cl_ulong, mt->t[k].offset);
    KA(&a, cl_int, mt->t[k].dtype);
    KA(&a, cl_long, mt->t[k].numel);
    KBUF(&a, opt_op(c, 1));
    KBUF(&a, &c->o[0]);
    ag_status st = ka_run(&a, (size_t)mt->t[k].numel, 0);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

/* ---- GEMM ---- */

/* A [B, R, C] operand as CLBlast sees it (row-major, optional transpose). */
typedef struct gemm_op {
  cl_mem mem;
  size_t off;    /* elements */
  size_t ld, stride;
  bool trans;
} gemm_op;

static void mat_dims(const ag_koperand *o, int64_t *b, int64_t *r, int64_t *cc, int64_t *sb,
                     int64_t *sr, int64_t *sc) {
  int nd = o->ndim;
  *b = nd >= 3 ? o->shape[nd - 3] : 1;
  *sb = nd >= 3 ? o->strides[nd - 3] : 0;
  *r = o->shape[nd - 2];
  *cc = o->shape[nd - 1];
  *sr = o->strides[nd - 2];
  *sc = o->strides[nd - 1];
}

/* True if CLBlast can read o in place. */
static bool gemm_direct(const ag_koperand *o, gemm_op *g) {
  int64_t b, r, cc, sb, sr, sc;
  mat_dims(o, &b, &r, &cc, &sb, &sr, &sc);
  g->mem = o->base;
  g->off = o->offset / dsize(o->dtype);
  g->stride = b > 1 ? (size_t)sb : 0;
  if (sb < 0 || o->dtype != AG_F32) return false;
  if (sc == 1 && (r == 1 || sr >= cc)) {
    g->trans = false;
    g->ld = (size_t)(r == 1 ? (cc > 0 ? cc : 1) : sr);
    return true;
  }
  if (sr == 1 && (cc == 1 || sc >= r)) {
    g->trans = true;
    g->ld = (size_t)(cc == 1 ? (r > 0 ? r : 1) : sc);
    return true;
  }
  return false;
}

/* Copies o (any layout and float dtype) into scratch as contiguous f32;
 * a batch stride of 0 stays 0 (one matrix). */
static ag_status gemm_stage(ag_bstream *s, const ag_koperand *o, cl_mem scratch, size_t off_el,
                            gemm_op *g) {
  int64_t b, r, cc, sb, sr, sc;
  mat_dims(o, &b, &r, &cc, &sb, &sr, &sc);
  int64_t bs = (b > 1 && sb != 0) ? b : 1;
  ag_koperand src = *o, dst = {0};
  src.ndim = 3;
  src.shape[0] = bs;
  src.shape[1] = r;
  src.shape[2] = cc;
  src.strides[0] = sb;
  src.strides[1] = sr;
  src.strides[2] = sc;
  dst = src;
  dst.base = scratch;
  dst.offset = off_el * sizeof(float);
  dst.dtype = AG_F32;
  dst.strides[0] = r * cc;
  dst.strides[1] = cc;
  dst.strides[2] = 1;
  g->mem = scratch;
  g->off = off_el;
  g->ld = (size_t)(cc > 0 ? cc : 1);
  g->stride = bs > 1 ? (size_t)(r * cc) : 0;
  g->trans = false;
  return run_unary(s, &dst, &src, AG_U_COPY, 0, 0);
}

/* CLBlast is not safe for threads meeting its first-use state: 1.5 fills its
 * process-wide tuning database (a std::vector) on its first routine call
 * without a lock, so two first calls at once copy a vector the other is
 * replacing (use after free, or a routine compiled with garbage
 * parameters), and builds older than 1.6 that use C++14 throw when two
 * threads store the same compiled program. Every CLBlast call holds this
 * one lock, for all devices (the database is shared by them): a call only
 * enqueues once its routine is compiled, so the lock costs nothing
 * measurable (docs/opencl.md). */
static pthread_mutex_t g_clblast_lock = PTHREAD_MUTEX_INITIALIZER;

/* C = alpha A @ B + beta C (row-major, element offsets), batch matrices
 * apart by the strides; the one place anygrad calls CLBlast. */
static ag_status sgemm(ag_bstream *s, const char *what, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha,
                       cl_mem A, size_t ao, size_t lda, size_t sa, cl_mem Bm, size_t bo, size_t ldb, size_t sb,
                       float beta, cl_mem C, size_t co, size_t ldc, size_t sc, size_t batch) {
  if (!M || !N || !batch) return AG_OK;
  CLBlastTranspose tA = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tB = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode e;
  pthread_mutex_lock(&g_clblast_lock);
  if (batch == 1)
    e = CLBlastSgemm(CLBlastLayoutRowMajor, tA, tB, M, N, K, alpha, A, ao, lda, Bm, bo, ldb, beta, C, co, ldc, &s->q,
                     NULL);
  else
    e = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, tA, tB, M, N, K, alpha, A, ao, lda, sa, Bm, bo, ldb, sb,
                                   beta, C, co, ldc, sc, batch, &s->q, NULL);
  pthread_mutex_unlock(&g_clblast_lock);
  if (e == CLBlastSuccess) return AG_OK;
  char name[80];
  snprintf(name, sizeof name, "%s%s", batch == 1 ? "CLBlastSgemm" : "CLBlastSgemmStridedBatched", what);
  return clb_error((cl_int)e, name);
}

static size_t align_el(size_t n) { return (n + 63) & ~(size_t)63; }

static ag_status run_matmul(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0], *x = &c->o[1], *y = &c->o[2];
  int64_t B, M, K, N, t0, t1, t2;
  mat_dims(x, &B, &M, &K, &t0, &t1, &t2);
  mat_dims(o, &B, &M, &N, &t0, &t1, &t2);
  if (!B || !M || !N) return AG_OK;
  if (!K) {
    /* alpha * (empty product) = 0: C = beta * C. */
    if (c->s[1] == 0) return run_fill(s, o, 0.0);
    return run_unary(s, o, o, AG_U_AFFINE, c->s[1], 0.0);
  }
  gemm_op ga, gb, gc = {o->base, o->offset / dsize(o->dtype), (size_t)N,
                        (size_t)(M * N), false};
  bool da = gemm_direct(x, &ga), db = gemm_direct(y, &gb), dc = o->dtype == AG_F32;
  size_t need = 0, off_a = 0, off_b = 0, off_c = 0;
  /* Scratch offsets must also respect the device's sub-buffer alignment on
   * some CLBlast paths, hence 64-element (256 B) alignment. */
  if (!da) {
    off_a = need;
    need += align_el((size_t)((x->ndim >= 3 && x->strides[x->ndim - 3] == 0) ? 1 : B) * M * K);
  }
  if (!db) {
    off_b = need;
    need += align_el((size_t)((y->ndim >= 3 && y->strides[y->ndim - 3] == 0) ? 1 : B) * K * N);
  }
  if (!dc) {
    off_c = need;
    need += align_el((size_t)(B * M * N));
  }
  cl_mem scratch = NULL;
  ag_status st = AG_OK;
  if (need && (st = clb_scratch(s, need * sizeof(float), &scratch)) != AG_OK) return st;
  if (!da && (st = gemm_stage(s, x, scratch, off_a, &ga)) != AG_OK) return st;
  if (!db && (st = gemm_stage(s, y, scratch, off_b, &gb)) != AG_OK) return st;
  if (!dc) {
    gc = (gemm_op){scratch, off_c, (size_t)N, (size_t)(M * N), false};
    if (c->s[1] != 0 && (st = gemm_stage(s, o, scratch, off_c, &gc)) != AG_OK) return st;
  }
  st = sgemm(s, "", ga.trans, gb.trans, (size_t)M, (size_t)N, (size_t)K, (float)c->s[0], ga.mem, ga.off, ga.ld,
             ga.stride, gb.mem, gb.off, gb.ld, gb.stride, (float)c->s[1], gc.mem, gc.off, gc.ld, gc.stride,
             (size_t)B);
  if (st != AG_OK) return st;
  if (!dc) {
    ag_koperand src = *o;
    src.base = scratch;
    src.offset = off_c * sizeof(float);
    src.dtype = AG_F32;
    ag_koperand dst = *o;
    /* Both sides are contiguous [B, M, N] with o's shape. */
    int64_t st_el = 1;
    for (int d = o->ndim - 1; d >= 0; d--) {
      src.strides[d] = dst.strides[d] = st_el;
      st_el *= o->shape[d];
    }
    return run_unary(s, &dst, &src, AG_U_COPY, 0, 0);
  }
  return AG_OK;
}

/* ---- conv2d (own im2col/col2im + CLBlast) and pooling ---- */

/* Layouts equal conv_meta and pool_meta in kernels/opencl/conv.cl. */
typedef struct clb_conv_meta {
  cl_long N, C, H, W, Co, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, G;
} clb_conv_meta;
typedef struct clb_pool_meta {
  cl_long planes, H, W, Ho, Wo, sh, sw, ph, pw, kh, kw;
  cl_int op, count_pad;
} clb_pool_meta;

static clb_conv_meta conv_meta_of(const ag_kernel_call *c, const ag_koperand *x, const ag_koperand *y,
                                  const ag_koperand *w) {
  ag_conv_geom g = ag_conv_geom_of(c, x, y, w);
  clb_conv_meta m = {g.N, g.C, g.H, g.W, g.Co, g.Ho, g.Wo, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.G};
  return m;
}

static ag_status conv_cols(ag_bstream *s, clb_kernel which, cl_mem a, size_t ao, cl_mem b, size_t bo, int64_t n0,
                           int64_t nb, const clb_conv_meta *m, size_t items) {
  kargs k = ka_begin(s, which);
  KA(&k, cl_mem, a);
  KA(&k, cl_ulong, ao);
  KA(&k, cl_mem, b);
  KA(&k, cl_ulong, bo);
  KA(&k, cl_long, n0);
  KA(&k, cl_long, nb);
  KMETA(&k, *m);
  return ka_run(&k, items, 0);
}

/* The column matrix of nb samples, [G][K][nb][P] f32, takes G*K*nb*P floats
 * of scratch; samples go in chunks that keep it (and the weight gradient's
 * transposed dy) under 64 MiB or a quarter of the largest allocation. */
static int64_t conv_chunk(ag_bstream *s, int64_t per_sample_floats, int64_t N) {
  size_t cap = (size_t)64 << 20;
  if (cap > s->d->max_alloc / 4) cap = s->d->max_alloc / 4;
  int64_t nb = per_sample_floats > 0 ? (int64_t)(cap / sizeof(float)) / per_sample_floats : N;
  if (nb < 1) nb = 1;
  return nb < N ? nb : N;
}

static ag_status run_conv(ag_bstream *s, const ag_kernel_call *c) {
  const bool fwd = c->op == AG_K_CONV2D, bin = c->op == AG_K_CONV2D_BWD_INPUT;
  const ag_koperand *X = fwd ? &c->o[1] : bin ? &c->o[0] : &c->o[2], *Y = fwd ? &c->o[0] : &c->o[1],
                    *Wt = fwd || bin ? &c->o[2] : &c->o[0];
  clb_conv_meta m = conv_meta_of(c, X, Y, Wt);
  const int64_t G = m.G, Cg = m.C / G, Cog = m.Co / G, K = Cg * m.kh * m.kw, P = m.Ho * m.Wo, N = m.N;
  const size_t xo = X->offset / 4, yo = Y->offset / 4, wo = Wt->offset / 4;
  /* 1x1, stride 1, no padding: x is its own column matrix */
  const bool direct = m.kh == 1 && m.kw == 1 && m.sh == 1 && m.sw == 1 && m.ph == 0 && m.pw == 0 &&
                      c->op != AG_K_CONV2D_BWD_WEIGHT;
  const int64_t per = (direct ? 0 : G * K * P) + (c->op == AG_K_CONV2D_BWD_WEIGHT ? m.Co * P : 0);
  const int64_t nbmax = conv_chunk(s, per, N);
  cl_mem scratch = NULL;
  ag_status st = AG_OK;
  const size_t col_el = align_el((size_t)(G * K * nbmax * P));
  const size_t dyt_el = c->op == AG_K_CONV2D_BWD_WEIGHT ? (size_t)(m.Co * nbmax * P) : 0;
  if (per && (st = clb_scratch(s, ((direct ? 0 : col_el) + dyt_el) * sizeof(float), &scratch)) != AG_OK) return st;
  for (int64_t n0 = 0; n0 < N && st == AG_OK; n0 += nbmax) {
    const int64_t nb = N - n0 < nbmax ? N - n0 : nbmax;
    const size_t cs = (size_t)(nb * P); /* ld of a sample's slice of the column matrix */
    if (fwd) {
      if (!direct)
        st = conv_cols(s, CLK_IM2COL, scratch, 0, X->base, X->offset, n0, nb, &m, (size_t)(G * K * nb * P));
      for (int64_t g = 0; g < G && st == AG_OK; g++) {
        if (direct)
          st = sgemm(s, " (conv2d)", false, false, (size_t)Cog, (size_t)P, (size_t)K, 1.0f, Wt->base, wo + (size_t)(g * Cog * K),
                     (size_t)K, 0, X->base, xo + (size_t)((n0 * m.C + g * Cg) * P), (size_t)P, (size_t)(m.C * P), 0.0f,
                     Y->base, yo + (size_t)((n0 * m.Co + g * Cog) * P), (size_t)P, (size_t)(m.Co * P), (size_t)nb);
        else
          st = sgemm(s, " (conv2d)", false, false, (size_t)Cog, (size_t)P, (size_t)K, 1.0f, Wt->base, wo + (size_t)(g * Cog * K),
                     (size_t)K, 0, scratch, (size_t)(g * K) * cs, cs, (size_t)P, 0.0f, Y->base,
                     yo + (size_t)((n0 * m.Co + g * Cog) * P), (size_t)P, (size_t)(m.Co * P), (size_t)nb);
      }
    } else if (bin) {
      for (int64_t g = 0; g < G && st == AG_OK; g++) {
        const size_t dyo = yo + (size_t)((n0 * m.Co + g * Cog) * P);
        if (direct)
          st = sgemm(s, " (conv2d)", true, false, (size_t)K, (size_t)P, (size_t)Cog, 1.0f, Wt->base, wo + (size_t)(g * Cog * K),
                     (size_t)K, 0, Y->base, dyo, (size_t)P, (size_t)(m.Co * P), 0.0f, X->base,
                     xo + (size_t)((n0 * m.C + g * Cg) * P), (size_t)P, (size_t)(m.C * P), (size_t)nb);
        else
          st = sgemm(s, " (conv2d)", true, false, (size_t)K, (size_t)P, (size_t)Cog, 1.0f, Wt->base, wo + (size_t)(g * Cog * K),
                     (size_t)K, 0, Y->base, dyo, (size_t)P, (size_t)(m.Co * P), 0.0f, scratch, (size_t)(g * K) * cs,
                     cs, (size_t)P, (size_t)nb);
      }
      if (st == AG_OK && !direct)
        st = conv_cols(s, CLK_COL2IM, X->base, X->offset, scratch, 0, n0, nb, &m, (size_t)(nb * m.C * m.H * m.W));
    } else {
      /* dy of the chunk as [G][Cog][nb][P] after the column matrix, so each
       * group's dw is one GEMM over the whole chunk */
      ag_koperand src = *Y, dst;
      src.ndim = 4;
      src.offset = Y->offset + (size_t)(n0 * m.Co * P) * 4;
      int64_t sh4[4] = {G, Cog, nb, P}, ss4[4] = {Cog * P, P, m.Co * P, 1};
      memcpy(src.shape, sh4, sizeof sh4);
      memcpy(src.strides, ss4, sizeof ss4);
      dst = src;
      dst.base = scratch;
      dst.offset = col_el * sizeof(float);
      int64_t ds4[4] = {Cog * nb * P, nb * P, P, 1};
      memcpy(dst.strides, ds4, sizeof ds4);
      st = run_unary(s, &dst, &src, AG_U_COPY, 0, 0);
      if (st == AG_OK)
        st = conv_cols(s, CLK_IM2COL, scratch, 0, X->base, X->offset, n0, nb, &m, (size_t)(G * K * nb * P));
      if (st == AG_OK)
        st = sgemm(s, " (conv2d)", false, true, (size_t)Cog, (size_t)K, cs, 1.0f, scratch, col_el, cs, (size_t)(Cog * nb * P),
                   scratch, 0, cs, (size_t)(K * nb * P), n0 ? 1.0f : 0.0f, Wt->base, wo, (size_t)K,
                   (size_t)(Cog * K), (size_t)G);
    }
  }
  if (st == AG_OK && fwd && c->o[3].base) {
    kargs k = ka_begin(s, CLK_CONV_BIAS);
    KBUF(&k, Y);
    KBUF(&k, &c->o[3]);
    KA(&k, cl_long, N * m.Co * P);
    KA(&k, cl_long, m.Co);
    KA(&k, cl_long, P);
    st = ka_run(&k, (size_t)(N * m.Co * P), 0);
  }
  return st;
}

static ag_status run_pool(ag_bstream *s, const ag_kernel_call *c) {
  const bool bwd = c->op == AG_K_POOL2D_BWD;
  const ag_koperand *X = bwd ? &c->o[0] : &c->o[1], *Y = bwd ? &c->o[1] : &c->o[0], *I = &c->o[2];
  clb_pool_meta g = {X->shape[0] * X->shape[1], X->shape[2], X->shape[3], Y->shape[2], Y->shape[3],
                     (cl_long)c->s[0], (cl_long)c->s[1], (cl_long)c->s[2], (cl_long)c->s[3],
                     (cl_long)c->s[4], (cl_long)c->s[5], (cl_int)c->sub, (cl_int)(c->s[6] != 0)};
  kargs k = ka_begin(s, bwd ? CLK_POOL_BWD : CLK_POOL);
  KBUF(&k, bwd ? X : Y);
  if (bwd) KBUF(&k, Y);
  KA(&k, cl_mem, c->sub == AG_P_MAX ? I->base : NULL);
  KA(&k, cl_ulong, c->sub == AG_P_MAX ? I->offset : 0);
  if (!bwd) KBUF(&k, X);
  KMETA(&k, g);
  return ka_run(&k, (size_t)(g.planes * (bwd ? g.H * g.W : g.Ho * g.Wo)), 0);
}

/* Batch norm over contiguous f32 [N, C, HW] (i[0..2]): per-channel sums,
 * one work-group per channel, and the per-channel affine map. */
static ag_status run_bn_stats(ag_bstream *s, const ag_kernel_call *c) {
  const int64_t N = c->i[0], C = c->i[1], HW = c->i[2];
  if (C <= 0) return AG_OK;
  const bool sub1 = c->sub == 1;
  kargs k = ka_begin(s, CLK_BN_STATS);
  KBUF(&k, &c->o[0]);
  KBUF(&k, &c->o[1]);
  KA(&k, cl_mem, sub1 ? c->o[2].base : NULL);
  KA(&k, cl_ulong, sub1 ? c->o[2].offset : 0);
  KA(&k, cl_mem, sub1 ? c->o[3].base : NULL);
  KA(&k, cl_ulong, sub1 ? c->o[3].offset : 0);
  KA(&k, cl_long, N);
  KA(&k, cl_long, C);
  KA(&k, cl_long, HW);
  KA(&k, cl_int, sub1);
  size_t l = row_local(s, CLK_BN_STATS, N * HW);
  return ka_run(&k, (size_t)C * l, l);
}

static ag_status run_bn_apply(ag_bstream *s, const ag_kernel_call *c) {
  const int64_t N = c->i[0], C = c->i[1], HW = c->i[2], n = N * C * HW;
  if (n <= 0) return AG_OK;
  const bool sub1 = c->sub == 1;
  kargs k = ka_begin(s, CLK_BN_APPLY);
  KBUF(&k, &c->o[0]);
  KBUF(&k, &c->o[1]);
  KBUF(&k, &c->o[2]);
  KA(&k, cl_mem, sub1 ? c->o[3].base : NULL);
  KA(&k, cl_ulong, sub1 ? c->o[3].offset : 0);
  KA(&k, cl_long, n);
  KA(&k, cl_long, C);
  KA(&k, cl_long, HW);
  return ka_run(&k, (size_t)n, 0);
}

#include "cl_resample.inc"

static ag_status launch_locked(ag_bstream *s, const ag_kernel_call *c) {
  ag_status st = clb_stream_kernels(s);
  if (st != AG_OK) return st;
  clb_touch(s);
  switch (c->op) {
    case AG_K_FILL: return run_fill(s, &c->o[0], c->s[0]);
    case AG_K_ARANGE: return run_arange(s, c);
    case AG_K_RAND_UNIFORM:
    case AG_K_RAND_NORMAL: return run_rand(s, c);
    case AG_K_UNARY:
      return run_unary_is(s, &c->o[0], &c->o[1], c->sub, c->s[0], c->s[1],
                          c->sub == AG_U_AFFINE && is_int(c->o[0].dtype) ? c->i : NULL);
    case AG_K_BINARY: return run_binary(s, c);
    case AG_K_WHERE: return run_where(s, c);
    case AG_K_REDUCE: return run_reduce(s, c);
    case AG_K_MATMUL: return run_matmul(s, c);
    case AG_K_SOFTMAX: return run_softmax(s, c, false);
    case AG_K_SOFTMAX_BWD: return run_softmax(s, c, true);
    case AG_K_CROSS_ENTROPY: return run_ce(s, c, false);
    case AG_K_CROSS_ENTROPY_BWD: return run_ce(s, c, true);
    case AG_K_LAYERNORM: return run_layernorm(s, c);
    case AG_K_LAYERNORM_BWD: return run_layernorm_bwd(s, c);
    case AG_K_EMBEDDING: return run_embedding(s, c);
    case AG_K_EMBEDDING_BWD: return run_embedding_bwd(s, c);
    case AG_K_DROPOUT: return run_dropout(s, c);
    case AG_K_ADAMW:
    case AG_K_SGD: return run_optim(s, c);
    case AG_K_NONFINITE_CHECK: return run_nonfinite(s, c);
    case AG_K_SUMSQ: return run_sumsq(s, c);
    case AG_K_CONV2D:
    case AG_K_CONV2D_BWD_INPUT:
    case AG_K_CONV2D_BWD_WEIGHT: return run_conv(s, c);
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return run_pool(s, c);
    case AG_K_BN_STATS: return run_bn_stats(s, c);
    case AG_K_BN_APPLY: return run_bn_apply(s, c);
    case AG_K_RMSNORM: return run_rmsnorm(s, c);
    case AG_K_RMSNORM_BWD: return run_rmsnorm_bwd(s, c);
    case AG_K_VAR: return run_var(s, c);
    case AG_K_CUMSUM: return run_cumsum(s, c);
    case AG_K_GATHER: return run_gather(s, c, false);
    case AG_K_GATHER_BWD: return run_gather(s, c, true);
    case AG_K_TOPK: return run_topk(s, c);
    case AG_K_SDPA:
    case AG_K_SDPA_BWD: return run_sdpa(s, c);
    case AG_K_GROUP_NORM: CL_KCALL(group_norm);
    case AG_K_GROUP_NORM_BWD: CL_KCALL(group_norm_bwd);
    case AG_K_INTERPOLATE: CL_KCALL(interpolate);
    case AG_K_INTERPOLATE_BWD: CL_KCALL(interpolate_bwd);
    default: break;
  }
  return ag_error_set(AG_ERR_UNSUPPORTED, "opencl: %s: kernel op %d is not implemented",
                      c->name ? c->name : "launch", (int)c->op);
}

/* The stream's lock covers the whole launch: its kernel objects (arguments
 * set, then enqueued), its scratch (staged, then read by the GEMM) and its
 * first-use kernel creation, when threads share the stream. */
ag_status clb_launch(ag_bstream *s, const ag_kernel_call *c) {
  if (c->struct_size < sizeof *c) return ag_kernel_call_check(c, sizeof *c, "opencl");
  pthread_mutex_lock(&s->lock);
  ag_status st = launch_locked(s, c);
  pthread_mutex_unlock(&s->lock);
  return st;
}

bool clb_supports(int dev, ag_kop op, int sub, ag_dtype dt) {
  bool fl = is_float(dt), i32 = dt == AG_I32, in = is_int(dt);
  /* f64: the elementwise kernels of f64.cl, where the device has fp64 */
  bool f64 = dt == AG_F64 && clb_dev(dev)->fp64;
  switch (op) {
    case AG_K_FILL:
    case AG_K_WHERE: return fl || in || f64;
    case AG_K_ARANGE: return fl || f64 || (in && dt != AG_BOOL);
    /* i32 indices only (sub 0): the core casts i64 ones */
    case AG_K_EMBEDDING: return sub == 0 && (fl || i32 || f64);
    /* the op table's entries: floats always, integers where the entry has
     * an integer rule (elementwise.cl) */
    case AG_K_UNARY: {
      const ag_unary_info *u = ag_unary_info_of(sub);
      return u && (fl || f64 || (in && u->ints == AG_OPT_INT));
    }
    case AG_K_BINARY: {
      const ag_binary_info *b = ag_binary_info_of(sub);
      return b && (fl || f64 || (in && b->ints == AG_OPT_INT));
    }
    /* the core sums bool and u8 as i64 */
    case AG_K_REDUCE:
      return sub >= 0 && sub < AG_REDUCE_COUNT && (fl || in || f64) &&
             !(sub == AG_R_SUM && (dt == AG_U8 || dt == AG_BOOL));
    case AG_K_SOFTMAX:
    case AG_K_SOFTMAX_BWD: return (sub == 0 || sub == 1) && (fl || f64);
    case AG_K_RAND_UNIFORM:
    case AG_K_RAND_NORMAL:
    case AG_K_MATMUL:
    case AG_K_CROSS_ENTROPY:
    case AG_K_CROSS_ENTROPY_BWD: return fl && sub == 0;
    case AG_K_EMBEDDING_BWD: return (fl || f64) && sub == 0;
    case AG_K_LAYERNORM:
    case AG_K_LAYERNORM_BWD:
    case AG_K_DROPOUT:
    case AG_K_NONFINITE_CHECK:
    case AG_K_SUMSQ: return fl;
    case AG_K_ADAMW:
    case AG_K_SGD: return dt == AG_F32;
    /* vision ops: f32, as on the CPU (the GEMMs are CLBlast's Sgemm) */
    case AG_K_CONV2D:
    case AG_K_CONV2D_BWD_INPUT:
    case AG_K_CONV2D_BWD_WEIGHT: return dt == AG_F32;
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return dt == AG_F32 && sub >= 0 && sub < AG_POOL_OP_COUNT;
    case AG_K_BN_STATS:
    case AG_K_BN_APPLY: return dt == AG_F32 && (sub == 0 || sub == 1);
    case AG_K_RMSNORM:
    case AG_K_RMSNORM_BWD: return fl && sub == 0;
    case AG_K_VAR:
    case AG_K_CUMSUM: return (fl || f64) && (sub == 0 || sub == 1);
    case AG_K_GATHER: /* i32 index only: the core narrows i64 */
    case AG_K_GATHER_BWD: return (fl || f64) && sub == 0;
    case AG_K_TOPK: return fl && (sub == 0 || sub == 1); /* sub 1: smallest */
    case AG_K_SDPA:
    case AG_K_SDPA_BWD: return fl && sub == 0;
    case AG_K_GROUP_NORM:
    case AG_K_GROUP_NORM_BWD: return (fl || f64) && sub == 0;
    case AG_K_INTERPOLATE:
    case AG_K_INTERPOLATE_BWD: return (fl || f64) && (sub == AG_KV_INTERP_NEAREST || sub == AG_KV_INTERP_BILINEAR);
    default: break;
  }
  return false;
}
