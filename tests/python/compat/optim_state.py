"""optimizer.state_dict() round trip: Adam trained 4 steps, its state_dict
read (keys, step counts, moment sums), loaded into a new Adam over a copy of
the model, and both trained 4 steps more: the copy must follow the original.
The state_dict's layout is torch's ("state" by parameter index,
"param_groups" with "params" as indices)."""
# compat: rtol=1e-4 atol=1e-6
import copy
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(11)
x = torch.from_numpy(rng.standard_normal((20, 5)).astype(np.float32))
y = torch.from_numpy(rng.standard_normal((20, 1)).astype(np.float32))
init = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in [(4, 5), (4,), (1, 4), (1,)]]


def make_model():
    m = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1))
    with torch.no_grad():
        for p, w in zip(m.parameters(), init):
            p.copy_(torch.from_numpy(w))
    return m


def train(model, opt, n):
    out = []
    for _ in range(n):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


model = make_model()
opt = torch.optim.Adam(model.parameters(), lr=0.05, betas=(0.8, 0.95), weight_decay=0.01)
first = train(model, opt, 4)
sd = opt.state_dict()
info = {
    "keys": sorted(sd.keys()),
    "state_ids": sorted(sd["state"].keys()),
    "state_keys": sorted(sd["state"][0].keys()),
    "steps": [float(sd["state"][i]["step"]) for i in sorted(sd["state"])],
    "exp_avg_sums": [sd["state"][i]["exp_avg"].sum().item() for i in sorted(sd["state"])],
    "exp_avg_sq_sums": [sd["state"][i]["exp_avg_sq"].sum().item() for i in sorted(sd["state"])],
    "group": {k: v for k, v in sd["param_groups"][0].items()
              if k in ("lr", "betas", "eps", "weight_decay", "params")},
}
info["group"]["betas"] = list(info["group"]["betas"])

model2 = make_model()
model2.load_state_dict(model.state_dict())
opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
opt2.load_state_dict(copy.deepcopy(sd))
info["lr_after_load"] = opt2.param_groups[0]["lr"]
a = train(model, opt, 4)
b = train(model2, opt2, 4)
print(json.dumps({"first": first, "state": info, "continued": a, "copy": b,
                  "copy_max_diff": max(abs(p - q) for p, q in zip(a, b))}))
