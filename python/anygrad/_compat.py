"""Small pieces PyTorch programs use that nothing else in the package
provides: triu and tril (functions and Tensor methods), as torch 1.13's,
built from arange, a comparison and where, so they run on every device
and differentiate (the gradient is masked the same way); is_tensor."""
from . import _ops
from ._tensor import Tensor, _tensor_in, _int_arg, arange, zeros_like

__all__ = ["triu", "tril", "is_tensor"]


def _band(x, diagonal, fn, upper):
    x = _tensor_in(x, fn)
    k = _int_arg(diagonal, fn, "diagonal", 2)
    if x.ndim < 2:
        raise IndexError("%s(): Dimension out of range (expected to be in range of [-1, 0], but got -2): "
                         "the input needs at least 2 dimensions" % fn)
    n, m = x.shape[-2], x.shape[-1]
    off = arange(m, device=x.device).unsqueeze(0) - arange(n, device=x.device).unsqueeze(1)
    keep = off >= k if upper else off <= k
    return _ops.where(keep, x, zeros_like(x))


def triu(input, diagonal=0):  # noqa: A002
    """The upper triangle of the last two dims (j - i >= diagonal), zeros elsewhere."""
    return _band(input, diagonal, "triu", True)


def tril(input, diagonal=0):  # noqa: A002
    """The lower triangle of the last two dims (j - i <= diagonal), zeros elsewhere."""
    return _band(input, diagonal, "tril", False)


def is_tensor(obj):
    """Whether obj is an anygrad Tensor (a Parameter is one)."""
    return isinstance(obj, Tensor)


Tensor.triu = triu
Tensor.tril = tril
