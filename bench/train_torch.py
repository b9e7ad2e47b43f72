#!/usr/bin/python3
"""PyTorch CPU side of bench/train_bench.c: the same two training steps
(MLP 784-1024-1024-10 batch 128 AdamW; MLP 64-64-10 batch 32 SGD) timed the
same way. Prints one JSON object: {"a_ms": ..., "b_ms": ...}.
Usage: train_torch.py STEPS_A STEPS_B THREADS [DEVICE]  (DEVICE cpu or cuda)
AG_TORCH_FORM=compile runs the models under torch.compile (PyTorch 2.x:
inductor; its compilation falls in the untimed warm-up steps); the default,
eager, is PyTorch as written."""
import os
import json
import sys
import time

import torch

import torch_setup  # BLAS threads and host memory as anygrad has them (bench/torch_setup.py)

torch_setup.keep_memory()


def bench(sizes, batch, make_opt, steps):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(DEV)
    if FORM == "compile":
        model = torch.compile(model)
    opt = make_opt(model.parameters())
    x = torch.randn(batch, sizes[0], device=DEV)
    y = torch.randint(0, sizes[-1], (batch,), device=DEV)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(max(3, steps // 10)):
        step()
    if DEV == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    return (time.perf_counter() - t0) * 1000.0 / steps


steps_a, steps_b = int(sys.argv[1]), int(sys.argv[2])
DEV = sys.argv[4] if len(sys.argv) > 4 else "cpu"
FORM = os.environ.get("AG_TORCH_FORM", "eager")
if FORM not in ("eager", "compile"):
    sys.exit("train_torch.py: AG_TORCH_FORM must be eager or compile, got %r" % FORM)
torch_setup.set_threads(int(sys.argv[3]))
a = bench([784, 1024, 1024, 10], 128, lambda p: torch.optim.AdamW(p, lr=1e-3), steps_a)
b = bench([64, 64, 10], 32, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), steps_b)
print(json.dumps({"a_ms": a, "b_ms": b, "torch": torch.__version__, "threads": torch.get_num_threads(), "device": DEV,
                  "form": FORM}))
