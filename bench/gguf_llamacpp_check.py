"""llama.cpp runs anygrad's GGUF export (docs/export.md "GGUF"; not in CI).

Trains a small Llama briefly with `anygrad train --task text` on the fortunes
corpus (or takes --folder, a Hugging Face folder with a tokenizer), exports
it with `anygrad export --gguf` as f32, f16 and q8_0, and loads each file in
llama.cpp through llama-cpp-python (scripts/deps.sh --bench-gguf builds it
from source for the CPU). Then:
- tokenizer: llama.cpp's tokenization of the prompt and of each fortune of
  the corpus against anygrad's ids (ag_bpe_encode), counting the fortunes
  whose ids differ (the pre-tokenizers differ: docs/export.md);
- generation: from the prompt's ids, N greedy tokens in llama.cpp (argmax of
  its logits, token by token) against anygrad's greedy generation with the
  key/value cache (bench/gguf_greedy, ag_llama_forward_cached): f32 and f16
  must give the same tokens; q8_0 is reported with its agreement, and
  required to pick anygrad's token at >= 90% of the positions when fed
  anygrad's sequence (teacher forcing);
- the largest logit difference along the way;
then the same on an untied variant of the folder (lm_head = the embedding
plus noise, rope_theta 500000, rms_norm_eps 1e-6).
Usage: ANYGRAD_LIBRARY=build/lib/libanygrad.so .venv/bin/python \
  bench/gguf_llamacpp_check.py [--build build] [--folder DIR] [--tokens 64] [--steps 300]
Exit 0 when all hold, 1 otherwise."""
import argparse
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

FORTUNES = "/usr/share/games/fortunes"
PROMPTS = ["Q: What is the meaning of life?\nA: ", "The", "Computers are"]


def fortunes():
    out = []
    for name in sorted(os.listdir(FORTUNES)):
        p = os.path.join(FORTUNES, name)
        if "." not in name and os.path.isfile(p):
            with open(p, "rb") as f:
                out += [x.strip(b"\n") for x in f.read().split(b"\n%\n")]
    return [x for x in out if x]


class Tok:
    """anygrad's tokenizer of a folder through libanygrad (ctypes)."""

    def __init__(self, lib, path):
        self.lib = ctypes.CDLL(lib)
        self.lib.ag_last_error.restype = ctypes.c_char_p
        self.h = ctypes.c_void_p()
        if self.lib.ag_bpe_load_hf(path.encode(), ctypes.byref(self.h)) != 0:
            raise SystemExit("ag_bpe_load_hf: " + self.lib.ag_last_error().decode())

    def encode(self, b):
        cap = len(b) + 1
        ids = (ctypes.c_int32 * cap)()
        n = ctypes.c_size_t()
        if self.lib.ag_bpe_encode(self.h, b, ctypes.c_size_t(len(b)), ids, ctypes.c_size_t(cap),
                                  ctypes.byref(n)):
            raise SystemExit("ag_bpe_encode: " + self.lib.ag_last_error().decode())
        return list(ids[:n.value])


def llama_greedy(llm, prompt, n):
    llm.reset()
    llm.eval(prompt)
    ids, logits = [], []
    for _ in range(n):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        t = int(np.argmax(row))
        ids.append(t)
        logits.append(row)
        llm.eval([t])
    return ids, logits


def llama_forced(llm, prompt, seq):
    """llama.cpp's argmax at each position when fed prompt + seq."""
    llm.reset()
    llm.eval(prompt)
    picks = []
    for t in seq:
        picks.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([t])
    return picks


def check_folder(a, llama_cpp, cli, greedy, lib, work, folder, tag):
    """Greedy generation of llama.cpp on the three exports of folder
    against anygrad's; the tokenizer checks for tag "tied"."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    tok = Tok(lib, os.path.join(folder, "tokenizer.json"))
    refs = []
    for text in PROMPTS:
        prompt = tok.encode(text.encode())
        n_new = min(a.tokens, cfg["max_position_embeddings"] - len(prompt))
        t0 = time.time()
        ref = json.loads(subprocess.run([greedy, folder, str(n_new), ",".join(map(str, prompt))], check=True,
                                        capture_output=True, text=True).stdout)
        out = bytes(b for i in ref["ids"] for b in tok_bytes(tok, i)).decode("utf-8", "replace")
        print("[%s] anygrad greedy from %r (%d new tokens, %.2f s): %r"
              % (tag, text, n_new, time.time() - t0, out))
        refs.append((text, prompt, ref))
    ok = True
    corpus = fortunes()[:2000]
    for typ in ("f32", "f16", "q8_0"):
        path = os.path.join(work, "%s_%s.gguf" % (tag, typ))
        subprocess.run([cli, "export", "--checkpoint", folder, "--gguf", path, "--type", typ], check=True,
                       stdout=subprocess.DEVNULL)
        t0 = time.time()
        # logits_all: llama-cpp-python fills .scores only so; the key/value
        # cache in f32 (ggml type 0) as anygrad's, not llama.cpp's f16.
        llm = llama_cpp.Llama(model_path=path, n_ctx=cfg["max_position_embeddings"], n_threads=a.threads,
                              n_batch=128, logits_all=True, type_k=0, type_v=0, verbose=False)
        load_s = time.time() - t0
        if typ == "f32" and tag == "tied":
            for text, prompt, _ in refs:
                lp = llm.tokenize(text.encode(), add_bos=False, special=False)
                print("prompt %r: llama.cpp's ids %s" % (text, "are anygrad's" if lp == prompt else "DIFFER"))
                ok &= lp == prompt
            diff = [i for i, s in enumerate(corpus) if llm.tokenize(s, add_bos=False, special=False)
                    != tok.encode(s)]
            print("tokenizer: llama.cpp (tokenizer.ggml.pre gpt-2) gives anygrad's ids on %d of %d fortunes"
                  % (len(corpus) - len(diff), len(corpus)))
            # anygrad keeps a run of blanks whole unless it ends in a space
            # before a word; llama.cpp's gpt-2 rule also splits the last
            # blank off when it is \n or \t ("\n\n" + "word" is "\n", "\n").
            ws = [i for i in diff if re.search(rb"[\t-\r ][\t-\r](?=[^\t-\r ])", corpus[i])]
            print("  of the %d that differ, %d hold a run of blanks ending in \\n, \\t, ... "
                  "before a non-blank" % (len(diff), len(ws)))
            for i in [i for i in diff if i not in set(ws)][:5]:
                print("  differs otherwise: %r" % corpus[i][:70])
        for text, prompt, ref in refs:
            n_new = len(ref["ids"])
            t0 = time.time()
            ids, logits = llama_greedy(llm, prompt, n_new)
            gen_s = time.time() - t0
            same = 0
            while same < n_new and ids[same] == ref["ids"][same]:
                same += 1
            d = max(float(np.abs(np.array(ref["logits"][i]) - logits[i]).max()) for i in range(max(same, 1)))
            forced = llama_forced(llm, prompt, ref["ids"])
            agree = sum(int(x == y) for x, y in zip(forced, ref["ids"])) / n_new
            print("[%s] %-4s load %.2f s, %d tokens in %.2f s from %r: greedy %s (%d of %d identical before "
                  "the first difference), teacher-forced top-1 agreement %.1f%%, logits max |diff| %.2e "
                  "over the common prefix" % (tag, typ, load_s, n_new, gen_s, text[:12],
                                              "SAME" if same == n_new else "DIFFERS", same, n_new,
                                              100 * agree, d))
            if typ in ("f32", "f16"):
                ok &= same == n_new
            else:
                ok &= agree >= 0.9
        del llm
    return ok


def untied_variant(folder, work):
    """folder with an untied head (lm_head = the embedding plus N(0, 0.02)
    noise), rope_theta 500000 and rms_norm_eps 1e-6: the GGUF keys and
    output.weight that the tied default does not exercise."""
    out = os.path.join(work, "hf_untied")
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    cfg.update(tie_word_embeddings=False, rope_theta=500000.0, rms_norm_eps=1e-6)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    with open(os.path.join(folder, "tokenizer.json"), "rb") as f, \
            open(os.path.join(out, "tokenizer.json"), "wb") as g:
        g.write(f.read())
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    meta = head.pop("__metadata__", None)
    tensors = {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
    emb = np.frombuffer(tensors["model.embed_tokens.weight"], dtype=np.float32)
    noise = np.random.default_rng(7).normal(0, 0.02, emb.shape).astype(np.float32)
    tensors["lm_head.weight"] = (emb + noise).tobytes()
    head["lm_head.weight"] = dict(head["model.embed_tokens.weight"])
    new, off, blob = {}, 0, []
    for k in sorted(tensors):
        new[k] = dict(head[k], data_offsets=[off, off + len(tensors[k])])
        off += len(tensors[k])
        blob.append(tensors[k])
    if meta is not None:
        new["__metadata__"] = meta
    h = json.dumps(new).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blob))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--folder")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is missing: scripts/deps.sh --bench-gguf")
        return 77
    cli = os.path.join(a.build, "bin", "anygrad")
    greedy = os.path.join(a.build, "bin", "gguf_greedy")
    lib = os.environ.get("ANYGRAD_LIBRARY", os.path.join(a.build, "lib", "libanygrad.so"))
    work = tempfile.mkdtemp(prefix="gguf_llamacpp_")
    folder = a.folder
    if not folder:
        folder = os.path.join(work, "hf")
        t0 = time.time()
        subprocess.run([cli, "train", "--task", "text", "--device", "cpu", "--steps", str(a.steps),
                        "--layers", "2",
                        "--embd", "64", "--heads", "4", "--kv-heads", "2", "--samples", "0", "--out",
                        os.path.join(work, "t.safetensors"), "--hf", folder], check=True,
                       stdout=subprocess.DEVNULL)
        print("trained: anygrad train --task text --steps %d --layers 2 --embd 64 --heads 4 --kv-heads 2 "
              "(vocabulary 512, context 128) in %.1f s" % (a.steps, time.time() - t0))
    ok = check_folder(a, llama_cpp, cli, greedy, lib, work, folder, "tied")
    ok &= check_folder(a, llama_cpp, cli, greedy, lib, work, untied_variant(folder, work), "untied")
    print("llama.cpp (llama-cpp-python %s): %s" % (llama_cpp.__version__, "ok" if ok else "FAILED"))
    return 0 if ok else 1


def tok_bytes(tok, i):
    n = ctypes.c_size_t()
    tok.lib.ag_bpe_token_bytes.restype = ctypes.POINTER(ctypes.c_uint8)
    p = tok.lib.ag_bpe_token_bytes(tok.h, ctypes.c_int32(i), ctypes.byref(n))
    return bytes(p[:n.value])


if __name__ == "__main__":
    sys.exit(main())
