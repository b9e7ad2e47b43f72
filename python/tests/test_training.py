"""Training from Python: the MLP of c/mlp_ref.c step by step against the same
run in C, nn modules against torch, optimizers, schedulers, save/load, autocast
and the profiler."""
import os
import subprocess

import numpy as np
import pytest

import anygrad as ag
from anygrad import nn

REF = os.environ.get("ANYGRAD_MLP_REF")


def python_mlp(dev, steps):
    ag.manual_seed(0)
    x = ag.randn(64, 8, device=dev)
    y = ag.randn(64, 1, device=dev)
    w1 = ag.randn(8, 16, device=dev) * 0.3
    w2 = ag.randn(16, 1, device=dev) * 0.3
    b1, b2 = ag.zeros(16, device=dev), ag.zeros(1, device=dev)
    ps = [w1, b1, w2, b2]
    for p in ps:
        p.requires_grad = True
    opt = ag.optim.AdamW(ps, lr=1e-2)
    losses = []
    for _ in range(steps):
        out = ag.relu(x @ w1 + b1) @ w2 + b2
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_mlp_equals_the_c_run_step_by_step(dev):
    if not REF or not os.path.exists(REF):
        pytest.skip("ANYGRAD_MLP_REF (the python_mlp_ref program) is not built")
    steps = 20
    out = subprocess.run([REF, dev, str(steps)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    c_losses = [float(line.split()[1]) for line in out.stdout.split("\n") if line.strip()]
    py_losses = python_mlp(dev, steps)
    assert len(c_losses) == steps
    np.testing.assert_allclose(py_losses, c_losses, rtol=1e-6, atol=0)
    assert py_losses[-1] < 0.7 * py_losses[0]


def test_modules_match_torch(dev, th):
    rng = np.random.default_rng(0)
    lin = nn.Linear(5, 3, device=dev)
    tl = th.nn.Linear(5, 3)
    with th.no_grad():
        tl.weight.copy_(th.tensor(lin.weight.numpy()))
        tl.bias.copy_(th.tensor(lin.bias.numpy()))
    x = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(lin(ag.tensor(x, device=dev)).numpy(),
                               tl(th.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    ln = nn.LayerNorm(5, device=dev)
    np.testing.assert_allclose(ln(ag.tensor(x, device=dev)).numpy(),
                               th.nn.functional.layer_norm(th.tensor(x), (5,)).numpy(), atol=1e-5)
    emb = nn.Embedding(10, 4, device=dev)
    idx = ag.tensor([[1, 2], [9, 0]], device=dev)
    assert emb(idx).shape == (2, 2, 4)
    assert list(dict(lin.named_parameters())) == ["weight", "bias"]


def test_cnn_module_tree_state_dict_and_save_load(tmp_path, dev):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, device=dev), nn.BatchNorm2d(4, device=dev),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.1),
                          nn.Linear(4 * 4 * 4, 3, device=dev))
    sd = model.state_dict()
    assert list(sd) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                        "1.num_batches_tracked", "6.weight", "6.bias"]  # torch's order
    assert len(model.parameters()) == 6
    x = ag.randn(2, 1, 8, 8, device=dev)
    try:
        y = model(x)
    except ag.UnsupportedError as e:
        pytest.skip(str(e))
    assert y.shape == (2, 3)
    ag.functional.cross_entropy(y, ag.tensor([0, 2], device=dev)).backward()
    assert all(p.grad is not None for p in model.parameters())
    path = tmp_path / "m.safetensors"
    ag.save(model, path)
    loaded = ag.load(path, map_location=dev)
    assert set(loaded) == set(sd)
    model2 = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, device=dev),
                           nn.BatchNorm2d(4, device=dev), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                           nn.Dropout(0.1), nn.Linear(4 * 4 * 4, 3, device=dev))
    model2.load_state_dict(loaded)
    model.eval()
    model2.eval()
    np.testing.assert_allclose(model(x).numpy(), model2(x).numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="Missing key"):  # torch's type
        model2.load_state_dict({"nope": ag.zeros(1)})


def test_sgd_and_schedulers_match_torch(th):
    w0 = np.random.default_rng(1).standard_normal(6).astype(np.float32)
    w = ag.tensor(w0, requires_grad=True)
    tw = th.tensor(w0, requires_grad=True)
    opt = ag.optim.SGD([w], lr=0.1, momentum=0.9)
    topt = th.optim.SGD([tw], lr=0.1, momentum=0.9)
    sch = ag.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    tsch = th.optim.lr_scheduler.StepLR(topt, 2, gamma=0.5)
    for _ in range(6):
        (w * w).sum().backward()
        (tw * tw).sum().backward()
        opt.step()
        topt.step()
        opt.zero_grad()
        topt.zero_grad()
        sch.step()
        tsch.step()
        assert sch.get_last_lr() == pytest.approx(tsch.get_last_lr())
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-5)
    cos = ag.optim.lr_scheduler.CosineAnnealingLR(ag.optim.AdamW([w], lr=1.0), T_max=10)
    for _ in range(10):
        cos.step()
    assert cos.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)


def test_grad_modes_and_autocast():
    w = ag.ones(4, 4, requires_grad=True)
    with ag.no_grad():
        y = w * 2
    assert not y.requires_grad and ag.is_grad_enabled()

    @ag.no_grad()
    def f():
        return w + 1
    assert not f().requires_grad
    with ag.autocast(dtype=ag.bfloat16):
        z = w @ w
    assert z.dtype is ag.bfloat16
    z.float().sum().backward()
    assert w.grad.dtype is ag.float32 and w.grad.shape == (4, 4)


def test_devices_memory_stats_and_profiler(tmp_path, dev):
    assert "cpu" in ag.devices()
    s = ag.memory_stats(dev)
    for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
              "reserved_bytes.all.current", "active_bytes.large_pool.current",
              "num_alloc_retries", "num_ooms", "requested_bytes.small_pool.allocated"):
        assert k in s, k
    before = ag.memory_allocated(dev)
    x = ag.zeros(1 << 16, device=dev)
    assert ag.memory_allocated(dev) >= before + (1 << 18)
    del x
    prof = ag.Profiler(dev, window=4)
    w = ag.randn(32, 32, device=dev, requires_grad=True)
    for i in range(5):
        with prof.step():
            loss = (w @ w).sum()
            loss.backward()
            w.grad = None
            prof.log_scalar("loss", i, loss.item())
    assert prof.verdict()
    prof.report(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")


def test_gpt_from_the_c_api_trains_and_frees(dev):
    live = ag.live_tensors()
    m = ag.nn.GPT(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, device=dev)
    assert list(m.state_dict())[:2] == ["wte.weight", "wpe.weight"]
    assert "head.weight" not in m.state_dict()  # tied to wte, as GPT-2
    idx = ag.tensor([[1, 2, 3, 4], [5, 6, 7, 8]], device=dev)
    opt = ag.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        logits = m(idx)
        loss = ag.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert logits.shape == (2, 4, 11) and losses[-1] < 0.6 * losses[0]
    del m, opt, logits, loss, idx
    import gc
    gc.collect()
    assert ag.live_tensors() == live


def test_llama_from_the_c_api_trains_saves_and_frees(dev, tmp_path):
    live = ag.live_tensors()
    kw = dict(vocab_size=13, dim=16, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=8,
              multiple_of=8)
    m = ag.nn.Llama(device=dev, **kw)
    names = list(m.state_dict())
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "model.norm.weight"
    assert "model.layers.1.self_attn.k_proj.weight" in names and "lm_head.weight" not in names
    assert m.state_dict()["model.layers.0.self_attn.k_proj.weight"].shape == (8, 16)  # GQA
    assert m.config["hidden_dim"] == 48 and m.config["rope_theta"] == 10000.0
    idx = ag.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]], device=dev)
    opt = ag.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        logits = m(idx)
        loss = ag.functional.cross_entropy(logits[:, :-1].reshape(-1, 13), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert logits.shape == (2, 6, 13) and losses[-1] < 0.6 * losses[0]
    # the Hugging Face file round trip: a fresh model loads the trained weights
    m.save_pretrained(tmp_path / "llama.safetensors")
    m2 = ag.nn.Llama(device=dev, **kw).load_pretrained(tmp_path / "llama.safetensors")
    with ag.no_grad():
        assert (m2(idx) - m(idx)).abs().max().item() == 0.0
    untied = ag.nn.Llama(device=dev, untied_head=True, **kw)
    assert "lm_head.weight" in untied.state_dict()
    with pytest.raises(ag.AnygradError):  # a tied file lacks lm_head.weight
        untied.load_pretrained(tmp_path / "llama.safetensors")
    with pytest.raises(ValueError):  # longer than max_seq_len
        m(ag.zeros(1, 9, dtype=ag.int64, device=dev))
    with pytest.raises(ValueError):  # dim not a multiple of n_heads
        ag.nn.Llama(vocab_size=5, dim=10, n_layers=1, n_heads=4, max_seq_len=4, device=dev)
    with pytest.raises(TypeError):
        m([[1, 2]])
    del m, m2, untied, opt, logits, loss, idx
    import gc
    gc.collect()
    assert ag.live_tensors() == live
