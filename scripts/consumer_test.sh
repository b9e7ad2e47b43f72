#!/usr/bin/env bash
# A project outside anygrad's tree (tests/consumer) built and run against
# anygrad four ways, as a user would, and an out-of-tree backend module
# (tests/extbackend) built against the installed prefix and loaded from its
# own folder: (a) find_package on an installed prefix,
# (b) pkg-config, (c) add_subdirectory with everything the top-level build has
# (tests, benchmarks, OpenCL, the static library), then that build installed
# and used through find_package's anygrad::anygrad_static, (d) FetchContent
# from a file:// archive.
# Usage: scripts/consumer_test.sh <anygrad build dir to install>
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=$(cd "${1:?usage: $0 <anygrad build dir>}" && pwd)
jobs=$(nproc)
work=$(mktemp -d "${TMPDIR:-/tmp}/anygrad-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake_q() { cmake "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log"; return 1; }; }

echo "--- (a) find_package(anygrad) on an installed prefix"
cmake_q --install "$build" --prefix "$work/prefix"
cmake_q -S tests/consumer -B "$work/a" -DAG_CONSUMER_MODE=package -DCMAKE_PREFIX_PATH="$work/prefix"
cmake_q --build "$work/a" -j"$jobs"
"$work/a/consumer" && "$work/a/consumer_cxx"

echo "--- (a') an out-of-tree backend module against the installed prefix (AG_BACKEND_PATH)"
cmake_q -S tests/extbackend -B "$work/ext" -DCMAKE_PREFIX_PATH="$work/prefix"
cmake_q --build "$work/ext" -j"$jobs"
[ -e "$work/ext/libanygrad-minihost.so" ] || { echo "no libanygrad-minihost.so"; exit 1; }
tests/extbackend/check.sh "$work/prefix/bin/anygrad" "$work/ext"

echo "--- (b) pkg-config"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib64/pkgconfig"
libdir=$(pkg-config --variable=libdir anygrad)
mkdir -p "$work/b"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -pedantic -Werror tests/consumer/main.c -o "$work/b/consumer" \
  $(pkg-config --cflags --libs anygrad) -Wl,-rpath,"$libdir"
"$work/b/consumer"
unset PKG_CONFIG_PATH

echo "--- (c) add_subdirectory, with anygrad's tests and benchmarks"
cmake_q -S tests/consumer -B "$work/c" -DAG_CONSUMER_MODE=subdirectory -DANYGRAD_SOURCE="$src" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAG_TESTS=ON -DAG_BENCH=ON -DAG_CUDA=OFF -DAG_HIP=OFF -DAG_STATIC=ON
cmake_q --build "$work/c" -j"$jobs"
"$work/c/consumer" && "$work/c/consumer_cxx"
if grep -rq -- -Werror "$work/c/anygrad/CMakeFiles/anygrad_obj.dir/flags.make"; then
  echo "anygrad as a subproject compiles with -Werror (only top-level or AG_WERROR=ON may)"; exit 1
fi
for f in bin/anygrad bin/ops_test bin/train_reference_test bin/ops_bench; do
  [ -x "$work/c/anygrad/$f" ] || { echo "subproject build lacks $f"; exit 1; }
done
if [ -e "$build/lib/libanygrad-opencl.so" ] && [ ! -e "$work/c/anygrad/lib/libanygrad-opencl.so" ]; then
  echo "the top-level build has the OpenCL backend, the subproject build does not"; exit 1
fi
# anygrad's own tests run from the parent's build tree (their data paths are right)
(cd "$work/c" && ctest --output-on-failure -j"$jobs" -R '^(consumer|consumer_cxx|consumer_static|package_version|train_reference)$')
if [ -e "$work/c/anygrad/lib/libanygrad-opencl.so" ] && "$work/c/anygrad/bin/anygrad" info | grep -q "opencl.*not found"; then
  echo "the subproject's library does not find its OpenCL module"; exit 1
fi

echo "--- (c') the subproject build (AG_STATIC=ON) installed: find_package gives anygrad::anygrad_static"
cmake_q --install "$work/c/anygrad" --prefix "$work/prefix-static"
[ -e "$work/prefix-static/lib/libanygrad.a" ] || { echo "libanygrad.a not installed"; exit 1; }
cmake_q -S tests/consumer -B "$work/c2" -DAG_CONSUMER_MODE=package -DCMAKE_PREFIX_PATH="$work/prefix-static"
cmake_q --build "$work/c2" -j"$jobs"
[ -x "$work/c2/consumer_static" ] || { echo "no anygrad::anygrad_static in the installed package"; exit 1; }
"$work/c2/consumer_static" && "$work/c2/consumer"

echo "--- (d) FetchContent from a file:// archive"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z | tar --null -T - --transform 's,^,anygrad/,' -czf "$work/anygrad.tar.gz"
else
  tar --exclude='./build*' --transform 's,^\.,anygrad,' -czf "$work/anygrad.tar.gz" .
fi
cmake_q -S tests/consumer -B "$work/d" -DAG_CONSUMER_MODE=fetchcontent -DANYGRAD_URL="file://$work/anygrad.tar.gz" \
  -DAG_CUDA=OFF -DAG_HIP=OFF
cmake_q --build "$work/d" -j"$jobs"
"$work/d/consumer" && "$work/d/consumer_cxx" && "$work/d/consumer_static"
echo "consumer builds passed"
