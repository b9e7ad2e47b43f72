#!/usr/bin/env python3
"""Check that core/ keeps its layers (core/layers.txt, docs/design/layering.md).

Reads every #include "..." of core/ (sources and headers), resolves it to a
folder, and fails listing each include that goes against the order: a folder
including a higher-ranked one, or one of the same rank. Also fails when a core
file includes a backend header or names a backend kind constant, and when a
program in tools/ calls a function that a backend folder defines.
Usage: layers.py [repository root]. Exit 0: clean, 1: violations, 2: usage."""
import os
import re
import sys

KINDS = re.compile(r"\bAG_BACKEND_(CPU|CUDA|HIP|OPENCL|VULKAN|GPUEMU)\b")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = (".c", ".h", ".inc", ".cpp", ".cu", ".cuh", ".cc", ".hpp")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)


def load_layers(path):
    ranks, allow, errors = {}, {}, []
    for n, line in enumerate(read(path).splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "allow" and len(words) >= 4:
            allow[(words[1], words[2])] = " ".join(words[3:])
        elif len(words) == 2 and words[1].isdigit() and words[0] not in ranks:
            ranks[words[0]] = int(words[1])
        else:
            errors.append(f"{path}:{n}: cannot read '{line.strip()}' "
                          "(want '<folder> <rank>' or 'allow <file> <header> <reason>')")
    return ranks, allow, errors


def files_under(root, top):
    for d, dirs, names in os.walk(os.path.join(root, top)):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(d, name), root)


def check_core(root, ranks, allow):
    problems, used, edges = [], set(), 0
    core = os.path.join(root, "core")
    folders = sorted(d for d in os.listdir(core) if os.path.isdir(os.path.join(core, d)))
    for d in folders:
        if d not in ranks:
            problems.append(f"core/{d}/: not in core/layers.txt (give it a rank)")
    for d in ranks:
        if d not in folders:
            problems.append(f"core/layers.txt: '{d}' is not a folder of core/")
    for rel in files_under(root, "core"):
        parts = rel.split(os.sep)
        if len(parts) < 3:
            continue  # core/hidden.h and the like: below every layer
        src = parts[1]
        text = read(os.path.join(root, rel))
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            if inc.startswith("anygrad/"):
                continue  # the public API: every layer may use it
            line = text.count("\n", 0, m.start()) + 1
            here = os.path.normpath(os.path.join(root, os.path.dirname(rel), inc))
            under_core = os.path.normpath(os.path.join(core, inc))
            target = under_core if os.path.exists(under_core) and not os.path.exists(here) else here
            trel = os.path.relpath(target, root).split(os.sep)
            if trel[0] in ("backends", "kernels", "comm"):
                problems.append(f"{rel}:{line}: includes \"{inc}\", a backend's header")
                continue
            if trel[0] != "core" or len(trel) < 3:
                continue  # include/anygrad, core/hidden.h, system-like headers
            dst = trel[1]
            if dst == src or dst not in ranks or src not in ranks:
                continue
            edges += 1
            if ranks[dst] < ranks[src]:
                continue
            key = ("/".join(parts), "/".join(trel))
            if key in allow:
                used.add(key)
                continue
            how = "a higher layer" if ranks[dst] > ranks[src] else "a layer of the same rank"
            problems.append(f"{rel}:{line}: {src} ({ranks[src]}) includes \"{inc}\", "
                            f"{how}: {dst} ({ranks[dst]})")
        for n, line in enumerate(strip_comments(text).splitlines(), 1):
            for m in KINDS.finditer(line):
                problems.append(f"{rel}:{n}: names the backend kind {m.group(0)} "
                                "(use the device's properties: ag_device_props, the backend's flags)")
    for key in sorted(set(allow) - used):
        problems.append(f"core/layers.txt: 'allow {key[0]} {key[1]}' is not needed any more")
    return problems, edges


DEF = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w]*[\s\*]+)+(ag_\w+)\s*\([^;]*$", re.M)


def check_tools(root):
    defined = {}
    for rel in files_under(root, "backends"):
        if rel.endswith((".c", ".cpp", ".cu")):
            for m in DEF.finditer(strip_comments(read(os.path.join(root, rel)))):
                defined.setdefault(m.group(1), rel)
    problems = []
    for rel in files_under(root, "tools"):
        text = strip_comments(read(os.path.join(root, rel)))
        for n, line in enumerate(text.splitlines(), 1):
            for m in re.finditer(r"\b(ag_\w+)\s*\(", line):
                if m.group(1) in defined:
                    problems.append(f"{rel}:{n}: calls {m.group(1)}, defined by a backend "
                                    f"({defined[m.group(1)]}): ask the registry instead")
        for m in INCLUDE.finditer(read(os.path.join(root, rel))):
            if m.group(1).split("/")[0] in ("backends", "core", "..") :
                problems.append(f"{rel}: includes \"{m.group(1)}\" (tools use include/anygrad only)")
    return problems


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    layers = os.path.join(root, "core", "layers.txt")
    if not os.path.isfile(layers):
        print(f"layers.py: {layers}: no such file", file=sys.stderr)
        return 2
    ranks, allow, problems = load_layers(layers)
    core_problems, edges = check_core(root, ranks, allow)
    problems += core_problems + check_tools(root)
    for p in problems:
        print(p)
    order = " < ".join(f"{d}" for d in sorted(ranks, key=lambda d: (ranks[d], d)))
    print(f"layers: {len(problems)} problem(s); {edges} cross-folder includes in core/ "
          f"checked against {order} ({len(allow)} listed exception(s))")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
