"""Run PyTorch programs on anygrad without editing them: with this directory
on PYTHONPATH (and the anygrad package importable), Python imports this
module at start-up, and `import torch` and every `torch.<sub>` import then
load anygrad's modules instead of PyTorch's:

    PYTHONPATH=tests/python/compat/shim:python python3 program.py

torch -> anygrad; torch.X -> anygrad.X (a module of the package, or an
attribute of anygrad that is a module); a few names live elsewhere in the
package (ALIASES). A torch.X that anygrad lacks is a ModuleNotFoundError
naming it: the real torch is never loaded behind the program's back.
ANYGRAD_SHIM_OFF=1 leaves torch alone."""
import importlib
import importlib.abc
import importlib.util
import os
import sys
import types

# torch's module -> where anygrad keeps the same thing, where the name differs
ALIASES = {
    "torch.nn.functional": "anygrad.functional",
    "torch.optim.lr_scheduler": "anygrad.lr_scheduler",
}


def _resolve(name):
    """The anygrad module standing for the torch module `name`, or None."""
    target = ALIASES.get(name, "anygrad" + name[len("torch"):])
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name is None or not target.startswith(e.name):
            raise  # a missing module further down: not ours to hide
    obj = importlib.import_module("anygrad")
    for part in target.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, types.ModuleType) else None


class _Proxy(types.ModuleType):
    """torch.X: reads fall through to the anygrad module; a package to the
    import system (so torch.nn.functional can be imported below torch.nn
    although anygrad.nn is a plain module); what the import system sets on
    it (torch.nn after `import torch.nn`) stays here, not in anygrad."""

    def __init__(self, name, target):
        super().__init__(name, getattr(target, "__doc__", None))
        self.__dict__["_anygrad_module"] = target
        self.__path__ = []
        self.__file__ = getattr(target, "__file__", None)

    def __getattr__(self, attr):
        return getattr(self.__dict__["_anygrad_module"], attr)

    def __dir__(self):
        return sorted(set(dir(self.__dict__["_anygrad_module"])) | set(self.__dict__))


class _Loader(importlib.abc.Loader):
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return _Proxy(spec.name, self.module)

    def exec_module(self, module):
        pass


class TorchToAnygrad(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        mod = _resolve(fullname)
        if mod is None:
            raise ModuleNotFoundError("No module named %r: anygrad has no counterpart of it "
                                      "(tests/python/compat/shim)" % fullname, name=fullname)
        return importlib.util.spec_from_loader(fullname, _Loader(mod), is_package=True)


if os.environ.get("ANYGRAD_SHIM_OFF") != "1" and not any(
        isinstance(f, TorchToAnygrad) for f in sys.meta_path):
    sys.meta_path.insert(0, TorchToAnygrad())
