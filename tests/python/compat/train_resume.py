"""A training loop with two parameter groups (their own lr and weight decay),
a StepLR scheduler, clip_grad_norm_, and a checkpoint: after 6 of 12 steps
the model, optimizer and scheduler state_dicts go through torch.save /
torch.load (a temporary file) into fresh objects, which finish the run. The
resumed losses must equal those of the run never interrupted."""
# compat: rtol=1e-4 atol=1e-6
import json
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(5)
X = torch.from_numpy(rng.standard_normal((48, 6)).astype(np.float32))
Y = torch.from_numpy(rng.standard_normal((48, 2)).astype(np.float32))
W0 = [rng.standard_normal(s).astype(np.float32) * 0.4 for s in [(16, 6), (16,), (2, 16), (2,)]]


def build():
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    with torch.no_grad():
        for p, w in zip(model.parameters(), W0):
            p.copy_(torch.from_numpy(w))
    opt = torch.optim.SGD([
        {"params": model[0].parameters(), "lr": 0.1, "weight_decay": 1e-3},
        {"params": model[2].parameters()},
    ], lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    return model, opt, sched


def step(model, opt, sched):
    opt.zero_grad()
    loss = F.mse_loss(model(X), Y)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
    opt.step()
    sched.step()
    return loss.item(), float(norm), [g["lr"] for g in opt.param_groups]


model, opt, sched = build()
straight = [step(model, opt, sched) for _ in range(12)]

model, opt, sched = build()
resumed = [step(model, opt, sched) for _ in range(6)]
fd, path = tempfile.mkstemp(suffix=".pt")
os.close(fd)
try:
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": 6}, path)
    del model, opt, sched
    ckpt = torch.load(path)
finally:
    os.remove(path)
model, opt, sched = build()
model.load_state_dict(ckpt["model"])
opt.load_state_dict(ckpt["optimizer"])
sched.load_state_dict(ckpt["scheduler"])
resumed += [step(model, opt, sched) for _ in range(ckpt["step"], 12)]

print(json.dumps({"losses": [s[0] for s in straight], "norms": [s[1] for s in straight],
                  "lrs": [s[2] for s in straight],
                  "resumed_losses": [s[0] for s in resumed],
                  "resume_max_diff": max(abs(a[0] - b[0]) for a, b in zip(straight, resumed))}))
