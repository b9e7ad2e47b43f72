#!/usr/bin/env python3
"""The command line's outputs and options under hostile input
(docs/reliability.md): `check --report` and `--dump-inputs` written through
the shared output checks, outputs that are an input or another output, and
option values that look like options or overflow. One case per CTest test:

    harden3_tools_cli.py ANYGRAD_BINARY WORK_DIR CASE

Exit 0 pass, 77 skipped, anything else fails. A command that blocks is a
failure after its timeout, not a hang of the suite."""
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_case import SKIP, check, expect, fresh, path, read, run, setup, write, main  # noqa: E402

BIN, WORK, CASE = setup(sys.argv)
CHECK = ["check", "--backend", "cpu", "--ops", "exp", "--dtype", "f32"]


def fsize_limit(fsize):
    """A preexec_fn: a write past fsize bytes fails with EFBIG instead of
    killing the process."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return limit


def run_fs(args, timeout=60, fsize=None):
    return run(args, timeout, cwd=WORK, preexec_fn=fsize_limit(fsize) if fsize is not None else None)


def expect_fs(args, rc, err_part=None, timeout=60, fsize=None):
    return expect(args, rc, err_part, timeout, cwd=WORK, preexec_fn=fsize_limit(fsize) if fsize is not None else None)


def no_temp_files(where=None):
    where = where or WORK
    left = [n for n in os.listdir(where) if ".tmp." in n]
    check(not left, f"temp files left in {where}: {left}")


def case_check_outputs():
    """`check --report` is checked before the run and written atomically
    (a FIFO is refused at once, a symlink is replaced, not written through,
    a write error is exit 1 with the old page intact); `--dump-inputs` is
    checked up front and every failed open or write is exit 1 naming the
    file."""
    fresh()
    fifo = path("fifo.html")
    os.mkfifo(fifo)
    out, _ = expect_fs(CHECK + ["--report", fifo], 1, "not a regular file", timeout=30)
    check(" pass" not in out and "wrote" not in out, f"the run went ahead before the refusal: {out!r}")
    check(stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced")
    out, _ = expect_fs(CHECK + ["--report", "/dev/full"], 1, "not a regular file")
    check("wrote" not in out, f"a refused report is said to be written: {out!r}")
    expect_fs(CHECK + ["--report", path("no/such/dir/r.html")], 1, "cannot write")
    # a symlink is replaced by the page; its target keeps its content
    target = path("target.txt")
    write(target, "keep")
    link = path("link.html")
    os.symlink(target, link)
    expect_fs(CHECK + ["--report", link], 0)
    check(read(target) == "keep", "the symlink's target was overwritten")
    check(not os.path.islink(link) and "<html" in read(link), "the symlink was not replaced by the page")
    # a write error (the page is larger than the file size limit) keeps the old page
    old = path("old.html")
    write(old, "old page")
    out, _ = expect_fs(CHECK + ["--report", old], 1, "write error", fsize=4096)
    check("wrote" not in out, f"a failed report is said to be written: {out!r}")
    check(read(old) == "old page", "a failed write changed the existing page")
    no_temp_files()
    # --dump-inputs: the directory is checked before the run
    expect_fs(CHECK + ["--dump-inputs", path("nodir")], 2, "not an existing directory")
    expect_fs(CHECK + ["--dump-inputs", target], 2, "not an existing directory")
    # a directory where no file can be created, even by root
    try:
        fd = os.open("/sys/anygrad-probe", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        os.close(fd)
        os.unlink("/sys/anygrad-probe")
    except OSError:
        out, _ = expect_fs(CHECK + ["--dump-inputs", "/sys"], 1, "/sys")
        check(" pass" not in out, f"the run went ahead before the refusal: {out!r}")
    # a file that cannot be written is an error naming it: a directory or a
    # FIFO where the first dump file goes (the FIFO is not waited on)
    d = path("dump")
    os.makedirs(d)
    expect_fs(CHECK + ["--dump-inputs", d], 0)
    names = sorted(os.listdir(d))
    check(names, "no dump files written")
    first = os.path.join(d, names[0])
    for make in ("dir", "fifo"):
        shutil.rmtree(d)
        os.makedirs(d)
        if make == "dir":
            os.makedirs(first)
        else:
            os.mkfifo(first)
        expect_fs(CHECK + ["--dump-inputs", d], 1, first, timeout=30)
        no_temp_files(d)
    # a write error (a file size limit below one dump file)
    shutil.rmtree(d)
    os.makedirs(d)
    expect_fs(CHECK + ["--dump-inputs", d], 1, "write error", fsize=64)
    no_temp_files(d)


COMPARE = ["compare", "--devices", "cpu,cpu", "--steps", "1"]
TRAIN = ["train", "--steps", "1", "--samples", "0"]
CNN = ["train", "--task", "fashion-mnist", "--epochs", "1", "--train-limit", "64", "--test-limit", "64"]


def case_outputs_distinct():
    """An output that is one of the inputs or another output (the same file
    by device and inode, through symlinks and hard links, or the same name
    for a file that does not exist yet) is a usage error before anything
    runs, and every file keeps its content."""
    fresh()
    words = path("words.txt")
    text = "".join("w" + chr(97 + i // 26) + chr(97 + i % 26) + "\n" for i in range(200))
    write(words, text)
    os.symlink(words, path("sym.txt"))
    os.link(words, path("hard.txt"))
    same = "is the same file as"
    for args in (["--words", words, "--json", words],
                 ["--words", words, "--report", words],
                 ["--words", words, "--json", path("sym.txt")],
                 ["--words", words, "--report", path("hard.txt")],
                 ["--words", path("sym.txt"), "--json", path("hard.txt")]):
        expect_fs(COMPARE + args, 2, same)
    # two outputs: both absent (also spelled differently), both present
    expect_fs(COMPARE + ["--words", words, "--json", path("x.out"), "--report", path("x.out")], 2, same)
    expect_fs(COMPARE + ["--words", words, "--json", path("x.out"), "--report", path("./x.out")], 2, same)
    check(not os.path.exists(path("x.out")), "a refused run created its output")
    write(path("r.html"), "old")
    expect_fs(COMPARE + ["--words", words, "--json", path("r.html"), "--report", path("r.html")], 2, same)
    check(read(path("r.html")) == "old", "a refused run changed an output")
    # train: the word list, the checkpoint, the trace and the report
    expect_fs(TRAIN + ["--words", words, "--out", words], 2, same)
    expect_fs(TRAIN + ["--words", words, "--trace", path("sym.txt")], 2, same)
    expect_fs(TRAIN + ["--words", words, "--report", path("hard.txt")], 2, same)
    expect_fs(TRAIN + ["--words", words, "--out", path("c.st"), "--trace", path("c.st")], 2, same)
    expect_fs(TRAIN + ["--words", words, "--trace", path("t.json"), "--report", path("t.json")], 2, same)
    write(path("ck.st"), "checkpoint")
    expect_fs(TRAIN + ["--words", words, "--resume", path("ck.st"), "--trace", path("ck.st")], 2, same)
    check(read(path("ck.st")) == "checkpoint", "a refused run changed the checkpoint")
    # fashion-mnist: --out over one of the IDX files of --data
    data = path("data")
    os.makedirs(data)
    idx = os.path.join(data, "train-images-idx3-ubyte.gz")
    write(idx, "idx")
    expect_fs(CNN + ["--data", data, "--out", idx], 2, same)
    check(read(idx) == "idx", "a refused run changed the data")
    # text: --out over the corpus, or the tokenizer written beside --out
    expect_fs(["train", "--task", "text", "--data", words, "--out", path("sym.txt")], 2, same)
    write(path("m.st.bpe"), "corpus")
    expect_fs(["train", "--task", "text", "--data", path("m.st.bpe"), "--out", path("m.st")], 2, same)
    check(read(words) == text, "a refused run changed the word list")
    no_temp_files()


def case_option_values():
    """An explicit --opt=value is the value even when it starts with "--",
    while "--opt --other" is still a missing value; a device index past
    int64 is out of range as typed, and device strings go through the strict
    parser (escaped in messages)."""
    fresh()
    expect_fs(["memory", "--device", "cpu", "--json=--conf"], 0)
    check(os.path.isfile(path("--conf")), "--json=--conf did not write the file '--conf'")
    expect_fs(["memory", "--device", "cpu", "--json", "--conf"], 2, "'--json' needs a value")
    # the value is taken, so the next option is parsed (and fails on its own value)
    expect_fs(["train", "--task", "text", "--prompt=--steps", "--steps", "x"], 2, "--steps expects")
    expect_fs(["train", "--task", "text", "--prompt", "--steps", "5"], 2, "'--prompt' needs a value")
    big = "99999999999999999999"
    _, err = expect_fs(["memory", "--device", "cpu:" + big], 1, big)
    check("out of range" in err, f"no 'out of range' for device index {big}: {err!r}")
    check("9223372036854775807" not in err, f"the index saturated: {err!r}")
    for bad in ("cpu:+0", "cpu: 0", "cpu:0x1", "cpu:-1", "cpu:", "cpu:1\x1b[2J"):
        _, err = expect_fs(["memory", "--device", bad], 2, "is not a device")
        check("\x1b" not in err, f"a raw escape sequence reached stderr: {err!r}")
    _, err = expect_fs(["memory", "--device", "cpu:1\x1b[2J"], 2, "\\x1b")
    expect_fs(["memory", "--device", "cpu:00"], 0)


main(globals())
