"""Logistic regression written with raw tensors: leaves with requires_grad,
the update in place under no_grad (p -= lr * p.grad), grads zeroed in place,
in-place ops on plain tensors (add_, mul_, clamp_, +=)."""
# compat: rtol=1e-4 atol=1e-6
import json

import numpy as np
import torch

rng = np.random.default_rng(7)
x = torch.from_numpy(rng.standard_normal((50, 5)).astype(np.float32))
y = torch.from_numpy((rng.random(50) > 0.5).astype(np.float32))
w = torch.from_numpy((rng.standard_normal(5) * 0.1).astype(np.float32)).requires_grad_()
b = torch.zeros(1, requires_grad=True)

lr = 0.5
losses = []
for step in range(20):
    p = torch.sigmoid(x @ w + b)
    loss = -(y * torch.log(p + 1e-7) + (1 - y) * torch.log(1 - p + 1e-7)).mean()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
        b -= lr * b.grad
    w.grad.zero_()
    b.grad.zero_()
    losses.append(loss.item())

t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
v = t[1]
t.add_(1.0).mul_(2.0)
t[0].clamp_(max=5.0)
t += torch.ones(3)
with torch.no_grad():
    acc = ((torch.sigmoid(x @ w + b) > 0.5).float() == y).float().mean().item()
print(json.dumps({"losses": losses, "w": w.tolist(), "b": b.item(), "accuracy": acc,
                  "t": t.tolist(), "view_after": v.tolist(), "w_is_leaf": w.is_leaf,
                  "w_requires_grad": w.requires_grad}))
