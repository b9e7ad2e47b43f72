"""An MLP classifier on synthetic two-class data: nn.Module subclass, weights
copied from NumPy, Adam, CrossEntropyLoss, accuracy each step."""
# compat: rtol=1e-4 atol=1e-5
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in, d_hidden, n_classes):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, n_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


rng = np.random.default_rng(0)
x_np = rng.standard_normal((64, 10)).astype(np.float32)
y_np = (x_np[:, 0] + 0.5 * x_np[:, 1] > 0).astype(np.int64)
x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

model = MLP(10, 32, 2)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.uniform(-0.3, 0.3, tuple(p.shape)).astype(np.float32)))
n_params = sum(p.numel() for p in model.parameters())
opt = torch.optim.Adam(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
losses, accs = [], []
for step in range(25):
    opt.zero_grad()
    logits = model(x)
    loss = loss_fn(logits, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    accs.append((logits.argmax(dim=1) == y).float().mean().item())
with torch.no_grad():
    out = model(x)
print(json.dumps({"n_params": n_params, "losses": losses, "accuracy": accs,
                  "out_sum": out.sum().item(), "out_shape": list(out.shape)}))
