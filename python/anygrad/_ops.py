"""Ops: the elementwise ones generated from the op table (optable.h, read by
_lib at import), the rest written over the C API, and Tensor's operators."""
import builtins
import collections
import math
import numbers
from ctypes import byref, c_void_p

from . import _lib
from ._lib import lib, check, raise_last
from ._tensor import (Tensor, _wrap, _fail, _new, _t, _scalar, _finite, _dims_arg, full, as_dtype, bool_,
                      float32, int64, index_select)

__all__ = []


def _export(name, fn, method=True):
    fn.__name__ = name
    globals()[name] = fn
    __all__.append(name)
    if method and not hasattr(Tensor, name):
        setattr(Tensor, name, fn)


def _like(x, v):
    """A 0-d tensor holding the Python number v, in x's dtype and device."""
    if isinstance(v, Tensor):
        return v
    return full((), _scalar(v), dtype=x.dtype, device=x.device)


def _pair(a, b, name):
    if isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            b = _like(a, b)
    elif isinstance(b, Tensor):
        a = _like(b, a)
    else:
        raise TypeError("anygrad.%s: expected a Tensor, got %s and %s"
                        % (name, type(a).__name__, type(b).__name__))
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
                _t(x)
            h = f(x._h)
            if h:
                t = _new(_T)
                t._h = h
                return t
            _fail(name, x)
    elif n == 1:
        def op(x, s0):
            h = f(_t(x), _scalar(s0))
            if not h:
                raise_last(name)
            return _wrap(h)
    else:
        def op(x, s0, s1):
            h = f(_t(x), _scalar(s0), _scalar(s1))
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

def _arith(name, f_tt, f_ts, f_st):
    def op(a, b, _T=Tensor, _new=_new, _float=float):
        if a.__class__ is _T:
            bc = b.__class__
            if bc is _T:
                h = f_tt(a._h, b._h)
            elif bc is _float or bc is int:
                h = f_ts(a._h, b)
            elif isinstance(b, Tensor):
                h = f_tt(a._h, b._h)
            elif isinstance(b, numbers.Real) or _is_np_scalar(b):
                h = f_ts(a._h, _scalar(b))
            else:
                return NotImplemented
        elif isinstance(b, Tensor) and (isinstance(a, numbers.Real) or _is_np_scalar(a)):
            h = f_st(b._h, _scalar(a))
        else:
            raise TypeError("anygrad.%s: expected a Tensor, got %s and %s"
                            % (name, type(a).__name__, type(b).__name__))
        if h:
            t = _new(_T)
            t._h = h
            return t
        _fail(name, a, b)
    return op


def _is_np_scalar(x):
    import numpy as np
    return isinstance(x, np.generic) and x.ndim == 0 and x.dtype.kind in "biuf"


_add = _arith("add", lib.ag_add, lib.ag_add_scalar, lib.ag_add_scalar)
_sub = _arith("sub", lib.ag_sub, lib.ag_sub_scalar, lib.ag_rsub_scalar)
_mul = _arith("mul", lib.ag_mul, lib.ag_mul_scalar, lib.ag_mul_scalar)
_div = _arith("div", lib.ag_div, lib.ag_div_scalar, lib.ag_rdiv_scalar)
for _n, _f in (("add", _add), ("sub", _sub), ("mul", _mul), ("div", _div)):
    globals()[_n] = _f
    setattr(Tensor, _n, _f)
true_divide = divide = _div
multiply = _mul
subtract = _sub


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
Tensor.__mod__ = _fwd(lambda a, b: remainder(a, b))
Tensor.__rmod__ = _rev(lambda a, b: remainder(a, b))
Tensor.__floordiv__ = _fwd(lambda a, b: floor(_div(a, b)))


def pow(a, b):  # noqa: A001 - torch.pow
    if isinstance(a, Tensor) and not isinstance(b, Tensor):
        e = _scalar(b, "exponent")
        if e == 2.0:
            return square(a)
        if e == 1.0:
            return a.clone()
        return pow_scalar(a, e)
    if isinstance(b, Tensor) and not isinstance(a, Tensor):
        s = _finite(a, "base")
        if s <= 0:
            raise ValueError("anygrad.pow: a scalar base must be positive, got %r" % s)
        return exp(_mul(b, math.log(s)))
    a, b = _pair(a, b, "pow")
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
    h = lib.ag_matmul(_t(a), _t(b, "other"))
    if not h:
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
            n, dims = _dims_arg(dim, None)
            if dtype is not None:
                x = x.to(dtype)
            h = f(_t(x), n, dims, bool(keepdim))
        if h:
            t = _new(_T)
            t._h = h
            return t
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


def argmax(x, dim=None, keepdim=False):
    if dim is None:
        return _wrap(lib.ag_argmax(_t(x.reshape(-1)), 0, False), "argmax").long()
    return _wrap(lib.ag_argmax(_t(x), int(dim), bool(keepdim)), "argmax").long()


def argmin(x, dim=None, keepdim=False):
    return argmax(neg(x), dim, keepdim)


def max(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    if dim is None:
        return _amax(x)
    return _values_indices(_amax(x, dim, keepdim), argmax(x, dim, keepdim))


def min(x, dim=None, keepdim=False):  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    if dim is None:
        return _amin(x)
    return _values_indices(_amin(x, dim, keepdim), argmin(x, dim, keepdim))


def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    c = 1.0 if correction is None else _finite(correction, "correction")
    if unbiased is not None:
        c = 1.0 if unbiased else 0.0
    n, dims = _dims_arg(dim, None)
    return _wrap(lib.ag_var(_t(x), n, dims, c, bool(keepdim)), "var")


def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    c = 1.0 if correction is None else _finite(correction, "correction")
    if unbiased is not None:
        c = 1.0 if unbiased else 0.0
    n, dims = _dims_arg(dim, None)
    return _wrap(lib.ag_std(_t(x), n, dims, c, bool(keepdim)), "std")


def cumsum(x, dim):
    return _wrap(lib.ag_cumsum(_t(x), int(dim)), "cumsum")


def softmax(x, dim=-1):
    return _wrap(lib.ag_softmax(_t(x), int(dim)), "softmax")


def log_softmax(x, dim=-1):
    return _wrap(lib.ag_log_softmax(_t(x), int(dim)), "log_softmax")


def gather(x, dim, index):
    return _wrap(lib.ag_gather(_t(x), int(dim), _t(index, "index")), "gather")


def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    v, i = c_void_p(), c_void_p()
    check(lib.ag_topk(_t(x), int(k), int(dim), bool(largest), byref(v), byref(i)))
    return _values_indices(_wrap(v.value), _wrap(i.value))


def where(cond, a, b):
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("anygrad.where: a or b must be a Tensor")
    a, b = _pair(a, b, "where")
    return _wrap(lib.ag_where(_t(cond, "condition"), a._handle, b._handle), "where")


def masked_fill(x, mask, value):
    return _wrap(lib.ag_masked_fill(_t(x), _t(mask, "mask"), _scalar(value, "value")),
                 "masked_fill")


def cat(tensors, dim=0):
    ts = list(tensors)
    arr = (c_void_p * builtins.max(1, len(ts)))(*[_t(t) for t in ts])
    return _wrap(lib.ag_concat(len(ts), arr, int(dim)), "cat")


def stack(tensors, dim=0):
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def clamp(x, min=None, max=None):  # noqa: A002
    lo = -math.inf if min is None else _scalar(min, "min")
    hi = math.inf if max is None else _scalar(max, "max")
    if math.isnan(lo) or math.isnan(hi):
        raise ValueError("anygrad.clamp: bounds must not be NaN")
    return _wrap(lib.ag_clamp(_t(x), lo, hi), "clamp")


clip = clamp


for _n in ("sum", "mean", "amax", "amin", "argmax", "argmin", "max", "min", "var", "std",
           "cumsum", "softmax", "log_softmax", "gather", "topk", "masked_fill", "clamp", "clip",
           "index_select"):
    setattr(Tensor, _n, globals()[_n])
    __all__.append(_n)
__all__ += ["where", "cat", "stack", "concat"]
concat = cat
Tensor.where = lambda self, cond, other: where(cond, self, other)
