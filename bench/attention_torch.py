#!/usr/bin/python3
"""Attention forward + backward: anygrad's fused kernel, anygrad's unfused
composition and PyTorch's unfused math (torch 1.13 on Debian has no fused
CPU attention), interleaved round by round. With --device cuda (the GPU
machine: scripts/gpu_check.sh) the PyTorch side is its fused
scaled_dot_product_attention (flash or memory-efficient kernels) on the same
GPU, and each step is bracketed by device synchronizations on both sides.

Each round runs build/bin/attention_bench once (one timed step per T on the
fused and on the unfused path, after a warm-up step, in its own process)
and one PyTorch round in this process (one timed step per T after a warm-up
per T at the start); which side goes first alternates between rounds. The
PyTorch step is the same one: out = softmax(q k^T * scale + causal mask) v,
loss = sum(out * w), backward; q, k, v, w of shape [B, H, T, D], of --dtype
(f32 on the CPU), made before the clock starts.

Usage:
  bench/attention_torch.py [--bench build/bin/attention_bench] [--T 256,1024,4096]
                           [--B 1] [--H 8] [--D 64] [--rounds 5] [--threads 2] [--json FILE]
                           [--device cpu|cuda] [--dtype f32|f16|bf16]
Prints a table (median [range] in ms, the ratios of the medians) and one JSON
line (also appended to --json FILE)."""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_setup  # noqa: E402  BLAS threads and host memory as anygrad has them

torch_setup.keep_memory()


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def torch_step(B, H, T, D, device="cpu", dtype="f32"):
    if device != "cpu":
        return torch_sdpa_step(B, H, T, D, device, DTYPES[dtype])
    g = torch.Generator().manual_seed(T)
    q, k, v, w = (torch.randn(B, H, T, D, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    t0 = time.perf_counter()
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    out = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
    (out * w).sum().backward()
    return (time.perf_counter() - t0) * 1e3


def math_attention(q, k, v, mask, scale):
    """The unfused math: softmax(q k^T * scale + causal mask) v."""
    s = (q @ k.transpose(-1, -2)) * scale
    return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v


def make_cpu_step(B, H, T, D, mode):
    """A timed CPU step (returns ms) on tensors made once: mode "eager" (the
    math above), "compile" (it under torch.compile) or "sdpa"
    (F.scaled_dot_product_attention, is_causal=True; PyTorch 2.x)."""
    g = torch.Generator().manual_seed(T)
    q, k, v, w = (torch.randn(B, H, T, D, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scale = 1.0 / math.sqrt(D)
    if mode == "sdpa":
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        f = torch.compile(math_attention, dynamic=False) if mode == "compile" else math_attention
        fn = lambda: f(q, k, v, mask, scale)

    def step():
        for t in (q, k, v):
            t.grad = None
        t0 = time.perf_counter()
        (fn() * w).sum().backward()
        return (time.perf_counter() - t0) * 1e3

    return step


def torch_sdpa_step(B, H, T, D, device, dt):
    q, k, v, w = (torch.randn(B, H, T, D, device=device, dtype=dt) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out * w).sum().backward()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def anygrad_round(o, Ts):
    cmd = [o.bench, "--T", ",".join(map(str, Ts)), "--B", str(o.B), "--H", str(o.H), "--D", str(o.D), "--rounds",
           "1", "--threads", str(o.threads), "--no-mem", "--json", "--device", o.device, "--dtype", o.dtype]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if r.returncode:
        sys.exit("attention_torch.py: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    line = [x for x in r.stdout.splitlines() if x.startswith("{")][-1]
    js = json.loads(line)
    if js["threads"] != o.threads:
        sys.exit("attention_torch.py: attention_bench ran %d threads, not %d" % (js["threads"], o.threads))
    return {(x["T"], x["path"]): x["ms"][0] for x in js["runs"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--bench", default=os.path.join(here, "..", "build", "bin", "attention_bench"))
    p.add_argument("--T", default="256,1024,4096")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--D", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (cuda:0 for anygrad, PyTorch's SDPA)")
    p.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    o = p.parse_args()
    if o.device != "cpu" and not torch.cuda.is_available():
        sys.exit("attention_torch.py: --device %s but torch.cuda is not available" % o.device)
    Ts = [int(x) for x in o.T.split(",")]
    how = torch_setup.set_threads(o.threads)
    torch_name = "torch unfused math" if o.device == "cpu" else "torch SDPA"
    print("attention: B=%d H=%d D=%d causal %s %s, %d rounds interleaved; anygrad --threads %d; torch %s: %s" %
          (o.B, o.H, o.D, o.dtype, o.device, o.rounds, o.threads, torch.__version__, how))
    for T in Ts:  # warm-up
        torch_step(o.B, o.H, T, o.D, o.device, o.dtype)
    times = {(T, path): [] for T in Ts for path in ("fused", "unfused", "torch")}
    for r in range(o.rounds):
        order = ("anygrad", "torch") if r % 2 == 0 else ("torch", "anygrad")
        for side in order:
            if side == "anygrad":
                for key, ms in anygrad_round(o, Ts).items():
                    times[key].append(ms)
            else:
                for T in Ts:
                    times[(T, "torch")].append(torch_step(o.B, o.H, T, o.D, o.device, o.dtype))
        print("round %d/%d done" % (r + 1, o.rounds), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    fmt = lambda k: "%.1f [%.1f, %.1f]" % (med[k], min(times[k]), max(times[k]))
    print("| T | anygrad fused, ms | anygrad unfused, ms | %s, ms | fused/torch | fused/unfused |" % torch_name)
    print("|---|---|---|---|---|---|")
    res = []
    for T in Ts:
        print("| %d | %s | %s | %s | %.2f | %.2f |" % (T, fmt((T, "fused")), fmt((T, "unfused")), fmt((T, "torch")),
                                                     med[(T, "fused")] / med[(T, "torch")],
                                                     med[(T, "fused")] / med[(T, "unfused")]))
        res.append({"T": T, **{path: {"median_ms": med[(T, path)], "min_ms": min(times[(T, path)]),
                                      "max_ms": max(times[(T, path)])} for path in ("fused", "unfused", "torch")},
                    "fused_over_torch": med[(T, "fused")] / med[(T, "torch")],
                    "fused_over_unfused": med[(T, "fused")] / med[(T, "unfused")]})
    line = json.dumps({"bench": "attention_torch", "device": o.device, "dtype": o.dtype, "B": o.B, "H": o.H,
                       "D": o.D, "rounds": o.rounds,
                       "threads": o.threads, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                       "results": res})
    print(line)
    if o.json:
        with open(o.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
