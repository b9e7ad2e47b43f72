"""A small CNN (Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten, Linear) for a
few SGD steps with momentum on 8x8 images; the batch-norm running statistics
and the eval-mode outputs afterwards."""
# compat: rtol=1e-4 atol=1e-5
import json

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(1)
images = torch.from_numpy(rng.standard_normal((16, 1, 8, 8)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, 3, 16))

model = nn.Sequential(
    nn.Conv2d(1, 4, kernel_size=3, padding=1),
    nn.BatchNorm2d(4),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(4, 8, kernel_size=3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(8 * 2 * 2, 3),
)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("weight") and p.dim() > 1:
            p.copy_(torch.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.2).astype(np.float32)))
        elif "bias" in name:
            p.zero_()
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
criterion = nn.CrossEntropyLoss()
model.train()
losses = []
for step in range(8):
    opt.zero_grad()
    loss = criterion(model(images), labels)
    loss.backward()
    opt.step()
    losses.append(loss.item())
bn = model[1]
model.eval()
with torch.no_grad():
    logits = model(images)
print(json.dumps({"losses": losses,
                  "running_mean": bn.running_mean.tolist(),
                  "running_var": bn.running_var.tolist(),
                  "eval_sum": logits.sum().item(),
                  "eval_pred": logits.argmax(1).tolist()}))
