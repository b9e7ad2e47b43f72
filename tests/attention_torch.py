"""ag_scaled_dot_product_attention (through the Python package) against
torch 1.13's unfused math (Debian's python3-torch has no fused CPU
attention): output and the gradients of q, k, v for causal, masked and
grouped-query cases, f32 and f64. argv[1]: libanygrad.so. Exit 77 (skipped)
without torch or numpy."""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError:
    print("torch or numpy not installed: skipped")
    sys.exit(77)

os.environ["ANYGRAD_LIBRARY"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import anygrad as ag  # noqa: E402
import anygrad.functional as F  # noqa: E402


def torch_math(q, k, v, mask, causal, H, Hkv):
    kr, vr = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    s = q @ kr.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s + mask
    if causal:
        T, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ vr


def case(B, H, Hkv, T, S, D, causal, with_mask, dt, tol, seed):
    rng = np.random.default_rng(seed)
    arrs = [rng.standard_normal(s).astype(dt) for s in ((B, H, T, D), (B, Hkv, S, D), (B, Hkv, S, D), (B, H, T, D))]
    mask = rng.standard_normal((T, S)).astype(dt) if with_mask else None
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in arrs[:3])
    to = torch_math(tq, tk, tv, None if mask is None else torch.tensor(mask), causal, H, Hkv)
    (to * torch.tensor(arrs[3])).sum().backward()
    aq, ak, av = (ag.tensor(x, requires_grad=True) for x in arrs[:3])
    o = F.scaled_dot_product_attention(aq, ak, av, attn_mask=None if mask is None else ag.tensor(mask),
                                       is_causal=causal)
    (o * ag.tensor(arrs[3])).sum().backward()
    bad = 0
    for name, a, t in (("out", o.numpy(), to.detach().numpy()), ("dq", aq.grad.numpy(), tq.grad.numpy()),
                       ("dk", ak.grad.numpy(), tk.grad.numpy()), ("dv", av.grad.numpy(), tv.grad.numpy())):
        err = float(np.abs(a - t).max()) / (1 + float(np.abs(t).max()))
        ok = err <= tol
        bad += not ok
        print("%s B%d H%d Hkv%d T%d S%d D%d causal=%d mask=%d %s: %s error %.3g" %
              ("ok  " if ok else "FAIL", B, H, Hkv, T, S, D, causal, with_mask, np.dtype(dt).name, name, err))
    return bad


bad = 0
for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
    bad += case(2, 4, 2, 37, 37, 16, True, False, dt, tol, 1)
    bad += case(1, 6, 3, 70, 129, 8, False, True, dt, tol, 2)
    bad += case(2, 2, 2, 65, 65, 32, True, True, dt, tol, 3)
sys.exit(1 if bad else 0)
