#!/usr/bin/env python3
"""anygrad against tinygrad on the same OpenCL device (opencl:0; tinygrad's
DEV=CL, which opens the first OpenCL device through the ICD loader): an f32
GEMM (1024^3), a softmax over [4096, 1024] rows and one training step of the
GPT small model (the `anygrad train --model gpt` defaults: vocabulary 27,
sequence 24, 2 layers, 4 heads, width 64, MLP 256, tied head, batch 32,
forward + backward + AdamW). Both sides run in this process through their
Python packages, in interleaved rounds (anygrad, tinygrad, anygrad, ...);
each timed call ends with a device synchronisation (anygrad.synchronize;
tinygrad: realize + Device.synchronize, the step's loss.item()). The first
calls (kernel compilation; tinygrad's JIT capture) are timed separately as
warm-up. Results of both are checked against NumPy first (GEMM, softmax:
max relative error; the GPT step: both losses of the same weights and batch
against a NumPy forward).

Prints a table and writes JSON (--json PATH): per case the median and range
of each side's milliseconds, warm-up, ratio anygrad / tinygrad (goal <= 1).

Usage (from the repository root, after a build and scripts/deps.sh --bench):
  ANYGRAD_LIBRARY=build/lib/libanygrad.so AG_BACKEND_PATH=build/lib \\
  AG_NUM_THREADS=1 OMP_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1 DEV=CL \\
  PYTHONPATH=python .venv-bench/bin/python3 bench/tinygrad_opencl.py \\
      --json docs/numbers/tinygrad_opencl.json
"""
import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("DEV", "CL")
import anygrad as ag  # noqa: E402
import anygrad.nn.functional as AF  # noqa: E402
from tinygrad import Tensor, Device, TinyJit, dtypes  # noqa: E402
from tinygrad import nn as tnn  # noqa: E402
from tinygrad.helpers import Context  # noqa: E402

DEV = "opencl:0"
V, T, L, H, C, B = 27, 24, 2, 4, 64, 32  # GPT small, as anygrad train --model gpt


def ag_sync():
    ag.synchronize(DEV)


def tg_sync():
    Device[Device.DEFAULT].synchronize()


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


# ---------------- GEMM and softmax ----------------

def gemm_case(n, rng):
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    aa, ab = ag.from_numpy(a).to(DEV), ag.from_numpy(b).to(DEV)
    ta, tb = Tensor(a).realize(), Tensor(b).realize()
    want = a.astype(np.float64) @ b.astype(np.float64)

    def run_ag():
        c = aa @ ab
        ag_sync()
        return c

    def run_tg():
        c = (ta @ tb).realize()
        tg_sync()
        return c

    check = lambda c_ag, c_tg: (rel_err(c_ag.cpu().numpy(), want), rel_err(c_tg.numpy(), want))  # noqa: E731
    return run_ag, run_tg, check, 2.0 * n ** 3


def softmax_case(rows, cols, rng):
    x = rng.standard_normal((rows, cols), dtype=np.float32) * 3
    ax = ag.from_numpy(x).to(DEV)
    tx = Tensor(x).realize()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)

    def run_ag():
        y = ag.softmax(ax, -1)
        ag_sync()
        return y

    def run_tg():
        y = tx.softmax(-1).realize()
        tg_sync()
        return y

    check = lambda y_ag, y_tg: (rel_err(y_ag.cpu().numpy(), want), rel_err(y_tg.numpy(), want))  # noqa: E731
    return run_ag, run_tg, check, None


# ---------------- GPT small step ----------------

def np_gelu(x):
    from math import erf, sqrt
    return 0.5 * x * (1 + np.vectorize(lambda v: erf(v / sqrt(2)))(x))


def np_ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_gpt_loss(p, idx, tgt):
    """The forward of both models in float64 from the same weights."""
    x = p["wte.weight"][idx] + p["wpe.weight"][np.arange(T)]
    mask = np.triu(np.ones((T, T), bool), 1)
    for i in range(L):
        g = lambda k: p[f"h.{i}.{k}"]  # noqa: E731
        h = np_ln(x, g("ln1.weight"), g("ln1.bias"))
        qkv = h @ g("attn.qkv.weight").T + g("attn.qkv.bias")
        q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, H, C // H).transpose(0, 2, 1, 3) for j in range(3))
        att = q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // H)
        att = np.where(mask, -np.inf, att)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ g("attn.proj.weight").T + g("attn.proj.bias")
        h = np_ln(x, g("ln2.weight"), g("ln2.bias"))
        f = np_gelu(h @ g("fc.weight").T + g("fc.bias"))
        x = x + f @ g("proj.weight").T + g("proj.bias")
    xf = np_ln(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = xf @ p["wte.weight"].T
    logits -= logits.max(-1, keepdims=True)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-lp.reshape(-1, V)[np.arange(B * T), tgt.reshape(-1)].mean())


class TgGPT:
    """The same GPT in tinygrad: anygrad's parameter names and shapes
    (Linear weights [out, in]), explicit causal attention with a -inf mask
    and softmax, exact (erf) GELU, tied head."""

    def __init__(self, p):
        self.p = {k: Tensor(v.astype(np.float32)).realize() for k, v in p.items()}
        self.mask = Tensor(np.triu(np.ones((T, T), np.float32), 1) > 0)
        self.pos = Tensor(np.arange(T, dtype=np.int32))

    def ln(self, x, pre):
        return x.layernorm(eps=1e-5) * self.p[pre + ".weight"] + self.p[pre + ".bias"]

    def lin(self, x, pre):
        return x.linear(self.p[pre + ".weight"].T, self.p[pre + ".bias"])

    def __call__(self, idx):
        p = self.p
        x = p["wte.weight"][idx] + p["wpe.weight"][self.pos]
        for i in range(L):
            pre = f"h.{i}."
            qkv = self.lin(self.ln(x, pre + "ln1"), pre + "attn.qkv")
            q, k, v = (qkv[:, :, j * C:(j + 1) * C].reshape(B, T, H, C // H).transpose(1, 2) for j in range(3))
            att = (q @ k.transpose(2, 3)) * (1.0 / (C // H) ** 0.5)
            att = self.mask.where(-float("inf"), att).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.lin(y, pre + "attn.proj")
            h = self.lin(self.ln(x, pre + "ln2"), pre + "fc")
            x = x + self.lin(0.5 * h * (1 + (h * 0.7071067811865476).erf()), pre + "proj")
        xf = self.ln(x, "ln_f")
        return xf @ p["wte.weight"].T


def gpt_case(rng):
    am = ag.nn.GPT(V, T, L, H, C, device=DEV)
    params = {k: v.detach().cpu().numpy().astype(np.float64) for k, v in am.named_parameters()}
    idx = rng.integers(0, V, (B, T)).astype(np.int32)
    tgt = rng.integers(0, V, (B, T)).astype(np.int32)
    want = np_gpt_loss(params, idx, tgt)
    a_idx, a_tgt = ag.from_numpy(idx).to(DEV), ag.from_numpy(tgt.reshape(-1).astype(np.int64)).to(DEV)
    a_opt = ag.optim.AdamW(am.parameters(), lr=2e-3, weight_decay=0.01)

    tm = TgGPT(params)
    t_idx, t_tgt = Tensor(idx).realize(), Tensor(tgt.reshape(-1)).realize()
    t_opt = tnn.optim.AdamW(list(tm.p.values()), lr=2e-3, weight_decay=0.01)

    def run_ag():
        logits = am(a_idx)
        loss = AF.cross_entropy(logits.reshape(B * T, V), a_tgt)
        a_opt.zero_grad()
        loss.backward()
        a_opt.step()
        return loss.item()  # a host copy: the whole step has finished

    @TinyJit
    def tg_step(x, y):
        with Context(TRAINING=1):
            loss = tm(x).reshape(B * T, V).sparse_categorical_crossentropy(y)
            t_opt.zero_grad()
            loss.backward()
            # one schedule: the loss of the weights before the update, and the update
            Tensor.realize(loss, *t_opt.schedule_step())
            return loss

    def run_tg():
        return tg_step(t_idx, t_tgt).item()

    # the first step's loss is the loss of the initial weights on both sides
    check = lambda l_ag, l_tg: (abs(l_ag - want) / want, abs(l_tg - want) / want)  # noqa: E731
    return run_ag, run_tg, check, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls of each side before the rounds")
    ap.add_argument("--gemm", type=int, default=1024)
    ap.add_argument("--softmax", default="4096x1024")
    ap.add_argument("--cases", default="gemm,softmax,gpt_step")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative error against NumPy")
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    sr, sc = (int(v) for v in a.softmax.split("x"))
    makers = {"gemm": lambda: gemm_case(a.gemm, rng), "softmax": lambda: softmax_case(sr, sc, rng),
              "gpt_step": lambda: gpt_case(rng)}
    names = {"gemm": f"f32 GEMM {a.gemm}^3", "softmax": f"softmax [{sr}, {sc}]",
             "gpt_step": f"GPT small step (B {B}, T {T}, {L} layers, width {C}, AdamW)"}
    out = {"meta": {"device": DEV, "tinygrad": importlib.metadata.version("tinygrad"),
                    "tinygrad_device": Device.DEFAULT, "rounds": a.rounds,
                    "threads": {k: os.environ.get(k, "") for k in
                                ("AG_NUM_THREADS", "OMP_NUM_THREADS", "POCL_MAX_PTHREAD_COUNT")},
                    "host": platform.node(), "load_start": os.getloadavg(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
           "cases": {}}
    ok = True
    for case in a.cases.split(","):
        run_ag, run_tg, check, flops = makers[case]()
        t0 = time.perf_counter()
        r_ag = run_ag()
        w_ag = time.perf_counter() - t0
        t0 = time.perf_counter()
        r_tg = run_tg()
        w_tg = time.perf_counter() - t0
        e_ag, e_tg = check(r_ag, r_tg)
        good = e_ag <= a.tol and e_tg <= a.tol
        ok &= good
        for _ in range(a.warmup):
            run_ag()
            run_tg()
        ms = {"anygrad": [], "tinygrad": []}
        for _ in range(a.rounds):
            for side, fn in (("anygrad", run_ag), ("tinygrad", run_tg)):
                t0 = time.perf_counter()
                fn()
                ms[side].append((time.perf_counter() - t0) * 1e3)
        res = {"name": names[case], "check_rel_err": {"anygrad": e_ag, "tinygrad": e_tg}, "check_ok": good,
               "first_call_ms": {"anygrad": w_ag * 1e3, "tinygrad": w_tg * 1e3}}
        for side, v in ms.items():
            res[side] = {"median_ms": statistics.median(v), "min_ms": min(v), "max_ms": max(v)}
            if flops:
                res[side]["gflops"] = flops / (statistics.median(v) * 1e6)
        res["ratio"] = res["anygrad"]["median_ms"] / res["tinygrad"]["median_ms"]
        res["ratio_min"] = min(x / y for x, y in zip(ms["anygrad"], ms["tinygrad"]))
        res["ratio_max"] = max(x / y for x, y in zip(ms["anygrad"], ms["tinygrad"]))
        out["cases"][case] = res
        print(f"{res['name']}: anygrad {res['anygrad']['median_ms']:.2f} ms "
              f"({res['anygrad']['min_ms']:.2f}-{res['anygrad']['max_ms']:.2f}), tinygrad "
              f"{res['tinygrad']['median_ms']:.2f} ms ({res['tinygrad']['min_ms']:.2f}-{res['tinygrad']['max_ms']:.2f}), "
              f"ratio {res['ratio']:.2f}; first call {w_ag * 1e3:.0f} / {w_tg * 1e3:.0f} ms; "
              f"error vs NumPy {e_ag:.1e} / {e_tg:.1e}{'' if good else '  FAILED'}", flush=True)
    out["meta"]["load_end"] = os.getloadavg()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
