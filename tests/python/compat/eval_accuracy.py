"""Evaluation the way a torch user writes it: model.eval(), torch.no_grad(),
argmax over the classes, accuracy with (pred == y).float().mean(), a
per-class count; Dropout active in training and off in eval."""
# compat: rtol=1e-5 atol=1e-6
import json

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(10)
centers = rng.standard_normal((3, 4)) * 3
labels = rng.integers(0, 3, 90)
points = centers[labels] + rng.standard_normal((90, 4))
x = torch.tensor(points, dtype=torch.float32)
y = torch.tensor(labels)

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
with torch.no_grad():
    model[0].weight.copy_(torch.from_numpy((rng.standard_normal((8, 4)) * 0.5).astype(np.float32)))
    model[0].bias.fill_(0.1)
    model[3].weight.copy_(torch.from_numpy((rng.standard_normal((3, 8)) * 0.5).astype(np.float32)))
    model[3].bias.zero_()


def evaluate(m):
    m.eval()
    with torch.no_grad():
        logits = m(x)
        pred = logits.argmax(dim=1)
        acc = (pred == y).float().mean().item()
        correct = (pred == y).sum().item()
        per_class = [int((pred == c).sum()) for c in range(3)]
        probs = torch.softmax(logits, dim=1)
    m.train()
    return acc, correct, per_class, probs.max(dim=1).values.mean().item(), logits.requires_grad


before = evaluate(model)
# train only the last layer by hand; dropout is not used so runs agree
opt = torch.optim.SGD(model[3].parameters(), lr=0.2)
feats = torch.relu(model[0](x)).detach()
for step in range(30):
    loss = nn.functional.cross_entropy(model[3](feats), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
after = evaluate(model)
print(json.dumps({"before": before, "after": after, "training_flag": model.training,
                  "dropout_eval_identity": bool(torch.equal(model.eval()[2](x), x))}))
