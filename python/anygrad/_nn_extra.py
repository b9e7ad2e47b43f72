"""anygrad.nn modules with torch 1.13's constructors, parameter and buffer
names (state_dict keys equal torch's), initialisation and reprs: the
containers, the activations, Conv1d/Conv2d, BatchNorm1d/2d, GroupNorm,
pooling, dropout, Embedding, Flatten and the loss modules."""
import collections
import collections.abc
import math
import numbers
import operator

from . import functional as F
from ._tensor import Tensor, ones, zeros, randn, no_grad, as_dtype, float32, int64, tensor, _c_int_arg
from .nn import Module, Parameter, _size, _uniform

__all__ = ["Identity", "Flatten", "Unflatten", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "CELU",
           "SELU", "Softplus", "Mish", "Hardswish", "Hardsigmoid", "Hardtanh", "Softsign", "Tanhshrink",
           "LogSigmoid", "Softmax", "LogSoftmax", "Softmin", "Conv1d", "Conv2d", "BatchNorm1d", "BatchNorm2d",
           "GroupNorm", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Upsample", "Dropout", "Dropout1d",
           "Dropout2d", "Embedding", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
           "HuberLoss", "BCELoss", "BCEWithLogitsLoss", "MaxPool1d", "AvgPool1d", "AdaptiveAvgPool1d",
           "PReLU", "CosineSimilarity", "KLDivLoss"]


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        nd = max(input.ndim, 1)
        s, e = self.start_dim % nd, self.end_dim % nd
        shape = list(input.shape)
        if input.ndim == 0:
            return input.reshape(1)
        n = 1
        for v in shape[s:e + 1]:
            n *= v
        return input.reshape(*(shape[:s] + [n] + shape[e + 1:]))

    def extra_repr(self):
        return "start_dim=%s, end_dim=%s" % (self.start_dim, self.end_dim)


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        shape = list(input.shape)
        d = self.dim % len(shape)
        return input.reshape(*(shape[:d] + list(self.unflattened_size) + shape[d + 1:]))

    def extra_repr(self):
        return "dim=%s, unflattened_size=%s" % (self.dim, self.unflattened_size)


# ---- containers --------------------------------------------------------------------------

def _abs_index(idx, n):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError("index %d is out of range" % idx)
    return idx % n


class Sequential(Module):
    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for k, m in args[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def _key(self, idx):
        return list(self._modules)[_abs_index(idx, len(self._modules))]

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(collections.OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._key(idx)]

    def __setitem__(self, idx, module):
        self.add_module(self._key(idx), module)

    def __delitem__(self, idx):
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [self._key(idx)]
        for k in keys:
            del self._modules[k]
        # torch renumbers what is left
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but %s is given."
                             % type(other))
        ret = Sequential()
        for m in list(self) + list(other):
            ret.append(m)
        return ret

    def __iadd__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but %s is given."
                             % type(other))
        for m in list(other):
            self.append(m)
        return self

    def __mul__(self, other):
        if not isinstance(other, int) or isinstance(other, bool):
            raise TypeError("unsupported operand type(s) for *: %s and %s" % (type(self), type(other)))
        if other <= 0:
            raise ValueError("Non-positive multiplication factor %d for %s" % (other, type(self)))
        ret = Sequential()
        for _ in range(other):
            for m in self:
                ret.append(m)
        return ret

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index, module):
        if not isinstance(module, Module):
            raise AssertionError("module should be of type: %s" % Module)
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError("Index out of range: %d" % index)
        if index < 0:
            index += n
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m
        return self

    def extend(self, sequential):
        for m in sequential:
            self.append(m)
        return self

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_abs_index(idx, len(self._modules)))]

    def __setitem__(self, idx, module):
        self.add_module(str(_abs_index(idx, len(self._modules))), module)

    def __delitem__(self, idx):
        if isinstance(idx, slice):
            for k in list(self._modules)[idx]:
                del self._modules[k]
        else:
            del self._modules[str(_abs_index(idx, len(self._modules)))]
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        ret = ModuleList()
        for m in list(self) + list(other):
            ret.append(m)
        return ret

    def insert(self, index, module):
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def extend(self, modules):
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got "
                            + type(modules).__name__)
        off = len(self)
        for i, m in enumerate(modules):
            self.add_module(str(off + i), m)
        return self


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value pairs, but got "
                            + type(modules).__name__)
        if isinstance(modules, (collections.OrderedDict, ModuleDict, collections.abc.Mapping)):
            for k, m in modules.items():
                self[k] = m
        else:
            for j, m in enumerate(modules):
                if not isinstance(m, collections.abc.Iterable):
                    raise TypeError("ModuleDict update sequence element #%d should be Iterable; is %s"
                                    % (j, type(m).__name__))
                if not len(m) == 2:
                    raise ValueError("ModuleDict update sequence element #%d has length %d; 2 is required"
                                     % (j, len(m)))
                self[m[0]] = m[1]


def _as_param(p):
    if p is None or (isinstance(p, Tensor) and p.requires_grad and p.is_leaf):
        return p
    if isinstance(p, Tensor):
        return Parameter(p)
    raise TypeError("cannot assign '%s' object to a parameter (Tensor or None required)" % type(p).__name__)


def _param_line(k, p):
    return "  (%s): Parameter containing: [%s of size %s]" % (
        k, p.dtype, "x".join(str(s) for s in p.shape))


class ParameterList(Module):
    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self._parameters.values())[idx])
        return self._parameters[str(_abs_index(idx, len(self._parameters)))]

    def __setitem__(self, idx, param):
        self.register_parameter(str(_abs_index(idx, len(self._parameters))), _as_param(param))

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __iadd__(self, params):
        return self.extend(params)

    def append(self, value):
        self.register_parameter(str(len(self)), _as_param(value))
        return self

    def extend(self, values):
        if not isinstance(values, collections.abc.Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got "
                            + type(values).__name__)
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return "\n".join(_param_line(k, p) for k, p in self._parameters.items())


class ParameterDict(Module):
    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, param):
        self.register_parameter(key, _as_param(param))

    def __delitem__(self, key):
        del self._parameters[key]

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key):
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def clear(self):
        self._parameters.clear()

    def update(self, parameters):
        items = parameters.items() if isinstance(parameters, collections.abc.Mapping) else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self):
        return "\n".join(_param_line(k, p) for k, p in self._parameters.items())


# ---- activations -------------------------------------------------------------------------

def _inplace_repr(m):
    return "inplace=True" if m.inplace else ""


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return _inplace_repr(self)


class ReLU6(ReLU):
    def forward(self, input):
        return F.relu6(input, inplace=self.inplace)


class SiLU(ReLU):
    def forward(self, input):
        return F.silu(input, inplace=self.inplace)


class SELU(ReLU):
    def forward(self, input):
        return F.selu(input, inplace=self.inplace)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return "approximate=%r" % (self.approximate,)


def _plain(name, fn):
    def forward(self, input):
        return fn(input)
    return type(name, (Module,), {"forward": forward, "__init__": lambda self: Module.__init__(self),
                                  "__module__": __name__})


Tanh = _plain("Tanh", F.tanh)
Sigmoid = _plain("Sigmoid", F.sigmoid)
Mish = _plain("Mish", F.mish)
Hardswish = _plain("Hardswish", F.hardswish)
Hardsigmoid = _plain("Hardsigmoid", F.hardsigmoid)
Softsign = _plain("Softsign", F.softsign)
Tanhshrink = _plain("Tanhshrink", F.tanhshrink)
LogSigmoid = _plain("LogSigmoid", F.logsigmoid)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return "negative_slope=%s%s" % (self.negative_slope, ", inplace=True" if self.inplace else "")


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return "alpha=%s%s" % (self.alpha, ", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Softplus(Module):
    def __init__(self, beta=1, threshold=20):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return "beta=%s, threshold=%s" % (self.beta, self.threshold)


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if max_val <= min_val:
            raise AssertionError("max_val must be larger than min_val")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return "min_val=%s, max_val=%s%s" % (self.min_val, self.max_val,
                                             ", inplace=True" if self.inplace else "")


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return "dim=%s" % (self.dim,)


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)


class Softmin(Softmax):
    def forward(self, input):
        return F.softmin(input, self.dim, _stacklevel=5)


# ---- convolutions ------------------------------------------------------------------------

def _ntuple(v, n, name, fn):
    if isinstance(v, (tuple, list)):
        t = tuple(v)
        if len(t) != n:
            raise ValueError("%s(): %s must be an int or a tuple of %d ints, got %s" % (fn, name, n, v))
    else:
        t = (v,) * n
    for x in t:
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise TypeError("%s(): argument '%s' must be tuple of ints, not %s"
                            % (fn, name, type(x).__name__))
        _c_int_arg(x, fn, name)
    return tuple(int(x) for x in t)


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        fn, n = type(self).__name__, self._n
        in_channels = _size(in_channels, fn, "in_channels")
        out_channels = _size(out_channels, fn, "out_channels")
        if isinstance(groups, bool) or not isinstance(groups, numbers.Integral):
            raise TypeError("%s(): argument 'groups' must be int, not %s" % (fn, type(groups).__name__))
        groups = _c_int_arg(groups, fn, "groups")
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        kernel_size = _ntuple(kernel_size, n, "kernel_size", fn)
        stride = _ntuple(stride, n, "stride", fn)
        dilation = _ntuple(dilation, n, "dilation", fn)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError("Invalid padding string %r, should be one of {'valid', 'same'}" % padding)
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = _ntuple(padding, n, "padding", fn)
        if padding_mode not in _PADDING_MODES:
            raise ValueError("padding_mode must be one of %s, but got padding_mode='%s'"
                             % (list(_PADDING_MODES), padding_mode))
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.transposed, self.output_padding, self.padding_mode = False, (0,) * n, padding_mode
        if isinstance(padding, str):
            self._reversed_padding_repeated_twice = [0, 0] * n
            if padding == "same":
                for d, k, i in zip(dilation, kernel_size, range(n - 1, -1, -1)):
                    tot = d * (k - 1)
                    lo = tot // 2
                    self._reversed_padding_repeated_twice[2 * i] = lo
                    self._reversed_padding_repeated_twice[2 * i + 1] = tot - lo
        else:
            self._reversed_padding_repeated_twice = [p for p in reversed(padding) for _ in range(2)]
        dt = as_dtype(dtype) or float32
        fan_in = in_channels // groups
        for k in kernel_size:
            fan_in *= k
        # kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias the same
        b = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.weight = _uniform((out_channels, in_channels // groups) + kernel_size, b, dt, device)
        if bias:
            self.bias = _uniform((out_channels,), b, dt, device)
        else:
            self.register_parameter("bias", None)

    def _conv(self, input, padding):
        raise NotImplementedError

    def forward(self, input):
        if self.padding_mode != "zeros":
            x = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return self._conv(x, 0)
        return self._conv(input, self.padding)

    def extra_repr(self):
        s = "%d, %d, kernel_size=%s, stride=%s" % (self.in_channels, self.out_channels, self.kernel_size,
                                                   self.stride)
        if self.padding != (0,) * len(self.kernel_size):
            s += ", padding=%s" % (self.padding,)
        if self.dilation != (1,) * len(self.dilation):
            s += ", dilation=%s" % (self.dilation,)
        if self.groups != 1:
            s += ", groups=%d" % self.groups
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode=%s" % self.padding_mode
        return s


class Conv1d(_ConvNd):
    _n = 1

    def _conv(self, input, padding):
        return F.conv1d(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    _n = 2

    def _conv(self, input, padding):
        return F.conv2d(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


# ---- normalisation -----------------------------------------------------------------------

class _BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__()
        fn = type(self).__name__
        num_features = _size(num_features, fn, "num_features")
        dt = as_dtype(dtype) or float32
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = ones(num_features, dtype=dt, device=device, requires_grad=True)
            self.bias = zeros(num_features, dtype=dt, device=device, requires_grad=True)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dt, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dt, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            with no_grad():
                self.weight.fill_(1)
                self.bias.zero_()

    def _check_input_dim(self, input):
        raise NotImplementedError

    def _as4d(self, input):
        return input

    def forward(self, input):
        if not isinstance(input, Tensor):
            raise TypeError("%s.forward(): argument 'input' must be Tensor, not %s"
                            % (type(self).__name__, type(input).__name__))
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative average: reads the count (a sync)
                factor = 1.0 / float(self.num_batches_tracked.item())
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        if bn_training:
            per_channel = input.numel() // max(1, input.shape[1])
            if per_channel <= 1:
                raise ValueError("Expected more than 1 value per channel when training, got input size %s"
                                 % (input.shape,))
        use_stats = not self.training or self.track_running_stats
        x = self._as4d(input)
        y = F.batch_norm(x, self.running_mean if use_stats else None, self.running_var if use_stats else None,
                         self.weight, self.bias, bn_training, factor, self.eps)
        return y.reshape(*input.shape) if x is not input else y

    def extra_repr(self):
        return "%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s" % (
            self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats)


class BatchNorm1d(_BatchNorm):
    """[N, C] or [N, C, L], as torch; run as ag_batch_norm over [N, C, 1, L]."""

    def _check_input_dim(self, input):
        if input.ndim not in (2, 3):
            raise ValueError("expected 2D or 3D input (got %dD input)" % input.ndim)

    def _as4d(self, input):
        if input.ndim == 2:
            return input.reshape(input.shape[0], input.shape[1], 1, 1)
        return input.unsqueeze(2)


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.ndim != 4:
            raise ValueError("expected 4D input (got %dD input)" % input.ndim)


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        num_groups = _size(num_groups, "GroupNorm", "num_groups")
        num_channels = _size(num_channels, "GroupNorm", "num_channels")
        if num_groups == 0 or num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        dt = as_dtype(dtype) or float32
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = ones(num_channels, dtype=dt, device=device, requires_grad=True)
            self.bias = zeros(num_channels, dtype=dt, device=device, requires_grad=True)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "%d, %d, eps=%s, affine=%s" % (self.num_groups, self.num_channels, self.eps, self.affine)


# ---- pooling, upsampling -----------------------------------------------------------------

class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        if dilation != 1 and dilation != (1, 1):
            raise NotImplementedError("MaxPool2d(): dilation other than 1 is not supported")
        if return_indices or ceil_mode:
            raise NotImplementedError("MaxPool2d(): return_indices and ceil_mode are not supported")
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s" % (
            self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        if ceil_mode or divisor_override is not None:
            raise NotImplementedError("AvgPool2d(): ceil_mode and divisor_override are not supported")
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.count_include_pad)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self):
        return "output_size=%s" % (self.output_size,)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.mode, self.align_corners = size, mode, align_corners
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, numbers.Real) else scale_factor
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        if self.scale_factor is not None:
            info = "scale_factor=%r" % (self.scale_factor,)
        else:
            info = "size=%r" % (self.size,)
        return info + ", mode=%s" % (self.mode,)


# ---- dropout, embedding ------------------------------------------------------------------

class _DropoutNd(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
            raise ValueError("dropout probability has to be between 0 and 1, but got %s" % (p,))
        self.p, self.inplace = p, inplace

    def extra_repr(self):
        return "p=%s, inplace=%s" % (self.p, self.inplace)


class Dropout(_DropoutNd):
    def forward(self, input):
        if self.p == 1.0 and self.training:
            return input * 0.0
        y = F.dropout(input, self.p, self.training)
        return F._fx._inplace(input, y, self.inplace and self.training, "dropout")


class Dropout1d(_DropoutNd):
    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, device=None, dtype=None):
        super().__init__()
        num_embeddings = _size(num_embeddings, "Embedding", "num_embeddings")
        embedding_dim = _size(embedding_dim, "Embedding", "embedding_dim")
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding(): max_norm, scale_grad_by_freq and sparse are not "
                                      "supported")
        if padding_idx is not None:
            if padding_idx > 0:
                if padding_idx >= num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
            elif padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
                padding_idx = num_embeddings + padding_idx
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is not None:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight)
            return
        w = randn(num_embeddings, embedding_dim, dtype=as_dtype(dtype) or float32, device=device)
        if padding_idx is not None:
            w[padding_idx] = 0.0
        w.requires_grad = True
        self.weight = w

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        s = "%d, %d" % (self.num_embeddings, self.embedding_dim)
        if self.padding_idx is not None:
            s += ", padding_idx=%d" % self.padding_idx
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        m = cls(rows, cols, _weight=embeddings, padding_idx=padding_idx, max_norm=max_norm,
                norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
        m.weight.requires_grad = not freeze
        return m


# ---- losses ------------------------------------------------------------------------------

class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = F._fx._reduction(size_average, reduce, reduction, type(self).__name__)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


# ---- 1-d pooling, PReLU, CosineSimilarity, KLDivLoss --------------------------------------

class MaxPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        if dilation != 1 or return_indices or ceil_mode:
            raise NotImplementedError("MaxPool1d(): dilation, return_indices and ceil_mode are not supported")
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s" % (
            self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


def _single(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        if ceil_mode:
            raise NotImplementedError("AvgPool1d(): ceil_mode is not supported")
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding, self.ceil_mode, self.count_include_pad = _single(padding), ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self):
        return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self):
        return "output_size=%s" % (self.output_size,)


class PReLU(Module):
    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = _size(num_parameters, "PReLU", "num_parameters")
        self.init = init
        w = ones(self.num_parameters, dtype=as_dtype(dtype) or float32, device=device) * float(init)
        self.weight = Parameter(w)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return "num_parameters=%d" % self.num_parameters


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class KLDivLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        if reduction == "batchmean" and size_average is None and reduce is None:
            Module.__init__(self)
            self.reduction = reduction
        else:
            super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
