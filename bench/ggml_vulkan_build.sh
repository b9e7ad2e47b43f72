#!/usr/bin/env bash
# Build ggml's Vulkan backend and test-backend-ops, and compile
# bench/ggml_vulkan_ops.c (the ggml side of bench/ggml_vulkan.py) against it.
# Usage: bench/ggml_vulkan_build.sh [SRC] [BUILD]
#   SRC   a ggml source tree, or a ggml git directory (bare or not): then the
#         commit $GGML_COMMIT (default a74f334a, the last that builds with
#         Debian 12's Vulkan 1.3.239 headers) is exported into BUILD/src.
#         Default: /work/.mirror/ggml-org+ggml/repo.
#   BUILD the build folder (default build-ggml-vulkan/ in the repository root,
#         which .gitignore's /build*/ leaves out of git).
# Leaves BUILD/ggml_vulkan_ops and BUILD/test-backend-ops (a link) and
# prints BUILD on its last line. Uses only Debian
# packages (scripts/deps.sh --bench-ggml: glslang-tools, spirv-headers, plus
# --test's glslc and libvulkan-dev); nothing is downloaded and nothing of
# ggml enters the repository. About 10-15 minutes on two cores the first
# time (the shader generator compiles several hundred SPIR-V variants); an
# existing build is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:-/work/.mirror/ggml-org+ggml/repo}"
build="${2:-$root/build-ggml-vulkan}"
commit="${GGML_COMMIT:-a74f334a}"
jobs="${GGML_BUILD_JOBS:-2}"
mkdir -p "$build"
build="$(cd "$build" && pwd)"

for t in glslc glslangValidator cmake c++; do
  command -v "$t" >/dev/null || { echo "ggml_vulkan_build: $t missing (scripts/deps.sh --bench-ggml)" >&2; exit 1; }
done
[[ -f /usr/include/spirv/unified1/spirv.hpp ]] ||
  { echo "ggml_vulkan_build: spirv-headers missing (scripts/deps.sh --bench-ggml)" >&2; exit 1; }

if [[ -f "$src/CMakeLists.txt" && -d "$src/src/ggml-vulkan" ]]; then
  tree="$src"
elif git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  full="$(git -C "$src" rev-parse --verify "$commit^{commit}")"
  tree="$build/src"
  if [[ "$(cat "$tree/.ggml_commit" 2>/dev/null)" != "$full" ]]; then
    rm -rf "$tree" && mkdir -p "$tree"
    git -C "$src" archive "$full" | tar -x -C "$tree"
    echo "$full" > "$tree/.ggml_commit"
  fi
else
  echo "ggml_vulkan_build: $src is neither a ggml source tree nor a git directory" >&2
  exit 1
fi

# Portable CPU code (no -march=native), no OpenMP (the bench sets no CPU
# backend threads), only the test that the bench runs.
cmake -S "$tree" -B "$build/obj" -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON \
  -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF \
  ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} >"$build/cmake.log"
cmake --build "$build/obj" -j"$jobs" --target test-backend-ops
exe="$(find "$build/obj" -name test-backend-ops -type f -perm -u+x | head -n1)"
[[ -x "$exe" ]] || { echo "ggml_vulkan_build: test-backend-ops not built" >&2; exit 1; }
ln -sf "$exe" "$build/test-backend-ops"
libs=() rpath=""
for l in ggml ggml-base ggml-vulkan ggml-cpu; do
  f="$(find "$build/obj" \( -name "lib$l.so" -o -name "lib$l.a" \) | head -n1)"
  [[ -n "$f" ]] || continue
  libs+=("$f")
  rpath="$rpath${rpath:+:}$(dirname "$f")"
done
# the C program is built to a new file and moved, so a run in progress keeps its copy
cc -O2 -std=c11 -Wall -Wextra -I"$tree/include" "$root/bench/ggml_vulkan_ops.c" -o "$build/ggml_vulkan_ops.new" \
  "${libs[@]}" "${libs[@]}" -Wl,-rpath,"$rpath" -lvulkan -lstdc++ -lm -lpthread
mv -f "$build/ggml_vulkan_ops.new" "$build/ggml_vulkan_ops"
echo "$build"
