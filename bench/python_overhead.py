#!/usr/bin/python3
"""Python per-op overhead of the anygrad package beside PyTorch eager, in one
process: rounds alternate PyTorch then anygrad (A B A B ...), each a timed
block of --iters calls; per call time = block / iters. Prints the median and
range over rounds of each and of the ratio anygrad / PyTorch per round, as a
table and as JSON (--json FILE, one line per case).

Cases (cpu, f32):
  add        a + b on two 4-element tensors (the result dropped each time)
  add_mul    (a + b) * c, two ops and one intermediate
  sum_item   a.sum().item(): an op and a host read
  add_       a.add_(b) on two 4-element tensors: in place, no result object
  index      x[idx]: 3 rows of a 16x4 tensor picked by an int64 tensor
  fwd_bwd    forward, MSE and backward of an MLP 8 -> 16 -> 1 (batch 4), no
             optimizer (the gradients accumulate)
  train_step one step of an MLP 8 -> 16 -> 1 (batch 4): forward, MSE, backward,
             AdamW step, zero_grad, no host read

Threads: both libraries run with one thread (torch.set_num_threads(1);
AG_NUM_THREADS=1 and OMP_NUM_THREADS=1 are set before either loads), so the
numbers are per-call overhead, not parallel speed.

Usage: bench/python_overhead.py [--rounds 7] [--iters 20000] [--json out.jsonl]
                                [--package DIR]
(run it from the repository with the library built in build/, or with
ANYGRAD_LIBRARY set). The package is the source tree's python/ (ctypes
only), or with --package DIR an installed copy, such as
`python3 -m pip install --no-build-isolation --target DIR ./python`, which
has the optional C extension for item() when it could be compiled; the
header line says which item() ran."""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("AG_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
_pkg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
if "--package" in sys.argv[:-1]:
    _pkg = sys.argv[sys.argv.index("--package") + 1]
sys.path.insert(0, _pkg)

import anygrad as ag  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def setup_add(lib):
    a, b = lib.ones(4), lib.ones(4)

    def f(n):
        for _ in range(n):
            a + b
    return f


def setup_add_mul(lib):
    a, b, c = lib.ones(4), lib.ones(4), lib.ones(4)

    def f(n):
        for _ in range(n):
            (a + b) * c
    return f


def setup_sum_item(lib):
    a = lib.ones(4)

    def f(n):
        for _ in range(n):
            a.sum().item()
    return f


def setup_inplace_add(lib):
    a, b = lib.ones(4), lib.ones(4)

    def f(n):
        for _ in range(n):
            a.add_(b)
    return f


def setup_index(lib):
    x = lib.ones(16, 4)
    idx = lib.tensor([0, 3, 5])

    def f(n):
        for _ in range(n):
            x[idx]
    return f


def setup_fwd_bwd(lib):
    step = setup_train_step(lib, optimizer=False)
    return step


def setup_train_step(lib, optimizer=True):
    if lib is torch:
        lib.manual_seed(0)
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        w1 = (torch.randn(8, 16) * 0.3).requires_grad_()
        w2 = (torch.randn(16, 1) * 0.3).requires_grad_()
        b1, b2 = torch.zeros(16, requires_grad=True), torch.zeros(1, requires_grad=True)
        opt = torch.optim.AdamW([w1, b1, w2, b2], lr=1e-3)
        mse = torch.nn.functional.mse_loss
    else:
        ag.manual_seed(0)
        x, y = ag.randn(4, 8), ag.randn(4, 1)
        w1, w2 = ag.randn(8, 16) * 0.3, ag.randn(16, 1) * 0.3
        b1, b2 = ag.zeros(16), ag.zeros(1)
        for p in (w1, b1, w2, b2):
            p.requires_grad = True
        opt = ag.optim.AdamW([w1, b1, w2, b2], lr=1e-3)
        mse = ag.functional.mse_loss

    def f(n):
        for _ in range(n):
            loss = mse((x @ w1 + b1).relu() @ w2 + b2, y)
            loss.backward()
            if optimizer:
                opt.step()
                opt.zero_grad()
    return f


CASES = {"add": (setup_add, 1), "add_mul": (setup_add_mul, 1), "sum_item": (setup_sum_item, 1),
         "add_": (setup_inplace_add, 1), "index": (setup_index, 1), "fwd_bwd": (setup_fwd_bwd, 20),
         "train_step": (setup_train_step, 20)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--json")
    p.add_argument("--package", help="directory holding the anygrad package to time")
    o = p.parse_args()
    from anygrad import _tensor
    print("anygrad %s (%s; package %s; item(): %s) vs torch %s; 1 thread each; %d rounds A B A B, "
          "%d calls per block"
          % (ag.__version__, ag.LIBRARY_PATH, os.path.dirname(os.path.abspath(ag.__file__)),
             "C extension" if _tensor._fast_item else "ctypes", torch.__version__, o.rounds,
             o.iters))
    print("%-11s %24s %24s %22s" % ("case", "torch us/call [range]", "anygrad us/call [range]",
                                    "anygrad/torch [range]"))
    for name in o.cases.split(","):
        setup, div = CASES[name]
        fs = {"torch": setup(torch), "anygrad": setup(ag)}
        n = max(50, o.iters // div)
        for f in fs.values():
            f(n // 10)  # warm up caches and allocators
        t = {"torch": [], "anygrad": []}
        for _ in range(o.rounds):
            for k in ("torch", "anygrad"):
                t0 = time.perf_counter()
                fs[k](n)
                t[k].append((time.perf_counter() - t0) / n * 1e6)
        ratios = [b / a for a, b in zip(t["torch"], t["anygrad"])]
        s = lambda v: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        fmt = lambda d: "%.3g [%.3g-%.3g]" % (d["median"], d["min"], d["max"])
        res = {"case": name, "rounds": o.rounds, "calls": n, "threads": 1,
               "torch_us": s(t["torch"]), "anygrad_us": s(t["anygrad"]), "ratio": s(ratios)}
        print("%-11s %24s %24s %22s" % (name, fmt(res["torch_us"]), fmt(res["anygrad_us"]),
                                        fmt(res["ratio"])))
        if o.json:
            with open(o.json, "a") as f:
                f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
