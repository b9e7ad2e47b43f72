#!/usr/bin/env bash
# The whole test suite: install what is missing, then build and run CTest in
# three configurations: release (every backend that builds here, PoCL for
# OpenCL), ASan+UBSan, and TSan for the threaded parts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
# The layers of core/ (core/layers.txt): seconds, so a back-edge fails first.
python3 scripts/layers.py
jobs=$(nproc)
run() { # name, ctest args, cmake args...
  local dir=build-test-$1 ctest_args=$2 t0=$SECONDS; shift 2
  echo "=== $dir: configure ($*)"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
  echo "=== $dir: test"
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j"$jobs" $ctest_args)
  echo "=== $dir: passed, $((SECONDS - t0)) s (suite so far: $SECONDS s)"
}
# The release stage builds with the main job's flags (Release: -O3), so a
# warning only -O3 raises (-Werror) fails here as it would in scripts/main.sh.
run release "" -DCMAKE_BUILD_TYPE=Release
# What only nvcc and hipcc can say (registers x block size, static shared
# memory, spills in hot kernels), read from the release build's reports.
python3 scripts/gpu_resources.py build-test-release
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# What lavapipe, its LLVM and the validation layer keep until exit, for every
# test that opens vulkan:0 (leaks through anygrad's own frames still count).
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan_vulkan.supp"
run asan "-E opencl" -DAG_SANITIZE="address;undefined" -DAG_CUDA=OFF -DAG_HIP=OFF
# PoCL's worker threads crash LeakSanitizer's exit-time scan (not a finding
# about anygrad): the OpenCL tests run under ASan+UBSan without leak checks.
echo "=== build-test-asan: OpenCL tests"
(cd build-test-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure --timeout 600 -j"$jobs" -R opencl)
# OpenBLAS threads are not instrumented: keep BLAS single-threaded under TSan.
# cmocka allocates in its own signal handlers: not a finding about anygrad.
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0 OPENBLAS_NUM_THREADS=1
run tsan "-L threads" -DAG_SANITIZE=thread -DAG_CUDA=OFF -DAG_HIP=OFF -DAG_OPENCL=OFF -DAG_OPENMP=OFF
# ---- begin: anygrad as a dependency (clang, consumer projects) ----
# Debian 12's clang 14 builds the C code and the suite; the fast tests run
# (the threaded, OpenCL, emulated-GPU, Vulkan and command-line ones ran above
# under gcc, so those modules are not built again). AG_FUZZ adds the libFuzzer harnesses of
# tests/fuzz/ (label fuzz), each run for 5 s from its seed corpus.
run clang14 "-LE threads|gpuemu|vulkan|cli -E opencl|check_|compare" -DCMAKE_C_COMPILER=clang-14 -DAG_CUDA=OFF -DAG_HIP=OFF -DAG_OPENCL=OFF -DAG_GPUEMU=OFF -DAG_VULKAN=OFF -DAG_BENCH=OFF -DAG_FUZZ=ON
# A project outside the tree uses the release build through find_package and
# pkg-config (installed), add_subdirectory and FetchContent.
echo "=== consumer projects"
scripts/consumer_test.sh build-test-release
# ---- end: anygrad as a dependency ----
echo "all test configurations passed in $SECONDS s"
