#!/usr/bin/env python3
"""`anygrad bench` reports only what ran and was right (docs/cli.md,
docs/performance.md): an op the device refuses is an `unsupported` row with
the library's message (exit 0), an op that fails or gives a wrong result an
`error` row (exit 1), and neither carries a time, in the table, CSV or JSON.
The refusing device is the minihost module of tests/extbackend (no relu,
gelu, softmax or matmul; its folder in AG_BENCH_MINIHOST); the failure a
memory cap (AG_ALLOC_CONF) the output cannot fit in; the wrong result
AG_FAULT's row fault. One case per CTest test:

    bench_truth_cli.py ANYGRAD_BINARY WORK_DIR CASE

Exit 0 pass, 77 skipped, anything else fails."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_case import SKIP, check, expect, fresh, main, run, setup  # noqa: E402

BIN, WORK, CASE = setup(sys.argv)
THREADS = {"AG_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
SMALL = ["--reps", "1", "--numel", "4096", "--matmul", "16"]


def minihost_env(**extra):
    where = os.environ.get("AG_BENCH_MINIHOST", "")
    if not os.path.exists(os.path.join(where, "libanygrad-minihost.so")):
        print("skip: the minihost module is not built (tests/registry.cmake)")
        sys.exit(SKIP)
    return dict(THREADS, AG_BACKEND_PATH=where, AG_BACKENDS="cpu,minihost", **extra)


def rows_of(out):
    try:
        return {r["op"]: r for r in json.loads(out)}
    except ValueError:
        check(False, f"bench --json printed no JSON: {out[-1500:]!r}")


def table_line(out, op):
    lines = [line for line in out.splitlines() if line.split()[:1] == [op]]
    check(len(lines) == 1, f"no single table line for {op}: {out!r}")
    return lines[0]


def untimed(r):
    for k in ("overhead_ns", "large_ms", "gbps", "gflops"):
        check(r.get(k) is None, f"{r['op']}: a row that is not ok has {k} = {r.get(k)!r}")


def timed(r):
    check(r["status"] == "ok" and r["error"] is None, f"{r['op']} is not ok: {r}")
    check(r["large_ms"] > 0 and r["overhead_ns"] > 0, f"{r['op']}: no times: {r}")


def case_refused():
    """Ops a device does not run are `unsupported` with the library's
    message, not a time; the ops it runs are timed; exit 0."""
    fresh()
    env = minihost_env()
    ops = ["--ops", "add,sum,relu,softmax,matmul"]
    out, _ = expect(["bench", "--backend", "minihost"] + ops + SMALL + ["--json"], 0, env=env)
    rows = rows_of(out)
    for op in ("relu", "softmax", "matmul"):
        r = rows[op]
        check(r["status"] == "unsupported", f"{op} on minihost: {r}")
        check("AG_ERR_UNSUPPORTED" in r["error"] and "not supported on minihost:0" in r["error"],
              f"{op}: the library's message is missing: {r['error']!r}")
        untimed(r)
    for op in ("add", "sum"):
        timed(rows[op])
    out, _ = expect(["bench", "--backend", "minihost"] + ops + SMALL, 0, env=env)
    line = table_line(out, "relu")
    check("unsupported" in line and "not supported on minihost:0" in line, f"table: {line!r}")
    check("0.000" not in line, f"table: a time on a refused row: {line!r}")
    check("unsupported" not in table_line(out, "add"), f"table: add is timed: {out!r}")
    out, _ = expect(["bench", "--backend", "minihost", "--ops", "relu,add"] + SMALL + ["--csv"], 0, env=env)
    head = out.splitlines()[0].split(",")
    check(head[-2:] == ["status", "error"], f"csv header: {head}")
    relu = [line for line in out.splitlines() if line.startswith("relu,")]
    check(len(relu) == 1 and ",,,,unsupported," in relu[0], f"csv: {out!r}")


def case_failing():
    """An op whose launch fails (its output does not fit under a memory cap
    its two operands fit under) is an `error` row with the status, exit 1."""
    fresh()
    env = dict(THREADS, AG_BACKENDS="cpu", AG_ALLOC_CONF="memory_cap_mb:40")
    args = ["bench", "--backend", "cpu", "--ops", "add", "--reps", "1", "--numel", "4194304"]
    out, err = expect(args + ["--json"], 1, "AG_ERR_OOM", env=env)
    r = rows_of(out)["add"]
    check(r["status"] == "error", f"add under the cap: {r}")
    check("AG_ERR_OOM" in r["error"] and "memory cap" in r["error"], f"add: the message: {r['error']!r}")
    untimed(r)
    out, _ = expect(args, 1, "add on cpu:0", env=env)
    line = table_line(out, "add")
    check(" error " in line and "AG_ERR_OOM" in line, f"table: {line!r}")
    # the same run without the cap is timed, exit 0
    out, _ = expect(args + ["--json"], 0, env=dict(THREADS, AG_BACKENDS="cpu"))
    timed(rows_of(out)["add"])


def case_wrong_result():
    """A result that differs from the CPU's beyond the conformance
    tolerance (AG_FAULT moves the first element of ag_add's output on
    minihost:0) is an `error` row naming the element, exit 1; an op the
    fault does not touch is still timed."""
    fresh()
    env = minihost_env(AG_FAULT="ag_add:minihost:0:row")
    out, err = expect(["bench", "--backend", "minihost", "--ops", "add,mul"] + SMALL + ["--json"], 1,
                      "wrong result", env=env)
    rows = rows_of(out)
    r = rows["add"]
    check(r["status"] == "error", f"add with a fault: {r}")
    check("wrong result against the CPU" in r["error"] and "element 0" in r["error"] and "nmse" in r["error"],
          f"add: the message: {r['error']!r}")
    untimed(r)
    timed(rows["mul"])
    out, _ = expect(["bench", "--backend", "minihost", "--ops", "add"] + SMALL, 1, env=env)
    check("error" in table_line(out, "add"), f"table: {out!r}")


def case_device_limit():
    """A size beyond a device limit (a Vulkan device whose largest buffer is
    4 MiB, AG_VULKAN_TEST) is an error row, not a time of nothing."""
    fresh()
    rc, out, _ = run(["info"], env=dict(THREADS))
    if "vulkan:0" not in out:
        print("skip: no vulkan:0")
        sys.exit(SKIP)
    env = dict(THREADS, AG_VULKAN_TEST="max_buffer_size:4194304")
    out, _ = expect(["bench", "--backend", "vulkan:0", "--ops", "add", "--reps", "1", "--numel", "4194304",
                     "--json"], 1, "maxBufferSize", env=env, timeout=120)
    r = rows_of(out)["add"]
    check(r["status"] == "error" and "maxBufferSize" in r["error"], f"add beyond maxBufferSize: {r}")
    untimed(r)


main(globals())
