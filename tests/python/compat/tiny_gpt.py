"""A tiny GPT: token and position embeddings, two nn.TransformerEncoderLayer
blocks (batch_first, pre-norm, causal mask, no dropout), a linear head, a few
AdamW steps. Every parameter is set from NumPy, in name order."""
# compat: rtol=2e-4 atol=2e-5
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, D, H = 12, 8, 16, 2


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(D, H, dim_feedforward=32, dropout=0.0, batch_first=True,
                                       norm_first=True)
            for _ in range(2)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), diagonal=1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x, src_mask=self.mask[:t, :t])
        return self.head(self.ln(x))


rng = np.random.default_rng(3)
model = TinyGPT()
names = []
with torch.no_grad():
    for name, p in sorted(model.named_parameters()):
        names.append(name)
        if name.endswith("bias"):
            p.zero_()
        elif "norm" in name or name == "ln.weight":
            p.fill_(1.0)
        else:
            p.copy_(torch.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.2).astype(np.float32)))
seq = rng.integers(0, V, (4, T + 1))
x = torch.from_numpy(seq[:, :-1])
y = torch.from_numpy(seq[:, 1:])
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
losses = []
for step in range(6):
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    logits = model(x)
print(json.dumps({"param_names": names, "losses": losses, "logits_sum": logits.sum().item(),
                  "logits_abs_sum": logits.abs().sum().item()}))
