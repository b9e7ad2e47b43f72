#!/usr/bin/python3
"""Batches per second of anygrad.utils.data.DataLoader beside
torch.utils.data.DataLoader on the same TensorDataset (float32 rows of
--features values and int64 labels; --samples rows, --batch rows a batch,
shuffled), with 0 and 2 workers. Rounds alternate torch then anygrad for
each worker count (A B A B ...); a round is one full epoch. Prints the
median and range over rounds of each and of the speed ratio anygrad / torch
per round, as a table and as JSON (--json FILE, one line per case).

What runs: anygrad with 0 workers gathers each batch's rows on the calling
thread (one NumPy take per tensor); with 2 workers the C host-staging loader
(ag_loader) fills pinned batches on 2 threads and copies them on its copy
stream. torch with 0 workers indexes sample by sample and stacks (its
default collate); with 2 workers it uses 2 worker processes.

Threads: set explicitly before either library loads: AG_NUM_THREADS and
OMP_NUM_THREADS (--threads, default 1) and torch.set_num_threads; the loader
workers are the only extra threads (or processes, for torch).

Usage: bench/python_loader.py [--rounds 5] [--samples 20000] [--features 64]
                              [--batch 64] [--threads 1] [--json out.jsonl]
(from the repository with the library built in build/, or ANYGRAD_LIBRARY set)."""
import argparse
import json
import os
import statistics
import sys
import time

_threads = "1"
if "--threads" in sys.argv[:-1]:
    _threads = sys.argv[sys.argv.index("--threads") + 1]
os.environ["AG_NUM_THREADS"] = _threads
os.environ["OMP_NUM_THREADS"] = _threads
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import numpy as np  # noqa: E402

import anygrad as ag  # noqa: E402
import anygrad.utils.data as agd  # noqa: E402
import torch  # noqa: E402
import torch.utils.data as thd  # noqa: E402


def make(o):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((o.samples, o.features)).astype(np.float32)
    y = rng.integers(0, 10, o.samples).astype(np.int64)
    return {"torch": thd.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
            "anygrad": agd.TensorDataset(ag.tensor(x), ag.tensor(y))}


def epoch(loader):
    t0 = time.perf_counter()
    n = 0
    for _ in loader:
        n += 1
    return n / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", default="0,2")
    p.add_argument("--json")
    o = p.parse_args()
    torch.set_num_threads(o.threads)
    ds = make(o)
    print("anygrad %s (%s) vs torch %s; TensorDataset %d x %d f32 + i64 labels, batch %d, shuffled; "
          "%d thread(s) each; %d rounds A B A B, one epoch each"
          % (ag.__version__, ag.LIBRARY_PATH, torch.__version__, o.samples, o.features, o.batch,
             o.threads, o.rounds))
    print("%-8s %26s %26s %22s" % ("workers", "torch batches/s [range]", "anygrad batches/s [range]",
                                   "anygrad/torch [range]"))
    for w in [int(v) for v in o.workers.split(",")]:
        loaders = {"torch": thd.DataLoader(ds["torch"], batch_size=o.batch, shuffle=True, num_workers=w),
                   "anygrad": agd.DataLoader(ds["anygrad"], batch_size=o.batch, shuffle=True,
                                             num_workers=w)}
        for ld in loaders.values():
            epoch(ld)  # warm up: worker start, allocator caches
        r = {"torch": [], "anygrad": []}
        for _ in range(o.rounds):
            for k in ("torch", "anygrad"):
                r[k].append(epoch(loaders[k]))
        ratios = [b / a for a, b in zip(r["torch"], r["anygrad"])]
        s = lambda v: {"median": statistics.median(v), "min": min(v), "max": max(v)}  # noqa: E731
        fmt = lambda d: "%.4g [%.4g-%.4g]" % (d["median"], d["min"], d["max"])  # noqa: E731
        res = {"case": "tensordataset", "workers": w, "rounds": o.rounds, "samples": o.samples,
               "features": o.features, "batch": o.batch, "threads": o.threads,
               "torch_batches_per_s": s(r["torch"]), "anygrad_batches_per_s": s(r["anygrad"]),
               "ratio": s(ratios)}
        print("%-8d %26s %26s %22s" % (w, fmt(res["torch_batches_per_s"]), fmt(res["anygrad_batches_per_s"]),
                                       fmt(res["ratio"])))
        print(json.dumps(res))
        if o.json:
            with open(o.json, "a") as f:
                f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
