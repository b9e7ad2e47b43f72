#!/usr/bin/env bash
# python/tests/test_traps.py with the package's optional C extension
# anygrad._fast built, so item() goes through it (python_cpu runs it from
# the tree, through ctypes): a device error must be raised by both paths.
# The package is copied, with optable.h, into the work directory and the
# extension built there, so nothing is written into the source tree.
#   python_traps_fast.sh <python3> <source dir> <libanygrad.so> <work dir>
# Exit 77 (skip) where Python.h is missing.
set -euo pipefail
py=$1 src=$2 lib=$3 work=$4
if ! "$py" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  echo "python_traps_fast: no Python.h: anygrad._fast cannot be built"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/anygrad" "$work/tests"
cp -r "$src"/python/anygrad/. "$work/anygrad/" && rm -rf "$work/anygrad/__pycache__" "$work"/anygrad/*.so && cp "$src"/include/anygrad/optable.h "$work/anygrad/"
cp "$src/python/tests/conftest.py" "$src/python/tests/test_traps.py" "$work/tests/"
(cd "$work" && "$py" -c 'from setuptools import Extension, setup
setup(name="anygrad-fast", ext_modules=[Extension("anygrad._fast", ["anygrad/_fast.c"])],
      script_args=["-q", "build_ext", "--inplace"])')
cd "$work"
ANYGRAD_EXPECT_FAST=1 ANYGRAD_LIBRARY=$lib "$py" -m pytest -q -p no:cacheprovider tests/test_traps.py
