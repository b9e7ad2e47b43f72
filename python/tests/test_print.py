"""print(tensor) through ag_tensor_format: torch's layout (str(tensor) of
Debian's torch where it is installed), on every present device."""
import numpy as np

import anygrad as ag


def test_str_matches_torch(th, dev):
    rng = np.random.default_rng(3)
    for arr in (rng.standard_normal((3, 4)).astype(np.float32),
                rng.standard_normal(2000).astype(np.float32),
                np.arange(12, dtype=np.int64).reshape(3, 4),
                np.array([1.5, np.nan, np.inf], dtype=np.float32)):
        t = th.tensor(arr)
        want = str(t)
        if dev != "cpu":  # torch's own layout with anygrad's device suffix
            want = th._tensor_str._add_suffixes("tensor(" + th._tensor_str._tensor_str(t, 7),
                                                ["device='%s'" % dev], 7, False)
        assert str(ag.tensor(arr, device=dev)) == want


def test_str_dtype_suffix_and_released():
    t = ag.tensor(np.array([1, -20, 300], dtype=np.int32))
    assert str(t) == "tensor([  1, -20, 300], dtype=int32)"
    t.release()
    assert str(t) == "tensor(<released>)"
