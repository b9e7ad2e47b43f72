"""Every elementwise op of the op table (read from optable.h, as the package
does) and the other ops, forward and gradient, against torch on random inputs."""
import math

import numpy as np
import pytest

import anygrad as ag
from anygrad import _lib

torch = pytest.importorskip("torch")
F = torch.nn.functional

# torch's spelling where it differs from the table's name
TORCH_UNARY = {
    "gelu": lambda x, s0, s1: F.gelu(x, approximate="tanh"),
    "gelu_erf": lambda x, s0, s1: F.gelu(x),
    "pow_scalar": lambda x, s0, s1: torch.pow(x, s0),
    "softplus": lambda x, s0, s1: F.softplus(x, beta=s0, threshold=s1),
    "leaky_relu": lambda x, s0, s1: F.leaky_relu(x, s0),
    "elu": lambda x, s0, s1: F.elu(x, alpha=s0),
    "celu": lambda x, s0, s1: F.celu(x, alpha=s0),
    "clamp": lambda x, s0, s1: torch.clamp(x, s0, s1),
}
NO_GRAD_IN_TORCH = {"floor", "ceil", "round", "sign", "trunc"}  # torch: zero gradient too
# binary ops torch has no single function for: their composition
TORCH_BINARY = {"swiglu": lambda a, b: F.silu(a) * b}

UNARY = [op for op in _lib.UNARY_OPS if op["api"] != "AH"]
BINARY = [op for op in _lib.BINARY_OPS if op["api"] == "B"]


def torch_unary(name):
    if name in TORCH_UNARY:
        return TORCH_UNARY[name]
    f = getattr(torch, name, None) or getattr(F, name)
    return lambda x, s0, s1: f(x)


def torch_binary(name):
    return TORCH_BINARY.get(name) or getattr(torch, name)


def sample(dom, shape, rng):
    kind, lo, hi = [s.strip() for s in dom.strip("()").split(",")]
    lo, hi = float(lo), float(hi)
    if kind == "UNI":
        return rng.uniform(lo, hi, shape)
    if kind == "AWAY":
        return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)
    if kind == "FRAC":
        return rng.integers(int(lo), int(hi), shape) + rng.uniform(0.1, 0.4, shape)
    if kind == "NZINT":
        return rng.integers(int(lo), int(hi) + 1, shape) * rng.choice([-1.0, 1.0], shape)
    raise AssertionError(kind)


def test_table_is_complete():
    names = set(ag.ELEMENTWISE_OPS)
    for op in UNARY + BINARY:
        assert op["name"] in names and hasattr(ag.Tensor, op["name"]), op["name"]
    assert len(UNARY) > 30 and len(BINARY) > 10


@pytest.mark.parametrize("op", UNARY, ids=[o["name"] for o in UNARY])
def test_unary(op, dev):
    rng = np.random.default_rng(hash(op["name"]) % 2**32)
    s = op["ts"][:op["nscalars"]]
    s0, s1 = (list(op["ts"]) + [0, 0])[:2]
    x = sample(op["dom"], (3, 5), rng).astype(np.float32)
    got = getattr(ag, op["name"])(ag.tensor(x, device=dev), *s).numpy()
    want = torch_unary(op["name"])(torch.tensor(x, dtype=torch.float64), s0, s1).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=op["name"])


@pytest.mark.parametrize("op", [o for o in UNARY if o["save"] != "NG"],
                         ids=[o["name"] for o in UNARY if o["save"] != "NG"])
def test_unary_grad(op, dev):
    rng = np.random.default_rng(1 + hash(op["name"]) % 2**32)
    s = op["ts"][:op["nscalars"]]
    s0, s1 = (list(op["ts"]) + [0, 0])[:2]
    x = sample(op["gdom"], (4, 3), rng).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    xa = ag.tensor(x, device=dev, requires_grad=True)
    (getattr(ag, op["name"])(xa, *s) * ag.tensor(w, device=dev)).sum().backward()
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (torch_unary(op["name"])(xt, s0, s1) * torch.tensor(w, dtype=torch.float64)).sum().backward()
    want = xt.grad.numpy() if op["name"] not in NO_GRAD_IN_TORCH else np.zeros_like(x)
    np.testing.assert_allclose(xa.grad.numpy(), want, rtol=5e-4, atol=5e-5, err_msg=op["name"])


@pytest.mark.parametrize("op", BINARY, ids=[o["name"] for o in BINARY])
def test_binary(op, dev):
    rng = np.random.default_rng(hash(op["name"]) % 2**32)
    a = sample(op["doma"], (3, 4), rng).astype(np.float32)
    b = sample(op["domb"], (1, 4), rng).astype(np.float32)  # broadcast
    if op["kind"] == "CMP":
        b[0, 0] = a[0, 0]  # an equal pair
    got = getattr(ag, op["name"])(ag.tensor(a, device=dev), ag.tensor(b, device=dev))
    want = torch_binary(op["name"])(torch.tensor(a), torch.tensor(b))
    if op["kind"] == "CMP":
        assert got.dtype is ag.bool_
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64),
                               rtol=2e-5, atol=2e-6, err_msg=op["name"])


@pytest.mark.parametrize("op", [o for o in BINARY if o["grad"] != "NG"],
                         ids=[o["name"] for o in BINARY if o["grad"] != "NG"])
def test_binary_grad(op, dev):
    rng = np.random.default_rng(2 + hash(op["name"]) % 2**32)
    a = sample(op["doma"], (3, 4), rng).astype(np.float32)
    b = sample(op["domb"], (1, 4), rng).astype(np.float32)
    if op["name"] in ("maximum", "minimum"):
        b = b + 0.01  # no ties (the tie rule is tested in C)
    aa = ag.tensor(a, device=dev, requires_grad=True)
    ba = ag.tensor(b, device=dev, requires_grad=True)
    getattr(ag, op["name"])(aa, ba).sum().backward()
    at = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    torch_binary(op["name"])(at, bt).sum().backward()
    np.testing.assert_allclose(aa.grad.numpy(), at.grad.numpy(), rtol=5e-4, atol=5e-5)
    np.testing.assert_allclose(ba.grad.numpy(), bt.grad.numpy(), rtol=5e-4, atol=5e-5)


def _both(rng, *shape):
    x = rng.standard_normal(shape).astype(np.float32)
    return x


# the other ops of the C API: (name, anygrad fn, torch fn, input shapes)
OTHERS = [
    ("matmul", lambda a, b: a @ b, lambda a, b: a @ b, [(3, 4), (4, 5)]),
    ("bmatmul", lambda a, b: ag.matmul(a, b), torch.matmul, [(2, 3, 4), (4, 2)]),
    ("sum_dim", lambda a: a.sum(dim=1, keepdim=True), lambda a: a.sum(1, keepdim=True), [(3, 4)]),
    ("sum_all", lambda a: a.sum(), lambda a: a.sum(), [(3, 4)]),
    ("mean_dims", lambda a: a.mean(dim=(0, 2)), lambda a: a.mean((0, 2)), [(2, 3, 4)]),
    ("amax", lambda a: a.amax(dim=-1), lambda a: a.amax(-1), [(3, 4)]),
    ("amin", lambda a: a.amin(dim=0, keepdim=True), lambda a: a.amin(0, keepdim=True), [(3, 4)]),
    ("var", lambda a: a.var(dim=1), lambda a: a.var(1), [(3, 5)]),
    ("std", lambda a: a.std(), lambda a: a.std(), [(3, 5)]),
    ("softmax", lambda a: ag.softmax(a, -1), lambda a: torch.softmax(a, -1), [(3, 6)]),
    ("log_softmax", lambda a: ag.log_softmax(a, 0), lambda a: torch.log_softmax(a, 0), [(3, 6)]),
    ("cumsum", lambda a: a.cumsum(1), lambda a: a.cumsum(1), [(3, 6)]),
    ("layer_norm", lambda a, w, b: ag.functional.layer_norm(a, None, w, b),
     lambda a, w, b: F.layer_norm(a, (6,), w, b), [(3, 6), (6,), (6,)]),
    ("mse", lambda a, b: ag.functional.mse_loss(a, b), F.mse_loss, [(3, 6), (3, 6)]),
    ("transpose", lambda a: a.transpose(0, 1) * 2, lambda a: a.transpose(0, 1) * 2, [(3, 4)]),
    ("slice", lambda a: a[1:, ::2] * 3, lambda a: a[1:, ::2] * 3, [(3, 5)]),
    ("reshape", lambda a: a.reshape(6, 2) + 1, lambda a: a.reshape(6, 2) + 1, [(3, 4)]),
    ("cat", lambda a, b: ag.cat([a, b], 1), lambda a, b: torch.cat([a, b], 1), [(2, 3), (2, 2)]),
    ("scalar_ops", lambda a: (2 - a) / 3 + 1.5 * a - a / 2 + 4 / (a * a + 1),
     lambda a: (2 - a) / 3 + 1.5 * a - a / 2 + 4 / (a * a + 1), [(3, 4)]),
    ("pow_ops", lambda a: (a * a + 1) ** 1.5 + a ** 2, lambda a: (a * a + 1) ** 1.5 + a ** 2,
     [(3, 4)]),
    ("where", lambda a, b: ag.where(a > b, a, b * 2), lambda a, b: torch.where(a > b, a, b * 2),
     [(3, 4), (3, 4)]),
    ("conv2d", lambda x, w, b: ag.functional.conv2d(x, w, b, padding=1),
     lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    ("max_pool2d", lambda x: ag.functional.max_pool2d(x, 2), lambda x: F.max_pool2d(x, 2),
     [(2, 3, 6, 6)]),
    ("avg_pool2d", lambda x: ag.functional.avg_pool2d(x, 3, 2, 1),
     lambda x: F.avg_pool2d(x, 3, 2, 1), [(2, 3, 7, 7)]),
    ("adaptive_avg_pool2d", lambda x: ag.functional.adaptive_avg_pool2d(x, (2, 3)),
     lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [(2, 3, 7, 7)]),
]


@pytest.mark.parametrize("case", OTHERS, ids=[c[0] for c in OTHERS])
def test_other_ops(case, dev):
    name, fa, ft, shapes = case
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    try:
        ins = [ag.tensor(x, device=dev, requires_grad=True) for x in xs]
        out = fa(*ins)
    except ag.UnsupportedError as e:
        pytest.skip(str(e))
    tins = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    tout = ft(*tins)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    w = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    (out * ag.tensor(w, device=dev)).sum().backward()
    (tout * torch.tensor(w, dtype=torch.float64)).sum().backward()
    for a, t in zip(ins, tins):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=name)


def test_losses_and_indexing_ops(dev):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 7)).astype(np.float32)
    tgt = rng.integers(0, 7, 5)
    la = ag.tensor(logits, device=dev, requires_grad=True)
    loss = ag.functional.cross_entropy(la, ag.tensor(tgt, device=dev))
    lt = torch.tensor(logits, requires_grad=True)
    tl = F.cross_entropy(lt, torch.tensor(tgt))
    assert abs(loss.item() - tl.item()) < 1e-5
    loss.backward()
    tl.backward()
    np.testing.assert_allclose(la.grad.numpy(), lt.grad.numpy(), atol=1e-6)
    table = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[0, 5], [2, 2]])
    e = ag.functional.embedding(ag.tensor(idx, device=dev), ag.tensor(table, device=dev))
    np.testing.assert_allclose(e.numpy(), table[idx])
    x = ag.tensor(logits, device=dev)
    v, i = ag.topk(x, 3, dim=1)
    tv, ti = torch.topk(torch.tensor(logits), 3, dim=1)
    np.testing.assert_allclose(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    g = ag.gather(x, 1, ag.tensor(tgt.reshape(5, 1), device=dev))
    np.testing.assert_allclose(g.numpy()[:, 0], logits[np.arange(5), tgt])
    np.testing.assert_array_equal(x.argmax(dim=1).numpy(), logits.argmax(1))
    m = ag.masked_fill(x, x > 0, -1.0)
    np.testing.assert_allclose(m.numpy(), np.where(logits > 0, -1, logits))
    sel = x[ag.tensor([4, 0], device=dev)]
    np.testing.assert_allclose(sel.numpy(), logits[[4, 0]])


def test_batch_norm_and_dropout(dev):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    bn = ag.nn.BatchNorm2d(3, device=dev)
    tbn = torch.nn.BatchNorm2d(3)
    try:
        y = bn(ag.tensor(x, device=dev))
    except ag.UnsupportedError as e:
        pytest.skip(str(e))
    ty = tbn(torch.tensor(x))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5)
    d = ag.functional.dropout(ag.ones(1000, device=dev), 0.25, training=True).numpy()
    assert set(np.unique(d)).issubset({0.0, np.float32(1 / 0.75)})
    assert 150 < (d == 0).sum() < 350


def test_views_share_storage(dev):
    x = ag.zeros(3, 4, device=dev)
    x[1, 1:3] = 5.0
    x[:, 0] = ag.tensor([1.0, 2.0, 3.0], device=dev)
    want = np.zeros((3, 4), np.float32)
    want[1, 1:3] = 5
    want[:, 0] = [1, 2, 3]
    np.testing.assert_array_equal(x.numpy(), want)
    v = x.T
    assert v.shape == (4, 3) and v.stride() == (1, 4)
    assert x[..., 2].shape == (3,) and x[None, 1].shape == (1, 4)
