#!/usr/bin/env python3
"""Medians of `anygrad bench --json` runs of two variants (before and after
a change, run interleaved), as one JSON for scripts/doc_numbers.py: per op
the median GB/s of each side and the after side's ratio to a reference op
of the same runs (an elementwise op on the same device). Python 3 standard
library only. Usage:

    scripts/bench_pair.py --ref add --out FILE.json --before A1.json ... --after B1.json ...
"""
import argparse
import json
import statistics


def medians(paths):
    """{op: median gbps} over the runs in paths (a refused or failed op is dropped)."""
    by_op = {}
    for p in paths:
        with open(p) as f:
            for row in json.load(f):
                if not row.get("unsupported") and row.get("status", "ok") == "ok":
                    by_op.setdefault(row["op"], []).append(row["gbps"])
    return {op: statistics.median(v) for op, v in by_op.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="add")
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", default="", help="a line on where and how the runs were made")
    ap.add_argument("--before", nargs="+", required=True)
    ap.add_argument("--after", nargs="+", required=True)
    a = ap.parse_args()
    before, after = medians(a.before), medians(a.after)
    ref = after[a.ref]
    out = {
        "meta": a.meta,
        "runs": len(a.after),
        "ref": a.ref,
        "before": before,
        "after": after,
        "speedup": {op: after[op] / before[op] for op in after if before.get(op)},
        "ratio_to_ref": {op: after[op] / ref for op in after},
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
