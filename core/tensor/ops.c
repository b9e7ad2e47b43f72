/* The ops front end: validate arguments (NULLs, devices, dtypes, shapes),
 * allocate outputs, describe the work as one kernel call, record the
 * autograd node. Backends see only checked, broadcast operands. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "anygrad/amp.h"
#include "anygrad/autograd.h"
#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"
#include "autograd/record.h"
#include "autograd/autocast.h"

/* NULL input: keep the first error if there is one, else say which op. */
/* NULL (error kept, else AG_ERR_INVALID) or released (AG_ERR_STATE)
 * tensor arguments: true with the error set. */
static bool null_args(const char *op, int n, ag_tensor *const *ts) {
  for (int i = 0; i < n; i++) {
    if (AG_LIKELY(ts[i] && ts[i]->magic == AG__T_LIVE)) continue;
    if (ts[i]) return ag__tensor_unusable(ts[i], op);
    if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "%s: argument %d is NULL", op, i + 1);
    return true;
  }
  return false;
}

static ag_tensor *finish(ag_tensor *out, ag_status st) {
  if (st != AG_OK) {
    ag_tensor_release(out);
    return NULL;
  }
  return out;
}

static ag_tensor *record(ag_tensor *out, ag_gop op, int n_in, ag_tensor *const *in, int n_saved,
                         ag_tensor *const *saved, const ag_gparams *p) {
  if (!out || !ag__grad_needed(n_in, in)) return out;
  ag_gparams zero;
  if (!p) {
    memset(&zero, 0, sizeof zero);
    p = &zero;
  }
  return finish(out, ag__grad_record(out, op, n_in, in, n_saved, saved, p));
}

/* Internal views and copies that never touch the tape. */
static ag_tensor *raw_contiguous(ag_tensor *t) {
  ag_no_grad_begin();
  ag_tensor *r = ag_contiguous(t);
  ag_grad_mode_end();
  return r;
}

static ag_tensor *raw_view(ag_tensor *t, int ndim, const int64_t *shape) {
  ag_no_grad_begin();
  ag_tensor *r = ag_reshape(t, ndim, shape);
  ag_grad_mode_end();
  return r;
}

static ag_tensor *raw_transpose(ag_tensor *t, int a, int b) {
  ag_no_grad_begin();
  ag_tensor *r = ag_transpose(t, a, b);
  ag_grad_mode_end();
  return r;
}

static bool broadcast_shapes(const char *op, int n, ag_tensor *const *ts, int *out_ndim, int64_t *out_shape) {
  int nd = 0;
  for (int i = 0; i < n; i++)
    if (ts[i]->ndim > nd) nd = ts[i]->ndim;
  for (int d = 0; d < nd; d++) out_shape[d] = 1;
  for (int i = 0; i < n; i++) {
    const ag_tensor *t = ts[i];
    int lead = nd - t->ndim;
    for (int j = 0; j < t->ndim; j++) {
      int64_t s = t->shape[j], *o = &out_shape[lead + j];
      if (s == *o || s == 1) continue;
      if (*o == 1) {
        *o = s;
        continue;
      }
      char a[96], b[96];
      ag_error_set(AG_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast", op,
                   ag_tensor_describe(ts[0], a, sizeof a), ag_tensor_describe(t, b, sizeof b));
      return false;
    }
  }
  *out_ndim = nd;
  return true;
}


/* ---------------- autocast policy ----------------
 * Each public op below casts its float inputs per include/anygrad/amp.h,
 * runs the implementation with autocast suspended (its internal helper ops
 * must not re-cast), and drops the casts. Outside a region this costs one
 * thread-local read. */

enum { AC_NONE, AC_LOW, AC_F32, AC_WIDEST };

typedef struct ac_args {
  ag_tensor *t[8];
  int n;
} ac_args;

/* Casts ts in place into a (new references); false on error. */
static bool ac_begin(int policy, int n, ag_tensor **ts, ac_args *a) {
  a->n = 0;
  ag_dtype dt;
  if (policy == AC_LOW) dt = ag_autocast_dtype();
  else if (policy == AC_F32) dt = AG_F32;
  else {
    dt = ag__autocast_widest(n, ts);
    if ((int)dt < 0) dt = AG_F32;
  }
  for (int i = 0; i < n; i++) {
    if (!ts[i]) continue;
    if (!ag_dtype_is_float(ts[i]->dtype) || ts[i]->dtype == dt || ts[i]->dtype == AG_F64) continue;
    ag_tensor *c = ag__autocast_to(ts[i], dt);
    if (!c) {
      for (int k = 0; k < a->n; k++) ag_tensor_release(a->t[k]);
      return false;
    }
    ts[i] = c;
    a->t[a->n++] = c;
  }
  ag__autocast_suspend();
  return true;
}

static ag_tensor *ac_end(ac_args *a, ag_tensor *r) {
  ag__autocast_resume();
  for (int k = 0; k < a->n; k++) ag_tensor_release(a->t[k]);
  return r;
}

#define AC_ON() AG_UNLIKELY(ag_autocast_enabled())

/* ---------------- type promotion (torch.result_type) ---------------- */

/* 0 bool, 1 integer, 2 floating */
static int dtype_category(ag_dtype dt) {
  return dt == AG_BOOL ? 0 : ag_dtype_is_float(dt) ? 2 : 1;
}

ag_dtype ag_promote_types(ag_dtype a, ag_dtype b) {
  if ((unsigned)a >= AG_DTYPE_COUNT || (unsigned)b >= AG_DTYPE_COUNT) return AG_F32;
  if (a == b) return a;
  int ca = dtype_category(a), cb = dtype_category(b);
  if (ca != cb) return ca > cb ? a : b; /* bool < integer < floating */
  if (ca == 1) { /* u8 < i32 < i64 */
    if (a == AG_I64 || b == AG_I64) return AG_I64;
    return AG_I32;
  }
  /* floating: f16 and bf16 meet in f32; otherwise the wider */
  if (a == AG_F64 || b == AG_F64) return AG_F64;
  return AG_F32;
}

/* PyTorch's combine_categories: a participant of lower priority (a 0-dim
 * tensor against a dimensioned one, a scalar against a tensor) changes the
 * result only when its category is higher (or the higher one is bool). */
static ag_dtype combine_categories(ag_dtype higher, ag_dtype lower) {
  if (ag_dtype_is_float(higher)) return higher;
  if (higher == AG_BOOL || ag_dtype_is_float(lower)) return ag_promote_types(higher, lower);
  return higher;
}

ag_dtype ag_result_type(const ag_tensor *a, const ag_tensor *b) {
  if (!a || !b) return a ? a->dtype : b ? b->dtype : AG_F32;
  bool za = a->ndim == 0, zb = b->ndim == 0;
  if (za == zb) return ag_promote_types(a->dtype, b->dtype);
  return za ? combine_categories(b->dtype, a->dtype) : combine_categories(a->dtype, b->dtype);
}

ag_dtype ag_result_type_scalar(const ag_tensor *a, double s) {
  if (!a) return AG_F32;
  /* a double with an integral value is an integer scalar (i64), any other
   * a floating one (PyTorch's default dtype, f32) */
  ag_dtype sdt = (isfinite(s) && s == floor(s)) ? AG_I64 : AG_F32;
  return combine_categories(a->dtype, sdt);
}

/* a and b cast to their result type (new references in *ca / *cb, NULL
 * where no cast was needed); false with the error set. */
static bool promote2(ag_tensor **a, ag_tensor **b, ag_tensor **ca, ag_tensor **cb) {
  *ca = *cb = NULL;
  if (!*a || !*b || (*a)->dtype == (*b)->dtype) return true;
  if ((*a)->magic != AG__T_LIVE || (*b)->magic != AG__T_LIVE) return true; /* reported by the op */
  ag_dtype rt = ag_result_type(*a, *b);
  if ((*a)->dtype != rt && !(*a = *ca = ag_cast(*a, rt))) return false;
  if ((*b)->dtype != rt && !(*b = *cb = ag_cast(*b, rt))) {
    ag_tensor_release(*ca);
    *ca = NULL;
    return false;
  }
  return true;
}

/* Binary-style ops the promotion does not reach take one dtype. */
static bool same_dtype(const char *op, const ag_tensor *a, const ag_tensor *b) {
  if (a->dtype == b->dtype) return true;
  ag_error_set(AG_ERR_DTYPE, "%s: dtypes %s and %s differ (cast one first)", op, ag_dtype_name(a->dtype),
               ag_dtype_name(b->dtype));
  return false;
}

/* ---------------- elementwise ---------------- */

static ag_tensor *binary_impl(const char *name, ag_binary_op bop, ag_gop gop, ag_tensor *a, ag_tensor *b) {
  ag_tensor *in[2] = {a, b};
  if (null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (!same_dtype(name, a, b)) return NULL;
  const ag_binary_info *bi = ag_binary_info_of(bop);
  if (bi->ints == AG_OPT_FLT && !ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  int nd;
  int64_t shape[AG_MAX_DIMS];
  if (!broadcast_shapes(name, 2, in, &nd, shape)) return NULL;
  /* ag__launch refuses a sub-op the backend lacks; an empty result launches
   * nothing, so it is checked here */
  if ((a->numel == 0 || b->numel == 0) && !ag__supported(ds, AG_K_BINARY, bop, a->dtype, name)) return NULL;
  /* comparisons give bool (PyTorch); the kernel sees the inputs' dtype */
  ag_tensor *out = ag__tensor_new(ds, bi->compare ? AG_BOOL : a->dtype, nd, shape);
  if (!out) return NULL;
  if (out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_BINARY, bop, name, 3, (ag_tensor *[]){out, NULL, NULL});
    ag__broadcast_operand(&c.o[1], a, nd, shape);
    ag__broadcast_operand(&c.o[2], b, nd, shape);
    c.s[0] = 1.0;
    c.s[1] = 0.0;
    if (ag__launch(ds, &c) != AG_OK) return finish(out, AG_ERR_BACKEND);
  }
  if ((int)gop < 0) return out;
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = bop;
  p.s[0] = 1.0;
  return record(out, gop, 2, in, 0, NULL, &p);
}

static ag_tensor *binary(const char *name, ag_binary_op bop, ag_gop gop, ag_tensor *a, ag_tensor *b) {
  if (AG_UNLIKELY(a && b && a->dtype != b->dtype)) { /* PyTorch's type promotion */
    ag_tensor *ca, *cb;
    if (!promote2(&a, &b, &ca, &cb)) return NULL;
    ag_tensor *r = binary(name, bop, gop, a, b);
    ag_tensor_release(ca);
    ag_tensor_release(cb);
    return r;
  }
  if (!AC_ON() || !a || !b || a->dtype == b->dtype) return binary_impl(name, bop, gop, a, b);
  ag_tensor *ts[2] = {a, b};
  ac_args ac;
  if (!ac_begin(AC_WIDEST, 2, ts, &ac)) return NULL;
  return ac_end(&ac, binary_impl(name, bop, gop, ts[0], ts[1]));
}

/* The public binary ops, one per table entry (optable.h): CORE gradients
 * are the AG_G_<ID> formulas of grad_ops.c, PART ones the generated
 * partial derivatives, CMP ops have none. */
#define OPS_GOP_CORE(ID) AG_G_##ID
#define OPS_GOP_PART(ID) AG_G_BINARY
#define OPS_GOP_NG(ID) ((ag_gop)-1)
#define OPS_BWRAP_B(ID, name, grad)                            \
  ag_tensor *ag_##name(ag_tensor *a, ag_tensor *b) {            \
    return binary("ag_" #name, AG_B_##ID, OPS_GOP_##grad(ID), a, b); \
  }
#define OPS_BWRAP_BH(ID, name, grad)
#define OPS_BWRAP(ID, name, api, f, kind, grad, ...) OPS_BWRAP_##api(ID, name, grad)
AG_BINARY_OPS(OPS_BWRAP)

/* An integral scalar in [-2^63, 2^64) as the int64 that is congruent to it
 * modulo 2^64 (exact; 2^63, which -(-2^63) gives, is INT64_MIN), for the
 * integer AFFINE map, which wraps. ag_add_scalar & co. refuse any other
 * scalar for an integer result; 0 for one that reaches here anyway. */
static int64_t scalar_i64(double v) {
  if (!(v >= -0x1p63 && v < 0x1p64)) return 0;
  return v >= 0x1p63 ? (int64_t)(uint64_t)v : (int64_t)v;
}

/* A unary op of the table: validate, launch, record what the table says
 * the backward reads. */
static ag_tensor *unary_impl(const char *name, ag_unary_op uop, ag_tensor *a, double s0, double s1) {
  if (null_args(name, 1, &a)) return NULL;
  const ag_unary_info *u = ag_unary_info_of(uop);
  ag_devstate *ds = ag__ds(a);
  if (u->ints == AG_OPT_FLT && !ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if (a->numel == 0 && !ag__supported(ds, AG_K_UNARY, uop, a->dtype, name)) return NULL;
  ag_tensor *out = ag__tensor_new(ds, a->dtype, a->ndim, a->shape);
  if (!out) return NULL;
  if (out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_UNARY, uop, name, 2, (ag_tensor *[]){out, a});
    c.s[0] = s0;
    c.s[1] = s1;
    if (uop == AG_U_AFFINE && !ag_dtype_is_float(a->dtype)) { /* exact, wrapping (kops.h) */
      c.i[0] = scalar_i64(s0);
      c.i[1] = scalar_i64(s1);
    }
    if (ag__launch(ds, &c) != AG_OK) return finish(out, AG_ERR_BACKEND);
  }
  if (u->save == AG_SAVE_NG) return out;
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = uop;
  p.s[0] = s0;
  p.s[1] = s1;
  return record(out, AG_G_UNARY, 1, &a, 0, NULL, &p);
}

/* The table's AMP policy: F32 ops run in f32 inside an autocast region. */
static ag_tensor *unary(const char *name, ag_unary_op uop, ag_tensor *a, double s0, double s1) {
  if (!AC_ON() || !a || !ag_unary_info_of(uop)->amp_f32) return unary_impl(name, uop, a, s0, s1);
  ac_args ac;
  if (!ac_begin(AC_F32, 1, &a, &ac)) return NULL;
  return ac_end(&ac, unary_impl(name, uop, a, s0, s1));
}

/* The public unary ops, one per table entry with a generated wrapper. */
#define OPS_UWRAP_A0(ID, name) \
  ag_tensor *ag_##name(ag_tensor *a) { return unary("ag_" #name, AG_U_##ID, a, 0, 0); }
#define OPS_UWRAP_A1(ID, name) \
  ag_tensor *ag_##name(ag_tensor *a, double s0) { return unary("ag_" #name, AG_U_##ID, a, s0, 0); }
#define OPS_UWRAP_A2(ID, name)                                     \
  ag_tensor *ag_##name(ag_tensor *a, double s0, double s1) {        \
    return unary("ag_" #name, AG_U_##ID, a, s0, s1);                \
  }
#define OPS_UWRAP_AH(ID, name)
#define OPS_UWRAP(ID, name, api, ...) OPS_UWRAP_##api(ID, name)
AG_UNARY_OPS(OPS_UWRAP)

/* a op s with PyTorch's promotion: the affine map runs in the result type
 * of (a, s); `s` is the user's scalar, mul/add the map (true division's
 * result is floating: rt_min raises it to at least that). */
static ag_tensor *affine(const char *name, ag_tensor *a, double s, double mul, double add, bool floating) {
  if (!a || a->magic != AG__T_LIVE) return unary(name, AG_U_AFFINE, a, mul, add);
  ag_dtype rt = ag_result_type_scalar(a, s);
  if (floating && !ag_dtype_is_float(rt)) rt = AG_F32;
  /* An integer result is computed in its dtype, wrapping, from the scalar
   * as an int64 (as torch takes a Python int): one beyond int64 is refused,
   * as torch refuses 2**64 ("Overflow when unpacking long"). */
  if (!ag_dtype_is_float(rt) && !(s >= -0x1p63 && s < 0x1p63)) {
    ag_error_set(AG_ERR_INVALID, "%s: the integral scalar %.17g does not fit in int64 (the result would be %s)", name,
                 s, ag_dtype_name(rt));
    return NULL;
  }
  if (rt == a->dtype) return unary(name, AG_U_AFFINE, a, mul, add);
  ag_tensor *c = ag_cast(a, rt);
  if (!c) return NULL;
  ag_tensor *r = unary(name, AG_U_AFFINE, c, mul, add);
  ag_tensor_release(c);
  return r;
}

ag_tensor *ag_add_scalar(ag_tensor *a, double s) { return affine("ag_add_scalar", a, s, 1.0, s, false); }
ag_tensor *ag_sub_scalar(ag_tensor *a, double s) { return affine("ag_sub_scalar", a, s, 1.0, -s, false); }
ag_tensor *ag_rsub_scalar(ag_tensor *a, double s) { return affine("ag_rsub_scalar", a, s, -1.0, s, false); }
ag_tensor *ag_mul_scalar(ag_tensor *a, double s) { return affine("ag_mul_scalar", a, s, s, 0.0, false); }
ag_tensor *ag_div_scalar(ag_tensor *a, double s) { return affine("ag_div_scalar", a, s, 1.0 / s, 0.0, true); }
ag_tensor *ag_rdiv_scalar(ag_tensor *a, double s) {
  if (a && a->magic == AG__T_LIVE && !ag_dtype_is_float(a->dtype)) { /* true division */
    ag_tensor *c = ag_cast(a, AG_F32);
    if (!c) return NULL;
    ag_tensor *r = unary("ag_rdiv_scalar", AG_U_RSUB_DIV, c, s, 0);
    ag_tensor_release(c);
    return r;
  }
  return unary("ag_rdiv_scalar", AG_U_RSUB_DIV, a, s, 0);
}

static ag_tensor *where_impl(ag_tensor *cond, ag_tensor *a, ag_tensor *b) {
  static const char name[] = "ag_where";
  ag_tensor *in[3] = {cond, a, b};
  if (null_args(name, 3, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 3, in);
  if (!ds) return NULL;
  if (!same_dtype(name, a, b)) return NULL;
  int nd;
  int64_t shape[AG_MAX_DIMS];
  if (!broadcast_shapes(name, 3, in, &nd, shape)) return NULL;
  if (!ag__supported(ds, AG_K_WHERE, 0, a->dtype, name) || !ag__supported(ds, AG_K_WHERE, 0, cond->dtype, name))
    return NULL;
  ag_tensor *out = ag__tensor_new(ds, a->dtype, nd, shape);
  if (!out) return NULL;
  if (out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_WHERE, 0, name, 4, (ag_tensor *[]){out, NULL, NULL, NULL});
    for (int i = 0; i < 3; i++) ag__broadcast_operand(&c.o[i + 1], in[i], nd, shape);
    if (ag__launch(ds, &c) != AG_OK) return finish(out, AG_ERR_BACKEND);
  }
  return record(out, AG_G_WHERE, 3, in, 1, &cond, NULL);
}

ag_tensor *ag_where(ag_tensor *cond, ag_tensor *a, ag_tensor *b) {
  if (AG_UNLIKELY(a && b && a->dtype != b->dtype)) { /* PyTorch's type promotion */
    ag_tensor *ca, *cb;
    if (!promote2(&a, &b, &ca, &cb)) return NULL;
    ag_tensor *r = ag_where(cond, a, b);
    ag_tensor_release(ca);
    ag_tensor_release(cb);
    return r;
  }
  if (!AC_ON() || !a || !b || a->dtype == b->dtype) return where_impl(cond, a, b);
  ag_tensor *ts[2] = {a, b};
  ac_args ac;
  if (!ac_begin(AC_WIDEST, 2, ts, &ac)) return NULL;
  return ac_end(&ac, where_impl(cond, ts[0], ts[1]));
}

ag_tensor *ag_masked_fill(ag_tensor *a, ag_tensor *mask, double value) {
  ag_tensor *in[2] = {a, mask};
  if (null_args("ag_masked_fill", 2, in)) return NULL;
  ag_tensor *v = ag_full(ag_tensor_device(a), a->dtype, 0, NULL, value);
  if (!v) return NULL;
  ag_tensor *r = ag_where(mask, v, a);
  ag_tensor_release(v);
  return r;
}

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
    pl->src = raw_contiguous(a);
    return pl->src != NULL;
  }
  if (block) {
    pl->outer = 1;
    pl->r = 1;
    pl->inner = 1;
    for (int i = 0; i < first; i++) pl->outer *= a->shape[i];
    for (int i = first; i <= last; i++) pl->r *= a->shape[i];
    for (int i = last + 1; i < a->ndim; i++) pl->inner *= a->shape[i];
    pl->src = raw_contiguous(a);
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
  if (null_args(name, 1, &a)) return NULL;
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
  if (st != AG_OK) return finish(out, st);
  if ((int)gop < 0) return out;
  ag_gparams p;
  reduce_gparams(&p, a, &pl, n_dims, dims, keepdim);
  p.s[0] = mean ? (double)pl.r : 1.0;
  if (gop == AG_G_MAX || gop == AG_G_MIN) {
    ag_tensor *kv = raw_view(out, a->ndim, pl.keep_shape);
    ag_tensor *sv[2] = {a, kv};
    ag_tensor *r = record(out, gop, 1, &a, 2, sv, &p);
    ag_tensor_release(kv);
    return r;
  }
  return record(out, gop, 1, &a, 0, NULL, &p);
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
  ac_args ac;
  if (!ac_begin(AC_F32, 1, &a, &ac)) return NULL;
  return ac_end(&ac, reduce_impl(name, rop, gop, a, n_dims, dims, keepdim, mean));
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
  if (null_args(name, 1, &a)) return NULL;
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
  if (st != AG_OK) return finish(out, st);
  ag_gparams p;
  reduce_gparams(&p, a, &pl, n_dims, dims, keepdim);
  p.i[0] = sq;
  p.s[0] = (double)pl.r - correction > 0 ? (double)pl.r - correction : 0;
  /* std's gradient divides by the result: saved in the keepdim shape */
  ag_tensor *kv = sq ? raw_view(out, a->ndim, pl.keep_shape) : NULL;
  ag_tensor *r = record(out, AG_G_VAR, 1, &a, sq ? 1 : 0, &kv, &p);
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
  if (null_args(name, 1, &a)) return NULL;
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
  ag_tensor *src = raw_contiguous(a);
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
  if (st != AG_OK) return finish(out, st);
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  p.i[1] = reverse;
  return record(out, AG_G_CUMSUM, 1, &a, 0, NULL, &p);
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
  return st == AG_OK ? out : finish(out, st);
}

static bool gather_check(const char *name, ag_tensor *x, ag_tensor *index, int dim, int *out_d, ag_devstate **out_ds) {
  ag_tensor *in[2] = {x, index};
  if (null_args(name, 2, in)) return false;
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
  return record(out, AG_G_GATHER, 2, in, 0, NULL, &p);
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
  ag_tensor *xs = raw_contiguous(x);
  ag_tensor *out = xs ? gather_run(name, ds, xs, index, true, x->ndim, oshape, O, K, In, X) : NULL;
  ag_tensor_release(xs);
  return gather_record(out, x, index, d, true);
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
  ag_tensor *gc = raw_contiguous(g);
  ag_tensor *dx = ic && gc ? ag__tensor_new(ds, adt, xndim, nshape) : NULL;
  ag_status st = dx ? AG_OK : ag_last_status();
  if (st == AG_OK && dx->numel) {
    if (!ag__supported(ds, AG_K_GATHER_BWD, ic->dtype == AG_I64 ? 1 : 0, xdt, name)) st = ag_last_status();
  }
  if (st == AG_OK && dx->numel) st = gather_launch(AG_K_GATHER_BWD, name, ds, dx, gc, ic, sel, O, K, In, X);
  ag_tensor_release(ic);
  ag_tensor_release(gc);
  if (st != AG_OK) return finish(dx, st);
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
  return st == AG_OK ? full : finish(full, st);
}

ag_status ag_topk(ag_tensor *x, int64_t k, int dim, bool largest, ag_tensor **out_values,
                  ag_tensor **out_indices) {
  static const char name[] = "ag_topk";
  if (out_values) *out_values = NULL;
  if (out_indices) *out_indices = NULL;
  if (!out_values || !out_indices)
    return ag_error_set(AG_ERR_INVALID, "%s: out_values and out_indices must not be NULL", name);
  if (null_args(name, 1, &x)) return ag_last_status();
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
  ag_tensor *xs = raw_contiguous(x);
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

/* ---------------- matmul ---------------- */

/* Make the last two dims usable by a GEMM: row-major (col stride 1) or
 * column-major (row stride 1); size-1 dims get canonical strides. */
static bool gemm_layout(ag_koperand *o) {
  int r = o->ndim - 2, c = o->ndim - 1;
  int64_t R = o->shape[r], C = o->shape[c];
  if (C == 1) o->strides[c] = 1;
  if (R == 1) o->strides[r] = (o->strides[c] == 1) ? (C > 0 ? C : 1) : 1;
  if (o->strides[c] == 1 && o->strides[r] >= (C > 1 ? C : 1)) return true;
  if (o->strides[r] == 1 && o->strides[c] >= (R > 1 ? R : 1)) return true;
  return false;
}

/* Collapse the batch dims of an operand (already broadcast to the common
 * batch shape) into [B, R, C]; false if they cannot share one stride. */
static bool collapse_batch(ag_koperand *o, int64_t B) {
  int nb = o->ndim - 2;
  int64_t stride = 0;
  bool any = false;
  for (int i = nb - 1; i >= 0; i--) {
    if (o->shape[i] == 1) continue;
    if (!any) {
      stride = o->strides[i];
      any = true;
      continue;
    }
    /* the next outer dim must continue the same progression */
    int64_t inner_span = 1;
    for (int j = i + 1; j < nb; j++) inner_span *= o->shape[j];
    if (o->strides[i] != stride * inner_span) return false;
  }
  int64_t R = o->shape[nb], C = o->shape[nb + 1], rs = o->strides[nb], cs = o->strides[nb + 1];
  o->ndim = 3;
  o->shape[0] = B;
  o->strides[0] = any ? stride : 0;
  o->shape[1] = R;
  o->strides[1] = rs;
  o->shape[2] = C;
  o->strides[2] = cs;
  return true;
}

/* a @ b, or with bias (the caller checked: 1-D [N], a's dtype and device)
 * a @ b + bias: the bias is broadcast into the output and the GEMM runs
 * with beta = 1, so BLAS neither zeroes the output first (its beta = 0
 * pass) nor does a separate add pass read it again. */
static ag_tensor *matmul_core(ag_tensor *a, ag_tensor *b, ag_tensor *bias) {
  static const char name[] = "ag_matmul";
  ag_tensor *in[3] = {a, b, bias};
  if (null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (a->dtype != b->dtype || !ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs two floating tensors of one dtype, got %s and %s", name,
                 ag_dtype_name(a->dtype), ag_dtype_name(b->dtype));
    return NULL;
  }
  if (a->ndim == 0 || b->ndim == 0) {
    ag_error_set(AG_ERR_SHAPE, "%s: both arguments need at least one dim", name);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_MATMUL, 0, a->dtype, name)) return NULL;
  /* Promote 1-D operands: a [K] -> [1, K], b [K] -> [K, 1]. */
  int64_t as[AG_MAX_DIMS], ast[AG_MAX_DIMS], bs[AG_MAX_DIMS], bst[AG_MAX_DIMS];
  int and_ = a->ndim, bnd = b->ndim;
  memcpy(as, a->shape, sizeof as);
  memcpy(ast, a->strides, sizeof ast);
  memcpy(bs, b->shape, sizeof bs);
  memcpy(bst, b->strides, sizeof bst);
  if (and_ == 1) {
    as[1] = as[0];
    ast[1] = ast[0];
    as[0] = 1;
    ast[0] = as[1];
    and_ = 2;
  }
  if (bnd == 1) {
    bs[1] = 1;
    bst[1] = 1;
    bnd = 2;
  }
  int64_t M = as[and_ - 2], K = as[and_ - 1], K2 = bs[bnd - 2], N = bs[bnd - 1];
  if (K != K2) {
    char x[96], y[96];
    ag_error_set(AG_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied (%lld != %lld)", name,
                 ag_tensor_describe(a, x, sizeof x), ag_tensor_describe(b, y, sizeof y), (long long)K, (long long)K2);
    return NULL;
  }
  /* Broadcast batch dims. */
  int nba = and_ - 2, nbb = bnd - 2, nb = nba > nbb ? nba : nbb;
  if (nb + 2 > AG_MAX_DIMS) {
    ag_error_set(AG_ERR_SHAPE, "%s: too many dims", name);
    return NULL;
  }
  int64_t batch[AG_MAX_DIMS];
  int64_t B = 1;
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - nba), ib = i - (nb - nbb);
    int64_t sa = ia >= 0 ? as[ia] : 1, sb = ib >= 0 ? bs[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      char x[96], y[96];
      ag_error_set(AG_ERR_SHAPE, "%s: batch dims of %s and %s cannot be broadcast", name,
                   ag_tensor_describe(a, x, sizeof x), ag_tensor_describe(b, y, sizeof y));
      return NULL;
    }
    batch[i] = sa == 1 ? sb : sa;
    if (__builtin_mul_overflow(B, batch[i], &B)) {
      char x[96], y[96];
      ag_error_set(AG_ERR_SHAPE, "%s: broadcast batch of %s and %s is too large (overflows int64)", name,
                   ag_tensor_describe(a, x, sizeof x), ag_tensor_describe(b, y, sizeof y));
      return NULL;
    }
  }
  /* Operands [batch..., R, C] with zero strides on broadcast dims. */
  ag_koperand oa, ob;
  ag_tensor *ca = NULL, *cb = NULL;
  ag_status st = AG_OK;
  for (int pass = 0; pass < 2 && st == AG_OK; pass++) {
    ag_tensor *t = pass ? b : a;
    ag_koperand *o = pass ? &ob : &oa;
    int64_t *ts = pass ? bs : as, *tst = pass ? bst : ast;
    int tnd = pass ? bnd : and_, tnb = tnd - 2;
    for (int attempt = 0; attempt < 2; attempt++) {
      const ag_tensor *src = attempt ? (pass ? cb : ca) : t;
      o->base = src->st->base;
      o->offset = src->st->offset + (size_t)src->offset * ag_dtype_size(src->dtype);
      o->dtype = src->dtype;
      o->ndim = nb + 2;
      if (attempt) { /* contiguous copy: recompute strides for the promoted shape */
        ag__contiguous_strides(tnd, ts, tst);
      }
      for (int i = 0; i < nb; i++) {
        int j = i - (nb - tnb);
        o->shape[i] = batch[i];
        o->strides[i] = (j >= 0 && ts[j] == batch[i] && batch[i] != 1) ? tst[j] : 0;
      }
      o->shape[nb] = ts[tnd - 2];
      o->strides[nb] = tst[tnd - 2];
      o->shape[nb + 1] = ts[tnd - 1];
      o->strides[nb + 1] = tst[tnd - 1];
      if (collapse_batch(o, B) && gemm_layout(o)) break;
      if (attempt) {
        st = ag_error_set(AG_ERR_INTERNAL, "%s: no GEMM layout for a contiguous operand", name);
        break;
      }
      /* Materialise the operand broadcast to the full batch shape: a
       * contiguous [batch..., R, C] always has a GEMM layout. */
      int64_t full[AG_MAX_DIMS];
      memcpy(full, batch, sizeof(int64_t) * (size_t)nb);
      full[nb] = ts[tnd - 2];
      full[nb + 1] = ts[tnd - 1];
      ag_no_grad_begin();
      ag_tensor *v = ag_reshape(t, tnd, ts);
      ag_tensor *e = v ? ag_expand(v, nb + 2, full) : NULL;
      ag_tensor *c = e ? ag_contiguous(e) : NULL;
      ag_tensor_release(e);
      ag_tensor_release(v);
      ag_grad_mode_end();
      if (!c) {
        st = ag_last_status();
        break;
      }
      tnd = nb + 2;
      tnb = nb;
      memcpy(ts, full, sizeof(int64_t) * (size_t)tnd);
      if (pass) cb = c;
      else ca = c;
    }
  }
  ag_tensor *out = NULL;
  if (st == AG_OK) {
    int64_t oshape[AG_MAX_DIMS];
    int ond = 0;
    for (int i = 0; i < nb; i++) oshape[ond++] = batch[i];
    if (a->ndim > 1) oshape[ond++] = M;
    if (b->ndim > 1) oshape[ond++] = N;
    out = ag__tensor_new(ds, a->dtype, ond, oshape);
    if (!out) st = ag_last_status();
  }
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_MATMUL, 0, name, 3, NULL);
    c.o[0].base = out->st->base;
    c.o[0].offset = out->st->offset;
    c.o[0].dtype = out->dtype;
    c.o[0].ndim = 3;
    c.o[0].shape[0] = B;
    c.o[0].shape[1] = M;
    c.o[0].shape[2] = N;
    c.o[0].strides[0] = M * N;
    c.o[0].strides[1] = N;
    c.o[0].strides[2] = 1;
    c.o[1] = oa;
    c.o[2] = ob;
    /* One GEMM instead of a batch loop when b is shared and a's rows are
     * evenly spaced across the batch (the Linear-layer case). */
    if (B > 1 && ob.strides[0] == 0 && oa.strides[2] == 1 && oa.strides[0] == M * oa.strides[1]) {
      c.o[1].shape[0] = 1;
      c.o[1].shape[1] = B * M;
      c.o[0].shape[0] = 1;
      c.o[0].shape[1] = B * M;
      c.o[2].shape[0] = 1;
    }
    c.s[0] = 1.0;
    c.s[1] = 0.0;
    if (bias) {
      ag_no_grad_begin();
      st = ag_copy_(out, bias);
      ag_grad_mode_end();
      c.s[1] = 1.0;
    }
    /* An inner dimension of 0 is an empty sum: zeros (plus the bias), as
     * torch and NumPy give. No GEMM runs: BLAS libraries (oneDNN's sgemm)
     * return without writing C when K is 0. */
    if (st == AG_OK && K == 0 && !bias) st = ag_fill_(out, 0.0);
    else if (st == AG_OK && K > 0) st = ag__launch(ds, &c);
  }
  ag_tensor_release(ca);
  ag_tensor_release(cb);
  if (st != AG_OK) return finish(out, st);
  return record(out, AG_G_MATMUL, bias ? 3 : 2, in, 2, in, NULL);
}

static ag_tensor *matmul_impl(ag_tensor *a, ag_tensor *b) { return matmul_core(a, b, NULL); }

ag_tensor *ag__linear_addmm(ag_tensor *x, ag_tensor *wt, ag_tensor *bias) {
  if (!x || !wt || !bias || AC_ON() || bias->ndim != 1 || wt->ndim != 2 || x->ndim < 1 ||
      bias->dtype != x->dtype || (x->dtype != AG_F32 && x->dtype != AG_F64) || bias->shape[0] != wt->shape[1] ||
      ag__ds(bias) != ag__ds(x)) {
    ag_tensor *y = ag_matmul(x, wt), *r = y && bias ? ag_add(y, bias) : y;
    if (r != y) ag_tensor_release(y);
    return r;
  }
  return matmul_core(x, wt, bias);
}

ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b) {
  if (!AC_ON() || !a || !b) return matmul_impl(a, b);
  ag_tensor *ts[2] = {a, b};
  ac_args ac;
  if (!ac_begin(AC_LOW, 2, ts, &ac)) return NULL;
  return ac_end(&ac, matmul_impl(ts[0], ts[1]));
}

/* ---------------- softmax and losses ---------------- */

static ag_tensor *softmax_core(const char *name, int variant, ag_gop gop, ag_tensor *a, int dim) {
  if (null_args(name, 1, &a)) return NULL;
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  int nd = a->ndim ? a->ndim : 1;
  int d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, a->ndim);
    return NULL;
  }
  ag_devstate *ds = ag__ds(a);
  if (!ag__supported(ds, AG_K_SOFTMAX, variant, a->dtype, name)) return NULL;
  bool last = a->ndim == 0 || d == a->ndim - 1;
  ag_tensor *src = last ? raw_contiguous(a) : NULL;
  if (!last) {
    ag_tensor *t = raw_transpose(a, d, -1);
    src = t ? raw_contiguous(t) : NULL;
    ag_tensor_release(t);
  }
  if (!src) return NULL;
  ag_tensor *y = ag__tensor_new(ds, a->dtype, src->ndim, src->shape);
  ag_status st = y ? AG_OK : ag_last_status();
  int64_t cols = a->ndim ? src->shape[src->ndim - 1] : 1;
  if (st == AG_OK && y->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_SOFTMAX, variant, name, 2, (ag_tensor *[]){y, src});
    c.i[0] = y->numel / cols;
    c.i[1] = cols;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(src);
  if (st != AG_OK) return finish(y, st);
  ag_tensor *out = y;
  if (!last) {
    ag_tensor *t = raw_transpose(y, d, -1);
    out = t ? raw_contiguous(t) : NULL;
    ag_tensor_release(t);
    ag_tensor_release(y);
    if (!out) return NULL;
  }
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  return record(out, gop, 1, &a, 1, &out, &p);
}

static ag_tensor *softmax_impl(const char *name, int variant, ag_gop gop, ag_tensor *a, int dim) {
  if (!AC_ON() || !a) return softmax_core(name, variant, gop, a, dim);
  ac_args ac;
  if (!ac_begin(AC_F32, 1, &a, &ac)) return NULL;
  return ac_end(&ac, softmax_core(name, variant, gop, a, dim));
}

ag_tensor *ag_softmax(ag_tensor *a, int dim) { return softmax_impl("ag_softmax", 0, AG_G_SOFTMAX, a, dim); }
ag_tensor *ag_log_softmax(ag_tensor *a, int dim) {
  return softmax_impl("ag_log_softmax", 1, AG_G_LOG_SOFTMAX, a, dim);
}

/* Contiguous index operand (embedding indices, cross-entropy targets): i64
 * stays i64 where the backend reads it (supports(op, 1, dt)), else it is
 * clamped into the i32 range and cast to i32 here, so an index beyond the
 * i32 range is still out of range and reported (as the clamped value),
 * never wrapped into range. */
ag_tensor *ag__index_operand(ag_devstate *ds, ag_kop op, ag_dtype dt, ag_tensor *idx) {
  if (idx->dtype != AG_I64 || ds->be->supports(ds->ord, op, 1, dt)) return raw_contiguous(idx);
  ag_no_grad_begin();
  ag_device d = ag_tensor_device(idx);
  ag_tensor *hi = ag_full(d, AG_I64, 0, NULL, 2147483647.0), *lo = ag_full(d, AG_I64, 0, NULL, -2147483648.0);
  ag_tensor *a = hi ? ag_minimum(idx, hi) : NULL, *b = a && lo ? ag_maximum(a, lo) : NULL;
  ag_tensor *r = b ? ag_cast(b, AG_I32) : NULL;
  ag_tensor *rel[] = {hi, lo, a, b};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  ag_grad_mode_end();
  return r;
}

/* Scalar f32 count of targets != ignore, computed on the device. */
static ag_tensor *count_valid(ag_tensor *targets, int32_t ignore_index, ag_dtype dt) {
  ag_tensor *ig = ag_full(ag_tensor_device(targets), targets->dtype, 0, NULL, ignore_index);
  ag_tensor *eq = ag_eq(targets, ig);
  ag_tensor *n_ig = ag_sum(eq, 0, NULL, false);
  ag_tensor *f = ag_cast(n_ig, dt);
  ag_tensor *cnt = ag_rsub_scalar(f, (double)targets->numel);
  ag_tensor_release(ig);
  ag_tensor_release(eq);
  ag_tensor_release(n_ig);
  ag_tensor_release(f);
  return cnt;
}

static ag_tensor *cross_entropy_impl(ag_tensor *logits, ag_tensor *targets, ag_reduction reduction,
                                     int32_t ignore_index) {
  static const char name[] = "ag_cross_entropy";
  ag_tensor *in[2] = {logits, targets};
  if (null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (!ag_dtype_is_float(logits->dtype) || (targets->dtype != AG_I32 && targets->dtype != AG_I64)) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs floating logits and i64 or i32 targets, got %s and %s", name,
                 ag_dtype_name(logits->dtype), ag_dtype_name(targets->dtype));
    return NULL;
  }
  if ((unsigned)reduction > AG_REDUCTION_NONE) {
    ag_error_set(AG_ERR_INVALID, "%s: invalid reduction %d", name, (int)reduction);
    return NULL;
  }
  int64_t N, C;
  bool kdim = logits->ndim >= 3 && targets->ndim == logits->ndim - 1 && targets->shape[0] == logits->shape[0];
  for (int i = 1; kdim && i < targets->ndim; i++) kdim = targets->shape[i] == logits->shape[i + 1];
  if (kdim) {
    /* PyTorch's K-dimensional form: logits [N, C, d1..dk], targets [N,
     * d1..dk]. The class dim moves last and the rest flatten to rows; the
     * composition (permute, reshape) is recorded, so gradients flow back in
     * the input's layout. Reduction none gives targets' shape. */
    int perm[AG_MAX_DIMS];
    perm[0] = 0;
    for (int i = 2; i < logits->ndim; i++) perm[i - 1] = i;
    perm[logits->ndim - 1] = 1;
    int64_t rows = 1, s2[2], s1[1];
    for (int i = 0; i < targets->ndim; i++) rows *= targets->shape[i];
    s2[0] = rows;
    s2[1] = logits->shape[1];
    s1[0] = rows;
    ag_tensor *pl = ag_permute(logits, perm);
    ag_tensor *fl = pl ? ag_reshape(pl, 2, s2) : NULL;
    ag_tensor *ft = fl ? ag_reshape(targets, 1, s1) : NULL;
    ag_tensor *r = ft ? cross_entropy_impl(fl, ft, reduction, ignore_index) : NULL;
    ag_tensor_release(pl);
    ag_tensor_release(fl);
    ag_tensor_release(ft);
    if (r && reduction == AG_REDUCTION_NONE) {
      ag_tensor *r2 = ag_reshape(r, targets->ndim, targets->shape);
      ag_tensor_release(r);
      r = r2;
    }
    return r;
  }
  if (logits->ndim == 2 && targets->ndim == 1 && targets->shape[0] == logits->shape[0]) {
    N = logits->shape[0];
    C = logits->shape[1];
  } else if (logits->ndim == 1 && targets->ndim == 0) {
    N = 1;
    C = logits->shape[0];
  } else {
    char x[96], y[96];
    ag_error_set(AG_ERR_SHAPE, "%s: logits %s and targets %s: expected [N, C] and [N], [C] and [], or [N, C, d1..dk] and [N, d1..dk]", name,
                 ag_tensor_describe(logits, x, sizeof x), ag_tensor_describe(targets, y, sizeof y));
    return NULL;
  }
  if (!ag__supported(ds, AG_K_CROSS_ENTROPY, 0, logits->dtype, name)) return NULL;
  ag_no_grad_begin();
  int64_t s2[2] = {N, C}, s1[1] = {N};
  ag_tensor *lc0 = raw_contiguous(logits), *tc0 = ag__index_operand(ds, AG_K_CROSS_ENTROPY, logits->dtype, targets);
  ag_tensor *lc = lc0 ? ag_reshape(lc0, 2, s2) : NULL, *tc = tc0 ? ag_reshape(tc0, 1, s1) : NULL;
  ag_tensor_release(lc0);
  ag_tensor_release(tc0);
  /* per-row losses in f32 (f64 for f64 logits, the gradient-check dtype) */
  ag_dtype rdt = logits->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *rows = (lc && tc) ? ag__tensor_new(ds, rdt, 1, s1) : NULL;
  ag_status st = rows ? AG_OK : ag_last_status();
  if (st == AG_OK && N) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_CROSS_ENTROPY, 0, name, 3, (ag_tensor *[]){rows, lc, tc});
    c.i[0] = N;
    c.i[1] = C;
    c.i[2] = ignore_index;
    st = ag__launch(ds, &c);
  }
  ag_tensor *out = NULL, *cnt = NULL;
  if (st == AG_OK) {
    if (reduction == AG_REDUCTION_NONE) {
      out = logits->ndim == 1 ? ag_reshape(rows, 0, NULL) : ag__alias(rows);
    } else {
      ag_tensor *sum = ag_sum(rows, 0, NULL, false);
      if (reduction == AG_REDUCTION_SUM) {
        out = sum;
      } else {
        cnt = count_valid(tc, ignore_index, rdt);
        out = (sum && cnt) ? ag_div(sum, cnt) : NULL;
        ag_tensor_release(sum);
      }
    }
    if (out && out->dtype != logits->dtype) {
      ag_tensor *o2 = ag_cast(out, logits->dtype);
      ag_tensor_release(out);
      out = o2;
    }
    if (!out) st = ag_last_status();
  }
  ag_grad_mode_end();
  ag_tensor_release(rows);
  if (st == AG_OK) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.i[0] = reduction;
    p.i[1] = ignore_index;
    ag_tensor *sv[3] = {lc, tc, cnt};
    out = record(out, AG_G_CROSS_ENTROPY, 2, in, cnt ? 3 : 2, sv, &p);
  }
  ag_tensor_release(lc);
  ag_tensor_release(tc);
  ag_tensor_release(cnt);
  return st == AG_OK ? out : finish(out, st);
}

static ag_tensor *mse_impl(ag_tensor *a, ag_tensor *b, ag_reduction reduction) {
  static const char name[] = "ag_mse_loss";
  ag_tensor *in[2] = {a, b};
  if (null_args(name, 2, in)) return NULL;
  if (!ag__same_device(name, 2, in)) return NULL;
  /* the shapes broadcast, as in PyTorch ([4,1] against [4] is [4,4], which
   * PyTorch warns about); the reduction runs over the broadcast result */
  int bnd;
  int64_t bshape[AG_MAX_DIMS];
  if (!broadcast_shapes(name, 2, in, &bnd, bshape)) return NULL;
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if ((unsigned)reduction > AG_REDUCTION_NONE) {
    ag_error_set(AG_ERR_INVALID, "%s: invalid reduction %d", name, (int)reduction);
    return NULL;
  }
  ag_no_grad_begin();
  ag_tensor *diff = ag_sub(a, b);
  ag_tensor *sq = ag_mul(diff, diff);
  ag_tensor *out = reduction == AG_REDUCTION_NONE ? ag__alias(sq)
                   : reduction == AG_REDUCTION_SUM ? ag_sum(sq, 0, NULL, false)
                                                   : ag_mean(sq, 0, NULL, false);
  ag_grad_mode_end();
  ag_tensor_release(sq);
  if (out) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.i[0] = reduction;
    out = record(out, AG_G_MSE, 2, in, 1, &diff, &p);
  }
  ag_tensor_release(diff);
  return out;
}

/* Layer norm, or with rms the RMS norm (no mean, no bias): rows over the
 * last dim, statistics in f32 (f64 for f64 x: f64 is the gradient-check
 * dtype and its backward must not see rounded statistics). */
static ag_tensor *norm_impl(bool rms, ag_tensor *x, ag_tensor *weight, ag_tensor *bias, double eps) {
  const char *name = rms ? "ag_rms_norm" : "ag_layer_norm";
  if (null_args(name, 1, &x)) return NULL;
  const int n_in = rms ? 2 : 3;
  ag_tensor *in[3] = {x, weight, bias};
  ag_devstate *ds = ag__same_device(name, n_in, in);
  if (!ds) return NULL;
  if (!ag_dtype_is_float(x->dtype) || x->ndim == 0) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs a floating tensor with at least one dim", name);
    return NULL;
  }
  int64_t D = x->shape[x->ndim - 1], N = D ? x->numel / D : 0;
  for (int i = 1; i < n_in; i++) {
    ag_tensor *w = in[i];
    if (!w) continue;
    if (w->dtype != x->dtype || w->ndim != 1 || w->shape[0] != D) {
      char b1[96], b2[96];
      ag_error_set(AG_ERR_SHAPE, "%s: %s %s must be %s[%lld] for input %s", name, i == 1 ? "weight" : "bias",
                   ag_tensor_describe(w, b1, sizeof b1), ag_dtype_name(x->dtype), (long long)D,
                   ag_tensor_describe(x, b2, sizeof b2));
      return NULL;
    }
  }
  if (!(eps >= 0) || isinf(eps)) { /* inf gives all zeros; 0 is PyTorch's too */
    ag_error_set(AG_ERR_INVALID, "%s: eps must be finite and >= 0, got %g", name, eps);
    return NULL;
  }
  const ag_kop kop = rms ? AG_K_RMSNORM : AG_K_LAYERNORM;
  if (!ag__supported(ds, kop, 0, x->dtype, name)) return NULL;
  int64_t s2[2] = {N, D}, s1[1] = {N};
  ag_tensor *xc0 = raw_contiguous(x);
  ag_tensor *xc = xc0 ? raw_view(xc0, 2, s2) : NULL;
  ag_tensor_release(xc0);
  ag_tensor *wc = weight ? raw_contiguous(weight) : NULL;
  ag_tensor *bc = !rms && bias ? raw_contiguous(bias) : NULL;
  ag_tensor *y = xc ? ag__tensor_new(ds, x->dtype, x->ndim, x->shape) : NULL;
  ag_dtype sdt = x->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *mean = y && !rms ? ag__tensor_new(ds, sdt, 1, s1) : NULL;
  ag_tensor *rstd = y && (rms || mean) ? ag__tensor_new(ds, sdt, 1, s1) : NULL;
  ag_status st = (rstd && (!weight || wc) && (rms || !bias || bc)) ? AG_OK : ag_last_status();
  if (st == AG_OK && N && D) {
    ag_kernel_call c;
    if (rms) ag__kcall_init(&c, kop, 0, name, 4, (ag_tensor *[]){y, xc, wc, rstd});
    else ag__kcall_init(&c, kop, 0, name, 6, (ag_tensor *[]){y, xc, wc, bc, mean, rstd});
    c.o[0].ndim = 2;
    c.o[0].shape[0] = N;
    c.o[0].shape[1] = D;
    c.o[0].strides[0] = D;
    c.o[0].strides[1] = 1;
    c.i[0] = N;
    c.i[1] = D;
    c.s[0] = eps;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(wc);
  ag_tensor_release(bc);
  if (st == AG_OK) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.s[0] = eps;
    ag_tensor *sv[3] = {xc, rms ? rstd : mean, rstd};
    y = record(y, rms ? AG_G_RMS_NORM : AG_G_LAYER_NORM, n_in, in, rms ? 2 : 3, sv, &p);
  } else {
    ag_tensor_release(y);
    y = NULL;
  }
  ag_tensor_release(xc);
  ag_tensor_release(mean);
  ag_tensor_release(rstd);
  return y;
}

ag_tensor *ag_embedding(ag_tensor *table, ag_tensor *indices) {
  static const char name[] = "ag_embedding";
  ag_tensor *in[2] = {table, indices};
  if (null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (indices->dtype != AG_I32 && indices->dtype != AG_I64) {
    ag_error_set(AG_ERR_DTYPE, "%s: indices must be i64 or i32, got %s", name, ag_dtype_name(indices->dtype));
    return NULL;
  }
  if (table->ndim != 2 || indices->ndim + 1 > AG_MAX_DIMS) {
    char x[96];
    ag_error_set(AG_ERR_SHAPE, "%s: table %s must be 2-d [V, D]", name, ag_tensor_describe(table, x, sizeof x));
    return NULL;
  }
  if (!ag__supported(ds, AG_K_EMBEDDING, 0, table->dtype, name)) return NULL;
  int64_t V = table->shape[0], D = table->shape[1], N = indices->numel;
  int64_t oshape[AG_MAX_DIMS];
  memcpy(oshape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
  oshape[indices->ndim] = D;
  ag_tensor *tc = raw_contiguous(table), *ic = ag__index_operand(ds, AG_K_EMBEDDING, table->dtype, indices);
  ag_tensor *out = (tc && ic) ? ag__tensor_new(ds, table->dtype, indices->ndim + 1, oshape) : NULL;
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && N && D) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_EMBEDDING, 0, name, 3, (ag_tensor *[]){out, tc, ic});
    c.o[0].ndim = 2;
    c.o[0].shape[0] = N;
    c.o[0].shape[1] = D;
    c.o[0].strides[0] = D;
    c.o[0].strides[1] = 1;
    c.o[2].ndim = 1;
    c.o[2].shape[0] = N;
    c.o[2].strides[0] = 1;
    c.i[0] = N;
    c.i[1] = D;
    c.i[2] = V;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(tc);
  if (st == AG_OK) out = record(out, AG_G_EMBEDDING, 2, in, 1, &ic, NULL);
  else out = finish(out, st);
  ag_tensor_release(ic);
  return out;
}

static ag_tensor *concat_impl(int n, ag_tensor *const *ts, int dim) {
  static const char name[] = "ag_concat";
  if (n <= 0 || !ts) {
    ag_error_set(AG_ERR_INVALID, "%s: needs at least one tensor", name);
    return NULL;
  }
  if (null_args(name, n, ts)) return NULL;
  ag_devstate *ds = ag__same_device(name, n, ts);
  if (!ds) return NULL;
  const ag_tensor *t0 = ts[0];
  int d = dim < 0 ? dim + t0->ndim : dim;
  if (d < 0 || d >= t0->ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, t0->ndim);
    return NULL;
  }
  int64_t shape[AG_MAX_DIMS];
  memcpy(shape, t0->shape, sizeof shape);
  shape[d] = 0;
  for (int k = 0; k < n; k++) {
    const ag_tensor *t = ts[k];
    bool ok = t->dtype == t0->dtype && t->ndim == t0->ndim;
    for (int i = 0; ok && i < t0->ndim; i++)
      if (i != d && t->shape[i] != t0->shape[i]) ok = false;
    if (!ok) {
      char x[96], y[96];
      ag_error_set(AG_ERR_SHAPE, "%s: %s and %s differ outside dim %d", name, ag_tensor_describe(t0, x, sizeof x),
                   ag_tensor_describe(t, y, sizeof y), d);
      return NULL;
    }
    if (__builtin_add_overflow(shape[d], t->shape[d], &shape[d])) {
      ag_error_set(AG_ERR_SHAPE, "%s: the sizes along dim %d add up past int64", name, d);
      return NULL;
    }
  }
  ag_tensor *out = ag__tensor_new(ds, t0->dtype, t0->ndim, shape);
  if (!out) return NULL;
  int64_t at = 0;
  ag_status st = AG_OK;
  for (int k = 0; k < n && st == AG_OK; k++) {
    ag_tensor *t = ts[k];
    if (t->numel) {
      int64_t vs[AG_MAX_DIMS];
      memcpy(vs, out->shape, sizeof vs);
      vs[d] = t->shape[d];
      ag_tensor *dst = ag__tensor_view(out, out->ndim, vs, out->strides, at * out->strides[d]);
      st = dst ? ag_copy_(dst, t) : ag_last_status();
      ag_tensor_release(dst);
    }
    at += t->shape[d];
  }
  if (st != AG_OK) return finish(out, st);
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  return record(out, AG_G_CONCAT, n, ts, 0, NULL, &p);
}

ag_tensor *ag_dropout(ag_tensor *a, double p, bool train, ag_generator *g) {
  static const char name[] = "ag_dropout";
  if (null_args(name, 1, &a)) return NULL;
  if (!(p >= 0 && p < 1)) {
    ag_error_set(AG_ERR_INVALID, "%s: p must be in [0, 1), got %g", name, p);
    return NULL;
  }
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if (!train || p == 0) return ag__alias(a);
  ag_devstate *ds = ag__ds(a);
  if (!ag__supported(ds, AG_K_DROPOUT, 0, a->dtype, name)) return NULL;
  ag_tensor *src = raw_contiguous(a);
  ag_tensor *out = src ? ag__tensor_new(ds, a->dtype, a->ndim, a->shape) : NULL;
  ag_tensor *mask = out ? ag__tensor_new(ds, a->dtype, a->ndim, a->shape) : NULL;
  ag_status st = mask ? AG_OK : ag_last_status();
  if (st == AG_OK && a->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_DROPOUT, 0, name, 3, (ag_tensor *[]){out, src, mask});
    c.s[0] = p;
    ag__generator_take(g, ((uint64_t)a->numel + 3) / 4, &c.seed, &c.offset);
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(src);
  if (st == AG_OK) {
    ag_gparams gp;
    memset(&gp, 0, sizeof gp);
    gp.s[0] = p;
    out = record(out, AG_G_DROPOUT, 1, &a, 1, &mask, &gp);
  } else {
    out = finish(out, st);
  }
  ag_tensor_release(mask);
  return out;
}

/* ---------------- autocast wrappers of the row-wise ops ---------------- */

ag_tensor *ag_cross_entropy(ag_tensor *logits, ag_tensor *targets, ag_reduction reduction, int32_t ignore_index) {
  if (!AC_ON() || !logits) return cross_entropy_impl(logits, targets, reduction, ignore_index);
  ac_args ac;
  if (!ac_begin(AC_F32, 1, &logits, &ac)) return NULL;
  return ac_end(&ac, cross_entropy_impl(logits, targets, reduction, ignore_index));
}

ag_tensor *ag_mse_loss(ag_tensor *a, ag_tensor *b, ag_reduction reduction) {
  if (!AC_ON() || !a || !b) return mse_impl(a, b, reduction);
  ag_tensor *ts[2] = {a, b};
  ac_args ac;
  if (!ac_begin(AC_F32, 2, ts, &ac)) return NULL;
  return ac_end(&ac, mse_impl(ts[0], ts[1], reduction));
}

ag_tensor *ag_layer_norm(ag_tensor *x, ag_tensor *weight, ag_tensor *bias, double eps) {
  if (!AC_ON() || !x) return norm_impl(false, x, weight, bias, eps);
  ag_tensor *ts[3] = {x, weight, bias};
  ac_args ac;
  if (!ac_begin(AC_F32, 3, ts, &ac)) return NULL;
  return ac_end(&ac, norm_impl(false, ts[0], ts[1], ts[2], eps));
}

ag_tensor *ag_rms_norm(ag_tensor *x, ag_tensor *weight, double eps) {
  if (!AC_ON() || !x) return norm_impl(true, x, weight, NULL, eps);
  ag_tensor *ts[2] = {x, weight};
  ac_args ac;
  if (!ac_begin(AC_F32, 2, ts, &ac)) return NULL;
  return ac_end(&ac, norm_impl(true, ts[0], ts[1], NULL, eps));
}

ag_tensor *ag_concat(int n, ag_tensor *const *ts, int dim) {
  if (!AC_ON() || n <= 0 || n > 8 || !ts) return concat_impl(n, ts, dim);
  ag_tensor *c[8];
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return concat_impl(n, ts, dim);
    c[i] = ts[i];
  }
  ac_args ac;
  if (!ac_begin(AC_WIDEST, n, c, &ac)) return NULL;
  return ac_end(&ac, concat_impl(n, c, dim));
}
