#!/usr/bin/env python3
"""Rewrites the figures in README.md and docs/ that come from benchmark JSON,
so a number is regenerated, not retyped (Python 3 standard library only).

A generated figure is a marked span:

    <!-- gen ddp.json:overlap.ratio_median %.3f -->1.076<!-- /gen -->

`FILE:PATH` names a JSON file (in the folder given with --json) and a dotted
path into it (list items by index: `rows.0.ns`); the format is printf style.
`--record-meta` writes meta.json (the machine's CPU model and count, the
UTC date and the 1-minute load average) before the benchmarks run, so a page
says where and when its numbers were made:

    <!-- gen meta.json:date %s -->...<!-- /gen -->

`--meta NAME.json` records it under another name (scripts/bench_torch2.sh
writes torch2_meta.json, so its run leaves meta.json to the other benches).

A verdict is generated the same way: the format `goal<=X` (or `>=`, `<`,
`>`) writes `met` when the figure satisfies it and `**not met**` when it
does not, so a doc never says "met" for a figure its JSON does not give:

    goal <= 2x: <!-- gen alloc.json:latency_ns.ratio_on_malloc goal<=2 -->**not met**<!-- /gen -->

A bench that writes several JSON objects one per line (JSON lines) is read
as a list. Usage:

    scripts/doc_numbers.py --json DIR --record-meta [--meta NAME.json]
    scripts/doc_numbers.py --json DIR [--check] [FILE.md ...]

With --check nothing is written and the exit status is 1 when a span would
change (or names a file or path that is missing), 0 otherwise. Without
FILE.md arguments, README.md and every docs/**/*.md are processed.
`cmake --build build --target docs-numbers` records the meta data, runs
ddp_bench and alloc_bench into docs/numbers/ and rewrites the spans; the
CTest `docs_numbers` checks that every span equals its JSON.
"""
import datetime
import json
import os
import platform
import re
import sys

SPAN = re.compile(r"<!-- gen (\S+) (%[^ ]+|goal(?:<=|>=|<|>)[-+0-9.e]+) -->(.*?)<!-- /gen -->", re.S)
GOAL = re.compile(r"goal(<=|>=|<|>)([-+0-9.e]+)$")


def render(fmt, v):
    """The span's text: printf-style, or a verdict against a goal."""
    g = GOAL.match(fmt)
    if not g:
        return fmt % v
    op, x = g.group(1), float(g.group(2))
    ok = {"<=": v <= x, ">=": v >= x, "<": v < x, ">": v > x}[op]
    return "met" if ok else "**not met**"


def load_json(path):
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(l) for l in text.splitlines() if l.strip().startswith(("{", "["))]


def machine():
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    model = l.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs"


def record_meta(jsondir, name="meta.json"):
    """meta.json: where and when the benchmarks run (before they start)."""
    os.makedirs(jsondir, exist_ok=True)
    meta = {"machine": machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load": round(os.getloadavg()[0], 1)}
    with open(os.path.join(jsondir, name), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{jsondir}/{name}: {meta}")


def value(key, jsondir, cache):
    fname, _, path = key.partition(":")
    if fname not in cache:
        cache[fname] = load_json(os.path.join(jsondir, fname))
    v = cache[fname]
    parts = path.split(".") if path else []
    while parts:  # keys may contain dots ("overlap.ratio"): the longest that exists
        if isinstance(v, list):
            v, parts = v[int(parts[0])], parts[1:]
            continue
        for i in range(len(parts), 0, -1):
            k = ".".join(parts[:i])
            if k in v:
                v, parts = v[k], parts[i:]
                break
        else:
            raise KeyError(".".join(parts))
    return v


def process(doc, jsondir, check, cache):
    text = open(doc).read()
    problems = []

    def repl(m):
        key, fmt, old = m.group(1), m.group(2), m.group(3)
        try:
            new = render(fmt, value(key, jsondir, cache))
        except (OSError, KeyError, IndexError, ValueError, TypeError) as e:
            problems.append(f"{doc}: {key}: {e!r}")
            return m.group(0)
        if new != old and check:
            problems.append(f"{doc}: {key}: the doc says {old}, the JSON {new}")
        return f"<!-- gen {key} {fmt} -->{new}<!-- /gen -->"

    out = SPAN.sub(repl, text)
    if not check and out != text:
        with open(doc, "w") as f:
            f.write(out)
        print(f"{doc}: updated")
    return problems


def main(argv):
    args, jsondir, check, record, meta = [], None, False, False, "meta.json"
    it = iter(argv[1:])
    for a in it:
        if a == "--json":
            jsondir = next(it, None)
        elif a == "--check":
            check = True
        elif a == "--record-meta":
            record = True
        elif a == "--meta":
            meta = next(it, meta)
        else:
            args.append(a)
    if not jsondir:
        print(__doc__)
        return 2
    if record:
        record_meta(jsondir, meta)
        return 0
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not args:
        args = [os.path.join(src, "README.md")]
        for root, _, names in os.walk(os.path.join(src, "docs")):
            args += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    cache, problems = {}, []
    for doc in args:
        problems += process(doc, jsondir, check, cache)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
