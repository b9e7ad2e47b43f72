"""Mixed precision on the CPU: the forward under torch.autocast("cpu",
dtype=torch.bfloat16), the loss in float32 outside it, float32 master
weights updated by SGD. bfloat16 keeps 8 bits of mantissa, and the two
libraries may round the same matmul at different points: the tolerance is
bfloat16's."""
# compat: rtol=2e-2 atol=2e-2
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(9)
x = torch.from_numpy(rng.standard_normal((32, 16)).astype(np.float32))
y = torch.from_numpy(rng.integers(0, 4, 32))
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.2).astype(np.float32)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses, dtypes = [], []
for step in range(10):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(x)
    dtypes.append(logits.dtype == torch.bfloat16)
    loss = F.cross_entropy(logits.float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(json.dumps({"losses": losses, "logits_bf16": dtypes[0],
                  "weight_f32": model[0].weight.dtype == torch.float32,
                  "grad_f32": model[0].weight.grad.dtype == torch.float32}))
