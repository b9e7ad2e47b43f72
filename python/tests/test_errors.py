"""Every failure is an exception carrying the library's message, never a crash;
tensors die with their Python objects and leave memory flat."""
import gc
import math
import os
import resource

import numpy as np
import pytest

import anygrad as ag


def test_shape_and_dtype_errors_are_value_errors(dev):
    a = ag.ones(2, 3, device=dev)
    with pytest.raises(ValueError, match="cannot be multiplied"):
        a @ a
    with pytest.raises(ValueError, match="AG_ERR_SHAPE"):
        a + ag.ones(4, device=dev)
    with pytest.raises(ValueError):
        ag.sum(a, dim=5)
    with pytest.raises(ValueError):
        a.reshape(7)
    with pytest.raises(ValueError, match="AG_ERR_DTYPE"):
        ag.exp(ag.ones(2, dtype=ag.int32, device=dev))
    with pytest.raises(ValueError):
        ag.ones(2, dtype=ag.int32, device=dev).requires_grad = True


def test_message_is_the_c_message():
    with pytest.raises(ValueError) as e:
        ag.matmul(ag.ones(2, 3), ag.ones(2, 3))
    assert "ag_matmul" in str(e.value)
    # the error was consumed: the next call starts clean
    assert ag.ones(1).item() == 1.0


def test_wrong_python_types():
    a = ag.ones(2)
    for bad in ("x", None, [1, 2], object()):
        with pytest.raises(TypeError):
            ag.exp(bad)
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError):
        ag.zeros(2.5)
    with pytest.raises(TypeError):
        ag.tensor([1, "a"])
    with pytest.raises(TypeError):
        ag.leaky_relu(a, "slope")
    with pytest.raises(TypeError):
        ag.device(3)
    with pytest.raises(TypeError):
        a.sum(dim="0")


def test_invalid_scalars():
    a = ag.ones(2, requires_grad=True)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            ag.functional.dropout(a, bad)
        with pytest.raises(ValueError):
            ag.optim.AdamW([a], lr=bad)
        with pytest.raises(ValueError):
            ag.functional.layer_norm(a, None, eps=bad)
        with pytest.raises(ValueError):
            ag.arange(0, bad)
    with pytest.raises(ValueError):
        ag.clamp(a, math.nan, 1)
    with pytest.raises(ValueError):
        ag.optim.SGD([a], lr=-1)
    with pytest.raises(ValueError):
        ag.functional.dropout(a, 1.5)


def test_huge_and_bad_shapes():
    with pytest.raises(ValueError):
        ag.zeros(1 << 40, 1 << 40)
    with pytest.raises(ValueError):
        ag.zeros(-3)
    with pytest.raises(ValueError):
        ag.zeros(*([1] * 9))
    with pytest.raises(ValueError):
        ag.ones(4).expand(1 << 62, 8)


def test_device_oom_is_catchable_and_retry_works():
    ag.empty_cache("cpu")
    ag.set_memory_cap("cpu", 64 << 20)
    try:
        with pytest.raises(ag.OutOfMemoryError) as e:
            ag.empty(256 << 20, dtype=ag.uint8)
        assert isinstance(e.value, MemoryError) and "AG_ERR_OOM" in str(e.value)
        x = ag.zeros(1 << 20)  # the retry with a smaller request succeeds
        assert x.sum().item() == 0
        assert ag.memory_stats("cpu")["num_ooms"] >= 1
    finally:
        ag.set_memory_cap("cpu", 0)


def test_released_tensor_and_bad_devices():
    a = ag.ones(3)
    b = a[1:]
    a.release()
    with pytest.raises(RuntimeError, match="released"):
        a + 1
    with pytest.raises(RuntimeError, match="released"):
        a.shape
    assert repr(a) == "tensor(<released>)"
    assert b.sum().item() == 2.0  # the view keeps the storage
    with pytest.raises(ValueError):
        ag.ones(2, device="nosuch:0")
    with pytest.raises(Exception) as e:
        ag.ones(2, device="cpu:7")
    assert isinstance(e.value, (ValueError, ag.AnygradError))


def test_mixed_devices(dev):
    if dev == "cpu":
        pytest.skip("needs a second device")
    with pytest.raises(ag.DeviceError, match="one device"):
        ag.ones(2) + ag.ones(2, device=dev)
    assert isinstance(ag.DeviceError("x"), ValueError)


def test_autograd_state_errors():
    a = ag.ones(2, requires_grad=True)
    y = (a * 2).sum()
    y.backward()
    with pytest.raises(ag.AnygradError):
        y.backward()  # the graph was freed
    with pytest.raises(ValueError):
        (a * 2).backward()  # not a scalar
    with pytest.raises(RuntimeError, match="leaf"):
        a.fill_(3)  # a leaf that requires grad, in grad mode: torch's RuntimeError
    with ag.no_grad():
        a.fill_(3)
    assert a.sum().item() == 6


def test_item_and_bool_rules():
    with pytest.raises(ValueError):
        ag.ones(2).item()
    with pytest.raises(ValueError):
        bool(ag.ones(2))
    assert ag.tensor(3).item() == 3 and isinstance(ag.tensor(3).item(), int)
    big = 2 ** 53 + 1  # a double rounds it; item() is exact as torch's is
    assert ag.tensor(big).item() == big and ag.tensor(-big).item() == -big
    assert ag.tensor(2 ** 63 - 1).item() == 2 ** 63 - 1
    assert ag.tensor(True).item() is True and isinstance(ag.tensor(2.5).item(), float)


def _rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_create_release_cycles_leave_memory_flat(dev):
    n = int(os.environ.get("ANYGRAD_LEAK_CYCLES", "20000"))
    x = ag.ones(64, device=dev)

    def cycle(k):
        for _ in range(k):
            y = (x * 2 + 1)[3:9]
            z = ag.tensor([1.0, 2.0], device=dev)
            del y, z

    cycle(2000)
    gc.collect()
    mem0, live0, rss0 = ag.memory_allocated(dev), ag.live_tensors(), _rss_kb()
    cycle(n)
    gc.collect()
    assert ag.memory_allocated(dev) == mem0
    assert ag.live_tensors() == live0
    assert _rss_kb() - rss0 < 4096, "RSS grew by %d KiB" % (_rss_kb() - rss0)


def test_numpy_scalars_and_bfloat16_data():
    t = ag.ones(3)
    r = np.float32(2) * t
    assert isinstance(r, ag.Tensor) and r.tolist() == [2.0, 2.0, 2.0]
    assert isinstance(t + np.float64(1), ag.Tensor)
    b = ag.tensor([1.5, 2.0], dtype=ag.bfloat16, requires_grad=True)
    assert b.dtype is ag.bfloat16 and b.requires_grad and b.float().tolist() == [1.5, 2.0]
    with pytest.raises(TypeError):
        ag.tensor(np.array(["a"]))
