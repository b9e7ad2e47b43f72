"""Tensor methods and functions of _tensor_extra against torch 1.13: values,
shapes, dtypes, gradients and exception types, on every device."""
import math

import numpy as np
import pytest

import anygrad as ag

torch = pytest.importorskip("torch")


def A(x, dev="cpu", grad=False, dtype=None):
    """The same values as an anygrad and a torch tensor."""
    x = np.asarray(x)
    a = ag.tensor(x, device=dev, dtype=dtype)
    t = torch.tensor(x, dtype=getattr(torch, dtype) if isinstance(dtype, str) else None)
    if grad:
        a.requires_grad = True
        t.requires_grad = True
    return a, t


def same(a, t, tol=1e-5):
    assert tuple(a.shape) == tuple(t.shape)
    assert a.dtype.name == str(t.dtype).replace("torch.", ""), (a.dtype, t.dtype)
    np.testing.assert_allclose(a.cpu().numpy().astype(np.float64), t.detach().numpy().astype(np.float64),
                               rtol=tol, atol=tol)


def raises_like(exc, fa, ft):
    """Both calls raise, torch's class being a subclass of anygrad's expectation."""
    with pytest.raises(exc):
        ft()
    with pytest.raises(exc):
        fa()


rng = np.random.default_rng(7)


def rnd(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- flatten --------------------------------------------------------------------


@pytest.mark.parametrize("args", [(), (1,), (0, 1), (1, -1), (-2, -1), (2, 2), (0, 0)])
def test_flatten(dev, args):
    a, t = A(rnd(2, 3, 4), dev, grad=True)
    ra, rt = ag.flatten(a, *args), torch.flatten(t, *args)
    same(ra, rt)
    same(a.flatten(*args), t.flatten(*args))
    w = rnd(*rt.shape)
    (ra * ag.tensor(w, device=dev)).sum().backward()
    (rt * torch.tensor(w)).sum().backward()
    same(a.grad, t.grad)


def test_flatten_errors_and_scalar():
    assert ag.tensor(3.0).flatten().shape == torch.tensor(3.0).flatten().shape
    x, t = ag.zeros(2, 3), torch.zeros(2, 3)
    raises_like(RuntimeError, lambda: x.flatten(1, 0), lambda: t.flatten(1, 0))
    raises_like(IndexError, lambda: x.flatten(3), lambda: t.flatten(3))
    raises_like(TypeError, lambda: x.flatten(1.0), lambda: t.flatten(1.0))


# ---- einsum --------------------------------------------------------------------

EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("bii->b", [(2, 3, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij,...jk", [(2, 3, 4), (4, 2)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("ab,ab->ab", [(3, 1), (1, 4)]),
    ("ij,kj->ik", [(2, 3), (4, 3)]),
    ("iJ,J", [(2, 3), (3,)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum(dev, eq, shapes):
    pairs = [A(rnd(*s), dev, grad=True) for s in shapes]
    ra = ag.einsum(eq, *[p[0] for p in pairs])
    rt = torch.einsum(eq, *[p[1] for p in pairs])
    same(ra, rt, 1e-4)
    w = rnd(*rt.shape)
    (ra * ag.tensor(w, device=dev)).sum().backward()
    (rt * torch.tensor(w)).sum().backward()
    for a, t in pairs:
        same(a.grad, t.grad, 1e-4)


def test_einsum_integers(dev):
    a, t = A(rng.integers(-5, 5, (2, 3)), dev)
    b, u = A(rng.integers(-5, 5, (3, 4)), dev)
    same(ag.einsum("ij,jk->ik", a, b), torch.einsum("ij,jk->ik", t, u))
    same(ag.einsum("ij->j", a), torch.einsum("ij->j", t))


def test_einsum_list_and_errors():
    a, b = ag.ones(2, 3), ag.ones(3, 4)
    ta, tb = torch.ones(2, 3), torch.ones(3, 4)
    same(ag.einsum("ij,jk", [a, b]), torch.einsum("ij,jk", [ta, tb]))
    for eq, ops, tops in [("ij,jk", [a], [ta]), ("ij", [a, b], [ta, tb]), ("ijk", [a], [ta]),
                          ("ij,jk->ik", [a, ag.ones(4, 5)], [ta, torch.ones(4, 5)]),
                          ("ij->k", [a], [ta]), ("ij->ii", [a], [ta]), ("ii", [a], [ta])]:
        raises_like(RuntimeError, lambda: ag.einsum(eq, *ops), lambda: torch.einsum(eq, *tops))
    raises_like(TypeError, lambda: ag.einsum("i", 3), lambda: torch.einsum("i", 3))


# ---- isclose / allclose / isnan / isinf / isfinite ---------------------------------

SPECIAL = [1.0, 1.0 + 1e-6, 1.0 + 1e-3, 0.0, -0.0, math.inf, -math.inf, math.nan, 1e-9, -2.5]


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose(dev, equal_nan):
    x = np.array([[u for u in SPECIAL] for _ in SPECIAL], dtype=np.float32)
    y = x.T.copy()
    a, t = A(x, dev)
    b, u = A(y, dev)
    for rtol, atol in ((1e-5, 1e-8), (1e-2, 0.0), (0.0, 0.5)):
        ra = ag.isclose(a, b, rtol, atol, equal_nan)
        same(ra, torch.isclose(t, u, rtol, atol, equal_nan))
        assert ag.allclose(a, b, rtol, atol, equal_nan) == torch.allclose(t, u, rtol, atol, equal_nan)
    assert ag.allclose(a, a.clone(), equal_nan=True) is True
    assert a.allclose(a.clone()) is False  # NaN
    i, ti = A(np.array([1, 2, 3]), dev)
    j, tj = A(np.array([1, 3, 100]), dev)
    same(ag.isclose(i, j, rtol=0.4), torch.isclose(ti, tj, rtol=0.4))


def test_isclose_errors():
    a, t = ag.zeros(2), torch.zeros(2)
    raises_like(RuntimeError, lambda: ag.isclose(a, a.double()), lambda: torch.isclose(t, t.double()))
    raises_like(RuntimeError, lambda: ag.isclose(a, a, rtol=-1), lambda: torch.isclose(t, t, rtol=-1))
    raises_like(RuntimeError, lambda: ag.isclose(a, a, atol=-1), lambda: torch.isclose(t, t, atol=-1))
    raises_like(TypeError, lambda: ag.allclose(a, [0.0, 0.0]), lambda: torch.allclose(t, [0.0, 0.0]))


@pytest.mark.parametrize("fn", ["isnan", "isinf", "isfinite", "isposinf", "isneginf"])
def test_isnan_isinf(dev, fn):
    a, t = A(np.array(SPECIAL, dtype=np.float32), dev)
    same(getattr(ag, fn)(a), getattr(torch, fn)(t))
    same(getattr(a, fn)(), getattr(t, fn)())
    i, ti = A(np.array([1, 2]), dev)
    same(getattr(ag, fn)(i), getattr(torch, fn)(ti))
    raises_like(TypeError, lambda: getattr(ag, fn)(1.0), lambda: getattr(torch, fn)(1.0))


# ---- any / all ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "uint8", "int32"])
def test_any_all(dev, dtype):
    x = np.array([[0, 1, 0], [0, 0, 0], [2, 3, 1]])
    a, t = A(x, dev, dtype=dtype)
    for fn in ("any", "all"):
        same(getattr(ag, fn)(a), getattr(torch, fn)(t))
        same(getattr(a, fn)(), getattr(t, fn)())
        for d in (0, 1, -1):
            for kd in (False, True):
                same(getattr(a, fn)(d, kd), getattr(t, fn)(d, kd))
                same(getattr(ag, fn)(a, dim=d, keepdim=kd), getattr(torch, fn)(t, dim=d, keepdim=kd))


def test_any_all_edges():
    for fn in ("any", "all"):
        for x in ([], [math.nan], [0.0, -0.0]):
            a, t = A(np.array(x, dtype=np.float32))
            same(getattr(a, fn)(), getattr(t, fn)())
        raises_like(IndexError, lambda: getattr(ag.zeros(2, 3), fn)(2),
                    lambda: getattr(torch.zeros(2, 3), fn)(2))
        raises_like(TypeError, lambda: getattr(ag.zeros(2, 3), fn)((0, 1)),
                    lambda: getattr(torch.zeros(2, 3), fn)((0, 1)))


# ---- repeat / split / chunk ---------------------------------------------------------


@pytest.mark.parametrize("shape,reps", [((3,), (2,)), ((2, 3), (2, 1)), ((2, 3), (1, 2, 3)),
                                        ((2,), (3, 1, 2)),
                                        ((), (2, 2)), ((2, 3), (0, 2)), ((2, 1, 3), (1, 4, 1))])
def test_repeat(dev, shape, reps):
    a, t = A(rnd(*shape), dev, grad=True)
    ra, rt = a.repeat(*reps), t.repeat(*reps)
    same(ra, rt)
    same(a.repeat(reps), t.repeat(reps))
    w = rnd(*rt.shape)
    (ra * ag.tensor(w, device=dev)).sum().backward()
    (rt * torch.tensor(w)).sum().backward()
    same(a.grad, t.grad)


def test_repeat_errors():
    raises_like(RuntimeError, lambda: ag.zeros(2, 3).repeat(2), lambda: torch.zeros(2, 3).repeat(2))
    raises_like(RuntimeError, lambda: ag.zeros(2).repeat(-1), lambda: torch.zeros(2).repeat(-1))
    raises_like(TypeError, lambda: ag.zeros(2).repeat(2.0), lambda: torch.zeros(2).repeat(2.0))
    assert ag.zeros(2, 3).repeat(1, 1, 1, 1, 1).shape == (1, 1, 1, 2, 3)


@pytest.mark.parametrize("arg,dim", [(2, 0), (3, 1), ([1, 4], 1), ((2, 0, 3), -1), (5, 1), (7, 0)])
def test_split(dev, arg, dim):
    a, t = A(rnd(4, 5), dev, grad=True)
    pa, pt = a.split(arg, dim), t.split(arg, dim)
    assert isinstance(pa, tuple) and len(pa) == len(pt)
    for x, y in zip(pa, pt):
        same(x, y)
    pa2 = ag.split(a, arg, dim)
    assert len(pa2) == len(pt)
    ws = [rnd(*y.shape) for y in pt]
    sum(((x * ag.tensor(w, device=dev)).sum() for x, w in zip(pa, ws)), ag.zeros((), device=dev)).backward()
    sum((y * torch.tensor(w)).sum() for y, w in zip(pt, ws)).backward()
    same(a.grad, t.grad)


def test_split_is_view():
    a = ag.zeros(6)
    p = a.split(2)
    p[1][0] = 5.0
    assert a.tolist() == [0, 0, 5, 0, 0, 0]


@pytest.mark.parametrize("n,chunks,dim", [(6, 4, 0), (5, 2, 0), (5, 5, 0), (5, 7, 0), (3, 2, 1), (0, 3, 0)])
def test_chunk(dev, n, chunks, dim):
    shape = (n, 3) if dim == 0 else (2, n)
    a, t = A(rnd(*shape), dev, grad=True)
    pa, pt = a.chunk(chunks, dim), t.chunk(chunks, dim)
    assert len(pa) == len(pt)
    for x, y in zip(pa, pt):
        same(x, y)
    assert len(ag.chunk(a, chunks, dim)) == len(pt)
    if n:
        sum((x * (k + 1)).sum() for k, x in enumerate(pa)).backward()
        sum((y * (k + 1)).sum() for k, y in enumerate(pt)).backward()
        same(a.grad, t.grad)


def test_split_chunk_errors():
    x, t = ag.zeros(5), torch.zeros(5)
    for args in (([2, 2],), (0,), (-1,)):
        raises_like(RuntimeError, lambda: x.split(*args), lambda: t.split(*args))
    raises_like(RuntimeError, lambda: x.chunk(0), lambda: t.chunk(0))
    raises_like(IndexError, lambda: x.split(2, 1), lambda: t.split(2, 1))
    raises_like(TypeError, lambda: x.chunk(2.0), lambda: t.chunk(2.0))
    same(ag.unbind(ag.ones(2, 3), 1)[2], torch.unbind(torch.ones(2, 3), 1)[2])


# ---- sort / argsort ---------------------------------------------------------------


@pytest.mark.parametrize("dim,desc", [(-1, False), (-1, True), (0, False), (1, True)])
def test_sort(dev, dim, desc):
    x = rng.integers(0, 4, (3, 6)).astype(np.float32)  # ties
    x[1, 2] = np.nan
    a, t = A(x, dev, grad=True)
    ra = a.sort(dim, desc, stable=True)
    rt = t.sort(dim=dim, descending=desc, stable=True)
    same(ra.values, rt.values)
    same(ra.indices, rt.indices)
    v, i = ag.sort(a, dim=dim, descending=desc)
    same(v, rt[0])
    assert "values=" in repr(ra) and "indices=" in repr(ra)
    same(a.argsort(dim, desc), rt.indices)
    same(ag.argsort(a, dim=dim, descending=desc), torch.argsort(t, dim=dim, descending=desc, stable=True))
    w = rnd(3, 6)
    (ra.values * ag.tensor(w, device=dev)).sum().backward()
    (rt.values * torch.tensor(w)).sum().backward()
    same(a.grad, t.grad)


def test_sort_int_and_errors():
    a, t = A(np.array([3, -1, 2, 7, 2]))
    ra, rt = a.sort(), t.sort(stable=True)
    same(ra.values, rt.values)
    same(ra.indices, rt.indices)
    raises_like(IndexError, lambda: a.sort(1), lambda: t.sort(1))
    raises_like(TypeError, lambda: a.sort(0.5), lambda: t.sort(0.5))
    raises_like(TypeError, lambda: ag.sort([1, 2]), lambda: torch.sort([1, 2]))


# ---- norm -------------------------------------------------------------------------

NORMS = [("fro", None, False), ("fro", 1, False), ("fro", (0, 1), True), (2, None, False), (1, 0, True),
         (float("inf"), 1, False), (3, None, False), (3, 1, True), (0.5, 0, False), (0, None, False),
         (-float("inf"), 1, False), (2, (0, 2), False), (1, -1, False)]


@pytest.mark.parametrize("p,dim,keepdim", NORMS, ids=[str(n) for n in NORMS])
def test_norm(dev, p, dim, keepdim):
    a, t = A(rnd(3, 4, 2) + 0.1, dev, grad=True)
    ra = a.norm(p=p, dim=dim, keepdim=keepdim)
    rt = t.norm(p=p, dim=dim, keepdim=keepdim)
    same(ra, rt, 1e-4)
    same(ag.norm(a, p, dim, keepdim), torch.norm(t, p, dim, keepdim), 1e-4)
    if p != 0:
        w = rnd(*rt.shape)
        (ra * ag.tensor(w, device=dev)).sum().backward()
        (rt * torch.tensor(w)).sum().backward()
        same(a.grad, t.grad, 1e-4)


def test_linalg_norms(dev):
    a, t = A(rnd(3, 4), dev)
    v, tv = A(rnd(5), dev)
    same(ag.linalg.norm(a), torch.linalg.norm(t), 1e-5)
    same(ag.linalg.norm(v), torch.linalg.norm(tv), 1e-5)
    for o in (1, -1, float("inf"), -float("inf"), "fro"):
        same(ag.linalg.norm(a, ord=o), torch.linalg.norm(t, ord=o), 1e-5)
        same(ag.linalg.matrix_norm(a, ord=o, keepdim=True),
             torch.linalg.matrix_norm(t, ord=o, keepdim=True), 1e-5)
    for o in (1, 2, 3, float("inf"), 0):
        same(ag.linalg.vector_norm(a, o), torch.linalg.vector_norm(t, o), 1e-5)
        same(ag.linalg.vector_norm(a, o, dim=1, keepdim=True), torch.linalg.vector_norm(t, o, 1, True), 1e-5)
        same(ag.linalg.norm(a, o, dim=0), torch.linalg.norm(t, o, dim=0), 1e-5)


def test_norm_errors():
    x, t = ag.ones(2, 3), torch.ones(2, 3)
    raises_like(IndexError, lambda: x.norm(dim=5), lambda: t.norm(dim=5))
    raises_like(RuntimeError, lambda: ag.linalg.vector_norm(ag.ones(2, dtype=ag.int64)),
                lambda: torch.linalg.vector_norm(torch.ones(2, dtype=torch.int64)))
    raises_like(RuntimeError, lambda: ag.linalg.matrix_norm(ag.ones(3)),
                lambda: torch.linalg.matrix_norm(torch.ones(3)))
    with pytest.raises(NotImplementedError):
        ag.linalg.matrix_norm(x, 2)


# ---- creation -------------------------------------------------------------------


@pytest.mark.parametrize("start,end,steps", [(-3, 10, 7), (0, 1, 11), (0.1, 0.7, 13), (5, -5, 9), (0, 1, 1),
                                             (2, 3, 0), (-1000, 0.001, 101)])
def test_linspace(dev, start, end, steps):
    same(ag.linspace(start, end, steps, device=dev), torch.linspace(start, end, steps), 1e-6)
    same(ag.linspace(start, end, steps, dtype=ag.float64),
         torch.linspace(start, end, steps, dtype=torch.float64),
         1e-12)
    same(ag.linspace(start, end, steps, dtype=ag.int64),
         torch.linspace(start, end, steps, dtype=torch.int64))
    r = ag.linspace(start, end, steps, device=dev)
    assert r.device == ag.device(dev)
    if steps:  # bit-equal at the ends
        assert r[0].item() == torch.linspace(start, end, steps)[0].item()
        assert r[-1].item() == torch.linspace(start, end, steps)[-1].item()


def test_linspace_errors():
    raises_like(RuntimeError, lambda: ag.linspace(0, 1, -1), lambda: torch.linspace(0, 1, -1))
    raises_like(TypeError, lambda: ag.linspace(0, 1, 2.0), lambda: torch.linspace(0, 1, 2.0))


@pytest.mark.parametrize("n,m,dtype", [(3, None, "float32"), (2, 4, "int32"), (4, 2, "float64"),
                                       (0, 3, "bool"),
                                       (1, None, "int64")])
def test_eye(dev, n, m, dtype):
    ra = ag.eye(n, m, dtype=getattr(ag, dtype if dtype != "bool" else "bool_"), device=dev)
    rt = torch.eye(n, m if m is not None else n, dtype=getattr(torch, dtype))
    same(ra, rt)
    assert ra.device == ag.device(dev)
    assert ag.eye(2, requires_grad=True).requires_grad


def test_eye_errors():
    raises_like(RuntimeError, lambda: ag.eye(-1), lambda: torch.eye(-1))
    raises_like(RuntimeError, lambda: ag.eye(2, -1), lambda: torch.eye(2, -1))
    raises_like(TypeError, lambda: ag.eye(2.0), lambda: torch.eye(2.0))


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_new_methods(dev, dtype):
    a, t = A(np.zeros((2, 2)), dev, dtype=dtype)
    for ra, rt in ((a.new_zeros(2, 3), t.new_zeros(2, 3)), (a.new_zeros((2, 3)), t.new_zeros((2, 3))),
                   (a.new_ones(3), t.new_ones(3)), (a.new_full((2,), 5), t.new_full((2,), 5)),
                   (a.new_tensor([1, 2]), t.new_tensor([1, 2])),
                   (a.new_zeros(2, dtype=ag.int64), t.new_zeros(2, dtype=torch.int64))):
        same(ra, rt)
        assert ra.device == a.device
    e = a.new_empty(4, 1)
    assert e.shape == (4, 1) and e.dtype == a.dtype and e.device == a.device
    assert a.new_zeros(2, device="cpu").device == ag.device("cpu")
    f = ag.ones(2, device=dev).new_ones(3, requires_grad=True)
    assert f.requires_grad and f.is_leaf


def test_sizes():
    for name in ("float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8"):
        a = ag.zeros(3, 2, dtype=getattr(ag, name))
        t = torch.zeros(3, 2, dtype=getattr(torch, name))
        assert a.element_size() == t.element_size()
        assert a.itemsize == t.element_size() and a.nbytes == 6 * t.element_size()
    assert ag.zeros(2, dtype=ag.bool_).element_size() == torch.zeros(2, dtype=torch.bool).element_size()


# ---- autograd.grad -------------------------------------------------------------------


def _net(lib, x, w, b):
    h = lib.matmul(x, w) + b
    return h, (h.relu() * h).sum()


def test_autograd_grad(dev):
    x, tx = A(rnd(3, 4), dev, grad=True)
    w, tw = A(rnd(4, 2), dev, grad=True)
    b, tb = A(rnd(2), dev, grad=True)
    h, y = _net(ag, x, w, b)
    th, ty = _net(torch, tx, tw, tb)
    ga = ag.autograd.grad(y, [w, x, h, b], retain_graph=True)
    gt = torch.autograd.grad(ty, [tw, tx, th, tb], retain_graph=True)
    assert isinstance(ga, tuple) and len(ga) == 4
    for a, t in zip(ga, gt):
        same(a, t, 1e-5)
    assert w.grad is None and x.grad is None and b.grad is None  # nothing accumulated
    # a non-scalar output with its gradient, a single tensor as inputs
    go = rnd(3, 2)
    same(ag.autograd.grad(h, x, ag.tensor(go, device=dev), retain_graph=True)[0],
         torch.autograd.grad(th, tx, torch.tensor(go), retain_graph=True)[0], 1e-5)
    # two outputs at once, then the graph is freed
    ga = ag.autograd.grad([y, h.sum()], [b])
    gt = torch.autograd.grad([ty, th.sum()], [tb])
    same(ga[0], gt[0], 1e-5)
    raises_like(RuntimeError, lambda: ag.autograd.grad(y, [b]), lambda: torch.autograd.grad(ty, [tb]))
    assert b.grad is None


def test_autograd_grad_unused_and_errors(dev):
    x, tx = A(rnd(3), dev, grad=True)
    z, tz = A(rnd(3), dev, grad=True)
    c, tc = A(rnd(3), dev)
    y, ty = (x * x).sum(), (tx * tx).sum()
    r = ag.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)
    rt = torch.autograd.grad(ty, [tx, tz], allow_unused=True, retain_graph=True)
    same(r[0], rt[0])
    assert r[1] is None and rt[1] is None
    raises_like(RuntimeError, lambda: ag.autograd.grad(y, [x, z], retain_graph=True),
                lambda: torch.autograd.grad(ty, [tx, tz], retain_graph=True))
    raises_like(RuntimeError, lambda: ag.autograd.grad(y, [c], retain_graph=True),
                lambda: torch.autograd.grad(ty, [tc], retain_graph=True))
    raises_like(RuntimeError, lambda: ag.autograd.grad(c.sum(), [x]),
                lambda: torch.autograd.grad(tc.sum(), [tx]))
    raises_like(RuntimeError, lambda: ag.autograd.grad(x * 2, [x]),
                lambda: torch.autograd.grad(tx * 2, [tx]))
    raises_like(RuntimeError, lambda: ag.autograd.grad(x * 2, [x], ag.ones(2, device=dev)),
                lambda: torch.autograd.grad(tx * 2, [tx], torch.ones(2)))
    raises_like(RuntimeError, lambda: ag.autograd.grad(y, [1.0]), lambda: torch.autograd.grad(ty, [1.0]))
    raises_like(TypeError, lambda: ag.autograd.grad(y, 1.0), lambda: torch.autograd.grad(ty, 1.0))
    with pytest.raises(NotImplementedError):  # torch supports it; anygrad's backward records no graph
        ag.autograd.grad(y, [x], create_graph=True)
    # a leaf output that is its own input
    same(ag.autograd.grad(x, x, ag.ones(3, device=dev))[0], torch.autograd.grad(tx, tx, torch.ones(3))[0])


# ---- register_hook ---------------------------------------------------------------------


def _hooked(lib, x, w, log):
    h = x * w
    h.register_hook(lambda g: g * 3)
    h.register_hook(lambda g: log.append(g.sum().item()))  # observes the replaced gradient
    return (h * x).sum()


def test_register_hook(dev):
    x, tx = A(rnd(4), dev, grad=True)
    w, tw = A(rnd(4), dev, grad=True)
    la, lt = [], []
    ha = x.register_hook(lambda g: g * 2)
    ht = tx.register_hook(lambda g: g * 2)
    _hooked(ag, x, w, la).backward()
    _hooked(torch, tx, tw, lt).backward()
    same(x.grad, tx.grad, 1e-5)
    same(w.grad, tw.grad, 1e-5)
    np.testing.assert_allclose(la, lt, rtol=1e-5)
    ha.remove()
    ht.remove()
    ha.remove()  # twice: nothing
    _hooked(ag, x, w, la).backward()
    _hooked(torch, tx, tw, lt).backward()
    same(x.grad, tx.grad, 1e-5)


def test_register_hook_errors(dev):
    c, tc = A(rnd(3), dev)
    raises_like(RuntimeError, lambda: c.register_hook(lambda g: g), lambda: tc.register_hook(lambda g: g))
    x, tx = A(rnd(3), dev, grad=True)
    x.register_hook(lambda g: g[:2])
    tx.register_hook(lambda g: g[:2])
    raises_like(RuntimeError, lambda: (x * x).sum().backward(), lambda: (tx * tx).sum().backward())
    y = ag.ones(3, device=dev, requires_grad=True)

    def boom(g):
        raise KeyError("from the hook")
    y.register_hook(boom)
    with pytest.raises(KeyError, match="from the hook"):  # the hook's own exception
        (y * 2).sum().backward()
    assert y.grad is None


# ---- grad_fn ----------------------------------------------------------------------------


def test_grad_fn(dev):
    x, tx = A(rnd(3), dev, grad=True)
    y, ty = A(rnd(3), dev, grad=True)
    assert x.grad_fn is None and tx.grad_fn is None
    for f in (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, lambda a, b: a / b,
              lambda a, b: (a * b).sum(), lambda a, b: a.exp(), lambda a, b: a.relu(),
              lambda a, b: a.mean()):
        ra, rt = f(x, y), f(tx, ty)
        assert ra.grad_fn.name() == rt.grad_fn.name()
        assert rt.grad_fn.name() in repr(ra.grad_fn)
        assert len(ra.grad_fn.next_functions) == len(rt.grad_fn.next_functions)
    s = x * y
    leaf = s.grad_fn.next_functions[0][0]
    assert leaf.name() == s.grad_fn.next_functions[1][0].name() == "torch::autograd::AccumulateGrad"
    assert leaf.variable.tolist() == x.tolist()
    assert (s.sum()).grad_fn.next_functions[0][0] == s.grad_fn
    with ag.no_grad():
        assert (x * y).grad_fn is None
    assert (x.detach() * 2).grad_fn is None
    assert c_free(x)


def c_free(x):
    """grad_fn objects hold their node: the graph outlives the tensor."""
    n = (x * x).sum().grad_fn
    import gc
    gc.collect()
    return n.name() == "SumBackward0" and n.next_functions[0][0].name() == "MulBackward0"


# ---- autograd.Function --------------------------------------------------------------------


def _functions(lib):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.k = k
            return x * x * x * k

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x * x * ctx.k, None

    class MulAdd(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b, a + b

        @staticmethod
        def backward(ctx, ga, gs):
            a, b = ctx.saved_tensors
            return ga * b + gs, ga * a + gs
    return Cube, MulAdd


def test_function(dev):
    ACube, AMulAdd = _functions(ag)
    TCube, TMulAdd = _functions(torch)
    x, tx = A(rnd(4), dev, grad=True)
    y, ty = A(rnd(4), dev, grad=True)
    c, tc = ACube.apply(x, 2.0), TCube.apply(tx, 2.0)
    same(c, tc, 1e-5)
    assert c.requires_grad and c.grad_fn.name() == "CubeBackward"
    p, s = AMulAdd.apply(c, y)
    tp, ts = TMulAdd.apply(tc, ty)
    same(p, tp, 1e-5)
    same(s, ts, 1e-5)
    w = rnd(4)
    ((p * ag.tensor(w, device=dev)).sum() + s.sum() * 2).backward()
    ((tp * torch.tensor(w)).sum() + ts.sum() * 2).backward()
    same(x.grad, tx.grad, 1e-4)
    same(y.grad, ty.grad, 1e-4)
    with ag.no_grad():  # nothing recorded
        assert ACube.apply(x, 1.0).grad_fn is None
    assert ACube.apply(x.detach(), 1.0).grad_fn is None


def test_function_errors(dev):
    class Few(ag.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(ag.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.sum()

        @staticmethod
        def backward(ctx, g):
            return g.reshape(1)

    class Raises(ag.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            raise ZeroDivisionError("inside backward")
    x = ag.ones(3, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Few.apply(x, x).sum().backward()
    with pytest.raises(RuntimeError, match="invalid gradient"):
        WrongShape.apply(x).backward()
    with pytest.raises(ZeroDivisionError):
        Raises.apply(x).sum().backward()
    with pytest.raises(NotImplementedError):
        ag.autograd.Function.apply(x)


def test_hooks_and_functions_do_not_leak():
    from anygrad import autograd
    Cube, _ = _functions(ag)
    w = ag.ones(3, requires_grad=True)
    w.register_hook(lambda g: g)
    import gc
    gc.collect()  # what earlier tests left for the collector
    base_reg, base_live = len(autograd._registry), ag.live_tensors()
    for step in range(50):
        h = w * 2
        h.register_hook(lambda g: g * 1)
        c = Cube.apply(h, 1.0)
        if step % 2:
            c.sum().backward()  # the graph goes with the backward
        h = c = None  # ... or with its tensors
    gc.collect()
    assert len(autograd._registry) == base_reg
    w.grad = None
    assert ag.live_tensors() == base_live


def test_retain_grad(dev):
    x, tx = A(rnd(3), dev, grad=True)
    y, ty = x * 2, tx * 2
    y.retain_grad()
    ty.retain_grad()
    assert y.retains_grad and not x.retains_grad
    for _ in range(2):
        (y * y).sum().backward(retain_graph=True)
        (ty * ty).sum().backward(retain_graph=True)
        same(y.grad, ty.grad)
        same(x.grad, tx.grad)
    y.grad = None
    assert y.grad is None
    assert (x * 3).grad is None
    raises_like(RuntimeError, lambda: x.detach().retain_grad(), lambda: tx.detach().retain_grad())
    with ag.autograd.no_grad():
        assert not (x * 2).requires_grad
