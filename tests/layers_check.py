#!/usr/bin/env python3
"""scripts/layers.py against small trees: a clean one passes, and each kind of
violation (a back-edge, same-rank folders, a backend header, a backend kind
constant, a tool calling into a backend, an unranked folder, a stale
exception) fails with its line."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "layers.py")


def tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


BASE = {
    "core/layers.txt": "low 0\nhigh 1\nside 1\n",
    "core/hidden.h": "",
    "core/low/a.h": "",
    "core/low/a.c": '#include "low/a.h"\n#include "hidden.h"\n#include "anygrad/x.h"\n',
    "core/high/b.h": "",
    "core/high/b.c": '#include "low/a.h"\n#include "b.h"\n',
    "core/side/c.h": "",
    "backends/cpu/cpu.c": "int ag_cpu_thing(void) {\n  return 0;\n}\n",
    "tools/info.c": '#include "anygrad/x.h"\nint main(void) { return ag_public(); }\n',
}


def run(extra):
    with tempfile.TemporaryDirectory() as root:
        files = dict(BASE)
        files.update(extra)
        tree(root, files)
        p = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


CASES = [
    ({}, 0, "0 problem(s)"),
    ({"core/low/a.c": '#include "high/b.h"\n'}, 1, 'core/low/a.c:1: low (0) includes "high/b.h", a higher layer'),
    ({"core/high/b.c": '#include "side/c.h"\n'}, 1, "a layer of the same rank: side"),
    ({"core/high/b.c": '#include "../../backends/cpu/cpu.h"\n'}, 1, "a backend's header"),
    ({"core/high/b.c": "int k = AG_BACKEND_CPU;\n"}, 1, "names the backend kind AG_BACKEND_CPU"),
    ({"core/high/b.c": "/* AG_BACKEND_CPU in a comment */\n"}, 0, "0 problem(s)"),
    ({"tools/info.c": "int main(void) { return ag_cpu_thing(); }\n"}, 1,
     "tools/info.c:1: calls ag_cpu_thing, defined by a backend"),
    ({"core/new/d.c": ""}, 1, "core/new/: not in core/layers.txt"),
    ({"core/layers.txt": BASE["core/layers.txt"] + "allow core/low/a.c core/high/b.h a reason\n"}, 1,
     "is not needed any more"),
    ({"core/low/a.c": '#include "high/b.h"\n',
      "core/layers.txt": BASE["core/layers.txt"] + "allow core/low/a.c core/high/b.h a reason\n"}, 0,
     "1 listed exception(s)"),
    ({"core/layers.txt": "low zero\n"}, 1, "cannot read 'low zero'"),
]


def main():
    failed = 0
    for i, (extra, want_rc, want_text) in enumerate(CASES):
        rc, out = run(extra)
        if rc != want_rc or want_text not in out:
            failed += 1
            print(f"case {i}: exit {rc} (want {want_rc}), output lacks '{want_text}':\n{out}")
    print(f"{len(CASES) - failed}/{len(CASES)} cases pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
