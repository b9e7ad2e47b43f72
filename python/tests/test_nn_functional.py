"""anygrad.nn.functional against torch 1.13: the losses (values and the
gradients of input, target and weights), one_hot, pad, interpolate,
normalize, softmax's dim rules, conv1d, group_norm, the activations'
defaults, and torch's exception types for bad input."""
import warnings

import numpy as np
import pytest

import anygrad as ag
from anygrad import functional as F

RNG = np.random.default_rng(7)


def _tol(f64):
    return dict(rtol=1e-9, atol=1e-12) if f64 else dict(rtol=2e-4, atol=2e-5)


class Pair:
    """One numpy array as a torch tensor and an anygrad tensor on dev."""

    def __init__(self, th, dev, x, grad=True):
        self.t = th.tensor(x, requires_grad=grad and x.dtype.kind == "f")
        self.a = ag.tensor(x, device=dev, requires_grad=grad and x.dtype.kind == "f")


def _cmp(th, dev, f_ag, f_th, arrays, f64=False, grad=None, seed_grad=True):
    """Call both with Pairs made from arrays; compare the outputs and the
    gradients of every floating input (or of those listed in grad)."""
    ps = [Pair(th, dev, x) if isinstance(x, np.ndarray) else x for x in arrays]
    ao = f_ag(*[p.a if isinstance(p, Pair) else p for p in ps])
    to = f_th(*[p.t if isinstance(p, Pair) else p for p in ps])
    tol = _tol(f64)
    np.testing.assert_allclose(ao.detach().numpy(), to.detach().numpy(), **tol)
    assert tuple(ao.shape) == tuple(to.shape)
    if not to.requires_grad:
        return ao, to
    g = RNG.standard_normal(tuple(to.shape)).astype(np.float64 if f64 else np.float32)
    (to * th.tensor(g)).sum().backward()
    (ao * ag.tensor(g, device=dev)).sum().backward()
    for k, p in enumerate(ps):
        if isinstance(p, Pair) and p.t.requires_grad and (grad is None or k in grad):
            assert p.a.grad is not None, k
            np.testing.assert_allclose(p.a.grad.numpy(), p.t.grad.numpy(), err_msg="grad %d" % k, **tol)
    return ao, to


def _f(shape, f64=False, lo=None, hi=None):
    x = RNG.standard_normal(shape) if lo is None else RNG.uniform(lo, hi, shape)
    return x.astype(np.float64 if f64 else np.float32)


def _cases(dev):
    return [False, True] if dev == "cpu" else [False]


# ---- losses ------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(dev, th, reduction):
    for f64 in _cases(dev):
        tgt = np.array([0, 3, 1, -100, 2])
        w = Pair(th, dev, _f((4,), f64, 0.5, 2.0), grad=False)  # torch takes no gradient in weight
        for kw in ({}, {"ignore_index": -100}, {"ignore_index": 3}):
            _cmp(th, dev, lambda x, t: F.nll_loss(x, t, reduction=reduction, **kw),
                 lambda x, t: th.nn.functional.nll_loss(x, t, reduction=reduction, **kw),
                 [_f((5, 4), f64), tgt if kw.get("ignore_index") == -100 else np.where(tgt < 0, 1, tgt)], f64)
            _cmp(th, dev, lambda x, t, w: F.nll_loss(x, t, weight=w, reduction=reduction, **kw),
                 lambda x, t, w: th.nn.functional.nll_loss(x, t, weight=w, reduction=reduction, **kw),
                 [_f((5, 4), f64), np.where(tgt < 0, 1, tgt), w], f64, grad=[0])
        # [N, C, d] and [C]
        _cmp(th, dev, lambda x, t: F.nll_loss(x, t, reduction=reduction),
             lambda x, t: th.nn.functional.nll_loss(x, t, reduction=reduction),
             [_f((2, 3, 4), f64), RNG.integers(0, 3, (2, 4))], f64)
        _cmp(th, dev, lambda x, t: F.nll_loss(x, t, reduction=reduction),
             lambda x, t: th.nn.functional.nll_loss(x, t, reduction=reduction),
             [_f((3,), f64), np.array(2)], f64)


@pytest.mark.parametrize("ls", [0.0, 0.1, 0.35])
def test_cross_entropy_label_smoothing_and_weight(dev, th, ls):
    for f64 in _cases(dev):
        tgt = np.array([0, 3, 1, 2, 3, 0])
        tig = np.array([0, -100, 1, 2, 3, -100])
        w = Pair(th, dev, _f((4,), f64, 0.5, 2.0), grad=False)
        for red in ("mean", "sum", "none"):
            for t in (tgt, tig):
                _cmp(th, dev, lambda x, t: F.cross_entropy(x, t, reduction=red, label_smoothing=ls),
                     lambda x, t: th.nn.functional.cross_entropy(x, t, reduction=red, label_smoothing=ls),
                     [_f((6, 4), f64), t], f64)
                _cmp(th, dev, lambda x, t, w: F.cross_entropy(x, t, w, reduction=red, label_smoothing=ls),
                     lambda x, t, w: th.nn.functional.cross_entropy(x, t, w, reduction=red,
                                                                    label_smoothing=ls),
                     [_f((6, 4), f64), t, w], f64, grad=[0])
            # [N, C, d] with weight, and class probabilities
            _cmp(th, dev, lambda x, t, w: F.cross_entropy(x, t, w, reduction=red, label_smoothing=ls),
                 lambda x, t, w: th.nn.functional.cross_entropy(x, t, w, reduction=red, label_smoothing=ls),
                 [_f((2, 4, 3), f64), RNG.integers(0, 4, (2, 3)), w], f64, grad=[0])
            p = np.abs(_f((5, 4), f64))
            p /= p.sum(1, keepdims=True)
            _cmp(th, dev, lambda x, t: F.cross_entropy(x, t, reduction=red, label_smoothing=ls),
                 lambda x, t: th.nn.functional.cross_entropy(x, t, reduction=red, label_smoothing=ls),
                 [_f((5, 4), f64), p], f64)
            _cmp(th, dev, lambda x, t, w: F.cross_entropy(x, t, w, reduction=red),
                 lambda x, t, w: th.nn.functional.cross_entropy(x, t, w, reduction=red),
                 [_f((5, 4), f64), p, w], f64, grad=[0, 1])


def test_cross_entropy_module(dev, th):
    w = _f((3,), False, 0.5, 2)
    for kw in ({}, {"label_smoothing": 0.2}, {"ignore_index": 1, "reduction": "sum"}):
        a = ag.nn.CrossEntropyLoss(weight=ag.tensor(w, device=dev), **kw)
        t = th.nn.CrossEntropyLoss(weight=th.tensor(w), **kw)
        assert list(a.state_dict()) == list(t.state_dict()) == ["weight"]
        _cmp(th, dev, a, t, [_f((4, 3)), np.array([0, 1, 2, 1])])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(dev, th, reduction):
    for f64 in _cases(dev):
        x, t = _f((3, 4), f64, 0.02, 0.98), _f((3, 4), f64, 0, 1)
        w = Pair(th, dev, _f((3, 4), f64, 0.5, 2), grad=False)
        _cmp(th, dev, lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction),
             lambda x, t: th.nn.functional.binary_cross_entropy(x, t, reduction=reduction), [x, t], f64)
        _cmp(th, dev, lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction=reduction),
             lambda x, t, w: th.nn.functional.binary_cross_entropy(x, t, w, reduction=reduction),
             [x, t, w], f64)
        _cmp(th, dev, ag.nn.BCELoss(reduction=reduction), th.nn.BCELoss(reduction=reduction), [x, t], f64)


def test_binary_cross_entropy_saturated_input(dev, th):
    """0 and 1 (a sigmoid of f32 saturates there): the log clamped at -100,
    torch's finite gradient in input (the target's is finite too, where
    torch's is infinite: not compared)."""
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5], np.float32)
    t = np.array([0.0, 1.0, 1.0, 0.0, 0.3], np.float32)
    _cmp(th, dev, F.binary_cross_entropy, th.nn.functional.binary_cross_entropy, [x, t], grad=[0])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(dev, th, reduction):
    for f64 in _cases(dev):
        x, t = _f((3, 4), f64) * 4, _f((3, 4), f64, 0, 1)
        w = Pair(th, dev, _f((4,), f64, 0.5, 2), grad=False)
        pw = _f((4,), f64, 0.5, 3)
        fa, ft = F.binary_cross_entropy_with_logits, th.nn.functional.binary_cross_entropy_with_logits
        _cmp(th, dev, lambda x, t: fa(x, t, reduction=reduction), lambda x, t: ft(x, t, reduction=reduction),
             [x, t], f64)
        _cmp(th, dev, lambda x, t, w, pw: fa(x, t, w, reduction=reduction, pos_weight=pw),
             lambda x, t, w, pw: ft(x, t, w, reduction=reduction, pos_weight=pw),
             [x, t, w, Pair(th, dev, pw, grad=False)], f64)
        a = ag.nn.BCEWithLogitsLoss(pos_weight=ag.tensor(pw, device=dev), reduction=reduction)
        tm = th.nn.BCEWithLogitsLoss(pos_weight=th.tensor(pw), reduction=reduction)
        assert list(a.state_dict()) == list(tm.state_dict()) == ["pos_weight"]
        _cmp(th, dev, a, tm, [x, t], f64)
    big = np.array([-30.0, 0.0, 30.0, 100.0], np.float32)  # stable at large |x|
    _cmp(th, dev, fa, ft, [big, np.array([1.0, 0.5, 0.0, 1.0], np.float32)])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_smooth_l1_huber(dev, th, reduction):
    for f64 in _cases(dev):
        x, t = _f((4, 5), f64) * 2, _f((4, 5), f64)
        tf = th.nn.functional
        for fa, ft, kw in ((F.l1_loss, tf.l1_loss, {}), (F.mse_loss, tf.mse_loss, {}),
                           (F.smooth_l1_loss, tf.smooth_l1_loss, {}),
                           (F.smooth_l1_loss, tf.smooth_l1_loss, {"beta": 0.5}),
                           (F.smooth_l1_loss, tf.smooth_l1_loss, {"beta": 0.0}),
                           (F.huber_loss, tf.huber_loss, {}), (F.huber_loss, tf.huber_loss, {"delta": 0.3})):
            _cmp(th, dev, lambda x, t: fa(x, t, reduction=reduction, **kw),
                 lambda x, t: ft(x, t, reduction=reduction, **kw), [x, t], f64)
        for ma, mt in ((ag.nn.L1Loss, th.nn.L1Loss), (ag.nn.SmoothL1Loss, th.nn.SmoothL1Loss),
                       (ag.nn.HuberLoss, th.nn.HuberLoss), (ag.nn.MSELoss, th.nn.MSELoss)):
            _cmp(th, dev, ma(reduction=reduction), mt(reduction=reduction), [x, t], f64)


def test_loss_legacy_reduction_arguments(th):
    x, t = _f((3, 2)), _f((3, 2))
    for kw in ({"size_average": False}, {"reduce": False}, {"size_average": True, "reduce": True}):
        _cmp(th, "cpu", lambda x, t: F.l1_loss(x, t, **kw), lambda x, t: th.nn.functional.l1_loss(x, t, **kw),
             [x, t])
        assert ag.nn.L1Loss(**kw).reduction == th.nn.L1Loss(**kw).reduction


def _err(fa, ft):
    """Both raise; anygrad's exception is (a subclass of) torch's type."""
    with pytest.raises(Exception) as et:
        ft()
    with pytest.raises(Exception) as ea:
        fa()
    assert isinstance(ea.value, type(et.value)), (et.value, ea.value)
    return ea.value


def test_loss_errors(th):
    tf = th.nn.functional
    x, t = _f((3, 4)), np.array([0, 1, 2])
    ax, at, tx, tt = ag.tensor(x), ag.tensor(t), th.tensor(x), th.tensor(t)
    _err(lambda: F.nll_loss(ax, ag.tensor([0, 1])), lambda: tf.nll_loss(tx, th.tensor([0, 1])))
    _err(lambda: F.nll_loss(ax, at, reduction="avg"), lambda: tf.nll_loss(tx, tt, reduction="avg"))
    _err(lambda: F.cross_entropy(ax, at, weight=ag.ones(3)),
         lambda: tf.cross_entropy(tx, tt, weight=th.ones(3)))
    _err(lambda: F.cross_entropy(ax, at, label_smoothing=1.5), lambda: tf.cross_entropy(tx, tt,
                                                                                      label_smoothing=1.5))
    _err(lambda: F.cross_entropy(ax, ag.ones(3, 3)), lambda: tf.cross_entropy(tx, th.ones(3, 3)))
    _err(lambda: F.nll_loss(ax, ag.tensor([0.0, 1.0, 2.0])),
         lambda: tf.nll_loss(tx, th.tensor([0.0, 1.0, 2.0])))
    p = ag.tensor(_f((3,), lo=0.1, hi=0.9))
    _err(lambda: F.binary_cross_entropy(p, ag.ones(3, 1)),
         lambda: tf.binary_cross_entropy(th.tensor(p.numpy()), th.ones(3, 1)))
    _err(lambda: F.binary_cross_entropy_with_logits(p, ag.ones(3, 1)),
         lambda: tf.binary_cross_entropy_with_logits(th.tensor(p.numpy()), th.ones(3, 1)))
    _err(lambda: F.smooth_l1_loss(p, p, beta=-1.0),
         lambda: tf.smooth_l1_loss(th.tensor(p.numpy()), th.tensor(p.numpy()), beta=-1.0))
    _err(lambda: F.huber_loss(p, p, delta=0.0),
         lambda: tf.huber_loss(th.tensor(p.numpy()), th.tensor(p.numpy()), delta=0.0))
    _err(lambda: F.cross_entropy(3, at), lambda: tf.cross_entropy(3, tt))
    with pytest.warns(UserWarning, match="target size"):
        F.l1_loss(ag.ones(3, 1), ag.ones(3))


# ---- one_hot, pad, interpolate, normalize --------------------------------------------------

def test_one_hot(dev, th):
    idx = np.array([[0, 3], [2, 1]])
    for n in (-1, 4, 6):
        a = F.one_hot(ag.tensor(idx, device=dev), n)
        t = th.nn.functional.one_hot(th.tensor(idx), n)
        assert a.dtype is ag.int64 and a.numpy().tolist() == t.numpy().tolist()
    assert F.one_hot(ag.tensor(2, device=dev), num_classes=3).tolist() == [0, 0, 1]
    tf = th.nn.functional
    _err(lambda: F.one_hot(ag.tensor([0.0, 1.0])), lambda: tf.one_hot(th.tensor([0.0, 1.0])))
    _err(lambda: F.one_hot(ag.tensor([0, 1]), -2), lambda: tf.one_hot(th.tensor([0, 1]), -2))
    _err(lambda: F.one_hot(ag.zeros(0, dtype=ag.int64)), lambda: tf.one_hot(th.zeros(0, dtype=th.int64)))
    with pytest.raises(IndexError):
        F.one_hot(ag.tensor([0, 5], device=dev), 3).tolist()


PADS = [  # (shape, pad, mode, value)
    ((2, 5), (1, 2), "constant", 0.0), ((2, 3, 4), (2, 1, 0, 3), "constant", 1.5),
    ((2, 3, 4), (1, 1, 1, 1, 1, 1), "constant", -2.0), ((2, 6), (-1, 2), "constant", 0.0),
    ((1, 2, 5, 4), (0, -1, -2, 1), "constant", 0.0),
    ((2, 3, 5), (2, 3), "reflect", None), ((1, 2, 4, 5), (1, 2, 3, 0), "reflect", None),
    ((1, 1, 3, 3, 4), (1, 1, 2, 1, 2, 1), "reflect", None),
    ((2, 3, 5), (2, 4), "replicate", None), ((1, 2, 3, 4), (3, 1, 0, 2), "replicate", None),
    ((1, 1, 2, 3, 2), (1, 1, 1, 2, 0, 1), "replicate", None),
    ((2, 3, 5), (2, 4), "circular", None), ((1, 2, 3, 4), (3, 1, 2, 2), "circular", None),
]


@pytest.mark.parametrize("shape,pad,mode,value", PADS, ids=["%s-%s-%s" % (p[2], p[0], p[1]) for p in PADS])
def test_pad(dev, th, shape, pad, mode, value):
    kw = {} if value is None else {"value": value}
    for f64 in _cases(dev):
        _cmp(th, dev, lambda x: F.pad(x, pad, mode=mode, **kw),
             lambda x: th.nn.functional.pad(x, pad, mode=mode, **kw), [_f(shape, f64)], f64)


def test_pad_errors(th):
    tf = th.nn.functional
    a, t = ag.ones(1, 2, 3), th.ones(1, 2, 3)
    for pad, mode in (((1,), "constant"), ((3, 0), "reflect"), ((1, 1, 1, 1, 1, 1, 1, 1), "constant"),
                      ((4, 0), "circular")):
        _err(lambda: F.pad(a, pad, mode=mode), lambda: tf.pad(t, pad, mode=mode))
    with pytest.raises(NotImplementedError, match="mirror"):
        F.pad(a, (1, 1), mode="mirror")
    with pytest.raises(NotImplementedError):
        F.pad(ag.ones(3), (1, 1), mode="replicate")
    with pytest.raises(NotImplementedError):
        tf.pad(th.ones(3), (1, 1), mode="replicate")


INTERPS = [  # (shape, kwargs)
    ((1, 2, 3, 4), dict(size=(5, 7), mode="nearest")),
    ((1, 2, 3, 4), dict(scale_factor=2, mode="nearest")),
    ((2, 1, 4, 4), dict(scale_factor=0.5, mode="nearest")),
    ((1, 2, 3, 4), dict(size=(6, 5), mode="bilinear")),
    ((1, 2, 3, 4), dict(size=(6, 5), mode="bilinear", align_corners=True)),
    ((1, 2, 3, 4), dict(scale_factor=(1.5, 2.5), mode="bilinear")),
    ((1, 2, 3, 4), dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)),
    ((2, 3, 5), dict(size=8, mode="linear")),
    ((2, 3, 5), dict(size=8, mode="linear", align_corners=True)),
    ((2, 3, 5), dict(scale_factor=2.5, mode="linear")),
    ((2, 3, 5), dict(size=3, mode="nearest")),
    ((2, 3, 5), dict(scale_factor=3, mode="nearest")),
    ((1, 2, 6, 5), dict(size=(3, 2), mode="area")),
    ((1, 2, 7), dict(size=3, mode="area")),
]


@pytest.mark.parametrize("shape,kw", INTERPS, ids=[str(i[1]) for i in INTERPS])
def test_interpolate(dev, th, shape, kw):
    for f64 in _cases(dev):
        try:
            _cmp(th, dev, lambda x: F.interpolate(x, **kw), lambda x: th.nn.functional.interpolate(x, **kw),
                 [_f(shape, f64)], f64)
        except ag.UnsupportedError as e:
            if f64:
                continue
            pytest.skip(str(e))


def test_interpolate_errors(th):
    tf = th.nn.functional
    a, t = ag.ones(1, 1, 2, 2), th.ones(1, 1, 2, 2)
    for kw in (dict(size=3, scale_factor=2), dict(), dict(size=3, mode="nearest", align_corners=True),
               dict(size=3, mode="linear"), dict(size=(3, 3, 3))):
        _err(lambda: F.interpolate(a, **kw), lambda: tf.interpolate(t, **kw))
    _err(lambda: F.interpolate(ag.ones(1, 1, 3), size=4, mode="bilinear"),
         lambda: tf.interpolate(th.ones(1, 1, 3), size=4, mode="bilinear"))
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(a, size=3, mode="bicubic")


@pytest.mark.parametrize("p", [2.0, 1.0, float("inf"), 3.0, 0.5])
def test_normalize(dev, th, p):
    for f64 in _cases(dev):
        for dim in (1, 0, -1):
            _cmp(th, dev, lambda x: F.normalize(x, p=p, dim=dim),
                 lambda x: th.nn.functional.normalize(x, p=p, dim=dim), [_f((3, 4), f64)], f64)
    x = np.zeros((2, 3), np.float32)  # eps keeps a zero row finite
    x[1] = [1, 2, 3]
    _cmp(th, dev, F.normalize, th.nn.functional.normalize, [x])


def test_softmax_dims(dev, th):
    for f64 in _cases(dev):
        for shape in ((5,), (2, 3), (2, 3, 4), (2, 2, 3, 2)):
            tf = th.nn.functional
            for fa, ft in ((F.softmax, tf.softmax), (F.log_softmax, tf.log_softmax), (F.softmin, tf.softmin)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _cmp(th, dev, lambda x: fa(x), lambda x: ft(x), [_f(shape, f64)], f64)
                _cmp(th, dev, lambda x: fa(x, -1), lambda x: ft(x, -1), [_f(shape, f64)], f64)
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        F.softmax(ag.ones(2, 3))
    a = F.softmax(ag.ones(2, 3, device=dev), 1, dtype=ag.float32)
    assert a.dtype is ag.float32


def test_activation_defaults(dev, th):
    tf = th.nn.functional
    x = _f((3, 5)) * 3
    for fa, ft in ((F.relu, tf.relu), (F.gelu, tf.gelu), (lambda x: F.gelu(x, approximate="tanh"),
                                                          lambda x: tf.gelu(x, approximate="tanh")),
                   (F.silu, tf.silu), (F.leaky_relu, tf.leaky_relu), (F.elu, tf.elu), (F.celu, tf.celu),
                   (F.selu, tf.selu), (F.softplus, tf.softplus), (F.hardtanh, tf.hardtanh),
                   (F.relu6, tf.relu6),
                   (F.mish, tf.mish), (F.hardswish, tf.hardswish)):
        _cmp(th, dev, fa, ft, [x])
    _err(lambda: F.gelu(ag.ones(2), approximate="fast"), lambda: tf.gelu(th.ones(2), approximate="fast"))


# ---- conv1d, conv2d('same'), group_norm, dropout -------------------------------------------

CONV1D = [  # (x shape, w shape, bias, kwargs)
    ((2, 3, 9), (4, 3, 3), True, {}),
    ((2, 4, 9), (6, 2, 3), True, dict(stride=2, padding=1, dilation=2, groups=2)),
    ((1, 2, 7), (3, 2, 4), False, dict(padding="same")),
    ((1, 2, 7), (3, 2, 3), True, dict(padding="same", dilation=2)),
    ((1, 2, 7), (3, 2, 3), True, dict(padding="valid", stride=(2,))),
    ((1, 2, 7), (3, 2, 3), True, dict(padding=(2,), dilation=(1,))),
]


@pytest.mark.parametrize("xs,ws,bias,kw", CONV1D, ids=[str(c[3]) for c in CONV1D])
def test_conv1d(dev, th, xs, ws, bias, kw):
    for f64 in _cases(dev):
        arrs = [_f(xs, f64), _f(ws, f64)] + ([_f((ws[0],), f64)] if bias else [])
        _cmp(th, dev, lambda *a: F.conv1d(*a, **kw), lambda *a: th.nn.functional.conv1d(*a, **kw), arrs, f64)


def test_conv2d_same(dev, th):
    for f64 in _cases(dev):
        for ws, kw in (((3, 2, 2, 3), {}), ((3, 2, 3, 3), dict(dilation=2)), ((2, 1, 4, 1), dict(groups=2))):
            arrs = [_f((1, 2, 5, 6), f64), _f(ws, f64)]
            _cmp(th, dev, lambda x, w: F.conv2d(x, w, padding="same", **kw),
                 lambda x, w: th.nn.functional.conv2d(x, w, padding="same", **kw), arrs, f64)


def test_conv_errors(th):
    tf = th.nn.functional
    x, w = _f((1, 2, 7)), _f((3, 2, 3))
    for kw in (dict(padding="same", stride=2), dict(padding="full")):
        _err(lambda: F.conv1d(ag.tensor(x), ag.tensor(w), **kw),
             lambda: tf.conv1d(th.tensor(x), th.tensor(w), **kw))
    with pytest.raises(ValueError):
        F.conv1d(ag.tensor(x), ag.tensor(_f((3, 2, 3, 1))))


def test_group_norm(dev, th):
    for f64 in _cases(dev):
        for shape, g in (((2, 4, 3), 2), ((2, 6, 2, 2), 3), ((3, 4), 2)):
            c = shape[1]
            _cmp(th, dev, lambda x, w, b: F.group_norm(x, g, w, b, eps=1e-4),
                 lambda x, w, b: th.nn.functional.group_norm(x, g, w, b, eps=1e-4),
                 [_f(shape, f64), _f((c,), f64), _f((c,), f64)], f64)
            _cmp(th, dev, lambda x: F.group_norm(x, g), lambda x: th.nn.functional.group_norm(x, g),
                 [_f(shape, f64)], f64)
    _err(lambda: F.group_norm(ag.ones(2, 4, 3), 3), lambda: th.nn.functional.group_norm(th.ones(2, 4, 3), 3))


def test_channel_dropout(dev):
    x = ag.ones(64, 8, 3, 2, device=dev)
    y = F.dropout2d(x, 0.5, training=True).numpy()
    per = y.reshape(64, 8, -1)
    assert np.all((per == 0).all(-1) | (per == 2).all(-1))  # whole channels, scaled by 1/(1-p)
    assert 0.3 < (per[:, :, 0] == 0).mean() < 0.7
    assert F.dropout2d(x, 0.5, training=False) is x
    y1 = F.dropout1d(ag.ones(32, 4, 5, device=dev), 0.25).numpy()
    assert np.all((y1 == 0).all(-1) | (np.abs(y1 - 4 / 3) < 1e-6).all(-1))
    m = ag.nn.Dropout1d(0.5).eval()
    assert m(x[:, :, :, 0]).numpy().min() == 1.0
    with pytest.raises(RuntimeError):
        F.dropout1d(ag.ones(2, 2, 2, 2), 0.5)


def test_embedding_functional_padding_idx(dev, th):
    w = _f((5, 3))
    idx = np.array([1, 0, 4, 0])
    _cmp(th, dev, lambda i, w: F.embedding(i, w, padding_idx=0),
         lambda i, w: th.nn.functional.embedding(i, w, padding_idx=0), [idx, w])


def test_import_nn_functional_as_torch_does():
    import anygrad.nn.functional as G
    assert G is ag.functional and G is ag.nn.functional
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        F.l1_loss(ag.ones(2), ag.ones(2), size_average=False)


POOL1D = [
    ("max_pool1d", (2, 3, 8), dict(kernel_size=2)),
    ("max_pool1d", (3, 7), dict(kernel_size=3, stride=1, padding=1)),
    ("avg_pool1d", (2, 3, 8), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool1d", (2, 3, 8), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("adaptive_avg_pool1d", (2, 3, 7), dict(output_size=3)),
    ("adaptive_avg_pool1d", (3, 5), dict(output_size=2)),
]


@pytest.mark.parametrize("name,shape,kw", POOL1D, ids=["%s-%s" % (p[0], p[2]) for p in POOL1D])
def test_pool1d(dev, th, name, shape, kw):
    for f64 in _cases(dev):
        _cmp(th, dev, lambda x: getattr(F, name)(x, **kw), lambda x: getattr(th.nn.functional, name)(x, **kw),
             [_f(shape, f64)], f64)


def test_prelu_cosine_similarity_kl_div(dev, th):
    tf = th.nn.functional
    for f64 in _cases(dev):
        for xs, ws in (((2, 3, 4), (3,)), ((4, 3), (1,)), ((5,), (1,))):
            _cmp(th, dev, F.prelu, tf.prelu, [_f(xs, f64), _f(ws, f64, 0.1, 0.5)], f64)
        for dim in (1, 0, -1):
            _cmp(th, dev, lambda a, b: F.cosine_similarity(a, b, dim=dim),
                 lambda a, b: tf.cosine_similarity(a, b, dim=dim), [_f((3, 4), f64), _f((3, 4), f64)], f64)
        p = _f((3, 5), f64, 0.05, 1.0)
        p[0, 1] = 0.0  # a zero target contributes 0
        lq = np.log(np.abs(_f((3, 5), f64, 0.1, 1.0)))
        for red in ("batchmean", "sum", "none"):
            _cmp(th, dev, lambda x, t: F.kl_div(x, t, reduction=red),
                 lambda x, t: tf.kl_div(x, t, reduction=red), [lq, p], f64, grad=[0])
            _cmp(th, dev, lambda x, t: F.kl_div(x, t, reduction=red, log_target=True),
                 lambda x, t: tf.kl_div(x, t, reduction=red, log_target=True), [lq, np.log(p + 0.1)], f64)


def test_pool1d_prelu_modules(dev, th):
    import collections
    for expr, shape in (("nn.MaxPool1d(2)", (2, 3, 6)), ("nn.AvgPool1d(3, 2, 1)", (2, 3, 7)),
                        ("nn.AdaptiveAvgPool1d(4)", (2, 3, 9)), ("nn.PReLU(3, 0.1)", (2, 3, 4)),
                        ("nn.PReLU()", (4, 5))):
        a, t = eval(expr, {"nn": ag.nn}), eval(expr, {"nn": th.nn})
        assert repr(a) == repr(t) and list(a.state_dict()) == list(t.state_dict())
        a.load_state_dict(collections.OrderedDict((k, ag.tensor(v.detach().numpy(), device=dev))
                                                  for k, v in t.state_dict().items()))
        a.to(dev)
        _cmp(th, dev, a, t, [_f(shape)])
        if isinstance(a, ag.nn.PReLU):
            np.testing.assert_allclose(a.weight.grad.numpy(), t.weight.grad.numpy(), rtol=2e-4, atol=2e-5)
    a, t = ag.nn.CosineSimilarity(0), th.nn.CosineSimilarity(0)
    assert repr(a) == repr(t)
    _cmp(th, dev, a, t, [_f((4, 2)), _f((4, 2))])
    a, t = ag.nn.KLDivLoss(reduction="batchmean"), th.nn.KLDivLoss(reduction="batchmean")
    assert repr(a) == repr(t)
    _cmp(th, dev, a, t, [np.log(_f((2, 3), False, 0.1, 1)), _f((2, 3), False, 0.1, 1)], grad=[0])
