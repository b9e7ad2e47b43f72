"""What PyTorch programs reach for in their first hour and the package
lacked: grad mode and default dtype switches, deterministic mode, random
integers, permutations and samples, outer/diag/diagonal, scatter,
fill_diagonal_, cumprod, where(cond), Tensor.data assignment, and
nn.utils.parameters_to_vector. Composed from ops the library has; what
the library lacks runs on the host (multinomial, randperm: docs/python.md)."""
import numbers
import threading

import numpy as np

from ._lib import lib, check
from . import _ops
from . import _tensor as _t
from ._tensor import Tensor, _tensor_in, _int_arg, _wrap, float32, float64, int64, no_grad, as_dtype
from ._tensor_extra import eye

__all__ = ["set_grad_enabled", "set_default_dtype", "get_default_dtype", "use_deterministic_algorithms",
           "are_deterministic_algorithms_enabled", "randperm", "randint", "normal", "multinomial",
           "outer", "ger", "diag", "diagonal", "scatter", "cumprod", "nonzero", "where", "clamp", "clip"]


# ---- modes -----------------------------------------------------------------------------

_loose = threading.local()  # regions opened by set_grad_enabled(mode) called as a function


class set_grad_enabled:
    """torch.set_grad_enabled(mode): sets grad mode at once; as a context
    manager, the mode before it comes back at exit. Called as a function,
    switching back closes the region the previous call opened (the C
    library's grad modes are a per-thread stack, depth 64)."""

    def __init__(self, mode):
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError("set_grad_enabled(): argument 'mode' must be bool, not %s" % type(mode).__name__)
        self.mode, self.opened = bool(mode), False
        stack = getattr(_loose, "stack", None)
        if stack is None:
            stack = _loose.stack = []
        if bool(lib.ag_grad_enabled()) == self.mode:
            return
        if stack and stack[-1].mode != self.mode:  # undo the previous call rather than nest
            top = stack.pop()
            check(lib.ag_grad_mode_end())
            top.opened = False
            if bool(lib.ag_grad_enabled()) == self.mode:
                return
        (lib.ag_enable_grad_begin if self.mode else lib.ag_no_grad_begin)()
        self.opened = True
        stack.append(self)

    def __enter__(self):
        stack = _loose.stack
        if self.opened and stack and stack[-1] is self:
            stack.pop()  # closed by __exit__, not by the next call
        return self

    def __exit__(self, *exc):
        if self.opened:
            self.opened = False
            check(lib.ag_grad_mode_end())
        return False

    def __call__(self, fn):
        import functools
        mode = self.mode
        if self.opened:  # as a decorator: the mode before comes back (torch 1.13's __call__)
            stack = _loose.stack
            if stack and stack[-1] is self:
                stack.pop()
            self.opened = False
            check(lib.ag_grad_mode_end())

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with set_grad_enabled(mode):
                return fn(*a, **k)
        return wrapper


def set_default_dtype(d):
    """The dtype of floating tensors made without one (factories, Python
    floats, nn.Linear and LayerNorm): float32 or float64."""
    dt = as_dtype(d) if not isinstance(d, str) else None
    if dt not in (float32, float64):
        raise TypeError("only floating-point types are supported as the default type "
                        "(anygrad: float32 or float64, got %s)" % (d,))
    _t._DEFAULT_DTYPE[0] = dt


def get_default_dtype():
    """The dtype of floating tensors made without one (float32 unless set)."""
    return _t._DEFAULT_DTYPE[0]


def use_deterministic_algorithms(mode, warn_only=False):
    """Deterministic mode (ag_set_deterministic): every op sums in a fixed
    order on every backend. anygrad has no nondeterministic op to refuse,
    so warn_only changes nothing."""
    if not isinstance(mode, (bool, np.bool_)):
        raise TypeError("use_deterministic_algorithms(): argument 'mode' must be bool, not %s"
                        % type(mode).__name__)
    lib.ag_set_deterministic(bool(mode))


def are_deterministic_algorithms_enabled():
    return bool(lib.ag_get_deterministic())


# ---- random ----------------------------------------------------------------------------

def _size(size, fn):
    if isinstance(size, numbers.Integral):
        size = (size,)
    if not isinstance(size, (tuple, list, _t.Size)):
        raise TypeError("%s(): argument 'size' must be tuple of ints, not %s" % (fn, type(size).__name__))
    s = tuple(_int_arg(v, fn, "size") for v in size)
    if any(v < 0 for v in s):
        raise RuntimeError("Trying to create tensor with negative dimension %d: %s"
                           % (min(s), list(s)))
    return s


def _host_uniform(shape, generator):
    """Uniform [0, 1) doubles drawn by the package's generator on the CPU."""
    return _t.rand(*shape, dtype=float64, generator=generator).numpy() if int(np.prod(shape)) else \
        np.zeros(shape)


def randperm(n, generator=None, dtype=int64, device=None, requires_grad=False):
    """A random permutation of 0..n-1: the argsort of n uniform doubles
    drawn by the generator, sorted on the host."""
    n = _int_arg(n, "randperm", "n", 1)
    if n < 0:
        raise RuntimeError("Trying to create tensor with negative dimension %d: [%d]" % (n, n))
    p = np.argsort(_host_uniform((n,), generator), kind="stable")
    return _t.tensor(p, dtype=dtype, device=device, requires_grad=requires_grad)


def randint(*args, size=None, generator=None, dtype=int64, device=None, requires_grad=False, low=None,
            high=None):
    """randint(high, size) or randint(low, high, size): integers uniform in
    [low, high), int64 unless dtype says otherwise."""
    args = list(args)
    if size is None and args and not isinstance(args[-1], numbers.Number):
        size = args.pop()
    if high is None and args:
        high = args.pop()
    if low is None:
        low = args.pop() if args else 0
    if args or high is None or size is None:
        raise TypeError("randint(): expected randint(high, size) or randint(low, high, size)")
    low, high = _int_arg(low, "randint", "low"), _int_arg(high, "randint", "high")
    s = _size(size, "randint")
    if low >= high:
        raise RuntimeError("random_ expects 'from' to be less than 'to', but got from=%d >= to=%d"
                           % (low, high))
    u = _host_uniform(s, generator)
    v = np.minimum(np.floor(u * (high - low)).astype(np.int64), high - low - 1) + low
    return _t.tensor(v, dtype=dtype, device=device, requires_grad=requires_grad)


def normal(mean=0.0, std=1.0, size=None, generator=None, dtype=None, device=None):
    """torch.normal: (Tensor, Tensor), (Tensor, float), (float, Tensor) each
    draw one value per element of the broadcast shape; (float, float, size)
    draws size values."""
    mt, st = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not mt and not st:
        if size is None:
            raise TypeError("normal(): with float mean and std, argument 'size' is required")
        m, s = _t._scalar(mean, "mean", "normal"), _t._scalar(std, "std", "normal")
        if s < 0:
            raise RuntimeError("normal expects std >= 0.0, but found std %s" % s)
        shape = _size(size, "normal")
        return _t.randn(*shape, dtype=dtype, device=device, generator=generator) * s + m
    if size is not None:
        raise TypeError("normal(): argument 'size' is only taken with float mean and std")
    ref = mean if mt else std
    if not ref.dtype.is_floating_point:
        raise RuntimeError("normal expects floating point mean and std, got %s" % ref.dtype)
    if st and not std.dtype.is_floating_point:
        raise RuntimeError("normal expects floating point std, got %s" % std.dtype)
    if not st and std < 0 or st and bool((std < 0).any()):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    shape = np.broadcast_shapes(tuple(mean.shape) if mt else (), tuple(std.shape) if st else ())
    z = _t.randn(*shape, dtype=ref.dtype, device=ref.device, generator=generator)
    return (z * std + mean).detach()


def multinomial(input, num_samples, replacement=False, generator=None):  # noqa: A002
    """Indices drawn from the rows of input (non-negative weights, 1-d or
    2-d), int64 on input's device. Runs on the host from uniform doubles of
    the generator: with replacement by the inverse of the cumulative
    weights, without by the largest keys log(u) / w (Efraimidis-Spirakis)."""
    x = _tensor_in(input, "multinomial")
    k = _int_arg(num_samples, "multinomial", "num_samples", 2)
    if x.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not x.dtype.is_floating_point:
        raise RuntimeError("multinomial only supports floating-point dtypes for input, got: %s" % x.dtype)
    if k <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    w = x.detach().to(float64).numpy()
    rows = w.reshape(-1, w.shape[-1])
    n = rows.shape[1]
    if not replacement and k > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    tot = rows.sum(1)
    if (tot <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    out = np.empty((rows.shape[0], k), dtype=np.int64)
    if replacement:
        u = _host_uniform((rows.shape[0], k), generator)
        for r in range(rows.shape[0]):
            c = np.cumsum(rows[r]) / tot[r]
            out[r] = np.minimum(np.searchsorted(c, u[r], side="right"), n - 1)
            nz = np.flatnonzero(rows[r])  # never a zero-weight category
            bad = rows[r][out[r]] == 0
            out[r][bad] = nz[np.minimum(np.searchsorted(nz, out[r][bad]), nz.size - 1)]
    else:
        u = _host_uniform((rows.shape[0], n), generator)
        with np.errstate(divide="ignore"):
            keys = np.log(np.maximum(u, 1e-300)) / rows
        keys[rows == 0] = -np.inf
        out[:] = np.argsort(-keys, axis=1, kind="stable")[:, :k]
    if x.ndim == 1:
        out = out[0]
    return _t.tensor(out, dtype=int64, device=x.device)


# ---- matrices --------------------------------------------------------------------------

def outer(input, vec2):  # noqa: A002
    """The outer product of two 1-d tensors (differentiable)."""
    a, b = _tensor_in(input, "outer"), _tensor_in(vec2, "outer", "vec2")
    for t, name in ((a, "self"), (b, "vec2")):
        if t.ndim != 1:
            raise RuntimeError("outer: Expected 1-D argument %s, but got %d-D" % (name, t.ndim))
    return a.unsqueeze(1) * b.unsqueeze(0)


ger = outer


def diagonal(input, offset=0, dim1=0, dim2=1):  # noqa: A002
    """The diagonal of dims dim1 and dim2 (j - i == offset) as the last dim,
    read with one index_select (differentiable); a copy, not a view."""
    x = _tensor_in(input, "diagonal")
    nd = x.ndim
    off = _int_arg(offset, "diagonal", "offset", 2)
    d1 = _t._dim_arg(dim1, "diagonal", "dim1", 3)
    d2 = _t._dim_arg(dim2, "diagonal", "dim2", 4)
    if nd < 2:
        raise RuntimeError("diagonal(): the input needs at least 2 dimensions, got %d" % nd)
    d1, d2 = d1 % nd, d2 % nd
    if d1 == d2:
        raise RuntimeError("diagonal dimensions cannot be identical %d, %d" % (dim1, dim2))
    rest = [d for d in range(nd) if d not in (d1, d2)]
    p = x.permute(*(rest + [d1, d2]))
    n, m = x.shape[d1], x.shape[d2]
    i0, j0 = (0, off) if off >= 0 else (-off, 0)
    length = max(0, min(n - i0, m - j0))
    pos = [(i0 + i) * m + j0 + i for i in range(length)]
    flat = p.reshape(*([x.shape[d] for d in rest] + [n * m]))
    idx = _t.tensor(pos, dtype=int64, device=x.device)
    if length == 0:
        return _t.zeros(*([x.shape[d] for d in rest] + [0]), dtype=x.dtype, device=x.device)
    return _t.index_select(flat.contiguous(), len(rest), idx)


def diag(input, diagonal=0):  # noqa: A002
    """A 1-d input as the diagonal of a square matrix (j - i == diagonal);
    a 2-d input's diagonal. Differentiable."""
    x = _tensor_in(input, "diag")
    k = _int_arg(diagonal, "diag", "diagonal", 2)
    if x.ndim == 2:
        return globals()["diagonal"](x, k)
    if x.ndim != 1:
        raise RuntimeError("matrix or a vector expected")
    n = x.shape[0]
    s = n + abs(k)
    ar = _t.arange(s, device=x.device)
    on = (ar.unsqueeze(0) - ar.unsqueeze(1)) == k
    pad = _t.zeros(abs(k), dtype=x.dtype, device=x.device)
    v = _ops.cat([x, pad]) if k else x
    v = v.unsqueeze(1) if k >= 0 else v.unsqueeze(0)  # (i, i + k) = v[i]; (j - k, j) = v[j]
    return _ops.where(on, v, _t.zeros((), dtype=x.dtype, device=x.device))


def fill_diagonal_(self, fill_value, wrap=False):
    """Fill the main diagonal in place (all dims of equal size, or a 2-d
    matrix; wrap: a tall matrix's diagonal starts again every n + 1 rows)."""
    x = _tensor_in(self, "fill_diagonal_")
    if x.ndim < 2:
        raise RuntimeError("dimensions must larger than 1")
    shp = list(x.shape)
    if x.ndim > 2 and any(s != shp[0] for s in shp):
        raise RuntimeError("all dimensions of input must be of equal length")
    numel = x.numel()
    if x.ndim == 2:
        r, c = shp
        stop = numel if wrap and r > c + 1 else min(r, c) * c
        step = c + 1
    else:
        step = sum(int(np.prod(shp[i + 1:], dtype=np.int64)) for i in range(x.ndim))
        stop = numel
    m = np.zeros(numel, dtype=np.bool_)
    m[np.arange(0, stop, step)] = True
    mask = _t.tensor(m.reshape(shp), device=x.device)
    v = _t.full((), fill_value, dtype=x.dtype, device=x.device)
    return _ops._write(x, _ops.where(mask, v, x), "fill_diagonal_")


# ---- scatter -----------------------------------------------------------------------------

def _scatter_args(x, dim, index, src, value, fn):
    d = _t._dim_arg(dim, fn, "dim", 2)
    idx = _tensor_in(index, fn, "index", 3)
    if idx.dtype is not int64:
        raise RuntimeError("%s(): Expected dtype int64 for index" % fn)
    if idx.ndim != x.ndim and not (idx.ndim <= 1 and x.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if src is None:
        src = _t.full(tuple(idx.shape), value, dtype=x.dtype, device=x.device)
    else:
        src = _tensor_in(src, fn, "src", 4)
        if src.dtype is not x.dtype:
            raise RuntimeError("%s(): Expected self.dtype to be equal to src.dtype" % fn)
        if tuple(src.shape) != tuple(idx.shape):
            if src.ndim != idx.ndim or any(a > b for a, b in zip(idx.shape, src.shape)):
                raise RuntimeError("Expected index %s to be smaller than self %s apart from dimension %d "
                                   "and to be smaller size than src %s"
                                   % (list(idx.shape), list(x.shape), d, list(src.shape)))
            src = src[tuple(slice(0, s) for s in idx.shape)]
    return d, idx, src


def scatter(input, dim, index, src=None, value=None, reduce=None):  # noqa: A002
    """torch.scatter: a copy of input with src (or value) written at
    index along dim, over ag_scatter_add. Duplicate targets: their values
    are summed, where torch leaves the winner undefined."""
    x = _tensor_in(input, "scatter")
    if reduce is not None:
        raise NotImplementedError("scatter(): reduce= is not supported by anygrad (use scatter_add)")
    if src is None and value is None:
        raise TypeError("scatter(): expected src (a Tensor) or value (a number)")
    if src is not None and not isinstance(src, Tensor):
        src, value = None, src
    d, idx, s = _scatter_args(x, dim, index, src, value, "scatter")
    via = x.dtype if x.dtype.is_floating_point else float64
    xs, ss = x.to(via), s.to(via)
    z = _t.zeros(*x.shape, dtype=via, device=x.device)
    put = _wrap(lib.ag_scatter_add(z._handle, d, idx._handle, ss._handle), "scatter")
    one = _t.ones(*idx.shape, dtype=via, device=x.device)
    hit = _wrap(lib.ag_scatter_add(z._handle, d, idx._handle, one._handle), "scatter")
    r = _ops.where(hit > 0, put, xs)
    return r if via is x.dtype else r.to(x.dtype)


def scatter_(self, dim, index, src=None, value=None, reduce=None):
    x = _tensor_in(self, "scatter_")
    return _ops._write(x, scatter(x, dim, index, src, value, reduce), "scatter_")


# ---- scans and where(cond) -----------------------------------------------------------------

def cumprod(input, dim, dtype=None):  # noqa: A002
    """Inclusive cumulative products along dim: log2(n) steps of a product
    with the values shifted by 1, 2, 4, ... (Hillis-Steele), each an op that
    differentiates; exact for zeros and signs (no log)."""
    x = _tensor_in(input, "cumprod")
    if dtype is not None:
        x = x.to(as_dtype(dtype))
    if x.ndim == 0:
        return x.clone()
    d = _t._dim_arg(dim, "cumprod", "dim", 2) % x.ndim
    n = x.shape[d]
    y, s = x, 1
    while s < n:
        shp = list(x.shape)
        shp[d] = s
        ones = _t.ones(*shp, dtype=y.dtype, device=y.device)
        head = y[(slice(None),) * d + (slice(0, n - s),)]
        y = y * _ops.cat([ones, head], d)
        s *= 2
    return y


def nonzero(input, as_tuple=False):  # noqa: A002
    """The indices of the non-zero elements (read on the host), as an
    (n, ndim) int64 tensor or a tuple of 1-d ones."""
    x = _tensor_in(input, "nonzero")
    a = x.detach().numpy() if x.dtype is not _t.bfloat16 else x.float().numpy()
    nz = np.nonzero(a) if a.ndim else np.nonzero(a.reshape(1))
    if as_tuple:
        return tuple(_t.tensor(v.astype(np.int64), dtype=int64, device=x.device) for v in nz)
    if not a.ndim:
        return _t.zeros(int(bool(a)), 0, dtype=int64, device=x.device)
    return _t.tensor(np.stack(nz, 1).astype(np.int64).reshape(-1, a.ndim), dtype=int64, device=x.device)


_where3 = _ops.where


def where(condition, input=None, other=None):  # noqa: A002
    """where(cond, x, y), or where(cond): nonzero(cond, as_tuple=True)."""
    if input is None and other is None:
        return nonzero(_tensor_in(condition, "where", "condition"), as_tuple=True)
    return _where3(condition, input, other)


_clamp_numbers = _ops.clamp


def clamp(input, min=None, max=None):  # noqa: A002
    """clamp with number bounds (the library's ag_clamp), or with tensor
    bounds (broadcast; maximum then minimum, differentiable in all three).
    A number and a tensor together: TypeError, as torch 1.13."""
    mt, xt = isinstance(min, Tensor), isinstance(max, Tensor)
    if not mt and not xt:
        return _clamp_numbers(input, min, max)
    if (min is not None and not mt) or (max is not None and not xt):
        raise TypeError("clamp(): min and max must both be Tensors (or None) or both numbers")
    x = _tensor_in(input, "clamp")
    r = x if min is None else _ops.maximum(x, min)
    return r if max is None else _ops.minimum(r, max)


# ---- Tensor.data, parameter vectors ----------------------------------------------------------

def _set_data(self, value):
    """p.data = t: p takes t's values, shape, dtype and device, keeping its
    identity and requires_grad. Same shape, dtype and device: the values are
    copied into p's storage (handles held by an optimizer stay valid; p does
    not share t's storage as it does in torch); else p is rebound to a
    detached view of t (an optimizer made before holds the old tensor)."""
    if not isinstance(value, Tensor):
        raise TypeError("data(): the value must be a Tensor, not %s" % type(value).__name__)
    h = self._handle
    if (tuple(value.shape) == tuple(self.shape) and value.dtype is self.dtype
            and value.device == self.device):
        with no_grad():
            check(lib.ag_copy_(h, value._handle))
        return
    rg = self.requires_grad
    new = value.detach()
    self._h, new._h = new._h, self._h
    if rg:
        self.requires_grad = True


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-d tensor."""
    ps = list(parameters) if not isinstance(parameters, Tensor) else [parameters]
    if not ps:
        raise RuntimeError("parameters_to_vector(): expected a non-empty list of Tensors")
    dev = ps[0].device
    for p in ps:
        if not isinstance(p, Tensor):
            raise TypeError("expected Tensor as element of parameters, but got %s" % type(p).__name__)
        if p.device != dev:
            raise TypeError("Found two parameters on different devices, this is currently not supported.")
    return _ops.cat([p.reshape(-1) for p in ps])


def vector_to_parameters(vec, parameters):
    """Copy the slices of the 1-d vec into the parameters, in order (their
    storage is written; as torch's, no gradient flows to vec)."""
    if not isinstance(vec, Tensor):
        raise TypeError("expected torch.Tensor, but got: %s" % type(vec).__name__)
    ps = list(parameters) if not isinstance(parameters, Tensor) else [parameters]
    total = sum(p.numel() for p in ps)
    if vec.ndim != 1 or vec.numel() != total:
        raise RuntimeError("vector_to_parameters(): vec of shape %s does not hold the %d parameter values"
                           % (list(vec.shape), total))
    off = 0
    with no_grad():
        for p in ps:
            n = p.numel()
            p.copy_(vec[off:off + n].reshape(*p.shape))
            off += n


# ---- nn.init.eye_, dirac_, orthogonal_ -------------------------------------------------------

def eye_(tensor):
    """The 2-d tensor as the identity (ones where i == j), in place."""
    if not isinstance(tensor, Tensor):
        raise TypeError("eye_(): argument 'tensor' must be Tensor, not %s" % type(tensor).__name__)
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    r, c = tensor.shape
    with no_grad():
        tensor.copy_(eye(r, c, dtype=tensor.dtype, device=tensor.device))
    return tensor


def dirac_(tensor, groups=1):
    """A 3-, 4- or 5-d convolution weight as the identity (Dirac delta) per
    group, in place."""
    if not isinstance(tensor, Tensor):
        raise TypeError("dirac_(): argument 'tensor' must be Tensor, not %s" % type(tensor).__name__)
    nd = tensor.ndim
    if nd not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    shp = list(tensor.shape)
    g = _int_arg(groups, "dirac_", "groups", 2)
    if g <= 0 or shp[0] % g:
        raise ValueError("dim 0 must be divisible by groups")
    out_g = shp[0] // g
    m = np.zeros(shp)
    centre = tuple(s // 2 for s in shp[2:])
    for gi in range(g):
        for d in range(min(out_g, shp[1])):
            m[(gi * out_g + d, d) + centre] = 1.0
    with no_grad():
        tensor.copy_(_t.tensor(m, dtype=tensor.dtype, device=tensor.device))
    return tensor


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix over the tensor's first dim and the rest
    flattened, in place: the QR of a normal matrix drawn by the generator,
    its sign fixed by R's diagonal (as torch), computed on the host."""
    if not isinstance(tensor, Tensor):
        raise TypeError("orthogonal_(): argument 'tensor' must be Tensor, not %s" % type(tensor).__name__)
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    a = _t.randn(rows, cols, dtype=float64, generator=generator).numpy()
    if rows < cols:
        a = a.T
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    q = q * float(gain)
    with no_grad():
        tensor.copy_(_t.tensor(q.reshape(tuple(tensor.shape)), dtype=tensor.dtype, device=tensor.device))
    return tensor


# ---- methods ----------------------------------------------------------------------------------

for _n, _f in (("outer", outer), ("ger", ger), ("diag", diag), ("diagonal", diagonal), ("scatter", scatter),
               ("scatter_", scatter_), ("fill_diagonal_", fill_diagonal_), ("cumprod", cumprod),
               ("multinomial", multinomial), ("nonzero", nonzero)):
    if not hasattr(Tensor, _n):
        setattr(Tensor, _n, _f)
clip = clamp
_ops.clamp = clamp  # clamp_ and the operators read it there
Tensor.clamp = Tensor.clip = clamp
Tensor.data = property(lambda self: self.detach(), _set_data)
