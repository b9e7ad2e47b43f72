/* In-place arithmetic as one call (ag_add_, ag_sub_, ag_mul_, ag_div_).
 * Where it is safe the op's one kernel writes self's storage: self
 * contiguous and floating, other of self's dtype on self's device and
 * broadcasting to self's shape, other apart from self's memory or exactly
 * self's elements, autocast off. Otherwise the out-of-place op into a
 * temporary, ag_copy_ into self, the temporary released. Both ways the
 * in-place refusals (ag__inplace_check) and the version bump are
 * ag_copy_'s, and the values are the out-of-place op's bit for bit. */
#include "anygrad/anygrad.h"
#include "tensor/ops_internal.h"
#include "tensor/tensor_internal.h"

/* Whether torch's can_cast allows a result of dtype r into self of dtype s:
 * never floating into integer, nor integer into bool. */
static bool can_cast(ag_dtype r, ag_dtype s) {
  if (ag_dtype_is_float(s)) return true;
  if (ag_dtype_is_float(r)) return false;
  return s != AG_BOOL || r == AG_BOOL;
}

/* Whether bop's kernel may write self's storage directly (see above). */
static bool direct_ok(const ag_tensor *self, const ag_tensor *other) {
  if (self->dtype != other->dtype || !ag_dtype_is_float(self->dtype) || ag__ds(self) != ag__ds(other)) return false;
  if (AC_ON() || !ag_tensor_is_contiguous(self)) return false;
  return ag__write_overlap(self, other) != 2;
}

static ag_status arith_(ag_tensor *self, ag_tensor *other, ag_tensor *(*op)(ag_tensor *, ag_tensor *),
                        ag_binary_op bop, const char *fn) {
  if (ag__bad_tensor(self, fn) || ag__bad_tensor(other, fn)) return ag_last_status();
  if (ag_grad_enabled() && (ag_tensor_requires_grad(self) || ag_tensor_requires_grad(other)))
    return ag_error_set(AG_ERR_INVALID,
                        "%s: grad mode is on and an operand requires grad: the library records no in-place "
                        "op, so the write would lose the gradient (compute it out of place, or write under "
                        "ag_no_grad_begin())", fn);
  if (direct_ok(self, other)) {
    ag_status st = ag__inplace_check(self, fn);
    if (st != AG_OK || self->numel == 0) return st;
    if (!ag__supported(ag__ds(self), AG_K_BINARY, bop, self->dtype, fn)) return ag_last_status();
    st = ag__binary_into(fn, bop, self, self, other);
    if (st == AG_OK) ag__version_bump(self);
    return st;
  }
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

ag_status ag_add_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_add, AG_B_ADD, "ag_add_"); }
ag_status ag_sub_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_sub, AG_B_SUB, "ag_sub_"); }
ag_status ag_mul_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_mul, AG_B_MUL, "ag_mul_"); }
ag_status ag_div_(ag_tensor *self, ag_tensor *other) { return arith_(self, other, ag_div, AG_B_DIV, "ag_div_"); }
