"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder with
torch 1.13's arguments, parameter names, shapes and results. The attention runs on
the fused ag_scaled_dot_product_attention when no weights are asked for, and on the
composition (matmul, softmax, dropout, matmul) when they are (docs/python.md)."""
import collections
import math
import numbers

from . import functional as F
from ._tensor import Tensor, no_grad, zeros, randn, as_dtype, float32, bool_, uint8
from ._ops import matmul, softmax, cat
from .nn import Module, Linear, LayerNorm, Dropout, _size, _uniform

_FN = "MultiheadAttention"


def _check(cond, msg):
    """torch checks these arguments with assert: the same AssertionError, but
    raised explicitly so that python -O keeps the check."""
    if not cond:
        raise AssertionError(msg)


def _tensor_arg(x, fn, arg, optional=False):
    if x is None and optional:
        return None
    if not isinstance(x, Tensor):
        raise TypeError("%s(): argument '%s' must be Tensor%s, not %s"
                        % (fn, arg, " or None" if optional else "", type(x).__name__))
    return x


def _xavier_uniform(shape, dt, device):
    fan_out, fan_in = shape[0], shape[1]
    return _uniform(shape, math.sqrt(6.0 / (fan_in + fan_out)), dt, device)


def _xavier_normal(shape, dt, device):
    # torch's fans of [1, 1, E]: fan_in = size(1) * E, fan_out = size(0) * E
    rf = 1
    for s in shape[2:]:
        rf *= s
    std = math.sqrt(2.0 / (shape[0] * rf + shape[1] * rf))
    with no_grad():
        t = (randn(*shape, dtype=float32, device=device) * std)
        t = (t if dt is float32 else t.to(dt)).contiguous().detach()
    t.requires_grad = True
    return t


def _zeros_param(n, dt, device):
    return zeros(n, dtype=dt, device=device, requires_grad=True)


def _additive(mask, dt, name):
    """A bool mask as torch reads it (True blocks: -inf), a float one added as it is;
    uint8 as bool (torch 1.13 warns and converts). In q's dtype, for the fused op."""
    if mask.dtype is bool_ or mask.dtype is uint8:
        b = mask if mask.dtype is bool_ else mask.bool()
        return zeros(*mask.shape, dtype=dt, device=mask.device).masked_fill(b, -math.inf)
    _check(mask.dtype.is_floating_point,
           "Only float, byte, and bool types are supported for %s, not %s" % (name, mask.dtype))
    return mask if mask.dtype is dt else mask.to(dt)


def _pad_key(mask):
    """One more key (bias_k, a zero key) that nothing blocks: a 0 column at the end."""
    if mask is None:
        return None
    z = zeros(*(tuple(mask.shape[:-1]) + (1,)), dtype=mask.dtype, device=mask.device)
    return cat([mask, z], -1)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: in_proj_weight [3E, E] (q_proj_weight [E, E],
    k_proj_weight [E, kdim], v_proj_weight [E, vdim] when kdim or vdim differs from E),
    in_proj_bias [3E], out_proj a Linear(E, E); bias_k, bias_v [1, 1, E] with
    add_bias_kv. forward returns (output, weights or None)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        embed_dim = _size(embed_dim, _FN, "embed_dim")
        num_heads = _size(num_heads, _FN, "num_heads")
        kdim = embed_dim if kdim is None else _size(kdim, _FN, "kdim")
        vdim = embed_dim if vdim is None else _size(vdim, _FN, "vdim")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise TypeError("%s(): argument 'dropout' must be float, not %s" % (_FN, type(dropout).__name__))
        dropout = float(dropout)
        if not 0.0 <= dropout <= 1.0:
            raise ValueError("%s(): dropout probability has to be between 0 and 1, but got %r"
                             % (_FN, dropout))
        if num_heads == 0:
            raise ZeroDivisionError("%s(): num_heads must be positive, got 0" % _FN)
        self.embed_dim, self.kdim, self.vdim = embed_dim, kdim, vdim
        self._qkv_same_embed_dim = kdim == embed_dim and vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = bool(batch_first)
        self.head_dim = embed_dim // num_heads
        _check(self.head_dim * num_heads == embed_dim, "embed_dim must be divisible by num_heads")
        dt = as_dtype(dtype) or float32
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _xavier_uniform((3 * embed_dim, embed_dim), dt, device)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight = _xavier_uniform((embed_dim, embed_dim), dt, device)
            self.k_proj_weight = _xavier_uniform((embed_dim, kdim), dt, device)
            self.v_proj_weight = _xavier_uniform((embed_dim, vdim), dt, device)
            self.in_proj_weight = None
        self.in_proj_bias = _zeros_param(3 * embed_dim, dt, device) if bias else None
        if add_bias_kv:
            self.bias_k = _xavier_normal((1, 1, embed_dim), dt, device)
            self.bias_v = _xavier_normal((1, 1, embed_dim), dt, device)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = bool(add_zero_attn)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dt)
        if bias:
            self.out_proj.bias = _zeros_param(embed_dim, dt, device)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """torch 1.13's forward. is_causal is torch 2's hint that attn_mask is the causal
        mask (it needs attn_mask, as there): the fused op then applies the causal rule
        itself and skips the blocked key tiles; weights, when asked for, use attn_mask."""
        fn = "MultiheadAttention.forward"
        query = _tensor_arg(query, fn, "query")
        key = _tensor_arg(key, fn, "key")
        value = _tensor_arg(value, fn, "value")
        kpm = _tensor_arg(key_padding_mask, fn, "key_padding_mask", True)
        attn_mask = _tensor_arg(attn_mask, fn, "attn_mask", True)
        if kpm is not None:
            _check(kpm.dtype is bool_ or kpm.dtype.is_floating_point,
                   "only bool and floating types of key_padding_mask are supported")
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                               "Transformer module method `generate_square_subsequent_mask` to create "
                               "this mask.")
        batched = _shape_check(query, key, value, kpm, attn_mask, self.num_heads)
        self_attn, kv_same = query is key and key is value, key is value
        if not batched:  # [L, E] as a batch of one, batch first
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if kpm is not None:
                kpm = kpm.unsqueeze(0)
        bf = self.batch_first or not batched
        bdim, sdim = (0, 1) if bf else (1, 0)
        B, L, E = query.shape[bdim], query.shape[sdim], query.shape[2]
        S = key.shape[sdim]
        H, D = self.num_heads, self.head_dim
        _check(E == self.embed_dim,
               "was expecting embedding dimension of %d, but got %d" % (self.embed_dim, E))
        if self._qkv_same_embed_dim:
            _check(tuple(key.shape) == tuple(value.shape),
                   "key shape %s does not match value shape %s" % (tuple(key.shape), tuple(value.shape)))
        else:
            _check(tuple(key.shape[:2]) == tuple(value.shape[:2]),
                   "key's sequence and batch dims %s do not match value's %s"
                   % (tuple(key.shape[:2]), tuple(value.shape[:2])))
        q, k, v = self._project(query, key, value, self_attn, kv_same)
        dt = q.dtype
        # one additive mask broadcasting to [B, H, L, S]
        if attn_mask is not None:
            if attn_mask.dtype is not bool_ and attn_mask.dtype is not uint8:
                _check(attn_mask.dtype.is_floating_point, "Only float, byte, and bool types are supported "
                       "for attn_mask, not %s" % attn_mask.dtype)
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (L, S):
                    raise RuntimeError("The shape of the 2D attn_mask is %s, but should be %s."
                                       % (_sz(attn_mask.shape), _sz((L, S))))
            elif attn_mask.ndim == 3:
                if tuple(attn_mask.shape) != (B * H, L, S):
                    raise RuntimeError("The shape of the 3D attn_mask is %s, but should be %s."
                                       % (_sz(attn_mask.shape), _sz((B * H, L, S))))
            else:
                raise RuntimeError("attn_mask's dimension %d is not supported" % attn_mask.ndim)
        if kpm is not None:
            _check(tuple(kpm.shape) == (B, S),
                   "expecting key_padding_mask shape of %s, but got %s" % ((B, S), _sz(kpm.shape)))
        am = None
        if attn_mask is not None:
            am = _additive(attn_mask, dt, "attn_mask")
            if am.ndim == 3:
                am = am.reshape(B, H, L, S)
        pm = None if kpm is None else _additive(kpm, dt, "key_padding_mask").reshape(B, 1, 1, S)
        if self.bias_k is not None and self.bias_v is not None:
            shp = (B, 1, E) if bf else (1, B, E)
            k = cat([k, self.bias_k.reshape(1, 1, E).expand(*shp)], sdim)
            v = cat([v, self.bias_v.reshape(1, 1, E).expand(*shp)], sdim)
            am, pm = _pad_key(am), _pad_key(pm)
            S += 1
        else:
            _check(self.bias_k is None and self.bias_v is None, "bias_k and bias_v must be set together")
        # heads: [B, H, L, D]
        perm = (0, 2, 1, 3) if bf else (1, 2, 0, 3)
        q = q.reshape(*(q.shape[:2] + (H, D))).permute(*perm)
        k = k.reshape(*(k.shape[:2] + (H, D))).permute(*perm)
        v = v.reshape(*(v.shape[:2] + (H, D))).permute(*perm)
        if self.add_zero_attn:
            z = zeros(B, H, 1, D, dtype=dt, device=k.device)
            k, v = cat([k, z], 2), cat([v, z], 2)
            am, pm = _pad_key(am), _pad_key(pm)
            S += 1
        p = self.dropout if self.training else 0.0
        if need_weights:
            mask = am if pm is None else (pm if am is None else am + pm)
            s = matmul(q / math.sqrt(D), k.transpose(-2, -1))
            if mask is not None:
                s = s + mask
            w = softmax(s, -1)
            if p > 0.0:
                w = F.dropout(w, p, True)
            o = matmul(w, v)
        else:
            causal = bool(is_causal)
            mask = pm if causal else (am if pm is None else (pm if am is None else am + pm))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
            w = None
        # [B, H, L, D] -> the input's layout, then out_proj
        o = o.permute(*((0, 2, 1, 3) if bf else (2, 0, 1, 3)))
        o = o.reshape(*(o.shape[:2] + (E,)))
        o = self.out_proj(o)
        if not batched:
            o = o.squeeze(0)
        if w is not None:
            if average_attn_weights:
                w = w.sum(dim=1) / H
            if not batched:
                w = w.squeeze(0)
        return o, w

    def _project(self, query, key, value, self_attn, kv_same):
        E, b = self.embed_dim, self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[0:E], b[E:2 * E], b[2 * E:])
        if not self._qkv_same_embed_dim:
            for w, x, n in ((self.k_proj_weight, key, "key"), (self.v_proj_weight, value, "value")):
                _check(x.shape[-1] == w.shape[1], "expecting %s weights shape of %s, but got %s"
                       % (n, (E, x.shape[-1]), _sz(w.shape)))
            return (F.linear(query, self.q_proj_weight, bq), F.linear(key, self.k_proj_weight, bk),
                    F.linear(value, self.v_proj_weight, bv))
        w = self.in_proj_weight
        if self_attn:  # one matmul for the three, as torch
            qkv = F.linear(query, w, b)
            return qkv[..., 0:E], qkv[..., E:2 * E], qkv[..., 2 * E:]
        if kv_same:
            kv = F.linear(key, w[E:], None if b is None else b[E:])
            return F.linear(query, w[0:E], bq), kv[..., 0:E], kv[..., E:]
        return (F.linear(query, w[0:E], bq), F.linear(key, w[E:2 * E], bk),
                F.linear(value, w[2 * E:], bv))


def _sz(shape):
    return "torch.Size([%s])" % ", ".join(str(int(s)) for s in shape)


def _shape_check(query, key, value, kpm, attn_mask, num_heads):
    """torch's _mha_shape_check: True for batched (3-D) input, False for 2-D."""
    if query.ndim == 3:
        _check(key.ndim == 3 and value.ndim == 3,
               "For batched (3-D) `query`, expected `key` and `value` to be 3-D but found %d-D and %d-D "
               "tensors respectively" % (key.ndim, value.ndim))
        if kpm is not None:
            _check(kpm.ndim == 2, "For batched (3-D) `query`, expected `key_padding_mask` to be `None` "
                   "or 2-D but found %d-D tensor instead" % kpm.ndim)
        if attn_mask is not None:
            _check(attn_mask.ndim in (2, 3), "For batched (3-D) `query`, expected `attn_mask` to be `None`, "
                   "2-D or 3-D but found %d-D tensor instead" % attn_mask.ndim)
        return True
    if query.ndim == 2:
        _check(key.ndim == 2 and value.ndim == 2,
               "For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found %d-D and %d-D "
               "tensors respectively" % (key.ndim, value.ndim))
        if kpm is not None:
            _check(kpm.ndim == 1, "For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or "
                   "1-D but found %d-D tensor instead" % kpm.ndim)
        if attn_mask is not None:
            _check(attn_mask.ndim in (2, 3), "For unbatched (2-D) `query`, expected `attn_mask` to be "
                   "`None`, 2-D or 3-D but found %d-D tensor instead" % attn_mask.ndim)
            if attn_mask.ndim == 3:
                want = (num_heads, query.shape[0], key.shape[0])
                _check(tuple(attn_mask.shape) == want, "Expected `attn_mask` shape to be %s but got %s"
                       % (want, _sz(attn_mask.shape)))
        return False
    raise AssertionError("query should be unbatched 2D or batched 3D tensor but received %d-D query tensor"
                         % query.ndim)


def _activation(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu_erf  # torch's F.gelu: the erf form
        raise RuntimeError("activation should be relu/gelu, not %s" % activation)
    if not callable(activation):
        raise TypeError("TransformerEncoderLayer(): argument 'activation' must be str or callable, not %s"
                        % type(activation).__name__)
    return activation


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer: self_attn (MultiheadAttention), linear1,
    dropout, linear2, norm1, norm2, dropout1, dropout2; post-norm by default,
    pre-norm with norm_first=True. The self-attention asks for no weights, so it
    runs on the fused attention."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, device=None, dtype=None):
        super().__init__()
        fn = "TransformerEncoderLayer"
        d_model = _size(d_model, fn, "d_model")
        dim_feedforward = _size(dim_feedforward, fn, "dim_feedforward")
        act = _activation(activation)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first,
                                            device=device, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, device=device, dtype=dtype)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, device=device, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, device=device, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        relu_cls, gelu_cls = _act_classes()
        if act is F.relu or isinstance(act, relu_cls):
            self.activation_relu_or_gelu = 1
        elif act is F.gelu_erf or isinstance(act, gelu_cls):
            self.activation_relu_or_gelu = 2
        else:
            self.activation_relu_or_gelu = 0
        self.activation = act

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        fn = "TransformerEncoderLayer.forward"
        src = _tensor_arg(src, fn, "src")
        kpm = _tensor_arg(src_key_padding_mask, fn, "src_key_padding_mask", True)
        if kpm is not None:
            _check(kpm.dtype is bool_ or kpm.dtype.is_floating_point,
                   "only bool and floating types of key_padding_mask are supported")
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, kpm, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, kpm, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


def _act_classes():
    from . import nn
    return nn.ReLU, nn.GELU


def _clone(obj, memo):
    """A copy of a module with its own parameters and buffers (torch's deepcopy in
    _get_clones): tensors are cloned (leaves that keep requires_grad), modules copied
    recursively, other attributes shared (activation functions, numbers)."""
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, Tensor):
        with no_grad():
            c = obj.detach().clone()
        if obj.requires_grad:
            c.requires_grad = True
        memo[id(obj)] = c
        return c
    if getattr(obj, "_c_model", False):
        raise RuntimeError("anygrad.nn.%s: a C model cannot be cloned" % type(obj).__name__)
    new = object.__new__(type(obj))
    memo[id(obj)] = new
    for k, val in obj.__dict__.items():
        if k in ("_parameters", "_buffers", "_modules"):
            val = collections.OrderedDict((n, None if t is None else _clone(t, memo))
                                          for n, t in val.items())
        object.__setattr__(new, k, val)
    return new


class _Layers(Module):
    """The clones of TransformerEncoder.layers, named "0", "1", ... as in torch's ModuleList."""

    def __init__(self, mods):
        super().__init__()
        for i, m in enumerate(mods):
            setattr(self, str(i), m)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(list(self._modules.values()))


def _layer_list(mods):
    from . import nn
    ml = getattr(nn, "ModuleList", None)
    return ml(mods) if ml is not None else _Layers(mods)


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: num_layers copies of encoder_layer (layers.0, ...,
    each with its own parameters) and an optional final norm. enable_nested_tensor
    and mask_check are accepted and change nothing (there is no nested-tensor path)."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        fn = "TransformerEncoder"
        if not isinstance(encoder_layer, Module):
            raise TypeError("%s(): argument 'encoder_layer' must be Module, not %s"
                            % (fn, type(encoder_layer).__name__))
        if norm is not None and not isinstance(norm, Module) and not callable(norm):
            raise TypeError("%s(): argument 'norm' must be Module or None, not %s"
                            % (fn, type(norm).__name__))
        num_layers = _size(num_layers, fn, "num_layers")
        self.layers = _layer_list([_clone(encoder_layer, {}) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        fn = "TransformerEncoder.forward"
        src = _tensor_arg(src, fn, "src")
        kpm = _tensor_arg(src_key_padding_mask, fn, "src_key_padding_mask", True)
        if kpm is not None:
            _check(kpm.dtype is bool_ or kpm.dtype.is_floating_point,
                   "only bool and floating types of key_padding_mask are supported")
        out = src
        for mod in self.layers:
            if is_causal:
                out = mod(out, src_mask=mask, src_key_padding_mask=kpm, is_causal=True)
            else:
                out = mod(out, src_mask=mask, src_key_padding_mask=kpm)
        if self.norm is not None:
            out = self.norm(out)
        return out
