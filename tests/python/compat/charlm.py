"""A character bigram language model (Embedding + Linear) trained on a fixed
string with AdamW, then greedy generation with argmax."""
# compat: rtol=1e-4 atol=1e-5
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

text = "the quick brown fox jumps over the lazy dog. " * 4
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
itos = {i: c for c, i in stoi.items()}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)


class CharLM(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(torch.tanh(self.emb(idx)))


rng = np.random.default_rng(2)
model = CharLM(len(chars), 16)
with torch.no_grad():
    model.emb.weight.copy_(torch.from_numpy(rng.standard_normal((len(chars), 16)).astype(np.float32)))
    w = rng.standard_normal((len(chars), 16)) * 0.1
    model.head.weight.copy_(torch.from_numpy(w.astype(np.float32)))
    model.head.bias.zero_()
opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
xs, ys = data[:-1], data[1:]
losses = []
for step in range(30):
    logits = model(xs)
    loss = F.cross_entropy(logits, ys)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

model.eval()
idx = torch.tensor([stoi["t"]])
out = []
with torch.no_grad():
    for _ in range(20):
        nxt = model(idx).argmax(dim=-1)
        out.append(itos[nxt.item()])
        idx = nxt
print(json.dumps({"vocab": len(chars), "losses": losses, "generated": "".join(out)}))
