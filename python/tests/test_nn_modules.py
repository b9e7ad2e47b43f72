"""anygrad.nn modules against torch 1.13: reprs, state_dict keys, a torch
state_dict loaded into the anygrad module, forward values and the gradients
of the input and of every parameter, running statistics, containers, init
distributions and errors."""
import collections
import math

import numpy as np
import pytest

import anygrad as ag
from anygrad import nn

# (constructor expression, evaluated with nn = anygrad.nn or torch.nn)
REPRS = [
    "nn.Linear(4, 2)", "nn.Linear(4, 2, bias=False)", "nn.Conv1d(3, 4, 3)",
    "nn.Conv1d(3, 4, 3, padding='same', bias=False, padding_mode='reflect')",
    "nn.Conv1d(4, 6, 2, stride=2, padding=1, dilation=2, groups=2)",
    "nn.Conv2d(3, 4, 3, padding=1, dilation=2)", "nn.Conv2d(2, 4, (2, 3), stride=(1, 2), bias=False)",
    "nn.BatchNorm1d(3)", "nn.BatchNorm2d(3, affine=False, track_running_stats=False)",
    "nn.BatchNorm2d(5, eps=1e-3, momentum=None)", "nn.GroupNorm(2, 4)", "nn.GroupNorm(1, 3, affine=False)",
    "nn.LayerNorm(4)", "nn.Embedding(10, 3)", "nn.Embedding(10, 3, padding_idx=0)",
    "nn.Embedding(10, 3, padding_idx=-1)", "nn.Dropout()", "nn.Dropout(0.2, inplace=True)",
    "nn.Dropout1d(0.3)", "nn.Dropout2d()", "nn.MaxPool2d(2)", "nn.MaxPool2d(3, 2, 1)", "nn.AvgPool2d(2)",
    "nn.AvgPool2d(3, 1, 1, count_include_pad=False)", "nn.AdaptiveAvgPool2d((2, 3))", "nn.Flatten()",
    "nn.Flatten(0, 2)", "nn.Unflatten(1, (2, 3))", "nn.Identity()", "nn.ReLU()", "nn.ReLU(inplace=True)",
    "nn.GELU()", "nn.GELU('tanh')", "nn.SiLU()", "nn.Tanh()", "nn.Sigmoid()", "nn.LeakyReLU()",
    "nn.LeakyReLU(0.2, True)", "nn.ELU()", "nn.ELU(0.5)", "nn.CELU()", "nn.SELU()", "nn.Softplus()",
    "nn.Softplus(2, 10)", "nn.Mish()", "nn.Hardswish()", "nn.Hardsigmoid()", "nn.Hardtanh()",
    "nn.Hardtanh(-2.0, 3.0)", "nn.ReLU6()", "nn.Softsign()", "nn.Tanhshrink()", "nn.LogSigmoid()",
    "nn.Softmax(1)", "nn.LogSoftmax(dim=-1)", "nn.Softmax()", "nn.Softmin(0)", "nn.CrossEntropyLoss()",
    "nn.CrossEntropyLoss(label_smoothing=0.1)", "nn.NLLLoss()", "nn.MSELoss()", "nn.L1Loss()",
    "nn.SmoothL1Loss(beta=0.5)", "nn.HuberLoss()", "nn.BCELoss()", "nn.BCEWithLogitsLoss()",
    "nn.Upsample(scale_factor=2, mode='nearest')", "nn.Upsample(size=(4, 5), mode='bilinear')",
    "nn.Sequential(nn.Linear(2, 3), nn.ReLU())",
    "nn.Sequential(collections.OrderedDict([('fc', nn.Linear(2, 3)), ('act', nn.GELU())]))",
    "nn.ModuleList([nn.ReLU(), nn.Linear(2, 2)])", "nn.ModuleDict({'a': nn.ReLU(), 'b': nn.Tanh()})",
    "nn.Sequential(nn.Conv2d(1, 2, 3), nn.Sequential(nn.BatchNorm2d(2), nn.ReLU()), nn.Flatten())",
    "nn.MaxPool1d(3, 1, 1)", "nn.AvgPool1d(2)", "nn.AdaptiveAvgPool1d(4)", "nn.PReLU(3)",
    "nn.CosineSimilarity()",
    "nn.KLDivLoss(reduction='batchmean')",
]


def _both(expr, th):
    return eval(expr, {"nn": nn, "collections": collections}), eval(expr, {"nn": th.nn,
                                                                            "collections": collections})


@pytest.mark.parametrize("expr", REPRS)
def test_repr_and_state_dict_keys_equal_torchs(expr, th):
    a, t = _both(expr, th)
    assert repr(a) == repr(t)
    sa, st = a.state_dict(), t.state_dict()
    assert list(sa) == list(st)
    for k in st:
        assert tuple(sa[k].shape) == tuple(st[k].shape), k
        assert str(sa[k].dtype).split(".")[-1] == str(st[k].dtype).split(".")[-1], k
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in a.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in a.named_modules()] == [n for n, _ in t.named_modules()]


# ---- a torch module's state loaded into anygrad's: forward and gradients --------------------

def _tol(dev, f64, expr=""):
    if f64 and "Hardsigmoid" in expr:  # the library's f64 gradient holds 1/6 rounded to f32
        return dict(rtol=1e-7, atol=1e-9)
    return dict(rtol=1e-9, atol=1e-11) if f64 else dict(rtol=2e-4, atol=2e-5)


def _load(a, t, dev, dt):
    sd = collections.OrderedDict((k, ag.tensor(v.detach().numpy(), device=dev).to(
        dt if v.dtype.is_floating_point else ag.int64)) for k, v in t.state_dict().items())
    a.load_state_dict(sd)


def _check_module(th, expr, shapes, dev, f64=False, train=True, int_input=None, steps=1):
    """Run the torch module and anygrad's (loaded with torch's state) on the
    same inputs; compare outputs, input and parameter gradients, buffers."""
    th.manual_seed(0)
    ndt, tdt, adt = (np.float64, th.float64, ag.float64) if f64 else (np.float32, th.float32, ag.float32)
    t = eval(expr, {"nn": th.nn}).to(tdt)
    a = eval(expr, {"nn": nn}).to(device=dev, dtype=adt)
    _load(a, t, dev, adt)
    t.train(train)
    a.train(train)
    rng = np.random.default_rng(1)
    tol = _tol(dev, f64, expr)
    for _ in range(steps):
        if int_input is not None:
            xs = [rng.integers(0, int_input, size=s) for s in shapes]
            tx = [th.tensor(x) for x in xs]
            ax = [ag.tensor(x, device=dev) for x in xs]
        else:
            xs = [rng.standard_normal(s).astype(ndt) for s in shapes]
            tx = [th.tensor(x, requires_grad=True) for x in xs]
            ax = [ag.tensor(x, device=dev, requires_grad=True) for x in xs]
        to, ao = t(*tx), a(*ax)
        np.testing.assert_allclose(ao.detach().numpy(), to.detach().numpy(), **tol)
        g = rng.standard_normal(tuple(to.shape)).astype(ndt)
        (to * th.tensor(g)).sum().backward()
        (ao * ag.tensor(g, device=dev)).sum().backward()
        if int_input is None:
            for x1, x2 in zip(ax, tx):
                np.testing.assert_allclose(x1.grad.numpy(), x2.grad.numpy(), **tol)
        tp = dict(t.named_parameters())
        for n, p in a.named_parameters():
            if tp[n].grad is None:
                assert p.grad is None or not np.any(p.grad.numpy()), n
            else:
                np.testing.assert_allclose(p.grad.numpy(), tp[n].grad.numpy(), err_msg=n, **tol)
        tb = dict(t.named_buffers())
        for n, b in a.named_buffers():
            np.testing.assert_allclose(b.numpy(), tb[n].numpy(), err_msg=n, **tol)
        t.zero_grad()
        a.zero_grad()
    return a, t


MODULES = [  # (expr, input shapes)
    ("nn.Linear(4, 3)", [(2, 4)]),
    ("nn.Linear(4, 3, bias=False)", [(2, 5, 4)]),
    ("nn.Conv1d(3, 4, 3)", [(2, 3, 7)]),
    ("nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2)", [(2, 4, 9)]),
    ("nn.Conv1d(2, 3, 4, padding='same', bias=False)", [(1, 2, 6)]),
    ("nn.Conv1d(2, 3, 3, padding='valid')", [(1, 2, 6)]),
    ("nn.Conv1d(2, 3, 3, padding=2, padding_mode='reflect')", [(1, 2, 6)]),
    ("nn.Conv1d(2, 3, 3, padding=1, padding_mode='replicate')", [(1, 2, 5)]),
    ("nn.Conv1d(2, 3, 3, padding=2, padding_mode='circular')", [(1, 2, 5)]),
    ("nn.Conv2d(2, 3, (2, 3), padding='same')", [(1, 2, 5, 4)]),
    ("nn.Conv2d(2, 3, 3, padding=1, padding_mode='reflect')", [(1, 2, 4, 4)]),
    ("nn.BatchNorm1d(3)", [(4, 3)]),
    ("nn.BatchNorm1d(3)", [(2, 3, 5)]),
    ("nn.BatchNorm1d(3, affine=False, momentum=0.3)", [(4, 3, 2)]),
    ("nn.BatchNorm2d(2)", [(2, 2, 3, 3)]),
    ("nn.BatchNorm2d(2, track_running_stats=False)", [(2, 2, 3, 3)]),
    ("nn.GroupNorm(2, 4)", [(2, 4, 3)]),
    ("nn.GroupNorm(3, 6, eps=1e-3)", [(2, 6, 2, 2)]),
    ("nn.GroupNorm(1, 2, affine=False)", [(3, 2, 4)]),
    ("nn.LayerNorm(4)", [(3, 4)]),
    ("nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2), nn.LogSoftmax(1))", [(2, 3)]),
    ("nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), nn.BatchNorm1d(4), nn.SiLU(), nn.Flatten(), "
     "nn.Linear(20, 3))", [(3, 2, 5)]),
]


@pytest.mark.parametrize("expr,shapes", MODULES, ids=[m[0] for m in MODULES])
def test_module_matches_torch(expr, shapes, dev, th):
    try:
        _check_module(th, expr, shapes, dev, steps=2)
    except ag.UnsupportedError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("expr,shapes", MODULES, ids=[m[0] for m in MODULES])
def test_module_matches_torch_f64_cpu(expr, shapes, th):
    _check_module(th, expr, shapes, "cpu", f64=True, steps=2)


def test_batchnorm_eval_uses_running_stats(dev, th):
    for expr, shape in (("nn.BatchNorm1d(3)", (4, 3)), ("nn.BatchNorm1d(3, momentum=None)", (4, 3, 2)),
                        ("nn.BatchNorm2d(2)", (2, 2, 3, 3))):
        a, t = _check_module(th, expr, [shape], dev, steps=3)  # running stats after three steps
        a.eval()
        t.eval()
        x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(a(ag.tensor(x, device=dev)).numpy(), t(th.tensor(x)).detach().numpy(),
                                   rtol=2e-4, atol=2e-5)
        assert a.num_batches_tracked.item() == 3


def test_batchnorm_errors(th):
    for expr, x in (("nn.BatchNorm1d(3)", (1, 3)), ("nn.BatchNorm1d(3)", (2, 3, 4, 1)),
                    ("nn.BatchNorm2d(3)", (2, 3, 4))):
        a, t = _both(expr, th)
        with pytest.raises(ValueError) as et:
            t(th.zeros(x))
        with pytest.raises(ValueError) as ea:
            a(ag.zeros(x))
        assert str(ea.value).split(" size")[0].split("(")[0] == str(et.value).split(" size")[0].split("(")[0]


ACTS = ["nn.ReLU()", "nn.GELU()", "nn.GELU(approximate='tanh')", "nn.SiLU()", "nn.Tanh()", "nn.Sigmoid()",
        "nn.LeakyReLU()", "nn.LeakyReLU(0.2)", "nn.ELU()", "nn.ELU(0.7)", "nn.CELU(1.5)", "nn.SELU()",
        "nn.Softplus()", "nn.Softplus(2.0, 1.0)", "nn.Mish()", "nn.Hardswish()", "nn.Hardsigmoid()",
        "nn.Hardtanh(-0.5, 0.7)", "nn.ReLU6()", "nn.Softsign()", "nn.Tanhshrink()", "nn.LogSigmoid()",
        "nn.Softmax(1)", "nn.LogSoftmax(-1)", "nn.Softmin(0)", "nn.Identity()", "nn.Flatten()",
        "nn.Unflatten(1, (2, 3))"]


@pytest.mark.parametrize("expr", ACTS)
def test_activation_modules(expr, dev, th):
    _check_module(th, expr, [(4, 6)], dev)
    if dev == "cpu":
        _check_module(th, expr, [(4, 6)], dev, f64=True)


def test_inplace_activation_writes_input(th):
    x = ag.tensor([-1.0, 2.0])
    y = nn.ReLU(inplace=True)(x)
    assert y is x and x.tolist() == [0.0, 2.0]
    w = ag.tensor([-1.0, 2.0], requires_grad=True)
    h = w * 1.0
    h2 = nn.LeakyReLU(0.5, inplace=True)(h)
    h2.sum().backward()
    assert w.grad.tolist() == [0.5, 1.0]
    with pytest.raises(RuntimeError):
        nn.ReLU(inplace=True)(w)  # a leaf that requires grad, as torch
    with pytest.raises(RuntimeError):
        th.nn.ReLU(inplace=True)(th.tensor([1.0], requires_grad=True))


def test_embedding_padding_idx(dev, th):
    th.manual_seed(0)
    t = th.nn.Embedding(6, 3, padding_idx=2)
    a = nn.Embedding(6, 3, padding_idx=2, device=dev)
    assert a.weight[2].tolist() == [0.0, 0.0, 0.0]
    _load(a, t, dev, ag.float32)
    with th.no_grad():
        t.weight[2] = 1.5  # the padding row is read as it is, and gets no gradient
    with ag.no_grad():
        a.weight[2] = 1.5
    idx = [[0, 2, 5], [2, 2, 1]]
    to, ao = t(th.tensor(idx)), a(ag.tensor(idx, device=dev))
    np.testing.assert_allclose(ao.detach().numpy(), to.detach().numpy(), rtol=1e-6)
    to.sum().backward()
    ao.sum().backward()
    np.testing.assert_allclose(a.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-6)
    assert a.weight.grad.numpy()[2].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(AssertionError):
        nn.Embedding(3, 2, padding_idx=3)
    with pytest.raises(AssertionError):
        th.nn.Embedding(3, 2, padding_idx=3)
    e = nn.Embedding.from_pretrained(ag.ones(3, 2))
    assert not e.weight.requires_grad and list(e.state_dict()) == ["weight"]


def test_init_distributions():
    ag.manual_seed(3)
    c = nn.Conv1d(4, 64, 5, groups=2)  # fan_in 2 * 5
    w = c.weight.numpy()
    b = 1 / math.sqrt(10)
    assert np.abs(w).max() <= b and np.abs(w).max() > 0.95 * b
    assert abs(w.std() - b / math.sqrt(3)) < 0.02
    assert np.abs(c.bias.numpy()).max() <= b
    e = nn.Embedding(200, 50).weight.numpy()
    assert abs(e.std() - 1) < 0.05 and abs(e.mean()) < 0.05
    g = nn.GroupNorm(2, 4)
    assert g.weight.tolist() == [1.0] * 4 and g.bias.tolist() == [0.0] * 4
    bn = nn.BatchNorm1d(3)
    assert bn.running_var.tolist() == [1.0] * 3 and bn.num_batches_tracked.dtype is ag.int64


# ---- containers --------------------------------------------------------------------------

def test_sequential_indexing_slicing_append(th):
    a, t = _both("nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1), nn.Tanh())", th)
    for s in (slice(1, 3), slice(None, None, 2), slice(-2, None)):
        assert repr(a[s]) == repr(t[s])
        assert type(a[s]) is nn.Sequential
    assert repr(a[-1]) == repr(t[-1]) and len(a) == len(t) == 4
    for m in (a, t):
        with pytest.raises(IndexError, match="index 4 is out of range"):
            m[4]
    a.append(nn.Sigmoid())
    t.append(th.nn.Sigmoid())
    del a[1]
    del t[1]
    a.insert(0, nn.Identity())
    t.insert(0, th.nn.Identity())
    a[1] = nn.Linear(2, 4)
    t[1] = th.nn.Linear(2, 4)
    assert repr(a) == repr(t)
    assert [type(m).__name__ for m in a] == [type(m).__name__ for m in t]
    assert repr(a + a[:1]) == repr(t + t[:1])
    with pytest.raises(TypeError):
        nn.Sequential(3)
    od = collections.OrderedDict([("conv", nn.Conv1d(1, 2, 2)), ("act", nn.ReLU())])
    s = nn.Sequential(od)
    assert s.conv is od["conv"] and list(s.state_dict()) == ["conv.weight", "conv.bias"]
    assert s[0] is od["conv"]


def test_modulelist(th):
    a, t = _both("nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])", th)
    for m, n in ((a, nn), (t, th.nn)):
        m.append(n.Tanh())
        m.extend([n.Sigmoid(), n.Linear(2, 3)])
        m.insert(1, n.GELU())
        m += [n.Identity()]
        del m[0]
        m[0] = n.SiLU()
    assert repr(a) == repr(t) and len(a) == len(t) == 6
    assert repr(a[1:4]) == repr(t[1:4]) and type(a[1:4]) is nn.ModuleList
    assert [type(m).__name__ for m in a] == [type(m).__name__ for m in t]
    assert list(a.state_dict()) == list(t.state_dict())
    assert a.pop(-1).__class__ is nn.Identity and len(a) == 5
    for m in (a, t):
        with pytest.raises(IndexError):
            m[10]
        with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
            m.extend(3)
        with pytest.raises(NotImplementedError):
            m(1)
    with pytest.raises(TypeError):
        nn.ModuleList([3])


def test_moduledict_parameterlist_parameterdict(th):
    d = nn.ModuleDict({"a": nn.Linear(2, 2)})
    d["b"] = nn.ReLU()
    d.update([("c", nn.Tanh())])
    assert list(d) == ["a", "b", "c"] and "b" in d and len(d) == 3
    assert list(d.state_dict()) == ["a.weight", "a.bias"]
    assert d.pop("b").__class__ is nn.ReLU and list(d.keys()) == ["a", "c"]
    with pytest.raises(KeyError):
        d["zz"]
    pl = nn.ParameterList([ag.randn(2), ag.randn(3)])
    pl.append(ag.zeros(4))
    assert len(pl) == 3 and all(p.requires_grad for p in pl)
    assert list(pl.state_dict()) == ["0", "1", "2"] and len(pl.parameters()) == 3
    pd = nn.ParameterDict({"w": ag.ones(2, 2)})
    pd["b"] = ag.zeros(2)
    assert list(pd.state_dict()) == ["w", "b"] and pd["w"].requires_grad

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
            self.extra = nn.ParameterList([ag.zeros(2)])
            self.register_buffer("steps", ag.zeros(1))
            self.register_buffer("scratch", ag.zeros(1), persistent=False)
            self.plain = ag.zeros(3)  # a plain tensor attribute: not in state_dict, as torch

        def forward(self, x):
            for m in self.layers:
                x = m(x)
            return x + self.extra[0]

    m = M()
    assert list(m.state_dict()) == ["steps", "layers.0.weight", "layers.0.bias", "layers.1.weight",
                                    "layers.1.bias", "extra.0"]
    assert len(m.parameters()) == 5 and len(m.buffers()) == 2
    m(ag.ones(1, 2)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())


def test_load_state_dict_errors_and_incompatible_keys(th):
    a, t = _both("nn.Linear(2, 3)", th)
    for m, mk in ((a, ag), (t, th)):
        with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "bias"'):
            m.load_state_dict({"weight": mk.zeros(3, 2)})
        with pytest.raises(RuntimeError, match="size mismatch for weight"):
            m.load_state_dict({"weight": mk.zeros(3, 3), "bias": mk.zeros(3)})
        r = m.load_state_dict({"weight": mk.ones(3, 2), "bias": mk.zeros(3), "x": mk.zeros(1)}, strict=False)
        assert r.missing_keys == [] and r.unexpected_keys == ["x"]
    assert a.weight.tolist() == [[1.0, 1.0]] * 3


def test_torch_state_dict_into_anygrad_model(th):
    """The torch model's state_dict (as anygrad tensors) loads into the same
    anygrad model and gives torch's outputs, in eval and in train mode."""
    src = ("nn.Sequential(nn.Conv2d(1, 4, 3, padding='same'), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), "
           "nn.Flatten(), nn.Dropout(0.0), nn.Linear(16, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))")
    a, t = _check_module(th, src, [(2, 1, 4, 4)], "cpu", steps=2)
    assert repr(a) == repr(t)


def test_module_misc(th):
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "ReLU", "Sequential"]
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    assert m.get_submodule("0") is m[0]
    assert [n for n, _ in m.named_children()] == ["0", "1"]
    with pytest.raises(AttributeError, match="'Sequential' object has no attribute 'nope'"):
        m.nope
    # tied parameters are listed once, as torch
    a = nn.Linear(2, 2)
    s = nn.Sequential(a, a)
    assert len(s.parameters()) == 2 and list(s.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_constructor_errors(th):
    cases = ["nn.Conv1d(4, 6, 3, groups=4)", "nn.Conv1d(4, 6, 3, groups=0)",
             "nn.Conv1d(2, 2, 3, stride=2, padding='same')", "nn.Conv1d(2, 2, 3, padding='full')",
             "nn.Conv1d(2, 2, 3, padding_mode='mirror')", "nn.GroupNorm(3, 4)", "nn.Dropout(1.5)",
             "nn.Conv2d(2, 2, 3, groups=-1)", "nn.BatchNorm1d(-1)"]
    for expr in cases:
        et = ea = None
        try:
            eval(expr, {"nn": th.nn})
        except Exception as e:  # noqa: BLE001
            et = type(e)
        try:
            eval(expr, {"nn": nn})
        except Exception as e:  # noqa: BLE001
            ea = type(e)
        assert et is not None and ea is not None and issubclass(ea, et), (expr, et, ea)


def test_frozen_parameter_is_a_parameter(th):
    def make(n, mk):
        class M(n.Module):
            def __init__(self):
                super().__init__()
                self.w = n.Parameter(mk.ones(2), requires_grad=False)
                self.v = n.Parameter(mk.ones(3))
        return M()

    a, t = make(nn, ag), make(th.nn, th)
    assert list(a.state_dict()) == list(t.state_dict()) == ["w", "v"]
    assert [n for n, _ in a.named_parameters()] == ["w", "v"]
    a.to(ag.float64)
    assert not a.w.requires_grad and a.v.requires_grad and a.w.dtype is ag.float64
    e = nn.Embedding.from_pretrained(ag.ones(3, 2)).to(ag.float64)
    assert not e.weight.requires_grad


def test_module_dtype_shortcuts():
    m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    assert m.double()[0].weight.dtype is ag.float64 and m[1].num_batches_tracked.dtype is ag.int64
    assert m.float()[1].running_mean.dtype is ag.float32
    assert m.cpu()[0].weight.device == ag.ones(1).device


def test_forward_hooks(th):
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    seen = []
    h1 = m[0].register_forward_hook(lambda mod, args, out: seen.append((type(mod).__name__,
                                                                        tuple(out.shape))))
    h2 = m[1].register_forward_pre_hook(lambda mod, args: (args[0] * 0.0,))
    h3 = m.register_forward_hook(lambda mod, args, out: out + 1.0)
    y = m(ag.ones(4, 2))
    assert seen == [("Linear", (4, 3))] and y.tolist() == [[1.0] * 3] * 4
    for h in (h1, h2, h3):
        h.remove()
    h1.remove()  # twice is harmless
    y = m(ag.ones(4, 2))
    assert len(seen) == 1 and y.shape == (4, 3)
    with m.register_forward_hook(lambda mod, args, out: out * 0.0):
        assert m(ag.ones(1, 2)).tolist() == [[0.0] * 3]
    assert "_forward_hooks" not in m.__dict__
    with pytest.raises(TypeError):
        m.register_forward_hook(3)
