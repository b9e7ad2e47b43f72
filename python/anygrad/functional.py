"""anygrad.nn.functional: losses, normalisation, vision and activations."""
from ctypes import byref

from ._lib import lib, Conv2dParams, Pool2dParams
from ._tensor import _wrap, _t, _finite
from . import _ops
from ._ops import (relu, gelu, gelu_erf, silu, sigmoid, tanh, softmax, log_softmax, leaky_relu,  # noqa: F401
                   elu, softplus, hardswish, hardsigmoid, mish, selu, celu, softsign, tanhshrink,
                   logsigmoid, relu6)

_RED = {"mean": 0, "sum": 1, "none": 2}


def _red(r):
    if r not in _RED:
        raise ValueError("anygrad: reduction must be 'mean', 'sum' or 'none', got %r" % (r,))
    return _RED[r]


def _opt(t):
    return None if t is None else _t(t)


def cross_entropy(logits, target, reduction="mean", ignore_index=-100):
    return _wrap(lib.ag_cross_entropy(_t(logits), _t(target, "target"), _red(reduction),
                                      int(ignore_index)), "cross_entropy")


def mse_loss(a, b, reduction="mean"):
    return _wrap(lib.ag_mse_loss(_t(a), _t(b, "target"), _red(reduction)), "mse_loss")


def layer_norm(x, normalized_shape=None, weight=None, bias=None, eps=1e-5):
    return _wrap(lib.ag_layer_norm(_t(x), _opt(weight), _opt(bias), _finite(eps, "eps")),
                 "layer_norm")


def rms_norm(x, normalized_shape=None, weight=None, eps=1e-6):
    return _wrap(lib.ag_rms_norm(_t(x), _opt(weight), _finite(eps, "eps")), "rms_norm")


def embedding(indices, weight):
    return _wrap(lib.ag_embedding(_t(weight, "weight"), _t(indices, "indices")), "embedding")


def dropout(x, p=0.5, training=True, generator=None):
    p = _finite(p, "p")
    if not 0.0 <= p < 1.0:
        raise ValueError("anygrad.dropout: p must be in [0, 1), got %r" % p)
    return _wrap(lib.ag_dropout(_t(x), p, bool(training), generator._g if generator else None),
                 "dropout")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, generator=None, enable_gqa=True):
    """torch's F.scaled_dot_product_attention: [B, H, T, D] query, [B, Hkv, S, D]
    key/value (H % Hkv == 0), an additive attn_mask; fused where the backend
    has the kernel, else the unfused composition."""
    dropout_p = _finite(dropout_p, "dropout_p")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError("anygrad.scaled_dot_product_attention: dropout_p must be in [0, 1), got %r" % dropout_p)
    sc = 0.0 if scale is None else _finite(scale, "scale")
    return _wrap(lib.ag_scaled_dot_product_attention(_t(query), _t(key, "key"), _t(value, "value"),
                                                     _opt(attn_mask), bool(is_causal), sc, dropout_p,
                                                     generator._g if generator else None),
                 "scaled_dot_product_attention")


def _two(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2 or not all(isinstance(i, int) for i in v):
        raise TypeError("anygrad: %s must be an int or a pair of ints" % name)
    return v


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    p = Conv2dParams(_two(stride, "stride"), _two(padding, "padding"), _two(dilation, "dilation"),
                     int(groups))
    return _wrap(lib.ag_conv2d(_t(x), _t(weight, "weight"), _opt(bias), byref(p)), "conv2d")


def _pool(kernel_size, stride, padding, count_include_pad=True):
    return Pool2dParams(_two(kernel_size, "kernel_size"),
                        _two(0 if stride is None else stride, "stride"), _two(padding, "padding"),
                        bool(count_include_pad))


def max_pool2d(x, kernel_size, stride=None, padding=0):
    return _wrap(lib.ag_max_pool2d(_t(x), byref(_pool(kernel_size, stride, padding))), "max_pool2d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    return _wrap(lib.ag_avg_pool2d(_t(x), byref(_pool(kernel_size, stride, padding,
                                                      count_include_pad))), "avg_pool2d")


def adaptive_avg_pool2d(x, output_size):
    h, w = _two(output_size, "output_size")
    return _wrap(lib.ag_adaptive_avg_pool2d(_t(x), h, w), "adaptive_avg_pool2d")


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    return _wrap(lib.ag_batch_norm(_t(x), _opt(running_mean), _opt(running_var), _opt(weight),
                                   _opt(bias), bool(training), _finite(momentum, "momentum"),
                                   _finite(eps, "eps")), "batch_norm")


def linear(x, weight, bias=None):
    y = _ops.matmul(x, weight.transpose(0, 1))
    return y if bias is None else y + bias


def gelu_exact(x):
    return gelu_erf(x)
