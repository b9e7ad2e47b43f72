"""anygrad's Llama against Hugging Face transformers, both directions
(docs/export.md, docs/llama.md).

1. anygrad -> transformers: a small anygrad Llama (nn.Llama, random, or the
   folder given with --folder, e.g. `anygrad train --task text --hf DIR`) is
   saved with save_pretrained; AutoModelForCausalLM.from_pretrained reads it.
2. transformers -> anygrad: a small random LlamaForCausalLM (tied and untied
   heads, grouped-query attention) is saved by transformers' save_pretrained;
   anygrad.nn.Llama.from_pretrained reads it.
Each time: the logits of the same tokens agree within --tol (default 1e-5,
largest absolute difference), and greedy decoding of 50 tokens gives the
same continuation. With a tokenizer in the folder, AutoTokenizer gives the
ids that anygrad's tokenizer.json gives and decodes them back.

Needs transformers and torch 2.x: `scripts/deps.sh --bench-hf` installs
pinned versions into .venv (a large download, not part of CI). Run:
  .venv/bin/python bench/hf_transformers_check.py
with ANYGRAD_LIBRARY pointing at build/lib/libanygrad.so (default: found
beside the package). Exit 0 when every check agrees, 1 otherwise."""
import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def greedy_anygrad(ag, model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        logits = model(ag.tensor([seq], dtype=ag.int64)).numpy()
        seq.append(int(np.argmax(logits[0, -1])))
    return seq[len(prompt):]


def greedy_transformers(torch, model, prompt, n):
    with torch.no_grad():
        ids = torch.tensor([prompt])  # attention_mask given: a token equal to pad_token_id is no padding
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, num_beams=1, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def compare(name, ag, torch, ag_model, hf_model, vocab, tol, n_new, rng):
    prompt = rng.integers(0, vocab, size=12).tolist()
    a = ag_model(ag.tensor([prompt], dtype=ag.int64)).numpy()
    with torch.no_grad():
        h = hf_model(torch.tensor([prompt])).logits.float().numpy()
    diff = float(np.max(np.abs(a - h)))
    ga = greedy_anygrad(ag, ag_model, prompt, n_new)
    gh = greedy_transformers(torch, hf_model, prompt, n_new)
    same = ga == gh
    ok = diff <= tol and same
    first = next((i for i, (x, y) in enumerate(zip(ga, gh)) if x != y), None)
    if first is not None:  # a near tie, or a real difference: the two best logits there
        seq = prompt + ga[:first]
        la = ag_model(ag.tensor([seq], dtype=ag.int64)).numpy()[0, -1]
        with torch.no_grad():
            lh = hf_model(torch.tensor([seq])).logits[0, -1].float().numpy()
        for who, lg in (("anygrad", la), ("transformers", lh)):
            top = np.argsort(lg)[::-1][:2]
            print("  step %d, %s: best %s logits %s" % (first, who, top.tolist(), lg[top].tolist()))
    print("%-44s logits max |diff| %.2e (tol %.0e, |logit| max %.2f), greedy %d tokens %s%s"
          % (name, diff, tol, float(np.max(np.abs(h))), n_new, "same" if same else "DIFFER",
             "" if same else " from token %d" % first))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", help="an anygrad-saved Hugging Face folder to check "
                                     "(default: a random model)")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--new-tokens", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        print("skipped: %s (scripts/deps.sh --bench-hf installs transformers and torch into .venv)" % e)
        return 77
    import anygrad as ag
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(args.seed)
    ag.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    print("transformers %s, torch %s, anygrad %s" % (transformers.__version__, torch.__version__,
                                                      getattr(ag, "__version__", "?")))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        # 1. anygrad -> transformers
        cases = []
        if args.folder:
            cases.append(("anygrad folder " + os.path.basename(args.folder.rstrip("/")),
                           ag.nn.Llama.from_pretrained(args.folder), args.folder))
        else:
            for tied in (True, False):
                m = ag.nn.Llama(384, 64, 2, 4, 128, n_kv_heads=2, hidden_dim=160, untied_head=not tied,
                                rope_theta=500000.0, norm_eps=1e-6)
                # Larger weights than the init's 0.02 make distinct logits, so
                # that greedy decoding follows the numbers, not ties.
                with ag.no_grad():
                    for _, p in m.named_parameters():
                        p.mul_(8.0 if p.dim() == 2 else 1.0)
                d = os.path.join(tmp, "anygrad_%s" % ("tied" if tied else "untied"))
                m.save_pretrained(d)
                kind = "tied" if tied else "untied"
                cases.append(("anygrad -> transformers (%s head, GQA 4/2)" % kind, m, d))
        for name, m, d in cases:
            hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            ok &= compare(name, ag, torch, m, hf, m.config["vocab_size"], args.tol, args.new_tokens, rng)
            if os.path.exists(os.path.join(d, "tokenizer.json")):
                from transformers import AutoTokenizer
                import tokenizers
                tok = AutoTokenizer.from_pretrained(d)
                raw = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
                text = "Hello  world!\n\tIt's 2026; caf\u00e9 na\u00efve   spaces.\n"
                ids = tok(text)["input_ids"]
                same = ids == raw.encode(text).ids and tok.decode(ids) == text
                print("%-44s AutoTokenizer ids and decode %s" % (name, "same" if same else "DIFFER"))
                ok &= same
        # 2. transformers -> anygrad
        for tied in (True, False):
            cfg = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                              rms_norm_eps=1e-5, tie_word_embeddings=tied, initializer_range=0.1,
                              bos_token_id=None, eos_token_id=None, pad_token_id=None)
            hf = LlamaForCausalLM(cfg).eval()
            d = os.path.join(tmp, "hf_%s" % ("tied" if tied else "untied"))
            hf.save_pretrained(d)
            m = ag.nn.Llama.from_pretrained(d)
            m.eval()
            ok &= compare("transformers -> anygrad (%s head, GQA 4/2)" % ("tied" if tied else "untied"),
                          ag, torch, m, hf, 320, args.tol, args.new_tokens, rng)
        # A config anygrad cannot represent is refused, naming the key.
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, attention_bias=True)
        d = os.path.join(tmp, "hf_bias")
        LlamaForCausalLM(cfg).save_pretrained(d)
        try:
            ag.nn.Llama.from_pretrained(d)
            print("attention_bias=True: loaded, should be refused")
            ok = False
        except Exception as e:  # anygrad's UnsupportedError
            good = "attention_bias" in str(e)
            print("%-44s refused: %s" % ("transformers attention_bias=True", str(e).split(": anygrad")[0]))
            ok &= good
    print("all agree" if ok else "DIFFERENCES FOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
