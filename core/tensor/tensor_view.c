/* Views and copies: view/reshape/permute/slice/expand, contiguous, cast,
 * copy_ and to_device. Each result is recorded for autograd as a view-shaped
 * node (record_view). */
#include <stdlib.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/tensor_internal.h"
#include "tensor/record.h"

/* ---------------- views ---------------- */

static int norm_dim(const char *op, int dim, int ndim) {
  int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", op, dim, ndim);
    return -1;
  }
  return d;
}

static ag_tensor *record_view(ag_tensor *out, ag_tensor *in, ag_gop op, const ag_gparams *p) {
  if (out && ag__grad_needed(1, &in) && ag__grad_record(out, op, 1, &in, 0, NULL, p) != AG_OK) {
    ag_tensor_release(out);
    return NULL;
  }
  return out;
}

static ag_gparams shape_params(const ag_tensor *t) {
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.ndim = t->ndim;
  memcpy(p.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return p;
}

/* Resolve a -1 and check the element count. */
static bool infer_shape(const char *op, const ag_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
  if (ndim < 0 || ndim > AG_MAX_DIMS || (ndim && !shape)) {
    ag_error_set(AG_ERR_SHAPE, "%s: ndim %d out of range", op, ndim);
    return false;
  }
  int infer = -1;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        ag_error_set(AG_ERR_SHAPE, "%s: only one dim may be -1", op);
        return false;
      }
      infer = i;
    } else if (shape[i] < 0) {
      ag_error_set(AG_ERR_SHAPE, "%s: negative size %lld", op, (long long)shape[i]);
      return false;
    } else if (__builtin_mul_overflow(n, shape[i], &n)) {
      ag_error_set(AG_ERR_SHAPE, "%s: the sizes multiply past int64 (dim %d of %lld)", op, i,
                   (long long)shape[i]);
      return false;
    }
    out[i] = shape[i];
  }
  if (infer >= 0) {
    if (n == 0 || t->numel % n) {
      ag_error_set(AG_ERR_SHAPE, "%s: cannot infer dim %d of %lld elements", op, infer, (long long)t->numel);
      return false;
    }
    out[infer] = t->numel / n;
    n *= out[infer];
  }
  if (n != t->numel) {
    char b[96];
    ag_error_set(AG_ERR_SHAPE, "%s: %s has %lld elements, cannot view as %lld", op,
                 ag_tensor_describe(t, b, sizeof b), (long long)t->numel, (long long)n);
    return false;
  }
  /* Sizes 0 count as 1 for strides: [0, 2^62, 8] has 0 elements but
   * strides that wrap. */
  return ag__shape_check(op, ndim, out, t->dtype, NULL);
}

/* Strides for viewing t as `shape` without a copy, or false (PyTorch's
 * computeStride: split t into runs of dims that are contiguous with each
 * other, and map each new dim onto one run). */
static bool view_strides(const ag_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
  if (t->numel == 0) {
    ag__contiguous_strides(ndim, shape, out);
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = t->ndim ? t->strides[t->ndim - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int td = t->ndim - 1; td >= 0; td--) {
    tensor_numel *= t->shape[td];
    if (td == 0 || (t->shape[td - 1] != 1 && t->strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = t->strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) {
    /* leftover size-1 dims */
    for (; view_d >= 0; view_d--) {
      if (shape[view_d] != 1) return false;
      out[view_d] = 1;
    }
  }
  return true;
}

ag_tensor *ag_view(ag_tensor *t, int ndim, const int64_t *shape) {
  if (ag__bad_tensor(t, "ag_view")) return NULL;
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  if (!infer_shape("ag_view", t, ndim, shape, s)) return NULL;
  if (!view_strides(t, ndim, s, st)) {
    ag_error_set(AG_ERR_SHAPE, "ag_view: layout cannot be viewed with this shape (use ag_reshape)");
    return NULL;
  }
  ag_gparams p = shape_params(t);
  return record_view(ag__tensor_view(t, ndim, s, st, t->offset), t, AG_G_VIEW, &p);
}

ag_tensor *ag_reshape(ag_tensor *t, int ndim, const int64_t *shape) {
  if (ag__bad_tensor(t, "ag_reshape")) return NULL;
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  if (!infer_shape("ag_reshape", t, ndim, shape, s)) return NULL;
  if (view_strides(t, ndim, s, st)) {
    ag_gparams p = shape_params(t);
    return record_view(ag__tensor_view(t, ndim, s, st, t->offset), t, AG_G_VIEW, &p);
  }
  ag_tensor *c = ag_contiguous(t);
  if (!c) return NULL;
  ag_tensor *r = ag_view(c, ndim, s);
  ag_tensor_release(c);
  return r;
}

ag_tensor *ag_flatten(ag_tensor *t) {
  if (ag__bad_tensor(t, "ag_flatten")) return NULL;
  int64_t n = t->numel;
  return ag_reshape(t, 1, &n);
}

ag_tensor *ag_permute(ag_tensor *t, const int *dims) {
  if (ag__bad_tensor(t, "ag_permute")) return NULL;
  if (t->ndim && !dims) {
    ag_error_set(AG_ERR_INVALID, "ag_permute: NULL dims");
    return NULL;
  }
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  bool used[AG_MAX_DIMS] = {0};
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.n_dims = t->ndim;
  for (int i = 0; i < t->ndim; i++) {
    int d = norm_dim("ag_permute", dims[i], t->ndim);
    if (d < 0) return NULL;
    if (used[d]) {
      ag_error_set(AG_ERR_SHAPE, "ag_permute: dim %d repeated", d);
      return NULL;
    }
    used[d] = true;
    s[i] = t->shape[d];
    st[i] = t->strides[d];
    p.dims[i] = d;
  }
  return record_view(ag__tensor_view(t, t->ndim, s, st, t->offset), t, AG_G_PERMUTE, &p);
}

ag_tensor *ag_transpose(ag_tensor *t, int dim0, int dim1) {
  if (ag__bad_tensor(t, "ag_transpose")) return NULL;
  int a = norm_dim("ag_transpose", dim0, t->ndim), b = a < 0 ? -1 : norm_dim("ag_transpose", dim1, t->ndim);
  if (a < 0 || b < 0) return NULL;
  int dims[AG_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) dims[i] = i;
  dims[a] = b;
  dims[b] = a;
  return ag_permute(t, dims);
}

ag_tensor *ag_slice(ag_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
  if (ag__bad_tensor(t, "ag_slice")) return NULL;
  int d = norm_dim("ag_slice", dim, t->ndim);
  if (d < 0) return NULL;
  if (step <= 0) {
    ag_error_set(AG_ERR_INVALID, "ag_slice: step must be positive, got %lld", (long long)step);
    return NULL;
  }
  /* Clamp as PyTorch does: any int64 start/end/step is valid and the
   * result has 0..n elements; no step below is computed in a way that can
   * wrap (n + a negative index cannot, and len <= n). */
  int64_t n = t->shape[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0) start = 0;
  if (end > n) end = n;
  if (start > n) start = n;
  if (end < start) end = start;
  int64_t len = end - start, size = len == 0 ? 0 : (len - 1) / step + 1;
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  memcpy(s, t->shape, sizeof s);
  memcpy(st, t->strides, sizeof st);
  s[d] = size;
  /* With one element or none the stride is never used for addressing; keep
   * the input's (stride * a huge step would wrap). With two or more,
   * step < len <= n, so stride * step is bounded by the input's extent. */
  int64_t off = 0;
  if (size > 1 && __builtin_mul_overflow(t->strides[d], step, &st[d])) {
    ag_error_set(AG_ERR_SHAPE, "ag_slice: stride %lld times step %lld overflows", (long long)t->strides[d],
                 (long long)step);
    return NULL;
  }
  if (__builtin_mul_overflow(start, t->strides[d], &off) || __builtin_add_overflow(off, t->offset, &off)) {
    ag_error_set(AG_ERR_SHAPE, "ag_slice: offset of element %lld overflows", (long long)start);
    return NULL;
  }
  ag_gparams p = shape_params(t);
  p.i[0] = d;
  p.i[1] = start;
  p.i[2] = end;
  p.i[3] = step;
  return record_view(ag__tensor_view(t, t->ndim, s, st, off), t, AG_G_SLICE, &p);
}

ag_tensor *ag_expand(ag_tensor *t, int ndim, const int64_t *shape) {
  if (ag__bad_tensor(t, "ag_expand")) return NULL;
  if (ndim < t->ndim || ndim > AG_MAX_DIMS || (ndim && !shape)) {
    ag_error_set(AG_ERR_SHAPE, "ag_expand: cannot expand a %d-d tensor to %d dims", t->ndim, ndim);
    return NULL;
  }
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t want = shape[i];
    if (j < 0) {
      if (want < 0) {
        ag_error_set(AG_ERR_SHAPE, "ag_expand: -1 not allowed for a new leading dim");
        return NULL;
      }
      s[i] = want;
      st[i] = 0;
    } else if (want == -1 || want == t->shape[j]) {
      s[i] = t->shape[j];
      st[i] = t->strides[j];
    } else if (t->shape[j] == 1 && want >= 0) {
      s[i] = want;
      st[i] = 0;
    } else {
      ag_error_set(AG_ERR_SHAPE, "ag_expand: dim %d of size %lld cannot expand to %lld", j,
                   (long long)t->shape[j], (long long)want);
      return NULL;
    }
  }
  if (!ag__shape_check("ag_expand", ndim, s, t->dtype, NULL)) return NULL;
  ag_gparams p = shape_params(t);
  return record_view(ag__tensor_view(t, ndim, s, st, t->offset), t, AG_G_EXPAND, &p);
}

ag_tensor *ag_unsqueeze(ag_tensor *t, int dim) {
  if (ag__bad_tensor(t, "ag_unsqueeze")) return NULL;
  if (t->ndim >= AG_MAX_DIMS) {
    ag_error_set(AG_ERR_SHAPE, "ag_unsqueeze: tensor already has %d dims", AG_MAX_DIMS);
    return NULL;
  }
  int d = norm_dim("ag_unsqueeze", dim, t->ndim + 1);
  if (d < 0) return NULL;
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  for (int i = 0, j = 0; i <= t->ndim; i++) {
    if (i == d) {
      s[i] = 1;
      /* Unused for addressing (size 1); the natural value when it fits. */
      if (j >= t->ndim || __builtin_mul_overflow(t->shape[j], t->strides[j], &st[i])) st[i] = 1;
    } else {
      s[i] = t->shape[j];
      st[i] = t->strides[j];
      j++;
    }
  }
  ag_gparams p = shape_params(t);
  return record_view(ag__tensor_view(t, t->ndim + 1, s, st, t->offset), t, AG_G_VIEW, &p);
}

ag_tensor *ag_squeeze(ag_tensor *t, int dim) {
  if (ag__bad_tensor(t, "ag_squeeze")) return NULL;
  int d = norm_dim("ag_squeeze", dim, t->ndim);
  if (d < 0) return NULL;
  if (t->shape[d] != 1) {
    ag_error_set(AG_ERR_SHAPE, "ag_squeeze: dim %d has size %lld, not 1", d, (long long)t->shape[d]);
    return NULL;
  }
  int64_t s[AG_MAX_DIMS] = {0}, st[AG_MAX_DIMS] = {0};
  for (int i = 0, j = 0; i < t->ndim; i++)
    if (i != d) {
      s[j] = t->shape[i];
      st[j] = t->strides[i];
      j++;
    }
  ag_gparams p = shape_params(t);
  return record_view(ag__tensor_view(t, t->ndim - 1, s, st, t->offset), t, AG_G_VIEW, &p);
}

/* ---------------- copies ---------------- */

/* dst[...] = src[...] with a cast; src already has dst's shape (strides may be 0). */
static ag_status launch_copy(ag_tensor *dst, const ag_koperand *src, const char *name) {
  ag_devstate *ds = ag__ds(dst);
  if (!ag__supports(ds, AG_K_UNARY, AG_U_COPY, dst->dtype) ||
      !ag__supports(ds, AG_K_UNARY, AG_U_COPY, src->dtype))
    return ag_error_set(AG_ERR_UNSUPPORTED, "%s from %s to %s is not supported on %s", name,
                        ag_dtype_name(src->dtype), ag_dtype_name(dst->dtype), ds->label);
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_UNARY, AG_U_COPY, name, 2, (ag_tensor *[]){dst, NULL});
  c.o[1] = *src;
  return ag__launch(ds, &c);
}

/* A new header over t's storage with t's layout. Ops that may return their
 * input unchanged return this instead, so every returned tensor is a fresh
 * reference that a scope can own. */
ag_tensor *ag__alias(ag_tensor *t) {
  if (!t) return NULL;
  ag_tensor *r = ag__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
  ag_gparams p = shape_params(t);
  return record_view(r, t, AG_G_VIEW, &p);
}

/* A new contiguous tensor holding t's values bit for bit; identity for
 * autograd (a view-shaped node with the same shape). */
static ag_tensor *copy_of(ag_tensor *t, const char *fn) {
  ag_tensor *r = ag__tensor_new(ag__ds(t), t->dtype, t->ndim, t->shape);
  if (!r) return NULL;
  ag_koperand src;
  ag__operand(&src, t);
  if (t->numel && launch_copy(r, &src, fn) != AG_OK) {
    ag_tensor_release(r);
    return NULL;
  }
  ag_gparams p = shape_params(t);
  return record_view(r, t, AG_G_VIEW, &p);
}

ag_tensor *ag_contiguous(ag_tensor *t) {
  if (ag__bad_tensor(t, "ag_contiguous")) return NULL;
  if (ag_tensor_is_contiguous(t)) return ag__alias(t);
  return copy_of(t, "ag_contiguous");
}

ag_tensor *ag_clone(ag_tensor *t) {
  if (ag__bad_tensor(t, "ag_clone")) return NULL;
  return copy_of(t, "ag_clone");
}

ag_tensor *ag_cast(ag_tensor *t, ag_dtype dt) {
  if (ag__bad_tensor(t, "ag_cast")) return NULL;
  if ((unsigned)dt >= AG_DTYPE_COUNT) {
    ag_error_set(AG_ERR_DTYPE, "ag_cast: invalid dtype %d", (int)dt);
    return NULL;
  }
  if (dt == t->dtype) return ag__alias(t);
  ag_tensor *r = ag__tensor_new(ag__ds(t), dt, t->ndim, t->shape);
  if (!r) return NULL;
  ag_koperand src;
  ag__operand(&src, t);
  if (t->numel && launch_copy(r, &src, "ag_cast") != AG_OK) {
    ag_tensor_release(r);
    return NULL;
  }
  ag_gparams p = shape_params(t);
  p.i[0] = t->dtype;
  if (ag_dtype_is_float(dt) && ag_dtype_is_float(t->dtype)) return record_view(r, t, AG_G_CAST, &p);
  return r;
}

ag_status ag__inplace_check(const ag_tensor *dst, const char *fn) {
  if (!dst->requires_grad || !ag_grad_enabled()) return AG_OK;
  char b[96];
  if (!dst->grad_fn)
    return ag_error_set(AG_ERR_INVALID,
                        "%s: %s is a leaf tensor that requires grad; writing it in place while grad mode is "
                        "on is refused (as in PyTorch): do it between ag_no_grad_begin() and "
                        "ag_grad_mode_end()", fn, ag_tensor_describe(dst, b, sizeof b));
  return ag_error_set(AG_ERR_INVALID,
                      "%s: %s requires grad (it has a graph); in-place writes are not recorded by autograd, so "
                      "its gradient would be wrong: write under ag_no_grad_begin(), or into a tensor that does "
                      "not require grad", fn, ag_tensor_describe(dst, b, sizeof b));
}

/* Broadcast operand of t to ndim/shape (zero strides); false if impossible. */
AG_HIDDEN bool ag__broadcast_operand(ag_koperand *o, const ag_tensor *t, int ndim, const int64_t *shape) {
  if (t->ndim > ndim) return false;
  o->base = t->st->base;
  o->offset = t->st->offset + (size_t)t->offset * ag_dtype_size(t->dtype);
  o->dtype = t->dtype;
  o->ndim = ndim;
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    o->shape[i] = shape[i];
    if (j < 0) o->strides[i] = 0;
    else if (t->shape[j] == shape[i]) o->strides[i] = shape[i] == 1 ? 0 : t->strides[j];
    else if (t->shape[j] == 1) o->strides[i] = 0;
    else return false;
  }
  return true;
}

enum { OV_NONE, OV_SAME, OV_PARTIAL };

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* First byte of t's first element (an address where segment handles are
 * addresses, else an offset within t's segment) and the byte span [lo, hi)
 * its elements cover; g becomes the gcd of g and t's byte strides. */
static uint64_t byte_span(const ag_tensor *t, bool addressable, uint64_t *lo, uint64_t *hi, uint64_t *g) {
  const uint64_t es = ag_dtype_size(t->dtype);
  uint64_t start = (addressable ? (uint64_t)(uintptr_t)t->st->base : 0) + t->st->offset + (uint64_t)t->offset * es;
  *lo = start;
  *hi = start + es;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] <= 1 || t->strides[i] == 0) continue;
    uint64_t step = (uint64_t)(t->strides[i] < 0 ? -t->strides[i] : t->strides[i]) * es;
    uint64_t ext = (uint64_t)(t->shape[i] - 1) * step;
    if (t->strides[i] < 0) *lo -= ext;
    else *hi += ext;
    *g = gcd_u64(*g, step);
  }
  return start;
}

/* How ag_copy_ reads and writes the same memory: not at all (OV_NONE);
 * each element of dst from the same element of src, o being src broadcast
 * to dst (OV_SAME: nothing to do); or otherwise (OV_PARTIAL: a transposed
 * or shifted view of dst, whose result would depend on the order in which
 * a kernel writes; refused, as PyTorch refuses it). Views that interleave
 * without sharing a byte (u[0::2] and u[1::2]) are apart: every address of
 * one minus every address of the other is the same remainder modulo the
 * gcd of all the byte strides, and when that remainder keeps the two
 * elements' bytes apart the views never meet. */
static int copy_overlap(const ag_tensor *dst, const ag_tensor *src, const ag_koperand *o) {
  if (src->numel == 0) return OV_NONE;
  const bool addressable = (ag__ds(dst)->be->flags & AG_BACKEND_F_ADDRESSABLE) != 0;
  if (!addressable && dst->st->base != src->st->base) return OV_NONE;
  uint64_t dlo, dhi, slo, shi, g = 0;
  const uint64_t d0 = byte_span(dst, addressable, &dlo, &dhi, &g);
  const uint64_t s0 = byte_span(src, addressable, &slo, &shi, &g);
  if (dhi <= slo || shi <= dlo) return OV_NONE;
  if (d0 == s0 && dst->dtype == src->dtype) {
    bool same = true;
    for (int i = 0; i < dst->ndim; i++)
      if (dst->shape[i] > 1 && dst->strides[i] != o->strides[i]) same = false;
    if (same) return OV_SAME;
  }
  if (g == 0) return OV_PARTIAL; /* single elements whose bytes meet */
  const uint64_t de = ag_dtype_size(dst->dtype), se = ag_dtype_size(src->dtype);
  const uint64_t rem = s0 >= d0 ? (s0 - d0) % g : (g - (d0 - s0) % g) % g;
  if (rem >= de && rem + se <= g) return OV_NONE;
  return OV_PARTIAL;
}

int ag__write_overlap(const ag_tensor *dst, const ag_tensor *src) {
  ag_koperand o;
  if (!ag__broadcast_operand(&o, src, dst->ndim, dst->shape)) return 2;
  return copy_overlap(dst, src, &o);
}

ag_status ag_copy_(ag_tensor *dst, ag_tensor *src) {
  if (ag__bad_tensor(dst, "ag_copy_") || ag__bad_tensor(src, "ag_copy_")) return ag_last_status();
  ag_status ist = ag__inplace_check(dst, "ag_copy_");
  if (ist != AG_OK) return ist;
  if (dst->numel == 0) return AG_OK;
  /* Several elements of dst at one address (an expanded view): which value
   * lands there would depend on the kernel's order. PyTorch refuses it too. */
  for (int i = 0; i < dst->ndim; i++)
    if (dst->strides[i] == 0 && dst->shape[i] > 1) {
      char b[96];
      return ag_error_set(AG_ERR_INVALID,
                          "ag_copy_: destination %s has overlapping elements (stride 0 in dim %d, an expanded "
                          "view); copy into a contiguous tensor instead", ag_tensor_describe(dst, b, sizeof b), i);
    }
  if (ag__ds(dst) != ag__ds(src)) {
    ag_tensor *moved = ag_to_device(src, ag_tensor_device(dst));
    if (!moved) return ag_last_status();
    ag_status st = ag_copy_(dst, moved);
    ag_tensor_release(moved);
    return st;
  }
  ag_koperand o;
  if (!ag__broadcast_operand(&o, src, dst->ndim, dst->shape)) {
    char a[96], b[96];
    return ag_error_set(AG_ERR_SHAPE, "ag_copy_: cannot copy %s into %s", ag_tensor_describe(src, a, sizeof a),
                        ag_tensor_describe(dst, b, sizeof b));
  }
  int ov = copy_overlap(dst, src, &o);
  if (ov == OV_SAME) { /* every element onto itself */
    ag__version_bump(dst);
    return AG_OK;
  }
  if (ov == OV_PARTIAL) {
    char a[96], b[96];
    return ag_error_set(AG_ERR_INVALID,
                        "ag_copy_: source %s and destination %s share memory (some elements of the source are "
                        "elements the copy writes, so the result would depend on the order of the writes); "
                        "copy the source into a new tensor first",
                        ag_tensor_describe(src, a, sizeof a), ag_tensor_describe(dst, b, sizeof b));
  }
  ag_status st = launch_copy(dst, &o, "ag_copy_");
  if (st == AG_OK) ag__version_bump(dst);
  return st;
}

ag_tensor *ag_to_device(ag_tensor *t, ag_device d) {
  if (ag__bad_tensor(t, "ag_to_device")) return NULL;
  ag_devstate *dst_ds = ag__devstate(d);
  if (!dst_ds) return NULL;
  ag_devstate *src_ds = ag__ds(t);
  if (dst_ds == src_ds) return ag__alias(t);
  if (t->dtype == AG_F64 && !ag__supports(dst_ds, AG_K_UNARY, AG_U_COPY, AG_F64)) {
    ag_error_set(AG_ERR_UNSUPPORTED, "ag_to_device: f64 is not supported on %s", dst_ds->label);
    return NULL;
  }
  ag_tensor *c = ag_contiguous(t);
  if (!c) return NULL;
  ag_tensor *r = ag__tensor_new(dst_ds, t->dtype, t->ndim, t->shape);
  ag_status st = r ? AG_OK : ag_last_status();
  size_t bytes = r ? r->st->nbytes : 0;
  size_t src_off = c->st->offset + (size_t)c->offset * ag_dtype_size(c->dtype);
  if (st == AG_OK && bytes) {
    ag_stream *ss = ag__current_stream(src_ds), *ds_ = ag__current_stream(dst_ds);
    if (src_ds->be->flags & AG_BACKEND_F_HOST_MEMORY) {
      /* Host memory (the CPU's): wait for its pending work, then one
       * host->device copy straight from it. */
      st = ag__sync_stream(ss, "ag_to_device");
      if (st == AG_OK)
        st = dst_ds->be->copy_h2d(ds_->bs, r->st->base, r->st->offset, (char *)c->st->base + src_off, bytes, false);
    } else if (dst_ds->be->flags & AG_BACKEND_F_HOST_MEMORY) {
      st = ag__sync_refused(src_ds, "ag_to_device");
      if (st == AG_OK) st = ag__sync_stream(ds_, "ag_to_device");
      if (st == AG_OK)
        st = src_ds->be->copy_d2h(ss->bs, (char *)r->st->base + r->st->offset, c->st->base, src_off, bytes);
      if (st == AG_OK) st = ag__sync_stream(ss, "ag_to_device");
    } else {
      /* Between two accelerators: through host memory. */
      st = ag__sync_refused(src_ds, "ag_to_device");
      void *tmp = st == AG_OK ? malloc(bytes) : NULL;
      if (st == AG_OK && !tmp) st = ag_error_set(AG_ERR_OOM, "ag_to_device: out of host memory for %zu bytes", bytes);
      if (st == AG_OK) st = src_ds->be->copy_d2h(ss->bs, tmp, c->st->base, src_off, bytes);
      if (st == AG_OK) st = ag__sync_stream(ss, "ag_to_device");
      if (st == AG_OK) st = dst_ds->be->copy_h2d(ds_->bs, r->st->base, r->st->offset, tmp, bytes, false);
      free(tmp);
    }
  }
  ag_tensor_release(c);
  if (st != AG_OK) {
    ag_tensor_release(r);
    return NULL;
  }
  ag_gparams p = shape_params(t);
  return record_view(r, t, AG_G_TO_DEVICE, &p);
}
