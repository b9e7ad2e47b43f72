"""Silent traps a PyTorch user meets, each now PyTorch's behaviour or a clear
error: an error found on the device (an index out of range) is raised by the
next synchronizing call, never returned as a value; argmax()/argmin()
without dim; Module.to() after the optimizer was built; in-place ops
(add_, ..., +=) with the version-counter checks. Device tests take the
`dev` fixture (conftest.py; tests/python_traps.cmake adds vulkan:0)."""
import math
import os

import numpy as np
import pytest

import anygrad as ag
import anygrad.functional as F
from anygrad import _tensor

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _exc(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return e
    return None


# ---- 1. errors found on the device surface at the next sync --------------------------

def _item_ctypes(t):
    return ag.Tensor.item(t, _fast=None)  # the path without anygrad._fast


def _reads():
    """The synchronizing calls, each returning a Python value."""
    r = [("item_ctypes", _item_ctypes), ("tolist", lambda t: t.tolist()),
         ("numpy", lambda t: t.numpy().tolist()), ("cpu", lambda t: t.cpu().tolist()),
         ("synchronize", lambda t: (ag.synchronize(t.device), None)[1]), ("str", str)]
    if _tensor._fast_item is not None:
        r.append(("item_fast", lambda t: t.item()))
    return r


def test_fast_item_is_there_when_expected():
    if os.environ.get("ANYGRAD_EXPECT_FAST"):
        assert _tensor._fast_item is not None


# (name, fn(module, device)): each reads an index out of range
BAD_INDEX = [
    ("cross_entropy", lambda m, d: _F(m).cross_entropy(_x(m, d), _i(m, d, [0, 1, 7, 2]))),
    ("index_select", lambda m, d: m.index_select(_x(m, d), 0, _i(m, d, [0, 9])).sum()),
    ("gather", lambda m, d: m.gather(_x(m, d), 1, _i(m, d, [[0], [9], [1], [1]])).sum()),
    ("embedding", lambda m, d: _F(m).embedding(_i(m, d, [0, 9]), _x(m, d)).sum()),
]


def _F(m):
    return TF if m is torch else F


def _x(m, d):
    v = np.arange(20, dtype=np.float32).reshape(4, 5) / 10
    return m.tensor(v) if m is torch else ag.tensor(v, device=d)


def _i(m, d, v):
    return m.tensor(v) if m is torch else ag.tensor(v, device=d)


@pytest.mark.parametrize("case", [c[0] for c in BAD_INDEX])
def test_device_index_error_raises_at_the_next_sync(dev, case):
    fn = dict(BAD_INDEX)[case]
    good = F.cross_entropy(_x(ag, dev), _i(ag, dev, [0, 1, 2, 3]))
    want = good.item()
    reads = _reads()
    if dev != "cpu" and case != "cross_entropy":
        reads = reads[:1] + reads[-1:]  # short on the devices: one ctypes and one fast read
    for name, read in reads:
        e = _exc(lambda: read(fn(ag, dev)))  # the op itself may raise first (as CUDA's next launch)
        assert e is not None, "%s on %s: %s gave a value, not the device's index error" % (case, dev, name)
        assert isinstance(e, IndexError) and isinstance(e, RuntimeError), (name, type(e), e)
        assert "out of range" in str(e), (name, e)
        # nothing pending afterwards: a valid computation gives its value
        read(good)
        assert abs(_item_ctypes(good) - want) < 1e-6, name
        assert ag._lib.lib.ag_last_status() == 0, name
    if torch is not None:  # torch raises on the CPU: an instance of its class
        te = _exc(lambda: fn(torch, None).item())
        assert te is not None and isinstance(e, type(te)), (type(e), type(te))


def test_nan_values_stay_values(dev):
    t = ag.tensor([float("nan")], device=dev)
    assert math.isnan(_item_ctypes(t)) and math.isnan(t.item())
    assert math.isnan(ag.tensor([1.0, float("nan")], device=dev).sum().item())


def test_item_errors_keep_their_classes():
    e = _exc(lambda: _item_ctypes(ag.ones(2)))
    assert isinstance(e, ValueError) and "one element" in str(e)
    e = _exc(lambda: ag.ones(2).item())
    assert isinstance(e, ValueError) and "one element" in str(e)
    t = ag.ones(1)
    t.release()
    assert isinstance(_exc(lambda: t.item()), RuntimeError)
    assert ag._lib.lib.ag_last_status() == 0


# ---- 2. argmax / argmin without dim --------------------------------------------------

ARG_CASES = [
    ("f32_ties", [[1.0, 3.0, 3.0], [2.0, 3.0, 0.0]], "float32"),
    ("f32_min_ties", [[0.5, -1.0, 2.0], [-1.0, 4.0, -1.0]], "float32"),
    ("f32_nan", [1.0, float("nan"), 2.0, float("nan")], "float32"),
    ("f32_0d", 2.5, "float32"),
    ("i64", [[5, 9, 9], [-3, -3, 1]], "int64"),
    ("i32_extremes", [-2 ** 31, 7, 2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1], "int32"),
    ("u8", [[0, 1, 255], [0, 255, 3]], "uint8"),
]


@needs_torch
@pytest.mark.parametrize("case", [c[0] for c in ARG_CASES])
def test_argmax_argmin_without_dim_match_torch(dev, case):
    _, data, dt = dict((c[0], c) for c in ARG_CASES)[case]
    a = ag.tensor(data, dtype=getattr(ag, dt), device=dev)
    t = torch.tensor(data, dtype=getattr(torch, dt))
    for name in ("argmax", "argmin"):
        for kw in ({}, {"keepdim": True}):
            got, want = getattr(a, name)(**kw), getattr(t, name)(**kw)
            assert got.tolist() == want.tolist() and tuple(got.shape) == tuple(want.shape), (name, kw)
            assert got.dtype is ag.int64
        got = getattr(ag, name)(a)
        assert got.item() == getattr(torch, name)(t).item()
        if t.ndim:  # and along a dim: the first index of the extreme, as torch
            for d in range(t.ndim):
                assert getattr(a, name)(d).tolist() == getattr(t, name)(d).tolist(), (name, d)
