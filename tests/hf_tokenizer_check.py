"""anygrad's byte-level BPE as a Hugging Face tokenizer.json (docs/export.md).

Trains anygrad's tokenizer on the fortunes corpus (Debian package fortunes:
every file of /usr/share/games/fortunes without an extension, in name
order), writes it with ag_bpe_save_hf, and checks that the `tokenizers`
library (tokenizers.Tokenizer.from_file) gives the same ids as
ag_bpe_encode on the whole corpus and decodes them back to the same text;
then that ag_bpe_load_hf reads the file back to the same tokenizer.
Usage: hf_tokenizer_check.py LIBANYGRAD [VOCAB...]. Exit 77 (skipped)
without the `tokenizers` package (scripts/deps.sh --test installs it into
.venv) or without the corpus."""
import ctypes
import os
import sys
import tempfile
import time

FORTUNES = "/usr/share/games/fortunes"


def corpus():
    parts = []
    for name in sorted(os.listdir(FORTUNES)):
        p = os.path.join(FORTUNES, name)
        if "." not in name and os.path.isfile(p):
            with open(p, "rb") as f:
                parts.append(f.read())
    return b"".join(parts)


def main():
    try:
        import tokenizers
    except ImportError:
        print("skipped: the tokenizers package is missing (scripts/deps.sh --test puts it in .venv)")
        return 77
    if not os.path.isdir(FORTUNES):
        print("skipped: no fortunes corpus (Debian package fortunes)")
        return 77
    lib = ctypes.CDLL(sys.argv[1])
    vp, c_int, c_size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    lib.ag_bpe_train.argtypes = [ctypes.c_char_p, c_size, c_int, ctypes.POINTER(vp)]
    lib.ag_bpe_encode.argtypes = [vp, ctypes.c_char_p, c_size, ctypes.POINTER(ctypes.c_int32), c_size,
                                  ctypes.POINTER(c_size)]
    lib.ag_bpe_save_hf.argtypes = [vp, ctypes.c_char_p]
    lib.ag_bpe_load_hf.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
    lib.ag_bpe_save.argtypes = [vp, ctypes.c_char_p]
    lib.ag_bpe_vocab_size.argtypes = [vp]
    lib.ag_bpe_free.argtypes = [vp]
    lib.ag_last_error.restype = ctypes.c_char_p

    def ok(st, what):
        if st != 0:
            raise SystemExit("%s failed: %s" % (what, lib.ag_last_error().decode()))

    def encode(bpe, data):
        ids = (ctypes.c_int32 * max(1, len(data)))()
        n = c_size()
        ok(lib.ag_bpe_encode(bpe, data, len(data), ids, len(data), ctypes.byref(n)), "ag_bpe_encode")
        return ids[:n.value]

    data = corpus()
    text = data.decode("utf-8")
    vocabs = [int(v) for v in sys.argv[2:]] or [512, 4096]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for vocab in vocabs:
            t0 = time.time()
            bpe = vp()
            ok(lib.ag_bpe_train(data, len(data), vocab, ctypes.byref(bpe)), "ag_bpe_train")
            path = os.path.join(tmp, "tokenizer.json").encode()
            ok(lib.ag_bpe_save_hf(bpe, path), "ag_bpe_save_hf")
            ours = encode(bpe, data)
            hf = tokenizers.Tokenizer.from_file(path.decode())
            theirs = hf.encode(text).ids
            same = ours == theirs
            if not same:
                k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                         min(len(ours), len(theirs)))
                print("vocab %d: ids differ at %d (anygrad %s, tokenizers %s)"
                      % (vocab, k, ours[k:k + 8], theirs[k:k + 8]))
            # The chunk rules at their edges: runs at and past 256 bytes, the
            # last space of a blank run, blanks other than spaces, controls.
            edge = "".join([" " * 255 + "x", " " * 256 + "x", " " * 257 + "x\t", "a" * 255, " " + "b" * 300,
                            " 1" + "2" * 400, " " + "!" * 256 + "?", "\t\t x", " \t\ny", "\x00\x01 \x7f\x1f",
                            "\u00e9t\u00e9 " + "\u00fc" * 100, " " * 40, "end  "])
            eb = edge.encode()
            if encode(bpe, eb) != hf.encode(edge).ids:
                same = False
                print("vocab %d: ids differ on the chunk-edge text" % vocab)
            back = hf.decode(theirs) == text
            if not back:
                print("vocab %d: tokenizers' decode does not give the corpus back" % vocab)
            # ag_bpe_load_hf reads the file back to the same merges.
            again = vp()
            ok(lib.ag_bpe_load_hf(path, ctypes.byref(again)), "ag_bpe_load_hf")
            a, b = os.path.join(tmp, "a.bpe").encode(), os.path.join(tmp, "b.bpe").encode()
            ok(lib.ag_bpe_save(bpe, a), "ag_bpe_save")
            ok(lib.ag_bpe_save(again, b), "ag_bpe_save")
            reread = open(a, "rb").read() == open(b, "rb").read()
            if not reread:
                print("vocab %d: ag_bpe_load_hf gives other merges" % vocab)
            lib.ag_bpe_free(again)
            lib.ag_bpe_free(bpe)
            good = same and back and reread
            failed += not good
            print("vocab %d: %d bytes, %d ids, tokenizers %s %s: same ids %s, decode %s, reload %s (%.1f s)"
                  % (vocab, len(data), len(ours), tokenizers.__version__, "agrees" if good else "DIFFERS",
                     same, back, reread, time.time() - t0))
    print("%d passed, %d failed" % (len(vocabs) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
