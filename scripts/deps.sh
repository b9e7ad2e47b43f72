#!/usr/bin/env bash
# Install what anygrad needs to build and test on Debian 12, only if missing.
# libdnnl2 (oneDNN) is the CPU's f32 GEMM engine, opened at run time
# (backends/cpu/cpu_gemm.c); without it OpenBLAS runs the products.
# libprotobuf-c-dev and protobuf-c-compiler build the ONNX export
# (AG_ONNX, docs/export.md); without them it is left out.
# Usage: scripts/deps.sh [--test] [--bench] [--bench-hf] [--bench-gguf] [--bench-ggml]   (--test adds the sanitizer runtimes, HIP and chromium,
# the headless browser the run-report test renders in, clang 14's libFuzzer runtime
# (libclang-rt-14-dev) for the fuzzers of tests/fuzz/, the Python test packages,
# Vulkan: lavapipe, the validation layers, glslc and the headers). fortunes is
# the English text the text job (anygrad train --task text), the BPE
# tokenizer's test and its bench train on. --test also makes the virtual
# environment .venv (Debian's python3 with --system-site-packages) holding the
# pinned `tokenizers` wheel from PyPI that the tokenizer.json test checks
# against (docs/export.md), the pinned `onnx` (8.9 MB wheel) and
# `onnxruntime` (27.8 MB, CPU only) that check the ONNX export (with Debian's
# NumPy) and the pinned `gguf` reader that tests/gguf_check.py reads
# anygrad's GGUF files with; --bench-hf adds pinned transformers and torch 2.x
# to it for bench/hf_transformers_check.py (several GB with torch's CUDA
# libraries: not for CI); --bench-gguf adds llama-cpp-python, built from
# source for the CPU only (it compiles llama.cpp: about 7 minutes on two
# cores, not for CI), for bench/gguf_llamacpp_check.py. --bench makes a
# second virtual environment, .venv-bench (Debian's python3 with
# --system-site-packages), holding the pinned PyTorch 2.x that the CPU
# benchmarks compare against and the pinned tinygrad of
# bench/tinygrad_opencl.py (scripts/bench_torch2.sh, docs/performance.md):
# PyPI's Linux x86_64 wheel with its CUDA libraries (5.3 GB on disk, about 4 minutes to install; the
# benchmarks use only the CPU); torch.compile's inductor compiles with g++
# and python3-dev, which --bench installs. The tests keep Debian's torch 1.13
# (/usr/bin/python3) as their numeric reference. --bench-ggml adds
# glslang-tools and spirv-headers, which bench/ggml_vulkan_build.sh needs to
# build ggml's Vulkan test-backend-ops for bench/ggml_vulkan.py. Each is
# installed only when missing.
set -euo pipefail
test_deps=0 bench=0 bench_hf=0 bench_gguf=0 bench_ggml=0
for a in "$@"; do
  case "$a" in
    --test) test_deps=1 ;;
    --bench) bench=1 ;;
    --bench-hf) test_deps=1 bench_hf=1 ;;
    --bench-gguf) test_deps=1 bench_gguf=1 ;;
    --bench-ggml) test_deps=1 bench_ggml=1 ;;
    *) echo "usage: scripts/deps.sh [--test] [--bench] [--bench-hf] [--bench-gguf] [--bench-ggml]" >&2; exit 2 ;;
  esac
done
pkgs=(build-essential cmake pkg-config libopenblas-dev libomp-dev wamerican
      ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev clinfo
      zlib1g-dev dataset-fashion-mnist libdnnl2 fortunes libprotobuf-c-dev protobuf-c-compiler)
if ((test_deps)); then
  pkgs+=(python3-venv libcmocka-dev hipcc libamdhip64-dev python3 python3-torch clang-14 clang-15 chromium
        python3-numpy python3-pytest python3-hypothesis python3-setuptools python3-pip python3-dev
        libopenmpi-dev openmpi-bin libclang-rt-14-dev
        mesa-vulkan-drivers vulkan-validationlayers glslc libvulkan-dev)
fi
if ((bench)); then
  pkgs+=(python3-venv python3-pip python3-dev g++ python3-torch)
fi
((bench_ggml)) && pkgs+=(glslang-tools spirv-headers)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- the Python packages of the Hugging Face checks, pinned, in .venv ----
TOKENIZERS_VERSION=0.23.3
ONNX_VERSION=1.23.2
ONNXRUNTIME_VERSION=1.32.0
ML_DTYPES_VERSION=0.5.4 # onnx's; newer ones need NumPy 2, which would hide Debian's NumPy 1.24
TRANSFORMERS_VERSION=5.23.0
TORCH_VERSION=2.15.0
GGUF_VERSION=0.19.0
LLAMA_CPP_PYTHON_VERSION=0.3.36
TINYGRAD_VERSION=0.14.0 # pure Python; opens libOpenCL through ctypes (bench/tinygrad_opencl.py)
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
has() { "$venv/bin/python3" -c "import $1, sys; sys.exit($1.__version__.split('+')[0] != '$2')" 2>/dev/null; }
if ((test_deps)); then
  [[ -x "$venv/bin/python3" ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  has tokenizers "$TOKENIZERS_VERSION" ||
    "$venv/bin/pip" install -q --disable-pip-version-check "tokenizers==$TOKENIZERS_VERSION"
  has onnx "$ONNX_VERSION" && has onnxruntime "$ONNXRUNTIME_VERSION" ||
    "$venv/bin/pip" install -q --disable-pip-version-check "onnx==$ONNX_VERSION" \
      "onnxruntime==$ONNXRUNTIME_VERSION" "ml_dtypes==$ML_DTYPES_VERSION"
  # gguf asks for numpy>=1.17, which Debian's NumPy meets (pip keeps it), and
  # pyyaml, requests, tqdm (pip adds those that are missing).
  "$venv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(m.version('gguf') != '$GGUF_VERSION')" \
    2>/dev/null || "$venv/bin/pip" install -q --disable-pip-version-check "gguf==$GGUF_VERSION"
fi
if ((bench_hf)); then
  has transformers "$TRANSFORMERS_VERSION" && has torch "$TORCH_VERSION" ||
    "$venv/bin/pip" install -q --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION" \
      "torch==$TORCH_VERSION"
fi
# ---- the CPU benchmarks' references, pinned, in .venv-bench ----
# One line per package in bench_pins: "distribution version pip-spec".
BENCH_TORCH_VERSION=2.15.0
bench_pins=("torch $BENCH_TORCH_VERSION torch==$BENCH_TORCH_VERSION"
            "tinygrad $TINYGRAD_VERSION tinygrad==$TINYGRAD_VERSION")
if ((bench)); then
  bvenv="$(cd "$(dirname "$0")/.." && pwd)/.venv-bench"
  [[ -x "$bvenv/bin/python3" ]] || /usr/bin/python3 -m venv --system-site-packages "$bvenv"
  for pin in "${bench_pins[@]}"; do
    read -r mod ver spec <<<"$pin"
    "$bvenv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(m.version('$mod').split('+')[0] != '$ver')" \
      2>/dev/null ||
      "$bvenv/bin/pip" install -q --disable-pip-version-check "$spec"
  done
fi
if ((bench_gguf)); then
  # From source (PyPI has no CPU wheel of it): CPU only, no BLAS, no GPU backend.
  has llama_cpp "$LLAMA_CPP_PYTHON_VERSION" ||
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF \
-DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
      "$venv/bin/pip" install -v --disable-pip-version-check --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
fi
