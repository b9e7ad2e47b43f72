"""Tensor: a Python object owning one reference to an ag_tensor.

The C API's ownership rule (include/anygrad/tensor.h): outside any scope a
returned tensor is owned by the caller. This package never opens scopes, so
every handle it gets is its own reference, dropped by ag_tensor_release when
the Python object dies (or by Tensor.release())."""
import ctypes
import math
import numbers
import operator
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


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    out = []
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError("anygrad: shape entries must be integers, got %r" % (s,))
        out.append(int(s))
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


def _scalar(x, what="scalar"):
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, numbers.Real):
        return float(x)
    if isinstance(x, np.generic) and x.ndim == 0:
        return float(x)
    raise TypeError("anygrad: %s must be a real number, got %s" % (what, type(x).__name__))


def _finite(x, what):
    v = _scalar(x, what)
    if not math.isfinite(v):
        raise ValueError("anygrad: %s must be finite, got %r" % (what, v))
    return v


def _dims_arg(dim, ndim):
    if dim is None:
        return 0, None
    if isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
        dim = (int(dim),)
    dim = tuple(dim)
    for d in dim:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise TypeError("anygrad: dim must be an int or a tuple of ints, got %r" % (d,))
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
        return s if dim is None else s[dim]

    def stride(self, dim=None):
        h = self._handle
        n = lib.ag_tensor_ndim(h)
        p = lib.ag_tensor_strides(h)
        s = tuple(p[i] for i in range(n))
        return s if dim is None else s[dim]

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
        h = self._h
        if _fast is not None and h:
            v = _fast(h)
            if v is not None:
                return v
            lib.ag_error_clear()  # the path below raises with the message
        h = h or self._handle
        v = _item(h)
        if v != v:  # NaN: a failure (such as more than one element), or a NaN value
            lib.ag_error_clear()
            v = _item(h)
            if lib.ag_last_status() != 0:
                lib.ag_error_clear()
                if self.numel() != 1:
                    raise ValueError("anygrad: item() needs a tensor with one element, got "
                                     "shape %s" % (tuple(self.shape),))
                v = _item(h)
                raise_last("item")
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
        # x + 0 is a copy that keeps the autograd graph (as torch.clone)
        return _wrap(lib.ag_add_scalar(self._handle, 0.0), "clone")

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
            if not isinstance(gradient, Tensor):
                raise TypeError("anygrad: gradient must be a Tensor")
            g = gradient._handle
        check(lib.ag_backward(self._handle, g, bool(retain_graph)))

    # -- in place
    def fill_(self, value):
        check(lib.ag_fill_(self._handle, _scalar(value, "fill value")))
        return self

    def zero_(self):
        return self.fill_(0.0)

    def copy_(self, src):
        src = _as_tensor_like(src, self)
        check(lib.ag_copy_(self._handle, src._handle))
        return self

    # -- views
    def reshape(self, *shape):
        s = _shape_arg(shape)
        return _wrap(lib.ag_reshape(self._handle, len(s), _i64(s)), "reshape")

    def view(self, *shape):
        s = _shape_arg(shape)
        return _wrap(lib.ag_view(self._handle, len(s), _i64(s)), "view")

    def flatten(self):
        return _wrap(lib.ag_flatten(self._handle), "flatten")

    def transpose(self, d0, d1):
        return _wrap(lib.ag_transpose(self._handle, int(d0), int(d1)), "transpose")

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
        if len(dims) != self.ndim:
            raise ValueError("anygrad: permute needs %d dims, got %d" % (self.ndim, len(dims)))
        return _wrap(lib.ag_permute(self._handle, (c_int * max(1, len(dims)))(*dims)), "permute")

    def expand(self, *shape):
        s = _shape_arg(shape)
        cur = list(self.shape)
        s = [cur[i - (len(s) - len(cur))] if v == -1 else v for i, v in enumerate(s)]
        return _wrap(lib.ag_expand(self._handle, len(s), _i64(s)), "expand")

    def unsqueeze(self, dim):
        return _wrap(lib.ag_unsqueeze(self._handle, int(dim)), "unsqueeze")

    def squeeze(self, dim=None):
        if dim is None:
            t = self
            for i in reversed(range(self.ndim)):
                if t.shape[i] == 1:
                    t = t.squeeze(i)
            return t
        return _wrap(lib.ag_squeeze(self._handle, int(dim)), "squeeze")

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if sum(1 for i in idx if i is Ellipsis) > 1:
            raise IndexError("anygrad: an index can only have one ellipsis")
        if any(i is Ellipsis for i in idx):
            k = [j for j, i in enumerate(idx) if i is Ellipsis][0]
            idx = idx[:k] + (slice(None),) * max(0, self.ndim - n_real) + idx[k + 1:]
        if n_real > self.ndim:
            raise IndexError("anygrad: too many indices for a tensor of %d dims" % self.ndim)
        t, d = self, 0
        for i in idx:
            if i is None:
                t = t.unsqueeze(d)
                d += 1
                continue
            if isinstance(i, slice):
                start, stop, step = i.start, i.stop, i.step
                step = 1 if step is None else operator.index(step)
                if step <= 0:
                    raise ValueError("anygrad: slice step must be positive")
                start = 0 if start is None else operator.index(start)
                stop = (1 << 62) if stop is None else operator.index(stop)
                t = _wrap(lib.ag_slice(t._handle, d, start, stop, step), "slice")
                d += 1
            elif isinstance(i, numbers.Integral) or (isinstance(i, Tensor) and not i.dtype.is_floating_point
                                                     and i.ndim == 0):
                k = int(i)
                if d >= t.ndim:
                    raise IndexError("anygrad: too many indices for a tensor of %d dims" % self.ndim)
                n = t.shape[d]
                if k < -n or k >= n:
                    raise IndexError("anygrad: index %d is out of range for dim %d of size %d"
                                     % (k, d, n))
                k %= n
                t = _wrap(lib.ag_slice(t._handle, d, k, k + 1, 1), "index")
                t = _wrap(lib.ag_squeeze(t._handle, d), "index")
            elif isinstance(i, Tensor):
                if i.dtype is bool_:
                    raise TypeError("anygrad: boolean mask indexing is not supported (use where)")
                if i.ndim != 1:
                    raise IndexError("anygrad: tensor indices must be 1-d")
                t = index_select(t, d, i)
                d += 1
            else:
                raise TypeError("anygrad: unsupported index %r" % (i,))
        return t

    def __setitem__(self, idx, value):
        dst = self[idx]
        if isinstance(value, Tensor):
            check(lib.ag_copy_(dst._handle, value._handle))
        else:
            check(lib.ag_fill_(dst._handle, _scalar(value, "value")))

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


class Size(tuple):
    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return "anygrad.Size(%s)" % list(self)


def _as_tensor_like(x, like):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (numbers.Number, np.generic)):
        return full((), _scalar(x), dtype=like.dtype, device=like.device)
    return tensor(x, dtype=like.dtype, device=like.device)


def _defaults(dtype_, device_):
    dt = as_dtype(dtype_) or float32
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
        if isinstance(data, np.ndarray):
            arr = data
        else:
            _check_data(data)
            arr = np.asarray(data)
        dt = as_dtype(dtype)
        if dt is None:
            k = arr.dtype.kind
            if k not in "biuf":
                raise TypeError("anygrad: cannot make a tensor from %s data" % arr.dtype)
            if isinstance(data, np.ndarray):  # keep the array's dtype, as torch does
                try:
                    dt = as_dtype(arr.dtype)
                except TypeError:
                    raise TypeError("anygrad: no anygrad dtype for NumPy %s" % arr.dtype) from None
            else:  # Python numbers: bool, int64 or float32, as torch
                dt = bool_ if k == "b" else int64 if k in "iu" else float32
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


def _check_data(data):
    if isinstance(data, (list, tuple)):
        for x in data:
            _check_data(x)
    elif not isinstance(data, (numbers.Number, np.generic, np.ndarray)):
        raise TypeError("anygrad: tensor data must be numbers, lists or arrays, got %s"
                        % type(data).__name__)


as_tensor = tensor


def from_numpy(a):
    return tensor(a, dtype=as_dtype(a.dtype))


def _creator(fn, *extra):
    def make(*shape, dtype=None, device=None, requires_grad=False):
        s = _shape_arg(shape)
        dt, d = _defaults(dtype, device)
        t = _wrap(fn(d._d, dt.code, len(s), _i64(s), *extra), fn.__name__)
        if requires_grad:
            t.requires_grad = True
        return t
    return make


zeros = _creator(lib.ag_zeros)
ones = _creator(lib.ag_ones)
empty = _creator(lib.ag_empty)


def full(shape, fill_value, dtype=None, device=None, requires_grad=False):
    s = _shape_arg((shape,) if isinstance(shape, numbers.Integral) else (tuple(shape),))
    dt, d = _defaults(dtype, device)
    t = _wrap(lib.ag_full(d._d, dt.code, len(s), _i64(s), _scalar(fill_value, "fill_value")), "full")
    if requires_grad:
        t.requires_grad = True
    return t


def randn(*shape, dtype=None, device=None, requires_grad=False, generator=None):
    s = _shape_arg(shape)
    dt, d = _defaults(dtype, device)
    t = _wrap(lib.ag_randn(d._d, dt.code, len(s), _i64(s), 0.0, 1.0,
                           generator._g if generator else None), "randn")
    if requires_grad:
        t.requires_grad = True
    return t


def rand(*shape, dtype=None, device=None, requires_grad=False, generator=None):
    s = _shape_arg(shape)
    dt, d = _defaults(dtype, device)
    t = _wrap(lib.ag_rand(d._d, dt.code, len(s), _i64(s), 0.0, 1.0,
                          generator._g if generator else None), "rand")
    if requires_grad:
        t.requires_grad = True
    return t


def arange(start, end=None, step=1, dtype=None, device=None):
    if end is None:
        start, end = 0, start
    for v, n in ((start, "start"), (end, "end"), (step, "step")):
        _finite(v, n)
    if dtype is None:
        dtype = int64 if all(isinstance(v, numbers.Integral) for v in (start, end, step)) else float32
    dt, d = _defaults(dtype, device)
    return _wrap(lib.ag_arange(d._d, dt.code, float(start), float(end), float(step)), "arange")


def zeros_like(t, dtype=None, device=None):
    return zeros(*t.shape, dtype=dtype or t.dtype, device=device or t.device)


def ones_like(t, dtype=None, device=None):
    return ones(*t.shape, dtype=dtype or t.dtype, device=device or t.device)


def full_like(t, v, dtype=None, device=None):
    return full(tuple(t.shape), v, dtype=dtype or t.dtype, device=device or t.device)


def randn_like(t):
    return randn(*t.shape, dtype=t.dtype, device=t.device)


def manual_seed(seed):
    lib.ag_manual_seed(int(seed) & (2 ** 64 - 1))


class Generator:
    def __init__(self, seed=0):
        self._g = lib.ag_generator_create(int(seed))

    def __del__(self):
        if getattr(self, "_g", None):
            lib.ag_generator_free(self._g)
            self._g = None


# ---- ops ------------------------------------------------------------------------

def _t(x, what="input"):
    if isinstance(x, Tensor):
        return x._handle
    raise TypeError("anygrad: %s must be a Tensor, got %s" % (what, type(x).__name__))


def index_select(x, dim, index):
    return _wrap(lib.ag_index_select(_t(x), int(dim), _t(index, "index")), "index_select")
