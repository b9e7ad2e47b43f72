/* White-box tests of the caching allocator over a counting fake backend: the
 * fake hands out tokens instead of memory, counts every raw call and lets the
 * test decide when stream work "completes", so each policy is checked exactly. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "memory/alloc_internal.h"
#include "runtime/devstate.h"
#include "memory/block.h"

#define MiB ((size_t)1 << 20)
#define FAKE_TOTAL (256 * MiB)

/* ---- the fake backend ---- */

struct ag_bstream {
  atomic_int queued; /* tickets handed to events */
  atomic_int done;   /* tickets completed */
};
struct ag_bevent {
  struct ag_bstream *s;
  int ticket;
};

static struct {
  pthread_mutex_t mu;
  size_t live_bytes; /* segments + mapped */
  int live_segments, seg_allocs, seg_frees, maps, unmaps, reserves, releases;
  int events_created, events_destroyed, syncs;
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

static ag_status f_mem_info(int dev, size_t *fr, size_t *tot) {
  pthread_mutex_lock(&F.mu);
  if (fr) *fr = FAKE_TOTAL - F.live_bytes;
  if (tot) *tot = FAKE_TOTAL;
  pthread_mutex_unlock(&F.mu);
  return AG_OK;
}
static ag_status f_seg_alloc(int dev, size_t bytes, void **out) {
  pthread_mutex_lock(&F.mu);
  bool full = F.live_bytes + bytes > FAKE_TOTAL;
  if (!full) F.live_bytes += bytes, F.live_segments++, F.seg_allocs++;
  pthread_mutex_unlock(&F.mu);
  if (full) return ag_error_set(AG_ERR_OOM, "fake: device full");
  size_t *tok = malloc(sizeof *tok); /* a unique handle that remembers its size */
  *tok = bytes;
  *out = tok;
  return AG_OK;
}
static void f_seg_free(int dev, void *base) {
  pthread_mutex_lock(&F.mu);
  F.live_bytes -= *(size_t *)base;
  F.live_segments--;
  F.seg_frees++;
  pthread_mutex_unlock(&F.mu);
  free(base);
}
static size_t f_gran(int dev) { return 2 * MiB; }
static ag_status f_reserve(int dev, size_t bytes, void **out) {
  *out = malloc(1);
  pthread_mutex_lock(&F.mu);
  F.reserves++;
  pthread_mutex_unlock(&F.mu);
  return AG_OK;
}
static ag_status f_map(int dev, void *base, size_t off, size_t bytes) {
  pthread_mutex_lock(&F.mu);
  bool full = F.live_bytes + bytes > FAKE_TOTAL;
  if (!full) F.live_bytes += bytes, F.maps++;
  pthread_mutex_unlock(&F.mu);
  return full ? ag_error_set(AG_ERR_OOM, "fake: device full") : AG_OK;
}
static ag_status f_unmap(int dev, void *base, size_t off, size_t bytes) {
  pthread_mutex_lock(&F.mu);
  F.live_bytes -= bytes;
  F.unmaps++;
  pthread_mutex_unlock(&F.mu);
  return AG_OK;
}
static void f_release(int dev, void *base, size_t bytes) {
  pthread_mutex_lock(&F.mu);
  F.releases++;
  pthread_mutex_unlock(&F.mu);
  free(base);
}
static ag_status f_stream_sync(ag_bstream *s) {
  atomic_store(&s->done, atomic_load(&s->queued));
  pthread_mutex_lock(&F.mu);
  F.syncs++;
  pthread_mutex_unlock(&F.mu);
  return AG_OK;
}
static ag_status f_event_create(int dev, bool timing, ag_bevent **out) {
  *out = calloc(1, sizeof **out);
  pthread_mutex_lock(&F.mu);
  F.events_created++;
  pthread_mutex_unlock(&F.mu);
  return AG_OK;
}
static void f_event_destroy(ag_bevent *e) {
  pthread_mutex_lock(&F.mu);
  F.events_destroyed++;
  pthread_mutex_unlock(&F.mu);
  free(e);
}
static ag_status f_event_record(ag_bevent *e, ag_bstream *s) {
  e->s = s;
  e->ticket = atomic_fetch_add(&s->queued, 1) + 1;
  return AG_OK;
}
static ag_status f_event_query(ag_bevent *e, bool *done) {
  *done = !e->s || atomic_load(&e->s->done) >= e->ticket;
  return AG_OK;
}

static const ag_backend k_fake = {
    AG_BACKEND_HEADER,
    .name = "fake",
    .mem_info = f_mem_info,
    .segment_alloc = f_seg_alloc,
    .segment_free = f_seg_free,
    .vm_granularity = f_gran,
    .vm_reserve = f_reserve,
    .vm_map = f_map,
    .vm_unmap = f_unmap,
    .vm_release = f_release,
    .stream_synchronize = f_stream_sync,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_query = f_event_query,
};

/* A device with two streams over a backend table. */
typedef struct {
  ag_devstate ds;
  ag_stream s0, s1;
  struct ag_bstream b0, b1;
  ag_backend be;
} fake_dev;

static fake_dev *dev_new_with(const ag_backend *be) {
  fake_dev *d = calloc(1, sizeof *d);
  d->be = *be;
  d->ds.be = &d->be;
  d->ds.ord = 0;
  snprintf(d->ds.label, sizeof d->ds.label, "fake:0");
  pthread_mutex_init(&d->ds.lock, NULL);
  d->s0 = (ag_stream){.ds = &d->ds, .bs = &d->b0, .is_default = true, .id = 0, .next = &d->s1};
  d->s1 = (ag_stream){.ds = &d->ds, .bs = &d->b1, .id = 1};
  d->ds.streams = &d->s0;
  d->ds.default_stream = &d->s0;
  d->ds.alloc = ag__allocator_create(&d->ds);
  return d;
}

static fake_dev *dev_new(void) {
  fake_dev *d = dev_new_with(&k_fake);
  assert_non_null(d->ds.alloc);
  return d;
}

static void dev_free(fake_dev *d) {
  ag__allocator_destroy(d->ds.alloc);
  pthread_mutex_destroy(&d->ds.lock);
  free(d);
}

static ag_memory_stats stats(fake_dev *d) {
  ag_memory_stats s;
  ag__alloc_stats(d->ds.alloc, &s);
  return s;
}

static ag_block *alloc_on(fake_dev *d, ag_stream *s, size_t n) {
  ag_block *b = NULL;
  ag_status st = ag__alloc(&d->ds, n, s, AG_MEM_OTHER, &b);
  if (st != AG_OK) fprintf(stderr, "alloc %zu: %s\n", n, ag_last_error());
  assert_int_equal(st, AG_OK);
  assert_non_null(b);
  return b;
}
static ag_block *alloc0(fake_dev *d, size_t n) { return alloc_on(d, &d->s0, n); }

static bool same_place(ag_block *x, void *base, size_t off) {
  return ag__block_base(x) == base && ag__block_offset(x) == off;
}

static int setup(void **state) {
  unsetenv("AG_ALLOC_CONF");
  return 0;
}

/* ---- tests ---- */

static void test_rounding(void **state) {
  fake_dev *d = dev_new();
  size_t cases[][2] = {{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1000000, 1000448},
                       {MiB, MiB}, {MiB + 1, MiB + 512}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ag_block *b = alloc0(d, cases[i][0]);
    assert_int_equal(ag__block_size(b) >= cases[i][1], true);
    /* the large pool may hand out a whole block when the remainder is small */
    if (cases[i][0] <= MiB) assert_int_equal(ag__block_size(b), cases[i][1]);
    assert_int_equal(ag__block_requested(b), cases[i][0]);
    ag__free(b);
  }
  assert_int_equal(ag__alloc_configure(d->ds.alloc, "roundup_power2_divisions:4"), AG_OK);
  ag_block *b = alloc0(d, 1200000); /* between 1 MiB and 2 MiB in quarters of 1 MiB */
  assert_int_equal(ag__block_requested(b), 1200000);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current, 1310720);
  assert_int_equal(s.requested_bytes[AG_POOL_ALL].current, 1200000);
  ag__free(b);
  dev_free(d);
}

static void test_pools_and_segment_sizes(void **state) {
  fake_dev *d = dev_new();
  ag_block *a = alloc0(d, 1000);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.segment[AG_POOL_SMALL].current, 1);
  assert_int_equal(s.reserved_bytes[AG_POOL_SMALL].current, 2 * MiB);
  ag_block *b = alloc0(d, 5 * MiB);
  s = stats(d);
  assert_int_equal(s.segment[AG_POOL_LARGE].current, 1);
  assert_int_equal(s.reserved_bytes[AG_POOL_LARGE].current, 20 * MiB);
  ag_block *c = alloc0(d, 29 * MiB + 1);
  s = stats(d);
  assert_int_equal(s.segment[AG_POOL_LARGE].current, 2);
  assert_int_equal(s.reserved_bytes[AG_POOL_LARGE].current, 50 * MiB);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 52 * MiB);
  assert_int_equal(s.allocation[AG_POOL_ALL].current, 3);
  assert_int_equal(F.live_segments, 3);
  /* The 5 MiB request split its 20 MiB segment: a second one fits there. */
  ag_block *e = alloc0(d, 5 * MiB);
  assert_ptr_equal(ag__block_base(e), ag__block_base(b));
  assert_int_equal(stats(d).segment[AG_POOL_LARGE].current, 2);
  ag__free(a);
  ag__free(b);
  ag__free(c);
  ag__free(e);
  s = stats(d);
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 52 * MiB); /* cached */
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].peak, 1024 + 10 * MiB + 30 * MiB);
  assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
  s = stats(d);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(F.live_segments, 0);
  dev_free(d);
}

static void test_split_coalesce_best_fit(void **state) {
  fake_dev *d = dev_new();
  ag_block *x[4];
  for (int i = 0; i < 4; i++) x[i] = alloc0(d, 512 * 1024);
  void *base = ag__block_base(x[0]);
  for (int i = 0; i < 4; i++) {
    assert_ptr_equal(ag__block_base(x[i]), base); /* four halves of one 2 MiB segment */
    assert_int_equal(ag__block_offset(x[i]), (size_t)i * 512 * 1024);
  }
  ag__free(x[1]);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.inactive_split[AG_POOL_SMALL].current, 1);
  assert_int_equal(s.inactive_split_bytes[AG_POOL_SMALL].current, 512 * 1024);
  ag__free(x[2]); /* coalesces with x[1] */
  s = stats(d);
  assert_int_equal(s.inactive_split[AG_POOL_SMALL].current, 1);
  assert_int_equal(s.inactive_split_bytes[AG_POOL_SMALL].current, MiB);
  assert_int_equal(s.largest_free_block, MiB);
  ag__free(x[0]);
  ag__free(x[3]);
  s = stats(d);
  assert_int_equal(s.inactive_split[AG_POOL_SMALL].current, 0);
  assert_int_equal(s.largest_free_block, 2 * MiB);
  assert_int_equal(s.inactive_split_bytes[AG_POOL_SMALL].peak, MiB + MiB / 2); /* after x[0] */

  /* Best fit in the large pool: free holes of 6 and 4 MiB, a 3.5 MiB request
   * takes the 4 MiB one, whole (a remainder of <= 1 MiB is not split off). */
  ag_block *a1 = alloc0(d, 6 * MiB), *p1 = alloc0(d, 2 * MiB), *a2 = alloc0(d, 4 * MiB),
           *p2 = alloc0(d, 2 * MiB);
  void *lb = ag__block_base(a2);
  size_t a2off = ag__block_offset(a2);
  ag__free(a1);
  ag__free(a2);
  ag_block *c = alloc0(d, 3 * MiB + MiB / 2);
  assert_true(same_place(c, lb, a2off));
  assert_int_equal(ag__block_size(c), 4 * MiB);
  /* A 2.5 MiB request splits the 6 MiB hole (remainder 3.5 MiB > 1 MiB). */
  ag_block *e = alloc0(d, 2 * MiB + MiB / 2);
  assert_int_equal(ag__block_offset(e), 0);
  assert_int_equal(ag__block_size(e), 2 * MiB + MiB / 2);
  ag__free(c);
  ag__free(e);
  ag__free(p1);
  ag__free(p2);
  s = stats(d);
  assert_int_equal(s.inactive_split[AG_POOL_ALL].current, 0);
  assert_int_equal(s.active_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.largest_free_block, 20 * MiB); /* the large segment is whole again */
  dev_free(d);
}

static void test_max_split_size(void **state) {
  fake_dev *d = dev_new();
  assert_int_equal(ag__alloc_configure(d->ds.alloc, "max_split_size_mb:32"), AG_OK);
  ag_block *big = alloc0(d, 40 * MiB);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.oversize_allocations.current, 1);
  assert_int_equal(s.oversize_segments.current, 1);
  assert_int_equal(s.max_split_size, 32 * MiB);
  void *bb = ag__block_base(big);
  ag__free(big);
  /* A small request must not chop the cached oversize block. */
  ag_block *m = alloc0(d, 8 * MiB);
  assert_ptr_not_equal(ag__block_base(m), bb);
  assert_int_equal(stats(d).segment[AG_POOL_LARGE].current, 2);
  /* An oversize request close in size reuses it. */
  int before = F.seg_allocs;
  ag_block *big2 = alloc0(d, 39 * MiB);
  assert_ptr_equal(ag__block_base(big2), bb);
  assert_int_equal(F.seg_allocs, before);
  /* An oversize request far smaller than the cached block does not take it. */
  ag__free(big2);
  ag_block *o = alloc0(d, 33 * MiB - 4096 * 1024); /* 28.x MiB, below the limit: normal */
  assert_ptr_not_equal(ag__block_base(o), bb);
  ag__free(o);
  ag__free(m);
  assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
  assert_int_equal(F.live_segments, 0);
  dev_free(d);
}

static void test_stream_ordered_reuse(void **state) {
  fake_dev *d = dev_new();
  int syncs0 = F.syncs;
  ag_block *a = alloc0(d, 4096);
  void *ab = ag__block_base(a);
  size_t ao = ag__block_offset(a);
  ag__free(a);
  /* Another stream never gets a block cached for stream 0. */
  ag_block *b = alloc_on(d, &d->s1, 4096);
  assert_ptr_not_equal(ag__block_base(b), ab);
  ag__free(b);
  /* The same stream gets it back at once, with no event and no sync. */
  ag_block *c = alloc0(d, 4096);
  assert_true(same_place(c, ab, ao));
  /* Used on stream 1 too: cached only after stream 1's work completes. */
  ag__block_record_stream(c, &d->s1);
  ag__block_record_stream(c, &d->s1); /* recorded once */
  ag__free(c);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.num_pending_events, 1);
  assert_int_equal(s.active_bytes[AG_POOL_ALL].current, 4096);
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current, 0);
  ag_block *e = alloc0(d, 4096);
  assert_false(same_place(e, ab, ao));
  atomic_store(&d->b1.done, atomic_load(&d->b1.queued)); /* stream 1 finishes */
  ag_block *f = alloc0(d, 4096);                         /* events processed first */
  assert_true(same_place(f, ab, ao));
  s = stats(d);
  assert_int_equal(s.num_pending_events, 0);
  assert_int_equal(s.num_syncs_all_streams, 0);
  assert_int_equal(F.syncs, syncs0);
  /* Events come from a pool: a second round creates none. */
  int created = F.events_created;
  ag__block_record_stream(f, &d->s1);
  ag__free(f);
  atomic_store(&d->b1.done, atomic_load(&d->b1.queued));
  ag__free(alloc0(d, 4096));
  assert_int_equal(F.events_created, created);
  ag__free(e);
  dev_free(d);
  assert_int_equal(F.events_created, F.events_destroyed);
}

static void test_stream_destroyed(void **state) {
  fake_dev *d = dev_new();
  ag__free(alloc_on(d, &d->s1, 4096)); /* cached for stream 1 */
  ag_block *big = alloc_on(d, &d->s1, 5 * MiB);
  ag_block *a = alloc0(d, 4096);
  ag__block_record_stream(a, &d->s1);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 2 * 2 * MiB + 20 * MiB);
  atomic_store(&d->b1.done, atomic_load(&d->b1.queued)); /* destroy waits for the stream */
  ag__alloc_stream_destroyed(&d->ds, &d->s1);
  s = stats(d);
  /* stream 1's idle small segment went back; the one holding big stays */
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 2 * MiB + 20 * MiB);
  d->ds.streams = &d->s0; /* unlinked, as ag_stream_destroy does */
  d->s0.next = NULL;
  d->s1.bs = NULL; /* any later use of the dead stream would now crash */
  ag__free(a);     /* no event on the dead stream */
  assert_int_equal(stats(d).num_pending_events, 0);
  ag__free(big);
  assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
  assert_int_equal(stats(d).reserved_bytes[AG_POOL_ALL].current, 0);
  dev_free(d);
}

static void test_oom_retry_and_recovery(void **state) {
  fake_dev *d = dev_new();
  assert_int_equal(ag__alloc_set_cap(d->ds.alloc, 64 * MiB), AG_OK);
  ag_block *a = alloc0(d, 40 * MiB);
  ag__free(a); /* cached */
  int frees = F.seg_frees;
  ag_block *b = alloc0(d, 50 * MiB); /* needs the cache returned first */
  ag_memory_stats s = stats(d);
  assert_int_equal(s.num_alloc_retries, 1);
  assert_int_equal(s.num_syncs_all_streams, 1);
  assert_int_equal(F.seg_frees, frees + 1);
  assert_int_equal(s.num_ooms, 0);
  ag_block *c = NULL;
  ag_error_clear();
  assert_int_equal(ag__alloc(&d->ds, 30 * MiB, &d->s0, AG_MEM_OTHER, &c), AG_ERR_OOM);
  assert_null(c);
  const char *msg = ag_last_error();
  assert_non_null(strstr(msg, "tried to allocate 30.00 MiB"));
  assert_non_null(strstr(msg, "capped at 64.00 MiB"));
  assert_non_null(strstr(msg, "50.00 MiB allocated"));
  assert_non_null(strstr(msg, "reserved but unallocated"));
  assert_non_null(strstr(msg, "largest free block"));
  assert_non_null(strstr(msg, "fake:0"));
  s = stats(d);
  assert_int_equal(s.num_ooms, 1);
  assert_int_equal(s.num_alloc_retries, 2);
  /* The program continues: free something and go on. */
  ag__free(b);
  c = alloc0(d, 30 * MiB);
  ag__free(c);
  /* A device that is really full (no cap) reports the backend's message. */
  assert_int_equal(ag__alloc_set_cap(d->ds.alloc, 0), AG_OK);
  assert_int_equal(ag__alloc(&d->ds, 300 * MiB, &d->s0, AG_MEM_OTHER, &c), AG_ERR_OOM);
  assert_non_null(strstr(ag_last_error(), "fake: device full"));
  assert_int_equal(ag__alloc_set_fraction(d->ds.alloc, 0.25), AG_OK);
  assert_int_equal(stats(d).cap_bytes, 64 * MiB);
  assert_int_equal(ag__alloc_set_fraction(d->ds.alloc, 1.5), AG_ERR_INVALID);
  dev_free(d);
  assert_int_equal(F.live_segments, 0);
}

static void test_expandable_segments(void **state) {
  fake_dev *d = dev_new();
  assert_int_equal(ag__alloc_configure(d->ds.alloc, "expandable_segments:True"), AG_OK);
  assert_true(stats(d).expandable_segments);
  int maps = F.maps;
  ag_block *x = alloc0(d, 5 * MiB), *y = alloc0(d, 7 * MiB), *z = alloc0(d, 3 * MiB);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.segment[AG_POOL_LARGE].current, 1);
  assert_ptr_equal(ag__block_base(x), ag__block_base(z));
  assert_int_equal(ag__block_offset(y), 5 * MiB);
  assert_int_equal(ag__block_offset(z), 12 * MiB);
  /* Reserved grows in 2 MiB granules right behind the requests. */
  assert_int_equal(s.reserved_bytes[AG_POOL_LARGE].current, 16 * MiB);
  ag__free(y);
  ag_block *w = alloc0(d, 20 * MiB); /* does not fit the 7 MiB hole: the tail grows */
  s = stats(d);
  assert_int_equal(s.segment[AG_POOL_LARGE].current, 1);
  assert_int_equal(ag__block_offset(w), 15 * MiB);
  assert_int_equal(s.reserved_bytes[AG_POOL_LARGE].current, 36 * MiB);
  assert_true(F.maps > maps);
  ag__free(w);
  /* empty_cache unmaps the free tail but keeps what is in use. */
  assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
  s = stats(d);
  assert_int_equal(s.reserved_bytes[AG_POOL_LARGE].current, 16 * MiB);
  ag__free(x);
  ag__free(z);
  assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
  s = stats(d);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.segment[AG_POOL_ALL].current, 0);
  assert_int_equal(F.reserves, F.releases);
  assert_int_equal(F.live_bytes, 0);
  dev_free(d);

  /* A backend without virtual memory falls back to ordinary segments. */
  ag_backend novm = k_fake;
  novm.vm_granularity = NULL;
  novm.vm_reserve = NULL;
  novm.vm_map = NULL;
  novm.vm_unmap = NULL;
  novm.vm_release = NULL;
  d = dev_new_with(&novm);
  assert_int_equal(ag__alloc_configure(d->ds.alloc, "expandable_segments:1"), AG_OK);
  assert_false(stats(d).expandable_segments);
  ag__free(alloc0(d, 5 * MiB));
  assert_int_equal(stats(d).reserved_bytes[AG_POOL_ALL].current, 20 * MiB);
  dev_free(d);
}

static void test_config(void **state) {
  fake_dev *d = dev_new();
  ag_allocator *a = d->ds.alloc;
  assert_int_equal(ag__alloc_configure(a, "bogus_key:1"), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "unknown key 'bogus_key'"));
  assert_int_equal(ag__alloc_configure(a, "max_split_size_mb:10"), AG_ERR_INVALID);
  assert_int_equal(ag__alloc_configure(a, "roundup_power2_divisions:3"), AG_ERR_INVALID);
  assert_int_equal(ag__alloc_configure(a, "expandable_segments"), AG_ERR_INVALID);
  assert_int_equal(ag__alloc_configure(a, "expandable_segments:maybe"), AG_ERR_INVALID);
  /* All or nothing: the good key before the bad one is not applied. */
  assert_int_equal(ag__alloc_configure(a, "max_split_size_mb:64,bogus:1"), AG_ERR_INVALID);
  assert_int_equal(stats(d).max_split_size, -1);
  assert_int_equal(ag__alloc_configure(a, " max_split_size_mb:64 , memory_cap_mb:100,"), AG_OK);
  assert_int_equal(stats(d).max_split_size, 64 * MiB);
  assert_int_equal(stats(d).cap_bytes, 100 * MiB);
  assert_int_equal(ag__alloc_configure(a, "memory_fraction:0.5"), AG_OK);
  assert_int_equal(stats(d).cap_bytes, 128 * MiB);
  assert_int_equal(ag__alloc_configure(a, "memory_fraction:2"), AG_ERR_INVALID);
  assert_int_equal(ag__alloc_configure(a, ""), AG_OK);
  dev_free(d);

  /* The environment is read when the allocator is created. */
  setenv("AG_ALLOC_CONF", "expandable_segments:1,nonsense:3", 1);
  d = dev_new_with(&k_fake);
  assert_null(d->ds.alloc);
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "AG_ALLOC_CONF"));
  free(d);
  setenv("AG_ALLOC_CONF", "max_split_size_mb:100,trace_max_entries:16", 1);
  d = dev_new();
  assert_int_equal(stats(d).max_split_size, 100 * MiB);
  dev_free(d);
  unsetenv("AG_ALLOC_CONF");
}

static void test_caching_off(void **state) {
  fake_dev *d = dev_new();
  assert_int_equal(ag__alloc_configure(d->ds.alloc, "caching:0"), AG_OK);
  int allocs = F.seg_allocs, frees = F.seg_frees, syncs = F.syncs;
  ag_block *a = alloc0(d, 1000), *b = alloc0(d, 3 * MiB);
  assert_int_equal(F.seg_allocs, allocs + 2);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, s.allocated_bytes[AG_POOL_ALL].current);
  assert_false(s.caching);
  ag__free(a);
  ag__free(b);
  assert_int_equal(F.seg_frees, frees + 2);
  assert_true(F.syncs > syncs); /* the stream finished before the memory went back */
  assert_int_equal(stats(d).reserved_bytes[AG_POOL_ALL].current, 0);
  dev_free(d);
}

/* A training-like sequence: parameters, then steps of activations,
 * gradients and optimizer state. Frees everything it holds on failure. */
static ag_status training_sequence(fake_dev *d) {
  ag_block *keep[64];
  int nk = 0;
  ag_status st = AG_OK;
  size_t params[] = {3 * MiB, 4096, 12 * MiB, 700 * 1024, 512};
  for (size_t i = 0; i < 5 && st == AG_OK; i++)
    if ((st = ag__alloc(&d->ds, params[i], &d->s0, AG_MEM_PARAMETERS, &keep[nk])) == AG_OK) nk++;
  for (int step = 0; step < 3 && st == AG_OK; step++) {
    ag_block *act[16];
    int na = 0;
    for (int l = 0; l < 8 && st == AG_OK; l++) {
      size_t n = (size_t)(l + 1 + step) * 300 * 1024;
      if ((st = ag__alloc(&d->ds, n, &d->s0, AG_MEM_ACTIVATIONS, &act[na])) == AG_OK) na++;
    }
    if (step == 0)
      for (size_t i = 0; i < 5 && st == AG_OK; i++)
        if ((st = ag__alloc(&d->ds, params[i] * 2, &d->s0, AG_MEM_OPTIMIZER, &keep[nk])) == AG_OK)
          nk++;
    while (na) ag__free(act[--na]);
  }
  while (nk) ag__free(keep[--nk]);
  return st;
}

static void test_fault_injection_everywhere(void **state) {
  fake_dev *d = dev_new();
  assert_int_equal(training_sequence(d), AG_OK);
  int raw = (int)stats(d).num_device_alloc;
  assert_true(raw > 3);
  dev_free(d);
  for (int expandable = 0; expandable < 2; expandable++) {
    for (int n = 1; n <= raw + 1; n++) {
      /* A device that is full from the nth raw allocation on. */
      d = dev_new();
      if (expandable) ag__alloc_configure(d->ds.alloc, "expandable_segments:1");
      assert_int_equal(ag__alloc_inject(d->ds.alloc, n, -1), AG_OK);
      ag_error_clear();
      ag_status st = training_sequence(d);
      if (n <= (int)stats(d).num_device_alloc || st != AG_OK) {
        assert_int_equal(st, AG_ERR_OOM);
        assert_non_null(strstr(ag_last_error(), "injected failure"));
      }
      ag_memory_stats s = stats(d);
      assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current, 0);
      assert_int_equal(s.active_bytes[AG_POOL_ALL].current, 0);
      assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
      assert_int_equal(stats(d).reserved_bytes[AG_POOL_ALL].current, 0);
      dev_free(d);
      assert_int_equal(F.live_bytes, 0);
      /* One failed raw allocation alone is absorbed by the retry. */
      d = dev_new();
      if (expandable) ag__alloc_configure(d->ds.alloc, "expandable_segments:1");
      assert_int_equal(ag__alloc_inject(d->ds.alloc, n, 1), AG_OK);
      assert_int_equal(training_sequence(d), AG_OK);
      if (n <= raw && !expandable) assert_int_equal(stats(d).num_alloc_retries, 1);
      dev_free(d);
      assert_int_equal(F.live_bytes, 0);
    }
  }
}

static void test_categories(void **state) {
  fake_dev *d = dev_new();
  ag_mem_category_push(AG_MEM_ACTIVATIONS);
  ag_block *a = alloc0(d, 1000);
  ag_mem_category_push(AG_MEM_WORKSPACE);
  ag_block *b = alloc0(d, 2000);
  ag_mem_category_pop();
  ag_block *c = NULL;
  assert_int_equal(ag__alloc(&d->ds, 3000, &d->s0, AG_MEM_OPTIMIZER, &c), AG_OK);
  ag_mem_category_pop();
  ag_mem_category_pop(); /* unmatched: ignored */
  assert_int_equal(ag_mem_category_current(), AG_MEM_OTHER);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.category_bytes[AG_MEM_ACTIVATIONS].current, 1024);
  assert_int_equal(s.category_bytes[AG_MEM_WORKSPACE].current, 2048);
  assert_int_equal(s.category_bytes[AG_MEM_OPTIMIZER].current, 3072);
  ag__block_set_category(a, AG_MEM_GRADIENTS);
  assert_int_equal(ag__block_category(a), AG_MEM_GRADIENTS);
  s = stats(d);
  assert_int_equal(s.category_bytes[AG_MEM_ACTIVATIONS].current, 0);
  assert_int_equal(s.category_bytes[AG_MEM_ACTIVATIONS].peak, 1024);
  assert_int_equal(s.category_bytes[AG_MEM_GRADIENTS].current, 1024);
  for (int i = 0; i < 20; i++) ag_mem_category_push(AG_MEM_STAGING); /* beyond the depth */
  assert_int_equal(ag_mem_category_current(), AG_MEM_STAGING);
  for (int i = 0; i < 20; i++) ag_mem_category_pop();
  assert_int_equal(ag_mem_category_current(), AG_MEM_OTHER);
  assert_string_equal(ag_mem_category_name(AG_MEM_OPTIMIZER), "optimizer");
  ag__free(a);
  ag__free(b);
  ag__free(c);
  s = stats(d);
  for (int i = 0; i < AG_MEM_CATEGORY_COUNT; i++) assert_int_equal(s.category_bytes[i].current, 0);
  ag__alloc_reset_peak(d->ds.alloc);
  s = stats(d);
  assert_int_equal(s.category_bytes[AG_MEM_GRADIENTS].peak, 0);
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].peak, 0);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].peak, 2 * MiB);
  dev_free(d);
}

/* Segments at the peak: snapshots only while captured, a bounded number of
 * them on a slow climb (not one per allocation), each showing the bytes it
 * was taken at; a peak the last one missed is caught when allocated bytes
 * reach it again (ag__alloc_peak_arm); reset_peak starts over. */
static long long snap_allocated(const char *s) {
  const char *k = strstr(s, "\"allocated_bytes\":{\"all\":{\"current\":");
  return k ? strtoll(k + strlen("\"allocated_bytes\":{\"all\":{\"current\":"), NULL, 10) : -1;
}

static void test_peak_snapshot(void **state) {
  fake_dev *d = dev_new();
  ag_allocator *a = d->ds.alloc;
  uint64_t seen = 0;
  int64_t at = 0;
  enum { N = 400 };
  ag_block *b[N];
  /* Not captured: nothing is taken. */
  b[0] = alloc0(d, 4096);
  assert_null(ag__alloc_peak_snapshot(a, &seen, &at));
  ag__free(b[0]);
  ag__alloc_peak_capture(a, true);
  /* A climb of 400 equal allocations of 4 KiB (in the small pool's 2 MiB
   * segments: one reservation): a snapshot at each of the first 16 (each a
   * rise of >= 1/16), then at each 1/16 rise - about 16 + ln(400/16) /
   * ln(17/16) = 69, not 400. */
  int taken = 0;
  for (int i = 0; i < N; i++) {
    b[i] = alloc0(d, 4096);
    char *snap = ag__alloc_peak_snapshot(a, &seen, &at);
    if (snap) {
      taken++;
      assert_int_equal(snap_allocated(snap), at);
      assert_int_equal(at, (int64_t)(i + 1) * 4096);
      assert_non_null(strstr(snap, "\"segments\":[")); /* the blocks, */
      assert_non_null(strstr(snap, "\"trace\":[]}"));  /* without the ring */
      free(snap);
    }
  }
  printf("%d snapshots on a climb of %d allocations\n", taken, N);
  assert_true(taken >= 16 && taken <= 16 + (int)ceil(log(N / 16.0) / log(17.0 / 16.0)) + 1);
  ag_memory_stats s = stats(d);
  assert_true(at < s.allocated_bytes[AG_POOL_ALL].peak); /* the last few were below 1/16 */
  /* Down and up again to the same peak: nothing, unless armed. */
  for (int i = 0; i < N; i++) ag__free(b[i]);
  for (int i = 0; i < N; i++) b[i] = alloc0(d, 4096);
  assert_null(ag__alloc_peak_snapshot(a, &seen, &at));
  for (int i = 0; i < N; i++) ag__free(b[i]);
  ag__alloc_peak_arm(a);
  for (int i = 0; i < N; i++) {
    b[i] = alloc0(d, 4096);
    char *snap = ag__alloc_peak_snapshot(a, &seen, &at);
    if (snap) {
      assert_int_equal(i, N - 1); /* exactly at the peak */
      free(snap);
    }
  }
  assert_int_equal(at, s.allocated_bytes[AG_POOL_ALL].peak);
  /* Armed again with the snapshot at the peak: nothing more. */
  for (int i = 0; i < N; i++) ag__free(b[i]);
  ag__alloc_peak_arm(a);
  for (int i = 0; i < N; i++) b[i] = alloc0(d, 4096);
  assert_null(ag__alloc_peak_snapshot(a, &seen, &at));
  for (int i = 0; i < N; i++) ag__free(b[i]);
  /* After reset_peak the next allocation is a new peak. */
  ag__alloc_reset_peak(a);
  b[0] = alloc0(d, 512);
  char *snap = ag__alloc_peak_snapshot(a, &seen, &at);
  assert_non_null(snap);
  assert_int_equal(at, 512);
  free(snap);
  ag__free(b[0]);
  ag__alloc_peak_capture(a, false);
  dev_free(d);
}

static int count_char(const char *s, char c) {
  int n = 0;
  for (; *s; s++) n += *s == c;
  return n;
}

static void test_summary_and_snapshot(void **state) {
  fake_dev *d = dev_new();
  ag_mem_category_push(AG_MEM_PARAMETERS);
  ag_block *a = alloc0(d, 5 * MiB);
  ag_mem_category_pop();
  ag_block *b = alloc_on(d, &d->s1, 1000);
  ag__free(b);
  ag_block *c = alloc0(d, 1000); /* used on stream 1: freed when its event completes */
  ag__block_record_stream(c, &d->s1);
  ag__free(c);
  atomic_store(&d->b1.done, atomic_load(&d->b1.queued));
  ag__free(alloc0(d, 1000));
  char buf[16384];
  ag__alloc_summary(d->ds.alloc, buf, sizeof buf);
  assert_non_null(strstr(buf, "Allocated memory"));
  assert_non_null(strstr(buf, "Reserved memory"));
  assert_non_null(strstr(buf, "5.00 MiB"));
  assert_non_null(strstr(buf, "parameters"));
  char tiny[40];
  ag__alloc_summary(d->ds.alloc, tiny, sizeof tiny); /* truncates, stays terminated */
  assert_int_equal(strlen(tiny), sizeof tiny - 1);

  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(ag__alloc_snapshot(d->ds.alloc, f), AG_OK);
  long n = ftell(f);
  rewind(f);
  char *js = calloc(1, (size_t)n + 1);
  assert_int_equal(fread(js, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  assert_int_equal(count_char(js, '{'), count_char(js, '}'));
  assert_int_equal(count_char(js, '['), count_char(js, ']'));
  assert_non_null(strstr(js, "\"segments\":["));
  assert_non_null(strstr(js, "\"requested_size\":5242880"));
  assert_non_null(strstr(js, "\"category\":\"parameters\",\"state\":\"active_allocated\""));
  assert_non_null(strstr(js, "\"action\":\"segment_alloc\""));
  assert_non_null(strstr(js, "\"action\":\"free\""));
  assert_non_null(strstr(js, "\"stream\":1"));
  const char *rq = strstr(js, "\"action\":\"free_requested\"");
  assert_non_null(rq);
  assert_non_null(strstr(rq, "\"action\":\"free_completed\"")); /* in order */
  /* timestamps are nanoseconds and never go backwards */
  unsigned long long last = 0;
  for (const char *p = js; (p = strstr(p, "\"time_ns\":")); p++) {
    unsigned long long v = strtoull(p + 10, NULL, 10);
    assert_true(v + 1000 >= last); /* tolerate rounding of the cycle-counter mapping */
    last = v;
  }
  free(js);
  /* The ring is bounded: only the newest entries remain. */
  assert_int_equal(ag__alloc_configure(d->ds.alloc, "trace_max_entries:8"), AG_OK);
  for (int i = 0; i < 100; i++) ag__free(alloc0(d, 512));
  f = tmpfile();
  assert_int_equal(ag__alloc_snapshot(d->ds.alloc, f), AG_OK);
  n = ftell(f);
  rewind(f);
  js = calloc(1, (size_t)n + 1);
  assert_int_equal(fread(js, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  int entries = 0;
  for (const char *p = js; (p = strstr(p, "\"seq\":")); p++) entries++;
  assert_int_equal(entries, 8);
  free(js);
  ag__free(a);
  dev_free(d);
}

/* Several threads allocate and free on their own and a shared stream while
 * another reads statistics; the totals must balance. Run under
 * -DAG_SANITIZE=thread this also checks the locking. */
typedef struct {
  fake_dev *d;
  ag_stream *s;
  unsigned seed;
  int iters;
} worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  ag_block *held[32] = {0};
  for (int i = 0; i < w->iters; i++) {
    int k = (int)(rand_r(&w->seed) % 32);
    if (held[k]) {
      if (rand_r(&w->seed) % 4 == 0) ag__block_record_stream(held[k], &w->d->s1);
      ag__free(held[k]);
      held[k] = NULL;
    } else {
      size_t n = (rand_r(&w->seed) % 4 == 0 ? (size_t)rand_r(&w->seed) % (3 * MiB)
                                                     : (size_t)rand_r(&w->seed) % 65536);
      if (ag__alloc(&w->d->ds, n, w->s, AG_MEM_ACTIVATIONS, &held[k]) != AG_OK) held[k] = NULL;
    }
    if (i % 97 == 0) atomic_store(&w->d->b1.done, atomic_load(&w->d->b1.queued));
  }
  for (int k = 0; k < 32; k++) ag__free(held[k]);
  return NULL;
}

static void *reader(void *p) {
  fake_dev *d = p;
  char buf[8192];
  for (int i = 0; i < 200; i++) {
    ag_memory_stats s;
    ag__alloc_stats(d->ds.alloc, &s);
    assert_true(s.allocated_bytes[AG_POOL_ALL].current <= s.reserved_bytes[AG_POOL_ALL].current);
    if (i % 50 == 0) ag__alloc_summary(d->ds.alloc, buf, sizeof buf);
    if (i % 40 == 0) ag__alloc_empty_cache(d->ds.alloc);
  }
  return NULL;
}

/* Random small-pool traffic: splits and merges mostly move a block into its
 * neighbour's slot of the free set in place (no search, no memmove); the
 * set must stay ordered, so no two live blocks ever overlap, best fit never
 * hands out less than asked, and freeing everything leaves every segment
 * one whole free block. */
static void test_free_set_in_place_updates(void **state) {
  fake_dev *d = dev_new();
  enum { LIVE = 48, OPS = 4000 };
  ag_block *live[LIVE] = {0};
  size_t want[LIVE] = {0};
  uint32_t x = 12345;
  for (int op = 0; op < OPS; op++) {
    x = x * 1664525u + 1013904223u;
    int i = (int)((x >> 8) % LIVE);
    if (live[i]) {
      ag__free(live[i]);
      live[i] = NULL;
      continue;
    }
    x = x * 1664525u + 1013904223u;
    want[i] = 512 + (size_t)((x >> 4) % (192 * 1024));
    live[i] = alloc0(d, want[i]);
    assert_true(ag__block_size(live[i]) >= want[i]);
    size_t lo = ag__block_offset(live[i]);
    for (int j = 0; j < LIVE; j++) { /* segment bases are tokens: compare offsets within one segment */
      if (j == i || !live[j] || ag__block_base(live[j]) != ag__block_base(live[i])) continue;
      size_t o = ag__block_offset(live[j]);
      if (lo < o + ag__block_size(live[j]) && o < lo + ag__block_size(live[i]))
        fail_msg("op %d: block %d overlaps block %d", op, i, j);
    }
  }
  for (int i = 0; i < LIVE; i++) ag__free(live[i]);
  ag_memory_stats s = stats(d);
  assert_int_equal(s.active_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.inactive_split[AG_POOL_ALL].current, 0);
  assert_int_equal(s.inactive_split_bytes[AG_POOL_ALL].current, 0);
  assert_true(s.inactive_split[AG_POOL_SMALL].peak > 0); /* the traffic did split blocks */
  assert_int_equal(s.largest_free_block, 2 * MiB);
  dev_free(d);
}

static void test_concurrency(void **state) {
  fake_dev *d = dev_new();
  enum { NT = 4 };
  pthread_t t[NT + 1];
  worker_arg w[NT];
  for (int i = 0; i < NT; i++) {
    w[i] = (worker_arg){d, i % 2 ? &d->s1 : &d->s0, (unsigned)(i * 7919 + 1), 4000};
    pthread_create(&t[i], NULL, worker, &w[i]);
  }
  pthread_create(&t[NT], NULL, reader, d);
  for (int i = 0; i <= NT; i++) pthread_join(t[i], NULL);
  atomic_store(&d->b1.done, atomic_load(&d->b1.queued));
  ag_memory_stats s = stats(d);
  assert_int_equal(s.allocated_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.requested_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.allocation[AG_POOL_ALL].current, 0);
  assert_int_equal(s.allocation[AG_POOL_ALL].allocated, s.allocation[AG_POOL_ALL].freed);
  assert_true(s.allocation[AG_POOL_ALL].allocated > 1000);
  assert_int_equal(ag__alloc_empty_cache(d->ds.alloc), AG_OK);
  s = stats(d);
  assert_int_equal(s.reserved_bytes[AG_POOL_ALL].current, 0);
  assert_int_equal(s.active_bytes[AG_POOL_ALL].current, 0);
  dev_free(d);
  assert_int_equal(F.live_bytes, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_rounding, setup),
      cmocka_unit_test_setup(test_pools_and_segment_sizes, setup),
      cmocka_unit_test_setup(test_split_coalesce_best_fit, setup),
      cmocka_unit_test_setup(test_max_split_size, setup),
      cmocka_unit_test_setup(test_stream_ordered_reuse, setup),
      cmocka_unit_test_setup(test_stream_destroyed, setup),
      cmocka_unit_test_setup(test_oom_retry_and_recovery, setup),
      cmocka_unit_test_setup(test_expandable_segments, setup),
      cmocka_unit_test_setup(test_config, setup),
      cmocka_unit_test_setup(test_caching_off, setup),
      cmocka_unit_test_setup(test_fault_injection_everywhere, setup),
      cmocka_unit_test_setup(test_categories, setup),
      cmocka_unit_test_setup(test_summary_and_snapshot, setup),
      cmocka_unit_test_setup(test_peak_snapshot, setup),
      cmocka_unit_test_setup(test_free_set_in_place_updates, setup),
      cmocka_unit_test_setup(test_concurrency, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
