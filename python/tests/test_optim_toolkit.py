"""The training toolkit against torch 1.13: optimizers with parameter groups
(SGD with nesterov, Adam, AdamW, RMSprop), their state_dict layout and
resume, the schedulers, nn.init, clip_grad_norm_, threads and RNG state."""
import math

import numpy as np
import pytest

import anygrad as ag

F32_TOL, F64_TOL = 1e-6, 1e-12


def _np(t):
    return np.asarray(t.detach().cpu().numpy(), dtype=np.float64)


def _init(seed, dtype):
    r = np.random.RandomState(seed)
    return [r.uniform(-1, 1, (3, 4)).astype(dtype), r.uniform(-1, 1, (4,)).astype(dtype),
            r.uniform(-1, 1, (2, 2)).astype(dtype)]


def _pair(th, dev, dtype=np.float32, seed=0):
    vals = _init(seed, dtype)
    a = [ag.tensor(v, device=dev, requires_grad=True) for v in vals]
    t = [th.tensor(v, requires_grad=True) for v in vals]
    return a, t


def _loss(ps, k):
    # a different gradient each step, bounded away from 0 (Adam normalises it): 3c p^2 + s, s in [1, 2]
    return sum(((p * p * p) * (0.3 + 0.1 * i) + p * (1.5 + 0.5 * math.sin(k + i))).sum()
               for i, p in enumerate(ps))


def _run(mk_ag, mk_th, a, t, steps=5, between=None):
    oa, ot = mk_ag(a), mk_th(t)
    for k in range(steps):
        if between:
            between(k, oa, ot)
        for o, ps in ((oa, a), (ot, t)):
            o.zero_grad()
            _loss(ps, k).backward()
            o.step()
    return oa, ot


def _close(a, t, tol):
    for x, y in zip(a, t):
        x, y = _np(x), y.detach().double().numpy()
        err = np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y)))
        assert err <= tol, (err, x, y)


def _groups(ps, **second):
    return [{"params": [ps[0], ps[2]]}, dict(params=[ps[1]], **second)]


CASES = {
    "sgd_nesterov_groups": lambda m, ps: m.optim.SGD(_groups(ps, lr=0.02, weight_decay=0.1), lr=0.05,
                                                     momentum=0.9, nesterov=True),
    "sgd_dampening_groups": lambda m, ps: m.optim.SGD(_groups(ps, lr=0.02), lr=0.05, momentum=0.8,
                                                      dampening=0.3, weight_decay=0.01),
    "adamw_groups": lambda m, ps: m.optim.AdamW(_groups(ps, weight_decay=0.0, lr=0.03), lr=0.01,
                                                weight_decay=0.05),
    "adam_l2": lambda m, ps: m.optim.Adam(_groups(ps, lr=0.03), lr=0.01, weight_decay=0.05),
    "adam_no_decay": lambda m, ps: m.optim.Adam(_groups(ps, lr=0.03), lr=0.01, betas=(0.8, 0.99)),
    "adam_group_betas": lambda m, ps: m.optim.Adam(_groups(ps, betas=(0.5, 0.9)), lr=0.01),
    "adamw_amsgrad": lambda m, ps: m.optim.AdamW(_groups(ps, lr=0.05), lr=0.01, betas=(0.9, 0.5),
                                                 amsgrad=True),
    "rmsprop": lambda m, ps: m.optim.RMSprop(_groups(ps, lr=0.002), lr=0.01),
    "rmsprop_c_groups": lambda m, ps: m.optim.RMSprop(_groups(ps, lr=0.003, weight_decay=0.1), lr=0.01,
                                                      momentum=0.9, centered=True),
    "rmsprop_centered_momentum": lambda m, ps: m.optim.RMSprop(_groups(ps, momentum=0.5), lr=0.01, alpha=0.9,
                                                               momentum=0.9, centered=True,
                                                               weight_decay=0.1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_optimizers_match_torch_f32(th, dev, case):
    if dev != "cpu" and case not in ("sgd_nesterov_groups", "adamw_groups", "adam_l2", "rmsprop_c_groups",
                                     "rmsprop_centered_momentum"):
        pytest.skip("small cases on the devices")
    a, t = _pair(th, dev)
    _run(lambda p: CASES[case](ag, p), lambda p: CASES[case](th, p), a, t)
    _close(a, t, F32_TOL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_optimizers_match_torch_f64_cpu(th, case):
    a, t = _pair(th, "cpu", np.float64)
    _run(lambda p: CASES[case](ag, p), lambda p: CASES[case](th, p), a, t)
    _close(a, t, F64_TOL)


def test_c_update_is_used_where_it_can_run(th):
    a, _ = _pair(th, "cpu")
    assert ag.optim.AdamW(_groups(a, weight_decay=0.0), lr=0.1)._o
    assert ag.optim.Adam(a, lr=0.1)._o  # no decay: the fused AdamW update
    assert not ag.optim.Adam(a, lr=0.1, weight_decay=0.1)._o  # L2 decay: the Python update
    assert ag.optim.SGD(_groups(a, lr=0.5), lr=0.1, momentum=0.9, nesterov=True)._o
    assert ag.optim.RMSprop(_groups(a, lr=0.5, weight_decay=0.1), momentum=0.9, centered=True)._o
    assert not ag.optim.RMSprop(_groups(a, momentum=0.5), momentum=0.9)._o  # momentum per group: Python


@pytest.mark.parametrize("per_group", [False, True])
def test_param_group_options_set_between_steps(th, dev, per_group):
    a, t = _pair(th, dev)

    def between(k, oa, ot):
        if k == 2:  # one group's lr: the C optimizer's group lr
            for o in (oa, ot):
                o.param_groups[1]["lr"] = 0.2
        if k == 3:  # betas and decay: a new C optimizer, or the Python update for per-group betas
            for o in (oa, ot):
                for g in o.param_groups[:1] if per_group else o.param_groups:
                    g["betas"] = (0.7, 0.95)
                o.param_groups[0]["weight_decay"] = 0.2
        if k == 4:
            assert (oa._o is None) == per_group
    oa, ot = _run(lambda p: ag.optim.AdamW(_groups(p), lr=0.05),
                  lambda p: th.optim.AdamW(_groups(p), lr=0.05), a, t, 5, between)
    # The fused update keeps 1 - beta2 in f32 (0.00099998713 for 0.999), so its exp_avg_sq is 1.3e-5
    # (relative) below torch's; the Python update that takes that state over at lr 0.2 inherits it.
    _close(a, t, 3e-6 if per_group else F32_TOL)
    assert oa.param_groups[1]["lr"] == 0.2


def test_add_param_group(th):
    a, t = _pair(th, "cpu")
    oa, ot = ag.optim.SGD([a[0]], lr=0.1, momentum=0.9), th.optim.SGD([t[0]], lr=0.1, momentum=0.9)
    for k in range(4):
        if k == 2:
            oa.add_param_group({"params": a[1:], "lr": 0.05})
            ot.add_param_group({"params": t[1:], "lr": 0.05})
        for o, ps in ((oa, a), (ot, t)):
            o.zero_grad()
            _loss(ps, k).backward()
            o.step()
    _close(a, t, F32_TOL)
    with pytest.raises(ValueError, match="more than one parameter group"):
        oa.add_param_group({"params": [a[0]]})


def test_state_dict_layout_matches_torch(th):
    for name in ("sgd_nesterov_groups", "adamw_groups", "adam_l2", "rmsprop_c_groups",
                 "rmsprop_centered_momentum"):
        a, t = _pair(th, "cpu")
        oa, ot = _run(lambda p: CASES[name](ag, p), lambda p: CASES[name](th, p), a, t, 2)
        sa, st = oa.state_dict(), ot.state_dict()
        assert sorted(sa) == ["param_groups", "state"]
        assert [g["params"] for g in sa["param_groups"]] == [g["params"] for g in st["param_groups"]]
        for ga, gt in zip(sa["param_groups"], st["param_groups"]):
            assert set(ga) == set(gt), (name, set(ga) ^ set(gt))
            for k in ("lr", "weight_decay"):
                assert ga[k] == gt[k]
        assert sorted(sa["state"]) == sorted(st["state"])
        for i in st["state"]:
            assert set(sa["state"][i]) == set(st["state"][i]), name
            for k, v in st["state"][i].items():
                if isinstance(v, th.Tensor) and v.ndim:
                    np.testing.assert_allclose(_np(sa["state"][i][k]), v.double().numpy(), rtol=1e-5,
                                               atol=1e-6)
                elif k == "step":
                    assert float(sa["state"][i][k]) == float(v)


def _train(opt_fn, ps, k0, k1, opt=None):
    opt = opt or opt_fn(ps)
    for k in range(k0, k1):
        opt.zero_grad()
        _loss(ps, k).backward()
        opt.step()
    return opt


@pytest.mark.parametrize("name", ["sgd_nesterov_groups", "adamw_groups", "adam_l2", "rmsprop_c_groups",
                                  "rmsprop_centered_momentum"])
@pytest.mark.parametrize("how", ["memory", "file"])
def test_resume_bit_for_bit(th, dev, name, how, tmp_path):
    if dev != "cpu" and name in ("adam_l2",):
        pytest.skip("small cases on the devices")
    mk = lambda p: CASES[name](ag, p)  # noqa: E731
    whole = [ag.tensor(v, device=dev, requires_grad=True) for v in _init(1, np.float32)]
    _train(mk, whole, 0, 6)
    first = [ag.tensor(v, device=dev, requires_grad=True) for v in _init(1, np.float32)]
    o1 = _train(mk, first, 0, 3)
    sd = o1.state_dict()
    params = {str(i): p for i, p in enumerate(first)}
    if how == "file":
        ag.save({"model": params, "optim": sd}, tmp_path / "ck.safetensors")
        ck = ag.load(tmp_path / "ck.safetensors", map_location="cpu")
        params, sd = ck["model"], ck["optim"]
        assert isinstance(sd["state"], dict) and 0 in sd["state"]
        assert sd["param_groups"][0].get("betas", (0, 0)) == o1.param_groups[0].get("betas", (0, 0))
    second = [ag.tensor(np.zeros_like(v), device=dev, requires_grad=True) for v in _init(1, np.float32)]
    with ag.no_grad():
        for i, p in enumerate(second):
            p.copy_(params[str(i)].to(dev))
    o2 = mk(second)
    o2.load_state_dict(sd)
    _train(mk, second, 3, 6, o2)
    for x, y in zip(whole, second):
        assert np.array_equal(x.detach().cpu().numpy(), y.detach().cpu().numpy())


def test_resume_across_devices(th):
    others = [d for d in ("opencl:0", "gpuemu:0") if d in ag.devices()]
    if not others:
        pytest.skip("no device besides the cpu")
    ag.set_numerics("portable")
    try:
        mk = lambda p: ag.optim.AdamW(_groups(p, weight_decay=0.0), lr=0.01)  # noqa: E731
        whole = [ag.tensor(v, requires_grad=True) for v in _init(2, np.float32)]
        _train(mk, whole, 0, 4)
        first = [ag.tensor(v, device=others[0], requires_grad=True) for v in _init(2, np.float32)]
        sd = _train(mk, first, 0, 2).state_dict()
        second = [ag.tensor(p.detach().cpu().numpy(), requires_grad=True) for p in first]
        o2 = mk(second)
        o2.load_state_dict(sd)
        _train(mk, second, 2, 4, o2)
        for x, y in zip(whole, second):
            assert np.array_equal(x.detach().numpy(), y.detach().numpy())
    finally:
        ag.set_numerics("default")


def test_zero_grad(th):
    a, _ = _pair(th, "cpu")
    o = ag.optim.SGD(a, lr=0.1)
    _loss(a, 0).backward()
    o.zero_grad(set_to_none=False)
    assert all(p.grad is not None and float(p.grad.abs().sum()) == 0 for p in a)
    o.zero_grad()
    assert all(p.grad is None for p in a)


def test_optimizer_errors(th):
    a, _ = _pair(th, "cpu")
    with pytest.raises(ValueError, match="empty parameter list"):
        ag.optim.Adam([])
    with pytest.raises(ValueError, match="more than one parameter group"):
        ag.optim.AdamW([{"params": [a[0]]}, {"params": [a[0], a[1]]}])
    with pytest.raises(TypeError, match="ordered collections"):
        ag.optim.SGD([{"params": set(a)}], lr=0.1)
    with pytest.raises(ValueError):
        ag.optim.RMSprop(a, lr=-1)
    with pytest.raises(ValueError):
        ag.optim.Adam(a, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="Nesterov"):
        ag.optim.SGD(a, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        ag.optim.SGD(a)
    o = ag.optim.Adam(_groups(a))
    sd = o.state_dict()
    with pytest.raises(ValueError, match="different number of parameter groups"):
        ag.optim.Adam(a).load_state_dict(sd)
    bad = {"state": {}, "param_groups": [dict(sd["param_groups"][0], params=[0]), sd["param_groups"][1]]}
    with pytest.raises(ValueError, match="doesn't match the size"):
        o.load_state_dict(bad)
    _loss(a, 0).backward()
    o.step()
    sd, before = o.state_dict(), o.state_dict()
    sd["state"][1]["exp_avg"] = ag.zeros(5)
    sd["param_groups"][0]["lr"] = 0.5
    with pytest.raises(ValueError, match="exp_avg' of parameter 1 has shape"):
        o.load_state_dict(sd)
    assert o.param_groups[0]["lr"] == before["param_groups"][0]["lr"]  # nothing changed
    assert np.array_equal(_np(o.state_dict()["state"][1]["exp_avg"]), _np(before["state"][1]["exp_avg"]))


# ---------------------------------------------------------------- schedulers

def _two_groups(m, lr=0.1, opt="SGD"):
    p = m.zeros(2, requires_grad=True)
    q = m.zeros(3, requires_grad=True)
    if opt == "SGD":
        return m.optim.SGD([{"params": [p]}, {"params": [q], "lr": lr * 3}], lr=lr, momentum=0.9)
    return m.optim.AdamW([{"params": [p]}, {"params": [q], "lr": lr * 3}], lr=lr)


SCHEDULERS = {
    "step": lambda m, o: m.optim.lr_scheduler.StepLR(o, 4, gamma=0.7),
    "multistep": lambda m, o: m.optim.lr_scheduler.MultiStepLR(o, [3, 7, 7, 20], gamma=0.5),
    "linear": lambda m, o: m.optim.lr_scheduler.LinearLR(o, start_factor=0.2, end_factor=0.9,
                                                         total_iters=13),
    "exponential": lambda m, o: m.optim.lr_scheduler.ExponentialLR(o, 0.93),
    "cosine": lambda m, o: m.optim.lr_scheduler.CosineAnnealingLR(o, T_max=12, eta_min=0.001),
    "lambda": lambda m, o: m.optim.lr_scheduler.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 0.9 ** e]),
    "multiplicative": lambda m, o: m.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.95 + 0.01 * (e % 3)),
    "warm_restarts": lambda m, o: m.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                                                  eta_min=0.01),
    "warm_restarts_1": lambda m, o: m.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=7),
    "constant": lambda m, o: m.optim.lr_scheduler.ConstantLR(o, factor=0.25, total_iters=6),
    "polynomial": lambda m, o: m.optim.lr_scheduler.PolynomialLR(o, total_iters=17, power=2.5),
    "onecycle": lambda m, o: m.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=40,
                                                             cycle_momentum=False),
    "onecycle_momentum": lambda m, o: m.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=40,
                                                                      max_momentum=[0.95, 0.9]),
    "onecycle_3phase_momentum": lambda m, o: m.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.5, total_steps=40, three_phase=True, base_momentum=0.8),
    "onecycle_3phase_linear": lambda m, o: m.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.5, epochs=4, steps_per_epoch=10, three_phase=True, anneal_strategy="linear",
        cycle_momentum=False),
    "sequential": lambda m, o: m.optim.lr_scheduler.SequentialLR(
        o, [m.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=5),
            m.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20),
            m.optim.lr_scheduler.StepLR(o, 3, 0.5)], milestones=[5, 25]),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_lrs_match_torch(th, name):
    oa, ot = _two_groups(ag), _two_groups(th)
    sa, st = SCHEDULERS[name](ag, oa), SCHEDULERS[name](th, ot)
    if hasattr(st, "base_lrs"):  # not on torch 1.13's SequentialLR
        assert sa.base_lrs == pytest.approx(st.base_lrs, abs=1e-15)
    for k in range(39):
        la, lt = sa.get_last_lr(), st.get_last_lr()
        assert len(la) == 2
        for x, y in zip(la, lt):
            assert abs(x - y) <= 1e-12, (k, la, lt)
        assert [g["lr"] for g in oa.param_groups] == la
        for ga, gt in zip(oa.param_groups, ot.param_groups):
            assert ga["momentum"] == pytest.approx(gt["momentum"], abs=1e-12), k  # OneCycleLR cycles it
        oa.step()
        ot.step()
        sa.step()
        st.step()


def test_onecycle_defaults_and_past_the_end(th):
    oa, ot = _two_groups(ag), _two_groups(th)
    sa = ag.optim.lr_scheduler.OneCycleLR(oa, max_lr=0.3, total_steps=35)
    st = th.optim.lr_scheduler.OneCycleLR(ot, max_lr=0.3, total_steps=35)
    for _ in range(35):
        assert sa.get_last_lr() == pytest.approx(st.get_last_lr(), abs=1e-12)
        sa.step()
        st.step()
    with pytest.raises(ValueError, match="Tried to step 36 times"):
        sa.step()
    with pytest.raises(ValueError):
        ag.optim.lr_scheduler.OneCycleLR(oa, max_lr=0.3)


def test_onecycle_cycles_adamw_betas_as_torch(th, dev):
    a, t = _pair(th, dev)
    oa, ot = ag.optim.AdamW(_groups(a), lr=0.05), th.optim.AdamW(_groups(t), lr=0.05)
    sa = ag.optim.lr_scheduler.OneCycleLR(oa, max_lr=0.05, total_steps=8)
    st = th.optim.lr_scheduler.OneCycleLR(ot, max_lr=0.05, total_steps=8)
    for k in range(6):
        for o, ps in ((oa, a), (ot, t)):
            o.zero_grad()
            _loss(ps, k).backward()
            o.step()
        sa.step()
        st.step()
        assert oa.param_groups[0]["betas"] == pytest.approx(ot.param_groups[0]["betas"], abs=1e-12)
        assert oa._o  # the fused update, rebuilt with the new beta1
    _close(a, t, F32_TOL)
    with pytest.raises(ValueError, match="momentum"):
        ag.optim.lr_scheduler.OneCycleLR(_FakeOpt(), max_lr=0.1, total_steps=5)


class _FakeOpt:
    defaults = {}
    param_groups = [{"lr": 0.1}]


def test_scheduler_state_dict_resume(th):
    o = _two_groups(ag)
    s = ag.optim.lr_scheduler.OneCycleLR(o, max_lr=0.3, total_steps=50)
    for _ in range(10):
        s.step()
    sd = s.state_dict()
    ref = [s.step() or s.get_last_lr() for _ in range(10)]
    o2 = _two_groups(ag)
    s2 = ag.optim.lr_scheduler.OneCycleLR(o2, max_lr=0.3, total_steps=50)
    s2.load_state_dict(sd)
    assert [s2.step() or s2.get_last_lr() for _ in range(10)] == ref
    seq = SCHEDULERS["sequential"](ag, _two_groups(ag))
    for _ in range(7):
        seq.step()
    seq2 = SCHEDULERS["sequential"](ag, _two_groups(ag))
    seq2.load_state_dict(seq.state_dict())
    for _ in range(25):
        seq.step()
        seq2.step()
        assert seq.get_last_lr() == seq2.get_last_lr()


def test_scheduler_drives_the_optimizer(th):
    a, t = _pair(th, "cpu")
    oa, ot = ag.optim.AdamW(_groups(a), lr=0.05), th.optim.AdamW(_groups(t), lr=0.05)
    sa = ag.optim.lr_scheduler.MultiStepLR(oa, [1, 3], gamma=0.3)
    st = th.optim.lr_scheduler.MultiStepLR(ot, [1, 3], gamma=0.3)
    for k in range(5):
        for o, ps in ((oa, a), (ot, t)):
            o.zero_grad()
            _loss(ps, k).backward()
            o.step()
        sa.step()
        st.step()
    _close(a, t, F32_TOL)


@pytest.mark.parametrize("kw", [dict(), dict(mode="max", threshold_mode="abs", threshold=0.05, cooldown=2,
                                             patience=1, factor=0.5, min_lr=[0.01, 0.05])])
def test_reduce_on_plateau(th, kw):
    oa, ot = _two_groups(ag), _two_groups(th)
    sa = ag.optim.lr_scheduler.ReduceLROnPlateau(oa, **kw)
    st = th.optim.lr_scheduler.ReduceLROnPlateau(ot, **kw)
    r = np.random.RandomState(0)
    for k in range(60):
        m = float(r.uniform(0, 1)) + (0.0 if k > 30 else -k * 0.01)
        sa.step(m)
        st.step(m)
        assert [g["lr"] for g in oa.param_groups] == [g["lr"] for g in ot.param_groups], k
    assert sa.state_dict()["num_bad_epochs"] == st.state_dict()["num_bad_epochs"]
    with pytest.raises(ValueError, match="Factor"):
        ag.optim.lr_scheduler.ReduceLROnPlateau(oa, factor=1.0)
    with pytest.raises(ValueError, match="unknown"):
        ag.optim.lr_scheduler.ReduceLROnPlateau(oa, mode="avg")


def test_scheduler_errors(th):
    o = _two_groups(ag)
    with pytest.raises(KeyError, match="initial_lr"):
        ag.optim.lr_scheduler.StepLR(o, 2, last_epoch=3)
    with pytest.raises(ValueError):
        ag.optim.lr_scheduler.LinearLR(o, start_factor=0)
    with pytest.raises(ValueError, match="one more than"):
        ag.optim.lr_scheduler.SequentialLR(o, [ag.optim.lr_scheduler.StepLR(o, 2)], milestones=[3])


# ---------------------------------------------------------------- nn.init

def test_calculate_gain(th):
    for nl, p in (("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                  ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", 3), ("selu", None)):
        assert ag.nn.init.calculate_gain(nl, p) == pytest.approx(th.nn.init.calculate_gain(nl, p), rel=1e-15)
    for bad in (("gelu", None), ("leaky_relu", "x"), ("leaky_relu", True)):
        with pytest.raises(ValueError):
            th.nn.init.calculate_gain(*bad)
        with pytest.raises(ValueError):
            ag.nn.init.calculate_gain(*bad)


def test_init_statistics(dev):
    init = ag.nn.init
    shape = (256, 128) if dev == "cpu" else (64, 32)
    n_in, n_out = shape[1], shape[0]
    ag.manual_seed(5)
    w = ag.empty(*shape, device=dev, requires_grad=True)
    assert init.uniform_(w, -0.5, 2.0) is w and w.requires_grad and w.is_leaf
    x = _np(w)
    assert x.min() >= -0.5 and x.max() < 2.0 and abs(x.mean() - 0.75) < 0.05
    init.normal_(w, 1.0, 0.5)
    x = _np(w)
    assert abs(x.mean() - 1.0) < 0.05 and abs(x.std() - 0.5) < 0.05
    b = math.sqrt(6.0 / (n_in + n_out)) * 2
    x = _np(init.xavier_uniform_(w, gain=2))
    assert np.abs(x).max() <= b and abs(x.std() - b / math.sqrt(3)) < 0.1 * b
    x = _np(init.xavier_normal_(w))
    assert abs(x.std() - math.sqrt(2.0 / (n_in + n_out))) < 0.1 * math.sqrt(2.0 / (n_in + n_out))
    bound = math.sqrt(2.0 / (1 + 0.1 ** 2)) * math.sqrt(3.0 / n_out)
    x = _np(init.kaiming_uniform_(w, a=0.1, mode="fan_out"))
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.9 * bound
    x = _np(init.kaiming_normal_(w, nonlinearity="relu"))
    assert abs(x.std() - math.sqrt(2.0 / n_in)) < 0.1 * math.sqrt(2.0 / n_in)
    x = _np(init.trunc_normal_(w, mean=0.5, std=1.0, a=-0.5, b=1.0))
    assert x.min() >= -0.5 and x.max() <= 1.0
    assert np.all(_np(init.constant_(w, 0.25)) == 0.25)
    assert np.all(_np(init.zeros_(w)) == 0) and np.all(_np(init.ones_(w)) == 1)
    assert w.grad is None and w.requires_grad


def test_init_uniform_same_on_every_device():
    ag.manual_seed(11)
    ref = _np(ag.nn.init.uniform_(ag.empty(100)))
    for d in ("opencl:0", "gpuemu:0"):
        if d in ag.devices():
            ag.manual_seed(11)
            assert np.array_equal(_np(ag.nn.init.uniform_(ag.empty(100, device=d))), ref)


def test_init_errors(th):
    init = ag.nn.init
    for m in (ag, th):
        with pytest.raises(ValueError, match="fewer than 2 dimensions"):
            m.nn.init.xavier_uniform_(m.zeros(3))
        with pytest.raises(ValueError, match="Mode"):
            m.nn.init.kaiming_normal_(m.zeros(3, 3), mode="fan")
    with pytest.raises(TypeError):
        init.uniform_([1.0, 2.0])
    from anygrad.nn.init import ones_  # importable as a module
    from anygrad.nn.utils import clip_grad_value_
    assert clip_grad_value_ is ag.nn.utils.clip_grad_value_
    assert ones_ is init.ones_


# ---------------------------------------------------------------- clipping

@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3])
def test_clip_grad_norm(th, dev, norm_type):
    if dev != "cpu" and norm_type in (1.0, 3):
        pytest.skip("small cases on the devices")
    for max_norm in (0.5, 100.0):
        a, t = _pair(th, dev)
        _loss(a, 1).backward()
        _loss(t, 1).backward()
        na = ag.nn.utils.clip_grad_norm_(a, max_norm, norm_type=norm_type)
        nt = th.nn.utils.clip_grad_norm_(t, max_norm, norm_type=norm_type)
        assert isinstance(na, ag.Tensor) and na.ndim == 0
        assert float(na) == pytest.approx(float(nt), rel=1e-5)
        _close([p.grad for p in a], [p.grad for p in t], 1e-5)
    a, _ = _pair(th, dev)
    assert float(ag.optim.clip_grad_norm_(a, 1.0)) == 0.0  # no gradients; the old name still works


def test_clip_grad_value(th, dev):
    a, t = _pair(th, dev)
    _loss(a, 2).backward()
    _loss(t, 2).backward()
    assert ag.nn.utils.clip_grad_value_(a, 0.4) is None
    th.nn.utils.clip_grad_value_(t, 0.4)
    _close([p.grad for p in a], [p.grad for p in t], 0)


# ---------------------------------------------------------------- threads, RNG

def test_threads(th):
    old = ag.get_num_threads()
    try:
        ag.set_num_threads(2)
        assert ag.get_num_threads() == 2
        for bad, exc in ((0, RuntimeError), (-1, RuntimeError), (1.5, RuntimeError)):
            with pytest.raises(exc):
                th.set_num_threads(bad)
            with pytest.raises(exc):
                ag.set_num_threads(bad)
        assert ag.get_num_threads() == 2
    finally:
        ag.set_num_threads(old)


def test_rng_state_round_trip(th):
    g = ag.manual_seed(3)
    assert g is ag.default_generator and g.initial_seed() == 3
    s = ag.get_rng_state()
    assert s.dtype is ag.uint8 and tuple(s.shape) == (16,)
    x = _np(ag.rand(5))
    ag.set_rng_state(s)
    assert np.array_equal(_np(ag.rand(5)), x)
    gen = ag.Generator().manual_seed(9)
    gs = gen.get_state()
    y = _np(ag.randn(4, generator=gen))
    gen.set_state(gs)
    assert np.array_equal(_np(ag.randn(4, generator=gen)), y)
    with pytest.raises(TypeError):
        ag.set_rng_state([1, 2])
    with pytest.raises(TypeError):
        ag.set_rng_state(ag.zeros(16))
    with pytest.raises(RuntimeError):
        ag.set_rng_state(ag.zeros(3, dtype=ag.uint8))


class _Net(ag.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = ag.nn.Linear(6, 16)
        self.drop = ag.nn.Dropout(0.3)
        self.fc2 = ag.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.drop(ag.tanh(self.fc1(x))))


def _dropout_steps(model, opt, k0, k1):
    r = np.random.RandomState(0)
    xs = r.uniform(-1, 1, (12, 8, 6)).astype(np.float32)
    ys = r.randint(0, 3, (12, 8))
    out = []
    for k in range(k0, k1):
        loss = ag.nn.functional.cross_entropy(model(ag.tensor(xs[k])), ag.tensor(ys[k]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def test_checkpoint_with_rng_state_resumes_dropout_bit_for_bit(tmp_path):
    ag.manual_seed(0)
    m = _Net()
    opt = ag.optim.AdamW(m.parameters(), lr=0.05)
    whole = _dropout_steps(m, opt, 0, 10)

    ag.manual_seed(0)
    m = _Net()
    opt = ag.optim.AdamW(m.parameters(), lr=0.05)
    first = _dropout_steps(m, opt, 0, 5)
    ag.save({"model": m.state_dict(), "optim": opt.state_dict(), "rng": ag.get_rng_state()},
            tmp_path / "ck.safetensors")
    ag.manual_seed(123)  # anything drawn since is forgotten on resume
    m2 = _Net()
    ck = ag.load(tmp_path / "ck.safetensors")
    m2.load_state_dict(ck["model"])
    opt2 = ag.optim.AdamW(m2.parameters(), lr=0.05)
    opt2.load_state_dict(ck["optim"])
    ag.set_rng_state(ck["rng"])
    rest = _dropout_steps(m2, opt2, 5, 10)
    assert first + rest == whole
    # without the generator's state the dropout masks, and so the losses, differ
    ag.manual_seed(123)
    m3 = _Net()
    m3.load_state_dict(ck["model"])
    opt3 = ag.optim.AdamW(m3.parameters(), lr=0.05)
    opt3.load_state_dict(ck["optim"])
    assert first + _dropout_steps(m3, opt3, 5, 10) != whole
