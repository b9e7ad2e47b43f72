/* The ops front end of scatter-add (ag_scatter_add, ag_index_add): a copy
 * of self, then one AG_K_SCATTER_ADD call adding src at the index along
 * dim, with self viewed as [O, X, In] and the index as [O, K, In] (element
 * strides; index_add's 1-d index broadcast with strides 0, 1, 0). Every
 * output element sums its contributions in order of k on every backend. */
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/ops_internal.h"

/* t narrowed to shape (ndim of t) from the start of every dim; a new
 * reference (a view). */
static ag_tensor *narrow_to(ag_tensor *t, const int64_t *shape) {
  ag_tensor *v = ag__alias(t);
  for (int i = 0; v && i < t->ndim; i++)
    if (shape[i] < t->shape[i]) {
      ag_tensor *s = ag_slice(v, i, 0, shape[i], 1);
      ag_tensor_release(v);
      v = s;
    }
  return v;
}

/* One launch: out (contiguous [O, X, In]) += src (contiguous [O, K, In]) at
 * the index (contiguous, [O, K, In], or 1-d of K when sel). */
static ag_status scatter_launch(const char *name, ag_devstate *ds, ag_tensor *out, ag_tensor *src, ag_tensor *ic,
                                bool sel, int64_t O, int64_t K, int64_t In, int64_t X) {
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_SCATTER_ADD, ic->dtype == AG_I64 ? AG_KV_IDX64 : AG_KV_IDX32, name, 3,
                 (ag_tensor *[]){out, src, ic});
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

static bool scatter_check(const char *name, ag_tensor *self, ag_tensor *index, ag_tensor *src, int dim, int *out_d,
                          ag_devstate **out_ds) {
  ag_tensor *in[3] = {self, index, src};
  if (ag__null_args(name, 3, in)) return false;
  ag_devstate *ds = ag__same_device(name, 3, in);
  if (!ds) return false;
  if (!ag_dtype_is_float(self->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(self->dtype));
    return false;
  }
  if (src->dtype != self->dtype) {
    ag_error_set(AG_ERR_DTYPE, "%s: src is %s, self is %s: they must have one dtype", name,
                 ag_dtype_name(src->dtype), ag_dtype_name(self->dtype));
    return false;
  }
  if (index->dtype != AG_I32 && index->dtype != AG_I64) {
    ag_error_set(AG_ERR_DTYPE, "%s: index must be i64 or i32, got %s", name, ag_dtype_name(index->dtype));
    return false;
  }
  int nd = self->ndim ? self->ndim : 1, d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, self->ndim);
    return false;
  }
  if (!ag__supported(ds, AG_K_SCATTER_ADD, AG_KV_IDX32, self->dtype, name)) return false;
  *out_d = d;
  *out_ds = ds;
  return true;
}

/* out = a copy of self with src added; src, ic contiguous of the index's
 * extent ([O, K, In] or 1-d when sel), O and In of the region: a region
 * narrower than self (scatter_add's smaller index) runs on a copy that is
 * written back. Grad mode is off here. */
static ag_tensor *scatter_run(const char *name, ag_devstate *ds, ag_tensor *self, ag_tensor *src, ag_tensor *index,
                              bool sel, int d, const int64_t *region) {
  int nd = self->ndim;
  int64_t O = 1, K = sel ? index->numel : (nd ? index->shape[d] : 1), In = 1, X = nd ? self->shape[d] : 1;
  for (int i = 0; i < d && i < nd; i++) O *= region[i];
  for (int i = d + 1; i < nd; i++) In *= region[i];
  bool narrow = false;
  for (int i = 0; i < nd; i++) narrow |= region[i] != self->shape[i];
  ag_tensor *out = ag__tensor_new(ds, self->dtype, nd, self->shape);
  ag_status st = out ? ag_copy_(out, self) : ag_last_status();
  ag_tensor *view = NULL, *work = NULL, *ic = NULL;
  if (st == AG_OK && narrow) {
    view = narrow_to(out, region);
    work = view ? ag_contiguous(view) : NULL; /* out itself where the region is contiguous */
    if (!work) st = ag_last_status();
  }
  if (st == AG_OK) {
    ic = ag__index_operand(ds, AG_K_SCATTER_ADD, self->dtype, index);
    if (!ic) st = ag_last_status();
  }
  if (st == AG_OK && O * K * In > 0 && X > 0)
    st = scatter_launch(name, ds, narrow ? work : out, src, ic, sel, O, K, In, X);
  if (st == AG_OK && narrow) st = ag_copy_(view, work);
  ag_tensor_release(ic);
  ag_tensor_release(work);
  ag_tensor_release(view);
  return ag__op_finish(out, st);
}

static ag_tensor *scatter_record(ag_tensor *out, ag_tensor *self, ag_tensor *index, ag_tensor *src, int d, bool sel,
                                 double alpha) {
  if (!out) return NULL;
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  p.i[1] = sel;
  p.s[0] = alpha;
  return ag__op_record(out, AG_G_SCATTER_ADD, 3, (ag_tensor *[]){self, index, src}, 0, NULL, &p);
}

/* NULL, with "name: a what b (dim n)" as AG_ERR_SHAPE. */
static ag_tensor *shape_error(const char *name, const char *what, ag_tensor *a, ag_tensor *b, int dim) {
  char b1[96], b2[96];
  ag_error_set(AG_ERR_SHAPE, "%s: %s %s %s (dim %d)", name, ag_tensor_describe(a, b1, sizeof b1), what,
               ag_tensor_describe(b, b2, sizeof b2), dim);
  return NULL;
}

ag_tensor *ag_scatter_add(ag_tensor *self, int dim, ag_tensor *index, ag_tensor *src) {
  static const char name[] = "ag_scatter_add";
  int d;
  ag_devstate *ds;
  if (!scatter_check(name, self, index, src, dim, &d, &ds)) return NULL;
  if (index->ndim != self->ndim || src->ndim != self->ndim) {
    char b1[96], b2[96], b3[96];
    ag_error_set(AG_ERR_SHAPE, "%s: self %s, index %s and src %s must have the same number of dims", name,
                 ag_tensor_describe(self, b1, sizeof b1), ag_tensor_describe(index, b2, sizeof b2),
                 ag_tensor_describe(src, b3, sizeof b3));
    return NULL;
  }
  int64_t region[AG_MAX_DIMS];
  for (int i = 0; i < self->ndim; i++) {
    if (index->shape[i] > src->shape[i]) return shape_error(name, "is larger than src", index, src, i);
    if (i != d && index->shape[i] > self->shape[i])
      return shape_error(name, "is larger than self", index, self, i);
    region[i] = i == d ? self->shape[i] : index->shape[i];
  }
  ag_no_grad_begin();
  ag_tensor *sv = narrow_to(src, index->shape), *sc = sv ? ag_contiguous(sv) : NULL;
  ag_tensor *out = sc ? scatter_run(name, ds, self, sc, index, false, d, region) : NULL;
  ag_tensor_release(sc);
  ag_tensor_release(sv);
  ag_grad_mode_end();
  return scatter_record(out, self, index, src, d, false, 1.0);
}

ag_tensor *ag_index_add(ag_tensor *self, int dim, ag_tensor *index, ag_tensor *source, double alpha) {
  static const char name[] = "ag_index_add";
  int d;
  ag_devstate *ds;
  if (!scatter_check(name, self, index, source, dim, &d, &ds)) return NULL;
  if (index->ndim > 1) {
    char b1[96];
    ag_error_set(AG_ERR_SHAPE, "%s: index %s must be 1-d", name, ag_tensor_describe(index, b1, sizeof b1));
    return NULL;
  }
  bool fits = source->ndim == self->ndim;
  for (int i = 0; fits && i < self->ndim; i++) fits = source->shape[i] == (i == d ? index->numel : self->shape[i]);
  if (self->ndim == 0) fits = source->ndim == 0 && index->numel == 1;
  if (!fits) return shape_error(name, "does not fit self's shape with dim of the index's length:", source, self, d);
  ag_no_grad_begin();
  ag_tensor *sc = alpha == 1.0 ? ag_contiguous(source) : ag_mul_scalar(source, alpha);
  ag_tensor *out = sc ? scatter_run(name, ds, self, sc, index, true, d, self->shape) : NULL;
  ag_tensor_release(sc);
  ag_grad_mode_end();
  return scatter_record(out, self, index, source, d, true, alpha);
}

/* The gradient of src (grad_ops.c): gather (index_select times alpha) of g
 * at the index, placed into zeros of src's shape where the index is
 * smaller. A new tensor, or NULL with the error set. */
ag_tensor *ag__scatter_add_src_grad(ag_tensor *g, ag_tensor *index, int d, bool sel, double alpha, int src_ndim,
                                    const int64_t *src_shape) {
  if (sel) {
    ag_tensor *s = ag_index_select(g, d, index);
    if (!s || alpha == 1.0) return s;
    ag_tensor *r = ag_mul_scalar(s, alpha);
    ag_tensor_release(s);
    return r;
  }
  ag_tensor *gi = ag_gather(g, d, index);
  if (!gi) return NULL;
  bool same = gi->ndim == src_ndim;
  for (int i = 0; same && i < src_ndim; i++) same = gi->shape[i] == src_shape[i];
  if (same) return gi;
  ag_tensor *full = ag_zeros(ag_tensor_device(gi), gi->dtype, src_ndim, src_shape);
  ag_tensor *v = full ? narrow_to(full, gi->shape) : NULL;
  ag_status st = v ? ag_copy_(v, gi) : ag_last_status();
  ag_tensor_release(v);
  ag_tensor_release(gi);
  return ag__op_finish(full, st);
}
