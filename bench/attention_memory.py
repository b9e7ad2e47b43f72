#!/usr/bin/python3
"""Memory of one attention training step (forward, sum(out * w), backward)
vs sequence length T at a fixed number of sequences, fused against unfused,
from the caching allocator's statistics (build/bin/attention_bench
--mem-only): what the forward keeps for backward and the step's peak, above
the inputs q, k, v, w.

Fits each series by least squares to a + b T and to a + b T + c T^2, and
prints the slope, intercept, R^2 and largest relative residual of the
linear fit, and what share of the value at the largest T the quadratic term
of the second fit gives. The figures are byte counts, the same on every run
and under any load, so no rounds are needed.

Usage:
  bench/attention_memory.py [--bench build/bin/attention_bench]
                            [--T 256,512,1024,1536,2048,3072,4096] [--B 1] [--H 8] [--D 64]
                            [--threads 2] [--json FILE]"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np


def fit(T, y):
    T, y = np.asarray(T, dtype=np.float64), np.asarray(y, dtype=np.float64)
    A = np.stack([np.ones_like(T), T], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    pred = a + b * T
    ss_res, ss_tot = float(((y - pred) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    A2 = np.stack([np.ones_like(T), T, T * T], axis=1)
    (a2, b2, c2), *_ = np.linalg.lstsq(A2, y, rcond=None)
    return {"intercept": float(a), "slope_per_token": float(b), "r2": 1.0 - ss_res / ss_tot if ss_tot else 1.0,
            "max_rel_residual": float(np.max(np.abs(y - pred) / y)),
            "quadratic_c": float(c2), "quadratic_share_at_max_T": float(c2 * T[-1] ** 2 / y[-1])}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--bench", default=os.path.join(here, "..", "build", "bin", "attention_bench"))
    p.add_argument("--T", default="256,512,1024,1536,2048,3072,4096")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--D", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    o = p.parse_args()
    cmd = [o.bench, "--T", o.T, "--B", str(o.B), "--H", str(o.H), "--D", str(o.D), "--threads", str(o.threads),
           "--mem-only", "--json"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if r.returncode:
        sys.exit("attention_memory.py: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    js = json.loads([x for x in r.stdout.splitlines() if x.startswith("{")][-1])
    rows = js["memory"]
    T = [x["T"] for x in rows]
    mib = 1 << 20
    print("attention step memory: B=%d H=%d D=%d causal f32 CPU, %d threads (bytes from the allocator's stats)" %
          (o.B, o.H, o.D, js["threads"]))
    print("| T | kept for backward, fused | unfused | fused/unfused | step peak, fused | unfused | fused/unfused |")
    print("|---|---|---|---|---|---|---|")
    for x in rows:
        print("| %d | %.2f MiB | %.2f MiB | %.4f | %.2f MiB | %.2f MiB | %.4f |" %
              (x["T"], x["kept_fused"] / mib, x["kept_unfused"] / mib, x["kept_fused"] / x["kept_unfused"],
               x["peak_fused"] / mib, x["peak_unfused"] / mib, x["peak_fused"] / x["peak_unfused"]))
    fits = {}
    print("\n| series | slope, bytes per token | intercept, bytes | R^2 | largest relative residual | "
          "quadratic term's share at T=%d |" % T[-1])
    print("|---|---|---|---|---|---|")
    for key in ("peak_fused", "kept_fused", "peak_unfused", "kept_unfused"):
        f = fit(T, [x[key] for x in rows])
        fits[key] = f
        print("| %s | %.1f | %.0f | %.6f | %.2e | %.2e |" % (key, f["slope_per_token"], f["intercept"], f["r2"],
                                                             f["max_rel_residual"], f["quadratic_share_at_max_T"]))
    at = {x["T"]: x for x in rows}
    ratio = None
    if 2048 in at:
        x = at[2048]
        ratio = {"kept": x["kept_fused"] / x["kept_unfused"], "peak": x["peak_fused"] / x["peak_unfused"]}
        print("\nT=2048: fused/unfused kept for backward %.4f (1/%.1f), step peak %.4f (1/%.1f)" %
              (ratio["kept"], 1 / ratio["kept"], ratio["peak"], 1 / ratio["peak"]))
    line = json.dumps({"bench": "attention_memory", "B": o.B, "H": o.H, "D": o.D, "threads": js["threads"],
                       "memory": rows, "fits": fits, "ratio_2048": ratio})
    print(line)
    if o.json:
        with open(o.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
