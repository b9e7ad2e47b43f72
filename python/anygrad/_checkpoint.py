"""anygrad.save/load of nested objects (an optimizer's or a scheduler's
state_dict, a dict holding several): the tensors go into the safetensors
file under their path ("state/0/exp_avg"), everything else (numbers,
strings, None, lists, tuples, dicts with int or str keys) into one metadata
entry as JSON, from which load rebuilds the object."""
import ctypes
import json
import math
import numbers
from ctypes import byref

from . import _lib
from ._lib import lib, check
from ._tensor import Tensor

TREE_KEY = b"anygrad.tree"


def is_flat(obj):
    return isinstance(obj, dict) and all(isinstance(v, Tensor) for v in obj.values())


def _encode(obj, path, tensors):
    if isinstance(obj, Tensor):
        name = "/".join(path) or "tensor"
        tensors.append((name, obj))
        return {"__tensor__": name}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        v = float(obj)
        return v if math.isfinite(v) else {"__float__": repr(v)}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, numbers.Integral)):
                raise TypeError("anygrad.save: dict keys must be str or int, got %s" % type(k).__name__)
            k = k if isinstance(k, str) else int(k)
            items.append([k, _encode(v, path + [str(k)], tensors)])
        return {"__dict__": items}
    if isinstance(obj, (list, tuple)):
        v = [_encode(x, path + [str(i)], tensors) for i, x in enumerate(obj)]
        return {"__tuple__": v} if isinstance(obj, tuple) else v
    raise TypeError("anygrad.save: cannot save a %s (tensors, numbers, strings, None, lists, tuples "
                    "and dicts only)" % type(obj).__name__)


def save(obj, path):
    tensors = []
    tree = _encode(obj, [], tensors)
    pl = _lib.ParamList()
    try:
        for name, t in tensors:
            check(lib.ag_params_add(byref(pl), name.encode(), t._handle))
        keys = (ctypes.c_char_p * 1)(TREE_KEY)
        vals = (ctypes.c_char_p * 1)(json.dumps(tree, separators=(",", ":")).encode())
        check(lib.ag_safetensors_save(str(path).encode(), byref(pl), 1, keys, vals))
    finally:
        lib.ag_params_free(byref(pl))


def _decode(obj, tensors):
    if isinstance(obj, list):
        return [_decode(x, tensors) for x in obj]
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__tuple__" in obj:
            return tuple(_decode(x, tensors) for x in obj["__tuple__"])
        if "__float__" in obj:
            return float(obj["__float__"])
        return {k: _decode(v, tensors) for k, v in obj["__dict__"]}
    return obj


def tree(f):
    """The JSON tree of an open file, or None for a plain file of tensors."""
    s = lib.ag_safetensors_meta(f, TREE_KEY)
    lib.ag_error_clear()
    return json.loads(s.decode()) if s else None


def rebuild(t, tensors):
    return _decode(t, tensors)
