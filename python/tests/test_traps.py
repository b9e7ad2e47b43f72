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


# ---- 3. Module.to() moves the parameters in place ------------------------------------

def _model(dev="cpu"):
    ag.manual_seed(0)
    return ag.nn.Sequential(ag.nn.Linear(4, 8), ag.nn.ReLU(), ag.nn.Linear(8, 1)).to(dev)


def _data(dev, dtype=None):
    rng = np.random.default_rng(1)
    x = ag.tensor(rng.standard_normal((16, 4)).astype(np.float32), device=dev)
    y = ag.tensor(rng.standard_normal((16, 1)).astype(np.float32), device=dev)
    return (x, y) if dtype is None else (x.to(dtype), y.to(dtype))


def _train(model, opt, dev, steps, dtype=None):
    x, y = _data(dev, dtype)
    out = []
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_module_to_after_the_optimizer_trains_the_moved_parameters(dev, opt_name):
    make = {"SGD": lambda p: ag.optim.SGD(p, lr=0.1, momentum=0.9),
            "AdamW": lambda p: ag.optim.AdamW(p, lr=0.05)}[opt_name]
    ref_model = _model()
    ref = _train(ref_model, make(ref_model.parameters()), "cpu", 6)  # no move, on the CPU

    model = _model()
    params = model.parameters()
    opt = make(params)
    first = _train(model, opt, "cpu", 2)  # optimizer state exists before the move
    assert model.to(dev) is model
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert all(str(p.device) == dev and p.requires_grad and p.is_leaf for p in params)
    rest = _train(model, opt, dev, 4)
    assert rest[-1] < rest[0] < first[0], (first, rest)
    assert np.allclose(first + rest, ref, rtol=1e-4, atol=1e-5), (first + rest, ref)
    back = model.to("cpu")  # and back again: the same run as never moving
    assert all(p is q for p, q in zip(params, back.parameters()))


def _manual_sgd(model, dev, steps, dtype=None):
    x, y = _data(dev, dtype)
    out = []
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with ag.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        out.append(loss.item())
    return out


def test_module_to_dtype_in_place():
    ref = _manual_sgd(_model(), "cpu", 5)
    model = _model()
    params = model.parameters()
    assert model.to(ag.float64) is model
    assert all(p is q and p.dtype is ag.float64 and p.is_leaf for p, q in zip(params, model.parameters()))
    got = _manual_sgd(model, "cpu", 5, ag.float64)
    assert got[-1] < got[0] and np.allclose(got, ref, rtol=1e-5), (got, ref)
    model.to("cpu", ag.float32)
    assert all(p is q and p.dtype is ag.float32 for p, q in zip(params, model.parameters()))
    e = _exc(lambda: model.to(ag.int32))
    assert isinstance(e, TypeError) and "floating point" in str(e)


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_module_to_dtype_the_optimizer_cannot_follow_is_refused(opt_name):
    """The fused optimizers keep f32 parameters: casting what one holds is
    refused before anything moves, and training goes on as before."""
    model = _model()
    params = model.parameters()
    opt = getattr(ag.optim, opt_name)(params, lr=0.05)
    first = _train(model, opt, "cpu", 2)
    e = _exc(lambda: model.to(dtype=ag.float64))
    assert isinstance(e, RuntimeError) and opt_name in str(e) and "nothing was moved" in str(e), e
    assert all(p is q and p.dtype is ag.float32 for p, q in zip(params, model.parameters()))
    rest = _train(model, opt, "cpu", 3)
    assert rest[-1] < rest[0] < first[0]
    del opt, e  # (the exception's traceback holds the optimizer)
    model.to(ag.float64)  # an optimizer no longer alive holds nothing
    assert all(p.dtype is ag.float64 for p in params)


def test_module_to_keeps_gradients():
    model = _model()
    x, y = _data("cpu")
    F.mse_loss(model(x), y).backward()
    grads = [p.grad.tolist() for p in model.parameters()]
    with ag.no_grad():
        model.to(ag.float64)
    assert all(p.grad is not None and p.grad.dtype is ag.float64 for p in model.parameters())
    assert all(np.allclose(p.grad.tolist(), g) for p, g in zip(model.parameters(), grads))


def test_module_to_moves_buffers_in_place(dev):
    bn = ag.nn.BatchNorm2d(3)
    rm, rv = bn.running_mean, bn.running_var
    bn.to(dev)
    assert bn.running_mean is rm and bn.running_var is rv and str(rm.device) == dev
    bn(ag.randn(2, 3, 4, 4, device=dev) + 1.0)  # training mode: running stats move
    assert abs(rm.sum().item()) > 0.1


def test_module_to_refuses_the_c_models():
    m = ag.nn.GPT(vocab_size=11, block_size=4, n_layer=1, n_head=1, n_embd=8)
    assert m.to("cpu") is m and m.to(ag.float32) is m  # no move: nothing to do
    e = _exc(lambda: m.to(ag.float64))
    assert isinstance(e, RuntimeError) and "GPT" in str(e)


# ---- 4. in-place ops -------------------------------------------------------------------

@needs_torch
def test_manual_sgd_loop_matches_torch(dev):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((8, 3)).astype(np.float32)
    w0 = rng.standard_normal((3, 1)).astype(np.float32)
    y0 = rng.standard_normal((8, 1)).astype(np.float32)
    for variant in ("none", "zero_"):
        res = {}
        for m in (ag, torch):
            kw = {} if m is torch else {"device": dev}
            x, y = m.tensor(x0, **kw), m.tensor(y0, **kw)
            w = m.tensor(w0, requires_grad=True, **kw)
            ident, losses = id(w), []
            for _ in range(5):
                loss = ((x @ w - y) ** 2).mean()
                loss.backward()
                with m.no_grad():
                    w -= 0.1 * w.grad
                if variant == "none":
                    w.grad = None
                else:
                    w.grad.zero_()
                losses.append(loss.item())
            assert id(w) == ident and w.is_leaf and w.requires_grad
            res[m] = losses, w.detach().cpu().numpy() if m is ag else w.detach().numpy()
        assert np.allclose(res[ag][0], res[torch][0], rtol=1e-5), (variant, res)
        assert np.allclose(res[ag][1], res[torch][1], rtol=1e-5, atol=1e-6)


@needs_torch
def test_inplace_methods_match_torch(dev):
    base = [[-1.5, 0.25, 2.0], [3.0, -0.5, 1.0]]
    other = [[2.0, -1.0, 0.5], [1.0, 4.0, -2.0]]
    cases = [("add_", lambda t, o: t.add_(o)), ("add_alpha", lambda t, o: t.add_(o, alpha=2)),
             ("add_scalar", lambda t, o: t.add_(3)), ("sub_", lambda t, o: t.sub_(o)),
             ("sub_alpha", lambda t, o: t.sub_(o, alpha=0.5)), ("mul_", lambda t, o: t.mul_(o)),
             ("mul_scalar", lambda t, o: t.mul_(-2)), ("div_", lambda t, o: t.div_(o)),
             ("div_scalar", lambda t, o: t.div_(4)), ("clamp_", lambda t, o: t.clamp_(-1, 1)),
             ("clamp_min", lambda t, o: t.clamp_(min=0.3)), ("clip_", lambda t, o: t.clip_(max=0.3)),
             ("relu_", lambda t, o: t.relu_()), ("neg_", lambda t, o: t.neg_()),
             ("exp_", lambda t, o: t.exp_()), ("zero_", lambda t, o: t.zero_()),
             ("fill_", lambda t, o: t.fill_(7)), ("copy_", lambda t, o: t.copy_(o)),
             ("iadd", lambda t, o: t.__iadd__(o)), ("isub", lambda t, o: t.__isub__(2)),
             ("imul", lambda t, o: t.__imul__(o)), ("itruediv", lambda t, o: t.__itruediv__(o)),
             ("broadcast", lambda t, o: t.add_(o[0]))]
    for name, fn in cases:
        a, ao = ag.tensor(base, device=dev), ag.tensor(other, device=dev)
        view = a[1]
        t, to = torch.tensor(base), torch.tensor(other)
        r = fn(a, ao)
        fn(t, to)
        assert r is a, name
        assert np.allclose(a.tolist(), t.tolist(), rtol=1e-6), (name, a.tolist(), t.tolist())
        assert np.allclose(view.tolist(), t[1].tolist(), rtol=1e-6), name  # written through views


@needs_torch
def test_inplace_refusals_match_torch():
    cases = [
        ("leaf_requires_grad", lambda m: m.ones(3, requires_grad=True).add_(1), "leaf"),
        ("leaf_iadd", lambda m: m.ones(3, requires_grad=True).__iadd__(1), "leaf"),
        ("int_add_float", lambda m: m.ones(3, dtype=m.int64).add_(0.5), "can't be cast"),
        ("int_div", lambda m: m.ones(3, dtype=m.int64).div_(2), "can't be cast"),
        ("int_iadd_float_tensor", lambda m: m.ones(3, dtype=m.int64).__iadd__(m.ones(3)), "can't be cast"),
        ("bool_add_int", lambda m: m.tensor([True]).add_(1), "can't be cast"),
        ("broadcast_grows", lambda m: m.zeros(3).add_(m.ones(2, 3)), "doesn't match the broadcast shape"),
    ]
    for name, fn, msg in cases:
        te, e = _exc(lambda: fn(torch)), _exc(lambda: fn(ag))
        assert te is not None and isinstance(te, RuntimeError), (name, te)
        assert e is not None and isinstance(e, type(te)), (name, type(e), e)
        assert msg in str(e), (name, e)
    assert ag._lib.lib.ag_last_status() == 0


@needs_torch
def test_inplace_write_to_a_saved_tensor_fails_the_backward(dev):
    def run(m, which):
        kw = {} if m is torch else {"device": dev}
        w = m.ones(3, requires_grad=True, **kw)
        a = m.full((3,), 2.0, **kw)
        if which != "other":
            a.requires_grad = True  # so that torch saves w too
        y = w * a  # saves a and w
        if which == "other":
            a.mul_(2)
        else:
            with m.no_grad():
                w.add_(1)
        return _exc(lambda: y.sum().backward())
    for which in ("other", "leaf_under_no_grad"):
        te, e = run(torch, which), run(ag, which)
        assert isinstance(te, RuntimeError) and "modified by an inplace operation" in str(te)
        assert isinstance(e, RuntimeError) and "modified by an in-place operation" in str(e), (which, e)
    # a write no formula reads is harmless, as in torch
    w = ag.ones(3, device=dev, requires_grad=True)
    a = ag.full((3,), 2.0, device=dev)
    y = w + a
    a.mul_(2)
    y.sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 1.0]


@needs_torch
def test_inplace_operators_on_graph_tensors_follow_the_graph(dev):
    """In a graph (grad mode on, the result requiring grad) +=, -=, *=, /=
    compute out of place and the tensor object takes the result and its
    gradient, as in torch."""
    res = {}
    for m in (ag, torch):
        x = m.tensor([0.5, -1.0, 2.0], requires_grad=True, **({} if m is torch else {"device": dev}))
        y = x * 3
        alias = y
        y += x
        y *= x
        y -= 1
        y /= 2
        acc = m.zeros(3, **({} if m is torch else {"device": dev}))
        acc += y  # a plain tensor receiving a graph result: part of the graph
        acc.sum().backward()
        assert alias is y  # the object is kept, as torch's
        res[m] = (y.tolist(), acc.tolist(), x.grad.tolist(), acc.requires_grad)
    assert np.allclose(res[ag][0], res[torch][0]) and np.allclose(res[ag][1], res[torch][1]), res
    assert np.allclose(res[ag][2], res[torch][2]) and res[ag][3] and res[torch][3], res


def test_inplace_methods_in_a_graph_are_refused(dev):
    """add_(), relu_(), copy_() ... write the tensor's storage; with a graph
    the library cannot record that, so they raise (nothing written) where
    torch would record the op."""
    x = ag.ones(3, device=dev, requires_grad=True)
    y = x * 2
    acc = ag.zeros(3, device=dev)
    buf = ag.zeros(2, 3, device=dev)
    # (x[i] = y with a graph is differentiated: tests/test_indexing.py)
    cases = [lambda: y.add_(1), lambda: y.relu_(), lambda: y.mul_(x), lambda: acc.add_(y),
             lambda: acc.mul_(x), lambda: acc.copy_(y)]
    for k, fn in enumerate(cases):
        e = _exc(fn)
        assert isinstance(e, RuntimeError) and "grad" in str(e), (k, e)
    assert acc.tolist() == [0.0, 0.0, 0.0] and not acc.requires_grad
    assert y.tolist() == [2.0, 2.0, 2.0] and buf.tolist() == [[0.0] * 3] * 2
    with ag.no_grad():  # no graph: written
        acc.add_(y)
        buf[0] = y
    assert acc.tolist() == [2.0, 2.0, 2.0] and buf.tolist()[0] == [2.0, 2.0, 2.0]
    acc.add_(y.detach())
    buf[1] = y.detach()
    assert acc.tolist() == [4.0, 4.0, 4.0] and buf.tolist()[1] == [2.0, 2.0, 2.0]
    assert ag._lib.lib.ag_last_status() == 0
