"""anygrad.nn.init: torch.nn.init's in-place initialisers over the C
library's ag_init_* (Philox draws on the tensor's own device, so a seed
gives the same uniform values on every backend). Each writes the tensor in
place without recording autograd and returns it."""
import numbers
from ctypes import c_int64, byref

from ._lib import lib, check
from ._tensor import Tensor, _finite, _gen, no_grad

_ACT = {"relu": 1, "tanh": 3, "sigmoid": 5, "leaky_relu": 100, "selu": 101}
_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")
_FAN = {"fan_in": 1, "fan_out": 2}


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain: the recommended gain of a nonlinearity."""
    if nonlinearity in _LINEAR:
        return 1
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError("negative_slope {} not a valid number".format(param))
        return lib.ag_init_gain(_ACT["leaky_relu"], float(slope))
    if nonlinearity in ("relu", "tanh", "selu"):
        return lib.ag_init_gain(_ACT[nonlinearity], 0.0)
    raise ValueError("Unsupported nonlinearity {}".format(nonlinearity))


def _t(tensor, fn):
    if not isinstance(tensor, Tensor):
        raise TypeError("%s(): argument 'tensor' must be Tensor, not %s" % (fn, type(tensor).__name__))
    if not tensor.dtype.is_floating_point:
        raise TypeError("%s(): argument 'tensor' must be floating point, not %s" % (fn, tensor.dtype))
    return tensor._handle


def _num(v, name, fn):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError("%s(): argument '%s' must be a number, not %s" % (fn, name, type(v).__name__))
    return _finite(v, name, fn)


def _run(tensor, st):
    check(st)
    return tensor


def _fans(tensor, fn):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    a, b = c_int64(), c_int64()
    check(lib.ag_init_fans(tensor._handle, byref(a), byref(b)))
    return a.value, b.value


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    h = _t(tensor, "uniform_")
    lo, hi = _num(a, "a", "uniform_"), _num(b, "b", "uniform_")
    return _run(tensor, lib.ag_init_uniform_(h, lo, hi, _gen(generator, "uniform_")))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    h = _t(tensor, "normal_")
    m, s = _num(mean, "mean", "normal_"), _num(std, "std", "normal_")
    if s < 0:
        raise RuntimeError("normal_(): expected std >= 0.0, but found std %r" % s)
    if s == 0:
        return constant_(tensor, m)
    return _run(tensor, lib.ag_init_normal_(h, m, s, _gen(generator, "normal_")))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    fn = "trunc_normal_"
    h = _t(tensor, fn)
    m, s, lo, hi = _num(mean, "mean", fn), _num(std, "std", fn), _num(a, "a", fn), _num(b, "b", fn)
    if tensor.numel() == 0:
        return tensor
    return _run(tensor, lib.ag_init_trunc_normal_(h, m, s, lo, hi, _gen(generator, fn)))


def constant_(tensor, val):
    _t(tensor, "constant_")
    with no_grad():
        tensor.fill_(val)
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    h = _t(tensor, "xavier_uniform_")
    _fans(tensor, "xavier_uniform_")
    return _run(tensor, lib.ag_init_xavier_uniform_(h, _num(gain, "gain", "xavier_uniform_"),
                                                    _gen(generator, "xavier_uniform_")))


def xavier_normal_(tensor, gain=1.0, generator=None):
    h = _t(tensor, "xavier_normal_")
    _fans(tensor, "xavier_normal_")
    return _run(tensor, lib.ag_init_xavier_normal_(h, _num(gain, "gain", "xavier_normal_"),
                                                   _gen(generator, "xavier_normal_")))


def _kaiming(tensor, a, mode, nonlinearity, generator, fn, f):
    h = _t(tensor, fn)
    if tensor.numel() == 0:
        return tensor
    if mode not in _FAN:
        raise ValueError("Mode {} not supported, please use one of fan_in, fan_out".format(mode))
    _fans(tensor, fn)
    gain = calculate_gain(nonlinearity, a)
    return _run(tensor, f(h, float(gain), _FAN[mode], _gen(generator, fn)))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return _kaiming(tensor, a, mode, nonlinearity, generator, "kaiming_uniform_",
                    lib.ag_init_kaiming_uniform_)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return _kaiming(tensor, a, mode, nonlinearity, generator, "kaiming_normal_", lib.ag_init_kaiming_normal_)


def _calculate_fan_in_and_fan_out(tensor):
    return _fans(tensor, "_calculate_fan_in_and_fan_out")


# torch's deprecated spellings
uniform, normal, constant = uniform_, normal_, constant_
xavier_uniform, xavier_normal = xavier_uniform_, xavier_normal_
kaiming_uniform, kaiming_normal = kaiming_uniform_, kaiming_normal_
from ._first_hour import eye_, dirac_, orthogonal_  # noqa: E402,F401
