"""DLPack round trip between anygrad (through ctypes) and PyTorch
(torch.utils.dlpack): both sides must see the same memory, checked by writing
through one and reading through the other, in both directions, with strides
and dtypes kept. Exit 77 (skipped) when torch is not installed.
Usage: /usr/bin/python3 dlpack_torch.py <path of libanygrad.so>"""
import ctypes as C
import sys

try:
    import torch
    from torch.utils import dlpack
except ImportError:
    print("torch not installed: skipped")
    sys.exit(77)


class Device(C.Structure):
    _fields_ = [("backend", C.c_int16), ("index", C.c_int16)]


F32, F16, BF16, I32, F64, I64, BOOL, U8 = 0, 1, 2, 3, 4, 5, 6, 7
lib = C.CDLL(sys.argv[1])
lib.ag_from_host.restype = C.c_void_p
lib.ag_from_host.argtypes = [Device, C.c_int, C.c_int, C.POINTER(C.c_int64), C.c_void_p]
lib.ag_from_dlpack.restype = C.c_void_p
lib.ag_from_dlpack.argtypes = [C.c_void_p]
lib.ag_to_dlpack.argtypes = [C.c_void_p, C.POINTER(C.c_void_p)]
lib.ag_tensor_data_ptr.restype = C.c_void_p
lib.ag_tensor_data_ptr.argtypes = [C.c_void_p]
lib.ag_tensor_strides.restype = C.POINTER(C.c_int64)
lib.ag_tensor_strides.argtypes = [C.c_void_p]
lib.ag_to_host.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
lib.ag_fill_.argtypes = [C.c_void_p, C.c_double]
lib.ag_device_synchronize.argtypes = [Device]
lib.ag_tensor_release.argtypes = [C.c_void_p]
lib.ag_live_tensors.restype = C.c_int64
lib.ag_last_error.restype = C.c_char_p
lib.ag_tensor_dtype.argtypes = [C.c_void_p]
C.pythonapi.PyCapsule_New.restype = C.py_object
C.pythonapi.PyCapsule_New.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]
C.pythonapi.PyCapsule_GetPointer.restype = C.c_void_p
C.pythonapi.PyCapsule_GetPointer.argtypes = [C.py_object, C.c_char_p]
C.pythonapi.PyCapsule_SetName.argtypes = [C.py_object, C.c_char_p]
CPU = Device(0, 0)


def check(cond, what):
    if not cond:
        sys.exit("FAIL: %s (anygrad: %s)" % (what, lib.ag_last_error().decode()))


def to_host_f32(t, n):
    buf = (C.c_float * n)()
    check(lib.ag_to_host(t, buf, C.sizeof(buf)) == 0, "ag_to_host")
    return list(buf)


# ---- anygrad -> torch ----
base_live = lib.ag_live_tensors()
vals = (C.c_float * 6)(0, 1, 2, 3, 4, 5)
shape = (C.c_int64 * 2)(2, 3)
x = lib.ag_from_host(CPU, F32, 2, shape, vals)
check(x, "ag_from_host")
m = C.c_void_p()
check(lib.ag_to_dlpack(x, C.byref(m)) == 0, "ag_to_dlpack")
t = dlpack.from_dlpack(C.pythonapi.PyCapsule_New(m, b"dltensor", None))
check(t.dtype == torch.float32 and tuple(t.shape) == (2, 3), "torch sees f32[2,3]")
check(t.data_ptr() == lib.ag_tensor_data_ptr(x), "torch and anygrad point at the same memory")
check(t.tolist() == [[0, 1, 2], [3, 4, 5]], "torch reads anygrad's values")
t[1, 2] = 42.0  # write through torch, read through anygrad
check(to_host_f32(x, 6)[5] == 42.0, "anygrad reads torch's write")
check(lib.ag_fill_(x, 7.0) == 0 and lib.ag_device_synchronize(CPU) == 0, "ag_fill_")
check(t.tolist() == [[7.0] * 3] * 2, "torch reads anygrad's write")
lib.ag_tensor_release(x)  # torch still holds the memory through the export
check(t.sum().item() == 42.0, "memory alive while torch holds it")
del t  # torch calls the DLPack deleter: the last reference goes
check(lib.ag_live_tensors() == base_live, "the deleter released the export's reference")

# every anygrad dtype maps to torch's
def torch_has_dlpack_bool():
    """kDLBool (DLPack 0.8) arrived in torch 2; torch 1.13 refuses bool."""
    try:
        dlpack.to_dlpack(torch.zeros(1, dtype=torch.bool))
        return True
    except RuntimeError:
        return False


BOOL_OK = torch_has_dlpack_bool()
for code, tdt in ((F64, torch.float64), (I32, torch.int32), (F16, torch.float16), (BF16, torch.bfloat16),
                  (I64, torch.int64), (BOOL, torch.bool), (U8, torch.uint8)):
    if tdt == torch.bool and not BOOL_OK:
        print("torch %s has no DLPack bool: bool export not checked against torch" % torch.__version__)
        continue
    src = torch.arange(4, dtype=tdt) if tdt != torch.bool else torch.tensor([True, False, False, True])
    buf = src.numpy().tobytes() if tdt != torch.bfloat16 else src.view(torch.int16).numpy().tobytes()
    y = lib.ag_from_host(CPU, code, 1, (C.c_int64 * 1)(4), buf)
    check(lib.ag_to_dlpack(y, C.byref(m)) == 0, "export %s" % tdt)
    u = dlpack.from_dlpack(C.pythonapi.PyCapsule_New(m, b"dltensor", None))
    check(u.dtype == tdt and torch.equal(u, src), "dtype %s round trip" % tdt)
    lib.ag_tensor_release(y)
    del u

# ---- torch -> anygrad, a transposed (strided) view ----
tt = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()  # shape [3,2], strides (1,3)
cap = dlpack.to_dlpack(tt)
ptr = C.pythonapi.PyCapsule_GetPointer(cap, b"dltensor")
a = lib.ag_from_dlpack(ptr)
check(a, "ag_from_dlpack")
C.pythonapi.PyCapsule_SetName(cap, b"used_dltensor")  # anygrad owns it now
check(lib.ag_tensor_data_ptr(a) == tt.data_ptr(), "anygrad points at torch's memory")
st = lib.ag_tensor_strides(a)
check((st[0], st[1]) == (1, 3), "strides kept")
check(to_host_f32(a, 6) == tt.contiguous().flatten().tolist(), "anygrad reads torch's values in order")
tt[2, 1] = -1.0  # write through torch
check(to_host_f32(a, 6)[5] == -1.0, "anygrad reads torch's write")
check(lib.ag_fill_(a, 5.0) == 0 and lib.ag_device_synchronize(CPU) == 0, "ag_fill_ through anygrad")
check(tt.eq(5.0).all().item(), "torch reads anygrad's write")
lib.ag_tensor_release(a)  # calls torch's deleter
del cap
check(tt.sum().item() == 30.0, "torch's tensor intact after anygrad let go")

# torch -> anygrad without a copy for int64 (indices), bool (masks) and uint8
for tdt, code, n in ((torch.int64, I64, 8), (torch.bool, BOOL, 1), (torch.uint8, U8, 1)):
    if tdt == torch.bool and not BOOL_OK:
        continue
    src = torch.tensor([0, 1, 1, 0], dtype=tdt)
    cap = dlpack.to_dlpack(src)
    a = lib.ag_from_dlpack(C.pythonapi.PyCapsule_GetPointer(cap, b"dltensor"))
    check(a, "ag_from_dlpack %s" % tdt)
    C.pythonapi.PyCapsule_SetName(cap, b"used_dltensor")
    check(lib.ag_tensor_dtype(a) == code, "%s imported as anygrad dtype %d" % (tdt, code))
    check(lib.ag_tensor_data_ptr(a) == src.data_ptr(), "anygrad points at torch's %s memory" % tdt)
    check(lib.ag_fill_(a, 1.0) == 0 and lib.ag_device_synchronize(CPU) == 0, "fill %s" % tdt)
    check(src.to(torch.int64).tolist() == [1, 1, 1, 1], "torch reads anygrad's %s write" % tdt)
    src[0] = 0  # write through torch
    raw = (C.c_uint8 * (4 * n))()
    check(lib.ag_to_host(a, raw, 4 * n) == 0, "ag_to_host %s" % tdt)
    check(raw[0] == 0 and raw[n] == 1, "anygrad reads torch's %s write" % tdt)
    lib.ag_tensor_release(a)
    del cap

# refused: a dtype anygrad does not have, reported by name; ownership stays
cap = dlpack.to_dlpack(torch.zeros(3, dtype=torch.int16))
check(not lib.ag_from_dlpack(C.pythonapi.PyCapsule_GetPointer(cap, b"dltensor")), "int16 refused")
check(b"int16" in lib.ag_last_error(), "error names the dtype")
print("dlpack round trip with torch %s: ok" % torch.__version__)
