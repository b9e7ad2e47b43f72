"""anygrad.nn.utils: clip_grad_norm_ and clip_grad_value_ as torch.nn.utils
has them. The L2 norm runs on the C library's fused clipping (no host
sync); other norms and error_if_nonfinite compose tensor ops."""
import math
import numbers
from ctypes import byref

from ._lib import lib, check, ParamList
from ._tensor import Tensor, _wrap, _finite, no_grad, tensor


def _grads(parameters, fn):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    if not hasattr(parameters, "__iter__"):
        raise TypeError("%s(): parameters must be a Tensor or an iterable of Tensors, not %s"
                        % (fn, type(parameters).__name__))
    params = list(parameters)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError("%s(): parameters must be Tensors, got %s" % (fn, type(p).__name__))
    return params


def _number(v, name, fn):
    if isinstance(v, bool) or not isinstance(v, (numbers.Real, Tensor)):
        raise TypeError("%s(): argument '%s' must be a number, not %s" % (fn, name, type(v).__name__))
    return float(v)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scale the gradients in place so that their total norm (the norm of
    the per-gradient norms) is at most max_norm: coefficient
    min(max_norm / (norm + 1e-6), 1). Returns the total norm before clipping
    as a 0-d f32 tensor on the gradients' device (0 when no gradient)."""
    fn = "clip_grad_norm_"
    params = _grads(parameters, fn)
    max_norm = _number(max_norm, "max_norm", fn)
    norm_type = _number(norm_type, "norm_type", fn)
    if math.isnan(max_norm):
        raise ValueError("%s(): max_norm must not be NaN" % fn)
    with no_grad():
        grads = [g for g in (p.grad for p in params) if g is not None]
        if not grads:
            return tensor(0.0)
        if norm_type == 2.0 and not error_if_nonfinite and math.isfinite(max_norm) and max_norm >= 0 \
                and all(g.dtype == grads[0].dtype and g.device == grads[0].device for g in grads):
            pl = ParamList()
            try:
                for i, p in enumerate(params):
                    check(lib.ag_params_add(byref(pl), str(i).encode(), p._handle))
                h = lib.ag_clip_grad_norm(byref(pl), _finite(max_norm, "max_norm", fn))
            finally:
                lib.ag_params_free(byref(pl))
            return _wrap(h, fn)
        from . import _ops
        dev = grads[0].device
        if math.isinf(norm_type):
            norms = [g.abs().amax().to(device=dev, dtype=grads[0].dtype) for g in grads]
            total = norms[0] if len(norms) == 1 else _ops.stack(norms).amax()
        else:
            norms = [(g.abs() ** norm_type).sum() ** (1.0 / norm_type) if norm_type != 0
                     else (g != 0).to(grads[0].dtype).sum() for g in grads]
            norms = [n.to(device=dev, dtype=grads[0].dtype) for n in norms]
            st = _ops.stack(norms)
            total = (st.abs() ** norm_type).sum() ** (1.0 / norm_type) if norm_type != 0 else st.sum()
        if error_if_nonfinite and not math.isfinite(float(total.item())):
            raise RuntimeError("The total norm of order %s for gradients from `parameters` is non-finite, "
                               "so it cannot be clipped. To disable this error and scale the gradients by "
                               "the non-finite norm anyway, set `error_if_nonfinite=False`" % norm_type)
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(device=g.device, dtype=g.dtype))
        return total


def clip_grad_value_(parameters, clip_value):
    """Clamp every gradient in place to [-clip_value, clip_value]."""
    fn = "clip_grad_value_"
    params = _grads(parameters, fn)
    v = _number(clip_value, "clip_value", fn)
    with no_grad():
        for p in params:
            g = p.grad
            if g is not None:
                g.clamp_(min=-v, max=v)
from ._first_hour import parameters_to_vector, vector_to_parameters  # noqa: E402,F401
