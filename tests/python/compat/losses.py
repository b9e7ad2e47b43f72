"""The losses: BCEWithLogitsLoss (with pos_weight), NLLLoss after
log_softmax (with class weights), L1Loss, SmoothL1Loss (beta), HuberLoss,
CrossEntropyLoss with label_smoothing and ignore_index, MSELoss with
reduction="sum" and "none"; each value and the sum of its input gradient."""
# compat: rtol=1e-5 atol=1e-6
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(13)


def t(*shape):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_()


def run(name, fn, x):
    loss = fn(x)
    loss.sum().backward()
    g = x.grad
    results[name] = [loss.tolist() if loss.dim() else loss.item(), g.sum().item(), g.abs().sum().item()]


results = {}
logits = t(8, 3)
targets01 = torch.from_numpy((rng.random((8, 3)) > 0.5).astype(np.float32))
run("bce_logits", lambda x: nn.BCEWithLogitsLoss()(x, targets01), logits)
run("bce_logits_pos_weight",
    lambda x: nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0, 2.0, 0.5]))(x, targets01), t(8, 3))
run("bce_logits_functional_sum",
    lambda x: F.binary_cross_entropy_with_logits(x, targets01, reduction="sum"), t(8, 3))
cls = torch.from_numpy(rng.integers(0, 5, 10))
run("nll", lambda x: nn.NLLLoss()(F.log_softmax(x, dim=1), cls), t(10, 5))
run("nll_weight", lambda x: F.nll_loss(torch.log_softmax(x, 1), cls,
                                       weight=torch.tensor([1.0, 2.0, 1.0, 0.5, 1.0])), t(10, 5))
target = torch.from_numpy(rng.standard_normal((6, 4)).astype(np.float32))
run("l1", lambda x: nn.L1Loss()(x, target), t(6, 4))
run("smooth_l1", lambda x: nn.SmoothL1Loss()(x, target), t(6, 4))
run("smooth_l1_beta", lambda x: F.smooth_l1_loss(x, target, beta=0.5), t(6, 4))
run("huber", lambda x: nn.HuberLoss(delta=0.7)(x, target), t(6, 4))
run("ce_label_smoothing", lambda x: nn.CrossEntropyLoss(label_smoothing=0.1)(x, cls), t(10, 5))
cls_ign = cls.clone()
cls_ign[2] = -100
run("ce_ignore_index", lambda x: F.cross_entropy(x, cls_ign), t(10, 5))
run("mse_sum", lambda x: nn.MSELoss(reduction="sum")(x, target), t(6, 4))
run("mse_none", lambda x: F.mse_loss(x, target, reduction="none").mean(dim=1), t(6, 4))
print(json.dumps(results))
