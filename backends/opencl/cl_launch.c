/* Kernel launches: one function per kernel op (cl_k_<name>, reading the op's
 * decoded arguments, kargs.h) maps it to the embedded kernels (sub-op and
 * dtypes are kernel arguments), collapses elementwise layouts to the fewest
 * dims, and runs GEMM through CLBlast (half types through f32 scratch). The
 * dispatch and supports() come from the list CL_KOPS at the end. */
#include "cl_internal.h"
#include "cl_kops.h"

#include <clblast_c.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const k_names[CLK_COUNT] = {
    [CLK_UNARY] = "ag_unary", [CLK_BINARY] = "ag_binary", [CLK_WHERE] = "ag_where",
    [CLK_FILL] = "ag_fill", [CLK_ARANGE] = "ag_arange", [CLK_RAND] = "ag_rand",
    [CLK_DROPOUT] = "ag_dropout", [CLK_REDUCE_ROWS] = "ag_reduce_rows",
    [CLK_REDUCE_COLS] = "ag_reduce_cols", [CLK_RED_ROWS] = "ag_red_rows", [CLK_RED_COLS4] = "ag_red_cols4",
    [CLK_ARGMAX_ROWS] = "ag_argmax_rows", [CLK_SUMSQ_PART] = "ag_sumsq_part",
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
    [CLK_LOGSUMEXP] = "ag_logsumexp",
    [CLK_NORM] = "ag_norm",
    [CLK_ONE_HOT] = "ag_one_hot",
    [CLK_LOGSUMEXP_ROWS] = "ag_logsumexp_rows",
    [CLK_NORM_ROWS] = "ag_norm_rows",
    [CLK_GN] = "ag_group_norm", [CLK_GN_BWD] = "ag_group_norm_bwd", [CLK_GN_BWD_WB] = "ag_group_norm_bwd_wb",
    [CLK_INTERP] = "ag_interpolate", [CLK_INTERP_BWD] = "ag_interpolate_bwd",
    [CLK_GN_D] = "ag_group_norm_d", [CLK_GN_BWD_D] = "ag_group_norm_bwd_d", [CLK_GN_BWD_WB_D] = "ag_group_norm_bwd_wb_d",
    [CLK_INTERP_D] = "ag_interpolate_d", [CLK_INTERP_BWD_D] = "ag_interpolate_bwd_d",
    [CLK_SORT] = "ag_sort",
    [CLK_SCATTER_ADD] = "ag_scatter_add",
    [CLK_PAD] = "ag_pad",
    [CLK_PAD_BWD] = "ag_pad_bwd",
    [CLK_SORT_D] = "ag_sort_d",
    [CLK_SCATTER_ADD_D] = "ag_scatter_add_d",
    [CLK_PAD_D] = "ag_pad_d",
    [CLK_PAD_BWD_D] = "ag_pad_bwd_d",
    [CLK_P_SUM] = "ag_psum",
    [CLK_P_MATMUL] = "ag_pmatmul",
    [CLK_P_PROBE] = "ag_pprobe",
    [CLK_P_ADAMW] = "ag_padamw",
    [CLK_P_CONV] = "ag_pconv",
    [CLK_P_CONV_BWD_IN] = "ag_pconv_bwd_in",
    [CLK_P_CONV_BWD_W] = "ag_pconv_bwd_w",
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
/* portable: the portable program's set (docs/numerics.md: the same
 * sources built with -DAG_PORTABLE), made current either way. */
ag_status clb_stream_kernels(ag_bstream *s, bool portable) {
  s->k = s->kset[portable];
  s->kwg = s->kwgset[portable];
  s->portable = portable;
  if (s->have_set[portable]) return AG_OK;
  cl_program prog;
  ag_status st = clb_program(s->d, portable, &prog);
  if (st != AG_OK) return st;
  for (int i = 0; i < CLK_COUNT; i++) {
    cl_int err;
    const char *name = i >= CLK_UNARY_C0 ? k_fast_names[i - CLK_UNARY_C0] : k_names[i];
    bool f64_kernel = (i >= CLK_UNARY_D && i <= CLK_ARANGE_D) || (i >= CLK_GN_D && i <= CLK_INTERP_BWD_D) ||
                      (i >= CLK_SORT_D && i <= CLK_PAD_BWD_D);
    /* the portable program has no f64 kernels (f64 is refused there) */
    bool skip = f64_kernel && (!s->d->fp64 || portable);
    if (i >= CLK_P_SUM && i <= CLK_P_CONV_BWD_W && !portable) skip = true;
    if (i >= CLK_RED_ROWS && i <= CLK_ARGMAX_ROWS && portable) skip = true;
    if (!name || skip) {
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
  s->have_set[portable] = true;
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
  if (s->portable) return 256; /* S's tree (portable.cl); portable_check saw kwg >= 256 */
  size_t l = 1;
  while (l < (size_t)cols && l < s->kwg[k]) l *= 2;
  return l < 32 && s->kwg[k] >= 32 ? 32 : l;
}

/* Work-group size for a default-mode row kernel (rowred.cl, the softmax and
 * norm kernels of nn.cl) over len elements: about 32 elements a work-item,
 * since a tree over mostly idle work-items costs more than it saves (on
 * PoCL, which runs a group's work-items in loops, each level of the tree is
 * a loop over the whole group); a power of two, at most the kernel's limit.
 * The portable kernels run groups of 256. */
static size_t row_wg(ag_bstream *s, clb_kernel k, int64_t len) {
  if (s->portable) return 256;
  size_t l = 1;
  while (l * 2 <= s->kwg[k] && (int64_t)(l * 2) * 32 <= len) l *= 2;
  return l;
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

static size_t align_el(size_t n) { return (n + 63) & ~(size_t)63; }

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

/* has_is: AFFINE on an integer dtype with the exact integer scalars i0, i1
 * (s0, s1 hold them as doubles). */
static ag_status run_unary_is(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                              double s1, bool has_is, int64_t i0, int64_t i1) {
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
    kargs ka = ka_begin(s, CLK_UNARY_D);
    KBUF(&ka, o);
    KA(&ka, cl_int, o->dtype);
    KBUF(&ka, x);
    KA(&ka, cl_int, x->dtype);
    KA(&ka, cl_int, sub);
    KA(&ka, cl_double, s0);
    KA(&ka, cl_double, s1);
    KA(&ka, cl_long, n);
    KA(&ka, cl_int, nd);
    KMETA(&ka, m);
    return ka_run(&ka, (size_t)n, 0);
  }
  if (nd == 0 && o->dtype == x->dtype && is_float(o->dtype)) {
    kargs ka = ka_begin(s, (clb_kernel)(CLK_UNARY_C0 + sub));
    KBUF(&ka, o);
    KBUF(&ka, x);
    KA(&ka, cl_int, o->dtype);
    KA(&ka, cl_float, s0);
    KA(&ka, cl_float, s1);
    KA(&ka, cl_long, n);
    return ka_run(&ka, (size_t)n, 0);
  }
  kargs ka = ka_begin(s, CLK_UNARY);
  KBUF(&ka, o);
  KA(&ka, cl_int, o->dtype);
  KBUF(&ka, x);
  KA(&ka, cl_int, x->dtype);
  KA(&ka, cl_int, sub);
  KA(&ka, cl_float, s0);
  KA(&ka, cl_float, s1);
  KA(&ka, cl_long, has_is ? i0 : 0);
  KA(&ka, cl_long, has_is ? i1 : 0);
  KA(&ka, cl_int, has_is);
  KA(&ka, cl_long, n);
  KA(&ka, cl_int, nd);
  KMETA(&ka, m);
  return ka_run(&ka, (size_t)n, 0);
}

static ag_status run_unary(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                           double s1) {
  return run_unary_is(s, o, x, sub, s0, s1, false, 0, 0);
}

static ag_status cl_k_unary(ag_bstream *s, const ag_k_unary *a) {
  return run_unary_is(s, a->y, a->x, a->variant, a->s0, a->s1, a->variant == AG_U_AFFINE && is_int(a->y->dtype),
                      a->i0, a->i1);
}

static ag_status cl_k_binary(ag_bstream *s, const ag_k_binary *a) {
  const ag_koperand *o = a->out;
  int64_t n = numel(o);
  if (!n) return AG_OK;
  const ag_koperand *ops[3] = {o, a->a, a->b};
  clb_ew_meta m;
  int nd = collapse(o, 3, ops, &m);
  if (a->a->dtype == AG_F64) { /* f64.cl */
    kargs ka = ka_begin(s, CLK_BINARY_D);
    KBUF(&ka, o);
    KBUF(&ka, a->a);
    KBUF(&ka, a->b);
    KA(&ka, cl_int, a->variant);
    KA(&ka, cl_double, a->s0);
    KA(&ka, cl_double, a->s1);
    KA(&ka, cl_long, n);
    KA(&ka, cl_int, nd);
    KMETA(&ka, m);
    return ka_run(&ka, (size_t)n, 0);
  }
  /* fast path: floating ops with their own dtype (comparisons write bool) */
  if (nd == 0 && is_float(o->dtype) && !is_compare(a->variant)) {
    kargs ka = ka_begin(s, (clb_kernel)(CLK_BINARY_C0 + a->variant));
    KBUF(&ka, o);
    KBUF(&ka, a->a);
    KBUF(&ka, a->b);
    KA(&ka, cl_int, o->dtype);
    KA(&ka, cl_float, a->s0);
    KA(&ka, cl_float, a->s1);
    KA(&ka, cl_long, n);
    return ka_run(&ka, (size_t)n, 0);
  }
  kargs ka = ka_begin(s, CLK_BINARY);
  KBUF(&ka, o);
  KBUF(&ka, a->a);
  KBUF(&ka, a->b);
  KA(&ka, cl_int, a->a->dtype);
  KA(&ka, cl_int, a->variant);
  KA(&ka, cl_float, a->s0);
  KA(&ka, cl_float, a->s1);
  KA(&ka, cl_long, (int64_t)a->s0);
  KA(&ka, cl_int, a->s0 == (double)(int32_t)a->s0);
  KA(&ka, cl_long, n);
  KA(&ka, cl_int, nd);
  KMETA(&ka, m);
  return ka_run(&ka, (size_t)n, 0);
}

static ag_status cl_k_where(ag_bstream *s, const ag_k_where *a) {
  const ag_koperand *o = a->out;
  int64_t n = numel(o);
  if (!n) return AG_OK;
  const ag_koperand *ops[4] = {o, a->cond, a->a, a->b};
  clb_ew_meta m;
  int nd = collapse(o, 4, ops, &m);
  kargs ka = ka_begin(s, CLK_WHERE);
  KBUF(&ka, o);
  KBUF(&ka, a->cond);
  KA(&ka, cl_int, a->cond->dtype);
  KBUF(&ka, a->a);
  KBUF(&ka, a->b);
  KA(&ka, cl_int, (int)dsize(o->dtype));
  KA(&ka, cl_long, n);
  KA(&ka, cl_int, nd);
  KMETA(&ka, m);
  return ka_run(&ka, (size_t)n, 0);
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
    kargs ka = ka_begin(s, CLK_FILL_D);
    KBUF(&ka, o);
    KA(&ka, cl_double, v);
    KA(&ka, cl_long, n);
    KA(&ka, cl_int, nd);
    KMETA(&ka, m);
    return ka_run(&ka, (size_t)n, 0);
  }
  kargs ka = ka_begin(s, CLK_FILL);
  KBUF(&ka, o);
  KA(&ka, cl_int, o->dtype);
  KA(&ka, cl_float, v);
  KA(&ka, cl_long, o->dtype == AG_I32 ? (int64_t)(int32_t)v : sat_int(v, o->dtype));
  KA(&ka, cl_long, n);
  KA(&ka, cl_int, nd);
  KMETA(&ka, m);
  return ka_run(&ka, (size_t)n, 0);
}

static ag_status cl_k_fill(ag_bstream *s, const ag_k_fill *a) { return run_fill(s, a->out, a->value); }

static ag_status cl_k_arange(ag_bstream *s, const ag_k_arange *a) {
  const ag_koperand *o = a->out;
  int64_t n = numel(o);
  if (o->dtype == AG_F64) { /* f64.cl */
    kargs ka = ka_begin(s, CLK_ARANGE_D);
    KBUF(&ka, o);
    KA(&ka, cl_double, a->start);
    KA(&ka, cl_double, a->step);
    KA(&ka, cl_long, n);
    return ka_run(&ka, (size_t)n, 0);
  }
  kargs ka = ka_begin(s, CLK_ARANGE);
  KBUF(&ka, o);
  KA(&ka, cl_int, o->dtype);
  KA(&ka, cl_float, a->start);
  KA(&ka, cl_float, a->step);
  KA(&ka, cl_long, (int64_t)a->start);
  KA(&ka, cl_long, (int64_t)a->step);
  KA(&ka, cl_long, n);
  return ka_run(&ka, (size_t)n, 0);
}

/* uniform: u*(p1 - p0) + p0 (p0 lo, p1 hi); normal: n*p1 + p0 (p0 mean,
 * p1 std), from the call's Philox seed and offset. */
static ag_status run_rand(ag_bstream *s, const ag_kernel_call *c, const ag_koperand *o, bool normal, double p0,
                          double p1) {
  int64_t n = numel(o);
  kargs ka = ka_begin(s, CLK_RAND);
  KBUF(&ka, o);
  KA(&ka, cl_int, o->dtype);
  KA(&ka, cl_int, normal);
  KA(&ka, cl_float, p0);
  /* portable uniform: range_f = (float)(hi - lo), from doubles */
  KA(&ka, cl_float, s->portable && !normal ? p1 - p0 : p1);
  KA(&ka, cl_ulong, c->seed);
  KA(&ka, cl_ulong, c->offset);
  KA(&ka, cl_long, n);
  int64_t per = normal ? 2 : 4; /* elements per Philox block */
  return ka_run(&ka, (size_t)((n + per - 1) / per), 0);
}

static ag_status cl_k_rand_uniform(ag_bstream *s, const ag_k_rand_uniform *a) {
  return run_rand(s, a->call, a->out, false, a->lo, a->hi);
}

static ag_status cl_k_rand_normal(ag_bstream *s, const ag_k_rand_normal *a) {
  return run_rand(s, a->call, a->out, true, a->mean, a->std);
}

static ag_status cl_k_dropout(ag_bstream *s, const ag_k_dropout *a) {
  int64_t n = numel(a->y);
  kargs ka = ka_begin(s, CLK_DROPOUT);
  KBUF(&ka, a->y);
  KA(&ka, cl_int, a->y->dtype);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  bool has_mask = a->mask && a->mask->base;
  KA(&ka, cl_mem, has_mask ? a->mask->base : NULL);
  KA(&ka, cl_ulong, has_mask ? a->mask->offset : 0);
  KA(&ka, cl_int, has_mask ? a->mask->dtype : AG_F32);
  KA(&ka, cl_float, a->p);
  /* 1 / (1 - p) in double as hi + lo floats: the kernel's x * scale then
   * rounds like the CPU's double product (devices need not have fp64) */
  double scale = a->p < 1 ? 1.0 / (1.0 - a->p) : 0.0;
  float hi = (float)scale, lo = (float)(scale - (double)hi);
  KA(&ka, cl_float, hi);
  KA(&ka, cl_float, lo);
  KA(&ka, cl_ulong, a->call->seed);
  KA(&ka, cl_ulong, a->call->offset);
  KA(&ka, cl_long, n);
  return ka_run(&ka, (size_t)((n + 3) / 4), 0);
}

/* ---- reductions ---- */

/* Rows of fewer outputs than this are summed in passes (S's recursion:
 * the block sums of 256, then S of those), so a long row is not one
 * work-group's serial walk. */
#define PSUM_PASS_OUTPUTS 64

/* Floats of scratch run_psum takes for outs outputs of rows of r. */
static size_t psum_scratch(int64_t outs, int64_t r) {
  size_t need = 0;
  while (outs < PSUM_PASS_OUTPUTS && r > 256) {
    r = (r + 255) / 256;
    need += align_el((size_t)(outs * r));
  }
  return need;
}

/* The canonical sum S (docs/numerics.md) over the middle dim of x viewed as
 * [outer, r, inner] (squared terms where sq) into o's elements t = ou *
 * inner + in (o, oo: buffer and byte offset), times scale_f where use_scale;
 * part: psum_scratch floats from float offset poff for the passes. */
static ag_status run_psum(ag_bstream *s, cl_mem o, size_t oo, ag_dtype odt, cl_mem x, size_t xo, ag_dtype xdt,
                          int64_t outer, int64_t r, int64_t inner, float scale, bool use_scale, bool sq, cl_mem part,
                          size_t poff) {
  const int64_t outs = outer * inner;
  const bool pass = outs < PSUM_PASS_OUTPUTS && r > 256;
  const int64_t nb = pass ? (r + 255) / 256 : 1;
  kargs ka = ka_begin(s, CLK_P_SUM);
  KA(&ka, cl_mem, pass ? part : o);
  KA(&ka, cl_ulong, pass ? poff * sizeof(float) : oo);
  KA(&ka, cl_int, pass ? AG_F32 : odt);
  KA(&ka, cl_mem, x);
  KA(&ka, cl_ulong, xo);
  KA(&ka, cl_int, xdt);
  KA(&ka, cl_long, r);
  KA(&ka, cl_long, inner);
  KA(&ka, cl_long, pass ? 256 : r);
  KA(&ka, cl_long, nb);
  KA(&ka, cl_int, 0);
  KA(&ka, cl_float, pass ? 1.0f : scale);
  KA(&ka, cl_int, !pass && use_scale);
  KA(&ka, cl_int, sq);
  ag_status st = ka_run(&ka, (size_t)(outs * nb) * 256, 256);
  if (st != AG_OK || !pass) return st;
  /* the block sums, [outs, nb] */
  return run_psum(s, o, oo, odt, part, poff * sizeof(float), AG_F32, outs, nb, 1, scale, use_scale, false, part,
                  poff + align_el((size_t)(outs * nb)));
}

/* Elements a work-item of ag_red_rows reduces in one group's chunk of a
 * long row: a row longer than a group's chunk is split across groups. */
#define RED_PER_ITEM 64
/* ag_red_cols4 splits r into chunks of this many rows (a second pass sums
 * the chunks) when there are fewer than RED_COLS_SPLIT 4-wide columns. */
#define RED_COLS_CHUNK 256
#define RED_COLS_SPLIT 4096

static int64_t red_rows_chunk(ag_bstream *s) { return (int64_t)s->kwg[CLK_RED_ROWS] * RED_PER_ITEM; }

static bool red_cols_pass(int64_t outs, int64_t r) { return outs / 4 < RED_COLS_SPLIT && r > 2 * RED_COLS_CHUNK; }

/* Floats of scratch the passes of run_red_rows / run_red_cols take. */
static size_t red_scratch(ag_bstream *s, int64_t outs, int64_t r, bool cols) {
  size_t need = 0;
  for (;;) {
    int64_t c = cols ? RED_COLS_CHUNK : red_rows_chunk(s);
    if (cols ? !red_cols_pass(outs, r) : r <= c) return need;
    r = (r + c - 1) / c;
    need += align_el((size_t)(outs * r));
  }
}

/* SUM (times scale), MAX or MIN of float x viewed as [outer, r] into o
 * (o, oo: buffer and byte offset): a work-group per chunk of a row, passes
 * over the f32 partials while a row is longer than one chunk; part: the
 * red_scratch floats from float offset poff. */
static ag_status run_red_rows(ag_bstream *s, cl_mem o, size_t oo, ag_dtype odt, cl_mem x, size_t xo, ag_dtype xdt,
                              int op, float scale, int64_t outer, int64_t r, cl_mem part, size_t poff) {
  const int64_t cmax = red_rows_chunk(s);
  const bool pass = r > cmax;
  const int64_t nb = pass ? (r + cmax - 1) / cmax : 1, chunk = pass ? cmax : r;
  kargs ka = ka_begin(s, CLK_RED_ROWS);
  KA(&ka, cl_mem, pass ? part : o);
  KA(&ka, cl_ulong, pass ? poff * sizeof(float) : oo);
  KA(&ka, cl_int, pass ? AG_F32 : odt);
  KA(&ka, cl_mem, x);
  KA(&ka, cl_ulong, xo);
  KA(&ka, cl_int, xdt);
  KA(&ka, cl_int, op);
  KA(&ka, cl_float, pass ? 1.0f : scale);
  KA(&ka, cl_long, r);
  KA(&ka, cl_long, chunk);
  KA(&ka, cl_long, nb);
  size_t l = row_wg(s, CLK_RED_ROWS, chunk);
  ag_status st = ka_run(&ka, (size_t)(outer * nb) * l, l);
  if (st != AG_OK || !pass) return st;
  return run_red_rows(s, o, oo, odt, part, poff * sizeof(float), AG_F32, op, scale, outer, nb, part,
                      poff + align_el((size_t)(outer * nb)));
}

/* ARGMAX of float x viewed as [outer, r] into o's i32 indices, chunked as
 * run_red_rows; the passes carry each chunk's winning value (f32) and index
 * (i32), 2 x red_scratch floats from float offset poff of part. */
static ag_status run_argmax_rows(ag_bstream *s, const ag_koperand *o, cl_mem x, size_t xo, ag_dtype xdt, cl_mem xi,
                                 size_t xio, int64_t outer, int64_t r, cl_mem part, size_t poff) {
  const int64_t cmax = red_rows_chunk(s);
  const bool pass = r > cmax;
  const int64_t nb = pass ? (r + cmax - 1) / cmax : 1, chunk = pass ? cmax : r;
  const size_t np = align_el((size_t)(outer * nb)); /* values at poff, indices after them */
  kargs ka = ka_begin(s, CLK_ARGMAX_ROWS);
  KA(&ka, cl_mem, pass ? part : o->base);
  KA(&ka, cl_ulong, pass ? (poff + np) * sizeof(float) : o->offset);
  KA(&ka, cl_mem, pass ? part : NULL);
  KA(&ka, cl_ulong, poff * sizeof(float));
  KA(&ka, cl_mem, x);
  KA(&ka, cl_ulong, xo);
  KA(&ka, cl_int, xdt);
  KA(&ka, cl_mem, xi);
  KA(&ka, cl_ulong, xio);
  KA(&ka, cl_long, r);
  KA(&ka, cl_long, chunk);
  KA(&ka, cl_long, nb);
  size_t l = row_wg(s, CLK_ARGMAX_ROWS, chunk);
  ag_status st = ka_run(&ka, (size_t)(outer * nb) * l, l);
  if (st != AG_OK || !pass) return st;
  return run_argmax_rows(s, o, part, poff * sizeof(float), AG_F32, part, (poff + np) * sizeof(float), outer, nb,
                         part, poff + 2 * np);
}

/* The same over the middle dim of [outer, r, inner], inner % 4 == 0: a
 * work-item per 4 outputs; few columns of long r go in chunks of rows
 * (partials [nb, outer * inner]) and passes over the chunks. */
static ag_status run_red_cols(ag_bstream *s, cl_mem o, size_t oo, ag_dtype odt, cl_mem x, size_t xo, ag_dtype xdt,
                              int op, float scale, int64_t outer, int64_t r, int64_t inner, cl_mem part, size_t poff) {
  const int64_t outs = outer * inner;
  const bool pass = red_cols_pass(outs, r);
  const int64_t nb = pass ? (r + RED_COLS_CHUNK - 1) / RED_COLS_CHUNK : 1, chunk = pass ? RED_COLS_CHUNK : r;
  kargs ka = ka_begin(s, CLK_RED_COLS4);
  KA(&ka, cl_mem, pass ? part : o);
  KA(&ka, cl_ulong, pass ? poff * sizeof(float) : oo);
  KA(&ka, cl_int, pass ? AG_F32 : odt);
  KA(&ka, cl_mem, x);
  KA(&ka, cl_ulong, xo);
  KA(&ka, cl_int, xdt);
  KA(&ka, cl_int, op);
  KA(&ka, cl_float, pass ? 1.0f : scale);
  KA(&ka, cl_long, outer);
  KA(&ka, cl_long, r);
  KA(&ka, cl_long, inner);
  KA(&ka, cl_long, chunk);
  KA(&ka, cl_long, nb);
  ag_status st = ka_run(&ka, (size_t)(outs / 4 * nb), 0);
  if (st != AG_OK || !pass) return st;
  return run_red_cols(s, o, oo, odt, part, poff * sizeof(float), AG_F32, op, scale, 1, nb, outs, part,
                      poff + align_el((size_t)(outs * nb)));
}

static ag_status cl_k_reduce(ag_bstream *s, const ag_k_reduce *a) {
  int64_t outer = a->outer, r = a->r, inner = a->inner;
  if (outer * inner == 0) return AG_OK;
  if (s->portable && a->variant == AG_R_SUM && is_float(a->x->dtype)) {
    size_t need = psum_scratch(outer * inner, r);
    cl_mem part = NULL;
    ag_status st = need ? clb_scratch(s, need * sizeof(float), &part) : AG_OK;
    if (st != AG_OK) return st;
    return run_psum(s, a->out->base, a->out->offset, a->out->dtype, a->x->base, a->x->offset, a->x->dtype, outer, r,
                    inner, (float)a->scale, a->scale != 1.0, false, part, 0);
  }
  if (a->x->dtype == AG_F64) { /* f64.cl */
    kargs ka = ka_begin(s, CLK_REDUCE_D);
    KBUF(&ka, a->out);
    KBUF(&ka, a->x);
    KA(&ka, cl_int, a->variant);
    KA(&ka, cl_double, a->variant == AG_R_SUM ? a->scale : 1.0);
    KA(&ka, cl_long, outer);
    KA(&ka, cl_long, r);
    KA(&ka, cl_long, inner);
    return ka_run(&ka, (size_t)(outer * inner), 0);
  }
  float scale = a->variant == AG_R_SUM ? (float)a->scale : 1.0f;
  /* default mode, float rows: rowred.cl's trees */
  if (!s->portable && is_float(a->x->dtype) && a->variant == AG_R_ARGMAX && inner == 1 && r >= 16) {
    size_t need = 2 * red_scratch(s, outer, r, false);
    cl_mem part = NULL;
    ag_status st = need ? clb_scratch(s, need * sizeof(float), &part) : AG_OK;
    if (st != AG_OK) return st;
    return run_argmax_rows(s, a->out, a->x->base, a->x->offset, a->x->dtype, NULL, 0, outer, r, part, 0);
  }
  const bool fast = !s->portable && is_float(a->x->dtype) && a->variant != AG_R_ARGMAX;
  const bool rows = inner == 1 && r >= 16, cols = inner % 4 == 0;
  if (fast && (rows || cols)) {
    size_t need = red_scratch(s, outer * inner, r, !rows);
    cl_mem part = NULL;
    ag_status st = need ? clb_scratch(s, need * sizeof(float), &part) : AG_OK;
    if (st != AG_OK) return st;
    if (rows)
      return run_red_rows(s, a->out->base, a->out->offset, a->out->dtype, a->x->base, a->x->offset, a->x->dtype,
                          a->variant, scale, outer, r, part, 0);
    return run_red_cols(s, a->out->base, a->out->offset, a->out->dtype, a->x->base, a->x->offset, a->x->dtype,
                        a->variant, scale, outer, r, inner, part, 0);
  }
  /* short rows: a work-item per output (ag_reduce_cols) beats a group per row */
  if (inner == 1 && (s->portable || r >= 16)) {
    kargs ka = ka_begin(s, CLK_REDUCE_ROWS);
    KBUF(&ka, a->out);
    KA(&ka, cl_int, a->out->dtype);
    KBUF(&ka, a->x);
    KA(&ka, cl_int, a->x->dtype);
    KA(&ka, cl_int, a->variant);
    KA(&ka, cl_float, scale);
    KA(&ka, cl_long, r);
    size_t l = row_local(s, CLK_REDUCE_ROWS, r);
    return ka_run(&ka, (size_t)outer * l, l);
  }
  kargs ka = ka_begin(s, CLK_REDUCE_COLS);
  KBUF(&ka, a->out);
  KA(&ka, cl_int, a->out->dtype);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  KA(&ka, cl_int, a->variant);
  KA(&ka, cl_float, scale);
  KA(&ka, cl_long, outer);
  KA(&ka, cl_long, r);
  KA(&ka, cl_long, inner);
  return ka_run(&ka, (size_t)(outer * inner), 0);
}

/* SUMSQ portable: s_t = S(x_i * x_i) per tensor into scratch slot t, then
 * S of the slots. */
static ag_status run_psumsq(ag_bstream *s, const ag_k_sumsq *a) {
  const int64_t count = AGK_MULTI_GROUPS(a);
  size_t slots = align_el((size_t)(count ? count : 1)), need = 0;
  for (int64_t k = 0; k < count; k++) {
    size_t n = psum_scratch(1, AGK_MULTI(a, k, x).numel);
    if (n > need) need = n;
  }
  size_t fin = psum_scratch(1, count);
  if (fin > need) need = fin;
  cl_mem part;
  ag_status st = clb_scratch(s, (slots + need) * sizeof(float), &part);
  for (int64_t k = 0; k < count && st == AG_OK; k++) {
    const ag_kmulti_entry *x = &AGK_MULTI(a, k, x);
    st = run_psum(s, part, (size_t)k * sizeof(float), AG_F32, x->base, x->offset, x->dtype, 1, x->numel, 1, 1.0f,
                  false, true, part, slots);
  }
  if (st != AG_OK) return st;
  return run_psum(s, a->out->base, a->out->offset, AG_F32, part, 0, AG_F32, 1, count, 1, 1.0f, false, false, part,
                  slots);
}

static ag_status cl_k_sumsq(ag_bstream *s, const ag_k_sumsq *a) {
  if (s->portable) return run_psumsq(s, a);
  const int64_t count = AGK_MULTI_GROUPS(a);
  cl_mem part;
  ag_status st = clb_scratch(s, sizeof(float) * SUMSQ_GROUPS * (size_t)(count ? count : 1), &part);
  if (st != AG_OK) return st;
  int64_t np = 0;
  size_t l = s->kwg[CLK_SUMSQ_PART];
  for (int64_t k = 0; k < count; k++) {
    const ag_kmulti_entry *x = &AGK_MULTI(a, k, x);
    int64_t n = x->numel;
    if (!n) continue;
    int64_t groups = (n + (int64_t)l - 1) / (int64_t)l;
    if (groups > SUMSQ_GROUPS) groups = SUMSQ_GROUPS;
    kargs ka = ka_begin(s, CLK_SUMSQ_PART);
    KA(&ka, cl_mem, part);
    KA(&ka, cl_long, np);
    KA(&ka, cl_mem, x->base);
    KA(&ka, cl_ulong, x->offset);
    KA(&ka, cl_int, x->dtype);
    KA(&ka, cl_long, n);
    if ((st = ka_run(&ka, (size_t)groups * l, l)) != AG_OK) return st;
    np += groups;
  }
  kargs ka = ka_begin(s, CLK_SUMSQ_FINAL);
  KBUF(&ka, a->out);
  KA(&ka, cl_mem, part);
  KA(&ka, cl_long, np);
  size_t lf = s->kwg[CLK_SUMSQ_FINAL];
  return ka_run(&ka, lf, lf);
}

/* ---- row kernels ---- */

/* Softmax and its backward (dy, y given: bwd), log-softmax where logm. */
static ag_status run_softmax(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, const ag_koperand *y,
                             int64_t rows, int64_t cols, bool logm) {
  const bool bwd = y != NULL;
  if (!rows) return AG_OK;
  if (o->dtype == AG_F64) { /* f64.cl: a work-item per row */
    kargs ka = ka_begin(s, bwd ? CLK_SOFTMAX_BWD_D : CLK_SOFTMAX_D);
    KBUF(&ka, o);
    KBUF(&ka, x);
    if (bwd) KBUF(&ka, y);
    KA(&ka, cl_long, rows);
    KA(&ka, cl_long, cols);
    KA(&ka, cl_int, logm);
    return ka_run(&ka, (size_t)rows, 0);
  }
  clb_kernel k = bwd ? CLK_SOFTMAX_BWD : CLK_SOFTMAX;
  kargs ka = ka_begin(s, k);
  KBUF(&ka, o);
  KBUF(&ka, x);
  if (bwd) KBUF(&ka, y);
  KA(&ka, cl_int, o->dtype);
  KA(&ka, cl_long, cols);
  KA(&ka, cl_int, logm);
  size_t l = row_wg(s, k, cols);
  return ka_run(&ka, (size_t)rows * l, l);
}

static ag_status cl_k_softmax(ag_bstream *s, const ag_k_softmax *a) {
  return run_softmax(s, a->y, a->x, NULL, a->rows, a->cols, a->variant == AG_KV_LOG_SOFTMAX);
}

static ag_status cl_k_softmax_bwd(ag_bstream *s, const ag_k_softmax_bwd *a) {
  return run_softmax(s, a->dx, a->dy, a->y, a->rows, a->cols, a->variant == AG_KV_LOG_SOFTMAX);
}

/* Cross entropy (grad given: its backward, out the logits' gradient). */
static ag_status run_ce(ag_bstream *s, const ag_koperand *out, const ag_koperand *logits, const ag_koperand *targets,
                        const ag_koperand *grad, int64_t rows, int64_t cols, int64_t ignore_index) {
  const bool bwd = grad != NULL;
  if (!rows) return AG_OK;
  clb_kernel k = bwd ? CLK_CE_BWD : CLK_CE;
  kargs ka = ka_begin(s, k);
  KBUF(&ka, out);
  KBUF(&ka, logits);
  KA(&ka, cl_int, logits->dtype);
  KBUF(&ka, targets);
  if (bwd) {
    KBUF(&ka, grad);
    KA(&ka, cl_long, grad->ndim ? grad->strides[0] : 0);
  }
  KA(&ka, cl_long, cols);
  KA(&ka, cl_int, (int32_t)ignore_index);
  KA(&ka, cl_mem, s->err);
  s->err_armed = true;
  size_t l = row_local(s, k, cols);
  return ka_run(&ka, (size_t)rows * l, l);
}

static ag_status cl_k_cross_entropy(ag_bstream *s, const ag_k_cross_entropy *a) {
  return run_ce(s, a->loss, a->logits, a->targets, NULL, a->n, a->c, a->ignore_index);
}

static ag_status cl_k_cross_entropy_bwd(ag_bstream *s, const ag_k_cross_entropy_bwd *a) {
  return run_ce(s, a->dlogits, a->logits, a->targets, a->grad, a->n, a->c, a->ignore_index);
}

/* An absent OPT or SAVED operand as the kernels take it: base NULL. */
static const ag_koperand *or_absent(const ag_koperand *o) {
  static const ag_koperand absent = {0};
  return o ? o : &absent;
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

/* The geometry of q, k, v and mask m (base NULL: none); heads larger than
 * the kernels' private rows are declined (the core then runs the unfused
 * composition). */
static ag_status sdpa_geom_of(const ag_kernel_call *c, const ag_koperand *q, const ag_koperand *k,
                              const ag_koperand *v, const ag_koperand *m, double scale, double p, int64_t causal,
                              clb_sdpa_geom *g) {
  clb_sdpa_geom r = {q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2], q->shape[3], v->shape[3],
                     m->base ? m->strides[0] : 0, m->base ? m->strides[1] : 0, m->base ? m->strides[2] : 0,
                     m->base ? m->strides[3] : 0, (cl_float)scale, (cl_float)p,
                     (cl_float)(p < 1 ? 1.0 / (1.0 - p) : 0.0), (cl_int)(causal != 0), (cl_int)q->dtype,
                     c->seed, c->offset};
  *g = r;
  if (g->D > CLB_SDPA_MAXD || g->Dv > CLB_SDPA_MAXD)
    return ag_error_set(AG_ERR_UNSUPPORTED, "opencl: %s: head size %lld/%lld above %d", c->name ? c->name : "sdpa",
                        (long long)g->D, (long long)g->Dv, CLB_SDPA_MAXD);
  return AG_OK;
}

static ag_status cl_k_sdpa(ag_bstream *s, const ag_k_sdpa *a) {
  const ag_koperand *m = or_absent(a->mask);
  clb_sdpa_geom g;
  ag_status st = sdpa_geom_of(a->call, a->q, a->k, a->v, m, a->scale, a->dropout_p, a->causal, &g);
  if (st != AG_OK) return st;
  kargs ka = ka_begin(s, CLK_SDPA);
  KBUF(&ka, a->out);
  KBUF(&ka, a->q);
  KBUF(&ka, a->k);
  KBUF(&ka, a->v);
  KBUF(&ka, m);
  KBUF(&ka, or_absent(a->lse));
  KA(&ka, clb_sdpa_geom, g);
  return ka_run(&ka, (size_t)(g.B * g.H * g.T), 0);
}

static ag_status cl_k_sdpa_bwd(ag_bstream *s, const ag_k_sdpa_bwd *a) {
  const ag_koperand *m = or_absent(a->mask);
  clb_sdpa_geom g;
  ag_status st = sdpa_geom_of(a->call, a->q, a->k, a->v, m, a->scale, a->dropout_p, a->causal, &g);
  if (st != AG_OK) return st;
  if (AGK_MULTI_GROUPS(a) < 1)
    return ag_error_set(AG_ERR_INTERNAL, "opencl: %s: dq, dk, dv and out not given",
                        a->call->name ? a->call->name : "sdpa");
  const ag_kmulti_entry *dq = &AGK_MULTI(a, 0, dq), *dk = &AGK_MULTI(a, 0, dk), *dv = &AGK_MULTI(a, 0, dv),
                        *out = &AGK_MULTI(a, 0, out);
  kargs ka = ka_begin(s, CLK_SDPA_BWD_DQ);
  KA(&ka, cl_mem, dq->base);
  KA(&ka, cl_ulong, dq->offset);
  KBUF(&ka, a->dout);
  KBUF(&ka, a->q);
  KBUF(&ka, a->k);
  KBUF(&ka, a->v);
  KBUF(&ka, m);
  KBUF(&ka, a->lse);
  KA(&ka, cl_mem, out->base);
  KA(&ka, cl_ulong, out->offset);
  KA(&ka, clb_sdpa_geom, g);
  st = ka_run(&ka, (size_t)(g.B * g.H * g.T), 0);
  if (st != AG_OK) return st;
  ka = ka_begin(s, CLK_SDPA_BWD_DKV);
  KA(&ka, cl_mem, dk->base);
  KA(&ka, cl_ulong, dk->offset);
  KA(&ka, cl_mem, dv->base);
  KA(&ka, cl_ulong, dv->offset);
  KBUF(&ka, a->dout);
  KBUF(&ka, a->q);
  KBUF(&ka, a->k);
  KBUF(&ka, a->v);
  KBUF(&ka, m);
  KBUF(&ka, a->lse);
  KA(&ka, cl_mem, out->base);
  KA(&ka, cl_ulong, out->offset);
  KA(&ka, clb_sdpa_geom, g);
  return ka_run(&ka, (size_t)(g.B * g.Hkv * g.S), 0);
}

static ag_status cl_k_layernorm(ag_bstream *s, const ag_k_layernorm *a) {
  int64_t rows = a->n, cols = a->d;
  if (!rows) return AG_OK;
  kargs ka = ka_begin(s, CLK_LN);
  KBUF(&ka, a->y);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  KBUF(&ka, or_absent(a->weight));
  KBUF(&ka, or_absent(a->bias));
  KBUF(&ka, or_absent(a->mean));
  KBUF(&ka, or_absent(a->rstd));
  KA(&ka, cl_long, cols);
  KA(&ka, cl_float, a->eps);
  size_t l = row_wg(s, CLK_LN, cols);
  return ka_run(&ka, (size_t)rows * l, l);
}

static ag_status cl_k_layernorm_bwd(ag_bstream *s, const ag_k_layernorm_bwd *a) {
  const ag_koperand *dx = a->dx;
  int64_t cols = dx->ndim ? dx->shape[dx->ndim - 1] : 1;
  int64_t rows = cols ? numel(dx) / cols : 0;
  if (!rows || !cols) return AG_OK;
  kargs ka = ka_begin(s, CLK_LN_BWD);
  KBUF(&ka, dx);
  KBUF(&ka, a->dy);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, dx->dtype);
  KBUF(&ka, a->mean);
  KBUF(&ka, a->rstd);
  KBUF(&ka, or_absent(a->weight));
  KA(&ka, cl_long, cols);
  size_t l = row_wg(s, CLK_LN_BWD, cols);
  ag_status st = ka_run(&ka, (size_t)rows * l, l);
  if (st != AG_OK || AGK_MULTI_GROUPS(a) < 1) return st;
  const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw), *db = &AGK_MULTI(a, 0, db);
  ka = ka_begin(s, CLK_LN_BWD_WB);
  KA(&ka, cl_mem, dw->base);
  KA(&ka, cl_ulong, dw->offset);
  KA(&ka, cl_mem, db->base);
  KA(&ka, cl_ulong, db->offset);
  KBUF(&ka, a->dy);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, dx->dtype);
  KBUF(&ka, a->mean);
  KBUF(&ka, a->rstd);
  KA(&ka, cl_long, rows);
  KA(&ka, cl_long, cols);
  /* portable: a work-group per column (S over the rows) */
  return s->portable ? ka_run(&ka, (size_t)cols * 256, 256) : ka_run(&ka, (size_t)cols, 0);
}

static ag_status cl_k_rmsnorm(ag_bstream *s, const ag_k_rmsnorm *a) {
  int64_t rows = a->n, cols = a->d;
  if (!rows || !cols) return AG_OK;
  kargs ka = ka_begin(s, CLK_RMS);
  KBUF(&ka, a->y);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  KBUF(&ka, or_absent(a->weight));
  KBUF(&ka, or_absent(a->rstd));
  KA(&ka, cl_long, cols);
  KA(&ka, cl_float, a->eps);
  size_t l = row_wg(s, CLK_RMS, cols);
  return ka_run(&ka, (size_t)rows * l, l);
}

static ag_status cl_k_rmsnorm_bwd(ag_bstream *s, const ag_k_rmsnorm_bwd *a) {
  int64_t rows = a->n, cols = a->d;
  if (!cols) return AG_OK;
  const ag_koperand *dx = a->dx;
  ag_status st = AG_OK;
  if (rows) {
    kargs ka = ka_begin(s, CLK_RMS_BWD);
    KBUF(&ka, dx);
    KBUF(&ka, a->dy);
    KBUF(&ka, a->x);
    KA(&ka, cl_int, dx->dtype);
    KBUF(&ka, a->rstd);
    KBUF(&ka, or_absent(a->weight));
    KA(&ka, cl_long, cols);
    size_t l = row_wg(s, CLK_RMS_BWD, cols);
    st = ka_run(&ka, (size_t)rows * l, l);
  }
  if (st != AG_OK || AGK_MULTI_GROUPS(a) < 1 || !AGK_MULTI(a, 0, dw).base) return st;
  const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw);
  kargs ka = ka_begin(s, CLK_RMS_BWD_W);
  KA(&ka, cl_mem, dw->base);
  KA(&ka, cl_ulong, dw->offset);
  KBUF(&ka, a->dy);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, dx->dtype);
  KBUF(&ka, a->rstd);
  KA(&ka, cl_long, rows);
  KA(&ka, cl_long, cols);
  return s->portable ? ka_run(&ka, (size_t)cols * 256, 256) : ka_run(&ka, (size_t)cols, 0);
}

static ag_status cl_k_var(ag_bstream *s, const ag_k_var *a) {
  int64_t outer = a->outer, r = a->r, inner = a->inner;
  if (!outer || !inner) return AG_OK;
  const bool sq = a->variant == AG_KV_STD;
  double d = (double)r - a->correction;
  if (a->x->dtype == AG_F64) { /* f64.cl */
    kargs ka = ka_begin(s, CLK_VAR_D);
    KBUF(&ka, a->out);
    KBUF(&ka, a->x);
    KA(&ka, cl_long, outer);
    KA(&ka, cl_long, r);
    KA(&ka, cl_long, inner);
    KA(&ka, cl_double, d > 0 ? d : 0.0);
    KA(&ka, cl_int, sq);
    return ka_run(&ka, (size_t)(outer * inner), 0);
  }
  float den = d > 0 ? (float)d : 0.0f;
  /* portable: the columns kernel of portable.cl, a group of 256 per line */
  bool rows = inner == 1 && r > 0 && !s->portable;
  kargs ka = ka_begin(s, rows ? CLK_VAR_ROWS : CLK_VAR_COLS);
  KBUF(&ka, a->out);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  if (rows) {
    KA(&ka, cl_long, r);
  } else {
    KA(&ka, cl_long, outer);
    KA(&ka, cl_long, r);
    KA(&ka, cl_long, inner);
  }
  KA(&ka, cl_float, den);
  KA(&ka, cl_int, sq);
  if (s->portable) return ka_run(&ka, (size_t)(outer * inner) * 256, 256);
  if (!rows) return ka_run(&ka, (size_t)(outer * inner), 0);
  size_t l = row_local(s, CLK_VAR_ROWS, r);
  return ka_run(&ka, (size_t)outer * l, l);
}

static ag_status cl_k_cumsum(ag_bstream *s, const ag_k_cumsum *a) {
  int64_t outer = a->outer, r = a->r, inner = a->inner;
  if (!outer || !r || !inner) return AG_OK;
  const bool rev = a->variant == AG_KV_CUMSUM_SUFFIX;
  if (a->x->dtype == AG_F64) { /* f64.cl */
    kargs ka = ka_begin(s, CLK_CUMSUM_D);
    KBUF(&ka, a->out);
    KBUF(&ka, a->x);
    KA(&ka, cl_long, outer);
    KA(&ka, cl_long, r);
    KA(&ka, cl_long, inner);
    KA(&ka, cl_int, rev);
    return ka_run(&ka, (size_t)(outer * inner), 0);
  }
  kargs ka = ka_begin(s, CLK_CUMSUM);
  KBUF(&ka, a->out);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  KA(&ka, cl_long, outer);
  KA(&ka, cl_long, r);
  KA(&ka, cl_long, inner);
  KA(&ka, cl_int, rev);
  return ka_run(&ka, (size_t)(outer * inner), 0);
}

_Static_assert(AG_ERR_INDEX == 8, "ERR_INDEX in kernels/opencl/common.cl");

/* Gather ([O, K, I] from [O, X, I] at ix), or its backward (bwd: out the
 * [O, X, I] gradient, x the [O, K, I] one). */
static ag_status run_gather(ag_bstream *s, bool bwd, const ag_koperand *out, const ag_koperand *x,
                            const ag_koperand *ix, int64_t O, int64_t K, int64_t I, int64_t X) {
  int64_t items = bwd ? O * I : O * K * I;
  if (!items || (bwd && !X)) return AG_OK;
  bool f64 = x->dtype == AG_F64; /* f64.cl */
  kargs ka = ka_begin(s, f64 ? (bwd ? CLK_GATHER_BWD_D : CLK_GATHER_D) : bwd ? CLK_GATHER_BWD : CLK_GATHER);
  KBUF(&ka, out);
  KBUF(&ka, x);
  if (!f64) KA(&ka, cl_int, x->dtype);
  KBUF(&ka, ix);
  for (int d = 0; d < 3; d++) KA(&ka, cl_long, ix->strides[d]);
  KA(&ka, cl_long, O);
  KA(&ka, cl_long, K);
  KA(&ka, cl_long, I);
  KA(&ka, cl_long, X);
  if (!bwd) {
    KA(&ka, cl_mem, s->err);
    s->err_armed = true;
  }
  return ka_run(&ka, (size_t)items, 0);
}

static ag_status cl_k_gather(ag_bstream *s, const ag_k_gather *a) {
  return run_gather(s, false, a->out, a->x, a->index, a->o, a->k, a->in, a->xlen);
}

static ag_status cl_k_gather_bwd(ag_bstream *s, const ag_k_gather_bwd *a) {
  return run_gather(s, true, a->dx, a->dout, a->index, a->o, a->k, a->in, a->xlen);
}

static ag_status cl_k_topk(ag_bstream *s, const ag_k_topk *a) {
  int64_t O = a->o, R = a->r, I = a->in, K = a->k;
  if (O * R * I == 0 || K == 0) return AG_OK;
  kargs ka = ka_begin(s, CLK_TOPK);
  KBUF(&ka, a->values);
  KBUF(&ka, a->indices);
  KBUF(&ka, a->x);
  KA(&ka, cl_int, a->x->dtype);
  KA(&ka, cl_long, O);
  KA(&ka, cl_long, R);
  KA(&ka, cl_long, I);
  KA(&ka, cl_long, K);
  KA(&ka, cl_int, a->variant == AG_KV_TOPK_SMALLEST);
  return ka_run(&ka, (size_t)(O * R * I), 0);
}

static int64_t pick(int64_t v, int64_t dflt) { return v > 0 ? v : dflt; }

static ag_status cl_k_embedding(ag_bstream *s, const ag_k_embedding *a) {
  const ag_koperand *tab = a->table;
  int64_t n = pick(a->n, numel(a->indices));
  int64_t d = pick(a->d, tab->ndim > 1 ? tab->shape[1] : 1);
  int64_t v = pick(a->v, tab->ndim ? tab->shape[0] : 0);
  if (!n || !d) return AG_OK;
  kargs ka = ka_begin(s, CLK_EMB);
  KBUF(&ka, a->out);
  KBUF(&ka, tab);
  KA(&ka, cl_int, (int)dsize(tab->dtype));
  KBUF(&ka, a->indices);
  KA(&ka, cl_long, n);
  KA(&ka, cl_long, d);
  KA(&ka, cl_long, v);
  KA(&ka, cl_mem, s->err);
  s->err_armed = true;
  return ka_run(&ka, (size_t)(n * d), 0);
}

static ag_status cl_k_embedding_bwd(ag_bstream *s, const ag_k_embedding_bwd *a) {
  const ag_koperand *t = a->dtable;
  int64_t n = pick(a->n, numel(a->indices));
  int64_t d = pick(a->d, t->ndim > 1 ? t->shape[1] : 1);
  int64_t v = pick(a->v, t->ndim ? t->shape[0] : 0);
  if (!n || !d) return AG_OK;
  if (t->dtype == AG_F64) { /* f64.cl */
    kargs ka = ka_begin(s, CLK_EMB_BWD_D);
    KBUF(&ka, t);
    KBUF(&ka, a->dout);
    KBUF(&ka, a->indices);
    KA(&ka, cl_long, n);
    KA(&ka, cl_long, d);
    KA(&ka, cl_long, v);
    KA(&ka, cl_mem, s->err);
    s->err_armed = true;
    return ka_run(&ka, (size_t)d, 0);
  }
  kargs ka = ka_begin(s, CLK_EMB_BWD);
  KBUF(&ka, t);
  KA(&ka, cl_int, t->dtype);
  KBUF(&ka, a->dout);
  KA(&ka, cl_int, a->dout->dtype);
  KBUF(&ka, a->indices);
  KA(&ka, cl_long, n);
  KA(&ka, cl_long, d);
  KA(&ka, cl_long, v);
  KA(&ka, cl_mem, s->err);
  s->err_armed = true;
  return ka_run(&ka, (size_t)d, 0);
}

/* ---- optimizers ---- */

static void ka_entry(kargs *ka, const ag_kmulti_entry *e) {
  KA(ka, cl_mem, e->base);
  KA(ka, cl_ulong, e->offset);
}

/* AdamW as docs/numerics.md writes it: every scalar (float)s of the call's
 * double. */
static ag_status run_padamw(ag_bstream *s, const ag_k_adamw *a) {
  for (int64_t k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    int64_t n = AGK_MULTI(a, k, param).numel;
    if (!n) continue;
    kargs ka = ka_begin(s, CLK_P_ADAMW);
    ka_entry(&ka, &AGK_MULTI(a, k, param));
    ka_entry(&ka, &AGK_MULTI(a, k, grad));
    ka_entry(&ka, &AGK_MULTI(a, k, exp_avg));
    ka_entry(&ka, &AGK_MULTI(a, k, exp_avg_sq));
    KA(&ka, cl_long, n);
    KA(&ka, cl_float, a->beta1);
    KA(&ka, cl_float, a->beta2);
    KA(&ka, cl_float, a->eps);
    KA(&ka, cl_float, a->lr);
    KA(&ka, cl_float, a->weight_decay);
    KA(&ka, cl_float, a->bias_correction1);
    KA(&ka, cl_float, a->bias_correction2);
    KBUF(&ka, or_absent(a->inv_scale));
    KBUF(&ka, or_absent(a->found_inf));
    ag_status st = ka_run(&ka, (size_t)n, 0);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status cl_k_adamw(ag_bstream *s, const ag_k_adamw *a) {
  if (s->portable) return run_padamw(s, a);
  for (int64_t k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    int64_t n = AGK_MULTI(a, k, param).numel;
    if (!n) continue;
    kargs ka = ka_begin(s, CLK_ADAMW);
    ka_entry(&ka, &AGK_MULTI(a, k, param));
    ka_entry(&ka, &AGK_MULTI(a, k, grad));
    ka_entry(&ka, &AGK_MULTI(a, k, exp_avg));
    ka_entry(&ka, &AGK_MULTI(a, k, exp_avg_sq));
    KA(&ka, cl_long, n);
    /* Folded in f64 on the host exactly as the CPU backend folds them. */
    KA(&ka, cl_float, a->beta1);
    KA(&ka, cl_float, a->beta2);
    KA(&ka, cl_float, a->eps);
    KA(&ka, cl_float, 1.0 - a->lr * a->weight_decay);
    KA(&ka, cl_float, a->lr / a->bias_correction1);
    KA(&ka, cl_float, 1.0 / sqrt(a->bias_correction2));
    KBUF(&ka, or_absent(a->inv_scale));
    KBUF(&ka, or_absent(a->found_inf));
    ag_status st = ka_run(&ka, (size_t)n, 0);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status cl_k_sgd(ag_bstream *s, const ag_k_sgd *a) {
  for (int64_t k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    int64_t n = AGK_MULTI(a, k, param).numel;
    if (!n) continue;
    kargs ka = ka_begin(s, CLK_SGD);
    ka_entry(&ka, &AGK_MULTI(a, k, param));
    ka_entry(&ka, &AGK_MULTI(a, k, grad));
    ka_entry(&ka, &AGK_MULTI(a, k, momentum_buffer));
    KA(&ka, cl_long, n);
    KA(&ka, cl_float, a->lr);
    KA(&ka, cl_float, a->momentum);
    KA(&ka, cl_float, a->dampening);
    KA(&ka, cl_float, a->weight_decay);
    KA(&ka, cl_int, a->nesterov != 0);
    KA(&ka, cl_int, a->first_step != 0);
    KBUF(&ka, or_absent(a->inv_scale));
    KBUF(&ka, or_absent(a->found_inf));
    ag_status st = ka_run(&ka, (size_t)n, 0);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status cl_k_nonfinite_check(ag_bstream *s, const ag_k_nonfinite_check *a) {
  for (int64_t k = 0; k < AGK_MULTI_GROUPS(a); k++) {
    const ag_kmulti_entry *x = &AGK_MULTI(a, k, x);
    if (!x->numel) continue;
    kargs ka = ka_begin(s, CLK_NONFINITE);
    ka_entry(&ka, x);
    KA(&ka, cl_int, x->dtype);
    KA(&ka, cl_long, x->numel);
    KBUF(&ka, or_absent(a->inv_scale));
    KBUF(&ka, a->found_inf);
    ag_status st = ka_run(&ka, (size_t)x->numel, 0);
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

/* Portable GEMM (docs/numerics.md MATMUL): 4 x 4 blocks of outputs, each
 * output adding its k terms in order; operands read in place with their
 * strides and dtype (no CLBlast, no staging). */
static ag_status run_pmatmul(ag_bstream *s, const ag_k_matmul *a) {
  const ag_koperand *o = a->c, *x = a->a, *y = a->b;
  int64_t B, M, K, N, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, t;
  mat_dims(x, &t, &M, &K, &sab, &sam, &sak);
  mat_dims(y, &t, &K, &N, &sbb, &sbk, &sbn);
  mat_dims(o, &B, &M, &N, &scb, &scm, &scn);
  if (!B || !M || !N) return AG_OK;
  if (x->ndim < 3 || x->shape[x->ndim - 3] == 1) sab = 0;
  if (y->ndim < 3 || y->shape[y->ndim - 3] == 1) sbb = 0;
  kargs ka = ka_begin(s, CLK_P_MATMUL);
  KBUF(&ka, o);
  KBUF(&ka, x);
  KBUF(&ka, y);
  KA(&ka, cl_int, o->dtype);
  KA(&ka, cl_long, M);
  KA(&ka, cl_long, N);
  KA(&ka, cl_long, K);
  KA(&ka, cl_long, sab);
  KA(&ka, cl_long, sam);
  KA(&ka, cl_long, sak);
  KA(&ka, cl_long, sbb);
  KA(&ka, cl_long, sbk);
  KA(&ka, cl_long, sbn);
  KA(&ka, cl_long, scb);
  KA(&ka, cl_long, scm);
  KA(&ka, cl_long, scn);
  KA(&ka, cl_float, a->alpha);
  KA(&ka, cl_int, a->alpha != 1.0);
  KA(&ka, cl_float, a->beta);
  KA(&ka, cl_int, a->beta != 0.0);
  if (ka.err != CL_SUCCESS) return clb_error(ka.err, "ag_pmatmul");
  /* a work-item per 4 x 4 block of outputs, the local size the runtime's */
  size_t global[3] = {(size_t)(N + 3) / 4, (size_t)(M + 3) / 4, (size_t)B};
  cl_int err = clEnqueueNDRangeKernel(s->q, s->k[CLK_P_MATMUL], 3, NULL, global, NULL, 0, NULL, NULL);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, "ag_pmatmul");
}

static ag_status cl_k_matmul(ag_bstream *s, const ag_k_matmul *a) {
  if (s->portable) return run_pmatmul(s, a);
  const ag_koperand *o = a->c, *x = a->a, *y = a->b;
  int64_t B, M, K, N, t0, t1, t2;
  mat_dims(x, &B, &M, &K, &t0, &t1, &t2);
  mat_dims(o, &B, &M, &N, &t0, &t1, &t2);
  if (!B || !M || !N) return AG_OK;
  if (!K) {
    /* alpha * (empty product) = 0: C = beta * C. */
    if (a->beta == 0) return run_fill(s, o, 0.0);
    return run_unary(s, o, o, AG_U_AFFINE, a->beta, 0.0);
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
    if (a->beta != 0 && (st = gemm_stage(s, o, scratch, off_c, &gc)) != AG_OK) return st;
  }
  st = sgemm(s, "", ga.trans, gb.trans, (size_t)M, (size_t)N, (size_t)K, (float)a->alpha, ga.mem, ga.off, ga.ld,
             ga.stride, gb.mem, gb.off, gb.ld, gb.stride, (float)a->beta, gc.mem, gc.off, gc.ld, gc.stride,
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

/* x [N, C, H, W], y [N, Co, Ho, Wo], w [Co, C/G, kh, kw] and the window
 * of a (any of the three conv2d argument structs). */
#define CONV_META(a, x, y, w)                                                                            \
  {(x)->shape[0], (x)->shape[1], (x)->shape[2], (x)->shape[3], (y)->shape[1], (y)->shape[2], (y)->shape[3], \
   (w)->shape[2], (w)->shape[3], (a)->stride_h, (a)->stride_w, (a)->pad_h, (a)->pad_w, (a)->dilation_h,    \
   (a)->dilation_w, (a)->groups}

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

/* op: which of the three; X the input (or its gradient), Y the output (or
 * its gradient), Wt the weight (or its gradient), bias (CONV2D) or NULL. */
/* Portable conv2d (docs/numerics.md): a work-item per output (forward,
 * input gradient) adding its taps in the contract's order, a group of 256
 * per weight for the weight gradient (S). */
static ag_status run_pconv(ag_bstream *s, ag_kop op, const ag_koperand *X, const ag_koperand *Y,
                           const ag_koperand *Wt, const ag_koperand *bias, clb_conv_meta m) {
  if (op == AG_K_CONV2D) {
    kargs k = ka_begin(s, CLK_P_CONV);
    KBUF(&k, Y);
    KBUF(&k, X);
    KBUF(&k, Wt);
    KBUF(&k, or_absent(bias));
    KMETA(&k, m);
    return ka_run(&k, (size_t)(m.N * m.Co * m.Ho * m.Wo), 0);
  }
  if (op == AG_K_CONV2D_BWD_INPUT) {
    kargs k = ka_begin(s, CLK_P_CONV_BWD_IN);
    KBUF(&k, X);
    KBUF(&k, Y);
    KBUF(&k, Wt);
    KMETA(&k, m);
    return ka_run(&k, (size_t)(m.N * m.C * m.H * m.W), 0);
  }
  kargs k = ka_begin(s, CLK_P_CONV_BWD_W);
  KBUF(&k, Wt);
  KBUF(&k, Y);
  KBUF(&k, X);
  KMETA(&k, m);
  return ka_run(&k, (size_t)(m.Co * (m.C / m.G) * m.kh * m.kw) * 256, 256);
}

static ag_status run_conv(ag_bstream *s, ag_kop op, const ag_koperand *X, const ag_koperand *Y, const ag_koperand *Wt,
                          const ag_koperand *bias, clb_conv_meta m) {
  if (s->portable) return run_pconv(s, op, X, Y, Wt, bias, m);
  const bool fwd = op == AG_K_CONV2D, bin = op == AG_K_CONV2D_BWD_INPUT;
  const int64_t G = m.G, Cg = m.C / G, Cog = m.Co / G, K = Cg * m.kh * m.kw, P = m.Ho * m.Wo, N = m.N;
  const size_t xo = X->offset / 4, yo = Y->offset / 4, wo = Wt->offset / 4;
  /* 1x1, stride 1, no padding: x is its own column matrix */
  const bool direct = m.kh == 1 && m.kw == 1 && m.sh == 1 && m.sw == 1 && m.ph == 0 && m.pw == 0 &&
                      op != AG_K_CONV2D_BWD_WEIGHT;
  const int64_t per = (direct ? 0 : G * K * P) + (op == AG_K_CONV2D_BWD_WEIGHT ? m.Co * P : 0);
  const int64_t nbmax = conv_chunk(s, per, N);
  cl_mem scratch = NULL;
  ag_status st = AG_OK;
  const size_t col_el = align_el((size_t)(G * K * nbmax * P));
  const size_t dyt_el = op == AG_K_CONV2D_BWD_WEIGHT ? (size_t)(m.Co * nbmax * P) : 0;
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
  if (st == AG_OK && fwd && bias && bias->base) {
    kargs k = ka_begin(s, CLK_CONV_BIAS);
    KBUF(&k, Y);
    KBUF(&k, bias);
    KA(&k, cl_long, N * m.Co * P);
    KA(&k, cl_long, m.Co);
    KA(&k, cl_long, P);
    st = ka_run(&k, (size_t)(N * m.Co * P), 0);
  }
  return st;
}

static ag_status cl_k_conv2d(ag_bstream *s, const ag_k_conv2d *a) {
  const clb_conv_meta m = CONV_META(a, a->x, a->y, a->w);
  return run_conv(s, AG_K_CONV2D, a->x, a->y, a->w, a->bias, m);
}

static ag_status cl_k_conv2d_bwd_input(ag_bstream *s, const ag_k_conv2d_bwd_input *a) {
  const clb_conv_meta m = CONV_META(a, a->dx, a->dy, a->w);
  return run_conv(s, AG_K_CONV2D_BWD_INPUT, a->dx, a->dy, a->w, NULL, m);
}

static ag_status cl_k_conv2d_bwd_weight(ag_bstream *s, const ag_k_conv2d_bwd_weight *a) {
  const clb_conv_meta m = CONV_META(a, a->x, a->dy, a->dw);
  return run_conv(s, AG_K_CONV2D_BWD_WEIGHT, a->x, a->dy, a->dw, NULL, m);
}

/* Pooling of x [n, c, h, w] into y [n, c, ho, wo], or its backward (bwd: x
 * and y the gradients); argmax (MAX) or NULL. */
#define POOL_META(a, x, y)                                                                                 \
  {(x)->shape[0] * (x)->shape[1], (x)->shape[2], (x)->shape[3], (y)->shape[2], (y)->shape[3], (a)->stride_h, \
   (a)->stride_w, (a)->pad_h, (a)->pad_w, (a)->kernel_h, (a)->kernel_w, (cl_int)(a)->variant,               \
   (cl_int)((a)->count_pad != 0)}
static ag_status run_pool(ag_bstream *s, bool bwd, const ag_koperand *X, const ag_koperand *Y,
                          const ag_koperand *argmax, clb_pool_meta g) {
  const bool max = g.op == AG_P_MAX && argmax;
  kargs k = ka_begin(s, bwd ? CLK_POOL_BWD : CLK_POOL);
  KBUF(&k, bwd ? X : Y);
  if (bwd) KBUF(&k, Y);
  KA(&k, cl_mem, max ? argmax->base : NULL);
  KA(&k, cl_ulong, max ? argmax->offset : 0);
  if (!bwd) KBUF(&k, X);
  KMETA(&k, g);
  return ka_run(&k, (size_t)(g.planes * (bwd ? g.H * g.W : g.Ho * g.Wo)), 0);
}

static ag_status cl_k_pool2d(ag_bstream *s, const ag_k_pool2d *a) {
  const clb_pool_meta g = POOL_META(a, a->x, a->y);
  return run_pool(s, false, a->x, a->y, a->argmax, g);
}

static ag_status cl_k_pool2d_bwd(ag_bstream *s, const ag_k_pool2d_bwd *a) {
  const clb_pool_meta g = POOL_META(a, a->dx, a->dy);
  return run_pool(s, true, a->dx, a->dy, a->argmax, g);
}

/* Batch norm over contiguous f32 [N, C, HW]: per-channel sums, one
 * work-group per channel, and the per-channel affine map. */
static ag_status cl_k_bn_stats(ag_bstream *s, const ag_k_bn_stats *a) {
  const int64_t N = a->n, C = a->c, HW = a->hw;
  if (C <= 0) return AG_OK;
  const bool sums = a->variant == AG_KV_BN_SUMS;
  const ag_koperand *b = or_absent(sums ? a->b : NULL), *mu = or_absent(sums ? a->mu : NULL);
  kargs k = ka_begin(s, CLK_BN_STATS);
  KBUF(&k, a->stats);
  KBUF(&k, a->a);
  KBUF(&k, b);
  KBUF(&k, mu);
  KA(&k, cl_long, N);
  KA(&k, cl_long, C);
  KA(&k, cl_long, HW);
  KA(&k, cl_int, sums);
  size_t l = row_local(s, CLK_BN_STATS, N * HW);
  return ka_run(&k, (size_t)C * l, l);
}

static ag_status cl_k_bn_apply(ag_bstream *s, const ag_k_bn_apply *a) {
  const int64_t N = a->n, C = a->c, HW = a->hw, n = N * C * HW;
  if (n <= 0) return AG_OK;
  const ag_koperand *b = or_absent(a->variant == AG_KV_BN_AFFINE_B ? a->b : NULL);
  kargs k = ka_begin(s, CLK_BN_APPLY);
  KBUF(&k, a->y);
  KBUF(&k, a->a);
  KBUF(&k, a->coef);
  KBUF(&k, b);
  KA(&k, cl_long, n);
  KA(&k, cl_long, C);
  KA(&k, cl_long, HW);
  return ka_run(&k, (size_t)n, 0);
}

#include "cl_resample.inc"

/* What this backend runs: the dtypes of its kernels (f64 where the device
 * has cl_khr_fp64, applied by clb_supports) and the variants. UNARY, BINARY,
 * REDUCE and POOL take any sub-op code here; clb_supports checks it against
 * the op table. One op per line. */
#define CL_DTS_INT_NOBOOL (AGK_DT(I32) | AGK_DT(I64) | AGK_DT(U8))
#define CL_KOPS(X)                                                                                   \
  X(FILL, fill, AGK_DTS_ALL, AGK_VNONE)                                                              \
  X(ARANGE, arange, AGK_DTS_FLOAT64 | CL_DTS_INT_NOBOOL, AGK_VNONE)                                  \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(UNARY, unary, AGK_DTS_ALL, AGK_VANY)                                                             \
  X(BINARY, binary, AGK_DTS_ALL, AGK_VANY)                                                           \
  X(WHERE, where, AGK_DTS_ALL, AGK_VNONE)                                                            \
  X(REDUCE, reduce, AGK_DTS_ALL, AGK_VANY)                                                           \
  X(MATMUL, matmul, AGK_DTS_FLOAT, AGK_VNONE)                                                        \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))        \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX)) \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32))                              \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32))                      \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                          \
  X(EMBEDDING, embedding, AGK_DTS_FLOAT64 | AGK_DT(I32), AGK_VBIT(AG_KV_IDX32))                      \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32))                            \
  X(DROPOUT, dropout, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                            \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                                \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT, AGK_VNONE)                                      \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                          \
  X(CONV2D, conv2d, AGK_DT(F32), AGK_VNONE)                                                          \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DT(F32), AGK_VNONE)                                      \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DT(F32), AGK_VNONE)                                    \
  X(POOL2D, pool2d, AGK_DT(F32), AGK_VANY)                                                           \
  X(POOL2D_BWD, pool2d_bwd, AGK_DT(F32), AGK_VANY)                                                   \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))          \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))        \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(VAR, var, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                            \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX))  \
  X(GATHER, gather, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32))                                          \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32))                                  \
  X(TOPK, topk, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))         \
  X(SDPA, sdpa, AGK_DTS_FLOAT, AGK_VNONE)                                                            \
  X(SDPA_BWD, sdpa_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                                    \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT64, AGK_VNONE)                                                \
  X(NORM, norm, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                         \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT64, AGK_VNONE)                                              \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT64, AGK_VNONE)                                      \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(SORT, sort, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING)) \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))      \
  X(PAD, pad, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))         \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT64, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))

/* What this backend computes as docs/numerics.md fixes it, through the
 * portable program (AG_KF_PORTABLE): its own kernels for S, GEMM and the
 * row ops (portable.cl), the elementwise table with pmath, and the default
 * kernels that are exact by nature (copies, comparisons, one rounding,
 * integer arithmetic). No f64. One op per line. */
#define CL_PDTS_ALL (AGK_DTS_FLOAT | AGK_DTS_INT)
#define CL_KOPS_PORTABLE(X)                                                                          \
  X(FILL, fill, CL_PDTS_ALL, AGK_VNONE)                                                              \
  X(ARANGE, arange, AGK_DTS_FLOAT | CL_DTS_INT_NOBOOL, AGK_VNONE)                                    \
  X(RAND_UNIFORM, rand_uniform, AGK_DTS_FLOAT, AGK_VNONE)                                            \
  X(RAND_NORMAL, rand_normal, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(UNARY, unary, CL_PDTS_ALL, AGK_VANY)                                                             \
  X(BINARY, binary, CL_PDTS_ALL, AGK_VANY)                                                           \
  X(WHERE, where, CL_PDTS_ALL, AGK_VNONE)                                                            \
  X(REDUCE, reduce, CL_PDTS_ALL, AGK_VANY)                                                           \
  X(MATMUL, matmul, AGK_DTS_FLOAT, AGK_VNONE)                                                        \
  X(SOFTMAX, softmax, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))          \
  X(SOFTMAX_BWD, softmax_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SOFTMAX) | AGK_VBIT(AG_KV_LOG_SOFTMAX))   \
  X(CROSS_ENTROPY, cross_entropy, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32))                              \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32))                      \
  X(LAYERNORM, layernorm, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(LAYERNORM_BWD, layernorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                          \
  X(RMSNORM, rmsnorm, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(RMSNORM_BWD, rmsnorm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                              \
  X(ADAMW, adamw, AGK_DT(F32), AGK_VNONE)                                                            \
  X(SGD, sgd, AGK_DT(F32), AGK_VNONE)                                                                \
  X(SUMSQ, sumsq, AGK_DTS_FLOAT, AGK_VNONE)                                                          \
  X(EMBEDDING_BWD, embedding_bwd, AGK_DT(F32), AGK_VBIT(AG_KV_IDX32))                                \
  X(DROPOUT, dropout, AGK_DTS_FLOAT, AGK_VNONE)                                                      \
  X(EMBEDDING, embedding, AGK_DTS_FLOAT | AGK_DT(I32), AGK_VBIT(AG_KV_IDX32))                        \
  X(NONFINITE_CHECK, nonfinite_check, AGK_DTS_FLOAT, AGK_VNONE)                                      \
  X(ONE_HOT, one_hot, AGK_DT(I32) | AGK_DT(I64), AGK_VNONE)                                         \
  X(LOGSUMEXP, logsumexp, AGK_DTS_FLOAT, AGK_VNONE)                                                  \
  X(CONV2D, conv2d, AGK_DT(F32), AGK_VNONE)                                                          \
  X(CONV2D_BWD_INPUT, conv2d_bwd_input, AGK_DT(F32), AGK_VNONE)                                      \
  X(CONV2D_BWD_WEIGHT, conv2d_bwd_weight, AGK_DT(F32), AGK_VNONE)                                    \
  X(POOL2D, pool2d, AGK_DT(F32), AGK_VANY)                                                           \
  X(POOL2D_BWD, pool2d_bwd, AGK_DT(F32), AGK_VANY)                                                   \
  X(GATHER, gather, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32))                                            \
  X(PAD, pad, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))             \
  X(TOPK, topk, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_TOPK_LARGEST) | AGK_VBIT(AG_KV_TOPK_SMALLEST))         \
  X(SORT, sort, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_SORT_ASCENDING) | AGK_VBIT(AG_KV_SORT_DESCENDING))     \
  X(BN_STATS, bn_stats, AGK_DT(F32), AGK_VBIT(AG_KV_BN_MEAN_VAR) | AGK_VBIT(AG_KV_BN_SUMS))          \
  X(BN_APPLY, bn_apply, AGK_DT(F32), AGK_VBIT(AG_KV_BN_AFFINE) | AGK_VBIT(AG_KV_BN_AFFINE_B))        \
  X(VAR, var, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_VAR) | AGK_VBIT(AG_KV_STD))                              \
  X(NORM, norm, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_NORM_L1) | AGK_VBIT(AG_KV_NORM_L2) | AGK_VBIT(AG_KV_NORM_INF)) \
  X(CUMSUM, cumsum, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_CUMSUM_PREFIX) | AGK_VBIT(AG_KV_CUMSUM_SUFFIX))    \
  X(GATHER_BWD, gather_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32))                                    \
  X(SCATTER_ADD, scatter_add, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_IDX32) | AGK_VBIT(AG_KV_IDX64))          \
  X(PAD_BWD, pad_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_PAD_CONSTANT) | AGK_VBIT(AG_KV_PAD_REFLECT))     \
  X(GROUP_NORM, group_norm, AGK_DTS_FLOAT, AGK_VNONE)                                                \
  X(GROUP_NORM_BWD, group_norm_bwd, AGK_DTS_FLOAT, AGK_VNONE)                                        \
  X(INTERPOLATE, interpolate, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR)) \
  X(INTERPOLATE_BWD, interpolate_bwd, AGK_DTS_FLOAT, AGK_VBIT(AG_KV_INTERP_NEAREST) | AGK_VBIT(AG_KV_INTERP_BILINEAR))

#define AGK_IMPL(name) cl_k_##name
#define AGK_CTX ag_bstream *
AGK_DEFINE_DISPATCH_PORTABLE(cl_dispatch, CL_KOPS, CL_KOPS_PORTABLE, "opencl")
AGK_DEFINE_SUPPORTS(cl_supports_data, CL_KOPS)

static ag_status launch_locked(ag_bstream *s, const ag_kernel_call *c) {
  ag_status st = clb_stream_kernels(s, (c->flags & AG_KF_PORTABLE) != 0);
  if (st != AG_OK) return st;
  clb_touch(s);
  return cl_dispatch(s, c);
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

/* The list's data, then what depends on the device (f64 needs
 * cl_khr_fp64; half types are storage, so every device runs them) and on
 * the sub-op codes of the op table. */
bool clb_supports(int dev, ag_kop op, int sub, ag_dtype dt) {
  if (!cl_supports_data(op, sub, dt)) return false;
  if (dt == AG_F64 && !clb_dev(dev)->fp64) return false;
  switch (op) {
    /* floats always; integers where the entry has an integer rule
     * (elementwise.cl) */
    case AG_K_UNARY: {
      const ag_unary_info *u = ag_unary_info_of(sub);
      return u && (!is_int(dt) || u->ints == AG_OPT_INT);
    }
    case AG_K_BINARY: {
      const ag_binary_info *b = ag_binary_info_of(sub);
      return b && (!is_int(dt) || b->ints == AG_OPT_INT);
    }
    /* the core sums bool and u8 as i64 */
    case AG_K_REDUCE:
      return sub >= 0 && sub < AG_REDUCE_COUNT && !(sub == AG_R_SUM && (dt == AG_U8 || dt == AG_BOOL));
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return sub >= 0 && sub < AG_POOL_OP_COUNT;
    default: return true;
  }
}

/* The portable list's data, within what the device runs. REDUCE: every
 * float sum goes through S; MAX, MIN, ARGMAX and integer sums are exact. */
bool clb_supports_portable(int dev, ag_kop op, int sub, ag_dtype dt) {
  return cl_dispatch_portable(op, sub, dt) && clb_supports(dev, op, sub, dt);
}

/* The kernels that run as work-groups of exactly 256 (S's tree). */
static const clb_kernel k_wg256[] = {CLK_P_SUM,     CLK_SOFTMAX, CLK_SOFTMAX_BWD, CLK_CE,
                                     CLK_CE_BWD,    CLK_LN,       CLK_LN_BWD,  CLK_LN_BWD_WB,   CLK_RMS,
                                     CLK_RMS_BWD,   CLK_RMS_BWD_W, CLK_LOGSUMEXP, CLK_P_CONV_BWD_W,
                                     CLK_BN_STATS,  CLK_VAR_COLS,  CLK_NORM,      CLK_GN,
                                     CLK_GN_BWD,    CLK_GN_BWD_WB};

/* The probe's inputs (ag_pprobe in portable.cl) and the host's IEEE
 * results; volatile so the host computes them at run time too. */
static void probe_expect(const float *in, float *out) {
  volatile float v[10];
  v[0] = in[0] * in[1];
  v[1] = in[2] + in[3];
  v[2] = in[4] - in[5];
  v[3] = in[2] * in[6];
  v[4] = in[2] * in[7];
  v[5] = in[8] / in[9];
  v[6] = in[2] / in[9];
  v[7] = sqrtf(in[8]);
  v[8] = sqrtf(in[2]);
  v[9] = 0.0f; /* in[8] * in[8] - in[10], in[10] the rounded square */
  for (int i = 0; i < 10; i++) out[i] = v[i];
}

/* portable_check: the portable program builds, its row kernels take
 * work-groups of 256, and a probe shows IEEE products and sums in and out
 * of the subnormal range and correctly rounded division and square root
 * (pmath's or the device's, by CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT). */
ag_status clb_portable_check(int dev) {
  clb_device *d = clb_dev(dev);
  ag_bstream *s = NULL;
  ag_status st = clb_stream_create(dev, &s);
  if (st != AG_OK) return st;
  pthread_mutex_lock(&s->lock);
  st = clb_stream_kernels(s, true);
  for (size_t i = 0; st == AG_OK && i < sizeof k_wg256 / sizeof k_wg256[0]; i++)
    if (s->kwg[k_wg256[i]] < 256)
      st = ag_error_set(AG_ERR_UNSUPPORTED,
                        "opencl:%d (%s) refuses portable numerics: kernel %s takes work-groups of %zu, "
                        "the canonical sum needs 256",
                        dev, d->name, k_names[k_wg256[i]], s->kwg[k_wg256[i]]);
  float in[11] = {0x1.8p-70f, 0x1.4p-60f, 0x1.8p-140f, 0x1.2p-145f, 0x1.8p-126f, 0x1.0p-126f,
                  0x1.0p30f,  0x1.5555p-3f, 0x1.5555p+3f, 3.0f, 0};
  volatile float sq = in[8] * in[8];
  in[10] = sq;
  float got[10] = {0}, want[10];
  cl_int err = CL_SUCCESS;
  cl_mem bin = NULL, bout = NULL;
  if (st == AG_OK) {
    bin = clCreateBuffer(d->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof in, (void *)in, &err);
    if (bin) bout = clCreateBuffer(d->ctx, CL_MEM_WRITE_ONLY, sizeof got, NULL, &err);
    if (!bin || !bout) st = clb_error(err, "portable probe buffers");
  }
  if (st == AG_OK) {
    cl_kernel k = s->k[CLK_P_PROBE];
    size_t one = 1;
    err = clSetKernelArg(k, 0, sizeof bout, &bout);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, 1, sizeof bin, &bin);
    if (err == CL_SUCCESS) err = clEnqueueNDRangeKernel(s->q, k, 1, NULL, &one, &one, 0, NULL, NULL);
    if (err == CL_SUCCESS) err = clEnqueueReadBuffer(s->q, bout, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
    if (err != CL_SUCCESS) st = clb_error(err, "portable probe");
  }
  if (st == AG_OK) {
    static const char *const what[10] = {"a product into the subnormal range", "a sum of subnormals",
                                         "a difference into the subnormal range", "a product out of the subnormal range",
                                         "a rounded subnormal product", "a division", "a subnormal quotient",
                                         "a square root", "the square root of a subnormal",
                                         "a*b + c without contraction"};
    probe_expect(in, want);
    for (int i = 0; i < 10 && st == AG_OK; i++) {
      uint32_t gb, wb;
      memcpy(&gb, &got[i], 4);
      memcpy(&wb, &want[i], 4);
      if (gb != wb)
        st = ag_error_set(AG_ERR_UNSUPPORTED,
                          "opencl:%d (%s) refuses portable numerics: %s gives %a, IEEE binary32 %a "
                          "(subnormals flushed or arithmetic not correctly rounded)",
                          dev, d->name, what[i], (double)got[i], (double)want[i]);
    }
  }
  if (bin) clReleaseMemObject(bin);
  if (bout) clReleaseMemObject(bout);
  pthread_mutex_unlock(&s->lock);
  clb_stream_destroy(s);
  return st;
}
