/* Byte-level BPE tokenizer (include/anygrad/tokenizer.h, docs/tokenizer.md).
 *
 * Training counts the distinct chunks of the corpus once, then merges pairs
 * incrementally: a hash map from pair to its count and to the list of words
 * that contain it, and a max-heap of (count, pair) with lazy deletion (an
 * entry whose count is stale is re-queued with the current count). A merge
 * only touches the words on its pair's list.
 *
 * Encoding merges each chunk separately, lowest merge rank first: the ranks
 * of adjacent pairs sit in an array next to the tokens, each step finds the
 * smallest and recomputes only its two neighbours (chunks are at most
 * AG_BPE_MAX_TOKEN_BYTES long, so the quadratic scan stays bounded). */
#include "anygrad/tokenizer.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "bpe_internal.h"

#define BPE_MAGIC "anygrad-bpe"
#define BPE_VERSION 1
#define BPE_SPLIT "words256"
#define BPE_MAX_FILE ((uint64_t)64 << 20)
#define NO_RANK INT32_MAX
#define EMPTY_KEY UINT64_MAX

struct ag_bpe {
  int vocab;           /* 256 + nmerges */
  int32_t *merges;     /* 2 * nmerges: left, right */
  uint32_t *tok_off;   /* vocab: offset of each token's bytes in tok_bytes */
  uint16_t *tok_len;   /* vocab */
  uint8_t *tok_bytes;  /* all tokens' bytes */
  uint64_t *rank_keys; /* open addressing: pair key -> merge rank */
  int32_t *rank_vals;
  uint64_t rank_mask;
};

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static inline uint64_t hash64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

static inline int32_t rank_of(const ag_bpe *b, int32_t x, int32_t y) {
  uint64_t k = pair_key(x, y);
  for (uint64_t i = hash64(k) & b->rank_mask;; i = (i + 1) & b->rank_mask) {
    uint64_t kk = b->rank_keys[i];
    if (kk == k) return b->rank_vals[i];
    if (kk == EMPTY_KEY) return NO_RANK;
  }
}

/* ---- chunks ---- */

static inline bool is_ws(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static inline int cls_of(uint8_t c) {
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
  if (c >= 0x80) return 1;
  if (c >= '0' && c <= '9') return 2;
  if (is_ws(c)) return 3;
  return 4;
}

/* End of the chunk starting at i (< n). */
static size_t chunk_end(const uint8_t *s, size_t n, size_t i) {
  size_t j = i;
  if (s[j] == ' ' && j + 1 < n && !is_ws(s[j + 1])) j++;
  size_t lim = n - i > AG_BPE_MAX_TOKEN_BYTES ? i + AG_BPE_MAX_TOKEN_BYTES : n;
  if (j == i && is_ws(s[i])) {
    size_t k = i + 1;
    while (k < lim && is_ws(s[k])) k++;
    if (k < n && !is_ws(s[k]) && k - i >= 2 && s[k - 1] == ' ') k--;
    return k;
  }
  int c = cls_of(s[j]);
  size_t k = j + 1;
  while (k < lim && cls_of(s[k]) == c) k++;
  return k;
}

/* ---- building a tokenizer from its merges ---- */

/* Takes ownership of merges (2 * nm ints). `where` names the source in
 * errors (NULL: trained, always valid). */
static ag_status bpe_build(int32_t *merges, int nm, const char *where, ag_bpe **out) {
  *out = NULL;
  if (!where) where = "trained";
  ag_bpe *b = calloc(1, sizeof *b);
  int vocab = 256 + nm;
  uint64_t cap = 1;
  while (cap < (uint64_t)(nm + 1) * 2) cap <<= 1;
  if (b) {
    b->vocab = vocab;
    b->merges = merges;
    b->tok_off = malloc(sizeof(uint32_t) * (size_t)vocab);
    b->tok_len = malloc(sizeof(uint16_t) * (size_t)vocab);
    b->rank_keys = malloc(sizeof(uint64_t) * cap);
    b->rank_vals = malloc(sizeof(int32_t) * cap);
    b->rank_mask = cap - 1;
  }
  if (!b || !b->tok_off || !b->tok_len || !b->rank_keys || !b->rank_vals) {
    if (!b) free(merges);
    ag_bpe_free(b);
    return ag_error_set(AG_ERR_OOM, "ag_bpe: out of memory for a vocabulary of %d tokens", vocab);
  }
  memset(b->rank_keys, 0xff, sizeof(uint64_t) * cap);
  size_t total = 256;
  for (int i = 0; i < 256; i++) {
    b->tok_off[i] = (uint32_t)i;
    b->tok_len[i] = 1;
  }
  for (int i = 0; i < nm; i++) {
    int32_t x = merges[2 * i], y = merges[2 * i + 1];
    if (x < 0 || y < 0 || x >= 256 + i || y >= 256 + i) {
      ag_bpe_free(b);
      return ag_error_set(AG_ERR_CORRUPT,
                          "ag_bpe_load: %s: merge %d (token %d) refers to token %" PRId32
                          ", not defined before it (ids 0..%d)",
                          where, i, 256 + i, x < 0 || x >= 256 + i ? x : y, 256 + i - 1);
    }
    size_t len = (size_t)b->tok_len[x] + b->tok_len[y];
    if (len > AG_BPE_MAX_TOKEN_BYTES) {
      ag_bpe_free(b);
      return ag_error_set(AG_ERR_CORRUPT, "ag_bpe_load: %s: merge %d makes a token of %zu bytes (at most %d)",
                          where, i, len, AG_BPE_MAX_TOKEN_BYTES);
    }
    b->tok_len[256 + i] = (uint16_t)len;
    b->tok_off[256 + i] = (uint32_t)total;
    total += len;
    uint64_t k = pair_key(x, y);
    uint64_t h = hash64(k) & b->rank_mask;
    while (b->rank_keys[h] != EMPTY_KEY && b->rank_keys[h] != k) h = (h + 1) & b->rank_mask;
    if (b->rank_keys[h] == k) {
      int32_t first = b->rank_vals[h];
      ag_bpe_free(b);
      return ag_error_set(AG_ERR_CORRUPT, "ag_bpe_load: %s: merge %d repeats merge %" PRId32 " (%" PRId32 " %" PRId32 ")",
                          where, i, first, x, y);
    }
    b->rank_keys[h] = k;
    b->rank_vals[h] = i;
  }
  b->tok_bytes = malloc(total);
  if (!b->tok_bytes) {
    ag_bpe_free(b);
    return ag_error_set(AG_ERR_OOM, "ag_bpe: out of memory for %zu bytes of tokens", total);
  }
  for (int i = 0; i < 256; i++) b->tok_bytes[i] = (uint8_t)i;
  for (int i = 0; i < nm; i++) {
    int32_t x = merges[2 * i], y = merges[2 * i + 1];
    uint8_t *d = b->tok_bytes + b->tok_off[256 + i];
    memcpy(d, b->tok_bytes + b->tok_off[x], b->tok_len[x]);
    memcpy(d + b->tok_len[x], b->tok_bytes + b->tok_off[y], b->tok_len[y]);
  }
  *out = b;
  return AG_OK;
}

void ag_bpe_free(ag_bpe *b) {
  if (!b) return;
  free(b->merges);
  free(b->tok_off);
  free(b->tok_len);
  free(b->tok_bytes);
  free(b->rank_keys);
  free(b->rank_vals);
  free(b);
}

int ag_bpe_vocab_size(const ag_bpe *b) { return b ? b->vocab : 0; }

const uint8_t *ag_bpe_token_bytes(const ag_bpe *b, int32_t id, size_t *len) {
  if (len) *len = 0;
  if (!b || !len) {
    ag_error_set(AG_ERR_INVALID, "ag_bpe_token_bytes: NULL %s", b ? "len" : "tokenizer");
    return NULL;
  }
  if (id < 0 || id >= b->vocab) {
    ag_error_set(AG_ERR_INDEX, "ag_bpe_token_bytes: token id %" PRId32 " out of range [0, %d)", id, b->vocab);
    return NULL;
  }
  *len = b->tok_len[id];
  return b->tok_bytes + b->tok_off[id];
}

/* ---- encode / decode ---- */

/* Encode one chunk (1..AG_BPE_MAX_TOKEN_BYTES bytes) into tok; returns the count. */
static int encode_chunk(const ag_bpe *b, const uint8_t *p, int len, int32_t *tok) {
  int32_t rank[AG_BPE_MAX_TOKEN_BYTES];
  int m = len;
  for (int i = 0; i < m; i++) tok[i] = p[i];
  if (m < 2 || b->vocab == 256) return m;
  for (int i = 0; i + 1 < m; i++) rank[i] = rank_of(b, tok[i], tok[i + 1]);
  for (;;) {
    int best = -1;
    int32_t r = NO_RANK;
    for (int i = 0; i + 1 < m; i++)
      if (rank[i] < r) {
        r = rank[i];
        best = i;
      }
    if (best < 0) break;
    tok[best] = 256 + r;
    m--;
    memmove(tok + best + 1, tok + best + 2, sizeof(int32_t) * (size_t)(m - best - 1));
    memmove(rank + best, rank + best + 1, sizeof(int32_t) * (size_t)(m - best - 1));
    if (best > 0) rank[best - 1] = rank_of(b, tok[best - 1], tok[best]);
    if (best + 1 < m) rank[best] = rank_of(b, tok[best], tok[best + 1]);
    if (m < 2) break;
  }
  return m;
}

/* A cache of encoded chunks, private to one ag_bpe_encode call (so the
 * tokenizer stays read-only and shareable between threads): direct-mapped,
 * chunks of up to CACHE_CHUNK bytes, made for inputs of CACHE_MIN bytes or
 * more, where words repeat. */
#define CACHE_SLOTS 16384
#define CACHE_CHUNK 16
#define CACHE_MIN 16384
typedef struct cache_slot {
  uint8_t len, nid; /* len 0: empty */
  uint8_t bytes[CACHE_CHUNK];
  int32_t ids[CACHE_CHUNK];
} cache_slot;

ag_status ag_bpe_encode(const ag_bpe *b, const uint8_t *bytes, size_t n, int32_t *out_ids, size_t cap,
                        size_t *out_n) {
  if (out_n) *out_n = 0;
  if (!b || !out_n || (!bytes && n) || (!out_ids && cap))
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_encode: NULL %s",
                        !b ? "tokenizer" : !out_n ? "out_n" : !out_ids && cap ? "out_ids with cap > 0" : "bytes with n > 0");
  int32_t buf[AG_BPE_MAX_TOKEN_BYTES];
  cache_slot *cache = n >= CACHE_MIN && b->vocab > 256 ? calloc(CACHE_SLOTS, sizeof *cache) : NULL;
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    size_t e = chunk_end(bytes, n, i), len = e - i;
    const int32_t *tok = buf;
    int m;
    if (cache && len <= CACHE_CHUNK && len > 1) {
      uint32_t h = 2166136261u;
      for (size_t j = i; j < e; j++) h = (h ^ bytes[j]) * 16777619u;
      cache_slot *c = &cache[(h ^ (h >> 15)) & (CACHE_SLOTS - 1)];
      if (c->len != len || memcmp(c->bytes, bytes + i, len)) {
        c->len = (uint8_t)len;
        memcpy(c->bytes, bytes + i, len);
        c->nid = (uint8_t)encode_chunk(b, bytes + i, (int)len, c->ids);
      }
      tok = c->ids;
      m = c->nid;
    } else {
      m = encode_chunk(b, bytes + i, (int)len, buf);
    }
    if (k + (size_t)m <= cap) memcpy(out_ids + k, tok, sizeof(int32_t) * (size_t)m);
    else
      for (int j = 0; j < m; j++)
        if (k + (size_t)j < cap) out_ids[k + (size_t)j] = tok[j];
    k += (size_t)m;
    i = e;
  }
  free(cache);
  *out_n = k;
  if (out_ids && k > cap)
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_encode: output holds %zu ids, the encoding of %zu bytes needs %zu",
                        cap, n, k);
  return AG_OK;
}

ag_status ag_bpe_decode(const ag_bpe *b, const int32_t *ids, size_t n, uint8_t *out, size_t cap, size_t *out_n) {
  if (out_n) *out_n = 0;
  if (!b || !out_n || (!ids && n) || (!out && cap))
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_decode: NULL %s",
                        !b ? "tokenizer" : !out_n ? "out_n" : !out && cap ? "out with cap > 0" : "ids with n > 0");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= b->vocab)
      return ag_error_set(AG_ERR_INDEX, "ag_bpe_decode: id %" PRId32 " at position %zu out of range [0, %d)", id, i,
                          b->vocab);
    size_t len = b->tok_len[id];
    if (k + len <= cap) memcpy(out + k, b->tok_bytes + b->tok_off[id], len);
    else if (k < cap) memcpy(out + k, b->tok_bytes + b->tok_off[id], cap - k);
    k += len;
  }
  *out_n = k;
  if (out && k > cap)
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_decode: output holds %zu bytes, the %zu ids decode to %zu", cap, n,
                        k);
  return AG_OK;
}

/* ---- training ---- */

typedef struct word {
  uint32_t start, len; /* symbols in the pool */
  int64_t count;
  int32_t stamp; /* last merge that rewrote it, +1 */
} word;

typedef struct pairinfo {
  uint64_t key;
  int64_t count;
  int32_t *where; /* words holding the pair (may repeat, may be stale) */
  int32_t nwhere, capwhere;
  int32_t stamp; /* last merge that queued it, +1 */
} pairinfo;

typedef struct heapent {
  int64_t count;
  uint64_t key;
  int32_t pair;
} heapent;

typedef struct trainer {
  word *words;
  size_t nwords;
  int32_t *pool;
  pairinfo *pairs;
  size_t npairs, cappairs;
  int32_t *pmap; /* open addressing: pair index or -1 */
  uint64_t pmask;
  heapent *heap;
  size_t nheap, capheap;
  bool oom;
} trainer;

static inline bool heap_before(const heapent *x, const heapent *y) {
  return x->count > y->count || (x->count == y->count && x->key < y->key);
}

static void heap_push(trainer *t, int32_t p) {
  if (t->nheap == t->capheap) {
    size_t nc = t->capheap ? t->capheap * 2 : 1024;
    heapent *h = realloc(t->heap, nc * sizeof *h);
    if (!h) {
      t->oom = true;
      return;
    }
    t->heap = h;
    t->capheap = nc;
  }
  heapent e = {t->pairs[p].count, t->pairs[p].key, p};
  size_t i = t->nheap++;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (!heap_before(&e, &t->heap[up])) break;
    t->heap[i] = t->heap[up];
    i = up;
  }
  t->heap[i] = e;
}

static heapent heap_pop(trainer *t) {
  heapent top = t->heap[0];
  heapent last = t->heap[--t->nheap];
  size_t i = 0, n = t->nheap;
  for (;;) {
    size_t l = 2 * i + 1, best = i;
    const heapent *bv = &last;
    if (l < n && heap_before(&t->heap[l], bv)) {
      best = l;
      bv = &t->heap[l];
    }
    if (l + 1 < n && heap_before(&t->heap[l + 1], bv)) best = l + 1;
    if (best == i) break;
    t->heap[i] = t->heap[best];
    i = best;
  }
  if (n) t->heap[i] = last;
  return top;
}

static bool pmap_grow(trainer *t) {
  uint64_t cap = (t->pmask + 1) * 2;
  int32_t *m = malloc(sizeof(int32_t) * cap);
  if (!m) return false;
  memset(m, 0xff, sizeof(int32_t) * cap);
  for (size_t p = 0; p < t->npairs; p++) {
    uint64_t h = hash64(t->pairs[p].key) & (cap - 1);
    while (m[h] >= 0) h = (h + 1) & (cap - 1);
    m[h] = (int32_t)p;
  }
  free(t->pmap);
  t->pmap = m;
  t->pmask = cap - 1;
  return true;
}

/* Index of the pair (x, y), created with count 0 when absent; -1 on OOM. */
static int32_t pair_get(trainer *t, int32_t x, int32_t y) {
  uint64_t k = pair_key(x, y);
  uint64_t h = hash64(k) & t->pmask;
  for (;; h = (h + 1) & t->pmask) {
    int32_t p = t->pmap[h];
    if (p < 0) break;
    if (t->pairs[p].key == k) return p;
  }
  if ((t->npairs + 1) * 2 > t->pmask + 1) {
    if (!pmap_grow(t)) goto oom;
    h = hash64(k) & t->pmask;
    while (t->pmap[h] >= 0) h = (h + 1) & t->pmask;
  }
  if (t->npairs == t->cappairs) {
    size_t nc = t->cappairs ? t->cappairs * 2 : 4096;
    pairinfo *np = realloc(t->pairs, nc * sizeof *np);
    if (!np) goto oom;
    t->pairs = np;
    t->cappairs = nc;
  }
  pairinfo *pi = &t->pairs[t->npairs];
  memset(pi, 0, sizeof *pi);
  pi->key = k;
  t->pmap[h] = (int32_t)t->npairs;
  return (int32_t)t->npairs++;
oom:
  t->oom = true;
  return -1;
}

static void where_add(trainer *t, int32_t p, int32_t w) {
  pairinfo *pi = &t->pairs[p];
  if (pi->nwhere && pi->where[pi->nwhere - 1] == w) return;
  if (pi->nwhere == pi->capwhere) {
    int32_t nc = pi->capwhere ? pi->capwhere * 2 : 4;
    int32_t *nw = realloc(pi->where, sizeof(int32_t) * (size_t)nc);
    if (!nw) {
      t->oom = true;
      return;
    }
    pi->where = nw;
    pi->capwhere = nc;
  }
  pi->where[pi->nwhere++] = w;
}

/* Distinct chunks of the corpus with their counts. */
static bool count_words(trainer *t, const uint8_t *s, size_t n) {
  size_t cap = 1024, nw = 0;
  uint64_t mask = 4095;
  int32_t *map = malloc(sizeof(int32_t) * (mask + 1));
  word *w = malloc(sizeof(word) * cap);
  size_t *off = malloc(sizeof(size_t) * cap);
  if (!map || !w || !off) goto fail;
  memset(map, 0xff, sizeof(int32_t) * (mask + 1));
  for (size_t i = 0; i < n;) {
    size_t e = chunk_end(s, n, i), len = e - i;
    uint64_t h = 1469598103934665603ULL;
    for (size_t j = i; j < e; j++) h = (h ^ s[j]) * 1099511628211ULL;
    h = hash64(h);
    uint64_t slot = h & mask;
    for (;; slot = (slot + 1) & mask) {
      int32_t x = map[slot];
      if (x < 0) break;
      if (w[x].len == len && !memcmp(s + off[x], s + i, len)) break;
    }
    if (map[slot] >= 0) {
      w[map[slot]].count++;
    } else {
      if (nw == cap) {
        cap *= 2;
        word *nw2 = realloc(w, sizeof(word) * cap);
        if (!nw2) goto fail;
        w = nw2;
        size_t *no = realloc(off, sizeof(size_t) * cap);
        if (!no) goto fail;
        off = no;
      }
      w[nw] = (word){0, (uint32_t)len, 1, 0};
      off[nw] = i;
      map[slot] = (int32_t)nw++;
      if (nw * 2 > mask + 1) { /* grow and rehash */
        uint64_t nm = (mask + 1) * 2 - 1;
        int32_t *m2 = malloc(sizeof(int32_t) * (nm + 1));
        if (!m2) goto fail;
        memset(m2, 0xff, sizeof(int32_t) * (nm + 1));
        for (size_t x = 0; x < nw; x++) {
          uint64_t hh = 1469598103934665603ULL;
          for (size_t j = 0; j < w[x].len; j++) hh = (hh ^ s[off[x] + j]) * 1099511628211ULL;
          uint64_t sl = hash64(hh) & nm;
          while (m2[sl] >= 0) sl = (sl + 1) & nm;
          m2[sl] = (int32_t)x;
        }
        free(map);
        map = m2;
        mask = nm;
      }
    }
    i = e;
  }
  size_t total = 0;
  for (size_t x = 0; x < nw; x++) total += w[x].len;
  t->pool = malloc(sizeof(int32_t) * (total ? total : 1));
  if (!t->pool) goto fail;
  total = 0;
  for (size_t x = 0; x < nw; x++) {
    w[x].start = (uint32_t)total;
    for (size_t j = 0; j < w[x].len; j++) t->pool[total + j] = s[off[x] + j];
    total += w[x].len;
  }
  free(map);
  free(off);
  t->words = w;
  t->nwords = nw;
  return true;
fail:
  free(map);
  free(w);
  free(off);
  return false;
}

static void trainer_free(trainer *t) {
  free(t->words);
  free(t->pool);
  for (size_t p = 0; p < t->npairs; p++) free(t->pairs[p].where);
  free(t->pairs);
  free(t->pmap);
  free(t->heap);
}

ag_status ag_bpe_train(const uint8_t *corpus, size_t n, int vocab_size, ag_bpe **out) {
  if (out) *out = NULL;
  if (!out || (!corpus && n))
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_train: NULL %s", !out ? "out" : "corpus with n > 0");
  if (vocab_size < 256 || vocab_size > AG_BPE_MAX_VOCAB)
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_train: vocab_size %d outside [256, %d] (256 byte tokens + merges)",
                        vocab_size, AG_BPE_MAX_VOCAB);
  if (n >> 32)
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_train: corpus of %zu bytes, at most 4 GiB", n);
  trainer t;
  memset(&t, 0, sizeof t);
  int nm = 0, want = vocab_size - 256;
  int32_t *merges = malloc(sizeof(int32_t) * 2 * (size_t)(want ? want : 1));
  int32_t *touched = NULL;
  size_t ntouched = 0, captouched = 0;
  t.pmask = 4095;
  t.pmap = malloc(sizeof(int32_t) * (t.pmask + 1));
  if (!merges || !t.pmap || !count_words(&t, corpus, n)) goto oom;
  memset(t.pmap, 0xff, sizeof(int32_t) * (t.pmask + 1));
  for (size_t w = 0; w < t.nwords; w++) {
    const int32_t *s = t.pool + t.words[w].start;
    for (uint32_t i = 0; i + 1 < t.words[w].len; i++) {
      int32_t p = pair_get(&t, s[i], s[i + 1]);
      if (p < 0) goto oom;
      t.pairs[p].count += t.words[w].count;
      where_add(&t, p, (int32_t)w);
    }
  }
  for (size_t p = 0; p < t.npairs; p++)
    if (t.pairs[p].count >= 2) heap_push(&t, (int32_t)p);
  if (t.oom) goto oom;
  while (nm < want && t.nheap) {
    heapent top = heap_pop(&t);
    pairinfo *pi = &t.pairs[top.pair];
    if (pi->count != top.count) {
      if (pi->count >= 2) heap_push(&t, top.pair);
      if (t.oom) goto oom;
      continue;
    }
    int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(top.key & 0xffffffffu), x = 256 + nm;
    merges[2 * nm] = a;
    merges[2 * nm + 1] = b;
    nm++;
    int32_t *where = pi->where, nwhere = pi->nwhere;
    pi->where = NULL;
    pi->nwhere = pi->capwhere = 0;
    ntouched = 0;
    for (int32_t k = 0; k < nwhere; k++) {
      int32_t wi = where[k];
      word *w = &t.words[wi];
      if (w->stamp == nm) continue;
      w->stamp = nm;
      int32_t *s = t.pool + w->start;
      uint32_t len = w->len, i;
      for (i = 0; i + 1 < len; i++)
        if (s[i] == a && s[i + 1] == b) break;
      if (i + 1 >= len) continue; /* stale entry */
      for (i = 0; i + 1 < len; i++) t.pairs[pair_get(&t, s[i], s[i + 1])].count -= w->count;
      uint32_t j = 0;
      for (i = 0; i < len; i++) {
        if (i + 1 < len && s[i] == a && s[i + 1] == b) {
          s[j++] = x;
          i++;
        } else {
          s[j++] = s[i];
        }
      }
      w->len = len = j;
      for (i = 0; i + 1 < len; i++) {
        int32_t p = pair_get(&t, s[i], s[i + 1]);
        if (p < 0) break;
        t.pairs[p].count += w->count;
        if (s[i] == x || s[i + 1] == x) {
          where_add(&t, p, wi);
          if (t.pairs[p].stamp != nm) {
            t.pairs[p].stamp = nm;
            if (ntouched == captouched) {
              captouched = captouched ? captouched * 2 : 256;
              int32_t *nt = realloc(touched, sizeof(int32_t) * captouched);
              if (!nt) {
                t.oom = true;
                break;
              }
              touched = nt;
            }
            touched[ntouched++] = p;
          }
        }
      }
      if (t.oom) break;
    }
    free(where);
    if (t.oom) goto oom;
    for (size_t k = 0; k < ntouched; k++)
      if (t.pairs[touched[k]].count >= 2) heap_push(&t, touched[k]);
    if (t.oom) goto oom;
  }
  free(touched);
  trainer_free(&t);
  return bpe_build(merges, nm, NULL, out);
oom:
  free(touched);
  free(merges);
  trainer_free(&t);
  return ag_error_set(AG_ERR_OOM, "ag_bpe_train: out of memory (corpus of %zu bytes, vocab_size %d)", n, vocab_size);
}

/* ---- save / load ---- */

ag_status ag_bpe_save(const ag_bpe *b, const char *path) {
  if (!b || !path || !*path)
    return ag_error_set(AG_ERR_INVALID, "ag_bpe_save: %s", !b ? "NULL tokenizer" : "NULL or empty path");
  ag_output *o = NULL;
  ag_status st = ag_output_open(path, "tokenizer", &o);
  if (st != AG_OK) return st;
  FILE *f = ag_output_file(o);
  int nm = b->vocab - 256;
  fprintf(f, "%s %d\nsplit %s\nmerges %d\n", BPE_MAGIC, BPE_VERSION, BPE_SPLIT, nm);
  for (int i = 0; i < nm; i++) fprintf(f, "%" PRId32 " %" PRId32 "\n", b->merges[2 * i], b->merges[2 * i + 1]);
  if (ferror(f)) {
    ag_output_abort(o);
    return ag_error_set(AG_ERR_IO, "ag_bpe_save: %s: write error", path);
  }
  st = ag_output_commit(o);
  return st; /* ag_output_commit's message names the file */
}

/* The next line of buf (without its '\n') into *line and *len; false at the end
 * or for a last line without '\n' (*cut set). */
static bool next_line(const char *buf, size_t n, size_t *pos, const char **line, size_t *len, bool *cut) {
  *cut = false;
  if (*pos >= n) return false;
  const char *s = buf + *pos;
  const char *e = memchr(s, '\n', n - *pos);
  if (!e) {
    *cut = true;
    return false;
  }
  *line = s;
  *len = (size_t)(e - s);
  *pos += *len + 1;
  return true;
}

/* "<word> <int>" or "<int> <int>": the two fields of a line. */
static bool two_fields(const char *line, size_t len, char *f1, char *f2, size_t cap) {
  const char *sp = memchr(line, ' ', len);
  if (!sp) return false;
  size_t l1 = (size_t)(sp - line), l2 = len - l1 - 1;
  if (!l1 || !l2 || l1 >= cap || l2 >= cap || memchr(sp + 1, ' ', l2)) return false;
  memcpy(f1, line, l1);
  f1[l1] = 0;
  memcpy(f2, sp + 1, l2);
  f2[l2] = 0;
  return true;
}

/* A count or token id: plain decimal digits in [0, hi]. ag_parse_i64 alone
 * also takes a sign ("-0" read as 0); a saved file has none. */
static bool parse_plain(const char *s, int64_t hi, int64_t *out) {
  return s[0] >= '0' && s[0] <= '9' && ag_parse_i64(s, 0, hi, out);
}

ag_status ag_bpe_load(const char *path, ag_bpe **out) {
  if (out) *out = NULL;
  if (!path || !out) return ag_error_set(AG_ERR_INVALID, "ag_bpe_load: NULL %s", !path ? "path" : "out");
  char *buf = NULL;
  size_t n = 0;
  ag_status st = ag_file_read_all(path, "tokenizer", BPE_MAX_FILE, &buf, &n);
  if (st != AG_OK) return st;
  char esc[256], f1[64], f2[64];
  ag_escape(path, esc, sizeof esc);
  /* The fields are compared and parsed as C strings: a NUL would end one
   * early ("anygrad-bpe\0junk" compared equal to the magic, "97\0garbage"
   * parsed as 97). A tokenizer file is text and holds none. */
  const char *nul = memchr(buf, 0, n);
  if (nul) {
    size_t off = (size_t)(nul - buf);
    int64_t at = 1;
    for (size_t c = 0; c < off; c++) at += buf[c] == '\n';
    free(buf);
    return ag_error_set(AG_ERR_CORRUPT,
                        "ag_bpe_load: %s: line %" PRId64 ": a NUL byte (at byte %zu; a tokenizer file is text)", esc,
                        at, off);
  }
  size_t pos = 0, len = 0;
  const char *line = NULL;
  bool cut = false;
  int32_t *merges = NULL;
  int64_t nm = 0, lineno = 0, v = 0;
  const char *why = "";
  /* header */
  lineno = 1;
  if (!next_line(buf, n, &pos, &line, &len, &cut) || !two_fields(line, len, f1, f2, sizeof f1) ||
      strcmp(f1, BPE_MAGIC)) {
    why = cut || n == 0 ? "truncated header" : "not an anygrad BPE file (wrong magic)";
    goto corrupt;
  }
  if (!parse_plain(f2, INT32_MAX, &v) || v != BPE_VERSION) {
    why = "unsupported version (this build reads version 1)";
    goto corrupt;
  }
  lineno = 2;
  if (!next_line(buf, n, &pos, &line, &len, &cut)) {
    why = "truncated header";
    goto corrupt;
  }
  if (!two_fields(line, len, f1, f2, sizeof f1) || strcmp(f1, "split") || strcmp(f2, BPE_SPLIT)) {
    why = "expected 'split " BPE_SPLIT "'";
    goto corrupt;
  }
  lineno = 3;
  if (!next_line(buf, n, &pos, &line, &len, &cut)) {
    why = "truncated header";
    goto corrupt;
  }
  if (!two_fields(line, len, f1, f2, sizeof f1) || strcmp(f1, "merges") ||
      !parse_plain(f2, AG_BPE_MAX_VOCAB - 256, &nm)) {
    why = "expected 'merges N' with N in [0, 1048320]";
    goto corrupt;
  }
  merges = malloc(sizeof(int32_t) * 2 * (size_t)(nm ? nm : 1));
  if (!merges) {
    free(buf);
    return ag_error_set(AG_ERR_OOM, "ag_bpe_load: %s: out of memory for %" PRId64 " merges", esc, nm);
  }
  for (int64_t i = 0; i < nm; i++) {
    lineno = 4 + i;
    if (!next_line(buf, n, &pos, &line, &len, &cut)) {
      why = "truncated: fewer merges than the header says";
      goto corrupt;
    }
    int64_t x, y;
    if (!two_fields(line, len, f1, f2, sizeof f1) || !parse_plain(f1, INT32_MAX, &x) ||
        !parse_plain(f2, INT32_MAX, &y)) {
      why = "expected two token ids 'LEFT RIGHT'";
      goto corrupt;
    }
    if (x >= 256 + i || y >= 256 + i) {
      free(buf);
      free(merges);
      return ag_error_set(AG_ERR_CORRUPT,
                          "ag_bpe_load: %s: line %" PRId64 ": merge %" PRId64 " (token %" PRId64
                          ") refers to token %" PRId64 ", not defined before it",
                          esc, lineno, i, 256 + i, x >= 256 + i ? x : y);
    }
    merges[2 * i] = (int32_t)x;
    merges[2 * i + 1] = (int32_t)y;
  }
  if (pos != n) {
    lineno = 4 + nm;
    why = "data after the last merge";
    goto corrupt;
  }
  free(buf);
  return bpe_build(merges, (int)nm, esc, out);
corrupt:
  free(buf);
  free(merges);
  return ag_error_set(AG_ERR_CORRUPT, "ag_bpe_load: %s: line %" PRId64 ": %s", esc, lineno, why);
}

ag_status ag__bpe_from_merges(const int32_t *merges, int nm, const char *where, ag_bpe **out) {
  if (out) *out = NULL;
  if (!out || !where || (nm > 0 && !merges) || nm < 0 || nm > AG_BPE_MAX_VOCAB - 256)
    return ag_error_set(AG_ERR_INVALID, "ag_bpe: bad merges (%d) from %s", nm, where ? where : "(null)");
  int32_t *m = malloc(sizeof(int32_t) * 2 * (size_t)(nm > 0 ? nm : 1));
  if (!m) return ag_error_set(AG_ERR_OOM, "ag_bpe: out of memory for %d merges", nm);
  if (nm > 0) memcpy(m, merges, sizeof(int32_t) * 2 * (size_t)nm);
  return bpe_build(m, nm, where, out);
}

void ag__bpe_merge(const ag_bpe *b, int i, int32_t *x, int32_t *y) {
  *x = b->merges[2 * i];
  *y = b->merges[2 * i + 1];
}
