"""Learning-rate schedulers with torch.optim.lr_scheduler's names and
attributes (base_lrs, last_epoch, get_last_lr, state_dict): each sets the
'lr' of every parameter group, which the optimizer reads at its next step.
Rates come from closed forms of the epoch (the C library's ag_schedule_lr
where it computes torch's value), so they do not drift from torch's
recursive updates beyond rounding, but a rate set by hand between steps is
overwritten rather than chained from."""
import bisect
import math
import numbers
from ctypes import Structure, byref, c_double, c_int, c_int64

from ._lib import lib, raise_last


class _Schedule(Structure):  # include/anygrad/optim.h: ag_schedule
    _fields_ = [("kind", c_int), ("lr", c_double), ("lr_min", c_double), ("gamma", c_double),
                ("start_factor", c_double), ("end_factor", c_double), ("pct_start", c_double),
                ("div_factor", c_double), ("final_div_factor", c_double), ("step_size", c_int64),
                ("total", c_int64), ("period", c_int64), ("period_mult", c_int64), ("n_milestones", c_int),
                ("milestones", c_int64 * 16), ("warmup", c_int64), ("warmup_start_factor", c_double)]


_STEP, _MULTISTEP, _LINEAR, _COSINE_RESTARTS, _ONE_CYCLE = 1, 2, 3, 5, 6


def _c_lr(step, kind, **fields):
    s = _Schedule(kind=kind)
    for k, v in fields.items():
        if k == "milestones":
            s.n_milestones = len(v)
            for i, m in enumerate(v):
                s.milestones[i] = m
        else:
            setattr(s, k, v)
    v = lib.ag_schedule_lr(byref(s), step)
    if math.isnan(v):
        raise_last("lr_scheduler")
    return v


def _int(v, name, fn, low=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s(): %s must be an int, not %s" % (fn, name, type(v).__name__))
    v = int(v)
    if low is not None and v < low:
        raise ValueError("%s(): %s must be >= %d, got %d" % (fn, name, low, v))
    return v


def _num(v, name, fn):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError("%s(): %s must be a number, not %s" % (fn, name, type(v).__name__))
    return v


def _per_group(v, groups, name, fn):
    if isinstance(v, (list, tuple)):
        if len(v) != len(groups):
            raise ValueError("%s(): expected %d values for %s, got %d" % (fn, len(groups), name, len(v)))
        return [float(x) for x in v]
    return [float(v)] * len(groups)


def _check_optimizer(optimizer, fn):
    if not hasattr(optimizer, "param_groups"):
        raise TypeError("%s(): %s is not an Optimizer" % (fn, type(optimizer).__name__))


class _LRScheduler:
    def __init__(self, optimizer, last_epoch=-1, verbose=False):
        fn = type(self).__name__
        _check_optimizer(optimizer, fn)
        self.optimizer = optimizer
        _int(last_epoch, "last_epoch", fn, -1)
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError("param 'initial_lr' is not specified in param_groups[%d] when "
                                   "resuming an optimizer" % i)
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.verbose = verbose
        self._step_count = 0
        self.step()

    def lr_at(self, epoch, base_lr):
        raise NotImplementedError

    def get_lr(self):
        return [self.lr_at(self.last_epoch, b) for b in self.base_lrs]

    def get_last_lr(self):
        return self._last_lr

    def step(self, epoch=None):
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else _int(epoch, "epoch", "step")
        for g, lr in zip(self.optimizer.param_groups, self.get_lr()):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


LRScheduler = _LRScheduler


class StepLR(_LRScheduler):
    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size = _int(step_size, "step_size", "StepLR", 1)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        if self.gamma < 0 or e < 0:
            return base * self.gamma ** (e // self.step_size)
        return _c_lr(e, _STEP, lr=base, step_size=self.step_size, gamma=self.gamma)


class MultiStepLR(_LRScheduler):
    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        self.milestones = sorted(_int(m, "milestones", "MultiStepLR") for m in milestones)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        ms = self.milestones
        if e >= 0 and self.gamma >= 0 and len(ms) <= 16 and all(a < b for a, b in zip(ms, ms[1:])) \
                and all(m >= 0 for m in ms):
            return _c_lr(e, _MULTISTEP, lr=base, milestones=ms, gamma=self.gamma)
        return base * self.gamma ** bisect.bisect_right(ms, e)


class LinearLR(_LRScheduler):
    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1,
                 verbose=False):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or "
                             "equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = _int(total_iters, "total_iters", "LinearLR", 1)
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        return _c_lr(max(e, 0), _LINEAR, lr=base, start_factor=self.start_factor, end_factor=self.end_factor,
                     total=self.total_iters)


class ExponentialLR(_LRScheduler):
    def __init__(self, optimizer, gamma, last_epoch=-1, verbose=False):
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        return base * self.gamma ** e


class LambdaLR(_LRScheduler):
    def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose=False):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError("Expected %d lr_lambdas, but got %d" % (n, len(lr_lambda)))
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        d = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        d["lr_lambdas"] = [None] * len(self.lr_lambdas)
        return d

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        state_dict.pop("lr_lambdas", None)
        self.__dict__.update(state_dict)


class CosineAnnealingLR(_LRScheduler):
    """torch's closed form: periodic past T_max (torch's rates go back up)."""

    def __init__(self, optimizer, T_max, eta_min=0, last_epoch=-1, verbose=False):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * e / self.T_max)) / 2


class CosineAnnealingWarmRestarts(_LRScheduler):
    """Cosine annealing restarted every T_0, T_0 * T_mult, ... epochs
    (ag_schedule_cosine_restarts); step(epoch) takes a whole epoch only."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0, last_epoch=-1, verbose=False):
        fn = "CosineAnnealingWarmRestarts"
        if isinstance(T_0, bool) or not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError("Expected positive integer T_0, but got {}".format(T_0))
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError("Expected integer T_mult >= 1, but got {}".format(T_mult))
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, float(_num(eta_min, "eta_min", fn))
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        if e < 0:
            return base
        return _c_lr(e, _COSINE_RESTARTS, lr=base, lr_min=self.eta_min, period=self.T_0,
                     period_mult=self.T_mult)

    @property
    def T_cur(self):
        e, t = max(self.last_epoch, 0), self.T_0
        while e >= t:
            e, t = e - t, t * self.T_mult
        return e


class ConstantLR(_LRScheduler):
    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1, verbose=False):
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor, self.total_iters = float(factor), _int(total_iters, "total_iters", "ConstantLR", 0)
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        return base * (self.factor if e < self.total_iters else 1.0)


class PolynomialLR(_LRScheduler):
    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1, verbose=False):
        self.total_iters = _int(total_iters, "total_iters", "PolynomialLR", 1)
        self.power = float(power)
        super().__init__(optimizer, last_epoch, verbose)

    def lr_at(self, e, base):
        return base * (1.0 - min(self.total_iters, e) / self.total_iters) ** self.power


class MultiplicativeLR(_LRScheduler):
    """lr times lr_lambda(epoch) at every step after the first (chained from
    the group's current lr, as torch)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose=False):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError("Expected %d lr_lambdas, but got %d" % (n, len(lr_lambda)))
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch, verbose)

    def get_lr(self):
        gs = self.optimizer.param_groups
        if self.last_epoch > 0:
            return [g["lr"] * f(self.last_epoch) for f, g in zip(self.lr_lambdas, gs)]
        return [g["lr"] for g in gs]

    state_dict = LambdaLR.state_dict
    load_state_dict = LambdaLR.load_state_dict


class OneCycleLR(_LRScheduler):
    """torch's OneCycleLR: anneal_strategy 'cos' or 'linear', three_phase,
    and cycle_momentum (betas[0] or momentum of every group, between
    max_momentum and base_momentum, as torch)."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1, verbose=False):
        fn = "OneCycleLR"
        _check_optimizer(optimizer, fn)
        if total_steps is None and epochs is None and steps_per_epoch is None:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if total_steps is not None:
            if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
                raise ValueError("Expected positive integer total_steps, but got {}".format(total_steps))
            self.total_steps = total_steps
        else:
            if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs <= 0:
                raise ValueError("Expected positive integer epochs, but got {}".format(epochs))
            spe = steps_per_epoch
            if isinstance(spe, bool) or not isinstance(spe, int) or spe <= 0:
                raise ValueError("Expected positive integer steps_per_epoch, but got {}".format(spe))
            self.total_steps = epochs * steps_per_epoch
        if not isinstance(pct_start, numbers.Real) or pct_start < 0 or pct_start > 1:
            raise ValueError("Expected float between 0 and 1 pct_start, but got {}".format(pct_start))
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must by one of 'cos' or 'linear', instead got "
                             "{}".format(anneal_strategy))
        self.pct_start, self.anneal_strategy = float(pct_start), anneal_strategy
        self.three_phase = three_phase
        self.div_factor, self.final_div_factor = float(div_factor), float(final_div_factor)
        ts = self.total_steps
        mx, base = "max_momentum", "base_momentum"
        if three_phase:
            self._schedule_phases = [
                {"end_step": float(pct_start * ts) - 1, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": mx, "end_momentum": base},
                {"end_step": float(2 * pct_start * ts) - 2, "start_lr": "max_lr", "end_lr": "initial_lr",
                 "start_momentum": base, "end_momentum": mx},
                {"end_step": ts - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": mx, "end_momentum": mx}]
        else:
            self._schedule_phases = [
                {"end_step": float(pct_start * ts) - 1, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": mx, "end_momentum": base},
                {"end_step": ts - 1, "start_lr": "max_lr", "end_lr": "min_lr",
                 "start_momentum": base, "end_momentum": mx}]
        max_lrs = _per_group(max_lr, optimizer.param_groups, "max_lr", fn)
        if last_epoch == -1:
            for lr, g in zip(max_lrs, optimizer.param_groups):
                g["initial_lr"] = lr / div_factor
                g["max_lr"] = lr
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            defaults = getattr(optimizer, "defaults", {})
            if "momentum" not in defaults and "betas" not in defaults:
                raise ValueError("optimizer must support momentum with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in defaults
            max_ms = _per_group(max_momentum, optimizer.param_groups, "max_momentum", fn)
            base_ms = _per_group(base_momentum, optimizer.param_groups, "base_momentum", fn)
            if last_epoch == -1:
                for m, b, g in zip(max_ms, base_ms, optimizer.param_groups):
                    self._set_momentum(g, m)
                    g["max_momentum"], g["base_momentum"] = m, b
        super().__init__(optimizer, last_epoch, verbose)

    def _set_momentum(self, g, m):
        if self.use_beta1:
            g["betas"] = (m,) + tuple(g["betas"][1:])
        else:
            g["momentum"] = m

    @staticmethod
    def _anneal(strategy, start, end, pct):
        if strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError("Tried to step {} times. The specified number of total steps is {}"
                             .format(step, self.total_steps))
        out = []
        c_ok = (not self.three_phase and self.anneal_strategy == "cos" and 0 < self.pct_start < 1
                and self.pct_start * self.total_steps >= 2 and step < self.total_steps)
        for g in self.optimizer.param_groups:
            start = 0
            for i, ph in enumerate(self._schedule_phases):
                end = ph["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(self.anneal_strategy, g[ph["start_lr"]], g[ph["end_lr"]], pct)
                    if self.cycle_momentum:
                        self._set_momentum(g, self._anneal(self.anneal_strategy, g[ph["start_momentum"]],
                                                           g[ph["end_momentum"]], pct))
                    break
                start = ph["end_step"]
            if c_ok and g["initial_lr"] == g["max_lr"] / self.div_factor \
                    and g["min_lr"] == g["initial_lr"] / self.final_div_factor:
                lr = _c_lr(step, _ONE_CYCLE, lr=g["max_lr"], total=self.total_steps,
                           pct_start=self.pct_start, div_factor=self.div_factor,
                           final_div_factor=self.final_div_factor)
            out.append(lr)
        return out


class SequentialLR(_LRScheduler):
    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1, verbose=False):
        _check_optimizer(optimizer, "SequentialLR")
        for i, s in enumerate(schedulers):
            if getattr(s, "optimizer", None) is not optimizer:
                raise ValueError("Sequential Schedulers expects all schedulers to belong to the same "
                                 "optimizer, but got schedulers at index %d to be different than the "
                                 "optimizer passed in." % i)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more "
                             "than the number of milestone points, but got number of schedulers {} and the "
                             "number of milestones to be equal to {}".format(len(schedulers),
                                                                            len(milestones)))
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        for s in self._schedulers:
            s.last_epoch -= 1
        s0 = self._schedulers[0]
        s0._step_count = 0
        s0.step()
        self._last_lr = s0.get_last_lr()

    def step(self):
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            s.step(0)
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def state_dict(self):
        d = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        d["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return d

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for s, d in zip(self._schedulers, subs):
            s.load_state_dict(d)


class ReduceLROnPlateau:
    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, eps=1e-8, verbose=False):
        _check_optimizer(optimizer, "ReduceLROnPlateau")
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(optimizer.param_groups):
                raise ValueError("expected {} min_lrs, got {}".format(len(optimizer.param_groups),
                                                                       len(min_lr)))
            self.min_lrs = list(min_lr)
        else:
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience, self.verbose, self.cooldown = patience, verbose, cooldown
        self.cooldown_counter = 0
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.best = None
        self.num_bad_epochs = None
        self.mode_worse = None
        self.eps = eps
        self.last_epoch = 0
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _reset(self):
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch=None):
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        self.last_epoch = epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for i, g in enumerate(self.optimizer.param_groups):
                old = float(g["lr"])
                new = max(old * self.factor, self.min_lrs[i])
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self):
        return self._last_lr

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def is_better(self, a, best):
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min" and self.threshold_mode == "abs":
            return a < best - self.threshold
        if self.mode == "max" and self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode, threshold, threshold_mode):
        if mode not in ("min", "max"):
            raise ValueError("mode " + str(mode) + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + str(threshold_mode) + " is unknown!")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold, threshold_mode=self.threshold_mode)
