"""a.add_(b) written by the op's one kernel and x[idx] with a cpu index in
one call (ag_index_select_host), against torch 1.13 and against anygrad's
own out-of-place op (bit for bit), on every device."""
import numpy as np
import pytest

import anygrad as ag


def _np(t):
    return t.detach().cpu().numpy()


OPS = ("add", "sub", "mul", "div")


def _vals(shape, seed):
    n = int(np.prod(shape)) if shape else 1
    v = seed + 0.37 * np.arange(n) - 0.11 * (np.arange(n) ** 2 % 5) + 0.5
    return v.astype(np.float32).reshape(shape)


@pytest.mark.parametrize("case", ["same", "row", "zero_d", "self", "alias", "view_self", "overlap",
                                  "transposed"])
def test_inplace_matches_out_of_place(dev, th, case):
    for op in OPS:
        base = _vals((2, 3), 1.0)
        a, at = ag.tensor(base, device=dev), th.tensor(base)
        oth = {"same": _vals((2, 3), 2.0), "row": _vals((3,), -3.0), "zero_d": np.float32(1.5)}
        if case in oth:
            b, bt = ag.tensor(oth[case], device=dev), th.tensor(oth[case])
            s, st = a, at
        elif case == "self":
            s, st, b, bt = a, at, a, at
        elif case == "alias":
            s, st, b, bt = a, at, a[:], at[:]
        elif case == "view_self":  # a row of a written in place: a sees it
            s, st = a[1], at[1]
            b, bt = ag.tensor(_vals((3,), 4.0), device=dev), th.tensor(_vals((3,), 4.0))
        elif case == "overlap":  # other behind self in one storage; torch refuses it
            f = _vals((8,), 0.25)
            a, at = ag.tensor(f, device=dev), th.tensor(f)
            s, b = a[2:], a[:6]
            st, bt = at[2:].clone(), at[:6].clone()
        else:
            s, st = a.t(), at.t()
            b, bt = ag.tensor(_vals((3, 2), 2.0), device=dev), th.tensor(_vals((3, 2), 2.0))
        want = _np(getattr(ag, op)(s, b))
        r = getattr(s, op + "_")(b)
        getattr(st, op + "_")(bt)
        assert r is s
        assert np.array_equal(_np(s), want), (op, case)  # bit for bit
        np.testing.assert_allclose(_np(s), st.numpy(), rtol=1e-6, atol=1e-6)
        if case == "view_self":
            np.testing.assert_allclose(_np(a), at.numpy(), rtol=1e-6, atol=1e-6)


def test_inplace_refusal_leaves_self_and_version(dev, th):
    a = ag.tensor(_vals((4,), 1.0), device=dev)
    w = ag.ones(4, device=dev, requires_grad=True)
    y = (w * a).sum()  # saves a
    before = _np(a).copy()
    for f in (lambda: w.add_(a), lambda: a.add_(w), lambda: a.add_(ag.ones(2, 4, device=dev))):
        with pytest.raises(RuntimeError):
            f()
    with pytest.raises(RuntimeError):
        th.ones(4, requires_grad=True).add_(th.ones(4))
    with pytest.raises(RuntimeError):
        th.ones(4).add_(th.ones(2, 4))
    assert np.array_equal(_np(a), before)
    y.backward(retain_graph=True)  # a's version did not move
    a.add_(ag.ones(4, device=dev))
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


@pytest.mark.parametrize("dt", ["int64", "int32"])
def test_index_host(dev, th, dt):
    base = np.arange(40, dtype=np.float32).reshape(10, 4)
    x, xt = ag.tensor(base, device=dev), th.tensor(base)
    for idx in ([-1, 2, 0, -10], [3], list(range(-10, 10)) * 5):  # the last past 64 values
        got = x[ag.tensor(np.array(idx, dtype=dt))]
        want = xt[th.tensor(idx)]
        assert tuple(got.shape) == tuple(want.shape)
        assert np.array_equal(_np(got), want.numpy())
    for bad in ([10], [0, -11, 12]):
        with pytest.raises(IndexError) as e:
            x[ag.tensor(np.array(bad, dtype=dt))]
        with pytest.raises(IndexError) as et:
            xt[th.tensor(bad)]
        assert str(et.value) in str(e.value)  # the first value out of bounds, torch's words
    xi = ag.tensor(base.astype(np.int64), device=dev)  # an integer x: the other path
    assert np.array_equal(_np(xi[ag.tensor([-1, 0])]), base.astype(np.int64)[[-1, 0]])
    with pytest.raises(IndexError):
        xi[ag.tensor([10])]


def test_index_host_grad(dev, th):
    w = ag.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2), device=dev, requires_grad=True)
    wt = th.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2), requires_grad=True)
    (w[ag.tensor([0, -2, 2])] * 3).sum().backward()
    (wt[th.tensor([0, -2, 2])] * 3).sum().backward()
    assert np.array_equal(_np(w.grad), wt.grad.numpy())
