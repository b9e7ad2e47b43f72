#!/usr/bin/python3
"""PyTorch CPU side of bench/cnn_bench.c, timed the same way.
  cnn_torch.py step THREADS STEPS BATCH
      ms per training step of the Fashion-MNIST CNN (AdamW)
  cnn_torch.py conv THREADS N C H W CO K ITERS
      ms per conv2d forward and per forward + backward (3x3 pad 1)
Prints the numbers on one line, space-separated."""
import sys
import time

import torch

import torch_setup  # BLAS threads and host memory as anygrad has them (bench/torch_setup.py)

torch_setup.keep_memory()
import torch.nn as nn


def make_step(batch, compiled=False):
    """One training step of the CNN (a closure); compiled: the model under torch.compile."""
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.arange(batch) * 7 % 10
    fwd = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def step_bench(steps, batch):
    step = make_step(batch)
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    return (time.perf_counter() - t0) * 1000.0 / steps


def conv_bench(n, c, h, w, co, k, iters):
    x = torch.randn(n, c, h, w)
    wt = torch.randn(co, c, k, k) * 0.1
    gy = torch.randn(n, co, h, w)
    with torch.no_grad():
        torch.nn.functional.conv2d(x, wt, padding=k // 2)
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.nn.functional.conv2d(x, wt, padding=k // 2)
        fwd = (time.perf_counter() - t0) * 1000.0 / iters
    x.requires_grad_(True)
    wt.requires_grad_(True)
    torch.nn.functional.conv2d(x, wt, padding=k // 2).backward(gy)
    t0 = time.perf_counter()
    for _ in range(iters):
        x.grad = None
        wt.grad = None
        torch.nn.functional.conv2d(x, wt, padding=k // 2).backward(gy)
    return fwd, (time.perf_counter() - t0) * 1000.0 / iters


if __name__ == "__main__":
    mode = sys.argv[1]
    torch_setup.set_threads(int(sys.argv[2]))
    if mode == "step":
        print("%.4f" % step_bench(int(sys.argv[3]), int(sys.argv[4])))
    else:
        a = [int(v) for v in sys.argv[3:10]]
        print("%.4f %.4f" % conv_bench(*a))
