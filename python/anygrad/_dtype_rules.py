"""torch 1.13's dtype rules where the library's ops stop short: integer
floor division and remainder (exact in int64, rounding toward -inf),
true division of integers (float32), mean() of an integer tensor, matmul of
two dtypes, the target dtypes of cross_entropy and nll_loss, NumPy dtypes anygrad lacks and
from_numpy() sharing the array's memory (docs/python.md, "dtype rules")."""
import ctypes
import itertools
import numbers
import threading
import warnings

import numpy as np

from . import _lib
from ._lib import lib
from ._tensor import (Tensor, _wrap, _new, as_dtype, float32, float64, int32, int64, bool_, uint8, _I64_MAX,
                      _DTYPES, as_device)

_TORCH_DT = {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "int32": "Int",
             "float64": "Double", "int64": "Long", "bool": "Bool", "uint8": "Byte"}


def torch_name(dt):
    return _TORCH_DT[dt.name]


# ---- integer division ------------------------------------------------------------------

def _is_int(t):
    return not t.dtype.is_floating_point


def _operands(a, b, fn):
    """(a, b) as tensors of one integer result dtype, or None when the
    operation is a floating one (an operand or a Python float)."""
    from ._ops import _pair, _is_np_scalar
    for v in (a, b):
        if isinstance(v, Tensor):
            if v.dtype.is_floating_point:
                return None
        elif isinstance(v, float) or (_is_np_scalar(v) and v.dtype.kind == "f"):
            return None
        elif isinstance(v, bool) or (isinstance(v, np.generic) and v.dtype.kind == "b"):
            pass
        elif not isinstance(v, numbers.Integral):
            return None  # the caller's own checks raise
    from ._tensor import tensor
    for t, o in ((a, b), (b, a)):  # bool tensor with a Python int: int64, as torch
        if isinstance(t, Tensor) and t.dtype is bool_ and isinstance(o, numbers.Integral) and not isinstance(
                o, (bool, np.bool_)):
            if o is b:
                b = tensor(int(o), dtype=int64, device=t.device)
            else:
                a = tensor(int(o), dtype=int64, device=t.device)
    a, b = _pair(a, b, fn)
    dt = _DTYPES[lib.ag_result_type(a._handle, b._handle)]
    if dt is bool_:
        raise RuntimeError("\"%s\" not implemented for 'Bool'" % fn)
    return a, b, dt


def _floordiv_i64(a, b):
    """floor(a / b) for int64 tensors, exact: an f64 estimate (off by a few
    units past 2^53), one refinement from the exact int64 remainder, then
    the final unit from the remainder's sign. A zero divisor gives 0 (its
    lanes divide by 1 and are then cleared)."""
    from ._ops import where
    zero = b == 0
    one = _full_like0(b, 1)
    bs = where(zero, one, b)
    bf = bs.to(float64)
    q = (a.to(float64) / bf).floor().to(int64)
    r = a - q * bs
    q = q + (r.to(float64) / bf).floor().to(int64)
    r = a - q * bs
    bpos, bneg = (bs > 0).long(), (bs < 0).long()
    under = (r < 0).long() * bpos + (r > 0).long() * bneg  # remainder of the wrong sign
    over = (r >= bs).long() * bpos + (r <= bs).long() * bneg  # remainder as large as b
    q = q - under + over
    return where(zero, _full_like0(q, 0), q)


def _full_like0(t, v):
    from ._tensor import full
    return full((), v, dtype=t.dtype, device=t.device)


def _check_scalar_zero(b, fn):
    if isinstance(b, numbers.Number) and not isinstance(b, bool) and b == 0:
        raise RuntimeError("ZeroDivisionError")
    if isinstance(b, np.generic) and b == 0:
        raise RuntimeError("ZeroDivisionError")


def floor_divide(a, b):
    """torch.floor_divide / a // b: integers stay integers (rounding toward
    -inf, Python's rule); floats are floor(a / b)."""
    from ._ops import _div
    ops = _operands(a, b, "floor_divide")
    if ops is None:
        r = _div(a, b)
        if r is NotImplemented:
            return r
        return r.floor()
    _check_scalar_zero(b, "floor_divide")
    a, b, dt = ops
    q = _floordiv_i64(a.to(int64), b.to(int64))
    return q if dt is int64 else q.to(dt)


def _float_scalar(a, b):
    """A Python float beside an integer tensor as a 0-d float32 tensor (not
    cast into the tensor's integer dtype): int % 2.5 is float, as torch."""
    from ._tensor import full
    if isinstance(a, Tensor) and not isinstance(b, Tensor) and isinstance(b, (float, np.floating)):
        b = full((), float(b), dtype=a.dtype if a.dtype.is_floating_point else float32, device=a.device)
    elif isinstance(b, Tensor) and not isinstance(a, Tensor) and isinstance(a, (float, np.floating)):
        a = full((), float(a), dtype=b.dtype if b.dtype.is_floating_point else float32, device=b.device)
    return a, b


def remainder(a, b):
    """torch.remainder / a % b: the sign of b (Python's rule). Integers in
    exact int64 arithmetic, a - floor(a / b) * b."""
    ops = _operands(a, b, "remainder")
    if ops is None:
        from ._ops import _pair
        a, b = _pair(*_float_scalar(a, b), "remainder")
        return _wrap(lib.ag_remainder(a._handle, b._handle), "remainder")
    _check_scalar_zero(b, "remainder")
    a, b, dt = ops
    a64, b64 = a.to(int64), b.to(int64)
    r = a64 - _floordiv_i64(a64, b64) * b64
    return r if dt is int64 else r.to(dt)


def true_divide_operands(a, b):
    """a / b with two integer (or bool) tensors: both as float32 first, as
    torch (the default dtype); None when the library's own rule applies."""
    if (isinstance(a, Tensor) and isinstance(b, Tensor) and a._h and b._h and
            lib.ag_tensor_dtype(a._h) not in (0, 1, 2, 4) and lib.ag_tensor_dtype(b._h) not in (0, 1, 2, 4)):
        return a.to(float32), b.to(float32)
    return None


def trunc_divide(a, b):
    """torch.div(a, b, rounding_mode='trunc')."""
    ops = _operands(a, b, "div")
    if ops is None:
        from ._ops import _div
        return _div(a, b).trunc()
    _check_scalar_zero(b, "div")
    a, b, dt = ops
    a64, b64 = a.to(int64), b.to(int64)
    q = _floordiv_i64(a64, b64)
    r = a64 - q * b64
    # floor and trunc differ by one where the remainder is not 0 and the signs differ
    fix = (r != 0).long() * ((a64 < 0).long() - (b64 < 0).long()).abs()
    q = q + fix
    return q if dt is int64 else q.to(dt)


# ---- mean, matmul ----------------------------------------------------------------------

def check_mean(x, dtype):
    """torch's refusal of mean() over an integer tensor (no dtype given)."""
    if dtype is not None:
        d = as_dtype(dtype)
        if not d.is_floating_point:
            lib.ag_error_clear()
            raise RuntimeError("mean(): could not infer output dtype. Optional dtype must be either a "
                               "floating point or complex dtype. Got: %s" % torch_name(d))
        return
    if isinstance(x, Tensor) and x._h and lib.ag_tensor_dtype(x._h) not in (0, 1, 2, 4):
        lib.ag_error_clear()
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating "
                           "point or complex dtype. Got: %s" % torch_name(x.dtype))


def check_matmul(a, b):
    """torch's RuntimeError for matmul of two dtypes (torch does not promote
    here) and, where the library has no integer matmul, for integers."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a._h and b._h):
        return
    da, db = a.dtype, b.dtype
    if da is not db or not da.is_floating_point:
        lib.ag_error_clear()
    if da is not db:
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError("dot : expected both vectors to have same dtype, but found %s and %s"
                               % (torch_name(da), torch_name(db)))
        raise RuntimeError("expected scalar type %s but found %s (matmul of %s and %s: convert one, e.g. "
                           "b.to(a.dtype))" % (torch_name(da), torch_name(db), da.name, db.name))
    if not da.is_floating_point:
        raise RuntimeError("\"addmm\" not implemented for '%s' (anygrad's matmul takes floating dtypes; "
                           "torch's CPU multiplies integers, its CUDA refuses them)" % torch_name(da))


# ---- loss targets ----------------------------------------------------------------------

def index_target(target, fn):
    """A class-index target (cross_entropy, nll_loss) as the library takes
    it: int64 as given, uint8 widened (torch 1.13 accepts both); any other
    dtype is torch's RuntimeError ("expected scalar type Long but found Int")."""
    dt = target.dtype
    if dt is int64:
        return target
    if dt is uint8:
        return target.long()
    raise RuntimeError("expected scalar type Long but found %s (%s(): class-index targets are int64 or "
                       "uint8; class probabilities a floating tensor of the input's shape)"
                       % (torch_name(dt), fn))


# ---- NumPy -----------------------------------------------------------------------------

_NP_WIDER = {np.dtype(np.int8): int32, np.dtype(np.int16): int32, np.dtype(np.uint16): int32,
             np.dtype(np.uint32): int64, np.dtype(np.uint64): int64}


def numpy_dtype(arr):
    """The anygrad dtype of a NumPy array's data: its own where anygrad has
    it; int8, int16 and uint16 as int32, uint32 and uint64 as int64 (every
    value kept: a uint64 past int64 is refused); others a TypeError."""
    k = arr.dtype.kind
    if k not in "biuf":
        raise TypeError("can't convert np.ndarray of type numpy.%s. The only supported types are: float64, "
                        "float32, float16, int64, int32, int16, int8, uint8, uint16, uint32, uint64 and bool."
                        % arr.dtype.name)
    wide = _NP_WIDER.get(arr.dtype.newbyteorder("=") if arr.dtype.byteorder not in "=|" else arr.dtype)
    if wide is not None:
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > _I64_MAX:
            raise RuntimeError("tensor(): value %d of the uint64 array cannot be converted to type int64 "
                               "without overflow" % int(arr.max()))
        return wide
    try:
        return as_dtype(arr.dtype.newbyteorder("=") if arr.dtype.byteorder not in "=|" else arr.dtype)
    except TypeError:
        raise TypeError("anygrad: no anygrad dtype for NumPy %s" % arr.dtype) from None


# Arrays shared with tensors (from_numpy), held until the library's deleter
# says the last tensor over them is gone.
_shared = {}
_shared_lock = threading.Lock()
_ids = itertools.count(1)


@_lib.DELETER
def _release_array(data, ctx):
    with _shared_lock:
        _shared.pop(ctx, None)


def from_numpy(a):
    """A CPU tensor over the array's memory, as torch.from_numpy: writes on
    either side are seen by the other; the tensor (and its views) keeps the
    array alive. Strided arrays keep their strides. Dtypes anygrad lacks
    (int8, int16, uint16, uint32, uint64) and read-only arrays are copied,
    with a UserWarning; negative strides are torch's ValueError."""
    if not isinstance(a, np.ndarray):
        raise TypeError("from_numpy(): expected np.ndarray (got %s)" % type(a).__name__)
    dt = numpy_dtype(a)
    if a.dtype.byteorder not in "=|":
        raise ValueError("from_numpy(): the array's byte order is not the machine's (%s): convert it with "
                         "a.astype(a.dtype.newbyteorder('='))" % a.dtype)
    from ._tensor import tensor
    if dt.np is None or np.dtype(dt.np) != a.dtype:
        warnings.warn("from_numpy(): anygrad has no %s: the array is copied into %s, and writes are not "
                      "shared" % (a.dtype.name, dt.name), UserWarning, stacklevel=2)
        return tensor(a, dtype=dt)
    if any(s < 0 for s in a.strides):
        raise ValueError("At least one stride in the given numpy array is negative, and tensors with "
                         "negative strides are not currently supported. (You can probably work around this "
                         "by making a copy of your array  with array.copy().) ")
    if any(s % a.itemsize for s in a.strides):
        raise ValueError("given numpy array strides not a multiple of the element byte size. Copy the numpy "
                         "array to reallocate the memory.")
    if not a.flags.writeable:
        warnings.warn("from_numpy(): the given NumPy array is not writable, and anygrad tensors are: the "
                      "values are copied (torch shares them and warns; writing them would be undefined "
                      "behavior)",
                      UserWarning, stacklevel=2)
        return tensor(a, dtype=dt)
    shape = list(a.shape)
    strides = [s // a.itemsize for s in a.strides]
    n = max(1, len(shape))
    key = next(_ids)
    with _shared_lock:
        _shared[key] = a
    cpu = as_device("cpu")
    h = lib.ag_from_blob(cpu._d, dt.code, len(shape), (ctypes.c_int64 * n)(*shape),
                         (ctypes.c_int64 * n)(*strides), a.ctypes.data, _release_array, key)
    if not h:
        with _shared_lock:
            _shared.pop(key, None)
        _lib.raise_last("from_numpy")
    t = _new(Tensor)
    t._h = h
    return t


def as_tensor(data, dtype=None, device=None):
    """torch.as_tensor: data itself when it is a tensor of that dtype and
    device (else converted); a writable NumPy array on the CPU shared as
    from_numpy does; anything else copied as tensor() does."""
    from ._tensor import tensor
    dt = as_dtype(dtype)
    if isinstance(data, Tensor):
        t = data
        if device is not None and as_device(device) != t.device:
            t = t.to(device=device)
        if dt is not None and dt is not t.dtype:
            t = t.to(dt)
        return t
    if (isinstance(data, np.ndarray) and (device is None or as_device(device).type == "cpu") and
            data.flags.writeable and data.dtype.kind in "biuf" and data.dtype.byteorder in "=|" and
            all(s >= 0 and s % data.itemsize == 0 for s in data.strides)):
        nd = numpy_dtype(data)
        if nd.np is not None and np.dtype(nd.np) == data.dtype and (dt is None or dt is nd):
            return from_numpy(data)
    return tensor(data, dtype=dt, device=device)
