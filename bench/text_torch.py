#!/usr/bin/python3
"""The default text job's training step (`anygrad train --task text`: Llama
dim 128, 4 layers, 4 heads, 2 key/value heads, SwiGLU hidden 512,
vocabulary 512, sequence 128, batch 8, tied embeddings, f32) against the
same model in PyTorch eager, interleaved round by round.

anygrad's side is build/bin/text_bench (models/text.c's step: forward,
cross-entropy, backward, clip_grad_norm 1, AdamW with the cosine learning
rate, zero_grad), one process per round: --warmup untimed steps, then
--steps timed ones. PyTorch's side is the model of tests/llama_torch.py (the
equivalence test's, imported with this shape) with the same step, in this
process: one warm-up of --warmup steps at the start, then --steps timed
steps per round. Which side goes first alternates between rounds. Both run
--threads threads (torch: torch_setup.set_threads, so its BLAS too), and
glibc keeps freed memory for PyTorch (torch_setup.keep_memory).

Usage:
  bench/text_torch.py [--bench build/bin/text_bench] [--rounds 7] [--steps 10] [--warmup 3]
                       [--threads 2] [--json FILE]
Prints a table (ms per step, median [range] over rounds, the ratio of the
medians and the median of the per-round ratios) and one JSON line."""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import torch_setup  # noqa: E402  BLAS threads and host memory as anygrad has them
import llama_torch as ref  # noqa: E402  the model of the PyTorch-equivalence test

torch_setup.keep_memory()

# models/text.c's text_defaults()
DIM, LAYERS, HEADS, KV_HEADS, SEQ, BATCH, VOCAB = 128, 4, 4, 2, 128, 8, 512
HIDDEN = 512  # 2 * 4 * 128 / 3 rounded up to a multiple of 256
LR, WD, CLIP, WARMUP_LR, TOTAL = 3e-3, 0.1, 1.0, 30, 1000


def make_params(g):
    p = {"model.embed_tokens.weight": torch.randn(VOCAB, DIM, generator=g) * 0.02,
         "model.norm.weight": torch.ones(DIM)}
    hd = DIM // HEADS
    for i in range(LAYERS):
        pre = "model.layers.%d." % i
        for n, shape in (("self_attn.q_proj", (HEADS * hd, DIM)), ("self_attn.k_proj", (KV_HEADS * hd, DIM)),
                         ("self_attn.v_proj", (KV_HEADS * hd, DIM)), ("self_attn.o_proj", (DIM, HEADS * hd)),
                         ("mlp.gate_proj", (HIDDEN, DIM)), ("mlp.up_proj", (HIDDEN, DIM)),
                         ("mlp.down_proj", (DIM, HIDDEN))):
            p[pre + n + ".weight"] = torch.randn(*shape, generator=g) * 0.02
        p[pre + "input_layernorm.weight"] = torch.ones(DIM)
        p[pre + "post_attention_layernorm.weight"] = torch.ones(DIM)
    for t in p.values():
        t.requires_grad_(True)
    return p


def lr_cosine(step):  # ag_lr_cosine(step, 30, 1000, 3e-3, 3e-4)
    if step < WARMUP_LR:
        return LR * (step + 1) / WARMUP_LR
    t = min(1.0, (step - WARMUP_LR) / max(1, TOTAL - WARMUP_LR))
    return LR * 0.1 + 0.5 * (LR - LR * 0.1) * (1 + math.cos(math.pi * t))


class TorchSide:
    """compiled: ref.forward under torch.compile (bench/torch2_bench.py, PyTorch 2.x)."""

    def __init__(self, compiled=False):
        g = torch.Generator().manual_seed(1337)
        self.g = g
        self.p = make_params(g)
        self.opt = torch.optim.AdamW(list(self.p.values()), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
        self.cos, self.sin = ref.rope_tables(DIM // HEADS, seq=SEQ)
        self.step_no = 0
        self.params = sum(t.numel() for t in self.p.values())
        self.forward = torch.compile(ref.forward) if compiled else ref.forward

    def steps(self, n):
        t0 = time.perf_counter()
        for _ in range(n):
            for group in self.opt.param_groups:
                group["lr"] = lr_cosine(self.step_no)
            x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=self.g)
            y = torch.randint(0, VOCAB, (BATCH * SEQ,), generator=self.g)
            logits = self.forward(self.p, x, True, self.cos, self.sin, dim=DIM, layers=LAYERS, heads=HEADS,
                                 kv_heads=KV_HEADS)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(self.p.values()), CLIP)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.last = loss.item()
            self.step_no += 1
        return (time.perf_counter() - t0) * 1e3 / n


def anygrad_round(o):
    cmd = [o.bench, "--threads", str(o.threads), "--steps", str(o.steps), "--warmup", str(o.warmup), "--rounds", "1"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if r.returncode:
        sys.exit("text_torch.py: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    js = json.loads([x for x in r.stdout.splitlines() if x.startswith("{")][-1])
    if js["threads"] != o.threads:
        sys.exit("text_torch.py: text_bench ran %d threads, not %d" % (js["threads"], o.threads))
    return js


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "bin", "text_bench"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    o = ap.parse_args()
    how = torch_setup.set_threads(o.threads)
    ts = TorchSide()
    print("llama step (default text job): dim %d, %d layers, %d heads (%d kv), hidden %d, vocab %d, seq %d, "
          "batch %d, %d parameters; %d rounds of %d steps interleaved; anygrad --threads %d; torch %s: %s" %
          (DIM, LAYERS, HEADS, KV_HEADS, HIDDEN, VOCAB, SEQ, BATCH, ts.params, o.rounds, o.steps, o.threads,
           torch.__version__, how))
    ts.steps(o.warmup)
    a, t = [], []
    params = None
    for r in range(o.rounds):
        for side in (("anygrad", "torch") if r % 2 == 0 else ("torch", "anygrad")):
            if side == "anygrad":
                js = anygrad_round(o)
                params = js["params"]
                a.append(js["ms_per_step"][0])
            else:
                t.append(ts.steps(o.steps))
        print("round %d/%d: anygrad %.2f ms/step, torch %.2f ms/step" % (r + 1, o.rounds, a[-1], t[-1]),
              file=sys.stderr)
    if params != ts.params:
        sys.exit("text_torch.py: anygrad's model has %s parameters, torch's %d" % (params, ts.params))
    ratios = [x / y for x, y in zip(a, t)]
    summ = lambda v: {"median": statistics.median(v), "min": min(v), "max": max(v)}
    res = {"bench": "text_torch", "rounds": o.rounds, "steps": o.steps, "threads": o.threads,
           "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "params": params,
           "anygrad_ms": summ(a), "torch_ms": summ(t), "anygrad_over_torch": summ(ratios),
           "ratio_of_medians": statistics.median(a) / statistics.median(t)}
    fmt = lambda d: "%.1f [%.1f, %.1f]" % (d["median"], d["min"], d["max"])
    print("| | anygrad | PyTorch eager | anygrad/PyTorch |")
    print("|---|---|---|---|")
    print("| ms per step, median [range] | %s | %s | %.2f (per round: %.2f [%.2f, %.2f]) |" %
          (fmt(res["anygrad_ms"]), fmt(res["torch_ms"]), res["ratio_of_medians"], res["anygrad_over_torch"]["median"],
           res["anygrad_over_torch"]["min"], res["anygrad_over_torch"]["max"]))
    line = json.dumps(res)
    print(line)
    if o.json:
        with open(o.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
