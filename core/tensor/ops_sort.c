/* The ops front end of sorting (ag_sort, ag_argsort): one AG_K_SORT call
 * over x viewed as [outer, r, inner]. The values are x gathered at the
 * indices, so they record ag_gather's node: their gradient is the upstream
 * gradient scattered back through the indices (AG_K_GATHER_BWD). */
#include <string.h>

#include "tensor/ops_internal.h"

static ag_status sort_run(const char *name, ag_tensor *x, int dim, bool descending, bool want_values,
                          ag_tensor **out_values, ag_tensor **out_indices) {
  if (ag__null_args(name, 1, &x)) return ag_last_status();
  ag_devstate *ds = ag__ds(x);
  if (!ag_dtype_is_float(x->dtype))
    return ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(x->dtype));
  int nd = x->ndim ? x->ndim : 1, d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd)
    return ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, x->ndim);
  const int sub = descending ? AG_KV_SORT_DESCENDING : AG_KV_SORT_ASCENDING;
  if (!ag__supported(ds, AG_K_SORT, sub, x->dtype, name)) return ag_last_status();
  int64_t O = 1, R = x->ndim ? x->shape[d] : 1, In = 1;
  for (int i = 0; i < d && i < x->ndim; i++) O *= x->shape[i];
  for (int i = d + 1; i < x->ndim; i++) In *= x->shape[i];
  ag_tensor *xs = ag__raw_contiguous(x);
  ag_tensor *v = xs ? ag__tensor_new(ds, x->dtype, x->ndim, x->shape) : NULL;
  ag_tensor *ix = v ? ag__tensor_new(ds, AG_I64, x->ndim, x->shape) : NULL;
  ag_status st = ix ? AG_OK : ag_last_status();
  if (st == AG_OK && v->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_SORT, sub, name, 3, (ag_tensor *[]){v, xs, ix});
    c.i[0] = O;
    c.i[1] = R;
    c.i[2] = In;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(xs);
  if (st == AG_OK && want_values) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.i[0] = d;
    p.i[1] = 0; /* gather, not index_select */
    v = ag__op_record(v, AG_G_GATHER, 2, (ag_tensor *[]){x, ix}, 0, NULL, &p);
    if (!v) st = ag_last_status();
  }
  if (st != AG_OK || !want_values) ag_tensor_release(v);
  if (st != AG_OK) {
    ag_tensor_release(ix);
    return st;
  }
  if (want_values) *out_values = v;
  if (out_indices) *out_indices = ix;
  else ag_tensor_release(ix);
  return AG_OK;
}

ag_status ag_sort(ag_tensor *x, int dim, bool descending, ag_tensor **out_values, ag_tensor **out_indices) {
  static const char name[] = "ag_sort";
  if (out_values) *out_values = NULL;
  if (out_indices) *out_indices = NULL;
  if (!out_values) return ag_error_set(AG_ERR_INVALID, "%s: out_values must not be NULL", name);
  return sort_run(name, x, dim, descending, true, out_values, out_indices);
}

ag_tensor *ag_argsort(ag_tensor *x, int dim, bool descending) {
  ag_tensor *ix = NULL;
  return sort_run("ag_argsort", x, dim, descending, false, NULL, &ix) == AG_OK ? ix : NULL;
}
