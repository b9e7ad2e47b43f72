"""anygrad.autograd: grad() without accumulation, custom Functions,
Tensor.grad_fn and Tensor.register_hook, over the C library's
ag_autograd_grad, ag_custom_record, ag_tensor_grad_fn and gradient
pre-hooks (include/anygrad/autograd.h).

Python callables the library calls back (hooks, Function.backward) are kept
in a registry under an integer key passed as the C user pointer; the
library's free_user callback drops them when the hook or node goes. An
exception raised inside one stops the backward and is raised again, as it
was, by the call that ran the backward (Tensor.backward, grad)."""
import ctypes
import itertools
import threading
import weakref
from ctypes import CFUNCTYPE, POINTER, byref, c_int, c_uint64, c_void_p

from . import _lib
from ._lib import lib, check
from ._tensor import (Tensor, _wrap, no_grad, enable_grad, inference_mode,  # noqa: F401
                      is_grad_enabled, zeros)

__all__ = ["grad", "backward", "Function", "FunctionCtx", "Node", "RemovableHandle", "no_grad",
           "enable_grad", "inference_mode"]

_AG_ERR_INTERNAL = 14
_keys = itertools.count(1)
_registry = {}  # key -> hook callable, or (state, output index) of a custom node
_pending = threading.local()


def _fail_from_python(e):
    """Record e to be raised again after the backward, and the C error that
    stops it."""
    _pending.exc = e
    lib.ag_error_set(_AG_ERR_INTERNAL, b"%s", ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace"))
    return _AG_ERR_INTERNAL


def _take_pending():
    e = getattr(_pending, "exc", None)
    _pending.exc = None
    return e


def _run(call):
    """call() (which runs a backward); an exception raised by a Python
    callback inside it comes out as itself."""
    _pending.exc = None
    try:
        return call()
    except Exception:
        e = _take_pending()
        if e is not None:
            lib.ag_error_clear()
            raise e from None
        raise


# ---- callbacks ------------------------------------------------------------------------

_PRE_HOOK = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(c_void_p))
_FREE = CFUNCTYPE(None, c_void_p)
_CUSTOM_BW = CFUNCTYPE(c_int, c_void_p, c_void_p, c_int, POINTER(c_void_p))


def _free(user):
    try:
        _registry.pop(user, None)
    except Exception:  # interpreter shutdown: nothing left to free
        pass


def _pre_hook(grad_h, user, out):
    try:
        fn = _registry[user]
        g = _wrap(lib.ag_tensor_retain(grad_h))
        r = fn(g)
        if r is None:
            return 0
        if not isinstance(r, Tensor):
            raise TypeError("expected a Tensor or None from the hook, but got %s" % type(r).__name__)
        if tuple(r.shape) != tuple(g.shape):
            raise RuntimeError("hook '%s' has changed the size of value (from %s to %s)"
                               % (getattr(fn, "__name__", "hook"), list(g.shape), list(r.shape)))
        out[0] = lib.ag_tensor_retain(r._handle)
        return 0
    except BaseException as e:  # noqa: B902 - nothing may escape into C
        return _fail_from_python(e)


_free_cb = _FREE(_free)
_pre_hook_cb = _PRE_HOOK(_pre_hook)


class RemovableHandle:
    """What register_hook returns: remove() takes the hook off again."""

    def __init__(self, t, hook_id):
        self._t = weakref.ref(t)
        self.id = hook_id

    def remove(self):
        t = self._t()
        if t is not None and t._h and self.id is not None:
            lib.ag_tensor_remove_grad_hook(t._h, self.id)
            lib.ag_error_clear()  # already gone: nothing to do
        self.id = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_hook(self, hook):
    """Tensor.register_hook: hook(grad) runs on the gradient flowing into
    this tensor in each backward (a leaf's: the pass's sum, before it is
    added into .grad; an op output's: before its op passes it on) and may
    return a tensor of the same shape to use instead."""
    if not callable(hook):
        raise TypeError("register_hook(): hook must be callable, not %s" % type(hook).__name__)
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    key = next(_keys)
    _registry[key] = hook
    hid = c_uint64()
    st = lib.ag_tensor_add_grad_pre_hook(self._handle, _pre_hook_cb, key, _free_cb, byref(hid))
    if st:
        _registry.pop(key, None)
        check(st)
    return RemovableHandle(self, hid.value)


_retained = {}  # C handle of a non-leaf that retains its gradient -> [gradient or None]


def retain_grad(self):
    """Tensor.retain_grad: a non-leaf keeps the gradient of each backward
    in .grad (summed over passes, as a leaf's), through a gradient hook."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    h = self._handle
    if self.is_leaf or h in _retained:
        return
    box = [None]

    def keep(g):
        box[0] = g.detach().clone() if box[0] is None else box[0] + g
    keep.__name__ = "retain_grad"
    register_hook(self, keep)
    _retained[h] = box
    weakref.finalize(self, _retained.pop, h, None)


_tensor_grad = Tensor.grad


def _get_grad(self):
    box = _retained.get(self._h) if self._h else None
    return box[0] if box is not None else _tensor_grad.fget(self)


def _set_grad(self, v):
    box = _retained.get(self._h) if self._h else None
    if box is not None and v is None:
        box[0] = None
        return
    _tensor_grad.fset(self, v)


# ---- grad_fn ---------------------------------------------------------------------------


# the library's op names where torch 1.13 names the node otherwise
_TORCH_NAMES = {"matmul": "MmBackward0", "concat": "CatBackward0", "cast": "ToCopyBackward0",
                "to_device": "ToCopyBackward0", "cross_entropy": "NllLossBackward0",
                "mse_loss": "MseLossBackward0", "layer_norm": "NativeLayerNormBackward0",
                "batch_norm": "NativeBatchNormBackward0", "dropout": "NativeDropoutBackward0",
                "gather/index_select": "IndexSelectBackward0", "conv2d": "ConvolutionBackward0",
                "scaled_dot_product_attention": "ScaledDotProductAttentionBackward0"}


def _torch_name(name):
    if name.endswith("Backward"):  # a custom Function's node
        return name
    if name in _TORCH_NAMES:
        return _TORCH_NAMES[name]
    base = name.split("/")[0]
    return "".join(w[:1].upper() + w[1:] for w in base.split("_")) + "Backward0"


class Node:
    """A recorded op (torch's grad_fn): name(), next_functions. Holds one
    reference to the library's node."""
    __slots__ = ("_n", "__weakref__")

    def __init__(self, n):
        self._n = n

    def __del__(self):
        n, self._n = getattr(self, "_n", None), None
        if n:
            lib.ag_grad_node_release(n)

    def name(self):
        return _torch_name(lib.ag_grad_node_name(self._n).decode())

    @property
    def next_functions(self):
        out = []
        for i in range(lib.ag_grad_node_input_count(self._n)):
            leaf = c_void_p()
            f = lib.ag_grad_node_next(self._n, i, byref(leaf))
            if f:
                out.append((Node(lib.ag_grad_node_retain(f)), 0))
            elif leaf.value:
                out.append((AccumulateGrad(_wrap(lib.ag_tensor_retain(leaf.value))), 0))
            else:
                out.append((None, 0))
        return tuple(out)

    def __eq__(self, o):
        return isinstance(o, Node) and o._n == self._n

    def __hash__(self):
        return hash(self._n)

    def __repr__(self):
        return "<%s object at %#x>" % (self.name(), id(self))


class AccumulateGrad:
    """The end of an edge at a leaf that requires grad; .variable is the leaf."""
    __slots__ = ("variable",)

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "torch::autograd::AccumulateGrad"

    next_functions = ()

    def __eq__(self, o):
        return isinstance(o, AccumulateGrad) and o.variable._h == self.variable._h

    def __hash__(self):
        return hash(self.variable._h)

    def __repr__(self):
        return "<AccumulateGrad object at %#x>" % id(self)


def _grad_fn(self):
    n = lib.ag_tensor_grad_fn(self._handle)
    return Node(lib.ag_grad_node_retain(n)) if n else None


# ---- grad and backward ----------------------------------------------------------------


def _tensors(x, fn, arg):
    if isinstance(x, Tensor):
        return [x]
    try:
        xs = list(x)
    except TypeError:
        raise TypeError("%s(): argument '%s' must be a Tensor or a sequence of Tensors, not %s"
                        % (fn, arg, type(x).__name__)) from None
    for k, t in enumerate(xs):
        if not isinstance(t, Tensor):  # torch: RuntimeError for inputs
            raise (RuntimeError if arg == "inputs" else TypeError)(
                "%s(): all %s have to be Tensors, but got %s (element %d)" % (fn, arg, type(t).__name__, k))
    return xs


def _grad_outputs(grad_outputs, outs, fn):
    if grad_outputs is None:
        gos = [None] * len(outs)
    elif isinstance(grad_outputs, Tensor):
        gos = [grad_outputs]
    else:
        gos = list(grad_outputs)
    if len(gos) != len(outs):
        raise RuntimeError("%s(): grad requires one gradient per output: got %d outputs and %d gradients"
                           % (fn, len(outs), len(gos)))
    for k, (o, g) in enumerate(zip(outs, gos)):
        if g is None:
            if o.requires_grad and o.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
        elif not isinstance(g, Tensor):
            raise TypeError("%s(): grad_outputs[%d] must be a Tensor or None, not %s"
                            % (fn, k, type(g).__name__))
        elif tuple(g.shape) != tuple(o.shape):
            raise RuntimeError("Mismatch in shape: grad_output[%d] has a shape of %s and output[%d] "
                               "has a shape "
                               "of %s." % (k, g.shape, k, o.shape))
    return gos


def _no_create_graph(fn):
    raise NotImplementedError("%s(): create_graph=True (gradients of gradients) is not supported: "
                              "the library's "
                              "backward records no graph" % fn)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=False, is_grads_batched=False):
    """torch.autograd.grad: the gradients of outputs (weighted by
    grad_outputs) with respect to inputs, as a tuple, without touching any
    .grad; None for an input the outputs do not depend on (allow_unused)."""
    if create_graph:
        _no_create_graph("grad")
    if is_grads_batched:
        raise NotImplementedError("grad(): is_grads_batched=True is not supported")
    outs = _tensors(outputs, "grad", "outputs")
    ins = _tensors(inputs, "grad", "inputs")
    if not ins:
        raise RuntimeError("grad requires non-empty inputs.")
    if not outs:
        raise RuntimeError("grad requires non-empty outputs.")
    gos = _grad_outputs(grad_outputs, outs, "grad")
    for k, o in enumerate(outs):
        if not o.requires_grad:
            raise RuntimeError("element %d of tensors does not require grad and does not have a grad_fn" % k)
    for k, x in enumerate(ins):
        if not x.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad (input %d)" % k)
    n_o, n_i = len(outs), len(ins)
    oh = (c_void_p * n_o)(*[o._handle for o in outs])
    gh = (c_void_p * n_o)(*[None if g is None else g._handle for g in gos])
    ih = (c_void_p * n_i)(*[x._handle for x in ins])
    res = (c_void_p * n_i)()
    st = _run(lambda: lib.ag_autograd_grad(n_o, oh, gh, n_i, ih, bool(retain_graph), True, res))
    if st:
        e = _take_pending()
        if e is not None:
            lib.ag_error_clear()
            raise e
        check(st)
    out = tuple(_wrap(h) if h else None for h in res)
    if not allow_unused:
        for k, r in enumerate(out):
            if r is None:
                raise RuntimeError("One of the differentiated Tensors appears to not have been used "
                                   "in the graph. "
                                   "Set allow_unused=True if this is the desired behavior. (input %d)" % k)
    return out


_tensor_backward = Tensor.backward


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Tensor.backward: gradients accumulated into the leaves' .grad."""
    if create_graph:
        _no_create_graph("backward")
    if inputs is not None:
        raise NotImplementedError("backward(): inputs= is not supported (use anygrad.autograd.grad)")
    _run(lambda: _tensor_backward(self, gradient, bool(retain_graph)))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: one pass from several tensors, each weighted
    by its gradient (sum of <t, g> backpropagated)."""
    ts = _tensors(tensors, "backward", "tensors")
    gs = _grad_outputs(grad_tensors, ts, "backward")
    if len(ts) == 1:
        return _backward(ts[0], gs[0], retain_graph, create_graph, inputs)
    total = None
    for t, g in zip(ts, gs):
        s = (t * g.detach()).sum() if g is not None else t.sum()
        total = s if total is None else total + s
    return _backward(total, None, retain_graph, create_graph, inputs)


# ---- custom functions ------------------------------------------------------------------


class FunctionCtx:
    """The ctx a Function's forward and backward share."""

    def __init__(self):
        self.saved_tensors = ()
        self.needs_input_grad = ()
        self._non_diff = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        """Keep tensors for backward (held without their graph, so an output
        saved here makes no reference cycle with its node)."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument %d is not a Tensor"
                                % tensors.index(t))
        self.saved_tensors = tuple(None if t is None else t.detach() for t in tensors)

    def mark_non_differentiable(self, *tensors):
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


class _State:
    __slots__ = ("cls", "ctx", "n_args", "tensor_pos", "tensor_meta", "out_meta", "diff")


def _custom_backward(user, g_h, n, grads):
    try:
        state, j = _registry[user]
        g = _wrap(lib.ag_tensor_retain(g_h))
        gouts = []
        for k, meta in enumerate(state.out_meta):
            if k == j:
                gouts.append(g)
            elif meta is None or not state.ctx.materialize_grads:
                gouts.append(None)
            else:
                gouts.append(zeros(*meta[0], dtype=meta[1], device=meta[2]))
        res = state.cls.backward(state.ctx, *gouts)
        if not isinstance(res, tuple):
            res = (res,)
        name = state.cls.__name__ + "Backward"
        if len(res) < state.n_args or any(r is not None for r in res[state.n_args:]):
            raise RuntimeError("function %s returned an incorrect number of gradients (expected %d, got %d)"
                               % (name, state.n_args, len(res)))
        for i, (pos, meta) in enumerate(zip(state.tensor_pos, state.tensor_meta)):
            r = res[pos]
            if r is None:
                continue
            if not isinstance(r, Tensor):
                raise TypeError("function %s returned a gradient of type %s at index %d (expected "
                                "Tensor or None)"
                                % (name, type(r).__name__, pos))
            if tuple(r.shape) != meta[0]:
                raise RuntimeError("Function %s returned an invalid gradient at index %d - got %s "
                                   "but expected "
                                   "shape compatible with %s" % (name, pos, list(r.shape), list(meta[0])))
            grads[i] = lib.ag_tensor_retain(r._handle)
        return 0
    except BaseException as e:  # noqa: B902 - nothing may escape into C
        return _fail_from_python(e)


_custom_bw_cb = _CUSTOM_BW(_custom_backward)


class Function:
    """torch.autograd.Function: subclass with staticmethods
    forward(ctx, *args) and backward(ctx, *grad_outputs), call apply(*args).
    forward runs under no_grad; each floating output that is not marked
    non-differentiable gets a node whose backward calls this class's
    backward (with zeros for the other outputs' gradients)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        record = is_grad_enabled() and any(ctx.needs_input_grad)
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        if not record:
            return out
        is_tuple = isinstance(out, tuple)
        outs = out if is_tuple else (out,)
        st = _State()
        st.cls, st.ctx, st.n_args = cls, ctx, len(args)
        st.tensor_pos = [k for k, a in enumerate(args) if isinstance(a, Tensor)]
        st.tensor_meta = [(tuple(args[k].shape), args[k].dtype, args[k].device) for k in st.tensor_pos]
        st.out_meta = [(tuple(o.shape), o.dtype, o.device) if isinstance(o, Tensor) else None for o in outs]
        st.diff = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.dtype.is_floating_point
                   and id(o) not in ctx._non_diff]
        ins = (c_void_p * max(1, len(st.tensor_pos)))(*[args[k]._handle for k in st.tensor_pos])
        new = list(outs)
        for j in st.diff:
            a = outs[j].detach()  # a header without graph over the output's storage
            key = next(_keys)
            _registry[key] = (st, j)
            name = (cls.__name__ + "Backward").encode()
            check(lib.ag_custom_record(a._handle, name, len(st.tensor_pos), ins, _custom_bw_cb, _free_cb,
                                       key))  # the library frees key on error too
            new[j] = a
        return tuple(new) if is_tuple else new[0]


Tensor.backward = _backward
Tensor.register_hook = register_hook
Tensor.retain_grad = retain_grad
Tensor.retains_grad = property(lambda self: bool(self._h) and self._h in _retained)
Tensor.grad = property(_get_grad, _set_grad)
Tensor.grad_fn = property(_grad_fn)
