/* The GGUF export (include/anygrad/gguf.h, docs/export.md): its refusals
 * (NULL, bad type, dtype, a tokenizer that does not fit, two tokens of the
 * same bytes, a path that is a folder or in no folder) leave an existing
 * file as it was and no temp file; an untied f16 model with a tokenizer
 * smaller than its vocabulary is read back here by a small GGUF parser:
 * the header, "[PADn]" tokens of type unused, output.weight present, and
 * every F32 tensor the model's values (attn_q/attn_k with their rows
 * permuted per head). tests/gguf_check.py checks the rest with the `gguf`
 * package. */
#include <dirent.h>
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
#include "anygrad/backend.h" /* ag_f16_to_f32 */

static char g_dir[256];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

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

static int files_in_dir(void) {
  DIR *d = opendir(g_dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static ag_llama_config small_cfg(int64_t vocab, bool untied) {
  ag_llama_config c;
  memset(&c, 0, sizeof c);
  c.vocab_size = vocab;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 64;
  c.max_seq_len = 16;
  c.untied_head = untied;
  return c;
}

static ag_bpe *small_bpe(int vocab) {
  static const char text[] = "the cat sat on the mat; the cat ate the rat. and\ttabs\n12345 12345 the the the\n"
                             "caf\xc3\xa9 na\xc3\xafve caf\xc3\xa9 na\xc3\xafve   spaces   spaces\n";
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_train((const uint8_t *)text, sizeof text - 1, vocab, &b), AG_OK);
  return b;
}

static void test_type_parse(void **state) {
  (void)state;
  ag_gguf_type t = AG_GGUF_F16;
  assert_int_equal(ag_gguf_type_parse("f32", &t), AG_OK);
  assert_int_equal(t, AG_GGUF_F32);
  assert_int_equal(ag_gguf_type_parse("q8_0", &t), AG_OK);
  assert_int_equal(t, AG_GGUF_Q8_0);
  assert_int_equal(ag_gguf_type_parse("f16", &t), AG_OK);
  assert_int_equal(t, AG_GGUF_F16);
  assert_int_equal(ag_gguf_type_parse("Q8_0", &t), AG_ERR_INVALID);
  expect_msg("f32, f16 or q8_0");
  assert_int_equal(ag_gguf_type_parse("q4_0", &t), AG_ERR_INVALID);
  assert_int_equal(ag_gguf_type_parse(NULL, &t), AG_ERR_INVALID);
  assert_int_equal(ag_gguf_type_parse("f32", NULL), AG_ERR_INVALID);
  assert_int_equal(t, AG_GGUF_F16); /* untouched by refusals */
}

static void test_refusals(void **state) {
  (void)state;
  char p[300], sub[300];
  path_of(p, sizeof p, "old.gguf");
  spit(p, "old content");
  ag_llama_config c = small_cfg(300, false);
  ag_llama m;
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F32, NULL), AG_OK);
  ag_bpe *tok = small_bpe(300);
  int before = files_in_dir();

  assert_int_equal(ag_llama_save_gguf(NULL, tok, p, AG_GGUF_F32), AG_ERR_INVALID);
  assert_int_equal(ag_llama_save_gguf(&m, NULL, p, AG_GGUF_F32), AG_ERR_INVALID);
  assert_int_equal(ag_llama_save_gguf(&m, tok, NULL, AG_GGUF_F32), AG_ERR_INVALID);
  assert_int_equal(ag_llama_save_gguf(&m, tok, "", AG_GGUF_F32), AG_ERR_INVALID);
  assert_int_equal(ag_llama_save_gguf(&m, tok, p, (ag_gguf_type)2), AG_ERR_INVALID);
  expect_msg("type 2");
  ag_llama empty;
  memset(&empty, 0, sizeof empty);
  assert_int_equal(ag_llama_save_gguf(&empty, tok, p, AG_GGUF_F32), AG_ERR_INVALID);
  expect_msg("no parameters");

  /* a tokenizer larger than the model's vocabulary */
  ag_llama_config c2 = small_cfg(260, false);
  ag_llama m2;
  assert_int_equal(ag_llama_init(&m2, &c2, AG_CPU, AG_F32, NULL), AG_OK);
  assert_int_equal(ag_llama_save_gguf(&m2, tok, p, AG_GGUF_Q8_0), AG_ERR_UNSUPPORTED);
  char msg[96];
  snprintf(msg, sizeof msg, "the tokenizer has %d tokens, the model's vocabulary 260", ag_bpe_vocab_size(tok));
  expect_msg(msg);
  ag_llama_free(&m2);

  /* a model in f64 */
  ag_llama m3;
  if (ag_llama_init(&m3, &c, AG_CPU, AG_F64, NULL) == AG_OK) {
    assert_int_equal(ag_llama_save_gguf(&m3, tok, p, AG_GGUF_F32), AG_ERR_DTYPE);
    expect_msg("f32, f16 or bf16 only");
    ag_llama_free(&m3);
  }

  /* two tokens of the same bytes: abc = (ab)c = a(bc) */
  char bp[300];
  path_of(bp, sizeof bp, "dup.bpe");
  spit(bp, "anygrad-bpe 1\nsplit words256\nmerges 4\n97 98\n256 99\n98 99\n97 258\n");
  ag_bpe *dup = NULL;
  assert_int_equal(ag_bpe_load(bp, &dup), AG_OK);
  assert_int_equal(ag_llama_save_gguf(&m, dup, p, AG_GGUF_F16), AG_ERR_UNSUPPORTED);
  expect_msg("tokens 257 and 259 have the same bytes; a GGUF vocabulary");
  ag_bpe_free(dup);
  unlink(bp);

  /* a folder, a path in no folder */
  path_of(sub, sizeof sub, "afolder");
  assert_int_equal(mkdir(sub, 0700), 0);
  assert_int_equal(ag_llama_save_gguf(&m, tok, sub, AG_GGUF_F32), AG_ERR_IO);
  rmdir(sub);
  path_of(sub, sizeof sub, "no/such/dir.gguf");
  assert_int_equal(ag_llama_save_gguf(&m, tok, sub, AG_GGUF_F32), AG_ERR_IO);

  size_t n = 0;
  char *old = slurp(p, &n);
  assert_non_null(old);
  assert_string_equal(old, "old content"); /* nothing replaced */
  free(old);
  assert_int_equal(files_in_dir(), before); /* no temp file left */

  /* and a save that succeeds replaces it */
  assert_int_equal(ag_llama_save_gguf(&m, tok, p, AG_GGUF_Q8_0), AG_OK);
  old = slurp(p, &n);
  assert_non_null(old);
  assert_memory_equal(old, "GGUF\x03\0\0\0", 8);
  free(old);
  assert_int_equal(files_in_dir(), before);
  unlink(p);
  ag_bpe_free(tok);
  ag_llama_free(&m);
}

/* ---- a small GGUF reader for the round trip ---- */

typedef struct rd {
  const uint8_t *p;
  size_t n, at;
} rd;

static uint64_t rd_u(rd *r, size_t w) {
  assert_true(r->at + w <= r->n);
  uint64_t v = 0;
  memcpy(&v, r->p + r->at, w); /* little-endian host */
  r->at += w;
  return v;
}

static const char *rd_str(rd *r, size_t *len) {
  *len = (size_t)rd_u(r, 8);
  assert_true(r->at + *len <= r->n);
  const char *s = (const char *)r->p + r->at;
  r->at += *len;
  return s;
}

static void rd_skip_value(rd *r, uint32_t type) {
  static const size_t w[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  size_t len;
  assert_true(type <= 12);
  if (type == 8) {
    rd_str(r, &len);
  } else if (type == 9) {
    uint32_t et = (uint32_t)rd_u(r, 4);
    uint64_t cnt = rd_u(r, 8);
    for (uint64_t i = 0; i < cnt; i++) rd_skip_value(r, et);
  } else {
    r->at += w[type];
  }
}

static void test_untied_f16_round_trip(void **state) {
  (void)state;
  char p[300];
  path_of(p, sizeof p, "untied.gguf");
  ag_llama_config c = small_cfg(320, true);
  ag_llama m;
  assert_int_equal(ag_llama_init(&m, &c, AG_CPU, AG_F16, NULL), AG_OK);
  ag_bpe *tok = small_bpe(300);
  int nt = ag_bpe_vocab_size(tok);
  assert_true(nt <= 300);
  assert_int_equal(ag_llama_save_gguf(&m, tok, p, AG_GGUF_F32), AG_OK);
  size_t n = 0;
  uint8_t *file = (uint8_t *)slurp(p, &n);
  assert_non_null(file);
  rd r = {file, n, 0};
  assert_memory_equal(file, "GGUF", 4);
  r.at = 4;
  assert_int_equal(rd_u(&r, 4), 3);
  uint64_t n_tensors = rd_u(&r, 8), n_kv = rd_u(&r, 8);
  assert_int_equal(n_tensors, 3 + 9 * 2); /* with output.weight */
  assert_int_equal(n_kv, 21);
  bool saw_tokens = false;
  for (uint64_t i = 0; i < n_kv; i++) {
    size_t kl;
    const char *k = rd_str(&r, &kl);
    uint32_t type = (uint32_t)rd_u(&r, 4);
    if (kl == 21 && !memcmp(k, "tokenizer.ggml.tokens", 21)) {
      assert_int_equal(type, 9);
      assert_int_equal(rd_u(&r, 4), 8);
      assert_int_equal(rd_u(&r, 8), 320);
      for (int t = 0; t < 320; t++) {
        size_t sl;
        const char *s = rd_str(&r, &sl);
        char want[32];
        if (t >= nt) {
          snprintf(want, sizeof want, "[PAD%d]", t);
          assert_int_equal(sl, strlen(want));
          assert_memory_equal(s, want, sl);
        } else if (t == ' ') {
          assert_int_equal(sl, 2);
          assert_memory_equal(s, "\xc4\xa0", 2); /* U+0120 */
        }
      }
      saw_tokens = true;
    } else if (kl == 25 && !memcmp(k, "tokenizer.ggml.token_type", 25)) {
      assert_int_equal(rd_u(&r, 4), 5);
      assert_int_equal(rd_u(&r, 8), 320);
      for (int t = 0; t < 320; t++) assert_int_equal(rd_u(&r, 4), t < nt ? 1 : 5);
    } else {
      rd_skip_value(&r, type);
    }
  }
  assert_true(saw_tokens);
  struct {
    char name[64];
    uint64_t ne[2], off;
    uint32_t nd, type;
  } ti[32];
  for (uint64_t i = 0; i < n_tensors; i++) {
    size_t nl;
    const char *s = rd_str(&r, &nl);
    assert_true(nl < sizeof ti[i].name);
    memcpy(ti[i].name, s, nl);
    ti[i].name[nl] = 0;
    ti[i].nd = (uint32_t)rd_u(&r, 4);
    ti[i].ne[1] = 1;
    for (uint32_t d = 0; d < ti[i].nd; d++) ti[i].ne[d] = rd_u(&r, 8);
    ti[i].type = (uint32_t)rd_u(&r, 4);
    ti[i].off = rd_u(&r, 8);
    assert_int_equal(ti[i].type, 0); /* F32 */
    assert_int_equal(ti[i].off % 32, 0);
  }
  size_t data = (r.at + 31) / 32 * 32;
  /* every tensor against the model's values */
  for (uint64_t i = 0; i < n_tensors; i++) {
    const char *hf = NULL;
    char want[96];
    int layer = -1, heads = 0;
    char part[32];
    if (!strcmp(ti[i].name, "token_embd.weight")) hf = "model.embed_tokens.weight";
    else if (!strcmp(ti[i].name, "output.weight")) hf = "lm_head.weight";
    else if (!strcmp(ti[i].name, "output_norm.weight")) hf = "model.norm.weight";
    else {
      assert_int_equal(sscanf(ti[i].name, "blk.%d.%31[a-z_].weight", &layer, part), 2);
      static const char *const map[][2] = {{"attn_norm", "input_layernorm"},
                                           {"attn_q", "self_attn.q_proj"},
                                           {"attn_k", "self_attn.k_proj"},
                                           {"attn_v", "self_attn.v_proj"},
                                           {"attn_output", "self_attn.o_proj"},
                                           {"ffn_norm", "post_attention_layernorm"},
                                           {"ffn_gate", "mlp.gate_proj"},
                                           {"ffn_up", "mlp.up_proj"},
                                           {"ffn_down", "mlp.down_proj"}};
      for (size_t j = 0; j < sizeof map / sizeof map[0]; j++)
        if (!strcmp(part, map[j][0])) snprintf(want, sizeof want, "model.layers.%d.%s.weight", layer, map[j][1]);
      hf = want;
      if (!strcmp(part, "attn_q")) heads = 4;
      if (!strcmp(part, "attn_k")) heads = 2;
    }
    ag_tensor *t = NULL;
    for (int j = 0; j < m.params.count; j++)
      if (!strcmp(m.params.names[j], hf)) t = m.params.tensors[j];
    if (!t) fail_msg("no parameter %s for %s", hf, ti[i].name);
    uint64_t rows = ti[i].ne[1], cols = ti[i].ne[0];
    assert_int_equal((int64_t)(rows * cols), ag_tensor_numel(t));
    uint16_t *h = malloc(2 * rows * cols);
    assert_non_null(h);
    assert_int_equal(ag_to_host(t, h, 2 * rows * cols), AG_OK);
    const float *f = (const float *)(file + data + ti[i].off);
    assert_true(data + ti[i].off + 4 * rows * cols <= n);
    uint64_t hd = heads ? rows / (uint64_t)heads : 1;
    for (uint64_t row = 0; row < rows; row++) {
      uint64_t src = row;
      if (heads) { /* GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i */
        uint64_t hh = row / hd, k = row % hd;
        src = hh * hd + (k % 2) * (hd / 2) + k / 2;
      }
      for (uint64_t col = 0; col < cols; col++) {
        float v = ag_f16_to_f32(h[src * cols + col]), g;
        memcpy(&g, &f[row * cols + col], 4);
        if (memcmp(&v, &g, 4)) fail_msg("%s[%lu][%lu]: %g, expected %g", ti[i].name, (unsigned long)row,
                                        (unsigned long)col, (double)g, (double)v);
      }
    }
    free(h);
  }
  free(file);
  unlink(p);
  ag_bpe_free(tok);
  ag_llama_free(&m);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/ag_gguf_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return rmdir(g_dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_type_parse),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_untied_f16_round_trip),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
