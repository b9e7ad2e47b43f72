/* Caching allocator benchmark: alloc+free pair latency against malloc/free and
 * the raw backend, and fragmentation (reserved peak / requested peak) on a
 * transformer-like training trace whose sequence length changes every step.
 * Prints a table and writes JSON (argv[1], default alloc_bench.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/alloc_internal.h"
#include "runtime/devstate.h"
#include "memory/block.h"

#define MiB ((size_t)1 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median over batches of the mean time of one pair, in ns. */
#define BATCHES 301
#define PER_BATCH 1000

typedef void (*pair_fn)(void *ctx);

static double median_pair_ns(pair_fn f, void *ctx, int per_batch) {
  static double t[BATCHES];
  for (int i = 0; i < per_batch; i++) f(ctx); /* warm */
  for (int b = 0; b < BATCHES; b++) {
    double t0 = now_s();
    for (int i = 0; i < per_batch; i++) f(ctx);
    t[b] = (now_s() - t0) * 1e9 / per_batch;
  }
  qsort(t, BATCHES, sizeof t[0], cmp_d);
  return t[BATCHES / 2];
}

typedef struct {
  ag_devstate *ds;
  ag_stream *s;
  size_t bytes;
} pair_ctx;

/* A pair that fails ends the run: its time would be that of a refusal. */
static void pair_failed(const char *what, ag_status st) {
  fprintf(stderr, "alloc_bench: %s: %s (%s); no time reported\n", what, ag_status_name(st), ag_last_error());
  exit(1);
}

static void cached_pair(void *p) {
  pair_ctx *c = p;
  ag_block *b;
  ag_status st = ag__alloc(c->ds, c->bytes, c->s, AG_MEM_OTHER, &b);
  if (st != AG_OK) pair_failed("ag__alloc", st);
  ag__free(b);
}

static void malloc_pair(void *p) {
  pair_ctx *c = p;
  void *volatile m = malloc(c->bytes);
  free(m);
}

static void raw_pair(void *p) {
  pair_ctx *c = p;
  void *base;
  ag_status st = c->ds->be->segment_alloc(c->ds->ord, c->bytes, &base);
  if (st != AG_OK) pair_failed("segment_alloc", st);
  c->ds->be->segment_free(c->ds->ord, base);
}

/* ---- a token backend: the allocator never touches device memory, so the
 * fragmentation trace runs at full scale without using any ---- */

struct ag_bstream {
  int unused;
};
static size_t g_live;
static ag_status t_mem_info(int dev, size_t *fr, size_t *tot) {
  if (tot) *tot = (size_t)80 << 30;
  if (fr) *fr = ((size_t)80 << 30) - g_live;
  return AG_OK;
}
static ag_status t_seg_alloc(int dev, size_t bytes, void **out) {
  size_t *tok = malloc(sizeof *tok);
  *tok = bytes;
  g_live += bytes;
  *out = tok;
  return AG_OK;
}
static void t_seg_free(int dev, void *base) {
  g_live -= *(size_t *)base;
  free(base);
}
static size_t t_gran(int dev) { return 2 * MiB; }
static ag_status t_reserve(int dev, size_t bytes, void **out) {
  *out = malloc(1);
  return AG_OK;
}
static ag_status t_map(int dev, void *b, size_t off, size_t n) { return g_live += n, AG_OK; }
static ag_status t_unmap(int dev, void *b, size_t off, size_t n) { return g_live -= n, AG_OK; }
static void t_release(int dev, void *b, size_t n) { free(b); }
static ag_status t_sync(ag_bstream *s) { return AG_OK; }

static const ag_backend k_token = {
    AG_BACKEND_HEADER,
    .name = "token",
    .mem_info = t_mem_info,
    .segment_alloc = t_seg_alloc,
    .segment_free = t_seg_free,
    .vm_granularity = t_gran,
    .vm_reserve = t_reserve,
    .vm_map = t_map,
    .vm_unmap = t_unmap,
    .vm_release = t_release,
    .stream_synchronize = t_sync,
};

/* ---- the trace: a 12-layer, d=1024 transformer, batch 8, sequence length
 * drawn per step from 64..1024; forward keeps saved activations, backward
 * frees them in reverse while allocating gradients, AdamW state is created
 * at the first step. Sizes in f32. ---- */

typedef struct {
  int op; /* 0 alloc, 1 free */
  int id;
  size_t bytes;
} tev;

typedef struct {
  tev *v;
  int n, cap, next_id;
} trace_t;

static int t_alloc(trace_t *t, size_t bytes) {
  if (t->n == t->cap) t->v = realloc(t->v, (size_t)(t->cap = t->cap ? t->cap * 2 : 4096) * sizeof *t->v);
  t->v[t->n++] = (tev){0, t->next_id, bytes};
  return t->next_id++;
}
static void t_free(trace_t *t, int id) {
  if (t->n == t->cap) t->v = realloc(t->v, (size_t)(t->cap *= 2) * sizeof *t->v);
  t->v[t->n++] = (tev){1, id, 0};
}

enum { LAYERS = 12, D = 1024, H = 16, V = 32000, B = 8, STEPS = 40 };

static trace_t make_trace(unsigned seed) {
  trace_t t = {0};
  size_t f = 4;
  int params[LAYERS][6], emb, grads[LAYERS][6], gemb, adam[LAYERS][6][2], aemb[2];
  size_t psz[6] = {(size_t)D * 3 * D * f, (size_t)D * D * f, (size_t)D * 4 * D * f,
                   (size_t)4 * D * D * f, (size_t)2 * D * f, (size_t)2 * D * f};
  emb = t_alloc(&t, (size_t)V * D * f);
  for (int l = 0; l < LAYERS; l++)
    for (int k = 0; k < 6; k++) params[l][k] = t_alloc(&t, psz[k]);
  for (int step = 0; step < STEPS; step++) {
    int L = 64 + (int)(rand_r(&seed) % 961);
    size_t tok = (size_t)B * L;
    int saved[LAYERS][8];
    int x = t_alloc(&t, tok * D * f); /* embedding output */
    for (int l = 0; l < LAYERS; l++) {
      int ln1 = t_alloc(&t, tok * D * f);
      int qkv = t_alloc(&t, tok * 3 * D * f);
      int sc = t_alloc(&t, (size_t)B * H * L * L * f); /* attention probabilities */
      int ao = t_alloc(&t, tok * D * f);
      int tmp = t_alloc(&t, (size_t)B * H * L * L * f); /* softmax workspace */
      t_free(&t, tmp);
      int o = t_alloc(&t, tok * D * f);
      int ln2 = t_alloc(&t, tok * D * f);
      int ff1 = t_alloc(&t, tok * 4 * D * f);
      int g = t_alloc(&t, tok * 4 * D * f);
      int ff2 = t_alloc(&t, tok * D * f);
      saved[l][0] = ln1, saved[l][1] = qkv, saved[l][2] = sc, saved[l][3] = ao;
      saved[l][4] = o, saved[l][5] = ln2, saved[l][6] = ff1, saved[l][7] = g;
      t_free(&t, x);
      x = ff2;
    }
    int logits = t_alloc(&t, tok * (size_t)V * f / 8); /* last position chunks */
    int loss = t_alloc(&t, 512);
    t_free(&t, logits);
    int dx = t_alloc(&t, tok * D * f);
    t_free(&t, x);
    for (int l = LAYERS - 1; l >= 0; l--) {
      for (int k = 0; k < 6; k++)
        if (step == 0) grads[l][k] = t_alloc(&t, psz[k]);
      int d1 = t_alloc(&t, tok * 4 * D * f);
      int d2 = t_alloc(&t, (size_t)B * H * L * L * f);
      int dn = t_alloc(&t, tok * D * f);
      t_free(&t, d1);
      t_free(&t, d2);
      for (int k = 7; k >= 0; k--) t_free(&t, saved[l][k]);
      t_free(&t, dx);
      dx = dn;
    }
    if (step == 0) gemb = t_alloc(&t, (size_t)V * D * f);
    t_free(&t, dx);
    t_free(&t, loss);
    if (step == 0) {
      for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 6; k++) adam[l][k][0] = t_alloc(&t, psz[k]), adam[l][k][1] = t_alloc(&t, psz[k]);
      aemb[0] = t_alloc(&t, (size_t)V * D * f);
      aemb[1] = t_alloc(&t, (size_t)V * D * f);
    }
    int norm = t_alloc(&t, 512); /* grad-norm scalar */
    t_free(&t, norm);
  }
  (void)params, (void)grads, (void)gemb, (void)adam, (void)aemb, (void)emb;
  return t;
}

typedef struct {
  double reserved_peak, requested_peak, ratio, seconds;
  long long raw_allocs, retries;
  double min_cap, min_cap_ratio; /* smallest device the trace fits in */
  bool ok;
} frag_result;

static frag_result run_anygrad(const trace_t *t, const char *conf, size_t cap) {
  ag_devstate ds = {0};
  ag_stream s0 = {0};
  struct ag_bstream b0;
  ds.be = &k_token;
  snprintf(ds.label, sizeof ds.label, "token:0");
  pthread_mutex_init(&ds.lock, NULL);
  s0 = (ag_stream){.ds = &ds, .bs = &b0, .is_default = true};
  ds.streams = ds.default_stream = &s0;
  ds.alloc = ag__allocator_create(&ds);
  frag_result r = {0};
  if (!ds.alloc || ag__alloc_configure(ds.alloc, conf) != AG_OK) {
    fprintf(stderr, "alloc_bench: %s\n", ag_last_error());
    exit(1);
  }
  ag__alloc_set_cap(ds.alloc, cap);
  r.ok = true;
  ag_block **blk = calloc((size_t)t->next_id, sizeof *blk);
  double t0 = now_s();
  for (int i = 0; i < t->n; i++) {
    const tev *e = &t->v[i];
    if (e->op == 0) {
      if (ag__alloc(&ds, e->bytes, &s0, AG_MEM_OTHER, &blk[e->id]) != AG_OK) {
        r.ok = false;
        break;
      }
    } else {
      ag__free(blk[e->id]);
      blk[e->id] = NULL;
    }
  }
  r.seconds = now_s() - t0;
  ag_memory_stats st;
  ag__alloc_stats(ds.alloc, &st);
  r.reserved_peak = (double)st.reserved_bytes[AG_POOL_ALL].peak;
  r.requested_peak = (double)st.requested_bytes[AG_POOL_ALL].peak;
  r.ratio = r.reserved_peak / r.requested_peak;
  r.raw_allocs = st.num_device_alloc;
  r.retries = st.num_alloc_retries;
  for (int i = 0; i < t->next_id; i++)
    if (blk[i]) ag__free(blk[i]);
  free(blk);
  ag__allocator_destroy(ds.alloc);
  pthread_mutex_destroy(&ds.lock);
  return r;
}

/* The naive caching allocator: reuse a cached block of exactly the rounded
 * size, otherwise allocate a new one; never split, never return memory. */
static frag_result run_naive(const trace_t *t) {
  typedef struct {
    size_t size;
    int free_next;
  } nb;
  nb *blocks = calloc((size_t)t->next_id, sizeof *blocks);
  int *of = calloc((size_t)t->next_id, sizeof *of); /* id -> naive block */
  int nblocks = 0;
  double reserved = 0, requested = 0, rpeak = 0, qpeak = 0;
  long long raw = 0;
  int *freelist = malloc((size_t)t->next_id * sizeof *freelist);
  int nfree = 0;
  size_t *req = calloc((size_t)t->next_id, sizeof *req);
  double t0 = now_s();
  for (int i = 0; i < t->n; i++) {
    const tev *e = &t->v[i];
    if (e->op == 0) {
      size_t sz = (e->bytes + 511) / 512 * 512;
      int found = -1;
      for (int k = 0; k < nfree; k++)
        if (blocks[freelist[k]].size == sz) {
          found = freelist[k];
          freelist[k] = freelist[--nfree];
          break;
        }
      if (found < 0) {
        found = nblocks++;
        blocks[found].size = sz;
        reserved += (double)sz;
        raw++;
        if (reserved > rpeak) rpeak = reserved;
      }
      of[e->id] = found;
      req[e->id] = e->bytes;
      requested += (double)e->bytes;
      if (requested > qpeak) qpeak = requested;
    } else {
      freelist[nfree++] = of[e->id];
      requested -= (double)req[e->id];
    }
  }
  frag_result r = {rpeak, qpeak, rpeak / qpeak, now_s() - t0, raw, 0, 0, 0, true};
  free(blocks), free(of), free(freelist), free(req);
  return r;
}

/* Binary search for the smallest cap (to 0.25%) at which the trace runs:
 * what a user sees as "does my training fit on this device". */
static void find_min_cap(const trace_t *t, const char *conf, frag_result *r) {
  double lo = r->requested_peak, hi = r->reserved_peak * 1.01 + 64.0 * MiB;
  while (hi - lo > r->requested_peak * 0.0025) {
    double mid = (lo + hi) / 2;
    if (run_anygrad(t, conf, (size_t)mid).ok)
      hi = mid;
    else
      lo = mid;
  }
  r->min_cap = hi;
  r->min_cap_ratio = hi / r->requested_peak;
}

int main(int argc, char **argv) {
  const char *json = argc > 1 ? argv[1] : "alloc_bench.json";
  /* Latency on the CPU backend's allocator. */
  ag_devstate *ds = ag__devstate(AG_CPU);
  if (!ds) {
    fprintf(stderr, "alloc_bench: %s\n", ag_last_error());
    return 1;
  }
  ag_alloc_configure(AG_CPU, "caching:1,expandable_segments:0");
  pair_ctx small = {ds, ds->default_stream, 4096}, large = {ds, ds->default_stream, 4 * MiB},
           seg = {ds, ds->default_stream, 2 * MiB};
  /* Interleaved rounds: trace ring on, off, malloc/free, next round; the
   * machine's load changes between rounds, not within one. */
  bool ring = ag_alloc_configure(AG_CPU, "trace_max_entries:4096") == AG_OK; /* AG_ALLOC_TRACE=OFF: no ring */
  enum { ROUNDS = 9 };
  double r_on[ROUNDS], r_off[ROUNDS], r_m[ROUNDS], q_on[ROUNDS], q_off[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    if (ring) ag_alloc_configure(AG_CPU, "trace_max_entries:4096");
    r_on[r] = median_pair_ns(cached_pair, &small, PER_BATCH);
    ag_alloc_configure(AG_CPU, "trace_max_entries:0");
    r_off[r] = median_pair_ns(cached_pair, &small, PER_BATCH);
    r_m[r] = median_pair_ns(malloc_pair, &small, PER_BATCH);
    q_on[r] = r_on[r] / r_m[r];
    q_off[r] = r_off[r] / r_m[r];
  }
  if (ring) ag_alloc_configure(AG_CPU, "trace_max_entries:4096");
  double cached_l = median_pair_ns(cached_pair, &large, PER_BATCH);
  double *rows5[5] = {r_on, r_off, r_m, q_on, q_off}, med5[5], lo5[5], hi5[5];
  for (int k = 0; k < 5; k++) {
    qsort(rows5[k], ROUNDS, sizeof(double), cmp_d);
    med5[k] = rows5[k][ROUNDS / 2];
    lo5[k] = rows5[k][0];
    hi5[k] = rows5[k][ROUNDS - 1];
  }
  double cached_s = med5[0], cached_nt = med5[1], malloc_s = med5[2];
  double malloc_l = median_pair_ns(malloc_pair, &large, PER_BATCH);
  double raw_s = median_pair_ns(raw_pair, &small, PER_BATCH);
  double raw_seg = median_pair_ns(raw_pair, &seg, 20);

  printf("alloc+free pair latency, 4 KiB, %d interleaved rounds (each the median of %d batches of %d "
         "pairs): median [min-max] ns%s\n",
         ROUNDS, BATCHES, PER_BATCH, ring ? "" : "; built with AG_ALLOC_TRACE=OFF: no ring in either row");
  const char *lab5[5] = {"anygrad cached, trace ring on (default)", "anygrad cached, trace ring off",
                         "malloc/free", "ratio on / malloc (per round)", "ratio off / malloc (per round)"};
  for (int k = 0; k < 5; k++)
    printf("  %-44s %10.2f [%.2f-%.2f]\n", lab5[k], med5[k], lo5[k], hi5[k]);
  printf("single runs, median of %d batches (ns)\n", BATCHES);
  printf("  %-44s %10.1f\n", "anygrad cached, 4 MiB (large pool)", cached_l);
  printf("  %-44s %10.1f\n", "malloc/free, 4 KiB", malloc_s);
  printf("  %-44s %10.1f\n", "malloc/free, 4 MiB", malloc_l);
  printf("  %-44s %10.1f\n", "raw backend (cpu) segment, 4 KiB", raw_s);
  printf("  %-44s %10.1f\n", "raw backend (cpu) segment, 2 MiB", raw_seg);

  trace_t t = make_trace(12345);
  const char *confs[] = {"expandable_segments:0", "expandable_segments:0,max_split_size_mb:128",
                         "expandable_segments:0,roundup_power2_divisions:4",
                         "expandable_segments:1"};
  frag_result fr[4];
  for (int i = 0; i < 4; i++) {
    fr[i] = run_anygrad(&t, confs[i], 0);
    find_min_cap(&t, confs[i], &fr[i]);
  }
  frag_result def = fr[0], ms = fr[1], rp = fr[2], ex = fr[3];
  frag_result nv = run_naive(&t);
  nv.min_cap = nv.reserved_peak;
  nv.min_cap_ratio = nv.ratio;
  int nalloc = 0;
  for (int i = 0; i < t.n; i++) nalloc += t.v[i].op == 0;
  printf("\nfragmentation: transformer-like trace, %d steps, %d allocations, seq len 64..1024\n",
         STEPS, nalloc);
  printf("  unbounded device: reserved peak / requested peak; capped: smallest cap that runs it\n");
  printf("  %-34s %12s %12s %8s %10s %8s %12s %8s\n", "allocator", "reserved pk", "requested pk",
         "ratio", "raw allocs", "ms", "min cap", "ratio");
  struct {
    const char *name;
    frag_result *r;
  } rows[] = {{"anygrad default", &def},
              {"anygrad max_split_size_mb:128", &ms},
              {"anygrad roundup_power2_divisions:4", &rp},
              {"anygrad expandable_segments:1", &ex},
              {"naive exact-size cache", &nv}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    printf("  %-34s %9.1f MiB %9.1f MiB %8.3f %10lld %8.1f %8.1f MiB %8.3f\n", rows[i].name,
           rows[i].r->reserved_peak / MiB, rows[i].r->requested_peak / MiB, rows[i].r->ratio,
           rows[i].r->raw_allocs, rows[i].r->seconds * 1e3, rows[i].r->min_cap / MiB,
           rows[i].r->min_cap_ratio);
  printf("\ngoals: cached pair <= 100 ns: on %s, off %s; <= 2x malloc/free: on %s, off %s; default <= 1.10: unbounded %s, capped %s; "
         "expandable <= 1.03: unbounded %s, capped %s\n",
         cached_s <= 100 ? "met" : "NOT met", cached_nt <= 100 ? "met" : "NOT met",
         med5[3] <= 2 ? "met" : "NOT met", med5[4] <= 2 ? "met" : "NOT met", def.ratio <= 1.10 ? "met" : "NOT met",
         def.min_cap_ratio <= 1.10 ? "met" : "NOT met", ex.ratio <= 1.03 ? "met" : "NOT met",
         ex.min_cap_ratio <= 1.03 ? "met" : "NOT met");

  FILE *f = fopen(json, "w");
  if (!f) {
    perror(json);
    return 1;
  }
  fprintf(f, "{\"latency_ns\":{\"cached_4k\":%.1f,\"cached_4k_no_trace\":%.1f,\"cached_4m\":%.1f,"
             "\"malloc_4k\":%.1f,\"malloc_4m\":%.1f,\"raw_4k\":%.1f,\"raw_2m\":%.1f,"
             "\"ratio_on_malloc\":%.3f,\"ratio_off_malloc\":%.3f,\"rounds\":%d},\n",
          cached_s, cached_nt, cached_l, malloc_s, malloc_l, raw_s, raw_seg, med5[3], med5[4], ROUNDS);
  fprintf(f, "\"fragmentation\":{\"steps\":%d,\"allocations\":%d", STEPS, nalloc);
  const char *keys[] = {"default", "max_split_128", "roundup_pow2_4", "expandable", "naive"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    fprintf(f, ",\n\"%s\":{\"reserved_peak\":%.0f,\"requested_peak\":%.0f,\"ratio\":%.4f,"
               "\"raw_allocs\":%lld,\"retries\":%lld,\"min_cap\":%.0f,\"min_cap_ratio\":%.4f}",
            keys[i], rows[i].r->reserved_peak, rows[i].r->requested_peak, rows[i].r->ratio,
            rows[i].r->raw_allocs, rows[i].r->retries, rows[i].r->min_cap, rows[i].r->min_cap_ratio);
  fprintf(f, "}}\n");
  fclose(f);
  free(t.v);
  printf("wrote %s\n", json);
  return 0;
}
