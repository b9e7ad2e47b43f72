#!/usr/bin/env bash
# The main job: install what is missing, build, list the devices, and train
# the character-level language model on the best available device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAG_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)"
build/bin/anygrad info
build/bin/anygrad train "$@"
