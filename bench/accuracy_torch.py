#!/usr/bin/python3
"""The ULP table of docs/conformance.md: anygrad's backends next to PyTorch's
CPU on the same inputs. For each backend B, `anygrad check --accuracy
--dump-inputs DIR --backend B` writes, per case, the input values (already
rounded to the dtype), the double-precision reference and B's output
(format in docs/conformance.md). This script runs the same op in PyTorch on
the same input, measures both outputs against the reference rounded to the
dtype, and prints Markdown tables (and --json FILE with every number).

usage: /usr/bin/python3 bench/accuracy_torch.py [--anygrad BIN] [--backends cpu,opencl:0,...]
                                                [--dtypes f32,f16] [--threads N] [--json FILE]
Run with Debian's /usr/bin/python3 (python3-torch)."""
import argparse
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

TRANSCENDENTAL = ["exp", "exp2", "expm1", "log", "log1p", "sqrt", "rsqrt", "pow_scalar", "sin", "cos", "tanh", "sinh",
                  "cosh", "erf", "sigmoid", "logsigmoid", "gelu", "gelu_erf", "silu", "softplus", "mish"]
REDUCTIONS = ["sum", "mean", "cumsum", "softmax", "log_softmax"]
I64_MAX = 2**63 - 1
FMT = {"f64": (53, -1022, float("inf")), "f32": (24, -126, float.fromhex("0x1.fffffep127")), "f16": (11, -14, 65504.0),
       "bf16": (8, -126, float.fromhex("0x1.fep127"))}
TDT = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def round_to(dt, x):
    """x rounded to nearest even in dt (subnormals, overflow to inf)."""
    if dt == "f64" or x == 0 or not math.isfinite(x):
        return x
    p, emin, maxv = FMT[dt]
    _, e = math.frexp(x)
    q = max(e - p, emin - p + 1)
    r = math.ldexp(round(math.ldexp(x, -q)), q)
    return math.copysign(math.inf, x) if abs(r) > maxv else r


def key(dt, x):
    if dt == "f64":
        b = struct.unpack("<q", struct.pack("<d", x))[0]
        m = b & 0x7FFFFFFFFFFFFFFF
        return -m if b < 0 else m
    b = struct.unpack("<I", struct.pack("<f", x))[0]  # f16 and bf16 values are exact in f32
    if dt == "f32":
        m = b & 0x7FFFFFFF
        return -m if b >> 31 else m
    # count f16/bf16 steps: the f32 pattern of a value in that format
    h = struct.unpack("<H", struct.pack("<e", x))[0] if dt == "f16" else b >> 16
    m = h & 0x7FFF
    return -m if h >> 15 else m


def ulp(dt, a, b):
    if math.isnan(a) or math.isnan(b):
        return 0 if math.isnan(a) and math.isnan(b) else I64_MAX
    return abs(key(dt, a) - key(dt, b))


def torch_op(h, x):
    op, s0, s1 = h["op"], h.get("s0"), h.get("s1")
    if op in ("sum", "mean"):
        dims = h["dims"]
        f = torch.sum if op == "sum" else torch.mean
        return f(x) if not dims else f(x, dim=dims, keepdim=h["keep"])
    if op == "cumsum":
        return torch.cumsum(x, dim=h["dim"]) if x.dim() else x.clone()
    if op == "softmax":
        return torch.softmax(x, dim=h["dim"])
    if op == "log_softmax":
        return torch.log_softmax(x, dim=h["dim"])
    table = {"exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p,
             "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
             "sinh": torch.sinh, "cosh": torch.cosh, "erf": torch.erf, "sigmoid": torch.sigmoid,
             "logsigmoid": F.logsigmoid, "gelu": lambda t: F.gelu(t, approximate="tanh"), "gelu_erf": F.gelu,
             "silu": F.silu, "mish": F.mish, "pow_scalar": lambda t: torch.pow(t, s0),
             "softplus": lambda t: F.softplus(t, beta=s0, threshold=s1)}
    return table[op](x)


def stats(us):
    if not us:
        return None
    us = sorted(us)
    n = len(us)
    return {"n": n, "median": us[(n + 1) // 2 - 1], "p99": us[math.ceil(0.99 * n) - 1], "max": us[-1],
            "nan_mismatch": sum(1 for u in us if u == I64_MAX)}


def fmt(v):
    if v is None:
        return "-"
    if v >= I64_MAX:
        return "NaN"
    return f"{v:.1e}" if v >= 100000 else str(v)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--anygrad", default=os.path.join(here, "..", "build", "bin", "anygrad"))
    ap.add_argument("--backends", default="cpu,opencl:0,gpuemu:0,gpuemu:1,vulkan:0")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ops = TRANSCENDENTAL + REDUCTIONS
    dts = a.dtypes.split(",")
    res = {}  # (op, dtype, who, part) -> list of ulps
    backends = []
    unsup = set()  # (op, dtype) PyTorch's CPU does not implement
    with tempfile.TemporaryDirectory(prefix="agacc-") as tmp:
        for b in a.backends.split(","):
            d = os.path.join(tmp, b.replace(":", "_"))
            os.makedirs(d)
            p = subprocess.run([a.anygrad, "check", "--dump-inputs", d, "--backend", b, "--ops", ",".join(ops),
                                "--dtype", a.dtypes, "--threads", str(a.threads)], capture_output=True, text=True)
            if p.returncode not in (0, 1):
                print(f"# {b}: not measured ({p.stderr.strip()[:200]})", file=sys.stderr)
                continue
            backends.append(b)
            for path in sorted(glob.glob(os.path.join(d, "*.bin"))):
                with open(path, "rb") as f:
                    h = json.loads(f.readline())
                    raw = f.read()
                v = struct.unpack(f"<{len(raw) // 8}d", raw)
                ni, no = h["n_in"], h["n_out"]
                x, ref, out = v[:ni], v[ni:ni + no], v[ni + no:]
                dt, part = h["dtype"], "adversarial" if h["adversarial"] else "shapes"
                rr = [round_to(dt, r) for r in ref]
                res.setdefault((h["op"], dt, b, part), []).extend(ulp(dt, o, r) for o, r in zip(out, rr))
                if b == backends[0]:  # PyTorch once, on the first backend's dump (same inputs for every backend)
                    xt = torch.tensor(x, dtype=torch.float64).reshape(h["in_shape"]).to(TDT[dt])
                    try:
                        yt = torch_op(h, xt).to(torch.float64).reshape(-1).tolist()
                    except RuntimeError:  # e.g. "cos_vml_cpu" not implemented for 'Half'
                        unsup.add((h["op"], dt))
                        continue
                    res.setdefault((h["op"], dt, "torch", part), []).extend(ulp(dt, o, r) for o, r in zip(yt, rr))
    whos = backends + ["torch"]
    table = {f"{op}|{dt}|{w}|{part}": stats(us) for (op, dt, w, part), us in res.items()}
    th = f"{a.threads} thread" + ("s" if a.threads != 1 else "")
    print(f"PyTorch {torch.__version__} on the CPU, {th} (anygrad's CPU backend also with {th})\n")
    for dt in dts:
        for part, what in (("shapes", "shape cases: p99 / max ULPs"),
                           ("adversarial", "adversarial inputs: max ULPs (NaN: a NaN where a number was due or the reverse)")):
            print(f"**{dt}, {what}**\n")
            print("| op | " + " | ".join(w if w != "torch" else "PyTorch CPU" for w in whos) + " |")
            print("|" + "---|" * (len(whos) + 1))
            for op in ops:
                row = []
                for w in whos:
                    s = table.get(f"{op}|{dt}|{w}|{part}")
                    if s is None and w == "torch" and (op, dt) in unsup:
                        row.append("n/i")
                        continue
                    row.append("-" if s is None else (f"{fmt(s['p99'])} / {fmt(s['max'])}" if part == "shapes"
                                                       else fmt(s["max"])))
                if any(c != "-" for c in row):
                    print(f"| {op} | " + " | ".join(row) + " |")
            print()
    print("n/i: not implemented for this dtype by PyTorch's CPU; -: no such case\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": a.threads, "backends": backends, "cells": table}, f,
                      indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
