#!/usr/bin/python3
"""anygrad's Vulkan backend beside ggml's on the same device (lavapipe by
default), op by op: matmul in f32 and f16 at the GEMM shapes of the GPT,
CNN and text jobs and at 1024^3, add and mul, exp, gelu and silu, softmax,
RMS norm and layer norm, and attention (ggml's flash attention).

Each round runs every case on one side and then on the other, in one
process per side (build/bin/opcase_bench for anygrad, ggml_vulkan_ops from
bench/ggml_vulkan_build.sh for ggml), the order alternating round by round
(A B, B A, ...); the table gives each side's median and range over the
rounds and the ratio of the medians (anygrad / ggml, higher is better for
anygrad). Throughput is test-backend-ops' own: GFLOP/s (1e9) from 2*M*N*K
for matmul and 2*B*H*T*T*(2*D) for attention, GB/s (2^30 bytes) from the
bytes of the result and the operands for the other ops, over three time
bases measured on the same timed batch: the wall clock (test-backend-ops'
base, which a loaded machine inflates), the process's CPU time, and the
CPU time of the threads other than the caller's, which on lavapipe are
the driver's workers running the shaders ("device time": neither the
host's recording of commands nor ggml's spin-wait on its fence counts).
The first round checks anygrad's result against its CPU backend's and
records the kernels one call launches.

Usage:
  bench/ggml_vulkan.py [--build build] [--ggml-build build-ggml-vulkan]
      [--rounds 3] [--time 0.4] [--lp-threads 1] [--set quick|full]
      [--cases a,b | --big]
      [--json docs/numbers/ggml_vulkan.json] [--docs] [--update]
  bench/ggml_vulkan.py --doc-table docs/numbers/ggml_vulkan.json

--big adds ggml's own perf shape, matmul 4096 x 512 x 14336 (60 GFLOP a
run: minutes on lavapipe). --docs rewrites the generated spans of
docs/vulkan.md from the JSON afterwards (scripts/doc_numbers.py);
--doc-table prints the table of docs/vulkan.md (its spans) for a JSON. The ggml
build is made first when missing (about 15 minutes on two cores). Threads:
lavapipe's LP_NUM_THREADS (--lp-threads, both sides), AG_NUM_THREADS=1;
ggml sees the CPU-type device through GGML_VK_VISIBLE_DEVICES=0."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGML_COMMIT = "a74f334a"

# (case, what it is). Sizes in ggml's order: matmul M x N x K is
# x[N][K] @ w[K][M] (M output features, N rows of activations);
# attention D x T x H x B.
GEMMS = [
    ("192x768x64", "GPT: qkv (batch 32 x 24 tokens, n_embd 64)"),
    ("256x768x64", "GPT: MLP up"),
    ("64x768x256", "GPT: MLP down"),
    ("128x1024x128", "text: q, o (8 x 128 tokens, dim 128)"),
    ("512x1024x128", "text: FFN up, lm head"),
    ("128x1024x512", "text: FFN down"),
    ("16x100352x9", "CNN: conv1 as GEMM (batch 128, 1->16, 28x28)"),
    ("32x25088x144", "CNN: conv2 as GEMM (16->32, 14x14)"),
    ("10x128x1568", "CNN: classifier"),
    ("1024x1024x1024", "square 1024^3"),
]
BIG = [("4096x512x14336", "ggml's perf shape (4096 x 512 x 14336)")]
OTHERS = [
    ("add:f32:4096x512", "add, 2M elements (ggml's ADD perf size)"),
    ("mul:f32:4096x512", "mul, 2M elements"),
    ("exp:f32:4096x512", "exp, 2M elements"),
    ("gelu:f32:4096x512", "gelu (tanh form), 2M elements"),
    ("silu:f32:4096x512", "silu, 2M elements"),
    ("softmax:f32:1024x2048", "softmax, rows of 1024"),
    ("softmax:f32:128x4096", "softmax, text job's scores (rows of 128)"),
    ("rms_norm:f32:4096x512", "RMS norm, rows of 4096"),
    ("rms_norm:f32:128x1024", "RMS norm, text job (rows of 128)"),
    ("layer_norm:f32:4096x512", "layer norm, rows of 4096"),
    ("layer_norm:f32:64x768", "layer norm, GPT job (rows of 64)"),
]
ATTN = [
    ("32x128x4x8", "text job: B 8, H 4, T 128, D 32"),
    ("16x24x4x32", "GPT job: B 32, H 4, T 24, D 16"),
    ("64x1024x8x1", "long: B 1, H 8, T 1024, D 64"),
]


QUICK = ["matmul:f32:192x768x64", "matmul:f32:512x1024x128", "matmul:f32:32x25088x144",
         "matmul:f32:1024x1024x1024", "matmul:f16:192x768x64", "matmul:f16:512x1024x128",
         "matmul:f16:32x25088x144", "matmul:f16:1024x1024x1024", "add:f32:4096x512", "mul:f32:4096x512",
         "exp:f32:4096x512", "gelu:f32:4096x512", "silu:f32:4096x512", "softmax:f32:1024x2048",
         "rms_norm:f32:4096x512", "layer_norm:f32:4096x512", "attn:f32:32x128x4x8", "attn:f16:32x128x4x8"]


def default_cases(big):
    cases = []
    for dt in ("f32", "f16"):
        for s, what in GEMMS + (BIG if big else []):
            cases.append((f"matmul:{dt}:{s}", what))
    cases += OTHERS
    for dt in ("f32", "f16"):
        for s, what in ATTN:
            cases.append((f"attn:{dt}:{s}", what))
    return cases


def key(case):
    """The case's name as a JSON key a doc span can name (no '.' or ':')."""
    return case.replace(":", "_")


def run_side(cmd, cases, env, timeout):
    """{case: record} from one process per run of cases; a case that kills
    the process is run once more alone (a crash may come from an earlier
    case of the same process), then recorded as an error, and the rest run
    in a new process."""
    out, todo, retried = {}, list(cases), set()
    while todo:
        try:
            p = subprocess.run(cmd + todo, capture_output=True, text=True, env=env, timeout=timeout)
            text, rc = p.stdout, p.returncode
            err = p.stderr
        except subprocess.TimeoutExpired as e:
            text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc, err = -1, f"timed out after {timeout} s"
        for line in text.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                out[r["case"]] = r
        left = [c for c in todo if c not in out]
        if left and rc not in (0, 1) and left[0] not in retried and len(todo) > 1:
            retried.add(left[0])
            got = run_side(cmd, [left[0]], env, timeout)
            out[left[0]] = dict(got[left[0]], retried_alone=f"exit {rc} among other cases")
            left = left[1:]
        elif left and rc not in (0, 1):
            out[left[0]] = {"case": left[0], "status": "error", "error": f"exit {rc}: {err.strip()[-300:]}"}
            left = left[1:]
        elif left:
            for c in left:
                out[c] = {"case": c, "status": "error", "error": f"no result (exit {rc}): {err.strip()[-300:]}"}
            left = []
        todo = left
    return out


def summary(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "rounds": vals} if vals else None


def doc_table(path):
    """The markdown table of docs/vulkan.md for the cases in the JSON at path,
    every figure and verdict a scripts/doc_numbers.py span."""
    with open(path) as f:
        doc = json.load(f)
    name = os.path.basename(path)

    def span(k, p, fmt):
        return f"<!-- gen {name}:cases.{k}.{p} {fmt} -->0<!-- /gen -->"

    print("| case | what | unit | anygrad | ggml | ratio | goal >= 1 | ratio, process CPU | goal >= 1 | ratio, wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k, r in doc["cases"].items():
        cells = [f"`{r['case']}`", r["what"], r["unit"]]
        for s in ("anygrad", "ggml"):
            cells.append(f"{span(k, s + '.dev.median', '%.3g')} ({span(k, s + '.dev.min', '%.3g')}-"
                         f"{span(k, s + '.dev.max', '%.3g')})")
        cells += [span(k, "ratio_dev", "%.2f"), span(k, "ratio_dev", "goal>=1"),
                  span(k, "ratio_cpu", "%.2f"), span(k, "ratio_cpu", "goal>=1"), span(k, "ratio", "%.2f")]
        print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--doc-table":
        return doc_table(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="anygrad's build folder")
    ap.add_argument("--ggml-build", default=os.path.join(ROOT, "build-ggml-vulkan"))
    ap.add_argument("--ggml-src", default="/work/.mirror/ggml-org+ggml/repo",
                    help="ggml source tree or git directory, when the ggml build is missing")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=float, default=0.4, help="seconds per timed batch")
    ap.add_argument("--lp-threads", type=int, default=1, help="LP_NUM_THREADS for both sides")
    ap.add_argument("--cases", help="comma-separated OP:DTYPE:SIZES (default: the table's)")
    ap.add_argument("--big", action="store_true", help="add matmul 4096x512x14336")
    ap.add_argument("--set", choices=("quick", "full"), default="full",
                    help="quick: 18 cases (one or two GEMM shapes per job, one size per op)")
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "numbers", "ggml_vulkan.json"))
    ap.add_argument("--docs", action="store_true", help="rewrite docs/vulkan.md's spans afterwards")
    ap.add_argument("--update", action="store_true",
                    help="merge the cases run into the existing --json (their rows replaced, the others kept)")
    a = ap.parse_args()

    ours = os.path.join(a.build, "bin", "opcase_bench")
    peer = os.path.join(a.ggml_build, "ggml_vulkan_ops")
    if not os.access(ours, os.X_OK):
        sys.exit(f"ggml_vulkan.py: {ours} missing (cmake --build {a.build} --target opcase_bench anygrad-vulkan)")
    if not os.access(peer, os.X_OK):
        print(f"ggml_vulkan.py: building ggml into {a.ggml_build} (bench/ggml_vulkan_build.sh)", flush=True)
        build = [os.path.join(ROOT, "bench", "ggml_vulkan_build.sh"), a.ggml_src, a.ggml_build]
        subprocess.run(build, check=True)
    known = dict(default_cases(True))
    if a.cases:
        cases = [(c, known.get(c, "")) for c in a.cases.split(",")]
    elif a.set == "quick":
        cases = [(c, known[c]) for c in QUICK]
    else:
        cases = default_cases(a.big)
    names = [c for c, _ in cases]
    env = dict(os.environ, LP_NUM_THREADS=str(a.lp_threads), AG_NUM_THREADS="1", OMP_NUM_THREADS="1",
               GGML_VK_VISIBLE_DEVICES=os.environ.get("GGML_VK_VISIBLE_DEVICES", "0"))
    sides = {
        "anygrad": [ours, "--device", "vulkan:0", "--time", str(a.time)],
        "ggml": [peer, "--device", "0", "--time", str(a.time)],
    }
    res = {s: {c: [] for c in names} for s in sides}
    checks, errors = {}, {}
    load = [os.getloadavg()[0]]
    t_start = time.time()
    def report(rounds_done):
        table = {}
        for c, what in cases:
            op, dt, sz = c.split(":")
            flop_op = op in ("matmul", "attn")
            unit = "GFLOP/s" if flop_op else "GB/s"
            row = {"case": c, "op": op, "dtype": dt, "sizes": sz, "what": what, "unit": unit}
            m = "gflops" if flop_op else "gbs"
            for s in sides:
                recs = res[s][c]
                row[s] = summary([x[m] for x in recs])
                if row[s]:
                    row[s]["us_median"] = statistics.median(x["us"] for x in recs)
                    for t in ("cpu", "dev"):
                        row[s][t] = summary([x[m + "_" + t] for x in recs])
                        row[s][t + "_us_median"] = statistics.median(x[t + "_us"] for x in recs)
                    row[s]["bytes"] = recs[0]["bytes"]
                else:
                    zero = {"median": 0.0, "min": 0.0, "max": 0.0, "rounds": []}
                    row[s] = dict(zero, us_median=0.0, cpu=dict(zero), cpu_us_median=0.0, dev=dict(zero),
                                  dev_us_median=0.0, error=errors.get(s, {}).get(c, "no result"))
            row["check"] = checks.get(c, "not run")
            g = row["ggml"]["median"]
            row["ratio"] = row["anygrad"]["median"] / g if g > 0 else 0.0
            for t in ("cpu", "dev"):
                gt = row["ggml"][t]["median"]
                row["ratio_" + t] = row["anygrad"][t]["median"] / gt if gt > 0 else 0.0
            row["kernels"] = res["anygrad"][c][0].get("kernels", "") if res["anygrad"][c] else ""
            row["retried_alone"] = sorted({x["side"] for s in sides for x in res[s][c] if "retried_alone" in x})
            table[key(c)] = row
        updated = []
        if a.update:  # the cases run now replace theirs in the existing JSON; the others stay
            with open(a.json) as f:
                old = json.load(f)
            merged = dict(old["cases"])
            merged.update(table)
            table = merged
            updated = old.get("updated", []) + [{
                "cases": [c for c, _ in cases], "rounds": rounds_done,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "load_1min": {"min": min(load), "max": max(load)}}]
        met = sum(1 for r in table.values() if r["ratio"] >= 1)
        met_cpu = sum(1 for r in table.values() if r["ratio_cpu"] >= 1)
        met_dev = sum(1 for r in table.values() if r["ratio_dev"] >= 1)
        doc = {
            "bench": "bench/ggml_vulkan.py",
            "device": "vulkan:0 (lavapipe) on both sides",
            "ggml_commit": GGML_COMMIT,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "rounds": rounds_done,
            "lp_threads": a.lp_threads,
            "load_1min": {"min": min(load), "max": max(load)},
            "wall_s": round(time.time() - t_start),
            "cases_total": len(table),
            "cases_met": met,
            "cases_met_cpu": met_cpu,
            "cases_met_dev": met_dev,
            "cases": table,
        }
        if a.update:
            doc = dict(old, cases=table, cases_total=len(table), cases_met=met, cases_met_cpu=met_cpu,
                       cases_met_dev=met_dev, updated=updated)
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")

        print(f"\nanygrad vulkan:0 beside ggml {GGML_COMMIT} Vulkan0, lavapipe, LP_NUM_THREADS={a.lp_threads}, "
              f"{rounds_done} rounds, median [min-max], load {min(load):.1f}-{max(load):.1f}")
        print(f"{'case':30} {'unit':7} {'anygrad (device time)':>24} {'ggml (device time)':>24} "
              f"{'device':>6} {'CPU':>6} {'wall':>6}  check")
        for r in table.values():
            cells = []
            for s in sides:
                x = r[s]["dev"]
                cells.append(f"{x['median']:7.3f} [{x['min']:.3f}-{x['max']:.3f}]" if x["rounds"] else "   " + r[s]["error"][:20])
            print(f"{r['case']:30} {r['unit']:7} {cells[0]:>24} {cells[1]:>24} {r['ratio_dev']:6.2f} {r['ratio_cpu']:6.2f} "
                  f"{r['ratio']:6.2f}  {r['check']} {r['kernels']}")
        print(f"anygrad at or above ggml: {met_dev} of {len(table)} by device time, {met_cpu} by the process's CPU time, "
              f"{met} by the wall clock; JSON: {a.json}")

    for r in range(a.rounds):
        order = ["ggml", "anygrad"] if r % 2 == 0 else ["anygrad", "ggml"]
        for s in order:
            cmd = sides[s] + (["--check"] if s == "anygrad" and r == 0 else [])
            got = run_side(cmd, names, env, timeout=3600)
            for c in names:
                g = got.get(c, {"status": "error", "error": "no result"})
                if g["status"] == "ok":
                    res[s][c].append(g)
                    if s == "anygrad" and r == 0:
                        checks[c] = g.get("check", "none")
                else:
                    errors.setdefault(s, {})[c] = f"{g['status']}: {g.get('error', '')}"
            print(f"round {r + 1}/{a.rounds} {s}: done ({time.time() - t_start:.0f} s)", flush=True)
        load.append(os.getloadavg()[0])
        if r + 1 < a.rounds:
            report(r + 1)  # the JSON after every round: a cut run leaves its rounds

    report(a.rounds)
    if a.docs:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "doc_numbers.py"), "--json",
                        os.path.dirname(os.path.abspath(a.json)), os.path.join(ROOT, "docs", "vulkan.md")], check=True)


if __name__ == "__main__":
    main()
