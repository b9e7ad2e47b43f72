"""ag_logsumexp, ag_norm, ag_one_hot and ag_conv1d (through ctypes, the
tensors through the Python package) against torch 1.13: values and
gradients, f32 and f64, on the CPU. argv[1]: libanygrad.so. Exit 77
(skipped) without torch or numpy."""
import os
import sys
from ctypes import POINTER, c_bool, c_double, c_int, c_int64, c_void_p

try:
    import numpy as np
    import torch
except ImportError:
    print("torch or numpy not installed: skipped")
    sys.exit(77)

os.environ["ANYGRAD_LIBRARY"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import anygrad as ag  # noqa: E402
from anygrad._lib import lib  # noqa: E402
from anygrad._tensor import _wrap  # noqa: E402

for fn, args in (("ag_logsumexp", [c_void_p, c_int, c_bool]),
                 ("ag_norm", [c_void_p, c_double, c_int, POINTER(c_int), c_bool]),
                 ("ag_one_hot", [c_void_p, c_int64]),
                 ("ag_conv1d", [c_void_p, c_void_p, c_void_p, c_int, c_int, c_int, c_int])):
    getattr(lib, fn).restype = c_void_p
    getattr(lib, fn).argtypes = args

bad = 0


def check(what, got, want, tol):
    global bad
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        print("FAIL %s: shape %s, want %s" % (what, got.shape, want.shape))
        bad += 1
        return
    fin = np.isfinite(want)
    same_special = np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[np.isinf(want)],
                                                                                    want[np.isinf(want)])
    err = float(np.abs(got[fin] - want[fin]).max() / (1 + np.abs(want[fin]).max())) if fin.any() else 0.0
    ok = err <= tol and same_special
    bad += not ok
    print("%s %s: error %.3g" % ("ok  " if ok else "FAIL", what, err))


def pair(arr):
    return ag.tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)


def grads(what, ay, ty, ax, tx, seed, tol):
    w = np.random.default_rng(seed).standard_normal(ty.shape).astype(ty.detach().numpy().dtype)
    (ty * torch.tensor(w)).sum().backward()
    (ay * ag.tensor(w)).sum().backward()
    for i, (a, t) in enumerate(zip(ax, tx)):
        check("%s grad %d" % (what, i), a.grad.numpy(), t.grad.numpy(), tol)


rng = np.random.default_rng(7)
for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
    name = np.dtype(dt).name
    # logsumexp, large entries included
    for dim in (0, 1, -1):
        for keep in (False, True):
            x = (rng.standard_normal((4, 5, 6)) * 30).astype(dt)
            ax, tx = pair(x)
            ay = _wrap(lib.ag_logsumexp(ax._handle, dim, keep), "logsumexp")
            ty = torch.logsumexp(tx, dim, keep)
            what = "logsumexp %s dim %d keepdim %d" % (name, dim, keep)
            check(what, ay.numpy(), ty.detach().numpy(), tol)
            grads(what, ay, ty, [ax], [tx], dim + 10, tol)
    # vector norms; small integers make ties for the inf norm
    for p in (1.0, 2.0, float("inf")):
        for dims in (None, (1,), (0, 2), (2, 0)):
            for keep in (False, True):
                x = rng.integers(-3, 4, (3, 4, 5)).astype(dt) if p == float("inf") else rng.standard_normal(
                    (3, 4, 5)).astype(dt)
                if p == 2.0:
                    x[1] = 0  # zero lines: gradient 0, as torch
                ax, tx = pair(x)
                n = 0 if dims is None else len(dims)
                cd = (c_int * max(n, 1))(*(dims or (0,)))
                ay = _wrap(lib.ag_norm(ax._handle, p, n, cd if n else None, keep), "norm")
                ty = torch.linalg.vector_norm(tx, p, dims, keep)
                what = "norm %s p %g dims %s keepdim %d" % (name, p, dims, keep)
                check(what, ay.numpy(), ty.detach().numpy(), tol)
                grads(what, ay, ty, [ax], [tx], 20, tol)
    # conv1d: stride, padding, dilation, groups, bias
    for (N, C, L, Co, K, s, pd, dl, g, bias) in ((2, 3, 10, 4, 3, 1, 0, 1, 1, True),
                                               (2, 4, 13, 6, 3, 2, 2, 2, 2, True),
                                               (1, 4, 9, 4, 2, 1, 1, 1, 4, False)):
        x = rng.standard_normal((N, C, L)).astype(dt)
        w = rng.standard_normal((Co, C // g, K)).astype(dt)
        b = rng.standard_normal((Co,)).astype(dt)
        ax, tx = pair(x)
        aw, tw = pair(w)
        ab, tb = pair(b)
        ay = _wrap(lib.ag_conv1d(ax._handle, aw._handle, ab._handle if bias else None, s, pd, dl, g), "conv1d")
        ty = torch.nn.functional.conv1d(tx, tw, tb if bias else None, s, pd, dl, g)
        what = "conv1d %s [%d,%d,%d] w [%d,%d,%d] s%d p%d d%d g%d bias %d" % (name, N, C, L, Co, C // g, K, s, pd,
                                                                              dl, g, bias)
        check(what, ay.numpy(), ty.detach().numpy(), tol * 10)
        grads(what, ay, ty, [ax, aw] + ([ab] if bias else []), [tx, tw] + ([tb] if bias else []), 30, tol * 10)

# one_hot: i64 as torch, given and inferred class counts
for classes in (7, -1):
    idx = rng.integers(0, 6, (3, 5)).astype(np.int64)
    ai = ag.tensor(idx)  # held: the handle lives as long as the Python object
    ay = _wrap(lib.ag_one_hot(ai._handle, classes), "one_hot")
    ty = torch.nn.functional.one_hot(torch.tensor(idx), classes)
    ok = ay.numpy().dtype == np.int64 and np.array_equal(ay.numpy(), ty.numpy())
    bad += not ok
    print("%s one_hot num_classes %d" % ("ok  " if ok else "FAIL", classes))

sys.exit(1 if bad else 0)
