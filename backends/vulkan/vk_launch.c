/* Kernel launches: maps each ag_kop to an embedded shader (the elementwise
 * sub-op or the reduction op is the pipeline's specialization constant,
 * dtypes are arguments), collapses elementwise layouts to the fewest dims,
 * and fills the argument block (vkb_args, Args in common.glsl). */
#include <math.h>
#include <string.h>

#include "vk_internal.h"

/* ew.comp writes the integer rules of the table's INT entries by hand (the
 * integer paths of K_UNARY and K_BINARY). */
_Static_assert(AG_UNARY_INT_COUNT == 4, "ew.comp implements COPY, NEG, ABS, AFFINE for integers");
_Static_assert(AG_BINARY_INT_COUNT == 11, "ew.comp implements ADD..MIN and the comparisons for integers");

static int64_t numel(const ag_koperand *o) {
  int64_t n = 1;
  for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
  return n;
}

static size_t dsize(ag_dtype dt) {
  return dt == AG_F16 || dt == AG_BF16 ? 2 : dt == AG_I64 || dt == AG_F64 ? 8 : dt == AG_U8 || dt == AG_BOOL ? 1 : 4;
}
static bool is_float(ag_dtype dt) { return dt == AG_F32 || dt == AG_F16 || dt == AG_BF16; }
static bool is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }

/* The device address of an operand, 0 when absent. */
static uint64_t addr(const void *base, size_t off) { return base ? ((const vkb_mem *)base)->addr + off : 0; }
static uint64_t oaddr(const ag_koperand *o) { return addr(o->base, o->offset); }
static uint64_t opt_addr(const ag_kernel_call *c, int i) {
  return i < c->n_operands && c->o[i].base ? oaddr(&c->o[i]) : 0;
}

/* v in dt's integer range (NaN 0); floating dtypes take the i64 range, so
 * an infinite or huge scalar never reaches an undefined conversion */
static int64_t sat_int(double v, ag_dtype dt) {
  if (dt == AG_BOOL) return v != 0;
  if (!(v == v)) return 0;
  double lo = dt == AG_I32 ? -2147483648.0 : dt == AG_U8 ? 0 : -9223372036854775808.0;
  double hi = dt == AG_I32 ? 2147483647.0 : dt == AG_U8 ? 255 : 9223372036854775807.0;
  if (v <= lo) return dt == AG_I32 ? INT32_MIN : dt == AG_U8 ? 0 : INT64_MIN;
  if (v >= hi) return dt == AG_I32 ? INT32_MAX : dt == AG_U8 ? 255 : INT64_MAX;
  return (int64_t)v;
}

/* Drops size-1 dims and merges dims contiguous in every operand into
 * a->n[0..7] (shape) and a->n[8 + 8k + d] (strides); n[40] numel, n[41]
 * dims left (0: every operand plainly contiguous). */
static void collapse(const ag_koperand *o0, int nop, const ag_koperand *const *ops, vkb_args *a) {
  int64_t *shape = a->n, *st = a->n + 8;
  int r = 0;
  for (int d = 0; d < o0->ndim; d++) {
    if (o0->shape[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < nop && merge; k++) merge = st[8 * k + r - 1] == ops[k]->strides[d] * o0->shape[d];
    if (merge) {
      shape[r - 1] *= o0->shape[d];
      for (int k = 0; k < nop; k++) st[8 * k + r - 1] = ops[k]->strides[d];
    } else {
      shape[r] = o0->shape[d];
      for (int k = 0; k < nop; k++) st[8 * k + r] = ops[k]->strides[d];
      r++;
    }
  }
  bool contig = r <= 1;
  for (int k = 0; k < nop && r == 1; k++) contig = contig && st[8 * k] == 1;
  a->n[40] = numel(o0);
  a->n[41] = contig ? 0 : r;
}

/* A kernel whose invocations loop `trips` times in sequence: refused where
 * the driver cuts loops short (lavapipe), rather than return a wrong
 * result. */
static ag_status loop_ok(ag_bstream *s, const ag_kernel_call *c, int64_t trips) {
  if (trips <= s->d->loop_limit) return AG_OK;
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "%s: a line of %lld sequential steps exceeds the loop limit of the Vulkan driver %s on "
                      "vulkan:%d (%lld iterations per invocation)",
                      c->name ? c->name : "vulkan", (long long)trips, s->d->driver, s->dev,
                      (long long)s->d->loop_limit);
}

/* Steps per dispatch of a kernel whose invocations walk `trips` rows in
 * order: all of them, or chunks of 32768 where the driver limits loops
 * (the chunks run in order, so the sums are the same). */
static int64_t chunk_of(ag_bstream *s, int64_t trips) { return trips <= s->d->loop_limit ? trips : 32768; }

/* A double scalar as f64.comp reads it (the bits, in an integer slot). */
static int64_t dbits(double v) {
  int64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

/* ---- elementwise ---- */

/* is: the exact integer scalars of AFFINE on an integer dtype (the call's
 * i[]), or NULL. */
static ag_status run_unary_is(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                              double s1, const int64_t *is) {
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args a = {0};
  const ag_koperand *ops[2] = {o, x};
  collapse(o, 2, ops, &a);
  size_t bytes = (size_t)n * dsize(o->dtype);
  bool same_buf = o->base == x->base;
  bool overlap = same_buf && o->offset < x->offset + bytes && x->offset < o->offset + bytes;
  if (a.n[41] == 0 && sub == AG_U_COPY && o->dtype == x->dtype && overlap && o->offset == x->offset) return AG_OK;
  a.p[0] = oaddr(o);
  a.p[1] = oaddr(x);
  a.k[0] = o->dtype;
  a.k[1] = x->dtype;
  a.k[4] = is != NULL;
  a.f[0] = (float)s0;
  a.f[1] = (float)s1;
  a.n[42] = is ? is[0] : 0;
  a.n[43] = is ? is[1] : 0;
  a.n[46] = dbits(s0);
  a.n[47] = dbits(s1);
  /* f64 in or out (a cast, or an op on f64): f64.comp */
  bool d = o->dtype == AG_F64 || x->dtype == AG_F64;
  return vkb_dispatch1(s, d ? VKS_UNARY_D : VKS_UNARY, sub, &a, n);
}

static ag_status run_unary(ag_bstream *s, const ag_koperand *o, const ag_koperand *x, int sub, double s0,
                           double s1) {
  return run_unary_is(s, o, x, sub, s0, s1, NULL);
}

static ag_status run_binary(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args a = {0};
  const ag_koperand *ops[3] = {o, &c->o[1], &c->o[2]};
  collapse(o, 3, ops, &a);
  a.p[0] = oaddr(o);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = oaddr(&c->o[2]);
  a.k[0] = c->o[1].dtype;
  a.k[4] = c->s[0] >= INT32_MIN && c->s[0] <= INT32_MAX && c->s[0] == floor(c->s[0]);
  a.f[0] = (float)c->s[0];
  a.f[1] = (float)c->s[1];
  a.n[42] = sat_int(c->s[0], AG_I64);
  a.n[46] = dbits(c->s[0]);
  a.n[47] = dbits(c->s[1]);
  return vkb_dispatch1(s, c->o[1].dtype == AG_F64 ? VKS_BINARY_D : VKS_BINARY, c->sub, &a, n);
}

static ag_status run_where(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args a = {0};
  const ag_koperand *ops[4] = {o, &c->o[1], &c->o[2], &c->o[3]};
  collapse(o, 4, ops, &a);
  for (int k = 0; k < 4; k++) a.p[k] = oaddr(&c->o[k]);
  a.k[1] = c->o[1].dtype;
  a.k[5] = (int)dsize(o->dtype);
  return vkb_dispatch1(s, VKS_WHERE, 0, &a, n);
}

static ag_status run_fill(ag_bstream *s, const ag_koperand *o, double v) {
  int64_t n = numel(o);
  if (!n) return AG_OK;
  vkb_args a = {0};
  const ag_koperand *ops[1] = {o};
  collapse(o, 1, ops, &a);
  a.p[0] = oaddr(o);
  a.k[0] = o->dtype;
  a.f[0] = (float)v;
  a.n[42] = o->dtype == AG_I32 ? (int64_t)(int32_t)v : sat_int(v, o->dtype);
  a.n[46] = dbits(v);
  return vkb_dispatch1(s, o->dtype == AG_F64 ? VKS_FILL_D : VKS_FILL, 0, &a, n);
}

static ag_status run_arange(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  vkb_args a = {0};
  a.p[0] = oaddr(o);
  a.k[0] = o->dtype;
  a.f[0] = (float)c->s[0];
  a.f[1] = (float)c->s[1];
  a.n[40] = numel(o);
  a.n[42] = (int64_t)c->s[0];
  a.n[43] = (int64_t)c->s[1];
  a.n[46] = dbits(c->s[0]);
  a.n[47] = dbits(c->s[1]);
  return vkb_dispatch1(s, o->dtype == AG_F64 ? VKS_ARANGE_D : VKS_ARANGE, 0, &a, a.n[40]);
}

static ag_status run_rand(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0];
  vkb_args a = {0};
  int64_t n = numel(o), per = c->op == AG_K_RAND_NORMAL ? 2 : 4;
  a.p[0] = oaddr(o);
  a.k[0] = o->dtype;
  a.k[1] = c->op == AG_K_RAND_NORMAL;
  a.f[0] = (float)c->s[0];
  a.f[1] = (float)c->s[1];
  a.n[40] = n;
  a.n[44] = (int64_t)c->seed;
  a.n[45] = (int64_t)c->offset;
  return vkb_dispatch1(s, s->d->fast_f64 && per == 2 ? VKS_RAND64 : VKS_RAND, 0, &a, (n + per - 1) / per);
}

static ag_status run_dropout(ag_bstream *s, const ag_kernel_call *c) {
  int64_t n = numel(&c->o[0]);
  vkb_args a = {0};
  bool has_mask = c->n_operands > 2 && c->o[2].base;
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = has_mask ? oaddr(&c->o[2]) : 0;
  a.k[0] = c->o[0].dtype;
  a.k[1] = c->o[1].dtype;
  a.k[2] = has_mask ? (int)c->o[2].dtype : AG_F32;
  /* 1 / (1 - p) in double as hi + lo floats: x * hi + x * lo in one fma
   * rounds like the CPU's double product */
  double scale = c->s[0] < 1 ? 1.0 / (1.0 - c->s[0]) : 0.0;
  float hi = (float)scale, lo = (float)(scale - (double)hi);
  a.f[0] = (float)c->s[0];
  a.f[1] = hi;
  a.f[2] = lo;
  a.n[40] = n;
  a.n[44] = (int64_t)c->seed;
  a.n[45] = (int64_t)c->offset;
  /* with f64 the product is the CPU's (x * scale in double, rounded);
   * only where f64 is fast (vkb_device.fast_f64) */
  memcpy(&a.n[46], &scale, sizeof scale);
  return vkb_dispatch1(s, s->d->fast_f64 ? VKS_DROPOUT64 : VKS_DROPOUT, 0, &a, (n + 3) / 4);
}

/* ---- reductions and rows ---- */

/* `groups` work-groups (one per row), split over x and y. */
static ag_status dispatch_rows(ag_bstream *s, const ag_kernel_call *c, vkb_shader sh, int spec, const vkb_args *a,
                               int64_t groups, int64_t cols) {
  if (groups <= 0) return AG_OK;
  /* up to four passes over the row in steps of VKB_WG, and the trees */
  ag_status st = loop_ok(s, c, 4 * ((cols + VKB_WG - 1) / VKB_WG) + 64);
  if (st != AG_OK) return st;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = (uint64_t)groups < maxx ? (uint64_t)groups : maxx, gy = ((uint64_t)groups + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld rows exceed the device's dispatch limits", (long long)groups);
  return vkb_dispatch(s, sh, spec, a, (uint32_t)gx, (uint32_t)gy, 1);
}

/* An f64 row kernel (f64.comp): an invocation per row, three passes. */
static ag_status rows_d(ag_bstream *s, const ag_kernel_call *c, vkb_shader sh, const vkb_args *a, int64_t rows,
                        int64_t cols) {
  ag_status st = loop_ok(s, c, 3 * cols);
  return st != AG_OK ? st : vkb_dispatch1(s, sh, 0, a, rows);
}

static ag_status run_reduce(ag_bstream *s, const ag_kernel_call *c) {
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  if (outer * inner == 0) return AG_OK;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.k[0] = c->o[0].dtype;
  a.k[1] = c->o[1].dtype;
  a.f[0] = c->sub == AG_R_SUM ? (float)c->s[0] : 1.0f;
  a.n[0] = outer;
  a.n[1] = r;
  a.n[2] = inner;
  if (c->o[1].dtype == AG_F64) { /* f64.comp: an invocation per output, in order */
    ag_status st = loop_ok(s, c, r);
    if (st != AG_OK) return st;
    a.n[46] = dbits(c->sub == AG_R_SUM ? c->s[0] : 1.0);
    return vkb_dispatch1(s, VKS_REDUCE_D, c->sub, &a, outer * inner);
  }
  /* a work-group per output pays off for long rows and is needed for long
   * strided ones (loop limits); short ones take an invocation each */
  if ((inner == 1 && r > 64) || r > 4096) return dispatch_rows(s, c, VKS_REDUCE_ROWS, c->sub, &a, outer * inner, r);
  return vkb_dispatch1(s, VKS_REDUCE_COLS, c->sub, &a, outer * inner);
}

#define SUMSQ_GROUPS 64

static ag_status run_sumsq(ag_bstream *s, const ag_kernel_call *c) {
  const ag_kmulti *mt = c->multi;
  int count = mt ? mt->count : 0;
  uint64_t part;
  ag_status st = vkb_scratch(s, sizeof(float) * SUMSQ_GROUPS * (size_t)(count ? count : 1), &part);
  if (st != AG_OK) return st;
  int64_t np = 0;
  for (int k = 0; k < count; k++) {
    int64_t n = mt->t[k].numel;
    if (!n) continue;
    int64_t groups = (n + VKB_WG - 1) / VKB_WG;
    if (groups > SUMSQ_GROUPS) groups = SUMSQ_GROUPS;
    vkb_args a = {0};
    a.p[0] = part;
    a.p[1] = addr(mt->t[k].base, mt->t[k].offset);
    a.k[1] = mt->t[k].dtype;
    a.n[0] = np;
    a.n[1] = n;
    a.n[2] = groups;
    if ((st = vkb_dispatch(s, VKS_SUMSQ_PART, 0, &a, (uint32_t)groups, 1, 1)) != AG_OK) return st;
    np += groups;
  }
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = part;
  a.n[0] = np;
  return vkb_dispatch(s, VKS_SUMSQ_FINAL, 0, &a, 1, 1, 1);
}

static ag_status run_softmax(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows) return AG_OK;
  vkb_args a = {0};
  for (int k = 0; k < (bwd ? 3 : 2); k++) a.p[k] = oaddr(&c->o[k]);
  a.k[0] = c->o[0].dtype;
  a.k[6] = c->sub;
  a.n[0] = rows;
  a.n[1] = cols;
  if (c->o[0].dtype == AG_F64) { /* f64.comp: an invocation per row */
    ag_status st = loop_ok(s, c, 3 * cols);
    if (st != AG_OK) return st;
    return vkb_dispatch1(s, bwd ? VKS_SOFTMAX_BWD_D : VKS_SOFTMAX_D, 0, &a, rows);
  }
  return dispatch_rows(s, c, bwd ? VKS_SOFTMAX_BWD : VKS_SOFTMAX, 0, &a, rows, cols);
}

static ag_status run_ce(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows) return AG_OK;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = oaddr(&c->o[2]);
  a.k[1] = c->o[1].dtype;
  a.k[3] = c->o[2].dtype;
  if (bwd) {
    a.p[3] = oaddr(&c->o[3]);
    a.n[3] = c->o[3].ndim ? c->o[3].strides[0] : 0;
  }
  a.n[0] = rows;
  a.n[1] = cols;
  a.n[2] = c->i[2];
  a.p[7] = s->err.addr;
  s->err_armed = true;
  return dispatch_rows(s, c, bwd ? VKS_CE_BWD : VKS_CE, 0, &a, rows, cols);
}

static ag_status run_layernorm(ag_bstream *s, const ag_kernel_call *c) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows) return AG_OK;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  for (int k = 2; k < 6; k++) a.p[k] = opt_addr(c, k);
  a.k[0] = c->o[1].dtype;
  a.n[0] = rows;
  a.n[1] = cols;
  a.f[0] = (float)c->s[0];
  a.n[46] = dbits(c->s[0]);
  if (c->o[1].dtype == AG_F64) return rows_d(s, c, VKS_LN_D, &a, rows, cols);
  return dispatch_rows(s, c, VKS_LN, 0, &a, rows, cols);
}

static ag_status run_layernorm_bwd(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *dx = &c->o[0];
  int64_t cols = dx->ndim ? dx->shape[dx->ndim - 1] : 1;
  int64_t rows = cols ? numel(dx) / cols : 0;
  if (!rows || !cols) return AG_OK;
  vkb_args a = {0};
  for (int k = 0; k < 5; k++) a.p[k] = oaddr(&c->o[k]);
  a.p[5] = opt_addr(c, 5);
  a.k[0] = dx->dtype;
  a.n[0] = rows;
  a.n[1] = cols;
  bool d = dx->dtype == AG_F64;
  ag_status st = d ? rows_d(s, c, VKS_LN_BWD_D, &a, rows, cols) : dispatch_rows(s, c, VKS_LN_BWD, 0, &a, rows, cols);
  if (st != AG_OK || !c->multi || c->multi->count < 1) return st;
  const ag_kmulti *mt = c->multi;
  vkb_args w = {0};
  w.p[0] = addr(mt->t[0].base, mt->t[0].offset);
  w.p[1] = mt->count > 1 ? addr(mt->t[1].base, mt->t[1].offset) : 0;
  w.p[2] = oaddr(&c->o[1]);
  w.p[3] = oaddr(&c->o[2]);
  w.p[4] = oaddr(&c->o[3]);
  w.p[5] = oaddr(&c->o[4]);
  w.k[0] = dx->dtype;
  w.n[0] = rows;
  w.n[1] = cols;
  int64_t ch = chunk_of(s, rows);
  for (int64_t r0 = 0; r0 < rows && st == AG_OK; r0 += ch) {
    w.n[2] = r0;
    w.n[3] = rows - r0 < ch ? rows - r0 : ch;
    st = vkb_dispatch1(s, d ? VKS_LN_BWD_WB_D : VKS_LN_BWD_WB, 0, &w, cols);
  }
  return st;
}

static ag_status run_rmsnorm(ag_bstream *s, const ag_kernel_call *c) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!rows || !cols) return AG_OK;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = opt_addr(c, 2);
  a.p[3] = opt_addr(c, 3);
  a.k[0] = c->o[1].dtype;
  a.n[0] = rows;
  a.n[1] = cols;
  a.f[0] = (float)c->s[0];
  a.n[46] = dbits(c->s[0]);
  if (c->o[1].dtype == AG_F64) return rows_d(s, c, VKS_RMS_D, &a, rows, cols);
  return dispatch_rows(s, c, VKS_RMS, 0, &a, rows, cols);
}

static ag_status run_rmsnorm_bwd(ag_bstream *s, const ag_kernel_call *c) {
  int64_t rows = c->i[0], cols = c->i[1];
  if (!cols) return AG_OK;
  ag_status st = AG_OK;
  vkb_args a = {0};
  for (int k = 0; k < 4; k++) a.p[k] = oaddr(&c->o[k]);
  a.p[4] = opt_addr(c, 4);
  a.k[0] = c->o[0].dtype;
  a.n[0] = rows;
  a.n[1] = cols;
  bool d = c->o[0].dtype == AG_F64;
  vkb_shader wsh = d ? VKS_RMS_BWD_W_D : VKS_RMS_BWD_W;
  if (rows) st = d ? rows_d(s, c, VKS_RMS_BWD_D, &a, rows, cols) : dispatch_rows(s, c, VKS_RMS_BWD, 0, &a, rows, cols);
  if (st != AG_OK || !c->multi || c->multi->count < 1 || !c->multi->t[0].base) return st;
  vkb_args w = {0};
  w.p[0] = addr(c->multi->t[0].base, c->multi->t[0].offset);
  w.p[1] = oaddr(&c->o[1]);
  w.p[2] = oaddr(&c->o[2]);
  w.p[3] = oaddr(&c->o[3]);
  w.k[0] = c->o[0].dtype;
  w.n[0] = rows;
  w.n[1] = cols;
  if (!rows) {
    w.n[3] = 0; /* no rows: dw = 0 */
    return vkb_dispatch1(s, wsh, 0, &w, cols);
  }
  int64_t ch = chunk_of(s, rows);
  for (int64_t r0 = 0; r0 < rows && st == AG_OK; r0 += ch) {
    w.n[2] = r0;
    w.n[3] = rows - r0 < ch ? rows - r0 : ch;
    st = vkb_dispatch1(s, wsh, 0, &w, cols);
  }
  return st;
}

static ag_status run_var(ag_bstream *s, const ag_kernel_call *c) {
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  if (!outer || !inner) return AG_OK;
  double d = (double)r - c->s[0];
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.k[0] = c->o[1].dtype;
  a.k[6] = c->sub;
  a.f[0] = d > 0 ? (float)d : 0.0f;
  a.n[0] = outer;
  a.n[1] = r;
  a.n[2] = inner;
  if (c->o[1].dtype == AG_F64) { /* f64.comp: an invocation per output */
    ag_status st = loop_ok(s, c, 2 * r);
    if (st != AG_OK) return st;
    a.n[46] = dbits(d > 0 ? d : 0.0);
    return vkb_dispatch1(s, VKS_VAR_D, 0, &a, outer * inner);
  }
  if (r > 0 && (inner == 1 || r > 4096)) return dispatch_rows(s, c, VKS_VAR_ROWS, 0, &a, outer * inner, r);
  return vkb_dispatch1(s, VKS_VAR_COLS, 0, &a, outer * inner);
}

/* Lines longer than the driver's loop limit go in several dispatches of
 * 32768 steps, carrying each line's f32 sum in scratch: the order of the
 * additions is the CPU's either way. */
static ag_status run_cumsum(ag_bstream *s, const ag_kernel_call *c) {
  int64_t outer = c->i[0], r = c->i[1], inner = c->i[2];
  if (!outer || !r || !inner) return AG_OK;
  if (c->o[1].dtype == AG_F64) { /* f64.comp: an invocation per line */
    ag_status st = loop_ok(s, c, r);
    if (st != AG_OK) return st;
    vkb_args a = {0};
    a.p[0] = oaddr(&c->o[0]);
    a.p[1] = oaddr(&c->o[1]);
    a.k[6] = c->sub;
    a.n[0] = outer;
    a.n[1] = r;
    a.n[2] = inner;
    return vkb_dispatch1(s, VKS_CUMSUM_D, 0, &a, outer * inner);
  }
  uint64_t carry;
  ag_status st = vkb_scratch(s, (size_t)(outer * inner) * sizeof(float), &carry);
  if (st != AG_OK) return st;
  int64_t chunk = r <= s->d->loop_limit ? r : 32768;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = carry;
  a.k[0] = c->o[1].dtype;
  a.k[6] = c->sub;
  a.n[0] = outer;
  a.n[1] = r;
  a.n[2] = inner;
  for (int64_t k0 = 0; k0 < r && st == AG_OK; k0 += chunk) {
    a.n[3] = k0;
    a.n[4] = r - k0 < chunk ? r - k0 : chunk;
    st = vkb_dispatch1(s, VKS_CUMSUM, 0, &a, outer * inner);
  }
  return st;
}

static ag_status run_gather(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  int64_t O = c->i[0], K = c->i[1], I = c->i[2], X = c->i[3];
  int64_t items = bwd ? O * I : O * K * I;
  if (!items || (bwd && !X)) return AG_OK;
  ag_status st = bwd ? loop_ok(s, c, X + K) : AG_OK;
  if (st != AG_OK) return st;
  const ag_koperand *ix = &c->o[2];
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = oaddr(ix);
  a.k[0] = c->o[1].dtype;
  a.k[3] = ix->dtype;
  a.n[0] = O;
  a.n[1] = K;
  a.n[2] = I;
  a.n[3] = X;
  a.n[4] = ix->strides[0];
  a.n[5] = ix->strides[1];
  a.n[6] = ix->strides[2];
  if (!bwd) {
    a.p[7] = s->err.addr;
    s->err_armed = true;
  }
  vkb_shader sh = c->o[1].dtype == AG_F64 ? (bwd ? VKS_GATHER_BWD_D : VKS_GATHER_D) : bwd ? VKS_GATHER_BWD : VKS_GATHER;
  return vkb_dispatch1(s, sh, 0, &a, items);
}

static ag_status run_topk(ag_bstream *s, const ag_kernel_call *c) {
  int64_t O = c->i[0], R = c->i[1], I = c->i[2], K = c->i[3];
  if (O * R * I == 0 || K == 0) return AG_OK;
  ag_status st = loop_ok(s, c, R);
  if (st != AG_OK) return st;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = oaddr(&c->o[2]);
  a.k[0] = c->o[1].dtype;
  a.k[6] = c->sub;
  a.n[0] = O;
  a.n[1] = R;
  a.n[2] = I;
  a.n[3] = K;
  return vkb_dispatch1(s, VKS_TOPK, 0, &a, O * R * I);
}

/* Attention (AG_K_SDPA*, attention.comp): a work-group of VKB_SDPA_ROWS
 * invocations, one query row each (forward, dq) or one key row (dk, dv),
 * walking key tiles of VKB_SDPA_Q rows (query tiles of VKB_SDPA_KV for
 * dk, dv) through shared memory. Heads above
 * VKB_SDPA_MAXD (MAXD there: rows live in per-invocation arrays) are
 * declined, and so are shapes whose sequential steps per invocation exceed
 * the driver's loop limit; the core then runs the unfused composition.
 * The forward declines whatever the backward would, so a recorded node
 * always finds its backward. */
#define VKB_SDPA_ROWS 64 /* NR there */
#define VKB_SDPA_Q 16    /* key rows per tile of the forward and dq kernels */
#define VKB_SDPA_KV 15 /* query rows per step of the dk/dv kernel */
#define VKB_SDPA_MAXD 128

static ag_status sdpa_groups(ag_bstream *s, vkb_shader sh, const vkb_args *a, int64_t groups) {
  if (groups <= 0) return AG_OK;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = (uint64_t)groups < maxx ? (uint64_t)groups : maxx, gy = ((uint64_t)groups + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld attention tiles exceed the device's dispatch limits",
                        (long long)groups);
  return vkb_dispatch(s, sh, 0, a, (uint32_t)gx, (uint32_t)gy, 1);
}

static ag_status run_sdpa(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *q = &c->o[1], *k = &c->o[2], *v = &c->o[3];
  int64_t B = q->shape[0], H = q->shape[1], Hkv = k->shape[1], T = q->shape[2], S = k->shape[2], D = q->shape[3],
          Dv = v->shape[3];
  if (D > VKB_SDPA_MAXD || Dv > VKB_SDPA_MAXD)
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %s: head size %lld/%lld above %d", c->name ? c->name : "sdpa",
                        (long long)D, (long long)Dv, VKB_SDPA_MAXD);
  if (Hkv <= 0 || H % Hkv != 0)
    return ag_error_set(AG_ERR_INTERNAL, "vulkan: %s: %lld heads over %lld key/value heads",
                        c->name ? c->name : "sdpa", (long long)H, (long long)Hkv);
  /* loop back-edges of one invocation, counted as if every loop ran in
   * full: the forward and dq walk every key once (a tile load, then D + Dv
   * steps per key); dk/dv walk the queries of every head of the group */
  int64_t tq = (T + VKB_SDPA_ROWS - 1) / VKB_SDPA_ROWS, tk = (S + VKB_SDPA_ROWS - 1) / VKB_SDPA_ROWS;
  int64_t ts = (S + VKB_SDPA_Q - 1) / VKB_SDPA_Q;
  int64_t per_row = 2 * (D + Dv) + 4;
  int64_t fwd =
      2 * (D + Dv) + ts * (2 * ((VKB_SDPA_Q * (D + Dv)) / VKB_SDPA_ROWS + 1) + VKB_SDPA_Q * per_row) + Dv;
  int64_t kvq = (T + VKB_SDPA_KV - 1) / VKB_SDPA_KV;
  int64_t bwd = 2 * (D + Dv) +
                (H / Hkv) * (kvq * (2 * ((VKB_SDPA_KV * (D + Dv)) / VKB_SDPA_ROWS + 1) + Dv + 2) + T * per_row) +
                D + Dv;
  ag_status st = loop_ok(s, c, fwd > bwd ? fwd : bwd);
  if (st != AG_OK) return st;
  const ag_koperand *m = c->n_operands > 4 && c->o[4].base ? &c->o[4] : NULL;
  vkb_args a = {0};
  int64_t dims[7] = {B, H, Hkv, T, S, D, Dv};
  memcpy(a.n, dims, sizeof dims);
  for (int d = 0; d < 4 && m; d++) a.n[7 + d] = m->strides[d];
  a.n[11] = (int64_t)c->seed;
  a.n[12] = (int64_t)c->offset;
  a.f[0] = (float)c->s[0];
  a.f[1] = (float)c->s[1];
  a.f[2] = (float)(c->s[1] < 1 ? 1.0 / (1.0 - c->s[1]) : 0.0);
  a.k[0] = q->dtype;
  a.k[1] = c->i[0] != 0;
  a.p[1] = oaddr(q);
  a.p[2] = oaddr(k);
  a.p[3] = oaddr(v);
  a.p[4] = m ? oaddr(m) : 0;
  a.p[5] = oaddr(&c->o[5]);
  if (c->op == AG_K_SDPA) {
    a.p[0] = oaddr(&c->o[0]);
    return sdpa_groups(s, VKS_SDPA, &a, B * H * tq);
  }
  if (!c->multi || c->multi->count < 4)
    return ag_error_set(AG_ERR_INTERNAL, "vulkan: %s: dq, dk, dv and out not given", c->name ? c->name : "sdpa");
  const ag_kmulti *mt = c->multi;
  a.p[0] = addr(mt->t[0].base, mt->t[0].offset);
  a.p[6] = oaddr(&c->o[0]);
  a.p[7] = addr(mt->t[3].base, mt->t[3].offset);
  a.n[13] = (int64_t)addr(mt->t[1].base, mt->t[1].offset);
  a.n[14] = (int64_t)addr(mt->t[2].base, mt->t[2].offset);
  if ((st = sdpa_groups(s, VKS_SDPA_BWD_DQ, &a, B * H * tq)) != AG_OK) return st;
  return sdpa_groups(s, VKS_SDPA_BWD_DKV, &a, B * Hkv * tk);
}

static int64_t pick(int64_t v, int64_t dflt) { return v > 0 ? v : dflt; }

static ag_status run_embedding(ag_bstream *s, const ag_kernel_call *c, bool bwd) {
  const ag_koperand *t = bwd ? &c->o[0] : &c->o[1];
  int64_t n = pick(c->i[0], numel(&c->o[2]));
  int64_t d = pick(c->i[1], t->ndim > 1 ? t->shape[1] : 1);
  int64_t v = pick(c->i[2], t->ndim ? t->shape[0] : 0);
  if (!n || !d) return AG_OK;
  ag_status st = AG_OK;
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = oaddr(&c->o[2]);
  a.p[7] = s->err.addr;
  s->err_armed = true;
  a.k[0] = c->o[1].dtype;
  a.k[3] = c->o[2].dtype;
  a.k[5] = (int)dsize(t->dtype);
  a.n[0] = n;
  a.n[1] = d;
  a.n[2] = v;
  if (!bwd) return vkb_dispatch1(s, VKS_EMB, 0, &a, n * d);
  int64_t ch = chunk_of(s, n);
  for (int64_t r0 = 0; r0 < n && st == AG_OK; r0 += ch) {
    a.n[3] = r0;
    a.n[4] = n - r0 < ch ? n - r0 : ch;
    st = vkb_dispatch1(s, t->dtype == AG_F64 ? VKS_EMB_BWD_D : VKS_EMB_BWD, 0, &a, d);
  }
  return st;
}

/* ---- optimizers ---- */

static ag_status run_optim(ag_bstream *s, const ag_kernel_call *c) {
  const ag_kmulti *mt = c->multi;
  if (!mt) return AG_OK;
  bool adam = c->op == AG_K_ADAMW;
  int per = adam ? 4 : 3;
  for (int g = 0; g + per <= mt->count; g += per) {
    int64_t n = mt->t[g].numel;
    if (!n) continue;
    vkb_args a = {0};
    for (int j = 0; j < per; j++) a.p[j] = addr(mt->t[g + j].base, mt->t[g + j].offset);
    a.p[4] = opt_addr(c, 0);
    a.p[5] = opt_addr(c, 1);
    a.n[0] = n;
    if (adam) {
      /* folded in f64 on the host exactly as the CPU backend folds them */
      a.f[0] = (float)c->s[1];
      a.f[1] = (float)c->s[2];
      a.f[2] = (float)c->s[3];
      a.f[3] = (float)(1.0 - c->s[0] * c->s[4]);
      a.f[4] = (float)(c->s[0] / c->s[5]);
      a.f[5] = (float)(1.0 / sqrt(c->s[6]));
    } else {
      for (int j = 0; j < 4; j++) a.f[j] = (float)c->s[j];
      a.k[6] = c->s[4] != 0;
      a.k[7] = c->s[5] != 0;
    }
    ag_status st = vkb_dispatch1(s, adam ? VKS_ADAMW : VKS_SGD, 0, &a, n);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

static ag_status run_nonfinite(ag_bstream *s, const ag_kernel_call *c) {
  const ag_kmulti *mt = c->multi;
  for (int k = 0; mt && k < mt->count; k++) {
    if (!mt->t[k].numel) continue;
    vkb_args a = {0};
    a.p[0] = addr(mt->t[k].base, mt->t[k].offset);
    a.p[1] = opt_addr(c, 1);
    a.p[2] = oaddr(&c->o[0]);
    a.k[0] = mt->t[k].dtype;
    a.n[0] = mt->t[k].numel;
    ag_status st = vkb_dispatch1(s, VKS_NONFINITE, 0, &a, mt->t[k].numel);
    if (st != AG_OK) return st;
  }
  return AG_OK;
}

/* ---- GEMM ---- */

static void mat_dims(const ag_koperand *o, int64_t *b, int64_t *r, int64_t *cc, int64_t *sb, int64_t *sr,
                     int64_t *sc) {
  int nd = o->ndim;
  *b = nd >= 3 ? o->shape[nd - 3] : 1;
  *sb = nd >= 3 ? o->strides[nd - 3] : 0;
  *r = o->shape[nd - 2];
  *cc = o->shape[nd - 1];
  *sr = o->strides[nd - 2];
  *sc = o->strides[nd - 1];
}

static ag_status run_matmul(ag_bstream *s, const ag_kernel_call *c) {
  const ag_koperand *o = &c->o[0], *x = &c->o[1], *y = &c->o[2];
  int64_t B, M, K, N, xb, xr, xc, yb, yr, yc, t0, t1, t2;
  mat_dims(x, &B, &M, &K, &xb, &xr, &xc);
  mat_dims(y, &t0, &t1, &N, &yb, &yr, &yc);
  mat_dims(o, &B, &M, &N, &t0, &t1, &t2);
  if (!B || !M || !N) return AG_OK;
  if (!K) {
    /* alpha * (empty product) = 0: C = beta * C */
    if (c->s[1] == 0) return run_fill(s, o, 0.0);
    return run_unary(s, o, o, AG_U_AFFINE, c->s[1], 0.0);
  }
  ag_status lst = loop_ok(s, c, o->dtype == AG_F64 ? K : (K + 15) / 16);
  if (lst != AG_OK) return lst;
  vkb_args a = {0};
  a.p[0] = oaddr(o);
  a.p[1] = oaddr(x);
  a.p[2] = oaddr(y);
  a.k[0] = o->dtype;
  a.k[1] = x->dtype;
  a.k[2] = y->dtype;
  a.n[0] = M;
  a.n[1] = N;
  a.n[2] = K;
  a.n[3] = B > 1 ? xb : 0;
  a.n[4] = xr;
  a.n[5] = xc;
  a.n[6] = B > 1 ? yb : 0;
  a.n[7] = yr;
  a.n[8] = yc;
  a.f[0] = (float)c->s[0];
  a.f[1] = (float)c->s[1];
  if (o->dtype == AG_F64) { /* f64.comp: an invocation per output */
    a.n[9] = B;
    a.n[46] = dbits(c->s[0]);
    a.n[47] = dbits(c->s[1]);
    return vkb_dispatch1(s, VKS_GEMM_D, 0, &a, B * M * N);
  }
  /* 64 x 64 tiles; grids beyond the device's limits in y (rows) and z
   * (batches) are split into several dispatches */
  int64_t tx = (N + 63) / 64, ty = (M + 63) / 64;
  const VkPhysicalDeviceLimits *lim = &s->d->props.limits;
  if (tx > (int64_t)lim->maxComputeWorkGroupCount[0])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: matmul with %lld columns exceeds the dispatch limits", (long long)N);
  int64_t ymax = lim->maxComputeWorkGroupCount[1], zmax = lim->maxComputeWorkGroupCount[2];
  for (int64_t b0 = 0; b0 < B; b0 += zmax)
    for (int64_t y0 = 0; y0 < ty; y0 += ymax) {
      a.n[9] = b0;
      a.n[10] = y0;
      int64_t nb = B - b0 < zmax ? B - b0 : zmax, ny = ty - y0 < ymax ? ty - y0 : ymax;
      ag_status st = vkb_dispatch(s, VKS_GEMM, 0, &a, (uint32_t)tx, (uint32_t)ny, (uint32_t)nb);
      if (st != AG_OK) return st;
    }
  return AG_OK;
}

/* ---- vision (f32) ---- */

static ag_status run_conv(ag_bstream *s, const ag_kernel_call *c) {
  const bool fwd = c->op == AG_K_CONV2D, bin = c->op == AG_K_CONV2D_BWD_INPUT;
  const ag_koperand *X = fwd ? &c->o[1] : bin ? &c->o[0] : &c->o[2], *Y = fwd ? &c->o[0] : &c->o[1],
                    *Wt = fwd || bin ? &c->o[2] : &c->o[0];
  ag_conv_geom g = ag_conv_geom_of(c, X, Y, Wt);
  const int64_t geo[16] = {g.N, g.C, g.H, g.W, g.Co, g.Ho, g.Wo, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.G};
  vkb_args a = {0};
  memcpy(a.n, geo, sizeof geo);
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = oaddr(&c->o[2]);
  const int64_t Cg = g.C / g.G, Cog = g.Co / g.G;
  ag_status st;
  if (fwd) {
    a.p[3] = opt_addr(c, 3);
    if ((st = loop_ok(s, c, Cg * g.kh * g.kw + Cg * g.kh + Cg)) != AG_OK) return st;
    return vkb_dispatch1(s, VKS_CONV, 0, &a, g.N * g.Co * g.Ho * g.Wo);
  }
  if (bin) {
    if ((st = loop_ok(s, c, Cog * g.kh * g.kw + Cog * g.kh + Cog)) != AG_OK) return st;
    return vkb_dispatch1(s, VKS_CONV_BWD_IN, 0, &a, g.N * g.C * g.H * g.W);
  }
  return dispatch_rows(s, c, VKS_CONV_BWD_W, 0, &a, g.Co * Cg * g.kh * g.kw, g.N * g.Ho * g.Wo);
}

static ag_status run_pool(ag_bstream *s, const ag_kernel_call *c) {
  const bool bwd = c->op == AG_K_POOL2D_BWD;
  const ag_koperand *X = bwd ? &c->o[0] : &c->o[1], *Y = bwd ? &c->o[1] : &c->o[0];
  vkb_args a = {0};
  const int64_t m[11] = {X->shape[0] * X->shape[1], X->shape[2], X->shape[3], Y->shape[2], Y->shape[3],
                         (int64_t)c->s[0], (int64_t)c->s[1], (int64_t)c->s[2], (int64_t)c->s[3],
                         (int64_t)c->s[4], (int64_t)c->s[5]};
  memcpy(a.n, m, sizeof m);
  a.k[6] = c->sub;
  a.k[7] = c->s[6] != 0;
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = c->sub == AG_P_MAX ? oaddr(&c->o[2]) : 0;
  /* window loops: at most the input plane for adaptive pooling */
  ag_status st = loop_ok(s, c, c->sub == AG_P_ADAPTIVE_AVG ? m[1] * m[2] + m[1] : m[9] * m[10] + m[9]);
  if (st != AG_OK) return st;
  return vkb_dispatch1(s, bwd ? VKS_POOL_BWD : VKS_POOL, 0, &a, m[0] * (bwd ? m[1] * m[2] : m[3] * m[4]));
}

static ag_status run_bn(ag_bstream *s, const ag_kernel_call *c) {
  const int64_t N = c->i[0], C = c->i[1], HW = c->i[2];
  vkb_args a = {0};
  a.p[0] = oaddr(&c->o[0]);
  a.p[1] = oaddr(&c->o[1]);
  a.p[2] = opt_addr(c, 2);
  a.p[3] = c->sub == 1 ? opt_addr(c, 3) : 0;
  a.k[6] = c->sub;
  if (c->op == AG_K_BN_STATS) {
    if (C <= 0) return AG_OK;
    a.n[0] = N;
    a.n[1] = C;
    a.n[2] = HW;
    return dispatch_rows(s, c, VKS_BN_STATS, 0, &a, C, N * HW);
  }
  a.n[0] = N * C * HW;
  a.n[1] = C;
  a.n[2] = HW > 0 ? HW : 1;
  return vkb_dispatch1(s, VKS_BN_APPLY, 0, &a, a.n[0]);
}

#include "vk_resample.inc"

ag_status vkb_launch_locked(ag_bstream *s, const ag_kernel_call *c) {
  /* f64 runs only where the device has shaderFloat64; a cast into f64 is
   * asked of supports() by its input's dtype, so it is refused here */
  for (int k = 0; k < c->n_operands && k < AG_KMAX_OPERANDS && !s->d->f64; k++)
    if (c->o[k].base && c->o[k].dtype == AG_F64)
      return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %s: f64 needs shaderFloat64, which vulkan:%d lacks",
                          c->name ? c->name : "launch", s->dev);
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
    case AG_K_EMBEDDING: return run_embedding(s, c, false);
    case AG_K_EMBEDDING_BWD: return run_embedding(s, c, true);
    case AG_K_DROPOUT: return run_dropout(s, c);
    case AG_K_ADAMW:
    case AG_K_SGD: return run_optim(s, c);
    case AG_K_NONFINITE_CHECK: return run_nonfinite(s, c);
    case AG_K_SUMSQ: return run_sumsq(s, c);
    case AG_K_RMSNORM: return run_rmsnorm(s, c);
    case AG_K_RMSNORM_BWD: return run_rmsnorm_bwd(s, c);
    case AG_K_VAR: return run_var(s, c);
    case AG_K_CUMSUM: return run_cumsum(s, c);
    case AG_K_GATHER: return run_gather(s, c, false);
    case AG_K_GATHER_BWD: return run_gather(s, c, true);
    case AG_K_TOPK: return run_topk(s, c);
    case AG_K_SDPA:
    case AG_K_SDPA_BWD: return run_sdpa(s, c);
    case AG_K_CONV2D:
    case AG_K_CONV2D_BWD_INPUT:
    case AG_K_CONV2D_BWD_WEIGHT: return run_conv(s, c);
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return run_pool(s, c);
    case AG_K_BN_STATS:
    case AG_K_BN_APPLY: return run_bn(s, c);
    case AG_K_GROUP_NORM: VK_KCALL(group_norm);
    case AG_K_GROUP_NORM_BWD: VK_KCALL(group_norm_bwd);
    case AG_K_INTERPOLATE: VK_KCALL(interpolate);
    case AG_K_INTERPOLATE_BWD: VK_KCALL(interpolate_bwd);
    default: break;
  }
  return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %s: kernel op %d is not implemented", c->name ? c->name : "launch",
                      (int)c->op);
}

/* Exactly what vkb_launch runs; f64 (f64.comp) where the device has
 * shaderFloat64. */
bool vkb_supports(int dev, ag_kop op, int sub, ag_dtype dt) {
  bool fl = is_float(dt), in = is_int(dt);
  bool f64 = dt == AG_F64 && vkb_dev(dev)->f64;
  switch (op) {
    /* fills and where move f64 as 8-byte words */
    case AG_K_FILL:
    case AG_K_WHERE: return fl || in || f64;
    case AG_K_ARANGE: return fl || f64 || (in && dt != AG_BOOL);
    /* i32 and i64 indices (sub 1 asks for i64); rows are copied as bits */
    case AG_K_EMBEDDING: return (sub == 0 || sub == 1) && (fl || in || f64);
    case AG_K_UNARY: {
      const ag_unary_info *u = ag_unary_info_of(sub);
      return u && (fl || f64 || (in && u->ints == AG_OPT_INT));
    }
    case AG_K_BINARY: {
      const ag_binary_info *b = ag_binary_info_of(sub);
      return b && (fl || f64 || (in && b->ints == AG_OPT_INT));
    }
    case AG_K_REDUCE:
      return sub >= 0 && sub < AG_REDUCE_COUNT && (fl || in || f64) &&
             !(sub == AG_R_SUM && (dt == AG_U8 || dt == AG_BOOL));
    case AG_K_SOFTMAX:
    case AG_K_SOFTMAX_BWD: return (sub == 0 || sub == 1) && (fl || f64);
    case AG_K_EMBEDDING_BWD: return (fl || f64) && (sub == 0 || sub == 1);
    case AG_K_CROSS_ENTROPY:
    case AG_K_CROSS_ENTROPY_BWD: return fl && (sub == 0 || sub == 1);
    case AG_K_RAND_UNIFORM:
    case AG_K_RAND_NORMAL: return fl && sub == 0;
    case AG_K_MATMUL: return (fl || f64) && sub == 0;
    case AG_K_LAYERNORM:
    case AG_K_LAYERNORM_BWD: return fl || f64;
    case AG_K_DROPOUT:
    case AG_K_NONFINITE_CHECK:
    case AG_K_SUMSQ: return fl;
    case AG_K_ADAMW:
    case AG_K_SGD: return dt == AG_F32;
    case AG_K_RMSNORM:
    case AG_K_RMSNORM_BWD: return (fl || f64) && sub == 0;
    case AG_K_VAR:
    case AG_K_CUMSUM: return (fl || f64) && (sub == 0 || sub == 1);
    case AG_K_GATHER:
    case AG_K_GATHER_BWD: return (fl || f64) && (sub == 0 || sub == 1);
    case AG_K_TOPK: return fl && (sub == 0 || sub == 1);
    case AG_K_SDPA: /* attention.comp; heads above 128 declined at launch */
    case AG_K_SDPA_BWD: return fl && sub == 0;
    case AG_K_GROUP_NORM:
    case AG_K_GROUP_NORM_BWD: return (fl || f64) && sub == 0;
    case AG_K_INTERPOLATE:
    case AG_K_INTERPOLATE_BWD: return (fl || f64) && (sub == AG_KV_INTERP_NEAREST || sub == AG_KV_INTERP_BILINEAR);
    /* vision ops: f32, as on the CPU */
    case AG_K_CONV2D:
    case AG_K_CONV2D_BWD_INPUT:
    case AG_K_CONV2D_BWD_WEIGHT: return dt == AG_F32;
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD: return dt == AG_F32 && sub >= 0 && sub < AG_POOL_OP_COUNT;
    case AG_K_BN_STATS:
    case AG_K_BN_APPLY: return dt == AG_F32 && (sub == 0 || sub == 1);
    default: return false;
  }
}
