#!/usr/bin/python3
"""Two builds side by side: runs command A and command B alternately
(A B A B ... for --rounds rounds), reads one number from each run's output
with a regular expression, and prints the median and range of each and of
the ratio B/A per round, as a table and as JSON (--json FILE).

Usage:
  bench/ab.py --a 'OLD/build/bin/ops_bench --ops add --json -' \\
              --b 'NEW/build/bin/ops_bench --ops add --json -' \\
              --metric '"overhead_ns": ([0-9.]+)' --rounds 9 --name 'add launch ns'

A lower metric is better unless --higher-is-better is given (the ratio
stays B/A either way). Thread counts are the commands' own: set them there
(--threads N, AG_NUM_THREADS) and say so."""
import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys


def run(cmd, pattern, index):
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=900)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"ab.py: '{cmd}' exited with {out.returncode}:\n{text[-2000:]}")
    found = re.findall(pattern, text)
    if len(found) <= index:
        sys.exit(f"ab.py: no match {index} for /{pattern}/ in the output of '{cmd}':\n{text[-2000:]}")
    return float(found[index])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="command of build A (the baseline)")
    p.add_argument("--b", required=True, help="command of build B")
    p.add_argument("--metric", required=True, help="regex with one group: the number read from the output")
    p.add_argument("--index", type=int, default=0, help="which match of the regex (default the first)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--name", default="metric")
    p.add_argument("--higher-is-better", action="store_true")
    p.add_argument("--json", help="append the result as one JSON line to this file")
    o = p.parse_args()
    if o.rounds < 1:
        sys.exit("ab.py: --rounds must be at least 1")
    a, b = [], []
    for _ in range(o.rounds):
        a.append(run(o.a, o.metric, o.index))
        b.append(run(o.b, o.metric, o.index))
    ratios = [y / x if x else float("inf") for x, y in zip(a, b)]
    res = {
        "name": o.name,
        "rounds": o.rounds,
        "a": {"median": statistics.median(a), "min": min(a), "max": max(a)},
        "b": {"median": statistics.median(b), "min": min(b), "max": max(b)},
        "ratio_b_over_a": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "higher_is_better": o.higher_is_better,
        "a_cmd": o.a,
        "b_cmd": o.b,
    }
    print(f"{'':28} {'A median [range]':>26} {'B median [range]':>26} {'B/A median [range]':>24}")
    fmt = lambda d: f"{d['median']:.4g} [{d['min']:.4g}-{d['max']:.4g}]"
    print(f"{o.name:28} {fmt(res['a']):>26} {fmt(res['b']):>26} {fmt(res['ratio_b_over_a']):>24}")
    if o.json:
        with open(o.json, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
