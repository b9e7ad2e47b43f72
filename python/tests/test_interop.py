"""DLPack both ways with NumPy and PyTorch: the memory is shared (a write
through one is read through the other) and the producer outlives the
consumer's need of it."""
import gc

import numpy as np
import pytest

import anygrad as ag

torch = pytest.importorskip("torch")
DTYPES = [(ag.float32, np.float32), (ag.float64, np.float64), (ag.int32, np.int32),
          (ag.int64, np.int64), (ag.uint8, np.uint8), (ag.float16, np.float16)]


@pytest.mark.parametrize("dt,npdt", DTYPES, ids=[d[0].name for d in DTYPES])
def test_anygrad_to_numpy_shares_memory(dt, npdt):
    x = ag.arange(12, dtype=dt).reshape(3, 4)
    n = np.from_dlpack(x)
    assert n.dtype == npdt and n.shape == (3, 4)
    x[1, 2] = 99  # written through anygrad, read through NumPy
    assert n[1, 2] == 99
    del x
    gc.collect()
    assert n[1, 2] == 99 and n.sum() == sum(range(12)) - 6 + 99  # the consumer keeps the memory


def test_strided_view_to_numpy():
    x = ag.arange(20, dtype=ag.float32).reshape(4, 5)
    v = x[1:, ::2].T
    n = np.from_dlpack(v)
    np.testing.assert_array_equal(n, np.arange(20, dtype=np.float32).reshape(4, 5)[1:, ::2].T)
    x[2, 2] = -1
    assert n[1, 1] == -1


@pytest.mark.parametrize("dt,npdt", DTYPES, ids=[d[0].name for d in DTYPES])
def test_numpy_to_anygrad_shares_memory(dt, npdt):
    a = np.arange(6, dtype=npdt).reshape(2, 3)
    t = ag.from_dlpack(a)
    assert t.dtype is dt and t.shape == (2, 3)
    a[0, 1] = 42  # written through NumPy, read through anygrad
    assert t[0, 1].item() == 42
    t[1, 0] = 7  # and the other way
    assert a[1, 0] == 7
    del a
    gc.collect()
    assert t.numpy()[0, 1] == 42  # the producer lives while the tensor does


def test_torch_round_trip_both_ways():
    x = ag.zeros(2, 3)
    tt = torch.utils.dlpack.from_dlpack(x)
    tt[0, 0] = 5.0
    assert x[0, 0].item() == 5.0
    x[1, 2] = 9.0
    assert tt[1, 2].item() == 9.0
    tp = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = ag.from_dlpack(tp)
    t[1] = -1.0
    assert tp[1].tolist() == [-1.0, -1.0, -1.0]
    tp[0, 0] = 11
    assert t[0, 0].item() == 11
    # through the capsule interface as well
    t2 = ag.from_dlpack(torch.utils.dlpack.to_dlpack(tp))
    assert t2.sum().item() == tp.sum().item()
    del tp
    gc.collect()
    assert t.sum().item() == t2.sum().item()


def test_torch_noncontiguous_and_grad_through_import():
    tp = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    t = ag.from_dlpack(tp)
    assert t.stride() == tuple(tp.stride())
    np.testing.assert_array_equal(t.numpy(), tp.numpy())
    w = ag.from_dlpack(torch.ones(4))
    w.requires_grad = True
    (w * 3).sum().backward()
    assert w.grad.numpy().tolist() == [3.0] * 4


def test_unconsumed_capsule_and_bad_inputs():
    live = ag.live_tensors()
    for _ in range(100):
        ag.ones(3).__dlpack__()  # dropped unconsumed: the destructor frees it
    gc.collect()
    assert ag.live_tensors() == live
    with pytest.raises(TypeError):
        ag.from_dlpack([1, 2])
    cap = np.ones(2).__dlpack__()
    ag.from_dlpack(cap)
    with pytest.raises(ValueError, match="consumed"):
        ag.from_dlpack(cap)
    assert ag.ones(2).__dlpack_device__() == (1, 0)


def test_opencl_exports_refuse_or_describe(dev):
    x = ag.ones(2, device=dev)
    if dev == "cpu":
        assert np.from_dlpack(x).tolist() == [1.0, 1.0]
    elif dev.startswith("opencl"):
        with pytest.raises(BufferError, match="cpu"):
            np.from_dlpack(x)
    else:  # gpuemu has no DLPack form: the library's message
        with pytest.raises(ValueError, match="DLPack"):
            np.from_dlpack(x)
    assert x.to("cpu").numpy().tolist() == [1.0, 1.0]
