"""torch 1.13's dtype rules (anygrad/_dtype_rules.py; docs/python.md, "dtype
rules"): integer // and % stay integers (rounding toward -inf), integer /
gives float32, mean() of integers is refused, matmul does not promote,
cross_entropy's target dtypes, NumPy dtypes anygrad lacks, from_numpy()
sharing the array's memory."""
import gc
import warnings

import numpy as np
import pytest

import anygrad as ag
import anygrad.functional as F


def _exc(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the exception is the result
        return e
    return None


def _same(a, t):
    assert tuple(a.shape) == tuple(t.shape), (tuple(a.shape), tuple(t.shape))
    assert a.dtype.name == str(t.dtype).replace("torch.", ""), (a.dtype, t.dtype)
    assert np.array_equal(a.cpu().numpy(), t.numpy()), (a.tolist(), t.tolist())


BIG = [2 ** 62 + 1, -(2 ** 63) + 5, 2 ** 53 + 3, -(2 ** 53) - 1, 7, -7, 0, 9007199254740993]


def _v(m, dev, v, dt):
    if m is ag:
        return ag.tensor(v, dtype=getattr(ag, dt), device=dev)
    return m.tensor(v, dtype=getattr(m, dt))


# (name, fn(module, device))
ARITH = [
    ("i64_floordiv_pos", lambda m, d: _v(m, d, [-7, 7, -8, 5, 0], "int64") // 2),
    ("i64_floordiv_neg", lambda m, d: _v(m, d, [-7, 7, -8, 5, 0], "int64") // -2),
    ("i64_floordiv_big", lambda m, d: _v(m, d, BIG, "int64") // 3),
    ("i64_floordiv_big_neg", lambda m, d: _v(m, d, BIG, "int64") // -(2 ** 40 + 7)),
    ("i64_floordiv_tensor", lambda m, d: _v(m, d, BIG, "int64") // _v(m, d, [3, -5, 2 ** 62, -9, 1, -1, 4, 7],
                                                                         "int64")),
    ("i32_floordiv", lambda m, d: _v(m, d, [-(2 ** 31), 2 ** 31 - 1, -7, 7], "int32") // 3),
    ("i32_floordiv_i64", lambda m, d: _v(m, d, [-7, 7], "int32") // _v(m, d, [2, -2], "int64")),
    ("u8_floordiv", lambda m, d: _v(m, d, [255, 7, 0], "uint8") // 2),
    ("rfloordiv", lambda m, d: 7 // _v(m, d, [2, -2, 3], "int64")),
    ("int_floordiv_float", lambda m, d: _v(m, d, [7, -7], "int64") // 2.5),
    ("float_floordiv", lambda m, d: _v(m, d, [7.5, -7.5], "float32") // 2),
    ("i64_mod", lambda m, d: _v(m, d, [-7, 7, -8, 5, 0], "int64") % 3),
    ("i64_mod_neg", lambda m, d: _v(m, d, [-7, 7, -8, 5, 0], "int64") % -3),
    ("i64_mod_big", lambda m, d: _v(m, d, BIG, "int64") % 1000003),
    ("i64_mod_tensor", lambda m, d: _v(m, d, BIG, "int64") % _v(m, d, [3, -5, 2 ** 62, -9, 1, -1, 4, 7],
                                                                    "int64")),
    ("i32_mod", lambda m, d: _v(m, d, [-(2 ** 31), 2 ** 31 - 1, -7, 7], "int32") % -3),
    ("rmod", lambda m, d: 7 % _v(m, d, [2, -2, 3], "int64")),
    ("int_mod_float", lambda m, d: _v(m, d, [7, -7], "int64") % 2.5),
    ("remainder_fn", lambda m, d: m.remainder(_v(m, d, [-7, 7], "int32"), 4)),
    ("floor_divide_fn", lambda m, d: m.floor_divide(_v(m, d, [-7, 7], "int64"), 4)),
    ("true_div_tensors", lambda m, d: _v(m, d, [7, -7, 1], "int64") / _v(m, d, [2, 2, 3], "int64")),
    ("true_div_scalar", lambda m, d: _v(m, d, [7, -7], "int32") / 2),
    ("rtrue_div", lambda m, d: 3 / _v(m, d, [2, -4], "int64")),
    ("true_div_mixed_ints", lambda m, d: _v(m, d, [7, -7], "int32") / _v(m, d, [2, 4], "int64")),
    ("div_floor", lambda m, d: m.div(_v(m, d, [-7, 7, -8], "int64"), 2, rounding_mode="floor")),
    ("div_trunc", lambda m, d: m.div(_v(m, d, [-7, 7, -8, 5], "int64"), _v(m, d, [2, -2, 3, -3], "int64"),
                                     rounding_mode="trunc")),
    ("div_trunc_float", lambda m, d: m.div(_v(m, d, [-7.5, 7.5], "float32"), 2, rounding_mode="trunc")),
    ("bool_floordiv_int", lambda m, d: _v(m, d, [True, False], "bool") // 2),
    ("bool_mod_int", lambda m, d: _v(m, d, [True, False], "bool") % 2),
    ("div_method_floor", lambda m, d: _v(m, d, [-7, 7], "int64").div(2, rounding_mode="floor")),
]


@pytest.mark.parametrize("case", [c[0] for c in ARITH])
def test_integer_arithmetic_as_torch(th, dev, case):
    fn = dict(ARITH)[case]
    _same(fn(ag, dev), fn(th, None))


ARITH_ERRORS = [
    ("floordiv_zero", lambda m, d: _v(m, d, [1, 2], "int64") // 0),
    ("mod_zero", lambda m, d: _v(m, d, [1, 2], "int32") % 0),
    ("floordiv_bool", lambda m, d: _v(m, d, [True], "bool") // _v(m, d, [True], "bool")),
    ("div_bad_mode", lambda m, d: m.div(_v(m, d, [1], "int64"), 2, rounding_mode="round")),
    ("mean_long", lambda m, d: _v(m, d, [1, 2], "int64").mean()),
    ("mean_int_dim", lambda m, d: _v(m, d, [[1, 2]], "int32").mean(0)),
    ("mean_uint8", lambda m, d: m.mean(_v(m, d, [1, 2], "uint8"))),
    ("mean_dtype_long", lambda m, d: _v(m, d, [1.0, 2.0], "float32").mean(dtype=m.int64)),
    ("matmul_f32_f64", lambda m, d: m.ones(2, 2) @ m.ones(2, 2, dtype=m.float64)),
    ("matmul_f64_f32", lambda m, d: m.ones(2, 3, 2, dtype=m.float64) @ m.ones(2, 2)),
    ("matmul_long_float", lambda m, d: m.ones(2, 2, dtype=m.int64) @ m.ones(2, 2)),
    ("dot_f32_f64", lambda m, d: m.matmul(m.ones(2), m.ones(2, dtype=m.float64))),
]


@pytest.mark.parametrize("case", [c[0] for c in ARITH_ERRORS])
def test_refused_as_torch(th, case):
    fn = dict(ARITH_ERRORS)[case]
    te, ae = _exc(lambda: fn(th, None)), _exc(lambda: fn(ag, "cpu"))
    assert te is not None and ae is not None, (te, ae)
    assert type(ae) is type(te) or isinstance(ae, type(te)), (type(ae), type(te), ae)
    if case.startswith(("mean", "matmul", "dot")) or "zero" in case:
        assert str(ae).startswith(str(te)), (str(ae), str(te))  # torch's words (anygrad may add to them)
    assert ag._lib.lib.ag_last_status() == 0


def test_inplace_floordiv_and_mod(th, dev):
    """//= and %= write in place (a view sees it), integers staying integers."""
    res = []
    for m in (th, ag):
        x = _v(m, dev, [-7, 7, -8, 5], "int64")
        v = x[1:3]
        x //= 2
        x %= 3
        res.append((x.tolist(), v.tolist(), str(x.dtype).split(".")[-1]))
    assert res[0] == res[1], res


def test_integer_matmul_refused():
    """torch's CPU multiplies integer matrices (its CUDA refuses them); the
    library's matmul takes floating dtypes: a RuntimeError naming the dtype."""
    e = _exc(lambda: ag.ones(2, 2, dtype=ag.int64) @ ag.ones(2, 2, dtype=ag.int64))
    assert isinstance(e, RuntimeError) and "Long" in str(e)


def test_zero_tensor_divisor_gives_zero(dev):
    """torch's CPU raises ZeroDivisionError for a tensor divisor holding 0
    (after reading it); anygrad does not read a tensor back for it: the
    quotient and the remainder there are 0."""
    a, b = ag.tensor([7, -7, 5], device=dev), ag.tensor([0, 2, 0], device=dev)
    assert (a // b).tolist() == [0, -4, 0] and (a % b).tolist() == [7, 1, 5]


def test_mean_with_a_floating_dtype(th, dev):
    a = ag.tensor([1, 2, 4], device=dev).mean(dtype=ag.float32)
    assert a.dtype is ag.float32 and abs(a.item() - 7 / 3) < 1e-6


# ---- cross_entropy targets ----------------------------------------------------------------

X = np.random.RandomState(1).randn(4, 5).astype(np.float32)
Y = [0, 4, 2, 1]


@pytest.mark.parametrize("dt", ["int64", "uint8"])
def test_cross_entropy_targets_torch_accepts(th, dev, dt):
    a = F.cross_entropy(ag.tensor(X, device=dev), ag.tensor(Y, dtype=getattr(ag, dt), device=dev))
    t = th.nn.functional.cross_entropy(th.tensor(X), th.tensor(Y, dtype=getattr(th, dt)))
    assert abs(a.item() - t.item()) < 1e-5


@pytest.mark.parametrize("dt", ["int32", "bool", "float32"])
def test_cross_entropy_targets_torch_refuses(th, dt):
    yt = th.tensor(Y, dtype=getattr(th, dt))
    te = _exc(lambda: th.nn.functional.cross_entropy(th.tensor(X), yt))
    ya = ag.tensor(Y, dtype=getattr(ag, dt if dt != "bool" else "bool_"))
    ae = _exc(lambda: F.cross_entropy(ag.tensor(X), ya))
    assert te is not None and isinstance(ae, type(te)), (te, ae)
    if dt != "float32":  # (a float target of another shape: anygrad says what a float target must be)
        assert str(ae).startswith(str(te)), (str(ae), str(te))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probabilities(th, dev, reduction):
    p = np.random.RandomState(2).rand(4, 5).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    xa = ag.tensor(X, device=dev, requires_grad=True)
    xt = th.tensor(X, requires_grad=True)
    la = F.cross_entropy(xa, ag.tensor(p, device=dev), reduction=reduction)
    lt = th.nn.functional.cross_entropy(xt, th.tensor(p), reduction=reduction)
    assert np.allclose(la.detach().cpu().numpy(), lt.detach().numpy(), atol=1e-5)
    la.sum().backward()
    lt.sum().backward()
    assert np.allclose(xa.grad.cpu().numpy(), xt.grad.numpy(), atol=1e-5)


# ---- NumPy ---------------------------------------------------------------------------

@pytest.mark.parametrize("npdt,want", [("int8", "int32"), ("int16", "int32"), ("uint16", "int32"),
                                       ("uint32", "int64"), ("uint64", "int64")])
def test_numpy_dtypes_anygrad_lacks(npdt, want):
    """Converted to the nearest anygrad dtype that holds every value (torch
    keeps int8/int16 and refuses the unsigned ones but uint8)."""
    info = np.iinfo(npdt)
    a = np.array([info.min, 0, 7, min(info.max, 2 ** 63 - 1)], dtype=npdt)
    for fn in (ag.tensor, ag.as_tensor):
        t = fn(a)
        assert t.dtype.name == want and t.tolist() == a.tolist(), (fn, t)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = ag.from_numpy(a)
    assert t.dtype.name == want and t.tolist() == a.tolist()
    assert any("copied" in str(i.message) for i in w)


def test_numpy_values_out_of_range_and_other_kinds(th):
    e = _exc(lambda: ag.tensor(np.array([2 ** 64 - 1], dtype=np.uint64)))
    assert isinstance(e, RuntimeError) and "overflow" in str(e)
    for bad in (np.array(["a"]), np.array([object()])):
        te = _exc(lambda: th.tensor(bad))
        ae = _exc(lambda: ag.tensor(bad))
        assert isinstance(ae, TypeError) and isinstance(te, TypeError), (ae, te)


def test_from_numpy_shares_memory(th):
    a = np.arange(6, dtype=np.float32)
    t = ag.from_numpy(a)
    a[0] = 100
    assert t[0].item() == 100.0
    t[1] = 50.0
    t.add_(1.0)
    assert a.tolist() == [101.0, 51.0, 3.0, 4.0, 5.0, 6.0]
    assert t.data_ptr() == a.ctypes.data
    for dt in (np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16):
        b = np.zeros(3, dtype=dt)
        tb = ag.from_numpy(b)
        assert tb.dtype.name == str(th.from_numpy(b).dtype).replace("torch.", "")
        tb[2] = 1
        assert b[2] == 1, dt


def test_from_numpy_strided_and_kept_alive():
    base = np.arange(12.0).reshape(3, 4)
    b = base[:, ::2]
    t = ag.from_numpy(b)
    assert t.stride() == (4, 2) and t.tolist() == b.tolist()
    t[0, 1] = -1.0
    assert base[0, 2] == -1.0
    tr = ag.from_numpy(base.T)
    assert tr.stride() == (1, 4) and tr.tolist() == base.T.tolist()
    v = ag.from_numpy(np.arange(4.0))[1:3]  # the array's only owner is the tensor
    gc.collect()
    assert v.tolist() == [1.0, 2.0]
    keep = len(ag._dtype_rules._shared)
    del v
    gc.collect()
    assert len(ag._dtype_rules._shared) == keep - 1  # released with the last tensor


def test_from_numpy_refusals_as_torch(th):
    for bad in (np.arange(3.0)[::-1], [1.0, 2.0]):
        te, ae = _exc(lambda: th.from_numpy(bad)), _exc(lambda: ag.from_numpy(bad))
        assert te is not None and type(ae) is type(te), (te, ae)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = ag.from_numpy(ro)
    assert any(issubclass(i.category, UserWarning) and "not writable" in str(i.message) for i in w)
    assert t.tolist() == [0.0, 1.0, 2.0]
    t[0] = 5.0  # a copy: the read-only array is not written
    assert ro[0] == 0.0


def test_as_tensor(th, dev):
    a = np.zeros(3, dtype=np.float32)
    t = ag.as_tensor(a)
    t[0] = 5.0
    assert a[0] == 5.0  # shared, as torch.as_tensor
    c = ag.as_tensor(a, dtype=ag.float64)
    c[1] = 1.0
    assert a[1] == 0.0 and c.dtype is ag.float64
    x = ag.ones(2, device=dev)
    assert ag.as_tensor(x) is x and ag.as_tensor(x, device=dev) is x
    assert ag.as_tensor(x, dtype=ag.float64).dtype is ag.float64
    assert ag.as_tensor([1, 2]).dtype is ag.int64
    d = ag.as_tensor(a, device=dev)
    assert str(d.device) == dev and d.tolist() == a.tolist()
