#!/usr/bin/python3
"""Reference for tests/train_reference.c: a fixed-seed MLP trained with
torch.optim.AdamW and torch.optim.SGD(momentum, nesterov=False) on fixed
data. Writes the initial weights, the data, the per-step losses and the
final weights to reference.safetensors (the format written by hand, so the
Python safetensors package is not needed).

Run with Debian's interpreter (python3-torch):  /usr/bin/python3 make_reference.py
"""
import json
import os
import struct

import torch

STEPS, BATCH, NIN, NHID, NOUT = 20, 16, 8, 16, 4
torch.manual_seed(1234)
torch.set_default_dtype(torch.float32)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(NIN, NHID), torch.nn.Tanh(), torch.nn.Linear(NHID, NOUT))


X = torch.randn(STEPS, BATCH, NIN)
Y = torch.randint(0, NOUT, (STEPS, BATCH), dtype=torch.int32)
init = mlp()
tensors = {"init." + k: v.detach().clone() for k, v in init.state_dict().items()}
tensors["data.x"] = X
tensors["data.y"] = Y

for name, make_opt in [
    ("adamw", lambda p: torch.optim.AdamW(p, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
    ("sgd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3)),
]:
    model = mlp()
    model.load_state_dict(init.state_dict())
    opt = make_opt(model.parameters())
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[s]), Y[s].long())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    tensors[name + ".losses"] = torch.tensor(losses, dtype=torch.float64)
    for k, v in model.state_dict().items():
        tensors[name + ".final." + k] = v.detach().clone()

DT = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32"}
header, blobs, off = {"__metadata__": {"torch": torch.__version__, "steps": str(STEPS)}}, [], 0
for k in sorted(tensors):
    t = tensors[k].contiguous()
    b = t.numpy().tobytes()
    header[k] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.safetensors")
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("wrote", out, "adamw final loss %.6f sgd final loss %.6f"
      % (tensors["adamw.losses"][-1], tensors["sgd.losses"][-1]))
