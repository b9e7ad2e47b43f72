#!/usr/bin/python3
"""The ops of bench/ops_bench.c timed in PyTorch (CPU) with the same sizes and
thread count, one line per op: `name overhead_ns large_ms gbps`.
Run with Debian's /usr/bin/python3 (python3-torch), or PyTorch 2.x's
(.venv-bench/bin/python3, scripts/deps.sh --bench) with --compile: each op
under torch.compile (inductor), compiled in the untimed first repetition of
each size."""
import argparse
import statistics
import time

import torch

import torch_setup  # BLAS threads and host memory as anygrad has them (bench/torch_setup.py)

torch_setup.keep_memory()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=4 << 20)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--matmul", type=int, default=512)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="each op under torch.compile (PyTorch 2.x)")
    a = ap.parse_args()
    if a.threads > 0:
        torch_setup.set_threads(a.threads)
    torch.manual_seed(0)

    def operands(name, n, m):
        if name == "matmul":
            return torch.rand(m, m) * 2 - 1, torch.rand(m, m) * 2 - 1
        if name == "softmax":
            rows, cols = (n // 1024, 1024) if n >= 1024 else (1, n)
            return torch.rand(rows, cols) * 2 - 1, None
        if name == "transpose_copy":
            cols, rows = (1024, n // 1024) if n >= 1024 else (4, (n + 3) // 4)
            return (torch.rand(cols, rows) * 2 - 1).t(), None
        return torch.rand(n) + 0.5, torch.rand(n) + 0.5

    ops = {
        "add": lambda x, y: x + y,
        "mul": lambda x, y: x * y,
        "exp": lambda x, y: torch.exp(x),
        "gelu": lambda x, y: torch.nn.functional.gelu(x, approximate="tanh"),
        "relu": lambda x, y: torch.relu(x),
        "sum": lambda x, y: x.sum(),
        "softmax": lambda x, y: torch.softmax(x, -1),
        "cast_f16": lambda x, y: x.to(torch.float16),
        "transpose_copy": lambda x, y: x.contiguous(),
        "matmul": lambda x, y: x @ y,
    }
    bytes_per = {"add": 12, "mul": 12, "exp": 8, "gelu": 8, "relu": 8, "sum": 4,
                 "softmax": 8, "cast_f16": 6, "transpose_copy": 8}
    if a.compile:
        ops = {k: torch.compile(f, dynamic=False) for k, f in ops.items()}
    with torch.no_grad():
        for name, f in ops.items():
            x, y = operands(name, a.small, 4)
            batch, ts = 2000, []
            for rep in range(a.reps + 1):
                t0 = time.perf_counter_ns()
                for _ in range(batch):
                    r = f(x, y)
                del r
                if rep:
                    ts.append((time.perf_counter_ns() - t0) / batch)
            over = statistics.median(ts)
            x, y = operands(name, a.numel, a.matmul)
            ts = []
            for rep in range(a.reps + 1):
                t0 = time.perf_counter_ns()
                r = f(x, y)
                t1 = time.perf_counter_ns()
                del r
                if rep:
                    ts.append((t1 - t0) / 1e6)
            ms = statistics.median(ts)
            if name == "matmul":
                rate = 2.0 * a.matmul ** 3 / (ms * 1e6)
            else:
                rate = bytes_per[name] * a.numel / (ms * 1e6)
            print(f"{name} {over:.1f} {ms:.4f} {rate:.2f}", flush=True)


if __name__ == "__main__":
    main()
