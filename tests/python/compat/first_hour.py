"""The idioms of a first hour with torch: picking the device with
torch.cuda.is_available(), torch.device and .to(device), size()/view()/
shape, dtype checks and casts (.long(), .float(), torch.float), isinstance
and torch.is_tensor, a frozen layer (requires_grad_(False)) left out of the
optimizer with filter(), zero_grad(set_to_none=True), named_modules,
state_dict keys, torch.no_grad as a decorator, inference_mode, and
.detach().cpu().numpy()."""
# compat: rtol=1e-5 atol=1e-6
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
rng = np.random.default_rng(14)
x = torch.from_numpy(rng.standard_normal((12, 6)).astype(np.float32)).to(device)
y = torch.from_numpy(rng.integers(0, 3, 12)).to(device)
out = {"device": device.type, "sizes": [list(x.size()), x.size(0), x.size(-1), x.shape[1], x.dim(),
                                        x.numel(), x.view(-1, 3).shape[0], x.view(3, -1).shape[1]]}
out["dtypes"] = [x.dtype == torch.float32, y.dtype == torch.long, y.float().dtype == torch.float,
                 x.long().dtype == torch.int64, x.double().dtype == torch.float64,
                 isinstance(x, torch.Tensor), torch.is_tensor(y), not torch.is_tensor([1])]

model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).to(device)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.3).astype(np.float32)))
model[0].requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
out["params"] = [sum(p.numel() for p in model.parameters()), sum(p.numel() for p in trainable)]
out["modules"] = [name for name, _ in model.named_modules()]
out["state_keys"] = list(model.state_dict().keys())
opt = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.1)
frozen_before = model[0].weight.detach().clone()
losses = []
model.train()
for step in range(10):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
out["losses"] = losses
out["frozen_unchanged"] = bool(torch.equal(model[0].weight, frozen_before))
out["frozen_grad_none"] = model[0].weight.grad is None


@torch.no_grad()
def predict(m, inputs):
    m.eval()
    return m(inputs).argmax(dim=1)


pred = predict(model, x)
out["pred"] = pred.cpu().tolist()
out["no_grad_decorator"] = predict(model, x).requires_grad
with torch.inference_mode():
    probs = F.softmax(model(x), dim=-1)
arr = probs.detach().cpu().numpy()
out["numpy"] = [arr.shape[0], arr.shape[1], float(arr.sum()), str(arr.dtype)]
print(json.dumps(out))
