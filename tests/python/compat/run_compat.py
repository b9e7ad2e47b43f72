#!/usr/bin/python3
"""Runs each PyTorch program of tests/python/compat twice, unchanged: once
with PyTorch (python3 with nothing added), once with anygrad standing in
for torch (PYTHONPATH=shim:<package>: shim/sitecustomize.py makes `import
torch` and `torch.nn`, `torch.nn.functional`, `torch.optim`,
`torch.optim.lr_scheduler`, `torch.utils.data`, `torch.autograd`, ... load
anygrad's modules). Every program prints one JSON line of results; the two
are compared number by number within the program's stated tolerance (a
line `# compat: rtol=R atol=A`; |torch - anygrad| <= A + R |torch|), and
strings, booleans, list lengths and keys exactly.

Prints a table (program, ran unchanged and matched?, max difference, why
not), writes it as JSON (--json), and exits 1 when fewer than --min
programs pass (2 for a usage error or a program PyTorch itself fails).

The programs of one library run in one process (_driver.py: one
interpreter and one torch import for all), the two libraries side by side;
a crash restarts the driver with the programs left. --isolated runs each
program in its own process instead.

Environment: ANYGRAD_LIBRARY and AG_BACKEND_PATH as for the package;
OMP_NUM_THREADS=1 and AG_NUM_THREADS=1 unless set.

Usage: run_compat.py [--min N] [--json FILE] [--only a,b] [--isolated]
                     [--timeout S] [--python /usr/bin/python3] [--dir DIR]"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PACKAGE_DIR = os.path.join(ROOT, "python")
SHIM_DIR = os.path.join(HERE, "shim")
DEFAULT_TOL = (1e-4, 1e-5)


def programs(where=HERE):
    return sorted(p for p in glob.glob(os.path.join(where, "*.py"))
                  if not os.path.basename(p).startswith(("_", "run_")))


def tolerance(path):
    with open(path) as f:
        m = re.search(r"^# compat: rtol=(\S+) atol=(\S+)\s*$", f.read(), re.M)
    return (float(m.group(1)), float(m.group(2))) if m else DEFAULT_TOL


def env_for(lib):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("AG_NUM_THREADS", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPATH", None)
    if lib == "anygrad":
        env["PYTHONPATH"] = SHIM_DIR + os.pathsep + PACKAGE_DIR
    return env


def run_driver(python, lib, progs, timeout):
    """{program name: driver record} for progs, restarting after a crash."""
    out, left = {}, list(progs)
    with tempfile.TemporaryDirectory() as tmp:
        while left:
            results = os.path.join(tmp, "%s_%d.jsonl" % (lib, len(out)))
            cmd = [python, os.path.join(HERE, "_driver.py"), lib, results] + left
            t0 = time.perf_counter()
            try:
                p = subprocess.run(cmd, env=env_for(lib), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=timeout, cwd=HERE)
                died = p.returncode != 0 and "exit status %d: %s" % (
                    p.returncode, (p.stderr.decode(errors="replace").strip().splitlines() or [""])[-1])
            except subprocess.TimeoutExpired:
                died = "timed out after %.0f s" % (time.perf_counter() - t0)
            started = None
            if os.path.exists(results):
                with open(results) as f:
                    for line in f:
                        rec = json.loads(line)
                        if rec["event"] == "start":
                            started = rec["program"]
                        else:
                            out[rec["program"]] = rec
                            started = None
            if started is None and not died:
                break
            if started is None:  # died before the first program
                for prog in left:
                    out[os.path.basename(prog)] = {"ok": False, "output": None,
                                                   "error": "driver failed: %s" % died}
                break
            out[started] = {"ok": False, "output": None,
                            "error": "process died: %s" % (died or "no result")}
            left = [p for p in left if os.path.basename(p) not in out]
    return out


def compare(a, b, rtol, atol, where=""):
    """(max |a - b| over the numbers, first mismatch or None); a is torch's."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or a is None:
        same = a == b and type(a) is type(b)
        return 0.0, (None if same else "%s: %r vs %r" % (where or "value", a, b))
    if isinstance(a, (int, float)):
        if not isinstance(b, (int, float)):
            return 0.0, "%s: %r vs %r" % (where or "value", a, b)
        if math.isnan(a) or math.isnan(b):
            return 0.0, None if math.isnan(a) and math.isnan(b) else "%s: %r vs %r" % (where, a, b)
        if math.isinf(a) or math.isinf(b):
            return 0.0, None if a == b else "%s: %r vs %r" % (where, a, b)
        d = abs(a - b)
        tol = atol + rtol * abs(a)
        return d, (None if d <= tol else
                   "%s: %.7g vs %.7g (|diff| %.3g > %.3g)" % (where or "value", a, b, d, tol))
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return 0.0, "%s: %s vs %s" % (where or "value", _short(a), _short(b))
        items = [(i, x, y) for i, (x, y) in enumerate(zip(a, b))]
        fmt = "%s[%d]"
    elif isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            missing = sorted(set(a) - set(b or {})) if isinstance(b, dict) else a
            return 0.0, "%s: keys differ (%s)" % (where or "output", _short(missing))
        items = [(k, a[k], b[k]) for k in a]
        fmt = "%s.%s" if where else "%s%s"
    else:
        return 0.0, "%s: cannot compare %r" % (where, a)
    worst, first = 0.0, None
    for k, x, y in items:
        d, why = compare(x, y, rtol, atol, fmt % (where, k))
        worst = max(worst, d)
        first = first or why
    return worst, first


def _short(v):
    s = json.dumps(v)
    return s if len(s) < 60 else s[:57] + "..."


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min", type=int, default=0, help="fail (exit 1) when fewer programs pass")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--only", help="comma-separated program names (without .py)")
    p.add_argument("--isolated", action="store_true", help="one process per program")
    p.add_argument("--timeout", type=float, default=300, help="seconds per driver process")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--dir", default=HERE, help="the programs' directory (default: this one)")
    o = p.parse_args()
    progs = programs(o.dir)
    if o.only:
        want = set(o.only.split(","))
        progs = [q for q in progs if os.path.basename(q)[:-3] in want]
        if len(progs) != len(want):
            p.error("unknown program in --only %s" % o.only)
    t0 = time.perf_counter()
    runs = {}
    if o.isolated:
        for lib in ("torch", "anygrad"):
            runs[lib] = {}
            for q in progs:
                runs[lib].update(run_driver(o.python, lib, [q], o.timeout))
    else:
        import threading
        th = {lib: threading.Thread(target=lambda lib=lib: runs.__setitem__(
            lib, run_driver(o.python, lib, progs, o.timeout))) for lib in ("torch", "anygrad")}
        for t in th.values():
            t.start()
        for t in th.values():
            t.join()
    rows, torch_failed = [], []
    for q in progs:
        name = os.path.basename(q)
        rtol, atol = tolerance(q)
        ref, got = runs["torch"].get(name, {}), runs["anygrad"].get(name, {})
        row = {"program": name[:-3], "rtol": rtol, "atol": atol, "ok": False, "max_diff": None,
               "why": None, "torch_s": ref.get("seconds"), "anygrad_s": got.get("seconds")}
        if not ref.get("ok"):
            row["why"] = "torch run failed: %s" % ref.get("error")
            torch_failed.append(name)
        elif not got.get("ok"):
            row["why"] = got.get("error")
        else:
            row["max_diff"], why = compare(ref["output"], got["output"], rtol, atol)
            row["ok"], row["why"] = why is None, why
        rows.append(row)
    passed = sum(r["ok"] for r in rows)
    w = max([len(r["program"]) for r in rows] + [7])
    print("%-*s  %-4s  %-9s  %s" % (w, "program", "ok", "max diff", "why not"))
    for r in rows:
        md = "-" if r["max_diff"] is None else "%.2g" % r["max_diff"]
        print("%-*s  %-4s  %-9s  %s" % (w, r["program"], "yes" if r["ok"] else "no", md, r["why"] or ""))
    print("%d of %d programs run unchanged on anygrad and match torch (minimum %d); %.1f s"
          % (passed, len(rows), o.min, time.perf_counter() - t0))
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"passed": passed, "total": len(rows), "min": o.min, "programs": rows,
                       "outputs": {lib: {k: v.get("output") for k, v in r.items()}
                                   for lib, r in runs.items()}}, f, indent=1)
    if torch_failed:
        print("PyTorch itself failed: %s" % ", ".join(torch_failed))
        return 2
    return 0 if passed >= o.min else 1


if __name__ == "__main__":
    sys.exit(main())
