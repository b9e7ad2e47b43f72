#!/usr/bin/python3
"""anygrad's CPU training jobs against PyTorch 2.x in three forms: eager,
torch.compile (default mode: inductor's C++ code generation with the
installed g++) and, for attention, F.scaled_dot_product_attention.

Jobs (--jobs, comma-separated):
  gpt         GPT step, V 8192 T 64, 4 layers, 4 heads, n_embd 256, batch 4, AdamW
              (anygrad: build/bin/contention_bench; torch: bench/contention_torch.py's model)
  gpt-medium  the same at T 128, 6 layers, 8 heads, n_embd 512
  cnn         the Fashion-MNIST CNN step, batch 128, AdamW
              (build/bin/cnn_bench --step-only; bench/cnn_torch.py)
  text        the default text job's step (build/bin/text_bench; bench/text_torch.py)
  attention   causal attention forward + backward, B 1, H 8, D 64, T 256, 1024, 4096:
              anygrad fused and unfused (build/bin/attention_bench) against torch's
              math (eager, compiled) and SDPA (bench/attention_torch.py)

Every job runs at each of --threads (default 1,2). Each PyTorch form is a
worker process of its own (this script with --worker, run by --python,
default .venv-bench/bin/python3), kept alive over the rounds: it builds the
model, sets its threads (bench/torch_setup.py), runs the warm-up steps
(torch.compile compiles there: the first steps' time beyond steady
steps is reported as compile_s, never in a step time; the workers of a job
start side by side, so compile_s is inflated by the others' warm-up) and then answers one timed request per
round. anygrad runs as one process per round (its own warm-up inside).
Rounds interleave the sides (anygrad, eager, compile[, sdpa]; the order
rotates from round to round); each figure is the median [min, max] over
rounds. Peak resident memory: anygrad's is the largest ru_maxrss of its
per-round processes (os.wait4), PyTorch's the VmHWM of its worker (both
whole processes: libraries, interpreter and all).

The text step's GEMM roofline: the step's FLOPs (matrix products only,
forward 2*tokens*weights plus the attention products, backward twice the
forward) at the best median GFLOP/s build/bin/gemm_bench measures for one
thread, times the thread count.

Usage:
  bench/torch2_bench.py [--jobs gpt,gpt-medium,cnn,text,attention] [--threads 1,2]
                        [--rounds 3] [--python .venv-bench/bin/python3] [--build build]
                        [--out docs/numbers]
Writes OUT/torch2_JOB.json per job (and prints a table per job).

  bench/torch2_bench.py --profile JOB MODE THREADS [STEPS]
prints torch.profiler's table (self CPU time per op) over STEPS warm steps
of one PyTorch form (MODE eager, compile or sdpa), for a missed goal's
profile beside anygrad's (perf, --profile; docs/diagnostics.md)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T_ATT = (256, 1024, 4096)
# steps per timed request, per job: (anygrad, torch)
STEPS = {"gpt": 4, "gpt-medium": 2, "cnn": 5, "text": 5, "attention": 1}
WARMUP = {"gpt": 3, "gpt-medium": 2, "cnn": 3, "text": 3, "attention": 1}


# ---------------------------------------------------------------- worker side
def vm(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def worker(job, mode, threads):
    sys.path.insert(0, os.path.join(ROOT, "tests"))  # llama_torch (text_torch.py's model)
    sys.path.insert(0, HERE)  # before tests/: bench/attention_torch.py, not the test of that name
    import torch
    import torch_setup
    torch_setup.keep_memory()
    how = torch_setup.set_threads(threads)
    rss_import = vm("VmRSS")
    compiled = mode == "compile"
    t0 = time.perf_counter()
    built = 0  # steps the builder ran itself
    if job in ("gpt", "gpt-medium"):
        import contention_torch
        step = contention_torch.make(job, compiled)  # runs one step: torch.compile compiles there
        built = 1
        timed = lambda n: _time(step, n)
    elif job == "cnn":
        import cnn_torch
        step = cnn_torch.make_step(128, compiled)
        timed = lambda n: _time(step, n)
    elif job == "text":
        import text_torch
        side = text_torch.TorchSide(compiled)
        timed = side.steps
    elif job == "attention":
        import attention_torch
        steps = {T: attention_torch.make_cpu_step(1, 8, T, 64, mode) for T in T_ATT}
        timed = lambda n: {str(T): statistics.median(s() for _ in range(n)) for T, s in steps.items()}
    else:
        sys.exit("torch2_bench.py: unknown job " + job)
    timed(1)  # the first call (of each shape) compiles under torch.compile
    first_s = time.perf_counter() - t0
    for _ in range(WARMUP[job]):
        timed(1)
    steady_s = sum_ms(timed(1)) / 1e3
    if os.environ.get("TORCH2_PROFILE"):  # --profile: torch.profiler over a few warm steps, to stderr
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            timed(int(os.environ["TORCH2_PROFILE"]))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
        return
    print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads(), "how": how,
                      "first_steps_s": first_s, "compile_s": max(0.0, first_s - (built + 1) * steady_s),
                      "rss_import_kb": rss_import}), flush=True)
    for line in sys.stdin:
        n = int(line)
        print(json.dumps({"ms": timed(n)}), flush=True)
    print(json.dumps({"hwm_kb": vm("VmHWM"), "rss_kb": vm("VmRSS"), "rss_import_kb": rss_import}), flush=True)


def sum_ms(v):
    return sum(v.values()) if isinstance(v, dict) else v


def _time(step, n):
    t0 = time.perf_counter()
    for _ in range(n):
        loss = step()
    if loss is not None:
        loss.item()
    return (time.perf_counter() - t0) * 1e3 / n


# ---------------------------------------------------------------- driver side
class Worker:
    def __init__(self, o, job, mode, threads):
        self.mode = mode
        cmd = [o.python, os.path.abspath(__file__), "--worker", job, mode, str(threads)]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True,
                                  env=env, cwd=ROOT)
        self.what = "%s %s %d" % (job, mode, threads)

    def ready(self):
        self.info = self.read()
        if not self.info.get("ready"):
            sys.exit("torch2_bench.py: worker %s did not start" % self.what)

    def read(self):
        line = self.p.stdout.readline()
        if not line:
            sys.exit("torch2_bench.py: a %s worker died (its messages are above)" % self.mode)
        return json.loads(line)

    def ask(self, n):
        self.p.stdin.write("%d\n" % n)
        self.p.stdin.flush()
        return self.read()["ms"]

    def close(self):
        self.p.stdin.close()
        end = self.read()
        self.p.wait()
        return end


def run_anygrad(cmd):
    """(stdout, ru_maxrss in KiB) of one process."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, cwd=ROOT,
                         env=dict(os.environ, AG_BACKEND_PATH=os.path.join(os.path.dirname(os.path.dirname(cmd[0])), "lib")))
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        sys.exit("torch2_bench.py: %s exited %d:\n%s" % (" ".join(cmd), p.returncode, out[-3000:]))
    return out, ru.ru_maxrss


def last_json(out):
    return json.loads([x for x in out.splitlines() if x.startswith("{")][-1])


def anygrad_round(o, job, threads):
    """{path: ms} of one anygrad process, and its peak RSS in KiB."""
    b = os.path.join(o.build, "bin")
    if job in ("gpt", "gpt-medium"):
        f = "/tmp/torch2_contention_%d.json" % os.getpid()
        out, rss = run_anygrad([os.path.join(b, "contention_bench"), "--no-busy", "--rounds", "1", "--cases", job,
                                "--max-threads", str(threads), "--json", f])
        with open(f) as fh:
            rows = json.load(fh)["rows"]
        os.unlink(f)
        row = [r for r in rows if r["case"] == job and r["threads"] == threads and r["load"] == "idle"][0]
        return {"anygrad": row["anygrad_ms"][0]}, rss
    if job == "cnn":
        f = "/tmp/torch2_cnn_%d.json" % os.getpid()
        out, rss = run_anygrad([os.path.join(b, "cnn_bench"), "--step-only", "--rounds", "1", "--steps",
                                str(STEPS[job]), "--threads", str(threads), "--devices", "cpu", "--json", f])
        with open(f) as fh:
            js = json.load(fh)
        os.unlink(f)
        return {"anygrad": js["step"]["anygrad_ms"][0]}, rss
    if job == "text":
        out, rss = run_anygrad([os.path.join(b, "text_bench"), "--threads", str(threads), "--steps", str(STEPS[job]),
                                "--warmup", str(WARMUP[job]), "--rounds", "1"])
        js = last_json(out)
        return {"anygrad": js["ms_per_step"][0]}, rss
    out, rss = run_anygrad([os.path.join(b, "attention_bench"), "--T", ",".join(map(str, T_ATT)), "--B", "1", "--H",
                            "8", "--D", "64", "--rounds", "1", "--threads", str(threads), "--no-mem", "--json"])
    js = last_json(out)
    if js["threads"] != threads:
        sys.exit("torch2_bench.py: attention_bench ran %d threads, not %d" % (js["threads"], threads))
    return {"%s_%d" % (x["path"], x["T"]): x["ms"][0] for x in js["runs"]}, rss


def summ(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def gemm_peak(o):
    """Best median GFLOP/s of one thread over gemm_bench's shapes (oneDNN or CBLAS, whichever is faster)."""
    f = "/tmp/torch2_gemm_%d.json" % os.getpid()
    run_anygrad([os.path.join(o.build, "bin", "gemm_bench"), "--rounds", "3", "--json", f])
    with open(f) as fh:
        rows = [json.loads(x) for x in fh if x.startswith("{")]
    os.unlink(f)
    return max(max(r["onednn_gflops"], r["cblas_gflops"]) for r in rows)


def text_flops():
    """Matrix-product FLOPs of one text step (bench/text_torch.py's shapes); backward = 2x forward."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("shapes", os.path.join(HERE, "text_torch.py"))
    src = open(spec.origin).read()
    ns = {}
    exec(src[src.index("DIM, LAYERS"):src.index("LR, WD")], ns)  # the shape constants alone (no torch import)
    d, L, H, KV, S, B, V, F = (ns[k] for k in ("DIM", "LAYERS", "HEADS", "KV_HEADS", "SEQ", "BATCH", "VOCAB",
                                                 "HIDDEN"))
    hd = d // H
    weights = L * (d * d + 2 * KV * hd * d + d * d + 3 * F * d) + V * d
    tokens = B * S
    fwd = 2 * tokens * weights + L * B * H * 2 * (2 * S * S * hd)
    return 3 * fwd


def bench_job(o, job, threads):
    modes = ["eager", "compile"] + (["sdpa"] if job == "attention" else [])
    print("%s, %d thread(s): starting the PyTorch workers (torch.compile compiles now)" % (job, threads),
          file=sys.stderr, flush=True)
    workers = {m: Worker(o, job, m, threads) for m in modes}  # they build and warm up side by side
    for w in workers.values():
        w.ready()
    times, rss_ag = {}, 0
    sides = ["anygrad"] + modes
    for r in range(o.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for side in order:
            if side == "anygrad":
                res, rss = anygrad_round(o, job, threads)
                rss_ag = max(rss_ag, rss)
            else:
                v = workers[side].ask(STEPS[job])
                res = {"%s_%s" % (side, k): x for k, x in v.items()} if isinstance(v, dict) else {side: v}
            for k, x in res.items():
                times.setdefault(k, []).append(x)
        print("  round %d/%d: %s" % (r + 1, o.rounds, ", ".join("%s %.1f" % (k, v[-1]) for k, v in
                                                             sorted(times.items()))), file=sys.stderr, flush=True)
    info = {m: w.info for m, w in workers.items()}
    ends = {m: w.close() for m, w in workers.items()}
    res = {"job": job, "threads": threads, "rounds": o.rounds, "steps_per_round": STEPS[job],
           "torch": info["eager"]["torch"], "torch_threads": info["eager"]["threads"], "torch_how": info["eager"]["how"],
           "ms": {k: summ(v) for k, v in times.items()},
           "compile_s": info["compile"]["compile_s"],
           "rss_mib": {"anygrad": rss_ag / 1024.0, **{m: ends[m]["hwm_kb"] / 1024.0 for m in modes}},
           "rss_import_mib": {m: ends[m]["rss_import_kb"] / 1024.0 for m in modes}}
    med = {k: v["median"] for k, v in res["ms"].items()}
    ratio = {}
    if job == "attention":
        for T in T_ATT:
            f, u = med["fused_%d" % T], med["unfused_%d" % T]
            ratio[str(T)] = {"fused_over_eager": f / med["eager_%d" % T], "fused_over_compile": f / med["compile_%d" % T],
                             "fused_over_sdpa": f / med["sdpa_%d" % T], "fused_over_unfused": f / u}
        ratio["max_fused_over_sdpa"] = max(ratio[str(T)]["fused_over_sdpa"] for T in T_ATT)
        ratio["max_fused_over_unfused"] = max(ratio[str(T)]["fused_over_unfused"] for T in T_ATT)
    else:
        ratio = {"over_eager": med["anygrad"] / med["eager"], "over_compile": med["anygrad"] / med["compile"]}
    ratio["rss_over_eager"] = res["rss_mib"]["anygrad"] / res["rss_mib"]["eager"]
    ratio["rss_over_compile"] = res["rss_mib"]["anygrad"] / res["rss_mib"]["compile"]
    res["ratio"] = ratio
    return res


def print_table(job, runs):
    fmt = lambda d: "%.2f [%.2f-%.2f]" % (d["median"], d["min"], d["max"])
    print("\n%s (torch %s, %s; ms, median [min-max] over %d rounds)" % (job, runs[0]["torch"], runs[0]["torch_how"],
                                                                        runs[0]["rounds"]))
    for r in runs:
        print("  %d thread(s): " % r["threads"] + "; ".join("%s %s" % (k, fmt(v)) for k, v in sorted(r["ms"].items())))
        print("    ratios: " + json.dumps(r["ratio"]))
        print("    peak RSS MiB: " + ", ".join("%s %.0f" % kv for kv in r["rss_mib"].items()) +
              "; torch.compile's first step %.1f s" % r["compile_s"])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--profile":  # --profile JOB MODE THREADS [STEPS]
        os.environ["TORCH2_PROFILE"] = sys.argv[5] if len(sys.argv) > 5 else "3"
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default="gpt,gpt-medium,cnn,text,attention")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv-bench", "bin", "python3"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "numbers"))
    o = ap.parse_args()
    o.build = os.path.abspath(o.build)
    if not os.access(o.python, os.X_OK):
        sys.exit("torch2_bench.py: no %s: run scripts/deps.sh --bench (PyTorch 2.x in .venv-bench)" % o.python)
    os.makedirs(o.out, exist_ok=True)
    for job in o.jobs.split(","):
        t0, load0 = time.time(), os.getloadavg()[0]
        runs = [bench_job(o, job, int(n)) for n in o.threads.split(",")]
        doc = {"job": job, "torch": runs[0]["torch"], "load_start": load0, "load_end": os.getloadavg()[0],
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
               "seconds": round(time.time() - t0, 1), "by_threads": {str(r["threads"]): r for r in runs}}
        if job == "text":
            peak = gemm_peak(o)
            flops = text_flops()
            doc["gemm_peak_gflops_1t"] = peak
            doc["step_gflop"] = flops / 1e9
            for r in runs:
                roof_ms = flops / (peak * 1e9 * r["threads"]) * 1e3
                r["roofline_ms"] = roof_ms
                r["ratio"]["of_roofline"] = roof_ms / r["ms"]["anygrad"]["median"]
        print_table(job, runs)
        with open(os.path.join(o.out, "torch2_%s.json" % job), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
