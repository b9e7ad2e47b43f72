"""Custom autograd functions (torch.autograd.Function, ctx.save_for_backward):
a straight-through clamp and a hand-written sigmoid-weighted square, used in
a small regression trained with SGD; the gradients checked against the same
expression written with built-in ops."""
# compat: rtol=1e-4 atol=1e-6
import json

import numpy as np
import torch


class StraightThroughClamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        inside = ((x > ctx.lo - 1) & (x < ctx.hi + 1)).to(grad_out.dtype)
        return grad_out * inside, None, None


class SigmoidSquare(torch.autograd.Function):
    """f(x) = sigmoid(x) * x^2"""

    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(x, s)
        return s * x * x

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        return g * (s * (1 - s) * x * x + 2 * s * x)


rng = np.random.default_rng(4)
x = torch.tensor(rng.standard_normal((32, 4)).astype(np.float32))
target = torch.tensor(rng.standard_normal((32, 1)).astype(np.float32))
w = torch.tensor((rng.standard_normal((4, 1)) * 0.5).astype(np.float32), requires_grad=True)

# the custom function's gradient against autograd's own
a = torch.tensor(rng.standard_normal(6).astype(np.float32), requires_grad=True)
SigmoidSquare.apply(a).sum().backward()
g_custom = a.grad.clone()
a.grad = None
(torch.sigmoid(a) * a * a).sum().backward()
grad_diff = (g_custom - a.grad).abs().max().item()

losses = []
for step in range(15):
    h = StraightThroughClamp.apply(x @ w, -1.0, 1.0)
    pred = SigmoidSquare.apply(h)
    loss = ((pred - target) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
    w.grad.zero_()
    losses.append(loss.item())
print(json.dumps({"grad_diff": grad_diff, "grad_custom": g_custom.tolist(), "losses": losses,
                  "w": w.detach().flatten().tolist()}))
