#!/usr/bin/env bash
# pip installs the package from the source tree offline (Debian's pip and
# setuptools, no build isolation, no index) into a fresh directory, and the
# installed copy, imported from outside the tree with ANYGRAD_LIBRARY unset,
# finds the library recorded at install time and lists the devices.
#   python_install.sh <python3> <source dir> <libanygrad.so> <work dir>
set -euo pipefail
py=$1 src=$2 lib=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
ANYGRAD_LIBRARY=$lib "$py" -m pip install -q --no-build-isolation --no-deps --no-index \
  --disable-pip-version-check --target "$work/site" "$src/python" 2>&1 | grep -v "as the 'root' user" || true
test -f "$work/site/anygrad/optable.h" || { echo "python_install: optable.h not installed"; exit 1; }
grep -qxF "$lib" "$work/site/anygrad/_libpaths.txt" || { echo "python_install: $lib not recorded"; exit 1; }
cd "$work"
out=$(env -u ANYGRAD_LIBRARY PYTHONPATH="$work/site" "$py" -c \
  'import anygrad as ag; print(ag._lib.LIBRARY_PATH); print(ag.devices()); print((ag.ones(3) * 2).sum().item())')
echo "$out"
[ "$(echo "$out" | sed -n 1p)" = "$lib" ] || { echo "python_install: loaded another library"; exit 1; }
echo "$out" | sed -n 2p | grep -q "'cpu'" || { echo "python_install: no cpu device"; exit 1; }
[ "$(echo "$out" | sed -n 3p)" = "6.0" ] || { echo "python_install: wrong value"; exit 1; }
echo "python_install: ok"
