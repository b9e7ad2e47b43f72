#!/usr/bin/env bash
# anygrad's CPU jobs against PyTorch 2.x (eager, torch.compile, SDPA), in one
# command: installs the pinned PyTorch into .venv-bench if missing
# (scripts/deps.sh --bench), builds the benches, records machine, date and
# load (docs/numbers/torch2_meta.json), runs bench/torch2_bench.py into
# docs/numbers/torch2_*.json, records the load again at the end
# (torch2_meta_end.json) and rewrites the generated figures of README.md and
# docs/ (scripts/doc_numbers.py).
# Usage: scripts/bench_torch2.sh [BUILD_DIR] [-- torch2_bench.py options]
#   e.g. scripts/bench_torch2.sh build -- --rounds 5 --jobs gpt,text
# Took 37 minutes on the 2 shared cores at load average 11-25 (3 rounds, compile
# caches cold for 2 threads and the medium GPT; each cold torch.compile adds minutes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
if [[ $# -gt 0 && "$1" != "--" ]]; then build="$(cd "$1" && pwd)"; shift; fi
[[ "${1:-}" == "--" ]] && shift
"$root/scripts/deps.sh" --bench
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DAG_CUDA=OFF -DAG_HIP=OFF
fi
cmake --build "$build" -j2 --target contention_bench cnn_bench text_bench attention_bench gemm_bench
nums="$root/docs/numbers"
start=$(date +%s)
/usr/bin/python3 "$root/scripts/doc_numbers.py" --json "$nums" --record-meta --meta torch2_meta.json
/usr/bin/python3 "$root/bench/torch2_bench.py" --build "$build" --out "$nums" "$@"
/usr/bin/python3 "$root/scripts/doc_numbers.py" --json "$nums" --record-meta --meta torch2_meta_end.json
/usr/bin/python3 "$root/scripts/doc_numbers.py" --json "$nums"
echo "bench_torch2.sh: $(( ($(date +%s) - start) / 60 )) min of benchmarks"
