/* `anygrad export --onnx OUT.onnx`: one of the example models (the
 * character MLP of `anygrad train`, the Fashion-MNIST CNN, a Llama) written
 * as an ONNX model with a dynamic batch (and sequence) dimension, from a
 * checkpoint or freshly initialised; optionally with sample inputs and
 * anygrad's outputs for them, for checking an ONNX runtime against anygrad
 * (docs/export.md "ONNX"). `anygrad export --gguf OUT.gguf --checkpoint DIR`:
 * the Llama and tokenizer of a Hugging Face folder as a GGUF file for
 * llama.cpp (docs/export.md "GGUF"), alone or beside --onnx. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "charlm.h"
#include "cli.h"
#include "cnn.h"

#define MAX_SAMPLES 8

static void usage(void) {
  char bl[128];
  printf("usage: anygrad export --onnx OUT.onnx --model mlp|cnn|llama [options]\n"
         "       anygrad export --gguf OUT.gguf --checkpoint DIR [--type f32|f16|q8_0]\n\n"
         "Write a model's forward pass (evaluation mode) as an ONNX model, opset %d: weights as f32\n"
         "initializers, the batch dimension dynamic (and the sequence length for llama).\n"
         "  --onnx PATH          the ONNX file to write (replaced only when complete)\n"
         "  --model mlp          the character MLP of `anygrad train` (tokens [batch, context] int64 ->\n"
         "                       logits [batch, 27])\n"
         "  --model cnn          the Fashion-MNIST CNN (images [batch, 1, 28, 28] f32 -> logits [batch, 10])\n"
         "  --model llama        a Llama (input_ids [batch, seq] int64 -> logits [batch, seq, vocab])\n"
         "  --checkpoint PATH    weights: a checkpoint of `anygrad train` (mlp; cnn: --task\n"
         "                       fashion-mnist) or a Hugging Face folder (llama: config.json,\n"
         "                       model.safetensors); without it the model is initialised from --seed\n"
         "  --seed N             initial weights without --checkpoint (default 1)\n"
         "  --context N --emb N --hidden N      mlp sizes (default 6, 24, 256)\n"
         "  --channels C1,C2     cnn sizes (default 16,32)\n"
         "  --vocab N --dim N --layers N --heads N --kv-heads N --hidden N --max-seq N\n"
         "                       llama sizes (default 64, 32, 2, 4, 2, 64, 32)\n"
         "  --samples LIST       also run anygrad on random inputs of these batch sizes (\"2,5\";\n"
         "                       llama: BATCHxSEQ, \"2x3,5x7\") and write inputs and outputs to\n"
         "                       --samples-out\n"
         "  --samples-out PATH   safetensors file of input.<i> (i64 ids or f32 images) and output.<i>\n"
         "                       (f32 logits)\n"
         "  --device D           BACKEND[:N] that runs anygrad's side (default cpu), backends: %s\n"
         "GGUF, for llama.cpp (a Llama and its tokenizer; the model is read on the cpu):\n"
         "  --gguf PATH          the GGUF file to write (replaced only when complete); needs --checkpoint,\n"
         "                       a Hugging Face folder with tokenizer.json (--model llama, if given)\n"
         "  --type T             its weight type: f32 (default), f16 or q8_0 (norms stay f32)\n"
         AG_CLI_THREADS_HELP
         "An anygrad built without ONNX (protobuf-c absent at configure time, AG_ONNX) says so and\n"
         "exits 1.\n" AG_CLI_EXIT_HELP,
         AG_ONNX_OPSET, ag_cli_backend_list(bl, sizeof bl));
}

enum { M_MLP, M_CNN, M_LLAMA };

typedef struct opts {
  const char *out, *checkpoint, *samples_out;
  int model;
  uint64_t seed;
  int n_samples;
  int64_t sb[MAX_SAMPLES], st[MAX_SAMPLES];
  charlm_options mlp;
  cnn_options cnn;
  ag_llama_config llama;
  ag_device dev;
} opts;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct models {
  charlm_model mlp;
  cnn_model cnn;
  ag_llama llama;
  bool have;
} models;

/* The model's tensors of a `anygrad train` checkpoint, stored under
 * "model." and "buffers." (the optimizer state beside them is not read). */
static ag_status load_prefixed(const ag_safetensors *f, const ag_param_list *params, const ag_param_list *buffers) {
  ag_param_list all = {0};
  ag_status st = ag_params_extend(&all, "model.", params);
  if (st == AG_OK && buffers) st = ag_params_extend(&all, "buffers.", buffers);
  if (st == AG_OK) st = ag_safetensors_load_into(f, &all);
  ag_params_free(&all);
  return st;
}

static ag_status load_mlp(opts *o, models *m, ag_generator *gen) {
  ag_safetensors *f = NULL;
  ag_status st = AG_OK;
  if (o->checkpoint) {
    st = ag_safetensors_open(o->checkpoint, &f);
    const char *kind = f ? ag_safetensors_meta(f, "model") : NULL;
    if (st == AG_OK && kind && !strcmp(kind, "gpt"))
      st = ag_error_set(AG_ERR_UNSUPPORTED, "%s: a checkpoint of the charlm GPT; only the MLP is exported",
                        o->checkpoint);
    else if (st == AG_OK && (!kind || strcmp(kind, "mlp")))
      st = ag_error_set(AG_ERR_CORRUPT, "%s: not a checkpoint of the charlm MLP (metadata model=mlp)",
                        o->checkpoint);
    const char *keys[3] = {"context", "emb", "hidden"};
    int *dst[3] = {&o->mlp.context, &o->mlp.emb, &o->mlp.hidden};
    for (int i = 0; st == AG_OK && i < 3; i++) {
      const char *v = ag_safetensors_meta(f, keys[i]);
      int64_t x;
      if (!v || !ag_parse_i64(v, 1, 1 << 20, &x))
        st = ag_error_set(AG_ERR_CORRUPT, "%s: metadata '%s' missing or not a size", o->checkpoint, keys[i]);
      else
        *dst[i] = (int)x;
    }
  }
  if (st == AG_OK) st = charlm_model_init(&m->mlp, &o->mlp, o->dev, gen);
  if (st == AG_OK) {
    m->have = true;
    if (f) st = load_prefixed(f, &m->mlp.params, NULL);
  }
  ag_safetensors_close(f);
  return st;
}

static ag_status load_cnn(opts *o, models *m, ag_generator *gen) {
  ag_safetensors *f = NULL;
  ag_status st = AG_OK;
  if (o->checkpoint) {
    st = ag_safetensors_open(o->checkpoint, &f);
    const char *names[2] = {"conv1.weight", "conv2.weight"};
    int *dst[2] = {&o->cnn.c1, &o->cnn.c2};
    for (int i = 0; st == AG_OK && i < 2; i++) {
      char key[64];
      snprintf(key, sizeof key, "model.%s", names[i]);
      int k = ag_safetensors_find(f, key);
      int64_t shape[AG_MAX_DIMS];
      if (k < 0 || ag_safetensors_shape(f, k, shape) != 4 || shape[0] < 1 || shape[0] > CNN_MAX_WIDTH)
        st = ag_error_set(AG_ERR_CORRUPT, "%s: not a checkpoint of the Fashion-MNIST CNN (%s)", o->checkpoint,
                          names[i]);
      else
        *dst[i] = (int)shape[0];
    }
  }
  o->cnn.device = o->dev;
  if (st == AG_OK) st = cnn_model_init(&m->cnn, &o->cnn, gen);
  if (st == AG_OK) {
    m->have = true;
    if (f) st = load_prefixed(f, &m->cnn.params, &m->cnn.buffers);
  }
  ag_safetensors_close(f);
  return st;
}

static ag_status load_llama(opts *o, models *m, ag_generator *gen) {
  ag_status st = o->checkpoint ? ag_llama_load_pretrained(o->checkpoint, o->dev, &m->llama, NULL)
                               : ag_llama_init(&m->llama, &o->llama, o->dev, AG_F32, gen);
  m->have = st == AG_OK;
  return st;
}

static void models_free(opts *o, models *m) {
  if (!m->have) return;
  if (o->model == M_MLP) charlm_model_free(&m->mlp);
  if (o->model == M_CNN) cnn_model_free(&m->cnn);
  if (o->model == M_LLAMA) ag_llama_free(&m->llama);
}

static ag_status write_onnx(const opts *o, models *m) {
  ag_onnx *g = ag_onnx_create(o->model == M_MLP ? "charlm_mlp" : o->model == M_CNN ? "fashion_mnist_cnn" : "llama");
  if (!g) return ag_last_status();
  const char *bn[3] = {"batch", "seq", NULL};
  ag_status st;
  if (o->model == M_MLP) {
    int64_t in[2] = {-1, m->mlp.context}, out[2] = {-1, CHARLM_VOCAB};
    int x = ag_onnx_input(g, "tokens", AG_I64, 2, in, bn);
    st = ag_onnx_output(g, charlm_model_onnx(&m->mlp, g, x), "logits", AG_F32, 2, out, bn);
  } else if (o->model == M_CNN) {
    int64_t in[4] = {-1, 1, 28, 28}, out[2] = {-1, CNN_CLASSES};
    int x = ag_onnx_input(g, "images", AG_F32, 4, in, bn);
    st = ag_onnx_output(g, cnn_model_onnx(&m->cnn, g, x), "logits", AG_F32, 2, out, bn);
  } else {
    int64_t in[2] = {-1, -1}, out[3] = {-1, -1, m->llama.cfg.vocab_size};
    int x = ag_onnx_input(g, "input_ids", AG_I64, 2, in, bn);
    st = ag_onnx_output(g, ag_onnx_llama(g, &m->llama, x), "logits", AG_F32, 3, out, bn);
  }
  if (st == AG_OK) st = ag_onnx_save(g, o->out);
  ag_onnx_free(g);
  return st;
}

/* Random inputs of each sample shape through anygrad (inference mode); the
 * inputs and outputs, as f32 (images, logits) or i64 (ids), saved. */
static ag_status write_samples(const opts *o, models *m) {
  ag_param_list l = {0};
  ag_status st = AG_OK;
  uint64_t rng = o->seed ^ 0x5eedull;
  ag_inference_mode_begin();
  for (int i = 0; st == AG_OK && i < o->n_samples; i++) {
    ag_scope_begin();
    int64_t B = o->sb[i], T = o->model == M_MLP ? m->mlp.context : o->st[i];
    int64_t vocab = o->model == M_MLP ? CHARLM_VOCAB : o->model == M_LLAMA ? m->llama.cfg.vocab_size : 0;
    ag_tensor *x = NULL, *y = NULL;
    if (o->model == M_CNN) {
      int64_t shape[4] = {B, 1, 28, 28}, n = B * 28 * 28;
      float *buf = malloc(sizeof(float) * (size_t)n);
      for (int64_t k = 0; buf && k < n; k++) buf[k] = (float)((double)(splitmix(&rng) >> 11) * 0x1p-53 * 4 - 2);
      x = buf ? ag_from_host(o->dev, AG_F32, 4, shape, buf) : NULL;
      free(buf);
      y = x ? cnn_model_logits(&m->cnn, x, false) : NULL;
    } else {
      if (o->model == M_LLAMA && T > m->llama.cfg.max_seq_len) T = m->llama.cfg.max_seq_len;
      int64_t shape[2] = {B, T}, n = B * T;
      int64_t *buf = malloc(sizeof(int64_t) * (size_t)n);
      for (int64_t k = 0; buf && k < n; k++) buf[k] = (int64_t)(splitmix(&rng) % (uint64_t)vocab);
      x = buf ? ag_from_host(o->dev, AG_I64, 2, shape, buf) : NULL;
      free(buf);
      y = !x ? NULL : o->model == M_MLP ? charlm_model_logits(&m->mlp, x) : ag_llama_forward(&m->llama, x, false, NULL);
    }
    char name[32];
    if (y && ag_tensor_dtype(y) != AG_F32) y = ag_cast(y, AG_F32); /* a bf16 or f16 Llama's logits */
    if (!y) st = ag_last_status() != AG_OK ? ag_last_status() : AG_ERR_OOM;
    snprintf(name, sizeof name, "input.%d", i);
    if (st == AG_OK) st = ag_params_add(&l, name, x);
    snprintf(name, sizeof name, "output.%d", i);
    if (st == AG_OK) st = ag_params_add(&l, name, y);
    ag_scope_end();
  }
  ag_grad_mode_end();
  if (st == AG_OK) {
    const char *k[1] = {"format"}, *v[1] = {"anygrad-onnx-samples"};
    st = ag_safetensors_save(o->samples_out, &l, 1, k, v);
  }
  ag_params_free(&l);
  return st;
}

/* ---- GGUF ---- */

/* --gguf and --type checked: --type needs --gguf, --gguf needs --checkpoint
 * (a Hugging Face folder) and a Llama. */
static int gguf_options(const char *gguf, const char *type_s, const char *checkpoint, bool llama,
                        ag_gguf_type *type) {
  if (!gguf) {
    fprintf(stderr, "anygrad export: --type applies to --gguf\n");
    return AG_EXIT_USAGE;
  }
  if (type_s && ag_gguf_type_parse(type_s, type) != AG_OK) {
    char b[64];
    fprintf(stderr, "anygrad export: --type expects f32, f16 or q8_0, got '%s'\n", ag_escape(type_s, b, sizeof b));
    return AG_EXIT_USAGE;
  }
  if (!checkpoint || !llama) {
    fprintf(stderr, "anygrad export: --gguf writes a Llama: it needs --checkpoint DIR, a Hugging Face folder "
                    "with tokenizer.json (and --model llama, if --model is given)\n");
    return AG_EXIT_USAGE;
  }
  return AG_EXIT_OK;
}

/* The Llama and tokenizer of folder dir, read on the cpu, as a GGUF file:
 * the output kept apart from the folder's files and checked writable
 * before the model is read. */
static int export_gguf(const char *dir, const char *out, ag_gguf_type type) {
  static const char *const names[3] = {"config.json", "model.safetensors", "tokenizer.json"};
  char paths[3][4096];
  ag_cli_file in[3], outs[1] = {{"--gguf", out}};
  for (int i = 0; i < 3; i++) {
    snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]);
    in[i] = (ag_cli_file){"--checkpoint", paths[i]};
  }
  if (!ag_cli_outputs_distinct("export", in, 3, outs, 1)) return AG_EXIT_USAGE;
  if (ag_output_check(out, "GGUF file") != AG_OK) {
    fprintf(stderr, "anygrad export: %s\n", ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  ag_llama m;
  ag_bpe *tok = NULL;
  ag_status st = ag_llama_load_pretrained(dir, AG_CPU, &m, &tok);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad export: %s\n", ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  if (!tok)
    st = ag_error_set(AG_ERR_INVALID, "--gguf needs a tokenizer, and %s has no tokenizer.json", dir);
  else
    st = ag_llama_save_gguf(&m, tok, out, type);
  ag_bpe_free(tok);
  ag_llama_free(&m);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad export: %s\n", ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  printf("wrote %s (GGUF, %s)\n", out, type == AG_GGUF_F32 ? "f32" : type == AG_GGUF_F16 ? "f16" : "q8_0");
  return AG_EXIT_OK;
}

static bool parse_samples(const char *v, opts *o) {
  char buf[256], *items[MAX_SAMPLES];
  int n = ag_cli_list("export", "samples", v, buf, sizeof buf, items, MAX_SAMPLES);
  if (n < 1) return false;
  for (int i = 0; i < n; i++) {
    char *x = strchr(items[i], 'x');
    if (x) *x = 0;
    if (!ag_cli_i64("export", "samples", items[i], 1, 4096, &o->sb[i])) return false;
    o->st[i] = 8;
    if (x && !ag_cli_i64("export", "samples", x + 1, 1, 1 << 16, &o->st[i])) return false;
  }
  o->n_samples = n;
  return true;
}

int ag_cmd_export(int argc, char **argv) {
  enum {
    O_ONNX = 256, O_MODEL, O_CKPT, O_SEED, O_CONTEXT, O_EMB, O_HIDDEN, O_CHANNELS, O_VOCAB, O_DIM, O_LAYERS,
    O_HEADS, O_KV, O_MAXSEQ, O_SAMPLES, O_SAMPLES_OUT, O_DEVICE, O_HELP, O_GGUF, O_TYPE
  };
  static const struct option lo[] = {
      {"onnx", required_argument, NULL, O_ONNX},       {"model", required_argument, NULL, O_MODEL},
      {"checkpoint", required_argument, NULL, O_CKPT}, {"seed", required_argument, NULL, O_SEED},
      {"context", required_argument, NULL, O_CONTEXT}, {"emb", required_argument, NULL, O_EMB},
      {"hidden", required_argument, NULL, O_HIDDEN},   {"channels", required_argument, NULL, O_CHANNELS},
      {"vocab", required_argument, NULL, O_VOCAB},     {"dim", required_argument, NULL, O_DIM},
      {"layers", required_argument, NULL, O_LAYERS},   {"heads", required_argument, NULL, O_HEADS},
      {"kv-heads", required_argument, NULL, O_KV},     {"max-seq", required_argument, NULL, O_MAXSEQ},
      {"samples", required_argument, NULL, O_SAMPLES}, {"samples-out", required_argument, NULL, O_SAMPLES_OUT},
      {"device", required_argument, NULL, O_DEVICE},   {"help", no_argument, NULL, O_HELP},
      {"gguf", required_argument, NULL, O_GGUF},       {"type", required_argument, NULL, O_TYPE},
      AG_CLI_THREADS_OPT,                              {NULL, 0, NULL, 0}};
  opts o = {0};
  o.model = -1;
  o.seed = 1;
  o.mlp = charlm_defaults(CHARLM_MLP);
  o.cnn = cnn_defaults();
  o.llama = (ag_llama_config){.vocab_size = 64, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                              .hidden_dim = 64, .max_seq_len = 32};
  const char *dev_s = NULL, *hidden = NULL, *gguf = NULL, *type_s = NULL;
  for (int c = ag_cli_next("export", argc, argv, lo, true); c != -1; c = ag_cli_next("export", argc, argv, lo, false)) {
    const char *a = ag_cli_arg();
    switch (c) {
      case O_HELP: usage(); return AG_EXIT_OK;
      case O_ONNX: o.out = a; break;
      case O_MODEL:
        o.model = !strcmp(a, "mlp") ? M_MLP : !strcmp(a, "cnn") ? M_CNN : !strcmp(a, "llama") ? M_LLAMA : -2;
        if (o.model == -2) {
          fprintf(stderr, "anygrad export: --model must be mlp, cnn or llama, got '%s'\n", a);
          return AG_EXIT_USAGE;
        }
        break;
      case O_CKPT: o.checkpoint = a; break;
      case O_SEED:
        if (!ag_cli_u64("export", "seed", a, &o.seed)) return AG_EXIT_USAGE;
        break;
      case O_CONTEXT:
        if (!ag_cli_int("export", "context", a, 1, 64, &o.mlp.context)) return AG_EXIT_USAGE;
        break;
      case O_EMB:
        if (!ag_cli_int("export", "emb", a, 1, 4096, &o.mlp.emb)) return AG_EXIT_USAGE;
        break;
      case O_HIDDEN: hidden = a; break;
      case O_CHANNELS: {
        int ch[2];
        if (!ag_cli_int_list("export", "channels", a, 2, 1, CNN_MAX_WIDTH, ch)) return AG_EXIT_USAGE;
        o.cnn.c1 = ch[0];
        o.cnn.c2 = ch[1];
        break;
      }
      case O_VOCAB:
        if (!ag_cli_i64("export", "vocab", a, 1, 1 << 20, &o.llama.vocab_size)) return AG_EXIT_USAGE;
        break;
      case O_DIM:
        if (!ag_cli_i64("export", "dim", a, 2, 1 << 16, &o.llama.dim)) return AG_EXIT_USAGE;
        break;
      case O_LAYERS:
        if (!ag_cli_i64("export", "layers", a, 1, 256, &o.llama.n_layers)) return AG_EXIT_USAGE;
        break;
      case O_HEADS:
        if (!ag_cli_int("export", "heads", a, 1, 1024, &o.llama.n_heads)) return AG_EXIT_USAGE;
        break;
      case O_KV:
        if (!ag_cli_int("export", "kv-heads", a, 1, 1024, &o.llama.n_kv_heads)) return AG_EXIT_USAGE;
        break;
      case O_MAXSEQ:
        if (!ag_cli_i64("export", "max-seq", a, 1, 1 << 14, &o.llama.max_seq_len)) return AG_EXIT_USAGE;
        break;
      case O_SAMPLES:
        if (!parse_samples(a, &o)) return AG_EXIT_USAGE;
        break;
      case O_SAMPLES_OUT: o.samples_out = a; break;
      case O_DEVICE: dev_s = a; break;
      case O_GGUF: gguf = a; break;
      case O_TYPE: type_s = a; break;
      case AG_CLI_THREADS:
        if (!ag_cli_threads("export", a)) return AG_EXIT_USAGE;
        break;
      default: return AG_EXIT_USAGE;
    }
  }
  ag_gguf_type gguf_type = AG_GGUF_F32;
  if (gguf || type_s) {
    int rc = gguf_options(gguf, type_s, o.checkpoint, o.model == M_LLAMA || o.model < 0, &gguf_type);
    if (rc != AG_EXIT_OK) return rc;
    if (!o.out) return export_gguf(o.checkpoint, gguf, gguf_type);
  }
  if (!o.out || o.model < 0) {
    fprintf(stderr, "anygrad export: --onnx OUT.onnx and --model mlp|cnn|llama, or --gguf OUT.gguf and "
                    "--checkpoint DIR, are required (--help)\n");
    return AG_EXIT_USAGE;
  }
  if (!o.n_samples != !o.samples_out) {
    fprintf(stderr, "anygrad export: --samples and --samples-out go together\n");
    return AG_EXIT_USAGE;
  }
  if (hidden) {
    bool ok = o.model == M_LLAMA ? ag_cli_i64("export", "hidden", hidden, 1, 1 << 20, &o.llama.hidden_dim)
                                 : ag_cli_int("export", "hidden", hidden, 1, 1 << 16, &o.mlp.hidden);
    if (!ok) return AG_EXIT_USAGE;
  }
  if (!ag_onnx_available()) {
    fprintf(stderr, "anygrad export: this anygrad was built without ONNX export (AG_ONNX=OFF, or protobuf-c "
                    "not found at configure time: install libprotobuf-c-dev and protobuf-c-compiler, configure "
                    "with -DAG_ONNX=ON)\n");
    return AG_EXIT_RUNTIME;
  }
  const ag_cli_file in[1] = {{"--checkpoint", o.checkpoint}};
  const ag_cli_file outs[3] = {{"--onnx", o.out}, {"--samples-out", o.samples_out}, {"--gguf", gguf}};
  if (!ag_cli_outputs_distinct("export", in, 1, outs, 3)) return AG_EXIT_USAGE;
  o.dev = AG_CPU;
  if (dev_s) {
    int rc = ag_cli_device("export", dev_s, &o.dev);
    if (rc != AG_EXIT_OK) return rc;
  }
  /* an unwritable output is refused before any model is built */
  if (ag_output_check(o.out, "ONNX model") != AG_OK ||
      (o.samples_out && ag_output_check(o.samples_out, "samples file") != AG_OK) ||
      (gguf && ag_output_check(gguf, "GGUF file") != AG_OK)) {
    fprintf(stderr, "anygrad export: %s\n", ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  ag_generator *gen = ag_generator_create(o.seed);
  models m = {0};
  ag_status st = !gen ? ag_last_status()
                 : o.model == M_MLP ? load_mlp(&o, &m, gen)
                 : o.model == M_CNN ? load_cnn(&o, &m, gen)
                                    : load_llama(&o, &m, gen);
  if (st == AG_OK) st = write_onnx(&o, &m);
  if (st == AG_OK && o.n_samples) st = write_samples(&o, &m);
  models_free(&o, &m);
  ag_generator_free(gen);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad export: %s\n", ag_last_error());
    return st == AG_ERR_INVALID ? AG_EXIT_USAGE : AG_EXIT_RUNTIME;
  }
  printf("wrote %s (ONNX opset %d)%s%s\n", o.out, AG_ONNX_OPSET, o.samples_out ? " and " : "",
         o.samples_out ? o.samples_out : "");
  return gguf ? export_gguf(o.checkpoint, gguf, gguf_type) : AG_EXIT_OK;
}
