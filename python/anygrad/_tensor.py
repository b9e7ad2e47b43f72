"""Tensor: a Python object owning one reference to an ag_tensor.

The C API's ownership rule (include/anygrad/tensor.h): outside any scope a
returned tensor is owned by the caller. This package never opens scopes, so
every handle it gets is its own reference, dropped by ag_tensor_release when
the Python object dies (or by Tensor.release())."""
import ctypes
import math
import numbers
import operator
import struct
from ctypes import POINTER, byref, c_int, c_int64, c_void_p

import numpy as np

from . import _lib
from ._lib import lib, raise_last, check, Device, ItemValue

# ---- dtypes ---------------------------------------------------------------------


class dtype:
    __slots__ = ("code", "name", "np", "is_floating_point", "itemsize")

    def __init__(self, code, name, npdt, flt):
        self.code, self.name, self.np, self.is_floating_point = code, name, npdt, flt
        self.itemsize = int(lib.ag_dtype_size(code))

    def __repr__(self):
        return "anygrad." + self.name

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))


float32 = dtype(0, "float32", np.float32, True)
float16 = dtype(1, "float16", np.float16, True)
bfloat16 = dtype(2, "bfloat16", None, True)
int32 = dtype(3, "int32", np.int32, False)
float64 = dtype(4, "float64", np.float64, True)
int64 = dtype(5, "int64", np.int64, False)
bool_ = dtype(6, "bool", np.bool_, False)
uint8 = dtype(7, "uint8", np.uint8, False)
_FLOAT_CODES = (0, 1, 2, 4)

# Tensor.item() in one C call when the optional extension was built (pip
# install with a compiler and Python.h; docs/python.md, "Overhead").
try:
    from . import _fast as _fast_mod
    _fast_mod.bind(ctypes.cast(lib.ag_item_scalar, c_void_p).value)
    _fast_item = _fast_mod.item
except ImportError:
    _fast_item = None
_DTYPES = [float32, float16, bfloat16, int32, float64, int64, bool_, uint8]
_ALIASES = {"float": float32, "f32": float32, "half": float16, "f16": float16, "bf16": bfloat16,
            "double": float64, "f64": float64, "int": int32, "i32": int32, "long": int64,
            "i64": int64, "u8": uint8}


def _dtype_by_name(n):
    for d in _DTYPES:
        if d.name == n:
            return d
    return _ALIASES[n]


def as_dtype(d):
    if d is None or isinstance(d, dtype):
        return d
    if isinstance(d, str):
        try:
            return _dtype_by_name(d)
        except KeyError:
            raise ValueError("anygrad: unknown dtype %r" % d) from None
    if d is bool:
        return bool_
    if d is float:
        return float32
    if d is int:
        return int64
    try:
        npd = np.dtype(d)
    except TypeError:
        npd = None
    if npd is not None:
        for x in _DTYPES:
            if x.np is not None and np.dtype(x.np) == npd:
                return x
    name = getattr(d, "__str__", lambda: "")()
    if name.startswith("torch."):
        return _dtype_by_name({"torch.float32": "float32", "torch.float16": "float16",
                               "torch.bfloat16": "bfloat16", "torch.int32": "int32",
                               "torch.float64": "float64", "torch.int64": "int64",
                               "torch.bool": "bool", "torch.uint8": "uint8"}.get(name, name))
    raise TypeError("anygrad: %r is not a dtype" % (d,))


# ---- devices --------------------------------------------------------------------

class device:
    """A device such as "cpu", "opencl:0" or "gpuemu:0" (a plain value)."""
    __slots__ = ("_d", "_s")

    def __init__(self, spec="cpu"):
        if isinstance(spec, device):
            self._d, self._s = spec._d, spec._s
            return
        if isinstance(spec, Device):
            self._d = Device(spec.backend, spec.index)
        else:
            if not isinstance(spec, str):
                raise TypeError("anygrad: device must be a string such as 'cpu' or 'opencl:0', "
                                "got %s" % type(spec).__name__)
            d = Device()
            check(lib.ag_device_parse(spec.encode(), byref(d)))
            self._d = d
        import ctypes
        buf = ctypes.create_string_buffer(64)
        self._s = lib.ag_device_str(self._d, buf, 64).decode()
        if self._s == "cpu:0":
            self._s = "cpu"

    @property
    def type(self):
        return self._s.split(":")[0]

    @property
    def index(self):
        return int(self._d.index)

    def __eq__(self, o):
        try:
            o = o if isinstance(o, device) else device(o)
        except (TypeError, ValueError, _lib.AnygradError):
            return False
        return (self._d.backend, self._d.index) == (o._d.backend, o._d.index)

    def __hash__(self):
        return hash((self._d.backend, self._d.index))

    def __str__(self):
        return self._s

    def __repr__(self):
        return "device(%r)" % self._s


_CPU = device("cpu")
_dev_cache = {}


def as_device(d):
    if d is None:
        return _CPU
    if isinstance(d, device):
        return d
    r = _dev_cache.get(d)
    if r is None:
        r = device(d)
        if isinstance(d, str):
            _dev_cache[d] = r
    return r


# ---- grad mode ------------------------------------------------------------------------


class _GradMode:
    def __init__(self, begin):
        self._begin = begin

    def __enter__(self):
        self._begin()
        return self

    def __exit__(self, *exc):
        check(lib.ag_grad_mode_end())
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with self.__class__(self._begin):
                return fn(*a, **k)
        return wrapper


def no_grad():
    """Context manager (and decorator): ops record no autograd graph."""
    return _GradMode(lib.ag_no_grad_begin)


def enable_grad():
    return _GradMode(lib.ag_enable_grad_begin)


def inference_mode():
    return _GradMode(lib.ag_inference_mode_begin)


def is_grad_enabled():
    return bool(lib.ag_grad_enabled())


class autocast:
    """with anygrad.autocast(dtype=anygrad.bfloat16): ops run in the op table's
    AMP policy (matmul and friends in the half type, F32 ops in f32)."""

    def __init__(self, device_type=None, dtype=None, enabled=True):
        self.dtype = as_dtype(dtype) or bfloat16
        self.enabled = enabled

    def __enter__(self):
        if self.enabled:
            check(lib.ag_autocast_begin(self.dtype.code))
        return self

    def __exit__(self, *exc):
        if self.enabled:
            check(lib.ag_autocast_end())
        return False


# ---- helpers ------------------------------------------------------------------

_MAX_NUMEL = 1 << 62
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1

# Argument checks. ctypes converts a Python int to a C int64 or int without a
# word (2**64 + 2 becomes 2, 2**32 + 1 as a c_int becomes 1) and int()
# truncates floats, so every int that crosses into the library is checked
# here first, with torch's exception classes and wording: a bool, a float or
# a non-number is a TypeError, a value outside int64 a RuntimeError
# ("Overflow when unpacking long"; a TypeError inside a size tuple, as torch).


def _argname(fn, arg, pos=None):
    return "%s(): argument '%s'%s" % (fn, arg, "" if pos is None else " (position %d)" % pos)


def _int_value(v, fn, arg, pos=None):
    """v's exact int value, or a TypeError naming fn and arg."""
    if type(v) is int:
        return v
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, Tensor) and v._h and v.ndim == 0 and v.dtype in (int32, int64, uint8):
        return v.item()
    raise TypeError("%s must be int, not %s" % (_argname(fn, arg, pos), type(v).__name__))


def _overflow(v, fn, arg, pos=None):
    return RuntimeError("%s is %d, outside int64 (Overflow when unpacking long)"
                        % (_argname(fn, arg, pos), v))


def _int_arg(v, fn, arg, pos=None):
    """An int argument that must fit int64."""
    v = _int_value(v, fn, arg, pos)
    if not _I64_MIN <= v <= _I64_MAX:
        raise _overflow(v, fn, arg, pos)
    return v


def _c_int_arg(v, fn, arg, pos=None):
    """An int argument the C API takes as an int (32 bits): past it, the same
    error the library gives for a value out of range, never a wrapped one."""
    v = _int_arg(v, fn, arg, pos)
    if not _I32_MIN <= v <= _I32_MAX:
        raise ValueError("%s is %d, out of range (the library takes it as a 32-bit int)"
                         % (_argname(fn, arg, pos), v))
    return v


def _dim_arg(v, fn, arg="dim", pos=None):
    if type(v) is int and _I32_MIN <= v <= _I32_MAX:
        return v
    v = _int_arg(v, fn, arg, pos)
    if not _I32_MIN <= v <= _I32_MAX:
        raise ValueError("%s(): dim %d is out of range" % (fn, v))
    return v


def _int_list(vals, fn, arg, c_int=False):
    """A tuple of ints (sizes, dims), checked as torch checks one: TypeError
    for an entry that is not an int or does not fit int64."""
    out = []
    for k, s in enumerate(vals):
        if type(s) is not int:
            if isinstance(s, bool) or not isinstance(s, numbers.Integral):
                raise TypeError("%s(): argument '%s' must be tuple of ints, but found element of type %s at "
                                "pos %d" % (fn, arg, type(s).__name__, k + 1))
            s = int(s)
        if not _I64_MIN <= s <= _I64_MAX:
            raise TypeError("%s(): argument '%s' must be tuple of ints, but found element %d at pos %d, "
                            "outside int64" % (fn, arg, s, k + 1))
        if c_int and not _I32_MIN <= s <= _I32_MAX:
            raise ValueError("%s(): dim %d is out of range" % (fn, s))
        out.append(s)
    return out


def _tensor_in(x, fn, arg="input", pos=1):
    """x if it is a Tensor, else torch's TypeError naming fn and arg."""
    if isinstance(x, Tensor):
        return x
    raise TypeError("%s must be Tensor, not %s" % (_argname(fn, arg, pos), type(x).__name__))


def _shape_arg(shape, fn="anygrad", arg="size"):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    out = _int_list(shape, fn, arg)
    if len(out) > 8:
        raise ValueError("anygrad: at most 8 dims, got %d" % len(out))
    for s in out:
        if s < -1 or s >= (1 << 62):
            raise ValueError("anygrad: shape %s is out of range" % (tuple(out),))
    return out


def _i64(vals):
    return (c_int64 * max(1, len(vals)))(*vals)


def _wrap(h, where="anygrad op"):
    if not h:
        raise_last(where)
    t = _new(Tensor)
    t._h = h
    return t


def _fail(where, *inputs):
    """Raise for an op that returned NULL: a released input, or the C error."""
    for x in inputs:
        if isinstance(x, Tensor) and not x._h:
            lib.ag_error_clear()  # the C side saw a NULL argument
            raise RuntimeError("anygrad: use of a released tensor")
    raise_last(where)


def _inplace_status(t, st, fn):
    """Raise for a failed in-place write into t (ag_copy_, ag_fill_): the
    library's refusal to write a tensor that requires grad while grad mode
    is on is torch's RuntimeError ("a leaf Variable that requires grad is
    being used in an in-place operation")."""
    if st == 0:
        return
    h = t._h
    if st == 1 and h and lib.ag_grad_enabled() and lib.ag_tensor_requires_grad(h):  # AG_ERR_INVALID
        lib.ag_error_clear()
        if lib.ag_tensor_is_leaf(h):
            raise RuntimeError("%s(): a leaf Variable that requires grad is being used in an in-place "
                               "operation (write it under anygrad.no_grad())" % fn)
        raise RuntimeError("%s(): the tensor requires grad and grad mode is on: the library records no "
                           "in-place copy or fill, so the write would not be differentiated (build the "
                           "values out of place, or write under anygrad.no_grad())" % fn)
    raise_last(fn, st)


def _copy_into(dst, src, fn):
    """ag_copy_(dst, src), refusing what would lose a gradient: the library
    records no in-place copy, so a src that requires grad while grad mode is
    on (torch would make dst part of its graph) is a RuntimeError."""
    dh, sh = dst._handle, src._handle
    if lib.ag_tensor_requires_grad(sh) and lib.ag_grad_enabled() and not lib.ag_tensor_requires_grad(dh):
        raise RuntimeError("%s(): the source requires grad and grad mode is on: the library records no in-place "
                           "copy, so the copy would lose its gradient (build the tensor out of place, e.g. with "
                           "cat or stack, or copy a detach()ed source)" % fn)
    _inplace_status(dst, lib.ag_copy_(dh, sh), fn)
    return dst


def _scalar(x, what="scalar", fn=None):
    if type(x) is float:
        return x
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        x = int(x)
        if not _I64_MIN <= x <= _I64_MAX:  # torch's limit for a Python int scalar
            raise RuntimeError("%s%s is %d, outside int64 (Overflow when unpacking long)"
                               % ("%s(): " % fn if fn else "anygrad: ", what, x))
        return float(x)
    if isinstance(x, numbers.Real):
        return float(x)
    if isinstance(x, np.generic) and x.ndim == 0 and x.dtype.kind in "biuf":
        return float(x)
    raise TypeError("%s%s must be a real number, not %s"
                    % ("%s(): argument " % fn if fn else "anygrad: ", "'%s'" % what if fn else what,
                       type(x).__name__))


# The value ranges of the integer dtypes, for values stored into them.
_INT_RANGE = {3: ("int32", _I32_MIN, _I32_MAX), 5: ("int64", _I64_MIN, _I64_MAX), 7: ("uint8", 0, 255)}
_EXACT = 1 << 53  # beyond it a double (the C API's scalar) rounds an int64


def _fill_value(x, dt, what, fn):
    """The scalar x to store into a tensor of dtype dt, as the double the C
    API takes; None when dt is int64 and x an int a double would round (the
    caller then copies it from an exact 0-d tensor). A value the dtype cannot
    hold is a RuntimeError, as torch's "value cannot be converted to type
    int32 without overflow" (the C fill would saturate it)."""
    v = _scalar(x, what, fn)
    r = _INT_RANGE.get(dt.code)
    if r is None:
        return v
    name, lo, hi = r
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        iv = int(x)
        if not lo <= iv <= hi:
            raise RuntimeError("%s(): %s %d cannot be converted to type %s without overflow"
                               % (fn, what, iv, name))
        return None if abs(iv) > _EXACT else v
    if not math.isfinite(v) or not lo <= math.trunc(v) <= hi:
        raise RuntimeError("%s(): %s %r cannot be converted to type %s without overflow"
                           % (fn, what, v, name))
    return v


def _finite(x, what, fn=None):
    v = _scalar(x, what, fn)
    if not math.isfinite(v):
        raise ValueError("%s%s must be finite, got %r" % ("%s(): " % fn if fn else "anygrad: ", what, v))
    return v


def _dims_arg(dim, ndim, fn="anygrad"):
    if dim is None:
        return 0, None
    if isinstance(dim, (numbers.Number, np.generic, Tensor)) or not hasattr(dim, "__iter__"):
        dim = (_dim_arg(dim, fn),)
    else:
        dim = _int_list(tuple(dim), fn, "dim", c_int=True)
    return len(dim), (c_int * max(1, len(dim)))(*dim)


class Tensor:
    """An anygrad tensor (one reference to a C ag_tensor)."""
    __slots__ = ("_h", "__weakref__")
    __array_priority__ = 1000  # np.float32(2) * t calls Tensor.__rmul__, as with torch

    def __init__(self, *a, **k):
        raise TypeError("anygrad.Tensor is not constructed directly: use anygrad.tensor(...)")

    # -- lifetime
    def __del__(self, _release=lib.ag_tensor_release):
        if self._h:
            _release(self._h)

    def release(self):
        """Drop the C reference now; any later use raises RuntimeError."""
        h = self._h
        self._h = None
        if h:
            lib.ag_tensor_release(h)

    @property
    def _handle(self):
        h = self._h
        if not h:
            raise RuntimeError("anygrad: use of a released tensor")
        return h

    # -- properties
    @property
    def shape(self):
        h = self._handle
        n = lib.ag_tensor_ndim(h)
        p = lib.ag_tensor_shape(h)
        return Size(p[i] for i in range(n))

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[_dim_index(dim, len(s), "size")]

    def stride(self, dim=None):
        h = self._handle
        n = lib.ag_tensor_ndim(h)
        p = lib.ag_tensor_strides(h)
        s = tuple(p[i] for i in range(n))
        return s if dim is None else s[_dim_index(dim, n, "stride")]

    @property
    def ndim(self):
        return lib.ag_tensor_ndim(self._handle)

    def dim(self):
        return self.ndim

    def numel(self):
        return int(lib.ag_tensor_numel(self._handle))

    def __len__(self):
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    @property
    def dtype(self):
        return _DTYPES[lib.ag_tensor_dtype(self._handle)]

    @property
    def device(self):
        return device(lib.ag_tensor_device(self._handle))

    def is_contiguous(self):
        return bool(lib.ag_tensor_is_contiguous(self._handle))

    def __str__(self):
        """The values as torch's str(tensor) lays them out (ag_tensor_format:
        one host sync); dtypes are named without "torch."."""
        if not self._h or "ag_tensor_format" in _lib.MISSING:
            return repr(self)
        n = lib.ag_tensor_format(self._handle, None, 0)
        if n < 0:
            raise_last()
        buf = ctypes.create_string_buffer(n + 1)
        if lib.ag_tensor_format(self._handle, buf, n + 1) < 0:
            raise_last()
        return buf.value.decode()

    def __repr__(self):
        if not self._h:
            return "tensor(<released>)"
        try:
            body = np.array2string(self.float().numpy() if self.dtype is bfloat16 else self.numpy(),
                                   separator=", ", prefix="tensor(")
        except Exception as e:  # noqa: BLE001 - repr must not fail
            body = "<%s>" % e
        extra = ""
        if self.dtype is not float32:
            extra += ", dtype=%r" % self.dtype
        if str(self.device) != "cpu":
            extra += ", device='%s'" % self.device
        if self.requires_grad:
            extra += ", requires_grad=True"
        return "tensor(%s%s)" % (body, extra)

    # -- host data
    def numpy(self):
        """A NumPy copy of the values (synchronizes). bfloat16 is returned as float32."""
        dt = self.dtype
        t = self.float() if dt is bfloat16 else self
        out = np.empty(tuple(t.shape), dtype=t.dtype.np)
        check(lib.ag_to_host(t._handle, out.ctypes.data, out.nbytes))
        return out

    def tolist(self):
        return self.numpy().tolist()

    def item(self, _item=lib.ag_item, _dt=lib.ag_tensor_dtype, _fast=_fast_item):
        # A failure is raised from the library's pending error, never
        # retried: a sync that reported an error found on the device
        # (ag_cross_entropy's target out of range, read back at this sync)
        # has consumed it, and a retry would return the kernel's value.
        h = self._h
        if _fast is not None and h:
            v = _fast(h)
            if v is not None:
                return v
            if lib.ag_last_status() != 0:  # the call failed (ag_item_scalar's status is set)
                self._item_failed()
        h = h or self._handle
        v = _item(h)
        if v != v and lib.ag_last_status() != 0:  # NaN: a failure, or a NaN value
            self._item_failed()
        d = _dt(h)
        if d in _FLOAT_CODES:
            return v
        if d == 6:
            return bool(v)
        if -9007199254740992.0 < v < 9007199254740992.0:
            return int(v)
        iv = ItemValue()  # past 2^53 a double rounds: the exact i64
        if lib.ag_item_scalar(h, byref(iv)) != 0:
            raise_last("item")
        return iv.i

    def _item_failed(self):
        """Raise the error item() left pending: ValueError for a tensor that
        has other than one element, else the library's own (an index error
        a kernel found, a device failure, ...)."""
        if lib.ag_last_status() == 2 and self._h and lib.ag_tensor_numel(self._h) != 1:  # AG_ERR_SHAPE
            lib.ag_error_clear()
            raise ValueError("anygrad: item() needs a tensor with one element, got shape %s"
                             % (tuple(self.shape),))
        raise_last("item")

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ValueError("anygrad: the truth value of a tensor with more than one element "
                             "is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype.is_floating_point:
            raise TypeError("anygrad: only integer tensors can be used as an index")
        return int(self.item())

    def __array__(self, dtype=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    # -- conversion
    def to(self, *args, dtype=None, device=None):
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, (str, globals()["device"])):
                device = a
            else:
                dtype = a
        t = self
        if device is not None:
            d = as_device(device)
            t = _wrap(lib.ag_to_device(t._handle, d._d), "to")
        if dtype is not None:
            t = _wrap(lib.ag_cast(t._handle, as_dtype(dtype).code), "to")
        return t

    def cpu(self):
        return self.to(device="cpu")

    def float(self):
        return self.to(float32)

    def double(self):
        return self.to(float64)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def int(self):
        return self.to(int32)

    def long(self):
        return self.to(int64)

    def bool(self):
        return self.to(bool_)

    def type(self, dt):
        return self.to(dt)

    def contiguous(self):
        return _wrap(lib.ag_contiguous(self._handle), "contiguous")

    def clone(self):
        """A copy with this tensor's dtype and values bit for bit, on its
        device, that keeps the autograd graph (as torch.clone)."""
        return _wrap(lib.ag_clone(self._handle), "clone")

    # -- copy and pickle: copy.copy aliases the storage (a new reference, as
    # torch); copy.deepcopy and pickle copy the values. A module's shared
    # parameters stay shared in its deep copy (deepcopy's memo).
    def __copy__(self):
        return _wrap(lib.ag_tensor_retain(self._handle), "copy.copy")

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol; detach() it first")
        d = self.detach()
        y = _wrap(lib.ag_clone(d._handle), "copy.deepcopy")
        if self.requires_grad:
            y.requires_grad = True
        from . import nn as _nn  # a frozen Parameter stays a parameter in the copy
        if _nn._PARAMS.get(id(self)) is self:
            _nn._PARAMS[id(y)] = y
        return y

    def __reduce_ex__(self, protocol):
        if self.dtype is bfloat16:  # exact through float32 both ways
            arr = self.float().numpy()
        else:
            arr = self.numpy()
        return (_rebuild, (arr, self.dtype.name, str(self.device), self.requires_grad))

    def detach(self):
        return _wrap(lib.ag_detach(self._handle), "detach")

    # -- autograd
    @property
    def requires_grad(self):
        return bool(lib.ag_tensor_requires_grad(self._handle))

    @requires_grad.setter
    def requires_grad(self, v):
        check(lib.ag_tensor_set_requires_grad(self._handle, bool(v)))

    def requires_grad_(self, v=True):
        self.requires_grad = v
        return self

    @property
    def is_leaf(self):
        return bool(lib.ag_tensor_is_leaf(self._handle))

    @property
    def grad(self):
        g = lib.ag_tensor_grad(self._handle)  # borrowed
        if not g:
            return None
        return _wrap(lib.ag_tensor_retain(g))

    @grad.setter
    def grad(self, v):
        if v is not None:
            raise ValueError("anygrad: .grad can only be set to None")
        lib.ag_tensor_zero_grad(self._handle)

    def backward(self, gradient=None, retain_graph=False):
        g = None
        if gradient is not None:
            g = _t(gradient, "backward", "gradient", 1)
        check(lib.ag_backward(self._handle, g, bool(retain_graph)))

    # -- in place
    # add_, sub_, mul_, div_, clamp_, relu_, ... and +=, -=, *=, /=: _ops.py
    def fill_(self, value):
        return self._fill(value, "fill_")

    def _fill(self, value, fn):
        h = self._handle
        v = _fill_value(value, self.dtype, "value", fn)
        if v is None:  # an int64 a double would round: copied from an exact 0-d tensor
            src = tensor(value, dtype=int64, device=self.device)
            _inplace_status(self, lib.ag_copy_(h, src._handle), fn)
        else:
            _inplace_status(self, lib.ag_fill_(h, v), fn)
        return self

    def zero_(self):
        return self._fill(0.0, "zero_")

    def copy_(self, src):
        if not isinstance(src, Tensor):
            if isinstance(src, (numbers.Number, np.generic)):
                return self._fill(src, "copy_")
            src = _as_tensor_like(src, self, "copy_", "src")
        return _copy_into(self, src, "copy_")

    # -- views
    def reshape(self, *shape):
        s = _shape_arg(shape, "reshape", "shape")
        return _wrap(lib.ag_reshape(self._handle, len(s), _i64(s)), "reshape")

    def view(self, *shape):
        s = _shape_arg(shape, "view", "size")
        return _wrap(lib.ag_view(self._handle, len(s), _i64(s)), "view")

    def flatten(self):
        return _wrap(lib.ag_flatten(self._handle), "flatten")

    def transpose(self, d0, d1):
        return _wrap(lib.ag_transpose(self._handle, _dim_arg(d0, "transpose", "dim0", 1),
                                      _dim_arg(d1, "transpose", "dim1", 2)), "transpose")

    @property
    def T(self):
        n = self.ndim
        return self.permute(*range(n - 1, -1, -1)) if n >= 2 else self

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def t(self):
        return self.transpose(0, 1) if self.ndim == 2 else self

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        dims = _int_list(dims, "permute", "dims", c_int=True)
        if len(dims) != self.ndim:
            raise ValueError("anygrad: permute needs %d dims, got %d" % (self.ndim, len(dims)))
        return _wrap(lib.ag_permute(self._handle, (c_int * max(1, len(dims)))(*dims)), "permute")

    def expand(self, *shape):
        s = _shape_arg(shape, "expand", "size")
        cur = list(self.shape)
        lead = len(s) - len(cur)
        if lead >= 0:  # fewer sizes than dims: the library refuses it
            for i, v in enumerate(s):
                if v == -1:
                    if i < lead:  # no size to keep: torch refuses it too
                        raise RuntimeError("expand(): the expanded size of the tensor (-1) isn't allowed in "
                                           "a leading, non-existing dimension %d" % i)
                    s[i] = cur[i - lead]
        return _wrap(lib.ag_expand(self._handle, len(s), _i64(s)), "expand")

    def unsqueeze(self, dim):
        return _wrap(lib.ag_unsqueeze(self._handle, _dim_arg(dim, "unsqueeze", "dim", 1)), "unsqueeze")

    def squeeze(self, dim=None):
        if dim is None:
            t = self
            for i in reversed(range(self.ndim)):
                if t.shape[i] == 1:
                    t = t.squeeze(i)
            return t
        return _wrap(lib.ag_squeeze(self._handle, _dim_arg(dim, "squeeze", "dim", 1)), "squeeze")

    def __getitem__(self, idx):
        c = idx.__class__
        if c is Tensor or c is list:  # one integer tensor, list or mask: index_select (anygrad/_index.py)
            r = _index.fast_getitem(self, idx, ())
            if r is not None:
                return r
        elif c is tuple and idx and idx[0].__class__ in (Tensor, list):
            r = _index.fast_getitem(self, idx[0], idx[1:])
            if r is not None:
                return r
        if not isinstance(idx, tuple):
            idx = _index.as_tuple(idx) if idx.__class__ is list or isinstance(idx, np.ndarray) else (idx,)
        ndim = lib.ag_tensor_ndim(self._handle)
        if any(i.__class__ not in _PLAIN_INDEX for i in idx):
            if _index.is_advanced(idx):  # lists, arrays, integer tensors, masks
                return _index.getitem(self, idx)
            # A bool (Python's, NumPy's or a 0-d bool tensor) indexes as in
            # torch: a new dim of size 1 (True) or 0 (False) that consumes
            # none; several merge into one. Never the int 1 or 0.
            idx = tuple(_bool_index(i) for i in idx)
        n_real = sum(1 for i in idx if not (i is None or i is Ellipsis or i is True or i is False))
        if any(i is Ellipsis for i in idx):
            if sum(1 for i in idx if i is Ellipsis) > 1:
                raise IndexError("anygrad: an index can only have one ellipsis")
            k = [j for j, i in enumerate(idx) if i is Ellipsis][0]
            idx = idx[:k] + (slice(None),) * max(0, ndim - n_real) + idx[k + 1:]
        if n_real > ndim:
            raise IndexError("anygrad: too many indices for a tensor of %d dims" % ndim)
        t, d, bools = self, 0, []
        for i in idx:
            if i is None:
                t = t.unsqueeze(d)
                d += 1
            elif i is True or i is False:
                t = t.unsqueeze(d)
                bools.append((d, i))
                d += 1
            elif isinstance(i, slice):
                step = 1 if i.step is None else operator.index(i.step)
                if step <= 0:
                    raise ValueError("step must be greater than zero")
                n = lib.ag_tensor_shape(t._h)[d]
                # Python's clamping of any int bound (2**64 + 2 is past the end,
                # not 2): the library gets 0 <= start <= stop <= n
                start, stop, _ = slice(i.start, i.stop).indices(n)
                stop = max(start, stop)
                step = min(step, max(n, 1))
                t = _wrap(lib.ag_slice(t._handle, d, start, stop, step), "slice")
                d += 1
            elif (isinstance(i, numbers.Integral) or
                  (isinstance(i, Tensor) and i.ndim == 0 and i.dtype in (int32, int64))):
                k = int(i)
                if not _I64_MIN <= k <= _I64_MAX:
                    raise RuntimeError("anygrad: index %d is outside int64 (Overflow when unpacking "
                                       "long)" % k)
                n = lib.ag_tensor_shape(t._h)[d]
                if k < -n or k >= n:
                    raise IndexError("anygrad: index %d is out of range for dim %d of size %d"
                                     % (k, d, n))
                k %= n
                t = _wrap(lib.ag_slice(t._handle, d, k, k + 1, 1), "index")
                t = _wrap(lib.ag_squeeze(t._handle, d), "index")
            elif isinstance(i, Tensor):  # a 0-d tensor of another dtype
                raise IndexError("tensors used as indices must be long, byte or bool tensors (got %s)"
                                 % i.dtype.name)
            elif isinstance(i, (numbers.Number, np.generic)):
                raise IndexError("anygrad: only integers, slices (`:`), ellipsis (`...`), None, bools and "
                                 "integer tensors are valid indices (got %s)" % type(i).__name__)
            else:
                raise TypeError("anygrad: unsupported index %r" % (i,))
        if bools:
            pos = [p for p, _ in bools]
            # torch's placement: where the first one was if they are adjacent, else first
            at = pos[0] if pos == list(range(pos[0], pos[0] + len(pos))) else 0
            if len(pos) > 1 or at != pos[0]:
                for p in reversed(pos):
                    t = _wrap(lib.ag_squeeze(t._handle, p), "index")
                t = t.unsqueeze(at)
            if not all(b for _, b in bools):
                t = _wrap(lib.ag_slice(t._handle, at, 0, 0, 1), "index")
        return t

    def __setitem__(self, idx, value):
        tup = idx if idx.__class__ is tuple else _index.as_tuple(idx)
        if ((not all(i.__class__ in _PLAIN_INDEX for i in tup) and _index.is_advanced(tup)) or
                _index.plain_setitem_needs_graph(self, value)):
            return _index.setitem(self, tup, value)
        dst = self[idx]
        if isinstance(value, Tensor):
            _copy_into(dst, value, "__setitem__")
        elif isinstance(value, (numbers.Number, np.generic)):
            dst._fill(value, "__setitem__")
        else:
            dst.copy_(_as_tensor_like(value, dst, "__setitem__", "value"))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- DLPack
    def __dlpack__(self, stream=None):
        from ._dlpack import to_capsule
        return to_capsule(self)

    def __dlpack_device__(self):
        from ._dlpack import dlpack_device
        return dlpack_device(self)

    def data_ptr(self):
        p = lib.ag_tensor_data_ptr(self._handle)
        if not p:
            raise_last("data_ptr")
        return p


_new = object.__new__


def _rebuild(arr, dtype_name, device, requires_grad):
    """Tensor.__reduce_ex__'s inverse (pickle): the values on the device
    they were saved from (an error naming it when it is absent here)."""
    t = tensor(arr, dtype=_dtype_by_name(dtype_name), device=device)
    if requires_grad:
        t.requires_grad = True
    return t


class Size(tuple):
    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return "anygrad.Size(%s)" % list(self)


def _as_tensor_like(x, like, fn="anygrad", arg="other"):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (numbers.Number, np.generic)):
        return full((), x, dtype=like.dtype, device=like.device)
    if not isinstance(x, (list, tuple, np.ndarray)) and not hasattr(x, "__dlpack__"):
        raise TypeError("%s must be Tensor, a number or a list, not %s"
                        % (_argname(fn, arg), type(x).__name__))
    return tensor(x, dtype=like.dtype, device=like.device)


def _as_to_args(args, dev, dt):
    """(device, dtype) of a to() call, torch's forms: to(device),
    to(dtype), to(device, dtype), to(tensor), keywords; None where not given."""
    for a in args:
        if isinstance(a, Tensor):
            dt, dev = a.dtype, a.device
        elif isinstance(a, (str, device)):
            dev = a
        else:
            dt = a
    return (None if dev is None else as_device(dev)), as_dtype(dt)


# torch.set_default_dtype (anygrad/_first_hour.py): float32 or float64
_DEFAULT_DTYPE = [float32]


def _defaults(dtype_, device_):
    dt = as_dtype(dtype_) or _DEFAULT_DTYPE[0]
    return dt, as_device(device_)


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of data (nested lists, a NumPy array, a
    number, a tensor of anygrad or of any DLPack producer)."""
    if isinstance(data, Tensor):
        t = data.to(device=device or data.device, dtype=dtype or data.dtype).clone()
    else:
        if hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray):
            import numpy
            try:
                data = data.detach().cpu().numpy()  # a torch tensor
            except AttributeError:
                data = numpy.from_dlpack(data)
        dt = as_dtype(dtype)
        if isinstance(data, np.ndarray):
            arr = data  # converted as a cast, as torch does
        else:
            _check_data_range(data, dt)
            arr = np.asarray(data)
        if dt is None:
            k = arr.dtype.kind
            if k not in "biuf":
                raise TypeError("anygrad: cannot make a tensor from %s data" % arr.dtype)
            if isinstance(data, np.ndarray):  # the array's dtype, or the nearest wider (int16: int32)
                from ._dtype_rules import numpy_dtype
                dt = numpy_dtype(arr)
            else:  # Python numbers: bool, int64 or float32, as torch
                dt = bool_ if k == "b" else int64 if k in "iu" else _DEFAULT_DTYPE[0]
        if dt is bfloat16:  # NumPy has no bfloat16: through float32
            t = tensor(arr, dtype=float32, device=device).to(bfloat16)
            if requires_grad:
                t.requires_grad = True
            return t
        arr = np.require(arr, dtype=dt.np, requirements="C")  # keeps 0-d arrays 0-d
        shape = list(arr.shape)
        d = as_device(device)
        t = _wrap(lib.ag_from_host(d._d, dt.code, len(shape), _i64(shape), arr.ctypes.data), "tensor")
    if requires_grad:
        t.requires_grad = True
    return t


def _check_data(data, acc):
    """Refuses what is not a number; gathers in acc the least and greatest
    int and float of the data and whether a float (or NaN) is there."""
    if isinstance(data, (list, tuple)):
        if data and all(type(x) is int for x in data):  # the common flat case, at C speed
            acc[0] = min(acc[0], min(data))
            acc[1] = max(acc[1], max(data))
            return
        if data and all(type(x) is float for x in data):
            acc[2] = True
            if any(x != x for x in data):
                acc[5] = True
            else:
                acc[3] = min(acc[3], min(data))
                acc[4] = max(acc[4], max(data))
            return
        for x in data:
            _check_data(x, acc)
    elif isinstance(data, bool):
        pass
    elif isinstance(data, numbers.Integral):
        v = int(data)
        if v < acc[0]:
            acc[0] = v
        if v > acc[1]:
            acc[1] = v
    elif isinstance(data, (numbers.Real, np.floating)):
        v = float(data)
        acc[2] = True
        if v != v:
            acc[5] = True
        else:
            acc[3] = min(acc[3], v)
            acc[4] = max(acc[4], v)
    elif isinstance(data, np.ndarray):
        if data.size and data.dtype.kind in "iu":
            acc[0] = min(acc[0], int(data.min()))
            acc[1] = max(acc[1], int(data.max()))
        elif data.size and data.dtype.kind == "f":
            acc[2] = True
            if np.isnan(data).any():
                acc[5] = True
            else:
                acc[3] = min(acc[3], float(data.min()))
                acc[4] = max(acc[4], float(data.max()))
        elif data.dtype.kind not in "biuf":
            raise TypeError("anygrad: tensor data must be numbers, lists or arrays, got %s array"
                            % data.dtype)
    elif not isinstance(data, (numbers.Number, np.generic)):
        raise TypeError("anygrad: tensor data must be numbers, lists or arrays, got %s"
                        % type(data).__name__)


def _check_data_range(data, dt):
    """Python data for tensor(): an int the target integer dtype cannot hold
    is refused as torch refuses it (int64: "Overflow when unpacking long"),
    where NumPy would wrap it (2**63 into -2**63) or keep it as uint64 or
    object; so is a float out of the range, or NaN. Into a float or bool
    dtype any int is a value."""
    acc = [0, 0, False, math.inf, -math.inf, False]
    _check_data(data, acc)
    if dt is None:
        if acc[2]:
            return  # inferred float32
        dt = int64
    r = _INT_RANGE.get(dt.code)
    if r is None:
        return
    name, lo, hi = r
    for v in (acc[0], acc[1]):
        if not lo <= v <= hi:
            raise RuntimeError("tensor(): value %d cannot be converted to type %s without overflow%s"
                               % (v, name, " (Overflow when unpacking long)" if name == "int64" else ""))
    if acc[2]:
        if acc[5]:
            raise RuntimeError("tensor(): value nan cannot be converted to type %s" % name)
        for v in (acc[3], acc[4]):
            if not math.isfinite(v) or not lo <= math.trunc(v) <= hi:
                raise RuntimeError("tensor(): value %r cannot be converted to type %s without overflow"
                                   % (v, name))


def _creator(fn, name):
    def make(*shape, dtype=None, device=None, requires_grad=False):
        s = _shape_arg(shape, name)
        dt, d = _defaults(dtype, device)
        t = _wrap(fn(d._d, dt.code, len(s), _i64(s)), name)
        if requires_grad:
            t.requires_grad = True
        return t
    return make


zeros = _creator(lib.ag_zeros, "zeros")
ones = _creator(lib.ag_ones, "ones")
empty = _creator(lib.ag_empty, "empty")


def full(shape, fill_value, dtype=None, device=None, requires_grad=False):
    if isinstance(shape, (numbers.Number, np.generic)):
        shape = (shape,)
    elif not hasattr(shape, "__iter__"):
        raise TypeError("full(): argument 'size' (position 1) must be tuple of ints, not %s"
                        % type(shape).__name__)
    s = _shape_arg((tuple(shape),), "full")
    dt, d = _defaults(dtype, device)
    v = _fill_value(fill_value, dt, "fill_value", "full")
    if v is None:  # an int64 a double would round: copied from an exact 0-d tensor
        t = _wrap(lib.ag_empty(d._d, dt.code, len(s), _i64(s)), "full")
        src = tensor(fill_value, dtype=int64, device=d)
        check(lib.ag_copy_(t._handle, src._handle))
    else:
        t = _wrap(lib.ag_full(d._d, dt.code, len(s), _i64(s), v), "full")
    if requires_grad:
        t.requires_grad = True
    return t


def randn(*shape, dtype=None, device=None, requires_grad=False, generator=None):
    s = _shape_arg(shape, "randn")
    dt, d = _defaults(dtype, device)
    t = _wrap(lib.ag_randn(d._d, dt.code, len(s), _i64(s), 0.0, 1.0,
                           _gen(generator, "randn")), "randn")
    if requires_grad:
        t.requires_grad = True
    return t


def rand(*shape, dtype=None, device=None, requires_grad=False, generator=None):
    s = _shape_arg(shape, "rand")
    dt, d = _defaults(dtype, device)
    t = _wrap(lib.ag_rand(d._d, dt.code, len(s), _i64(s), 0.0, 1.0,
                          _gen(generator, "rand")), "rand")
    if requires_grad:
        t.requires_grad = True
    return t


def arange(start, end=None, step=1, dtype=None, device=None):
    if end is None:
        start, end = 0, start
    for v, n in ((start, "start"), (end, "end"), (step, "step")):
        _finite(v, n, "arange")
    if dtype is None:
        dtype = (int64 if all(isinstance(v, numbers.Integral) for v in (start, end, step))
                 else _DEFAULT_DTYPE[0])
    dt, d = _defaults(dtype, device)
    return _wrap(lib.ag_arange(d._d, dt.code, float(start), float(end), float(step)), "arange")


def zeros_like(t, dtype=None, device=None):
    t = _tensor_in(t, "zeros_like")
    return zeros(*t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t, dtype=None, device=None):
    t = _tensor_in(t, "ones_like")
    return ones(*t.shape, dtype=dtype or t.dtype, device=device or t.device)


def full_like(t, v, dtype=None, device=None):
    t = _tensor_in(t, "full_like")
    return full(tuple(t.shape), v, dtype=dtype or t.dtype, device=device or t.device)


def randn_like(t):
    t = _tensor_in(t, "randn_like")
    return randn(*t.shape, dtype=t.dtype, device=t.device)


def _seed(seed, fn):
    """A seed as torch takes it: -2**63 .. 2**64 - 1, a negative one taken
    modulo 2**64 (where & would have folded 2**64 + 5 into 5)."""
    v = _int_value(seed, fn, "seed", 1)
    if not _I64_MIN <= v <= 2 ** 64 - 1:
        raise RuntimeError("%s is %d, outside -2**63 .. 2**64 - 1 (Overflow when unpacking long)"
                           % (_argname(fn, "seed", 1), v))
    return v & (2 ** 64 - 1)


def manual_seed(seed):
    """Seed the default generator (offset 0); returns it, as torch does."""
    lib.ag_manual_seed(_seed(seed, "manual_seed"))
    return default_generator


class Generator:
    """A Philox generator: state = (seed, offset). get_state() is a 16-byte
    uint8 tensor (seed then offset, little endian), like torch.cuda's."""

    def __init__(self, device="cpu", seed=0, _handle=None):
        if not isinstance(device, (str, globals()["device"])):  # anygrad's Generator(seed)
            device, seed = "cpu", device
        self._own = _handle is None
        self._g = lib.ag_generator_create(_seed(seed, "Generator")) if self._own else _handle
        self.device = as_device(device)

    def __del__(self):
        if getattr(self, "_g", None) and getattr(self, "_own", False):
            lib.ag_generator_free(self._g)
        self._g = None

    def _state(self):
        a, b = ctypes.c_uint64(), ctypes.c_uint64()
        lib.ag_generator_get_state(self._g, ctypes.byref(a), ctypes.byref(b))
        return a.value, b.value

    def get_state(self):
        seed, off = self._state()
        return from_numpy(np.frombuffer(struct.pack("<QQ", seed, off), dtype=np.uint8).copy())

    def set_state(self, new_state):
        if not isinstance(new_state, Tensor):
            raise TypeError("expected a anygrad.ByteTensor, but got %s" % type(new_state).__name__)
        if new_state.dtype is not uint8:
            raise TypeError("RNG state must be a anygrad.ByteTensor (uint8), got %s" % new_state.dtype)
        if tuple(new_state.shape) != (16,):
            raise RuntimeError("Expected an RNG state of 16 bytes (seed and offset), but found the input RNG "
                               "state size to be %d" % new_state.numel())
        seed, off = struct.unpack("<QQ", bytes(np.asarray(new_state.cpu().numpy(), dtype=np.uint8)))
        lib.ag_generator_set_state(self._g, seed, off)
        return self

    def manual_seed(self, seed):
        lib.ag_generator_set_state(self._g, _seed(seed, "manual_seed"), 0)
        return self

    def initial_seed(self):
        return self._state()[0]


default_generator = Generator(_handle=lib.ag_default_generator())


def _gen(g, fn):
    """A generator argument: None or an anygrad.Generator."""
    if g is None:
        return None
    if isinstance(g, Generator):
        return g._g
    raise TypeError("%s(): argument 'generator' must be anygrad.Generator, not %s" % (fn, type(g).__name__))


# ---- ops ------------------------------------------------------------------------

def _t(x, fn, what="input", pos=1):
    """x's handle; anything but a Tensor is torch's TypeError naming fn and
    the argument ("exp(): argument 'input' (position 1) must be Tensor, not int")."""
    if isinstance(x, Tensor):
        return x._handle
    raise TypeError("%s must be Tensor, not %s" % (_argname(fn, what, pos), type(x).__name__))


_PLAIN_INDEX = (int, slice, type(None), type(Ellipsis))


def _bool_index(i):
    """True or False for a bool index (Python's, NumPy's, a 0-d bool tensor)."""
    if isinstance(i, (bool, np.bool_)):
        return bool(i)
    if isinstance(i, Tensor) and i.dtype is bool_ and i.ndim == 0:
        return bool(i.item())
    return i


def _dim_index(dim, n, fn):
    """dim as an index into n dims, torch's IndexError when out of range."""
    k = _int_arg(dim, fn, "dim", 1)
    if n == 0:
        raise IndexError("%s(): dimension specified as %d but tensor has no dimensions" % (fn, k))
    if not -n <= k < n:
        raise IndexError("%s(): dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (fn, -n, n - 1, k))
    return k


def index_select(x, dim, index):
    d = _dim_arg(dim, "index_select", "dim", 2)
    h = lib.ag_index_select(_t(x, "index_select"), d, _t(index, "index_select", "index", 3))
    if not h and lib.ag_tensor_dtype(x._h) not in _FLOAT_CODES and index.dtype in (int32, int64):
        lib.ag_error_clear()  # integer and bool values: through floating types (anygrad/_index.py)
        return _index._take(x, d, index)
    return _wrap(h, "index_select")


from . import _index  # noqa: E402 - advanced indexing, over Tensor
from ._dtype_rules import from_numpy, as_tensor  # noqa: E402,F401 - over Tensor and tensor()
