"""nn.Llama in the Hugging Face layout (docs/export.md): save_pretrained
writes config.json, model.safetensors, generation_config.json (and the
tokenizer files with tokenizer=), from_pretrained / load_pretrained read
them back bit for bit, across devices; configs anygrad cannot represent
are refused naming the key. (transformers itself reads these folders in
bench/hf_transformers_check.py; it is not a test dependency.)"""
import json
import os

import numpy as np
import pytest

import anygrad as ag

SMALL = dict(vocab_size=300, dim=32, n_layers=2, n_heads=4, max_seq_len=16, n_kv_heads=2, hidden_dim=48,
             rope_theta=500000.0, norm_eps=1e-6)


def params(m):
    return {n: p.cpu().numpy() for n, p in m.named_parameters()}


@pytest.mark.parametrize("untied", [False, True])
def test_round_trip(dev, tmp_path, untied):
    m = ag.nn.Llama(**SMALL, untied_head=untied, device=dev)
    d = tmp_path / "hf"
    m.save_pretrained(d)
    assert sorted(os.listdir(d)) == ["config.json", "generation_config.json", "model.safetensors"]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["tie_word_embeddings"] is (not untied)
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_key_value_heads"]) == (32, 48, 2)
    assert cfg["rope_theta"] == 500000.0 and cfg["rms_norm_eps"] == 1e-6
    back = ag.nn.Llama.from_pretrained(d)  # on the CPU
    assert back.config == m.config
    a, b = params(m), params(back)
    assert list(a) == list(b)
    for n in a:
        assert a[n].tobytes() == b[n].tobytes(), n
    # load_pretrained into a model of the same configuration on dev
    other = ag.nn.Llama(**SMALL, untied_head=untied, device=dev).load_pretrained(str(d))
    idx = ag.tensor([[1, 2, 3, 4, 299]], device=dev)
    assert np.array_equal(other(idx).cpu().numpy(), m(idx).cpu().numpy())


def test_dtypes(tmp_path):
    m = ag.nn.Llama(**SMALL, dtype=ag.bfloat16)
    m.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    back = ag.nn.Llama.from_pretrained(tmp_path)
    p = dict(back.named_parameters())["model.norm.weight"]
    assert p.dtype == ag.bfloat16


def test_tokenizer(tmp_path):
    bpe = tmp_path / "tok.bpe"
    bpe.write_text("anygrad-bpe 1\nsplit words256\nmerges 2\n97 97\n256 98\n")
    m = ag.nn.Llama(**SMALL)
    d = tmp_path / "hf"
    m.save_pretrained(d, tokenizer=bpe)
    tok = json.loads((d / "tokenizer.json").read_text())
    assert tok["model"]["type"] == "BPE"
    assert tok["model"]["merges"] == ["a a", "aa b"]
    assert tok["model"]["vocab"]["aab"] == 257 and tok["model"]["vocab"]["\u0120"] == 32
    assert json.loads((d / "tokenizer_config.json").read_text())["model_max_length"] == 16
    # the tokenizer.json itself is accepted as tokenizer=
    m.save_pretrained(tmp_path / "again", tokenizer=d / "tokenizer.json")
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (d / "tokenizer.json").read_bytes()


def test_single_file(tmp_path):
    m = ag.nn.Llama(**SMALL)
    f = tmp_path / "w.safetensors"
    m.save_pretrained(f)
    assert f.is_file()
    back = ag.nn.Llama(**SMALL).load_pretrained(f)
    assert params(back)["model.norm.weight"].tobytes() == params(m)["model.norm.weight"].tobytes()
    with pytest.raises(ValueError, match="tokenizer= needs a folder"):
        m.save_pretrained(f, tokenizer="x.bpe")


def test_refused(tmp_path):
    m = ag.nn.Llama(**SMALL)
    m.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(TypeError, match="path must be"):
        ag.nn.Llama.from_pretrained(3)
    with pytest.raises(ValueError, match="n_layers"):
        ag.nn.Llama(**dict(SMALL, n_layers=1)).load_pretrained(tmp_path)
    with pytest.raises(ValueError, match="rope_theta"):
        ag.nn.Llama(**dict(SMALL, rope_theta=10000.0)).load_pretrained(tmp_path)
    for key, value in (("hidden_act", "gelu"), ("attention_bias", True),
                       ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}), ("model_type", "mistral")):
        (tmp_path / "config.json").write_text(json.dumps(dict(cfg, **{key: value})))
        with pytest.raises(ag.UnsupportedError, match='"%s"' % key):
            ag.nn.Llama.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(cfg)[:-1])
    with pytest.raises(RuntimeError, match="not valid JSON"):
        ag.nn.Llama.from_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(OSError, match="config.json"):
        ag.nn.Llama.from_pretrained(tmp_path)
