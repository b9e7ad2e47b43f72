"""Runs compat programs one after another in this process, as `python3
program.py` would (runpy, __name__ == "__main__", the program's own
directory first on sys.path), and appends one JSON line per program to a
file: {"program", "event": "start"} before it, then {"program", "event":
"done", "ok", "output" (the last JSON line it printed), "error",
"seconds"}. One process per library saves an interpreter and a torch
import per program; run_compat.py restarts it after a crash.

After each program the driver checks which library `import torch` gave
(LIBRARY: "torch" or "anygrad"): a run that was meant for anygrad but
loaded PyTorch (the import hook not on PYTHONPATH) fails instead of
comparing torch with itself.

Usage: _driver.py LIBRARY RESULTS.jsonl PROGRAM.py [PROGRAM.py ...]"""
import contextlib
import io
import json
import os
import runpy
import sys
import time
import traceback


def _error(e, path):
    """'Type: message (at program.py:LINE)', the program's own deepest frame."""
    where = ""
    for fr in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(fr.filename) == path:
            where = " (at %s:%d)" % (os.path.basename(path), fr.lineno)
    msg = str(e).strip().splitlines()
    return "%s: %s%s" % (type(e).__name__, msg[0] if msg else "", where)


def _wrong_library(expect):
    """Why the torch the program imported is not `expect`'s, or None."""
    t = sys.modules.get("torch")
    if t is None:
        return None  # the program did not import it
    real = "torch._C" in sys.modules
    if expect == "anygrad" and (real or not hasattr(t, "_anygrad_module")):
        return "`import torch` loaded PyTorch, not anygrad (is the shim on PYTHONPATH?)"
    if expect == "torch" and not real:
        return "`import torch` did not load PyTorch"
    return None


def main():
    expect, results, programs = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(results, "a") as log:
        def emit(rec):
            log.write(json.dumps(rec) + "\n")
            log.flush()

        for prog in programs:
            path = os.path.abspath(prog)
            name = os.path.basename(path)
            emit({"program": name, "event": "start"})
            buf = io.StringIO()
            rec = {"program": name, "event": "done", "ok": False, "output": None, "error": None}
            t0 = time.perf_counter()
            sys.path.insert(0, os.path.dirname(path))
            argv, sys.argv = sys.argv, [path]
            try:
                with contextlib.redirect_stdout(buf):
                    runpy.run_path(path, run_name="__main__")
                lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("{")]
                wrong = _wrong_library(expect)
                if wrong:
                    rec["error"] = wrong
                elif not lines:
                    rec["error"] = "printed no JSON line"
                else:
                    rec["output"] = json.loads(lines[-1])
                    rec["ok"] = True
            except BaseException as e:  # noqa: B902 (SystemExit and all: the next program runs)
                rec["error"] = _error(e, path)
            finally:
                sys.argv = argv
                sys.path.remove(os.path.dirname(path))
            rec["seconds"] = round(time.perf_counter() - t0, 3)
            emit(rec)


if __name__ == "__main__":
    main()
