#!/usr/bin/env bash
# python/tests/test_harden3.py once more with the package's optional C
# extension anygrad._fast (Tensor.item(), which int tensors used as dims
# and indices go through): python_cpu runs it from the tree, without it.
# The package is copied, with optable.h, into the work directory and the
# extension built there, so nothing is written into the source tree.
#   harden3_python.sh <python3> <source dir> <libanygrad.so> <work dir>
# Exit 77 (skip) where Python.h is missing.
set -euo pipefail
py=$1 src=$2 lib=$3 work=$4
if ! "$py" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  echo "harden3_python: no Python.h: anygrad._fast cannot be built"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/pkg/anygrad"
cp -r "$src"/python/anygrad/. "$work/pkg/anygrad/" && rm -rf "$work/pkg/anygrad/__pycache__" "$work"/pkg/anygrad/*.so && cp "$src"/include/anygrad/optable.h "$work/pkg/anygrad/"
cp "$src/python/tests/test_harden3.py" "$work/"
(cd "$work/pkg" && "$py" -c 'from setuptools import Extension, setup
setup(name="anygrad-fast", ext_modules=[Extension("anygrad._fast", ["anygrad/_fast.c"])],
      script_args=["-q", "build_ext", "--inplace"])')
cd "$work"
ANYGRAD_EXPECT_FAST=1 ANYGRAD_LIBRARY=$lib PYTHONPATH="$work/pkg" "$py" -m pytest -q -p no:cacheprovider \
  --noconftest test_harden3.py
