#!/usr/bin/env bash
# Install what anygrad needs to build and test on Debian 12, only if missing.
# libdnnl2 (oneDNN) is the CPU's f32 GEMM engine, opened at run time
# (backends/cpu/cpu_gemm.c); without it OpenBLAS runs the products.
# Usage: scripts/deps.sh [--test]   (--test adds the sanitizer runtimes, HIP and chromium,
# the headless browser the run-report test renders in, clang 14's libFuzzer runtime
# (libclang-rt-14-dev) for the fuzzers of tests/fuzz/, the Python test packages,
# Vulkan: lavapipe, the validation layers, glslc and the headers). fortunes is
# the English text the text job (anygrad train --task text), the BPE
# tokenizer's test and its bench train on.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libomp-dev wamerican
      ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev clinfo
      zlib1g-dev dataset-fashion-mnist libdnnl2 fortunes)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(libcmocka-dev hipcc libamdhip64-dev python3 python3-torch clang-14 clang-15 chromium
        python3-numpy python3-pytest python3-hypothesis python3-setuptools python3-pip python3-dev
        libopenmpi-dev openmpi-bin libclang-rt-14-dev
        mesa-vulkan-drivers vulkan-validationlayers glslc libvulkan-dev)
fi
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
