"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder against
torch 1.13: torch's module state loaded into anygrad's (the same state_dict keys),
then outputs, attention weights and the gradients of the inputs and of every
parameter compared, f32 on every device and f64 on the CPU; the fused path
(need_weights=False) and the composed one (weights asked for); errors."""
import math

import numpy as np
import pytest

import anygrad as ag

torch = pytest.importorskip("torch")

TOL = {"float32": 1e-5, "float64": 1e-12}
SLOW = ("vulkan", "gpuemu")


def _dt(name):
    return (torch.float32, ag.float32) if name == "float32" else (torch.float64, ag.float64)


def _ag(t, dev, grad=False):
    return ag.tensor(t.detach().numpy(), device=dev, requires_grad=grad)


def _load(tm, am, dev):
    sd = tm.state_dict()
    assert list(am.state_dict().keys()) == list(sd.keys())
    for k, v in sd.items():
        assert tuple(am.state_dict()[k].shape) == tuple(v.shape), k
    am.load_state_dict({k: _ag(v, dev) for k, v in sd.items()})


def _close(a, t, tol, what):
    a = a.numpy() if isinstance(a, ag.Tensor) else a
    t = t.detach().numpy()
    assert a.shape == t.shape, (what, a.shape, t.shape)
    assert np.isnan(a).sum() == 0 and np.isnan(t).sum() == 0, what
    err = float(np.abs(a - t).max()) / (1.0 + float(np.abs(t).max())) if t.size else 0.0
    assert err <= tol, "%s: error %.3g > %.3g" % (what, err, tol)


def _grads(tm, am, touts, aouts, tins, ains, tol, seed=7):
    """sum(out * g) backward on both sides, with the same random g per output;
    then every input's and every parameter's gradient."""
    g = torch.Generator().manual_seed(seed)
    tl, al = 0, 0
    for to, ao in zip(touts, aouts):
        w = torch.randn(to.shape, dtype=to.dtype, generator=g)
        tl = tl + (to * w).sum()
        al = al + (ao * _ag(w, ao.device)).sum()
    tl.backward()
    al.backward()
    for k, (t, a) in enumerate(zip(tins, ains)):
        if t.grad is not None or a.grad is not None:
            _close(a.grad, t.grad, tol, "grad of input %d" % k)
    ap = dict(am.named_parameters())
    tp = dict(tm.named_parameters())
    assert sorted(ap) == sorted(tp)
    for n, p in tp.items():
        _close(ap[n].grad, p.grad, tol, "grad of " + n)


def _rand(shape, tdt, gen):
    return torch.randn(shape, dtype=tdt, generator=gen)


def _masks(kind, N, L, S, H, tdt, gen, unbatched=False):
    """(key_padding_mask, attn_mask) as torch takes them."""
    kpm = am = None
    if "kpm" in kind:
        kpm = torch.zeros(N, S, dtype=torch.bool)
        kpm[0, S - 2:] = True
        if N > 1:
            kpm[N - 1, 1] = True  # never key 0: the only one query 0 sees under causal
        if "fkpm" in kind:  # float: added
            kpm = torch.zeros(N, S, dtype=tdt).masked_fill(kpm, -1e9) + 0.25 * _rand((N, S), tdt, gen)
        if unbatched:
            kpm = kpm[0]
    if "causal" in kind:
        am = torch.ones(L, S, dtype=torch.bool).triu(1)
    elif "fmask" in kind:
        am = 0.5 * _rand((L, S), tdt, gen)
    elif "3d" in kind:
        am = torch.rand((H if unbatched else N * H, L, S), generator=gen) < 0.3
        am[..., 0] = False  # no row entirely blocked (torch gives NaN there)
    elif "u8" in kind:
        am = torch.ones(L, S, dtype=torch.uint8).triu(1)
    return kpm, am


def _mha_case(dev, dtname, bf, kind, need_weights, avg=True, E=8, H=2, N=2, L=5, S=6, qkv="self",
              kdim=None, vdim=None, train=False, bias=True, add_bias_kv=False, add_zero_attn=False):
    tdt, adt = _dt(dtname)
    gen = torch.Generator().manual_seed(hash((bf, kind, need_weights, qkv)) % 1000)
    torch.manual_seed(3)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=bf, kdim=kdim, vdim=vdim, bias=bias,
                                     add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, dtype=tdt)
    am = ag.nn.MultiheadAttention(E, H, batch_first=bf, kdim=kdim, vdim=vdim, bias=bias,
                                  add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, device=dev,
                                  dtype=adt)
    if bias:
        with torch.no_grad():  # torch zeroes them; give them values so their use is checked
            tm.in_proj_bias.normal_(generator=gen)
            tm.out_proj.bias.normal_(generator=gen)
    _load(tm, am, dev)
    tm.train(train)
    am.train(train)
    if qkv == "self":
        S = L
    shp = (lambda n: (N, n, E)) if bf else (lambda n: (n, N, E))
    tq = _rand(shp(L), tdt, gen).requires_grad_(True)
    if qkv == "self":
        tins, targs = [tq], (tq, tq, tq)
    elif qkv == "kv":
        tk = _rand(shp(S), tdt, gen).requires_grad_(True)
        tins, targs = [tq, tk], (tq, tk, tk)
    else:
        ks = shp(S)[:2] + ((kdim or E),)
        vs = shp(S)[:2] + ((vdim or E),)
        tk = _rand(ks, tdt, gen).requires_grad_(True)
        tv = _rand(vs, tdt, gen).requires_grad_(True)
        tins, targs = [tq, tk, tv], (tq, tk, tv)
    ains = [_ag(t, dev, True) for t in tins]
    aargs = tuple(ains[[id(u) for u in tins].index(id(t))] for t in targs)
    kpm, msk = _masks(kind, N, L, S, H, tdt, gen)
    kw = dict(need_weights=need_weights, average_attn_weights=avg)
    to, tw = tm(*targs, key_padding_mask=kpm, attn_mask=msk, **kw)
    ao, aw = am(*aargs, key_padding_mask=None if kpm is None else _ag(kpm, dev),
                attn_mask=None if msk is None else _ag(msk, dev), **kw)
    tol = TOL[dtname]
    assert ao.dtype is adt and ao.device == ag.device(dev)
    _close(ao, to, tol, "output")
    if need_weights:
        _close(aw, tw, tol, "weights")
        outs = ([to, tw], [ao, aw])
    else:
        assert tw is None and aw is None
        outs = ([to], [ao])
    _grads(tm, am, outs[0], outs[1], tins, ains, tol)


# ---- construction ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"kdim": 5, "vdim": 3}, {"bias": False}, {"add_bias_kv": True},
                                {"kdim": 6, "bias": False, "add_zero_attn": True}],
                         ids=["plain", "kdim_vdim", "no_bias", "bias_kv", "kdim_nobias_zero"])
def test_mha_parameters_as_torch(kw):
    tm = torch.nn.MultiheadAttention(12, 3, **kw)
    am = ag.nn.MultiheadAttention(12, 3, **kw)
    want = [(k, tuple(v.shape)) for k, v in tm.state_dict().items()]
    assert [(k, tuple(v.shape)) for k, v in am.state_dict().items()] == want
    assert [k for k, _ in am.named_parameters()] == [k for k, _ in tm.named_parameters()]
    ap = dict(am.named_parameters())
    for k, _ in tm.named_parameters():
        assert ap[k].requires_grad and ap[k].is_leaf, k
    for a in ("embed_dim", "kdim", "vdim", "num_heads", "head_dim", "dropout", "batch_first",
              "_qkv_same_embed_dim", "add_zero_attn"):
        assert getattr(am, a) == getattr(tm, a), a
    assert isinstance(am.out_proj, ag.nn.Linear)
    assert (am.in_proj_weight is None) == (tm.in_proj_weight is None)
    assert (am.q_proj_weight is None) == (tm.q_proj_weight is None)


def test_mha_init_as_torch():
    E = 64
    am = ag.nn.MultiheadAttention(E, 4, dtype=ag.float64)
    w = am.in_proj_weight.numpy()
    bound = math.sqrt(6.0 / (E + 3 * E))  # xavier_uniform_ of [3E, E]
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    assert not am.in_proj_bias.numpy().any() and not am.out_proj.bias.numpy().any()
    wo = am.out_proj.weight.numpy()  # a Linear's init, as torch's out_proj
    assert np.abs(wo).max() <= 1 / math.sqrt(E) and wo.std() > 0.5 / math.sqrt(3 * E)
    sep = ag.nn.MultiheadAttention(E, 4, kdim=32, vdim=16, add_bias_kv=True)
    kb = math.sqrt(6.0 / (E + 32))
    assert np.abs(sep.k_proj_weight.numpy()).max() <= kb
    assert np.abs(sep.k_proj_weight.numpy()).max() > 0.9 * kb
    bk = sep.bias_k.numpy()
    assert bk.shape == (1, 1, E) and 0.5 < bk.std() / math.sqrt(1.0 / E) < 1.5  # xavier_normal_


def test_mha_dtype_device(dev):
    am = ag.nn.MultiheadAttention(4, 2, device=dev)
    for _, p in am.named_parameters():
        assert p.device == ag.device(dev) and p.dtype is ag.float32


# ---- MultiheadAttention against torch -------------------------------------------------------------

DEV_KINDS = ["none", "kpm", "causal", "kpm_causal"]


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("bf", [False, True], ids=["seqfirst", "batchfirst"])
@pytest.mark.parametrize("kind", DEV_KINDS)
def test_mha_f32(dev, kind, bf, need_weights):
    _mha_case(dev, "float32", bf, kind, need_weights)


KINDS = ["none", "kpm", "fkpm", "causal", "kpm_causal", "fmask", "fmask_kpm", "3d", "3d_kpm", "u8"]


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("bf", [False, True], ids=["seqfirst", "batchfirst"])
@pytest.mark.parametrize("kind", KINDS)
def test_mha_f64(kind, bf, need_weights):
    if kind == "u8":
        with pytest.warns(UserWarning):  # torch 1.13's deprecation warning
            _mha_case("cpu", "float64", bf, kind, need_weights)
    else:
        _mha_case("cpu", "float64", bf, kind, need_weights)


@pytest.mark.parametrize("avg", [True, False], ids=["averaged", "per_head"])
@pytest.mark.parametrize("qkv", ["self", "kv", "qkv"])
def test_mha_cross_attention(qkv, avg):
    _mha_case("cpu", "float64", True, "kpm_causal", True, avg=avg, qkv=qkv, L=4, S=7)
    _mha_case("cpu", "float64", False, "kpm", False, avg=avg, qkv=qkv, L=4, S=7)


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
def test_mha_past_the_tiles(need_weights):
    """Sequences longer than the fused kernel's query and key tiles (32, 64)."""
    _mha_case("cpu", "float64", True, "kpm_causal", need_weights, L=70, N=2, E=16, H=2)
    _mha_case("cpu", "float64", False, "kpm", need_weights, qkv="kv", L=33, S=130, N=1, E=16, H=4)


def test_mha_cross_attention_dev(dev):
    _mha_case(dev, "float32", True, "kpm", False, qkv="qkv", L=3, S=5)
    _mha_case(dev, "float32", False, "kpm", True, qkv="kv", L=3, S=5, avg=False)


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
@pytest.mark.parametrize("kw", [{"kdim": 5, "vdim": 3}, {"bias": False}, {"add_bias_kv": True},
                                {"add_zero_attn": True}, {"add_bias_kv": True, "add_zero_attn": True,
                                                          "kdim": 6}],
                         ids=["kdim_vdim", "no_bias", "bias_kv", "zero_attn", "all"])
def test_mha_options(kw, need_weights):
    _mha_case("cpu", "float64", True, "kpm_causal", need_weights, qkv="qkv", L=4, S=7, **kw)
    _mha_case("cpu", "float64", False, "3d", need_weights, qkv="qkv", L=4, S=7, **kw)


def test_mha_options_dev(dev):
    _mha_case(dev, "float32", True, "kpm_causal", False, qkv="qkv", L=3, S=4, kdim=5, vdim=3,
              add_bias_kv=True, add_zero_attn=True)


@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
def test_mha_train_without_dropout(dev, need_weights):
    _mha_case(dev, "float32", True, "kpm_causal", need_weights, train=True, L=3, N=2)
    if dev == "cpu":
        _mha_case(dev, "float64", False, "3d_kpm", need_weights, train=True)


@pytest.mark.parametrize("bf", [False, True], ids=["seqfirst", "batchfirst"])
@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
def test_mha_unbatched(dev, bf, need_weights):
    tdt, adt = _dt("float32" if dev != "cpu" else "float64")
    tol = TOL["float32" if dev != "cpu" else "float64"]
    gen = torch.Generator().manual_seed(5)
    E, H, L, S = 6, 3, 4, 5
    tm = torch.nn.MultiheadAttention(E, H, batch_first=bf, dtype=tdt)
    am = ag.nn.MultiheadAttention(E, H, batch_first=bf, device=dev, dtype=adt)
    _load(tm, am, dev)
    tq, tk = _rand((L, E), tdt, gen).requires_grad_(True), _rand((S, E), tdt, gen).requires_grad_(True)
    kpm = torch.tensor([False, True, False, False, True])
    msk = torch.rand((H, L, S), generator=gen) < 0.3
    msk[..., 0] = False
    aq, ak = _ag(tq, dev, True), _ag(tk, dev, True)
    to, tw = tm(tq, tk, tk, key_padding_mask=kpm, attn_mask=msk, need_weights=need_weights,
                average_attn_weights=False)
    ao, aw = am(aq, ak, ak, key_padding_mask=_ag(kpm, dev), attn_mask=_ag(msk, dev),
                need_weights=need_weights, average_attn_weights=False)
    _close(ao, to, tol, "output")
    if need_weights:
        _close(aw, tw, tol, "weights")
    _grads(tm, am, [to], [ao], [tq, tk], [aq, ak], tol)


def test_mha_fused_path_runs(dev):
    """need_weights=False runs the fused op: a query whose keys are all padded gets 0
    from it (finite), where the composed path (and torch 1.13) gives NaN."""
    dtn = "float32" if dev != "cpu" else "float64"
    tdt, adt = _dt(dtn)
    am = ag.nn.MultiheadAttention(4, 2, batch_first=True, device=dev, dtype=adt).eval()
    x = ag.randn(2, 3, 4, dtype=adt, device=dev)
    kpm = ag.tensor([[True, True, True], [False, False, True]], device=dev)
    o, w = am(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert w is None and np.isfinite(o.numpy()).all()
    b = am.out_proj.bias.numpy()
    np.testing.assert_allclose(o.numpy()[0], np.broadcast_to(b, (3, 4)), rtol=0, atol=TOL[dtn])
    o2, w2 = am(x, x, x, key_padding_mask=kpm, need_weights=True)
    assert np.isnan(o2.numpy()[0]).all() and np.isfinite(o2.numpy()[1]).all()
    np.testing.assert_allclose(o.numpy()[1], o2.numpy()[1], rtol=0, atol=TOL[dtn])
    tm = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=tdt)
    _load(tm, am, dev)
    tx = torch.tensor(x.numpy(), requires_grad=True)  # torch's slow path: NaN as the composed one
    to, _ = tm(tx, tx, tx, key_padding_mask=torch.tensor(kpm.numpy()), need_weights=False)
    assert np.isnan(to.detach().numpy()[0]).all()


def test_eval_no_grad_as_torch_fast_paths():
    """Under no_grad in eval torch 1.13 takes its native kernels (MultiheadAttention,
    TransformerEncoderLayer): the same values. Its TransformerEncoder with a padding
    mask runs nested tensors and gives 0 at the padded positions; anygrad computes them
    (the other positions are equal)."""
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dtype=torch.float64).eval()
    al = ag.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dtype=ag.float64).eval()
    _load(tl, al, "cpu")
    te = torch.nn.TransformerEncoder(tl, 2).eval()
    ae = ag.nn.TransformerEncoder(al, 2).eval()
    _load(te, ae, "cpu")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[0, 3:] = True
    ax, akpm = _ag(x, "cpu"), _ag(kpm, "cpu")
    with torch.no_grad(), ag.no_grad():
        for nw in (True, False):
            to, tw = tl.self_attn(x, x, x, key_padding_mask=kpm, need_weights=nw)
            ao, aw = al.self_attn(ax, ax, ax, key_padding_mask=akpm, need_weights=nw)
            _close(ao, to, 1e-12, "attention")
            if nw:
                _close(aw, tw, 1e-12, "weights")
        _close(al(ax, src_key_padding_mask=akpm), tl(x, src_key_padding_mask=kpm), 1e-12, "layer")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch: nested tensors are a prototype
            to = te(x, src_key_padding_mask=kpm).numpy()
        ao = ae(ax, src_key_padding_mask=akpm).numpy()
    keep = ~kpm.numpy()
    np.testing.assert_allclose(ao[keep], to[keep], rtol=0, atol=1e-12)
    assert not to[~keep].any() and np.abs(ao[~keep]).min() > 0


def test_encoder_is_causal_hint(dev):
    dtn = "float32" if dev != "cpu" else "float64"
    _, adt = _dt(dtn)
    layer = ag.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, device=dev, dtype=adt)
    enc = ag.nn.TransformerEncoder(layer, 2)
    x = ag.randn(4, 2, 8, dtype=adt, device=dev)
    msk = ag.tensor(np.triu(np.full((4, 4), -np.inf), 1), device=dev).to(adt)
    ref = enc(x, mask=msk)
    np.testing.assert_allclose(enc(x, mask=msk, is_causal=True).numpy(), ref.numpy(), rtol=0, atol=TOL[dtn])
    np.testing.assert_allclose(enc.layers[0](x, src_mask=msk, is_causal=True).numpy(),
                               enc.layers[0](x, src_mask=msk).numpy(), rtol=0, atol=TOL[dtn])
    assert np.abs(enc(x).numpy() - ref.numpy()).max() > 1e-3


def test_mha_is_causal_hint(dev):
    """torch 2's is_causal hint (with the causal attn_mask it stands for): the same
    results; without attn_mask torch 2's RuntimeError."""
    dtn = "float32" if dev != "cpu" else "float64"
    _, adt = _dt(dtn)
    am = ag.nn.MultiheadAttention(8, 2, dtype=adt, device=dev)
    x = ag.randn(5, 2, 8, dtype=adt, device=dev)
    msk = ag.tensor(np.triu(np.ones((5, 5), bool), 1), device=dev)
    kpm = ag.tensor([[False] * 4 + [True], [False] * 5], device=dev)
    ref, _ = am(x, x, x, attn_mask=msk, key_padding_mask=kpm, need_weights=False)
    hint, _ = am(x, x, x, attn_mask=msk, key_padding_mask=kpm, need_weights=False, is_causal=True)
    wts, w = am(x, x, x, attn_mask=msk, key_padding_mask=kpm, need_weights=True, is_causal=True)
    np.testing.assert_allclose(hint.numpy(), ref.numpy(), rtol=0, atol=TOL[dtn])
    np.testing.assert_allclose(wts.numpy(), ref.numpy(), rtol=0, atol=TOL[dtn])
    assert np.abs(np.triu(w.numpy()[0], 1)).max() == 0
    with pytest.raises(RuntimeError, match="is_causal"):
        am(x, x, x, need_weights=False, is_causal=True)


def test_mha_float_masks_added():
    """A float key_padding_mask with an attn_mask is added to it, as torch 2 does;
    torch 1.13 raises for a float attn_mask (masked_fill) and, for a bool one, takes
    every nonzero padding value as a block. Against torch given the sum."""
    gen = torch.Generator().manual_seed(11)
    tm = torch.nn.MultiheadAttention(6, 2, dtype=torch.float64)
    am = ag.nn.MultiheadAttention(6, 2, dtype=ag.float64)
    _load(tm, am, "cpu")
    x = _rand((4, 3, 6), torch.float64, gen)
    fk = _rand((3, 4), torch.float64, gen)
    causal = torch.ones(4, 4, dtype=torch.bool).triu(1)
    for m in (_rand((4, 4), torch.float64, gen), causal):
        fm = torch.zeros(4, 4, dtype=torch.float64).masked_fill(m, -math.inf) if m.dtype == torch.bool else m
        if m.dtype == torch.bool:
            assert np.isnan(tm(x, x, x, attn_mask=m, key_padding_mask=fk)[0].detach().numpy()).all()
        else:
            with pytest.raises(RuntimeError):
                tm(x, x, x, attn_mask=m, key_padding_mask=fk)
        both = fm.unsqueeze(0) + fk.repeat_interleave(2, 0).unsqueeze(1)  # [N*H, L, S]
        for nw in (True, False):
            to, tw = tm(x, x, x, attn_mask=both, need_weights=nw)
            ao, aw = am(_ag(x, "cpu"), _ag(x, "cpu"), _ag(x, "cpu"), attn_mask=_ag(m, "cpu"),
                        key_padding_mask=_ag(fk, "cpu"), need_weights=nw)
            _close(ao, to, 1e-12, "output")
            if nw:
                _close(aw, tw, 1e-12, "weights")


# ---- dropout --------------------------------------------------------------------------------------

def test_mha_dropout(dev):
    """Training with dropout: the weights returned are the dropped ones (zeros at the
    rate p, the rest scaled by 1/(1-p), as torch returns them); the fused path drops
    the same entries as the composed one for one generator state; eval drops none."""
    small = dev.split(":")[0] in SLOW
    dtn = "float32" if dev != "cpu" else "float64"
    _, adt = _dt(dtn)
    E, H, N, L = 8, 2, 2, (6 if small else 24)
    p = 0.25
    am = ag.nn.MultiheadAttention(E, H, dropout=p, batch_first=True, dtype=adt, device=dev)
    x = ag.randn(N, L, E, dtype=adt, device=dev)
    am.eval()
    _, w_eval = am(x, x, x, average_attn_weights=False)
    am.train()
    ag.manual_seed(123)
    o1, w = am(x, x, x, average_attn_weights=False)
    ag.manual_seed(123)
    o2, none = am(x, x, x, need_weights=False)
    assert none is None
    np.testing.assert_allclose(o2.numpy(), o1.numpy(), rtol=0, atol=10 * TOL[dtn])
    wn, we = w.numpy(), w_eval.numpy()
    dropped = wn == 0
    if not small:
        assert abs(dropped.mean() - p) < 0.05
    assert dropped.any() and not (we == 0).any()
    np.testing.assert_allclose(wn[~dropped], we[~dropped] / (1 - p), rtol=10 * TOL[dtn])
    ag.manual_seed(124)
    o3, _ = am(x, x, x, need_weights=False)
    assert np.abs(o3.numpy() - o1.numpy()).max() > 1e-3
    am.eval()
    o4, _ = am(x, x, x, need_weights=False)
    o5, _ = am(x, x, x, need_weights=True)
    np.testing.assert_allclose(o4.numpy(), o5.numpy(), rtol=0, atol=10 * TOL[dtn])


# ---- TransformerEncoderLayer and TransformerEncoder -----------------------------------------------

def _act(name):
    if name == "callable":
        return torch.nn.functional.silu, ag.nn.functional.silu
    return name, name


def _enc_case(dev, dtname, bf, norm_first, kind, act="relu", train=False, layers=None, final_norm=False,
              E=8, H=2, N=2, L=5, FF=16):
    tdt, adt = _dt(dtname)
    gen = torch.Generator().manual_seed(17 + 2 * bf + norm_first)
    ta, aa = _act(act)
    torch.manual_seed(4)
    tl = torch.nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation=ta, batch_first=bf,
                                          norm_first=norm_first, layer_norm_eps=1e-6, dtype=tdt)
    al = ag.nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation=aa, batch_first=bf,
                                       norm_first=norm_first, layer_norm_eps=1e-6, device=dev, dtype=adt)
    if layers is None:
        tm, am = tl, al
    else:
        tn = torch.nn.LayerNorm(E, dtype=tdt) if final_norm else None
        an = ag.nn.LayerNorm(E, device=dev, dtype=adt) if final_norm else None
        tm = torch.nn.TransformerEncoder(tl, layers, norm=tn, enable_nested_tensor=False)
        am = ag.nn.TransformerEncoder(al, layers, norm=an)
    with torch.no_grad():  # biases and norms away from their init, so that their use is checked
        for n, prm in tm.named_parameters():
            if prm.dim() == 1:
                prm.add_(0.3 * torch.randn(prm.shape, dtype=tdt, generator=gen))
    _load(tm, am, dev)
    tm.train(train)
    am.train(train)
    shp = (N, L, E) if bf else (L, N, E)
    tx = _rand(shp, tdt, gen).requires_grad_(True)
    ax = _ag(tx, dev, True)
    kpm, msk = _masks(kind, N, L, L, H, tdt, gen)
    akpm = None if kpm is None else _ag(kpm, dev)
    amsk = None if msk is None else _ag(msk, dev)
    if layers is None:
        to = tm(tx, src_mask=msk, src_key_padding_mask=kpm)
        ao = am(ax, src_mask=amsk, src_key_padding_mask=akpm)
    else:
        to = tm(tx, mask=msk, src_key_padding_mask=kpm)
        ao = am(ax, mask=amsk, src_key_padding_mask=akpm)
    tol = TOL[dtname]
    _close(ao, to, tol, "output")
    _grads(tm, am, [to], [ao], [tx], [ax], tol)


def test_encoder_layer_parameters_as_torch():
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16)
    al = ag.nn.TransformerEncoderLayer(8, 2, 16)
    assert [(k, tuple(v.shape)) for k, v in al.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in tl.state_dict().items()]
    for n in ("self_attn", "linear1", "dropout", "linear2", "norm1", "norm2", "dropout1", "dropout2"):
        assert type(getattr(al, n)).__name__ == type(getattr(tl, n)).__name__.replace(
            "NonDynamicallyQuantizableLinear", "Linear"), n
    assert al.dropout.p == tl.dropout.p == 0.1
    assert al.norm1.eps == tl.norm1.eps and al.norm_first is False
    assert al.self_attn.batch_first is False and al.activation_relu_or_gelu == tl.activation_relu_or_gelu
    g = ag.nn.TransformerEncoderLayer(8, 2, activation="gelu", batch_first=True, norm_first=True,
                                      layer_norm_eps=1e-3)
    assert g.activation_relu_or_gelu == 2 and g.self_attn.batch_first and g.norm2.eps == 1e-3
    assert tuple(g.linear1.weight.shape) == (2048, 8)


@pytest.mark.parametrize("norm_first", [False, True], ids=["postnorm", "prenorm"])
@pytest.mark.parametrize("bf", [False, True], ids=["seqfirst", "batchfirst"])
def test_encoder_layer_f32(dev, bf, norm_first):
    small = dev.split(":")[0] in SLOW
    _enc_case(dev, "float32", bf, norm_first, "kpm_causal", L=4 if small else 6)
    if not small:
        _enc_case(dev, "float32", bf, norm_first, "none", act="gelu", train=True)


@pytest.mark.parametrize("act", ["relu", "gelu", "callable"])
@pytest.mark.parametrize("kind", ["none", "kpm", "causal", "kpm_causal", "fmask", "3d_kpm"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["postnorm", "prenorm"])
@pytest.mark.parametrize("bf", [False, True], ids=["seqfirst", "batchfirst"])
def test_encoder_layer_f64(bf, norm_first, kind, act):
    _enc_case("cpu", "float64", bf, norm_first, kind, act=act)


@pytest.mark.parametrize("norm_first", [False, True], ids=["postnorm", "prenorm"])
def test_encoder_layer_train_without_dropout(dev, norm_first):
    small = dev.split(":")[0] in SLOW
    _enc_case(dev, "float32", True, norm_first, "kpm", train=True, L=3 if small else 5)
    if dev == "cpu":
        _enc_case(dev, "float64", False, norm_first, "kpm_causal", act="gelu", train=True)


def test_encoder_layer_dropout():
    """dropout=0.5 in training: the result changes with the seed, repeats for one
    seed, and eval gives the layer without dropout."""
    al = ag.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5, dtype=ag.float64)
    x = ag.randn(5, 2, 8, dtype=ag.float64)
    ag.manual_seed(1)
    a = al(x).numpy()
    ag.manual_seed(1)
    b = al(x).numpy()
    ag.manual_seed(2)
    c = al(x).numpy()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    al.eval()
    e = al(x).numpy()
    ref = ag.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype=ag.float64)
    ref.load_state_dict(al.state_dict())
    np.testing.assert_allclose(e, ref.eval()(x).numpy(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(e, ref.train()(x).numpy(), rtol=0, atol=1e-14)
    assert np.abs(a - e).max() > 1e-3


@pytest.mark.parametrize("final_norm", [False, True], ids=["no_norm", "norm"])
def test_encoder(dev, final_norm):
    small = dev.split(":")[0] in SLOW
    if dev == "cpu":
        _enc_case(dev, "float64", True, False, "kpm_causal", layers=3, final_norm=final_norm)
        _enc_case(dev, "float64", False, True, "fmask", layers=2, final_norm=final_norm, act="gelu")
    _enc_case(dev, "float32", True, final_norm, "kpm_causal", layers=2, final_norm=final_norm,
              L=3 if small else 5)


def test_encoder_layers_are_copies():
    al = ag.nn.TransformerEncoderLayer(8, 2, 16)
    enc = ag.nn.TransformerEncoder(al, 3, norm=ag.nn.LayerNorm(8))
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16)
    tenc = torch.nn.TransformerEncoder(tl, 3, norm=torch.nn.LayerNorm(8))
    assert list(enc.state_dict().keys()) == list(tenc.state_dict().keys())
    assert enc.num_layers == 3 and len(enc.layers) == 3
    ps = [p for _, p in enc.named_parameters()]
    assert len({id(p) for p in ps}) == len(ps) == len(list(tenc.parameters()))
    for k, v in al.state_dict().items():  # each layer starts as the given one, which stays apart
        for i in range(3):
            np.testing.assert_array_equal(enc.state_dict()["layers.%d.%s" % (i, k)].numpy(), v.numpy())
        assert all(enc.state_dict()["layers.%d.%s" % (i, k)] is not v for i in range(3))
    x = ag.randn(4, 2, 8)
    enc(x).sum().backward()
    assert al.linear1.weight.grad is None and enc.layers[0].linear1.weight.grad is not None
    enc.eval()
    assert not enc.layers[2].training and not enc.layers[2].self_attn.training
    enc.train()
    assert enc.layers[1].dropout.training


# ---- errors ---------------------------------------------------------------------------------------

def _same_error(tcall, acall, exc):
    with pytest.raises(exc) as te:
        tcall()
    with pytest.raises(exc) as ae:
        acall()
    assert type(ae.value) is type(te.value), (type(ae.value), type(te.value))
    return str(ae.value)


def test_errors_construction():
    msg = _same_error(lambda: torch.nn.MultiheadAttention(10, 3), lambda: ag.nn.MultiheadAttention(10, 3),
                      AssertionError)
    assert "divisible by num_heads" in msg
    _same_error(lambda: torch.nn.TransformerEncoderLayer(10, 4),
                lambda: ag.nn.TransformerEncoderLayer(10, 4),
                AssertionError)
    msg = _same_error(lambda: torch.nn.TransformerEncoderLayer(8, 2, activation="tanh"),
                      lambda: ag.nn.TransformerEncoderLayer(8, 2, activation="tanh"), RuntimeError)
    assert "relu/gelu" in msg
    _same_error(lambda: torch.nn.TransformerEncoderLayer(8, 2, dropout=1.5),
                lambda: ag.nn.TransformerEncoderLayer(8, 2, dropout=1.5), ValueError)
    with pytest.raises(TypeError):
        ag.nn.MultiheadAttention(8.0, 2)
    with pytest.raises(TypeError):
        ag.nn.TransformerEncoderLayer(8, 2, activation=3)
    with pytest.raises(TypeError):
        ag.nn.TransformerEncoder("layer", 2)


def _pair(E=8, H=2):
    tm = torch.nn.MultiheadAttention(E, H)
    am = ag.nn.MultiheadAttention(E, H)
    return tm, am


@pytest.mark.parametrize("case", ["mask2d", "mask3d", "mask4d", "mask_int", "kpm_shape", "kpm_dim",
                                  "kpm_int",
                                  "query4d", "kv2d", "embed", "kv_shape", "unbatched_mask3d"])
def test_errors_forward(case):
    tm, am = _pair()
    L, S, N, E = 3, 4, 2, 8
    q, k = torch.randn(L, N, E), torch.randn(S, N, E)
    v, kw = k, {}
    if case == "mask2d":
        kw["attn_mask"] = torch.zeros(L, S + 1, dtype=torch.bool)
        exc = RuntimeError
    elif case == "mask3d":
        kw["attn_mask"] = torch.zeros(N, L, S, dtype=torch.bool)
        exc = RuntimeError
    elif case == "mask4d":
        kw["attn_mask"] = torch.zeros(N, 2, L, S, dtype=torch.bool)
        exc = AssertionError
    elif case == "mask_int":
        kw["attn_mask"] = torch.zeros(L, S, dtype=torch.int32)
        exc = AssertionError
    elif case == "kpm_shape":
        kw["key_padding_mask"] = torch.zeros(N, S + 1, dtype=torch.bool)
        exc = AssertionError
    elif case == "kpm_dim":
        kw["key_padding_mask"] = torch.zeros(S, dtype=torch.bool)
        exc = AssertionError
    elif case == "kpm_int":
        kw["key_padding_mask"] = torch.zeros(N, S, dtype=torch.int64)
        exc = AssertionError
    elif case == "query4d":
        q = q.unsqueeze(0)
        exc = AssertionError
    elif case == "kv2d":
        k = v = k[:, 0]
        exc = AssertionError
    elif case == "embed":
        q = torch.randn(L, N, E + 2)
        exc = AssertionError
    elif case == "kv_shape":
        v = torch.randn(S + 1, N, E)
        exc = AssertionError
    elif case == "unbatched_mask3d":
        q, k, v = q[:, 0], k[:, 0], k[:, 0]
        kw["attn_mask"] = torch.zeros(N * 2, L, S, dtype=torch.bool)
        exc = AssertionError
    akw = {n: _ag(t, "cpu") for n, t in kw.items()}
    aq, ak, av = _ag(q, "cpu"), _ag(k, "cpu"), _ag(v, "cpu")
    _same_error(lambda: tm(q, k, v, **kw), lambda: am(aq, ak, av, **akw), exc)


def test_errors_types():
    am = ag.nn.MultiheadAttention(4, 2)
    x = ag.randn(3, 1, 4)
    with pytest.raises(TypeError, match="query"):
        am([[1.0]], x, x)
    with pytest.raises(TypeError, match="attn_mask"):
        am(x, x, x, attn_mask=[[True]])
    el = ag.nn.TransformerEncoderLayer(4, 2, 8)
    with pytest.raises(TypeError, match="src"):
        el(np.zeros((3, 1, 4), np.float32))
    tl = torch.nn.TransformerEncoderLayer(4, 2, 8)
    _same_error(lambda: tl(torch.randn(3, 1, 4), src_key_padding_mask=torch.zeros(1, 3).long()),
                lambda: el(x, src_key_padding_mask=ag.zeros(1, 3, dtype=ag.int64)), AssertionError)
