"""Indexing as torch 1.13's: Python lists, NumPy arrays and integer tensors
(broadcast together, the result's dims where torch puts them), boolean
masks, None and ... mixed in, reads and writes, their gradients and their
errors, on every device (anygrad/_index.py; docs/python.md, "Indexing")."""
import re
import warnings

import numpy as np
import pytest

import anygrad as ag


def _exc(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return e
    return None


def _np(t):
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def _same(a, t):
    """anygrad tensor a equals torch tensor t: shape, dtype name, values."""
    assert tuple(a.shape) == tuple(t.shape), (tuple(a.shape), tuple(t.shape))
    assert a.dtype.name == str(t.dtype).replace("torch.", ""), (a.dtype, t.dtype)
    assert np.array_equal(_np(a), _np(t)), (_np(a), _np(t))


X34_5 = np.arange(60.0, dtype=np.float32).reshape(3, 4, 5) - 20


def _mk(m, dev, v, dt=None):
    """A tensor of module m (torch or anygrad) holding v."""
    if m is ag:
        return ag.tensor(v, dtype=dt, device=dev)
    import torch
    return torch.tensor(v, dtype=None if dt is None else getattr(torch, dt.name))


def _ix(m, dev, v, dt=ag.int64):
    return _mk(m, dev, v, dt)


def _mask(m, dev, v):
    return _mk(m, dev, v, ag.bool)


# (name, fn(module, device, x) -> x indexed)
READS = [
    ("list", lambda m, d, x: x[[0, 2]]),
    ("list_dim1", lambda m, d, x: x[:, [1, 3]]),
    ("list_neg", lambda m, d, x: x[[-1, 0, -3]]),
    ("list_empty", lambda m, d, x: x[[]]),
    ("list_dup", lambda m, d, x: x[[1, 1, 1]]),
    ("tuple_in_tuple", lambda m, d, x: x[(0, 2), 1]),
    ("ndarray", lambda m, d, x: x[np.array([2, 0])]),
    ("int_slice_list", lambda m, d, x: x[0, :, [1, 2]]),
    ("two_adjacent", lambda m, d, x: x[:, [0, 1], [1, 2]]),
    ("two_separated", lambda m, d, x: x[[0, 1], :, [1, 2]]),
    ("broadcast", lambda m, d, x: x[:, [[0], [1]], [1, 2]]),
    ("broadcast_3", lambda m, d, x: x[[[0], [2]], [[1, 2, 3]], [4]]),
    ("none_ellipsis", lambda m, d, x: x[None, [0, 1], ..., [1, 2]]),
    ("none_between", lambda m, d, x: x[[0, 1], None, [1, 2]]),
    ("ellipsis_list", lambda m, d, x: x[..., [0, 4, 4]]),
    ("step_and_list", lambda m, d, x: x[::2, [0, 3]]),
    ("tensor_1d", lambda m, d, x: x[_ix(m, d, [2, 0])]),
    ("tensor_2d", lambda m, d, x: x[_ix(m, d, [[0, 2], [1, 1]])]),
    ("tensor_neg", lambda m, d, x: x[:, _ix(m, d, [-1, -4])]),
    ("tensor_two", lambda m, d, x: x[_ix(m, d, [0, 2]), :, _ix(m, d, [[4], [0]])]),
    ("tensor_last", lambda m, d, x: x[..., _ix(m, d, [3, 1])]),
    ("mask_rows", lambda m, d, x: x[_mask(m, d, [True, False, True])]),
    ("mask_2d", lambda m, d, x: x[_mask(m, d, (np.arange(12).reshape(3, 4) % 3 == 0).tolist())]),
    ("mask_full", lambda m, d, x: x[x > 10]),
    ("mask_none", lambda m, d, x: x[x > 1000]),
    ("mask_mid", lambda m, d, x: x[:, _mask(m, d, [True, False, True, False])]),
    ("mask_and_index", lambda m, d, x: x[_mask(m, d, [True, False, True]), :, _ix(m, d, [1, 4])]),
    ("mask_list", lambda m, d, x: x[[True, False, True]]),
    ("true_and_list", lambda m, d, x: x[True, [0, 1]]),
    ("int0d_and_list", lambda m, d, x: x[_ix(m, d, 1), [0, 1]]),
    # torch's rule: a short list (or array) holding sequences, slices or None is a tuple of indices
    ("list_of_lists", lambda m, d, x: x[[[0, 1], [1, 0]]]),
    ("list_with_slice", lambda m, d, x: x[[0, slice(None), [1, 2]]]),
    ("list_of_tensors", lambda m, d, x: x[[_ix(m, d, [0, 2]), _ix(m, d, [3, 3])]]),
    ("ndarray_2d", lambda m, d, x: x[np.array([[0, 1], [1, 0]])]),
]


@pytest.mark.parametrize("case", [c[0] for c in READS])
def test_read_as_torch(th, dev, case):
    fn = dict(READS)[case]
    _same(fn(ag, dev, ag.tensor(X34_5, device=dev)), fn(th, None, th.tensor(X34_5)))


@pytest.mark.parametrize("dt", ["float64", "float16", "int64", "int32", "uint8", "bool"])
def test_read_every_dtype(th, dev, dt):
    """The library's index_select reads floating types; integers go through
    f64 (int64 as two exact halves: values past 2^53 come back intact)."""
    v = {"int64": [[2 ** 62 + 5, -7], [3, -(2 ** 63)], [2 ** 53 + 1, 2 ** 63 - 1]],
         "int32": [[2 ** 31 - 1, -7], [3, -(2 ** 31)], [5, 0]],
         "uint8": [[255, 0], [3, 7], [128, 1]], "bool": [[True, False], [False, False], [True, True]]}.get(
        dt, [[1.5, -2.25], [3.0, 1e-3], [7.0, -0.0]])
    a = ag.tensor(v, dtype=getattr(ag, dt if dt != "bool" else "bool_"), device=dev)
    t = th.tensor(v, dtype=getattr(th, dt))
    _same(a[[2, 0, -1]], t[[2, 0, -1]])
    _same(a[:, [1, 1]], t[:, [1, 1]])
    _same(a[[0, 2], [1, 0]], t[[0, 2], [1, 0]])
    _same(a[ag.tensor([[True, False], [False, True], [True, True]], device=dev)],
          t[th.tensor([[True, False], [False, True], [True, True]])])


def test_int32_indices(th, dev):
    """int32 index tensors are read as int64 ones (torch 1.13 refuses them,
    later torch accepts them)."""
    x = ag.tensor(X34_5, device=dev)
    _same(x[ag.tensor([2, -1], dtype=ag.int32, device=dev)], th.tensor(X34_5)[th.tensor([2, -1])])


def test_uint8_index_is_a_mask_with_a_warning(th, dev):
    x = ag.tensor(X34_5, device=dev)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = x[ag.tensor([1, 0, 1], dtype=ag.uint8, device=dev)]
    assert any(issubclass(i.category, UserWarning) and "uint8" in str(i.message) for i in w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(r, th.tensor(X34_5)[th.tensor([1, 0, 1], dtype=th.uint8)])


def test_plain_indices_stay_views(dev):
    x = ag.tensor(X34_5, device=dev)
    v = x[1, ::2, None]
    with ag.no_grad():
        x[[1]] = 7.0
    assert v.tolist() == [[[7.0] * 5]] * 2


# (name, fn(module, device) -> the written tensor)
def _y(m, d, dt=None):
    return _mk(m, d, [[1, -2], [-3, 4], [5, -6]], dt or ag.float32)


def _w_dup(m, d):
    y = _mk(m, d, [0.0] * 5)
    y[_ix(m, d, [1, 1, 1, 3])] = _mk(m, d, [1.0, 2.0, 3.0, 4.0])  # the last write wins
    return y


def _w_mask_scalar(m, d):
    y = _y(m, d)
    y[y < 0] = 0
    return y


def _w_mask_tensor(m, d):
    y = _y(m, d)
    y[_mask(m, d, [True, False, True])] = _mk(m, d, [7.0, 8.0])
    return y


def _w_mask_values(m, d):
    y = _y(m, d)
    y[y > 0] = _mk(m, d, [10.0, 20.0, 30.0])
    return y


def _w_i64(m, d):
    y = _y(m, d, ag.int64)
    y[[0, 2], [1, 1]] = _mk(m, d, [2 ** 60 + 1, -(2 ** 61) - 3], ag.int64)
    return y


def _w_i32_scalar(m, d):
    y = _y(m, d, ag.int32)
    y[:, [1]] = 9
    return y


def _w_bool(m, d):
    y = _mk(m, d, [[True, False], [False, True]], ag.bool)
    y[[0, 1], [1, 1]] = False
    return y


def _w_lead_ones(m, d):
    y = _mk(m, d, [1.0, 2.0, 3.0])
    y[[0, 2]] = _mk(m, d, [[5.0, 6.0]])
    return y


def _w_int_slice_list(m, d):
    y = _mk(m, d, np.arange(24.0).reshape(2, 3, 4).tolist())
    y[0, :, [1, 2]] = _mk(m, d, [[10.0, 11.0], [12.0, 13.0], [14.0, 15.0]])
    return y


def _w_broadcast_rows(m, d):
    y = _mk(m, d, np.zeros((3, 4)).tolist())
    y[_ix(m, d, [[0], [2]]), _ix(m, d, [1, 3])] = _mk(m, d, [1.0, 2.0])
    return y


def _w_neg_tensor(m, d):
    y = _mk(m, d, np.zeros((3, 4)).tolist())
    y[:, _ix(m, d, [-1, 0])] = -1.5
    return y


WRITES = [("dup", _w_dup), ("mask_scalar", _w_mask_scalar), ("mask_tensor", _w_mask_tensor),
          ("mask_values", _w_mask_values), ("i64", _w_i64), ("i32_scalar", _w_i32_scalar),
          ("bool", _w_bool), ("lead_ones", _w_lead_ones), ("int_slice_list", _w_int_slice_list),
          ("broadcast_rows", _w_broadcast_rows), ("neg_tensor", _w_neg_tensor)]


@pytest.mark.parametrize("case", [c[0] for c in WRITES])
def test_write_as_torch(th, dev, case):
    fn = dict(WRITES)[case]
    _same(fn(ag, dev), fn(th, None))


def test_mask_write_casts_a_0d_value(th, dev):
    """x[mask] = 0-d tensor of another dtype is torch's masked_fill_: cast."""
    for m in (th, ag):
        y = _mk(m, dev if m is ag else None, [1, 2, 3], ag.int64)
        y[_mask(m, dev if m is ag else None, [True, False, True])] = _mk(m, dev if m is ag else None, 7.5)
        assert y.tolist() == [7, 2, 7]


def test_write_reaches_views(dev):
    x = ag.zeros(3, 4, device=dev)
    row = x[1]
    x[[1, 2], [0, 3]] = ag.tensor([5.0, 6.0], device=dev)
    assert row.tolist() == [5.0, 0.0, 0.0, 0.0] and x[2, 3].item() == 6.0


# (name, fn(module, device), the torch class): both raise
ERRORS = [
    ("negative_step", lambda m, d: _x(m, d)[::-1]),
    ("negative_step_list", lambda m, d: _x(m, d)[::-2, [0]]),
    ("list_out_of_range", lambda m, d: _x(m, d)[[0, 3]]),
    ("list_neg_out_of_range", lambda m, d: _x(m, d)[:, [-5]]),
    ("false_and_list", lambda m, d: _x(m, d)[False, [0, 1]]),
    ("float_tensor", lambda m, d: _x(m, d)[_mk(m, d, [0.0, 1.0])]),
    ("mask_shape", lambda m, d: _x(m, d)[_mask(m, d, [True, False])]),
    ("mask_shape_2d", lambda m, d: _x(m, d)[_mask(m, d, [[True] * 3] * 3)]),
    ("broadcast", lambda m, d: _x(m, d)[[0, 1], [0, 1, 2]]),
    ("too_many", lambda m, d: _x(m, d)[[0], 0, 0, 0]),
    ("value_shape", lambda m, d: _x(m, d).__setitem__([0, 1], _mk(m, d, [1.0, 2.0, 3.0]))),
    ("value_shape_mask", lambda m, d: _x(m, d).__setitem__(_mask(m, d, [True, False, True]),
                                                           _mk(m, d, [1.0, 2.0, 3.0]))),
    ("write_out_of_range", lambda m, d: _x(m, d).__setitem__([7], 1.0)),
    ("value_dtype", lambda m, d: _x(m, d).__setitem__([0], _mk(m, d, [1], ag.int64))),
    ("value_dtype_mask", lambda m, d: _x(m, d).__setitem__(_mask(m, d, [True, False, True]),
                                                           _mk(m, d, [1, 2], ag.int64))),
    ("empty_write_out_of_range", lambda m, d: _mk(m, d, np.zeros((0, 3))).__setitem__([0], 1.0)),
    ("empty_mask_value", lambda m, d: _mk(m, d, np.zeros((0, 3))).__setitem__(
        _mask(m, d, np.zeros((0, 3), bool)), _mk(m, d, [1.0, 2.0]))),
    ("leaf_write", lambda m, d: _mk(m, d, [1.0, 2.0]).requires_grad_().__setitem__([0], 5.0)),
]


def _x(m, d):
    return _mk(m, d, np.arange(12.0).reshape(3, 4).tolist())


@pytest.mark.parametrize("case", [c[0] for c in ERRORS])
def test_errors_as_torch(th, dev, case):
    fn = dict(ERRORS)[case]
    te, ae = _exc(lambda: fn(th, None)), _exc(lambda: fn(ag, dev))
    assert te is not None and ae is not None, (te, ae)
    assert isinstance(ae, type(te)), (type(ae), type(te), ae)
    if case.startswith("negative_step"):
        assert str(ae) == "step must be greater than zero"
    assert ag._lib.lib.ag_last_status() == 0


def test_float_list_refused(dev):
    """torch 1.13 truncates a list of floats ([0.5, 1.7] reads rows 0 and 1);
    anygrad refuses it as it refuses a float tensor."""
    e = _exc(lambda: _x(ag, dev)[[0.5, 1.7]])
    assert isinstance(e, IndexError) and "long, byte or bool" in str(e), e


def test_refused_write_changes_nothing(dev):
    x = ag.tensor([1.0, 2.0, 3.0], device=dev)
    for fn in (lambda: x.__setitem__([0, 5], 9.0), lambda: x.__setitem__([0, 1], ag.ones(3, device=dev)),
               lambda: x.__setitem__(ag.tensor([True, False], device=dev), 9.0)):
        assert _exc(fn) is not None
    assert x.tolist() == [1.0, 2.0, 3.0]


def test_device_tensor_index_out_of_range(dev):
    """A list is checked at once; an index tensor on a device is found by the
    read (ag_index_select), raised as IndexError at the next sync, as other
    device index errors are (test_traps.py); on the CPU at once."""
    x = ag.tensor(X34_5, device=dev)
    good = x.sum().item()
    for bad in (ag.tensor([0, 3], device=dev), ag.tensor([-4], device=dev)):
        e = _exc(lambda: x[bad].sum().item())
        assert isinstance(e, IndexError) and "out of" in str(e), e
        assert ag._lib.lib.ag_last_status() == 0
    # two index tensors: one index out of range in its dim is out of range merged too
    e = _exc(lambda: x[ag.tensor([0], device=dev), ag.tensor([4], device=dev)].sum().item())
    assert isinstance(e, IndexError), e
    assert x.sum().item() == good and ag._lib.lib.ag_last_status() == 0


def _grad_run(m, dev):
    xn = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    x = _mk(m, dev, xn)
    x.requires_grad_()
    w = _mk(m, dev, [[1.0, 2.0, 3.0, 4.0]])
    w.requires_grad_()
    r = x[[0, 2, 2]][:, [1, 3]]  # duplicates: their gradients add
    r2 = x[x > 0]
    r3 = x[_ix(m, dev, [[1], [2]]), _ix(m, dev, [0, 3])]
    y = x * 2
    y[[1, 1]] = w  # duplicate writes: each gets the gradient at its target, as torch
    y[y < 0] = 0.5
    z = m.zeros(2, 4) if m is not ag else ag.zeros(2, 4, device=dev)
    z[0] = w[0] * 3  # a plain tensor receiving a graph value: part of the graph
    loss = r.sum() * 3 + (r2 * r2).sum() + (y * y).sum() + (r3 * 1.5).sum() + (z * z).sum()
    loss.backward()
    return loss.item(), _np(x.grad), _np(w.grad), y.requires_grad, z.requires_grad


def test_gradients_as_torch(th, dev):
    t, a = _grad_run(th, None), _grad_run(ag, dev)
    assert abs(t[0] - a[0]) < 1e-3 * abs(t[0])
    assert np.allclose(a[1], t[1], atol=1e-5) and np.allclose(a[2], t[2], atol=1e-5), (a, t)
    assert a[3:] == t[3:] == (True, True)


def test_write_in_no_grad_moves_the_version(th, dev):
    """A write under no_grad into a tensor a backward needs is found by the
    version check, as torch's."""
    for m in (th, ag):
        x = _mk(m, dev if m is ag else None, [0.5, -1.0, 2.0])
        x.requires_grad_()
        y = x.sigmoid()  # saves its result
        with m.no_grad():
            y[[0, 2]] = 0.0
        e = _exc(lambda: y.sum().backward())
        assert isinstance(e, RuntimeError) and re.search("modified by an in-?place operation", str(e)), e


def test_duplicate_writes_last_wins_on_every_device(dev):
    """torch leaves the winner of duplicate indices to the device (CUDA: any);
    anygrad takes the last write on every device."""
    y = ag.zeros(4, device=dev)
    idx = ag.tensor([3, 0, 3, 3, 0, 1], device=dev)
    y[idx] = ag.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device=dev)
    assert y.tolist() == [5.0, 6.0, 0.0, 4.0]


@pytest.mark.parametrize("n", [1, 2, 3, 17, 300])
def test_mask_reads_every_pattern(th, dev, n):
    """A device mask's true positions come from a bisection over the running
    count: every count, first and last elements included."""
    r = np.random.RandomState(n)
    v = r.randn(n).astype(np.float32)
    for mask in (r.rand(n) < 0.3, np.ones(n, bool), np.zeros(n, bool), np.arange(n) == n - 1):
        a = ag.tensor(v, device=dev)[ag.tensor(mask, device=dev)]
        _same(a, th.tensor(v)[th.tensor(mask)])


@pytest.mark.parametrize("path", ["device", "host"])
def test_write_paths(th, dev, path, monkeypatch):
    """Small writes on a device find each element's last write there; larger
    ones read the positions back (the library's scatter kernels do
    numel * count work on the devices): both give torch's values."""
    if path == "host":
        monkeypatch.setattr(ag._index, "_DEVICE_WRITE_WORK", 0)
    r = np.random.RandomState(3)
    idx = r.randint(-6, 6, size=40)
    vals = r.randn(40).astype(np.float32)
    res = []
    for m in (th, ag):
        y = _mk(m, dev if m is ag else None, np.zeros((6, 2), np.float32))
        y[_ix(m, dev if m is ag else None, idx.tolist())] = _mk(m, dev if m is ag else None,
                                                                 np.stack([vals, -vals], 1))
        y[_mask(m, dev if m is ag else None, [True, False, True, False, False, True])] = \
            _mk(m, dev if m is ag else None, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        res.append(_np(y))
    assert np.array_equal(res[0], res[1]), res


def test_running_count_across_lines(dev):
    """The count behind device masks runs in lines (a device's loop limit):
    the lines' totals carry over, for a length that does not fill the last."""
    v = (np.random.RandomState(5).rand(103) < 0.5).astype(np.float64)
    for line in (4, 7, 200):
        c = ag._index._running_count(ag.tensor(v, device=dev), line)
        assert c.tolist() == np.cumsum(v).tolist(), line


@pytest.mark.parametrize("dt", ["int64", "int32", "uint8", "bool"])
def test_index_select_and_gather_of_integers(th, dev, dt):
    v = {"int64": [[2 ** 62 + 5, -7, 1], [3, -(2 ** 63), 2 ** 53 + 1]],
         "int32": [[2 ** 31 - 1, -7, 0], [3, 4, 5]], "uint8": [[255, 0, 1], [3, 7, 128]],
         "bool": [[True, False, True], [False, False, True]]}[dt]
    a = ag.tensor(v, dtype=getattr(ag, dt if dt != "bool" else "bool_"), device=dev)
    t = th.tensor(v, dtype=getattr(th, dt))
    _same(ag.index_select(a, 1, ag.tensor([2, 0, 2], device=dev)),
          th.index_select(t, 1, th.tensor([2, 0, 2])))
    gi = [[0, 0], [1, 0]]
    _same(a.gather(0, ag.tensor(gi, device=dev)), t.gather(0, th.tensor(gi)))


def test_multi_dim_mask_then_more_indices(dev):
    """A mask over several dims followed by other indices indexes as NumPy
    (torch 1.13 counts such a mask as one dim for the indices after it and
    mostly raises)."""
    m = (np.arange(12).reshape(3, 4) % 5) < 2
    x = ag.tensor(X34_5, device=dev)
    mt = ag.tensor(m, device=dev)
    for got, want in ((x[mt, 1], X34_5[m, 1]), (x[mt, None, 1:4], X34_5[m, None, 1:4]),
                      (x[mt, [[0], [4]]], X34_5[m, [[0], [4]]])):
        assert tuple(got.shape) == want.shape and got.numpy().tolist() == want.tolist()


def _random_index(rng, shape, th, dev):
    """A random mix of ints, slices, None, lists, index tensors and masks
    for a tensor of `shape`, as (torch's index, anygrad's index)."""
    it, ia, d, nd = [], [], 0, len(shape)
    while d < nd:
        r, n = rng.rand(), shape[d]
        if r < 0.1:
            it.append(None)
            ia.append(None)
            continue
        if r < 0.3:
            k = int(rng.randint(-n, n))
            it.append(k)
            ia.append(k)
        elif r < 0.5:
            s = slice([None, 0, 1][rng.randint(3)], [None, n, -1][rng.randint(3)],
                      [None, 1, 2][rng.randint(3)])
            it.append(s)
            ia.append(s)
        elif r < 0.75:
            v = rng.randint(-n, n, size=[(2,), (1,), (2, 1), (3,)][rng.randint(4)])
            it.append(th.tensor(v))
            ia.append(ag.tensor(v, device=dev))
        elif r < 0.85:
            v = rng.randint(-n, n, size=2).tolist()
            it.append(v)
            ia.append(v)
        else:
            k = 1 if d == nd - 1 else int(rng.randint(1, 3))
            m = rng.rand(*shape[d:d + k]) < 0.5
            it.append(th.tensor(m))
            ia.append(ag.tensor(m, device=dev))
            if k > 1:
                break  # torch 1.13 misplaces indices after a mask of several dims
            d += k
            continue
        d += 1
    return tuple(it), tuple(ia)


def test_random_indices_as_torch(th, dev):
    """Reads and writes of random index mixes: values, shapes, exception types."""
    rng = np.random.RandomState(11)
    for _ in range(150 if dev == "cpu" else 25):
        shape = [int(s) for s in rng.randint(1, 5, size=rng.randint(1, 5))]
        xn = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        it, ia = _random_index(rng, shape, th, dev)
        te = _exc(lambda: th.tensor(xn)[it])
        ae = _exc(lambda: ag.tensor(xn, device=dev)[ia].numpy())
        if te is not None or ae is not None:
            assert te is not None and isinstance(ae, type(te)), (shape, it, te, ae)
            continue
        t, a = th.tensor(xn)[it], ag.tensor(xn, device=dev)[ia]
        assert tuple(a.shape) == tuple(t.shape) and np.array_equal(a.numpy(), t.numpy()), (shape, it)
        v = np.asarray(rng.randn(*t.shape), dtype=np.float32)
        xt, xa = th.tensor(xn), ag.tensor(xn, device=dev)
        xt[it] = th.tensor(v)
        xa[ia] = ag.tensor(v, device=dev)
        assert np.array_equal(xa.numpy(), xt.numpy()), (shape, it)
