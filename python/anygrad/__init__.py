"""anygrad from Python: tensors, autograd, nn and optim with PyTorch's habits
over the anygrad C library (libanygrad.so, through ctypes)."""
import builtins as _b
import ctypes
from ctypes import byref

from . import _lib
from ._lib import (lib, check, raise_last, OutOfMemoryError, UnsupportedError, DeviceError,
                   AnygradError, IndexOutOfRangeError, LIBRARY_PATH, OPTABLE_PATH)
from ._tensor import (Tensor, Size, dtype, device, tensor, as_tensor, from_numpy, zeros, ones,
                      empty, full, randn, rand, arange, zeros_like, ones_like, full_like,
                      randn_like, manual_seed, Generator, no_grad, enable_grad, inference_mode,
                      is_grad_enabled, autocast, float32, float16, bfloat16, int32, float64,
                      int64, bool_, uint8, index_select, _wrap)
from ._ops import *  # noqa: F401,F403
from ._ops import ELEMENTWISE_OPS, sum, max, min, pow, abs  # noqa: F401,A004
from ._dlpack import from_dlpack
from ._tensor_extra import *  # noqa: F401,F403,A004
from . import linalg, autograd  # noqa: F401
from ._compat import triu, tril, is_tensor, numel, get_default_dtype, backends  # noqa: F401
from ._first_hour import *  # noqa: F401,F403  (set_grad_enabled, randint, multinomial, ...)
from . import cuda  # noqa: F401  (torch.cuda.is_available() and the seeding calls)
from . import functional, nn, optim  # noqa: F401
from ._tensor import default_generator  # noqa: F401
from ._rng import (get_rng_state, set_rng_state, initial_seed, seed, set_num_threads,  # noqa: F401
                   get_num_threads)
from . import utils  # noqa: F401  (anygrad.utils.data)

float = float32  # noqa: A001
half = float16
double = float64
long = int64
int = int32  # noqa: A001
bool = bool_  # noqa: A001
__version__ = lib.ag_version_string().decode()


def devices(all=False):  # noqa: A002
    """Names of the devices present ("cpu", "opencl:0", "gpuemu:0", ...).
    all=True also lists (backend, reason) for backends that are unavailable."""
    out, absent = [], []
    for k in range(lib.ag_backend_count()):
        name = lib.ag_backend_name(k).decode()
        reason = ctypes.c_char_p()
        if lib.ag_backend_available(k, byref(reason)):
            n = lib.ag_backend_device_count(k)
            out += ["cpu" if name == "cpu" else "%s:%d" % (name, i) for i in range(n)]
        else:
            absent.append((name, (reason.value or b"").decode()))
    lib.ag_error_clear()
    return (out, absent) if all else out


def synchronize(dev="cpu"):
    check(lib.ag_device_synchronize(_as_dev(dev)._d))


def set_numerics(mode):
    """The process-wide numerics mode (docs/numerics.md), as AG_NUMERICS and
    ag_set_numerics: "portable" makes every op that runs give the same bits
    on every backend and device, and refuses (UnsupportedError) an op or
    device without a portable kernel; "default" is each backend's fastest
    path. Affects the ops launched afterwards. Another word: ValueError."""
    if not isinstance(mode, str):
        raise TypeError("set_numerics(): argument 'mode' must be str, not %s" % type(mode).__name__)
    if "\0" in mode:
        raise ValueError("set_numerics(): numerics %r is not default or portable" % mode)
    m = ctypes.c_int()
    check(lib.ag_numerics_parse(mode.encode(), byref(m)))
    check(lib.ag_set_numerics(m.value))


def get_numerics():
    """The numerics mode now: "default" or "portable"."""
    return lib.ag_numerics_name(lib.ag_get_numerics()).decode()


def _as_dev(d):
    from ._tensor import as_device
    return as_device(d)


_POOLS = ("all", "small_pool", "large_pool")
_POOL_STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")


def memory_stats(dev="cpu"):
    """The caching allocator's statistics under torch.cuda.memory_stats()'s key
    names ("allocated_bytes.all.current", "num_ooms", ...), plus anygrad's
    per-category bytes ("category_bytes.parameters.current", ...)."""
    s = _lib.MemoryStats()
    check(lib.ag_memory_stats_get(_as_dev(dev)._d, ctypes.addressof(s)))
    out = {}
    for name in _POOL_STATS:
        arr = getattr(s, name)
        for i, pool in enumerate(_POOLS):
            for f in ("current", "peak", "allocated", "freed"):
                out["%s.%s.%s" % (name, pool, f)] = getattr(arr[i], f)
    for name in ("oversize_allocations", "oversize_segments"):
        for f in ("current", "peak", "allocated", "freed"):
            out["%s.%s" % (name, f)] = getattr(getattr(s, name), f)
    for c in range(_lib.N_MEM_CATEGORIES):
        cname = lib.ag_mem_category_name(c).decode()
        for f in ("current", "peak"):
            out["category_bytes.%s.%s" % (cname, f)] = getattr(s.category_bytes[c], f)
    out["num_alloc_retries"] = s.num_alloc_retries
    out["num_ooms"] = s.num_ooms
    out["num_sync_all_streams"] = s.num_syncs_all_streams
    out["num_device_alloc"] = s.num_device_alloc
    out["num_device_free"] = s.num_device_free
    out["max_split_size"] = s.max_split_size
    return out


def memory_allocated(dev="cpu"):
    return memory_stats(dev)["allocated_bytes.all.current"]


def max_memory_allocated(dev="cpu"):
    return memory_stats(dev)["allocated_bytes.all.peak"]


def memory_reserved(dev="cpu"):
    return memory_stats(dev)["reserved_bytes.all.current"]


def reset_peak_memory_stats(dev="cpu"):
    check(lib.ag_memory_reset_peak(_as_dev(dev)._d))


def empty_cache(dev="cpu"):
    check(lib.ag_memory_empty_cache(_as_dev(dev)._d))


def set_memory_cap(dev, nbytes):
    """Cap the device's allocator at nbytes (0: no cap) so OOM is reproducible."""
    from ._tensor import _int_arg
    n = _int_arg(nbytes, "set_memory_cap", "nbytes", 2)
    if n < 0:  # a size_t would take -1 as 2**64 - 1: no cap at all
        raise ValueError("set_memory_cap(): argument 'nbytes' must be >= 0, got %d" % n)
    check(lib.ag_memory_set_cap(_as_dev(dev)._d, n))


def memory_summary(dev="cpu"):
    buf = ctypes.create_string_buffer(1 << 16)
    check(lib.ag_memory_summary(_as_dev(dev)._d, buf, len(buf)))
    return buf.value.decode()


def live_tensors():
    """Number of live C tensors in the process (for leak checks)."""
    return lib.ag_live_tensors()


def save(obj, path):
    """Write a dict of name -> Tensor (or a Module's state_dict) as safetensors."""
    from . import _checkpoint
    if hasattr(obj, "state_dict"):
        obj = obj.state_dict()
    if not _checkpoint.is_flat(obj):  # an optimizer's state_dict, nested dicts, lists, numbers
        return _checkpoint.save(obj, path)
    if not isinstance(obj, dict):
        raise TypeError("anygrad.save: expected a dict of tensors or a Module")
    pl = _lib.ParamList()
    try:
        for k, t in obj.items():
            if not isinstance(t, Tensor):
                raise TypeError("anygrad.save: %r is not a Tensor" % (k,))
            check(lib.ag_params_add(byref(pl), str(k).encode(), t._handle))
        check(lib.ag_safetensors_save(str(path).encode(), byref(pl), 0, None, None))
    finally:
        lib.ag_params_free(byref(pl))


def load(path, map_location="cpu"):
    """Read a safetensors file into a dict of name -> Tensor on map_location."""
    f = ctypes.c_void_p()
    check(lib.ag_safetensors_open(str(path).encode(), byref(f)))
    try:
        d = _as_dev(map_location)
        out = {}
        for i in range(lib.ag_safetensors_count(f)):
            name = lib.ag_safetensors_name(f, i)
            out[name.decode()] = _wrap(lib.ag_safetensors_get(f, name, d._d), "load")
        from . import _checkpoint
        t = _checkpoint.tree(f)
        return out if t is None else _checkpoint.rebuild(t, out)
    finally:
        lib.ag_safetensors_close(f)


class Profiler:
    """The step profiler: with prof.step(): ... per training step; verdict()
    says whether the device was input-, sync- or compute-bound and whether
    memory grows; report(path) writes the HTML run report."""

    def __init__(self, dev="cpu", window=20, leak_steps=0, trace=False):
        from ._tensor import _c_int_arg
        cfg = _lib.ProfilerConfig(_c_int_arg(window, "Profiler", "window"),
                                  _c_int_arg(leak_steps, "Profiler", "leak_steps"), _b.bool(trace), None)
        p = lib.ag_profiler_create(_as_dev(dev)._d, byref(cfg))
        if not p:
            raise_last("Profiler")
        self._p = p

    def __del__(self):
        p = getattr(self, "_p", None)
        if p:
            self._p = None
            lib.ag_profiler_destroy(p)

    class _Step:
        def __init__(self, p):
            self.p = p

        def __enter__(self):
            check(lib.ag_profiler_step_begin(self.p))

        def __exit__(self, *exc):
            check(lib.ag_profiler_step_end(self.p))
            return False

    def step(self):
        return Profiler._Step(self._p)

    def log_scalar(self, series, step, value):
        from ._tensor import _int_arg, _scalar
        check(lib.ag_profiler_log_scalar(self._p, series.encode(), _int_arg(step, "log_scalar", "step", 2),
                                         _scalar(value, "value", "log_scalar")))

    def verdict(self):
        v = _lib.ProfilerVerdict()
        check(lib.ag_profiler_verdict_get(self._p, byref(v)))
        return v.text.decode()

    def report(self, path):
        check(lib.ag_report_write(self._p, str(path).encode()))

    def write_trace(self, path):
        check(lib.ag_profiler_write_trace(self._p, str(path).encode()))
