"""The C library through ctypes: finding libanygrad, declaring its functions,
turning statuses into exceptions, and reading the op table (optable.h).

Nothing here is compiled: the library is found at import and every
declaration below mirrors include/anygrad/*.h."""
import ctypes
import os
import re
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int,
                    c_int16, c_int32, c_int64, c_size_t, c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))


def _recorded():
    """The libraries recorded when this copy was installed (_libpaths.txt:
    pip, or cmake --install with AG_INSTALL_PYTHON); a relative path is
    relative to the package (a library that pip built and copied in)."""
    cfg = os.path.join(_HERE, "_libpaths.txt")
    if not os.path.exists(cfg):
        return []
    with open(cfg) as f:
        return [os.path.join(_HERE, p) if not os.path.isabs(p) else p
                for p in (line.strip() for line in f) if p]


def _candidates():
    env = os.environ.get("ANYGRAD_LIBRARY")
    if env:
        yield env
        return
    # an installed copy loads what it was installed against: the prefix's
    # library, not a build tree that happens to lie near it
    yield from _recorded()
    # the package inside the source tree: python/anygrad -> <repo>/build/lib
    repo = os.path.dirname(os.path.dirname(_HERE))
    if os.path.exists(os.path.join(repo, "include", "anygrad", "optable.h")):
        for b in ("build", "build-release", "build-debug"):
            yield os.path.join(repo, b, "lib", "libanygrad.so")
    for prefix in (os.path.expanduser("~/.local"), "/usr/local", "/usr"):
        for d in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            yield os.path.join(prefix, d, "libanygrad.so.0")
    yield "libanygrad.so.0"  # the dynamic loader's own search path


def _load():
    tried = []
    for p in _candidates():
        if os.path.sep in p and not os.path.exists(p):
            tried.append(p)
            continue
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
    raise ImportError("anygrad: libanygrad.so not found; set ANYGRAD_LIBRARY to its path. Tried: "
                      + ", ".join(tried))


lib, LIBRARY_PATH = _load()


# ---- errors ----------------------------------------------------------------
class AnygradError(RuntimeError):
    """Base of the errors that do not map onto a Python built-in."""


class OutOfMemoryError(MemoryError):
    """Device (or host) memory exhausted: AG_ERR_OOM. The caching allocator
    has already freed its cache and retried once; free tensors and retry."""


class UnsupportedError(AnygradError):
    """The backend does not implement this op for this dtype."""


class DeviceError(ValueError):
    """Tensors on different devices, or a bad device ordinal."""


class IndexOutOfRangeError(IndexError, AnygradError):
    """AG_ERR_INDEX: an index, target or token id outside its range, found
    by the op or by a kernel on the device (then reported by the next
    synchronizing call: item(), tolist(), numpy(), a copy to the host,
    synchronize()). Both an IndexError, as torch raises on the CPU for
    index_select, embedding and cross_entropy, and a RuntimeError, as torch
    raises for gather and for every device-side error on CUDA."""


_STATUS_NAMES = ["OK", "INVALID", "SHAPE", "DTYPE", "DEVICE", "UNAVAILABLE", "UNSUPPORTED",
                 "OOM", "INDEX", "BACKEND", "IO", "CORRUPT", "STATE", "SYNC", "INTERNAL",
                 "TIMEOUT", "ABORTED"]


def _exc_class(status):
    name = _STATUS_NAMES[status] if 0 <= status < len(_STATUS_NAMES) else "?"
    if name in ("INVALID", "SHAPE", "DTYPE"):
        return ValueError
    if name == "DEVICE":
        return DeviceError
    if name == "INDEX":
        return IndexOutOfRangeError
    if name == "OOM":
        return OutOfMemoryError
    if name == "IO":
        return OSError
    if name == "UNSUPPORTED":
        return UnsupportedError
    return AnygradError  # UNAVAILABLE, BACKEND, CORRUPT, STATE, SYNC, INTERNAL, ...


def raise_last(where=None, status=None):
    st = lib.ag_last_status() if status is None else status
    msg = lib.ag_last_error().decode("utf-8", "replace")
    lib.ag_error_clear()
    if st == 0 and not msg:
        st, msg = 14, "%s failed without a message" % (where or "anygrad call")
    raise _exc_class(st)("%s [AG_ERR_%s]" % (msg, _STATUS_NAMES[st] if st < len(_STATUS_NAMES) else st))


def check(status):
    if status != 0:
        raise_last(status=status)


# ---- types -----------------------------------------------------------------
class ItemValue(Structure):
    _fields_ = [("dtype", c_int), ("is_floating", c_int32), ("f", c_double), ("i", c_int64)]


class Device(Structure):
    _fields_ = [("backend", c_int16), ("index", c_int16)]


class DeviceProps(Structure):
    _fields_ = [("name", c_char * 128), ("vendor", c_char * 64), ("arch", c_char * 64),
                ("total_memory", c_size_t), ("compute_units", c_int), ("native_f16", c_bool),
                ("native_bf16", c_bool), ("virtual_memory", c_bool), ("unified_memory", c_bool)]


class ParamList(Structure):
    _fields_ = [("count", c_int), ("cap", c_int), ("tensors", POINTER(c_void_p)),
                ("names", POINTER(c_char_p))]


class MemStat(Structure):
    _fields_ = [("current", c_int64), ("peak", c_int64), ("allocated", c_int64), ("freed", c_int64)]


class MemoryStats(Structure):
    _fields_ = [(n, MemStat * 3) for n in (
        "allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
        "active_bytes", "inactive_split_bytes", "requested_bytes")] + [
        ("oversize_allocations", MemStat), ("oversize_segments", MemStat),
        ("category_bytes", MemStat * 16),  # sized below from the library
        ("num_alloc_retries", c_int64), ("num_ooms", c_int64), ("num_syncs_all_streams", c_int64),
        ("num_device_alloc", c_int64), ("num_device_free", c_int64), ("num_pending_events", c_int64),
        ("max_split_size", c_int64), ("cap_bytes", c_int64), ("largest_free_block", c_int64),
        ("caching", c_bool), ("expandable_segments", c_bool)]


class SgdOptions(Structure):
    _fields_ = [("lr", c_double), ("momentum", c_double), ("dampening", c_double),
                ("weight_decay", c_double), ("nesterov", c_bool)]


class AdamwOptions(Structure):
    _fields_ = [("lr", c_double), ("beta1", c_double), ("beta2", c_double), ("eps", c_double),
                ("weight_decay", c_double)]


class ParamGroup(Structure):  # include/anygrad/optim.h: ag_param_group
    _fields_ = [("params", POINTER(ParamList)), ("lr", c_double), ("weight_decay", c_double)]


class RmspropOptions(Structure):  # include/anygrad/optim.h: ag_rmsprop_options
    _fields_ = [("lr", c_double), ("alpha", c_double), ("eps", c_double), ("weight_decay", c_double),
                ("momentum", c_double), ("centered", c_bool)]


class Conv2dParams(Structure):
    _fields_ = [("stride", c_int * 2), ("padding", c_int * 2), ("dilation", c_int * 2),
                ("groups", c_int)]


class Pool2dParams(Structure):
    _fields_ = [("kernel", c_int * 2), ("stride", c_int * 2), ("padding", c_int * 2),
                ("count_include_pad", c_bool)]


class ProfilerConfig(Structure):
    _fields_ = [("window", c_int), ("leak_steps", c_int), ("trace", c_bool), ("stream", c_void_p)]


class ProfilerVerdict(Structure):
    _fields_ = [("first_step", c_int64), ("steps", c_int64), ("device_idle_frac", c_double),
                ("sync_stall_frac", c_double), ("data_wait_frac", c_double),
                ("syncs_per_step", c_double), ("growth_bytes_per_step", c_double),
                ("input_bound", c_bool), ("sync_bound", c_bool), ("memory_growing", c_bool),
                ("leak", c_bool), ("text", c_char * 1024)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor)))]

T = c_void_p  # ag_tensor*
P = c_void_p

# name: (restype, argtypes)
_DECLS = {
    "ag_last_error": (c_char_p, []), "ag_last_status": (c_int, []), "ag_error_clear": (None, []),
    "ag_version_string": (c_char_p, []),
    "ag_dtype_name": (c_char_p, [c_int]), "ag_dtype_size": (c_size_t, [c_int]),
    # devices
    "ag_backend_count": (c_int, []), "ag_backend_name": (c_char_p, [c_int]),
    "ag_backend_available": (c_bool, [c_int, POINTER(c_char_p)]),
    "ag_backend_device_count": (c_int, [c_int]),
    "ag_device_parse": (c_int, [c_char_p, POINTER(Device)]),
    "ag_device_str": (c_char_p, [Device, c_char_p, c_size_t]),
    "ag_device_best": (Device, []), "ag_device_synchronize": (c_int, [Device]),
    "ag_device_props_get": (c_int, [Device, POINTER(DeviceProps)]),
    "ag_device_mem_info": (c_int, [Device, POINTER(c_size_t), POINTER(c_size_t)]),
    "ag_set_deterministic": (None, [c_bool]),
    "ag_set_numerics": (c_int, [c_int]), "ag_get_numerics": (c_int, []),
    "ag_numerics_name": (c_char_p, [c_int]), "ag_numerics_parse": (c_int, [c_char_p, POINTER(c_int)]),
    # creation
    "ag_empty": (T, [Device, c_int, c_int, POINTER(c_int64)]),
    "ag_zeros": (T, [Device, c_int, c_int, POINTER(c_int64)]),
    "ag_ones": (T, [Device, c_int, c_int, POINTER(c_int64)]),
    "ag_full": (T, [Device, c_int, c_int, POINTER(c_int64), c_double]),
    "ag_scalar": (T, [Device, c_int, c_double]),
    "ag_arange": (T, [Device, c_int, c_double, c_double, c_double]),
    "ag_zeros_like": (T, [T]), "ag_empty_like": (T, [T]),
    "ag_rand": (T, [Device, c_int, c_int, POINTER(c_int64), c_double, c_double, P]),
    "ag_randn": (T, [Device, c_int, c_int, POINTER(c_int64), c_double, c_double, P]),
    "ag_manual_seed": (None, [c_uint64]),
    "ag_generator_create": (P, [c_uint64]), "ag_generator_free": (None, [P]),
    "ag_from_host": (T, [Device, c_int, c_int, POINTER(c_int64), c_void_p]),
    "ag_to_host": (c_int, [T, c_void_p, c_size_t]),
    "ag_item": (c_double, [T]), "ag_item_scalar": (c_int, [T, POINTER(ItemValue)]),
    # properties
    "ag_tensor_ndim": (c_int, [T]), "ag_tensor_shape": (POINTER(c_int64), [T]),
    "ag_tensor_strides": (POINTER(c_int64), [T]), "ag_tensor_numel": (c_int64, [T]),
    "ag_tensor_dtype": (c_int, [T]), "ag_tensor_device": (Device, [T]),
    "ag_tensor_is_contiguous": (c_bool, [T]),
    "ag_tensor_retain": (T, [T]), "ag_tensor_release": (None, [T]),
    "ag_live_tensors": (c_int64, []),
    # views and copies
    "ag_reshape": (T, [T, c_int, POINTER(c_int64)]), "ag_view": (T, [T, c_int, POINTER(c_int64)]),
    "ag_flatten": (T, [T]), "ag_transpose": (T, [T, c_int, c_int]),
    "ag_permute": (T, [T, POINTER(c_int)]),
    "ag_slice": (T, [T, c_int, c_int64, c_int64, c_int64]),
    "ag_expand": (T, [T, c_int, POINTER(c_int64)]), "ag_unsqueeze": (T, [T, c_int]),
    "ag_squeeze": (T, [T, c_int]), "ag_contiguous": (T, [T]), "ag_clone": (T, [T]),
    "ag_cast": (T, [T, c_int]), "ag_to_device": (T, [T, Device]),
    "ag_copy_": (c_int, [T, T]), "ag_fill_": (c_int, [T, c_double]),
    # ops beyond the table
    "ag_add_scalar": (T, [T, c_double]), "ag_sub_scalar": (T, [T, c_double]),
    "ag_rsub_scalar": (T, [T, c_double]), "ag_mul_scalar": (T, [T, c_double]),
    "ag_div_scalar": (T, [T, c_double]), "ag_rdiv_scalar": (T, [T, c_double]),
    "ag_where": (T, [T, T, T]), "ag_masked_fill": (T, [T, T, c_double]),
    "ag_sum": (T, [T, c_int, POINTER(c_int), c_bool]),
    "ag_mean": (T, [T, c_int, POINTER(c_int), c_bool]),
    "ag_max": (T, [T, c_int, POINTER(c_int), c_bool]),
    "ag_min": (T, [T, c_int, POINTER(c_int), c_bool]),
    "ag_argmax": (T, [T, c_int, c_bool]),
    "ag_var": (T, [T, c_int, POINTER(c_int), c_double, c_bool]),
    "ag_std": (T, [T, c_int, POINTER(c_int), c_double, c_bool]),
    "ag_matmul": (T, [T, T]), "ag_softmax": (T, [T, c_int]), "ag_log_softmax": (T, [T, c_int]),
    "ag_cross_entropy": (T, [T, T, c_int, c_int32]), "ag_mse_loss": (T, [T, T, c_int]),
    "ag_layer_norm": (T, [T, T, T, c_double]), "ag_rms_norm": (T, [T, T, c_double]),
    "ag_cumsum": (T, [T, c_int]), "ag_gather": (T, [T, c_int, T]),
    "ag_index_select": (T, [T, c_int, T]),
    "ag_topk": (c_int, [T, c_int64, c_int, c_bool, POINTER(c_void_p), POINTER(c_void_p)]),
    "ag_embedding": (T, [T, T]), "ag_concat": (T, [c_int, POINTER(c_void_p), c_int]),
    "ag_dropout": (T, [T, c_double, c_bool, P]),
    "ag_scaled_dot_product_attention": (T, [T, T, T, T, c_bool, c_double, c_double, P]),
    "ag_scaled_dot_product_attention_unfused": (T, [T, T, T, T, c_bool, c_double, c_double, P]),
    "ag_conv2d": (T, [T, T, T, POINTER(Conv2dParams)]),
    "ag_max_pool2d": (T, [T, POINTER(Pool2dParams)]),
    "ag_avg_pool2d": (T, [T, POINTER(Pool2dParams)]),
    "ag_adaptive_avg_pool2d": (T, [T, c_int64, c_int64]),
    "ag_batch_norm": (T, [T, T, T, T, T, c_bool, c_double, c_double]),
    # autograd
    "ag_tensor_set_requires_grad": (c_int, [T, c_bool]), "ag_tensor_requires_grad": (c_bool, [T]),
    "ag_tensor_is_leaf": (c_bool, [T]), "ag_tensor_grad": (T, [T]),
    "ag_tensor_zero_grad": (None, [T]), "ag_detach": (T, [T]),
    "ag_backward": (c_int, [T, T, c_bool]),
    "ag_no_grad_begin": (None, []), "ag_enable_grad_begin": (None, []),
    "ag_inference_mode_begin": (None, []), "ag_grad_mode_end": (c_int, []),
    "ag_grad_enabled": (c_bool, []),
    "ag_autocast_begin": (c_int, [c_int]), "ag_autocast_end": (c_int, []),
    "ag_autocast_enabled": (c_bool, []),
    # params, optimizers, serialization
    "ag_params_add": (c_int, [POINTER(ParamList), c_char_p, T]),
    "ag_params_free": (None, [POINTER(ParamList)]),
    "ag_sgd_create": (P, [POINTER(ParamList), POINTER(SgdOptions)]),
    "ag_adamw_create": (P, [POINTER(ParamList), POINTER(AdamwOptions)]),
    "ag_optimizer_free": (None, [P]), "ag_optimizer_step": (c_int, [P]),
    "ag_optimizer_zero_grad": (None, [P]), "ag_optimizer_set_lr": (c_int, [P, c_double]),
    "ag_optimizer_lr": (c_double, [P]), "ag_optimizer_steps": (c_int64, [P]),
    "ag_optimizer_set_steps": (None, [P, c_int64]),
    "ag_optimizer_state": (c_int, [P, POINTER(ParamList)]),
    "ag_clip_grad_norm": (T, [POINTER(ParamList), c_double]),
    "ag_safetensors_save": (c_int, [c_char_p, POINTER(ParamList), c_int, POINTER(c_char_p),
                                    POINTER(c_char_p)]),
    "ag_safetensors_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "ag_safetensors_close": (None, [P]), "ag_safetensors_count": (c_int, [P]),
    "ag_safetensors_name": (c_char_p, [P, c_int]),
    "ag_safetensors_get": (T, [P, c_char_p, Device]),
    # memory
    "ag_memory_stats_get": (c_int, [Device, c_void_p]),
    "ag_memory_reset_peak": (c_int, [Device]), "ag_memory_empty_cache": (c_int, [Device]),
    "ag_memory_set_cap": (c_int, [Device, c_size_t]),
    "ag_memory_summary": (c_int, [Device, c_char_p, c_size_t]),
    "ag_mem_category_name": (c_char_p, [c_int]),
    # profiler and report
    "ag_profiler_create": (P, [Device, POINTER(ProfilerConfig)]),
    "ag_profiler_destroy": (None, [P]), "ag_profiler_step_begin": (c_int, [P]),
    "ag_profiler_step_end": (c_int, [P]),
    "ag_profiler_verdict_get": (c_int, [P, POINTER(ProfilerVerdict)]),
    "ag_profiler_log_scalar": (c_int, [P, c_char_p, c_int64, c_double]),
    "ag_report_write": (c_int, [P, c_char_p]),
    "ag_profiler_write_trace": (c_int, [P, c_char_p]),
    # interop
    "ag_to_dlpack": (c_int, [T, POINTER(c_void_p)]),
    "ag_from_dlpack": (T, [c_void_p]),
    "ag_tensor_data_ptr": (c_void_p, [T]),
    # printing
    "ag_tensor_format": (c_int64, [T, c_char_p, c_size_t]),
}

MISSING = []


def _bind(entries):
    """Declares each (name, restype, argtypes) of the library; a name the
    library lacks (an older libanygrad) goes to MISSING."""
    for name, res, args in entries:
        f = getattr(lib, name, None)
        if f is None:
            MISSING.append(name)
        else:
            f.restype, f.argtypes = res, args


_bind((n, r, a) for n, (r, a) in _DECLS.items())

# training toolkit: parameter groups, schedules, initialisers, threads, generator state
_TRAIN_DECLS = {
    "ag_sgd_create_groups": (P, [POINTER(ParamGroup), c_int, POINTER(SgdOptions)]),
    "ag_adamw_create_groups": (P, [POINTER(ParamGroup), c_int, POINTER(AdamwOptions)]),
    "ag_rmsprop_create_groups": (P, [POINTER(ParamGroup), c_int, POINTER(RmspropOptions)]),
    "ag_optimizer_set_group_lr": (c_int, [P, c_int, c_double]),
    "ag_optimizer_group_lr": (c_double, [P, c_int]),
    "ag_optimizer_group_count": (c_int, [P]),
    "ag_schedule_lr": (c_double, [P, c_int64]),
    "ag_init_gain": (c_double, [c_int, c_double]),
    "ag_init_fans": (c_int, [T, POINTER(c_int64), POINTER(c_int64)]),
    "ag_init_uniform_": (c_int, [T, c_double, c_double, P]),
    "ag_init_normal_": (c_int, [T, c_double, c_double, P]),
    "ag_init_xavier_uniform_": (c_int, [T, c_double, P]),
    "ag_init_xavier_normal_": (c_int, [T, c_double, P]),
    "ag_init_kaiming_uniform_": (c_int, [T, c_double, c_int, P]),
    "ag_init_kaiming_normal_": (c_int, [T, c_double, c_int, P]),
    "ag_init_trunc_normal_": (c_int, [T, c_double, c_double, c_double, c_double, P]),
    "ag_set_num_threads": (c_int, [c_int]), "ag_get_num_threads": (c_int, []),
    "ag_default_generator": (P, []),
    "ag_generator_get_state": (None, [P, POINTER(c_uint64), POINTER(c_uint64)]),
    "ag_generator_set_state": (None, [P, c_uint64, c_uint64]),
    "ag_safetensors_meta": (c_char_p, [P, c_char_p]),
}
_bind((n, r, a) for n, (r, a) in _TRAIN_DECLS.items())

# The category array's length comes from the library (AG_MEM_CATEGORY_COUNT).
_n_cat = 0
while _n_cat < 64 and lib.ag_mem_category_name(_n_cat) not in (None, b"?", b""):
    _n_cat += 1
_fields = list(MemoryStats._fields_)
_fields[[f[0] for f in _fields].index("category_bytes")] = ("category_bytes", MemStat * _n_cat)


class MemoryStats(Structure):  # noqa: F811  (re-laid out with the real category count)
    _fields_ = _fields


N_MEM_CATEGORIES = _n_cat

# ---- the op table -------------------------------------------------------------


def _find_optable():
    cands = [os.path.join(_HERE, "optable.h"),
             os.path.join(os.path.dirname(os.path.dirname(_HERE)), "include", "anygrad", "optable.h")]
    libdir = os.path.dirname(os.path.realpath(LIBRARY_PATH)) if os.path.sep in LIBRARY_PATH else ""
    if libdir:
        cands.append(os.path.join(os.path.dirname(libdir), "include", "anygrad", "optable.h"))
        cands.append(os.path.join(os.path.dirname(os.path.dirname(libdir)), "include", "anygrad",
                                  "optable.h"))
    for c in cands:
        if os.path.exists(c):
            return c
    raise ImportError("anygrad: include/anygrad/optable.h not found (looked in %s)" % ", ".join(cands))


def _split_args(s):
    """Split the text of a macro call's arguments at top-level commas."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return out


def _entries(text, macro):
    m = re.search(r"#define\s+%s\(AGX\)(.*?)(?=\n\s*\n|\n/\*|\n#)" % macro, text, re.S)
    if not m:
        raise ImportError("anygrad: %s not found in optable.h" % macro)
    body = m.group(1)
    entries, i = [], 0
    while True:
        i = body.find("AGX(", i)
        if i < 0:
            break
        j, depth = i + 4, 1
        while depth:
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            j += 1
        entries.append(_split_args(body[i + 4:j - 1]))
        i = j
    return entries


def parse_optable(path):
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S).replace("\\\n", " ")
    unary, binary = [], []
    for a in _entries(text, "AG_UNARY_OPS"):
        unary.append(dict(id=a[0], name=a[1], api=a[2], save=a[4], amp=a[6], ints=a[7],
                          dom=a[9], gdom=a[10], ts=(float(a[11]), float(a[12]))))
    for a in _entries(text, "AG_BINARY_OPS"):
        binary.append(dict(id=a[0], name=a[1], api=a[2], kind=a[4], grad=a[5], ints=a[8],
                           doma=a[10], domb=a[11]))
    return unary, binary


OPTABLE_PATH = _find_optable()
UNARY_OPS, BINARY_OPS = parse_optable(OPTABLE_PATH)
_NSCALARS = {"A0": 0, "A1": 1, "A2": 2}
for _op in UNARY_OPS:
    if _op["api"] in _NSCALARS:
        _f = getattr(lib, "ag_" + _op["name"])
        _f.restype = T
        _f.argtypes = [T] + [c_double] * _NSCALARS[_op["api"]]
        _op["nscalars"] = _NSCALARS[_op["api"]]
for _op in BINARY_OPS:
    if _op["api"] == "B":
        _f = getattr(lib, "ag_" + _op["name"])
        _f.restype = T
        _f.argtypes = [T, T]

pythonapi = ctypes.pythonapi
pythonapi.PyCapsule_New.restype = ctypes.py_object
pythonapi.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
pythonapi.PyCapsule_GetPointer.restype = c_void_p
pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, c_char_p]
pythonapi.PyCapsule_SetName.restype = c_int
pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, c_char_p]
pythonapi.PyCapsule_IsValid.restype = c_int
pythonapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, c_char_p]

# ---- the GPT of nn.h (structs mirrored for ag_gpt_init / forward / free) ----


class _Linear(Structure):
    _fields_ = [("weight", c_void_p), ("bias", c_void_p), ("in_", c_int64), ("out", c_int64)]


class _Embedding(Structure):
    _fields_ = [("weight", c_void_p), ("num", c_int64), ("dim", c_int64)]


class _LayerNorm(Structure):
    _fields_ = [("weight", c_void_p), ("bias", c_void_p), ("dim", c_int64), ("eps", c_double)]


class GptConfig(Structure):
    _fields_ = [("vocab_size", c_int64), ("block_size", c_int64), ("n_layer", c_int64),
                ("n_embd", c_int64), ("n_head", c_int), ("dropout", c_double),
                ("checkpoint", c_bool), ("untied_head", c_bool)]


class Gpt(Structure):
    _fields_ = [("cfg", GptConfig), ("wte", _Embedding), ("wpe", _Embedding),
                ("blocks", c_void_p), ("ln_f", _LayerNorm), ("head", _Linear), ("pos", c_void_p),
                ("params", ParamList)]


class LlamaConfig(Structure):
    _fields_ = [("vocab_size", c_int64), ("dim", c_int64), ("n_layers", c_int64),
                ("n_heads", c_int), ("n_kv_heads", c_int), ("hidden_dim", c_int64),
                ("multiple_of", c_int64), ("max_seq_len", c_int64), ("rope_theta", c_double),
                ("norm_eps", c_double), ("untied_head", c_bool), ("checkpoint", c_bool)]


class Llama(Structure):  # include/anygrad/llama.h: ag_llama
    _fields_ = [("cfg", LlamaConfig), ("head_dim", c_int64), ("embed_tokens", _Embedding),
                ("layers", c_void_p), ("norm", c_void_p), ("lm_head", _Linear),
                ("rope_cos", c_void_p), ("rope_sin", c_void_p), ("params", ParamList)]


_bind((
        ("ag_gpt_init", c_int, [POINTER(Gpt), POINTER(GptConfig), Device, c_int, c_void_p]),
        ("ag_gpt_forward", c_void_p, [POINTER(Gpt), c_void_p, c_bool, c_void_p]),
        ("ag_gpt_free", None, [POINTER(Gpt)]),
        ("ag_llama_init", c_int, [POINTER(Llama), POINTER(LlamaConfig), Device, c_int, c_void_p]),
        ("ag_llama_forward", c_void_p, [POINTER(Llama), c_void_p, c_bool, c_void_p]),
        ("ag_llama_save", c_int, [POINTER(Llama), c_char_p]),
        ("ag_llama_load", c_int, [POINTER(Llama), c_char_p]),
        ("ag_llama_free", None, [POINTER(Llama)])))


# ---- nn modules and functional (anygrad.nn, anygrad.nn.functional) ----
_bind((
        ("ag_group_norm", T, [T, c_int64, T, T, c_double]),
        ("ag_conv1d", T, [T, T, T, c_int, c_int, c_int, c_int]),
        ("ag_pad", T, [T, POINTER(c_int64), c_int, c_int, c_double]),
        ("ag_interpolate", T, [T, c_int64, c_int64, c_double, c_double, c_int, c_bool]),
        ("ag_one_hot", T, [T, c_int64]),
        ("ag_norm", T, [T, c_double, c_int, POINTER(c_int), c_bool])))

# ---- tensor methods, autograd.grad, gradient hooks, grad_fn (_tensor_extra.py, autograd.py) ----
_bind((
        ("ag_sort", c_int, [T, c_int, c_bool, POINTER(c_void_p), POINTER(c_void_p)]),
        ("ag_argsort", T, [T, c_int, c_bool])))
_bind((
        ("ag_autograd_grad", c_int, [c_int, POINTER(c_void_p), POINTER(c_void_p), c_int, POINTER(c_void_p),
                                     c_bool, c_bool, POINTER(c_void_p)]),
        ("ag_tensor_add_grad_pre_hook", c_int, [T, c_void_p, c_void_p, c_void_p, POINTER(c_uint64)]),
        ("ag_tensor_remove_grad_hook", c_int, [T, c_uint64]),
        ("ag_tensor_grad_fn", c_void_p, [T]),
        ("ag_grad_node_retain", c_void_p, [c_void_p]), ("ag_grad_node_release", None, [c_void_p]),
        ("ag_grad_node_name", c_char_p, [c_void_p]), ("ag_grad_node_input_count", c_int, [c_void_p]),
        ("ag_grad_node_next", c_void_p, [c_void_p, c_int, POINTER(c_void_p)]),
        ("ag_custom_record", c_int, [T, c_char_p, c_int, POINTER(c_void_p), c_void_p, c_void_p, c_void_p])))
lib.ag_error_set.restype = c_int  # variadic: (status, b"%s", message)

# ---- indexing and NumPy sharing (anygrad/_index.py, from_numpy) ----
DELETER = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)  # ag_deleter_fn
_bind((
        ("ag_index_add", c_void_p, [c_void_p, c_int, c_void_p, c_void_p, c_double]),
        ("ag_result_type", c_int, [T, T]),
        ("ag_from_blob", c_void_p, [Device, c_int, c_int, POINTER(c_int64), POINTER(c_int64), c_void_p,
                                    DELETER, c_void_p])))

# ---- the host-staging loader (include/anygrad/loader.h), for anygrad.utils.data ----
LOADER_MAX_FIELDS = 8
MAX_DIMS = 8


class LoaderField(Structure):
    _fields_ = [("dtype", c_int), ("ndim", c_int), ("shape", c_int64 * MAX_DIMS), ("var_dim", c_int),
                ("n_buckets", c_int), ("buckets", c_int64 * 16), ("pad_value", c_double)]


# ag_status fill(void *user, int64_t epoch, int64_t batch_index, const int64_t *samples,
#                int64_t rows, ag_loader_batch *batch)
LOADER_FILL_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_int64, POINTER(c_int64), c_int64, c_void_p)


class LoaderConfig(Structure):
    _fields_ = [("device", Device), ("num_samples", c_int64), ("batch_size", c_int64),
                ("shuffle", c_bool), ("seed", c_uint64), ("drop_last", c_bool), ("epochs", c_int64),
                ("num_workers", c_int), ("fill_on_caller", c_bool), ("prefetch", c_int),
                ("copy_ahead", c_int), ("n_fields", c_int), ("fields", LoaderField * LOADER_MAX_FIELDS),
                ("fill", LOADER_FILL_FN), ("user", c_void_p), ("profiler", c_void_p)]


class LoaderBatchInfo(Structure):
    _fields_ = [("end", c_bool), ("epoch", c_int64), ("index", c_int64), ("rows", c_int64),
                ("bucket", c_int64 * LOADER_MAX_FIELDS)]


_bind((
        ("ag_loader_create", c_void_p, [POINTER(LoaderConfig)]),
        ("ag_loader_next", c_int, [c_void_p, POINTER(c_void_p), POINTER(LoaderBatchInfo)]),
        ("ag_loader_batches_per_epoch", c_int64, [c_void_p]),
        ("ag_loader_destroy", None, [c_void_p]),
        ("ag_loader_batch_data", c_void_p, [c_void_p, c_int]),
        ("ag_loader_batch_shape", POINTER(c_int64), [c_void_p, c_int])))

# ---- the Hugging Face layout (include/anygrad/pretrained.h, docs/export.md) ----
_bind((
        ("ag_llama_save_pretrained", c_int, [POINTER(Llama), c_void_p, c_char_p]),
        ("ag_llama_load_pretrained", c_int, [c_char_p, Device, POINTER(Llama), POINTER(c_void_p)]),
        ("ag_llama_read_config", c_int, [c_char_p, POINTER(LlamaConfig)]),
        ("ag_llama_hidden_dim", c_int64, [POINTER(LlamaConfig)]),
        ("ag_bpe_load", c_int, [c_char_p, POINTER(c_void_p)]),
        ("ag_bpe_load_hf", c_int, [c_char_p, POINTER(c_void_p)]),
        ("ag_bpe_save_hf", c_int, [c_void_p, c_char_p]),
        ("ag_bpe_free", None, [c_void_p])))

# ---- scatter, deterministic mode (_first_hour.py), in-place arithmetic (_ops.py) ----
_bind((
        ("ag_scatter_add", c_void_p, [c_void_p, c_int, c_void_p, c_void_p]),
        ("ag_get_deterministic", c_bool, []),
        ("ag_add_", c_int, [c_void_p, c_void_p]), ("ag_sub_", c_int, [c_void_p, c_void_p]),
        ("ag_mul_", c_int, [c_void_p, c_void_p]), ("ag_div_", c_int, [c_void_p, c_void_p])))

# ---- x[idx] with a host index in one call (_index.py) ----
_bind((
        ("ag_index_select_host", c_void_p, [c_void_p, c_int, c_void_p]),))
