"""The first-hour pieces of anygrad/_first_hour.py and the fast paths of
x[idx] and add_ against torch 1.13: values, shapes, dtypes and the
exception types of bad input, on every device where the op runs there."""
import numpy as np
import pytest

import anygrad as ag


def _np(t):
    return t.detach().cpu().numpy()


def _same(a, t, exact=True):
    assert tuple(a.shape) == tuple(t.shape), (tuple(a.shape), tuple(t.shape))
    assert a.dtype.name == str(t.dtype).replace("torch.", ""), (a.dtype, t.dtype)
    if exact:
        assert np.array_equal(_np(a), t.detach().numpy()), (_np(a), t)
    else:
        np.testing.assert_allclose(_np(a), t.detach().numpy(), rtol=1e-5, atol=1e-6)


def _raises_like(th, f_ag, f_th):
    with pytest.raises(Exception) as et:
        f_th(th)
    with pytest.raises(et.type):
        f_ag(ag)


# ---- the x[idx] fast path ----------------------------------------------------------------

@pytest.mark.parametrize("form", ["tensor", "list", "tensor_slice", "tensor_int", "neg", "ellipsis"])
def test_index_fast_path(dev, th, form):
    base = np.arange(60, dtype=np.float32).reshape(5, 4, 3)
    x, xt = ag.tensor(base, device=dev), th.tensor(base)
    idx = {"tensor": [0, 3, 4], "list": [4, 0, 0], "tensor_slice": [1, 2], "tensor_int": [2, 2, 0],
           "neg": [-1, 0, -5], "ellipsis": [3]}[form]
    i, it = (idx, idx) if form == "list" else (ag.tensor(idx), th.tensor(idx))
    rest = {"tensor_slice": (slice(1, None), slice(None, None, 2)), "tensor_int": (1,),
            "ellipsis": (Ellipsis, 2)}.get(form, ())
    _same(x[(i,) + rest], xt[(it,) + rest])
    # the index on the device too
    if form != "list":
        _same(x[(i.to(dev),) + rest], xt[(it,) + rest])


def test_index_fast_path_dtypes_and_grad(dev, th):
    for dt in ("int64", "int32", "bool", "float64"):
        base = (np.arange(12).reshape(4, 3) % 2 == 0) if dt == "bool" else np.arange(12).reshape(4, 3)
        x, xt = ag.tensor(base.astype(dt), device=dev), th.tensor(base.astype(dt))
        _same(x[ag.tensor([3, 1])], xt[th.tensor([3, 1])])
    w = ag.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2), device=dev, requires_grad=True)
    wt = th.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2), requires_grad=True)
    (w[ag.tensor([0, 2, 2])] * 3).sum().backward()
    (wt[th.tensor([0, 2, 2])] * 3).sum().backward()
    _same(w.grad, wt.grad)


def test_index_fast_path_mask(dev, th):
    base = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    x, xt = ag.tensor(base, device=dev), th.tensor(base)
    m = np.array([True, False, True, True])
    _same(x[ag.tensor(m)], xt[th.tensor(m)])
    _same(x[ag.tensor(m), 1], xt[th.tensor(m), 1])
    m2 = base[..., 0] > 7
    _same(x[ag.tensor(m2)], xt[th.tensor(m2)])
    _same(x[ag.tensor(m2).to(dev)], xt[th.tensor(m2)])


def test_index_fast_path_errors(dev, th):
    x, xt = ag.zeros(4, 3, device=dev), th.zeros(4, 3)
    for bad in ([4], [-5], [0, 7]):
        with pytest.raises(IndexError) as e:
            x[ag.tensor(bad)]
        with pytest.raises(IndexError):
            xt[th.tensor(bad)]
        assert "out of bounds" in str(e.value)
        with pytest.raises(IndexError):
            x[bad]
    with pytest.raises(IndexError):
        x[ag.tensor([True, False])]
    with pytest.raises(IndexError):
        xt[th.tensor([True, False])]


# ---- add_ and friends: one path for the common case ----------------------------------------

def test_inplace_fast_path(dev, th):
    a, at = ag.tensor([1.0, 2.0, 3.0], device=dev), th.tensor([1.0, 2.0, 3.0])
    b, bt = ag.tensor([0.5, -1.0, 2.0], device=dev), th.tensor([0.5, -1.0, 2.0])
    v = a[1:]
    ver = a._version if hasattr(a, "_version") else None
    for name, arg, argt in (("add_", b, bt), ("sub_", 0.25, 0.25), ("mul_", b, bt), ("div_", 2.0, 2.0)):
        r = getattr(a, name)(arg)
        getattr(at, name)(argt)
        assert r is a
        _same(a, at, exact=False)
    _same(v, at[1:], exact=False)  # a view sees the writes
    if ver is not None:
        assert a._version > ver
    ai = ag.tensor([1, 2], device=dev)
    with pytest.raises(RuntimeError):
        ai.add_(ag.tensor([0.5, 0.5], device=dev))
    with pytest.raises(RuntimeError):
        th.tensor([1, 2]).add_(th.tensor([0.5, 0.5]))
    assert _np(ai).tolist() == [1, 2]
    with pytest.raises(RuntimeError):
        a.add_(ag.ones(2, 3, device=dev))  # the broadcast shape is larger
    w = ag.ones(2, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError):
        w.add_(ag.ones(2, device=dev))
    with ag.no_grad():
        w.add_(ag.ones(2, device=dev))
    assert _np(w).tolist() == [2.0, 2.0]
    c = ag.zeros(2, device=dev)
    with pytest.raises(RuntimeError):  # the result would need a graph
        c.add_(w)
    assert _np(c).tolist() == [0.0, 0.0]


def test_inplace_saved_tensor_trap():
    a = ag.ones(3, requires_grad=True)
    y = a * 1.0
    z = y.exp()  # saves its output
    with ag.no_grad():
        z.add_(ag.ones(3))
    with pytest.raises(RuntimeError):
        z.sum().backward()


# ---- grad mode, default dtype, deterministic mode -----------------------------------------

def test_set_grad_enabled(th):
    x = ag.ones(2, requires_grad=True)
    with ag.set_grad_enabled(False):
        assert not ag.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert ag.is_grad_enabled()
    with ag.no_grad():
        with ag.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not ag.is_grad_enabled()
    for _ in range(100):  # as a function, switching back and forth never nests deeper
        ag.set_grad_enabled(False)
        assert not ag.is_grad_enabled()
        ag.set_grad_enabled(True)
        assert ag.is_grad_enabled()

    @ag.set_grad_enabled(False)
    def f():
        return ag.is_grad_enabled()
    assert f() is False and ag.is_grad_enabled()

    @ag.no_grad()
    def g():
        return (x * 2).requires_grad
    assert g() is False
    with pytest.raises(TypeError):
        th.set_grad_enabled("no")
    with pytest.raises(TypeError):
        ag.set_grad_enabled("no")


def test_default_dtype(th):
    assert ag.get_default_dtype() is ag.float32
    try:
        ag.set_default_dtype(ag.float64)
        assert ag.get_default_dtype() is ag.float64
        assert ag.zeros(2).dtype is ag.float64
        assert ag.randn(2).dtype is ag.float64
        assert ag.tensor([1.5]).dtype is ag.float64
        assert ag.tensor([1]).dtype is ag.int64
        assert ag.arange(0.0, 1.0, 0.5).dtype is ag.float64
        assert ag.nn.Linear(2, 3).weight.dtype is ag.float64
    finally:
        ag.set_default_dtype(ag.float32)
    assert ag.zeros(2).dtype is ag.float32
    _raises_like(th, lambda m: m.set_default_dtype(m.int64), lambda m: m.set_default_dtype(m.int64))


def test_deterministic(th):
    was = ag.are_deterministic_algorithms_enabled()
    try:
        ag.use_deterministic_algorithms(True)
        assert ag.are_deterministic_algorithms_enabled() is True
        ag.use_deterministic_algorithms(False)
        assert ag.are_deterministic_algorithms_enabled() is False
    finally:
        ag.use_deterministic_algorithms(was)
    with pytest.raises(TypeError):
        ag.use_deterministic_algorithms("yes")


# ---- random --------------------------------------------------------------------------------

def test_randperm_randint(dev, th):
    ag.manual_seed(1)
    p = ag.randperm(50, device=dev)
    assert p.dtype is ag.int64 and p.device == ag.device(dev)
    assert sorted(_np(p).tolist()) == list(range(50))
    ag.manual_seed(1)
    assert _np(ag.randperm(50, device=dev)).tolist() == _np(p).tolist()
    assert ag.randperm(0).shape == th.randperm(0).shape
    r = ag.randint(3, 7, (200,), device=dev)
    assert r.dtype is ag.int64 and tuple(r.shape) == (200,)
    assert set(_np(r).tolist()) == {3, 4, 5, 6}
    r2 = ag.randint(5, (2, 3))
    assert tuple(r2.shape) == tuple(th.randint(5, (2, 3)).shape) and _np(r2).max() < 5
    assert ag.randint(0, 2, (4,), dtype=ag.float32).dtype is ag.float32
    _raises_like(th, lambda m: m.randint(3, 2, (2,)), lambda m: m.randint(3, 2, (2,)))
    _raises_like(th, lambda m: m.randperm(-1), lambda m: m.randperm(-1))


def test_normal(dev, th):
    ag.manual_seed(0)
    m = ag.full((4000,), 3.0, device=dev)
    s = ag.full((4000,), 0.5, device=dev)
    for r in (ag.normal(m, s), ag.normal(m, 0.5), ag.normal(3.0, s)):
        assert tuple(r.shape) == (4000,) and r.device == ag.device(dev)
        v = _np(r)
        assert abs(v.mean() - 3.0) < 0.05 and abs(v.std() - 0.5) < 0.05
    r = ag.normal(1.0, 2.0, (3, 2))
    assert tuple(r.shape) == tuple(th.normal(1.0, 2.0, (3, 2)).shape) and r.dtype is ag.float32
    assert tuple(ag.normal(ag.zeros(2, 1), ag.ones(3)).shape) == tuple(th.normal(th.zeros(2, 1),
                                                                                  th.ones(3)).shape)
    _raises_like(th, lambda t: t.normal(t.zeros(2), -1.0), lambda t: t.normal(t.zeros(2), -1.0))


def test_multinomial(dev, th):
    ag.manual_seed(0)
    w = ag.tensor([0.1, 0.0, 0.6, 0.3], device=dev)
    r = ag.multinomial(w, 4000, replacement=True)
    assert r.dtype is ag.int64 and tuple(r.shape) == (4000,) and r.device == ag.device(dev)
    c = np.bincount(_np(r), minlength=4) / 4000
    assert c[1] == 0 and abs(c[2] - 0.6) < 0.04 and abs(c[0] - 0.1) < 0.03
    r = ag.multinomial(ag.tensor([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 5.0, 1.0]], device=dev), 2)
    assert tuple(r.shape) == (2, 2)
    v = _np(r)
    assert len(set(v[0])) == 2 and 2 not in v[0] and sorted(v[1]) == [2, 3]
    assert w.multinomial(1).shape == (1,)
    for bad in ((lambda t: t.multinomial(t.tensor([1.0, 1.0]), 3)),
                (lambda t: t.multinomial(t.tensor([0.0, 0.0]), 1)),
                (lambda t: t.multinomial(t.tensor([1.0, -1.0]), 1))):
        _raises_like(th, bad, bad)


# ---- matrices --------------------------------------------------------------------------------

def test_outer_diag_diagonal(dev, th):
    a = np.arange(1.0, 4.0, dtype=np.float32)
    b = np.array([2.0, -1.0], dtype=np.float32)
    _same(ag.outer(ag.tensor(a, device=dev), ag.tensor(b, device=dev)), th.outer(th.tensor(a), th.tensor(b)))
    _same(ag.tensor(a, device=dev).outer(ag.tensor(b, device=dev)), th.tensor(a).outer(th.tensor(b)))
    for k in (0, 1, -2):
        _same(ag.diag(ag.tensor(a, device=dev), k), th.diag(th.tensor(a), k))
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    for k in (0, 1, -1, 3, -2):
        _same(ag.diag(ag.tensor(m, device=dev), k), th.diag(th.tensor(m), k))
    c = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for args in ((0, 0, 1), (1, 1, 2), (-1, 0, 2), (0, -1, -2)):
        _same(ag.diagonal(ag.tensor(c, device=dev), *args), th.diagonal(th.tensor(c), *args))
    x = ag.tensor(a, device=dev, requires_grad=True)
    xt = th.tensor(a, requires_grad=True)
    (ag.diag(x, 1) * ag.tensor(np.arange(16.0, dtype=np.float32).reshape(4, 4), device=dev)).sum().backward()
    (th.diag(xt, 1) * th.arange(16.0).reshape(4, 4)).sum().backward()
    _same(x.grad, xt.grad)
    for f in (lambda t: t.outer(t.zeros(2, 2), t.zeros(2)), lambda t: t.diag(t.zeros(2, 2, 2)),
              lambda t: t.diagonal(t.zeros(2, 2), 0, 1, 1)):
        _raises_like(th, f, f)


@pytest.mark.parametrize("shape,wrap", [((3, 4), False), ((7, 3), False), ((7, 3), True), ((3, 3, 3), False)])
def test_fill_diagonal(dev, th, shape, wrap):
    x, xt = ag.zeros(*shape, device=dev), th.zeros(*shape)
    assert x.fill_diagonal_(2.5, wrap=wrap) is x
    xt.fill_diagonal_(2.5, wrap=wrap)
    _same(x, xt)


def test_fill_diagonal_errors(th):
    def f(t):
        return t.zeros(2, 3, 3).fill_diagonal_(1)
    _raises_like(th, f, f)


def test_scatter(dev, th):
    src = np.arange(1.0, 11.0, dtype=np.float32).reshape(2, 5)
    idx = np.array([[0, 1, 2, 0]])
    x = ag.scatter(ag.zeros(3, 5, device=dev), 0, ag.tensor(idx, device=dev), ag.tensor(src, device=dev))
    _same(x, th.zeros(3, 5).scatter(0, th.tensor(idx), th.tensor(src)))
    idx1 = np.array([[0, 1], [2, 4]])
    y, yt = ag.ones(2, 5, device=dev), th.ones(2, 5)
    assert y.scatter_(1, ag.tensor(idx1, device=dev), ag.tensor(src, device=dev)) is y
    yt.scatter_(1, th.tensor(idx1), th.tensor(src))
    _same(y, yt)
    _same(ag.zeros(2, 4, device=dev).scatter(1, ag.tensor([[1], [3]], device=dev), 1.5),
          th.zeros(2, 4).scatter(1, th.tensor([[1], [3]]), 1.5))
    _same(ag.zeros(2, 3, dtype=ag.int64, device=dev).scatter(1, ag.tensor([[2], [0]], device=dev), 7),
          th.zeros(2, 3, dtype=th.int64).scatter(1, th.tensor([[2], [0]]), 7))
    _raises_like(th, lambda t: t.zeros(2, 3).scatter(1, t.tensor([0, 1]), 1.0),
                 lambda t: t.zeros(2, 3).scatter(1, t.tensor([0, 1]), 1.0))
    _raises_like(th, lambda t: t.zeros(2, 3).scatter(1, t.tensor([[0.0]]), 1.0),
                 lambda t: t.zeros(2, 3).scatter(1, t.tensor([[0.0]]), 1.0))


def test_cumprod(dev, th):
    v = np.array([[1.0, 2.0, -3.0, 0.5, 5.0, 1.5, 2.0], [0.5, 0.0, 2.0, 3.0, -1.0, 2.0, 1.0]],
                 dtype=np.float32)
    for d in (0, 1, -1):
        _same(ag.cumprod(ag.tensor(v, device=dev), d), th.cumprod(th.tensor(v), d), exact=False)
    x = ag.tensor(v[0], device=dev, requires_grad=True)
    xt = th.tensor(v[0], requires_grad=True)
    x.cumprod(0).sum().backward()
    xt.cumprod(0).sum().backward()
    _same(x.grad, xt.grad, exact=False)


def test_where_single_and_clamp_tensor(dev, th):
    c = np.array([[0, 2, 0], [1, 0, 3]])
    for a, b in zip(ag.where(ag.tensor(c, device=dev)), th.where(th.tensor(c))):
        _same(a, b)
    _same(ag.tensor(c, device=dev).nonzero(), th.tensor(c).nonzero())


# ---- Tensor.data, parameter vectors, nn.init -----------------------------------------------

def test_data_assignment(dev, th):
    p = ag.nn.Parameter(ag.zeros(2, 3, device=dev))
    pt = th.nn.Parameter(th.zeros(2, 3))
    p.data = ag.ones(2, 3, device=dev)
    pt.data = th.ones(2, 3)
    _same(p.detach(), pt.detach())
    assert p.requires_grad and p.is_leaf
    p.data = ag.full((4,), 2.0, device=dev)
    pt.data = th.full((4,), 2.0)
    _same(p.detach(), pt.detach())
    assert p.requires_grad
    (p * 3).sum().backward()
    assert _np(p.grad).tolist() == [3.0] * 4
    with pytest.raises(TypeError):
        p.data = [1.0]


def test_parameters_to_vector(dev, th):
    lin = ag.nn.Linear(3, 2).to(dev)
    v = ag.nn.utils.parameters_to_vector(lin.parameters())
    assert tuple(v.shape) == (8,)
    assert np.array_equal(_np(v), np.concatenate([_np(p).reshape(-1) for p in lin.parameters()]))
    ag.nn.utils.vector_to_parameters(ag.arange(8.0, device=dev), lin.parameters())
    assert _np(lin.weight).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert _np(lin.bias).tolist() == [6.0, 7.0]
    with pytest.raises(RuntimeError):
        ag.nn.utils.vector_to_parameters(ag.arange(7.0, device=dev), lin.parameters())
    with pytest.raises(TypeError):
        th.nn.utils.vector_to_parameters([1.0], [th.zeros(1)])
    with pytest.raises(TypeError):
        ag.nn.utils.vector_to_parameters([1.0], [ag.zeros(1)])


def test_init_eye_dirac_orthogonal(dev, th):
    for shape in ((3, 5), (4, 2)):
        _same(ag.nn.init.eye_(ag.empty(*shape, device=dev)), th.nn.init.eye_(th.empty(*shape)))
    for shape, g in (((4, 2, 3), 1), ((4, 2, 3, 3), 2), ((2, 3, 1, 3, 3), 1)):
        _same(ag.nn.init.dirac_(ag.empty(*shape, device=dev), g), th.nn.init.dirac_(th.empty(*shape), g))
    for shape in ((3, 5), (6, 2), (4, 2, 2)):
        w = ag.nn.init.orthogonal_(ag.empty(*shape, device=dev), gain=2.0)
        m = _np(w).reshape(shape[0], -1).astype(np.float64)
        g = m @ m.T if shape[0] <= m.shape[1] else m.T @ m
        np.testing.assert_allclose(g, 4.0 * np.eye(g.shape[0]), atol=1e-5)
    ag.manual_seed(3)
    a = _np(ag.nn.init.orthogonal_(ag.empty(3, 3)))
    ag.manual_seed(3)
    assert np.array_equal(a, _np(ag.nn.init.orthogonal_(ag.empty(3, 3))))
    for f in (lambda m: m.nn.init.eye_(m.zeros(2, 2, 2)), lambda m: m.nn.init.dirac_(m.zeros(2, 2)),
              lambda m: m.nn.init.orthogonal_(m.zeros(2))):
        _raises_like(th, f, f)


def test_clamp_tensor_bounds(dev, th):
    v = np.array([0.0, 5.0, -3.0], dtype=np.float32)
    lo, hi = np.array([1.0, 1.0, -5.0], dtype=np.float32), np.array([2.0, 2.0, 2.0], dtype=np.float32)
    x, xt = ag.tensor(v, device=dev), th.tensor(v)
    L, Lt, H, Ht = ag.tensor(lo, device=dev), th.tensor(lo), ag.tensor(hi, device=dev), th.tensor(hi)
    _same(ag.clamp(x, min=L), th.clamp(xt, min=Lt))
    _same(x.clamp(L, H), xt.clamp(Lt, Ht))
    _same(ag.clamp(x, max=ag.tensor(2.0, device=dev)), th.clamp(xt, max=th.tensor(2.0)))
    _same(x.clamp(min=0.5), xt.clamp(min=0.5))
    _same(ag.clamp(ag.tensor([1, 2], device=dev), min=ag.tensor([1.5, 1.5], device=dev)),
          th.clamp(th.tensor([1, 2]), min=th.tensor([1.5, 1.5])))
    y, yt = x.clone(), xt.clone()
    y.clamp_(L, H)
    yt.clamp_(Lt, Ht)
    _same(y, yt)
    w = ag.tensor(v, device=dev, requires_grad=True)
    wt = th.tensor(v, requires_grad=True)
    ag.clamp(w, min=L).sum().backward()
    th.clamp(wt, min=Lt).sum().backward()
    _same(w.grad, wt.grad)
    _raises_like(th, lambda t: t.clamp(t.zeros(3), min=t.ones(3), max=1.0),
                 lambda t: t.clamp(t.zeros(3), min=t.ones(3), max=1.0))
