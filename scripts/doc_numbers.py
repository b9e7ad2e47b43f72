#!/usr/bin/env python3
"""Rewrites the figures in README.md and docs/ that come from benchmark JSON,
so a number is regenerated, not retyped (Python 3 standard library only).

A generated figure is a marked span:

    <!-- gen ddp.json:overlap.ratio_median %.3f -->1.076<!-- /gen -->

`FILE:PATH` names a JSON file (in the folder given with --json) and a dotted
path into it (list items by index: `rows.0.ns`); the format is printf style.
Spans named `meta:machine`, `meta:date` and `meta:load` take the machine
(CPU model and count), the UTC date and the 1-minute load average at the
time of generation, so a page says where and when its numbers were made:

    <!-- gen meta:date %s -->...<!-- /gen -->

A bench that writes several JSON objects one per line (JSON lines) is read
as a list. Usage:

    scripts/doc_numbers.py --json DIR [--check] [FILE.md ...]

With --check nothing is written and the exit status is 1 when a span would
change (or names a file or path that is missing), 0 otherwise. Without
FILE.md arguments, README.md and every docs/**/*.md are processed.
`cmake --build build --target docs-numbers` runs it on build/bench-json/.
"""
import datetime
import json
import os
import platform
import re
import sys

SPAN = re.compile(r"<!-- gen (\S+) (%[^ ]+) -->(.*?)<!-- /gen -->", re.S)


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


def value(key, jsondir, cache):
    if key == "meta:machine":
        return machine()
    if key == "meta:date":
        return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if key == "meta:load":
        return "%.1f" % os.getloadavg()[0]
    fname, _, path = key.partition(":")
    if fname not in cache:
        cache[fname] = load_json(os.path.join(jsondir, fname))
    v = cache[fname]
    for part in path.split(".") if path else []:
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v


def process(doc, jsondir, check, cache):
    text = open(doc).read()
    problems = []

    def repl(m):
        key, fmt, old = m.group(1), m.group(2), m.group(3)
        try:
            new = fmt % value(key, jsondir, cache)
        except (OSError, KeyError, IndexError, ValueError, TypeError) as e:
            problems.append(f"{doc}: {key}: {e!r}")
            return m.group(0)
        if new != old and not key.startswith("meta:"):
            problems.append(f"{doc}: {key}: {old} -> {new}") if check else None
        return f"<!-- gen {key} {fmt} -->{new}<!-- /gen -->"

    out = SPAN.sub(repl, text)
    if not check and out != text:
        with open(doc, "w") as f:
            f.write(out)
        print(f"{doc}: updated")
    return problems


def main(argv):
    args, jsondir, check = [], None, False
    it = iter(argv[1:])
    for a in it:
        if a == "--json":
            jsondir = next(it, None)
        elif a == "--check":
            check = True
        else:
            args.append(a)
    if not jsondir:
        print(__doc__)
        return 2
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
