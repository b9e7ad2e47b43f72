"""DLPack: __dlpack__ hands a capsule over ag_to_dlpack's DLManagedTensor;
from_dlpack wraps a producer's capsule with ag_from_dlpack. No data is copied:
the consumer's deleter keeps the producer's memory alive."""
import ctypes

from ._lib import lib, check, raise_last, pythonapi, DLManagedTensor
from ._tensor import Tensor, _wrap

_DEVICE_TYPES = {1: "cpu", 2: "cuda", 10: "rocm", 4: "opencl"}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(cap):
    # A capsule never consumed still owns its DLManagedTensor: call its deleter.
    # (A consumer that refuses a capsule destroys it with its exception pending;
    # then no ctypes call can run here and that one export leaks: to_capsule
    # refuses up front the device types no Python consumer takes.)
    cap = ctypes.cast(cap, ctypes.py_object)
    if pythonapi.PyCapsule_IsValid(cap, b"dltensor"):
        m = ctypes.cast(pythonapi.PyCapsule_GetPointer(cap, b"dltensor"),
                        ctypes.POINTER(DLManagedTensor))
        if m.contents.deleter:
            m.contents.deleter(m)


_DESTRUCTOR_ADDR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def to_capsule(t):
    m = ctypes.c_void_p()
    check(lib.ag_to_dlpack(t._handle, ctypes.byref(m)))
    mp = ctypes.cast(m.value, ctypes.POINTER(DLManagedTensor))
    kind = mp.contents.dl_tensor.device.device_type
    if kind == 4:  # kDLOpenCL: a cl_mem handle, meaningless outside anygrad's context
        mp.contents.deleter(mp)
        raise BufferError("anygrad: %s memory cannot be shared through DLPack (an OpenCL "
                          "buffer is only valid in anygrad's context); use .cpu() first" % t.device)
    return pythonapi.PyCapsule_New(m.value, b"dltensor", _DESTRUCTOR_ADDR)


def dlpack_device(t):
    m = ctypes.c_void_p()
    check(lib.ag_to_dlpack(t._handle, ctypes.byref(m)))
    mt = ctypes.cast(m.value, ctypes.POINTER(DLManagedTensor)).contents
    dev = (int(mt.dl_tensor.device.device_type), int(mt.dl_tensor.device.device_id))
    mt.deleter(ctypes.cast(m.value, ctypes.POINTER(DLManagedTensor)))
    return dev


def from_dlpack(x):
    """A tensor sharing x's memory (x: any object with __dlpack__, such as a
    NumPy array or a torch tensor, or a "dltensor" capsule). The producer stays
    alive while the tensor (or any view of it) lives."""
    if isinstance(x, Tensor):
        return x.detach()
    if hasattr(x, "__dlpack__"):
        cap = x.__dlpack__()
    elif type(x).__name__ == "PyCapsule":
        cap = x
    else:
        raise TypeError("anygrad.from_dlpack: %s has no __dlpack__" % type(x).__name__)
    if not pythonapi.PyCapsule_IsValid(cap, b"dltensor"):
        raise ValueError("anygrad.from_dlpack: the capsule was already consumed")
    p = pythonapi.PyCapsule_GetPointer(cap, b"dltensor")
    h = lib.ag_from_dlpack(p)
    if not h:
        raise_last("from_dlpack")  # the capsule still owns the tensor and frees it
    pythonapi.PyCapsule_SetName(cap, b"used_dltensor")
    return _wrap(h)
