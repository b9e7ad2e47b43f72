"""What the command-line case scripts share (harden_cli.py,
harden3_tools_cli.py, harden3_text_cli.py): run the anygrad binary with a
timeout (a command that blocks fails, it does not hang the suite), check an
exit code and a part of stderr, refuse any sanitizer report, and a fresh
work folder. Each script calls setup() with its argv first:

    SCRIPT.py ANYGRAD_BINARY WORK_DIR CASE

Exit 0 pass, 77 skipped, anything else fails."""
import os
import shutil
import subprocess
import sys

SKIP = 77
BIN = WORK = CASE = None


def setup(argv):
    """Reads ANYGRAD_BINARY WORK_DIR CASE; returns them."""
    global BIN, WORK, CASE
    BIN, WORK, CASE = argv[1:4]
    return BIN, WORK, CASE


def run(args, timeout=60, env=None, cwd=None, preexec_fn=None):
    try:
        p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})), cwd=cwd, stdin=subprocess.DEVNULL,
                           preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired:
        print(f"FAIL: anygrad {' '.join(args)}: still running after {timeout} s (blocked?)")
        sys.exit(1)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def expect(args, rc, err_part=None, timeout=60, **kw):
    """Runs args (run's keywords pass through) and checks the exit code,
    that no sanitizer reported anything, and that stderr holds err_part."""
    got, out, err = run(args, timeout, **kw)
    shown = " ".join(args)
    check(got == rc, f"anygrad {shown}: exit {got}, expected {rc}\nstdout: {out[-1500:]}\nstderr: {err[-1500:]}")
    check("Sanitizer" not in err and "runtime error:" not in err, f"anygrad {shown}: sanitizer report: {err[-3000:]}")
    if err_part is not None:
        check(err_part in err, f"anygrad {shown}: stderr lacks {err_part!r}: {err[-1500:]!r}")
    return out, err


def path(name):
    return os.path.join(WORK, name)


def fresh():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)


def write(p, text):
    with open(p, "w") as f:
        f.write(text)


def read(p):
    with open(p) as f:
        return f.read()


def main(names):
    """Runs the case named on the command line: the function case_<CASE>
    of the script's globals (names)."""
    cases = {k[5:]: v for k, v in names.items() if k.startswith("case_")}
    if CASE not in cases:
        print("unknown case", CASE)
        sys.exit(2)
    cases[CASE]()
    print("PASS", CASE)
