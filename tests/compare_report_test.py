#!/usr/bin/env python3
"""`anygrad compare --report` (docs/compare.md): a self-contained page whose
data is the --json document, with the per-step curves and the bisection
table, rendered in headless Chromium.

usage: compare_report_test.py ANYGRAD_BIN WORKDIR CASE
CASE: report (the page and its data; bad paths) or browser (Chromium).
The run is CPU against opencl:0 (else gpuemu:0, else a second CPU replica)
with a defect planted on the other device (AG_FAULT), bisected at step 2.
Exit 0 pass, 1 fail, 77 skip (no chromium for the browser case)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN, WORK, CASE = sys.argv[1:4]
SKIP = 77
DATA_RE = r'<script id="agdata" type="application/json">(.*?)</script>'


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def run(args, fault=None, timeout=300):
    env = dict(os.environ)
    env.pop("AG_FAULT", None)
    if fault:
        env["AG_FAULT"] = fault
    p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout, env=env)
    print("$", ("AG_FAULT=%s " % fault if fault else "") + " ".join(args), "->", p.returncode)
    return p


def other_device():
    for d in ("opencl:0", "gpuemu:0"):
        p = run(["compare", "--devices", "cpu," + d, "--steps", "1", "--batch", "4"])
        if p.returncode in (0, 1):
            return d
    return None


def write_page():
    """The page and the JSON of one run; returns (html, doc, device)."""
    dev = other_device()
    devices = "cpu," + dev if dev else "cpu,cpu"
    fault = "ag_tanh:%s:row" % dev if dev else None
    page, js = os.path.join(WORK, "compare.html"), os.path.join(WORK, "compare.json")
    for f in (page, js):
        if os.path.exists(f):
            os.remove(f)
    p = run(["compare", "--devices", devices, "--steps", "8", "--bisect-step", "6", "--report", page, "--json", js],
            fault)
    check(p.returncode in (0, 1) and os.path.exists(page), "compare --report: %d %s" % (p.returncode, p.stderr[-2000:]))
    with open(page, encoding="utf-8") as f:
        html = f.read()
    with open(js, encoding="utf-8") as f:
        doc = json.load(f)
    return html, doc, dev


def page_data(html):
    m = re.search(DATA_RE, html, re.S)
    check(m, "no data element")
    check("<" not in m.group(1), "a raw '<' inside the data element")
    return json.loads(m.group(1))


def case_report():
    html, doc, dev = write_page()
    check(not re.search(r"<(script|img|link|iframe)[^>]*\b(src|href)\s*=", html, re.I), "external resource")
    # the SVG namespace name is an identifier, never fetched
    check(not re.findall(r"https?://(?!www\.w3\.org/2000/svg')", html), "a URL in the page")
    check(html.count("<script") == 2, "expected the data and the code script only")
    data = page_data(html)
    check(data == doc, "the page's data differs from the --json document")
    check(len(data["per_step"]) == 6, "the run should end at the bisected step 6: %d" % len(data["per_step"]))
    ops = data["bisect"]["devices"][0]["ops"]
    check(ops and any("<-" in o["shapes"] for o in ops), "no shapes with '<-' (the escaping is not exercised)")
    if dev:
        check(ops[0]["op"] == "ag_tanh", "the planted op is not first: %s" % ops[0]["op"])
    # Bad report paths fail before any training.
    p = run(["compare", "--devices", "cpu,cpu", "--report", os.path.join(WORK, "no", "such", "dir.html")])
    check(p.returncode == 2 and "--report" in p.stderr and "step" not in p.stdout, "unwritable --report: %d %s" %
          (p.returncode, p.stderr))
    p = run(["compare", "--devices", "cpu,cpu", "--report", ""])
    check(p.returncode == 2, "empty --report: %d" % p.returncode)
    print("ok")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def render(exe, html_path, shot=None):
    prof = tempfile.mkdtemp(prefix="agcmp-chromium-")
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={prof}", "--enable-logging=stderr", "--v=0",
             "--window-size=1150,1250"]
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


def case_browser():
    """Both charts draw a line per series, the bisection table has a row per
    listed op with the planted op first; strings from the data stay text;
    a page with broken data says so. The screenshot is copied to
    AG_COMPARE_SCREENSHOT."""
    html, doc, dev = write_page()
    exe = chromium()
    if not exe:
        print("chromium is not installed (scripts/deps.sh --test installs it)")
        sys.exit(SKIP)
    page = os.path.join(WORK, "compare.html")
    shot = os.path.join(WORK, "compare.png")
    dom, console = render(exe, page, shot)
    errors = [l for l in console if re.search(r"error|uncaught", l, re.I)]
    check(not errors, "console errors:\n" + "\n".join(errors))
    st = re.search(r'<body[^>]*data-report-status="([^"]*)"', dom)
    nops = min(30, len(doc["bisect"]["devices"][0]["ops"]))
    check(st and st.group(1) == "ok 6 steps %d ops" % nops, f"status: {st.group(1) if st else None}")
    drawn = re.findall(r'<svg[^>]*data-title="([^"]*)"[^>]*data-drawn="(\d+)"', dom)
    check(len(drawn) == 2, f"charts: {drawn}")
    check(int(drawn[0][1]) == 2, f"loss chart drew {drawn[0][1]} lines, want 2")
    check(int(drawn[1][1]) >= 1, f"divergence chart drew {drawn[1][1]} lines")
    rows = re.findall(r'<tr( class="top")?><td>(\d+)</td><td class="l">([^<]*)</td>', dom)
    check(len(rows) == nops, f"bisection table has {len(rows)} rows, want {nops}")
    if dev:
        check(rows[0][0] and rows[0][2] == "ag_tanh", f"first row {rows[0]}")
    check(os.path.getsize(shot) > 20000, "screenshot suspiciously small")
    dest = os.environ.get("AG_COMPARE_SCREENSHOT")
    if dest:
        shutil.copyfile(shot, dest)
    # Markup in the data (an op name, a device, a parameter) is shown as text.
    evil = '<img src=x onerror="document.body.setAttribute(\'data-pwned\',1)"></script><b>x'
    bad = json.loads(json.dumps(doc))
    bad["bisect"]["devices"][0]["ops"][0]["op"] = evil
    bad["devices"][1]["worst_param"] = evil
    bad["reference"] = evil
    enc = json.dumps(bad).replace("<", "\\u003c")
    m = re.search(DATA_RE, html, re.S)
    ipath = os.path.join(WORK, "inject.html")
    with open(ipath, "w", encoding="utf-8") as f:
        f.write(html[:m.start(1)] + enc + html[m.end(1):])
    dom, _ = render(exe, ipath)
    check(re.search(r'data-report-status="ok', dom), "the page with markup in its strings did not draw")
    check(not re.search(r"<body[^>]*data-pwned", dom) and "<img" not in dom, "markup from the data became elements")
    check("&lt;img src=x" in dom, "the op name is not shown as text")
    # Broken data: the page says so instead of drawing.
    bpath = os.path.join(WORK, "broken.html")
    with open(bpath, "w", encoding="utf-8") as f:
        f.write(html.replace('"per_step": [', '"per_stepz": [', 1))
    dom, _ = render(exe, bpath)
    check(not re.search(r'data-report-status="ok', dom), "a page with broken data still reported ok")
    check("could not be drawn" in dom, "no message on the broken page")
    print("ok")


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    {"report": case_report, "browser": case_browser}[CASE]()
