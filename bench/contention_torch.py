#!/usr/bin/python3
"""PyTorch side of bench/contention_bench.c, kept alive for the whole run so
rounds interleave: reads "CASE THREADS STEPS" lines on stdin (CASE gpt,
gpt-medium or mlp), answers one line with milliseconds per step. Same shapes,
AdamW, f32; the GPT head is tied to the token embedding (GPT-2, as anygrad's
default). make(case, compiled=True) wraps the model in torch.compile
(bench/torch2_bench.py, PyTorch 2.x)."""
import sys
import time

import torch

import torch_setup  # BLAS threads and host memory as anygrad has them (bench/torch_setup.py)

torch_setup.keep_memory()

torch.manual_seed(1)


class Block(torch.nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(C)
        self.ln2 = torch.nn.LayerNorm(C)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.o = torch.nn.Linear(C, C)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.proj = torch.nn.Linear(4 * C, C)
        self.H = H
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).bool())

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.H) ** 0.5)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.o(y)
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList([Block(C, H, T) for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(C)
        self.head = torch.nn.Linear(C, V, bias=False)
        self.head.weight = self.wte.weight  # GPT-2 weight tying

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def make(case, compiled=False):
    if case in ("gpt", "gpt-medium"):
        V, T, L, H, C, B = (8192, 64, 4, 4, 256, 4) if case == "gpt" else (8192, 128, 6, 8, 512, 4)
        m = GPT(V, T, L, H, C)
        x = torch.randint(0, V, (B, T))
        y = torch.randint(0, V, (B * T,))
        loss = lambda: torch.nn.functional.cross_entropy(m(x).view(B * T, V), y)
    else:
        m = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
        x = torch.randn(128, 784)
        y = torch.randint(0, 10, (128,))
        loss = lambda: torch.nn.functional.cross_entropy(m(x), y)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    if compiled:
        cm = torch.compile(m)  # the parameters stay m's: the optimizer steps them
        if case in ("gpt", "gpt-medium"):
            loss = lambda: torch.nn.functional.cross_entropy(cm(x).view(B * T, V), y)
        else:
            loss = lambda: torch.nn.functional.cross_entropy(cm(x), y)

    def step():
        opt.zero_grad(set_to_none=True)
        l = loss()
        l.backward()
        opt.step()

    step()
    return step


def main():
    cases = {}
    for line in sys.stdin:
        case, threads, steps = line.split()
        torch_setup.set_threads(int(threads))
        if case not in cases:
            cases[case] = make(case)
        cases[case]()  # one warm step at this thread count
        t0 = time.perf_counter()
        for _ in range(int(steps)):
            cases[case]()
        print("%.4f" % ((time.perf_counter() - t0) * 1000.0 / int(steps)), flush=True)


if __name__ == "__main__":
    main()
