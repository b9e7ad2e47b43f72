"""Check an ONNX file written by `anygrad export --onnx` against anygrad itself.

usage: onnx_check.py ANYGRAD_CLI WORKDIR mlp|cnn|llama   (train a little, export, check)
       onnx_check.py MODEL.onnx SAMPLES.safetensors       (check files written before)

The first form trains the model a few steps with `anygrad train` (cnn:
when the Fashion-MNIST files are installed, else freshly initialised), so
that batch-norm statistics and norm weights are not their initial values,
then runs `anygrad export --onnx --checkpoint ... --samples ...`.

The model must pass onnx.checker.check_model(full_check=True), and ONNX
Runtime (CPU execution provider) must give, for every input.<i> of the
samples file, outputs within 1e-5 of anygrad's output.<i>. The samples hold
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
except ImportError as e:  # the venv lacks the checkers
    print(f"skip: {e}")
    sys.exit(77)

DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(data[base + lo:base + hi], dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def export(cli, work, model):
    """Train a little, export with samples of two batch sizes; return the paths."""
    os.makedirs(work, exist_ok=True)
    onnx_path, samples = os.path.join(work, f"{model}.onnx"), os.path.join(work, f"{model}.safetensors")
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


def main():
    if len(sys.argv) == 4:
        model_path, samples_path = export(*sys.argv[1:4])
    else:
        model_path, samples_path = sys.argv[1], sys.argv[2]
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
    assert n == sum(1 for k in samples if k.startswith("output.")), "samples: inputs and outputs differ"
    worst = 0.0
    for i in range(n):
        x = samples[f"input.{i}"]
        want = samples[f"output.{i}"]
        got = sess.run(None, {inp.name: x})[0]
        assert got.shape == want.shape, f"sample {i}: shape {got.shape} != anygrad's {want.shape}"
        err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        worst = max(worst, err)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), f"sample {i} {x.shape}: max |diff| {err:.3g}"
        print(f"{model_path}: input {list(x.shape)} -> {list(got.shape)}, max |onnxruntime - anygrad| {err:.3g}")
    print(f"ok: {model_path} ({len(model.graph.node)} nodes, opset {model.opset_import[0].version}, "
          f"onnx {onnx.__version__}, onnxruntime {ort.__version__}), worst {worst:.3g}")


if __name__ == "__main__":
    main()
