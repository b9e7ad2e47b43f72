#!/usr/bin/env python3
"""The HTML run report (docs/report.md) as a user gets it: `anygrad train
--report`, `anygrad report TRACE`, rendered in headless Chromium.

usage: report_test.py ANYGRAD_BIN WORKDIR SRCDIR CASE
Exit 0 pass, 1 fail, 77 skip (no chromium for the browser case)."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN, WORK, SRC, CASE = sys.argv[1:5]
SKIP = 77
PLOTS = ("loss", "steptime", "memtime", "memsteps", "segments", "syncs")
TRAIN = ["train", "--model", "gpt", "--steps", "40", "--batch", "8", "--log-every", "10", "--device", "cpu",
         "--samples", "0", "--layers", "1", "--embd", "32"]


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def run(args, **kw):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=600, **kw)


def path(name):
    return os.path.join(WORK, name)


def train_with_report():
    """One short GPT run writing the report, the trace and a checkpoint;
    always fresh (pages left in the work directory by an earlier build would
    test that build)."""
    for name in ("run.html", "trace.json", "from_trace.html", "run.png", "from_trace.png"):
        if os.path.exists(path(name)):
            os.remove(path(name))
    p = run(TRAIN + ["--report", path("run.html"), "--trace", path("trace.json"), "--out", path("ck.safetensors")])
    check(p.returncode == 0, f"train --report: {p.returncode} {p.stdout[-2000:]} {p.stderr[-2000:]}")
    check("charlm: report" in p.stdout, "no report line in the output")


def self_contained(html_path):
    with open(html_path, encoding="utf-8") as f:
        html = f.read()
    # Nothing to fetch: no external scripts, styles, images or links. (The
    # SVG namespace URI is a name, never loaded.)
    check(not re.search(r"<(script|img|link|iframe)[^>]*\b(src|href)\s*=", html, re.I),
          f"{html_path}: references an external resource")
    urls = set(re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"'<>)]*", html))
    urls.discard("http://www.w3.org/2000/svg")
    check(not urls, f"{html_path}: URLs in the page: {sorted(urls)[:5]}")
    check(html.count("<script") == 2, f"{html_path}: expected the data and the code script only")
    return html


def case_cli():
    """train --report and report TRACE write self-contained pages; report
    refuses what is not a trace, with the exit codes of every subcommand."""
    train_with_report()
    html = self_contained(path("run.html"))
    check('"format":"anygrad-report"' in html, "run.html: no report data")
    for series in ("loss (last batch)", "held-out loss"):
        check(series in html, f"run.html: no '{series}' series")
    p = run(["report", path("trace.json"), "-o", path("from_trace.html")])
    check(p.returncode == 0, f"report: {p.returncode} {p.stderr}")
    t = self_contained(path("from_trace.html"))
    check("anygrad_report" in t and "held-out loss" in t, "from_trace.html: the trace's report data is missing")
    # With an allocator snapshot given (ag_memory_snapshot_json's format: the
    # trace's own snapshot_end, cut out of the report data).
    with open(path("trace.json")) as f:
        import json
        tr = json.load(f)
    snap = tr["otherData"]["anygrad_report"]["snapshot_end"]
    check(snap and snap["segments"], "trace: no allocator snapshot in the report data")
    with open(path("snap.json"), "w") as f:
        json.dump(snap, f)
    p = run(["report", "--memory", path("snap.json"), path("trace.json"), "--out", path("with_snap.html")])
    check(p.returncode == 0, f"report --memory: {p.returncode} {p.stderr}")
    self_contained(path("with_snap.html"))
    # Errors: missing file (runtime, 1), not a trace (1), usage (2).
    with open(path("not_trace.json"), "w") as f:
        f.write('{"hello": 1}')
    for args, code, text in [
        (["report", path("nope.json")], 1, "cannot open"),
        (["report", path("not_trace.json")], 1, "not a Chrome trace"),
        (["report", path("trace.json"), "--memory", path("not_trace.json")], 1, "not an allocator snapshot"),
        (["report"], 2, "no trace file"),
        (["report", "a.json", "b.json"], 2, "unexpected argument"),
        (["report", "a.json", "--bogus"], 2, "unknown option"),
        (["report", "a.json", "--out"], 2, "needs a value"),
        (["train", "--report", ""], 2, "--report"),
    ]:
        p = run(args)
        check(p.returncode == code and text in p.stderr, f"{args}: exit {p.returncode}, stderr {p.stderr!r}")
    check(not os.path.exists(path("nope.html")), "an output for a failed input")
    p = run(["report", "--help"])
    check(p.returncode == 0 and "--memory" in p.stdout, "report --help")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def render(exe, html_path, shot=None):
    """--dump-dom of the page after its script ran; console messages from
    --enable-logging. Returns (dom, console lines)."""
    prof = tempfile.mkdtemp(prefix="agreport-chromium-")
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={prof}", "--enable-logging=stderr", "--v=0",
             "--window-size=1280,2000"]
    url = "file://" + os.path.abspath(html_path)
    try:
        p = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=180)
        check(p.returncode == 0, f"chromium --dump-dom: {p.returncode} {p.stderr[-3000:]}")
        console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
        if shot:
            q = subprocess.run(flags + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
            check(q.returncode == 0 and os.path.exists(shot), f"chromium --screenshot: {q.stderr[-3000:]}")
            console += [l for l in q.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
        return p.stdout, console
    finally:
        shutil.rmtree(prof, ignore_errors=True)


def check_dom(dom, what):
    m = re.search(r'<body[^>]*data-report-status="([^"]*)"', dom)
    check(m, f"{what}: the page's script did not finish (no data-report-status)")
    check(m.group(1).startswith("ok"), f"{what}: {m.group(1)}")
    drawn = dict(re.findall(r'<svg[^>]*data-plot="(\w+)"[^>]*data-drawn="([^"]*)"', dom))
    drawn.update({k: v for v, k in re.findall(r'<svg[^>]*data-drawn="([^"]*)"[^>]*data-plot="(\w+)"', dom)})
    for plot in PLOTS:
        check(plot in drawn, f"{what}: plot '{plot}' missing (have {sorted(drawn)})")
        n = re.match(r"(\d+) paths", drawn[plot])
        check(n and int(n.group(1)) > 0, f"{what}: plot '{plot}' drew nothing ({drawn[plot]})")
    # Every path has geometry, and the curves have many points.
    ds = re.findall(r'<path[^>]*\bd="([^"]*)"', dom)
    check(ds and all(len(d) > 8 for d in ds), f"{what}: an empty SVG path")
    check(max(d.count("L") for d in ds) >= 20, f"{what}: no curve with 20 points")


def case_browser():
    """The report renders in headless Chromium without console errors and
    every plot draws; the screenshot is kept (docs/report.png when
    AG_REPORT_SCREENSHOT names a path to copy it to)."""
    train_with_report()
    p = run(["report", path("trace.json"), "-o", path("from_trace.html")])
    check(p.returncode == 0, f"report: {p.stderr}")
    exe = chromium()
    if not exe:
        print("chromium is not installed (scripts/deps.sh --test installs it)")
        sys.exit(SKIP)
    for name in ("run.html", "from_trace.html"):
        shot = path(name.replace(".html", ".png"))
        dom, console = render(exe, path(name), shot)
        errors = [l for l in console if re.search(r"error|uncaught", l, re.I)]
        check(not errors, f"{name}: console errors:\n" + "\n".join(errors))
        check_dom(dom, name)
        check(os.path.getsize(shot) > 20000, f"{name}: screenshot suspiciously small")
    dest = os.environ.get("AG_REPORT_SCREENSHOT")
    if dest:
        shutil.copyfile(path("run.png"), dest)
    # A page whose script fails says so, and the check above would see it:
    # break the data and expect an error status or console error.
    with open(path("run.html"), encoding="utf-8") as f:
        html = f.read()
    broken = html.replace('"format":"anygrad-report"', '"format":"anygrad-report","steps":{"x":1}', 1)
    broken = re.sub(r'"steps":\[', '"stepz":[', broken, count=1)
    with open(path("broken.html"), "w", encoding="utf-8") as f:
        f.write(broken)
    dom, console = render(exe, path("broken.html"))
    failed = not re.search(r'data-report-status="ok', dom) or any(re.search(r"error|uncaught", l, re.I) for l in console)
    check(failed, "a page with broken data still reported ok: the check cannot fail")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    os.chdir(WORK)
    CASES[CASE]()
    print("ok")
