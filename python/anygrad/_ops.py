"""Ops: the elementwise ones generated from the op table (optable.h, read by
_lib at import), the rest written over the C API, and Tensor's operators."""
import builtins
import collections
import collections.abc
import math
import numbers
from ctypes import byref, c_void_p

from . import _lib
from ._lib import lib, check, raise_last
from ._tensor import (Tensor, _wrap, _fail, _new, _t, _scalar, _finite, _dims_arg, _dim_arg, _int_arg,
                      _fill_value, _argname, _I64_MIN, _I64_MAX, full, tensor, as_dtype, bool_, float32,
                      int32, int64, index_select)
from . import _dtype_rules

__all__ = []


def _export(name, fn, method=True):
    fn.__name__ = name
    globals()[name] = fn
    __all__.append(name)
    if method and not hasattr(Tensor, name):
        setattr(Tensor, name, fn)


def _like(x, v, fn="anygrad", arg="other", pos=2):
    """A 0-d tensor holding the Python number v, in x's dtype and device (a
    value x's integer dtype cannot hold is refused, not saturated)."""
    if isinstance(v, Tensor):
        return v
    if not (isinstance(v, numbers.Real) or _is_np_scalar(v)):
        raise TypeError("%s must be Tensor or a number, not %s" % (_argname(fn, arg, pos), type(v).__name__))
    dt = x.dtype
    f = _fill_value(v, dt, arg, fn)
    if f is None:  # an int64 a double would round
        return tensor(v, dtype=int64, device=x.device)
    return full((), f, dtype=dt, device=x.device)


def _pair(a, b, name, args=("input", "other"), pos=1):
    if isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            b = _like(a, b, name, args[1], pos + 1)
    elif isinstance(b, Tensor):
        a = _like(b, a, name, args[0], pos)
    else:
        raise TypeError("%s must be Tensor, not %s" % (_argname(name, args[0], pos), type(a).__name__))
    return a, b


# ---- generated from the op table -------------------------------------------------------

# The hot paths read ._h directly and build the result with object.__new__:
# on success that is all the Python work of an op; a NULL result (a C error
# or a released input) goes to _fail.
def _make_binary(name, f):
    def op(a, b, _T=Tensor, _new=_new):
        if a.__class__ is not _T or b.__class__ is not _T:
            a, b = _pair(a, b, name)
        h = f(a._h, b._h)
        if h:
            t = _new(_T)
            t._h = h
            return t
        _fail(name, a, b)
    return op


def _make_unary(name, f, n):
    if n == 0:
        def op(x, _T=Tensor, _new=_new):
            if x.__class__ is not _T:
                _t(x, name)
            h = f(x._h)
            if h:
                t = _new(_T)
                t._h = h
                return t
            _fail(name, x)
    elif n == 1:
        def op(x, s0):
            h = f(_t(x, name), _scalar(s0, "s0", name))
            if not h:
                raise_last(name)
            return _wrap(h)
    else:
        def op(x, s0, s1):
            h = f(_t(x, name), _scalar(s0, "s0", name), _scalar(s1, "s1", name))
            if not h:
                raise_last(name)
            return _wrap(h)
    return op


ELEMENTWISE_OPS = []
for _op in _lib.BINARY_OPS:
    if _op["api"] == "B":
        _export(_op["name"], _make_binary(_op["name"], getattr(lib, "ag_" + _op["name"])))
        ELEMENTWISE_OPS.append(_op["name"])
for _op in _lib.UNARY_OPS:
    if _op["api"] != "AH":
        _export(_op["name"], _make_unary(_op["name"], getattr(lib, "ag_" + _op["name"]),
                                         _op["nscalars"]))
        ELEMENTWISE_OPS.append(_op["name"])


# ---- arithmetic with Python scalars (ag_*_scalar) ------------------------------------------

def _arith(name, f_tt, f_ts, f_st, dunder):
    """add/sub/mul/div with Tensor or Python-number operands. The operator
    form (dunder) returns NotImplemented for a foreign right operand, so
    Python tries its reflected method; the function and the method raise."""
    def op(a, b, _T=Tensor, _new=_new, _float=float, _lo=_I64_MIN, _hi=_I64_MAX):
        if a.__class__ is _T:
            bc = b.__class__
            if bc is _T:
                h = f_tt(a._h, b._h)
            elif bc is _float or (bc is int and _lo <= b <= _hi):
                h = f_ts(a._h, b)
            elif isinstance(b, Tensor):
                h = f_tt(a._h, b._h)
            elif isinstance(b, numbers.Real) or _is_np_scalar(b):
                h = f_ts(a._h, _scalar(b, "other", name))
            elif dunder:
                return NotImplemented
            else:
                raise TypeError("%s(): argument 'other' (position 2) must be Tensor or a number, not %s"
                                % (name, type(b).__name__))
        elif isinstance(b, Tensor) and (isinstance(a, numbers.Real) or _is_np_scalar(a)):
            h = f_st(b._h, _scalar(a, "input", name))
        elif isinstance(a, Tensor) or isinstance(a, numbers.Real) or _is_np_scalar(a):
            raise TypeError("%s(): argument 'other' (position 2) must be Tensor, not %s"
                            % (name, type(b).__name__))
        else:
            raise TypeError("%s(): argument 'input' (position 1) must be Tensor, not %s"
                            % (name, type(a).__name__))
        if h:
            t = _new(_T)
            t._h = h
            return t
        if name == "div":  # two integer tensors: as float32, as torch
            ab = _dtype_rules.true_divide_operands(a, b)
            if ab is not None:
                lib.ag_error_clear()
                return op(*ab)
        _fail(name, a, b)
    return op


def _is_np_scalar(x):
    import numpy as np
    return isinstance(x, np.generic) and x.ndim == 0 and x.dtype.kind in "biuf"


_ARITH = {"add": (lib.ag_add, lib.ag_add_scalar, lib.ag_add_scalar),
          "sub": (lib.ag_sub, lib.ag_sub_scalar, lib.ag_rsub_scalar),
          "mul": (lib.ag_mul, lib.ag_mul_scalar, lib.ag_mul_scalar),
          "div": (lib.ag_div, lib.ag_div_scalar, lib.ag_rdiv_scalar)}
_add, _sub, _mul, _div = (_arith(n, *_ARITH[n], dunder=True) for n in ("add", "sub", "mul", "div"))
add, sub, mul, _div_fn = (_arith(n, *_ARITH[n], dunder=False) for n in ("add", "sub", "mul", "div"))


def div(a, b, rounding_mode=None):
    """torch.div: true division (integers give float32), or rounding_mode
    'floor' (floor_divide) or 'trunc' (toward zero; integers stay integers)."""
    if rounding_mode is None:
        return _div_fn(a, b)
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        return _dtype_rules.trunc_divide(a, b)
    raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'"
                       % (rounding_mode,))


for _n, _f in (("add", add), ("sub", sub), ("mul", mul), ("div", div)):
    setattr(Tensor, _n, _f)
true_divide = divide = div
multiply = mul
subtract = sub


def _rev(f):
    def r(self, other):
        if isinstance(other, Tensor):
            return f(other, self)
        if isinstance(other, numbers.Real) or _is_np_scalar(other):
            return f(other, self)
        return NotImplemented
    return r


def _fwd(f):
    def m(self, other):
        if isinstance(other, Tensor) or isinstance(other, numbers.Real) or _is_np_scalar(other):
            return f(self, other)
        return NotImplemented
    return m


Tensor.__add__ = _add  # returns NotImplemented for foreign right operands
Tensor.__radd__ = _rev(_add)
Tensor.__sub__ = _sub
Tensor.__rsub__ = _rev(_sub)
Tensor.__mul__ = _mul
Tensor.__rmul__ = _rev(_mul)
Tensor.__truediv__ = _div
Tensor.__rtruediv__ = _rev(_div)
Tensor.__neg__ = lambda self: neg(self)
Tensor.__pos__ = lambda self: self
Tensor.__abs__ = lambda self: globals()["abs"](self)
remainder = _dtype_rules.remainder  # integers exact, Python's sign rule
floor_divide = _dtype_rules.floor_divide  # integers stay integers, rounded toward -inf
Tensor.remainder = remainder
Tensor.floor_divide = floor_divide
Tensor.__mod__ = _fwd(remainder)
Tensor.__rmod__ = _rev(remainder)
Tensor.__floordiv__ = _fwd(floor_divide)
Tensor.__rfloordiv__ = _rev(floor_divide)
__all__.append("floor_divide")


def pow(a, b):  # noqa: A001 - torch.pow
    if isinstance(a, Tensor) and not isinstance(b, Tensor):
        e = _scalar(b, "exponent", "pow")
        if e == 2.0:
            return square(a)
        if e == 1.0:
            return a.clone()
        return pow_scalar(a, e)
    if isinstance(b, Tensor) and not isinstance(a, Tensor):
        s = _finite(a, "base", "pow")
        if s <= 0:
            raise ValueError("anygrad.pow: a scalar base must be positive, got %r" % s)
        return exp(_mul(b, math.log(s)))
    a, b = _pair(a, b, "pow", ("input", "exponent"))
    return exp(_mul(log(a), b))


Tensor.pow = pow
Tensor.__pow__ = _fwd(pow)
Tensor.__rpow__ = _rev(pow)
__all__ += ["add", "sub", "mul", "div", "pow", "true_divide", "divide", "multiply", "subtract"]

for _dunder, _name in (("__eq__", "eq"), ("__ne__", "ne"), ("__lt__", "lt"), ("__le__", "le"),
                       ("__gt__", "gt"), ("__ge__", "ge")):
    setattr(Tensor, _dunder, _fwd(globals()[_name]))
Tensor.__hash__ = object.__hash__


Tensor.__and__ = _fwd(lambda a, b: _pair(a, b, "and")[0].bool().long().mul(
    _pair(a, b, "and")[1].bool().long()).bool())
Tensor.__or__ = _fwd(lambda a, b: _add(_pair(a, b, "or")[0].bool().long(),
                                       _pair(a, b, "or")[1].bool().long()).bool())
Tensor.__invert__ = lambda self: eq(self.bool(), _like(self.bool(), 0))


def matmul(a, b):
    h = lib.ag_matmul(_t(a, "matmul"), _t(b, "matmul", "other", 2))
    if not h:
        _dtype_rules.check_matmul(a, b)  # torch's RuntimeError for two dtypes or integers
        raise_last("matmul")
    return _wrap(h)


Tensor.__matmul__ = _fwd(matmul)
Tensor.__rmatmul__ = lambda self, o: matmul(o, self) if isinstance(o, Tensor) else NotImplemented
Tensor.matmul = matmul
mm = bmm = matmul
__all__ += ["matmul", "mm", "bmm"]

# ---- reductions ------------------------------------------------------------------

_values_indices = collections.namedtuple("values_indices", ["values", "indices"])


def _reducer(name, f):
    def op(x, dim=None, keepdim=False, dtype=None, _T=Tensor):
        if dim is None and dtype is None and x.__class__ is _T:
            h = f(x._h, 0, None, keepdim is True)
        else:
            _t(x, name)
            n, dims = _dims_arg(dim, None, name)
            if dtype is not None:
                x = x.to(dtype)
            h = f(x._handle, n, dims, bool(keepdim))
        if h:
            t = _new(_T)
            t._h = h
            return t
        if name == "mean":
            _dtype_rules.check_mean(x, dtype)  # torch's RuntimeError for integers
        _fail(name, x)
    return op


sum = _reducer("sum", lib.ag_sum)  # noqa: A001
mean = _reducer("mean", lib.ag_mean)
_amax = _reducer("amax", lib.ag_max)
_amin = _reducer("amin", lib.ag_min)


def amax(x, dim=None, keepdim=False):
    return _amax(x, dim, keepdim)


def amin(x, dim=None, keepdim=False):
    return _amin(x, dim, keepdim)


def _arg_extreme(x, dim, keepdim, name):
    """ag_argmax along dim; dim None: over the flattened tensor (the flat
    view is held until the call has read it), keepdim giving torch's
    [1, ..., 1]. A 0-d tensor takes dim 0 or -1, as torch. The first index
    of the maximum, NaN above every number."""
    if dim is None:
        flat = x.reshape(-1)
        r = _wrap(lib.ag_argmax(flat._handle, 0, False), name)
        if keepdim and x.ndim:
            r = r.reshape(*([1] * x.ndim))
    else:
        d = _dim_arg(dim, name, "dim", 2)
        if x.ndim == 0 and d in (0, -1):
            r = _wrap(lib.ag_argmax(x.reshape(1)._handle, 0, False), name)
        else:
            r = _wrap(lib.ag_argmax(x._handle, d, bool(keepdim)), name)
    return r if r.dtype is int64 else r.long()


def argmax(x, dim=None, keepdim=False, _name="argmax"):
    _t(x, _name)
    return _arg_extreme(x, dim, keepdim, _name)


def argmin(x, dim=None, keepdim=False):
    _t(x, "argmin")
    if x.dtype.is_floating_point:  # -x is exact and keeps NaN the extreme, as torch's argmin
        return _arg_extreme(neg(x), dim, keepdim, "argmin")
    # Integers: -x overflows (int32's least value, every uint8 but 0), so
    # the first index where x equals its minimum, through argmax of the mask.
    if dim is None:
        lo = _amin(x)
    else:
        lo = _amin(x, _dim_arg(dim, "argmin", "dim", 2), True) if x.ndim else x
    return _arg_extreme(eq(x, lo).to(int32), dim, keepdim, "argmin")


def max(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    _t(x, "max")
    if dim is None:
        return _amax(x)
    _dims_arg(dim, None, "max")
    return _values_indices(_amax(x, dim, keepdim), argmax(x, dim, keepdim, "max"))


def min(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    _t(x, "min")
    if dim is None:
        return _amin(x)
    _dims_arg(dim, None, "min")
    return _values_indices(_amin(x, dim, keepdim), argmin(x, dim, keepdim))


def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    h = _t(x, "var")
    c = 1.0 if correction is None else _finite(correction, "correction", "var")
    if unbiased is not None:
        c = 1.0 if unbiased else 0.0
    n, dims = _dims_arg(dim, None, "var")
    return _wrap(lib.ag_var(h, n, dims, c, bool(keepdim)), "var")


def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    h = _t(x, "std")
    c = 1.0 if correction is None else _finite(correction, "correction", "std")
    if unbiased is not None:
        c = 1.0 if unbiased else 0.0
    n, dims = _dims_arg(dim, None, "std")
    return _wrap(lib.ag_std(h, n, dims, c, bool(keepdim)), "std")


def cumsum(x, dim):
    return _wrap(lib.ag_cumsum(_t(x, "cumsum"), _dim_arg(dim, "cumsum", "dim", 2)), "cumsum")


def softmax(x, dim=-1):
    return _wrap(lib.ag_softmax(_t(x, "softmax"), _dim_arg(dim, "softmax", "dim", 2)), "softmax")


def log_softmax(x, dim=-1):
    return _wrap(lib.ag_log_softmax(_t(x, "log_softmax"), _dim_arg(dim, "log_softmax", "dim", 2)),
                 "log_softmax")


def gather(x, dim, index):
    d = _dim_arg(dim, "gather", "dim", 2)
    h = lib.ag_gather(_t(x, "gather"), d, _t(index, "gather", "index", 3))
    if not h and lib.ag_tensor_dtype(x._h) not in _FLOAT_CODES and index.dtype in (int32, int64):
        from ._index import _take  # integer and bool values: through floating types
        lib.ag_error_clear()
        return _take(x, d, index, lib.ag_gather)
    return _wrap(h, "gather")


def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    v, i = c_void_p(), c_void_p()
    check(lib.ag_topk(_t(x, "topk"), _int_arg(k, "topk", "k", 2), _dim_arg(dim, "topk", "dim", 3),
                      bool(largest), byref(v), byref(i)))
    return _values_indices(_wrap(v.value), _wrap(i.value))


def where(cond, a, b):
    hc = _t(cond, "where", "condition", 1)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("where(): argument 'input' (position 2) or 'other' (position 3) must be Tensor, "
                        "not %s and %s" % (type(a).__name__, type(b).__name__))
    a, b = _pair(a, b, "where", ("input", "other"), 2)
    return _wrap(lib.ag_where(hc, a._handle, b._handle), "where")


def masked_fill(x, mask, value):
    h, hm = _t(x, "masked_fill"), _t(mask, "masked_fill", "mask", 2)
    v = _fill_value(value, x.dtype, "value", "masked_fill")
    if v is None:  # an int64 a double would round: from an exact 0-d tensor
        return where(mask, tensor(value, dtype=int64, device=x.device), x)
    return _wrap(lib.ag_masked_fill(h, hm, v), "masked_fill")


def _tensor_seq(tensors, fn):
    if isinstance(tensors, Tensor) or not isinstance(tensors, collections.abc.Iterable):
        raise TypeError("%s(): argument 'tensors' (position 1) must be tuple of Tensors, not %s"
                        % (fn, type(tensors).__name__))
    ts = list(tensors)
    for k, t in enumerate(ts):
        if not isinstance(t, Tensor):
            raise TypeError("%s(): expected Tensor as element %d in argument 'tensors', but got %s"
                            % (fn, k, type(t).__name__))
    return ts


def cat(tensors, dim=0):
    ts = _tensor_seq(tensors, "cat")
    d = _dim_arg(dim, "cat", "dim", 2)
    arr = (c_void_p * builtins.max(1, len(ts)))(*[t._handle for t in ts])
    return _wrap(lib.ag_concat(len(ts), arr, d), "cat")


def stack(tensors, dim=0):
    ts = _tensor_seq(tensors, "stack")
    d = _dim_arg(dim, "stack", "dim", 2)
    return cat([t.unsqueeze(d) for t in ts], d)


def clamp(x, min=None, max=None):  # noqa: A002
    h = _t(x, "clamp")
    lo = -math.inf if min is None else _scalar(min, "min", "clamp")
    hi = math.inf if max is None else _scalar(max, "max", "clamp")
    if math.isnan(lo) or math.isnan(hi):
        raise ValueError("anygrad.clamp: bounds must not be NaN")
    return _wrap(lib.ag_clamp(h, lo, hi), "clamp")


clip = clamp


# ---- in-place ops ---------------------------------------------------------------------
# The library writes in place through ag_copy_ and ag_fill_ (ag_add_ and friends end in ag_copy_), with its
# version counters (a backward that needs a tensor written since it was
# saved fails) and its refusal to write a tensor that requires grad while
# grad mode is on. So add_(x) computes self + x and copies it into self's
# storage: views see it, identity and .grad stay. When the result has a
# graph (grad mode on, an operand requires grad) nothing can be written
# without losing the gradient: a leaf that requires grad is torch's
# RuntimeError, the named methods raise, and the operators (+=, -=, *=,
# /=) rebind their target to the out-of-place result (docs/python.md).

_DT = lib.ag_tensor_dtype
_FLOAT_CODES = (0, 1, 2, 4)
_TORCH_DT = {0: "Float", 1: "Half", 2: "BFloat16", 3: "Int", 4: "Double", 5: "Long", 6: "Bool", 7: "Byte"}


def _kind(code):
    return 2 if code in _FLOAT_CODES else 0 if code == 6 else 1


def _write(self, r, name, rebind=False):
    """Make self hold r, the out-of-place result of `name` on self."""
    sh, rh = self._h, r._h
    sd = _DT(sh)
    if sd not in _FLOAT_CODES:  # torch's can_cast: never float into int, nor int into bool
        rd = _DT(rh)
        if rd != sd and _kind(rd) > _kind(sd):
            raise RuntimeError("%s(): result type %s can't be cast to the desired output type %s"
                               % (name, _TORCH_DT[rd], _TORCH_DT[sd]))
    if lib.ag_tensor_requires_grad(rh):
        return _write_graph(self, r, name, rebind)
    st = lib.ag_copy_(sh, rh)
    if st == 2:  # AG_ERR_SHAPE: broadcasting made the result larger than self
        lib.ag_error_clear()
        raise RuntimeError("%s(): output with shape %s doesn't match the broadcast shape %s"
                           % (name, list(self.shape), list(r.shape)))
    if st:
        from ._tensor import _inplace_status
        _inplace_status(self, st, name)
    return self


def _write_graph(self, r, name, rebind):
    sh = self._h
    if lib.ag_tensor_requires_grad(sh) and lib.ag_tensor_is_leaf(sh):
        raise RuntimeError("%s(): a leaf Variable that requires grad is being used in an in-place operation "
                           "(write it under anygrad.no_grad())" % name)
    if not rebind:
        raise RuntimeError("%s(): the result requires grad (grad mode is on and an operand requires grad) and "
                           "the library records no in-place op: writing it into the tensor's storage would "
                           "lose the gradient. Write y = y op x (the operators +=, -=, *=, /= do), or run it "
                           "under anygrad.no_grad()" % name)
    if tuple(r.shape) != tuple(self.shape):
        raise RuntimeError("%s(): output with shape %s doesn't match the broadcast shape %s"
                           % (name, list(self.shape), list(r.shape)))
    if _DT(r._h) != _DT(sh):
        r = r.to(self.dtype)
    self._h, r._h = r._h, sh  # self takes the result and its graph; r drops the old reference
    return self


def _scaled(other, alpha, name):
    if alpha == 1 and not isinstance(alpha, bool):
        return other
    a = _scalar(alpha, "alpha", name)
    return _mul(other, a) if isinstance(other, Tensor) else _scalar(other, "other", name) * a


def _t_self(x, name):
    if x.__class__ is not Tensor and not isinstance(x, Tensor):
        raise TypeError("%s(): argument 'input' (position 1) must be Tensor, not %s" % (name, type(x).__name__))
    if not x._h:
        raise RuntimeError("anygrad: use of a released tensor")
    return x


def _fast_write(f_tt, f_ts, f_inplace):
    """The common case of an in-place op without Python objects: a Tensor
    operand through the library's one in-place call (ag_add_, ...), a float
    operand as the op, ag_copy_ into self's storage and the temporary's
    release (a floating self, no graph). The library's calls move the
    version counter and refuse what needs a graph. Returns self, or None
    for the general path (which rebinds, or raises the error)."""
    def fast(self, other, _T=Tensor, _dt=_DT, _rg=lib.ag_tensor_requires_grad, _copy=lib.ag_copy_,
             _rel=lib.ag_tensor_release, _fl=_FLOAT_CODES, _clear=lib.ag_error_clear):
        if self.__class__ is not _T:
            return None
        oc = other.__class__
        if oc is _T and f_inplace is not None:
            if f_inplace(self._h, other._h) == 0:
                return self
            _clear()
            return None
        sh = self._h
        if not sh or _dt(sh) not in _fl:
            return None
        if oc is _T:
            oh = other._h
            if not oh:
                return None
            rh = f_tt(sh, oh)
        elif oc is float:
            rh = f_ts(sh, other)
        else:
            return None
        if not rh:
            _clear()
            return None
        if _rg(rh):  # a graph: the general path rebinds or raises
            _rel(rh)
            return None
        st = _copy(sh, rh)
        _rel(rh)
        if st:  # nothing was written: the general path says why
            _clear()
            return None
        return self
    return fast


_add_fast = _fast_write(lib.ag_add, lib.ag_add_scalar, getattr(lib, "ag_add_", None))
_sub_fast = _fast_write(lib.ag_sub, lib.ag_sub_scalar, getattr(lib, "ag_sub_", None))
_mul_fast = _fast_write(lib.ag_mul, lib.ag_mul_scalar, getattr(lib, "ag_mul_", None))
_div_fast = _fast_write(lib.ag_div, lib.ag_div_scalar, getattr(lib, "ag_div_", None))


def add_(self, other, alpha=1, _T=Tensor, _f=getattr(lib, "ag_add_", None), _clear=lib.ag_error_clear):
    # two tensors: one C call (ag_add_ writes self, or says why not)
    if other.__class__ is _T and self.__class__ is _T and alpha.__class__ is int and alpha == 1 and _f:
        if _f(self._h, other._h) == 0:
            return self
        _clear()
    elif alpha.__class__ is int and alpha == 1 and _add_fast(self, other) is not None:
        return self
    return _write(_t_self(self, "add_"), add(self, _scaled(other, alpha, "add_")), "add_")


def sub_(self, other, alpha=1):
    if alpha.__class__ is int and alpha == 1 and _sub_fast(self, other) is not None:
        return self
    return _write(_t_self(self, "sub_"), sub(self, _scaled(other, alpha, "sub_")), "sub_")


def mul_(self, other):
    if _mul_fast(self, other) is not None:
        return self
    return _write(_t_self(self, "mul_"), mul(self, other), "mul_")


def div_(self, other):
    if _div_fast(self, other) is not None:
        return self
    return _write(_t_self(self, "div_"), div(self, other), "div_")


def clamp_(self, min=None, max=None):  # noqa: A002
    return _write(_t_self(self, "clamp_"), clamp(self, min, max), "clamp_")


def pow_(self, exponent):
    return _write(_t_self(self, "pow_"), pow(self, exponent), "pow_")


def _iop(f, name):
    def iop(self, other):
        if not (isinstance(other, Tensor) or isinstance(other, numbers.Real) or _is_np_scalar(other)):
            return NotImplemented
        return _write(_t_self(self, name), f(self, other), name, rebind=True)
    iop.__name__ = name
    return iop


for _n, _f in (("add_", add_), ("sub_", sub_), ("mul_", mul_), ("div_", div_), ("clamp_", clamp_),
               ("pow_", pow_)):
    setattr(Tensor, _n, _f)
Tensor.clip_ = clamp_
Tensor.true_divide_ = Tensor.divide_ = div_
Tensor.multiply_ = mul_
Tensor.subtract_ = sub_
Tensor.__iadd__ = _iop(add, "__iadd__")
Tensor.__isub__ = _iop(sub, "__isub__")
Tensor.__imul__ = _iop(mul, "__imul__")
Tensor.__itruediv__ = _iop(div, "__itruediv__")
Tensor.__ifloordiv__ = _iop(floor_divide, "__ifloordiv__")
Tensor.__imod__ = _iop(remainder, "__imod__")


def _unary_inplace(name, f):
    def op(self):
        return _write(_t_self(self, name + "_"), f(self), name + "_")
    op.__name__ = name + "_"
    return op


# relu_, neg_, exp_, sigmoid_, ...: every elementwise op of the table that
# takes no scalar
for _op in _lib.UNARY_OPS:
    if _op["api"] == "A0" and not hasattr(Tensor, _op["name"] + "_"):
        setattr(Tensor, _op["name"] + "_", _unary_inplace(_op["name"], globals()[_op["name"]]))


for _n in ("sum", "mean", "amax", "amin", "argmax", "argmin", "max", "min", "var", "std",
           "cumsum", "softmax", "log_softmax", "gather", "topk", "masked_fill", "clamp", "clip",
           "index_select"):
    setattr(Tensor, _n, globals()[_n])
    __all__.append(_n)
__all__ += ["where", "cat", "stack", "concat"]
concat = cat
Tensor.where = lambda self, cond, other: where(cond, self, other)
