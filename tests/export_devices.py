"""A model trained on any device exports as one trained on the CPU
(docs/export.md, "Trained on any device").

Usage: export_devices.py ANYGRAD_CLI WORKDIR DEVICE...   (the first DEVICE is the reference)

Trains the same small Llama with `anygrad train --task text --numerics portable`
on each device (portable numerics: the same bits on every backend), writes it
as a Hugging Face folder (--hf), and exports each folder with `anygrad export`
as ONNX and as GGUF (f32 and q8_0). Every file written for a device must
equal the reference device's byte for byte, and the consumers must read the
device-trained files: the `tokenizers` package encodes a text with the
folder's tokenizer.json, onnx.checker and ONNX Runtime run the ONNX file
within 1e-5 of anygrad's logits, and the `gguf` reader finds the token
embedding equal to the folder's weights. Exits 77 (skipped) when the
virtual environment of scripts/deps.sh --test lacks those packages.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import tokenizers
    from gguf import GGUFReader
except ImportError as e:
    print("skipped: %s (scripts/deps.sh --test installs the checkers into .venv)" % e)
    sys.exit(77)

TRAIN = ["train", "--task", "text", "--numerics", "portable", "--steps", "4", "--layers", "1", "--heads", "2",
         "--kv-heads", "1", "--embd", "32", "--vocab", "300", "--seq", "32", "--batch", "2", "--samples", "0",
         "--seed", "7", "--log-every", "100", "--eval-batches", "1"]
TEXT = "Q: Why did the chicken cross the road?\nA: To get to the other side.\t'tis  so.\n"


def run(cli, args):
    p = subprocess.run([cli] + args, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        raise SystemExit("anygrad %s: exit %d" % (" ".join(args), p.returncode))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    types = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name != "__metadata__":
            lo, hi = info["data_offsets"]
            out[name] = np.frombuffer(data[8 + n + lo:8 + n + hi], dtype=types[info["dtype"]]).reshape(info["shape"])
    return out


def produce(cli, work, dev):
    """The files a device's training and the exports write, by name."""
    tag = dev.replace(":", "_")
    hf = os.path.join(work, tag)
    shutil.rmtree(hf, ignore_errors=True)
    run(cli, TRAIN + ["--device", dev, "--hf", hf, "--out", os.path.join(work, tag + ".safetensors")])
    files = {"hf/" + f: os.path.join(hf, f) for f in sorted(os.listdir(hf))}
    files["model.onnx"] = os.path.join(work, tag + ".onnx")
    files["samples.safetensors"] = os.path.join(work, tag + "_samples.safetensors")
    run(cli, ["export", "--onnx", files["model.onnx"], "--model", "llama", "--checkpoint", hf,
              "--samples", "2x5,3x9", "--samples-out", files["samples.safetensors"]])
    for t in ("f32", "q8_0"):
        files["model-%s.gguf" % t] = os.path.join(work, "%s-%s.gguf" % (tag, t))
        run(cli, ["export", "--gguf", files["model-%s.gguf" % t], "--checkpoint", hf, "--type", t])
    return files


def consumers(files):
    """The device-trained files read by tokenizers, ONNX Runtime and gguf."""
    tok = tokenizers.Tokenizer.from_file(files["hf/tokenizer.json"])
    ids = tok.encode(TEXT).ids
    assert len(ids) > 10 and tok.decode(ids) == TEXT, "tokenizers: round trip"
    model = onnx.load(files["model.onnx"])
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(files["model.onnx"], providers=["CPUExecutionProvider"])
    samples = read_safetensors(files["samples.safetensors"])
    name = sess.get_inputs()[0].name
    for i in range(2):
        got = sess.run(None, {name: samples["input.%d" % i]})[0]
        want = samples["output.%d" % i]
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5), \
            "onnxruntime: logits of sample %d differ by %g" % (i, float(np.max(np.abs(got - want))))
    weights = read_safetensors(files["hf/model.safetensors"])
    emb = [t for t in GGUFReader(files["model-f32.gguf"]).tensors if t.name == "token_embd.weight"]
    want = weights["model.embed_tokens.weight"]
    assert len(emb) == 1 and np.array_equal(np.asarray(emb[0].data).reshape(want.shape), want), "gguf: token_embd"
    return len(ids)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    cli, work, devices = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(work, exist_ok=True)
    ref = produce(cli, work, devices[0])
    fails = 0
    for dev in devices:
        files = ref if dev == devices[0] else produce(cli, work, dev)
        equal = 0
        for key in sorted(ref):
            with open(ref[key], "rb") as a, open(files[key], "rb") as b:
                same = a.read() == b.read()
            equal += same
            if not same:
                fails += 1
                print("FAIL %s: %s differs from %s's" % (dev, key, devices[0]))
        n = consumers(files)
        print("%s: %d files equal to %s's; tokenizers (%d ids), onnxruntime and gguf read them"
              % (dev, equal, devices[0], n))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
