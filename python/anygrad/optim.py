"""anygrad.optim: SGD, Adam, AdamW and RMSprop with torch.optim's parameter
groups and state_dict layout. SGD, AdamW and Adam without weight decay run
on the C library's fused multi-tensor update (one launch per group) when
every group shares the options the C optimizer shares; anything else (f64
AdamW, per-group betas, Adam's L2 decay, RMSprop) runs torch's
single-tensor update in Python over tensor ops. The state moves between the
two through state_dict(), so changing an option between steps is allowed."""
import math
import numbers
import weakref
from ctypes import byref, pointer

from ._lib import lib, check, raise_last, ParamList, SgdOptions, AdamwOptions, ParamGroup, RmspropOptions
from ._tensor import Tensor, _finite, _wrap, no_grad, zeros_like, tensor, float32
from . import _ops
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


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


def _hyper(v, name, fn, low=0.0, high=None, open_high=False):
    """A finite hyperparameter in [low, high] (or [low, high)), torch's ValueError otherwise."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        if isinstance(v, Tensor) and v.numel() == 1:
            v = v.item()
        else:
            raise TypeError("%s(): %s must be a number, not %s" % (fn, name, type(v).__name__))
    v = _finite(v, name, fn)
    if v < low or (high is not None and (v >= high if open_high else v > high)):
        raise ValueError("%s(): Invalid %s value: %r" % (fn, name, v))
    return v


class Optimizer:
    """torch.optim.Optimizer: param_groups (a list of dicts whose values the
    next step reads), add_param_group, state_dict, load_state_dict, zero_grad."""
    _c_kind = None  # "sgd" / "adamw": the C optimizer that can run this one

    def __init__(self, params, defaults):
        fn = type(self).__name__
        if isinstance(params, Tensor) or not hasattr(params, "__iter__") or isinstance(params, (dict, str)):
            raise TypeError("%s(): params argument given to the optimizer should be an iterable of Tensors "
                            "or dicts, but got %s" % (fn, type(params).__name__))
        self.defaults = defaults
        self.param_groups = []
        self._pstate = {}   # Python update: id(param) -> state dict
        self._o = None      # the C optimizer when it runs this one
        self._sig = None    # what the C optimizer was built with
        self._want = None   # the signature the last _setup decided on
        self._pinfo = None  # (one device, dtypes) of the parameters, from the last _setup
        self._clr = []      # the lr each C group has now
        groups = list(params)
        if not groups:
            raise ValueError("%s(): optimizer got an empty parameter list" % fn)
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self._add_group(g)
        self._setup()
        _LIVE.add(self)

    # ---- groups
    @property
    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def _check_group(self, g):
        """Validate the options of group g in place (subclasses)."""

    def _add_group(self, group):
        fn = type(self).__name__
        if not isinstance(group, dict):
            raise TypeError("%s(): param group must be a dict, not %s" % (fn, type(group).__name__))
        g = dict(group)
        ps = g.get("params")
        if isinstance(ps, Tensor):
            ps = [ps]
        elif isinstance(ps, set):
            raise TypeError("%s(): optimizer parameters need to be organized in ordered collections, but "
                            "the ordering of tensors in sets will change between runs. Please use a list "
                            "instead." % fn)
        elif ps is None or not hasattr(ps, "__iter__"):
            raise TypeError("%s(): a param group needs 'params', an iterable of Tensors" % fn)
        ps = list(ps)
        for p in ps:
            if not isinstance(p, Tensor):
                raise TypeError("%s(): optimizer can only optimize Tensors, but one of the params is %s"
                                % (fn, type(p).__name__))
        if not ps:
            raise ValueError("%s(): optimizer got an empty parameter list" % fn)
        seen = {id(p) for q in self.param_groups for p in q["params"]}
        if any(id(p) in seen for p in ps) or len({id(p) for p in ps}) != len(ps):
            raise ValueError("%s(): some parameters appear in more than one parameter group" % fn)
        g["params"] = ps
        for k, v in self.defaults.items():
            if v is required and k not in g:
                raise ValueError("%s(): parameter group didn't specify a value of required optimization "
                                 "parameter %s" % (fn, k))
            g.setdefault(k, v)
        self._check_group(g)
        self.param_groups.append(g)

    def add_param_group(self, param_group):
        """Append a group (torch's add_param_group); the state of the other
        parameters is kept."""
        sd = self.state_dict() if self._o else None
        self._add_group(param_group)
        if sd is not None:
            self._drop_c()
            self._setup()
            self._load_state(sd["state"])
        else:
            self._setup()

    # ---- the C optimizer
    def _c_signature(self):
        """A hashable description of the C optimizer that runs these groups,
        or None when it cannot (subclasses)."""
        return None

    def _drop_c(self):
        if self._o:
            lib.ag_optimizer_free(self._o)
        self._o, self._sig, self._clr = None, None, []

    def _param_info(self):
        if self._pinfo is None:
            ps = self._params
            self._pinfo = (len({str(p.device) for p in ps}) == 1, {p.dtype for p in ps})
        return self._pinfo

    def _setup(self):
        """Pick the C optimizer when it can run the groups as they are now."""
        self._pinfo = None
        sig = self._c_signature()
        self._want = sig
        if sig is None:
            return
        try:
            self._o = self._build([p._handle for p in self._params], sig)
        except Exception:  # noqa: BLE001 - the device or dtype has no fused update: the Python one
            lib.ag_error_clear()
            return
        self._sig = sig
        self._clr = [g["lr"] for g in self.param_groups]

    def _c_options(self, sig):
        raise NotImplementedError

    def _build(self, handles, sig=None):
        """A C optimizer over the tensors `handles` in group order, with the
        groups' options (owned by the caller; raises on failure)."""
        sig = sig if sig is not None else self._sig
        opts, create = self._c_options(sig)
        lists, groups = [], (ParamGroup * len(self.param_groups))()
        k = 0
        try:
            for gi, g in enumerate(self.param_groups):
                pl = ParamList()
                lists.append(pl)
                for _ in g["params"]:
                    check(lib.ag_params_add(byref(pl), str(k).encode(), handles[k]))
                    k += 1
                groups[gi].params = pointer(pl)
                groups[gi].lr = float(g["lr"])
                groups[gi].weight_decay = float(g["weight_decay"])
            o = create(groups, len(self.param_groups), byref(opts))
        finally:
            for pl in lists:
                lib.ag_params_free(byref(pl))
        if not o:
            raise_last(type(self).__name__)
        return o

    def _holds(self, tensors):
        return any(id(p) in tensors for p in self._params)

    def _prepare_follow(self, new_handles):
        """Module.to(), before it moves anything: a C optimizer over the
        tensors the parameters are about to hold (new_handles: id(param) ->
        handle), or the reason this optimizer cannot hold them."""
        try:
            return self._build([new_handles.get(id(p), p._h) for p in self._params])
        except Exception as e:  # noqa: BLE001 - re-raised with what was asked
            raise RuntimeError("anygrad: Module.to(): the %s optimizer holding these parameters cannot "
                               "follow them (%s); nothing was moved. Build the optimizer after the "
                               "move" % (type(self).__name__, e)) from None

    def _follow(self, o):
        """Module.to(), after it moved the parameters: take over the C
        optimizer `o` built by _prepare_follow, with this one's state and
        step count."""
        old = self._o
        try:
            _copy_c_state(old, o)
            lib.ag_optimizer_set_steps(o, lib.ag_optimizer_steps(old))
        except BaseException:
            lib.ag_optimizer_free(o)
            raise
        self._o = o
        self._pinfo = None
        lib.ag_optimizer_free(old)

    def __del__(self):
        o = getattr(self, "_o", None)
        if o:
            self._o = None
            lib.ag_optimizer_free(o)

    # ---- stepping
    def _sync(self):
        """Make the C optimizer (or its absence) match param_groups now."""
        for g in self.param_groups:
            self._check_group(g)
        sig = self._c_signature()
        if sig != self._want and self._o and sig is not None and self._rebuild_c(sig):
            pass
        elif sig != self._want:
            state = self.state_dict()["state"]
            self._drop_c()
            self._pstate = {}
            self._setup()
            self._load_state(state)
        if self._o:
            for i, g in enumerate(self.param_groups):
                if g["lr"] != self._clr[i]:
                    check(lib.ag_optimizer_set_group_lr(self._o, i, float(g["lr"])))
                    self._clr[i] = g["lr"]

    def _rebuild_c(self, sig):
        """C to C for options changed between steps (OneCycleLR cycling the
        momentum every step): a new C optimizer takes the state tensors that
        both have, copied on the device; False when it cannot be built."""
        try:
            o = self._build([p._handle for p in self._params], sig)
        except Exception:  # noqa: BLE001 - the state_dict route reports it
            lib.ag_error_clear()
            return False
        try:
            _copy_c_state(self._o, o)
            steps = lib.ag_optimizer_steps(self._o)
            lib.ag_optimizer_set_steps(o, steps)
        except BaseException:
            lib.ag_optimizer_free(o)
            raise
        lib.ag_optimizer_free(self._o)
        self._o, self._sig, self._want = o, sig, sig
        self._clr = [g["lr"] for g in self.param_groups]
        return True

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ._tensor import enable_grad
            with enable_grad():
                loss = closure()
        self._sync()
        if self._o:
            check(lib.ag_optimizer_step(self._o))
        else:
            with no_grad():
                for g in self.param_groups:
                    for p in g["params"]:
                        grad = p.grad
                        if grad is None:
                            continue
                        st = self._pstate.setdefault(id(p), {})
                        self._py_update(g, p, grad, st)
        return loss

    def zero_grad(self, set_to_none=True):
        if set_to_none:
            for p in self._params:
                lib.ag_tensor_zero_grad(p._handle)
            return
        with no_grad():
            for p in self._params:
                g = p.grad
                if g is not None:
                    g.zero_()

    @property
    def steps(self):
        if self._o:
            return int(lib.ag_optimizer_steps(self._o))
        return max([int(_as_float(s.get("step", 0))) for s in self._pstate.values()] or [0])

    # ---- state
    def _c_state(self):
        """The C optimizer's state tensors by name ("<index>.<state>"), borrowed."""
        pl = ParamList()
        try:
            check(lib.ag_optimizer_state(self._o, byref(pl)))
            return {pl.names[i].decode(): _wrap(lib.ag_tensor_retain(pl.tensors[i]))
                    for i in range(pl.count)}
        finally:
            lib.ag_params_free(byref(pl))

    def _state_from_c(self, idx, c, steps):
        """torch's state of parameter idx from the C state tensors (subclasses)."""
        raise NotImplementedError

    def _state_to_c(self, idx, st, c):
        """Write torch's state st of parameter idx into the C state tensors."""
        raise NotImplementedError

    def state_dict(self):
        """{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}
        as torch's; the tensors are copies (a later step does not change them)."""
        groups, index, k = [], {}, 0
        for g in self.param_groups:
            d = {key: v for key, v in g.items() if key != "params"}
            d["params"] = list(range(k, k + len(g["params"])))
            for p in g["params"]:
                index[id(p)] = k
                k += 1
            groups.append(d)
        state = {}
        with no_grad():
            if self._o:
                steps = int(lib.ag_optimizer_steps(self._o))
                if steps > 0:
                    c = self._c_state()
                    for i, p in enumerate(self._params):
                        state[i] = self._state_from_c(i, c, steps)
            else:
                for p in self._params:
                    st = self._pstate.get(id(p))
                    if st is not None:
                        state[index[id(p)]] = {key: (v.clone() if isinstance(v, Tensor) else v)
                                               for key, v in st.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Take a state_dict() (this process's, or one read back by
        anygrad.load, from any device): the options of every group and the
        state, cast to each parameter's dtype and moved to its device."""
        fn = type(self).__name__ + ".load_state_dict"
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise TypeError("%s(): expected a dict with 'state' and 'param_groups'" % fn)
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, s in zip(self.param_groups, groups):
            if len(g["params"]) != len(s["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size "
                                 "of optimizer's group")
        state = {}
        params = self._params
        for k, v in state_dict["state"].items():
            state[int(k)] = v
            if not isinstance(v, dict) or not 0 <= int(k) < len(params):
                raise ValueError("%s(): state of parameter %r is not a dict of a parameter this optimizer "
                                 "holds" % (fn, k))
            for key, t in v.items():
                if isinstance(t, Tensor) and key != "step" and tuple(t.shape) != tuple(params[int(k)].shape):
                    raise ValueError("%s(): state '%s' of parameter %d has shape %s, the parameter %s"
                                     % (fn, key, int(k), list(t.shape), list(params[int(k)].shape)))
        old = [dict(g) for g in self.param_groups]
        remap = {}
        k = 0
        for g, s in zip(self.param_groups, groups):
            for j in s["params"]:
                remap[int(j)] = k
                k += 1
        try:
            for g, s in zip(self.param_groups, groups):
                for key, v in s.items():
                    if key != "params":
                        g[key] = tuple(v) if key == "betas" else v
                self._check_group(g)
        except BaseException:
            for g, o in zip(self.param_groups, old):
                g.clear()
                g.update(o)
            raise
        st = {remap[i]: v for i, v in state.items() if i in remap}
        self._drop_c()
        self._pstate = {}
        self._setup()
        self._load_state(st)

    def _load_state(self, state):
        params = self._params
        with no_grad():
            if self._o:
                c = self._c_state()
                steps = 0
                for i, p in enumerate(params):
                    s = state.get(i)
                    if s is None:
                        for key, t in c.items():
                            if key.split(".")[0] == str(i):
                                t.zero_()
                        continue
                    steps = max(steps, int(_as_float(s.get("step", 0))))
                    self._state_to_c(i, s, c)
                if not state:
                    steps = 0
                elif self._c_kind == "sgd":
                    steps = max(steps, 1)
                lib.ag_optimizer_set_steps(self._o, steps)
            else:
                for i, p in enumerate(params):
                    s = state.get(i)
                    if s is not None:
                        self._pstate[id(p)] = {key: (_like(v, p, key) if isinstance(v, Tensor) else v)
                                               for key, v in s.items()}

    def __repr__(self):
        s = type(self).__name__ + " ("
        for i, g in enumerate(self.param_groups):
            s += "\nParameter Group %d" % i
            for k in sorted(g):
                if k != "params":
                    s += "\n    %s: %s" % (k, g[k])
        return s + "\n)"


def _as_float(v):
    return float(v.item()) if isinstance(v, Tensor) else float(v)


def _like(v, p, key):
    """A state tensor as parameter p holds it: on p's device, in p's dtype
    (not 'step'), a copy."""
    if key == "step":
        return v.to(device=p.device).clone()
    return v.to(device=p.device, dtype=p.dtype).clone()


def _copy_c_state(src_o, dst_o):
    src, dst = ParamList(), ParamList()
    try:
        check(lib.ag_optimizer_state(src_o, byref(src)))
        check(lib.ag_optimizer_state(dst_o, byref(dst)))
        have = {src.names[i]: src.tensors[i] for i in range(src.count)}
        for i in range(dst.count):
            s = have.get(dst.names[i])
            if s:
                check(lib.ag_copy_(dst.tensors[i], s))
    finally:
        lib.ag_params_free(byref(src))
        lib.ag_params_free(byref(dst))


# ---------------------------------------------------------------- SGD

class SGD(Optimizer):
    _c_kind = "sgd"

    def __init__(self, params, lr=required, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False):
        if lr is not required:
            _hyper(lr, "learning rate", "SGD")
        _hyper(momentum, "momentum", "SGD")
        _hyper(weight_decay, "weight_decay", "SGD")
        _hyper(dampening, "dampening", "SGD", low=-math.inf)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD(): Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def _check_group(self, g):
        _hyper(g["lr"], "learning rate", "SGD")
        _hyper(g["momentum"], "momentum", "SGD")
        _hyper(g["weight_decay"], "weight_decay", "SGD")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("SGD(): Nesterov momentum requires a momentum and zero dampening")

    def _c_signature(self):
        one, dts = self._param_info()
        shared = {(float(g["momentum"]), float(g["dampening"]), bool(g["nesterov"]), bool(g["maximize"]))
                  for g in self.param_groups}
        if not one or len(shared) != 1 or any(not dt.is_floating_point for dt in dts):
            return None
        m, d, n, mx = shared.pop()
        if mx:
            return None
        return ("sgd", m, d, n, tuple(float(g["weight_decay"]) for g in self.param_groups))

    def _c_options(self, sig):
        _, m, d, n, _ = sig
        return SgdOptions(self.param_groups[0]["lr"], m, d, 0.0, n), lib.ag_sgd_create_groups

    def _state_from_c(self, i, c, steps):
        buf = c.get("%d.momentum" % i)
        return {"momentum_buffer": buf.clone() if buf is not None else None}

    def _state_to_c(self, i, st, c):
        buf = c.get("%d.momentum" % i)
        v = st.get("momentum_buffer")
        if buf is not None:
            if v is None:
                buf.zero_()
            else:
                buf.copy_(v)

    def _py_update(self, g, p, grad, st):
        d_p = -grad if g["maximize"] else grad
        wd, m = g["weight_decay"], g["momentum"]
        if wd != 0:
            d_p = d_p + p * wd
        if m != 0:
            buf = st.get("momentum_buffer")
            if buf is None:
                buf = d_p.clone()
                st["momentum_buffer"] = buf
            else:
                buf.copy_(buf * m + d_p * (1 - g["dampening"]))
            d_p = d_p + buf * m if g["nesterov"] else buf
        else:
            st["momentum_buffer"] = None
        p.copy_(p + d_p * (-g["lr"]))


# ---------------------------------------------------------------- Adam, AdamW

class _AdamBase(Optimizer):
    _c_kind = "adamw"
    _decoupled = True

    def __init__(self, params, lr, betas, eps, weight_decay, amsgrad, maximize, foreach, capturable,
                 differentiable, fused):
        fn = type(self).__name__
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError("%s(): argument 'betas' must be a pair of floats, not %r" % (fn, betas))
        _hyper(lr, "learning rate", fn)
        _hyper(eps, "epsilon", fn)
        _hyper(betas[0], "beta parameter at index 0", fn, high=1.0, open_high=True)
        _hyper(betas[1], "beta parameter at index 1", fn, high=1.0, open_high=True)
        _hyper(weight_decay, "weight_decay", fn)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable)
        if not self._decoupled:  # torch 1.13's AdamW has neither
            defaults.update(differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def _check_group(self, g):
        fn = type(self).__name__
        b = g["betas"]
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise TypeError("%s(): argument 'betas' must be a pair of floats, not %r" % (fn, b))
        _hyper(g["lr"], "learning rate", fn)
        _hyper(g["eps"], "epsilon", fn)
        _hyper(b[0], "beta parameter at index 0", fn, high=1.0, open_high=True)
        _hyper(b[1], "beta parameter at index 1", fn, high=1.0, open_high=True)
        _hyper(g["weight_decay"], "weight_decay", fn)

    def _c_signature(self):
        one, dts = self._param_info()
        shared = {(float(g["betas"][0]), float(g["betas"][1]), float(g["eps"]),
                   bool(g["maximize"]) or bool(g["amsgrad"])) for g in self.param_groups}
        if not one or len(shared) != 1 or dts != {float32}:
            return None
        b1, b2, eps, mx = shared.pop()
        if mx or (not self._decoupled and any(g["weight_decay"] != 0 for g in self.param_groups)):
            return None
        return ("adamw", b1, b2, eps, tuple(float(g["weight_decay"]) for g in self.param_groups))

    def _c_options(self, sig):
        _, b1, b2, eps, _ = sig
        return AdamwOptions(self.param_groups[0]["lr"], b1, b2, eps, 0.0), lib.ag_adamw_create_groups

    def _state_from_c(self, i, c, steps):
        return {"step": tensor(float(steps)), "exp_avg": c["%d.exp_avg" % i].clone(),
                "exp_avg_sq": c["%d.exp_avg_sq" % i].clone()}

    def _state_to_c(self, i, st, c):
        c["%d.exp_avg" % i].copy_(st["exp_avg"])
        c["%d.exp_avg_sq" % i].copy_(st["exp_avg_sq"])

    def _py_update(self, g, p, grad, st):
        if not st:
            st["step"] = tensor(0.0)
            st["exp_avg"] = zeros_like(p)
            st["exp_avg_sq"] = zeros_like(p)
        if g["amsgrad"] and st.get("max_exp_avg_sq") is None:
            st["max_exp_avg_sq"] = zeros_like(p)
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):  # Module.to() moved the parameter
            if k in st and (st[k].device != p.device or st[k].dtype != p.dtype):
                st[k] = st[k].to(device=p.device, dtype=p.dtype)
        if g["maximize"]:
            grad = -grad
        lr, wd, eps = g["lr"], g["weight_decay"], g["eps"]
        b1, b2 = g["betas"]
        step = _as_float(st["step"]) + 1
        st["step"] = tensor(step)
        if wd != 0:
            if self._decoupled:
                p.copy_(p * (1 - lr * wd))
            else:
                grad = grad + p * wd
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m.copy_(m * b1 + grad * (1 - b1))
        v.copy_(v * b2 + grad * grad * (1 - b2))
        bc1 = 1 - b1 ** step
        bc2 = 1 - b2 ** step
        if g["amsgrad"]:
            mx = st["max_exp_avg_sq"]
            mx.copy_(_ops.maximum(mx, v))
            v = mx
        denom = v.sqrt() / math.sqrt(bc2) + eps
        p.copy_(p + (m / denom) * (-(lr / bc1)))


class AdamW(_AdamBase):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, foreach, capturable,
                         differentiable, fused)


class Adam(_AdamBase):
    """torch.optim.Adam: weight decay is L2 (grad += weight_decay * p before
    the moments); with weight_decay 0 it is AdamW with weight_decay 0."""
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, foreach, capturable,
                         differentiable, fused)


# ---------------------------------------------------------------- RMSprop

class RMSprop(Optimizer):
    """torch.optim.RMSprop: the C library's ag_rmsprop_create_groups where
    the groups share alpha, eps, momentum and centered, else torch's
    single-tensor update in Python; both compose elementwise tensor ops."""
    _c_kind = "rmsprop"

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 foreach=None, maximize=False, differentiable=False):
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        self._check_group(dict(defaults))
        super().__init__(params, defaults)

    def _check_group(self, g):
        _hyper(g["lr"], "learning rate", "RMSprop")
        _hyper(g["eps"], "epsilon value", "RMSprop")
        _hyper(g["momentum"], "momentum value", "RMSprop")
        _hyper(g["weight_decay"], "weight_decay value", "RMSprop")
        _hyper(g["alpha"], "alpha value", "RMSprop")

    def _c_signature(self):
        one, dts = self._param_info()
        shared = {(float(g["alpha"]), float(g["eps"]), float(g["momentum"]), bool(g["centered"]),
                   bool(g["maximize"])) for g in self.param_groups}
        if not one or len(shared) != 1 or any(not dt.is_floating_point for dt in dts):
            return None
        alpha, eps, mom, centered, mx = shared.pop()
        if mx:
            return None
        wds = tuple(float(g["weight_decay"]) for g in self.param_groups)
        return ("rmsprop", alpha, eps, mom, centered, wds)

    def _c_options(self, sig):
        _, alpha, eps, mom, centered, _ = sig
        return (RmspropOptions(self.param_groups[0]["lr"], alpha, eps, 0.0, mom, centered),
                lib.ag_rmsprop_create_groups)

    def _state_from_c(self, i, c, steps):
        st = {"step": steps, "square_avg": c["%d.square_avg" % i].clone()}
        for k in ("momentum_buffer", "grad_avg"):
            t = c.get("%d.%s" % (i, k))
            if t is not None:
                st[k] = t.clone()
        return st

    def _state_to_c(self, i, st, c):
        for k in ("square_avg", "momentum_buffer", "grad_avg"):
            t = c.get("%d.%s" % (i, k))
            if t is not None:
                if st.get(k) is None:
                    t.zero_()
                else:
                    t.copy_(st[k])

    def _py_update(self, g, p, grad, st):
        if not st:
            st["step"] = 0
            st["square_avg"] = zeros_like(p)
            if g["momentum"] > 0:
                st["momentum_buffer"] = zeros_like(p)
            if g["centered"]:
                st["grad_avg"] = zeros_like(p)
        for k in ("square_avg", "momentum_buffer", "grad_avg"):
            t = st.get(k)
            if t is not None and (t.device != p.device or t.dtype != p.dtype):
                st[k] = t.to(device=p.device, dtype=p.dtype)
        if g["maximize"]:
            grad = -grad
        st["step"] = int(_as_float(st["step"])) + 1
        alpha, wd, eps, lr, mom = g["alpha"], g["weight_decay"], g["eps"], g["lr"], g["momentum"]
        if wd != 0:
            grad = grad + p * wd
        sq = st["square_avg"]
        sq.copy_(sq * alpha + grad * grad * (1 - alpha))
        if g["centered"]:
            ga = st.setdefault("grad_avg", zeros_like(p))
            ga.copy_(ga * alpha + grad * (1 - alpha))
            avg = (sq - ga * ga).sqrt()
        else:
            avg = sq.sqrt()
        avg = avg + eps
        if mom > 0:
            buf = st.setdefault("momentum_buffer", zeros_like(p))
            buf.copy_(buf * mom + grad / avg)
            p.copy_(p + buf * (-lr))
        else:
            p.copy_(p + (grad / avg) * (-lr))


def clip_grad_norm_(params, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """anygrad.nn.utils.clip_grad_norm_ (kept here as before)."""
    from .nn_utils import clip_grad_norm_ as f
    return f(params, max_norm, norm_type, error_if_nonfinite)
