"""Indexing as torch users write it: lists, boolean masks, integer tensors,
ints and slices mixed, assignment through a mask and through an index
tensor, and the gradient through advanced indexing."""
# compat: rtol=1e-6 atol=1e-6
import json

import numpy as np
import torch

rng = np.random.default_rng(8)
x = torch.from_numpy(rng.standard_normal((6, 5)).astype(np.float32))
out = {}
out["rows_list"] = x[[0, 2, 5]].tolist()
out["rows_tensor"] = x[torch.tensor([4, 1, 1])].tolist()
out["neg_index"] = x[-1, -2].item()
out["slice_step"] = x[::2, 1:4].tolist()
mask = x > 0.5
out["mask_count"] = int(mask.sum().item())
out["masked"] = x[mask].tolist()
out["row_mask"] = x[torch.tensor([True, False, True, False, False, True])].shape[0]
out["pairs"] = x[torch.tensor([0, 1, 2]), torch.tensor([4, 3, 2])].tolist()
out["col_list"] = x[:, [0, 4]].tolist()
out["ellipsis"] = x[..., 1].tolist()
out["none"] = list(x[None, :, 2].shape)

y = x.clone()
y[y < 0] = 0.0
out["relu_by_mask"] = y.sum().item()
z = torch.zeros(5)
z[torch.tensor([1, 3])] = torch.tensor([7.0, 9.0])
out["scatter_assign"] = z.tolist()
y[:, 0] = -1.0
out["col_assign"] = y[:, 0].tolist()

w = torch.from_numpy(rng.standard_normal((4, 3)).astype(np.float32)).requires_grad_()
idx = torch.tensor([0, 2, 2, 3])
(w[idx] * torch.arange(3.0)).sum().backward()
out["grad_index"] = w.grad.tolist()
w.grad = None
m = w.detach() > 0
(w[m] ** 2).sum().backward()
out["grad_mask"] = w.grad.tolist()
print(json.dumps(out))
