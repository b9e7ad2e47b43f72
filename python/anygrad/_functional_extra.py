"""torch.nn.functional's signatures over the C ops: activations with their
defaults, softmax's dim rules, the losses (nll, BCE, L1, smooth L1, Huber;
cross-entropy with weight and label smoothing), one_hot, pad, interpolate,
normalize, conv1d, group_norm. Where the C library has no op for a form,
it is composed from ops that have gradients, so autograd gives torch's."""
import math
import numbers
import warnings
from ctypes import c_int, c_int64

import numpy as np

from ._lib import lib
from ._tensor import (Tensor, _wrap, _t, _finite, _int_arg, _c_int_arg, _dim_arg, _int_list, _I32_MIN,
                      _I32_MAX, as_dtype, arange, tensor, int64, int32)
from . import _ops

__all__ = ["relu", "relu6", "gelu", "silu", "leaky_relu", "elu", "celu", "selu", "softplus", "hardtanh",
           "softmax", "log_softmax", "softmin", "nll_loss", "cross_entropy", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
           "one_hot", "pad", "interpolate", "upsample", "normalize", "conv1d", "conv2d", "group_norm",
           "dropout1d", "dropout2d", "embedding", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "prelu",
           "cosine_similarity", "kl_div"]

_conv2d_c = None  # functional.conv2d (set by functional at import: the 'same' form wraps it)
_embedding_c = None


def _inplace(x, r, inplace, fn):
    """torch's inplace=True: x holds the result (a graph result rebinds x, as
    the in-place operators do); else the result itself."""
    return _ops._write(x, r, fn + "_", rebind=True) if inplace else r


# ---- activations -------------------------------------------------------------------------

def relu(input, inplace=False):
    return _inplace(input, _ops.relu(input), inplace, "relu")


def relu6(input, inplace=False):
    return _inplace(input, _ops.relu6(input), inplace, "relu6")


def gelu(input, approximate="none"):
    if approximate == "none":
        return _ops.gelu_erf(input)
    if approximate == "tanh":
        return _ops.gelu(input)
    raise RuntimeError("gelu(): approximate argument must be either none or tanh, got %r" % (approximate,))


def silu(input, inplace=False):
    return _inplace(input, _ops.silu(input), inplace, "silu")


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _inplace(input, _ops.leaky_relu(input, negative_slope), inplace, "leaky_relu")


def elu(input, alpha=1.0, inplace=False):
    return _inplace(input, _ops.elu(input, alpha), inplace, "elu")


def celu(input, alpha=1.0, inplace=False):
    return _inplace(input, _ops.celu(input, alpha), inplace, "celu")


def selu(input, inplace=False):
    return _inplace(input, _ops.selu(input), inplace, "selu")


def softplus(input, beta=1, threshold=20):
    return _ops.softplus(input, beta, threshold)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("hardtanh(): min_val cannot be greater than max_val")
    return _inplace(input, _ops.clamp(input, min_val, max_val), inplace, "hardtanh")


def _softmax_dim(name, ndim):
    warnings.warn("Implicit dimension choice for %s has been deprecated. Change the call to include dim=X "
                  "as an argument." % name, UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def _softmax_in(input, dim, dtype, name):
    _t(input, name)
    if dim is None:
        dim = _softmax_dim(name, input.ndim)
    if dtype is not None:
        input = input.to(as_dtype(dtype))
    return input, _dim_arg(dim, name, "dim", 2)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    input, dim = _softmax_in(input, dim, dtype, "softmax")
    return _ops.softmax(input, dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    input, dim = _softmax_in(input, dim, dtype, "log_softmax")
    return _ops.log_softmax(input, dim)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    input, dim = _softmax_in(input, dim, dtype, "softmin")
    return _ops.softmax(-input, dim)


# ---- losses ------------------------------------------------------------------------------

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(size_average, reduce, reduction, fn):
    if size_average is not None or reduce is not None:  # torch's legacy arguments
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        r = "mean" if size_average and reduce else "sum" if reduce else "none"
        warnings.warn("size_average and reduce args will be deprecated, please use reduction='%s' "
                      "instead." % r, UserWarning, stacklevel=3)
        return r
    if reduction not in _REDUCTIONS:
        raise ValueError("%s(): %r is not a valid value for reduction" % (fn, reduction))
    return reduction


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _floating(x, fn, arg, pos):
    _t(x, fn, arg, pos)
    if not x.dtype.is_floating_point:
        raise RuntimeError("%s(): expected %s of a floating dtype, got %s" % (fn, arg, x.dtype))
    return x


def _index_target(target, fn):
    _t(target, fn, "target", 2)
    from ._dtype_rules import index_target  # torch's: int64, or uint8 widened
    return index_target(target, fn)


def _same_size(input, target, fn, deprecated):
    if tuple(input.shape) != tuple(target.shape):
        if deprecated:
            raise ValueError("Using a target size (%s) that is different to the input size (%s) is "
                             "deprecated. Please ensure they have the same size."
                             % (target.shape, input.shape))
        raise ValueError("Target size (%s) must be the same as input size (%s)" % (target.shape, input.shape))


def _class_weight(weight, input, cd, fn):
    """weight [C] of input's dtype and device, or None."""
    if weight is None:
        return None
    _t(weight, fn, "weight", 3)
    c = input.shape[cd]
    if weight.ndim != 1 or weight.shape[0] != c:
        raise RuntimeError("%s(): weight tensor should be defined either for all %d classes or no classes "
                           "but got weight tensor of shape: %s" % (fn, c, list(weight.shape)))
    return weight.to(device=input.device, dtype=input.dtype)


def _nll_shapes(input, target, fn):
    nd = input.ndim
    if nd < 1:
        raise ValueError("%s(): expected input with at least 1 dim, got a 0-d input" % fn)
    if nd == 1:
        if target.ndim != 0:
            raise RuntimeError("%s(): 1D target tensor expects 0D or 1D input... a [C] input takes a 0-d "
                               "target, got target of shape %s" % (fn, list(target.shape)))
        return 0
    want = tuple(input.shape[:1]) + tuple(input.shape[2:])
    if tuple(target.shape) != want:
        if target.ndim >= 1 and target.shape[0] != input.shape[0]:
            raise ValueError("Expected input batch_size (%d) to match target batch_size (%d)."
                             % (input.shape[0], target.shape[0]))
        raise RuntimeError("%s(): expected target of shape %s for input of shape %s, got %s"
                           % (fn, list(want), list(input.shape), list(target.shape)))
    return 1


def _picked(input, target, weight, ignore_index, cd):
    """(input's entry at each target along the class dim, the weight of each
    target: 0 where ignored, weight[target] or 1 elsewhere)."""
    keep = target != ignore_index
    safe = _ops.where(keep, target, 0)
    picked = _ops.gather(input, cd, safe.unsqueeze(cd)).squeeze(cd)
    w = keep.to(input.dtype)
    if weight is not None:
        w = w * weight.index_select(0, safe.reshape(-1)).reshape(tuple(safe.shape))
    return picked, w, keep


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    fn = "nll_loss"
    reduction = _reduction(size_average, reduce, reduction, fn)
    _floating(input, fn, "input", 1)
    target = _index_target(target, fn)
    ignore_index = _int_arg(ignore_index, fn, "ignore_index")
    cd = _nll_shapes(input, target, fn)
    weight = _class_weight(weight, input, cd, fn)
    picked, w, _ = _picked(input, target, weight, ignore_index, cd)
    loss = -(picked * w)
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """torch's F.cross_entropy: class-index targets (i64 or u8) or class
    probabilities (a floating target of input's shape). The plain form (no
    weight, no smoothing, index targets) is the C op; the others are
    log_softmax composed with the nll terms, as torch composes them."""
    fn = "cross_entropy"
    reduction = _reduction(size_average, reduce, reduction, fn)
    h = _t(input, fn)
    _t(target, fn, "target", 2)
    ls = _finite(label_smoothing, "label_smoothing", fn)
    if not 0.0 <= ls <= 1.0:
        raise RuntimeError("cross_entropy(): label_smoothing must be between 0.0 and 1.0. Got: %r" % ls)
    if target.dtype.is_floating_point:
        return _cross_entropy_probs(input, target, weight, reduction, ls)
    ii = _c_int_arg(ignore_index, fn, "ignore_index")
    target = _index_target(target, fn)
    if weight is None and ls == 0.0:
        red = {"mean": 0, "sum": 1, "none": 2}[reduction]
        return _wrap(lib.ag_cross_entropy(h, target._handle, red, ii), fn)
    _floating(input, fn, "input", 1)
    cd = _nll_shapes(input, target, fn)
    weight = _class_weight(weight, input, cd, fn)
    logp = _ops.log_softmax(input, cd)
    picked, w, keep = _picked(logp, target, weight, ii, cd)
    nll = -(picked * w)
    nll = nll.sum() / w.sum() if reduction == "mean" else _reduce(nll, reduction)
    if ls == 0.0:
        return nll
    c = input.shape[cd]
    if weight is not None:
        shape = [1] * input.ndim
        shape[cd] = c
        smooth = -(logp * weight.reshape(shape)).sum(cd)
    else:
        smooth = -logp.sum(cd)
    smooth = smooth * keep.to(smooth.dtype)
    if reduction == "mean":
        smooth = smooth.sum() / w.sum()  # over the non-ignored targets' weights (or count), as torch
    else:
        smooth = _reduce(smooth, reduction)
    return nll * (1.0 - ls) + smooth * (ls / c)


def _cross_entropy_probs(input, target, weight, reduction, ls):
    fn = "cross_entropy"
    _floating(input, fn, "input", 1)
    if tuple(input.shape) != tuple(target.shape):
        raise RuntimeError("cross_entropy(): a floating target holds class probabilities and must have the "
                           "input's shape %s, got %s" % (list(input.shape), list(target.shape)))
    cd = 0 if input.ndim == 1 else 1
    c = input.shape[cd]
    weight = _class_weight(weight, input, cd, fn)
    logp = _ops.log_softmax(input, cd)
    if ls > 0.0:
        target = target * (1.0 - ls) + ls / c
    prod = logp * target
    if weight is not None:
        shape = [1] * input.ndim
        shape[cd] = c
        prod = prod * weight.reshape(shape)
    loss = -prod.sum(cd)
    if reduction == "mean":
        n = input.numel() // c if c else 0
        return loss.sum() / n if n else loss.sum() * float("nan")
    return _reduce(loss, reduction)


def _weighted(loss, weight, fn):
    if weight is None:
        return loss
    _t(weight, fn, "weight", 3)
    return loss * weight


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """torch's F.binary_cross_entropy: the logs clamped at -100, and torch's
    gradient (x - t) / max(x (1 - x), 1e-12) in input (finite at 0 and 1,
    where a sigmoid in f32 saturates), -(log x - log(1 - x)) in target."""
    fn = "binary_cross_entropy"
    reduction = _reduction(size_average, reduce, reduction, fn)
    _floating(input, fn, "input", 1)
    _floating(target, fn, "target", 2)
    _same_size(input, target, fn, True)
    x, t = input.detach(), target.detach()
    lx, l1x = _ops.clamp(_ops.log(x), -100.0), _ops.clamp(_ops.log(1.0 - x), -100.0)
    value = -(t * lx + (1.0 - t) * l1x)
    gx = (x - t) / _ops.clamp(x * (1.0 - x), 1e-12)
    gt = l1x - lx
    # value, with the gradients above: surrogate - surrogate.detach() is 0
    s = input * gx + target * gt
    loss = value + (s - s.detach())
    return _reduce(_weighted(loss, weight, fn), reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), torch's stable form."""
    fn = "binary_cross_entropy_with_logits"
    reduction = _reduction(size_average, reduce, reduction, fn)
    _floating(input, fn, "input", 1)
    _t(target, fn, "target", 2)
    _same_size(input, target, fn, False)
    sp = _ops.softplus(-input, 1.0, 20.0)
    if pos_weight is not None:
        _t(pos_weight, fn, "pos_weight", 6)
        lw = (pos_weight - 1.0) * target + 1.0
        loss = (1.0 - target) * input + lw * sp
    else:
        loss = (1.0 - target) * input + sp
    return _reduce(_weighted(loss, weight, fn), reduction)


def _diff(input, target, fn):
    _floating(input, fn, "input", 1)
    _t(target, fn, "target", 2)
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn("Using a target size (%s) that is different to the input size (%s). This will likely "
                      "lead to incorrect results due to broadcasting. Please ensure they have the same size."
                      % (target.shape, input.shape), UserWarning, stacklevel=3)
    return input - target


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _reduction(size_average, reduce, reduction, "l1_loss")
    return _reduce(_ops.abs(_diff(input, target, "l1_loss")), reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    fn = "mse_loss"
    reduction = _reduction(size_average, reduce, reduction, fn)
    h = _t(input, fn)
    _t(target, fn, "target", 2)
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn("Using a target size (%s) that is different to the input size (%s). This will likely "
                      "lead to incorrect results due to broadcasting. Please ensure they have the same size."
                      % (target.shape, input.shape), UserWarning, stacklevel=2)
    return _wrap(lib.ag_mse_loss(h, target._handle, {"mean": 0, "sum": 1, "none": 2}[reduction]), fn)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    fn = "smooth_l1_loss"
    reduction = _reduction(size_average, reduce, reduction, fn)
    beta = _finite(beta, "beta", fn)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss(): smooth_l1_loss does not support negative values for beta.")
    d = _diff(input, target, fn)
    a = _ops.abs(d)
    if beta == 0.0:
        return _reduce(a, reduction)
    loss = _ops.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    fn = "huber_loss"
    reduction = _reduction(None, None, reduction, fn)
    delta = _finite(delta, "delta", fn)
    if delta <= 0:
        raise RuntimeError("huber_loss(): huber_loss does not support non-positive values for delta.")
    d = _diff(input, target, fn)
    a = _ops.abs(d)
    loss = _ops.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)
    return _reduce(loss, reduction)


# ---- one_hot, pad, interpolate, normalize ------------------------------------------------

def one_hot(tensor, num_classes=-1):
    fn = "one_hot"
    h = _t(tensor, fn, "self")
    if tensor.dtype not in (int64, int32):
        raise RuntimeError("one_hot is only applicable to index tensor.")
    n = _int_arg(num_classes, fn, "num_classes", 2)
    if n < -1:
        raise RuntimeError("one_hot(): num_classes should be positive or -1, got %d" % n)
    if n == -1 and tensor.numel() == 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    return _wrap(lib.ag_one_hot(h, n), fn)


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_list(pad, fn):
    if isinstance(pad, (numbers.Number, np.generic, Tensor)) or not hasattr(pad, "__iter__"):
        raise TypeError("%s(): argument 'pad' (position 2) must be tuple of ints, not %s"
                        % (fn, type(pad).__name__))
    p = _int_list(tuple(pad), fn, "pad")
    if len(p) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    return p


def _pad_index(n, before, after, mode, device):
    """The source index along a dim of size n for each padded position (made
    on the host: a few integers)."""
    i = np.arange(-before, n + after, dtype=np.int64)
    if mode == "replicate":
        i = np.clip(i, 0, n - 1)
    elif mode == "circular":
        i = np.mod(i, n)
    else:  # reflect: mirror without repeating the edge, period 2(n - 1)
        m = np.mod(i, 2 * (n - 1)) if n > 1 else i * 0
        i = np.where(m < n, m, 2 * (n - 1) - m)
    return tensor(i, dtype=int64, device=device)


def pad(input, pad, mode="constant", value=None):
    """torch's F.pad. constant (negative amounts crop) and reflect over one
    or two dims run as ag_pad; replicate, circular and reflect over three
    dims gather the source positions along each dim (index_select, whose
    gradient sums every copy back)."""
    fn = "pad"
    h = _t(input, fn)
    p = _pad_list(pad, fn)
    if mode not in _PAD_MODES:
        raise NotImplementedError("pad(): mode %r is not supported (constant, reflect, replicate, circular)"
                                  % (mode,))
    nd = input.ndim
    if len(p) // 2 > nd:
        raise RuntimeError("Padding length too large: %d pad values for an input of %d dims" % (len(p), nd))
    if mode == "constant":
        v = 0.0 if value is None else _finite(value, "value", fn)
        if any(a < 0 for a in p):  # negative amounts crop first
            x = input
            for k in range(len(p) // 2):
                d = nd - 1 - k
                lo, hi = max(0, -p[2 * k]), max(0, -p[2 * k + 1])
                if lo or hi:
                    if lo + hi > x.shape[d]:
                        raise RuntimeError("pad(): the negative padding %s removes more than dim %d holds"
                                           % (tuple(p), d))
                    x = x[(slice(None),) * d + (slice(lo, x.shape[d] - hi),)]
            p = [max(0, a) for a in p]
            input, h = x, x._handle
        arr = (c_int64 * max(1, len(p)))(*p)
        return _wrap(lib.ag_pad(h, arr, len(p), 0, v), fn)
    if value is not None and value != 0:
        raise ValueError("Padding mode \"%s\" doesn't take in value argument." % mode)
    # torch: non-constant modes pad the trailing 1, 2 or 3 dims of a 2-5 dim input
    npairs = len(p) // 2
    if not (1 <= npairs <= 3 and npairs + 1 <= nd <= npairs + 2):
        raise NotImplementedError("pad(): %s padding of %d values is not implemented for a %d-D input "
                                  "(torch pads the last 1, 2 or 3 dims of a 2-D to 5-D input)"
                                  % (mode, len(p), nd))
    if any(a < 0 for a in p) and mode != "circular":
        raise RuntimeError("pad(): %s padding takes amounts >= 0, got %s" % (mode, tuple(p)))
    if mode == "reflect":
        for k in range(npairs):
            n = input.shape[nd - 1 - k]
            if p[2 * k] >= n or p[2 * k + 1] >= n:
                raise RuntimeError("Argument #4: Padding size should be less than the corresponding input "
                                   "dimension, but got: padding (%d, %d) at dimension %d of input %s"
                                   % (p[2 * k], p[2 * k + 1], nd - 1 - k, list(input.shape)))
        if npairs <= 2:
            arr = (c_int64 * len(p))(*p)
            return _wrap(lib.ag_pad(h, arr, len(p), 1, 0.0), fn)
    if mode == "circular":
        for k in range(npairs):
            n = input.shape[nd - 1 - k]
            if p[2 * k] > n or p[2 * k + 1] > n:
                raise RuntimeError("Padding value causes wrapping around more than once.")
    if mode == "replicate" and any(input.shape[nd - 1 - k] == 0 for k in range(npairs)):
        raise RuntimeError("pad(): replicate padding of an empty dim")
    x = input
    for k in range(npairs):
        d = nd - 1 - k
        if p[2 * k] or p[2 * k + 1]:
            x = x.index_select(d, _pad_index(x.shape[d], p[2 * k], p[2 * k + 1], mode, x.device))
    return x


_INTERP = {"nearest": 0, "bilinear": 1, "linear": 1, "area": None}


def _interp_sizes(v, n, what, fn, conv):
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ValueError("Input and %s must have the same number of spatial dimensions, but got input "
                             "with spatial dimensions of %s and %s of %s" % (what, n, what, list(v)))
        return [conv(a) for a in v]
    return [conv(v)] * n


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch's F.interpolate for nearest (3-D and 4-D input), linear (3-D),
    bilinear (4-D) over ag_interpolate, and area (adaptive average pooling,
    as torch). Other modes are NotImplementedError naming the mode."""
    fn = "interpolate"
    _t(input, fn)
    if mode not in _INTERP:
        raise NotImplementedError("interpolate(): mode %r is not supported (nearest, linear, bilinear, area)"
                                  % (mode,))
    if antialias:
        raise NotImplementedError("interpolate(): antialias=True is not supported")
    if mode in ("nearest", "area") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    nd = input.ndim
    if nd not in (3, 4):
        raise NotImplementedError("interpolate(): input of %d dims is not supported (3-D or 4-D)" % nd)
    if mode == "linear" and nd != 3:
        raise NotImplementedError("Got %dD input, but linear mode needs 3D input" % nd)
    if mode == "bilinear" and nd != 4:
        raise NotImplementedError("Got %dD input, but bilinear mode needs 4D input" % nd)
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    ns = nd - 2
    sizes = _interp_sizes(size, ns, "output size", fn, lambda a: _int_arg(a, fn, "size"))
    scales = _interp_sizes(scale_factor, ns, "scale_factor", fn, lambda a: _finite(a, "scale_factor", fn))
    in_sp = list(input.shape[2:])
    if scales is not None and (recompute_scale_factor or mode == "area"):
        sizes = [int(math.floor(float(i) * s)) for i, s in zip(in_sp, scales)]
        scales = None
    x = input.unsqueeze(2) if nd == 3 else input
    if mode == "area":
        out = _ops_adaptive_avg_pool2d(x, [1] + sizes if nd == 3 else sizes)
        return out.squeeze(2) if nd == 3 else out
    ac = bool(align_corners) if mode != "nearest" else False
    if sizes is not None:
        if nd == 3:
            sizes = [1] + sizes
        for s in sizes:
            if s < 1:
                raise ValueError("interpolate(): output size must be positive, got %s" % (tuple(sizes),))
        out = _wrap(lib.ag_interpolate(x._handle, sizes[0], sizes[1], 0.0, 0.0, _INTERP[mode], ac), fn)
    else:
        if nd == 3:
            scales = [1.0] + scales
        out = _wrap(lib.ag_interpolate(x._handle, 0, 0, scales[0], scales[1], _INTERP[mode], ac), fn)
    return out.squeeze(2) if nd == 3 else out


def _ops_adaptive_avg_pool2d(x, sizes):
    return _wrap(lib.ag_adaptive_avg_pool2d(x._handle, sizes[0], sizes[1]), "interpolate")


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.",
                  UserWarning, stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def _vector_norm(x, p, dim, keepdim, fn):
    if p in (1.0, 2.0, math.inf):
        dims = (c_int * 1)(dim)
        return _wrap(lib.ag_norm(x._handle, p, 1, dims, keepdim), fn)
    if p == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim=keepdim)
    if p == -math.inf:
        return _ops.amin(_ops.abs(x), dim, keepdim)
    return _ops.pow(_ops.pow(_ops.abs(x), p).sum(dim, keepdim=keepdim), 1.0 / p)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    fn = "normalize"
    _floating(input, fn, "input", 1)
    if out is not None:
        raise NotImplementedError("normalize(): out= is not supported")
    p = _scalar_p(p, fn)
    dim = _dim_arg(dim, fn, "dim", 3)
    eps = _finite(eps, "eps", fn)
    n = _vector_norm(input, p, dim, True, fn)
    return input / _ops.clamp(n, eps).expand(*input.shape)


def _scalar_p(p, fn):
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError("%s(): argument 'p' must be a number, not %s" % (fn, type(p).__name__))
    return float(p)


# ---- conv1d, conv2d('same'), group_norm, dropout1d/2d, embedding ---------------------------

def _one(v, name, fn):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise RuntimeError("%s(): expected %s to be a single integer value or a list of 1 values to "
                               "match the convolution dimensions, but got %s=%s" % (fn, name, name, list(v)))
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s(): argument '%s' must be tuple of ints, not %s" % (fn, name, type(v).__name__))
    v = int(v)
    if not _I32_MIN <= v <= _I32_MAX:
        raise ValueError("%s(): argument '%s' is %d, out of range (the library takes it as a 32-bit int)"
                         % (fn, name, v))
    return v


def _same_amounts(k, dilation, stride, fn):
    """torch's 'same': total dilation*(k-1), the odd one on the right."""
    if any(s != 1 for s in stride):  # torch's F raises RuntimeError here (the modules ValueError)
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    tot = [d * (kk - 1) for d, kk in zip(dilation, k)]
    return [t // 2 for t in tot], [t - t // 2 for t in tot]


def _padding_string(padding, fn):
    if padding not in ("same", "valid"):  # torch's F: RuntimeError (the modules: ValueError)
        raise RuntimeError("Invalid padding string '%s', should be one of ['valid', 'same']" % padding)
    return padding


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    fn = "conv1d"
    hx, hw = _t(input, fn), _t(weight, fn, "weight", 2)
    hb = None if bias is None else _t(bias, fn, "bias", 3)
    s, d = _one(stride, "stride", fn), _one(dilation, "dilation", fn)
    g = _c_int_arg(groups, fn, "groups", 7)
    if isinstance(padding, str):
        if _padding_string(padding, fn) == "valid":
            p = 0
        else:
            if weight.ndim != 3:
                raise RuntimeError("conv1d(): expected a 3-D weight, got %d dims" % weight.ndim)
            lo, hi = _same_amounts([weight.shape[2]], [d], [s], fn)
            p = lo[0]
            if hi[0] != lo[0]:
                input = pad(input, [0, hi[0] - lo[0]])
                hx = input._handle
    else:
        p = _one(padding, "padding", fn)
    return _wrap(lib.ag_conv1d(hx, hw, hb, s, p, d, g), fn)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):
        if _padding_string(padding, "conv2d") == "valid":
            padding = 0
        else:
            from .functional import _two
            _t(input, "conv2d")
            _t(weight, "conv2d", "weight", 2)
            st, dl = _two(stride, "stride", "conv2d"), _two(dilation, "dilation", "conv2d")
            if weight.ndim != 4:
                raise RuntimeError("conv2d(): expected a 4-D weight, got %d dims" % weight.ndim)
            lo, hi = _same_amounts(list(weight.shape[2:]), dl, st, "conv2d")
            if lo != hi:
                input = pad(input, [0, hi[1] - lo[1], 0, hi[0] - lo[0]])
            padding = tuple(lo)
    return _conv2d_c(input, weight, bias, stride, padding, dilation, groups)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    fn = "group_norm"
    h = _t(input, fn)
    g = _int_arg(num_groups, fn, "num_groups", 2)
    if input.ndim >= 2 and (g <= 0 or input.shape[1] % g):
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got "
                           "input of shape %s and num_groups=%d" % (list(input.shape), g))
    hw = None if weight is None else _t(weight, fn, "weight", 3)
    hb = None if bias is None else _t(bias, fn, "bias", 4)
    return _wrap(lib.ag_group_norm(h, g, hw, hb, _finite(eps, "eps", fn)), fn)


def _channel_dropout(input, p, training, fn, nd_batched):
    _t(input, fn)
    p = _finite(p, "p", fn)
    if not 0.0 <= p <= 1.0:
        raise ValueError("dropout probability has to be between 0 and 1, but got %r" % p)
    if not training or p == 0.0:
        return input
    from .functional import dropout
    batched = input.ndim == nd_batched
    shape = list(input.shape[:2]) if batched else list(input.shape[:1])
    shape += [1] * (input.ndim - len(shape))
    if p == 1.0:
        return input * 0.0
    mask = dropout(_ops_ones(shape, input), p, True)
    return input * mask


def _ops_ones(shape, like):
    from ._tensor import ones
    return ones(*shape, dtype=like.dtype, device=like.device)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels ([N, C, L] or [C, L]) with probability p."""
    if isinstance(input, Tensor) and input.ndim not in (2, 3):
        raise RuntimeError("dropout1d: Expected 2D or 3D input, but received a %dD input." % input.ndim)
    return _inplace(input, _channel_dropout(input, p, training, "dropout1d", 3), inplace, "dropout1d")


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels ([N, C, H, W] or [C, H, W]) with probability p."""
    if isinstance(input, Tensor) and input.ndim not in (3, 4):
        warnings.warn("dropout2d: Received a %d-D input to dropout2d, which is deprecated" % input.ndim,
                      UserWarning, stacklevel=2)
    return _inplace(input, _channel_dropout(input, p, training, "dropout2d", 4), inplace, "dropout2d")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of weight; the row at padding_idx reads its value and gets no
    gradient (torch's)."""
    fn = "embedding"
    _t(weight, fn, "weight", 2)
    _t(input, fn, "input", 1)
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding(): max_norm, scale_grad_by_freq and sparse are not supported")
    if padding_idx is not None:
        n = weight.shape[0]
        pi = _int_arg(padding_idx, fn, "padding_idx")
        if not -n <= pi < n:
            raise AssertionError("Padding_idx must be within num_embeddings")
        pi %= n
        if weight.requires_grad and _grad_on():
            row = arange(n, dtype=int64, device=weight.device) == pi
            weight = _ops.where(row.unsqueeze(1), weight.detach(), weight)
    return _embedding_c(input, weight)


def _grad_on():
    return bool(lib.ag_grad_enabled())


# ---- 1-d pooling, prelu, cosine_similarity, kl_div ----------------------------------------

def _as_2d_pool(input, fn):
    _t(input, fn)
    if input.ndim not in (2, 3):
        raise RuntimeError("%s(): Expected 2D or 3D (batch mode) tensor for input, got %dD"
                           % (fn, input.ndim))
    return input.unsqueeze(-2)  # [.., C, 1, L]: the 2-d pool over a height of 1


def _unbatched_4d(x):
    return x.unsqueeze(0) if x.ndim == 3 else x


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    fn = "max_pool1d"
    if ceil_mode or return_indices or _one(dilation, "dilation", fn) != 1:
        raise NotImplementedError("max_pool1d(): dilation, ceil_mode and return_indices are not supported")
    x = _as_2d_pool(input, fn)
    k = _one(kernel_size, "kernel_size", fn)
    s = k if stride is None or stride == [] else _one(stride, "stride", fn)
    from .functional import max_pool2d
    y = max_pool2d(_unbatched_4d(x), (1, k), (1, s), (0, _one(padding, "padding", fn)))
    return y.reshape(*(list(input.shape[:-1]) + [y.shape[-1]]))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    fn = "avg_pool1d"
    if ceil_mode:
        raise NotImplementedError("avg_pool1d(): ceil_mode is not supported")
    x = _as_2d_pool(input, fn)
    k = _one(kernel_size, "kernel_size", fn)
    s = k if stride is None or stride == [] else _one(stride, "stride", fn)
    from .functional import avg_pool2d
    y = avg_pool2d(_unbatched_4d(x), (1, k), (1, s), (0, _one(padding, "padding", fn)), count_include_pad)
    return y.reshape(*(list(input.shape[:-1]) + [y.shape[-1]]))


def adaptive_avg_pool1d(input, output_size):
    fn = "adaptive_avg_pool1d"
    x = _as_2d_pool(input, fn)
    n = _one(output_size, "output_size", fn)
    y = _ops_adaptive_avg_pool2d(_unbatched_4d(x), [1, n])
    return y.reshape(*(list(input.shape[:-1]) + [n]))


def prelu(input, weight):
    """x where x > 0, weight * x elsewhere; weight [C] along dim 1 (or one value)."""
    fn = "prelu"
    _t(input, fn)
    _t(weight, fn, "weight", 2)
    w = weight
    n = weight.numel()
    if n != 1:
        if input.ndim < 2 and not (input.ndim == 1 and input.shape[0] == n) or \
                (input.ndim >= 2 and input.shape[1] != n):
            c = input.shape[1] if input.ndim >= 2 else input.shape[0] if input.ndim else 1
            raise RuntimeError("Mismatch of parameter numbers and input channel size. Found parameter "
                               "numbers = %d and channel size = %s." % (n, c))
        if input.ndim >= 2:
            w = weight.reshape(*([n] + [1] * (input.ndim - 2)))
    else:
        w = weight.reshape(())
    return _ops.where(input > 0, input, input * w)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 * x2) / (max(|x1|, eps) max(|x2|, eps)) along dim."""
    fn = "cosine_similarity"
    _floating(x1, fn, "x1", 1)
    _floating(x2, fn, "x2", 2)
    dim = _dim_arg(dim, fn, "dim", 3)
    eps = _finite(eps, "eps", fn)
    n1 = _ops.clamp(_vector_norm(x1, 2.0, dim, True, fn), eps)
    n2 = _ops.clamp(_vector_norm(x2, 2.0, dim, True, fn), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target * (log(target) - input) (0 where target is 0), or with
    log_target exp(target) * (target - input); 'batchmean' divides the sum
    by the batch size."""
    fn = "kl_div"
    if reduction == "batchmean" and size_average is None and reduce is None:
        red = "batchmean"
    else:
        red = _reduction(size_average, reduce, reduction, fn)
        if red == "mean" and size_average is None and reduce is None:
            warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support "
                          "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
                          "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
                          "major release.", UserWarning, stacklevel=2)
    _floating(input, fn, "input", 1)
    _floating(target, fn, "target", 2)
    if log_target:
        loss = _ops.exp(target) * (target - input)
    else:
        safe = _ops.where(target > 0, target, 1.0)
        loss = target * _ops.log(safe) - target * input
    if red == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, red)
