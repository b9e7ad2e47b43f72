"""ag_tensor_format (through ctypes) against torch 1.13's str(tensor) for
floats in fixed, integral and scientific notation, nan/inf, every dtype,
summarised 1-d/2-d/3-d tensors, rows that wrap, empty tensors and views.
anygrad names dtypes without "torch." (dtype=float16): the expected text
is then torch's own layout functions with that suffix. Exit 77 (skipped)
without torch or numpy. argv[1]: libanygrad.so."""
import ctypes as C
import sys

try:
    import numpy as np
    import torch
    import torch._tensor_str as ts
except ImportError:
    print("torch or numpy not installed: skipped")
    sys.exit(77)


class Device(C.Structure):
    _fields_ = [("backend", C.c_int16), ("index", C.c_int16)]


lib = C.CDLL(sys.argv[1])
lib.ag_from_host.restype = C.c_void_p
lib.ag_from_host.argtypes = [Device, C.c_int, C.c_int, C.POINTER(C.c_int64), C.c_void_p]
lib.ag_tensor_format.restype = C.c_int64
lib.ag_tensor_format.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t]
lib.ag_transpose.restype = C.c_void_p
lib.ag_transpose.argtypes = [C.c_void_p, C.c_int, C.c_int]
lib.ag_tensor_release.argtypes = [C.c_void_p]
lib.ag_last_error.restype = C.c_char_p
AG = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 3, torch.float64: 4,
      torch.int64: 5, torch.bool: 6, torch.uint8: 7}
CPU = Device(0, 0)


def from_torch(t):
    t = t.contiguous()
    raw = t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t
    arr = np.ascontiguousarray(raw.numpy())
    shape = (C.c_int64 * max(t.dim(), 1))(*t.shape)
    h = lib.ag_from_host(CPU, AG[t.dtype], t.dim(), shape, arr.ctypes.data_as(C.c_void_p))
    if not h:
        sys.exit("FAIL: ag_from_host: " + lib.ag_last_error().decode())
    return h


def ag_str(h):
    n = lib.ag_tensor_format(h, None, 0)
    if n < 0:
        sys.exit("FAIL: ag_tensor_format: " + lib.ag_last_error().decode())
    buf = C.create_string_buffer(n + 1)
    if lib.ag_tensor_format(h, buf, n + 1) != n:
        sys.exit("FAIL: ag_tensor_format length changed")
    return buf.value.decode()


def expected(t):
    s = str(t)
    if "dtype=torch." not in s:
        return s
    body = ts._tensor_str(t, 7) if t.numel() else "[]"
    suffixes = []
    if t.numel() == 0 and t.dim() != 1:
        suffixes.append("size=" + str(tuple(t.shape)))
    suffixes.append("dtype=" + str(t.dtype).replace("torch.", ""))
    return ts._add_suffixes("tensor(" + body, suffixes, 7, False)


g = torch.Generator().manual_seed(0)
cases = {
    "randn 3x4": torch.randn(3, 4, generator=g),
    "randn wide (wraps)": torch.randn(2, 30, generator=g),
    "integral floats": torch.tensor([[1.0, -2.0, 300.0], [4.0, 5.0, 6.0]]),
    "sci small": torch.tensor([1e-5, 0.5, -2.0]),
    "sci big": torch.tensor([1e9, 1.0, 3.5]),
    "sci integral": torch.tensor([1.0, 2000.0]),
    "nan inf": torch.tensor([0.5, float("nan"), float("inf"), -float("inf"), 0.0]),
    "all nan": torch.tensor([float("nan"), float("nan")]),
    "zeros": torch.zeros(2, 3),
    "scalar": torch.tensor(3.14159),
    "int scalar": torch.tensor(-42),
    "f64": torch.randn(4, generator=g, dtype=torch.float64),
    "f16": torch.randn(5, generator=g).half(),
    "bf16": torch.randn(2, 3, generator=g).bfloat16(),
    "i32": torch.randint(-1000, 1000, (3, 5), generator=g, dtype=torch.int32),
    "i64": torch.randint(-10, 10, (4, 4), generator=g),
    "u8": torch.randint(0, 255, (6,), generator=g, dtype=torch.uint8),
    "bool": torch.tensor([[True, False], [False, True]]),
    "summarised 1-d": torch.randn(2000, generator=g),
    "summarised 2-d": torch.randn(50, 40, generator=g),
    "summarised 3-d": torch.arange(0, 4000, dtype=torch.int64).reshape(10, 20, 20),
    "summarised short dims": torch.randn(2, 3, 200, generator=g),
    "1000 not summarised": torch.arange(0.0, 1000.0),
    "4-d": torch.randn(2, 2, 2, 2, generator=g),
    "empty 1-d": torch.empty(0),
    "empty 2-d": torch.empty(0, 3),
    "empty i32": torch.empty(2, 0, dtype=torch.int32),
}
fails = 0
for name, t in cases.items():
    h = from_torch(t)
    got, want = ag_str(h), expected(t)
    lib.ag_tensor_release(h)
    if got != want:
        fails += 1
        print("MISMATCH %s:\n--- anygrad\n%s\n--- torch\n%s" % (name, got, want))
# a transposed (non-contiguous) view prints as torch's transpose does
t = torch.randn(3, 5, generator=g)
h = from_torch(t)
v = lib.ag_transpose(h, 0, 1)
got, want = ag_str(v), expected(t.t())
lib.ag_tensor_release(v)
lib.ag_tensor_release(h)
if got != want:
    fails += 1
    print("MISMATCH transposed view:\n%s\n%s" % (got, want))
print("%d cases, %d mismatches" % (len(cases) + 1, fails))
sys.exit(1 if fails else 0)
