"""Runnable docs and compiling examples (called through scripts/doc_check.py).

Runnable blocks. An HTML comment on the line before a fenced block marks it:

    <!-- runnable -->
    <!-- runnable exit=2 tol=0.5 sub="--steps 3000=>--steps 40" -->

The block's lines that start with "$ " are commands, run one after another
with `sh -c` in a fresh folder, with the build's bin folder first on PATH
(a leading "build/bin/" names it too) and AG_BACKEND_PATH set to the build's
library folder. The lines under a command, up to the next command, are
output the doc shows: each must appear, in order, among the lines the
command prints (stdout and stderr together; other printed lines may come
between them). In a shown line "..." stands for any text, runs of spaces
match any run of spaces, and every number matches a printed number within
the relative tolerance `tol` (default 0: equal as printed). A block without
"$ " lines is one script whose output is not compared. Options:
  exit=N    the exit status of the last command (default 0; the others
            must exit 0)
  tol=X     relative tolerance of numbers
  sub="A=>B;C=>D"   text replaced in the commands before they run (short
            arguments for CI); the doc keeps the real command
  timeout=S seconds per command (default 60)
  skip-if-missing=PATH  skip the block (reported) when PATH does not exist
  needs=DEVICE  skip the block (reported) when `anygrad memory --device
            DEVICE` fails (a backend this machine does not have)

A runnable ```python block is one Python script instead (no "$ " lines, no
output compared), run by `doc_check.py SRC python PYTHON LIB WORKDIR` with
the interpreter PYTHON and ANYGRAD_LIB set to LIB (the path of
libanygrad.so); `runnable` leaves such blocks to it. Option:
  needs-module=NAME  skip the block (reported) when PYTHON cannot import NAME

Compiling examples. A ```c block in a public header comment (between
"Example:" and the end of the comment, as ```c ... ```) or in a doc after
<!-- compile --> is written to a file and compiled with -I include -c (a block
without main() compiles as a translation unit too). <!-- compile body
decl="ag_tensor *x;" --> compiles the block as statements inside a function,
after the declarations given.
"""
import os
import re
import shlex
import subprocess
import sys
import time

SKIP = 77
NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
MARK = re.compile(r"^<!--\s*runnable\b(.*?)-->\s*$")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def doc_files(src):
    out = [os.path.join(src, "README.md")]
    for root, _, names in os.walk(os.path.join(src, "docs")):
        out += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return out


def parse_opts(text):
    opts = {}
    for tok in shlex.split(text):
        k, _, v = tok.partition("=")
        opts[k] = v
    return opts


def blocks(path, marker):
    """(line, options, body) of every fenced block after a marker comment."""
    lines = read(path).split("\n")
    out = []
    for i, line in enumerate(lines):
        m = marker.match(line.strip())
        if not m or i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            continue
        body, j = [], i + 2
        while j < len(lines) and not lines[j].startswith("```"):
            body.append(lines[j])
            j += 1
        opts = parse_opts(m.group(1))
        opts["_lang"] = lines[i + 1][3:].strip()
        out.append((i + 2, opts, body))
    return out


def line_regex(shown):
    """A regex for one shown line, and the numbers it shows."""
    parts, nums, pos = [], [], 0
    shown = " ".join(shown.split())
    for m in re.finditer(r"\.\.\.|" + NUM.pattern, shown):
        parts.append(re.escape(shown[pos:m.start()]).replace(r"\ ", r"\s+"))
        if m.group(0) == "...":
            parts.append(r".*?")
        else:
            parts.append("(" + NUM.pattern + ")")
            nums.append(m.group(0))
        pos = m.end()
    parts.append(re.escape(shown[pos:]).replace(r"\ ", r"\s+"))
    return re.compile(r"\s*" + "".join(parts) + r"\s*$"), nums


def close(want, got, tol):
    if want == got:
        return True
    try:
        w, g = float(want), float(got)
    except ValueError:
        return False
    return abs(w - g) <= tol * max(abs(w), 1e-12)


def match_output(shown, printed, tol):
    """None if every shown line appears in order in printed, else the first
    shown line that does not."""
    k = 0
    for s in shown:
        if not s.strip():
            continue
        rx, nums = line_regex(s)
        while k < len(printed):
            m = rx.match(printed[k])
            k += 1
            if m and all(close(w, g, tol) for w, g in zip(nums, m.groups())):
                break
        else:
            return s
    return None


def run_block(src, bindir, libdir, work, where, opts, body):
    cmds = []
    for line in body:
        if line.startswith("$ "):
            cmds.append([line[2:], []])
        elif cmds:
            cmds[-1][1].append(line)
    if not cmds:
        cmds = [["\n".join(body), []]]
    miss = opts.get("skip-if-missing")
    if miss and not os.path.exists(os.path.join(src, miss)):
        return f"{where}: skipped ({miss} is missing)", True
    need = opts.get("needs")
    if need:
        probe_env = dict(os.environ, AG_BACKEND_PATH=libdir)
        if "ASAN_OPTIONS" in probe_env:  # as below
            probe_env["ASAN_OPTIONS"] += ":detect_leaks=0"
        p = subprocess.run([os.path.join(bindir, "anygrad"), "memory", "--device", need], capture_output=True,
                           text=True, timeout=120, env=probe_env)
        if p.returncode != 0:
            return f"{where}: skipped ({need} is not available here)", True
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), AG_BACKEND_PATH=libdir,
               ANYGRAD_SRC=src)
    if need and need.startswith("opencl") and "ASAN_OPTIONS" in env:
        # PoCL's worker threads crash LeakSanitizer's exit-time scan (not a
        # finding about anygrad; scripts/test.sh runs the OpenCL tests so too).
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    tol = float(opts.get("tol", "0"))
    timeout = float(opts.get("timeout", "60"))
    subs = [s.split("=>", 1) for s in opts.get("sub", "").split(";") if "=>" in s]
    os.makedirs(work, exist_ok=True)
    for n, (cmd, shown) in enumerate(cmds):
        run = re.sub(r"(?<![\w/])build/bin/", bindir + "/", cmd)
        for a, b in subs:
            run = run.replace(a, b)
        try:
            p = subprocess.run(["sh", "-c", run], cwd=work, env=env, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"{where}: '{cmd}' did not finish within {timeout:g} s", False
        want = int(opts.get("exit", "0")) if n == len(cmds) - 1 else 0
        printed = (p.stdout + p.stderr).split("\n")
        if p.returncode != want:
            return (f"{where}: '{run}' exited {p.returncode}, the doc says {want}:\n" +
                    "\n".join(printed[-15:])), False
        bad = match_output(shown, printed, tol)
        if bad is not None:
            return (f"{where}: '{run}' does not print the line the doc shows:\n  {bad}\nit printed:\n" +
                    "\n".join("  " + l for l in printed[-40:])), False
    return None, True


def run_python_block(python, lib, work, where, opts, body):
    os.makedirs(work, exist_ok=True)
    script = os.path.join(work, "snippet.py")
    with open(script, "w") as f:
        f.write("\n".join(body) + "\n")
    # One interpreter: the needed module is imported first (exit 77 when it
    # cannot be), then the block runs as written, as __main__.
    need = opts.get("needs-module", "")
    runner = ("import runpy, sys\n"
              + (f"try:\n    import {need}\nexcept ImportError:\n    sys.exit(77)\n" if need else "")
              + "runpy.run_path(sys.argv[1], run_name='__main__')\n")
    env = dict(os.environ, ANYGRAD_LIB=lib)
    timeout = float(opts.get("timeout", "300"))
    try:
        p = subprocess.run([python, "-c", runner, script], cwd=work, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{where}: the Python block did not finish within {timeout:g} s", False
    if need and p.returncode == SKIP:
        return f"{where}: skipped ({python} cannot import {need})", True
    want = int(opts.get("exit", "0"))
    if p.returncode != want:
        printed = (p.stdout + p.stderr).split("\n")
        return (f"{where}: the Python block exited {p.returncode}, the doc says {want}:\n" +
                "\n".join(printed[-25:])), False
    return None, True


def check_python(src, argv):
    if len(argv) != 3:
        print("python needs PYTHON LIB WORKDIR")
        return 2
    python, lib, work = argv[0], os.path.abspath(argv[1]), os.path.abspath(argv[2])
    bad, n, skipped, t0 = [], 0, 0, time.time()
    for path in doc_files(src):
        rel = os.path.relpath(path, src)
        for line, opts, body in blocks(path, MARK):
            if opts.get("_lang") != "python":
                continue
            n += 1
            where = f"{rel}:{line}"
            t = time.time()
            msg, ok = run_python_block(python, lib, os.path.join(work, f"p{n}"), where, opts, body)
            skipped += bool(ok and msg)
            print(f"{where}: {'ok' if ok and not msg else msg if ok else 'FAILED'} ({time.time() - t:.1f} s)")
            if not ok:
                bad.append(msg)
    for b in bad:
        print(b)
    print(f"doc_check python: {n} blocks, {len(bad)} problems, {skipped} skipped, {time.time() - t0:.1f} s")
    if n == 0:
        print("no runnable Python block found")
        return 1
    if not bad and skipped == n:
        return SKIP
    return 1 if bad else 0


def check_runnable(src, argv):
    if len(argv) != 3:
        print("runnable needs ANYGRAD LIBDIR WORKDIR")
        return 2
    anygrad, libdir, work = (os.path.abspath(a) for a in argv)
    bindir = os.path.dirname(anygrad)
    bad, n, t0 = [], 0, time.time()
    for path in doc_files(src):
        rel = os.path.relpath(path, src)
        for line, opts, body in blocks(path, MARK):
            if opts.get("_lang") == "python":
                continue  # check_python runs these
            n += 1
            where = f"{rel}:{line}"
            t = time.time()
            msg, ok = run_block(src, bindir, libdir, os.path.join(work, f"b{n}"), where, opts, body)
            print(f"{where}: {'ok' if ok and not msg else msg if ok else 'FAILED'} ({time.time() - t:.1f} s)")
            if not ok:
                bad.append(msg)
    for b in bad:
        print(b)
    print(f"doc_check runnable: {n} blocks, {len(bad)} problems, {time.time() - t0:.1f} s")
    return 1 if bad else 0


# ---- examples compile ----

def header_examples(src):
    inc = os.path.join(src, "include", "anygrad")
    out = []
    for name in sorted(os.listdir(inc)):
        text = read(os.path.join(inc, name))
        for m in re.finditer(r"```c\n(.*?)```", text, re.S):
            body = "\n".join(re.sub(r"^\s*\*? ?", "", l, count=1) for l in m.group(1).split("\n"))
            out.append((f"include/anygrad/{name}:{text[:m.start()].count(chr(10)) + 1}", body))
    return out


def doc_examples(src):
    out = []
    for path in doc_files(src):
        for line, opts, body in blocks(path, re.compile(r"^<!--\s*compile\b(.*?)-->\s*$")):
            text = "\n".join(body)
            if "body" in opts:  # statements: inside a function, after the given declarations
                text = ("#include <anygrad/anygrad.h>\n#include <stdio.h>\nvoid example(void);\n"
                        "void example(void) {\n" + opts.get("decl", "") + "\n" + text + "\n}")
            out.append((f"{os.path.relpath(path, src)}:{line}", text))
    return out


def check_compile(src, argv):
    if len(argv) != 2:
        print("compile needs CC WORKDIR")
        return 2
    cc, work = argv[0], os.path.abspath(argv[1])
    os.makedirs(work, exist_ok=True)
    bad, n = [], 0
    for where, body in header_examples(src) + doc_examples(src):
        n += 1
        if "#include" not in body:
            body = "#include <anygrad/anygrad.h>\n#include <stdio.h>\n" + body
        c = os.path.join(work, f"ex{n}.c")
        with open(c, "w") as f:
            f.write(body + "\n")
        p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-Wno-unused-variable",
                            "-I", os.path.join(src, "include"), "-c", c, "-o", c + ".o"],
                           capture_output=True, text=True, timeout=120)
        print(f"{where}: {'ok' if p.returncode == 0 else 'FAILED'}")
        if p.returncode:
            bad.append(f"{where}: does not compile:\n{p.stderr[-2000:]}")
    for b in bad:
        print(b)
    print(f"doc_check compile: {n} examples, {len(bad)} problems")
    return 1 if bad else 0


def main(src, what, argv):
    if what == "python":
        return check_python(src, argv)
    return check_runnable(src, argv) if what == "runnable" else check_compile(src, argv)
