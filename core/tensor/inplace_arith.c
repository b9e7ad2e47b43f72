/* In-place arithmetic as one call (ag_add_, ag_sub_, ag_mul_, ag_div_):
 * the out-of-place op into a temporary, ag_copy_ into self, the temporary
 * released. Saves a binding three calls and an object per op; the version
 * counter and the in-place refusals are ag_copy_'s. */
#include "anygrad/anygrad.h"
#include "tensor/tensor_internal.h"

/* Whether torch's can_cast allows a result of dtype r into self of dtype s:
 * never floating into integer, nor integer into bool. */
static bool can_cast(ag_dtype r, ag_dtype s) {
  if (ag_dtype_is_float(s)) return true;
  if (ag_dtype_is_float(r)) return false;
  return s != AG_BOOL || r == AG_BOOL;
}

static ag_status arith_(ag_tensor *self, ag_tensor *other, ag_tensor *(*op)(ag_tensor *, ag_tensor *),
                        const char *fn) {
  if (ag__bad_tensor(self, fn) || ag__bad_tensor(other, fn)) return ag_last_status();
  if (ag_grad_enabled() && (ag_tensor_requires_grad(self) || ag_tensor_requires_grad(other)))
    return ag_error_set(AG_ERR_INVALID,
                        "%s: grad mode is on and an operand requires grad: the library records no in-place "
                        "op, so the write would lose the gradient (compute it out of place, or write under "
                        "ag_no_grad_begin())", fn);
  ag_tensor *r = op(self, other);
  if (!r) return ag_last_status();
  ag_status st = AG_OK;
  if (!can_cast(ag_tensor_dtype(r), ag_tensor_dtype(self)))
    st = ag_error_set(AG_ERR_DTYPE, "%s: result type %s can't be cast to the desired output type %s", fn,
                      ag_dtype_name(ag_tensor_dtype(r)), ag_dtype_name(ag_tensor_dtype(self)));
  else
    st = ag_copy_(self, r);
  ag_tensor_release(r);
  return st;
}

ag_status ag_add_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_add, "ag_add_"); }
ag_status ag_sub_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_sub, "ag_sub_"); }
ag_status ag_mul_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_mul, "ag_mul_"); }
ag_status ag_div_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_div, "ag_div_"); }
