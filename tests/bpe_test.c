/* Byte-level BPE tokenizer (include/anygrad/tokenizer.h): exact round trips
 * on random bytes and on the fortunes corpus (when installed), the classic
 * "aaabdaaabac" merges, save/load, damaged files and bad arguments. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "anygrad/tokenizer.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"

static char g_dir[256];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 11);
}

static void expect_msg(const char *fragment) {
  const char *msg = ag_last_error();
  if (!strstr(msg, fragment)) fail_msg("message '%s' lacks '%s'", msg, fragment);
}

/* encode then decode bytes[0..n) and compare; returns the number of ids */
static size_t round_trip(const ag_bpe *b, const uint8_t *bytes, size_t n) {
  int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
  uint8_t *back = malloc(n ? n : 1);
  assert_non_null(ids);
  assert_non_null(back);
  size_t nids = 0, nb = 0;
  assert_int_equal(ag_bpe_encode(b, bytes, n, ids, n, &nids), AG_OK);
  assert_true(nids <= n);
  for (size_t i = 0; i < nids; i++) assert_true(ids[i] >= 0 && ids[i] < ag_bpe_vocab_size(b));
  size_t count = 99;
  assert_int_equal(ag_bpe_encode(b, bytes, n, NULL, 0, &count), AG_OK); /* count only */
  assert_int_equal(count, nids);
  assert_int_equal(ag_bpe_decode(b, ids, nids, back, n, &nb), AG_OK);
  assert_int_equal(nb, n);
  if (n) assert_memory_equal(back, bytes, n);
  free(ids);
  free(back);
  return nids;
}

static uint8_t *random_text(size_t n) {
  /* words, spaces, punctuation, UTF-8 and raw bytes: something to merge */
  static const char *const words[] = {"the", " the", " cat", " sat", "\n", "  ", "on", " mat", ".", "\xc3\xa9t\xc3\xa9"};
  uint8_t *s = malloc(n ? n : 1);
  size_t k = 0;
  while (k < n) {
    const char *w = words[rnd() % 10];
    size_t l = strlen(w);
    if (rnd() % 8 == 0) {
      s[k++] = (uint8_t)rnd();
      continue;
    }
    for (size_t i = 0; i < l && k < n; i++) s[k++] = (uint8_t)w[i];
  }
  return s;
}

static void test_classic(void **state) {
  (void)state;
  const char *text = "aaabdaaabac";
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_train((const uint8_t *)text, strlen(text), 300, &b), AG_OK);
  /* aa (4) -> 256; then ab and 256 a tie at 2, (97,98) < (256,97) -> 257;
   * then 256 257 (2) -> 258; every other pair occurs once: stop. */
  assert_int_equal(ag_bpe_vocab_size(b), 259);
  size_t len = 0;
  const uint8_t *t = ag_bpe_token_bytes(b, 256, &len);
  assert_int_equal(len, 2);
  assert_memory_equal(t, "aa", 2);
  t = ag_bpe_token_bytes(b, 257, &len);
  assert_int_equal(len, 2);
  assert_memory_equal(t, "ab", 2);
  t = ag_bpe_token_bytes(b, 258, &len);
  assert_int_equal(len, 4);
  assert_memory_equal(t, "aaab", 4);
  int32_t ids[16];
  size_t n = 0;
  assert_int_equal(ag_bpe_encode(b, (const uint8_t *)text, strlen(text), ids, 16, &n), AG_OK);
  int32_t want[] = {258, 'd', 258, 'a', 'c'};
  assert_int_equal(n, 5);
  assert_memory_equal(ids, want, sizeof want);
  /* vocab_size caps the merges */
  ag_bpe_free(b);
  assert_int_equal(ag_bpe_train((const uint8_t *)text, strlen(text), 257, &b), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(b), 257);
  assert_int_equal(ag_bpe_encode(b, (const uint8_t *)text, strlen(text), ids, 16, &n), AG_OK);
  assert_int_equal(n, 9); /* 256 a b d 256 a b a c */
  ag_bpe_free(b);
}

static void test_chunks(void **state) {
  (void)state;
  /* merges never cross a word boundary: " world" stays apart from "hello" */
  const char *text = "hello world hello world hello world";
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_train((const uint8_t *)text, strlen(text), 1000, &b), AG_OK);
  for (int id = 256; id < ag_bpe_vocab_size(b); id++) {
    size_t len = 0;
    const uint8_t *t = ag_bpe_token_bytes(b, id, &len);
    assert_non_null(t);
    assert_true(len >= 2);
    for (size_t i = 1; i < len; i++) assert_false(t[i] == ' '); /* a space only leads */
  }
  int32_t ids[64];
  size_t n = 0;
  assert_int_equal(ag_bpe_encode(b, (const uint8_t *)text, strlen(text), ids, 64, &n), AG_OK);
  assert_int_equal(n, 6); /* "hello", " world" x 3 */
  round_trip(b, (const uint8_t *)text, strlen(text));
  ag_bpe_free(b);
}

static void test_random_round_trip(void **state) {
  (void)state;
  g_rng = 12345;
  size_t cn = 200000;
  uint8_t *corpus = random_text(cn);
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_train(corpus, cn, 1024, &b), AG_OK);
  assert_true(ag_bpe_vocab_size(b) > 300);
  /* compression on text like the corpus */
  size_t nids = round_trip(b, corpus, cn);
  assert_true(nids < cn / 2);
  uint8_t buf[600];
  for (int k = 0; k < 3000; k++) {
    size_t n = rnd() % sizeof buf;
    int mode = k % 3;
    for (size_t i = 0; i < n; i++) {
      uint32_t r = rnd();
      buf[i] = mode == 0 ? (uint8_t)r : mode == 1 ? (uint8_t)" a\n\0\xff"[r % 5] : corpus[(k * 97 + i) % cn];
    }
    round_trip(b, buf, n);
  }
  round_trip(b, NULL, 0);
  round_trip(b, (const uint8_t *)"\0\0\0", 3);
  /* a long run of one byte, longer than a chunk */
  uint8_t *run = malloc(100000);
  memset(run, 'a', 100000);
  round_trip(b, run, 100000);
  memset(run, ' ', 100000);
  round_trip(b, run, 100000);
  free(run);
  ag_bpe_free(b);
  free(corpus);
}

static uint8_t *read_fortunes(size_t *n) {
  DIR *d = opendir(FORTUNES_DIR);
  if (!d) return NULL;
  size_t cap = 1 << 22, k = 0;
  uint8_t *buf = malloc(cap);
  struct dirent *e;
  char **names = NULL;
  size_t nn = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || strchr(e->d_name, '.')) continue; /* skip .dat, .u8 */
    names = realloc(names, sizeof(char *) * (nn + 1));
    names[nn++] = strdup(e->d_name);
  }
  closedir(d);
  for (size_t i = 0; i < nn; i++) { /* sorted: the corpus is the same everywhere */
    for (size_t j = i + 1; j < nn; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
      }
    char p[512];
    snprintf(p, sizeof p, "%s/%s", FORTUNES_DIR, names[i]);
    FILE *f = fopen(p, "rb");
    if (f) {
      size_t r;
      while ((r = fread(buf + k, 1, cap - k, f)) > 0) {
        k += r;
        if (k == cap) buf = realloc(buf, cap *= 2);
      }
      fclose(f);
    }
    free(names[i]);
  }
  free(names);
  *n = k;
  return buf;
}

static void test_fortunes(void **state) {
  (void)state;
  size_t n = 0;
  uint8_t *text = read_fortunes(&n);
  if (!text || n == 0) {
    free(text);
    print_message("fortunes corpus not installed (" FORTUNES_DIR "; Debian package fortunes): skipped\n");
    skip();
  }
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_train(text, n, 2048, &b), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(b), 2048);
  size_t nids = round_trip(b, text, n);
  print_message("fortunes: %zu bytes -> %zu tokens (%.2f bytes/token)\n", n, nids, (double)n / (double)nids);
  assert_true(nids * 2 < n); /* a 2048-token vocabulary compresses English text */
  char p[512];
  path_of(p, sizeof p, "fortunes.bpe");
  assert_int_equal(ag_bpe_save(b, p), AG_OK);
  ag_bpe *c = NULL;
  assert_int_equal(ag_bpe_load(p, &c), AG_OK);
  int32_t *i1 = malloc(sizeof(int32_t) * n), *i2 = malloc(sizeof(int32_t) * n);
  size_t n1 = 0, n2 = 0;
  assert_int_equal(ag_bpe_encode(b, text, n, i1, n, &n1), AG_OK);
  assert_int_equal(ag_bpe_encode(c, text, n, i2, n, &n2), AG_OK);
  assert_int_equal(n1, n2);
  assert_memory_equal(i1, i2, n1 * sizeof(int32_t));
  /* the same ids from pieces of about 8 KB (encoded without the cache of
   * large inputs), cut after a fortune's "%\n" before a non-blank byte: a
   * chunk boundary */
  size_t start = 0, k = 0, pieces = 0;
  while (start < n) {
    size_t p = start + 8000 < n ? start + 8000 : n;
    while (p < n && !(text[p - 2] == '%' && text[p - 1] == '\n' && text[p] > ' ')) p++;
    size_t m = 0;
    assert_int_equal(ag_bpe_encode(b, text + start, p - start, i2 + k, n - k, &m), AG_OK);
    k += m;
    start = p;
    pieces++;
  }
  assert_true(pieces > 100);
  assert_int_equal(k, n1);
  assert_memory_equal(i1, i2, n1 * sizeof(int32_t));
  free(i1);
  free(i2);
  ag_bpe_free(b);
  ag_bpe_free(c);
  free(text);
}

static void write_file(const char *name, const char *content) {
  char p[512];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static char *read_file(const char *name) {
  char p[512];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  char *buf = calloc(1, 1 << 20);
  size_t r = fread(buf, 1, (1 << 20) - 1, f);
  buf[r] = 0;
  fclose(f);
  return buf;
}

static void test_save_load(void **state) {
  (void)state;
  g_rng = 777;
  size_t cn = 50000;
  uint8_t *corpus = random_text(cn);
  ag_bpe *b = NULL, *c = NULL;
  assert_int_equal(ag_bpe_train(corpus, cn, 600, &b), AG_OK);
  char p[512];
  path_of(p, sizeof p, "rt.bpe");
  assert_int_equal(ag_bpe_save(b, p), AG_OK);
  assert_int_equal(ag_bpe_load(p, &c), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(b), ag_bpe_vocab_size(c));
  for (int id = 0; id < ag_bpe_vocab_size(b); id++) {
    size_t l1, l2;
    const uint8_t *t1 = ag_bpe_token_bytes(b, id, &l1), *t2 = ag_bpe_token_bytes(c, id, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(t1, t2, l1);
  }
  int32_t *i1 = malloc(sizeof(int32_t) * cn), *i2 = malloc(sizeof(int32_t) * cn);
  size_t n1 = 0, n2 = 0;
  assert_int_equal(ag_bpe_encode(b, corpus, cn, i1, cn, &n1), AG_OK);
  assert_int_equal(ag_bpe_encode(c, corpus, cn, i2, cn, &n2), AG_OK);
  assert_int_equal(n1, n2);
  assert_memory_equal(i1, i2, n1 * sizeof(int32_t));
  free(i1);
  free(i2);
  /* a save that fails leaves the existing file as it was */
  char *before = read_file("rt.bpe");
  ag_error_clear();
  assert_int_not_equal(ag_bpe_save(b, "/nonexistent-dir/x.bpe"), AG_OK);
  assert_int_equal(ag_bpe_save(NULL, p), AG_ERR_INVALID);
  char *after = read_file("rt.bpe");
  assert_string_equal(before, after);
  /* save a byte-only tokenizer: 0 merges */
  ag_bpe *z = NULL;
  assert_int_equal(ag_bpe_train(NULL, 0, 256, &z), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(z), 256);
  path_of(p, sizeof p, "zero.bpe");
  assert_int_equal(ag_bpe_save(z, p), AG_OK);
  ag_bpe_free(z);
  assert_int_equal(ag_bpe_load(p, &z), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(z), 256);
  round_trip(z, corpus, 1000);
  ag_bpe_free(z);
  free(before);
  free(after);
  ag_bpe_free(b);
  ag_bpe_free(c);
  free(corpus);
}

static void expect_corrupt(const char *name, const char *content, const char *fragment) {
  write_file(name, content);
  char p[512];
  path_of(p, sizeof p, name);
  ag_bpe *b = (ag_bpe *)p;
  ag_error_clear();
  assert_int_equal(ag_bpe_load(p, &b), AG_ERR_CORRUPT);
  assert_null(b);
  expect_msg(fragment);
  expect_msg(name);
}

static void test_corrupt(void **state) {
  (void)state;
  const char *good = "anygrad-bpe 1\nsplit words256\nmerges 3\n97 97\n97 98\n256 257\n";
  write_file("good.bpe", good);
  char p[512];
  path_of(p, sizeof p, "good.bpe");
  ag_bpe *b = NULL;
  assert_int_equal(ag_bpe_load(p, &b), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(b), 259);
  size_t len;
  assert_memory_equal(ag_bpe_token_bytes(b, 258, &len), "aaab", 4);
  ag_bpe_free(b);
  /* every truncation of the good file is refused */
  char cut[256];
  for (size_t k = 0; k < strlen(good); k++) {
    memcpy(cut, good, k);
    cut[k] = 0;
    write_file("cut.bpe", cut);
    path_of(p, sizeof p, "cut.bpe");
    b = NULL;
    ag_error_clear();
    if (ag_bpe_load(p, &b) != AG_ERR_CORRUPT) fail_msg("truncated at %zu bytes: loaded", k);
    assert_null(b);
  }
  expect_corrupt("trunc.bpe", "anygrad-bpe 1\nsplit words256\nmerges 3\n97 97\n97 98\n", "truncated");
  expect_corrupt("magic.bpe", "anygrad-bpx 1\nsplit words256\nmerges 0\n", "wrong magic");
  expect_corrupt("binary.bpe", "\x89PNG\r\n\x1a\n", "wrong magic");
  expect_corrupt("empty.bpe", "", "truncated");
  expect_corrupt("version.bpe", "anygrad-bpe 2\nsplit words256\nmerges 0\n", "version");
  expect_corrupt("split.bpe", "anygrad-bpe 1\nsplit none\nmerges 0\n", "split");
  expect_corrupt("later.bpe", "anygrad-bpe 1\nsplit words256\nmerges 2\n97 257\n97 98\n", "not defined before");
  expect_corrupt("self.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n256 97\n", "not defined before");
  expect_corrupt("range.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n97 99999999999\n", "token ids");
  expect_corrupt("neg.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n-1 97\n", "token ids");
  expect_corrupt("count.bpe", "anygrad-bpe 1\nsplit words256\nmerges 99999999\n", "merges N");
  expect_corrupt("extra.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n97 97\n98 98\n", "after the last merge");
  expect_corrupt("repeat.bpe", "anygrad-bpe 1\nsplit words256\nmerges 2\n97 97\n97 97\n", "repeats");
  expect_corrupt("garbage.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n97 x\n", "token ids");
  expect_corrupt("spaces.bpe", "anygrad-bpe 1\nsplit words256\nmerges 1\n97  97\n", "token ids");
  /* a token longer than AG_BPE_MAX_TOKEN_BYTES (doubling "a" 9 times: 512 bytes) */
  char big[512] = "anygrad-bpe 1\nsplit words256\nmerges 9\n97 97\n";
  for (int i = 1; i < 9; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "%d %d\n", 255 + i, 255 + i);
  expect_corrupt("long.bpe", big, "at most 256");
  /* random damage to a saved file: loads or is refused, never crashes */
  g_rng = 4242;
  size_t cn = 20000;
  uint8_t *corpus = random_text(cn);
  assert_int_equal(ag_bpe_train(corpus, cn, 400, &b), AG_OK);
  path_of(p, sizeof p, "fuzz.bpe");
  assert_int_equal(ag_bpe_save(b, p), AG_OK);
  ag_bpe_free(b);
  char *orig = read_file("fuzz.bpe");
  size_t olen = strlen(orig);
  int loaded = 0, refused = 0;
  for (int k = 0; k < 1000; k++) {
    char *m = strdup(orig);
    size_t len = olen;
    for (int e = 0; e < 1 + k % 3; e++) {
      size_t at = rnd() % len;
      m[at] = (char)" 0123456789\nx-"[rnd() % 14];
    }
    if (k % 5 == 0) len = rnd() % olen;
    m[len] = 0;
    write_file("fuzz.bpe", m);
    b = NULL;
    ag_status st = ag_bpe_load(p, &b);
    if (st == AG_OK) {
      loaded++;
      round_trip(b, corpus, 2000);
      ag_bpe_free(b);
    } else {
      assert_int_equal(st, AG_ERR_CORRUPT);
      assert_null(b);
      refused++;
    }
    free(m);
  }
  print_message("damaged files: %d loaded, %d refused\n", loaded, refused);
  assert_true(refused > 0);
  free(orig);
  free(corpus);
  /* not a regular file, missing */
  b = (ag_bpe *)p;
  assert_int_equal(ag_bpe_load(g_dir, &b), AG_ERR_IO);
  assert_null(b);
  path_of(p, sizeof p, "missing.bpe");
  assert_int_equal(ag_bpe_load(p, &b), AG_ERR_IO);
}

static void test_bad_args(void **state) {
  (void)state;
  const uint8_t text[] = "abcabcabc";
  ag_bpe *b = (ag_bpe *)text;
  assert_int_equal(ag_bpe_train(text, 9, 255, &b), AG_ERR_INVALID);
  assert_null(b);
  expect_msg("vocab_size 255");
  assert_int_equal(ag_bpe_train(text, 9, AG_BPE_MAX_VOCAB + 1, &b), AG_ERR_INVALID);
  expect_msg("vocab_size");
  assert_int_equal(ag_bpe_train(text, 9, -5, &b), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_train(NULL, 9, 300, &b), AG_ERR_INVALID);
  expect_msg("corpus");
  assert_int_equal(ag_bpe_train(text, 9, 300, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_train(text, 9, 300, &b), AG_OK);
  assert_int_equal(ag_bpe_vocab_size(b), 259); /* ab, abc, abcabc; then each pair occurs once */

  int32_t ids[16];
  uint8_t out[64];
  size_t n = 7;
  assert_int_equal(ag_bpe_encode(NULL, text, 9, ids, 16, &n), AG_ERR_INVALID);
  assert_int_equal(n, 0);
  assert_int_equal(ag_bpe_encode(b, NULL, 9, ids, 16, &n), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_encode(b, text, 9, NULL, 16, &n), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_encode(b, text, 9, ids, 16, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_encode(b, text, 9, ids, 1, &n), AG_ERR_INVALID);
  expect_msg("needs 2");
  assert_int_equal(n, 2);
  assert_int_equal(ag_bpe_encode(b, text, 9, ids, 16, &n), AG_OK);
  assert_int_equal(n, 2);
  assert_int_equal(ag_bpe_decode(b, ids, 2, out, 4, &n), AG_ERR_INVALID);
  expect_msg("decode to 9");
  assert_int_equal(n, 9);
  assert_int_equal(ag_bpe_decode(b, ids, 2, NULL, 0, &n), AG_OK);
  assert_int_equal(n, 9);
  assert_int_equal(ag_bpe_decode(NULL, ids, 3, out, 64, &n), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_decode(b, NULL, 3, out, 64, &n), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_decode(b, ids, 3, out, 64, NULL), AG_ERR_INVALID);
  /* out-of-range ids */
  int32_t bad[3] = {97, 259, 98};
  n = 5;
  assert_int_equal(ag_bpe_decode(b, bad, 3, out, 64, &n), AG_ERR_INDEX);
  expect_msg("id 259 at position 1");
  assert_int_equal(n, 0);
  bad[1] = -1;
  assert_int_equal(ag_bpe_decode(b, bad, 3, out, 64, &n), AG_ERR_INDEX);
  size_t len = 3;
  assert_null(ag_bpe_token_bytes(b, 259, &len));
  assert_int_equal(len, 0);
  assert_int_equal(ag_last_status(), AG_ERR_INDEX);
  assert_null(ag_bpe_token_bytes(b, -1, &len));
  assert_null(ag_bpe_token_bytes(NULL, 3, &len));
  assert_null(ag_bpe_token_bytes(b, 3, NULL));
  assert_int_equal(ag_bpe_vocab_size(NULL), 0);
  assert_int_equal(ag_bpe_save(b, NULL), AG_ERR_INVALID);
  assert_int_equal(ag_bpe_save(b, ""), AG_ERR_INVALID);
  ag_bpe *l = b;
  assert_int_equal(ag_bpe_load(NULL, &l), AG_ERR_INVALID);
  assert_null(l);
  assert_int_equal(ag_bpe_load("x", NULL), AG_ERR_INVALID);
  ag_bpe_free(b);
  ag_bpe_free(NULL);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/ag_bpe_test.XXXXXX");
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
      cmocka_unit_test(test_classic),  cmocka_unit_test(test_chunks),    cmocka_unit_test(test_random_round_trip),
      cmocka_unit_test(test_fortunes), cmocka_unit_test(test_save_load), cmocka_unit_test(test_corrupt),
      cmocka_unit_test(test_bad_args),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
