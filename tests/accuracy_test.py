#!/usr/bin/env python3
"""`anygrad check --accuracy` as a user runs it (docs/conformance.md): the JSON
document against a hand-written schema, the dumped inputs against the
reported ULPs, and the HTML page (--report) rendered in headless Chromium.

usage: accuracy_test.py ANYGRAD_BIN WORKDIR SRCDIR CASE [BACKENDS]
Exit 0 pass, 1 fail, 77 skip (no chromium for the browser case)."""
import copy
import glob
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

BIN, WORK, SRC, CASE = sys.argv[1:5]
BACKENDS = sys.argv[5] if len(sys.argv) > 5 else "cpu"
SKIP = 77
I64_MAX = 2**63 - 1


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def run(args, timeout=600):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout)


# ---- a small JSON schema validator: type, enum, properties, required,
# additionalProperties, items, minimum/maximum; type may be a list ----
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, TYPES[t])


def validate(v, s, where="$"):
    """Errors of v against schema s, as a list of strings."""
    ts = s.get("type")
    if ts is not None:
        ts = ts if isinstance(ts, list) else [ts]
        if not any(is_type(v, t) for t in ts):
            return [f"{where}: {type(v).__name__} is not {'/'.join(ts)}"]
    errs = []
    if "enum" in s and v not in s["enum"]:
        errs.append(f"{where}: {v!r} not in {s['enum']}")
    if is_type(v, "number") and v is not None:
        if "minimum" in s and v < s["minimum"]:
            errs.append(f"{where}: {v} < {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            errs.append(f"{where}: {v} > {s['maximum']}")
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                errs.append(f"{where}: missing '{k}'")
        for k, x in v.items():
            if k in props:
                errs += validate(x, props[k], f"{where}.{k}")
            elif s.get("additionalProperties") is False:
                errs.append(f"{where}: unexpected '{k}'")
    if isinstance(v, list) and "items" in s:
        for i, x in enumerate(v):
            errs += validate(x, s["items"], f"{where}[{i}]")
    return errs


ULPS = {"type": ["integer", "null"], "minimum": 0, "maximum": I64_MAX}
COUNT = {"type": "integer", "minimum": 0}
DIST = {"type": "object", "additionalProperties": False,
        "required": ["n", "median", "p99", "max", "nan_mismatch", "exact_n", "exact_match", "exact_rate"],
        "properties": {"n": COUNT, "median": ULPS, "p99": ULPS, "max": ULPS, "nan_mismatch": COUNT,
                       "exact_n": COUNT, "exact_match": COUNT,
                       "exact_rate": {"type": ["number", "null"], "minimum": 0, "maximum": 1}}}
CELL = {"type": "object", "additionalProperties": False, "required": ["op", "device", "dtype", "result", "accuracy"],
        "properties": {"op": {"type": "string"}, "device": {"type": "string"},
                       "dtype": {"enum": ["f32", "f16", "bf16", "i32", "f64", "i64", "bool", "u8"]},
                       "result": {"enum": ["pass", "FAIL", "unsup", "-"]},
                       "accuracy": {"type": "object", "additionalProperties": False,
                                    "required": ["shapes", "adversarial"],
                                    "properties": {"shapes": DIST, "adversarial": DIST}}}}
SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["version", "seed", "threads", "accuracy", "skipped", "cells", "pass", "fail", "unsupported",
                       "failures"],
          "properties": {"version": {"type": "string"}, "seed": COUNT, "threads": {"type": "integer", "minimum": 1},
                         "accuracy": {"enum": [True]},
                         "skipped": {"type": "array", "items": {"type": "object", "required": ["backend", "reason"]}},
                         "cells": {"type": "array", "items": CELL}, "pass": COUNT, "fail": COUNT,
                         "unsupported": COUNT, "failures": {"type": "array", "items": {"type": "string"}}}}


def consistent(doc):
    """Relations the schema cannot say; returns a list of errors."""
    errs = []
    for c in doc["cells"]:
        name = f"{c['op']} {c['dtype']} {c['device']}"
        for part in ("shapes", "adversarial"):
            d = c["accuracy"][part]
            if d["n"] == 0:
                if d["median"] is not None or d["max"] is not None:
                    errs.append(f"{name} {part}: statistics without elements")
            elif not (d["median"] <= d["p99"] <= d["max"]):
                errs.append(f"{name} {part}: median {d['median']} p99 {d['p99']} max {d['max']} out of order")
            if d["nan_mismatch"] > d["n"] or (d["nan_mismatch"] > 0) != (d["max"] == I64_MAX):
                errs.append(f"{name} {part}: nan_mismatch {d['nan_mismatch']} against max {d['max']}")
            if d["exact_match"] > d["exact_n"]:
                errs.append(f"{name} {part}: more matches than elements")
        if c["result"] == "pass" and c["dtype"] in ("f32", "f16", "bf16", "f64"):
            if c["accuracy"]["shapes"]["n"] + c["accuracy"]["shapes"]["exact_n"] == 0 and \
                    not c["op"].startswith(("rand", "dropout")):
                errs.append(f"{name}: a passing cell with no recorded element")
    return errs


def case_schema():
    """The CI command: every forward op, dtype and the listed backends, one
    JSON document that satisfies the schema and its own relations; the
    validator rejects broken documents (so this check can fail)."""
    p = run(["check", "--accuracy", "--backend", BACKENDS, "--json"])
    check(p.returncode in (0, 1), f"check --accuracy: exit {p.returncode}: {p.stderr[-2000:]}")
    doc = json.loads(p.stdout)
    errs = validate(doc, SCHEMA) + consistent(doc)
    check(not errs, "schema: " + "; ".join(errs[:10]))
    devs = {c["device"] for c in doc["cells"]}
    check(len(devs) == len(BACKENDS.split(",")), f"devices {sorted(devs)} for --backend {BACKENDS}")
    # every table transcendental on every device measured its adversarial inputs in f32
    for dev in devs:
        exp = [c for c in doc["cells"] if c["op"] == "exp" and c["dtype"] == "f32" and c["device"] == dev]
        check(exp and (exp[0]["result"] == "unsup" or exp[0]["accuracy"]["adversarial"]["n"] >= 40),
              f"exp f32 on {dev}: no adversarial elements")
        eq = [c for c in doc["cells"] if c["op"] == "eq" and c["dtype"] == "f32" and c["device"] == dev]
        check(eq and eq[0]["accuracy"]["shapes"]["exact_n"] > 0, f"eq f32 on {dev}: no exact-match count")
    # the validator itself fails on broken documents
    bad = copy.deepcopy(doc)
    bad["cells"][0]["accuracy"]["shapes"]["median"] = "3"
    check(validate(bad, SCHEMA), "validator accepted a string median")
    bad = copy.deepcopy(doc)
    del bad["cells"][0]["accuracy"]["adversarial"]
    check(validate(bad, SCHEMA), "validator accepted a cell without adversarial")
    bad = copy.deepcopy(doc)
    f = next(c for c in bad["cells"] if c["accuracy"]["shapes"]["n"] > 0)
    f["accuracy"]["shapes"]["median"] = f["accuracy"]["shapes"]["max"] + 1
    check(consistent(bad), "relations accepted median > max")
    # without --accuracy the document has no accuracy members
    p = run(["check", "--backend", "cpu", "--ops", "exp", "--dtype", "f32", "--json"])
    plain = json.loads(p.stdout)
    check(plain["accuracy"] is False and "accuracy" not in plain["cells"][0], "accuracy members without --accuracy")
    print(f"{len(doc['cells'])} cells on {sorted(devs)}")


def ulp(dt, a, b):
    """ULP distance in dt's own bit patterns (tools/ulp.h)."""
    if math.isnan(a) or math.isnan(b):
        return 0 if math.isnan(a) and math.isnan(b) else I64_MAX
    def key(x):
        if dt == "f64":
            bits = struct.unpack("<q", struct.pack("<d", x))[0]
            m = bits & 0x7FFFFFFFFFFFFFFF
            return -m if bits < 0 else m
        if dt == "f32":
            bits = struct.unpack("<I", struct.pack("<f", x))[0]
        elif dt == "f16":
            bits = struct.unpack("<H", struct.pack("<e", x))[0] << 16
        else:  # bf16: the upper half of an f32 that holds the value exactly
            bits = struct.unpack("<I", struct.pack("<f", x))[0] & 0xFFFF0000
        m = (bits & 0x7FFFFFFF) >> (16 if dt in ("f16", "bf16") else 0)
        return -m if bits >> 31 else m
    return abs(key(a) - key(b))


def round_to(dt, x):
    if dt == "f64" or math.isnan(x) or math.isinf(x):
        return x
    if dt == "f32":
        try:
            return struct.unpack("<f", struct.pack("<f", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    if dt == "f16":
        try:
            return struct.unpack("<e", struct.pack("<e", x))[0]
        except OverflowError:
            return math.copysign(math.inf, x)
    raise ValueError("bf16 references are not rounded here (the dump case uses f32 and f16)")


def read_dump(path):
    with open(path, "rb") as f:
        head = json.loads(f.readline())
        data = f.read()
    vals = struct.unpack(f"<{len(data) // 8}d", data)
    ni, no = head["n_in"], head["n_out"]
    check(len(vals) == ni + 2 * no, f"{path}: {len(vals)} doubles for n_in {ni} n_out {no}")
    return head, vals[:ni], vals[ni:ni + no], vals[ni + no:]


def case_dump():
    """--dump-inputs writes every case of exp, sum and softmax, and the ULP
    distances recomputed from the files give the reported maxima."""
    d = os.path.join(WORK, "dump")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    p = run(["check", "--dump-inputs", d, "--backend", "cpu", "--ops", "exp,log1p,sum,softmax", "--dtype", "f32,f16",
             "--json"])
    check(p.returncode == 0, f"check --dump-inputs: {p.returncode} {p.stderr[-2000:]}")
    doc = json.loads(p.stdout)
    files = sorted(glob.glob(os.path.join(d, "*.bin")))
    check(len(files) >= 16, f"only {len(files)} dump files")
    worst = {}
    for path in files:
        head, x, ref, out = read_dump(path)
        dt = head["dtype"]
        part = "adversarial" if head["adversarial"] else "shapes"
        for r, o in zip(ref, out):
            k = (head["op"], dt, part)
            worst[k] = max(worst.get(k, 0), ulp(dt, o, round_to(dt, r)))
    for c in doc["cells"]:
        for part in ("shapes", "adversarial"):
            k = (c["op"], c["dtype"], part)
            if c["accuracy"][part]["n"] == 0:
                continue
            check(k in worst, f"no dump for {k}")
            check(worst[k] == c["accuracy"][part]["max"], f"{k}: max {c['accuracy'][part]['max']} reported, "
                                                           f"{worst[k]} from the dump")
    p = run(["check", "--dump-inputs", os.path.join(WORK, "no-such-dir"), "--backend", "cpu", "--ops", "exp"])
    check(p.returncode == 2 and "not an existing directory" in p.stderr, f"missing dump dir: {p.returncode}")
    print(f"{len(files)} dump files agree with the JSON")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def render(exe, html_path, shot=None):
    prof = tempfile.mkdtemp(prefix="agacc-chromium-")
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={prof}", "--enable-logging=stderr", "--v=0",
             "--window-size=1100,1300"]
    url = "file://" + os.path.abspath(html_path)
    try:
        p = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=180)
        check(p.returncode == 0, f"chromium --dump-dom: {p.returncode} {p.stderr[-3000:]}")
        console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
        if shot:
            q = subprocess.run(flags + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
            check(q.returncode == 0 and os.path.exists(shot), f"chromium --screenshot: {q.stderr[-3000:]}")
        return p.stdout, console
    finally:
        shutil.rmtree(prof, ignore_errors=True)


REPORT_OPS = "exp,log,sin,tanh,erf,gelu,sigmoid,add,div,eq,sum,mean,softmax,log_softmax,cast"


def write_report():
    page = os.path.join(WORK, "conformance.html")
    if os.path.exists(page):
        os.remove(page)
    p = run(["check", "--report", page, "--backend", BACKENDS, "--ops", REPORT_OPS, "--dtype", "f32,f16,bf16,i32"])
    check(p.returncode in (0, 1) and os.path.exists(page), f"check --report: {p.returncode} {p.stderr[-2000:]}")
    check("wrote" in p.stdout and "accuracy (ULPs" in p.stdout, "no accuracy table or report line")
    with open(page, encoding="utf-8") as f:
        html = f.read()
    check(not re.search(r"<(script|img|link|iframe)[^>]*\b(src|href)\s*=", html, re.I), "external resource")
    check(not re.findall(r"https?://", html), "a URL in the page")
    check(html.count("<script") == 2, "expected the data and the code script only")
    return page, html


def case_report():
    """--report writes a self-contained page whose data is the --json document."""
    page, html = write_report()
    m = re.search(r'<script id="agdata" type="application/json">(.*?)</script>', html, re.S)
    check(m, "no data element")
    doc = json.loads(m.group(1).replace("<\\/", "</"))
    errs = validate(doc, SCHEMA) + consistent(doc)
    check(not errs, "page data: " + "; ".join(errs[:5]))
    p = run(["check", "--report", "", "--backend", "cpu"])
    check(p.returncode == 2, f"empty --report: {p.returncode}")
    p = run(["check", "--report", os.path.join(WORK, "no", "such", "dir.html"), "--backend", "cpu", "--ops", "exp",
             "--dtype", "f32"])
    check(p.returncode == 1 and "cannot write" in p.stderr, f"unwritable --report: {p.returncode} {p.stderr}")


def case_browser():
    """The page renders in headless Chromium without console errors, both
    matrices draw a cell per measured (op, dtype, device); a page with
    broken data says so. The screenshot is copied to AG_CONFORMANCE_SCREENSHOT."""
    page, html = write_report()
    exe = chromium()
    if not exe:
        print("chromium is not installed (scripts/deps.sh --test installs it)")
        sys.exit(SKIP)
    m = re.search(r'<script id="agdata" type="application/json">(.*?)</script>', html, re.S)
    doc = json.loads(m.group(1).replace("<\\/", "</"))
    want = sum(1 for c in doc["cells"] if c["result"] not in ("-", "unsup") and
               (c["accuracy"]["shapes"]["n"] or c["accuracy"]["shapes"]["exact_n"]))
    shot = os.path.join(WORK, "conformance.png")
    dom, console = render(exe, page, shot)
    errors = [l for l in console if re.search(r"error|uncaught", l, re.I)]
    check(not errors, "console errors:\n" + "\n".join(errors))
    st = re.search(r'<body[^>]*data-report-status="([^"]*)"', dom)
    check(st and st.group(1).startswith("ok"), f"status: {st.group(1) if st else None}")
    drawn = dict(re.findall(r'<table[^>]*data-part="(\w+)"[^>]*data-drawn="(\d+) cells"', dom))
    check(int(drawn.get("shapes", -1)) == want, f"shape matrix drew {drawn.get('shapes')} cells, want {want}")
    check(int(drawn.get("adversarial", 0)) > 0, "adversarial matrix drew nothing")
    check(os.path.getsize(shot) > 20000, "screenshot suspiciously small")
    dest = os.environ.get("AG_CONFORMANCE_SCREENSHOT")
    if dest:
        shutil.copyfile(shot, dest)
    broken = html.replace('"cells": [', '"cellz": [', 1)
    bpath = os.path.join(WORK, "broken.html")
    with open(bpath, "w", encoding="utf-8") as f:
        f.write(broken)
    dom, console = render(exe, bpath)
    check(not re.search(r'data-report-status="ok', dom), "a page with broken data still reported ok")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    CASES[CASE]()
    print("ok")
