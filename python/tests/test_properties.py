"""Property-based tests (hypothesis): shapes, strides, views and dtypes agree
with NumPy. Bounded: few examples, small shapes, no deadline."""
import numpy as np
import pytest

hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import anygrad as ag  # noqa: E402

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16]
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


@SETTINGS
@given(st.sampled_from(DTYPES).flatmap(lambda dt: hnp.arrays(dt, shapes)))
def test_round_trip_any_dtype_and_shape(a):
    t = ag.tensor(a)
    assert tuple(t.shape) == a.shape and t.dtype.np == a.dtype.type
    np.testing.assert_array_equal(t.numpy(), a)
    if a.dtype != np.bool_:  # NumPy 1.24 exports no bool through DLPack
        d = ag.from_dlpack(a)
        assert d.shape == a.shape
        np.testing.assert_array_equal(d.numpy(), a)


@SETTINGS
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=6),
                  elements=st.floats(-10, 10, width=32)), st.data())
def test_slices_and_permutes_are_views_like_numpy(a, data):
    t = ag.tensor(a)
    idx = tuple(slice(data.draw(st.integers(-7, 7)), data.draw(st.integers(-7, 7)),
                      data.draw(st.integers(1, 3))) for _ in range(a.ndim))
    v, nv = t[idx], a[idx]
    assert tuple(v.shape) == nv.shape
    np.testing.assert_array_equal(v.numpy(), nv)
    perm = data.draw(st.permutations(range(a.ndim)))
    p = t.permute(*perm)
    np.testing.assert_array_equal(p.numpy(), a.transpose(perm))
    assert p.stride() == tuple(s // 4 for s in np.ascontiguousarray(a).transpose(perm).strides)
    np.testing.assert_array_equal(np.from_dlpack(p), a.transpose(perm))


@SETTINGS
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4), st.data())
def test_broadcasting_arithmetic_and_reductions(shapes_, data):
    (sa, sb), _ = shapes_
    a = data.draw(hnp.arrays(np.float32, sa, elements=st.floats(-4, 4, width=32)))
    b = data.draw(hnp.arrays(np.float32, sb, elements=st.floats(-4, 4, width=32)))
    r = ag.tensor(a) * ag.tensor(b) - ag.tensor(b)
    np.testing.assert_allclose(r.numpy(), a * b - b, rtol=1e-6, atol=1e-6)
    if r.ndim:
        dim = data.draw(st.integers(-r.ndim, r.ndim - 1))
        np.testing.assert_allclose(r.sum(dim=dim, keepdim=True).numpy(),
                                   (a * b - b).sum(axis=dim, keepdims=True), rtol=1e-5, atol=1e-5)
