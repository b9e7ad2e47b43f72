"""Advanced indexing for Tensor.__getitem__ and __setitem__, as torch's:
Python lists, NumPy arrays and integer tensors of any shape (broadcast
together; the result's dims where torch puts them), boolean masks, and
writes through all of them. Reads are ag_index_select over the indexed dims
merged into one (differentiable); writes build the new values out of place
(ag_where, ag_argsort, ag_index_add) and copy them in, or, when the write
must be differentiated, rebind the tensor to the result as += does."""
import ctypes
import numbers
import warnings

import numpy as np

from ._lib import lib
from . import _tensor as _t
from ._tensor import Tensor, _wrap, bool_, uint8, int32, int64, float32, float64

_LONG_BYTE_BOOL = "tensors used as indices must be long, byte or bool tensors"
_TWO32 = 4294967296.0
_DEVICE_WRITE_WORK = 1 << 22  # numel * values above which a device write reads its positions back


# ---- parsing ---------------------------------------------------------------------------

class _Adv:
    """One advanced index: an int index (k == 1) or a mask over k dims;
    data is a NumPy array (host) or a Tensor (on the indexed tensor's device);
    new: a bool scalar, which adds the dim it indexes."""
    __slots__ = ("data", "mask", "k", "new", "d", "lin", "span")

    def __init__(self, data, mask, new=False):
        self.data, self.mask, self.new = data, mask, new
        self.k = (data.ndim if mask else 1) if not new else 0


def as_tuple(idx):
    """idx as a tuple of indices, by torch's rule: a list or an array of
    fewer than 32 entries holding a sequence, tensor, slice, None or ...
    is a tuple of indices (x[[[0, 1], [1, 0]]] is x[[0, 1], [1, 0]], and so
    is x[np.array([[0, 1], [1, 0]])]), any other index a single one."""
    if isinstance(idx, tuple):
        return idx
    if isinstance(idx, (list, np.ndarray)) and getattr(idx, "ndim", 1) and len(idx) < 32:
        for i in idx:
            if isinstance(i, (list, tuple, np.ndarray, Tensor, slice)) or i is None or i is Ellipsis:
                return tuple(idx)
    return (idx,)


def is_advanced(idx):
    """True when idx (a tuple) holds an index only this module reads."""
    for i in idx:
        if isinstance(i, (list, tuple)):
            return True
        if isinstance(i, np.ndarray) and i.ndim:
            return True
        if isinstance(i, Tensor) and i._h and (i.ndim or i.dtype is uint8):
            return True
    return False


def _host_array(i):
    """A list, tuple or ndarray index as an int64 index or a bool mask (host)."""
    try:
        a = np.asarray(i)
    except ValueError:  # ragged lists
        raise IndexError("anygrad: the list index %r is not rectangular" % (i,)) from None
    if a.dtype == np.bool_:
        return _Adv(a, True)
    if a.size == 0 and a.dtype.kind in "fO":
        a = a.astype(np.int64)
    if a.dtype.kind == "u" and a.size and int(a.max()) > (1 << 63) - 1:
        raise IndexError("index %d is out of bounds" % int(a.max()))
    if a.dtype.kind not in "iu":
        raise IndexError(_LONG_BYTE_BOOL + " (got a %s index)" % a.dtype)
    return _Adv(a.astype(np.int64), False)


def _parse(x, idx):
    """idx as a list of None, Ellipsis, slice, int and _Adv entries."""
    out = []
    xdev = x.device
    for i in idx:
        if i is None or i is Ellipsis or isinstance(i, slice):
            out.append(i)
        elif isinstance(i, (bool, np.bool_)):
            out.append(_Adv(np.array([bool(i)]), True, new=True))
        elif isinstance(i, Tensor):
            dt = i.dtype
            if dt is uint8:
                warnings.warn("indexing with dtype anygrad.uint8 is now deprecated, please use a dtype "
                              "anygrad.bool instead.", UserWarning, stacklevel=4)
                i = i.bool()
                dt = bool_
            if dt not in (bool_, int32, int64):
                raise IndexError(_LONG_BYTE_BOOL + " (got %s)" % dt.name)
            if i.ndim == 0:
                if dt is bool_:
                    out.append(_Adv(np.array([bool(i.item())]), True, new=True))
                else:
                    out.append(int(i.item()))
                continue
            if i.device != xdev:
                if i.device.type != "cpu":
                    raise RuntimeError("indices should be either on cpu or on the same device as the indexed "
                                       "tensor (%s), got an index on %s" % (xdev, i.device))
            if i.device.type == "cpu":  # read on the host: torch's errors at once
                a = i.numpy()
                out.append(_Adv(a if dt is bool_ else a.astype(np.int64), dt is bool_))
            else:
                out.append(_Adv(i, dt is bool_))
        elif isinstance(i, numbers.Integral):
            out.append(int(i))
        elif isinstance(i, (list, tuple)):
            out.append(_host_array(i))
        elif isinstance(i, np.ndarray):
            if i.ndim == 0:
                if i.dtype == np.bool_:
                    out.append(_Adv(np.array([bool(i)]), True, new=True))
                elif i.dtype.kind in "iu":
                    out.append(int(i))
                else:
                    raise IndexError(_LONG_BYTE_BOOL + " (got a %s index)" % i.dtype)
            else:
                out.append(_host_array(i))
        else:
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                             "are valid indices (got %s)" % type(i).__name__)
    n_real = sum(1 if isinstance(e, (int, slice)) else e.k if isinstance(e, _Adv) else 0 for e in out)
    if sum(1 for e in out if e is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    ndim = x.ndim
    if n_real > ndim:
        raise IndexError("too many indices for tensor of dimension %d" % ndim)
    if Ellipsis in out:
        k = [j for j, e in enumerate(out) if e is Ellipsis][0]
        out[k:k + 1] = [slice(None)] * (ndim - n_real)
    return out


# ---- the view and the advanced entries ---------------------------------------------------

def _basic(x, entries):
    """Apply None, slices and ints (views), recording each _Adv's first dim
    in the view. Returns (view, advs)."""
    t, d, advs = x, 0, []
    for e in entries:
        if e is None:
            t = t.unsqueeze(d)
            d += 1
        elif isinstance(e, slice):
            step = 1 if e.step is None else _t._int_arg(e.step, "__getitem__", "step")
            if step <= 0:
                raise ValueError("step must be greater than zero")
            n = t.shape[d]
            start, stop, _ = slice(e.start, e.stop).indices(n)
            stop = max(start, stop)
            t = _wrap(lib.ag_slice(t._handle, d, start, stop, min(step, max(n, 1))), "slice")
            d += 1
        elif isinstance(e, int):
            n = t.shape[d]
            if not -n <= e < n:
                raise IndexError("index %d is out of bounds for dimension %d with size %d" % (e, d, n))
            e %= n
            t = _wrap(lib.ag_slice(t._handle, d, e, e + 1, 1), "index")
            t = _wrap(lib.ag_squeeze(t._handle, d), "index")
        else:
            if e.new:
                t = t.unsqueeze(d)
                e.k = 1
            e.d = d
            shp = tuple(t.shape[d:d + e.k])
            if e.mask and tuple(e.data.shape) != shp:
                ms = list(e.data.shape)
                j = next((j for j in range(len(ms)) if j >= len(shp) or ms[j] != shp[j]), 0)
                raise IndexError("The shape of the mask %s at index %d does not match the shape of the "
                                 "indexed tensor %s at index %d" % (ms, j, list(t.shape), d + j))
            e.span = int(np.prod(shp, dtype=np.int64)) if shp else 1
            advs.append(e)
            d += e.k
    return t, advs


def _running_count(f, line=4096):
    """cumsum of the 1-d f64 f in lines of `line` entries plus the running
    total of the lines before (a device's loop limit caps one line: Vulkan's
    llvmpipe at 65000 steps)."""
    from ._ops import cumsum, cat
    n = f.numel()
    if n <= line:
        return cumsum(f, 0) if n else f
    b = -(-n // line)
    if b * line != n:
        f = cat([f, _t.zeros(b * line - n, dtype=f.dtype, device=f.device)])
    rows = cumsum(f.reshape(b, line), 1)
    tot = rows[:, line - 1]
    before = _running_count(tot, line) - tot
    return (rows + before.reshape(b, 1)).reshape(-1)[:n]


def _nonzero_flat(m):
    """The flat positions of a device mask's true elements, in order (i64),
    in O(count log n) work: the running count of true elements (cumsum,
    exact in f64) and, for each r, a bisection for the first position
    where it reaches r (the library's sort and scatter kernels are O(n^2)
    on the devices). The count is one host sync, as torch's nonzero."""
    f = m.reshape(-1)
    n = f.numel()
    dev = m.device
    c = _running_count(f.to(float64))
    count = int(c[n - 1].item()) if n else 0
    if count == 0:
        return _t.zeros(0, dtype=int64, device=dev)
    want = _t.arange(1, count + 1, dtype=float64, device=dev)
    lo = _t.zeros(count, dtype=float64, device=dev)
    hi = _t.full((count,), n - 1, dtype=float64, device=dev)
    for _ in range(max(1, (n - 1).bit_length())):
        mid = ((lo + hi) * 0.5).floor()
        ge = _take(c, 0, mid.to(int64)) >= want
        lo, hi = _t_where(ge, lo, mid + 1.0), _t_where(ge, mid, hi)
    return lo.to(int64)


def _broadcast(shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes %s"
                         % ", ".join(str(list(s)) for s in shapes)) from None


def _linear(t, advs):
    """The advanced entries as one index into their dims merged (row-major
    in the entries' order): (index tensor of the broadcast shape)."""
    host = all(isinstance(e.data, np.ndarray) for e in advs)
    lins = []
    for e in advs:
        if e.mask:
            lins.append(np.flatnonzero(e.data) if isinstance(e.data, np.ndarray) else _nonzero_flat(e.data))
            continue
        a, n = e.data, e.span
        if isinstance(a, np.ndarray):
            bad = (a < -n) | (a >= n)
            if bad.any():
                raise IndexError("index %d is out of bounds for dimension %d with size %d"
                                 % (int(a[bad].flat[0]), e.d, n))
            lins.append(a % n if n else a)
        else:
            a = a.long()
            lins.append(_t_where(a < 0, a + n, a))
    shape = _broadcast([tuple(v.shape) for v in lins])
    if host:
        lin = np.zeros(shape, dtype=np.int64)
        for e, v in zip(advs, lins):
            lin = lin * e.span + v
        return _t.tensor(lin, dtype=int64, device=t.device), shape
    total, bad = None, None
    for e, v in zip(advs, lins):
        if isinstance(v, np.ndarray):
            v = _t.tensor(v, dtype=int64, device=t.device)
        if len(advs) > 1 and not e.mask:  # out of range here may be in range once merged
            b = (v < 0).long() + (v >= e.span).long()
            bad = b if bad is None else bad + b
        total = v if total is None else total * e.span + v
    total = total.expand(*shape) if tuple(total.shape) != shape else total
    if bad is not None:  # read as out of range by ag_index_select: AG_ERR_INDEX at the next sync
        total = _t_where(bad > 0, _t.full((), -1, dtype=int64, device=t.device), total)
    return total, shape


def _t_where(c, a, b):
    return _wrap(lib.ag_where(c._handle, a._handle, b._handle), "index")


def _take(t, dim, idx, op=lib.ag_index_select):
    """ag_index_select (or ag_gather) for every dtype: the library's read
    floating values, so bool and uint8 go through f32, int32 through f64,
    and int64 as two exact f64 halves (hi * 2^32 + lo)."""
    if t.dtype.is_floating_point:
        return _wrap(op(t._handle, dim, idx._handle), "index")
    dt = t.dtype
    if dt is not int64:
        via = float32 if dt in (bool_, uint8) else float64
        return _take(t.to(via), dim, idx, op).to(dt)
    q = t.to(float64).div(_TWO32).floor().to(int64)
    lo = t - q * _TWO32
    adj = (lo < 0).long() - (lo >= _TWO32).long()
    q, lo = q - adj, lo + adj * _TWO32
    hi = _take(q.to(float64), dim, idx, op).to(int64)
    return hi * _TWO32 + _take(lo.to(float64), dim, idx, op).to(int64)


def _gather_adv(t, advs):
    """t indexed by its advanced entries: the entries' dims merged into one
    and read with one index_select; the result's index dims where the first
    entry was when the entries are adjacent, else first (torch's rule)."""
    lin, shape = _linear(t, advs)
    flat = lin.reshape(-1)
    shp = list(t.shape)
    d0 = advs[0].d
    adjacent = all(a.d + a.k == b.d for a, b in zip(advs, advs[1:]))
    if adjacent:
        dend = advs[-1].d + advs[-1].k
        merged = shp[:d0] + [int(np.prod(shp[d0:dend], dtype=np.int64))] + shp[dend:]
        r = _take(t.reshape(*merged), d0, flat)
        return r.reshape(*(shp[:d0] + list(shape) + shp[dend:]))
    dims = [a.d + j for a in advs for j in range(a.k)]
    rest = [i for i in range(len(shp)) if i not in dims]
    p = t.permute(*(dims + rest))
    n = int(np.prod([shp[i] for i in dims], dtype=np.int64))
    r = _take(p.reshape(n, *[shp[i] for i in rest]), 0, flat)
    return r.reshape(*(list(shape) + [shp[i] for i in rest]))


def getitem(x, idx):
    """x[idx] for any index (tuple); a view when idx holds no advanced index."""
    t, advs = _basic(x, _parse(x, idx))
    if not advs:
        return t
    return _gather_adv(t, advs)


# ---- writes ------------------------------------------------------------------------------

def _value(x, value):
    """The value of x[idx] = value as a tensor of x's dtype on x's device."""
    if isinstance(value, Tensor):
        v = value
        if v.device != x.device:
            v = v.to(x.device)
        return v if v.dtype is x.dtype else v.to(x.dtype)
    return _t._as_tensor_like(value, x, "__setitem__", "value")


def _src_host(pos, numel):
    """For each element of the written tensor, the last value position that
    writes it, or -1 (positions read back from the CPU)."""
    p = pos.numpy().reshape(-1).astype(np.int64) - 1
    src = np.full(numel, -1, dtype=np.int64)
    if p.size:
        u, first = np.unique(p[::-1], return_index=True)
        src[u] = p.size - 1 - first
    return src, u.size < p.size if p.size else False


def _src_device(pos, numel, dev):
    """_src_host on the device: a stable sort of the positions; the last of
    each run of equal positions is the last write; index_add puts its
    position + 1 at the target (no two alike, so the f64 sum is exact)."""
    p = (pos.reshape(-1) - 1.0)
    n = p.numel()
    order = _wrap(lib.ag_argsort(p._handle, 0, False), "__setitem__")
    ps = _wrap(lib.ag_index_select(p._handle, 0, order._handle), "__setitem__")
    if n > 1:
        ne = (ps[:-1] != ps[1:]).to(float64)
        keep = _t.tensor(np.ones(1), dtype=float64, device=dev)
        from ._ops import cat
        keep = cat([ne, keep])
    else:
        keep = _t.ones(n, dtype=float64, device=dev)
    contrib = (order.to(float64) + 1.0) * keep
    zeros = _t.zeros(numel, dtype=float64, device=dev)
    target = ps.to(int64)
    s = _wrap(lib.ag_index_add(zeros._handle, 0, target._handle, contrib._handle, 1.0), "__setitem__")
    return s.to(int64) - 1


def _store(x, new, graph, fn="__setitem__"):
    if graph:  # the tensor object takes the result and its graph (as +=)
        if new.dtype is not x.dtype:
            new = new.to(x.dtype)
        x._h, new._h = new._h, x._h
    else:
        _t._inplace_status(x, lib.ag_copy_(x._handle, new._handle), fn)


def _single_mask(entries):
    """The mask of an index that is one mask (and trailing full slices), else None."""
    advs = [e for e in entries if isinstance(e, _Adv)]
    if len(advs) != 1 or not advs[0].mask or advs[0].new or entries[0] is not advs[0]:
        return None
    for e in entries[1:]:
        if not (isinstance(e, slice) and e == slice(None)):
            return None
    return advs[0]


def setitem(x, idx, value):
    """x[idx] = value: written into x's storage (views see it; the version
    counter moves), or, when grad mode is on and x or value requires grad,
    x takes the out-of-place result and its graph. Duplicate indices: the
    last value written wins (torch's CPU order; CUDA leaves it undefined)."""
    h = x._handle
    vgrad = isinstance(value, Tensor) and value.requires_grad
    graph = bool(lib.ag_grad_enabled()) and (bool(lib.ag_tensor_requires_grad(h)) or vgrad)
    if graph and lib.ag_tensor_requires_grad(h) and lib.ag_tensor_is_leaf(h):
        raise RuntimeError("__setitem__(): a leaf Variable that requires grad is being used in an in-place "
                           "operation (write it under anygrad.no_grad())")
    entries = _parse(x, idx)
    m = _single_mask(entries)
    if (isinstance(value, Tensor) and value._h and value.dtype is not x.dtype and is_advanced(idx) and
            not (m is not None and value.ndim == 0)):
        from ._dtype_rules import torch_name
        raise RuntimeError("Index put requires the source and destination dtypes match, got %s for the "
                           "destination and %s for the source."
                           % (torch_name(x.dtype), torch_name(value.dtype)))
    v = _value(x, value)
    if m is not None and v.ndim == 0:  # x[mask] = scalar: one where, no sync
        _basic(x, entries)  # checks the mask's shape
        mt = m.data if isinstance(m.data, Tensor) else _t.tensor(m.data, device=x.device)
        mt = mt.reshape(*(list(mt.shape) + [1] * (x.ndim - mt.ndim)))
        _store(x, _t_where(mt, v, x), graph)
        return
    numel = x.numel()
    iota = _t.arange(1, numel + 1, dtype=float64, device=x.device).reshape(*x.shape)
    t, advs = _basic(iota, entries)
    pos = _gather_adv(t, advs) if advs else t
    shape = tuple(pos.shape)
    while v.ndim > len(shape) and v.shape[0] == 1:  # torch drops leading 1s of the value
        v = v.squeeze(0)
    try:
        vshape = tuple(np.broadcast_shapes(tuple(v.shape), shape))
    except ValueError:
        vshape = None
    if vshape != shape:
        raise RuntimeError("shape mismatch: value tensor of shape %s cannot be broadcast to indexing result "
                           "of shape %s" % (list(v.shape), list(shape)))
    if pos.numel() == 0:
        return
    if x.device.type == "cpu" or numel * pos.numel() > _DEVICE_WRITE_WORK:
        # the library's sort and index_add kernels do numel * count work on
        # the devices: past a bound, the positions are read back (a sync)
        src, dup = _src_host(pos, numel)
        src = _t.tensor(src, dtype=int64, device=x.device)
    else:
        src, dup = _src_device(pos, numel, x.device), True
    vf = v.expand(*shape).reshape(-1) if tuple(v.shape) != shape else v.reshape(-1)
    hit = src >= 0
    srcc = _t_where(hit, src, _t.zeros((), dtype=int64, device=x.device))
    if graph and vgrad and dup:
        # torch's gradient of a value written at a duplicate index: every
        # write gets the gradient at its target, not only the one that
        # stays; the values stay the last write's (A - A.detach() is 0)
        p = (pos.reshape(-1) - 1.0).to(int64)
        z = _t.zeros(numel, dtype=vf.dtype, device=x.device)
        a = _wrap(lib.ag_index_add(z._handle, 0, p._handle, vf._handle, 1.0), "__setitem__")
        val = _take(vf.detach(), 0, srcc) + (a - a.detach())
    else:
        val = _take(vf, 0, srcc)
    new = _t_where(hit, val, x.reshape(-1)).reshape(*x.shape)
    _store(x, new, graph)


def plain_setitem_needs_graph(x, value, _enabled=lib.ag_grad_enabled, _rg=lib.ag_tensor_requires_grad):
    """A basic-index write that must be differentiated (goes through setitem):
    grad mode on and x a non-leaf that requires grad, or value requires grad
    (a leaf x that requires grad is refused by the plain path)."""
    if not _enabled():
        return False
    h = x._handle
    if _rg(h):
        return not lib.ag_tensor_is_leaf(h)
    return isinstance(value, Tensor) and bool(value._h) and bool(_rg(value._h))


# ---- fast reads -------------------------------------------------------------------------
# x[i] with one 1-d integer tensor or list of ints, or one boolean mask read
# on the host, with trailing basic indices: one index_select on dim 0 of the
# basic view, without the general path's parsing and linear index (about
# 100 us of Python against a few). Anything else returns None.

_REST = (slice, type(Ellipsis), type(None), int)
_I32, _I64, _BOOL = 3, 5, 6
_ctypes_int = {_I32: ctypes.c_int32, _I64: ctypes.c_int64}


def _bounds(vals, n):
    """vals (a list of ints) checked against a dim of size n as torch does;
    the values with negatives wrapped, or None when none is negative."""
    lo, hi = min(vals), max(vals)
    if lo < -n or hi >= n:
        bad = next(v for v in vals if v < -n or v >= n)
        raise IndexError("index %d is out of bounds for dimension 0 with size %d" % (bad, n))
    return [v % n for v in vals] if lo < 0 else None


def fast_getitem(x, i, rest, _T=Tensor, _sel=lib.ag_index_select_host, _st=lib.ag_last_status,
                 _clear=lib.ag_error_clear, _new=_t._new):
    """x[(i,) + rest] by the fast path, or None."""
    xh = x._h
    if not rest and i.__class__ is _T and xh and i._h:
        # a 1-d integer index on the cpu and a floating x: the bounds check
        # (negatives wrapped) and index_select in one call
        h = _sel(xh, 0, i._h)
        if h:
            t = _new(_T)
            t._h = h
            return t
        if _st() == 8:  # AG_ERR_INDEX: torch's IndexError
            _t.raise_last("index")
        _clear()  # another case: the paths below
    if not xh or lib.ag_tensor_ndim(xh) == 0:
        return None
    for r in rest:
        if r.__class__ not in _REST:
            return None
    c = i.__class__
    if c is list:
        m = len(i)
        if m == 0:
            return None
        for v in i:
            if v.__class__ is not int:
                return None
        base = x[(slice(None),) + rest] if rest else x
        n = lib.ag_tensor_shape(base._h)[0]
        w = _bounds(i, n)
        idx = _t.tensor(i if w is None else w, dtype=int64, device=base.device)
        return _take(base, 0, idx)
    ih = i._h
    if not ih or lib.ag_tensor_ndim(ih) == 0:
        return None
    dt = lib.ag_tensor_dtype(ih)
    idev = lib.ag_tensor_device(ih)
    if dt == _BOOL:
        if idev.backend != 0:
            return None
        k = lib.ag_tensor_ndim(ih)
        base = x[(slice(None),) * k + rest] if rest else x
        bh = base._h
        if lib.ag_tensor_ndim(bh) < k:
            return None
        bs, ms = lib.ag_tensor_shape(bh), lib.ag_tensor_shape(ih)
        if any(bs[j] != ms[j] for j in range(k)):
            return None  # the general path's error
        host = np.empty(tuple(ms[j] for j in range(k)), dtype=np.bool_)
        _t.check(lib.ag_to_host(ih, host.ctypes.data, host.nbytes))
        flat = np.flatnonzero(host)
        shp = list(base.shape)
        merged = base.reshape(int(host.size), *shp[k:]) if k != 1 else base
        return _take(merged, 0, _t.tensor(flat, dtype=int64, device=base.device))
    if (dt != _I64 and dt != _I32) or lib.ag_tensor_ndim(ih) != 1:
        return None
    base = x[(slice(None),) + rest] if rest else x
    bh = base._h
    n = lib.ag_tensor_shape(bh)[0]
    if idev.backend != 0:
        xdev = lib.ag_tensor_device(bh)
        if xdev.backend != idev.backend or xdev.index != idev.index:
            return None
        idx = i.long() if dt == _I32 else i
        idx = _t_where(idx < 0, idx + n, idx)  # out of range: AG_ERR_INDEX at the next sync
        return _take(base, 0, idx)
    m = lib.ag_tensor_numel(ih)
    if m == 0:
        return None
    buf = (_ctypes_int[dt] * m)()
    _t.check(lib.ag_to_host(ih, buf, ctypes.sizeof(buf)))
    w = _bounds(list(buf), n)
    if w is not None:
        idx = _t.tensor(w, dtype=int64, device=base.device)
    elif lib.ag_tensor_device(bh).backend != 0:
        idx = i.to(base.device)
    else:
        idx = i
    return _take(base, 0, idx)
