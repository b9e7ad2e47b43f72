"""Check an ONNX file written by `anygrad export --onnx` against anygrad itself.

usage: onnx_check.py ANYGRAD_CLI WORKDIR mlp|cnn|llama   (train a little, export, check)
       onnx_check.py MODEL.onnx SAMPLES.safetensors ...   (check files written before; pairs)
       onnx_check.py ANYGRAD_CLI WORKDIR refusals         (the command's refusals; no onnx needed)

The first form trains the model a few steps with `anygrad train` (cnn:
when the Fashion-MNIST files are installed, else freshly initialised), so
that batch-norm statistics and norm weights are not their initial values,
then runs `anygrad export --onnx --checkpoint ... --samples ...`.

The model must pass onnx.checker.check_model(full_check=True), and ONNX
Runtime (CPU execution provider) must give, for every input.<i> of the
samples file, outputs within 1e-5 of anygrad's output.<i> (a model of several
outputs: <output name>.<i>). The samples hold
at least two batch sizes, so the dynamic batch dimension is exercised.
Exits 77 (skip) when onnx or onnxruntime is not installed (scripts/deps.sh
--test installs them into .venv).
"""
import json
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    MISSING = None
except ImportError as e:  # the venv lacks the checkers
    MISSING = e


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "F16": np.float16}
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(data[base + lo:base + hi], dtype=dtypes[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def export(cli, work, model):
    """Train a little, export with samples of two batch sizes; return the paths."""
    os.makedirs(work, exist_ok=True)
    onnx_path, samples = os.path.join(work, f"{model}.onnx"), os.path.join(work, f"{model}_samples.safetensors")
    for p in (onnx_path, samples):
        if os.path.exists(p):
            os.remove(p)
    args = [cli, "export", "--onnx", onnx_path, "--model", model, "--samples-out", samples, "--threads", "1"]
    if model == "mlp":
        ck = os.path.join(work, "charlm.safetensors")
        run([cli, "train", "--steps", "20", "--context", "3", "--emb", "8", "--hidden", "16", "--seed", "3",
             "--out", ck, "--threads", "1"])
        run(args + ["--checkpoint", ck, "--samples", "2,7"])
    elif model == "cnn":
        ck = os.path.join(work, "cnn.safetensors")
        if os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
            run([cli, "train", "--task", "fashion-mnist", "--epochs", "1", "--channels", "4,8", "--batch", "64",
                 "--train-limit", "256", "--test-limit", "64", "--workers", "0", "--out", ck, "--threads", "1"])
            args += ["--checkpoint", ck]
        else:
            args += ["--channels", "4,8", "--seed", "5"]
        run(args + ["--samples", "1,3"])
    else:
        text, hf = os.path.join(work, "text.txt"), os.path.join(work, "hf")
        words = "the quick brown fox jumps over the lazy dog and then some more words follow here\n" * 40
        with open(text, "w") as f:
            f.write(words)
        run([cli, "train", "--task", "text", "--data", text, "--steps", "3", "--batch", "2", "--layers", "2",
             "--heads", "4", "--kv-heads", "2", "--embd", "32", "--seq", "16", "--vocab", "256", "--samples", "0",
             "--eval-batches", "1", "--out", os.path.join(work, "text.safetensors"), "--hf", hf,
             "--threads", "1"])
        run(args + ["--checkpoint", hf, "--samples", "1x16,3x5"])
    return onnx_path, samples


def refusals(cli, work):
    """Usage and runtime errors of `anygrad export`: exit status, message, no file left."""
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "r.onnx")
    ck = os.path.join(work, "gpt.safetensors")
    run([cli, "train", "--model", "gpt", "--steps", "1", "--layers", "1", "--embd", "16", "--heads", "2",
         "--out", ck, "--threads", "1"])
    cases = [
        ([], 2, "--onnx OUT.onnx and --model"),
        (["--onnx", out, "--model", "rnn"], 2, "--model must be mlp, cnn or llama"),
        (["--onnx", out, "--model", "mlp", "--samples", "2"], 2, "go together"),
        (["--onnx", out, "--model", "mlp", "--samples", "0", "--samples-out", out + ".st"], 2, "--samples expects"),
        (["--onnx", ck, "--model", "mlp", "--checkpoint", ck], 2, "refusing to overwrite"),
        (["--onnx", out, "--model", "mlp", "--samples", "2", "--samples-out", out], 2, "refusing to overwrite"),
        (["--onnx", os.path.join(work, "no", "such", "dir.onnx"), "--model", "cnn"], 1, "cannot write"),
        (["--onnx", work, "--model", "mlp"], 1, "not a regular file"),
        (["--onnx", out, "--model", "mlp", "--checkpoint", ck], 1, "only the MLP is exported"),
        (["--onnx", out, "--model", "llama", "--checkpoint", work], 1, "config.json"),
        (["--onnx", out, "--model", "llama", "--heads", "3"], 1, "n_heads"),
    ]
    bad = 0
    for args, rc, msg in cases:
        p = subprocess.run([cli, "export"] + args, capture_output=True, text=True, timeout=60)
        ok = p.returncode == rc and msg in p.stderr and not os.path.exists(out)
        leftovers = [f for f in os.listdir(work) if ".tmp." in f]
        if not ok or leftovers:
            bad += 1
            print(f"FAIL export {' '.join(args)}: rc {p.returncode} (want {rc}), stderr {p.stderr.strip()!r}, "
                  f"left {leftovers}, wrote {os.path.exists(out)}")
        else:
            print(f"ok: export {' '.join(args)} -> {rc}: {p.stderr.strip()}")
    sys.exit(1 if bad else 0)


def check(model_path, samples_path):
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 17, model.opset_import
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    dims = inp.shape
    assert isinstance(dims[0], str), f"batch dimension is not dynamic: {dims}"
    if "input_ids" == inp.name:
        assert isinstance(dims[1], str), f"sequence dimension is not dynamic: {dims}"
    samples = read_safetensors(samples_path)
    n = sum(1 for k in samples if k.startswith("input."))
    batches = {samples[f"input.{i}"].shape[0] for i in range(n)}
    assert len(batches) >= 2, f"samples need two batch sizes, got {sorted(batches)}"
    # one output: output.<i>; several: <output name>.<i>
    names = [o.name for o in sess.get_outputs()]
    keys = ["output"] if len(names) == 1 else names
    worst = 0.0
    for i in range(n):
        x = samples[f"input.{i}"]
        got_all = sess.run(None, {inp.name: x})
        for key, got in zip(keys, got_all):
            want = samples[f"{key}.{i}"]
            assert got.shape == want.shape, f"{key} {i}: shape {got.shape} != anygrad's {want.shape}"
            err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
            worst = max(worst, err)
            assert np.allclose(got, want, rtol=1e-5, atol=1e-5), f"{key} {i} {x.shape}: max |diff| {err:.3g}"
            print(f"{model_path}: {key} {list(x.shape)} -> {list(got.shape)}, "
                  f"max |onnxruntime - anygrad| {err:.3g}")
    print(f"ok: {model_path} ({len(model.graph.node)} nodes, opset {model.opset_import[0].version}, "
          f"onnx {onnx.__version__}, onnxruntime {ort.__version__}), worst {worst:.3g}")


def main():
    if len(sys.argv) == 4 and sys.argv[3] == "refusals":
        refusals(sys.argv[1], sys.argv[2])
    if MISSING is not None:
        print(f"skip: {MISSING}")
        sys.exit(77)
    if len(sys.argv) == 4 and sys.argv[3] in ("mlp", "cnn", "llama"):
        check(*export(*sys.argv[1:4]))
        return
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit(__doc__)
    for k in range(0, len(args), 2):
        check(args[k], args[k + 1])


if __name__ == "__main__":
    main()
