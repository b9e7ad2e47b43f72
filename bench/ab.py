#!/usr/bin/python3
"""Two builds side by side: runs command A and command B alternately
(A B A B ... for --rounds rounds), reads one number from each run's output
with a regular expression, and prints the median and range of each and of
the ratio B/A per round, as a table and as JSON (--json FILE).

Usage:
  bench/ab.py --a 'OLD/build/bin/ops_bench --ops add --json -' \\
              --b 'NEW/build/bin/ops_bench --ops add --json -' \\
              --metric 'add launch ns="overhead_ns": ([0-9.]+)' --rounds 9

--metric NAME=REGEX may be given several times: every run is read for each.

The ratio is B/A whichever way the metric improves. Thread counts are the commands' own: set them there
(--threads N, AG_NUM_THREADS) and say so."""
import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys


def run(cmd, metrics):
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=900)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"ab.py: '{cmd}' exited with {out.returncode}:\n{text[-2000:]}")
    vals = []
    for name, pattern in metrics:
        found = re.search(pattern, text, re.S)
        if not found:
            sys.exit(f"ab.py: {name}: no match for /{pattern}/ in the output of '{cmd}':\n{text[-2000:]}")
        vals.append(float(found.group(1)))
    return vals


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="command of build A (the baseline)")
    p.add_argument("--b", required=True, help="command of build B")
    p.add_argument("--metric", required=True, action="append",
                   help="NAME=REGEX, the regex with one group: the number read from the output")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", help="append the results as JSON lines to this file")
    o = p.parse_args()
    if o.rounds < 1:
        sys.exit("ab.py: --rounds must be at least 1")
    metrics = []
    for m in o.metric:
        name, sep, pattern = m.partition("=")
        if not sep or not pattern:
            sys.exit(f"ab.py: --metric {m!r}: expected NAME=REGEX")
        metrics.append((name, pattern))
    a, b = [], []
    for _ in range(o.rounds):
        a.append(run(o.a, metrics))
        b.append(run(o.b, metrics))
    fmt = lambda d: f"{d['median']:.4g} [{d['min']:.4g}-{d['max']:.4g}]"
    summary = lambda v: {"median": statistics.median(v), "min": min(v), "max": max(v)}
    print(f"{o.rounds} rounds, A B A B ...")
    print(f"{'':30} {'A median [range]':>26} {'B median [range]':>26} {'B/A median [range]':>24}")
    for k, (name, _) in enumerate(metrics):
        va, vb = [r[k] for r in a], [r[k] for r in b]
        ratios = [y / x if x else float("inf") for x, y in zip(va, vb)]
        res = {"name": name, "rounds": o.rounds, "a": summary(va), "b": summary(vb),
               "ratio_b_over_a": summary(ratios), "a_cmd": o.a, "b_cmd": o.b}
        print(f"{name:30} {fmt(res['a']):>26} {fmt(res['b']):>26} {fmt(res['ratio_b_over_a']):>24}")
        if o.json:
            with open(o.json, "a") as f:
                f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
