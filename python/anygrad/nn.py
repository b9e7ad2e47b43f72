"""anygrad.nn: modules with PyTorch's names, parameters() and state_dict().

Layers are written over the C ops (anygrad.nn.functional), so the Python
module tree owns its parameters as ordinary Tensors."""
import collections
import collections.abc
import math
import numbers
import os
from ctypes import byref

from ._lib import lib, check, raise_last

from . import functional
from . import functional as F  # noqa: F401
from ._tensor import (Tensor, rand, ones, zeros, randn, no_grad, as_dtype, float32, as_device, _int_arg,
                      _c_int_arg, _tensor_in, _gen, _I64_MAX)


def _size(v, fn, arg):
    """A layer size: an int >= 0 (a bool, a float or an int outside int64 is
    a TypeError, as torch's size tuples; a negative one a ValueError)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s(): argument '%s' must be int, not %s" % (fn, arg, type(v).__name__))
    v = int(v)
    if v > _I64_MAX:
        raise TypeError("%s(): argument '%s' is %d, outside int64" % (fn, arg, v))
    if v < 0:
        raise ValueError("%s(): argument '%s' must be >= 0, got %d" % (fn, arg, v))
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
    """Marker only: anygrad.nn.Parameter(t) returns t as a leaf that requires grad."""

    def __new__(cls, t, requires_grad=True):
        t = t.detach()
        if requires_grad:
            t.requires_grad = True
        return t


def _uniform(shape, bound, dtype, device):
    with no_grad():
        t = (rand(*shape, dtype=float32, device=device) * (2 * bound) - bound)
        if dtype is not float32:
            t = t.to(dtype)
        t = t.contiguous().detach()
    t.requires_grad = True
    return t


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise RuntimeError("anygrad.nn: call super().__init__() first")
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        elif isinstance(value, Tensor):
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for d in ("_parameters", "_buffers", "_modules"):
            dd = self.__dict__.get(d)
            if dd is not None and name in dd:
                return dd[name]
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

    def register_buffer(self, name, t):
        self._buffers[name] = t

    def named_parameters(self, prefix=""):
        for n, p in self._parameters.items():
            yield prefix + n, p
        for mn, m in self._modules.items():
            yield from m.named_parameters(prefix + mn + ".")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, prefix=""):
        for n, b in self._buffers.items():
            yield prefix + n, b
        for mn, m in self._modules.items():
            yield from m.named_buffers(prefix + mn + ".")

    def children(self):
        return list(self._modules.values())

    def modules(self):
        yield self
        for m in self._modules.values():
            yield from m.modules()

    def state_dict(self):
        d = collections.OrderedDict(self.named_parameters())
        d.update(self.named_buffers())
        return d

    def load_state_dict(self, sd, strict=True):
        if not isinstance(sd, collections.abc.Mapping):
            raise TypeError("load_state_dict(): argument 'state_dict' must be a dict, not %s"
                            % type(sd).__name__)
        for k, v in sd.items():
            if not isinstance(v, Tensor):
                raise TypeError("load_state_dict(): state_dict[%r] must be Tensor, not %s"
                                % (k, type(v).__name__))
        own = self.state_dict()
        missing = [k for k in own if k not in sd]
        unexpected = [k for k in sd if k not in own]
        if strict and (missing or unexpected):
            raise KeyError("anygrad.nn: state_dict mismatch: missing %s, unexpected %s"
                           % (missing, unexpected))
        with no_grad():
            for k, t in own.items():
                if k in sd:
                    src = sd[k]
                    if tuple(src.shape) != tuple(t.shape):
                        raise ValueError("anygrad.nn: %s has shape %s, the state_dict %s"
                                         % (k, tuple(t.shape), tuple(src.shape)))
                    t.copy_(src.to(device=t.device, dtype=t.dtype))
        return missing, unexpected

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
                    if is_param or t.requires_grad:
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

    def __call__(self, *a, **k):
        return self.forward(*a, **k)

    def __repr__(self):
        inner = "".join("\n  (%s): %s" % (k, repr(m).replace("\n", "\n  "))
                        for k, m in self._modules.items())
        return "%s(%s%s)" % (type(self).__name__, self.extra_repr(), inner + "\n" if inner else "")

    def extra_repr(self):
        return ""


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        in_features = _size(in_features, "Linear", "in_features")
        out_features = _size(out_features, "Linear", "out_features")
        dt = as_dtype(dtype) or float32
        b = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), b, dt, device)
        self.bias = _uniform((out_features,), b, dt, device) if bias else None

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d" % (self.in_features, self.out_features)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        num_embeddings = _size(num_embeddings, "Embedding", "num_embeddings")
        embedding_dim = _size(embedding_dim, "Embedding", "embedding_dim")
        w = randn(num_embeddings, embedding_dim, dtype=as_dtype(dtype) or float32, device=device)
        w.requires_grad = True
        self.weight = w

    def forward(self, idx):
        return functional.embedding(idx, self.weight)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        n = _last_dim_size(normalized_shape, "LayerNorm")
        dt = as_dtype(dtype) or float32
        self.eps = eps
        self.weight = ones(n, dtype=dt, device=device, requires_grad=True) if elementwise_affine else None
        self.bias = zeros(n, dtype=dt, device=device, requires_grad=True) if elementwise_affine else None

    def forward(self, x):
        return functional.layer_norm(x, None, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__()
        dim = _last_dim_size(dim, "RMSNorm")
        self.eps = eps
        self.weight = ones(dim, dtype=as_dtype(dtype) or float32, device=device, requires_grad=True)

    def forward(self, x):
        return functional.rms_norm(x, None, self.weight, self.eps)


class Conv2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, device=None, dtype=None):
        super().__init__()
        in_channels = _size(in_channels, "Conv2d", "in_channels")
        out_channels = _size(out_channels, "Conv2d", "out_channels")
        kh, kw = functional._two(kernel_size, "kernel_size", "Conv2d")
        for v, n in ((stride, "stride"), (padding, "padding"), (dilation, "dilation")):
            functional._two(v, n, "Conv2d")  # refused here, not at the first forward
        groups = _c_int_arg(groups, "Conv2d", "groups")
        if groups <= 0:
            raise ValueError("Conv2d(): groups must be a positive integer, got %d" % groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError("Conv2d(): in_channels (%d) and out_channels (%d) must be divisible by groups "
                             "(%d)" % (in_channels, out_channels, groups))
        dt = as_dtype(dtype) or float32
        fan_in = in_channels // groups * kh * kw
        b = 1.0 / math.sqrt(fan_in)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = _uniform((out_channels, in_channels // groups, kh, kw), b, dt, device)
        self.bias = _uniform((out_channels,), b, dt, device) if bias else None

    def forward(self, x):
        return functional.conv2d(x, self.weight, self.bias, self.stride, self.padding,
                                 self.dilation, self.groups)


class BatchNorm2d(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, device=None, dtype=None):
        super().__init__()
        num_features = _size(num_features, "BatchNorm2d", "num_features")
        dt = as_dtype(dtype) or float32
        self.eps, self.momentum = eps, momentum
        self.weight = ones(num_features, dtype=dt, device=device, requires_grad=True)
        self.bias = zeros(num_features, dtype=dt, device=device, requires_grad=True)
        self.running_mean = zeros(num_features, dtype=dt, device=device)
        self.running_var = ones(num_features, dtype=dt, device=device)

    def forward(self, x):
        return functional.batch_norm(x, self.running_mean, self.running_var, self.weight,
                                     self.bias, self.training, self.momentum, self.eps)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.k, self.s, self.p = kernel_size, stride, padding

    def forward(self, x):
        return functional.max_pool2d(x, self.k, self.s, self.p)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad=True):
        super().__init__()
        self.k, self.s, self.p, self.c = kernel_size, stride, padding, count_include_pad

    def forward(self, x):
        return functional.avg_pool2d(x, self.k, self.s, self.p, self.c)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return functional.adaptive_avg_pool2d(x, self.output_size)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return functional.dropout(x, self.p, self.training)


class Flatten(Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1)


def _act(name, fn):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x),
                                 "__init__": lambda self, *a, **k: Module.__init__(self)})
    return cls


ReLU = _act("ReLU", functional.relu)
GELU = _act("GELU", functional.gelu_erf)
SiLU = _act("SiLU", functional.silu)
Tanh = _act("Tanh", functional.tanh)
Sigmoid = _act("Sigmoid", functional.sigmoid)


class Sequential(Module):
    def __init__(self, *mods):
        super().__init__()
        for i, m in enumerate(mods):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class CrossEntropyLoss(Module):
    def __init__(self, reduction="mean", ignore_index=-100):
        super().__init__()
        self.reduction, self.ignore_index = reduction, ignore_index

    def forward(self, logits, target):
        return functional.cross_entropy(logits, target, self.reduction, self.ignore_index)


class MSELoss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, a, b):
        return functional.mse_loss(a, b, self.reduction)


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

    def named_parameters(self, prefix=""):
        for n, p in self._parameters.items():
            yield prefix + n, p

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
        from ._tensor import as_device, _wrap
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
        object.__setattr__(self, "_m", m)
        pl = m.params
        want = 2 + 9 * int(n_layers) + (1 if untied_head else 0)
        if pl.count != want or pl.names[0] != b"model.embed_tokens.weight":
            lib.ag_llama_free(byref(m))  # the mirrored struct layout is checked here
            raise RuntimeError("anygrad.nn.Llama: unexpected parameter list from ag_llama_init")
        for i in range(pl.count):
            self._parameters[pl.names[i].decode()] = _wrap(lib.ag_tensor_retain(pl.tensors[i]))

    @property
    def config(self):
        c = self._m.cfg
        return {f: getattr(c, f) for f, _ in c._fields_}

    def named_parameters(self, prefix=""):
        for n, p in self._parameters.items():
            yield prefix + n, p

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

    def save_pretrained(self, path):
        check(lib.ag_llama_save(byref(self._m), os.fsencode(path)))

    def load_pretrained(self, path):
        check(lib.ag_llama_load(byref(self._m), os.fsencode(path)))
        return self

    def __del__(self, _free=lib.ag_llama_free, _byref=byref):
        m = self.__dict__.pop("_m", None)
        if m is not None:
            _free(_byref(m))


from ._transformer import MultiheadAttention, TransformerEncoderLayer, TransformerEncoder  # noqa: E402,F401
