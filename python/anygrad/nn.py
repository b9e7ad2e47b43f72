"""anygrad.nn: modules with PyTorch's names, parameters() and state_dict().

Layers are written over the C ops (anygrad.nn.functional), so the Python
module tree owns its parameters as ordinary Tensors."""
import collections
import collections.abc
import math
import numbers
import os
import sys
import weakref
from ctypes import byref

from ._lib import lib, check, raise_last

from . import functional
from . import functional as F  # noqa: F401
from . import _tensor as _t
from ._tensor import (Tensor, rand, ones, zeros, no_grad, as_dtype, float32, as_device, _int_arg,
                      _c_int_arg, _tensor_in, _gen, _I64_MAX)


def _size(v, fn, arg):
    """A layer size: an int >= 0 (a bool, a float or an int outside int64 is
    a TypeError, as torch's size tuples; a negative one a RuntimeError, as torch)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s(): argument '%s' must be int, not %s" % (fn, arg, type(v).__name__))
    v = int(v)
    if v > _I64_MAX:
        raise TypeError("%s(): argument '%s' is %d, outside int64" % (fn, arg, v))
    if v < 0:  # torch's RuntimeError ("Trying to create tensor with negative dimension")
        raise RuntimeError("%s(): argument '%s' must be >= 0, got %d (Trying to create tensor with negative "
                           "dimension)" % (fn, arg, v))
    return v


def _last_dim_size(normalized_shape, fn):
    """normalized_shape of LayerNorm/RMSNorm: the size of the last dim (the
    library normalizes over it alone; a longer shape is refused, not cut)."""
    ns = normalized_shape
    if isinstance(ns, collections.abc.Iterable):
        ns = tuple(ns)
        if len(ns) != 1:
            raise ValueError("%s(): normalized_shape %s is not supported: the library normalizes over the "
                             "last dim only (give its size)" % (fn, ns))
        ns = ns[0]
    return _size(ns, fn, "normalized_shape")


class Parameter(Tensor):
    """anygrad.nn.Parameter(t) returns t detached, as a leaf that requires
    grad (requires_grad=False: a frozen one). A Module takes it as a
    parameter either way, as torch does."""

    def __new__(cls, data=None, requires_grad=True):
        t = (zeros(0) if data is None else data).detach()
        if requires_grad:
            t.requires_grad = True
        _PARAMS[id(t)] = t
        return t


# the tensors made by Parameter(): a frozen one (requires_grad=False) is still a parameter
_PARAMS = weakref.WeakValueDictionary()


def _is_param(v):
    return (v.requires_grad and v.is_leaf) or _PARAMS.get(id(v)) is v


def _uniform(shape, bound, dtype, device):
    with no_grad():
        t = (rand(*shape, dtype=float32, device=device) * (2 * bound) - bound)
        if dtype is not float32:
            t = t.to(dtype)
        t = t.contiguous().detach()
    t.requires_grad = True
    return t


class _RemovableHandle:
    """What register_forward_(pre_)hook returns: remove() drops the hook
    (also as a context manager's exit), as torch's RemovableHandle."""
    _next = 0

    def __init__(self, module, store):
        self.id = _RemovableHandle._next
        _RemovableHandle._next += 1
        self._ref, self._store = weakref.ref(module), store

    def remove(self):
        m = self._ref()
        if m is not None:
            hooks = m.__dict__.get(self._store)
            if hooks is not None:
                hooks.pop(self.id, None)
                if not hooks:
                    del m.__dict__[self._store]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        """torch's rules: a Module is a child, a leaf that requires grad a
        Parameter (anygrad's Parameter is such a tensor), a tensor (or None)
        assigned to a registered buffer's name updates the buffer; any
        other tensor is a plain attribute, in no state_dict."""
        if "_parameters" not in self.__dict__:
            raise RuntimeError("anygrad.nn: call super().__init__() first")
        if isinstance(value, Module):
            self._parameters.pop(name, None)
            self._buffers.pop(name, None)
            self._modules[name] = value
        elif isinstance(value, Tensor) and name not in self._buffers and _is_param(value):
            self._modules.pop(name, None)
            self._parameters[name] = value
        elif name in self._buffers and (value is None or isinstance(value, Tensor)):
            self._buffers[name] = value
        elif name in self._parameters and value is None:
            self._parameters[name] = None
        elif name in self._modules and value is None:
            self._modules[name] = None
        else:
            for d in (self._parameters, self._buffers, self._modules):
                d.pop(name, None)
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for d in ("_parameters", "_buffers", "_modules"):
            dd = self.__dict__.get(d)
            if dd is not None and name in dd:
                return dd[name]
        raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    @property
    def _non_persistent(self):
        s = self.__dict__.get("_non_persistent_set")
        if s is None:
            s = set()
            object.__setattr__(self, "_non_persistent_set", s)
        return s

    def register_buffer(self, name, tensor, persistent=True):
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError("buffer name should be a string. Got %s" % type(name).__name__)
        if "." in name or name == "":
            raise KeyError("buffer name can't contain \".\"" if name else
                           "buffer name can't be empty string \"\"")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError("attribute '%s' already exists" % name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError("cannot assign '%s' object to buffer '%s' (torch Tensor or None required)"
                            % (type(tensor).__name__, name))
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError("parameter name should be a string. Got %s" % type(name).__name__)
        if "." in name or name == "":
            raise KeyError("parameter name can't contain \".\"" if name else
                           "parameter name can't be empty string \"\"")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError("attribute '%s' already exists" % name)
        if param is not None and not isinstance(param, Tensor):
            raise TypeError("cannot assign '%s' object to parameter '%s' (torch.nn.Parameter or None "
                            "required)" % (type(param).__name__, name))
        if param is not None and not param.is_leaf:
            raise ValueError("Cannot assign non-leaf Tensor to parameter '%s'" % name)
        self._parameters[name] = param

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError("%s is not a Module subclass" % type(module).__name__)
        if not isinstance(name, str):
            raise TypeError("module name should be a string. Got %s" % type(name).__name__)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError("attribute '%s' already exists" % name)
        if "." in name or name == "":
            raise KeyError("module name can't contain \".\", got: %s" % name if name else
                           "module name can't be empty string \"\"")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        m = self
        for item in target.split(".") if target else []:
            if item not in m._modules:
                raise AttributeError(type(m).__name__ + " has no attribute `" + item + "`")
            m = m._modules[item]
        return m

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        pre = prefix.rstrip(".")
        for mp, m in (self.named_modules(prefix=pre) if recurse else [(pre, self)]):
            for n, p in m._parameters.items():
                if p is None or (remove_duplicate and id(p) in memo):
                    continue
                memo.add(id(p))
                yield (mp + "." if mp else "") + n, p

    def parameters(self, recurse=True):
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        pre = prefix.rstrip(".")
        for mp, m in (self.named_modules(prefix=pre) if recurse else [(pre, self)]):
            for n, b in m._buffers.items():
                if b is None or (remove_duplicate and id(b) in memo):
                    continue
                memo.add(id(b))
                yield (mp + "." if mp else "") + n, b

    def buffers(self, recurse=True):
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def named_children(self):
        memo = set()
        for n, m in self._modules.items():
            if m is not None and id(m) not in memo:
                memo.add(id(m))
                yield n, m

    def children(self):
        return [m for _, m in self.named_children()]

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for n, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + n, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """torch's keys and order: each module's parameters, then its
        persistent buffers, then its children's; values detached from the
        graph, sharing the storage (keep_vars=True: the tensors themselves)."""
        if args:  # torch's old positional form (destination, prefix, keep_vars)
            destination = args[0]
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        d = collections.OrderedDict() if destination is None else destination
        for n, p in self._parameters.items():
            if p is not None:
                d[prefix + n] = p if keep_vars else p.detach()
        for n, b in self._buffers.items():
            if b is not None and n not in self._non_persistent:
                d[prefix + n] = b if keep_vars else b.detach()
        for n, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=d, prefix=prefix + n + ".", keep_vars=keep_vars)
        return d

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values into the module's tensors in place. A missing or
        unexpected key (strict) or a shape that differs is torch's
        RuntimeError, listing every problem; nothing is copied then."""
        sd = state_dict
        if not isinstance(sd, collections.abc.Mapping):
            raise TypeError("load_state_dict(): argument 'state_dict' must be a dict, not %s"
                            % type(sd).__name__)
        for k, v in sd.items():
            if not isinstance(v, Tensor):
                raise TypeError("load_state_dict(): state_dict[%r] must be Tensor, not %s"
                                % (k, type(v).__name__))
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in sd]
        unexpected = [k for k in sd if k not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: %s. "
                              % ", ".join('"%s"' % k for k in unexpected))
            if missing:
                errors.append("Missing key(s) in state_dict: %s. " % ", ".join('"%s"' % k for k in missing))
        for k, t in own.items():
            if k in sd and tuple(sd[k].shape) != tuple(t.shape):
                errors.append("size mismatch for %s: copying a param with shape %s from checkpoint, the "
                              "shape in current model is %s." % (k, sd[k].shape, t.shape))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for %s:\n\t%s"
                               % (type(self).__name__, "\n\t".join(errors)))
        with no_grad():
            for k, t in own.items():
                if k in sd:
                    t.copy_(sd[k].to(device=t.device, dtype=t.dtype))
        return _IncompatibleKeys(missing, unexpected)

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    def to(self, *args, device=None, dtype=None, non_blocking=False):
        """Move and/or cast the parameters and buffers in place, as torch's
        Module.to: every Parameter and buffer keeps its Python identity
        (its data moves; a gradient moves with it), so an optimizer built
        before the move, which holds them, steps the moved data (with its
        state moved too). Integer buffers keep their dtype. Forms: to(device),
        to(dtype), to(device, dtype), to(tensor). Refused, with nothing
        moved, when an optimizer holding the parameters cannot follow
        (AdamW takes f32 parameters only) or a C model (GPT, Llama) would
        have to move."""
        from ._tensor import _as_to_args
        device, dtype = _as_to_args(args, device, dtype)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point dtypes, but got desired dtype=%s"
                            % dtype.name)
        # what moves: each tensor once (a tensor two modules share included)
        seen, moves = set(), []
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for t in store.values():
                    if t is None or id(t) in seen:
                        continue
                    seen.add(id(t))
                    dt = dtype if dtype is not None and t.dtype.is_floating_point else t.dtype
                    dv = t.device if device is None else device
                    if dt is not t.dtype or dv != t.device:
                        if getattr(m, "_c_model", False):
                            raise RuntimeError("anygrad.nn.%s: the C model's tensors cannot be moved or cast "
                                               "(its forward reads them): build it with device= and dtype="
                                               % type(m).__name__)
                        moves.append((t, dv, dt, store is m._parameters))
        if not moves:
            return self
        from . import optim
        new = {}
        try:
            with no_grad():
                for t, dv, dt, is_param in moves:
                    n = t.to(device=dv, dtype=dt).contiguous().detach()
                    if t.requires_grad:  # a frozen parameter stays frozen, as torch
                        n.requires_grad = True
                    new[id(t)] = n
            handles = {k: n._h for k, n in new.items()}
            follow = []
            try:
                for o in list(optim._LIVE):
                    if getattr(o, "_o", None) and o._holds(handles):
                        follow.append((o, o._prepare_follow(handles)))
            except BaseException:
                for _, c in follow:
                    lib.ag_optimizer_free(c)
                raise
        except BaseException:
            new.clear()
            raise
        for t, _, _, _ in moves:  # nothing fails past this point but the state copy
            n = new[id(t)]
            g = t.grad
            if g is not None:
                n.backward(g.to(device=n.device, dtype=n.dtype))  # a leaf: .grad = g, moved
            t._h, n._h = n._h, t._h  # t keeps its identity with the new data; n drops the old
        new.clear()
        for o, c in follow:
            o._follow(c)
        return self

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(float32)

    def double(self):
        from ._tensor import float64
        return self.to(float64)

    def half(self):
        from ._tensor import float16
        return self.to(float16)

    def bfloat16(self):
        from ._tensor import bfloat16
        return self.to(bfloat16)

    def __call__(self, *a, **k):
        d = self.__dict__
        if "_forward_pre_hooks" in d or "_forward_hooks" in d:
            return self._call_hooked(a, k)
        return self.forward(*a, **k)

    def _call_hooked(self, a, k):
        for h in list(self.__dict__.get("_forward_pre_hooks", {}).values()):
            r = h(self, a)
            if r is not None:
                a = r if isinstance(r, tuple) else (r,)
        out = self.forward(*a, **k)
        for h in list(self.__dict__.get("_forward_hooks", {}).values()):
            r = h(self, a, out)
            if r is not None:
                out = r
        return out

    def _add_hook(self, store, hook):
        if not callable(hook):
            raise TypeError("%s(): hook must be callable, not %s" % (store.strip("_"), type(hook).__name__))
        hooks = self.__dict__.get(store)
        if hooks is None:
            hooks = collections.OrderedDict()
            object.__setattr__(self, store, hooks)
        h = _RemovableHandle(self, store)
        hooks[h.id] = hook
        return h

    def register_forward_pre_hook(self, hook):
        """hook(module, args) runs before forward; a result other than None
        replaces the positional arguments (a tuple, or one value)."""
        return self._add_hook("_forward_pre_hooks", hook)

    def register_forward_hook(self, hook):
        """hook(module, args, output) runs after forward; a result other
        than None replaces the output."""
        return self._add_hook("_forward_hooks", hook)

    def forward(self, *a, **k):
        raise NotImplementedError('Module [%s] is missing the required "forward" function'
                                  % type(self).__name__)

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        """torch's layout: extra_repr, then each child indented by two."""
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        children = ["(%s): %s" % (k, repr(m).replace("\n", "\n  ")) for k, m in self._modules.items()]
        s = self._get_name() + "("
        if lines or children:
            if len(lines) == 1 and not children:
                s += lines[0]
            else:
                s += "\n  " + "\n  ".join(lines + children) + "\n"
        return s + ")"

    def extra_repr(self):
        return ""

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        in_features = _size(in_features, "Linear", "in_features")
        out_features = _size(out_features, "Linear", "out_features")
        dt = as_dtype(dtype) or _t._DEFAULT_DTYPE[0]
        b = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), b, dt, device)
        self.bias = _uniform((out_features,), b, dt, device) if bias else None

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features,
                                                             self.bias is not None)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        n = _last_dim_size(normalized_shape, "LayerNorm")
        dt = as_dtype(dtype) or _t._DEFAULT_DTYPE[0]
        self.normalized_shape, self.eps, self.elementwise_affine = (n,), eps, bool(elementwise_affine)
        self.weight = ones(n, dtype=dt, device=device, requires_grad=True) if elementwise_affine else None
        self.bias = zeros(n, dtype=dt, device=device, requires_grad=True) if elementwise_affine else None

    def forward(self, x):
        return functional.layer_norm(x, None, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "%s, eps=%s, elementwise_affine=%s" % (self.normalized_shape, self.eps,
                                                      self.elementwise_affine)


class RMSNorm(Module):
    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__()
        dim = _last_dim_size(dim, "RMSNorm")
        self.normalized_shape, self.eps, self.elementwise_affine = (dim,), eps, True
        self.weight = ones(dim, dtype=as_dtype(dtype) or float32, device=device, requires_grad=True)

    def forward(self, x):
        return functional.rms_norm(x, None, self.weight, self.eps)

    def extra_repr(self):
        return "%s, eps=%s, elementwise_affine=%s" % (self.normalized_shape, self.eps,
                                                      self.elementwise_affine)


class GPT(Module):
    """The C library's GPT-2 style model (ag_gpt_init/ag_gpt_forward): tied
    head by default, GPT-2 init. forward(idx) takes int32 (or int64, cast)
    token ids [B, T] and returns logits [B, T, vocab_size]. Its parameters are
    the C model's own tensors ("wte.weight", "h.0.attn.qkv.weight", ...), so
    to() refuses to move or cast them: pass device= and dtype= instead."""
    _c_model = True

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout=0.0,
                 untied_head=False, checkpoint=False, device=None, dtype=None):
        from ctypes import byref
        from ._lib import lib, check, Gpt, GptConfig
        from ._tensor import as_device, _wrap
        super().__init__()
        cfg = GptConfig(_int_arg(vocab_size, "GPT", "vocab_size"), _int_arg(block_size, "GPT", "block_size"),
                        _int_arg(n_layer, "GPT", "n_layer"), _int_arg(n_embd, "GPT", "n_embd"),
                        _c_int_arg(n_head, "GPT", "n_head"), float(dropout), bool(checkpoint),
                        bool(untied_head))
        m = Gpt()
        check(lib.ag_gpt_init(byref(m), byref(cfg), as_device(device)._d,
                              (as_dtype(dtype) or float32).code, None))
        object.__setattr__(self, "_m", m)
        pl = m.params
        if pl.count < 2 + n_layer:  # the mirrored struct layout is checked here
            lib.ag_gpt_free(byref(m))
            raise RuntimeError("anygrad.nn.GPT: unexpected parameter list from ag_gpt_init")
        for i in range(pl.count):
            # a new reference for Python; the C model keeps its own
            t = _wrap(lib.ag_tensor_retain(pl.tensors[i]))
            self._parameters[pl.names[i].decode()] = t

    def forward(self, idx, generator=None):
        from ctypes import byref
        from ._lib import lib
        from ._tensor import _wrap, int32
        if _tensor_in(idx, "GPT.forward", "idx").dtype is not int32:
            idx = idx.to(int32)
        return _wrap(lib.ag_gpt_forward(byref(self._m), idx._handle, self.training,
                                        _gen(generator, "GPT.forward")), "GPT.forward")

    def __del__(self, _free=lib.ag_gpt_free, _byref=byref):
        m = self.__dict__.pop("_m", None)
        if m is not None:
            _free(_byref(m))


class Llama(Module):
    """The C library's Llama-style model (ag_llama_init/ag_llama_forward):
    RMSNorm, rotary positions, SwiGLU, grouped-query attention (fused where
    the device has the kernel), no biases, Hugging Face's init and names
    ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
    ...; "lm_head.weight" only when untied). forward(idx) takes int32 or
    int64 token ids [B, T], T <= max_seq_len, and returns logits
    [B, T, vocab_size]. Zero for n_kv_heads, hidden_dim, multiple_of,
    rope_theta or norm_eps selects the C default (n_heads, 8*dim/3 rounded
    up to 256, 256, 10000, 1e-5). save_pretrained/load_pretrained read and
    write a safetensors file with those names, as transformers does. Its
    parameters are the C model's tensors: to() refuses to move or cast them
    (pass device= and dtype=)."""
    _c_model = True

    def __init__(self, vocab_size, dim, n_layers, n_heads, max_seq_len, n_kv_heads=0,
                 hidden_dim=0, multiple_of=0, rope_theta=0.0, norm_eps=0.0, untied_head=False,
                 checkpoint=False, device=None, dtype=None, generator=None):
        from ._lib import LlamaConfig, Llama as _CLlama
        from ._tensor import as_device
        super().__init__()
        i64, i32 = _int_arg, _c_int_arg
        cfg = LlamaConfig(i64(vocab_size, "Llama", "vocab_size"), i64(dim, "Llama", "dim"),
                          i64(n_layers, "Llama", "n_layers"), i32(n_heads, "Llama", "n_heads"),
                          i32(n_kv_heads, "Llama", "n_kv_heads"), i64(hidden_dim, "Llama", "hidden_dim"),
                          i64(multiple_of, "Llama", "multiple_of"), i64(max_seq_len, "Llama", "max_seq_len"),
                          float(rope_theta), float(norm_eps), bool(untied_head), bool(checkpoint))
        m = _CLlama()
        check(lib.ag_llama_init(byref(m), byref(cfg), as_device(device)._d,
                                (as_dtype(dtype) or float32).code,
                                _gen(generator, "Llama")))
        self._adopt(m, 2 + 9 * int(n_layers) + (1 if untied_head else 0))

    def _adopt(self, m, want):
        from ._tensor import _wrap
        object.__setattr__(self, "_m", m)
        pl = m.params
        if pl.count != want or pl.names[0] != b"model.embed_tokens.weight":
            lib.ag_llama_free(byref(m))  # the mirrored struct layout is checked here
            object.__setattr__(self, "_m", None)
            raise RuntimeError("anygrad.nn.Llama: unexpected parameter list from the C library")
        for i in range(pl.count):
            self._parameters[pl.names[i].decode()] = _wrap(lib.ag_tensor_retain(pl.tensors[i]))

    @property
    def config(self):
        c = self._m.cfg
        return {f: getattr(c, f) for f, _ in c._fields_}

    def forward(self, idx, generator=None):
        if not isinstance(idx, Tensor):
            raise TypeError("anygrad.nn.Llama: idx must be a tensor of token ids, got %s"
                            % type(idx).__name__)
        h = lib.ag_llama_forward(byref(self._m), idx._handle, self.training,
                                 _gen(generator, "Llama.forward"))
        if not h:
            raise_last("Llama.forward")
        t = Tensor.__new__(Tensor)
        t._h = h
        return t

    def save_pretrained(self, path, tokenizer=None):
        """A folder in the Hugging Face layout (config.json, model.safetensors,
        generation_config.json; with tokenizer, a path to an anygrad .bpe file
        or a tokenizer.json, also tokenizer.json and tokenizer_config.json):
        transformers' AutoModelForCausalLM.from_pretrained reads it. A path
        ending in .safetensors writes that one weights file instead."""
        from ._hf import save_pretrained
        save_pretrained(self, path, tokenizer)

    def load_pretrained(self, path):
        """Load the weights of a folder written by save_pretrained or by
        transformers (its config must be this model's), or of one
        .safetensors file, into this model."""
        from ._hf import load_pretrained
        load_pretrained(self, path)
        return self

    @classmethod
    def from_pretrained(cls, path, device=None):
        """A new model from a Hugging Face folder, in the dtype of its
        weights (f32, f16 or bf16), on device."""
        from ._hf import from_pretrained
        return from_pretrained(cls, path, device)

    def __del__(self, _free=lib.ag_llama_free, _byref=byref):
        m = self.__dict__.pop("_m", None)
        if m is not None:
            _free(_byref(m))


# containers, activations, convolutions, norms, pools, dropout, embedding, losses
from ._nn_extra import *  # noqa: F401,F403,E402

# `import anygrad.nn.functional as F`, as torch's habit (nn is a module, not a package)
sys.modules.setdefault(__name__ + ".functional", functional)
from ._transformer import MultiheadAttention, TransformerEncoderLayer, TransformerEncoder  # noqa: E402,F401

# anygrad.nn.init and anygrad.nn.utils (also importable by those names)
from . import init, nn_utils as utils  # noqa: E402
sys.modules[__name__ + ".init"] = init
sys.modules[__name__ + ".utils"] = utils
