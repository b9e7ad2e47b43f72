/* The ops front end: validate arguments (NULLs, devices, dtypes, shapes),
 * allocate outputs, describe the work as one kernel call, record the
 * autograd node. Backends see only checked, broadcast operands. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "anygrad/amp.h"
#include "anygrad/autograd.h"
#include "runtime/devstate.h"
#include "tensor/ops_internal.h"
#include "tensor/record.h"
#include "tensor/autocast.h"

/* NULL input: keep the first error if there is one, else say which op. */
/* NULL (error kept, else AG_ERR_INVALID) or released (AG_ERR_STATE)
 * tensor arguments: true with the error set. */
AG_HIDDEN bool ag__null_args(const char *op, int n, ag_tensor *const *ts) {
  for (int i = 0; i < n; i++) {
    if (AG_LIKELY(ts[i] && ts[i]->magic == AG__T_LIVE)) continue;
    if (ts[i]) return ag__tensor_unusable(ts[i], op);
    if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "%s: argument %d is NULL", op, i + 1);
    return true;
  }
  return false;
}

AG_HIDDEN ag_tensor *ag__op_finish(ag_tensor *out, ag_status st) {
  if (st != AG_OK) {
    ag_tensor_release(out);
    return NULL;
  }
  return out;
}

AG_HIDDEN ag_tensor *ag__op_record(ag_tensor *out, ag_gop op, int n_in, ag_tensor *const *in, int n_saved,
                                 ag_tensor *const *saved, const ag_gparams *p) {
  if (!out || !ag__grad_needed(n_in, in)) return out;
  ag_gparams zero;
  if (!p) {
    memset(&zero, 0, sizeof zero);
    p = &zero;
  }
  return ag__op_finish(out, ag__grad_record(out, op, n_in, in, n_saved, saved, p));
}

/* Internal views and copies that never touch the tape. */
AG_HIDDEN ag_tensor *ag__raw_contiguous(ag_tensor *t) {
  ag_no_grad_begin();
  ag_tensor *r = ag_contiguous(t);
  ag_grad_mode_end();
  return r;
}

AG_HIDDEN ag_tensor *ag__raw_view(ag_tensor *t, int ndim, const int64_t *shape) {
  ag_no_grad_begin();
  ag_tensor *r = ag_reshape(t, ndim, shape);
  ag_grad_mode_end();
  return r;
}

AG_HIDDEN ag_tensor *ag__raw_transpose(ag_tensor *t, int a, int b) {
  ag_no_grad_begin();
  ag_tensor *r = ag_transpose(t, a, b);
  ag_grad_mode_end();
  return r;
}

AG_HIDDEN bool ag__broadcast_shapes(const char *op, int n, ag_tensor *const *ts, int *out_ndim, int64_t *out_shape) {
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

/* Casts ts in place into a (new references); false on error. */
AG_HIDDEN bool ag__ac_begin(int policy, int n, ag_tensor **ts, ag__ac_args *a) {
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

AG_HIDDEN ag_tensor *ag__ac_end(ag__ac_args *a, ag_tensor *r) {
  ag__autocast_resume();
  for (int k = 0; k < a->n; k++) ag_tensor_release(a->t[k]);
  return r;
}

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

ag_status ag__binary_into(const char *name, ag_binary_op bop, ag_tensor *out, ag_tensor *a, ag_tensor *b) {
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_BINARY, bop, name, 3, (ag_tensor *[]){out, NULL, NULL});
  ag__broadcast_operand(&c.o[1], a, out->ndim, out->shape);
  ag__broadcast_operand(&c.o[2], b, out->ndim, out->shape);
  c.s[0] = 1.0;
  c.s[1] = 0.0;
  return ag__launch(ag__ds(out), &c);
}

static ag_tensor *binary_impl(const char *name, ag_binary_op bop, ag_gop gop, ag_tensor *a, ag_tensor *b) {
  ag_tensor *in[2] = {a, b};
  if (ag__null_args(name, 2, in)) return NULL;
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
  if (!ag__broadcast_shapes(name, 2, in, &nd, shape)) return NULL;
  /* ag__launch refuses a sub-op the backend lacks; an empty result launches
   * nothing, so it is checked here */
  if ((a->numel == 0 || b->numel == 0) && !ag__supported(ds, AG_K_BINARY, bop, a->dtype, name)) return NULL;
  /* comparisons give bool (PyTorch); the kernel sees the inputs' dtype */
  ag_tensor *out = ag__tensor_new(ds, bi->compare ? AG_BOOL : a->dtype, nd, shape);
  if (!out) return NULL;
  if (out->numel && ag__binary_into(name, bop, out, a, b) != AG_OK) return ag__op_finish(out, AG_ERR_BACKEND);
  if ((int)gop < 0) return out;
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = bop;
  p.s[0] = 1.0;
  return ag__op_record(out, gop, 2, in, 0, NULL, &p);
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
  ag__ac_args ac;
  if (!ag__ac_begin(AC_WIDEST, 2, ts, &ac)) return NULL;
  return ag__ac_end(&ac, binary_impl(name, bop, gop, ts[0], ts[1]));
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
  if (ag__null_args(name, 1, &a)) return NULL;
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
    if (ag__launch(ds, &c) != AG_OK) return ag__op_finish(out, AG_ERR_BACKEND);
  }
  if (u->save == AG_SAVE_NG) return out;
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = uop;
  p.s[0] = s0;
  p.s[1] = s1;
  return ag__op_record(out, AG_G_UNARY, 1, &a, 0, NULL, &p);
}

/* The table's AMP policy: F32 ops run in f32 inside an autocast region. */
static ag_tensor *unary(const char *name, ag_unary_op uop, ag_tensor *a, double s0, double s1) {
  if (!AC_ON() || !a || !ag_unary_info_of(uop)->amp_f32) return unary_impl(name, uop, a, s0, s1);
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 1, &a, &ac)) return NULL;
  return ag__ac_end(&ac, unary_impl(name, uop, a, s0, s1));
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
  if (ag__null_args(name, 3, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 3, in);
  if (!ds) return NULL;
  if (!same_dtype(name, a, b)) return NULL;
  int nd;
  int64_t shape[AG_MAX_DIMS];
  if (!ag__broadcast_shapes(name, 3, in, &nd, shape)) return NULL;
  if (!ag__supported(ds, AG_K_WHERE, 0, a->dtype, name) || !ag__supported(ds, AG_K_WHERE, 0, cond->dtype, name))
    return NULL;
  ag_tensor *out = ag__tensor_new(ds, a->dtype, nd, shape);
  if (!out) return NULL;
  if (out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_WHERE, 0, name, 4, (ag_tensor *[]){out, NULL, NULL, NULL});
    for (int i = 0; i < 3; i++) ag__broadcast_operand(&c.o[i + 1], in[i], nd, shape);
    if (ag__launch(ds, &c) != AG_OK) return ag__op_finish(out, AG_ERR_BACKEND);
  }
  return ag__op_record(out, AG_G_WHERE, 3, in, 1, &cond, NULL);
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
  ag__ac_args ac;
  if (!ag__ac_begin(AC_WIDEST, 2, ts, &ac)) return NULL;
  return ag__ac_end(&ac, where_impl(cond, ts[0], ts[1]));
}

ag_tensor *ag_masked_fill(ag_tensor *a, ag_tensor *mask, double value) {
  ag_tensor *in[2] = {a, mask};
  if (ag__null_args("ag_masked_fill", 2, in)) return NULL;
  ag_tensor *v = ag_full(ag_tensor_device(a), a->dtype, 0, NULL, value);
  if (!v) return NULL;
  ag_tensor *r = ag_where(mask, v, a);
  ag_tensor_release(v);
  return r;
}
