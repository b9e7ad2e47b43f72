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
# The optional extension (item() in one C call) is built where Python.h is,
# and gives what the ctypes path gives, errors included.
if "$py" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  env -u ANYGRAD_LIBRARY PYTHONPATH="$work/site" "$py" - <<'PY'
import anygrad as ag
from anygrad import _tensor
assert _tensor._fast_item is not None, "anygrad._fast was not built"
fast = _tensor._fast_item
cases = [(ag.tensor(2.5), 2.5, float), (ag.tensor(-3), -3, int), (ag.tensor(True), True, bool),
         (ag.tensor(2 ** 53 + 1), 2 ** 53 + 1, int), (ag.tensor(0.1, dtype=ag.float16), 0.0999755859375, float),
         (ag.tensor([[7]], dtype=ag.int32), 7, int), (ag.tensor(float("inf")), float("inf"), float)]
for t, want, typ in cases:
    got = t.item()
    assert got == want and type(got) is typ, (t, got, want)
nan = ag.tensor(float("nan")).item()
assert nan != nan
assert fast(ag.ones(2)._h) is None  # a failure: the ctypes path raises with the message
try:
    ag.ones(2).item()
    raise AssertionError("item() of two elements did not raise")
except ValueError as e:
    assert "one element" in str(e)
t = ag.ones(1)
t.release()
try:
    t.item()
    raise AssertionError("item() of a released tensor did not raise")
except RuntimeError as e:
    assert "released" in str(e)
print("python_install: item() through anygrad._fast agrees")
PY
else
  echo "python_install: no Python.h: the extension is not built (ctypes item())"
fi
echo "python_install: ok"
