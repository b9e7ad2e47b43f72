#!/usr/bin/env python3
"""The anygrad command line as a user runs it: strict options, exit codes,
unavailable backends, and the main job's guarantees about its checkpoint
(docs/training.md). One case per CTest test:

    cli_test.py ANYGRAD_BINARY WORK_DIR SOURCE_DIR LIB_DIR CASE

Exit 0 pass, 77 skipped, anything else fails."""
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import time
import hashlib

BIN, WORK, SRC, LIBDIR, CASE = sys.argv[1:6]
SKIP = 77
# Short, quiet runs of the main job.
FAST = ["--samples", "0", "--profile", "off", "--log-every", "1000"]


def run(args, timeout=300, env=None):
    t0 = time.monotonic()
    try:
        p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        # A run that outlives its limit is a failure with its command and
        # what it printed, not a traceback (a loaded machine is the usual
        # suspect; the load average says how loaded).
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        print(f"FAIL: anygrad {' '.join(args)}: still running after {timeout} s (load average "
              f"{os.getloadavg()}); stdout: {out[-2000:]}\nstderr: {err[-2000:]}")
        sys.exit(1)
    run.last_seconds = time.monotonic() - t0
    return p.returncode, p.stdout, p.stderr


run.last_seconds = 0.0


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def expect(args, rc, err_part=None, out_part=None, **kw):
    got, out, err = run(args, **kw)
    shown = " ".join(args)
    check(got == rc, f"anygrad {shown}: exit {got}, expected {rc} (after {run.last_seconds:.1f} s, load average "
                     f"{os.getloadavg()})\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    if err_part is not None:
        check(err_part in err, f"anygrad {shown}: stderr lacks {err_part!r}: {err!r}")
    if out_part is not None:
        check(out_part in out, f"anygrad {shown}: stdout lacks {out_part!r}")
    return out, err


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def path(name):
    return os.path.join(WORK, name)


def fresh_dir(name):
    d = path(name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def read_st(p):
    """(header dict, data bytes) of a safetensors file."""
    with open(p, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(p, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def trained(d, name="a.st", steps=2, extra=()):
    out = os.path.join(d, name)
    expect(["train", "--steps", str(steps), "--out", out] + FAST + list(extra), 0)
    return out


# ---------------- cases ----------------


def case_usage_errors():
    """Item 12 (and 3): every malformed value and unknown option is a usage
    error (exit 2) with a message, before anything runs."""
    bad = [
        (["train", "--steps", "abc"], "--steps"),
        (["train", "--steps", "12x"], "--steps"),
        (["train", "--steps", " 12"], "--steps"),
        (["train", "--steps", "-5"], "--steps"),
        (["train", "--lr", "abc"], "--lr"),
        (["train", "--lr", "nan"], "--lr"),
        (["train", "--lr", "inf"], "--lr"),
        (["train", "--lr", "0"], "--lr"),
        (["train", "--weight-decay", "nan"], "--weight-decay"),
        (["train", "--clip", "-inf"], "--clip"),
        (["train", "--seed", "xyz"], "--seed"),
        (["train", "--seed", "-1"], "--seed"),
        (["train", "--seed", "99999999999999999999999"], "--seed"),
        (["train", "--profile", "maybe"], "--profile"),
        (["train", "--bogus"], "unknown option"),
        (["train", "--bogus", "1"], "unknown option"),
        (["train", "--steps"], "needs a value"),
        (["train", "--steps", "--out", "x.st"], "'--steps' needs a value"),
        (["train", "stray"], "unexpected argument"),
        (["train", "--batch", "4611686018427387904"], "--batch"),
        (["train", "--batch", "0"], "--batch"),
        (["train", "--context", "65"], "--context"),
        (["train", "--model", "rnn"], "--model"),
        (["train", "--device", "tpu:0"], "not a device"),
        (["check", "--seed", "xyz"], "--seed"),
        (["check", "--bogus"], "unknown option"),
        (["check", "--ops", "nosuchop"], "unknown op"),
        (["bench", "--reps", "abc"], "--reps"),
        (["bench", "--numel", "1e3"], "--numel"),
        (["memory", "--bogus"], "unknown option"),
        (["info", "--bogus"], "unknown option"),
        (["compare", "--devices", "cpu,cpu", "--steps", "abc"], "--steps"),
        (["compare", "--devices", "cpu,cpu", "--tol", "nan"], "--tol"),
        (["nosuchcommand"], "unknown command"),
    ]
    for args, msg in bad:
        out, _ = expect(args, 2, msg, timeout=60)
        check("loss" not in out, f"anygrad {' '.join(args)} trained")
    for cmd in ["train", "check", "bench", "memory", "info", "compare"]:
        out, _ = expect([cmd, "--help"], 0, timeout=60)
        check("Exit status" in out or "exit status" in out.lower(), f"{cmd} --help does not state the exit status")
    expect(["train", "-h"], 0, out_part="usage: anygrad train")


def unavailable_backend():
    rc, out, _ = run(["info"], timeout=60)
    check(rc == 0, "anygrad info failed")
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] == "unavailable:":
            return parts[0]
    return None


def case_unavailable_backend():
    """Item 13: a backend asked for by name that is absent is an error
    (exit 1 with the reason), not an empty table."""
    name = unavailable_backend()
    if not name:
        print("every backend is available here")
        sys.exit(SKIP)
    expect(["check", "--backend", name, "--ops", "add"], 1, "unavailable", timeout=60)
    expect(["check", "--backend", "cpu," + name, "--ops", "add"], 1, "unavailable", timeout=60)
    expect(["bench", "--backend", name, "--ops", "add", "--reps", "1"], 1, "unavailable", timeout=60)
    expect(["memory", "--device", name + ":0"], 1, "unavailable", timeout=60)
    expect(["train", "--device", name + ":0", "--out", path("never.st")], 1, "unavailable", timeout=60)
    check(not os.path.exists(path("never.st")), "train wrote a checkpoint")
    # compare keeps its documented diff-like status: 2 = error
    expect(["compare", "--devices", "cpu," + name + ":0", "--steps", "1"], 2, "not usable", timeout=60)


def case_cuda_reason():
    """Item 19: without an NVIDIA driver the CUDA backend says so, not that
    the driver is outdated."""
    import ctypes
    rc, out, _ = run(["info"], timeout=60)
    check(rc == 0, "anygrad info failed")
    line = next((l for l in out.splitlines() if l.startswith("cuda ")), "")
    try:
        ctypes.CDLL("libcuda.so.1")
        print("an NVIDIA driver is installed")
        sys.exit(SKIP)
    except OSError:
        pass
    if "unavailable" not in line or "not built" in line or "not found in" in line:
        print("the CUDA module is not part of this build:", line)
        sys.exit(SKIP)
    check("insufficient" not in line, f"missing driver reported as an old one: {line}")
    check("no NVIDIA driver" in line, f"no driver reason: {line}")


def case_json_version():
    """Item 19: --version and --json of info and check."""
    for args in (["--version"], ["info", "--version"], ["check", "--version"]):
        out, _ = expect(args, 0, timeout=60)
        check(out.startswith("anygrad ") and len(out.split()) == 2, f"{args}: {out!r}")
    out, _ = expect(["info", "--json"], 0, timeout=60)
    info = json.loads(out)
    check(any(b["name"] == "cpu" and b["available"] for b in info["backends"]), "info --json lacks cpu")
    check(info["best_device"], "info --json lacks best_device")
    comm = {c["name"]: c for c in info["communication"]}
    check(comm["inproc"]["available"], f"info --json: in-process group unavailable: {comm}")
    check(all(c.get("description") or c.get("reason") for c in comm.values()), f"info --json communication: {comm}")
    out, _ = expect(["check", "--backend", "cpu", "--ops", "add,mul", "--dtype", "f32", "--json"], 0, timeout=120)
    res = json.loads(out)
    check(res["fail"] == 0 and res["pass"] == 2 and len(res["cells"]) == 2, f"check --json: {res}")
    check(all(c["result"] == "pass" for c in res["cells"]), "check --json cells")


def case_resume_no_rewrite():
    """Item 4: resuming with --steps at or below the saved step trains
    nothing and leaves the checkpoint as it was."""
    d = fresh_dir("resume")
    a = trained(d, steps=3)
    h = digest(a)
    check(read_st(a)[0]["__metadata__"]["step"] == "3", "step metadata")
    for steps in ("3", "2", "0"):
        out, _ = expect(["train", "--resume", a, "--steps", steps, "--out", a] + FAST, 0)
        check("nothing to train" in out, f"--steps {steps}: no notice: {out}")
        check(digest(a) == h, f"--steps {steps} rewrote the checkpoint")
    # A run that continues does save, at its step.
    expect(["train", "--resume", a, "--steps", "4", "--out", a] + FAST, 0)
    check(read_st(a)[0]["__metadata__"]["step"] == "4", "continued run saved the wrong step")
    # A fresh run of 0 steps has nothing worth saving either.
    z = os.path.join(d, "zero.st")
    expect(["train", "--steps", "0", "--out", z] + FAST, 0)
    check(not os.path.exists(z), "--steps 0 wrote a checkpoint")


def case_nonfinite():
    """Item 5: NaN never reaches a checkpoint; the run reports the step and
    fails; the old file is kept."""
    d = fresh_dir("nonfinite")
    good = trained(d, "good.st")
    h = digest(good)
    expect(["train", "--lr", "nan", "--out", good], 2, "--lr")
    # Parameters that are NaN (a damaged checkpoint) make the loss NaN.
    header, data = read_st(good)
    data = bytearray(data)
    ent = header["model.fc1.weight"]
    b, e = ent["data_offsets"]
    data[b:e] = struct.pack("<f", float("nan")) * ((e - b) // 4)
    nan_st = os.path.join(d, "nan.st")
    write_st(nan_st, header, bytes(data))
    _, err = expect(["train", "--resume", nan_st, "--steps", "5", "--out", good] + FAST, 1, "NaN")
    check("step" in err, f"no step in {err!r}")
    check(digest(good) == h, "a NaN run overwrote the good checkpoint")


def case_out_unwritable():
    """Item 6: an unwritable --out or --trace stops the run before the first
    step."""
    out, err = expect(["train", "--out", "/nonexistent-dir/x.st", "--steps", "100000"] + FAST, 1,
                      "cannot write checkpoint", timeout=60)
    check("[" not in out, "trained before finding --out unwritable")
    out, err = expect(["train", "--out", path("t.st"), "--trace", "/nonexistent-dir/t.json", "--steps", "100000"]
                      + FAST, 1, "cannot write trace", timeout=60)
    check("[" not in out, "trained before finding --trace unwritable")
    d = fresh_dir("outdir")
    expect(["train", "--out", d, "--steps", "1"] + FAST, 1, "not a regular file", timeout=60)


def case_resume_seed():
    """Item 7: --resume keeps the checkpoint's seed unless --seed is given."""
    d = fresh_dir("seed")
    a = trained(d, steps=2, extra=["--seed", "42"])
    b = os.path.join(d, "b.st")
    expect(["train", "--resume", a, "--steps", "3", "--out", b] + FAST, 0)
    check(read_st(b)[0]["__metadata__"]["seed"] == "42", "resume did not keep the seed")
    c = os.path.join(d, "c.st")
    expect(["train", "--resume", a, "--steps", "3", "--seed", "7", "--out", c] + FAST, 0)
    check(read_st(c)[0]["__metadata__"]["seed"] == "7", "an explicit --seed was not used")


def case_metadata():
    """Item 8: every checkpoint metadata key is validated."""
    d = fresh_dir("meta")
    a = trained(d)
    header, data = read_st(a)
    bad = [("step", "-100"), ("step", "abc"), ("step", ""), ("step", "1e3"), ("step", "99999999999999999999"),
           ("model", "rnn"), ("context", "0"), ("context", "65"), ("hidden", "12abc"), ("seed", "-1"),
           ("format", "other"), ("step", None), ("seed", None), ("n_head", None)]
    for key, value in bad:
        h = json.loads(json.dumps(header))
        if value is None:
            del h["__metadata__"][key]
        else:
            h["__metadata__"][key] = value
        p = os.path.join(d, "bad.st")
        write_st(p, h, data)
        out_st = os.path.join(d, "never.st")
        _, err = expect(["train", "--resume", p, "--steps", "5", "--out", out_st] + FAST, 1, "AG_ERR_CORRUPT")
        check(key in err, f"{key}={value!r}: message does not name the key: {err!r}")
        check(not os.path.exists(out_st), f"{key}={value!r}: trained and saved")


def case_temp_files():
    """Item 9: temp files of dead saves are removed by the next save; those
    of live processes are not; no temp file is left."""
    d = fresh_dir("tmpfiles")
    dead = subprocess.Popen(["true"])
    dead.wait()
    target = os.path.join(d, "x.st")
    stale = [target + f".tmp.{dead.pid}", target + f".tmp.{dead.pid}.0badf00d"]
    live = target + f".tmp.{os.getpid()}.12345678"
    other = os.path.join(d, "y.st.tmp." + str(dead.pid))
    for p in stale + [live, other]:
        with open(p, "wb") as f:
            f.write(b"x" * 1000)
    expect(["train", "--steps", "1", "--out", target] + FAST, 0)
    for p in stale:
        check(not os.path.exists(p), f"stale temp file {p} kept")
    check(os.path.exists(live), "the temp file of a live process was removed")
    check(os.path.exists(other), "the temp file of another path was removed")
    left = sorted(n for n in os.listdir(d) if ".tmp." in n or ".probe" in n)
    check(left == sorted([os.path.basename(live), os.path.basename(other)]), f"left behind: {left}")


def case_fifo():
    """Item 10: --resume on a FIFO fails at once instead of blocking."""
    d = fresh_dir("fifo")
    f = os.path.join(d, "ckpt.st")
    os.mkfifo(f)
    try:
        expect(["train", "--resume", f, "--out", os.path.join(d, "o.st")] + FAST, 1, "not a regular file", timeout=30)
    except subprocess.TimeoutExpired:
        check(False, "--resume on a FIFO blocked")


def case_ulimit():
    """Item 11: under an address-space limit the job fails cleanly (non-zero
    exit, a message) instead of hanging in the BLAS allocator."""
    ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    if "libasan" in ldd or "libtsan" in ldd:
        print("sanitizer build: its shadow memory does not fit under ulimit -v")
        sys.exit(SKIP)
    out_st = path("ulimit.st")
    cmd = f"ulimit -v 307200 && exec '{BIN}' train --steps 20 --out '{out_st}' --samples 0 --profile off"
    try:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, "training under ulimit -v 300M hung")
    if p.returncode == 0:
        print("the job fits in 300 MiB of address space here")
        sys.exit(SKIP)
    check(p.returncode > 0, f"killed by signal {-p.returncode}: {p.stderr[-2000:]}")
    # anygrad's own message ("out of host memory ... ulimit -v") on small
    # machines; with many cores the OpenMP runtime may fail first creating
    # its threads, which it also reports and exits 1.
    check(p.stderr.strip(), "failed without a message")
    print(p.stderr.strip()[-500:])


def case_ulimit_exit():
    """The hang under an address-space limit (docs/training.md, "Under an
    address-space limit"): the main job, with short arguments, 20 times
    under ulimit -v 800000 and 600000 alternately. Each run must end
    promptly with the documented status: 0 (it trained) or 1 with a message
    (anygrad's out-of-memory message on this kind of machine). A run still alive after 60 s is the hang:
    OpenBLAS's exit handler waiting on a thread that retries its buffer
    allocation forever. Then the fix itself: failed commands leave through
    _exit, so an exit handler that never returns does not hold them."""
    ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    if "libasan" in ldd or "libtsan" in ldd:
        print("sanitizer build: its shadow memory does not fit under ulimit -v")
        sys.exit(SKIP)
    out_st = path("ulimit_exit.st")
    times, outcomes = [], {}
    for i in range(20):
        # The limit and one where this kind of machine fails before
        # the first step (the OpenCL module then fits but the BLAS buffer
        # does not), alternately.
        limit = 800000 if i % 2 == 0 else 600000
        cmd = (f"ulimit -v {limit} && exec '{BIN}' train --steps 5 --batch 16 --out '{out_st}' "
               "--samples 0 --profile off --log-every 1000")
        t0 = time.monotonic()
        try:
            p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            check(False, f"run {i + 1} under ulimit -v {limit} did not exit within 60 s (load average "
                         f"{os.getloadavg()}): {err[-1500:]}")
        dt = time.monotonic() - t0
        times.append(dt)
        if p.returncode == 1:
            # anygrad's out-of-memory message here; on a machine with many
            # cores the OpenMP runtime may fail first creating its threads,
            # which it reports too (case_ulimit).
            check(p.stderr.strip(), f"run {i + 1}: exit 1 without a message")
            kind = f"{limit}: 1 ({'out of memory' if 'memory' in p.stderr else 'error'})"
        else:
            check(p.returncode == 0, f"run {i + 1}: exit {p.returncode}: {p.stderr[-1500:]}")
            kind = f"{limit}: 0 (trained)"
        outcomes[kind] = outcomes.get(kind, 0) + 1
    times.sort()
    print(f"20 runs under ulimit -v 800000 and 600000: exit {outcomes}; seconds min {times[0]:.2f} "
          f"median {times[10]:.2f} max {times[-1]:.2f} (load average {os.getloadavg()})")
    # Whether the limit makes OpenBLAS stall depends on the machine, so the
    # runs above may all train. The mechanism is checked directly: an exit
    # handler that never returns (as OpenBLAS's gotoblas_quit waiting on a
    # stalled thread) must not delay a failed command.
    cc = shutil.which("cc")
    if not cc:
        print("no C compiler: the exit-handler check is skipped")
        return
    src, lib = path("never_returns.c"), path("never_returns.so")
    with open(src, "w") as f:
        f.write("#include <unistd.h>\n"
                "__attribute__((destructor)) static void never_returns(void) { for (;;) pause(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], check=True)
    for args, want in ((["train", "--steps", "abc"], 2), (["train", "--device", "opencl:9", "--steps", "5"], 1),
                       (["check", "--backend", "nosuch"], None)):
        env = dict(os.environ, LD_PRELOAD=lib)
        t0 = time.monotonic()
        try:
            p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=30, env=env)
        except subprocess.TimeoutExpired:
            check(False, f"anygrad {' '.join(args)} with an exit handler that never returns did not exit")
        check(p.returncode != 0 and (want is None or p.returncode == want),
              f"anygrad {' '.join(args)}: exit {p.returncode}, expected {want or 'non-zero'}")
        print(f"anygrad {' '.join(args)}: exit {p.returncode} in {time.monotonic() - t0:.2f} s "
              "despite an exit handler that never returns")


def case_threads():
    """--threads N on every command that runs kernels (train, bench, compare,
    check, memory): a bad count is a usage error before anything runs, and
    the count set is the one used (check and memory print it; AG_NUM_THREADS
    is the default and --threads wins over it)."""
    for cmd in (["train"], ["bench"], ["compare"], ["check"], ["memory"]):
        for v in ("0", "abc", "257"):
            expect(cmd + ["--threads", v], 2, "--threads expects")
    out, _ = expect(["check", "--threads", "3", "--backend", "cpu", "--ops", "add", "--dtype", "f32", "--json"], 0)
    check(json.loads(out)["threads"] == 3, "check --json does not report 3 threads: " + out[:300])
    out, _ = expect(["check", "--threads", "2", "--backend", "cpu", "--ops", "add", "--dtype", "f32"], 0)
    check("2 CPU threads" in out, "check table lacks the thread count: " + out[:300])
    out, _ = expect(["memory", "--threads", "2", "--exercise"], 0)
    check("CPU threads: 2" in out, "memory does not print 2 threads: " + out[-300:])
    env = dict(os.environ, AG_NUM_THREADS="3")
    out, _ = expect(["memory"], 0, env=env)
    check("CPU threads: 3" in out, "memory ignores AG_NUM_THREADS=3: " + out[-300:])
    out, _ = expect(["memory", "--threads", "1"], 0, env=env)
    check("CPU threads: 1" in out, "memory --threads 1 does not override AG_NUM_THREADS: " + out[-300:])
    for cmd in (["check"], ["memory"]):
        out, _ = expect(cmd + ["--help"], 0)
        check("--threads N" in out, f"anygrad {cmd[0]} --help lacks --threads")


def case_numerics():
    """--numerics MODE on every command that runs kernels (the three tasks of
    train, bench, compare, check, memory): a word that is no mode is a usage
    error naming the flag; check --bitwise needs the mode named and takes
    devices after the options; compare ends with the weights' verdict."""
    for cmd in (["train"], ["train", "--task", "text"], ["train", "--task", "fashion-mnist"], ["bench"],
                ["compare", "--devices", "cpu,cpu"], ["check"], ["memory"]):
        expect(cmd + ["--numerics", "fast"], 2, "--numerics expects default or portable, got 'fast'")
        out, _ = expect([cmd[0], "--help"], 0)
        check("--numerics MODE" in out, f"anygrad {cmd[0]} --help lacks --numerics")
    expect(["check", "--bitwise", "cpu"], 2, "--bitwise needs the mode named")
    expect(["check", "--numerics", "portable", "--bitwise", "--accuracy", "cpu"], 2, "not with --accuracy")
    out, _ = expect(["check", "--numerics", "portable", "--bitwise", "cpu", "--ops", "add,grad_exp", "--dtype",
                     "f32,i32", "--json"], 0)
    j = json.loads(out)
    check(j["numerics"] == "portable" and j["devices"][0]["device"] == "cpu:0", "check --bitwise JSON: " + out[:300])
    check(len(j["cells"]) == 3, "add f32, add i32, grad_exp f32 are the cells: " + out[:600])
    check(j["differ"] == 0 and j["failed"] == 0, "the CPU differs from itself: " + out[:600])
    check(j["identical"] + j["refused"] == 3, "every cell is identical or refused: " + out[:600])
    # the default mode is measured the same way; the CPU agrees with itself
    out, _ = expect(["check", "--numerics", "default", "--bitwise", "cpu", "--ops", "add,sum", "--dtype", "f32"], 0)
    check("cpu:0 against cpu:0 with" in out and ": 2 identical, 0 differ, 0 refused, 0 failed" in out,
          "check --numerics default --bitwise cpu: " + out[-600:])
    out, _ = expect(["check", "cpu", "--ops", "add", "--dtype", "f32"], 0)  # a device after the options
    check("cpu:0" in out, "check cpu: " + out[:300])
    out, _ = expect(["compare", "--devices", "cpu,cpu", "--steps", "2", "--tol", "0", "--numerics", "default"], 0)
    check("weights identical on 2 devices" in out and "bit for bit identical" in out, "compare --tol 0: " + out[-600:])


def case_profiler_output():
    """Item 18: on a terminal the progress line ends before the report; runs
    of equal verdicts are one line; no empty sampled word; sync sites are
    readable; a smoothed train loss."""
    mfd, sfd = pty.openpty()
    out_st = path("prof.st")
    p = subprocess.Popen([BIN, "train", "--steps", "250", "--log-every", "25", "--samples", "60", "--out", out_st],
                         stdout=sfd, stderr=subprocess.PIPE, close_fds=True)
    os.close(sfd)
    chunks = []
    while True:
        try:
            b = os.read(mfd, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    rc = p.wait(timeout=600)
    os.close(mfd)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    check(rc == 0, f"exit {rc}: {p.stderr.read()}")
    check("\x1b[Kanygrad profiler" not in text, "profiler report glued onto the progress line")
    check("\nanygrad profiler:" in text, "no profiler report")
    lines = text.split("\n")
    v = lines.index("verdicts:")
    kinds = []
    for line in lines[v + 1:]:
        if not line.startswith("  steps "):
            break
        kinds.append(line.split(": ", 1)[1].split(":")[0].split(" (")[0])
    check(kinds, "no verdict lines")
    check(all(a != b for a, b in zip(kinds, kinds[1:])), f"equal verdicts repeated: {kinds}")
    s = lines.index("sync sites (process total):")
    sites = [l for l in lines[s + 1:] if l.startswith("    ")]
    check(sites, "no sync sites")
    check(all("+0x" not in l for l in sites) or "addr2line" in text, f"unresolved sites without a hint: {sites}")
    sample = [l for l in lines if l.startswith("charlm: samples:")]
    check(len(sample) == 1, "no samples line")
    words = sample[0][len("charlm: samples:"):].split(" ")[1:]
    check(len(words) == 60 and all(words), f"empty sampled word: {sample[0]!r}")
    check("mean of the last" in text, "no smoothed train loss")


def case_docs():
    """Item 19: every docs/*.md page a source or doc file points at exists,
    and the mlp_words build line in its comment works."""
    import re
    missing = []
    for top in ("include", "core", "tools", "models", "examples", "docs", "backends", "kernels", "README.md"):
        base = os.path.join(SRC, top)
        files = [base] if os.path.isfile(base) else [os.path.join(r, n) for r, _, ns in os.walk(base) for n in ns]
        for fn in files:
            if not fn.endswith((".c", ".h", ".cu", ".md", ".cl")):
                continue
            with open(fn, errors="replace") as f:
                for m in re.finditer(r"docs/[A-Za-z0-9_/.-]+\.md", f.read()):
                    if not os.path.exists(os.path.join(SRC, m.group(0))):
                        missing.append(f"{os.path.relpath(fn, SRC)}: {m.group(0)}")
    check(not missing, "links to missing pages:\n" + "\n".join(missing))
    with open(os.path.join(SRC, "examples", "mlp_words.c")) as f:
        head = f.read(1500)
    m = re.search(r"`(cc [^`]+)`", head)
    check(m, "no build line in examples/mlp_words.c")
    cc = shutil.which("cc")
    ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    if not cc or "libasan" in ldd:
        print("no C compiler, or a sanitizer build (a plain program cannot load its library)")
        sys.exit(SKIP)
    cmd = m.group(1).replace('"$PWD/build/lib"', LIBDIR).replace("-Lbuild/lib", "-L" + LIBDIR)
    cmd = cmd.replace("-o mlp_words", "-o " + path("mlp_words"))
    p = subprocess.run(["sh", "-c", cmd], cwd=SRC, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"{cmd}: {p.stderr}")
    p = subprocess.run([path("mlp_words"), "cpu", "3"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and "loss" in p.stdout, f"mlp_words: {p.stdout} {p.stderr}")


def case_data_parallel():
    """Data parallelism from the command line (docs/distributed.md):
    --devices and --dist usage errors; two in-process replicas train, only
    rank 0 prints and writes, and the result equals one device's; the same
    with mpirun -np 2 --dist mpi where Open MPI and the module are built."""
    for args, part in [
        (["train", "--devices", "cpu,cpu", "--device", "cpu"], "--devices"),
        (["train", "--devices", ","], "--devices"),
        (["train", "--devices", "cpu,tpu:0"], "not a device"),
        (["train", "--dist", "nccl"], "--dist"),
        (["train", "--bucket-mb", "0"], "--bucket-mb"),
        (["train", "--balance", "sometimes"], "--balance"),
        (["train", "--devices", "cpu,cpu", "--batch", "auto"], "--batch auto"),
        (["train", "--task", "fashion-mnist", "--devices", "cpu,cpu"], "--devices"),
        (["train", "--task", "fashion-mnist", "--dist", "nccl"], "--dist"),
        (["train", "--task", "fashion-mnist", "--bucket-mb", "0"], "--bucket-mb"),
    ]:
        expect(args, 2, part)
    d = fresh_dir("dp")
    job = ["--steps", "12", "--batch", "16", "--hidden", "32", "--log-every", "6", "--samples", "0",
           "--profile", "off", "--threads", "1"]
    one, _ = expect(["train", "--device", "cpu", "--out", os.path.join(d, "one.st")] + job, 0)
    two, _ = expect(["train", "--devices", "cpu,cpu", "--out", os.path.join(d, "two.st")] + job, 0,
                    out_part="2 replicas in this process")
    check(two.count("charlm: mlp model") == 1, f"more than rank 0 printed:\n{two}")
    check("final shares of the batch" in two, "no final shares")

    def losses(text):
        return [l.split("train loss")[1] for l in text.splitlines() if "train loss" in l]

    check(losses(one) and losses(one) == losses(two), f"losses differ:\n{one}\n{two}")
    check(os.path.exists(os.path.join(d, "two.st")), "no checkpoint from the replicas")
    # resumed on one device from the 2-replica checkpoint
    expect(["train", "--device", "cpu", "--resume", os.path.join(d, "two.st"), "--out", os.path.join(d, "r.st")]
           + job[:1] + ["14"] + job[2:], 0)
    mpirun = shutil.which("mpirun")
    ldd = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    if not mpirun or not os.path.exists(os.path.join(LIBDIR, "libanygrad-mpi.so")) or "libasan" in ldd \
            or "libtsan" in ldd:
        print("mpirun or libanygrad-mpi.so absent, or a sanitizer build: the MPI half is skipped")
        return
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", AG_DIST_TIMEOUT_MS="60000")
    p = subprocess.run([mpirun, "-np", "2", BIN, "train", "--dist", "mpi", "--device", "cpu", "--out",
                        os.path.join(d, "mpi.st")] + job, capture_output=True, text=True, timeout=300, env=env)
    check(p.returncode == 0, f"mpirun: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    check(p.stdout.count("charlm: mlp model") == 1, f"more than rank 0 printed:\n{p.stdout}")
    check(losses(p.stdout) == losses(one), f"mpi losses differ:\n{p.stdout}\n{one}")


def case_zero():
    """--zero 1|2 (docs/distributed.md, "Sharded optimizer state"): usage
    errors; two in-process replicas with a sharded optimizer train as one
    device does (the same printed losses), write a shard per replica, and
    the checkpoint resumes on three sharded replicas, on one device and on
    two unsharded replicas with the same losses."""
    expect(["train", "--zero", "1"], 2, "--zero")
    expect(["train", "--zero", "3", "--devices", "cpu,cpu"], 2, "--zero")
    expect(["train", "--zero", "2", "--devices", "cpu,cpu", "--precision", "f16"], 2, "--precision f16")
    d = fresh_dir("zero")
    job = ["--batch", "24", "--hidden", "32", "--log-every", "6", "--samples", "0", "--profile", "off",
           "--threads", "1", "--balance", "off"]

    def losses(text):
        return [l.split("train loss")[1] for l in text.splitlines() if "train loss" in l]

    one, _ = expect(["train", "--device", "cpu", "--steps", "12", "--out", os.path.join(d, "one.st")] + job, 0)
    z = os.path.join(d, "z.st")
    two, _ = expect(["train", "--devices", "cpu,cpu", "--zero", "2", "--steps", "12", "--out", z] + job, 0)
    check(losses(one) and losses(one) == losses(two), f"losses differ:\n{one}\n{two}")
    for r in range(2):
        check(os.path.exists(f"{z}.rank{r}.safetensors"), f"no optimizer shard of rank {r}")
    resumed = []
    for extra in (["--devices", "cpu,cpu,cpu", "--zero", "1"], ["--device", "cpu"], ["--devices", "cpu,cpu"]):
        out, _ = expect(["train", "--resume", z, "--steps", "18", "--out", os.path.join(d, "r.st")] + extra + job, 0,
                        out_part="resuming at step 12")
        resumed.append(losses(out))
    check(resumed[0] and resumed[0] == resumed[1] == resumed[2], f"resumed losses differ: {resumed}")
    # a checkpoint with the whole optimizer state does not resume sharded
    expect(["train", "--resume", os.path.join(d, "one.st"), "--steps", "14", "--devices", "cpu,cpu", "--zero", "1",
            "--out", os.path.join(d, "r2.st")] + job, 1, "without --zero")


def case_text_task():
    """--task text: a tiny Llama-style model trains (exit 0), prints the
    held-out bits per byte, its loss goes down, it writes the weights and
    the tokenizer, and a bad model shape is a usage error. On the fortunes
    corpus when installed, else on a text file written here."""
    import re
    d = os.path.join(WORK, "text")
    os.makedirs(d, exist_ok=True)
    data = []
    if not os.path.isdir("/usr/share/games/fortunes"):
        path = os.path.join(d, "corpus.txt")
        words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "bed"]
        with open(path, "w") as f:
            for i in range(4000):
                f.write(" ".join(words[(i * 7 + j * 5) % len(words)] for j in range(8)) + ".\n")
        data = ["--data", path]
    out_path = os.path.join(d, "text.safetensors")
    out, _ = expect(["train", "--task", "text", "--device", "cpu", "--steps", "20", "--layers", "1", "--embd", "32",
                     "--seq", "32", "--vocab", "300", "--lr", "1e-2", "--warmup", "2", "--log-every", "10",
                     "--eval-batches", "2", "--samples", "8", "--out", out_path] + data, 0)
    m = re.search(r"first loss ([0-9.]+), train loss ([0-9.]+), held-out loss ([0-9.]+) nats/token, "
                  r"([0-9.]+) bits per byte", out)
    check(m is not None, "no final line with held-out bits per byte:\n" + out[-2000:])
    first, last, held, bpb = (float(g) for g in m.groups())
    check(last < first, f"the training loss did not decrease: {first} -> {last}\n{out[-2000:]}")
    check(0 < bpb < 16, f"held-out bits per byte {bpb} out of range")
    check("bits/byte" in out, "no periodic held-out bits/byte line")
    check(os.path.getsize(out_path) > 0 and os.path.getsize(out_path + ".bpe") > 0, "checkpoint files missing")
    # --resume continues the checkpoint (weights, AdamW state, step) to the new --steps
    tiny_base = ["--device", "cpu", "--layers", "1", "--embd", "32", "--seq", "32", "--vocab", "300", "--lr", "1e-2",
                 "--warmup", "2", "--log-every", "10", "--eval-batches", "2", "--samples", "8"]
    tiny = tiny_base + data
    res_path = os.path.join(d, "resumed.safetensors")
    out, _ = expect(["train", "--task", "text", "--steps", "24", "--resume", out_path, "--out", res_path] + tiny, 0)
    check("resumed from" in out and "at step 20" in out, "no resume line:\n" + out[-2000:])
    check("step 24/24" in out, "the resumed run did not reach step 24:\n" + out[-2000:])
    # damaged, foreign and mismatched checkpoints: exit 1 with the reason
    bad = os.path.join(d, "bad.safetensors")
    with open(bad, "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}       ")
    expect(["train", "--task", "text", "--steps", "24", "--resume", bad, "--out", res_path] + tiny, 1, "AG_ERR_CORRUPT")
    words_st = os.path.join(d, "words.safetensors")
    expect(["train", "--steps", "2", "--out", words_st] + FAST, 0)
    expect(["train", "--task", "text", "--steps", "24", "--resume", words_st, "--out", res_path] + tiny, 1,
           "not a checkpoint of anygrad train --task text")
    other = os.path.join(d, "other.txt")
    with open(other, "w") as f:
        for i in range(3000):
            f.write(" ".join(["an", "owl", "flew", "over", "the", "old", "barn", "at", "night"][(i + j) % 9]
                             for j in range(7)) + "\n")
    tiny_other = tiny_base + ["--data", other]
    expect(["train", "--task", "text", "--steps", "24", "--resume", out_path, "--out", res_path] + tiny_other, 1,
           "another corpus")
    expect(["train", "--task", "text", "--embd", "30", "--heads", "4"] + data, 2, "must be a multiple of --heads")
    expect(["train", "--task", "text", "--epochs", "2"] + data, 2, "does not apply to --task text")
    expect(["train", "--seq", "8"], 2, "apply to --task text")


def case_text_hf():
    """--task text --hf DIR: the trained model and its tokenizer as a Hugging
    Face folder (docs/export.md) that transformers' LlamaConfig keys
    describe; --hf naming a file is refused before training, and --hf
    applies to --task text only."""
    import json
    d = os.path.join(WORK, "text_hf")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "corpus.txt")
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "bed"]
    with open(path, "w") as f:
        for i in range(3000):
            f.write(" ".join(words[(i * 7 + j * 5) % len(words)] for j in range(8)) + ".\n")
    hf = os.path.join(d, "hf")
    tiny = ["train", "--task", "text", "--device", "cpu", "--steps", "4", "--layers", "1", "--embd", "32",
            "--heads", "4", "--kv-heads", "2", "--seq", "32", "--vocab", "300", "--eval-batches", "1",
            "--samples", "0", "--data", path]
    out, _ = expect(tiny + ["--hf", hf], 0)
    check("wrote the Hugging Face folder" in out, "no line for the folder:\n" + out[-2000:])
    names = sorted(os.listdir(hf))
    check(names == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                    "tokenizer_config.json"], f"files: {names}")
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 32, "hidden_act": "silu", "torch_dtype": "float32"}
    for k, v in want.items():
        check(cfg.get(k) == v, f"config.json {k}: {cfg.get(k)!r}, want {v!r}")
    with open(os.path.join(hf, "tokenizer.json")) as f:
        tok = json.load(f)
    check(tok["model"]["type"] == "BPE" and len(tok["model"]["vocab"]) == cfg["vocab_size"],
          "tokenizer.json: not a BPE of the model's vocabulary")
    check(len(tok["model"]["merges"]) == cfg["vocab_size"] - 256, "tokenizer.json: merges")
    expect(tiny + ["--hf", path], 1, "is not a folder")
    expect(["train", "--hf", hf], 2, "apply to --task text")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    os.chdir(WORK)
    CASES[CASE]()
    print("ok")
