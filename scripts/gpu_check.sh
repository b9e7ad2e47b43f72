#!/usr/bin/env bash
# One prepared run on an NVIDIA GPU machine (target: under 8 minutes on an
# H200 with 16 cores; BUDGET seconds, default 460, cap the whole run: a
# stage gets at most what is left of it, and a stage with under 15 s left is
# recorded as skipped). The stages run most telling first (docs/gpu.md,
# "Checking on a GPU machine", says what each settles): build the CUDA
# backend; the caller's current device around anygrad's calls; the fused
# attention kernels against the CPU, under compute-sanitizer memcheck, and
# timed against PyTorch's SDPA; two NCCL communicators on one GPU; portable
# numerics (the probe, the conformance rows in portable mode, every case bit
# for bit against the CPU and the emulated GPU); the placement of MPI ranks on several GPUs; shared-memory races in the
# attention kernels (racecheck); then every kernel against the CPU backend,
# the conformance suite on cuda:0, a 1-rank NCCL all-reduce, benchmarks of
# ops and GEMM against the copy bandwidth, cuBLAS and PyTorch, training
# smoke runs, and a table of ratios last. Everything lands in $OUT (default
# ./out): logs, JSON lines from each stage and summary.json. Each stage is
# guarded: a failure is recorded and the next stage still runs. Estimates
# (~N s) are for an H200.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-gpucheck}
JOBS=${JOBS:-16}
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-460}
LOG="$OUT/gpu_check.log"
STATUS="$OUT/stages.txt"
: >"$LOG"
: >"$STATUS"
T0=$(date +%s)

stage() { # stage <name> <timeout_s> <command...>: run, log, record the result
  local name=$1 limit=$2
  shift 2
  local t=$(date +%s)
  local left=$((BUDGET - (t - T0)))
  if [ "$left" -lt 15 ]; then
    echo "$name rc=skipped (time budget: ${left}s of ${BUDGET}s left)" | tee -a "$STATUS" "$LOG"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== [$(($t - T0))s] $name (limit ${limit}s): $*" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.txt" | tee -a "$LOG"
  echo "$name rc=$rc $(($(date +%s) - t))s" | tee -a "$STATUS" "$LOG"
  return 0
}
skip() { # skip <name> <why>
  echo "$1 rc=skipped ($2)" | tee -a "$STATUS" "$LOG"
}

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
# ~5 s
stage env 30 bash -c 'nvidia-smi; nvcc --version; cmake --version | head -1; '"$PY"' -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))"; echo "GPUs: '"$NGPU"'"; echo "compute-sanitizer: '"${SANITIZER:-absent}"'"; '"${SANITIZER:-true}"' --version | tail -1; echo "mpirun: $(command -v mpirun || echo absent)"'

# Only the GPU this machine has: one SASS target keeps the build short.
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
ARCH=${ARCH:-90}
# ~20 s
stage configure 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DAG_TESTS=OFF -DAG_CUDA=ON -DAG_HIP=OFF \
  -DAG_OPENCL=OFF -DAG_CUDA_ARCHS="$ARCH" -DAG_GPU_WERROR=OFF
# What the first stages need (~150 s: the CUDA module's kernels); the rest
# after them.
stage build 300 cmake --build "$BUILD" -j "$JOBS" --target anygrad anygrad-cuda gpu_check gpu3_current_device_cuda \
  anygrad-nccl gpu3_nccl_two attention_bench

MOD="$BUILD/lib/libanygrad-cuda.so"
CLI="$BUILD/bin/anygrad"
export AG_BACKEND_PATH="$BUILD/lib"
NCCL_LD="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"

# The caller's current device (docs/design/gpu.md): a fresh thread gets no
# primary context on a device anygrad does not use; the last device current
# while anygrad runs on cuda:0 (and device 0 while it runs on the last), each
# call leaving it current; placement with two GPUs or more. ~5 s
stage current_device 60 "$BUILD/bin/gpu3_current_device_cuda" cuda

# The fused attention kernels (128-thread blocks, shared-memory tiles):
# forward and backward against the CPU (~5 s), then under memcheck (~40 s).
stage sdpa 60 "$BUILD/bin/gpu_check" "$MOD" sdpa
if [ -n "$SANITIZER" ]; then
  stage memcheck_sdpa 180 "$SANITIZER" --tool memcheck --error-exitcode 1 "$BUILD/bin/gpu_check" "$MOD" sdpa
else
  skip memcheck_sdpa "no compute-sanitizer"
fi
# Against PyTorch's SDPA on the same GPU: bf16, causal, fwd+bwd. ~40 s
stage attention_torch 120 "$PY" bench/attention_torch.py --bench "$BUILD/bin/attention_bench" --device cuda \
  --dtype bf16 --T 1024,4096 --B 4 --H 16 --D 64 --rounds 3 --threads 4 --json "$OUT/attention.json"

# Two 1-rank NCCL communicators on cuda:0 at once (two ranks of one on one
# GPU: refused by NCCL, in bounded time), a 2-rank one over two GPUs:
# every collective checked when the call returns, then timed. ~20 s
stage nccl_two 120 env LD_LIBRARY_PATH="$NCCL_LD" "$BUILD/bin/gpu3_nccl_two" --mib 4 --iters 20 \
  --json "$OUT/nccl_two.json"

# The rest of the programs (~30 s); the MPI module where MPI was found.
REST="gpu_bench anygrad-cli amp_bench train_bench allreduce_bench"
if cmake --build "$BUILD" --target help 2>/dev/null | grep -q ' anygrad-mpi$'; then REST="$REST anygrad-mpi"; fi
# the emulated GPU (gpuemu:0), the third side of the portable comparison
if cmake --build "$BUILD" --target help 2>/dev/null | grep -q ' anygrad-gpuemu$'; then REST="$REST anygrad-gpuemu"; fi
stage build_rest 200 cmake --build "$BUILD" -j "$JOBS" --target $REST

# Portable numerics (docs/numerics.md): portable_check's probe on the GPU
# (subnormals, contraction, division, sqrt) and the conformance rows in
# portable mode (refused cells show as unsupported, with the reason under
# --verbose), ~60 s; then every op x dtype x shape case of cuda:0 (and
# gpuemu:0 where built) against the CPU bit for bit, outputs and gradients
# (0 differing cells is the target), ~60 s.
if [ -x "$CLI" ]; then
  stage portable_conformance 120 env AG_NUMERICS=portable "$CLI" check --backend cuda:0
  PDEVS="cuda:0"
  [ -e "$BUILD/lib/libanygrad-gpuemu.so" ] && PDEVS="$PDEVS gpuemu:0"
  if "$CLI" check --help 2>&1 | grep -q -- '--bitwise'; then
    stage portable_bitwise 150 "$CLI" check --numerics portable --bitwise $PDEVS
  else
    skip portable_bitwise "this anygrad check has no --bitwise"
  fi
else
  skip portable_conformance "no anygrad CLI"
  skip portable_bitwise "no anygrad CLI"
fi

# Placement of MPI ranks (anygrad train --dist mpi --device cuda): local
# rank r on cuda:r. ~30 s
if [ "$NGPU" -lt 2 ]; then
  skip placement_mpi "$NGPU GPU: each rank's device needs two"
elif ! command -v mpirun >/dev/null; then
  skip placement_mpi "no mpirun"
elif [ ! -e "$BUILD/lib/libanygrad-mpi.so" ]; then
  skip placement_mpi "libanygrad-mpi.so not built (no MPI found at configure)"
else
  cat >"$OUT/placement_mpi.sh" <<'SHEOF'
# mpirun -np 2 anygrad train --dist mpi --device cuda: rank r says it runs on cuda:r
set -u
CLI=$1 WORK=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 AG_DIST_TIMEOUT_MS=60000
mpirun -np 2 "$CLI" train --dist mpi --device cuda --steps 20 --batch 64 --hidden 64 --emb 16 --context 3 \
  --log-every 10 --samples 0 --profile off --threads 1 --out "$WORK/placement.st" >"$WORK/placement_mpi.log" 2>&1
rc=$?
cat "$WORK/placement_mpi.log"
[ $rc -eq 0 ] || { echo "placement: mpirun exited $rc"; exit 1; }
for r in 0 1; do
  grep -q "^anygrad train: rank $r of 2 on cuda:$r (" "$WORK/placement_mpi.log" \
    || { echo "placement: rank $r is not on cuda:$r"; exit 1; }
done
echo "placement: rank 0 on cuda:0, rank 1 on cuda:1: ok"
SHEOF
  stage placement_mpi 120 bash "$OUT/placement_mpi.sh" "$CLI" "$OUT"
fi

# NCCL (libnccl.so.2 from the CUDA toolkit, loaded at run time): a 1-rank
# group on cuda:0 bootstrapped through the in-process group; the result is
# checked and a 64 MiB all-reduce gives the bandwidth line. ~10 s
stage nccl 60 env LD_LIBRARY_PATH="$NCCL_LD" "$BUILD/bin/allreduce_bench" --nccl --json "$OUT/nccl.json"

# Shared-memory races in the attention kernels: f32 and bf16, forward and
# backward. ~60 s
if [ -n "$SANITIZER" ]; then
  stage racecheck_sdpa 150 "$SANITIZER" --tool racecheck --error-exitcode 1 "$BUILD/bin/gpu_check" "$MOD" \
    "sdpa f32,sdpa_bwd f32,sdpa bf16,sdpa_bwd bf16"
else
  skip racecheck_sdpa "no compute-sanitizer"
fi

# Kernel-level check against the CPU kernels (attention done above), then
# our GEMM kernel alone. ~60 s
stage kernels 150 "$BUILD/bin/gpu_check" "$MOD" --skip=sdpa
AG_GPU_GEMM=own stage kernels_own_gemm 60 "$BUILD/bin/gpu_check" "$MOD" matmul
# conv2d runs through cuDNN when the module found it (anygrad info: vendor
# line); the own implicit-GEMM kernels then get their own pass.
AG_GPU_CONV=own stage kernels_own_conv 60 "$BUILD/bin/gpu_check" "$MOD" conv2d
# The public-API conformance suite on cuda:0. ~60 s
if [ -x "$CLI" ]; then
  stage conformance 150 "$CLI" check --backend cuda
else
  skip conformance "no anygrad CLI"
fi

# Benchmarks, ~3 min with the training runs: what the budget leaves.
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
for k in ("current_device", "sdpa"):
    summary["checks"][k] = tail_line(k, r"passed|PASS|FAIL|fail|unavailable|ok")
for k in ("memcheck_sdpa", "racecheck_sdpa"):
    summary["checks"][k] = tail_line(k, r"ERROR SUMMARY|RACECHECK SUMMARY|rror")
summary["checks"]["attention_torch"] = tail_line("attention_torch", r"^\| \d+ \||rror")
summary["checks"]["nccl_two"] = tail_line("nccl_two", r"gpu3_nccl_two|unavailable")
summary["checks"]["placement_mpi"] = tail_line("placement_mpi", r"placement")
for k in ("kernels", "kernels_own_gemm", "conformance", "portable_conformance", "portable_bitwise"):
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
