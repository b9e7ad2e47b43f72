"""anygrad.optim: the C library's fused AdamW and SGD, with PyTorch's names,
param_groups[0]["lr"] and learning-rate schedulers."""
import weakref
from ctypes import byref

from ._lib import lib, check, raise_last, ParamList, SgdOptions, AdamwOptions
from ._tensor import Tensor, _finite
from . import lr_scheduler  # noqa: F401  (anygrad.optim.lr_scheduler)


def _param_list(params):
    pl = ParamList()
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError("anygrad.optim: parameters must be Tensors, got %s" % type(p).__name__)
        check(lib.ag_params_add(byref(pl), str(i).encode(), p._handle))
    return pl


# Every live optimizer, so that Module.to() can make the ones holding the
# parameters it moves follow them (_follow).
_LIVE = weakref.WeakSet()


class Optimizer:
    def __init__(self, params, lr):
        if isinstance(params, Tensor) or not hasattr(params, "__iter__"):
            raise TypeError("%s(): params argument given to the optimizer should be an iterable of Tensors, "
                            "but got %s" % (type(self).__name__, type(params).__name__))
        self._params = list(params)
        if not self._params:
            raise ValueError("anygrad.optim: optimizer got an empty parameter list")
        lr = _finite(lr, "lr")
        if lr < 0:
            raise ValueError("anygrad.optim: lr must be >= 0, got %r" % lr)
        self.param_groups = [{"params": self._params, "lr": lr, "initial_lr": lr}]
        self._lr = lr

    def _make(self, create, opts):
        for p in self._params:
            if not isinstance(p, Tensor):
                raise TypeError("anygrad.optim: parameters must be Tensors, got %s" % type(p).__name__)
        self._create, self._opts = create, opts
        self._o = self._build([p._handle for p in self._params])
        _LIVE.add(self)

    def _build(self, handles):
        """A C optimizer over the tensors `handles`, with this one's options
        and current lr (owned by the caller; raises on failure)."""
        self._opts.lr = self._lr
        pl = ParamList()
        try:
            for i, h in enumerate(handles):
                check(lib.ag_params_add(byref(pl), str(i).encode(), h))
            o = self._create(byref(pl), byref(self._opts))
        finally:
            lib.ag_params_free(byref(pl))  # the optimizer retained what it keeps
        if not o:
            raise_last("optimizer")
        return o

    def _holds(self, tensors):
        return any(id(p) in tensors for p in self._params)

    def _prepare_follow(self, new_handles):
        """Module.to(), before it moves anything: a C optimizer over the
        tensors the parameters are about to hold (new_handles: id(param) ->
        handle), or the reason this optimizer cannot hold them (AdamW keeps
        f32 parameters only, all on one device)."""
        try:
            return self._build([new_handles.get(id(p), p._h) for p in self._params])
        except Exception as e:  # noqa: BLE001 - re-raised with what was asked
            raise RuntimeError("anygrad: Module.to(): the %s optimizer holding these parameters cannot "
                               "follow them (%s); nothing was moved. Build the optimizer after the "
                               "move" % (type(self).__name__, e)) from None

    def _follow(self, o):
        """Module.to(), after it moved the parameters: take over the C
        optimizer `o` built by _prepare_follow, with this one's state
        (momentum, exp_avg, exp_avg_sq, moved and cast as the parameters
        were) and step count."""
        old = self._o
        try:
            src, dst = ParamList(), ParamList()
            try:
                check(lib.ag_optimizer_state(old, byref(src)))
                check(lib.ag_optimizer_state(o, byref(dst)))
                have = {src.names[i]: src.tensors[i] for i in range(src.count)}
                for i in range(dst.count):
                    s = have.get(dst.names[i])
                    if s:
                        check(lib.ag_copy_(dst.tensors[i], s))
            finally:
                lib.ag_params_free(byref(src))
                lib.ag_params_free(byref(dst))
            lib.ag_optimizer_set_steps(o, lib.ag_optimizer_steps(old))
        except BaseException:
            lib.ag_optimizer_free(o)
            raise
        self._o = o
        lib.ag_optimizer_free(old)

    def __del__(self):
        o = getattr(self, "_o", None)
        if o:
            self._o = None
            lib.ag_optimizer_free(o)

    def step(self):
        lr = self.param_groups[0]["lr"]
        if lr != self._lr:
            lr = _finite(lr, "lr")
            check(lib.ag_optimizer_set_lr(self._o, lr))
            self._lr = lr
        check(lib.ag_optimizer_step(self._o))

    def zero_grad(self, set_to_none=True):
        lib.ag_optimizer_zero_grad(self._o)

    @property
    def steps(self):
        return int(lib.ag_optimizer_steps(self._o))


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        super().__init__(params, lr)
        opts = SgdOptions(self._lr, _finite(momentum, "momentum"), _finite(dampening, "dampening"),
                          _finite(weight_decay, "weight_decay"), bool(nesterov))
        self._make(lib.ag_sgd_create, opts)


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError("AdamW(): argument 'betas' must be a pair of floats, not %r" % (betas,))
        super().__init__(params, lr)
        opts = AdamwOptions(self._lr, _finite(betas[0], "beta1"), _finite(betas[1], "beta2"),
                            _finite(eps, "eps"), _finite(weight_decay, "weight_decay"))
        self._make(lib.ag_adamw_create, opts)


def clip_grad_norm_(params, max_norm):
    """Scale the gradients so their total norm is at most max_norm (no host
    sync); returns the total norm before clipping as a 0-d tensor."""
    from ._tensor import _wrap
    if isinstance(params, Tensor):  # one tensor, as torch takes it (not its rows)
        params = [params]
    pl = _param_list(params)
    try:
        h = lib.ag_clip_grad_norm(byref(pl), _finite(max_norm, "max_norm"))
    finally:
        lib.ag_params_free(byref(pl))
    return _wrap(h, "clip_grad_norm_")
