"""nn.Llama in the Hugging Face layout (include/anygrad/pretrained.h,
docs/export.md): save_pretrained / load_pretrained / from_pretrained."""
import os
from ctypes import byref, c_void_p

from ._lib import lib, check, LlamaConfig, Llama as _CLlama


def _path(path, where):
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("anygrad.nn.Llama.%s: path must be a str or os.PathLike, got %s"
                        % (where, type(path).__name__))
    return os.fsencode(path)


def _is_file_target(p):
    return p.endswith(b".safetensors") or os.path.isfile(p)


def _tokenizer(tokenizer):
    """An ag_bpe * from a path to an anygrad .bpe file or a tokenizer.json."""
    p = _path(tokenizer, "save_pretrained")
    h = c_void_p()
    load = lib.ag_bpe_load_hf if p.endswith(b".json") else lib.ag_bpe_load
    check(load(p, byref(h)))
    return h


def save_pretrained(model, path, tokenizer=None):
    p = _path(path, "save_pretrained")
    if p.endswith(b".safetensors"):
        if tokenizer is not None:
            raise ValueError("anygrad.nn.Llama.save_pretrained: tokenizer= needs a folder, not a "
                             ".safetensors file")
        check(lib.ag_llama_save(byref(model._m), p))
        return
    tok = _tokenizer(tokenizer) if tokenizer is not None else c_void_p()
    try:
        check(lib.ag_llama_save_pretrained(byref(model._m), tok, p))
    finally:
        if tok:
            lib.ag_bpe_free(tok)


_SAME = ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "max_seq_len", "untied_head")


def load_pretrained(model, path):
    p = _path(path, "load_pretrained")
    if _is_file_target(p):
        check(lib.ag_llama_load(byref(model._m), p))
        return
    cfg = LlamaConfig()
    check(lib.ag_llama_read_config(p, byref(cfg)))
    mine = model._m.cfg
    for f in _SAME + ("hidden_dim",):
        a = getattr(cfg, f)
        b = getattr(mine, f) if f != "hidden_dim" else lib.ag_llama_hidden_dim(byref(mine))
        if f == "n_kv_heads":
            b = b or mine.n_heads
        if a != b:
            raise ValueError("anygrad.nn.Llama.load_pretrained: %s/config.json has %s = %r, this model %r"
                             % (os.fsdecode(p), f, a, b))
    for f in ("rope_theta", "norm_eps"):
        a, b = getattr(cfg, f), getattr(mine, f)
        if a != b:
            raise ValueError("anygrad.nn.Llama.load_pretrained: %s/config.json has %s = %r, this model %r"
                             % (os.fsdecode(p), f, a, b))
    check(lib.ag_llama_load(byref(model._m), os.path.join(p, b"model.safetensors")))


def from_pretrained(cls, path, device=None):
    from ._tensor import as_device
    from .nn import Module
    p = _path(path, "from_pretrained")
    m = _CLlama()
    check(lib.ag_llama_load_pretrained(p, as_device(device)._d, byref(m), None))
    self = cls.__new__(cls)
    Module.__init__(self)
    self._adopt(m, 2 + 9 * int(m.cfg.n_layers) + (1 if m.cfg.untied_head else 0))
    return self
