"""Every library function the package calls through ctypes has its argument
types declared: an undeclared pointer argument is passed as a C int, which
truncates a handle above 4 GiB and crashes only once the heap has grown."""
import glob
import os
import re

from anygrad._lib import lib

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "anygrad")
VARIADIC = {"ag_error_set"}  # printf-like: declared by restype only


def _called():
    names = set()
    for f in glob.glob(os.path.join(PKG, "**", "*.py"), recursive=True):
        with open(f) as fh:
            src = fh.read()
        names |= set(re.findall(r"\blib\.(ag_\w+)", src))
        names |= set(re.findall(r"getattr\(lib, \"(ag_\w+)\"", src))
    return names


def test_every_called_function_declares_its_arguments():
    called = _called()
    assert len(called) > 100
    undeclared = sorted(n for n in called - VARIADIC
                        if getattr(lib, n, None) is not None and getattr(lib, n).argtypes is None)
    assert undeclared == []
