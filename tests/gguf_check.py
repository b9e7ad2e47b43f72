"""anygrad's GGUF export read by the `gguf` package (llama.cpp's own reader on
PyPI), docs/export.md "GGUF".

Trains two tiny Llamas with `anygrad train --task text --hf DIR` (width 64,
and width 48 whose rows are no multiple of 32), exports each with `anygrad
export --gguf` as f32, f16 and q8_0, and checks with gguf.GGUFReader:
every metadata key and its value against the folder's config.json and
tokenizer.json (the tokens as GPT-2 byte-level strings, the merges in rank
order), the tensors' names, shapes and types, 32-byte alignment, and the
data against model.safetensors with llama.cpp's converter's row permutation
of attn_q/attn_k (written here with NumPy as the converter writes it): f32
bit for bit, f16 as NumPy rounds, q8_0 byte for byte as gguf.quants
quantizes and dequantized within its bound. Then the refusals of the
command line.
Usage: gguf_check.py ANYGRAD_CLI WORKDIR. Exit 77 (skipped) without the
`gguf` package (scripts/deps.sh --test installs it into .venv)."""
import json
import os
import struct
import subprocess
import sys

import numpy as np

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL: " + what)


def run(cli, args, want_rc):
    p = subprocess.run([cli] + args, capture_output=True, text=True)
    if p.returncode != want_rc:
        print(p.stdout[-2000:], p.stderr[-2000:])
        raise SystemExit("anygrad %s: exit %d, expected %d" % (" ".join(args), p.returncode, want_rc))
    return p.stdout + p.stderr


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", v["dtype"]
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=np.float32).reshape(v["shape"])
    return out


def permute(w, n_head, n_head_kv=None):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def expected_tensors(folder, cfg):
    st = read_safetensors(os.path.join(folder, "model.safetensors"))
    h, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = {"token_embd.weight": st["model.embed_tokens.weight"],
           "output_norm.weight": st["model.norm.weight"]}
    if "lm_head.weight" in st:
        out["output.weight"] = st["lm_head.weight"]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            w = st["model.layers.%d.%s.weight" % (i, hf)]
            if gg == "attn_q":
                w = permute(w, h, h)
            elif gg == "attn_k":
                w = permute(w, h, hkv)
            out["blk.%d.%s.weight" % (i, gg)] = w
    return out


def field_value(f):
    from gguf import GGUFValueType
    if f.types[0] == GGUFValueType.ARRAY:
        return list(f.contents())
    return f.contents()


def check_file(path, folder, typ):
    import gguf
    from gguf import GGMLQuantizationType as Q
    cfg = json.load(open(os.path.join(folder, "config.json")))
    tj = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    vocab = sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    n_vocab = cfg["vocab_size"]
    tokens = [s for s, _ in vocab] + ["[PAD%d]" % i for i in range(len(vocab), n_vocab)]
    r = gguf.GGUFReader(path)
    ftype = {"f32": 0, "f16": 1, "q8_0": 7}[typ]
    want = {
        "general.architecture": "llama", "general.file_type": ftype,
        "llama.vocab_size": n_vocab, "llama.context_length": cfg["max_position_embeddings"],
        "llama.embedding_length": cfg["hidden_size"], "llama.block_count": cfg["num_hidden_layers"],
        "llama.feed_forward_length": cfg["intermediate_size"],
        "llama.rope.dimension_count": cfg["hidden_size"] // cfg["num_attention_heads"],
        "llama.attention.head_count": cfg["num_attention_heads"],
        "llama.attention.head_count_kv": cfg["num_key_value_heads"],
        "llama.attention.layer_norm_rms_epsilon": float(np.float32(cfg["rms_norm_eps"])),
        "llama.rope.freq_base": float(np.float32(cfg["rope_theta"])),
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": [1] * len(vocab) + [5] * (n_vocab - len(vocab)),
        "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0,
        "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False,
    }
    types = {"general.architecture": "STRING", "general.file_type": "UINT32",
             "llama.attention.layer_norm_rms_epsilon": "FLOAT32", "llama.rope.freq_base": "FLOAT32",
             "tokenizer.ggml.model": "STRING", "tokenizer.ggml.pre": "STRING",
             "tokenizer.ggml.bos_token_id": "UINT32", "tokenizer.ggml.eos_token_id": "UINT32",
             "tokenizer.ggml.add_bos_token": "BOOL", "tokenizer.ggml.add_eos_token": "BOOL",
             "tokenizer.ggml.tokens": "STRING", "tokenizer.ggml.merges": "STRING",
             "tokenizer.ggml.token_type": "INT32"}
    got = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    check(int(r.fields["GGUF.version"].contents()) == 3, "%s: version" % path)
    check(sorted(got) == sorted(want), "%s: keys %s, expected %s" % (path, sorted(got), sorted(want)))
    for k, v in want.items():
        if k not in got:
            continue
        f = got[k]
        t = f.types[-1].name
        check(t == types.get(k, "UINT32"), "%s: %s has type %s" % (path, k, t))
        gv = field_value(f)
        check(gv == v, "%s: %s = %r, expected %r" % (path, k, gv if not isinstance(gv, list) else gv[:8],
                                                    v if not isinstance(v, list) else v[:8]))

    exp = expected_tensors(folder, cfg)
    names = [t.name for t in r.tensors]
    check(sorted(names) == sorted(exp), "%s: tensors %s" % (path, names))
    check(len(set(names)) == len(names), "%s: a tensor twice" % path)
    for t in r.tensors:
        if t.name not in exp:
            continue
        w = exp[t.name]
        check(list(t.shape) == list(reversed(w.shape)), "%s: %s shape %s" % (path, t.name, list(t.shape)))
        check(t.data_offset % 32 == 0, "%s: %s at offset %d" % (path, t.name, t.data_offset))
        if w.ndim == 1 or typ == "f32":
            want_t = Q.F32
        elif typ == "f16" or w.shape[1] % 32:
            want_t = Q.F16
        else:
            want_t = Q.Q8_0
        check(t.tensor_type == want_t, "%s: %s is %s, expected %s" % (path, t.name, t.tensor_type.name,
                                                                      want_t.name))
        if t.tensor_type != want_t:
            continue
        if want_t == Q.F32:
            d = np.asarray(t.data).reshape(w.shape)
            check(np.array_equal(d.view(np.uint32), w.view(np.uint32)),
                  "%s: %s not bit for bit" % (path, t.name))
        elif want_t == Q.F16:
            d = np.asarray(t.data).reshape(w.shape)
            check(np.array_equal(d.view(np.uint16), w.astype(np.float16).view(np.uint16)),
                  "%s: %s not f16 as rounded" % (path, t.name))
        else:
            raw = np.asarray(t.data).reshape(-1)
            ref = np.asarray(gguf.quants.quantize(w, Q.Q8_0)).reshape(-1)
            check(np.array_equal(raw, ref), "%s: %s Q8_0 bytes differ from gguf.quants.quantize (%d of %d)"
                  % (path, t.name, int((raw != ref).sum()), raw.size))
            deq = gguf.quants.dequantize(np.asarray(t.data), Q.Q8_0).reshape(w.shape)
            blocks = w.reshape(-1, 32)
            d32 = np.abs(blocks).max(axis=1) / np.float32(127)
            d16 = d32.astype(np.float16).astype(np.float32)
            bound = 0.5 * d16 + 127 * np.abs(d32 - d16) + 1e-7 * np.abs(blocks).max(axis=1)
            err = np.abs(deq.reshape(-1, 32) - blocks).max(axis=1)
            check(bool((err <= bound).all()), "%s: %s dequantized beyond its bound (%g > %g)"
                  % (path, t.name, float((err - bound).max()), 0.0))
    return len(r.tensors)


def main():
    try:
        __import__("gguf")
    except ImportError:
        print("skipped: the gguf package is missing (scripts/deps.sh --test puts it in .venv)")
        return 77
    cli, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    corpus = os.path.join(work, "corpus.txt")
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "bed", "42", "it's",
             "(x)"]
    with open(corpus, "w") as f:
        for i in range(3000):
            f.write(" ".join(words[(i * 7 + j * 5) % len(words)] for j in range(8)) + ".\n")
    n_files = 0
    for width, heads in ((64, 4), (48, 4)):
        folder = os.path.join(work, "hf%d" % width)
        run(cli, ["train", "--task", "text", "--device", "cpu", "--steps", "3", "--layers", "2",
                  "--embd", str(width), "--heads", str(heads), "--kv-heads", "2", "--seq", "32",
                  "--vocab", "300",
                  "--eval-batches", "1", "--samples", "0", "--data", corpus, "--out",
                  os.path.join(work, "t%d.safetensors" % width), "--hf", folder], 0)
        for typ in ("f32", "f16", "q8_0"):
            out = os.path.join(work, "m%d_%s.gguf" % (width, typ))
            if os.path.exists(out):
                os.remove(out)
            run(cli, ["export", "--checkpoint", folder, "--gguf", out, "--type", typ], 0)
            n = check_file(out, folder, typ)
            print("%s: %d tensors, %d bytes: ok" % (os.path.basename(out), n, os.path.getsize(out)))
            n_files += 1
    # Refusals: a usage error names the option; nothing is written.
    folder = os.path.join(work, "hf64")
    bad = os.path.join(work, "bad.gguf")
    out = run(cli, ["export", "--checkpoint", folder, "--gguf", bad, "--type", "q4_0"], 2)
    check("--type expects f32, f16 or q8_0" in out, "bad --type message: " + out)
    out = run(cli, ["export", "--checkpoint", folder, "--type", "f16"], 2)
    check("--type applies to --gguf" in out, "--type alone message: " + out)
    out = run(cli, ["export", "--gguf", bad], 2)
    check("needs --checkpoint DIR" in out, "no folder message: " + out)
    out = run(cli, ["export", "--gguf", bad, "--checkpoint", folder, "--model", "cnn"], 2)
    check("needs --checkpoint DIR" in out, "--model cnn message: " + out)
    out = run(cli, ["export", "--checkpoint", folder, "--gguf", os.path.join(folder, "model.safetensors")], 2)
    check("same file" in out, "output = input message: " + out)
    out = run(cli, ["export", "--checkpoint", os.path.join(work, "absent"), "--gguf", bad], 1)
    check("config.json" in out, "missing folder message: " + out)
    notok = os.path.join(work, "notok")
    os.makedirs(notok, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        with open(os.path.join(folder, name), "rb") as f, open(os.path.join(notok, name), "wb") as g:
            g.write(f.read())
    out = run(cli, ["export", "--checkpoint", notok, "--gguf", bad], 1)
    check("has no tokenizer.json" in out, "no tokenizer message: " + out)
    out = run(cli, ["export", "--checkpoint", folder, "--gguf", work], 1)
    onnx = os.path.join(work, "both.onnx")
    run(cli, ["export", "--onnx", onnx, "--model", "llama", "--checkpoint", folder, "--gguf", work], 1)
    check(not os.path.exists(onnx), "an unwritable --gguf did not stop --onnx before it wrote")
    check(not os.path.exists(bad), "a refused export left a file")
    check(not [n for n in os.listdir(work) if ".tmp." in n], "a refused export left a temp file")
    print("%d passed, %d failed" % (n_files, len(FAILS)) if not FAILS else "")
    if FAILS:
        print("%d failed" % len(FAILS))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
