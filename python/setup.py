"""pip install --no-build-isolation ./python

The build step copies include/anygrad/optable.h into the package (the
elementwise ops are generated from it at import) and records which
libanygrad the installed package loads (anygrad/_libpaths.txt), in this order
of choice:

1. ANYGRAD_LIBRARY (a path): that library;
2. ANYGRAD_PREFIX (an installed prefix, cmake --install): its
   lib/libanygrad.so.0, never a build tree;
3. the build tree beside the package (build/lib/libanygrad.so);
4. none of these: CMake configures and builds the library and the backend
   modules it can (into ANYGRAD_BUILD_DIR, default build/ of the tree; extra
   configure arguments in ANYGRAD_CMAKE_ARGS), and the library and modules
   are copied into the package (anygrad/lib/), so the install does not
   depend on the build tree afterwards.

The one compiled piece of the package itself, anygrad._fast (Tensor.item()
in one C call), is optional and links nothing but Python."""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MULTIARCH = "lib/x86_64-linux-gnu" if sys.platform.startswith("linux") else "lib"


def _fail(msg):
    sys.stderr.write("anygrad setup.py: %s\n" % msg)
    raise SystemExit("anygrad setup.py: " + msg.splitlines()[0])


def prefix_library(prefix):
    for d in ("lib", "lib64", MULTIARCH):
        p = os.path.join(prefix, d, "libanygrad.so.0")
        if os.path.exists(p):
            return p
    _fail("ANYGRAD_PREFIX=%s holds no lib/libanygrad.so.0 (nor lib64/, %s/): install the library "
          "there first (cmake --install BUILD --prefix %s)" % (prefix, MULTIARCH, prefix))


def tree_libraries():
    return [p for p in (os.path.join(REPO, b, "lib", "libanygrad.so") for b in ("build", "build-release"))
            if os.path.exists(p)]


def _compiler():
    for cc in ([os.environ["CC"]] if os.environ.get("CC") else []) + ["cc", "gcc", "clang"]:
        if shutil.which(shlex.split(cc)[0]):
            return cc
    return None


def cmake_build():
    """Configure and build libanygrad and the backend modules CMake finds
    the toolchains of; returns the build's lib/ folder."""
    cmake = shutil.which("cmake")
    missing = [what for what, ok in (("cmake (Debian: apt install cmake)", cmake),
                                     ("a C compiler (Debian: apt install gcc)", _compiler())) if not ok]
    if missing:
        _fail("libanygrad.so was not found (no ANYGRAD_LIBRARY, no ANYGRAD_PREFIX, no %s/build/lib) "
              "and it cannot be built here: missing %s. Install what is missing, or build the library "
              "first (README, \"Quick start\") and set ANYGRAD_LIBRARY or ANYGRAD_PREFIX."
              % (REPO, " and ".join(missing)))
    build = os.path.abspath(os.environ.get("ANYGRAD_BUILD_DIR") or os.path.join(REPO, "build"))
    args = [cmake, "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DAG_TESTS=OFF", "-DAG_BENCH=OFF"]
    extra = shlex.split(os.environ.get("ANYGRAD_CMAKE_ARGS", ""))
    if shutil.which("ccache") and not any("COMPILER_LAUNCHER" in a for a in extra):
        args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    args += extra
    print("anygrad setup.py: building libanygrad: %s" % " ".join(shlex.quote(a) for a in args), flush=True)
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        _fail("CMake could not configure anygrad in %s:\n%s" % (build, r.stdout[-4000:]))
    m = re.search(r"backends built\s*:\s*(\S+)", r.stdout)
    modules = [b for b in (m.group(1).split(";") if m else []) if b and b != "cpu"]
    targets = ["anygrad"] + ["anygrad-" + b for b in modules]
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
    r = subprocess.run([cmake, "--build", build, "-j", jobs, "--target"] + targets,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        _fail("building %s in %s failed:\n%s" % (" ".join(targets), build, r.stdout[-6000:]))
    print("anygrad setup.py: built %s in %s" % (", ".join(targets), build), flush=True)
    return os.path.join(build, "lib")


class BuildPy(build_py):
    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "anygrad")
        with open(os.path.join(REPO, "include", "anygrad", "optable.h")) as f:
            text = f.read()
        with open(os.path.join(dst, "optable.h"), "w") as f:
            f.write(text)
        # a library copied in by an earlier run of this build folder goes
        pkglib = os.path.join(dst, "lib")
        shutil.rmtree(pkglib, ignore_errors=True)
        if os.environ.get("ANYGRAD_LIBRARY"):
            paths = [os.path.abspath(os.environ["ANYGRAD_LIBRARY"])]
        elif os.environ.get("ANYGRAD_PREFIX"):
            paths = [prefix_library(os.path.abspath(os.environ["ANYGRAD_PREFIX"]))]
        else:
            paths = tree_libraries()
            if not paths:
                libdir = cmake_build()
                os.makedirs(pkglib)
                # the real file under the soname; the modules beside it, where
                # the library looks for them
                shutil.copy(os.path.join(libdir, "libanygrad.so.0"), os.path.join(pkglib, "libanygrad.so.0"))
                for mod in glob.glob(os.path.join(libdir, "libanygrad-*.so")):
                    shutil.copy(mod, pkglib)
                paths = ["lib/libanygrad.so.0"]  # relative: to the installed package
        with open(os.path.join(dst, "_libpaths.txt"), "w") as f:
            f.write("\n".join(paths) + "\n")


setup(
    name="anygrad",
    version="0.2.0",
    description="anygrad from Python: tensors, autograd, nn and optim over libanygrad",
    packages=find_packages(include=["anygrad", "anygrad.*"]),
    python_requires=">=3.9",
    install_requires=[],  # numpy is needed at run time (Debian: python3-numpy)
    cmdclass={"build_py": BuildPy},
    # Tensor.item() in one C call; optional: without a compiler or Python.h
    # (Debian: python3-dev) the package uses ctypes for it
    ext_modules=[Extension("anygrad._fast", ["anygrad/_fast.c"], optional=True)],
)
