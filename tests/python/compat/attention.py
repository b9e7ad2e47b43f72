"""nn.MultiheadAttention used directly (batch_first, a key padding mask,
need_weights averaged over heads and per head), then a sequence classifier
over its output mean-pooled under the mask, trained with Adam and a
CosineAnnealingLR schedule. Every parameter is set from NumPy."""
# compat: rtol=2e-4 atol=2e-5
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, E, H = 3, 5, 8, 2
rng = np.random.default_rng(15)
x = torch.from_numpy(rng.standard_normal((B, T, E)).astype(np.float32))
lengths = torch.tensor([5, 3, 4])
pad = torch.arange(T)[None, :] >= lengths[:, None]  # True where padded
labels = torch.tensor([0, 1, 1])


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(E, H, batch_first=True)
        self.out = nn.Linear(E, 2)

    def forward(self, x, pad):
        h, w = self.attn(x, x, x, key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        pooled = (h * keep).sum(dim=1) / keep.sum(dim=1)
        return self.out(pooled), w


model = Classifier()
with torch.no_grad():
    for name, p in sorted(model.named_parameters()):
        p.copy_(torch.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.3).astype(np.float32)))
_, w_avg = model(x, pad)
_, w_heads = model.attn(x, x, x, key_padding_mask=pad, average_attn_weights=False)
out = {"weights_shape": [list(w_avg.shape), list(w_heads.shape)],
       "weights_rows_sum": w_avg.sum(dim=-1).flatten().tolist(),
       "weights_on_padding": w_avg[1, :, 3:].abs().sum().item(),
       "weights_heads_sum": w_heads[2].sum().item()}
opt = torch.optim.Adam(model.parameters(), lr=0.02)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)
losses, lrs = [], []
for step in range(8):
    logits, _ = model(x, pad)
    loss = F.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())
    lrs.append(sched.get_last_lr()[0])
out["losses"] = losses
out["lrs"] = lrs
with torch.no_grad():
    h, _ = model.attn(x, x, x, key_padding_mask=pad, need_weights=False)
out["h_sum"] = h.sum().item()
out["h_valid_abs"] = h[0].abs().sum().item()
print(json.dumps(out))
