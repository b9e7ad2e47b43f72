#!/usr/bin/env bash
# One prepared run on an NVIDIA GPU machine (target: under 8 minutes on an
# H200 with 16 cores): build the CUDA backend, check every kernel against the
# CPU backend, run the conformance suite on cuda:0, a 1-rank NCCL all-reduce
# (check + bandwidth), benchmark ops and GEMM
# against the copy bandwidth, cuBLAS and PyTorch on the same GPU, and print a
# table of ratios last. Everything lands in $OUT (default ./out): logs, JSON
# lines from each stage and summary.json. Each stage is guarded: a failure is
# recorded and the next stage still runs.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-gpucheck}
JOBS=${JOBS:-16}
PY=${PYTHON:-python3}
LOG="$OUT/gpu_check.log"
STATUS="$OUT/stages.txt"
: >"$LOG"
: >"$STATUS"
T0=$(date +%s)

stage() { # stage <name> <timeout_s> <command...>: run, log, record the result
  local name=$1 limit=$2
  shift 2
  local t=$(date +%s)
  echo "=== [$(($t - T0))s] $name: $*" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.txt" | tee -a "$LOG"
  echo "$name rc=$rc $(($(date +%s) - t))s" | tee -a "$STATUS" "$LOG"
  return 0
}

stage env 30 bash -c 'nvidia-smi; nvcc --version; cmake --version | head -1; '"$PY"' -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))"'

# Only the GPU this machine has: one SASS target keeps the build short.
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
ARCH=${ARCH:-90}
stage configure 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAG_TESTS=OFF -DAG_CUDA=ON -DAG_HIP=OFF \
  -DAG_OPENCL=OFF -DAG_CUDA_ARCHS="$ARCH" -DAG_GPU_WERROR=OFF
stage build 300 cmake --build "$BUILD" -j "$JOBS" --target anygrad anygrad-cuda gpu_check gpu_bench anygrad-cli amp_bench train_bench \
  anygrad-nccl allreduce_bench

MOD="$BUILD/lib/libanygrad-cuda.so"
CLI="$BUILD/bin/anygrad"

# Kernel-level check against the CPU kernels, then our GEMM kernel alone.
stage kernels 150 "$BUILD/bin/gpu_check" "$MOD"
AG_GPU_GEMM=own stage kernels_own_gemm 60 "$BUILD/bin/gpu_check" "$MOD" matmul
# conv2d runs through cuDNN when the module found it (anygrad info: vendor
# line); the own implicit-GEMM kernels then get their own pass.
AG_GPU_CONV=own stage kernels_own_conv 60 "$BUILD/bin/gpu_check" "$MOD" conv2d
# The public-API conformance suite on cuda:0.
if [ -x "$CLI" ]; then
  stage conformance 150 "$CLI" check --backend cuda
else
  echo "conformance rc=skipped (no anygrad CLI)" | tee -a "$STATUS"
fi

stage bench 120 "$BUILD/bin/gpu_bench" "$MOD"
AG_GPU_GEMM=own AG_BENCH_GEMM_ONLY=1 stage bench_own_gemm 60 "$BUILD/bin/gpu_bench" "$MOD" --quick

# The same ops in PyTorch on the same GPU, same sizes, same JSON lines.
cat >"$OUT/torch_bench.py" <<'PYEOF'
import json, sys, torch
dev = "cuda"
n = 1 << 28
reps = 20
def t(fn):
    for _ in range(3): fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps): fn()
    b.record(); b.synchronize()
    return a.elapsed_time(b) / reps
def bw(name, ms, nbytes):
    print(json.dumps({"bench": name, "ms": ms, "gbps": nbytes / (ms * 1e-3) / 1e9}), flush=True)
x32 = torch.empty(n, device=dev)
y32 = torch.empty(n, device=dev)
bw("copy_d2d", t(lambda: y32.copy_(x32)), 8.0 * n)
del y32
for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
    es = torch.tensor([], dtype=dt).element_size()
    x = torch.randn(n, device=dev, dtype=dt)
    y = torch.randn(n, device=dev, dtype=dt)
    z = torch.empty(n, device=dev, dtype=dt)
    bw("fill_" + name, t(lambda: z.fill_(0.5)), n * es)
    bw("add_" + name, t(lambda: torch.add(x, y, out=z)), 3.0 * n * es)
    x2, b1 = x.view(n // 1024, 1024), y[:1024]
    z2 = z.view(n // 1024, 1024)
    bw("bias_add_" + name, t(lambda: torch.add(x2, b1, out=z2)), 2.0 * n * es)
    bw("gelu_" + name, t(lambda: torch.nn.functional.gelu(x, approximate="tanh")), 2.0 * n * es)
    xt = x.view(4096, n // 4096).t()
    bw("transpose_copy_" + name, t(lambda: z.view(n // 4096, 4096).copy_(xt)), 2.0 * n * es)
    if name == "f32":
        bw("cast_f32_bf16", t(lambda: x.to(torch.bfloat16)), 6.0 * n)
    bw("sum_all_" + name, t(lambda: x.sum()), n * es)
    bw("sum_rows4096_" + name, t(lambda: x.view(-1, 4096).sum(1)), n * es)
    bw("sum_cols1024_" + name, t(lambda: x.view(-1, 1024).sum(0)), n * es)
    for w in (4096, 50304):
        r = n // w
        xs = x[: r * w].view(r, w)
        bw("softmax_%d_%s" % (w, name), t(lambda: torch.softmax(xs, -1)), 2.0 * r * w * es)
    w1 = torch.ones(1024, device=dev, dtype=dt)
    bw("layernorm_1024_" + name,
       t(lambda: torch.nn.functional.layer_norm(x.view(-1, 1024), (1024,), w1, w1)), 2.0 * n * es)
    del x, y, z
torch.backends.cuda.matmul.allow_tf32 = False
for s in (1024, 4096, 8192):
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")):
        a = torch.randn(s, s, device=dev, dtype=dt)
        b = torch.randn(s, s, device=dev, dtype=dt)
        ms = t(lambda: a @ b)
        print(json.dumps({"bench": "gemm_%s_%d" % (name, s), "ms": ms, "tflops": 2.0 * s**3 / (ms * 1e-3) / 1e12}),
              flush=True)
PYEOF
stage torch_bench 120 "$PY" "$OUT/torch_bench.py"

# NCCL (libnccl.so.2 from the CUDA toolkit, loaded at run time): a 1-rank
# group on cuda:0 bootstrapped through the in-process group; the result is
# checked and a 64 MiB all-reduce gives the bandwidth line.
stage nccl 60 env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" \
  "$BUILD/bin/allreduce_bench" --nccl --json "$OUT/nccl.json"

# Training smoke runs (throughput lines), when the CLI and a word list exist.
WORDS=${WORDS:-/usr/share/dict/words}
if [ -x "$CLI" ] && [ -r "$WORDS" ]; then
  stage train_mlp 60 "$CLI" train --model mlp --device cuda --steps 300 --words "$WORDS" --out "$OUT/mlp.safetensors"
  stage train_gpt 60 "$CLI" train --model gpt --device cuda --steps 200 --words "$WORDS" --out "$OUT/gpt.safetensors"
  stage compare 60 "$CLI" compare --devices cpu,cuda:0 --steps 30 --words "$WORDS"
  stage compare_gpt 60 "$CLI" compare --devices cpu,cuda:0 --model gpt --steps 10 --words "$WORDS"
  AG_PYTHON="$(command -v "$PY")" stage train_bench 120 "$BUILD/bin/train_bench" --device cuda --steps-a 50 --steps-b 200 --torch bench/train_torch.py --json "$OUT/train_bench.json"
  AG_WORDS="$WORDS" stage amp_bench 90 "$BUILD/bin/amp_bench" "$OUT/amp_bench.json" 10 auto cuda
else
  echo "train rc=skipped (no CLI or no $WORDS)" | tee -a "$STATUS"
fi

# The HIP module targets AMD only (vendor.h has no HIP-on-NVIDIA mapping);
# record whether a hipcc exists here for a later attempt.
echo "hip rc=skipped (hipcc: $(command -v hipcc || echo absent))" | tee -a "$STATUS"

# Summary: ratios, last.
"$PY" - "$OUT" <<'PYEOF' | tee "$OUT/summary.txt"
import json, os, re, sys
out = sys.argv[1]
def jl(name):
    d = {}
    try:
        for line in open(os.path.join(out, name + ".txt")):
            line = line.strip()
            if line.startswith("{"):
                try:
                    o = json.loads(line)
                    d[o.get("bench")] = o
                except ValueError:
                    pass
    except OSError:
        pass
    return d
ours, own, torch = jl("bench"), jl("bench_own_gemm"), jl("torch_bench")
summary = {"ops": [], "gemm": [], "checks": {}}
def tail_line(name, pat):
    try:
        for line in open(os.path.join(out, name + ".txt")):
            if re.search(pat, line):
                last = line.strip()
        return last
    except (OSError, UnboundLocalError):
        return "n/a"
for k in ("kernels", "kernels_own_gemm", "conformance"):
    summary["checks"][k] = tail_line(k, r"passed|PASS|FAIL|fail|unavailable|ok")
summary["checks"]["nccl"] = tail_line("nccl", r"check|unavailable|GB/s|allreduce_bench")
copy = ours.get("copy_d2d", {}).get("gbps", 0)
print()
print("anygrad CUDA backend on %s" % ours.get("device", {}).get("name", "?"))
print("checks:")
for k, v in summary["checks"].items():
    print("  %-18s %s" % (k, v))
print("\n%-24s %10s %9s %10s %12s" % ("op", "GB/s", "of copy", "torch GB/s", "vs torch"))
for name, o in ours.items():
    if "gbps" not in o:
        continue
    tg = torch.get(name, {}).get("gbps", 0)
    row = {"op": name, "gbps": o["gbps"], "frac_copy": o.get("frac_copy", 0), "torch_gbps": tg,
           "vs_torch": o["gbps"] / tg if tg else 0}
    summary["ops"].append(row)
    print("%-24s %10.1f %8.0f%% %10.1f %11.2fx" % (name, o["gbps"], 100 * row["frac_copy"], tg, row["vs_torch"]))
print("\n%-18s %9s %9s %10s %10s %10s" % ("gemm", "TFLOP/s", "vs cuBLAS", "own TF/s", "own/cuBLAS", "vs torch"))
for name, o in ours.items():
    if not name.startswith("gemm"):
        continue
    tt = torch.get(name, {}).get("tflops", 0)
    ow = own.get(name, {})
    row = {"gemm": name, "tflops": o["tflops"], "vs_cublas": o.get("vs_cublas", 0),
           "own_tflops": ow.get("tflops", 0), "own_vs_cublas": ow.get("vs_cublas", 0),
           "torch_tflops": tt, "vs_torch": o["tflops"] / tt if tt else 0}
    summary["gemm"].append(row)
    print("%-18s %9.1f %9.2f %10.1f %10.2f %9.2fx" % (name, row["tflops"], row["vs_cublas"], row["own_tflops"],
                                                    row["own_vs_cublas"], row["vs_torch"]))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
PYEOF
echo "--- stages"; cat "$STATUS"
echo "total $(($(date +%s) - T0))s; results in $OUT"
