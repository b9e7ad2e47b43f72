#!/usr/bin/env python3
"""Matmul on vulkan:0: the register-blocked GEMM (gemm_tiled.comp) against
gemm.comp (AG_VULKAN_TEST=gemm_generic), one process per side and round,
the sides interleaved (A B A B ...), one thread for lavapipe and the CPU
(LP_NUM_THREADS=1, AG_NUM_THREADS=1). Per case (dtype, size, layout) the
median and range over the rounds of wall GFLOP/s and of GFLOP/s on the
process's CPU time (the device threads included; steadier than wall time
on a loaded machine), and the speedups of the medians. Writes one JSON
object (--json) and prints a table. Python 3 standard library only.

    bench/vk_gemm.py [--build build] [--rounds 5] [--sizes 512,1024] [--reps 2]
                     [--json docs/numbers/vk_gemm.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SIDES = {"tiled": "", "generic": "gemm_generic"}


def run(exe, side, sizes, reps):
    env = dict(os.environ, LP_NUM_THREADS="1", AG_NUM_THREADS="1", OMP_NUM_THREADS="1",
               AG_VULKAN_TEST=SIDES[side])
    out = subprocess.run([exe, "--sizes", sizes, "--reps", str(reps)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="512,1024")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    exe = os.path.join(a.build, "bin", "vk_gemm_bench")
    res = {}  # (side, dtype, n, layout) -> {"gflops": [...], "cpu_gflops": [...]}
    for r in range(a.rounds):
        order = list(SIDES) if r % 2 == 0 else list(reversed(list(SIDES)))
        for side in order:
            for row in run(exe, side, a.sizes, a.reps):
                k = (side, row["dtype"], row["n"], row["layout"])
                d = res.setdefault(k, {"gflops": [], "cpu_gflops": []})
                d["gflops"].append(row["gflops"])
                d["cpu_gflops"].append(row["cpu_gflops"])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    cases = {}
    print(f"{'case':<16} {'side':<8} {'GFLOP/s wall (range)':<26} {'GFLOP/s cpu (range)':<26}")
    for (side, dt, n, lay), d in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3], kv[0][0])):
        name = f"{dt}_{n}_{lay}"
        w, c = summary(d["gflops"]), summary(d["cpu_gflops"])
        cases.setdefault(name, {})[side] = {"gflops": w, "cpu_gflops": c}
        print(f"{name:<16} {side:<8} {w['median']:7.3f} ({w['min']:.3f}-{w['max']:.3f})"
              f"{'':<5} {c['median']:7.3f} ({c['min']:.3f}-{c['max']:.3f})")
    for name, c in cases.items():
        if "tiled" in c and "generic" in c:
            c["speedup_wall"] = c["tiled"]["gflops"]["median"] / c["generic"]["gflops"]["median"]
            c["speedup_cpu"] = c["tiled"]["cpu_gflops"]["median"] / c["generic"]["cpu_gflops"]["median"]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    doc = {"device": "vulkan:0", "threads": 1, "rounds": a.rounds, "reps": a.reps, "load_1min_end": load, "cases": cases}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
