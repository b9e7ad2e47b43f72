#!/usr/bin/env bash
# The Python package installed three ways, each imported from outside any
# tree with ANYGRAD_LIBRARY and AG_BACKEND_PATH unset, must load the library
# it was installed against (and find its backend modules), even where a
# build tree lies beside the installed package:
#  (b) pip install ./python from a clean git clone (no build/): setup.py runs
#      CMake, builds libanygrad and the backend modules, copies them into the
#      package;
#  (a1) pip install with ANYGRAD_PREFIX=<prefix> after cmake --install into
#      that prefix;
#  (a2) cmake --install of a build configured with -DAG_INSTALL_PYTHON=ON;
# and pip from a clean clone says what is missing when CMake or a C compiler is.
#   python_install2.sh <python3> <source dir> <work dir>
# Exit 77 (skipped) when the source dir is not a git checkout.
set -euo pipefail
py=$1 src=$2 work=$3
unset ANYGRAD_LIBRARY ANYGRAD_PREFIX AG_BACKEND_PATH ANYGRAD_BUILD_DIR
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "python_install2: $src is not a git checkout"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
cd "$work"
fail() { echo "python_install2: $*"; exit 1; }
pip_install() { # <log> <args...>: offline, no build isolation; the log kept for failures
  local log=$1
  shift
  "$py" -m pip install -v --no-build-isolation --no-deps --no-index --disable-pip-version-check "$@" >"$log" 2>&1
}
# imports the package at PYTHONPATH=$1 from $work; prints the library, the
# devices, a value; checks every module copied or installed (in $2) was found
check_import() {
  local site=$1 moddir=$2 want=$3
  env -u ANYGRAD_LIBRARY -u AG_BACKEND_PATH PYTHONPATH="$site" "$py" - "$moddir" "$want" <<'PY'
import glob, os, sys
import anygrad as ag
from anygrad.utils.data import DataLoader, TensorDataset
moddir, want = sys.argv[1], sys.argv[2]
print("library:", ag._lib.LIBRARY_PATH)
assert os.path.realpath(ag._lib.LIBRARY_PATH) == os.path.realpath(want), (ag._lib.LIBRARY_PATH, want)
present, absent = ag.devices(all=True)
print("devices:", present)
reasons = dict(absent)
for m in sorted(glob.glob(os.path.join(moddir, "libanygrad-*.so"))):
    name = os.path.basename(m)[len("libanygrad-"):-len(".so")]
    assert name not in reasons or "not found" not in reasons[name], (name, reasons[name])
    print("module %s: %s" % (name, reasons.get(name, "present")))
assert "cpu" in present
assert (ag.ones(3) * 2).sum().item() == 6.0
b = next(iter(DataLoader(TensorDataset(ag.arange(4), ag.ones(4)), batch_size=3)))
assert b[0].tolist() == [0, 1, 2]
PY
}

# (b) a clean clone: pip builds what it needs (ccache, one configuration,
# only the library and module targets)
git clone -q "$src" clone
[ ! -e clone/build ] || fail "the clone has a build/ already"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export ANYGRAD_CMAKE_ARGS="-DAG_CUDA=OFF -DAG_HIP=OFF -DAG_MPI=OFF"
t0=$(date +%s)
(cd clone && pip_install "$work/b.log" --target "$work/site_b" ./python) || { tail -40 b.log; fail "(b) pip failed"; }
grep -o "anygrad setup.py: built .*" b.log || { tail -20 b.log; fail "(b) setup.py did not build the library"; }
echo "python_install2: (b) pip with the CMake build took $(( $(date +%s) - t0 )) s"
pkg=$work/site_b/anygrad
test -f "$pkg/lib/libanygrad.so.0" || fail "(b) the library was not copied into the package"
[ "$(cat "$pkg/_libpaths.txt")" = "lib/libanygrad.so.0" ] || fail "(b) _libpaths.txt: $(cat "$pkg/_libpaths.txt")"
check_import "$work/site_b" "$pkg/lib" "$pkg/lib/libanygrad.so.0" || fail "(b) the installed package"

# (a1) pip with ANYGRAD_PREFIX: the prefix's library, although the clone now
# has build/lib/libanygrad.so and a build tree lies beside the package (the
# runtime component has the command-line tool and the NCCL module too: built
# here, nothing else)
cmake --build clone/build --target anygrad-cli anygrad-nccl >/dev/null
cmake --install clone/build --prefix "$work/prefix1" --component runtime >/dev/null
mkdir -p a1/build/lib
ln -s "$work/clone/build/lib/libanygrad.so" a1/build/lib/libanygrad.so
(cd clone && ANYGRAD_PREFIX="$work/prefix1" pip_install "$work/a1.log" --target "$work/a1/site" ./python) \
  || { tail -40 a1.log; fail "(a1) pip failed"; }
! grep -q "setup.py: building" a1.log || fail "(a1) setup.py built the library again"
[ ! -e a1/site/anygrad/lib ] || fail "(a1) a library was copied into the package"
check_import "$work/a1/site" "$work/prefix1/lib/anygrad" "$work/prefix1/lib/libanygrad.so.0" \
  || fail "(a1) pip with ANYGRAD_PREFIX"

# (a2) cmake --install with AG_INSTALL_PYTHON (a reconfigure of the same
# build; nothing is recompiled), a build tree beside the installed package
cmake -S clone -B clone/build -DAG_INSTALL_PYTHON=ON >/dev/null
for c in runtime python; do
  cmake --install clone/build --prefix "$work/prefix2" --component $c >/dev/null
done
site2=$work/prefix2/lib/python3/dist-packages
test -f "$site2/anygrad/utils/data.py" || fail "(a2) anygrad.utils was not installed"
mkdir -p "$work/prefix2/lib/python3/build/lib"
ln -s "$work/clone/build/lib/libanygrad.so" "$work/prefix2/lib/python3/build/lib/libanygrad.so"
check_import "$site2" "$work/prefix2/lib/anygrad" "$work/prefix2/lib/libanygrad.so.0" \
  || fail "(a2) cmake --install with AG_INSTALL_PYTHON"

# a clean clone without CMake, then without a C compiler: a clear error
git clone -q "$src" clone2
mkdir -p bin
ln -s "$(command -v "$py")" bin/python3
ln -s "$(command -v git)" bin/git
for missing in cmake compiler; do
  [ $missing = compiler ] && ln -sf "$(command -v cmake)" bin/cmake
  if (cd clone2 && unset CC && PATH="$work/bin" && pip_install "$work/no_$missing.log" --target "$work/site_x" ./python); then
    fail "pip succeeded without $missing"
  fi
  case $missing in
    cmake) grep -q "missing cmake" "no_$missing.log" || { tail -20 "no_$missing.log"; fail "no clear error without cmake"; } ;;
    compiler) grep -q "missing a C compiler" "no_$missing.log" || { tail -20 "no_$missing.log"; fail "no clear error without a compiler"; } ;;
  esac
  grep -o "anygrad setup.py: libanygrad.so was not found.*" "no_$missing.log" | head -1
done
echo "python_install2: ok"
