"""copy.copy aliases a tensor (a new reference); copy.deepcopy and pickle copy
its values; clone keeps the dtype and every bit, and the autograd graph."""
import copy
import math
import pickle

import numpy as np
import pytest

import anygrad as ag


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64", "int32", "int64", "bool", "uint8"])
def test_clone_keeps_dtype_and_bits(dev, dt):
    dtype = getattr(ag, dt if dt != "bool" else "bool_")
    src = ag.tensor([[-0.0, 1.0, 2.0], [3.0, 0.0, 5.0]], dtype=dtype, device=dev)
    c = src.clone()
    assert c.dtype is src.dtype and c.device == src.device and c.shape == src.shape
    assert c._h != src._h
    if dtype.is_floating_point:
        assert math.copysign(1.0, c.float().cpu().tolist()[0][0]) == -1.0  # -0.0 kept (x + 0 would give +0.0)
    np.testing.assert_array_equal(c.float().cpu().numpy(), src.float().cpu().numpy())


def test_clone_of_a_view_is_contiguous_and_keeps_the_graph(dev):
    w = ag.arange(6.0, device=dev).reshape(2, 3).detach().requires_grad_()
    c = w.t().clone()
    assert c.is_contiguous() and c.shape == (3, 2)
    (c * ag.tensor([[1.0, 2.0]] * 3, device=dev)).sum().backward()
    np.testing.assert_array_equal(w.grad.cpu().numpy(), [[1, 1, 1], [2, 2, 2]])


def test_deepcopy_copies_the_values(dev):
    t = ag.tensor([1.0, 2.0, 3.0], device=dev).requires_grad_()
    u = copy.deepcopy(t)
    assert u._h != t._h and u.requires_grad and u.is_leaf and u.device == t.device
    with ag.no_grad():
        u.add_(1)
    assert t.tolist() == [1.0, 2.0, 3.0] and u.tolist() == [2.0, 3.0, 4.0]


def test_deepcopy_of_a_non_leaf_is_refused():
    w = ag.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(w * 2)


def test_copy_aliases():
    t = ag.tensor([1.0, 2.0])
    c = copy.copy(t)
    c.add_(1)
    assert t.tolist() == [2.0, 3.0]
    del t  # c holds its own reference
    assert c.tolist() == [2.0, 3.0]


def test_deepcopy_of_a_module_keeps_its_sharing_and_frozen_parameters():
    m = ag.nn.Sequential(ag.nn.Linear(2, 2), ag.nn.Linear(2, 2))
    m[1].weight = m[0].weight  # tied
    m[1].bias = ag.nn.Parameter(m[1].bias, requires_grad=False)  # frozen, still a parameter
    m2 = copy.deepcopy(m)
    assert m2[0].weight is m2[1].weight and m2[0].weight._h != m[0].weight._h
    assert len(list(m2.parameters())) == len(list(m.parameters())) == 3
    with ag.no_grad():
        m2[0].weight.zero_()
    assert float(m[0].weight.abs().sum()) > 0  # the original is untouched
    x = ag.randn(4, 2)
    np.testing.assert_array_equal(copy.deepcopy(m)(x).detach().numpy(), m(x).detach().numpy())


@pytest.mark.parametrize("dt", ["float32", "bfloat16", "int64", "bool"])
def test_pickle_round_trip(dt):
    dtype = getattr(ag, dt if dt != "bool" else "bool_")
    t = ag.tensor([[1.5, -2.25, 0.0]], dtype=dtype)
    if dtype.is_floating_point:
        t.requires_grad = True
    r = pickle.loads(pickle.dumps(t))
    assert r._h != t._h and r.dtype is t.dtype and r.shape == t.shape and r.requires_grad == t.requires_grad
    np.testing.assert_array_equal(r.float().detach().numpy(), t.float().detach().numpy())


def test_pickle_keeps_the_device(dev):
    r = pickle.loads(pickle.dumps(ag.tensor([1.0, 2.0], device=dev)))
    assert str(r.device) == dev or str(r.device) == dev + ":0"
    assert r.tolist() == [1.0, 2.0]
