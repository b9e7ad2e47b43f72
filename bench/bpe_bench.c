/* Byte-level BPE tokenizer (include/anygrad/tokenizer.h): training time and
 * encode/decode throughput on the fortunes corpus (/usr/share/games/fortunes,
 * Debian package fortunes; every file without an extension, in name order),
 * or on a synthetic text corpus of the same size when it is absent. The
 * tokenizer is single-threaded: one thread, the caller's. Each round runs
 * every vocabulary size in turn (interleaved); the table gives the median
 * and range over rounds.
 * Usage: bpe_bench [rounds (5)] [vocab sizes, comma-separated (512,2048,4096)]
 * Prints a table, then one JSON line. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/anygrad.h"
#include "anygrad/tokenizer.h"

#define FORTUNES_DIR "/usr/share/games/fortunes"
#define MAX_VOCABS 8
#define MAX_ROUNDS 50

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int cmp_s(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static uint8_t *read_fortunes(size_t *n) {
  DIR *d = opendir(FORTUNES_DIR);
  if (!d) return NULL;
  char *names[512];
  size_t nn = 0, cap = 1 << 22, k = 0;
  struct dirent *e;
  while ((e = readdir(d)) && nn < 512)
    if (e->d_name[0] != '.' && !strchr(e->d_name, '.')) names[nn++] = strdup(e->d_name);
  closedir(d);
  qsort(names, nn, sizeof *names, cmp_s);
  uint8_t *buf = malloc(cap);
  for (size_t i = 0; i < nn; i++) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", FORTUNES_DIR, names[i]);
    FILE *f = fopen(p, "rb");
    size_t r;
    while (f && (r = fread(buf + k, 1, cap - k, f)) > 0) {
      k += r;
      if (k == cap) buf = realloc(buf, cap *= 2);
    }
    if (f) fclose(f);
    free(names[i]);
  }
  *n = k;
  return buf;
}

/* Words drawn with a Zipf-like law from a fixed list of made-up words. */
static uint8_t *synthetic(size_t n) {
  uint8_t *s = malloc(n);
  uint64_t x = 88172645463325252ULL;
  char words[2000][12];
  for (int w = 0; w < 2000; w++) {
    int len = 1 + w % 9;
    for (int i = 0; i < len; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      words[w][i] = (char)('a' + x % 26);
    }
    words[w][len] = 0;
  }
  size_t k = 0;
  while (k < n) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double u = (double)(x >> 11) / 9007199254740992.0;
    int w = (int)(2000.0 * u * u * u);
    const char *p = words[w];
    if (k < n) s[k++] = (x & 31) == 0 ? '\n' : ' ';
    while (*p && k < n) s[k++] = (uint8_t)*p++;
  }
  return s;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  if (rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "bpe_bench: rounds must be in [1, %d]\n", MAX_ROUNDS);
    return 2;
  }
  int vocabs[MAX_VOCABS], nv = 0;
  char list[256];
  snprintf(list, sizeof list, "%s", argc > 2 ? argv[2] : "512,2048,4096");
  for (char *t = strtok(list, ","); t && nv < MAX_VOCABS; t = strtok(NULL, ",")) vocabs[nv++] = atoi(t);
  size_t n = 0;
  const char *corpus_name = "fortunes";
  uint8_t *text = read_fortunes(&n);
  if (!text || n == 0) {
    free(text);
    n = 2500000;
    text = synthetic(n);
    corpus_name = "synthetic";
  }
  int32_t *ids = malloc(sizeof(int32_t) * n);
  uint8_t *back = malloc(n);
  double t_train[MAX_VOCABS][MAX_ROUNDS], t_enc[MAX_VOCABS][MAX_ROUNDS], t_dec[MAX_VOCABS][MAX_ROUNDS];
  size_t ntok[MAX_VOCABS] = {0};
  int got_vocab[MAX_VOCABS] = {0};
  for (int r = 0; r < rounds; r++) {
    for (int v = 0; v < nv; v++) {
      ag_bpe *b = NULL;
      double t0 = now_s();
      if (ag_bpe_train(text, n, vocabs[v], &b) != AG_OK) {
        fprintf(stderr, "bpe_bench: %s\n", ag_last_error());
        return 1;
      }
      double t1 = now_s();
      size_t m = 0, nb = 0;
      if (ag_bpe_encode(b, text, n, ids, n, &m) != AG_OK) {
        fprintf(stderr, "bpe_bench: %s\n", ag_last_error());
        return 1;
      }
      double t2 = now_s();
      if (ag_bpe_decode(b, ids, m, back, n, &nb) != AG_OK || nb != n || memcmp(back, text, n)) {
        fprintf(stderr, "bpe_bench: decode does not give the corpus back (%s)\n", ag_last_error());
        return 1;
      }
      double t3 = now_s();
      t_train[v][r] = t1 - t0;
      t_enc[v][r] = (double)n / 1e6 / (t2 - t1);
      t_dec[v][r] = (double)n / 1e6 / (t3 - t2);
      ntok[v] = m;
      got_vocab[v] = ag_bpe_vocab_size(b);
      ag_bpe_free(b);
    }
  }
  printf("BPE tokenizer: %s corpus, %zu bytes, 1 thread, %d rounds (median [min, max])\n", corpus_name, n, rounds);
  printf("%-7s %-22s %-22s %-22s %10s\n", "vocab", "train s", "encode MB/s", "decode MB/s", "bytes/tok");
  char json[4096];
  size_t jk = (size_t)snprintf(json, sizeof json,
                               "{\"bench\": \"bpe\", \"corpus\": \"%s\", \"bytes\": %zu, \"threads\": 1, \"rounds\": %d, "
                               "\"results\": [",
                               corpus_name, n, rounds);
  for (int v = 0; v < nv; v++) {
    double *arr[3] = {t_train[v], t_enc[v], t_dec[v]}, med[3], lo[3], hi[3];
    for (int k = 0; k < 3; k++) {
      qsort(arr[k], (size_t)rounds, sizeof(double), cmp_d);
      med[k] = arr[k][rounds / 2];
      lo[k] = arr[k][0];
      hi[k] = arr[k][rounds - 1];
    }
    char c[3][64];
    for (int k = 0; k < 3; k++) snprintf(c[k], sizeof c[k], "%.3g [%.3g, %.3g]", med[k], lo[k], hi[k]);
    double bpt = (double)n / (double)ntok[v];
    printf("%-7d %-22s %-22s %-22s %10.2f\n", got_vocab[v], c[0], c[1], c[2], bpt);
    jk += (size_t)snprintf(json + jk, sizeof json - jk,
                           "%s{\"vocab\": %d, \"train_s\": %.4f, \"train_s_min\": %.4f, \"train_s_max\": %.4f, "
                           "\"encode_mb_s\": %.2f, \"encode_mb_s_min\": %.2f, \"encode_mb_s_max\": %.2f, "
                           "\"decode_mb_s\": %.1f, \"decode_mb_s_min\": %.1f, \"decode_mb_s_max\": %.1f, "
                           "\"bytes_per_token\": %.3f}",
                           v ? ", " : "", got_vocab[v], med[0], lo[0], hi[0], med[1], lo[1], hi[1], med[2], lo[2],
                           hi[2], bpt);
  }
  printf("%s]}\n", json);
  free(ids);
  free(back);
  free(text);
  return 0;
}
