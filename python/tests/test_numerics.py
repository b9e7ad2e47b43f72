"""The numerics mode (docs/numerics.md): set_numerics / get_numerics, the
error of a word that is no mode, and an elementwise op in portable mode that
runs with the bits of one correct rounding or is refused cleanly."""
import numpy as np
import pytest

import anygrad as ag


@pytest.fixture
def restore_mode():
    before = ag.get_numerics()
    yield
    ag.set_numerics(before)


def test_set_and_get(restore_mode):
    ag.set_numerics("portable")
    assert ag.get_numerics() == "portable"
    ag.set_numerics("default")
    assert ag.get_numerics() == "default"


@pytest.mark.parametrize("bad", ["fast", "Portable", "", "portable\0x"])
def test_bad_value_is_a_value_error(restore_mode, bad):
    ag.set_numerics("default")
    with pytest.raises(ValueError, match="is not default or portable"):
        ag.set_numerics(bad)
    assert ag.get_numerics() == "default"  # kept


def test_not_a_string(restore_mode):
    with pytest.raises(TypeError, match="must be str"):
        ag.set_numerics(1)


def test_cpu_elementwise_runs_or_is_refused(restore_mode):
    a = np.array([1.0, 2.5, -3.0, 1e-3], dtype=np.float32)
    b = np.array([0.5, -1.0, 7.0, 3e-3], dtype=np.float32)
    x, y = ag.tensor(a), ag.tensor(b)
    ag.set_numerics("portable")
    try:
        z = x + y
    except ag.UnsupportedError as e:
        assert "portable numerics" in str(e)  # named as a refusal of the mode
    else:
        got = z.numpy()
        assert got.dtype == np.float32
        assert got.view(np.uint32).tolist() == (a + b).view(np.uint32).tolist()
    ag.set_numerics("default")
    assert (x + y).numpy().tolist() == (a + b).tolist()  # the default mode is untouched
