"""pip install --no-build-isolation ./python (after building the C library).

The build step copies include/anygrad/optable.h into the package (the
elementwise ops are generated from it at import) and records where
libanygrad was found, so the installed package finds the library of the
tree or prefix it was installed from. The one compiled piece, anygrad._fast
(Tensor.item() in one C call), is optional and links nothing but Python."""
import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def library_candidates():
    out = []
    if os.environ.get("ANYGRAD_LIBRARY"):
        out.append(os.path.abspath(os.environ["ANYGRAD_LIBRARY"]))
    for b in ("build", "build-release"):
        p = os.path.join(REPO, b, "lib", "libanygrad.so")
        if os.path.exists(p):
            out.append(p)
    prefix = os.environ.get("ANYGRAD_PREFIX")
    if prefix:
        out.append(os.path.join(prefix, "lib", "libanygrad.so.0"))
    return out


class BuildPy(build_py):
    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "anygrad")
        with open(os.path.join(REPO, "include", "anygrad", "optable.h")) as f:
            text = f.read()
        with open(os.path.join(dst, "optable.h"), "w") as f:
            f.write(text)
        with open(os.path.join(dst, "_libpaths.txt"), "w") as f:
            f.write("\n".join(library_candidates()) + "\n")


setup(
    name="anygrad",
    version="0.2.0",
    description="anygrad from Python: tensors, autograd, nn and optim over libanygrad",
    packages=["anygrad"],
    python_requires=">=3.9",
    install_requires=[],  # numpy is needed at run time (Debian: python3-numpy)
    cmdclass={"build_py": BuildPy},
    # Tensor.item() in one C call; optional: without a compiler or Python.h
    # (Debian: python3-dev) the package uses ctypes for it
    ext_modules=[Extension("anygrad._fast", ["anygrad/_fast.c"], optional=True)],
)
