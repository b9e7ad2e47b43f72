"""anygrad.nn.functional: losses, normalisation, vision and activations."""
import numbers
from ctypes import byref

import numpy as np

from ._lib import lib, Conv2dParams, Pool2dParams
from ._tensor import _wrap, _t, _finite, _gen, _int_arg, _c_int_arg, _int_list, _I32_MIN, _I32_MAX
from . import _ops
from ._ops import (relu, gelu, gelu_erf, silu, sigmoid, tanh, softmax, log_softmax, leaky_relu,  # noqa: F401
                   elu, softplus, hardswish, hardsigmoid, mish, selu, celu, softsign, tanhshrink,
                   logsigmoid, relu6)

_RED = {"mean": 0, "sum": 1, "none": 2}


def _red(r):
    if r not in _RED:
        raise ValueError("anygrad: reduction must be 'mean', 'sum' or 'none', got %r" % (r,))
    return _RED[r]


def _opt(t, fn, what, pos=None):
    return None if t is None else _t(t, fn, what, pos)


def cross_entropy(logits, target, reduction="mean", ignore_index=-100):
    fn = "cross_entropy"
    return _wrap(lib.ag_cross_entropy(_t(logits, fn), _t(target, fn, "target", 2), _red(reduction),
                                      _c_int_arg(ignore_index, fn, "ignore_index")), fn)


def mse_loss(a, b, reduction="mean"):
    return _wrap(lib.ag_mse_loss(_t(a, "mse_loss"), _t(b, "mse_loss", "target", 2), _red(reduction)),
                 "mse_loss")


def _last_dim(normalized_shape, h, fn):
    """The library normalizes over the last dim: a normalized_shape that says
    otherwise is refused, not ignored."""
    if normalized_shape is None:
        return
    ns = normalized_shape
    if isinstance(ns, (numbers.Number, np.generic)) or not hasattr(ns, "__iter__"):
        ns = (ns,)
    ns = _int_list(tuple(ns), fn, "normalized_shape")
    n = lib.ag_tensor_ndim(h)
    last = lib.ag_tensor_shape(h)[n - 1] if n else None
    if ns != [last]:
        raise ValueError("%s(): normalized_shape %s is not supported for an input whose last dim is %s: the "
                         "library normalizes over the last dim only" % (fn, tuple(ns), last))


def layer_norm(x, normalized_shape=None, weight=None, bias=None, eps=1e-5):
    h = _t(x, "layer_norm")
    _last_dim(normalized_shape, h, "layer_norm")
    fn = "layer_norm"
    return _wrap(lib.ag_layer_norm(h, _opt(weight, fn, "weight", 3), _opt(bias, fn, "bias", 4),
                                   _finite(eps, "eps", fn)), fn)


def rms_norm(x, normalized_shape=None, weight=None, eps=1e-6):
    h = _t(x, "rms_norm")
    _last_dim(normalized_shape, h, "rms_norm")
    return _wrap(lib.ag_rms_norm(h, _opt(weight, "rms_norm", "weight", 3), _finite(eps, "eps", "rms_norm")),
                 "rms_norm")


def embedding(indices, weight):
    return _wrap(lib.ag_embedding(_t(weight, "embedding", "weight", 2), _t(indices, "embedding", "input", 1)),
                 "embedding")


def dropout(x, p=0.5, training=True, generator=None):
    h = _t(x, "dropout")
    p = _finite(p, "p", "dropout")
    if not 0.0 <= p < 1.0:
        raise ValueError("anygrad.dropout: p must be in [0, 1), got %r" % p)
    return _wrap(lib.ag_dropout(h, p, bool(training), _gen(generator, "dropout")),
                 "dropout")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, generator=None, enable_gqa=True):
    """torch's F.scaled_dot_product_attention: [B, H, T, D] query, [B, Hkv, S, D]
    key/value (H % Hkv == 0), an additive attn_mask; fused where the backend
    has the kernel, else the unfused composition."""
    fn = "scaled_dot_product_attention"
    hq, hk, hv = _t(query, fn, "query", 1), _t(key, fn, "key", 2), _t(value, fn, "value", 3)
    dropout_p = _finite(dropout_p, "dropout_p", fn)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError("anygrad.scaled_dot_product_attention: dropout_p must be in [0, 1), got %r"
                         % dropout_p)
    sc = 0.0 if scale is None else _finite(scale, "scale", fn)
    return _wrap(lib.ag_scaled_dot_product_attention(hq, hk, hv, _opt(attn_mask, fn, "attn_mask", 4),
                                                     bool(is_causal), sc, dropout_p,
                                                     _gen(generator, fn)), fn)


def _two(v, name, fn="anygrad", c_int=True):
    """An int or a pair of ints (kernel sizes, strides, paddings): bools and
    floats are a TypeError; values the C struct's int cannot hold an error,
    not a wrapped value (2**32 + 1 is not 1)."""
    if isinstance(v, (numbers.Number, np.generic)) or not hasattr(v, "__iter__"):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise TypeError("%s(): argument '%s' must be tuple of ints, not %s"
                            % (fn, name, type(v).__name__))
        v = _int_arg(v, fn, name)
        v = [v, v]
    else:
        v = _int_list(tuple(v), fn, name)
        if len(v) != 2:
            raise TypeError("%s(): argument '%s' must be an int or a pair of ints, got %d values"
                            % (fn, name, len(v)))
    if c_int:
        for i in v:
            if not _I32_MIN <= i <= _I32_MAX:
                raise ValueError("%s(): argument '%s' is %d, out of range (the library takes it as a "
                                 "32-bit int)" % (fn, name, i))
    return tuple(v)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    hx, hw, hb = _t(x, "conv2d"), _t(weight, "conv2d", "weight", 2), _opt(bias, "conv2d", "bias", 3)
    p = Conv2dParams(_two(stride, "stride", "conv2d"), _two(padding, "padding", "conv2d"),
                     _two(dilation, "dilation", "conv2d"), _c_int_arg(groups, "conv2d", "groups"))
    return _wrap(lib.ag_conv2d(hx, hw, hb, byref(p)), "conv2d")


def _pool(kernel_size, stride, padding, count_include_pad=True, fn="anygrad"):
    return Pool2dParams(_two(kernel_size, "kernel_size", fn),
                        _two(0 if stride is None else stride, "stride", fn), _two(padding, "padding", fn),
                        bool(count_include_pad))


def max_pool2d(x, kernel_size, stride=None, padding=0):
    h = _t(x, "max_pool2d")
    return _wrap(lib.ag_max_pool2d(h, byref(_pool(kernel_size, stride, padding, True, "max_pool2d"))),
                 "max_pool2d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    h = _t(x, "avg_pool2d")
    return _wrap(lib.ag_avg_pool2d(h, byref(_pool(kernel_size, stride, padding, count_include_pad,
                                                  "avg_pool2d"))), "avg_pool2d")


def adaptive_avg_pool2d(x, output_size):
    hx = _t(x, "adaptive_avg_pool2d")
    h, w = _two(output_size, "output_size", "adaptive_avg_pool2d", c_int=False)
    return _wrap(lib.ag_adaptive_avg_pool2d(hx, h, w), "adaptive_avg_pool2d")


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    fn = "batch_norm"
    return _wrap(lib.ag_batch_norm(_t(x, fn), _opt(running_mean, fn, "running_mean", 2),
                                   _opt(running_var, fn, "running_var", 3), _opt(weight, fn, "weight", 4),
                                   _opt(bias, fn, "bias", 5), bool(training),
                                   _finite(momentum, "momentum", fn), _finite(eps, "eps", fn)), fn)


def linear(x, weight, bias=None):
    _t(x, "linear")
    _t(weight, "linear", "weight", 2)
    _opt(bias, "linear", "bias", 3)
    y = _ops.matmul(x, weight.transpose(0, 1))
    if bias is not None and bias.dtype != y.dtype and lib.ag_autocast_enabled():
        bias = bias.to(y.dtype)  # one op in torch: autocast's dtype, not promoted back to f32
    return y if bias is None else y + bias


def gelu_exact(x):
    return gelu_erf(x)


# torch's signatures, the losses, one_hot, pad, interpolate, normalize, conv1d, group_norm
from . import _functional_extra as _fx  # noqa: E402
_fx._conv2d_c, _fx._embedding_c = conv2d, embedding
from ._functional_extra import *  # noqa: F401,F403,E402
