#!/usr/bin/env python3
"""Training-step time on opencl:0 of two anygrad builds (before and after a
change), interleaved: the Fashion-MNIST CNN (`anygrad train --task
fashion-mnist`, a short epoch over --train-limit images; the profiler's
median step time) and the text job's Llama-style model (`anygrad train
--task text`; the time of steps 5-8 from the progress lines, which include
one held-out batch each 4 steps, divided by 4). Each build's first run
compiles its kernels into the cache and is not timed (--warmup). Python 3
standard library only; JSON to --json for scripts/doc_numbers.py.

Usage: bench/opencl_train.py --before OLD/bin/anygrad --after build/bin/anygrad
                             [--rounds 3] [--json docs/numbers/opencl_train.json]
Thread counts are set to 1 on each side (AG_NUM_THREADS, OMP_NUM_THREADS,
--threads, POCL_MAX_PTHREAD_COUNT).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ENV = dict(os.environ, AG_NUM_THREADS="1", OMP_NUM_THREADS="1", POCL_MAX_PTHREAD_COUNT="1")


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def cnn_ms(exe, cwd, limit):
    out = run([exe, "train", "--task", "fashion-mnist", "--device", "opencl:0", "--threads", "1",
               "--train-limit", str(limit), "--test-limit", "256", "--epochs", "1",
               "--out", os.path.join(cwd, "cnn.safetensors")], cwd)
    m = re.search(r"step time\s+mean [\d.]+ ms\s+p50 ([\d.]+) ms", out)
    if not m:
        sys.exit("no profiler step time in:\n" + out[-2000:])
    return float(m.group(1))


def text_ms(exe, cwd):
    out = run([exe, "train", "--task", "text", "--device", "opencl:0", "--threads", "1", "--steps", "8",
               "--log-every", "4", "--eval-batches", "1", "--samples", "0",
               "--out", os.path.join(cwd, "text.safetensors")], cwd)
    t = {int(s): float(x) for s, x in re.findall(r"step (\d+)/8 .* ([\d.]+) s\n", out)}
    if 4 not in t or 8 not in t:
        sys.exit("no progress lines in:\n" + out[-2000:])
    return (t[8] - t[4]) / 4 * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-limit", type=int, default=1024, help="CNN images (batch 128: 8 steps)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    sides = {"before": a.before, "after": a.after}
    jobs = {"cnn_step_ms": lambda e, d: cnn_ms(e, d, a.train_limit), "text_step_ms": text_ms}
    ms = {j: {s: [] for s in sides} for j in jobs}
    with tempfile.TemporaryDirectory() as d:
        for r in range(-a.warmup, a.rounds):
            for j, fn in jobs.items():
                for s, exe in sides.items():
                    v = fn(exe, d)
                    if r >= 0:
                        ms[j][s].append(v)
                    print(f"round {r}: {j} {s} {v:.1f} ms", flush=True)
    out = {"meta": {"rounds": a.rounds, "threads": 1, "load": os.getloadavg(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "cnn": f"fashion-mnist, batch 128, --train-limit {a.train_limit}, profiler p50",
                    "text": "text job defaults (dim 128, 4 layers, seq 128, batch 8), steps 5-8"}}
    for j in jobs:
        out[j] = {s: {"median": statistics.median(v), "min": min(v), "max": max(v)} for s, v in ms[j].items()}
        out[j]["speedup"] = out[j]["before"]["median"] / out[j]["after"]["median"]
        print(f"{j}: before {out[j]['before']['median']:.1f} ms ({out[j]['before']['min']:.1f}-"
              f"{out[j]['before']['max']:.1f}), after {out[j]['after']['median']:.1f} ms "
              f"({out[j]['after']['min']:.1f}-{out[j]['after']['max']:.1f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
