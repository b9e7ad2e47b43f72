"""Tensor methods and functions a PyTorch program reaches for first, over
the views, reductions and sorts of the C API: flatten(start_dim, end_dim),
einsum, isclose/allclose, isnan/isinf/isfinite, any/all, repeat, split/chunk,
sort/argsort, norm, linspace, eye, new_* and the byte sizes. Each is a
function of the package and, where torch has one, a Tensor method; each
differentiates through the ops it is built from."""
import builtins
import collections
import math
import numbers
from ctypes import byref, c_void_p

import numpy as np

from . import _ops
from ._lib import lib, check
from ._tensor import (Tensor, _wrap, _t, _tensor_in, _int_arg, _int_value, _dim_index, _shape_arg,
                      _scalar, _finite, _defaults, _argname, tensor, zeros, ones, empty, full, as_dtype,
                      bool_, uint8, int32, int64, float32, float64)

__all__ = []


def _export(name, fn, method=True):
    globals()[name] = fn
    __all__.append(name)
    if method:
        setattr(Tensor, name, fn)


def _dims(x):
    return builtins.max(x.ndim, 1)


def _norm_dim(d, n, fn):
    """d (an int) as an index into n dims (a 0-d tensor counts as 1-d)."""
    k = _dim_index(d, builtins.max(n, 1), fn)
    return k + builtins.max(n, 1) if k < 0 else k


# ---- shapes ------------------------------------------------------------------------


def flatten(x, start_dim=0, end_dim=-1):
    """torch.flatten: dims start_dim..end_dim merged into one (a view where
    the strides allow, as reshape); a 0-d tensor becomes 1-d."""
    _t(x, "flatten")
    n = x.ndim
    s = _norm_dim(start_dim, n, "flatten")
    e = _norm_dim(end_dim, n, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if n == 0:
        return x.reshape(1)
    shape = list(x.shape)
    if s == e:
        return x
    m = 1
    for v in shape[s:e + 1]:
        m *= v
    return x.reshape(*(shape[:s] + [m] + shape[e + 1:]))


def repeat(x, *sizes):
    """Tensor.repeat: x tiled sizes[i] times along each dim (leading sizes
    add dims), through expand and reshape, so it is differentiable."""
    _t(x, "repeat")
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    reps = _shape_arg(sizes, "repeat", "repeats")
    if len(reps) < x.ndim:
        raise RuntimeError("repeat(): Number of dimensions of repeat dims can not be smaller than number of "
                           "dimensions of tensor")
    for r in reps:
        if r < 0:
            raise RuntimeError("repeat(): trying to create tensor with negative dimension %d: %s"
                               % (r, list(reps)))
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    if len(reps) * 2 > 8:  # the library's dim limit: tile one dim at a time
        y = x.reshape(*shape) if shape else x
        for d, r in enumerate(reps):
            if r != 1:
                s = list(y.shape)
                y = y.unsqueeze(d).expand(*(s[:d] + [r] + s[d:])).reshape(*(s[:d] + [r * s[d]] + s[d + 1:]))
        return y if y is not x else x.clone()
    inter, big, out = [], [], []
    for r, s in zip(reps, shape):
        inter += [1, s]
        big += [r, s]
        out.append(r * s)
    return x.reshape(*inter).expand(*big).reshape(*out)


def split(x, split_size_or_sections, dim=0):
    """torch.split: views of x along dim, of split_size each (the last may be
    smaller) or of the listed sizes (which must sum to the dim's size)."""
    _t(x, "split")
    d = _norm_dim(dim, x.ndim, "split")
    if x.ndim == 0:
        raise RuntimeError("split(): split expects at least a 1-dimensional tensor")
    n = x.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        secs = [_int_arg(v, "split", "split_size", 2) for v in split_size_or_sections]
        if builtins.sum(secs) != n or builtins.any(v < 0 for v in secs):
            raise RuntimeError("split_with_sizes expects split_sizes to sum exactly to %d (input "
                               "tensor's size "
                               "at dimension %d), but got split_sizes=%s" % (n, d, secs))
    else:
        k = _int_arg(split_size_or_sections, "split", "split_size", 2)
        if k < 0:
            raise RuntimeError("split expects split_size be non-negative, but got split_size=%d" % k)
        if k == 0:
            if n != 0:
                raise RuntimeError("split_size can only be 0 if dimension size is 0, but got dimension size "
                                   "of %d" % n)
            return (x[(slice(None),) * d + (slice(0, 0),)],)
        secs = [builtins.min(k, n - i) for i in range(0, n, k)] or [0]
    out, at = [], 0
    for v in secs:
        out.append(_wrap(lib.ag_slice(x._handle, d, at, at + v, 1), "split"))
        at += v
    return tuple(out)


def chunk(x, chunks, dim=0):
    """torch.chunk: split into ceil(size / chunks)-sized views (fewer than
    chunks when the size does not allow more)."""
    _t(x, "chunk")
    c = _int_arg(chunks, "chunk", "chunks", 2)
    if c <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0, got: %d" % c)
    if x.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    d = _norm_dim(dim, x.ndim, "chunk")
    n = x.shape[d]
    if n == 0:
        return split(x, [0] * c, d) if c else ()
    return split(x, -(-n // c), d)


def unbind(x, dim=0):
    """torch.unbind: the slices of x along dim, each without that dim."""
    _t(x, "unbind")
    d = _norm_dim(dim, x.ndim, "unbind")
    if x.ndim == 0:
        raise IndexError("unbind(): dimension specified as 0 but tensor has no dimensions")
    return tuple(p.squeeze(d) for p in split(x, 1, d)) if x.shape[d] else ()


# ---- predicates and boolean reductions ---------------------------------------------


def isnan(x):
    _t(x, "isnan")
    if not x.dtype.is_floating_point:
        return zeros(*x.shape, dtype=bool_, device=x.device)
    return _ops.ne(x, x)


def isinf(x):
    _t(x, "isinf")
    if not x.dtype.is_floating_point:
        return zeros(*x.shape, dtype=bool_, device=x.device)
    return _ops.eq(_ops.abs(x.detach()), math.inf)


def isposinf(x):
    _t(x, "isposinf")
    if not x.dtype.is_floating_point:
        return zeros(*x.shape, dtype=bool_, device=x.device)
    return _ops.eq(x.detach(), math.inf)


def isneginf(x):
    _t(x, "isneginf")
    if not x.dtype.is_floating_point:
        return zeros(*x.shape, dtype=bool_, device=x.device)
    return _ops.eq(x.detach(), -math.inf)


def isfinite(x):
    _t(x, "isfinite")
    if not x.dtype.is_floating_point:
        return ones(*x.shape, dtype=bool_, device=x.device)
    return _ops.lt(_ops.abs(x.detach()), math.inf)


def _bool_reduce(x, dim, keepdim, fn, any_):
    _t(x, fn)
    y = _ops.ne(x.detach(), 0) if any_ else _ops.eq(x.detach(), 0)
    y = y.to(int32)
    if dim is None:
        if keepdim:
            raise TypeError("%s() received an invalid combination of arguments: keepdim without dim" % fn)
        c = _ops.sum(y)
    else:
        if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
            raise TypeError("%s(): argument 'dim' must be int, not %s" % (fn, type(dim).__name__))
        d = _norm_dim(dim, x.ndim, fn)
        if x.ndim == 0:
            c = y
        else:
            c = _ops.sum(y, d, bool(keepdim))
    r = _ops.ne(c, 0) if any_ else _ops.eq(c, 0)
    return r.to(uint8) if x.dtype is uint8 else r  # torch 1.13 keeps uint8


def any(x, dim=None, keepdim=False):  # noqa: A001
    """torch.any: whether some element is nonzero (NaN counts), over all or
    along dim; bool (uint8 for a uint8 x, as torch 1.13)."""
    return _bool_reduce(x, dim, keepdim, "any", True)


def all(x, dim=None, keepdim=False):  # noqa: A001
    """torch.all: whether every element is nonzero; True for no elements."""
    return _bool_reduce(x, dim, keepdim, "all", False)


def _torch_dt(d):
    return {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "float64": "Double",
            "int32": "Int", "int64": "Long", "bool": "Bool", "uint8": "Byte"}[d.name]


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """torch.isclose: |input - other| <= atol + rtol * |other| elementwise
    (equal infinities are close; NaN only with equal_nan), broadcast."""
    a = _tensor_in(input, "isclose")
    b = _tensor_in(other, "isclose", "other", 2)
    if a.dtype is not b.dtype:
        raise RuntimeError("isclose(): %s did not match %s" % (_torch_dt(a.dtype), _torch_dt(b.dtype)))
    rt = _scalar(rtol, "rtol", "isclose")
    at = _scalar(atol, "atol", "isclose")
    if rt < 0:
        raise RuntimeError("rtol must be greater than or equal to zero, but got %s" % rtol)
    if at < 0:
        raise RuntimeError("atol must be greater than or equal to zero, but got %s" % atol)
    a, b = a.detach(), b.detach()
    if a.dtype is bool_:
        return _ops.eq(a, b)
    eq = _ops.eq(a, b)
    if not a.dtype.is_floating_point:
        if rt == 0 and at == 0:
            return eq
        a, b = a.to(float64 if a.dtype is int64 else float32), b.to(float64 if b.dtype is int64 else float32)
    tol = _ops.add(_ops.mul(_ops.abs(b), rt), at)
    close = _ops.le(_ops.abs(_ops.sub(a, b)), tol)
    fin = _ops.lt(_ops.abs(_ops.sub(a, b)), math.inf)  # both finite (inf - inf and nan: not)
    r = _or(eq, _and(close, fin))
    if equal_nan:
        r = _or(r, _and(isnan(a), isnan(b)))
    return r


def _and(p, q):
    return _ops.ne(_ops.mul(p.to(uint8), q.to(uint8)), 0)


def _or(p, q):
    return _ops.ne(_ops.add(p.to(uint8), q.to(uint8)), 0)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """torch.allclose: isclose everywhere, as a Python bool."""
    _tensor_in(input, "allclose")
    _tensor_in(other, "allclose", "other", 2)
    return builtins.bool(all(isclose(input, other, rtol, atol, equal_nan)).item())


def equal(input, other):  # noqa: A002
    """torch.equal: same shape and same values (NaN is never equal)."""
    a = _tensor_in(input, "equal")
    b = _tensor_in(other, "equal", "other", 2)
    if tuple(a.shape) != tuple(b.shape):
        return False
    return builtins.bool(all(_ops.eq(a.detach(), b.detach())).item())


# ---- sorting ----------------------------------------------------------------------

class _ReturnType(tuple):
    """A (values, indices) pair with torch.return_types' names and repr."""
    _name = "sort"

    def __new__(cls, values, indices):
        return tuple.__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __repr__(self):
        return "anygrad.return_types.%s(\nvalues=%s,\nindices=%s)" % (self._name, self[0], self[1])


def _return_type(name):
    return type(name, (_ReturnType,), {"_name": name, "__slots__": ()})


sort_return = _return_type("sort")


def _sortable(x, fn):
    """x as the library sorts it (floating), and the dtype to give back:
    integers go through float64, exact up to 2**53."""
    if x.dtype.is_floating_point:
        return x, None
    return x.to(float64), x.dtype


def _sort_args(x, dim, fn):
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError("%s(): argument 'dim' must be int, not %s" % (fn, type(dim).__name__))
    _norm_dim(dim, x.ndim, fn)
    return int(dim)


def sort(x, dim=-1, descending=False, stable=False):
    """torch.sort: (values, indices) along dim; equal keys keep their order
    (so stable=False gives one of torch's valid answers, stable=True
    torch's), NaN last ascending. Differentiable through the values."""
    _t(x, "sort")
    d = _sort_args(x, dim, "sort")
    xs, back = _sortable(x, "sort")
    v, i = c_void_p(), c_void_p()
    check(lib.ag_sort(xs._handle, d, builtins.bool(descending), byref(v), byref(i)))
    vals, idx = _wrap(v.value), _wrap(i.value)
    if back is not None:
        vals = vals.to(back)
    return sort_return(vals, idx)


def argsort(x, dim=-1, descending=False, stable=False):
    """torch.argsort: the indices of sort (int64)."""
    _t(x, "argsort")
    d = _sort_args(x, dim, "argsort")
    xs, _ = _sortable(x, "argsort")
    return _wrap(lib.ag_argsort(xs._handle, d, builtins.bool(descending)), "argsort")


def msort(x):
    return sort(x, 0).values


# ---- norms ------------------------------------------------------------------------


def _norm_dims(x, dim, fn):
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        ds = [_norm_dim(d, x.ndim, fn) for d in dim]
    else:
        ds = [_norm_dim(dim, x.ndim, fn)]
    if len(set(ds)) != len(ds):
        raise RuntimeError("%s(): dim %s appears multiple times in the list of dims" % (fn, ds))
    return ds


def vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002
    """torch.linalg.vector_norm: (sum |x|^ord)^(1/ord) over dim (all: None);
    ord 1, 2 and inf through the library's ag_norm, others (0, -inf, any
    real) through differentiable ops."""
    _t(x, "vector_norm")
    if dtype is not None:
        x = x.to(as_dtype(dtype))
    if not x.dtype.is_floating_point:
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as input. "
                           "Got %s" % _torch_dt(x.dtype))
    if isinstance(ord, str) or isinstance(ord, bool):
        raise TypeError("linalg.vector_norm(): argument 'ord' must be Number, not %s" % type(ord).__name__)
    p = _scalar(ord, "ord", "vector_norm")
    ds = _norm_dims(x, dim, "vector_norm")
    kd = builtins.bool(keepdim)
    if x.ndim == 0:
        x = x.reshape(1)
        ds = None
        r = _vnorm(x, p, ds, False)
        return r
    return _vnorm(x, p, ds, kd)


def _vnorm(x, p, ds, kd):
    nd = 0 if ds is None else len(ds)
    if p in (1.0, 2.0, math.inf):
        from ._tensor import _dims_arg
        n, cd = _dims_arg(ds, None, "norm")
        return _wrap(lib.ag_norm(x._handle, p, n, cd, kd), "norm")
    a = _ops.abs(x)
    red = (lambda t, f: f(t, ds, kd)) if nd else (lambda t, f: f(t))
    if p == -math.inf:
        return red(a, _ops.amin)
    if p == 0:
        return red(_ops.ne(x.detach(), 0).to(x.dtype), _ops.sum)
    return _ops.pow(red(_ops.pow(a, p), _ops.sum), 1.0 / p)


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):  # noqa: A002
    """torch.norm: p 'fro' (the 2-norm over dim, or of everything) or a
    number (a vector norm over dim, or of the flattened tensor). 'nuc'
    needs singular values, which the library does not compute."""
    _t(input, "norm")
    if isinstance(p, str):
        if p == "nuc":
            raise NotImplementedError("norm(): p='nuc' (the nuclear norm) is not supported by anygrad")
        if p != "fro":
            raise RuntimeError("norm(): unknown norm type %r" % p)
        if dim is not None and isinstance(dim, (list, tuple)) and len(dim) > 2:
            raise RuntimeError("norm(): 'fro' expects at most 2 dims, got %d" % len(dim))
        p = 2
    if p is None:
        p = 2
    return vector_norm(input, p, dim, keepdim, dtype)


def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim=False, dtype=None):  # noqa: A002
    """torch.linalg.matrix_norm for ord 'fro', 1, -1, inf, -inf (2, -2 and
    'nuc' need singular values: NotImplementedError)."""
    _t(x, "matrix_norm")
    if x.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if dtype is not None:
        x = x.to(as_dtype(dtype))
    if not isinstance(dim, (list, tuple)) or len(dim) != 2:
        raise RuntimeError("linalg.matrix_norm: dim must be a 2-tuple. Got %s" % (dim,))
    r, c = (_norm_dim(d, x.ndim, "matrix_norm") for d in dim)
    if r == c:
        raise RuntimeError("linalg.matrix_norm: dims must be different. Got (%d, %d)" % (r, c))
    kd = builtins.bool(keepdim)
    if ord == "fro":
        return vector_norm(x, 2, (r, c), kd)
    if isinstance(ord, str) or ord in (2, -2):
        raise NotImplementedError("linalg.matrix_norm: ord=%r needs singular values, which anygrad does not "
                                  "compute" % (ord,))
    o = _scalar(ord, "ord", "matrix_norm")
    if o in (1.0, -1.0):
        s, other = r, c  # the largest (smallest) column sum
    elif o in (math.inf, -math.inf):
        s, other = c, r
    else:
        raise RuntimeError("linalg.matrix_norm: Order %s not supported." % ord)
    sums = _ops.sum(_ops.abs(x), s, True)
    ext = _ops.amax if o > 0 else _ops.amin
    out = ext(sums, other, True)
    if not kd:
        out = out.squeeze(builtins.max(r, c)).squeeze(builtins.min(r, c))
    return out


def linalg_norm(x, ord=None, dim=None, keepdim=False, dtype=None):  # noqa: A002
    """torch.linalg.norm: a vector norm (1-d, or dim an int) or a matrix norm
    (2-d, or dim a pair); ord None: the 2-norm / Frobenius norm."""
    _t(x, "linalg.norm")
    if dim is not None and not isinstance(dim, (list, tuple)):
        dim = (dim,)
    if ord is None:
        return vector_norm(x, 2, dim, keepdim, dtype)
    if dim is None:
        if x.ndim not in (1, 2):
            raise RuntimeError("linalg.norm: If dim is not specified but ord is, the input must be "
                               "1D or 2D. "
                               "Got %dD." % x.ndim)
        dim = tuple(range(x.ndim))
    if len(dim) == 2:
        return matrix_norm(x, ord, dim, keepdim, dtype)
    if isinstance(ord, str):
        raise RuntimeError("linalg.norm: ord %r is a matrix norm: dim must have 2 entries" % ord)
    return vector_norm(x, ord, dim, keepdim, dtype)


# ---- creation ---------------------------------------------------------------------


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """torch.linspace: steps values from start to end, with torch's formula
    (the first half counted up from start, the second down from end, the
    step in the result's floating type, each value rounded once): within
    one unit in the last place of torch's (which vectorises some)."""
    s0 = _finite(start, "start", "linspace")
    s1 = _finite(end, "end", "linspace")
    n = _int_arg(steps, "linspace", "steps", 3)
    if n < 0:
        raise RuntimeError("linspace(): number of steps must be non-negative")
    dt, d = _defaults(dtype, device)
    ft = dt.np if dt.is_floating_point and dt.np is not None else np.float32
    if dt is bfloat16_ or not dt.is_floating_point:
        ft = np.float64 if not dt.is_floating_point else np.float32
    i = np.arange(n, dtype=np.int64)
    a, b = ft(s0), ft(s1)
    if not dt.is_floating_point:  # torch takes the bounds in the integer type first
        a, b = ft(math.trunc(s0)), ft(math.trunc(s1))
    step = (b - a) / ft(n - 1) if n > 1 else ft(0)
    half = n // 2 if n > 1 else 1  # one step: start, as torch
    wide, st = np.longdouble, np.longdouble(step)  # one rounding, as torch's fused multiply-add
    with np.errstate(all="ignore"):
        up = wide(a) + st * i.astype(wide)
        down = wide(b) - st * (n - i - 1).astype(wide)
        vals = np.where(i < half, up, down).astype(ft)
    if not dt.is_floating_point:
        vals = np.trunc(vals)
    t = tensor(vals, dtype=dt, device=d)
    if requires_grad:
        t.requires_grad = True
    return t


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False):
    t = linspace(start, end, steps, dtype=float64 if dtype is float64 else float32)
    dt, d = _defaults(dtype, device)
    r = tensor(np.power(np.float64(_scalar(base, "base", "logspace")), t.numpy().astype(np.float64)),
               dtype=dt, device=d)
    if requires_grad:
        r.requires_grad = True
    return r


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """torch.eye: an n x m matrix (m defaults to n) with ones on the diagonal."""
    nn_ = _int_arg(n, "eye", "n", 1)
    if nn_ < 0:
        raise RuntimeError("eye(): n must be greater or equal to 0, got %d" % nn_)
    mm = nn_ if m is None else _int_arg(m, "eye", "m", 2)
    if mm < 0:
        raise RuntimeError("eye(): m must be greater or equal to 0, got %d" % mm)
    dt, d = _defaults(dtype, device)
    if dt.np is None:
        t = tensor(np.eye(nn_, mm, dtype=np.float32), dtype=dt, device=d)
    else:
        t = tensor(np.eye(nn_, mm, dtype=dt.np), dtype=dt, device=d)
    if requires_grad:
        t.requires_grad = True
    return t


def _new_kw(self, dtype, device):
    return as_dtype(dtype) or self.dtype, device if device is not None else self.device


def _new_sizes(size, fn):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return _shape_arg(size, fn, "size")


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    dt, d = _new_kw(self, dtype, device)
    return zeros(*_new_sizes(size, "new_zeros"), dtype=dt, device=d, requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    dt, d = _new_kw(self, dtype, device)
    return ones(*_new_sizes(size, "new_ones"), dtype=dt, device=d, requires_grad=requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    dt, d = _new_kw(self, dtype, device)
    return empty(*_new_sizes(size, "new_empty"), dtype=dt, device=d, requires_grad=requires_grad)


def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    dt, d = _new_kw(self, dtype, device)
    return full(size, fill_value, dtype=dt, device=d, requires_grad=requires_grad)


def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    dt, d = _new_kw(self, dtype, device)
    if isinstance(data, Tensor):
        data = data.detach()
    return tensor(data, dtype=dt, device=d, requires_grad=requires_grad)


def element_size(self):
    """Bytes per element."""
    return self.dtype.itemsize


# ---- einsum ----------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum_parse(eq, ops):
    """The equation as one label list per operand (ellipsis dims as private
    labels, right-aligned) and the output's labels."""
    eq = eq.replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->", 1)
        if "->" in rhs:
            raise RuntimeError("einsum(): found '->' more than once in the equation")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) < len(ops):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    if len(terms) > len(ops):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    ell_n = 0
    parsed = []
    for k, (term, x) in enumerate(zip(terms, ops)):
        if term.count("...") > 1 or term.replace("...", "").count(".") > 0:
            raise RuntimeError("einsum(): found '.' for operand %d that is not part of any ellipsis" % k)
        for c in term.replace("...", ""):
            if c not in _LETTERS:
                raise RuntimeError("einsum(): invalid subscript given at index %d in the equation string, "
                                   "subscripts must be in [a-zA-Z]" % lhs.index(c))
        if "..." in term:
            pre, post = term.split("...")
            e = x.ndim - len(pre) - len(post)
            if e < 0:
                raise RuntimeError("einsum(): the number of subscripts in the equation (%d) is more "
                                   "than the "
                                   "number of dimensions (%d) for operand %d"
                                   % (len(pre) + len(post), x.ndim, k))
            ell_n = builtins.max(ell_n, e)
            parsed.append((list(pre), e, list(post)))
        else:
            if len(term) != x.ndim:
                raise RuntimeError("einsum(): the number of subscripts in the equation (%d) does "
                                   "not match the "
                                   "number of dimensions (%d) for operand %d and no ellipsis was given"
                                   % (len(term), x.ndim, k))
            parsed.append((list(term), None, []))
    ell = ["." + str(i) for i in range(ell_n)]  # private labels of the broadcast dims
    labels = []
    for pre, e, post in parsed:
        labels.append(pre + (ell[ell_n - e:] if e is not None else []) + post)
    if rhs is None:
        counts = collections.Counter(c for ls in labels for c in ls if c in _LETTERS)
        out = ell + sorted((c for c, n in counts.items() if n == 1), key=_LETTERS.index)
    else:
        if rhs.count("...") > 1:
            raise RuntimeError("einsum(): found '...' more than once in the output")
        pre, _, post = rhs.partition("...")
        if "..." not in rhs:
            pre, post = rhs, ""
        for c in pre + post:
            if c not in _LETTERS:
                raise RuntimeError("einsum(): invalid subscript %r in the output, subscripts must "
                                   "be in [a-zA-Z]"
                                   % c)
        if "..." not in rhs and ell_n and builtins.any(e for _, e, _ in parsed):
            pass  # ellipsis dims are summed away, as torch
        out = list(pre) + (ell if "..." in rhs else []) + list(post)
        seen = set()
        for c in out:
            if c in seen:
                raise RuntimeError("einsum(): output subscript %s appears more than once in the output" % c)
            seen.add(c)
            if not builtins.any(c in ls for ls in labels):
                raise RuntimeError("einsum(): output subscript %s does not appear in the equation "
                                   "for any input "
                                   "operand" % c)
    return labels, out


def _diagonal(x, ls):
    """Merge repeated labels of one operand: the diagonal, through a mask of
    the identity and a sum, so it stays differentiable."""
    while True:
        dup = next((c for c in ls if ls.count(c) > 1), None)
        if dup is None:
            return x, ls
        a = ls.index(dup)
        b = ls.index(dup, a + 1)
        n = x.shape[a]
        if x.shape[b] != n:
            raise RuntimeError("einsum(): subscript %s is repeated for operand but the sizes don't "
                               "match, %d != %d"
                               % (dup, x.shape[b], n))
        shape = [1] * x.ndim
        shape[a] = shape[b] = n
        m = eye(n, dtype=x.dtype, device=x.device).reshape(*shape)
        x = _ops.sum(_ops.mul(x, m), b)
        ls = ls[:b] + ls[b + 1:]


def _sum_labels(x, ls, keep):
    drop = [i for i, c in enumerate(ls) if c not in keep]
    if drop:
        x = _ops.sum(x, tuple(drop))
        ls = [c for c in ls if c in keep]
    return x, ls


def _contract(a, la, b, lb, keep, size):
    """a (labels la) times b (labels lb), summed over the shared labels not in
    keep, as one batched matmul: [batch, left, shared] @ [batch, shared, right]."""
    a, la = _sum_labels(a, la, set(lb) | keep)
    b, lb = _sum_labels(b, lb, set(la) | keep)
    batch = [c for c in la if c in lb and c in keep]
    shared = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]

    def arrange(x, ls, order):
        x = x.permute(*[ls.index(c) for c in order]) if order != ls else x
        tgt = [size[c] for c in order]
        if list(x.shape) != tgt:
            x = x.expand(*tgt)
        return x

    a = arrange(a, la, batch + left + shared)
    b = arrange(b, lb, batch + shared + right)

    def prod(cs):
        p = 1
        for c in cs:
            p *= size[c]
        return p
    nb, nl, ns, nr = prod(batch), prod(left), prod(shared), prod(right)
    r = _ops.matmul(a.reshape(nb, nl, ns), b.reshape(nb, ns, nr))
    out = batch + left + right
    return r.reshape(*[size[c] for c in out]), out


def einsum(equation, *operands):
    """torch.einsum: explicit ('ij,jk->ik') and implicit ('ij,jk') outputs,
    '...' broadcasting, repeated subscripts (diagonals, traces), any number
    of operands (contracted left to right, each pair as one batched matmul).
    Differentiable: built from permute, reshape, expand, mul, sum and matmul."""
    if not isinstance(equation, str):
        raise TypeError("einsum(): argument 'equation' (position 1) must be str, not %s"
                        % type(equation).__name__)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for k, x in enumerate(operands):
        if not isinstance(x, Tensor):
            raise TypeError("einsum(): expected Tensor as element %d in argument 'tensors', but got %s"
                            % (k, type(x).__name__))
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    dts = set(x.dtype for x in operands)
    if len(dts) == 1 and not operands[0].dtype.is_floating_point and len(operands) > 1:
        # the library's matmul is floating: integers through float64 (exact to 2**53) on the
        # CPU (not every device multiplies f64)
        r = einsum(equation, *[x.cpu().to(float64) for x in operands])
        return r.to(operands[0].dtype).to(operands[0].device)
    labels, out = _einsum_parse(equation, operands)
    size = {}
    xs = []
    for k, (x, ls) in enumerate(zip(operands, labels)):
        x, ls = _diagonal(x, ls)
        for c, s in zip(ls, x.shape):
            if c not in size or size[c] == 1:
                if c in size and s != size[c] and size[c] != 1:
                    pass
                size[c] = s if c not in size or size[c] == 1 else size[c]
            elif s != size[c] and s != 1:
                if c.startswith("."):
                    raise RuntimeError("einsum(): operands do not broadcast with remapped shapes "
                                       "(original->remapped): operand %d has size %d for an "
                                       "ellipsis dim where "
                                       "an earlier operand has %d" % (k, s, size[c]))
                raise RuntimeError("einsum(): subscript %s has size %d for operand %d which does "
                                   "not broadcast "
                                   "with previously seen size %d" % (c, s, k, size[c]))
        xs.append((x, ls))
    keep_out = set(out)
    x, ls = xs[0]
    for k in range(1, len(xs)):
        later = set(c for _, l2 in xs[k + 1:] for c in l2)
        x, ls = _contract(x, ls, xs[k][0], xs[k][1], keep_out | later, size)
    x, ls = _sum_labels(x, ls, keep_out)
    if ls != out:
        x = x.permute(*[ls.index(c) for c in out])
    tgt = [size[c] for c in out]
    if list(x.shape) != tgt:  # a broadcast label kept from one operand only
        x = x.expand(*tgt).contiguous()
    if len(xs) == 1 and x is operands[0]:
        x = x.view(*x.shape) if x.ndim else x.reshape(())
    return x


bfloat16_ = as_dtype("bfloat16")

for _n, _f in (("flatten", flatten), ("repeat", repeat), ("split", split), ("chunk", chunk),
               ("unbind", unbind), ("isnan", isnan), ("isinf", isinf), ("isposinf", isposinf),
               ("isneginf", isneginf), ("isfinite", isfinite), ("any", any), ("all", all),
               ("isclose", isclose), ("allclose", allclose), ("equal", equal), ("sort", sort),
               ("argsort", argsort), ("msort", msort), ("norm", norm), ("new_zeros", new_zeros),
               ("new_ones", new_ones), ("new_empty", new_empty), ("new_full", new_full),
               ("new_tensor", new_tensor), ("element_size", element_size)):
    _export(_n, _f)
for _n, _f in (("einsum", einsum), ("linspace", linspace), ("logspace", logspace), ("eye", eye)):
    _export(_n, _f, method=False)
for _n in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "element_size"):
    __all__.remove(_n)  # methods only
Tensor.repeat = repeat
__all__.remove("repeat")  # torch has Tensor.repeat only (torch.tile is another thing)
Tensor.nbytes = property(lambda self: self.numel() * self.dtype.itemsize)
Tensor.itemsize = property(lambda self: self.dtype.itemsize)
Tensor.msort = msort
