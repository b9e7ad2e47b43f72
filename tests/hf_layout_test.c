/* The Hugging Face layout (include/anygrad/pretrained.h, docs/export.md):
 * save -> load round trips bit for bit (tied f32, untied bf16, with and
 * without a tokenizer), configs written by transformers read, configs and
 * JSON anygrad must refuse refused with the key named, nothing replaced by
 * a save that fails, tokenizer.json read back and doctored ones refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

static char g_dir[256];

static void path_of(char *buf, size_t n, const char *sub, const char *name) {
  if (name) snprintf(buf, n, "%s/%s/%s", g_dir, sub, name);
  else snprintf(buf, n, "%s/%s", g_dir, sub);
}

static void expect_msg(const char *fragment) {
  const char *msg = ag_last_error();
  if (!strstr(msg, fragment)) fail_msg("message '%s' lacks '%s'", msg, fragment);
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)len + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
  p[len] = 0;
  fclose(f);
  *n = (size_t)len;
  return p;
}

static void spit(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static ag_llama_config small_cfg(bool untied) {
  ag_llama_config c;
  memset(&c, 0, sizeof c);
  c.vocab_size = 300;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 48;
  c.max_seq_len = 16;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-6;
  c.untied_head = untied;
  return c;
}

static ag_bpe *small_bpe(void) {
  static const char text[] =
      "the cat sat on the mat; the cat ate the rat. \"quotes\" and \\backslashes\\ and\ttabs\n"
      "caf\xc3\xa9 na\xc3\xafve caf\xc3\xa9 na\xc3\xafve 12345 12345 the the the   spaces   spaces\n";
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_train((const uint8_t *)text, sizeof text - 1, 300, &b), AG_OK);
  return b;
}

static void assert_same_params(const ag_llama *a, const ag_llama *b) {
  assert_int_equal(a->params.count, b->params.count);
  for (int i = 0; i < a->params.count; i++) {
    assert_string_equal(a->params.names[i], b->params.names[i]);
    ag_tensor *x = a->params.tensors[i], *y = b->params.tensors[i];
    assert_int_equal(ag_tensor_dtype(x), ag_tensor_dtype(y));
    assert_int_equal(ag_tensor_numel(x), ag_tensor_numel(y));
    size_t n = (size_t)ag_tensor_numel(x) * ag_dtype_size(ag_tensor_dtype(x));
    unsigned char *p = malloc(n), *q = malloc(n);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal(ag_to_host(x, p, n), AG_OK);
    assert_int_equal(ag_to_host(y, q, n), AG_OK);
    assert_memory_equal(p, q, n); /* bit for bit */
    free(p);
    free(q);
  }
}

static void round_trip(const char *sub, bool untied, ag_dtype dt, bool with_tok) {
  char dir[300];
  path_of(dir, sizeof dir, sub, NULL);
  ag_llama_config c = small_cfg(untied);
  ag_llama m, back;
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, dt, NULL), AG_OK);
  ag_bpe *tok = with_tok ? small_bpe() : NULL, *tok_back = (ag_bpe *)1;
  assert_int_equal(ag_llama_save_pretrained(&m, tok, dir), AG_OK);
  assert_int_equal(ag_llama_load_pretrained(dir, AG_CPU, &back, &tok_back), AG_OK);
  assert_same_params(&m, &back);
  assert_int_equal(back.cfg.vocab_size, 300);
  assert_int_equal(back.cfg.dim, 32);
  assert_int_equal(back.cfg.n_layers, 2);
  assert_int_equal(back.cfg.n_heads, 4);
  assert_int_equal(back.cfg.n_kv_heads, 2);
  assert_int_equal(back.cfg.hidden_dim, 48);
  assert_int_equal(back.cfg.max_seq_len, 16);
  assert_true(back.cfg.rope_theta == 500000.0);
  assert_true(back.cfg.norm_eps == 1e-6);
  assert_int_equal(back.cfg.untied_head, untied);
  if (with_tok) {
    assert_non_null(tok_back);
    assert_int_equal(ag_bpe_vocab_size(tok_back), ag_bpe_vocab_size(tok));
    for (int i = 0; i < ag_bpe_vocab_size(tok); i++) {
      size_t la, lb;
      const uint8_t *a = ag_bpe_token_bytes(tok, i, &la), *b = ag_bpe_token_bytes(tok_back, i, &lb);
      assert_int_equal(la, lb);
      assert_memory_equal(a, b, la);
    }
    char p[400];
    path_of(p, sizeof p, sub, "tokenizer_config.json");
    assert_int_equal(access(p, F_OK), 0);
  } else {
    assert_null(tok_back);
  }
  ag_bpe_free(tok);
  ag_bpe_free(tok_back);
  ag_llama_free(&m);
  ag_llama_free(&back);
}

static void test_round_trip(void **state) {
  (void)state;
  round_trip("tied_f32", false, AG_F32, true);
  round_trip("untied_bf16", true, AG_BF16, false);
  round_trip("untied_f16", true, AG_F16, true);
  /* The files transformers reads. */
  char p[400];
  size_t n;
  path_of(p, sizeof p, "tied_f32", "config.json");
  char *cfg = slurp(p, &n);
  assert_non_null(cfg);
  assert_non_null(strstr(cfg, "\"architectures\": [\"LlamaForCausalLM\"]"));
  assert_non_null(strstr(cfg, "\"tie_word_embeddings\": true"));
  assert_non_null(strstr(cfg, "\"rope_theta\": 500000.0"));
  assert_non_null(strstr(cfg, "\"rms_norm_eps\": 1e-06"));
  assert_non_null(strstr(cfg, "\"torch_dtype\": \"float32\""));
  free(cfg);
  path_of(p, sizeof p, "untied_bf16", "config.json");
  cfg = slurp(p, &n);
  assert_non_null(strstr(cfg, "\"torch_dtype\": \"bfloat16\""));
  assert_non_null(strstr(cfg, "\"tie_word_embeddings\": false"));
  free(cfg);
  path_of(p, sizeof p, "untied_bf16", "generation_config.json");
  assert_int_equal(access(p, F_OK), 0);
  path_of(p, sizeof p, "untied_bf16", "tokenizer.json");
  assert_int_not_equal(access(p, F_OK), 0);
}

/* A folder holding a valid model.safetensors (tied f32 small_cfg) and the
 * config text given. */
static void folder_with_config(const char *sub, const char *config) {
  char dir[300], p[400];
  path_of(dir, sizeof dir, sub, NULL);
  mkdir(dir, 0777);
  ag_llama_config c = small_cfg(false);
  ag_llama m;
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F32, NULL), AG_OK);
  path_of(p, sizeof p, sub, "model.safetensors");
  assert_int_equal(ag_llama_save(&m, p), AG_OK);
  ag_llama_free(&m);
  path_of(p, sizeof p, sub, "config.json");
  if (config) spit(p, config);
  else unlink(p);
}

#define CFG_HEAD                                                                                        \
  "{\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, " \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 16, "            \
  "\"vocab_size\": 300, \"tie_word_embeddings\": true, \"rms_norm_eps\": 1e-6"

static void expect_refused(const char *config, ag_status want, const char *fragment) {
  folder_with_config("refuse", config);
  char dir[300];
  path_of(dir, sizeof dir, "refuse", NULL);
  ag_llama m;
  memset(&m, 0xab, sizeof m);
  ag_bpe *tok = (ag_bpe *)1;
  ag_status st = ag_llama_load_pretrained(dir, AG_CPU, &m, &tok);
  if (st != want) fail_msg("config %s: status %d, want %d (%s)", config ? config : "(none)", st, want, ag_last_error());
  expect_msg(fragment);
  assert_null(tok);
  assert_int_equal(m.params.count, 0); /* holds nothing */
  assert_null(m.layers);
  ag_llama_free(&m);
}

static void test_config(void **state) {
  (void)state;
  /* What transformers 5 writes, with keys anygrad ignores. */
  folder_with_config("hf5", CFG_HEAD ", \"architectures\": [\"LlamaForCausalLM\"], \"dtype\": \"float32\", "
                            "\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"}, "
                            "\"attention_bias\": false, \"attention_dropout\": 0.0, \"mlp_bias\": false, "
                            "\"head_dim\": 8, \"hidden_act\": \"silu\", \"pretraining_tp\": 1, "
                            "\"bos_token_id\": [1, 2], \"eos_token_id\": 2, \"transformers_version\": \"5.23.0\", "
                            "\"use_cache\": true, \"initializer_range\": 0.02, \"layer_types\": null}");
  char dir[300];
  path_of(dir, sizeof dir, "hf5", NULL);
  ag_llama_config c;
  assert_int_equal(ag_llama_read_config(dir, &c), AG_OK);
  assert_true(c.rope_theta == 500000.0);
  assert_true(c.norm_eps == 1e-6);
  assert_false(c.untied_head);
  assert_int_equal(c.n_kv_heads, 2);
  ag_llama m;
  assert_int_equal(ag_llama_load_pretrained(dir, AG_CPU, &m, NULL), AG_OK);
  ag_llama_free(&m);
  /* Defaults: num_key_value_heads = heads, rope_theta 10000, eps 1e-6, untied. */
  folder_with_config("defaults", "{\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 48, "
                                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                                 "\"max_position_embeddings\": 16, \"vocab_size\": 300}");
  path_of(dir, sizeof dir, "defaults", NULL);
  assert_int_equal(ag_llama_read_config(dir, &c), AG_OK);
  assert_int_equal(c.n_kv_heads, 4);
  assert_true(c.rope_theta == 10000.0 && c.norm_eps == 1e-6 && c.untied_head);

  /* Refused with the key named. */
  expect_refused(NULL, AG_ERR_IO, "config.json");
  expect_refused("", AG_ERR_CORRUPT, "not valid JSON");
  expect_refused("[1]", AG_ERR_CORRUPT, "not a JSON object");
  expect_refused(CFG_HEAD, AG_ERR_CORRUPT, "not valid JSON");        /* cut */
  expect_refused(CFG_HEAD ",}", AG_ERR_CORRUPT, "not valid JSON");    /* trailing comma */
  expect_refused(CFG_HEAD "} x", AG_ERR_CORRUPT, "after the JSON value");
  expect_refused(CFG_HEAD ", \"a\": \"\\ud800\"}", AG_ERR_CORRUPT, "surrogate");
  expect_refused(CFG_HEAD ", \"a\": \"\x01\"}", AG_ERR_CORRUPT, "control character");
  expect_refused(CFG_HEAD ", \"a\": \"\xff\"}", AG_ERR_CORRUPT, "UTF-8");
  expect_refused(CFG_HEAD ", \"a\": 1e999}", AG_ERR_CORRUPT, "too large");
  expect_refused(CFG_HEAD ", /* c */ \"a\": 1}", AG_ERR_CORRUPT, "not valid JSON");
  expect_refused(CFG_HEAD ", \"a\": 01}", AG_ERR_CORRUPT, "not valid JSON");
  expect_refused(CFG_HEAD ", \"hidden_size\": 32}", AG_ERR_CORRUPT, "\"hidden_size\" occurs twice");
  expect_refused("{\"model_type\": \"llama\", \"hidden_size\": 32}", AG_ERR_CORRUPT,
                 "\"intermediate_size\" is missing");
  expect_refused("{\"hidden_size\": 32}", AG_ERR_CORRUPT, "\"model_type\" is missing");
  expect_refused(CFG_HEAD ", \"num_hidden_layers\": 2.5}", AG_ERR_CORRUPT, "occurs twice");
  expect_refused("{\"model_type\": \"llama\", \"hidden_size\": 32.5}", AG_ERR_CORRUPT,
                 "\"hidden_size\" must be an integer");
  expect_refused("{\"model_type\": \"llama\", \"hidden_size\": \"32\"}", AG_ERR_CORRUPT,
                 "\"hidden_size\" must be a number");
  expect_refused("{\"model_type\": \"mistral\"}", AG_ERR_UNSUPPORTED, "\"model_type\"");
  expect_refused(CFG_HEAD ", \"hidden_act\": \"gelu\"}", AG_ERR_UNSUPPORTED, "\"hidden_act\"");
  expect_refused(CFG_HEAD ", \"attention_bias\": true}", AG_ERR_UNSUPPORTED, "\"attention_bias\"");
  expect_refused(CFG_HEAD ", \"mlp_bias\": true}", AG_ERR_UNSUPPORTED, "\"mlp_bias\"");
  expect_refused(CFG_HEAD ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}", AG_ERR_UNSUPPORTED,
                 "\"rope_scaling\"");
  expect_refused(CFG_HEAD ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", AG_ERR_UNSUPPORTED,
                 "\"rope_scaling\"");
  expect_refused(CFG_HEAD ", \"rope_parameters\": {\"rope_type\": \"yarn\"}}", AG_ERR_UNSUPPORTED,
                 "\"rope_parameters\"");
  expect_refused(CFG_HEAD ", \"head_dim\": 16}", AG_ERR_UNSUPPORTED, "\"head_dim\"");
  expect_refused(CFG_HEAD ", \"pretraining_tp\": 2}", AG_ERR_UNSUPPORTED, "\"pretraining_tp\"");
  expect_refused(CFG_HEAD ", \"quantization_config\": {\"bits\": 4}}", AG_ERR_UNSUPPORTED, "\"quantization_config\"");
  expect_refused(CFG_HEAD ", \"torch_dtype\": \"float64\"}", AG_ERR_UNSUPPORTED, "\"torch_dtype\"");
  expect_refused(CFG_HEAD ", \"rope_theta\": 0}", AG_ERR_UNSUPPORTED, "\"rope_theta\"");
  /* A config of another shape than the weights: ag_llama_load's error. */
  expect_refused("{\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 48, "
                 "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                 "\"max_position_embeddings\": 16, \"vocab_size\": 300, \"tie_word_embeddings\": true}",
                 AG_ERR_CORRUPT, "model.layers.2");
  /* Sizes the weights do not have are refused before anything is allocated. */
  expect_refused("{\"model_type\": \"llama\", \"hidden_size\": 1048576, \"intermediate_size\": 48, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 16, "
                 "\"vocab_size\": 1048576, \"tie_word_embeddings\": true}",
                 AG_ERR_SHAPE, "is not [1048576, 1048576] as config.json says");
  /* Nesting deeper than the reader's bound. */
  char deep[400];
  size_t k = 0;
  k += (size_t)snprintf(deep, sizeof deep, "{\"a\": ");
  for (int i = 0; i < 70; i++) deep[k++] = '[';
  for (int i = 0; i < 70; i++) deep[k++] = ']';
  deep[k++] = '}';
  deep[k] = 0;
  expect_refused(deep, AG_ERR_CORRUPT, "nested deeper");
  /* Sharded weights. */
  folder_with_config("sharded", CFG_HEAD "}");
  char p[400];
  path_of(p, sizeof p, "sharded", "model.safetensors");
  unlink(p);
  path_of(p, sizeof p, "sharded", "model.safetensors.index.json");
  spit(p, "{}");
  path_of(dir, sizeof dir, "sharded", NULL);
  assert_int_equal(ag_llama_load_pretrained(dir, AG_CPU, &m, NULL), AG_ERR_UNSUPPORTED);
  expect_msg("sharded");
}

static void test_nothing_overwritten(void **state) {
  (void)state;
  char dir[300], p[400];
  path_of(dir, sizeof dir, "keep", NULL);
  ag_llama_config c = small_cfg(false);
  ag_llama m, other;
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F32, NULL), AG_OK);
  ag_bpe *tok = small_bpe();
  assert_int_equal(ag_llama_save_pretrained(&m, tok, dir), AG_OK);
  static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                      "tokenizer_config.json"};
  char *before[5];
  size_t nb[5];
  for (int i = 0; i < 5; i++) {
    path_of(p, sizeof p, "keep", files[i]);
    before[i] = slurp(p, &nb[i]);
    assert_non_null(before[i]);
  }
  /* Another model (other sizes, other weights) whose save fails at each
   * stage: every file keeps its content. */
  ag_llama_config c2 = small_cfg(true);
  c2.n_layers = 1;
  assert_int_equal(ag_llama_init(&other, &c2, AG_CPU, AG_F32, NULL), AG_OK);
  /* 1. tokenizer.json is a folder: refused after config.json was begun. */
  path_of(p, sizeof p, "keep", "tokenizer.json");
  char moved[420];
  snprintf(moved, sizeof moved, "%s.moved", p);
  assert_int_equal(rename(p, moved), 0);
  assert_int_equal(mkdir(p, 0777), 0);
  assert_int_equal(ag_llama_save_pretrained(&other, tok, dir), AG_ERR_IO);
  expect_msg("tokenizer.json");
  assert_int_equal(rmdir(p), 0);
  assert_int_equal(rename(moved, p), 0);
  /* 2. model.safetensors is a folder: refused before anything is written. */
  path_of(p, sizeof p, "keep", "model.safetensors");
  snprintf(moved, sizeof moved, "%s.moved", p);
  assert_int_equal(rename(p, moved), 0);
  assert_int_equal(mkdir(p, 0777), 0);
  assert_int_equal(ag_llama_save_pretrained(&other, NULL, dir), AG_ERR_IO);
  expect_msg("model.safetensors");
  assert_int_equal(rmdir(p), 0);
  assert_int_equal(rename(moved, p), 0);
  /* 3. a tokenizer larger than the model's vocabulary. */
  c2.vocab_size = 260;
  ag_llama tiny;
  assert_int_equal(ag_llama_init(&tiny, &c2, AG_CPU, AG_F32, NULL), AG_OK);
  assert_int_equal(ag_llama_save_pretrained(&tiny, tok, dir), AG_ERR_UNSUPPORTED);
  expect_msg("the tokenizer has");
  ag_llama_free(&tiny);
  /* 4. the folder is a file. */
  path_of(p, sizeof p, "keep", "config.json");
  assert_int_equal(ag_llama_save_pretrained(&other, NULL, p), AG_ERR_IO);
  expect_msg("not a folder");
  for (int i = 0; i < 5; i++) {
    size_t n;
    path_of(p, sizeof p, "keep", files[i]);
    char *now = slurp(p, &n);
    assert_non_null(now);
    assert_int_equal(n, nb[i]);
    assert_memory_equal(now, before[i], n);
    free(now);
    free(before[i]);
  }
  /* No temp files left behind. */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -q tmp", dir);
  assert_int_not_equal(system(cmd), 0);
  ag_bpe_free(tok);
  ag_llama_free(&m);
  ag_llama_free(&other);
}

/* tokenizer.json written, read back, and doctored copies refused. */
static void test_tokenizer_json(void **state) {
  (void)state;
  char p[400], q[400];
  path_of(p, sizeof p, "tok.json", NULL);
  ag_bpe *tok = small_bpe(), *back = NULL;
  assert_int_equal(ag_bpe_save_hf(tok, p), AG_OK);
  assert_int_equal(ag_bpe_load_hf(p, &back), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(back), ag_bpe_vocab_size(tok));
  static const uint8_t sample[] = "the cat sat on the mat, caf\xc3\xa9   12345\n";
  int32_t a[64], b[64];
  size_t na, nb;
  assert_int_equal(ag_bpe_encode(tok, sample, sizeof sample - 1, a, 64, &na), AG_OK);
  assert_int_equal(ag_bpe_encode(back, sample, sizeof sample - 1, b, 64, &nb), AG_OK);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na * sizeof a[0]);
  assert_true(na < sizeof sample - 1); /* merges did apply */
  ag_bpe_free(back);
  size_t n;
  char *text = slurp(p, &n);
  assert_non_null(text);
  /* The JSON escapes: '"' and '\\' map to themselves in the byte alphabet. */
  assert_non_null(strstr(text, "\"\\\"\": 34"));
  assert_non_null(strstr(text, "\"\\\\\": 92"));
  assert_non_null(strstr(text, "\"\xc4\xa0\": 32")); /* space is U+0120 */
  struct {
    const char *from, *to;
    ag_status want;
    const char *frag;
  } doctor[] = {
      {"\"added_tokens\": []", "\"added_tokens\": [{\"id\": 0}]", AG_ERR_UNSUPPORTED, "added_tokens"},
      {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", AG_ERR_UNSUPPORTED, "normalizer"},
      {"{1,255}", "{1,254}", AG_ERR_UNSUPPORTED, "Regex"},
      {"\"use_regex\": false}\n", "\"use_regex\": true}\n", AG_ERR_UNSUPPORTED, "use_regex"},
      {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", AG_ERR_UNSUPPORTED, "model.type"},
      {"\"byte_fallback\": false", "\"byte_fallback\": true", AG_ERR_UNSUPPORTED, "byte_fallback"},
      {"\"!\": 33", "\"!\": 34", AG_ERR_CORRUPT, "model.vocab"},
      {"\"!\": 33", "\"!\": 1e9", AG_ERR_CORRUPT, "model.vocab"},
      {"\"merges\": [", "\"merges\": [\"a b\", ", AG_ERR_CORRUPT, "model.merges"},
      {"\"version\"", "\"version\" \"1.0\", \"x\"", AG_ERR_CORRUPT, "not valid JSON"},
  };
  path_of(q, sizeof q, "doctored.json", NULL);
  for (size_t i = 0; i < sizeof doctor / sizeof doctor[0]; i++) {
    char *at = strstr(text, doctor[i].from);
    if (!at) fail_msg("'%s' not in tokenizer.json", doctor[i].from);
    FILE *f = fopen(q, "wb");
    assert_non_null(f);
    fwrite(text, 1, (size_t)(at - text), f);
    fputs(doctor[i].to, f);
    fputs(at + strlen(doctor[i].from), f);
    fclose(f);
    back = (ag_bpe *)1;
    ag_status st = ag_bpe_load_hf(q, &back);
    if (st != doctor[i].want) fail_msg("doctored '%s': status %d (%s)", doctor[i].to, st, ag_last_error());
    expect_msg(doctor[i].frag);
    assert_null(back);
  }
  /* A merge that makes another token than 256 + i: swap two merge lines. */
  char *m0 = strstr(text, "\"merges\": [\n      ");
  assert_non_null(m0);
  m0 += strlen("\"merges\": [\n      ");
  char *e0 = strstr(m0, ",\n      "), *m1 = e0 + strlen(",\n      "), *e1 = strstr(m1, ",\n");
  assert_non_null(e1);
  FILE *f = fopen(q, "wb");
  fwrite(text, 1, (size_t)(m0 - text), f);
  fwrite(m1, 1, (size_t)(e1 - m1), f);
  fwrite(e0, 1, (size_t)(m1 - e0), f);
  fwrite(m0, 1, (size_t)(e0 - m0), f);
  fputs(e1, f);
  fclose(f);
  assert_int_equal(ag_bpe_load_hf(q, &back), AG_ERR_CORRUPT);
  expect_msg("does not make token 256");
  free(text);
  /* Bad arguments. */
  assert_int_equal(ag_bpe_save_hf(NULL, p), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_save_hf(tok, ""), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_load_hf(NULL, &back), AG_ERR_INVALID);
  assert_int_equal(ag_llama_save_pretrained(NULL, tok, p), AG_ERR_INVALID);
  assert_int_equal(ag_llama_load_pretrained(NULL, AG_CPU, NULL, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_llama_read_config(p, NULL), AG_ERR_INVALID);
  ag_bpe_free(tok);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/ag_hf_layout_test.XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_nothing_overwritten),
      cmocka_unit_test(test_tokenizer_json),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
