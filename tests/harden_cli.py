#!/usr/bin/env python3
"""The command line under hostile input (docs/reliability.md): special files
as outputs and inputs, the report writing over its trace, checkpoint
metadata out of range, malformed lists, and AG_* variables that overflow.
One case per CTest test:

    harden_cli.py ANYGRAD_BINARY WORK_DIR CASE

Exit 0 pass, 77 skipped, anything else fails. A command that blocks is a
failure after its timeout, not a hang of the suite."""
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_case import SKIP, check, expect, fresh, path, read, run, setup, write, main  # noqa: E402

BIN, WORK, CASE = setup(sys.argv)
DATA = "/usr/share/datasets/fashion-mnist"


def write_st(p, meta):
    h = json.dumps({"__metadata__": meta}, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)


CNN = ["train", "--task", "fashion-mnist", "--epochs", "1", "--train-limit", "64", "--test-limit", "64",
       "--batch", "64", "--profile", "off"]


def case_cnn_out():
    """Item 2: --out of the fashion-mnist task is checked up front with the
    shared output check: a device node or FIFO is refused (not replaced, not
    waited on), an unwritable place is found before any work, and a run
    that fails leaves no 0-byte file behind."""
    fresh()
    fifo = path("fifo.st")
    os.mkfifo(fifo)
    expect(CNN + ["--data", "/nonexistent", "--out", fifo], 1, "not a regular file", timeout=60)
    check(stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced")
    dev = path("null.st")
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        dev = None
    if dev:
        if os.path.isdir(DATA):
            expect(CNN + ["--out", dev], 1, "not a regular file", timeout=240)
        else:
            expect(CNN + ["--data", "/nonexistent", "--out", dev], 1, "not a regular file")
        check(stat.S_ISCHR(os.stat(dev).st_mode), "the device node was replaced by a regular file")
    expect(CNN + ["--data", "/nonexistent", "--out", path("no/such/dir/c.st")], 1, "cannot write checkpoint")
    new = path("new.st")
    _, err = expect(CNN + ["--data", "/nonexistent", "--out", new], 1)
    check("nonexistent" in err, f"the failure is not the data's: {err!r}")
    check(not os.path.exists(new), "a failed run left a file at --out")
    left = [n for n in os.listdir(WORK) if ".tmp." in n or ".probe" in n]
    check(not left, f"temp files left: {left}")


def case_special_inputs():
    """Item 4: a FIFO or a device as any input is refused at open, at once."""
    fresh()
    fifo = path("fifo")
    os.mkfifo(fifo)
    expect(["train", "--words", fifo, "--steps", "1"], 1, "not a regular file")
    expect(["train", "--words", "/dev/zero", "--steps", "1"], 1, "not a regular file")
    expect(["report", fifo, "-o", path("r.html")], 1, "not a regular file")
    expect(["report", "/dev/zero", "-o", path("r.html")], 1, "not a regular file")
    with open(path("t.json"), "w") as f:
        f.write('{"traceEvents":[]}')
    expect(["report", path("t.json"), "--memory", fifo, "-o", path("r.html")], 1, "not a regular file")
    check(not os.path.exists(path("r.html")), "a refused report left a page")
    data = path("data")
    os.makedirs(data)
    for n in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
              "t10k-labels-idx1-ubyte.gz"):
        os.mkfifo(os.path.join(data, n))
    expect(CNN + ["--data", data, "--out", path("c.st")], 1, "not a regular file")
    expect(["train", "--resume", fifo, "--steps", "1", "--out", path("o.st")], 1, "not a regular file")


def case_report_same_file():
    """Item 8: `anygrad report t.json -o t.json` refuses instead of replacing
    the trace with HTML (also through another name of the same file)."""
    fresh()
    t = path("t.json")
    text = '{"traceEvents":[]}'
    with open(t, "w") as f:
        f.write(text)
    expect(["report", t, "-o", t], 1, "is the input")
    os.link(t, path("hard.json"))
    expect(["report", t, "-o", path("hard.json")], 1, "is the input")
    expect(["report", t, "--memory", t, "-o", t], 1, "is the input")
    with open(t) as f:
        check(f.read() == text, "the trace was changed")
    expect(["report", t, "-o", path("r.html")], 0)
    left = [n for n in os.listdir(WORK) if ".tmp." in n]
    check(not left, f"temp files left: {left}")


def case_cnn_metadata():
    """Item 6: the fashion-mnist checkpoint's metadata is validated strictly,
    the error naming the key."""
    fresh()
    good = {"format": "anygrad-cnn-1", "epoch": "1", "step": "5", "c1": "4", "c2": "4", "seed": "7"}
    bad = [("seed", "abc"), ("seed", "-1"), ("seed", ""), ("seed", "0x10"), ("step", " 5"),
           ("step", str(2 ** 40 + 1)), ("step", str(10 ** 20)), ("epoch", "1x"), ("c1", "0"), ("c2", "4294967297")]
    for key, value in bad:
        meta = dict(good, **{key: value})
        ck = path("ck.st")
        write_st(ck, meta)
        expect(CNN + ["--data", "/nonexistent", "--resume", ck, "--out", path("o.st")], 1, f"metadata '{key}'")
    write_st(path("ck.st"), good)
    _, err = expect(CNN + ["--data", "/nonexistent", "--resume", path("ck.st"), "--out", path("o.st")], 1)
    check("metadata" not in err and "nonexistent" in err, f"good metadata refused: {err!r}")


def case_lists_and_batch():
    """Items 10, 11 and hex floats: list options go through the strict
    parser, and a batch smaller than the replica count is a usage error."""
    fresh()
    expect(["train", "--devices", "cpu,cpu,cpu", "--batch", "2", "--steps", "1"], 2, "--batch 2 is smaller than the 3")
    for v in ("4294967297,1", "1,4294967297", "-1,4", "16,32,64", "16", "16,", ",16", "16,,32", " 16,32", "0x10,4",
              ""):
        expect(CNN + ["--channels", v], 2, "--channels")
    expect(["train", "--devices", "cpu,,cpu", "--steps", "1"], 2, "empty item")
    expect(["train", "--devices", "", "--steps", "1"], 2, "--devices")
    expect(["train", "--lr", "0x1p-3", "--steps", "1"], 2, "--lr")
    expect(["train", "--steps", "+5"], 2, "--steps")
    expect(["check", "--ops", "add,,mul"], 2, "empty item")
    expect(["check", "--backend", "cpu,"], 2, "empty item")
    expect(["check", "--dtype", ""], 2, "--dtype")
    expect(["bench", "--backend", ",cpu"], 2, "empty item")
    expect(["compare", "--devices", "cpu,cpu,"], 2, "empty item")


def case_env_numbers():
    """Item 3 and the environment warnings: AG_* numbers are parsed strictly
    (no busy hang from an overflowing timeout), and values are escaped when
    printed."""
    fresh()
    quick = ["train", "--steps", "1", "--samples", "0", "--profile", "off", "--out", path("o.st")]
    for v in ("5000000000000", "9223372036854775807", "abc", "-5"):
        t0 = time.monotonic()
        expect(quick + ["--devices", "cpu,cpu", "--batch", "8"], 1, "AG_DIST_TIMEOUT_MS",
               env={"AG_DIST_TIMEOUT_MS": v})
        check(time.monotonic() - t0 < 50, "the refusal took too long")
    expect(["memory"], 1, "AG_NUM_THREADS", env={"AG_NUM_THREADS": "4294967297"})
    expect(["memory"], 1, "AG_PINNED_CACHE_MB", env={"AG_PINNED_CACHE_MB": "0x10"})
    expect(["memory"], 1, "AG_DETERMINISTIC", env={"AG_DETERMINISTIC": "maybe"})
    # a typo in AG_ALLOC_CONF: reported before the command starts, naming the
    # variable and the key, not as a failure of whatever first made a tensor
    for cmd in (["info"], quick):
        _, err = expect(cmd, 1, "anygrad: AG_ALLOC_CONF: unknown key 'max_splt_size_mb'",
                        env={"AG_ALLOC_CONF": "expandable_segments:1,max_splt_size_mb:64"})
        check("failed" not in err, f"the AG_ALLOC_CONF typo is reported as a failure of something else: {err!r}")
    _, err = expect(quick, 1, "AG_CPU_GEMM", env={"AG_CPU_GEMM": "\x1b[31mred"})
    check("\x1b" not in err, f"a raw escape sequence reached stderr: {err!r}")
    out, err = expect(["info"], 0)
    if "gpuemu:0" not in out:
        sys.exit(SKIP)
    out, err = expect(["info"], 0, env={"AG_GPUEMU_MEM_MB": str(2 ** 44)})
    check("AG_GPUEMU_MEM_MB" in out + err, f"no message for a wrapping AG_GPUEMU_MEM_MB: {out + err!r}")
    check("gpuemu:0" not in out, "gpuemu opened with an AG_GPUEMU_MEM_MB it does not take")
    check("memory 0 B total" not in out and "memory 0.0" not in out, "AG_GPUEMU_MEM_MB wrapped to 0")


main(globals())
