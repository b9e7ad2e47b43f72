/* The caching device allocator: one per device, backend-neutral. Raw segments
 * come from the backend; blocks are carved from them, cached on free and
 * reused in stream order, as PyTorch's CUDA caching allocator does. See
 * docs/allocator.md for the policy and the measured reasons behind it. This
 * file holds the pool: free sets, segments, splitting and coalescing, stream-
 * ordered reuse through events, the OOM path; alloc_stats.c and alloc_conf.c
 * the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_pool.h"

/* ---- small helpers ---- */

static size_t round_size(const alloc_conf *c, size_t n) {
  if (n < K_MIN_BLOCK) return K_MIN_BLOCK;
  if (c->rp2_div > 1 && n > K_MIN_BLOCK * (size_t)c->rp2_div) {
    if ((n & (n - 1)) == 0) return n;
    size_t floor2 = (size_t)1 << (63 - __builtin_clzll((unsigned long long)n));
    size_t step = floor2 / (size_t)c->rp2_div;
    if (step == 0) return floor2 << 1;
    size_t lo = n & ~(step - 1);
    return lo == n ? n : lo + step;
  }
  return round_up(n, K_MIN_BLOCK);
}

static size_t segment_size_for(int pool, size_t size) {
  if (pool == POOL_SMALL) return K_SMALL_BUFFER;
  if (size < K_MIN_LARGE_ALLOC) return K_LARGE_BUFFER;
  return round_up(size, K_ROUND_LARGE);
}

static ag_status ring_resize(ag_allocator *a, size_t n) {
  trace_ev *r = NULL;
  if (n) {
    r = calloc(n, sizeof *r);
    if (!r) return ag_error_set(AG_ERR_OOM, "allocator trace ring: out of host memory");
  }
  free(a->ring);
  a->ring = r;
  a->ring_cap = n;
  a->ring_head = a->ring_n = 0;
  return AG_OK;
}

static ag_block *block_new(ag_allocator *a) {
  ag_block *b = a->spare;
  if (b) {
    a->spare = b->next;
  } else {
    b = malloc(sizeof *b);
    if (!b) return NULL;
  }
  memset(b, 0, sizeof *b);
  return b;
}

static void block_recycle(ag_allocator *a, ag_block *b) {
  free(b->uses);
  b->uses = NULL;
  b->next = a->spare;
  a->spare = b;
}

/* ---- free sets: sorted by (stream id, size, segment id, offset) ----
 * A sorted array with binary search: free blocks per pool number in the tens
 * to hundreds, so a memmove beats a balanced tree on both speed and code. */

static inline int block_cmp(const ag_block *x, uint32_t sid, size_t size, uint64_t segid,
                            size_t off) {
  uint32_t xs = x->sid;
  if (xs != sid) return xs < sid ? -1 : 1;
  if (x->size != size) return x->size < size ? -1 : 1;
  if (x->seg->id != segid) return x->seg->id < segid ? -1 : 1;
  if (x->offset != off) return x->offset < off ? -1 : 1;
  return 0;
}

static size_t fs_lower(const free_set *fs, uint32_t sid, size_t size, uint64_t segid, size_t off) {
  size_t lo = 0, hi = fs->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (block_cmp(fs->v[mid], sid, size, segid, off) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static inline bool counts_as_split(const ag_block *b) { return b->prev || b->next; }

static bool fs_insert(ag_allocator *a, ag_block *b) {
  free_set *fs = &a->pools[b->seg->pool];
  if (fs->n == fs->cap) {
    size_t nc = fs->cap ? fs->cap * 2 : 64;
    ag_block **nv = realloc(fs->v, nc * sizeof *nv);
    if (!nv) return false;
    fs->v = nv;
    fs->cap = nc;
  }
  size_t i = fs_lower(fs, b->sid, b->size, b->seg->id, b->offset);
  memmove(&fs->v[i + 1], &fs->v[i], (fs->n - i) * sizeof *fs->v);
  fs->v[i] = b;
  fs->n++;
  b->state = B_FREE;
  b->split_counted = counts_as_split(b) && !b->seg->bypass;
  if (b->split_counted) {
    stat_pool(a->st.inactive_split, b->seg->pool, 1);
    stat_pool(a->st.inactive_split_bytes, b->seg->pool, (int64_t)b->size);
  }
  return true;
}

static void fs_remove_at(ag_allocator *a, free_set *fs, size_t i) {
  ag_block *b = fs->v[i];
  memmove(&fs->v[i], &fs->v[i + 1], (fs->n - i - 1) * sizeof *fs->v);
  fs->n--;
  if (b->split_counted) {
    stat_pool(a->st.inactive_split, b->seg->pool, -1);
    stat_pool(a->st.inactive_split_bytes, b->seg->pool, -(int64_t)b->size);
    b->split_counted = false;
  }
}

/* Whether nb may take slot i of fs (the slot's block leaving) without
 * breaking the order: the common case when a block splits or merges with a
 * neighbour, so the set changes by one store instead of a search and two
 * memmoves. */
static bool fs_fits_at(const free_set *fs, size_t i, const ag_block *nb) {
  uint64_t id = nb->seg->id;
  if (i > 0 && block_cmp(fs->v[i - 1], nb->sid, nb->size, id, nb->offset) >= 0) return false;
  return i + 1 >= fs->n || block_cmp(fs->v[i + 1], nb->sid, nb->size, id, nb->offset) > 0;
}

/* Slot i's block leaves the set (with its size at `old_size`, as counted)
 * and nb takes the slot, as fs_remove_at + fs_insert would. */
static void fs_replace_at(ag_allocator *a, free_set *fs, size_t i, size_t old_size, ag_block *nb) {
  ag_block *o = fs->v[i];
  if (o->split_counted) {
    stat_pool(a->st.inactive_split, o->seg->pool, -1);
    stat_pool(a->st.inactive_split_bytes, o->seg->pool, -(int64_t)old_size);
    o->split_counted = false;
  }
  fs->v[i] = nb;
  nb->state = B_FREE;
  nb->split_counted = counts_as_split(nb) && !nb->seg->bypass;
  if (nb->split_counted) {
    stat_pool(a->st.inactive_split, nb->seg->pool, 1);
    stat_pool(a->st.inactive_split_bytes, nb->seg->pool, (int64_t)nb->size);
  }
}

static void fs_remove(ag_allocator *a, ag_block *b) {
  free_set *fs = &a->pools[b->seg->pool];
  size_t i = fs_lower(fs, b->sid, b->size, b->seg->id, b->offset);
  if (i < fs->n && fs->v[i] == b) fs_remove_at(a, fs, i);
}

/* Best fit on the stream, with PyTorch's max_split_size rules: a request
 * below the limit never takes an oversize block (it would be chopped up), and
 * an oversize request takes an oversize block only if the waste stays below
 * one large buffer. */
static ag_block *find_free(ag_allocator *a, int pool, ag_stream *s, size_t size, size_t *slot) {
  free_set *fs = &a->pools[pool];
  size_t i = fs_lower(fs, s->id, size, 0, 0);
  if (i == fs->n) return NULL;
  ag_block *b = fs->v[i];
  if (b->sid != s->id) return NULL;
  size_t ms = a->cfg.max_split;
  if (ms != SIZE_MAX && !b->seg->expandable) {
    if (size < ms && b->size >= ms) return NULL;
    if (size >= ms && b->size >= size + K_LARGE_BUFFER) return NULL;
  }
  *slot = i; /* still in the set: the caller takes it out (take_found) */
  return b;
}

/* ---- segments ---- */

static void seg_link(ag_allocator *a, seg *sg) {
  sg->next = a->segs;
  if (a->segs) a->segs->prev = sg;
  a->segs = sg;
}

static void seg_unlink(ag_allocator *a, seg *sg) {
  if (sg->prev) sg->prev->next = sg->next;
  else a->segs = sg->next;
  if (sg->next) sg->next->prev = sg->prev;
}

static size_t reserved_total(const ag_allocator *a) {
  return (size_t)a->st.reserved_bytes[AG_POOL_ALL].current;
}

/* A raw allocation is about to happen: apply the cap and fault injection.
 * Returns false (with a reason) when it must fail without asking the backend. */
static bool raw_permitted(ag_allocator *a, size_t bytes, const char **why) {
  a->raw_attempts++;
  if (a->inj_at && a->raw_attempts >= a->inj_at &&
      (a->inj_count < 0 || a->raw_attempts < a->inj_at + (uint64_t)a->inj_count)) {
    *why = "injected failure";
    return false;
  }
  if (a->cap && reserved_total(a) + bytes > a->cap) {
    *why = "memory cap reached";
    return false;
  }
  return true;
}

static void seg_account(ag_allocator *a, seg *sg, int64_t bytes, int64_t count) {
  stat_pool(a->st.reserved_bytes, sg->pool, bytes);
  if (count) stat_pool(a->st.segment, sg->pool, count);
}

/* A fresh non-expandable segment holding one free block (not in the set). */
static ag_block *seg_new(ag_allocator *a, int pool, ag_stream *s, size_t alloc_size, bool bypass,
                         const char **why) {
  if (!raw_permitted(a, alloc_size, why)) return NULL;
  seg *sg = calloc(1, sizeof *sg);
  ag_block *b = block_new(a);
  void *base = NULL;
  if (!sg || !b) {
    free(sg);
    if (b) block_recycle(a, b);
    *why = "out of host memory";
    return NULL;
  }
  const ag_backend *be = a->ds->be;
  if (be->segment_alloc(a->ds->ord, alloc_size, &base) != AG_OK) {
    free(sg);
    block_recycle(a, b);
    *why = "the backend could not allocate";
    snprintf(a->be_msg, sizeof a->be_msg, "%s", ag_last_error());
    return NULL;
  }
  a->st.num_device_alloc++;
  sg->a = a;
  sg->id = ++a->next_seg_id;
  sg->base = base;
  sg->size = alloc_size;
  sg->pool = (uint8_t)pool;
  sg->bypass = bypass;
  sg->sid = s->id;
  sg->first = sg->last = b;
  seg_link(a, sg);
  seg_account(a, sg, (int64_t)alloc_size, 1);
  sg->oversize = alloc_size >= a->cfg.max_split && !bypass;
  if (sg->oversize) stat_add(&a->st.oversize_segments, 1);
  b->seg = sg;
  b->size = alloc_size;
  b->sid = s->id;
  trace(a, T_SEGMENT_ALLOC, sg, 0, alloc_size, s->id, 0);
  return b;
}

static void seg_release(ag_allocator *a, seg *sg) {
  const ag_backend *be = a->ds->be;
  if (sg->expandable) {
    if (sg->size) {
      be->vm_unmap(a->ds->ord, sg->base, 0, sg->size);
      a->st.num_device_free++;
      trace(a, T_SEGMENT_UNMAP, sg, 0, sg->size, sg->sid, 0);
    }
    be->vm_release(a->ds->ord, sg->base, sg->reserved);
  } else {
    be->segment_free(a->ds->ord, sg->base);
    a->st.num_device_free++;
    trace(a, T_SEGMENT_FREE, sg, 0, sg->size, sg->sid, 0);
    if (sg->oversize) stat_add(&a->st.oversize_segments, -1);
  }
  seg_account(a, sg, -(int64_t)sg->size, -1);
  seg_unlink(a, sg);
  for (ag_block *b = sg->first, *n; b; b = n) {
    n = b->next;
    block_recycle(a, b);
  }
  free(sg);
}

/* Grow the stream's expandable segment of this pool so that its free tail
 * holds `size` bytes; returns that tail (not in the free set). */
static ag_block *expandable_grow(ag_allocator *a, int pool, ag_stream *s, size_t size,
                                 const char **why) {
  const ag_backend *be = a->ds->be;
  int ord = a->ds->ord;
  seg *sg = NULL;
  for (seg *x = a->segs; x; x = x->next)
    if (x->expandable && x->pool == pool && x->sid == s->id && x->size < x->reserved) {
      sg = x;
      break;
    }
  ag_block *tail = sg && sg->last && sg->last->state == B_FREE ? sg->last : NULL;
  size_t have = tail ? tail->size : 0;
  size_t grow = round_up(size - have, a->gran);
  if (sg && sg->size + grow > sg->reserved) sg = NULL, tail = NULL, have = 0;
  if (!sg) {
    /* Reserve address space for the whole device (or the cap): the segment
     * then never has to move, whatever the program's peak. */
    size_t fr = 0, total = 0;
    if (be->mem_info(ord, &fr, &total) != AG_OK || total == 0) total = (size_t)64 << 30;
    size_t want = a->cap && a->cap < total ? a->cap : total;
    if (want < size) want = size;
    want = round_up(want, a->gran);
    sg = calloc(1, sizeof *sg);
    void *base = NULL;
    if (!sg) return *why = "out of host memory", NULL;
    if (be->vm_reserve(ord, want, &base) != AG_OK) {
      free(sg);
      *why = "the backend could not reserve address space";
      return NULL;
    }
    sg->a = a;
    sg->id = ++a->next_seg_id;
    sg->base = base;
    sg->reserved = want;
    sg->pool = (uint8_t)pool;
    sg->expandable = true;
    sg->sid = s->id;
    seg_link(a, sg);
    stat_pool(a->st.segment, pool, 1);
    grow = round_up(size, a->gran);
  }
  if (!raw_permitted(a, grow, why) ||
      (be->vm_map(ord, sg->base, sg->size, grow) != AG_OK && (*why = "the backend could not map") &&
       snprintf(a->be_msg, sizeof a->be_msg, "%s", ag_last_error()) >= 0)) {
    if (!sg->first) { /* a segment created just now */
      stat_pool(a->st.segment, pool, -1);
      be->vm_release(ord, sg->base, sg->reserved);
      seg_unlink(a, sg);
      free(sg);
    }
    return NULL;
  }
  a->st.num_device_alloc++;
  trace(a, T_SEGMENT_MAP, sg, sg->size, grow, s->id, 0);
  if (tail) {
    fs_remove(a, tail);
    tail->size += grow;
  } else {
    ag_block *b = block_new(a);
    if (!b) { /* keep the mapping; it shows up as reserved and is released by empty_cache */
      be->vm_unmap(ord, sg->base, sg->size, grow);
      *why = "out of host memory";
      return NULL;
    }
    b->seg = sg;
    b->sid = s->id;
    b->offset = sg->size;
    b->size = grow;
    b->prev = sg->last;
    if (sg->last) sg->last->next = b;
    else sg->first = b;
    sg->last = b;
    tail = b;
  }
  sg->size += grow;
  seg_account(a, sg, (int64_t)grow, 0);
  return tail;
}

/* ---- blocks ---- */

static bool should_split(const ag_allocator *a, const ag_block *b, size_t size) {
  size_t rem = b->size - size;
  if (b->seg->pool == POOL_SMALL || b->seg->expandable) return rem >= K_MIN_BLOCK;
  return size < a->cfg.max_split && rem > K_SMALL_SIZE;
}

/* b, found at `slot` of its pool's set (NO_SLOT: in no set), leaves the
 * set; split to `size` when do_split, the remainder taking b's slot when the
 * order allows. */
#define NO_SLOT SIZE_MAX
static void split(ag_allocator *a, ag_block *b, size_t size);
static void take_found(ag_allocator *a, ag_block *b, size_t slot, size_t size, bool do_split) {
  free_set *fs = &a->pools[b->seg->pool];
  if (slot != NO_SLOT && do_split) {
    ag_block *r = block_new(a);
    if (r) {
      size_t old = b->size;
      r->seg = b->seg;
      r->sid = b->sid;
      r->offset = b->offset + size;
      r->size = b->size - size;
      if (fs_fits_at(fs, slot, r)) {
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        else b->seg->last = r;
        b->next = r;
        b->size = size;
        fs_replace_at(a, fs, slot, old, r);
        return;
      }
      block_recycle(a, r);
    }
  }
  if (slot != NO_SLOT) fs_remove_at(a, fs, slot);
  if (do_split) split(a, b, size);
}

static void split(ag_allocator *a, ag_block *b, size_t size) {
  ag_block *r = block_new(a);
  if (!r) return; /* no host memory: hand out the whole block */
  r->seg = b->seg;
  r->sid = b->sid;
  r->offset = b->offset + size;
  r->size = b->size - size;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  else b->seg->last = r;
  b->next = r;
  b->size = size;
  if (!fs_insert(a, r)) { /* undo: keep the remainder attached to b */
    b->size += r->size;
    b->next = r->next;
    if (r->next) r->next->prev = b;
    else b->seg->last = b;
    block_recycle(a, r);
  }
}

/* b (allocated or pending, not in any set) becomes free: merge with free
 * neighbours and cache it. */
static void free_block(ag_allocator *a, ag_block *b) {
  stat_pool(a->st.active, b->seg->pool, -1);
  stat_pool(a->st.active_bytes, b->seg->pool, -(int64_t)b->size);
  b->n_uses = 0;
  ag_block *p = b->prev;
  if (p && p->state == B_FREE) {
    fs_remove(a, p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    else p->seg->last = p;
    block_recycle(a, b);
    b = p;
  }
  ag_block *n = b->next;
  if (n && n->state == B_FREE && b->state != B_FREE) {
    /* Only the next block is free (a block freed before its split-off
     * remainder is reused): the merged block usually takes n's slot. */
    free_set *fs = &a->pools[n->seg->pool];
    size_t i = fs_lower(fs, n->sid, n->size, n->seg->id, n->offset);
    if (i < fs->n && fs->v[i] == n) {
      size_t nsize = n->size;
      b->size += nsize;
      if (fs_fits_at(fs, i, b)) {
        b->next = n->next;
        if (n->next) n->next->prev = b;
        else b->seg->last = b;
        fs_replace_at(a, fs, i, nsize, b);
        block_recycle(a, n);
        return;
      }
      b->size -= nsize;
    }
  }
  if (n && n->state == B_FREE) {
    fs_remove(a, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    else b->seg->last = b;
    block_recycle(a, n);
  }
  if (!fs_insert(a, b)) b->state = B_FREE; /* out of host memory: leaks until empty_cache */
}

static ag_bevent *event_get(ag_allocator *a) {
  if (a->n_evpool) return a->evpool[--a->n_evpool];
  ag_bevent *e = NULL;
  if (a->ds->be->event_create(a->ds->ord, false, &e) != AG_OK) return NULL;
  return e;
}

static void event_put(ag_allocator *a, ag_bevent *e) {
  if (a->n_evpool == a->cap_evpool) {
    size_t nc = a->cap_evpool ? a->cap_evpool * 2 : 16;
    ag_bevent **nv = realloc(a->evpool, nc * sizeof *nv);
    if (!nv) {
      a->ds->be->event_destroy(e);
      return;
    }
    a->evpool = nv;
    a->cap_evpool = nc;
  }
  a->evpool[a->n_evpool++] = e;
}

static void pend_done(ag_allocator *a, size_t i) {
  pending_ev pe = a->pend[i];
  a->pend[i] = a->pend[--a->n_pend];
  event_put(a, pe.ev);
  if (--pe.b->events == 0) {
    trace(a, T_FREE_COMPLETED, pe.b->seg, pe.b->offset, pe.b->size, pe.b->sid, pe.b->category);
    free_block(a, pe.b);
  }
}

/* Cache blocks whose events have completed. Never blocks. */
static void process_events(ag_allocator *a) {
  const ag_backend *be = a->ds->be;
  for (size_t i = 0; i < a->n_pend;) {
    bool done = false;
    if (be->event_query(a->pend[i].ev, &done) == AG_OK && done)
      pend_done(a, i);
    else
      i++;
  }
}

/* Free with record-stream uses: an event on each using stream; the block is
 * cached when all have completed. */
static void free_with_events(ag_allocator *a, ag_block *b) {
  const ag_backend *be = a->ds->be;
  b->state = B_PENDING;
  b->events = 1; /* held while recording so an early completion cannot free it */
  for (int i = 0; i < b->n_uses; i++) {
    ag_stream *s = b->uses[i];
    ag_bevent *e = event_get(a);
    bool ok = false;
    if (e && be->event_record(e, s->bs) == AG_OK) {
      if (a->n_pend == a->cap_pend) {
        size_t nc = a->cap_pend ? a->cap_pend * 2 : 16;
        pending_ev *nv = realloc(a->pend, nc * sizeof *nv);
        if (nv) a->pend = nv, a->cap_pend = nc;
      }
      if (a->n_pend < a->cap_pend) {
        a->pend[a->n_pend++] = (pending_ev){e, b};
        b->events++;
        ok = true;
      }
    }
    if (!ok) {
      /* No event: the only safe way to know the stream is done with b. */
      if (e) event_put(a, e);
      a->st.num_syncs_all_streams++;
      ag__sync_stream(s, "allocator free (event unavailable)");
    }
  }
  if (--b->events == 0) free_block(a, b);
}

/* Return every fully free segment (and free expandable tails) to the backend
 * after one device sync. Returns whether anything was released. */
static bool release_cached(ag_allocator *a, ag_status *out_st) {
  *out_st = AG_OK;
  bool any = a->n_pend > 0;
  for (seg *sg = a->segs; sg && !any; sg = sg->next) {
    if (sg->bypass) continue;
    if (sg->expandable)
      any = !sg->first || (sg->last->state == B_FREE &&
                           round_up(sg->last->offset, a->gran) < sg->size);
    else
      any = sg->first->state == B_FREE && !sg->first->next;
  }
  if (!any) return false;
  /* Queued work may still touch blocks already cached in stream order. */
  a->st.num_syncs_all_streams++;
  ag_status st = ag__sync_device(a->ds, "allocator: release cached memory");
  if (st != AG_OK) {
    *out_st = st;
    return false;
  }
  while (a->n_pend) pend_done(a, a->n_pend - 1);
  const ag_backend *be = a->ds->be;
  bool released = false;
  for (seg *sg = a->segs, *nx; sg; sg = nx) {
    nx = sg->next;
    if (sg->bypass) continue;
    if (!sg->expandable) {
      if (sg->first->state == B_FREE && !sg->first->next) {
        fs_remove(a, sg->first);
        seg_release(a, sg);
        released = true;
      }
      continue;
    }
    ag_block *t = sg->last;
    if (!t) {
      seg_release(a, sg);
      continue;
    }
    if (t->state != B_FREE) continue;
    size_t cut = round_up(t->offset, a->gran);
    if (cut >= sg->size) continue;
    size_t n = sg->size - cut;
    fs_remove(a, t);
    if (be->vm_unmap(a->ds->ord, sg->base, cut, n) != AG_OK) {
      fs_insert(a, t);
      continue;
    }
    a->st.num_device_free++;
    trace(a, T_SEGMENT_UNMAP, sg, cut, n, sg->sid, 0);
    seg_account(a, sg, -(int64_t)n, 0);
    sg->size = cut;
    released = true;
    if (cut == t->offset) {
      sg->last = t->prev;
      if (t->prev) t->prev->next = NULL;
      else sg->first = NULL;
      block_recycle(a, t);
    } else {
      t->size = cut - t->offset;
      fs_insert(a, t);
    }
    if (!sg->first) seg_release(a, sg);
  }
  return released;
}

AG_HIDDEN size_t ag__alloc_largest_free(const ag_allocator *a) {
  size_t m = 0;
  for (int p = 0; p < 2; p++)
    for (size_t i = 0; i < a->pools[p].n; i++)
      if (a->pools[p].v[i]->size > m) m = a->pools[p].v[i]->size;
  return m;
}

AG_HIDDEN void ag__alloc_fmt_bytes(char *buf, size_t len, double b) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024.0 && i < 4) b /= 1024.0, i++;
  if (i == 0) snprintf(buf, len, "%.0f %s", b, u[i]);
  else snprintf(buf, len, "%.2f %s", b, u[i]);
}

static ag_status oom_error(ag_allocator *a, size_t bytes, const char *why, const char *be_msg) {
  size_t fr = 0, total = 0;
  a->ds->be->mem_info(a->ds->ord, &fr, &total);
  size_t alloc = (size_t)a->st.allocated_bytes[AG_POOL_ALL].current;
  size_t resv = reserved_total(a);
  char s_req[32], s_tot[32], s_free[32], s_al[32], s_ru[32], s_lf[32], s_cap[48] = "";
  ag__alloc_fmt_bytes(s_req, sizeof s_req, (double)bytes);
  ag__alloc_fmt_bytes(s_tot, sizeof s_tot, (double)total);
  ag__alloc_fmt_bytes(s_free, sizeof s_free, (double)fr);
  ag__alloc_fmt_bytes(s_al, sizeof s_al, (double)alloc);
  ag__alloc_fmt_bytes(s_ru, sizeof s_ru, (double)(resv - alloc));
  ag__alloc_fmt_bytes(s_lf, sizeof s_lf, (double)ag__alloc_largest_free(a));
  if (a->cap) {
    char c[32];
    ag__alloc_fmt_bytes(c, sizeof c, (double)a->cap);
    snprintf(s_cap, sizeof s_cap, " (capped at %s)", c);
  }
  /* Fragmentation is the likely cause when the cached but unusable memory
   * alone would have held the request. */
  const char *hint = resv - alloc >= bytes
                         ? (a->cfg.expandable || !a->vm_ok
                                ? "memory is fragmented: free tensors or reduce the batch size"
                                : "memory is fragmented: try AG_ALLOC_CONF=expandable_segments:1, "
                                  "or reduce the batch size")
                         : "reduce the batch size or the model size";
  return ag_error_set(AG_ERR_OOM,
                      "out of memory on %s: tried to allocate %s (%s%s%s); device capacity %s%s, "
                      "%s free; anygrad holds %s allocated and %s reserved but unallocated; "
                      "largest free block %s. Hint: %s",
                      a->ds->label, s_req, why, be_msg && *be_msg ? ": " : "",
                      be_msg ? be_msg : "", s_tot, s_cap, s_free, s_al, s_ru, s_lf, hint);
}

/* ---- the internal interface ---- */

ag_status ag__alloc_env_check(void) {
  const char *env = getenv("AG_ALLOC_CONF");
  alloc_conf c;
  ag__alloc_conf_default(&c);
  return env ? ag__alloc_conf_parse(env, &c, "AG_ALLOC_CONF") : AG_OK;
}

struct ag_allocator *ag__allocator_create(ag_devstate *ds) {
  ag_allocator *a = calloc(1, sizeof *a);
  if (!a) {
    ag_error_set(AG_ERR_OOM, "allocator for %s: out of host memory", ds->label);
    return NULL;
  }
  a->ds = ds;
  ag__alloc_conf_default(&a->cfg);
  const char *env = getenv("AG_ALLOC_CONF");
  if (env && ag__alloc_conf_parse(env, &a->cfg, "AG_ALLOC_CONF") != AG_OK) {
    free(a);
    return NULL;
  }
  const ag_backend *be = ds->be;
  a->vm_ok = be->vm_granularity && be->vm_reserve && be->vm_map && be->vm_unmap && be->vm_release;
  if (a->vm_ok && be->device_props) {
    /* A module may fill the vm_* slots for a runtime that turns out to lack
     * them (HIP before 5.3); the device properties have the last word. */
    ag_device_props props;
    memset(&props, 0, sizeof props);
    if (be->device_props(ds->ord, &props) != AG_OK || !props.virtual_memory) a->vm_ok = false;
  }
  if (a->vm_ok) {
    a->gran = be->vm_granularity(ds->ord);
    if (a->gran == 0 || (a->gran & (a->gran - 1))) a->vm_ok = false;
  }
  if (a->ring_cap != a->cfg.trace_entries && ring_resize(a, a->cfg.trace_entries) != AG_OK) {
    free(a);
    return NULL;
  }
  if (a->cfg.has_fraction || a->cfg.has_cap) {
    if (a->cfg.has_cap) {
      a->cap = a->cfg.cap_bytes;
    } else {
      size_t fr = 0, total = 0;
      if (be->mem_info(ds->ord, &fr, &total) == AG_OK) a->cap = (size_t)(a->cfg.fraction * (double)total);
    }
  }
  a->stamp0 = stamp();
  a->ns0 = now_ns();
  alock_init(&a->mu);
  return a;
}

void ag__allocator_destroy(ag_allocator *a) {
  if (!a) return;
  alock_lock(&a->mu);
  while (a->n_pend) {
    pending_ev pe = a->pend[--a->n_pend];
    a->ds->be->event_destroy(pe.ev);
  }
  while (a->segs) seg_release(a, a->segs);
  for (size_t i = 0; i < a->n_evpool; i++) a->ds->be->event_destroy(a->evpool[i]);
  while (a->spare) {
    ag_block *b = a->spare;
    a->spare = b->next;
    free(b);
  }
  alock_unlock(&a->mu);
  alock_destroy(&a->mu);
  free(a->pools[0].v);
  free(a->pools[1].v);
  free(a->pend);
  free(a->evpool);
  free(a->ring);
  free(a->pk_buf);
  free(a);
}

static void mark_allocated(ag_allocator *a, ag_block *b, size_t bytes, ag_mem_category cat) {
  int pool = b->seg->pool;
  b->state = B_ALLOC;
  b->requested = bytes;
  b->category = (uint8_t)cat;
  b->n_uses = 0;
  stat_pool(a->st.allocation, pool, 1);
  stat_pool(a->st.allocated_bytes, pool, (int64_t)b->size);
  stat_pool(a->st.requested_bytes, pool, (int64_t)bytes);
  stat_pool(a->st.active, pool, 1);
  stat_pool(a->st.active_bytes, pool, (int64_t)b->size);
  stat_add(&a->st.category_bytes[cat], (int64_t)b->size);
  b->oversize = b->size >= a->cfg.max_split && !b->seg->bypass;
  if (b->oversize) stat_add(&a->st.oversize_allocations, 1);
  trace(a, T_ALLOC, b->seg, b->offset, b->size, b->sid, cat);
}

ag_status ag__alloc(ag_devstate *ds, size_t bytes, ag_stream *s, ag_mem_category cat,
                    ag_block **out_block) {
  ag_allocator *a = ds->alloc;
  if (AG_UNLIKELY(!out_block || !s)) return ag_error_set(AG_ERR_INVALID, "ag__alloc: NULL argument");
  *out_block = NULL;
  if (cat <= AG_MEM_OTHER || cat >= AG_MEM_CATEGORY_COUNT) cat = ag_mem_category_current();
  if (AG_UNLIKELY(bytes > ((size_t)1 << 56))) {
    alock_lock(&a->mu);
    a->st.num_ooms++;
    ag_status st = oom_error(a, bytes, "request larger than any device", NULL);
    alock_unlock(&a->mu);
    return st;
  }
  alock_lock(&a->mu);
  int64_t reserved0 = a->st.reserved_bytes[AG_POOL_ALL].current;
  size_t size = round_size(&a->cfg, bytes ? bytes : 1);
  int pool = size <= K_SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
  const char *why = "no memory left";
  ag_block *b = NULL;
  size_t slot = NO_SLOT; /* where find_free found b */
  if (AG_UNLIKELY(!a->cfg.caching)) {
    b = seg_new(a, pool, s, size, true, &why);
  } else {
    if (a->n_pend) process_events(a);
    b = find_free(a, pool, s, size, &slot);
    bool expandable = a->cfg.expandable && a->vm_ok;
    for (int attempt = 0; !b && attempt < 2; attempt++) {
      if (attempt == 1) {
        ag_status st;
        /* One retry after returning the cache (syncs once, counted, when
         * there is something to return); a transient failure retries too. */
        release_cached(a, &st);
        if (st != AG_OK) {
          why = "the cache could not be released: its host sync was refused";
          break;
        }
        a->st.num_alloc_retries++;
        b = find_free(a, pool, s, size, &slot);
        if (b) break;
      }
      if (expandable) b = expandable_grow(a, pool, s, size, &why);
      if (!b) b = seg_new(a, pool, s, segment_size_for(pool, size), false, &why);
    }
    if (b) take_found(a, b, slot, size, should_split(a, b, size));
  }
  if (AG_UNLIKELY(!b)) {
    a->st.num_ooms++;
    trace(a, T_OOM, NULL, 0, size, s->id, cat);
    ag_status st = oom_error(a, bytes, why, strncmp(why, "the backend", 11) ? NULL : a->be_msg);
    alock_unlock(&a->mu);
    return st;
  }
  mark_allocated(a, b, bytes, cat);
  if (AG_UNLIKELY(a->pk_users)) ag__alloc_peak_check(a, a->st.reserved_bytes[AG_POOL_ALL].current > reserved0);
  alock_unlock(&a->mu);
  *out_block = b;
  return AG_OK;
}

void ag__free(ag_block *b) {
  if (!b) return;
  ag_allocator *a = b->seg->a;
  if (AG_UNLIKELY(b->seg->bypass)) {
    /* Without a cache the memory goes back at once, so every stream that
     * used it must be finished first (the device: the allocation stream may
     * be gone already). */
    ag__sync_device(b->seg->a->ds, "allocator free (caching:0)");
  }
  alock_lock(&a->mu);
  int pool = b->seg->pool;
  stat_pool(a->st.allocation, pool, -1);
  stat_pool(a->st.allocated_bytes, pool, -(int64_t)b->size);
  stat_pool(a->st.requested_bytes, pool, -(int64_t)b->requested);
  stat_add(&a->st.category_bytes[b->category], -(int64_t)b->size);
  if (b->oversize) stat_add(&a->st.oversize_allocations, -1);
  if (b->seg->bypass) {
    trace(a, T_FREE, b->seg, b->offset, b->size, b->sid, b->category);
    stat_pool(a->st.active, pool, -1);
    stat_pool(a->st.active_bytes, pool, -(int64_t)b->size);
    b->seg->first = b; /* seg_release recycles the block */
    seg_release(a, b->seg);
  } else if (b->n_uses) {
    trace(a, T_FREE_REQUESTED, b->seg, b->offset, b->size, b->sid, b->category);
    free_with_events(a, b);
  } else {
    trace(a, T_FREE, b->seg, b->offset, b->size, b->sid, b->category);
    free_block(a, b);
  }
  alock_unlock(&a->mu);
}

void ag__block_record_stream(ag_block *b, ag_stream *s) {
  if (!b || !s || s->id == b->sid) return;
  ag_allocator *a = b->seg->a;
  alock_lock(&a->mu);
  bool seen = false;
  for (int i = 0; i < b->n_uses && !seen; i++) seen = b->uses[i] == s;
  if (!seen) {
    if (b->n_uses == b->cap_uses) {
      int nc = b->cap_uses ? b->cap_uses * 2 : 2;
      ag_stream **nv = realloc(b->uses, (size_t)nc * sizeof *nv);
      if (!nv) {
        /* Cannot remember the use: wait for s now instead (rare). */
        alock_unlock(&a->mu);
        ag__sync_stream(s, "allocator record_stream (out of host memory)");
        return;
      }
      b->uses = nv;
      b->cap_uses = nc;
    }
    b->uses[b->n_uses++] = s;
  }
  alock_unlock(&a->mu);
}

void ag__alloc_stream_destroyed(ag_devstate *ds, ag_stream *s) {
  ag_allocator *a = ds ? ds->alloc : NULL;
  if (!a || !s) return;
  alock_lock(&a->mu);
  for (seg *sg = a->segs, *nx; sg; sg = nx) {
    nx = sg->next;
    for (ag_block *b = sg->first; b; b = b->next)
      for (int i = 0; i < b->n_uses; i++)
        if (b->uses[i] == s) b->uses[i--] = b->uses[--b->n_uses];
    if (sg->sid != s->id || sg->bypass) continue;
    ag_block *f = sg->first;
    if (f && (f->state != B_FREE || f->next)) continue;
    if (f) fs_remove(a, f);
    seg_release(a, sg);
  }
  alock_unlock(&a->mu);
}

void *ag__block_base(const ag_block *b) { return b->seg->base; }
size_t ag__block_offset(const ag_block *b) { return b->offset; }
size_t ag__block_size(const ag_block *b) { return b->size; }
size_t ag__block_requested(const ag_block *b) { return b->requested; }
ag_mem_category ag__block_category(const ag_block *b) { return (ag_mem_category)b->category; }

void ag__block_set_category(ag_block *b, ag_mem_category cat) {
  if (!b || cat < 0 || cat >= AG_MEM_CATEGORY_COUNT) return;
  ag_allocator *a = b->seg->a;
  alock_lock(&a->mu);
  if (b->state == B_ALLOC && b->category != cat) {
    stat_add(&a->st.category_bytes[b->category], -(int64_t)b->size);
    stat_add(&a->st.category_bytes[cat], (int64_t)b->size);
    b->category = (uint8_t)cat;
  }
  alock_unlock(&a->mu);
}

/* ---- object-level operations ---- */

ag_status ag__alloc_empty_cache(ag_allocator *a) {
  alock_lock(&a->mu);
  ag_status st;
  trace(a, T_EMPTY_CACHE, NULL, 0, 0, 0, 0);
  release_cached(a, &st);
  alock_unlock(&a->mu);
  return st;
}

ag_status ag__alloc_set_cap(ag_allocator *a, size_t bytes) {
  alock_lock(&a->mu);
  a->cap = bytes;
  alock_unlock(&a->mu);
  return AG_OK;
}

ag_status ag__alloc_set_fraction(ag_allocator *a, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    return ag_error_set(AG_ERR_INVALID, "ag_memory_set_fraction: fraction %g is not in [0, 1]",
                        fraction);
  size_t fr = 0, total = 0;
  ag_status st = a->ds->be->mem_info(a->ds->ord, &fr, &total);
  if (st != AG_OK) return st;
  return ag__alloc_set_cap(a, (size_t)(fraction * (double)total));
}

ag_status ag__alloc_configure(ag_allocator *a, const char *conf) {
  if (!conf) return ag_error_set(AG_ERR_INVALID, "ag_alloc_configure: NULL string");
  alock_lock(&a->mu);
  alloc_conf c = a->cfg;
  c.has_cap = c.has_fraction = false;
  ag_status st = ag__alloc_conf_parse(conf, &c, "ag_alloc_configure");
  if (st == AG_OK && c.trace_entries != a->ring_cap) st = ring_resize(a, c.trace_entries);
  if (st == AG_OK) {
    bool fr = c.has_fraction, cp = c.has_cap;
    a->cfg = c;
    if (cp) a->cap = c.cap_bytes;
    alock_unlock(&a->mu);
    if (fr) st = ag__alloc_set_fraction(a, c.fraction);
    return st;
  }
  alock_unlock(&a->mu);
  return st;
}

ag_status ag__alloc_inject(ag_allocator *a, int nth, int count) {
  if (nth < 0) return ag_error_set(AG_ERR_INVALID, "ag_alloc_inject_failure: nth %d < 0", nth);
  alock_lock(&a->mu);
  a->inj_at = nth ? a->raw_attempts + (uint64_t)nth : 0;
  a->inj_count = count == 0 ? 1 : count;
  alock_unlock(&a->mu);
  return AG_OK;
}

/* runtime/ reaches the allocator only through its hooks (devstate.h). */
__attribute__((constructor)) static void alloc_hooks_install(void) {
  ag__memory_hooks.allocator_create = ag__allocator_create;
  ag__memory_hooks.stream_destroyed = ag__alloc_stream_destroyed;
  ag__env_check_add(ag__alloc_env_check);
}
