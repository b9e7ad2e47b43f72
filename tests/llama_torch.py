"""ag_llama against the same model written by hand in torch 1.13 (embedding,
RMSNorm, rotary embeddings with rotate_half, grouped-query causal attention,
SwiGLU; no transformers library): tests/llama_run.c (argv[1]) trains anygrad's
model with AdamW and writes its initial weights, the token batches, the loss of
every step and the final weights; this script loads the initial weights
(safetensors parsed here: torch 1.13 has no safetensors package), trains the
torch model on the same batches with torch.optim.AdamW and compares every
step's loss and the final weights. Once with tied embeddings and activation
checkpointing, once untied without. Exit 77 (skipped) without torch or numpy.

The model (rms_norm, rope_tables, forward) takes its shape as keyword
arguments, defaulting to this test's, so bench/llama_torch.py imports it for
the default text job's model."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("torch or numpy not installed: skipped")
    sys.exit(77)

STEPS = 50
DIM, LAYERS, HEADS, KV_HEADS, T, VOCAB, THETA, EPS = 64, 2, 4, 2, 32, 256, 10000.0, 1e-5
LR, WD = 3e-3, 0.1
LOSS_TOL = 1e-4     # relative, every step
WEIGHT_TOL = 3e-4   # ||a - t|| / ||t|| per tensor after STEPS steps
WEIGHT_MAX_TOL = 5e-3  # max |a - t| over max |t| (an entry whose gradient is near 0 may take Adam steps of either sign)


def read_safetensors(path):
    dtypes = {"F32": np.float32, "I32": np.int32, "F64": np.float64, "I64": np.int64}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=np.dtype(dtypes[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def rms_norm(x, w, eps=EPS):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_tables(D, seq=T, theta=THETA):
    ang = np.array([[p * theta ** (-(2 * i) / D) for i in range(D // 2)] for p in range(seq)], dtype=np.float64)
    ang = np.concatenate([ang, ang], axis=1)
    return torch.tensor(np.cos(ang).astype(np.float32)), torch.tensor(np.sin(ang).astype(np.float32))


def forward(p, idx, tied, cos, sin, dim=DIM, layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS):
    B, L = idx.shape
    D = dim // heads
    x = p["model.embed_tokens.weight"][idx]
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    for i in range(layers):
        pre = "model.layers.%d." % i
        h = rms_norm(x, p[pre + "input_layernorm.weight"])
        q = (h @ p[pre + "self_attn.q_proj.weight"].t()).view(B, L, heads, D).transpose(1, 2)
        k = (h @ p[pre + "self_attn.k_proj.weight"].t()).view(B, L, kv_heads, D).transpose(1, 2)
        v = (h @ p[pre + "self_attn.v_proj.weight"].t()).view(B, L, kv_heads, D).transpose(1, 2)
        q = q * cos[:L] + rotate_half(q) * sin[:L]
        k = k * cos[:L] + rotate_half(k) * sin[:L]
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1) @ v
        x = x + a.transpose(1, 2).reshape(B, L, dim) @ p[pre + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ p[pre + "mlp.gate_proj.weight"].t())
        u = h @ p[pre + "mlp.up_proj.weight"].t()
        x = x + (g * u) @ p[pre + "mlp.down_proj.weight"].t()
    x = rms_norm(x, p["model.norm.weight"])
    head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
    return x @ head.t()


def run(runner, tied, checkpoint):
    label = ("tied" if tied else "untied") + (" checkpointed" if checkpoint else "")
    with tempfile.TemporaryDirectory() as d:
        args = [runner, d, str(STEPS), "tied" if tied else "untied"] + (["checkpoint"] if checkpoint else [])
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        print(r.stdout.strip())
        if r.returncode:
            print("FAIL %s: llama_run exited %d" % (label, r.returncode))
            return 1
        init = read_safetensors(os.path.join(d, "init.safetensors"))
        final = read_safetensors(os.path.join(d, "final.safetensors"))
        tokens = read_safetensors(os.path.join(d, "data.safetensors"))["tokens"].astype(np.int64)
        with open(os.path.join(d, "losses.txt")) as f:
            ag_losses = [float(line) for line in f]
    bad = 0
    names = sorted(init)
    expect = {"model.embed_tokens.weight", "model.norm.weight"} | ({"lm_head.weight"} if not tied else set())
    for i in range(LAYERS):
        for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                  "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm"):
            expect.add("model.layers.%d.%s.weight" % (i, n))
    if set(names) != expect:
        print("FAIL %s: tensor names %s, expected %s" % (label, sorted(set(names) ^ expect), ""))
        return 1
    p = {n: torch.tensor(init[n], requires_grad=True) for n in names}
    opt = torch.optim.AdamW([p[n] for n in names], lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    cos, sin = rope_tables(DIM // HEADS)
    worst = 0.0
    for step in range(STEPS):
        batch = torch.tensor(tokens[step])
        logits = forward(p, batch[:, :-1], tied, cos, sin)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.item()
        err = abs(ag_losses[step] - t) / abs(t)
        worst = max(worst, err)
        if err > LOSS_TOL or not math.isfinite(ag_losses[step]):
            print("FAIL %s step %d: loss %.9g, torch %.9g (relative %.3g)" % (label, step, ag_losses[step], t, err))
            bad += 1
    print("%s %s: %d steps, loss %.6f -> %.6f (torch %.6f -> %.6f), worst relative loss error %.3g" %
          ("ok  " if not bad else "FAIL", label, STEPS, ag_losses[0], ag_losses[-1], ag_losses[0], t, worst))
    wworst = mworst = 0.0
    for n in names:
        tv = p[n].detach().numpy()
        err = float(np.linalg.norm(final[n] - tv)) / float(np.linalg.norm(tv))
        emax = float(np.abs(final[n] - tv).max()) / float(np.abs(tv).max())
        wworst, mworst = max(wworst, err), max(mworst, emax)
        if os.environ.get("LLAMA_VERBOSE"):
            print("  %s %.3g %.3g" % (n, err, emax))
        if err > WEIGHT_TOL or emax > WEIGHT_MAX_TOL:
            print("FAIL %s: final %s differs by %.3g (norm), %.3g (largest entry)" % (label, n, err, emax))
            bad += 1
    print("%s %s: final weights, worst relative error %.3g (norm of the difference), %.3g (largest entry) over %d "
          "tensors" % ("ok  " if not bad else "FAIL", label, wworst, mworst, len(names)))
    if ag_losses[-1] > ag_losses[0] - 0.5:
        print("FAIL %s: the loss did not fall (%.4f -> %.4f)" % (label, ag_losses[0], ag_losses[-1]))
        bad += 1
    return bad


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    bad = run(sys.argv[1], True, True) + run(sys.argv[1], False, False)
    sys.exit(1 if bad else 0)
