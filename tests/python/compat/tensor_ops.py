"""Tensor functions a torch user reaches for: einsum (matmul, batched,
outer, trace-free contraction), split (by size and by sections), chunk,
sort (ascending, descending, indices), topk, cat/stack, and a backward
through einsum and split."""
# compat: rtol=1e-5 atol=1e-5
import json

import numpy as np
import torch

rng = np.random.default_rng(12)
a = torch.from_numpy(rng.standard_normal((3, 4)).astype(np.float32))
b = torch.from_numpy(rng.standard_normal((4, 5)).astype(np.float32))
q = torch.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float32))
k = torch.from_numpy(rng.standard_normal((2, 5, 4)).astype(np.float32))
v = torch.from_numpy(rng.standard_normal(7).astype(np.float32))
out = {}
out["einsum_mm"] = torch.einsum("ij,jk->ik", a, b).sum().item()
out["einsum_bmm"] = torch.einsum("bqd,bkd->bqk", q, k).tolist()
out["einsum_outer"] = torch.einsum("i,j->ij", v[:3], v[3:]).tolist()
out["einsum_rowsum"] = torch.einsum("ij->i", a).tolist()

parts = torch.split(v, 3)
out["split_sizes"] = [list(p.shape) for p in parts]
out["split_list"] = [p.tolist() for p in v.split([2, 5])]
chunks = torch.chunk(a, 2, dim=1)
out["chunk"] = [c.tolist() for c in chunks]
out["chunk3"] = [list(c.shape) for c in torch.arange(10).chunk(3)]

vals, idx = torch.sort(v)
out["sort"] = [vals.tolist(), idx.tolist()]
vals, idx = v.sort(descending=True)
out["sort_desc"] = [vals.tolist(), idx.tolist()]
out["sort_rows"] = torch.sort(a, dim=1).values.tolist()
tv, ti = torch.topk(v, 3)
out["topk"] = [tv.tolist(), ti.tolist()]
out["argsort"] = torch.argsort(a[0]).tolist()
out["cat"] = list(torch.cat([a, a * 2], dim=0).shape)
out["stack"] = torch.stack(list(torch.chunk(v[:6], 3)), dim=1).tolist()

w = torch.from_numpy(rng.standard_normal((4, 4)).astype(np.float32)).requires_grad_()
h1, h2 = torch.einsum("ij,jk->ik", a, w).split(2, dim=1)
(h1.tanh().sum() + (h2 ** 2).sum()).backward()
out["grad_einsum_split"] = w.grad.tolist()
print(json.dumps(out))
