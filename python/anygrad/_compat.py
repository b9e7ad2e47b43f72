"""Small pieces PyTorch programs use that nothing else in the package
provides: triu and tril (functions and Tensor methods), as torch 1.13's,
built from arange, a comparison and where, so they run on every device
and differentiate (the gradient is masked the same way); is_tensor, numel,
get_default_dtype, the backends.cudnn flags; the Tensor methods view_as,
expand_as, type_as and the properties is_cuda and data."""
import types

from . import _ops
from ._tensor import Tensor, _tensor_in, _int_arg, arange, zeros_like, float32

__all__ = ["triu", "tril", "is_tensor", "numel", "get_default_dtype", "backends"]


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


def numel(input):  # noqa: A002
    """The number of elements of a tensor."""
    return _tensor_in(input, "numel").numel()


def get_default_dtype():
    """float32: the dtype of floating tensors made without one (not settable)."""
    return float32


# torch.backends.cudnn.deterministic / .benchmark, set by seeding helpers:
# anygrad has no cuDNN, and its flags change nothing (docs/python.md).
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(enabled=True, deterministic=False,
                                                             benchmark=False, allow_tf32=True,
                                                             is_available=lambda: False))


def _other(other, fn):
    if not isinstance(other, Tensor):
        raise TypeError("%s(): argument 'other' (position 1) must be Tensor, not %s"
                        % (fn, type(other).__name__))
    return other


Tensor.triu = triu
Tensor.tril = tril
Tensor.view_as = lambda self, other: self.view(*_other(other, "view_as").shape)
Tensor.expand_as = lambda self, other: self.expand(*_other(other, "expand_as").shape)
Tensor.type_as = lambda self, other: self.to(_other(other, "type_as").dtype)
Tensor.is_cuda = property(lambda self: self.device.type == "cuda")
# x.data: the values without the graph, sharing x's storage (as x.detach());
# assigning x.data is not supported
Tensor.data = property(lambda self: self.detach())
