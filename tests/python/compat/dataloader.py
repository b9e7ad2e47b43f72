"""A linear regression fed by DataLoader(TensorDataset(x, y), batch_size=10,
shuffle=False) for three epochs with SGD: the batch shapes, the number of
batches, and the loss of every batch."""
# compat: rtol=1e-4 atol=1e-6
import json

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(6)
x = torch.from_numpy(rng.standard_normal((45, 3)).astype(np.float32))
true_w = torch.tensor([[1.5], [-2.0], [0.5]])
y = x @ true_w + 0.3

ds = TensorDataset(x, y)
loader = DataLoader(ds, batch_size=10, shuffle=False)
model = nn.Linear(3, 1)
with torch.no_grad():
    model.weight.zero_()
    model.bias.zero_()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.MSELoss()
shapes, losses = [], []
for epoch in range(3):
    for xb, yb in loader:
        if epoch == 0:
            shapes.append([list(xb.shape), list(yb.shape)])
        loss = loss_fn(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
first_x, first_y = ds[3]
print(json.dumps({"len_ds": len(ds), "len_loader": len(loader), "shapes": shapes,
                  "item3": [first_x.tolist(), first_y.tolist()], "losses": losses,
                  "weight": model.weight.detach().flatten().tolist(), "bias": model.bias.item()}))
