#!/usr/bin/env python3
"""`anygrad train --task text` under hostile input (docs/reliability.md): a
resume checkpoint whose metadata or optimizer counter is out of range or
disagrees with its tensors, a corpus that is not a regular file, and
outputs that are inputs or cannot be written. One case per CTest test:

    harden3_text_cli.py ANYGRAD_BINARY WORK_DIR CASE

Exit 0 pass, 77 skipped, anything else fails. A command that blocks is a
failure after its timeout, not a hang of the suite."""
import json
import os
import resource
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_case import SKIP, check, expect, fresh, path, read, run, setup, write, main  # noqa: E402

BIN, WORK, CASE = setup(sys.argv)


def sanitized():
    """Whether the binary runs under a sanitizer (which reserves terabytes of
    address space: no RLIMIT_AS then)."""
    with open(BIN, "rb") as f:
        data = f.read()
    return any(s in data for s in (b"__asan_init", b"__tsan_init", b"__msan_init"))


LIMIT_AS = None if sanitized() else 8 << 30


def limit():
    # a regression that reads without end fails here instead of exhausting
    # the machine's memory
    if LIMIT_AS:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def run_lim(args, timeout=60):
    return run(args, timeout, preexec_fn=limit)


def expect_lim(args, rc, err_part=None, timeout=60):
    return expect(args, rc, err_part, timeout, preexec_fn=limit)


def corpus(name="c.txt"):
    """About 18 KB of words: enough for sequences of 16 tokens in both splits."""
    w = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "bed"]
    p = path(name)
    with open(p, "w") as f:
        for i in range(600):
            f.write(" ".join(w[(i * 7 + j * 5) % 12] for j in range(8)) + ".\n")
    return p


def text(data, out, steps=2, extra=()):
    return ["train", "--task", "text", "--device", "cpu", "--data", data, "--steps", str(steps), "--batch", "2",
            "--seq", "16", "--embd", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--vocab", "260",
            "--eval-batches", "1", "--samples", "0", "--out", out] + list(extra)


def read_st(p):
    with open(p, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(p, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def unchanged(p, before, what):
    with open(p, "rb") as f:
        check(f.read() == before, f"{what} was changed")


def case_resume_metadata():
    """Item 8: the checkpoint's metadata goes through the strict parsers with
    ranges (a seed above 2^64-1, a loss "nan", "inf" or "0x10" is refused,
    naming the key); a negative or inconsistent optimizer step counter is
    refused; and the file's tensors must agree with the metadata's sizes
    before any model is built (a small file claiming width 16384 is refused
    at once, without allocating gigabytes)."""
    fresh()
    data = corpus()
    ck = path("ck.st")
    expect_lim(text(data, ck), 0)
    header, blob = read_st(ck)
    meta = header["__metadata__"]
    bad = [("seed", "99999999999999999999"), ("seed", "18446744073709551616"), ("seed", "0x10"), ("seed", "-1"),
           ("loss_sum", "nan"), ("loss_sum", "inf"), ("loss_sum", "0x10"), ("loss_sum", "-inf"),
           ("loss_sum", " 1"), ("loss_sum", "1e999"), ("first_loss", "nan"), ("first_loss", "0x1.8p+1"),
           ("first_loss", "-1"), ("step", "-1"), ("step", " 2"), ("loss_n", "3"), ("data_hash", "0x10"),
           ("data_hash", "d6f3d94439b6fba"), ("tokenizer_hash", "+6f3d94439b6fba8"), ("dim", "15"),
           ("kv_heads", "3"), ("vocab", "255")]
    for key, value in bad:
        h = dict(header, __metadata__=dict(meta, **{key: value}))
        write_st(path("bad.st"), h, blob)
        expect_lim(text(data, path("o.st"), 4, ["--resume", path("bad.st")]), 1, f"metadata '{key}'")
        check(not os.path.exists(path("o.st")), f"a refused resume ({key} {value!r}) wrote --out")

    # sizes the tensors do not have: refused naming the tensor, before the
    # model is built (the corpus is not even read)
    for key, value, tensor in [("dim", "16384", "model.embed_tokens.weight"), ("dim", "32", "model.embed_tokens.weight"),
                               ("layers", "2", "model.layers.1."), ("layers", "64", "model.layers.1."),
                               ("kv_heads", "2", "k_proj"), ("heads", "1", "k_proj"), ("vocab", "256", "vocab")]:
        h = dict(header, __metadata__=dict(meta, **{key: value}))
        write_st(path("bad.st"), h, blob)
        t0 = time.monotonic()
        _, err = expect_lim(text("/nonexistent", path("o.st"), 4, ["--resume", path("bad.st")]), 1, "AG_ERR_CORRUPT")
        check(tensor in err and f"{key} {value}" in err, f"{key} {value}: the error does not name {tensor!r}: {err!r}")
        check(time.monotonic() - t0 < 30, f"{key} {value}: the refusal took too long")
    # one layer fewer in the metadata than in the file
    h = dict(header, __metadata__=dict(meta, layers="1"))
    h2 = dict(h)
    for name, e in header.items():
        if name.startswith("model.layers.0."):
            h2[name.replace("model.layers.0.", "model.layers.1.")] = dict(e, data_offsets=[len(blob), len(blob) + (
                e["data_offsets"][1] - e["data_offsets"][0])])
            blob += blob[e["data_offsets"][0]:e["data_offsets"][1]]
    write_st(path("bad.st"), h2, blob)
    expect_lim(text("/nonexistent", path("o.st"), 4, ["--resume", path("bad.st")]), 1, "model.layers.1.")
    _, blob = read_st(ck)

    # the optimizer's step counter: negative (ignored by AdamW, whose bias
    # correction then restarted at 0) or not the metadata's step
    off = header["optimizer.step"]["data_offsets"][0]
    for v in (-5, 7, 0):
        b = bytearray(blob)
        b[off:off + 8] = struct.pack("<q", v)
        write_st(path("bad.st"), header, bytes(b))
        _, err = expect_lim(text(data, path("o.st"), 4, ["--resume", path("bad.st")]), 1, "optimizer.step")
        check("AG_ERR_CORRUPT" in err, f"step counter {v}: not reported as corrupt: {err!r}")
    h = dict(header)
    h["optimizer.step"] = dict(header["optimizer.step"], dtype="F64")
    write_st(path("bad.st"), h, blob)
    expect_lim(text(data, path("o.st"), 4, ["--resume", path("bad.st")]), 1, "optimizer.step")
    check(not os.path.exists(path("o.st")), "a refused resume wrote --out")

    # the checkpoint as written resumes
    expect_lim(text(data, path("o.st"), 4, ["--resume", ck]), 0)


def case_data_file():
    """Item 10: --data is read with the shared regular-file reader, bounded:
    a FIFO is refused at once (it was read forever), /dev/zero is refused
    (it was read until memory ran out), a file over the bound is refused
    before it is read, and every error names the path and the reason."""
    fresh()
    out = path("o.st")
    fifo = path("fifo")
    os.mkfifo(fifo)
    expect_lim(text(fifo, out), 1, f"{fifo} is not a regular file (a FIFO)", timeout=30)
    expect_lim(text("/dev/zero", out), 1, "/dev/zero is not a regular file (a character device)", timeout=30)
    expect_lim(text(WORK, out), 1, f"{WORK} is not a regular file (a directory)")
    sock = path("sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    expect_lim(text(sock, out), 1, f"{sock}: No such device or address")
    s.close()
    os.symlink("loop", path("loop"))
    expect_lim(text(path("loop"), out), 1, f"{path('loop')}: Too many levels of symbolic links")
    expect_lim(text(path("missing.txt"), out), 1, f"{path('missing.txt')}: No such file or directory")
    big = path("big.txt")
    with open(big, "wb") as f:
        f.truncate((256 << 20) + 1)  # sparse: refused by its size, never read
    expect_lim(text(big, out), 1, f"{big} is 268435457 bytes, more than the 268435456")
    check(not os.path.exists(out), "a refused run wrote --out")
    left = [n for n in os.listdir(WORK) if ".tmp." in n]
    check(not left, f"temp files left: {left}")
    expect_lim(text(corpus(), out), 0)


def long_path(n):
    """A path of exactly n characters under WORK (folders of at most 200)."""
    p = os.path.join(WORK, f"n{n}")
    i = 0
    while n - len(p) - 1 > 200:
        i += 1
        p = os.path.join(p, f"{i}".ljust(150, "d"))
    os.makedirs(p, exist_ok=True)
    return os.path.join(p, "c" * (n - len(p) - 1))


def case_outputs():
    """Item 11: an output that is one of the inputs (the checkpoint or its
    tokenizer over --data or --resume, by name, hard link or symlink) is a
    usage error before training; the tokenizer's path is never cut (an --out
    of 1096-1099 characters got a cut name, and at 1099 the tokenizer
    replaced the checkpoint); the tokenizer's path is checked with the
    checkpoint's before the first step."""
    fresh()
    data = corpus()
    with open(data, "rb") as f:
        before = f.read()
    expect_lim(text(data, data), 2, "is the same file as")
    os.link(data, path("hard.txt"))
    expect_lim(text(data, path("hard.txt")), 2, "is the same file as")
    os.symlink(data, path("sym.txt"))
    expect_lim(text(data, path("sym.txt")), 2, "is the same file as")
    expect_lim(text(path("sym.txt"), data), 2, "is the same file as")
    unchanged(data, before, "the corpus")
    # the tokenizer (OUT.bpe) over the corpus
    shutil.copy(data, path("d.bpe"))
    with open(path("d.bpe"), "rb") as f:
        dbpe = f.read()
    expect_lim(text(path("d.bpe"), path("d")), 2, "is the same file as")
    unchanged(path("d.bpe"), dbpe, "the corpus d.bpe")
    check(not os.path.exists(path("d")), "a refused run wrote --out")
    # the tokenizer over the checkpoint resumed from; the checkpoint itself
    # may be --out (it is read before the first step, replaced atomically)
    ck = path("ck.st")
    expect_lim(text(data, ck), 0)
    shutil.copy(ck, path("r.bpe"))
    with open(path("r.bpe"), "rb") as f:
        rb = f.read()
    expect_lim(text(data, path("r"), 4, ["--resume", path("r.bpe")]), 2, "is the same file as")
    unchanged(path("r.bpe"), rb, "the checkpoint r.bpe")
    expect_lim(text(data, ck, 4, ["--resume", ck]), 0)

    # the tokenizer's path at full length
    for n in (1096, 1099):
        out = long_path(n)
        check(len(out) == n, f"test: path of {len(out)} characters, not {n}")
        expect_lim(text(data, out), 0)
        header, _ = read_st(out)
        check(header["__metadata__"]["anygrad"] == "text-1", f"--out of {n} characters is not the checkpoint")
        check(os.path.exists(out + ".bpe"), f"no tokenizer at --out + .bpe for an --out of {n} characters")
        with open(out + ".bpe", "rb") as f:
            check(f.read(12) == b"anygrad-bpe ", f"{out}.bpe is not a tokenizer")
        left = [m for m in os.listdir(os.path.dirname(out)) if m != os.path.basename(out) and
                m != os.path.basename(out) + ".bpe"]
        check(not left, f"other files written for an --out of {n} characters: {left}")

    # an unwritable tokenizer path is found before the first step
    out = path("u.st")
    os.mkdir(out + ".bpe")
    so, _ = expect_lim(text(data, out), 1, f"{out}.bpe exists and is not a regular file")
    check("step 1/" not in so, f"it trained before refusing the tokenizer path: {so!r}")
    check(not os.path.exists(out), "the checkpoint was written though the tokenizer cannot be")
    fifo = path("f.st.bpe")
    os.mkfifo(fifo)
    expect_lim(text(data, path("f.st")), 1, "not a regular file", timeout=30)
    check(stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced")


main(globals())
