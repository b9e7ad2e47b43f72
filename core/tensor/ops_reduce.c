/* The ops front end for reductions (sum, mean, max, min, argmax, var, std,
 * cumsum) and indexing (gather, index_select, topk): plan the reduced
 * shape, launch one kernel call, record the autograd node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/ops_internal.h"
#include "tensor/record.h"
#include "tensor/autocast.h"

/* ---------------- reductions ---------------- */

typedef struct reduce_plan {
  int64_t outer, r, inner;
  int out_ndim;
  int64_t out_shape[AG_MAX_DIMS];  /* keepdim or not, as requested */
  int64_t keep_shape[AG_MAX_DIMS]; /* keepdim=true shape */
  ag_tensor *src;                  /* contiguous source (owned) */
} reduce_plan;

static bool plan_reduce(const char *name, ag_tensor *a, int n_dims, const int *dims, bool keepdim, reduce_plan *pl) {
  bool red[AG_MAX_DIMS] = {0};
  if (n_dims < 0 || n_dims > a->ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: %d dims given for a %d-d tensor", name, n_dims, a->ndim);
    return false;
  }
  if (n_dims == 0 || !dims) {
    for (int i = 0; i < a->ndim; i++) red[i] = true;
  } else {
    for (int k = 0; k < n_dims; k++) {
      int d = dims[k] < 0 ? dims[k] + a->ndim : dims[k];
      if (d < 0 || d >= a->ndim) {
        ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dims[k], a->ndim);
        return false;
      }
      if (red[d]) {
        ag_error_set(AG_ERR_SHAPE, "%s: dim %d appears more than once in the dim list", name, d);
        return false;
      }
      red[d] = true;
    }
  }
  pl->out_ndim = 0;
  int first = -1, last = -1;
  for (int i = 0; i < a->ndim; i++) {
    pl->keep_shape[i] = red[i] ? 1 : a->shape[i];
    if (red[i]) {
      if (first < 0) first = i;
      last = i;
      if (keepdim) pl->out_shape[pl->out_ndim++] = 1;
    } else {
      pl->out_shape[pl->out_ndim++] = a->shape[i];
    }
  }
  bool block = true; /* reduced dims form one consecutive range */
  for (int i = first; i >= 0 && i <= last; i++)
    if (!red[i]) block = false;
  if (first < 0) { /* 0-d tensor: reduce over nothing */
    pl->outer = a->numel;
    pl->r = 1;
    pl->inner = 1;
    pl->src = ag__raw_contiguous(a);
    return pl->src != NULL;
  }
  if (block) {
    pl->outer = 1;
    pl->r = 1;
    pl->inner = 1;
    for (int i = 0; i < first; i++) pl->outer *= a->shape[i];
    for (int i = first; i <= last; i++) pl->r *= a->shape[i];
    for (int i = last + 1; i < a->ndim; i++) pl->inner *= a->shape[i];
    pl->src = ag__raw_contiguous(a);
    return pl->src != NULL;
  }
  /* Move the kept dims first, then the reduced ones, and copy. */
  int perm[AG_MAX_DIMS], k = 0;
  pl->outer = 1;
  pl->r = 1;
  pl->inner = 1;
  for (int i = 0; i < a->ndim; i++)
    if (!red[i]) {
      perm[k++] = i;
      pl->outer *= a->shape[i];
    }
  for (int i = 0; i < a->ndim; i++)
    if (red[i]) {
      perm[k++] = i;
      pl->r *= a->shape[i];
    }
  ag_no_grad_begin();
  ag_tensor *p = ag_permute(a, perm);
  pl->src = p ? ag_contiguous(p) : NULL;
  ag_tensor_release(p);
  ag_grad_mode_end();
  return pl->src != NULL;
}

/* Elements per output of a reduction of a over dims (all dims when none
 * are given); dims out of range count as nothing (plan_reduce reports them). */
static int64_t reduced_count(const ag_tensor *a, int n_dims, const int *dims) {
  int64_t r = 1;
  if (n_dims <= 0 || !dims) {
    for (int i = 0; i < a->ndim; i++) r *= a->shape[i];
    return r;
  }
  for (int k = 0; k < n_dims && k < a->ndim; k++) {
    int d = dims[k] < 0 ? dims[k] + a->ndim : dims[k];
    if (d >= 0 && d < a->ndim) r *= a->shape[d];
  }
  return r;
}

/* The gradient parameters every reduction records (sum, mean, max, min,
 * var, std): the keepdim shape and the reduced dims exactly (n_dims == 0
 * means all), so the backward can tell a reduced size-1 dim from a kept
 * one. The caller adds its own scalars. */
static void reduce_gparams(ag_gparams *p, const ag_tensor *a, const reduce_plan *pl, int n_dims, const int *dims,
                           bool keepdim) {
  memset(p, 0, sizeof *p);
  p->keepdim = keepdim;
  p->ndim = a->ndim;
  memcpy(p->shape, pl->keep_shape, sizeof(int64_t) * (size_t)a->ndim);
  p->n_dims = 0;
  if (n_dims > 0 && dims) {
    bool seen[AG_MAX_DIMS] = {0};
    for (int k = 0; k < n_dims; k++) {
      int d = dims[k] < 0 ? dims[k] + a->ndim : dims[k];
      if (!seen[d]) p->dims[p->n_dims++] = d;
      seen[d] = true;
    }
  }
}

static ag_tensor *reduce_impl(const char *name, ag_reduce_op rop, ag_gop gop, ag_tensor *a, int n_dims, const int *dims,
                         bool keepdim, bool mean) {
  if (ag__null_args(name, 1, &a)) return NULL;
  ag_devstate *ds = ag__ds(a);
  if (mean && !ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if (!ag__supported(ds, AG_K_REDUCE, rop, a->dtype, name)) return NULL;
  if (rop == AG_R_ARGMAX && reduced_count(a, n_dims, dims) > INT32_MAX) {
    /* checked before any copy: the index would wrap (kernels index in i64) */
    ag_error_set(AG_ERR_SHAPE, "%s: %lld elements per result, but its index is i32 (at most 2^31-1)", name,
                 (long long)reduced_count(a, n_dims, dims));
    return NULL;
  }
  reduce_plan pl;
  if (!plan_reduce(name, a, n_dims, dims, keepdim, &pl)) return NULL;
  if (pl.r == 0 && rop != AG_R_SUM) {
    ag_tensor_release(pl.src);
    ag_error_set(AG_ERR_SHAPE, "%s: reduction over an empty dim has no identity", name);
    return NULL;
  }
  ag_dtype odt = rop == AG_R_ARGMAX ? AG_I32 : a->dtype;
  ag_tensor *out = ag__tensor_new(ds, odt, pl.out_ndim, pl.out_shape);
  ag_status st = out ? AG_OK : AG_ERR_OOM;
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_REDUCE, rop, name, 2, (ag_tensor *[]){out, NULL});
    ag__operand(&c.o[1], pl.src);
    c.i[0] = pl.outer;
    c.i[1] = pl.r;
    c.i[2] = pl.inner;
    c.s[0] = mean ? 1.0 / (double)pl.r : 1.0;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(pl.src);
  if (st != AG_OK) return ag__op_finish(out, st);
  if ((int)gop < 0) return out;
  ag_gparams p;
  reduce_gparams(&p, a, &pl, n_dims, dims, keepdim);
  p.s[0] = mean ? (double)pl.r : 1.0;
  if (gop == AG_G_MAX || gop == AG_G_MIN) {
    ag_tensor *kv = ag__raw_view(out, a->ndim, pl.keep_shape);
    ag_tensor *sv[2] = {a, kv};
    ag_tensor *r = ag__op_record(out, gop, 1, &a, 2, sv, &p);
    ag_tensor_release(kv);
    return r;
  }
  return ag__op_record(out, gop, 1, &a, 0, NULL, &p);
}

static ag_tensor *reduce(const char *name, ag_reduce_op rop, ag_gop gop, ag_tensor *a, int n_dims, const int *dims,
                         bool keepdim, bool mean) {
  if (a && rop == AG_R_SUM && !mean && (a->dtype == AG_BOOL || a->dtype == AG_U8)) {
    /* PyTorch: the sum of bool or u8 is i64 (a count cannot overflow a byte) */
    ag_tensor *w = ag_cast(a, AG_I64);
    ag_tensor *r = w ? reduce_impl(name, rop, gop, w, n_dims, dims, keepdim, mean) : NULL;
    ag_tensor_release(w);
    return r;
  }
  if (!AC_ON() || !a || rop != AG_R_SUM) return reduce_impl(name, rop, gop, a, n_dims, dims, keepdim, mean);
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 1, &a, &ac)) return NULL;
  return ag__ac_end(&ac, reduce_impl(name, rop, gop, a, n_dims, dims, keepdim, mean));
}

ag_tensor *ag_sum(ag_tensor *a, int n, const int *dims, bool keepdim) {
  return reduce("ag_sum", AG_R_SUM, AG_G_SUM, a, n, dims, keepdim, false);
}
ag_tensor *ag_mean(ag_tensor *a, int n, const int *dims, bool keepdim) {
  return reduce("ag_mean", AG_R_SUM, AG_G_MEAN, a, n, dims, keepdim, true);
}
ag_tensor *ag_max(ag_tensor *a, int n, const int *dims, bool keepdim) {
  return reduce("ag_max", AG_R_MAX, AG_G_MAX, a, n, dims, keepdim, false);
}
ag_tensor *ag_min(ag_tensor *a, int n, const int *dims, bool keepdim) {
  return reduce("ag_min", AG_R_MIN, AG_G_MIN, a, n, dims, keepdim, false);
}
ag_tensor *ag_argmax(ag_tensor *a, int dim, bool keepdim) {
  /* The kernels write i32 indices (kops.h); the result is i64 as in
   * PyTorch, one cast kernel over the (small) index tensor. */
  ag_tensor *i = reduce("ag_argmax", AG_R_ARGMAX, (ag_gop)-1, a, 1, &dim, keepdim, false);
  if (!i) return NULL;
  ag_tensor *r = ag_cast(i, AG_I64);
  ag_tensor_release(i);
  return r;
}

/* var and std (PyTorch's correction: divide by max(0, N - correction)) in
 * their own two-pass kernel. */
static ag_tensor *var_impl(const char *name, int sq, ag_tensor *a, int n_dims, const int *dims, double correction,
                           bool keepdim) {
  if (ag__null_args(name, 1, &a)) return NULL;
  ag_devstate *ds = ag__ds(a);
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if (!isfinite(correction)) {
    ag_error_set(AG_ERR_INVALID, "%s: correction must be finite", name);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_VAR, sq, a->dtype, name)) return NULL;
  reduce_plan pl;
  if (!plan_reduce(name, a, n_dims, dims, keepdim, &pl)) return NULL;
  ag_tensor *out = ag__tensor_new(ds, a->dtype, pl.out_ndim, pl.out_shape);
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_VAR, sq, name, 2, (ag_tensor *[]){out, NULL});
    ag__operand(&c.o[1], pl.src);
    c.i[0] = pl.outer;
    c.i[1] = pl.r;
    c.i[2] = pl.inner;
    c.s[0] = correction;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(pl.src);
  if (st != AG_OK) return ag__op_finish(out, st);
  ag_gparams p;
  reduce_gparams(&p, a, &pl, n_dims, dims, keepdim);
  p.i[0] = sq;
  p.s[0] = (double)pl.r - correction > 0 ? (double)pl.r - correction : 0;
  /* std's gradient divides by the result: saved in the keepdim shape */
  ag_tensor *kv = sq ? ag__raw_view(out, a->ndim, pl.keep_shape) : NULL;
  ag_tensor *r = ag__op_record(out, AG_G_VAR, 1, &a, sq ? 1 : 0, &kv, &p);
  ag_tensor_release(kv);
  return r;
}

ag_tensor *ag_var(ag_tensor *a, int n_dims, const int *dims, double correction, bool keepdim) {
  return var_impl("ag_var", 0, a, n_dims, dims, correction, keepdim);
}
ag_tensor *ag_std(ag_tensor *a, int n_dims, const int *dims, double correction, bool keepdim) {
  return var_impl("ag_std", 1, a, n_dims, dims, correction, keepdim);
}

/* Inclusive prefix sums along dim (reverse: suffix sums, the gradient). */
ag_tensor *ag__cumsum(ag_tensor *a, int dim, bool reverse) {
  const char *name = reverse ? "ag_cumsum backward" : "ag_cumsum";
  if (ag__null_args(name, 1, &a)) return NULL;
  ag_devstate *ds = ag__ds(a);
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  int nd = a->ndim ? a->ndim : 1, d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, a->ndim);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_CUMSUM, reverse ? 1 : 0, a->dtype, name)) return NULL;
  int64_t outer = 1, r = a->ndim ? a->shape[d] : 1, inner = 1;
  for (int i = 0; i < d && i < a->ndim; i++) outer *= a->shape[i];
  for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
  ag_tensor *src = ag__raw_contiguous(a);
  ag_tensor *out = src ? ag__tensor_new(ds, a->dtype, a->ndim, a->shape) : NULL;
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_CUMSUM, reverse ? 1 : 0, name, 2, (ag_tensor *[]){out, src});
    c.i[0] = outer;
    c.i[1] = r;
    c.i[2] = inner;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(src);
  if (st != AG_OK) return ag__op_finish(out, st);
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  p.i[1] = reverse;
  return ag__op_record(out, AG_G_CUMSUM, 1, &a, 0, NULL, &p);
}

ag_tensor *ag_cumsum(ag_tensor *a, int dim) { return ag__cumsum(a, dim, false); }

/* gather and index_select share one kernel: x viewed as [O, X, In], the
 * index as [O, K, In] with strides (index_select broadcasts its 1-D index
 * with strides 0, 1, 0). One launch of it: AG_K_GATHER reads src (x) into
 * dst, AG_K_GATHER_BWD scatter-adds src (the gradient) into dst. */
static ag_status gather_launch(ag_kop op, const char *name, ag_devstate *ds, ag_tensor *dst, ag_tensor *src,
                               ag_tensor *ic, bool sel, int64_t O, int64_t K, int64_t In, int64_t X) {
  ag_kernel_call c;
  ag__kcall_init(&c, op, ic->dtype == AG_I64 ? 1 : 0, name, 3, (ag_tensor *[]){dst, src, ic});
  c.o[2].ndim = 3;
  c.o[2].shape[0] = O;
  c.o[2].shape[1] = K;
  c.o[2].shape[2] = In;
  c.o[2].strides[0] = sel ? 0 : K * In;
  c.o[2].strides[1] = sel ? 1 : In;
  c.o[2].strides[2] = sel ? 0 : 1;
  c.i[0] = O;
  c.i[1] = K;
  c.i[2] = In;
  c.i[3] = X;
  return ag__launch(ds, &c);
}

/* The forward (AG_K_GATHER) writes the [O, K, In] result from x. */
static ag_tensor *gather_run(const char *name, ag_devstate *ds, ag_tensor *xs, ag_tensor *index, bool sel,
                             int ndim, const int64_t *oshape, int64_t O, int64_t K, int64_t In, int64_t X) {
  ag_tensor *ic = ag__index_operand(ds, AG_K_GATHER, xs->dtype, index);
  ag_tensor *out = ic ? ag__tensor_new(ds, xs->dtype, ndim, oshape) : NULL;
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && out->numel) st = gather_launch(AG_K_GATHER, name, ds, out, xs, ic, sel, O, K, In, X);
  ag_tensor_release(ic);
  return st == AG_OK ? out : ag__op_finish(out, st);
}

static bool gather_check(const char *name, ag_tensor *x, ag_tensor *index, int dim, int *out_d, ag_devstate **out_ds) {
  ag_tensor *in[2] = {x, index};
  if (ag__null_args(name, 2, in)) return false;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return false;
  if (index->dtype != AG_I32 && index->dtype != AG_I64) {
    ag_error_set(AG_ERR_DTYPE, "%s: index must be i64 or i32, got %s", name, ag_dtype_name(index->dtype));
    return false;
  }
  if (!ag_dtype_is_float(x->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(x->dtype));
    return false;
  }
  int nd = x->ndim ? x->ndim : 1, d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, x->ndim);
    return false;
  }
  if (!ag__supported(ds, AG_K_GATHER, 0, x->dtype, name)) return false;
  *out_d = d;
  *out_ds = ds;
  return true;
}

static ag_tensor *gather_record(ag_tensor *out, ag_tensor *x, ag_tensor *index, int d, bool sel) {
  if (!out) return NULL;
  ag_tensor *in[2] = {x, index};
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  p.i[1] = sel;
  return ag__op_record(out, AG_G_GATHER, 2, in, 0, NULL, &p);
}

ag_tensor *ag_gather(ag_tensor *x, int dim, ag_tensor *index) {
  static const char name[] = "ag_gather";
  int d;
  ag_devstate *ds;
  if (!gather_check(name, x, index, dim, &d, &ds)) return NULL;
  char b1[96], b2[96];
  if (index->ndim != x->ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: index %s must have as many dims as input %s", name,
                 ag_tensor_describe(index, b1, sizeof b1), ag_tensor_describe(x, b2, sizeof b2));
    return NULL;
  }
  for (int i = 0; i < x->ndim; i++)
    if (i != d && index->shape[i] > x->shape[i]) {
      ag_error_set(AG_ERR_SHAPE, "%s: index %s is larger than input %s in dim %d", name,
                   ag_tensor_describe(index, b1, sizeof b1), ag_tensor_describe(x, b2, sizeof b2), i);
      return NULL;
    }
  int64_t O = 1, K = x->ndim ? index->shape[d] : 1, In = 1, X = x->ndim ? x->shape[d] : 1;
  for (int i = 0; i < d && i < x->ndim; i++) O *= index->shape[i];
  for (int i = d + 1; i < x->ndim; i++) In *= index->shape[i];
  /* x narrowed to the index's extent in the other dims, then contiguous */
  ag_no_grad_begin();
  ag_tensor *v = ag__alias(x);
  for (int i = 0; v && i < x->ndim; i++)
    if (i != d && index->shape[i] < x->shape[i]) {
      ag_tensor *s = ag_slice(v, i, 0, index->shape[i], 1);
      ag_tensor_release(v);
      v = s;
    }
  ag_tensor *xs = v ? ag_contiguous(v) : NULL;
  ag_tensor_release(v);
  ag_grad_mode_end();
  ag_tensor *out = xs ? gather_run(name, ds, xs, index, false, index->ndim, index->shape, O, K, In, X) : NULL;
  ag_tensor_release(xs);
  return gather_record(out, x, index, d, false);
}

ag_tensor *ag_index_select(ag_tensor *x, int dim, ag_tensor *index) {
  static const char name[] = "ag_index_select";
  int d;
  ag_devstate *ds;
  if (!gather_check(name, x, index, dim, &d, &ds)) return NULL;
  if (index->ndim > 1) {
    char b1[96];
    ag_error_set(AG_ERR_SHAPE, "%s: index %s must be 1-d", name, ag_tensor_describe(index, b1, sizeof b1));
    return NULL;
  }
  int64_t O = 1, K = index->numel, In = 1, X = x->ndim ? x->shape[d] : 1, oshape[AG_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) oshape[i] = i == d ? K : x->shape[i];
  for (int i = 0; i < d && i < x->ndim; i++) O *= x->shape[i];
  for (int i = d + 1; i < x->ndim; i++) In *= x->shape[i];
  if (x->ndim == 0 && index->ndim == 0) K = 1;
  ag_tensor *xs = ag__raw_contiguous(x);
  ag_tensor *out = xs ? gather_run(name, ds, xs, index, true, x->ndim, oshape, O, K, In, X) : NULL;
  ag_tensor_release(xs);
  return gather_record(out, x, index, d, true);
}

ag_tensor *ag_index_select_host(ag_tensor *x, int dim, ag_tensor *index) {
  static const char name[] = "ag_index_select_host";
  ag_tensor *in[2] = {x, index};
  if (ag__null_args(name, 2, in)) return NULL;
  ag_backend_info bi; /* the index is read where it lies: host memory this process addresses (the cpu's) */
  if (ag_backend_info_get(ag_tensor_device(index).backend, &bi) != AG_OK || !bi.host_memory || !bi.addressable) {
    ag_error_set(AG_ERR_DEVICE, "%s: the index must be on the cpu (host memory)", name);
    return NULL;
  }
  if ((index->dtype != AG_I32 && index->dtype != AG_I64) || index->ndim != 1 || x->ndim == 0) {
    ag_error_set(AG_ERR_INVALID, "%s: expected a 1-d i64 or i32 index and a tensor with dims", name);
    return NULL;
  }
  int d = dim < 0 ? dim + x->ndim : dim;
  if (d < 0 || d >= x->ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, x->ndim);
    return NULL;
  }
  const int64_t n = x->shape[d], m = index->numel;
  int64_t stackbuf[64], *v = m <= 64 ? stackbuf : malloc((size_t)m * sizeof *v);
  if (!v) {
    ag_error_set(AG_ERR_OOM, "%s: no host memory for %lld indices", name, (long long)m);
    return NULL;
  }
  ag_tensor *wide = index->dtype == AG_I64 ? NULL : ag_cast(index, AG_I64), *src = wide ? wide : index;
  ag_status st = (wide || index->dtype == AG_I64) ? ag_to_host(src, v, (size_t)m * sizeof *v) : ag_last_status();
  bool neg = false;
  for (int64_t k = 0; st == AG_OK && k < m; k++) {
    if (v[k] < -n || v[k] >= n)
      st = ag_error_set(AG_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with size %lld", name,
                        (long long)v[k], d, (long long)n);
    else if (v[k] < 0) {
      v[k] += n;
      neg = true;
    }
  }
  ag_tensor *out = NULL;
  if (st == AG_OK) {
    ag_tensor *wrapped = neg ? ag_from_host(ag_tensor_device(index), AG_I64, 1, &m, v) : NULL;
    if (!neg || wrapped) out = ag_index_select(x, d, wrapped ? wrapped : index);
    ag_tensor_release(wrapped);
  }
  ag_tensor_release(wide);
  if (v != stackbuf) free(v);
  return out;
}

/* The gradient of gather / index_select (grad_ops.c): scatter-add of g into
 * zeros of x's shape (edge), in f32 (f64 for f64), deterministic. */
ag_tensor *ag__gather_backward(ag_tensor *g, ag_tensor *index, int d, bool sel, int xndim, const int64_t *xshape,
                               ag_dtype xdt) {
  static const char name[] = "ag_gather backward";
  ag_devstate *ds = ag__ds(g);
  int64_t O = 1, K, In = 1, X = xndim ? xshape[d] : 1;
  int64_t nshape[AG_MAX_DIMS]; /* x's shape narrowed to the index (gather) */
  for (int i = 0; i < xndim; i++) nshape[i] = (sel || i == d) ? xshape[i] : index->shape[i];
  for (int i = 0; i < d && i < xndim; i++) O *= nshape[i];
  for (int i = d + 1; i < xndim; i++) In *= nshape[i];
  K = sel ? (index->ndim ? index->shape[0] : 1) : (xndim ? index->shape[d] : 1);
  ag_dtype adt = xdt == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *ic = ag__index_operand(ds, AG_K_GATHER_BWD, xdt, index);
  ag_tensor *gc = ag__raw_contiguous(g);
  ag_tensor *dx = ic && gc ? ag__tensor_new(ds, adt, xndim, nshape) : NULL;
  ag_status st = dx ? AG_OK : ag_last_status();
  if (st == AG_OK && dx->numel) {
    if (!ag__supported(ds, AG_K_GATHER_BWD, ic->dtype == AG_I64 ? 1 : 0, xdt, name)) st = ag_last_status();
  }
  if (st == AG_OK && dx->numel) st = gather_launch(AG_K_GATHER_BWD, name, ds, dx, gc, ic, sel, O, K, In, X);
  ag_tensor_release(ic);
  ag_tensor_release(gc);
  if (st != AG_OK) return ag__op_finish(dx, st);
  bool narrowed = false;
  for (int i = 0; i < xndim; i++) narrowed |= nshape[i] != xshape[i];
  if (!narrowed) return dx;
  /* place the narrowed gradient into zeros of x's shape */
  ag_tensor *full = ag_zeros(ag_tensor_device(dx), adt, xndim, xshape), *v = full ? ag__alias(full) : NULL;
  for (int i = 0; v && i < xndim; i++)
    if (nshape[i] != xshape[i]) {
      ag_tensor *s = ag_slice(v, i, 0, nshape[i], 1);
      ag_tensor_release(v);
      v = s;
    }
  st = v ? ag_copy_(v, dx) : ag_last_status();
  ag_tensor_release(v);
  ag_tensor_release(dx);
  return st == AG_OK ? full : ag__op_finish(full, st);
}

ag_status ag_topk(ag_tensor *x, int64_t k, int dim, bool largest, ag_tensor **out_values,
                  ag_tensor **out_indices) {
  static const char name[] = "ag_topk";
  if (out_values) *out_values = NULL;
  if (out_indices) *out_indices = NULL;
  if (!out_values || !out_indices)
    return ag_error_set(AG_ERR_INVALID, "%s: out_values and out_indices must not be NULL", name);
  if (ag__null_args(name, 1, &x)) return ag_last_status();
  ag_devstate *ds = ag__ds(x);
  if (!ag_dtype_is_float(x->dtype))
    return ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(x->dtype));
  int nd = x->ndim ? x->ndim : 1, d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd)
    return ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, x->ndim);
  int64_t R = x->ndim ? x->shape[d] : 1;
  if (k < 0 || k > R)
    return ag_error_set(AG_ERR_INVALID, "%s: k = %lld out of range for a dim of size %lld", name, (long long)k,
                        (long long)R);
  if (!ag__supported(ds, AG_K_TOPK, largest ? 0 : 1, x->dtype, name)) return ag_last_status();
  int64_t O = 1, In = 1, oshape[AG_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) oshape[i] = i == d ? k : x->shape[i];
  for (int i = 0; i < d && i < x->ndim; i++) O *= x->shape[i];
  for (int i = d + 1; i < x->ndim; i++) In *= x->shape[i];
  ag_tensor *xs = ag__raw_contiguous(x);
  ag_tensor *v = xs ? ag__tensor_new(ds, x->dtype, x->ndim, oshape) : NULL;
  ag_tensor *ix = v ? ag__tensor_new(ds, AG_I64, x->ndim, oshape) : NULL;
  ag_status st = ix ? AG_OK : ag_last_status();
  if (st == AG_OK && v->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_TOPK, largest ? 0 : 1, name, 3, (ag_tensor *[]){v, xs, ix});
    c.i[0] = O;
    c.i[1] = R;
    c.i[2] = In;
    c.i[3] = k;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(xs);
  if (st != AG_OK) {
    ag_tensor_release(v);
    ag_tensor_release(ix);
    return st;
  }
  *out_values = v;
  *out_indices = ix;
  return AG_OK;
}

/* ---------------- logsumexp, vector norms ---------------- */

/* One launch of a [outer, r, inner] reduction kernel of kind op (sub the
 * variant) over pl's contiguous source into a new tensor of a's dtype. */
static ag_tensor *row_reduce_launch(const char *name, ag_kop op, int sub, ag_devstate *ds, ag_tensor *a,
                                    const reduce_plan *pl) {
  ag_tensor *out = ag__tensor_new(ds, a->dtype, pl->out_ndim, pl->out_shape);
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, op, sub, name, 2, (ag_tensor *[]){out, pl->src});
    c.i[0] = pl->outer;
    c.i[1] = pl->r;
    c.i[2] = pl->inner;
    st = ag__launch(ds, &c);
  }
  return ag__op_finish(out, st);
}

static ag_tensor *logsumexp_impl(ag_tensor *x, int dim, bool keepdim) {
  static const char name[] = "ag_logsumexp";
  if (ag__null_args(name, 1, &x)) return NULL;
  ag_devstate *ds = ag__ds(x);
  if (!ag_dtype_is_float(x->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(x->dtype));
    return NULL;
  }
  int nd = x->ndim ? x->ndim : 1;
  if (dim < -nd || dim >= nd) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, x->ndim);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_LOGSUMEXP, 0, x->dtype, name)) return NULL;
  reduce_plan pl;
  /* a 0-d x reduces over nothing: the plan of no dims */
  if (!plan_reduce(name, x, x->ndim ? 1 : 0, &dim, keepdim, &pl)) return NULL;
  ag_tensor *out = row_reduce_launch(name, AG_K_LOGSUMEXP, 0, ds, x, &pl);
  ag_tensor_release(pl.src);
  if (!out) return NULL;
  ag_gparams p;
  reduce_gparams(&p, x, &pl, x->ndim ? 1 : 0, &dim, keepdim);
  /* the backward reads x and the result, in the keepdim shape */
  ag_tensor *kv = ag__raw_view(out, x->ndim, pl.keep_shape);
  ag_tensor *r = ag__op_record(out, AG_G_LOGSUMEXP, 1, &x, 1, &kv, &p);
  ag_tensor_release(kv);
  return r;
}

static ag_tensor *norm_impl(ag_tensor *x, double p, int n_dims, const int *dims, bool keepdim) {
  static const char name[] = "ag_norm";
  if (ag__null_args(name, 1, &x)) return NULL;
  ag_devstate *ds = ag__ds(x);
  if (!ag_dtype_is_float(x->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(x->dtype));
    return NULL;
  }
  int v;
  if (p == 1) v = AG_KV_NORM_L1;
  else if (p == 2) v = AG_KV_NORM_L2;
  else if (isinf(p) && p > 0) v = AG_KV_NORM_INF;
  else {
    ag_error_set(AG_ERR_INVALID, "%s: p = %g is not supported (1, 2 or inf)", name, p);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_NORM, v, x->dtype, name)) return NULL;
  reduce_plan pl;
  if (!plan_reduce(name, x, n_dims, dims, keepdim, &pl)) return NULL;
  if (pl.r == 0 && v == AG_KV_NORM_INF) {
    ag_tensor_release(pl.src);
    ag_error_set(AG_ERR_SHAPE, "%s: the inf norm of an empty dim has no identity", name);
    return NULL;
  }
  ag_tensor *out = row_reduce_launch(name, AG_K_NORM, v, ds, x, &pl);
  ag_tensor_release(pl.src);
  if (!out) return NULL;
  ag_gparams gp;
  reduce_gparams(&gp, x, &pl, n_dims, dims, keepdim);
  gp.i[0] = v;
  ag_tensor *kv = ag__raw_view(out, x->ndim, pl.keep_shape);
  ag_tensor *r = ag__op_record(out, AG_G_NORM, 1, &x, 1, &kv, &gp);
  ag_tensor_release(kv);
  return r;
}

/* Under autocast both run in f32, as torch's (logsumexp and the norms are
 * on its f32 list): a half input is widened and the result is f32. */
ag_tensor *ag_logsumexp(ag_tensor *x, int dim, bool keepdim) {
  if (!AC_ON() || !x) return logsumexp_impl(x, dim, keepdim);
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 1, &x, &ac)) return NULL;
  return ag__ac_end(&ac, logsumexp_impl(x, dim, keepdim));
}

ag_tensor *ag_norm(ag_tensor *x, double p, int n_dims, const int *dims, bool keepdim) {
  if (!AC_ON() || !x) return norm_impl(x, p, n_dims, dims, keepdim);
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 1, &x, &ac)) return NULL;
  return ag__ac_end(&ac, norm_impl(x, p, n_dims, dims, keepdim));
}
